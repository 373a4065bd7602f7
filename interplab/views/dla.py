"""Direct logit attribution's view: the metric at each position, each head's direct effect there, the other parts as
bars (DLAResult.show()). The numbers are the result's own: nothing runs on a click."""

from __future__ import annotations

from .. import display
from ..analyses.dla import DLAResult
from ..widgets.composite import Composite
from .heatmap import PatchingHeatmap
from .values import ValueBars


# ---- direct logit attribution, path patching: results already computed, shown as plain numbers -------------------
def dla_view(res, pos: int = -1) -> dict:
    """A DLAResult at one position: the heads as heatmap traits (layers x heads), the other parts as bars, and the
    model's own metric at every position (a one-row heatmap: a click there picks the position)."""
    n_pos = int(res.total.shape[0])
    p = pos % n_pos
    heads = res.heads[:, :, p].float()
    n_layers, n_heads = heads.shape
    tok = res.tokens[p] if p < len(res.tokens) else str(p)
    labels = (["embed", "pos_embed"] + [f"attn bias L{layer}" for layer in range(n_layers)]
              + [f"MLP{layer}" for layer in range(n_layers)] + ["final bias", "heads (sum)", "total"])
    values = [res.embed[p], res.pos_embed[p], *res.attn_bias[:, p], *res.mlp[:, p], res.final_bias[p], heads.sum(),
              res.total[p]]
    return {
        "pos": p,
        "positions": {"values": [[float(v) for v in res.total.tolist()]], "x_labels": list(res.tokens),
                      "y_labels": ["total"], "x_title": "position (click: show it)", "y_title": "",
                      "title": f"{res.metric_name} at each position", "metric_name": res.metric_name,
                      "direction": "", "selected": [[0, p]]},
        "heads": {"values": heads.tolist(), "x_labels": [f"H{h}" for h in range(n_heads)],
                  "y_labels": [f"L{layer}" for layer in range(n_layers)], "x_title": "head", "y_title": "layer",
                  "title": f"each head's direct effect at position {p} ({tok!r})", "metric_name": res.metric_name,
                  "direction": ""},
        "parts": {"labels": labels, "values": [float(v) for v in values], "metric_name": res.metric_name,
                  "title": f"the other parts at position {p} ({tok!r}); they add up to the total"},
    }


class DLAView(Composite):
    """DLAResult.show(): the metric at each position (click one to show it), each head's direct effect at that
    position (layers x heads) and the other parts (embeddings, attention biases, MLPs, final bias) as bars. The
    numbers are the result's own: nothing runs on a click."""

    def __init__(self, result, pos: int = -1):
        self.result = result
        self.positions = PatchingHeatmap(hint="Click a position to show its heads and other parts.", part=True)
        self.heads = PatchingHeatmap(hint="Each head's direct effect at this position (read from one run: "
                                          "nothing is patched).", part=True)
        self.bars = ValueBars(part=True)
        super().__init__({"positions": self.positions, "heads": self.heads, "parts": self.bars},
                         panes=[{"part": "positions"}, {"row": ["heads", "parts"]}])
        self.show_position(pos)
        self.positions.on_click(lambda row, col, shift: self.show_position(col))

    def show_position(self, pos: int) -> None:
        view = dla_view(self.result, pos)
        self.pos = view["pos"]
        for widget, traits in ((self.positions, view["positions"]), (self.heads, view["heads"]),
                               (self.bars, view["parts"])):
            with widget.hold_sync():
                for k, v in traits.items():
                    setattr(widget, k, v)


display.register(DLAResult, lambda result, pos=-1: DLAView(result, pos))
