"""The graph view (issue #56 item 5): g.show(stats=...) draws an attribution graph by layer x position; a click shows
the node's page (what g.node and stats[layer].feature give), shift-click pins, pinned nodes group into supernodes, the
intervention panel shows g.intervene beside g.predicted. The real Python widget behind the bare page (bridge.py),
the real mouse, the geometry measured in Chromium (tests/geometry.js): nodes inside the plot, no text over text.

The graph: ioi-tiny on the IOI prompt over its shipped transcoders; the statistics: ilab.analyses.feature_stats over 60
documents of the model's corpus."""

from __future__ import annotations

import os

import pytest
import torch
from bridge import Bridge  # tests/widgets/bridge.py
from geometry import measure  # tests/geometry.py

import interplab as ilab
from interplab.views.graph import DENSE, GraphView, graph_traits
from interplab.widgets.base import BAD_MESSAGE
from interplab.zoo.train_ioi_tiny_sae import corpus_texts

PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.fixture(scope="module")
def tcs():
    return ilab.Transcoders.load("ioi-tiny-transcoders")


@pytest.fixture(scope="module")
def graph(lab, tcs):
    return ilab.analyses.graph.attribution_graph(lab, PROMPT, tcs, progress=False)


@pytest.fixture(scope="module")
def stats(lab, tcs):
    docs = corpus_texts(60, seed=5)
    fs = ilab.analyses.feature_stats.feature_stats
    return {layer: fs(lab, docs, tcs[layer], cache=False, progress=False, top_k=4, n_bands=3,
                                      per_band=2, context=4) for layer in range(lab.n_layers)}


def hand_ablated_targets(lab, tcs, g, nodes: list[int], factor: float) -> list[float]:
    """The logit nodes' targets (logit - mean logit) with these features scaled by factor, by hooks on the model's own
    MLPs adding (factor - 1) * activation * W_dec[feature] at each one's position."""
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    handles = []
    for i in nodes:
        layer, pos, feat = (int(v) for v in g.features[i])
        vec = (factor - 1.0) * float(g.activations[i]) * tcs[layer].W_dec[feat]

        def add(m, args, out, pos=pos, vec=vec):
            out = out.clone()
            out[0, pos] += vec
            return out

        handles.append(lab.model.transformer.h[layer].mlp.register_forward_hook(add))
    try:
        with torch.no_grad():
            last = lab.model(ids).logits[0, -1]
    finally:
        for h in handles:
            h.remove()
    return [float(last[t] - last.mean()) for t in g.logit_ids]


def test_the_view_holds_the_pruned_graph_and_the_summaries(graph, stats):
    g = graph
    view = g.show(stats=stats)
    assert isinstance(view, GraphView)
    want = g.nodes
    assert [n[0] for n in view.nodes] == [n["index"] for n in want]
    for got, n in zip(view.nodes, want):
        assert got[1] == n["kind"] and got[3] == n["pos"]
        assert got[2] == {"token": -1, "logit": g.n_layers}.get(n["kind"], n["layer"])
        if n["kind"] == "feature":
            assert got[4] == n["feature"] and got[5] == pytest.approx(n["activation"], rel=1e-6)
        assert got[6] == pytest.approx(n["influence"], rel=1e-6, abs=1e-12)
    assert [(s, t) for s, t, _ in view.edges] == [(s, t) for s, t, _ in g.edges]
    assert all(w == pytest.approx(g.adjacency[t, s].item(), rel=1e-6) for s, t, w in view.edges)
    feats = {(n["layer"], n["feature"]) for n in want if n["kind"] == "feature"}
    assert set(view.summaries) == {f"{layer}:{f}" for layer, f in feats}
    for key, s in view.summaries.items():
        layer, f = (int(x) for x in key.split(":"))
        page = stats[layer].feature(f)
        assert s["density"] == pytest.approx(float(stats[layer].density[f]), rel=1e-6)
        assert s["dense"] == (page["density"] > DENSE) and s["top"][0]["act"] == page["top"][0]["act"]
    full = graph_traits(g, full=True, max_edges=500)
    assert len(full["nodes"]) == len(g.adjacency) and len(full["edges"]) == 500
    weights = [abs(w) for _, _, w in full["edges"]]
    assert weights == sorted(weights, reverse=True)
    assert weights[-1] >= float(torch.sort(g.adjacency.abs().flatten(), descending=True).values[499]) * (1 - 1e-6)


def test_a_select_shows_the_nodes_page_and_an_intervention_the_live_model(lab, tcs, graph, stats):
    g = graph
    view = g.show(stats=stats)
    feats = [n for n in view.nodes if n[1] == "feature"]
    i = max(feats, key=lambda n: n[6])[0]
    assert view.send_test_message({"type": "select", "node": i})["ok"]
    lab.engine.worker.join()
    assert view.selected == i and view.error == ""
    node = g.node(i)
    assert {k: view.page["node"][k] for k in node} == node
    assert view.page["stats"] == stats[node["layer"]].feature(node["feature"])
    assert view.page["dense"] == (stats[node["layer"]].density[node["feature"]] > DENSE)
    assert [w for _, w in view.page["logit_effects"]] == pytest.approx(
        g.adjacency[g.logit_start:, i].tolist(), rel=1e-6)
    # pin two features and zero them: the live logits (checked by hooks on the model's MLPs) beside the prediction
    pins = sorted(n[0] for n in sorted(feats, key=lambda n: -n[6])[:2])
    for p in pins:
        assert view.send_test_message({"type": "pin", "node": p})["ok"]
    assert view.pinned == pins
    assert view.send_test_message({"type": "intervene", "factor": 0.5})["ok"]
    lab.engine.worker.join()
    r = view.intervention
    want = g.intervene(pins, 0.5)
    assert r["nodes"] == pins and r["factor"] == 0.5 and r["tokens"] == g.logit_tokens
    assert r["real"] == pytest.approx(want["real"], abs=1e-5)
    assert r["direct"] == pytest.approx(g.predicted(pins, 0.5)["direct"], abs=1e-6)
    assert r["total"] == pytest.approx(g.predicted(pins, 0.5)["total"], abs=1e-6)
    hand = hand_ablated_targets(lab, tcs, g, pins, 0.5)
    assert max(abs(a - b) for a, b in zip(r["after"], hand)) <= 1e-4 * max(map(abs, hand))
    # steer them by +2: g.intervene(pins, 1, add=2), whose live side tests/features/test_graph_interventions.py
    # checks against a hook
    assert view.send_test_message({"type": "steer", "alpha": 2.0})["ok"]
    lab.engine.worker.join()
    r = view.intervention
    want = g.intervene(pins, 1.0, add=2.0)
    assert r["nodes"] == pins and r["add"] == 2.0 and "steered" in r["what"]
    assert r["real"] == pytest.approx(want["real"], abs=1e-5)
    assert r["total"] == pytest.approx(want["predicted"]["total"], abs=1e-6)
    # zero two heads: g.intervene_heads
    assert view.send_test_message({"type": "heads", "names": "L2H0, l1h2"})["ok"]
    lab.engine.worker.join()
    r = view.intervention
    want = g.intervene_heads([(2, 0), (1, 2)])
    assert r["heads"] == ["L1H2", "L2H0"] and r["what"] == "heads L1H2, L2H0 zeroed"
    assert r["real"] == pytest.approx(want["real"], abs=1e-5)
    assert r["direct"] == pytest.approx(want["predicted"]["direct"], abs=1e-6)
    assert not ilab.attached_hooks()


def test_pins_and_supernodes_and_bad_requests(lab, graph):
    view = graph.show()
    idx = [n[0] for n in view.nodes]
    missing = next(i for i in range(len(graph.adjacency)) if i not in set(idx))
    logit = next(n[0] for n in view.nodes if n[1] == "logit")
    for msg, text in [({"type": "select", "node": missing}, "is no node of this graph as shown"),
                      ({"type": "select", "node": "3"}, "must be an integer"),
                      ({"type": "pin"}, "missing the field 'node'"),
                      ({"type": "group", "name": "x"}, "nothing to group"),
                      ({"type": "ungroup", "name": "x"}, "no supernode 'x'"),
                      ({"type": "intervene", "factor": 11}, "out of range"),
                      ({"type": "intervene", "factor": 0}, "select a feature node"),
                      ({"type": "steer", "alpha": 101}, "out of range"),
                      ({"type": "steer", "alpha": 1}, "select a feature node"),
                      ({"type": "heads", "names": "L9H0"}, "a (layer, head) pair or a name like 'L2H0'"),
                      ({"type": "heads", "names": ""}, "'names'"),
                      ({"type": "zap"}, "unknown message type")]:
        reply = view.send_test_message(msg)
        assert reply["ok"] is False and text in reply["error"], (msg, reply)
        assert view.error.endswith(reply["error"].removeprefix(BAD_MESSAGE)) or text in view.error
    assert view.selected == -1 and view.pinned == [] and view.intervention == {}
    assert view.send_test_message({"type": "select", "node": logit})["ok"]
    assert view.send_test_message({"type": "intervene", "factor": 0})["ok"] is False  # a logit is no feature
    for i in idx[:3]:
        view.send_test_message({"type": "pin", "node": i})
    view.send_test_message({"type": "pin", "node": idx[1]})  # a second shift-click unpins
    assert view.pinned == [idx[0], idx[2]]
    assert view.send_test_message({"type": "group", "name": " names "})["ok"]
    assert view.supernodes == [{"name": "names", "nodes": [idx[0], idx[2]]}]
    assert "exists already" in view.send_test_message({"type": "group", "name": "names"})["error"]
    assert "every pinned node" in view.send_test_message({"type": "group", "name": "other"})["error"]
    assert view.send_test_message({"type": "ungroup", "name": "names"})["ok"] and view.supernodes == []
    lab.engine.worker.join()
    assert not ilab.attached_hooks()


# ------------------------------------------------------------------------------------------- in Chromium
def node_pixels(w) -> dict:
    """{node index: (page x, page y, r)} from where the view painted each node, and the canvas's box."""
    return w.js("""(w) => {
        const cv = w.el.querySelector('canvas.il-graph-canvas'), g = cv.__interplab_graph;
        const b = cv.getBoundingClientRect();
        return {box: [b.left, b.top, b.width, b.height], width: g.width, height: g.height,
                nodes: g.nodes.map((n) => [n.index, b.left + n.x, b.top + n.y, n.r])};
    }""")


@pytest.mark.browser
def test_a_real_click_shows_the_feature_page_and_the_panel_the_intervention(page, mount, lab, tcs, graph, stats,
                                                                            monkeypatch):
    g = graph
    view = g.show(stats=stats)
    b = Bridge(view, mount, monkeypatch)
    w = b.w
    w.wait_paints(1)
    page.wait_for_timeout(100)  # the resize observer's relayout at the real width
    px = node_pixels(w)
    assert len(px["nodes"]) == len(view.nodes)
    left, top, width, height = px["box"]
    assert abs(width - px["width"]) < 1 and abs(height - px["height"]) < 1
    for i, x, y, r in px["nodes"]:  # every node inside the plot, none on another
        assert left + r <= x <= left + width - r and top + r <= y <= top + height - r, (i, x, y, r, px["box"])
    pts = sorted((x, y, r) for _, x, y, r in px["nodes"])
    for a in range(len(pts)):
        for c in range(a + 1, len(pts)):
            if pts[c][0] - pts[a][0] > 2 * pts[a][2]:
                break
            assert (pts[a][0] - pts[c][0]) ** 2 + (pts[a][1] - pts[c][1]) ** 2 >= (pts[a][2] + pts[c][2]) ** 2 - 1e-6
    panel = w.js("(w) => { const b = w.el.querySelector('.il-graph-panel').getBoundingClientRect(); "
                 "return [b.left, b.right]; }")
    assert left + width <= panel[0] + 0.5, (px["box"], panel)  # the plot beside the side panel, not under it
    out = measure(page, "(i) => window.W(i).el", w.i)
    assert out["problems"] == [], out["problems"]

    where = {i: (x, y) for i, x, y, _ in px["nodes"]}
    feats = [n for n in view.nodes if n[1] == "feature"]
    i = max(feats, key=lambda n: n[6])[0]
    node = g.node(i)
    # hover: the tooltip names the feature and its density from the statistics
    page.mouse.move(*where[i])
    tip = page.locator(w.sel(".il-tip.on"))
    tip.wait_for()
    text = tip.text_content()
    density = float(stats[node["layer"]].density[node["feature"]])
    assert f"L{node['layer']} F{node['feature']}" in text and "density" in text, text
    shown = float(page.locator(w.sel(".il-tip.on .il-tip-density")).get_attribute("data-value"))
    assert shown == pytest.approx(density, rel=1e-6)
    # click: the panel is the feature page (g.node, stats.feature)
    page.mouse.click(*where[i])
    w.wait_sent(1)
    assert w.requests == [{"type": "select", "node": i}]
    b.pump(lab)
    page.wait_for_function("(i) => window.W(i).el.querySelector('.il-page-density')", arg=w.i)
    feature_page = stats[node["layer"]].feature(node["feature"])
    got = w.js("""(w) => {
        const q = (s) => w.el.querySelector(s);
        return {act: Number(q('.il-page-act').dataset.value), density: Number(q('.il-page-density').dataset.value),
                dense: !!q('.il-dense'),
                hist: [...w.el.querySelectorAll('.il-histogram rect')].map((r) => Number(r.dataset.count)),
                contexts: [...w.el.querySelectorAll('.il-graph-node .il-context')].map((c) => [Number(c.dataset.act),
                    c.querySelector('mark.il-fire')?.textContent ?? null]),
                logits: [...w.el.querySelectorAll('.il-page-logit')].map((e) => Number(e.dataset.value))};
    }""")
    assert got["act"] == pytest.approx(node["activation"], rel=1e-6)
    assert got["density"] == pytest.approx(feature_page["density"], rel=1e-6)
    assert got["dense"] == (feature_page["density"] > DENSE)
    assert got["hist"] == feature_page["hist_counts"]
    examples = feature_page["top"] + [e for band in feature_page["bands"] for e in band]
    assert [a for a, _ in got["contexts"]] == pytest.approx([e["act"] for e in examples], rel=1e-6)
    assert [m for _, m in got["contexts"]] == [e["tokens"][e["at"]].replace("\n", "↵") for e in examples]
    assert got["logits"] == pytest.approx(g.adjacency[g.logit_start:, i].tolist(), rel=1e-6)

    # shift-click pins two features; they group into a supernode; Zero runs the model on the worker
    pins = sorted(n[0] for n in sorted(feats, key=lambda n: -n[6])[:2])
    where = {i: (x, y) for i, x, y, _ in node_pixels(w)["nodes"]}  # the panel's page may have moved the plot
    page.keyboard.down("Shift")
    for p in pins:
        page.mouse.click(*where[p])
    page.keyboard.up("Shift")
    w.wait_sent(3)
    assert w.requests[1:] == [{"type": "pin", "node": p} for p in pins]
    b.pump()
    assert view.pinned == pins
    # the subgraph list has grown by the two pins (the button below it has moved) before the name and the click
    page.wait_for_function("([i, n]) => window.W(i).el.querySelectorAll('.il-pinned [data-node]').length === n",
                           arg=[w.i, len(pins)])
    page.locator(w.sel(".il-group-name")).fill("movers")
    page.locator(w.sel(".il-group")).click()
    w.wait_sent(4)
    b.pump()
    assert view.supernodes == [{"name": "movers", "nodes": pins}]
    page.wait_for_function("(i) => window.W(i).el.querySelector('.il-supernode')", arg=w.i)
    page.locator(w.sel(".il-graph-zero")).click()
    b.pump(lab)
    b.pump()
    page.wait_for_function("(i) => window.W(i).el.querySelector('.il-intervention-row')", arg=w.i)
    rows = w.js("""(w) => [...w.el.querySelectorAll('.il-intervention-row')].map((r) => [r.dataset.token,
        Number(r.dataset.direct), Number(r.dataset.total), Number(r.dataset.real)])""")
    want = g.intervene(pins, 0.0)
    assert [r[0] for r in rows] == g.logit_tokens
    assert [r[1] for r in rows] == pytest.approx(want["predicted"]["direct"], abs=1e-6)
    assert [r[2] for r in rows] == pytest.approx(want["predicted"]["total"], abs=1e-6)
    assert [r[3] for r in rows] == pytest.approx(hand_real(lab, tcs, g, pins), abs=1e-4)
    # a head typed in the box and Zero heads: the live change beside the graph's prediction
    page.locator(w.sel(".il-heads")).fill("L2H0")
    page.locator(w.sel(".il-heads-btn")).click()
    b.pump(lab)
    b.pump()
    page.wait_for_function("(i) => window.W(i).el.querySelector('.il-intervention-what')?.textContent"
                           " === 'heads L2H0 zeroed'", arg=w.i)
    rows = w.js("""(w) => [...w.el.querySelectorAll('.il-intervention-row')].map((r) => [r.dataset.token,
        Number(r.dataset.direct), Number(r.dataset.total), Number(r.dataset.real)])""")
    want = g.intervene_heads("L2H0")
    assert [r[1] for r in rows] == pytest.approx(want["predicted"]["direct"], abs=1e-6)
    assert [r[3] for r in rows] == pytest.approx(want["real"], abs=1e-5)
    out = measure(page, "(i) => window.W(i).el", w.i)
    assert out["problems"] == [], out["problems"]
    assert not ilab.attached_hooks()
    if os.environ.get("INTERPLAB_SCREENSHOTS"):
        page.locator(w.sel(".interplab")).screenshot(path=os.environ["INTERPLAB_SCREENSHOTS"] + "/graph.png")


def hand_real(lab, tcs, g, nodes):
    before = hand_ablated_targets(lab, tcs, g, nodes, 1.0)
    after = hand_ablated_targets(lab, tcs, g, nodes, 0.0)
    return [a - b for a, b in zip(after, before)]


@pytest.mark.browser
def test_in_a_shadow_root_at_four_widths_every_node_stays_in_the_plot(page, mount, graph, stats):
    """marimo renders each widget in a shadow root: the view draws there too; at each width (the page narrowed and
    widened: the view lays itself out again) the nodes lie inside the plot and no text lies over other text."""
    traits = graph_traits(graph, stats)
    w = mount("graph", _shadow=True, **traits)
    w.wait_paints(1)
    # 240: a notebook beside JupyterLab's sidebar in a 600 px window (the plot and panel narrow with it)
    for px_width in (900, 640, 240, 1200):
        page.evaluate("(px) => { document.body.style.width = px + 'px'; }", px_width)
        page.wait_for_timeout(150)  # the resize observer, then a frame
        px = node_pixels(w)
        left, top, width, height = px["box"]
        assert len(px["nodes"]) == len(traits["nodes"])
        assert abs(width - px["width"]) < 1, (px_width, width, px["width"])
        for i, x, y, r in px["nodes"]:
            assert left + r <= x <= left + width - r and top + r <= y <= top + height - r, (px_width, i)
        panel = w.js("(w) => { const b = w.el.querySelector('.il-graph-panel').getBoundingClientRect(); "
                     "return [b.left, b.top]; }")
        # beside the plot, or under it where the page is too narrow for both
        assert left + width <= panel[0] + 0.5 or top + height <= panel[1] + 0.5, (px_width, px["box"], panel)
        out = measure(page, "(i) => window.W(i).el", w.i)
        assert out["problems"] == [], (px_width, out["problems"])
    page.evaluate("() => { document.body.style.width = '900px'; }")
