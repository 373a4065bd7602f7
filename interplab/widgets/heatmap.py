"""Deprecated alias of interplab.widgets.heatmap: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
    "PatchingHeatmap": "interplab.views.heatmap",
}

__getattr__, __dir__ = moved(__name__, _HOMES)
