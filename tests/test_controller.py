"""The controller in Python (no browser): clicks become patches, the logit panel shows the patched run's numbers,
and the shared state works both ways. Expected numbers come from plain PyTorch hooks."""

import json
import re
import threading
import time

import pytest
import torch

import interplab as ilab
from interplab.analyses.lens import logit_lens
from interplab.errors import InterplabError
from interplab.views.attention import attention_widget
from interplab.views.lens import lens_widget
from interplab.views.patching import PatchExplorer, PatchSession
from interplab.views.steering import steering_panel
from interplab.worker import Worker

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture()
def explorer(gpt2_lab):
    res = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), progress=False)
    ex = res.show()
    assert isinstance(ex, PatchExplorer)
    gpt2_lab.engine.worker.join()
    return ex


def hooked_last_logits(model, tok, prompt_src, prompt_base, layer, pos):
    """resid_pre patch at (layer, pos) by hand."""
    saved = {}
    h = model.transformer.h[layer].register_forward_pre_hook(lambda m, a: saved.__setitem__("x", a[0].clone()))
    with torch.no_grad():
        model(tok(prompt_src, return_tensors="pt")["input_ids"])
    h.remove()

    def hook(m, a):
        x = a[0].clone()
        x[:, pos] = saved["x"][:, pos]
        return (x, *a[1:])
    h = model.transformer.h[layer].register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            return model(tok(prompt_base, return_tensors="pt")["input_ids"]).logits[0, -1]
    finally:
        h.remove()


def shown_token(tokenizer, i: int) -> str:
    """A token as the bars show it: decoded, or a lone byte piece (U+FFFD decoded alone) as its bytes in hex."""
    text = tokenizer.decode([i])
    if "\ufffd" not in text:
        return text
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    return "<" + " ".join(f"{byte_of[c]:02X}" for c in tokenizer.convert_ids_to_tokens(i)) + ">"


def test_click_applies_patch_and_repaints_logits(explorer, gpt2_lab, tokenizer):
    explorer.heatmap.send_test_message({"type": "click", "row": 1, "col": 3, "shift": False})
    gpt2_lab.engine.worker.join()
    assert explorer.heatmap.selected == [[1, 3]]
    assert [e["id"] for e in explorer.heatmap.active_edits] == ["r1c3"]
    expected = hooked_last_logits(gpt2_lab.model, tokenizer, CLEAN, CORRUPT, 1, 3)
    patched = explorer.logits.metric["values"]["patched"]
    assert abs(patched - float(expected[5] - expected[9])) < 1e-4
    names = [s["name"] for s in explorer.logits.series]
    assert names[:2] == ["clean", "corrupt"] and names[2].startswith("patched")
    top = expected.softmax(-1).topk(8)
    assert explorer.logits.series[2]["tokens"] == [shown_token(tokenizer, i) for i in top.indices.tolist()]
    assert explorer.logits.series[2]["probs"] == pytest.approx(top.values.tolist(), abs=6e-5)


def test_shift_click_toggle_remove_and_code_side_state(explorer, gpt2_lab):
    hm = explorer.heatmap
    hm.send_test_message({"type": "click", "row": 2, "col": 10, "shift": False})
    hm.send_test_message({"type": "click", "row": 1, "col": 4, "shift": True})
    gpt2_lab.engine.worker.join()
    assert len(explorer.edits) == 2 and "2 edits" in explorer.logits.series[2]["name"]
    assert hm.send_test_message({"type": "toggle", "edit_id": "r2c10", "enabled": False})["ok"]
    gpt2_lab.engine.worker.join()
    assert len(explorer.edits) == 1 and explorer.edits[0].layer == 1 and explorer.edits[0].pos == 4
    assert hm.send_test_message({"type": "remove", "edit_id": "r1c4"})["ok"]
    gpt2_lab.engine.worker.join()
    assert hm.selected == [[2, 10]] and explorer.edits == []
    assert len(explorer.logits.series) == 2  # nothing enabled: clean and corrupt only
    # set from code: the view and the logits follow
    hm.selected = [[0, 0]]
    gpt2_lab.engine.worker.join()
    assert [e["id"] for e in hm.active_edits] == ["r0c0"] and len(explorer.logits.series) == 3


def test_malformed_messages_keep_the_kernel_alive(explorer):
    hm = explorer.heatmap
    for bad in [{"type": "click", "row": 99, "col": 0, "shift": False}, {"type": "nope"}, "garbage", None,
                {"type": "click", "row": "1", "col": 0, "shift": False}]:
        reply = hm.send_test_message(bad)
        assert hm.error.startswith("bad message from the frontend") and reply["error"] == hm.error
    assert hm.selected == []


def test_worker_latest_wins_and_drops_stale():
    q = Worker()
    gate = threading.Event()
    ran = []
    q.submit("x", lambda: (gate.wait(5), ran.append("first")))
    time.sleep(0.05)  # the worker is now blocked inside the first job
    for i in range(10):
        q.submit("x", lambda i=i: ran.append(i))
    gate.set()
    assert q.join(5)
    assert ran == ["first", 9] and q.dropped == 9
    errors = []
    q.submit("y", lambda: 1 / 0, error=errors.append)
    assert q.join(5) and isinstance(errors[0], ZeroDivisionError)


def test_steering_panel_preview_and_generate(gpt2_lab):
    panel = steering_panel(gpt2_lab, CORRUPT, [CLEAN], [CORRUPT], site="resid_post", layer=1)
    gpt2_lab.engine.worker.join()
    v = panel.controller.vector
    assert v is not None and v.shape == (gpt2_lab.d_model,)
    panel.send_test_message({"type": "preview", "alpha": 3.0, "layer": 1, "site": "resid_post", "positions": "last"})
    gpt2_lab.engine.worker.join()
    assert panel.error == "" and panel.dist[1]["name"].startswith("steered")
    # independent: add 3 v to the output of block 1 at the last position by hand
    h = gpt2_lab.model.transformer.h[1].register_forward_hook(
        lambda m, a, o: torch.cat([o[:, :-1], o[:, -1:] + 3.0 * v], dim=1))
    try:
        with torch.no_grad():
            ref = gpt2_lab.model(gpt2_lab.to_tokens(CORRUPT)).logits[0, -1].softmax(-1)
    finally:
        h.remove()
    assert panel.dist[1]["probs"] == pytest.approx(ref.topk(8).values.tolist(), abs=6e-5)
    panel.send_test_message({"type": "generate", "alpha": 3.0, "layer": 1, "site": "resid_post",
                             "positions": "all", "max_new_tokens": 4})
    gpt2_lab.engine.worker.join()
    assert panel.error == "" and isinstance(panel.generated, str) and not panel.busy


def test_lens_last_layer_equals_model_logits(gpt2_lab):
    res = logit_lens(gpt2_lab, CLEAN)
    with torch.no_grad():
        ref = gpt2_lab.model(gpt2_lab.to_tokens(CLEAN)).logits[0].softmax(-1)
    assert torch.allclose(res.probs[-1], ref, atol=1e-5)
    # an earlier layer through ln_f and lm_head by hand
    saved = {}
    h = gpt2_lab.model.transformer.h[0].register_forward_hook(lambda m, a, o: saved.__setitem__("x", o))
    with torch.no_grad():
        gpt2_lab.model(gpt2_lab.to_tokens(CLEAN))
        h.remove()
        early = gpt2_lab.model.lm_head(gpt2_lab.model.transformer.ln_f(saved["x"]))[0].softmax(-1)
    assert torch.allclose(res.probs[0], early, atol=1e-5)
    view = lens_widget(gpt2_lab, CLEAN)
    assert len(view.top_tokens) == gpt2_lab.n_layers and view.x_labels == gpt2_lab.to_str_tokens(CLEAN)


def test_the_lens_unembeds_one_layer_at_a_time(gpt2_lab):
    """All layers at once would hold [layers, pos, vocab] logits and their softmax on the device (gigabytes for a
    big model): each unembedding call computes one layer's positions; the numbers are those of one batched call."""
    rows = []
    lm_head = gpt2_lab.model.get_output_embeddings()
    handle = lm_head.register_forward_hook(lambda m, a, out: rows.append(out.shape[:-1].numel()))
    try:
        run = gpt2_lab.run(CLEAN, cache=["resid_post"])  # the lens's own run, memoised (with this hook on)
        rows.clear()
        res = logit_lens(gpt2_lab, CLEAN)
    finally:
        handle.remove()
    n_pos = len(gpt2_lab.to_str_tokens(CLEAN))
    assert rows == [n_pos] * gpt2_lab.n_layers
    stack = torch.stack([run.cache["resid_post", layer][0] for layer in range(gpt2_lab.n_layers)])
    with torch.no_grad():
        together = lm_head(gpt2_lab.model.transformer.ln_f(stack)).softmax(-1)
    torch.testing.assert_close(res.probs, together, atol=1e-6, rtol=1e-5)


def test_attention_widget_shows_the_pattern(gpt2_lab):
    view = attention_widget(gpt2_lab, CLEAN, layer=0, head=0)
    view.send_test_message({"type": "select", "layer": 2, "head": 3})
    gpt2_lab.engine.worker.join()
    pattern = torch.tensor(view.pattern)
    # independent: eager attention weights returned by the attention module itself
    got = {}
    h = gpt2_lab.model.transformer.h[2].attn.register_forward_hook(lambda m, a, o: got.__setitem__("w", o[1]))
    with torch.no_grad():
        gpt2_lab.model(gpt2_lab.to_tokens(CLEAN))
    h.remove()
    assert torch.allclose(pattern, got["w"][0, 3], atol=1e-6)
    assert view.title.endswith("L2 H3")


def test_dashboard_composes_every_view(gpt2_lab):
    d = gpt2_lab.show(CLEAN, CORRUPT, answer=5, wrong=9)
    gpt2_lab.engine.worker.join(timeout=120)
    assert all(v is not None for row in d.heatmap.values for v in row)
    assert d.steering.panel.dist and d.lens.top_tokens and d.attention.pattern
    assert ilab.attached_hooks() == []


def test_a_click_on_an_exact_sweep_reads_the_sweep_and_equals_a_fresh_forward(gpt2_lab, monkeypatch):
    """The exact sweep ran every cell's patched forward: a click shows those numbers (top-k and metric) instead of
    running it again. They must equal a fresh forward, for computed cells and for unchanged (skipped) ones."""

    res = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), progress=False)
    ex = res.show()
    gpt2_lab.engine.worker.join()
    s = ex.session
    n_pos = res.values.shape[1]
    cells = [(0, 0), (0, n_pos - 5), (1, n_pos - 5), (gpt2_lab.n_layers - 1, n_pos - 1), (2, 1)]
    fresh = {c: s.logits_view([s.cell_edit(*c)]) for c in cells}  # no cells given: the forward runs

    def no_forward(*a, **k):
        raise AssertionError("a click on an exact sweep's cell ran a forward")

    monkeypatch.setattr(gpt2_lab.engine, "last_logits", no_forward)
    logged = len(gpt2_lab.log)
    for c in cells:
        view = s.logits_view([s.cell_edit(*c)], cells=[c])
        assert view["series"][2]["tokens"] == fresh[c]["series"][2]["tokens"]
        assert view["series"][2]["probs"] == pytest.approx(fresh[c]["series"][2]["probs"], abs=1.1e-4)
        assert view["metric"]["values"]["patched"] == pytest.approx(fresh[c]["metric"]["values"]["patched"],
                                                                    abs=1e-4)
    assert len(gpt2_lab.log) == logged + len(cells)  # the log reads as if the forwards had run
    assert "patch resid_pre L2 pos 1" in gpt2_lab.log.to_code()
    # several cells at once, or a sweep that is not this session's, run the forward
    with pytest.raises(AssertionError, match="ran a forward"):
        s.logits_view([s.cell_edit(1, 3), s.cell_edit(2, 3)], cells=[(1, 3), (2, 3)])
    attr = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), method="attribution")
    s.result = attr
    with pytest.raises(AssertionError, match="ran a forward"):
        s.logits_view([s.cell_edit(1, 3)], cells=[(1, 3)])


class FakeWidget:
    error = ""


def test_the_worker_survives_failing_jobs_and_callbacks(caplog):
    """An exception in the job, its done or its error callback (even a BaseException) is logged and shown on the
    widget; the jobs queued behind it still run, and so do later ones."""
    w = Worker()
    gate = threading.Event()
    shown = [FakeWidget() for _ in range(5)]
    ran = []

    def broken_error(e):
        raise RuntimeError("the error callback broke")

    def exits():
        raise SystemExit(3)

    def bad_input():
        raise InterplabError("layer 9 out of range")

    w.submit("gate", lambda: gate.wait(5))  # hold the thread so that the rest queue behind it
    w.submit("fn", lambda: 1 / 0, widget=shown[0])
    w.submit("done", lambda: 1, done=lambda r: {}["missing"], widget=shown[1])
    w.submit("error", lambda: 1 / 0, error=broken_error, widget=shown[2])
    w.submit("base", exits, widget=shown[3])
    w.submit("input", bad_input, widget=shown[4])
    w.submit("after", lambda: ran.append("after") or 7, done=ran.append)
    gate.set()
    assert w.join(10)
    assert shown[0].error == "ZeroDivisionError: division by zero"
    assert shown[1].error == "error while showing the result: KeyError: 'missing'"
    assert shown[2].error.startswith("ZeroDivisionError") and "the error callback broke" in shown[2].error
    assert shown[3].error == "SystemExit: 3"
    assert shown[4].error == "InterplabError: layer 9 out of range"
    assert ran == ["after", 7] and w.failed == 5
    logged = caplog.text
    assert "KeyError" in logged and "the error callback broke" in logged and "ZeroDivisionError" in logged
    w.submit("later", lambda: ran.append("later"))
    assert w.join(5) and ran[-1] == "later"


def test_close_cancels_the_running_job_and_drops_the_rest():
    """What the exit handler does to every worker: queued jobs are dropped, the running one is cancelled through
    its event and waited for; its done callback no longer runs, and later submits are refused."""
    w = Worker()
    cancel, started = threading.Event(), threading.Event()
    seen = []

    def sweep_like():
        started.set()
        while not cancel.wait(0.01):
            pass
        return "stopped"

    w.submit("sweep", sweep_like, done=seen.append, cancel=cancel)
    w.submit("queued", lambda: seen.append("queued"))
    assert started.wait(5)
    assert w.close(timeout=5)
    assert cancel.is_set() and seen == [] and w.closed
    assert w.submit("late", lambda: seen.append("late")) is False
    time.sleep(0.05)
    assert seen == [] and w.dropped == 2


def test_no_model_work_on_the_message_thread(gpt2_lab):
    """Frontend messages (and the observers they trigger) only set traits and submit jobs: no module of the model
    runs on the thread that handles them (the kernel's message thread), from the very first click on. The jobs
    then show the same numbers as before."""
    res = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), progress=False)
    ex = res.show()
    panel = steering_panel(gpt2_lab, CORRUPT, [CLEAN], [CORRUPT], site="resid_post", layer=1)
    att = attention_widget(gpt2_lab, CLEAN)
    assert gpt2_lab.engine.worker.join(60)
    gpt2_lab.engine.clear_memo()  # nothing memoised: the first click's source run is a real forward
    main = threading.get_ident()
    on_main = []

    def watch(module, args):
        if threading.get_ident() == main:
            on_main.append(type(module).__name__)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(watch)
    try:
        hm = ex.heatmap
        replies = [hm.send_test_message({"type": "click", "row": 1, "col": 3, "shift": False})]
        assert [e["id"] for e in hm.active_edits] == ["r1c3"]  # listed at once, before its job has run
        steer = {"alpha": 2.0, "layer": 1, "site": "resid_post", "positions": "last"}
        replies += [
            hm.send_test_message({"type": "click", "row": 2, "col": 4, "shift": True}),
            hm.send_test_message({"type": "toggle", "edit_id": "r2c4", "enabled": False}),
            hm.send_test_message({"type": "remove", "edit_id": "r2c4"}),
            panel.send_test_message({"type": "update", "prompt": CORRUPT, "max_new_tokens": 2}),
            panel.send_test_message({"type": "preview", **steer}),
            panel.send_test_message({"type": "set_vector", "positive": CLEAN, "negative": CORRUPT}),
            panel.send_test_message({"type": "generate", **steer, "max_new_tokens": 2}),
            att.send_test_message({"type": "select", "layer": 2, "head": 1}),
        ]
        assert on_main == [], f"the message thread ran {on_main[:5]}"
        assert [r["ok"] for r in replies] == [True] * len(replies), replies  # answered at once, before the jobs
        assert gpt2_lab.engine.worker.join(60)
    finally:
        handle.remove()
    assert hm.selected == [[1, 3]] and [e.describe() for e in ex.edits] == [e["label"] for e in hm.active_edits]
    expected = hooked_last_logits(gpt2_lab.model, gpt2_lab.tokenizer, CLEAN, CORRUPT, 1, 3)
    assert ex.logits.metric["values"]["patched"] == pytest.approx(float(expected[5] - expected[9]), abs=1e-4)
    assert panel.error == "" and panel.dist[1]["name"].startswith("steered") and not panel.busy
    assert att.title.endswith("L2 H1") and att.error == "" and ex.logits.error == ""


@pytest.mark.parametrize("site, by, layers", [("resid_pre", ("layer", "pos"), None), ("z", ("layer", "head"), None),
                                              ("z", ("layer", "head", "pos"), None), ("resid_pre", ("layer",), None),
                                              ("resid_pre", ("layer", "pos"), [1, 2])])
def test_a_clicked_cell_is_listed_with_its_edits_label(gpt2_lab, site, by, layers):
    """The message thread lists a clicked cell under the label its edit will have (the edit itself is built in the
    job): the two must agree for every sweep shape, with and without a sweep that skips layers."""
    session = PatchSession(gpt2_lab, CLEAN, CORRUPT, 5, 9, site, by)
    if layers is not None:
        session.sweep(layers=layers, progress=False)
    ex = PatchExplorer(session)
    n_rows = len(layers) if layers is not None else gpt2_lab.n_layers
    n_pos, n_heads = len(session.tokens()), gpt2_lab.n_heads
    n_cols = {("layer", "pos"): n_pos, ("layer", "head"): n_heads, ("layer", "head", "pos"): n_heads * n_pos,
              ("layer",): 1}[by]
    for row, col in [(0, 0), (n_rows - 1, n_cols - 1), (n_rows // 2, n_cols // 2)]:
        ex.heatmap.selected = [[row, col]]
        assert ex.heatmap.active_edits[0]["label"] == session.cell_edit(row, col).describe()
    assert gpt2_lab.engine.worker.join(60) and ex.logits.error == ""


@pytest.mark.parametrize("by", [("layer", "pos"), ("layer", "head", "pos")])
def test_the_page_holds_what_a_click_on_an_exact_sweep_shows(gpt2_lab, by):
    """heatmap.cell_tops, which the page paints a click from at once, is what the kernel's answer shows: the same
    series name, tokens, probabilities and metric, for every cell."""
    site = "z" if "head" in by else "resid_pre"
    res = gpt2_lab.patch_sweep(CLEAN, CORRUPT, site=site, by=by, metric=ilab.logit_diff(5, 9), progress=False)
    ex = res.show()
    gpt2_lab.engine.worker.join()
    tops = ex.heatmap.cell_tops
    rows, cols = len(ex.heatmap.values), len(ex.heatmap.values[0])
    assert tops["metric"] == ex.logits.metric["name"] and len(tops["cells"]) == rows * cols
    assert ex.heatmap.link and ex.heatmap.link == ex.logits.link
    s = ex.session
    for row, col, value, name, tokens, probs in tops["cells"][:: max(1, len(tops["cells"]) // 12)]:
        view = s.logits_view([s.cell_edit(row, col)], cells=[(row, col)])
        patched = view["series"][2]
        assert (name, tokens, probs) == (patched["name"], patched["tokens"], patched["probs"])
        assert value == view["metric"]["values"]["patched"]
    # an attribution sweep: nothing held, every click goes to the kernel
    attr = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), method="attribution")
    assert attr.show().heatmap.cell_tops == {}
    gpt2_lab.engine.worker.join()


def test_sweep_progress_sends_only_new_cells(gpt2_lab, monkeypatch):
    """A sweep's progress: the grid once (shape, labels), then one-way 'cells' messages with only the new cells,
    each cell once; the whole grid (values, hover, cell_tops) again only when the sweep ends."""
    ex = gpt2_lab.show(CLEAN, CORRUPT, answer=5, wrong=9, sweep=False).explorer
    gpt2_lab.engine.worker.join(timeout=120)
    out = []
    monkeypatch.setattr(ex.heatmap, "_send", lambda msg, buffers=None: out.append(msg))
    ex.sweep(wait=True, max_batch=4)
    grids = [m for m in out if m["method"] == "update" and "values" in m["state"]]
    cells = [c for m in out if m["method"] == "custom" and m["content"]["type"] == "cells"
             for c in m["content"]["cells"]]
    assert len(grids) == 2, [sorted(m["state"]) for m in grids]  # the first progress update and the end
    first = grids[0]["state"]["values"]
    new = {(r, c) for r, c, _, _ in cells}
    assert len(new) == len(cells) > 0  # each cell once
    final = ex.heatmap.values
    for r, c, v, hover in cells:
        assert first[r][c] is None and v == pytest.approx(final[r][c]) and hover == ex.heatmap.hover[r][c]
    computed = {(r, c) for r, row in enumerate(final) for c, v in enumerate(row) if v is not None}
    assert computed == new | {(r, c) for r, row in enumerate(first) for c, v in enumerate(row) if v is not None}
    assert ex.heatmap.cell_tops["cells"]


def test_a_burst_of_clicks_is_logged_in_order_while_only_the_last_is_computed(gpt2_lab, monkeypatch):
    """The worker computes only the latest click's panel; the lab's log records every click when it arrives (on the
    message thread, no model work there), in order, and the job that runs adds nothing to it."""
    from interplab.edits import edits_to_json

    res = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), progress=False)
    ex = res.show()
    assert gpt2_lab.engine.worker.join(60)
    s, hm = ex.session, ex.heatmap
    computed = []
    view = s.logits_view
    monkeypatch.setattr(s, "logits_view", lambda *a, **k: computed.append(a) or view(*a, **k))
    gate = threading.Event()
    gpt2_lab.engine.worker.submit("gate", lambda: gate.wait(10))  # the worker is busy: the clicks queue behind it
    logged = len(gpt2_lab.log)
    clicks = [(1, 3, False), (2, 4, False), (0, 5, False), (2, 1, False), (1, 2, True)]
    main = threading.get_ident()
    on_main = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, a: on_main.append(type(m).__name__) if threading.get_ident() == main else None)
    try:
        for row, col, shift in clicks:
            reply = hm.send_test_message({"type": "click", "row": row, "col": col, "shift": shift})
            assert reply["ok"], reply
            assert len(gpt2_lab.log) == logged + clicks.index((row, col, shift)) + 1  # at once, on arrival
        assert on_main == []
    finally:
        handle.remove()
    entries = gpt2_lab.log.entries[logged:]
    labels = [[d["label"] for d in json.loads(e["edits"])] for e in entries]
    assert labels == [[s.cell_label(1, 3)], [s.cell_label(2, 4)], [s.cell_label(0, 5)], [s.cell_label(2, 1)],
                      [s.cell_label(2, 1), s.cell_label(1, 2)]]
    assert all(e["prompts"] == [s.base] for e in entries)
    assert computed == []  # nothing computed yet: all of that happened on arrival
    gate.set()
    assert gpt2_lab.engine.worker.join(60)
    assert len(computed) == 1 and len(gpt2_lab.log) == logged + len(clicks)  # the last click's panel, logged once
    assert "2 edits" in ex.logits.series[2]["name"]
    # what was logged is what the job ran: the same JSON as the edits built from the cells
    assert entries[0]["edits"] == edits_to_json([s.cell_edit(1, 3)])
    assert entries[-1]["edits"] == edits_to_json([s.cell_edit(2, 1), s.cell_edit(1, 2)])
    # a toggle is a request too: logged at once
    assert hm.send_test_message({"type": "toggle", "edit_id": "r2c1", "enabled": False})["ok"]
    assert [d["label"] for d in json.loads(gpt2_lab.log.entries[-1]["edits"])] == [s.cell_label(1, 2)]
    assert gpt2_lab.engine.worker.join(60) and len(gpt2_lab.log) == logged + len(clicks) + 1


def test_a_dataset_sweeps_views_show_the_mean_over_pairs_or_one_pair(gpt2_lab, tokenizer):
    """A sweep over many prompt pairs (notebook 04's case): its explorer and head-sweeps views show logits, not an
    error; the panel's numbers are the mean over the pairs, or the pair chosen in its menu, checked against the
    model's own forward and a hand-written metric."""
    names = [(" Mary", " John"), (" John", " Mary"), (" Mary", " John")]  # (IO, S): ABBA, ABBA swapped, BABA
    clean = [f"When{a} and{b} went to the store,{b} gave a drink to" for a, b in names[:2]] + [
        "When John and Mary went to the store, John gave a drink to"]
    corrupt = [c.replace(f",{b} gave", f",{a} gave") for c, (a, b) in zip(clean, names)]
    ids = [(gpt2_lab.token_id(a), gpt2_lab.token_id(b)) for a, b in names]
    metric = ilab.logit_diff([a for a, _ in names], [b for _, b in names])
    assert metric.name == "logit diff over 3 pairs (' Mary' - ' John', ...)"

    def by_hand(prompts, edits=()):  # the model's own forward (edits through the lab), then IO - S per pair
        if edits:
            last = gpt2_lab.run(prompts, edits=list(edits)).last_logits
        else:
            batch = tokenizer(prompts, return_tensors="pt")
            last = gpt2_lab.model(**batch).logits[:, -1]
        return torch.stack([last[i, a] - last[i, b] for i, (a, b) in enumerate(ids)]).double()

    res = gpt2_lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, progress=False)
    ex = res.show()
    gpt2_lab.engine.worker.join()
    assert ex.logits.error == "" and ex.heatmap.error == ""
    assert len(ex.logits.pairs) == 3 and ex.logits.pair == -1 and "mean over 3 pairs" in ex.logits.title
    want_clean, want_corrupt = by_hand(clean), by_hand(corrupt)
    values = ex.logits.metric["values"]
    assert values["clean"] == pytest.approx(float(want_clean.mean()), abs=1e-4)
    assert values["corrupt"] == pytest.approx(float(want_corrupt.mean()), abs=1e-4)
    # a click: the patched mean over the pairs is the sweep's own cell
    assert ex.heatmap.send_test_message({"type": "click", "row": 1, "col": 4, "shift": False})["ok"]
    gpt2_lab.engine.worker.join()
    assert ex.logits.metric["values"]["patched"] == pytest.approx(float(res.raw[1, 4]), abs=1e-4)
    # the menu: pair 2 alone, with the click still applied
    assert ex.logits.send_test_message({"type": "pair", "index": 2})["ok"]
    gpt2_lab.engine.worker.join()
    edit = ilab.patch("resid_pre", 1, pos=4, source=gpt2_lab.run(clean, cache=["resid_pre"]))
    values = ex.logits.metric["values"]
    assert ex.logits.pair == 2 and ex.logits.title.startswith("pair 2 of 3")
    assert values["clean"] == pytest.approx(float(want_clean[2]), abs=1e-4)
    assert values["patched"] == pytest.approx(float(by_hand(corrupt, [edit])[2]), abs=1e-4)
    bad = ex.logits.send_test_message({"type": "pair", "index": 3})
    assert not bad["ok"] and "'index'=3 is out of range -1..2" in bad["error"]
    # the five head sweeps of the same pairs share one panel, with the same menu
    hs = gpt2_lab.patch_sweep_heads(clean, corrupt, metric, progress=False).show()
    gpt2_lab.engine.worker.join()
    assert hs.logits.error == "" and all(e.heatmap.error == "" for e in hs.explorers.values())
    assert hs.logits.metric["values"]["clean"] == pytest.approx(float(want_clean.mean()), abs=1e-4)
    assert hs.logits.send_test_message({"type": "pair", "index": 1})["ok"]
    gpt2_lab.engine.worker.join()
    assert hs.logits.metric["values"]["corrupt"] == pytest.approx(float(want_corrupt[1]), abs=1e-4)
    assert not ilab.attached_hooks()


def test_cancel_says_how_far_the_sweep_got_and_shows_no_error(explorer, gpt2_lab):
    gate = threading.Event()
    # the sweep queues behind this job
    gpt2_lab.engine.worker.submit("test:gate", lambda: gate.wait(10), widget=explorer.heatmap)
    explorer.sweep()
    assert explorer.heatmap.send_test_message({"type": "cancel"})["ok"]
    gate.set()
    gpt2_lab.engine.worker.join()
    n = explorer.heatmap.n_rows * explorer.heatmap.n_cols
    assert explorer.heatmap.error == "", explorer.heatmap.error
    done = re.match(rf"cancelled after (\d+) of {n} cells", explorer.heatmap.status)
    assert done and int(done[1]) < n, explorer.heatmap.status
    assert explorer.heatmap.progress == 0.0 and not ilab.attached_hooks()
