"""Deprecated alias of interplab.widgets.attention: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
    "AttentionView": "interplab.views.attention",
}

__getattr__, __dir__ = moved(__name__, _HOMES)
