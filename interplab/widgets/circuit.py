"""Deprecated alias of interplab.widgets.circuit: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
    "CircuitGraph": "interplab.views.circuit",
}

__getattr__, __dir__ = moved(__name__, _HOMES)
