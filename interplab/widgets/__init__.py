"""interplab widgets: the anywidget machinery every view shares, torch-free.

base.py: LabWidget (synced traits, requests validated against their declaration, one reply each, callbacks) and the
shared widget code; composite.py / parts.py: one anywidget that shows several views. The views themselves (each one's
widget class, numbers and wiring) are in interplab.views; their old names here answer for one release, with a warning.
"""

from interplab.moved import moved

from .base import LabWidget, MessageError

__getattr__, __dir__ = moved(__name__, {name: f"interplab.views.{kind}" for name, kind in (
    ("AttentionView", "attention"), ("CircuitGraph", "circuit"), ("LensView", "lens"), ("LogitPanel", "logits"),
    ("PatchingHeatmap", "heatmap"), ("SteeringPanel", "steering"), ("ValueBars", "values"))})

__all__ = ["LabWidget", "MessageError"]
