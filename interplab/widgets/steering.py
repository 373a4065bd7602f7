"""Deprecated alias of interplab.widgets.steering: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
    "SteeringPanel": "interplab.views.steering",
}

__getattr__, __dir__ = moved(__name__, _HOMES)
