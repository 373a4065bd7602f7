"""Bare-page browser tests: the bundled ESM rendered with a fake anywidget model in Debian's Chromium.

Each test speaks in the user's terms: click a heatmap cell by its pixels -> the exact request the kernel gets (with
its id), and the fake kernel's reply -> what the view shows.
"""

from __future__ import annotations

import json

import pytest

from interplab.widgets.base import PROTOCOL

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=window.__xss=1>"
BOLD = "<b>bold</b>"
IOI = ["<|endoftext|>", "When", " Mary", " and", " John", " went", " to", " the", " store", ",", " John", " gave"]


def heatmap_traits(rows=4, cols=12, **kw):
    values = [[round((r - c / cols) / rows, 3) for c in range(cols)] for r in range(rows)]
    values[0][0] = None  # not computed yet
    t = dict(
        values=values,
        x_labels=IOI[:cols],
        y_labels=[f"L{r}" for r in range(rows)],
        x_title="position",
        y_title="layer",
        title="resid_pre patching",
        direction="denoise",
        metric_name="logit diff (normalised)",
        hover=[[f"top: ' Mary' {r},{c}" for c in range(cols)] for r in range(rows)],
        selected=[],
        active_edits=[],
        progress=0.0,
        zmin=None,
        zmax=None,
    )
    t.update(kw)
    return t


def click_cell(page, w, row, col, shift=False):
    p = w.js("(w, rc) => window.cellPixel(window.__mounted.indexOf(w), rc[0], rc[1])", [row, col])
    if shift:
        page.keyboard.down("Shift")
    page.mouse.click(p["x"], p["y"])
    if shift:
        page.keyboard.up("Shift")


def test_heatmap_paints_and_click_sends_exact_messages(page, mount):
    w = mount("heatmap", **heatmap_traits())
    w.wait_paints(1)
    assert w.js("(w) => !!w.el.querySelector('.js-plotly-plot canvas.il-canvas')")  # heatmap trace drawn
    # repeated " John" tokens stay separate columns (numeric axis, not categorical)
    assert w.js("(w) => w.el.querySelector('.js-plotly-plot').__interplab_grid.z[0].length") == len(IOI)

    click_cell(page, w, 2, 4)
    w.wait_sent(1)
    assert w.requests == [{"type": "click", "row": 2, "col": 4, "shift": False}]

    click_cell(page, w, 3, 10, shift=True)  # the second " John"
    w.wait_sent(2)
    assert w.requests[1] == {"type": "click", "row": 3, "col": 10, "shift": True}

    click_cell(page, w, 0, 0)  # a not-yet-computed cell is clickable too
    w.wait_sent(3)
    assert w.requests[2] == {"type": "click", "row": 0, "col": 0, "shift": False}


def test_a_failed_reply_shows_its_error_in_the_view(page, mount):
    """A click is a request with an id; the kernel's reply with ok:false puts its error text in the view's error box
    (once, even when the `error` trait says the same); replies to ids the view is not waiting for are ignored; the
    next ok reply clears it."""
    w = mount("heatmap", **heatmap_traits())
    w.wait_paints(1)
    box = page.locator(w.sel(".il-error"))
    click_cell(page, w, 1, 3)
    w.wait_sent(1)
    first = w.sent[0]
    assert isinstance(first["id"], int) and w.requests == [{"type": "click", "row": 1, "col": 3, "shift": False}]
    assert not box.is_visible()
    text = f"error in on_click callback patch: RuntimeError: CUDA out of memory {XSS}"
    w.receive({"type": "reply", "id": first["id"] + 1000, "ok": False, "error": "not ours"})  # unknown id: ignored
    w.receive({"type": "other", "id": first["id"], "ok": False, "error": "not a reply"})  # not a reply: ignored
    assert not box.is_visible()
    w.receive({"type": "reply", "id": first["id"], "ok": False, "error": text})
    assert box.is_visible() and box.text_content() == text
    assert w.js("(w) => w.el.querySelectorAll('img').length") == 0 and page.evaluate("window.__xss") is None
    w.set(error=text)  # Python sets the trait to the same text: shown once
    assert box.text_content() == text
    w.set(error="")
    assert box.text_content() == text  # the reply's error stays until a later request succeeds
    w.receive({"type": "reply", "id": first["id"], "ok": True})  # a second reply to the same id: ignored
    assert box.text_content() == text
    click_cell(page, w, 2, 2)
    w.wait_sent(2)
    second = w.sent[1]
    assert second["id"] > first["id"]
    w.receive({"type": "reply", "id": second["id"], "ok": True})
    assert not box.is_visible()
    replies = page.evaluate("window.__interplab_replies")
    assert [(r["widget"], r["id"], r["ok"]) for r in replies] == [("heatmap", first["id"], False),
                                                                  ("heatmap", second["id"], True)]


def test_the_bundle_carries_protocol_json(page):
    assert page.evaluate("window.__protocol") == json.loads(json.dumps(PROTOCOL))


def test_an_undeclared_request_is_shown_and_never_sent(page, mount):
    """A request the declaration does not allow is a bug in the view: shown in its error box, thrown, not sent.
    (Here: a positions value the view has no option for, which Python would never set.)"""
    w = mount("steering", **steering_traits(positions="first"))
    w.wait_paints(1)
    page.locator(w.sel(".il-layer")).select_option("3")
    page.wait_for_timeout(50)
    assert w.sent == []
    box = page.locator(w.sel(".il-error"))
    assert box.is_visible() and "interplab bug: preview request: positions must be one of all, last, prompt" in (
        box.text_content())
    assert any("positions must be one of" in e for e in page.errors), page.errors
    page.errors.clear()  # the thrown error is the point of this test


def test_heatmap_kernel_update_repaints(page, mount):
    w = mount("heatmap", **heatmap_traits())
    w.wait_paints(1)
    n = w.paints()
    w.set(values=[[1.0] * len(IOI)] * 4)
    w.wait_paints(n + 1)
    assert w.js("(w) => w.el.querySelector('.js-plotly-plot').__interplab_grid.z[1][3]") == 1.0
    # selected + active edits set from the kernel: outlines drawn and the list under the plot
    n = w.paints()
    w.set(
        selected=[[1, 2]],
        active_edits=[
            {"id": "e1", "label": "patch resid_pre L1 pos 2", "enabled": True, "row": 1, "col": 2},
            {"id": "e2", "label": "zero z L3 H4", "enabled": False, "row": 3, "col": 5},
        ],
    )
    w.wait_paints(n + 1)
    # enabled edit + selection, outlined over their cells; a disabled edit has an outline of its own (thin, dashed)
    cells = w.js("(w) => [...w.el.querySelectorAll('.il-cell')].map((b) => [b.className, +b.dataset.row, "
                 "+b.dataset.col, b.getBoundingClientRect()])")
    assert [c[:3] for c in cells] == [["il-cell il-cell-active", 1, 2], ["il-cell il-cell-off", 3, 5],
                                      ["il-cell il-cell-selected", 1, 2]]
    styles = w.js("(w) => [...w.el.querySelectorAll('.il-cell')].map((b) => getComputedStyle(b).borderTopStyle)")
    assert styles == ["dotted", "dashed", "solid"], styles
    # the outline sits on the heatmap cell: a click at its centre hits cell (1, 2)
    r = cells[2][3]
    hit = w.js(f"(w) => {{ const gd = w.el.querySelector('.js-plotly-plot'); const xa = gd._fullLayout.xaxis, "
               f"ya = gd._fullLayout.yaxis; const b = gd.getBoundingClientRect(); "
               f"return [ya.p2l({r['y']} + {r['height']} / 2 - b.top - ya._offset), "
               f"xa.p2l({r['x']} + {r['width']} / 2 - b.left - xa._offset)]; }}")
    assert [round(v) for v in hit] == [1, 2]
    labels = page.locator(w.sel(".il-edit-label")).all_text_contents()
    assert labels == ["patch resid_pre L1 pos 2", "zero z L3 H4"]


def test_heatmap_active_list_toggle_remove_clear_cancel(page, mount):
    w = mount(
        "heatmap",
        **heatmap_traits(
            active_edits=[
                {"id": "e1", "label": "patch L1 pos 2", "enabled": True, "row": 1, "col": 2},
                {"id": "e2", "label": "patch L3 pos 5", "enabled": False, "row": 3, "col": 5},
            ],
            progress=0.4,
        ),
    )
    w.wait_paints(1)
    page.locator(w.sel("li[data-id=e1] input[type=checkbox]")).click()
    page.locator(w.sel("li[data-id=e2] input[type=checkbox]")).click()
    page.locator(w.sel("li[data-id=e2] .il-edit-remove")).click()
    page.locator(w.sel(".il-clear")).click()
    page.locator(w.sel(".il-cancel")).click()
    w.wait_sent(5)
    assert w.requests == [
        {"type": "toggle", "edit_id": "e1", "enabled": False},
        {"type": "toggle", "edit_id": "e2", "enabled": True},
        {"type": "remove", "edit_id": "e2"},
        {"type": "clear"},
        {"type": "cancel"},
    ]
    # progress bar visible while 0 < progress < 1, hidden when done
    assert page.locator(w.sel(".il-progress")).is_visible()
    w.set(progress=1.0)
    assert not page.locator(w.sel(".il-progress")).is_visible()


def test_error_and_status_are_text(page, mount):
    w = mount("heatmap", **heatmap_traits())
    w.wait_paints(1)
    assert not page.locator(w.sel(".il-error")).is_visible()
    w.set(error=f"bad message from the frontend: {XSS}", status=f"sweeping {BOLD}")
    box = page.locator(w.sel(".il-error"))
    assert box.is_visible()
    assert box.text_content() == f"bad message from the frontend: {XSS}"
    assert page.locator(w.sel(".il-status")).text_content() == f"sweeping {BOLD}"
    assert w.js("(w) => w.el.querySelectorAll('img, b').length") == 0
    assert page.evaluate("window.__xss") is None


def test_heatmap_xss_labels_are_literal_text(page, mount):
    labels = ["<|endoftext|>", XSS, BOLD, " Mary", "a&amp;b"]
    w = mount(
        "heatmap",
        **heatmap_traits(
            rows=2,
            cols=5,
            x_labels=labels,
            y_labels=[XSS, BOLD],
            title=XSS,
            metric_name=BOLD,
            hover=[[XSS] * 5, [BOLD] * 5],
            active_edits=[{"id": "x", "label": XSS, "enabled": True, "row": 0, "col": 1}],
        ),
    )
    w.wait_paints(1)
    page.wait_for_timeout(100)
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.querySelectorAll('#root img').length") == 0
    # plotly rendered no bold element from the label: the text shows the literal characters
    ticks = w.js("(w) => [...w.el.querySelectorAll('.xtick text')].map((t) => t.textContent)")
    assert XSS in ticks or any(t.startswith("<img") for t in ticks), ticks
    assert "<b>bold</b>" in ticks
    assert "a&amp;b" in ticks
    assert "␣Mary" in ticks
    assert "<|endoftext|>" in " ".join(ticks) or any(t.startswith("<|endoft") for t in ticks)
    assert w.js("(w) => w.el.querySelector('.il-htitle-main').textContent") == XSS  # (the direction: a second line)
    assert page.locator(w.sel(".il-edit-label")).text_content() == XSS
    # hover shows the literal text too
    p = w.js("(w) => window.cellPixel(window.__mounted.indexOf(w), 1, 2)")
    page.mouse.move(p["x"], p["y"])
    page.wait_for_selector(".interplab-heatmap .il-tip.on", timeout=3000)
    hover = page.evaluate("document.querySelector('.interplab-heatmap .il-tip.on').textContent")
    assert BOLD in hover and '"<b>bold</b>"' in hover
    assert page.evaluate("document.querySelectorAll('#root img').length") == 0


# ---------------------------------------------------------------------------------------------------- logits
def series(names=("clean", "corrupt", "patched")):
    toks = [" Mary", " John", " the", XSS, BOLD]
    return [{"name": n, "tokens": toks, "probs": [0.5 - 0.1 * i, 0.2, 0.1, 0.05, 0.01]} for i, n in enumerate(names)]


def test_logits_paints_series_and_metric(page, mount):
    w = mount(
        "logits",
        series=series(),
        metric={"name": "logit diff", "values": {"clean": 3.25, "corrupt": -3.0, "patched": 1.5}},
        title="next token",
    )
    w.wait_paints(1)
    names = "(w) => [...w.el.querySelectorAll('.il-series-name')].map((t) => t.textContent)"
    assert w.js(names) == ["clean", "corrupt", "patched"]
    assert page.locator(w.sel(".il-metric")).text_content() == (
        "logit diff: clean = 3.2500   corrupt = -3.0000   patched = 1.5000"
    )
    # a metric's notes (an answer without its leading space) each on a line of their own under the values
    note = "answer 'Mary' has no leading space: ..."
    w.set(metric={"name": "logit diff", "values": {"clean": 3.25}, "notes": [note]})
    page.wait_for_function("([sel]) => document.querySelector(sel)", arg=[w.sel(".il-metric-note")])
    assert page.locator(w.sel(".il-metric-note")).text_content() == note
    assert page.locator(w.sel(".il-metric-item")).text_content() == "clean = 3.2500"
    ticks = w.js("(w) => [...w.el.querySelectorAll('.il-series')[0].querySelectorAll('.il-tok')].map((t) => "
                 "t.textContent)")
    assert ticks[:3] == ["␣Mary", "␣John", "␣the"] and "<b>bold</b>" in ticks
    assert any(t.startswith("<img") for t in ticks)
    # one scale for every series and every panel: a bar's length is its probability (the track is 1)
    widths = w.js("(w) => [...w.el.querySelectorAll('.il-series')[1].querySelectorAll('.il-fill')].map((f) => "
                  "f.style.width)")
    assert widths[:2] == ["40%", "20%"]
    assert w.js("(w) => w.el.querySelectorAll('.il-val')[0].textContent") == "0.500"
    n = w.paints()
    w.set(series=series(("clean", "patched")))
    w.wait_paints(n + 1)
    assert w.js(names) == ["clean", "patched"]
    assert page.evaluate("window.__xss") is None
    assert w.js("(w) => w.el.querySelectorAll('img, b').length") == 0


def fill_fractions(w, panel: str) -> list[float]:
    """Each bar's drawn length over its track's, in the order shown, from the laid-out boxes."""
    return w.js("(w, sel) => [...w.el.querySelectorAll(sel + ' .il-bar-row')].map((r) => "
                "r.querySelector('.il-fill').getBoundingClientRect().width / "
                "r.querySelector('.il-track').getBoundingClientRect().width)", panel)


def test_one_distribution_draws_the_same_bars_in_the_logit_and_steering_panels(page, mount):
    """Probabilities on one absolute scale (0..1 of the track) in every panel: the same distribution is never a
    half bar beside a taller series in one panel and a full bar alone in another."""
    dist = {"name": "corrupt", "tokens": [" Mary", " John", " the"], "probs": [0.45, 0.3, 0.05]}
    logits = mount("logits", series=[{"name": "clean", "tokens": [" John", " Mary"], "probs": [0.9, 0.05]}, dist],
                   metric={}, title="next token")
    steering = mount("steering", **steering_traits(dist=[dist]))
    logits.wait_paints(1)
    page.wait_for_function("() => window.paintsOf('steering') >= 1", timeout=10000)
    in_logits = fill_fractions(logits, ".il-series:nth-child(2)")
    in_steering = fill_fractions(steering, ".il-series")
    assert in_logits == pytest.approx([0.45, 0.3, 0.05], abs=0.01), in_logits
    assert in_steering == pytest.approx(in_logits, abs=0.01), (in_steering, in_logits)


# ---------------------------------------------------------------------------------------------------- steering
def steering_traits(**kw):
    t = dict(
        n_layers=12,
        sites=["resid_pre", "resid_post", "mlp_out"],
        site="resid_pre",
        layer=6,
        alpha=0.0,
        alpha_min=-10.0,
        alpha_max=10.0,
        positions="all",
        prompt=f"I think that {XSS}",
        positive="Love\nI adore you",
        negative="Hate\nI despise you",
        dist=[
            {"name": "base", "tokens": [" the", " a", XSS], "probs": [0.3, 0.2, 0.1]},
            {"name": "steered", "tokens": [" love", BOLD, " the"], "probs": [0.4, 0.2, 0.1]},
        ],
        generated=f"I think that {BOLD} is great",
        max_new_tokens=20,
        busy=False,
        title="",
    )
    t.update(kw)
    return t


def test_steering_slider_drag_sends_throttled_previews(page, mount):
    w = mount("steering", **steering_traits())
    w.wait_paints(1)
    # ten input events in one go (a fast drag): throttled to a few previews, the latest value wins
    w.js(
        """(w) => { const s = w.el.querySelector('.il-alpha');
           for (let i = 1; i <= 10; i++) { s.value = String(i * 0.5); s.dispatchEvent(new Event('input')); } }"""
    )
    w.wait_sent(1)
    page.wait_for_timeout(120)
    sent = w.requests
    assert 1 <= len(sent) < 10, sent
    assert sent[-1] == {"type": "preview", "alpha": 5.0, "layer": 6, "site": "resid_pre", "positions": "all"}
    # a real mouse drag along the slider: previews while moving, then one for the final value on release
    w.clear_sent()
    box = page.locator(w.sel(".il-alpha")).bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.5, y)
    page.mouse.down()
    for i in range(1, 9):
        page.mouse.move(box["x"] + box["width"] * (0.5 + 0.05 * i), y)
        page.wait_for_timeout(25)
    page.mouse.up()
    page.wait_for_timeout(100)
    sent = w.requests
    final = w.js("(w) => Number(w.el.querySelector('.il-alpha').value)")
    assert final > 5.0
    assert len(sent) >= 2 and all(m["type"] == "preview" for m in sent), sent
    assert sent[-1]["alpha"] == pytest.approx(final)
    # the view never writes a trait: the request carries alpha, and Python sets the trait
    assert w.js("(w) => [w.model.get('alpha'), w.model.saves]") == [0.0, 0]


@pytest.mark.parametrize("shadow", [False, True], ids=["page", "shadow root"])
def test_steering_slider_keys_are_not_pulled_back_by_an_older_alpha(page, mount, shadow):
    """The kernel's answer to the first key press (its alpha trait) arrives after the second: the slider keeps the
    second value and the third press steps from it, on the page and in a shadow root (marimo)."""
    w = mount("steering", _shadow=shadow, **steering_traits())
    w.wait_paints(1)
    keys = page.locator(w.sel(".il-alpha"))  # (Playwright's CSS reaches into open shadow roots)
    alphas = lambda: [m["alpha"] for m in w.requests if m["type"] == "preview"]  # noqa: E731
    keys.press("ArrowRight")
    keys.press("ArrowRight")
    page.wait_for_function("(i) => window.W(i).model.sent.length >= 2", arg=w.i)
    w.set(alpha=alphas()[0])  # the kernel takes the first preview's alpha into its trait
    assert w.js("(w) => Number(w.el.querySelector('.il-alpha').value)") == pytest.approx(0.2, abs=1e-9)
    keys.press("ArrowRight")
    page.wait_for_function("(i) => window.W(i).model.sent.length >= 3", arg=w.i)
    assert alphas() == pytest.approx([0.1, 0.2, 0.3], abs=1e-9)


def test_steering_buttons_and_selectors(page, mount):
    w = mount("steering", **steering_traits())
    w.wait_paints(1)
    page.locator(w.sel(".il-layer")).select_option("3")
    page.locator(w.sel(".il-site")).select_option("mlp_out")
    page.locator(w.sel(".il-positions")).select_option("last")
    page.locator(w.sel(".il-max-new-tokens")).fill("7")
    page.locator(w.sel(".il-generate")).click()
    page.locator(w.sel(".il-positive")).fill("Joy\n\nHappy")
    page.locator(w.sel(".il-set-vector")).click()
    page.locator(w.sel(".il-prompt")).fill("I hope")
    page.locator(w.sel(".il-generate")).click()
    sent = w.requests
    generate = {"type": "generate", "alpha": 0.0, "layer": 3, "site": "mlp_out", "positions": "last",
                "max_new_tokens": 7}
    assert [m["type"] for m in sent[:3]] == ["preview"] * 3  # each selector change previews once
    assert sent[3:] == [
        {"type": "update", "max_new_tokens": 7},  # the box lost focus to Generate: its value travels first
        generate,
        {"type": "update", "positive": "Joy\n\nHappy"},
        {"type": "set_vector", "positive": "Joy\n\nHappy", "negative": "Hate\nI despise you"},
        {"type": "update", "prompt": "I hope"},
        generate,
    ]
    # the view wrote no trait: the requests carry the values, Python sets the traits
    assert w.js("(w) => [w.model.get('layer'), w.model.get('prompt'), w.model.saves]") == [6, f"I think that {XSS}", 0]
    # busy from the kernel disables the buttons; generated text and prompts are literal text
    w.set(busy=True)
    assert page.locator(w.sel(".il-generate")).is_disabled()
    assert page.locator(w.sel(".il-generated")).text_content() == f"I think that {BOLD} is great"
    assert page.locator(w.sel(".il-prompt")).input_value() == f"I think that {XSS}"
    n = w.paints()
    w.set(dist=[{"name": "steered", "tokens": [" x"], "probs": [0.9]}])
    w.wait_paints(n + 1)
    assert w.js("(w) => [...w.el.querySelectorAll('.il-series-name')].map((t) => t.textContent)") == ["steered"]
    assert w.js("(w) => w.el.querySelector('.il-tok').textContent") == "␣x"
    assert page.evaluate("window.__xss") is None
    assert w.js("(w) => w.el.querySelectorAll('img, b').length") == 0


# ---------------------------------------------------------------------------------------------------- lens
def test_lens_paints_cell_text_literally_and_selects(page, mount):
    toks = ["When", " Mary", XSS, BOLD]
    w = mount(
        "lens",
        x_labels=toks,
        y_labels=["L0", "L1", "L2"],
        top_tokens=[[" the", XSS, BOLD, " John"]] * 3,
        probs=[[0.1, 0.5, 0.9, 0.3]] * 3,
        hover=[[f"{XSS} 0.5\n the 0.1"] * 4] * 3,
        title="logit lens",
    )
    w.wait_paints(1)
    cell_text = w.js("(w) => [...w.el.querySelectorAll('.js-plotly-plot text')].map((t) => t.textContent)")
    assert "␣the" in cell_text and "<b>bold</b>" in cell_text
    assert any(t.startswith("<img") for t in cell_text)
    p = w.js("(w) => window.cellPixel(window.__mounted.indexOf(w), 2, 1)")
    page.mouse.move(p["x"], p["y"])
    page.wait_for_selector(".hoverlayer .hovertext", timeout=3000)
    hover = page.evaluate("document.querySelector('.hoverlayer .hovertext').textContent")
    assert 'L2, position 1 "␣Mary"'.replace("␣", " ") in hover and f"{XSS} 0.5" in hover, hover
    page.mouse.click(p["x"], p["y"])
    w.wait_sent(1)
    assert w.requests == [{"type": "select", "row": 2, "col": 1}]
    n = w.paints()
    w.set(probs=[[0.2, 0.2, 0.2, 0.2]] * 3)
    w.wait_paints(n + 1)
    assert page.evaluate("window.__xss") is None
    assert w.js("(w) => w.el.querySelectorAll('img, b').length") == 0


# ---------------------------------------------------------------------------------------------------- attention
def test_attention_paints_and_select_sends(page, mount):
    toks = ["<|endoftext|>", "When", " Mary", " and", " John", XSS]
    n = len(toks)
    pattern = [[(1.0 / (q + 1) if k <= q else 0.0) for k in range(n)] for q in range(n)]
    w = mount("attention", tokens=toks, n_layers=4, n_heads=8, layer=1, head=2, pattern=pattern, title="")
    w.wait_paints(1)
    assert w.js("(w) => w.el.querySelector('.il-layer').value") == "1"
    assert w.js("(w) => w.el.querySelector('.il-head').options.length") == 8
    page.locator(w.sel(".il-head")).select_option("5")
    page.locator(w.sel(".il-layer")).select_option("3")
    assert w.requests == [{"type": "select", "layer": 1, "head": 5}, {"type": "select", "layer": 3, "head": 5}]
    c = w.paints()
    w.set(layer=3, head=5, pattern=[[1.0] * n] * n)
    w.wait_paints(c + 1)
    assert "layer 3 head 5" in w.js("(w) => w.el.querySelector('.gtitle').textContent")
    yt = w.js("(w) => [...w.el.querySelectorAll('.ytick text')].map((t) => t.textContent)")
    assert yt[0].startswith("<|endoft") and any(t.startswith("<img") for t in yt)
    assert page.evaluate("window.__xss") is None
    assert w.js("(w) => w.el.querySelectorAll('img').length") == 0


def test_unknown_kind_shows_error_and_cleanup_detaches(page, mount):
    w = mount("nope")
    assert "unknown widget kind" in page.locator(w.sel(".il-error")).text_content()
    h = mount("heatmap", **heatmap_traits())
    h.wait_paints(1)
    assert h.js("(w) => w.model.listeners()") > 0
    h.js("(w) => w.cleanup()")
    assert h.js("(w) => w.model.listeners()") == 0
    assert h.js("(w) => w.el.children.length") == 0
