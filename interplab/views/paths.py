"""Path patching's view: each sender as a heatmap cell, a click shows its effect through each receiver as bars
(PathPatchResult.show())."""

from __future__ import annotations

from .. import display
from ..analyses.paths import PathPatchResult
from ..widgets.composite import Composite
from .heatmap import PatchingHeatmap
from .values import ValueBars


def _receiver_label(group) -> str:
    return "logits" if group == "logits" else " + ".join(f"L{layer}H{head}.{site}" for layer, head, site in group)


def path_strongest(res) -> tuple[int, int]:
    """(row, col) of the sender with the largest |effect| (mean over the receiver groups) in path_view's grid."""
    values = res.values.float()
    grid = (values[0] if values.shape[0] == 1 else values.mean(0)).nan_to_num(0.0).abs()
    return divmod(int(grid.argmax()), grid.shape[1])


def path_view(res, row: int | None = None, col: int | None = None) -> dict:
    """A PathPatchResult: the senders as heatmap traits (layers x heads, + the MLP column), the mean over receiver
    groups when there are several; and, for the sender at (row, col), its effect through each group as bars."""
    values = res.values.float()
    grid = values[0] if values.shape[0] == 1 else values.mean(0)
    groups = [_receiver_label(g) for g in res.receivers]
    cols = [f"H{c}" if c != "MLP" else "MLP" for c in res.labels["cols"]]
    through = groups[0] if len(groups) == 1 else f"the mean over {len(groups)} receivers"
    out = {"heatmap": {"values": grid.tolist(), "x_labels": cols,
                       "y_labels": [f"L{layer}" for layer in res.labels["layers"]], "x_title": "sender",
                       "y_title": "layer", "title": f"path patching: each sender through {through}",
                       "metric_name": f"{res.metric_name} (normalised)",
                       "direction": res.direction}}
    if row is not None and col is not None:
        effect = [None if v != v else float(v) for v in values[:, row, col].tolist()]  # NaN: no path there
        out["bars"] = {"labels": groups, "values": effect,
                       "metric_name": f"{res.metric_name} (normalised)",
                       "title": f"{f'MLP{row}' if cols[col] == 'MLP' else f'L{row}{cols[col]}'} through each receiver"}
    else:
        out["bars"] = {"labels": groups, "values": [None] * len(groups), "metric_name": "",
                       "title": "click a sender: its effect through each receiver"}
    return out


class PathView(Composite):
    """PathPatchResult.show(): each sender (layer x head, + the MLP column) as a heatmap; a click on a sender shows
    its effect through each receiver group as bars (per_receiver=True: one bar per receiver)."""

    def __init__(self, result):
        self.result = result
        self.heatmap = PatchingHeatmap(hint="Click a sender to show its effect through each receiver.", part=True)
        self.bars = ValueBars(part=True)
        super().__init__({"heatmap": self.heatmap, "bars": self.bars},
                         panes=[{"row": ["heatmap", "bars"]}])
        # the bars start on the sender with the largest effect (never an empty row of dashes), outlined as selected
        row, col = path_strongest(result)
        self._set(path_view(result, row, col))
        self.heatmap.selected = [[row, col]]
        self.heatmap.on_click(lambda row, col, shift: self._set(path_view(result, row, col)))

    def _set(self, view) -> None:
        for widget, traits in ((self.heatmap, view["heatmap"]), (self.bars, view["bars"])):
            with widget.hold_sync():
                for k, v in traits.items():
                    setattr(widget, k, v)


display.register(PathPatchResult, lambda result: PathView(result))
