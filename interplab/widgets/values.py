"""Deprecated alias of interplab.widgets.values: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
    "ValueBars": "interplab.views.values",
}

__getattr__, __dir__ = moved(__name__, _HOMES)
