"""Deprecated: interplab.widgets.controller (every view's wiring) moved to interplab.views
(one module per view: what it shows and its wiring). The old
names answer here, with a DeprecationWarning, for one release."""

import importlib
import warnings

_MOVED = {
    "DLAView": "interplab.views.dla",
    "Dashboard": "interplab.views.dashboard",
    "HeadSweepsView": "interplab.views.patching",
    "PatchExplorer": "interplab.views.patching",
    "PathView": "interplab.views.paths",
    "SITE_ROLES": "interplab.views.patching",
    "SteeringController": "interplab.views.steering",
    "attention_widget": "interplab.views.attention",
    "edges_for": "interplab.views.circuit",
    "heatmap_for": "interplab.views.patching",
    "lens_widget": "interplab.views.lens",
    "steering_panel": "interplab.views.steering",
}


def __getattr__(name: str):
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module 'interplab.widgets.controller' has no attribute {name!r}")
    warnings.warn(f"interplab.widgets.controller.{name} moved to {where}.{name}; this alias goes in the next release",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(where), name)


def __dir__() -> list[str]:
    return sorted(_MOVED)
