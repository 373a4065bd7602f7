"""The circuit graph (issue #16): EdgeScores.show() draws writers -> readers by layer; a real mouse click on an edge
patches exactly that edge on the lab's worker and the page shows the number lab.edge_patch gives; the slider chooses
the circuit and the button shows lab.circuit's faithfulness. The page talks to the real Python widget through a
bridge (the widget's outgoing messages set the fake model's traits / arrive as custom messages; the page's requests
go to the widget's own comm handler)."""

from __future__ import annotations

import os

import pytest
import torch
from bridge import Bridge  # tests/widgets/bridge.py

import interplab as ilab
from interplab.views.circuit import CircuitGraph, edge_graph
from interplab.widgets.base import BAD_MESSAGE

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
METRIC = ilab.logit_diff(5, 9)


@pytest.fixture()
def scores(gpt2_lab):
    return gpt2_lab.edge_attribution(CLEAN, CORRUPT, METRIC)


def test_the_graph_holds_every_edge_by_score_and_every_node(gpt2_lab, scores):
    g = edge_graph(scores)
    assert sorted(e[0] for e in g["edges"]) == sorted(scores.edges)
    assert [abs(e[4]) for e in g["edges"]] == sorted((abs(e[4]) for e in g["edges"]), reverse=True)
    for name, writer, reader, site, score in g["edges"]:
        assert score == pytest.approx(scores[name], abs=1e-12)
        assert name == f"{writer} -> {reader}" + (f".{site}" if site else "")
    names = [n["name"] for n in g["nodes"]]
    assert names[0] == "embed" and names[-1] == "logits"
    assert len(names) == 2 + gpt2_lab.n_layers * (gpt2_lab.n_heads + 1)
    writers, readers, _ = ilab.analyses.edges.graph(gpt2_lab)
    assert {w.name for w in writers} | {r.name.split(".")[0] for r in readers} == set(names)
    top = edge_graph(scores, limit=10)  # a big model's page gets the edges a slider can reach
    assert [e[0] for e in top["edges"]] == [n for n, _ in scores.top(10)] and "largest 10 of 262" in top["title"]


def test_a_clicked_edge_is_patched_exactly_and_the_circuit_evaluated(gpt2_lab, scores):
    view = scores.show(gpt2_lab, CLEAN, CORRUPT, METRIC)
    assert isinstance(view, CircuitGraph) and view.count == 20
    edge = view.edges[3][0]
    reply = view.send_test_message({"type": "edge", "edge": edge})
    assert reply["ok"], reply
    gpt2_lab.engine.worker.join()
    want = gpt2_lab.edge_patch(CLEAN, CORRUPT, METRIC, edges=[edge])
    assert view.selected == edge and view.exact == {edge: pytest.approx(float(want.scores[0]), abs=1e-6)}
    assert view.send_test_message({"type": "threshold", "count": 7})["ok"] and view.count == 7
    assert view.send_test_message({"type": "circuit"})["ok"]
    gpt2_lab.engine.worker.join()
    c = gpt2_lab.circuit(CLEAN, CORRUPT, METRIC, [e[0] for e in view.edges[:7]])
    assert view.circuit["n_edges"] == 7 and view.circuit["faithfulness"] == pytest.approx(c.faithfulness, abs=1e-6)
    assert view.error == "" and not ilab.attached_hooks()


def test_bad_requests_get_readable_errors_and_no_work(gpt2_lab, scores):
    view = scores.show(gpt2_lab, CLEAN, CORRUPT, METRIC)
    n = len(view.edges)
    for msg, text in [({"type": "edge", "edge": "L9H9 -> logits"}, "is not an edge of this graph"),
                      ({"type": "edge", "edge": 3}, "must be a string"),
                      ({"type": "edge"}, "missing the field 'edge'"),
                      ({"type": "threshold", "count": n + 1}, f"out of range 1..{n}"),
                      ({"type": "threshold", "count": 0}, f"out of range 1..{n}"),
                      ({"type": "circuit", "edges": []}, "unexpected field(s) edges"),
                      ({"type": "zap"}, "unknown message type")]:
        reply = view.send_test_message(msg)
        assert reply["ok"] is False and reply["error"].startswith(BAD_MESSAGE) and text in reply["error"], reply
        assert view.error == reply["error"]
    assert view.selected == "" and view.exact == {} and view.count == 20


def test_without_the_lab_a_click_says_what_is_missing(scores):
    view = scores.show()
    edge = view.edges[0][0]
    reply = view.send_test_message({"type": "edge", "edge": edge})
    assert reply["ok"] is False and "scores.show(lab, clean, corrupt, metric)" in reply["error"]
    assert view.selected == edge  # the estimate is still shown for it


def test_exact_scores_need_no_patching(gpt2_lab):
    exact = gpt2_lab.edge_patch(CLEAN, CORRUPT, METRIC, edges=["L2H2 -> logits", "embed -> MLP0"])
    view = exact.show()
    assert view.exact == pytest.approx(exact.as_dict()) and view.method == "exact"
    assert view.send_test_message({"type": "edge", "edge": "embed -> MLP0"})["ok"]


# ------------------------------------------------------------------------------------------- in Chromium
def edge_point(page, w, edge):
    """The page pixel of the middle of an edge's drawn line (and which edge the page has there)."""
    return w.js("""(w, name) => {
        const g = [...w.el.querySelectorAll('.il-edge')].find((e) => e.dataset.edge === name);
        const line = g.querySelector('.il-edge-line');
        const p = line.getPointAtLength(line.getTotalLength() / 2);
        const m = line.getScreenCTM();
        const x = m.a * p.x + m.c * p.y + m.e, y = m.b * p.x + m.d * p.y + m.f;
        const hit = document.elementFromPoint(x, y)?.closest('.il-edge')?.dataset.edge ?? null;
        return {x, y, hit};
    }""", edge)


@pytest.mark.browser
def test_a_real_click_on_an_edge_shows_lab_edge_patch_and_the_button_lab_circuit(page, mount, gpt2_lab, scores,
                                                                                 monkeypatch):
    view = scores.show(gpt2_lab, CLEAN, CORRUPT, METRIC, count=12)
    b = Bridge(view, mount, monkeypatch)
    w = b.w
    w.wait_paints(1)
    assert w.js("(w) => w.el.querySelectorAll('.il-edge').length") == 12
    assert w.js("(w) => w.el.querySelectorAll('.il-node').length") == len(view.nodes)
    # the strongest edge is drawn on top: the mouse at its middle is on it
    edge = view.edges[0][0]
    p = edge_point(page, w, edge)
    assert p["hit"] == edge, p
    page.mouse.click(p["x"], p["y"])
    w.wait_sent(1)
    assert w.requests == [{"type": "edge", "edge": edge}]
    b.pump(gpt2_lab)
    want = float(gpt2_lab.edge_patch(CLEAN, CORRUPT, METRIC, edges=[edge]).scores[0])
    page.wait_for_function("(e) => document.querySelector('.il-edge-info')?.dataset.exact !== ''", arg=edge)
    shown = w.js("(w) => w.el.querySelector('.il-edge-info').dataset.exact")
    assert float(shown) == pytest.approx(want, abs=1e-6)
    text = w.js("(w) => w.el.querySelector('.il-edge-info').textContent")
    assert edge in text and f"exact {want:.4f}" in text and "computing" not in text
    assert w.js("(w) => w.el.querySelector('.il-edge.on').dataset.edge") == edge

    # the slider, dragged with the mouse: the page redraws while it moves, the kernel hears where it is let go
    slider = page.locator(w.sel(".il-threshold"))
    box = slider.bounding_box()
    lo, hi = 1, len(view.edges)
    x0 = box["x"] + 8 + (box["width"] - 16) * (12 - lo) / (hi - lo)  # the thumb (16 px wide) at 12
    y = box["y"] + box["height"] / 2
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move(x0 + 30, y, steps=6)
    moving = int(slider.input_value())
    assert moving > 12 and w.js("(w) => w.el.querySelectorAll('.il-edge').length") == moving
    assert [r["type"] for r in w.requests] == ["edge"]  # nothing sent while it moves
    page.mouse.up()
    w.wait_sent(2)
    chosen = int(slider.input_value())
    assert w.requests[1] == {"type": "threshold", "count": chosen}
    b.pump()
    assert view.count == chosen and w.js("(w) => w.el.querySelectorAll('.il-edge').length") == chosen
    page.locator(w.sel(".il-evaluate")).click()
    b.pump(gpt2_lab)
    b.pump()
    c = gpt2_lab.circuit(CLEAN, CORRUPT, METRIC, [e[0] for e in view.edges[:chosen]])
    got = w.js("(w) => w.el.querySelector('.il-circuit').dataset.faithfulness")
    assert float(got) == pytest.approx(c.faithfulness, abs=1e-6)
    text = w.js("(w) => w.el.querySelector('.il-circuit').textContent")
    assert f"circuit of {chosen} of {len(view.edges)} edges" in text
    assert not ilab.attached_hooks()
    if os.environ.get("INTERPLAB_SCREENSHOTS"):
        page.locator(w.sel(".interplab")).screenshot(path=os.environ["INTERPLAB_SCREENSHOTS"] + "/circuit.png")


@pytest.mark.browser
def test_a_bad_request_from_the_page_is_answered_with_its_error(page, mount, gpt2_lab, scores, monkeypatch):
    view = scores.show(gpt2_lab, CLEAN, CORRUPT, METRIC)
    b = Bridge(view, mount, monkeypatch)
    w = b.w
    w.wait_paints(1)
    # a request the page's own check lets through (well-typed) but the kernel refuses (no such edge)
    w.js("(w) => w.model.send({type: 'edge', id: 10**6, edge: 'L7H7 -> logits'})")
    b.pump()
    box = page.locator(w.sel(".il-error"))
    assert box.is_visible() and "is not an edge of this graph" in box.text_content()
    assert view.selected == "" and view.exact == {}


def hand_node_effect(model, tokenizer, node: str) -> float:
    """metric(corrupt with node's whole output from clean) - metric(corrupt), by hand on GPT-2's own modules: a head's
    slice of the attention output projection's input, or the MLP's output."""
    clean, corrupt = (tokenizer(p, return_tensors="pt")["input_ids"] for p in (CLEAN, CORRUPT))
    layer, head = (int(x) for x in node[1:].split("H")) if node.startswith("L") else (int(node[3:]), None)
    block = model.transformer.h[layer]
    d = model.config.n_embd // model.config.n_head
    saved = {}
    if head is None:
        grab = block.mlp.register_forward_hook(lambda m, a, out: saved.__setitem__("x", out.clone()))
    else:
        grab = block.attn.c_proj.register_forward_pre_hook(lambda m, a: saved.__setitem__("x", a[0].clone()))
    with torch.no_grad():
        model(clean)
    grab.remove()

    def pre(m, a):
        x = a[0].clone()
        x[..., head * d:(head + 1) * d] = saved["x"][..., head * d:(head + 1) * d]
        return (x,)

    put = (block.mlp.register_forward_hook(lambda m, a, out: saved["x"]) if head is None
           else block.attn.c_proj.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            patched = model(corrupt).logits[0, -1]
    finally:
        put.remove()
    with torch.no_grad():
        base = model(corrupt).logits[0, -1]
    return float((patched[5] - patched[9]) - (base[5] - base[9]))


@pytest.mark.browser
def test_a_real_click_on_a_node_shows_its_edges_and_what_patching_it_does(page, mount, gpt2_lab, scores, tokenizer,
                                                                          monkeypatch):
    view = scores.show(gpt2_lab, CLEAN, CORRUPT, METRIC, count=15)
    b = Bridge(view, mount, monkeypatch)
    w = b.w
    w.wait_paints(1)
    # no drawn edge passes over a node it does not join (points along each line, against every other node's box)
    clear = w.js("""(w) => {
        const boxes = [...w.el.querySelectorAll('.il-node')].map((g) => [g.dataset.node,
            g.querySelector('circle, rect').getBoundingClientRect()]);
        const bad = [];
        for (const g of w.el.querySelectorAll('.il-edge')) {
            const [writer, rest] = g.dataset.edge.split(' -> ');
            const reader = rest.split('.')[0];
            const line = g.querySelector('.il-edge-line'), m = line.getScreenCTM(), n = line.getTotalLength();
            for (let k = 1; k < 40; k++) {
                const p = line.getPointAtLength((n * k) / 40);
                const x = m.a * p.x + m.c * p.y + m.e, y = m.b * p.x + m.d * p.y + m.f;
                for (const [name, r] of boxes) {
                    if (name !== writer && name !== reader && x > r.left + 1 && x < r.right - 1 && y > r.top + 1
                        && y < r.bottom - 1) bad.push(`${g.dataset.edge} over ${name}`);
                }
            }
        }
        return [...new Set(bad)];
    }""")
    assert clear == [], clear
    for node in ("L1H0", "MLP0"):
        g = page.locator(w.sel(f".il-node[data-node='{node}']"))
        g.click()
        b.pump(gpt2_lab)
        b.pump()
        want = hand_node_effect(gpt2_lab.model, tokenizer, node)
        page.wait_for_function("(n) => document.querySelector('.il-node-info')?.dataset.exact", arg=node)
        got = float(w.js("(w) => w.el.querySelector('.il-node-info').dataset.exact"))
        assert got == pytest.approx(want, abs=1e-5), (node, got, want)
        assert view.node == node and view.node_exact[node] == pytest.approx(want, abs=1e-5)
        touching = [e[0] for e in view.edges[:15] if node in (e[1], e[2])]
        lit = w.js("(w) => [...w.el.querySelectorAll('.il-edge.il-edge-node')].map((g) => g.dataset.edge)")
        assert sorted(lit) == sorted(touching)
        assert w.js("(w) => w.el.querySelectorAll('.il-edge.il-edge-faded').length") == 15 - len(touching)
        text = w.js("(w) => w.el.querySelector('.il-node-info').textContent")
        assert text.startswith(f"{node}: {sum(e[2] == node for e in view.edges[:15])} edge") and "changes by" in text
    assert [r["type"] for r in w.requests] == ["node", "node"] and not ilab.attached_hooks()
