"""A composite (one model, several views: the explorer, the dashboard) on the bare page, in the document and inside a
shadow root (where marimo renders every widget), with the real mouse and keyboard:

- each part draws from its prefixed traits ("heatmap.values") and its requests go out tagged with `part`;
- of the kernel's custom messages (replies, "cells") a part hears only those tagged with its name;
- the exact-sweep click paints the linked logit panel at once, before any reply;
- tabs open with a click and with the arrow keys; a tab's view is drawn when first opened;
- styles reach a shadow root: the bars have widths and colours, plotly's layers are stacked (its own rules copied),
  the hover label shows;
- unmounting removes every listener the parts put on the model.
"""

from __future__ import annotations

import pytest
from test_bare_page import click_cell, heatmap_traits

pytestmark = pytest.mark.browser

LINK = "explorer-composite"
BASE = [{"name": "clean", "tokens": [" Mary", " John"], "probs": [0.7, 0.1]},
        {"name": "corrupt", "tokens": [" John", " Mary"], "probs": [0.6, 0.2]}]
TOPS = {"metric": "logit diff", "cells": [[r, c, 1.0 + r - c / 10, f"patched: L{r} pos {c}", [" Mary", " the"],
                                           [0.4 + r / 100, 0.05]] for r in range(4) for c in range(12)]}


def composite_traits() -> dict:
    parts = {
        "heatmap": ("heatmap", heatmap_traits(cell_tops=TOPS, link=LINK)),
        "logits": ("logits", dict(series=BASE, metric={"name": "logit diff", "values": {"clean": 3.0, "corrupt": -1.0}},
                                  title="next token", link=LINK)),
        "lens": ("lens", dict(x_labels=[" a", " b", " c"], y_labels=["L0", "L1"], top_tokens=[[" x"] * 3] * 2,
                              probs=[[0.2, 0.5, 0.9]] * 2, hover=[], selected=[], title="logit lens")),
        "attention": ("attention", dict(tokens=[" a", " b", " c"], n_layers=2, n_heads=3, layer=0, head=0,
                                        pattern=[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]], title="")),
    }
    traits = {"parts": [{"name": n, "kind": k} for n, (k, _) in parts.items()],
              "panes": [{"part": "heatmap"}, {"part": "logits"},
                        {"tabs": [{"title": "logit lens", "part": "lens"},
                                  {"title": "attention", "part": "attention"}]}]}
    for name, (kind, own) in parts.items():
        for k, v in {"_view_kind": kind, "status": "", "error": "", **own}.items():
            traits[f"{name}.{k}"] = v
    return traits


def paints(page, kind: str) -> int:
    return page.evaluate("(k) => window.paintsOf(k)", kind)


def wait_paints(page, kind: str, n: int, timeout: float = 10000) -> None:
    page.wait_for_function("([k, n]) => window.paintsOf(k) >= n", arg=[kind, n], timeout=timeout)


OUTLINED = "(w) => [...w.el.querySelectorAll('.il-cell-selected')].map((d) => [+d.dataset.row, +d.dataset.col])"


@pytest.mark.parametrize("shadow", [False, True], ids=["document", "shadow-root"])
def test_a_composite_draws_each_part_on_one_model(page, mount, shadow):
    w = mount("composite", _shadow=shadow, **composite_traits())
    wait_paints(page, "heatmap", 1)
    wait_paints(page, "logits", 1)
    assert w.js("(w) => w.el.getRootNode() instanceof ShadowRoot") == shadow
    assert w.js("(w) => [...w.el.querySelectorAll('.il-pane')].map((p) => p.dataset.part)") == \
        ["heatmap", "logits", "lens", "attention"]
    assert w.js("(w) => !!w.el.querySelector('.interplab-lens') && !w.el.querySelector('.interplab-attention')")

    # a real click on an exact sweep's cell: the logit panel paints from the page, the request is tagged
    n = paints(page, "logits")
    click_cell(page, w, 2, 4)
    wait_paints(page, "logits", n + 1, timeout=2000)
    text = w.js("(w) => w.el.querySelector('.interplab-logits').innerText")
    assert "patched: L2 pos 4" in text and "patched = 2.6000" in text
    assert w.requests == [{"type": "click", "row": 2, "col": 4, "shift": False, "part": "heatmap"}]
    click_cell(page, w, 1, 1, shift=True)
    w.wait_sent(2)
    assert w.requests[1] == {"type": "click", "row": 1, "col": 1, "shift": True, "part": "heatmap"}
    assert w.js(OUTLINED) == [[2, 4], [1, 1]]  # guessed at once
    last = w.sent[1]["id"]
    w.receive({"type": "reply", "id": last, "ok": True, "part": "lens"})  # another part's: not the heatmap's
    assert w.js(OUTLINED) == [[2, 4], [1, 1]]
    w.receive({"type": "reply", "id": last, "ok": True, "part": "heatmap"})  # the kernel's word: its `selected`
    assert w.js(OUTLINED) == []
    w.set(**{"heatmap.selected": [[3, 3]]})
    page.wait_for_function(f"(i) => ({OUTLINED})(window.W(i)).length === 1", arg=w.i, timeout=2000)
    assert w.js(OUTLINED) == [[3, 3]]
    # a failed reply shows in the heatmap's own error box
    w.receive({"type": "reply", "id": w.sent[0]["id"], "ok": False, "error": "row out of range", "part": "heatmap"})
    assert w.js("(w) => w.el.querySelector('.interplab-heatmap .il-error').textContent") == "row out of range"
    assert w.js("(w) => w.el.querySelector('.interplab-composite > .il-error').textContent") == ""
    # "cells" for the heatmap repaint it; the same message for another part does not
    n = paints(page, "heatmap")
    w.receive({"type": "cells", "cells": [[0, 0, 0.5, "new"]], "part": "logits"})
    page.wait_for_timeout(300)
    assert paints(page, "heatmap") == n
    w.receive({"type": "cells", "cells": [[0, 0, 0.5, "new"]], "part": "heatmap"})
    wait_paints(page, "heatmap", n + 1, timeout=2000)

    # tabs: the mouse opens the attention tab (drawn now), the arrow key goes back to the lens
    tab = page.locator(w.sel(".il-tab[data-part='attention']"))
    tab.click()
    wait_paints(page, "attention", 1)
    visible = "(w) => [...w.el.querySelectorAll('.il-tab-body')].filter((b) => b.style.display !== 'none')" \
              ".map((b) => b.dataset.part)"
    assert w.js(visible) == ["attention"]
    page.keyboard.press("ArrowLeft")
    assert w.js(visible) == ["lens"]
    tab.click()
    page.locator(w.sel(".interplab-attention .il-head")).select_option("2")
    w.wait_sent(3)
    assert w.requests[2] == {"type": "select", "layer": 0, "head": 2, "part": "attention"}

    # styled, in a shadow root too: bars are boxes with a width and a colour, plotly's SVG layers are stacked
    fills = w.js("(w) => [...w.el.querySelectorAll('.interplab-logits .il-fill')].map((f) => {"
                 " const s = getComputedStyle(f); return [f.getBoundingClientRect().width, s.backgroundColor,"
                 " s.display]; })")
    assert fills and all(width > 0 and colour not in ("", "rgba(0, 0, 0, 0)") and display == "block"
                         for width, colour, display in fills), fills
    assert w.js("(w) => getComputedStyle(w.el.querySelector('.interplab-logits .il-bar-row')).display") == "flex"
    layers = w.js("(w) => [...w.el.querySelector('.interplab-heatmap .js-plotly-plot').querySelectorAll('.main-svg')]"
                  ".map((s) => getComputedStyle(s).position)")
    assert layers and set(layers) == {"absolute"}, layers  # plotly's own rule, copied into the shadow root
    assert w.js("(w) => getComputedStyle(w.el.querySelector('.interplab-heatmap .modebar')).position") == "absolute"
    assert w.js("(w) => getComputedStyle(w.el.querySelector('.il-tab.on')).fontWeight") == "600"
    p = w.js("(w) => window.cellPixel(window.__mounted.indexOf(w), 2, 6)")
    page.mouse.move(p["x"], p["y"])
    page.wait_for_function("(i) => !!window.W(i).el.querySelector('.interplab-heatmap .il-tip.on')",
                           arg=w.i, timeout=5000)
    assert "position 6" in w.js("(w) => w.el.querySelector('.interplab-heatmap .il-tip').textContent")

    # unmounted: no listener left on the model
    assert w.js("(w) => { w.cleanup(); return w.model.listeners(); }") == 0
