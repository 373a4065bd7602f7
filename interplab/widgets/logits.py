"""Deprecated alias of interplab.widgets.logits: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
    "LogitPanel": "interplab.views.logits",
    "Series": "interplab.views.logits",
}

__getattr__, __dir__ = moved(__name__, _HOMES)
