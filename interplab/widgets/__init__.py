"""interplab widgets: the anywidget machinery every view shares, torch-free.

base.py: LabWidget (synced traits, requests validated against their declaration, one reply each, callbacks) and the
shared widget code; composite.py / parts.py: one anywidget that shows several views. The views themselves (each one's
widget class, numbers and wiring) are in interplab.views; their old names here answer for one release, with a warning.
"""

import importlib
import warnings

from .base import LabWidget, MessageError

_MOVED = {"AttentionView": "attention", "CircuitGraph": "circuit", "LensView": "lens", "LogitPanel": "logits",
          "PatchingHeatmap": "heatmap", "SteeringPanel": "steering", "ValueBars": "values"}


def __getattr__(name: str):
    kind = _MOVED.get(name)
    if kind is None:
        raise AttributeError(f"module 'interplab.widgets' has no attribute {name!r}")
    warnings.warn(f"interplab.widgets.{name} moved to interplab.views.{kind}.{name}; this alias goes in the next "
                  f"release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(f"interplab.views.{kind}"), name)


__all__ = ["LabWidget", "MessageError"]
