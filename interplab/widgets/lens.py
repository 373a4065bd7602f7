"""Deprecated alias of interplab.widgets.lens: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
    "LensView": "interplab.views.lens",
}

__getattr__, __dir__ = moved(__name__, _HOMES)
