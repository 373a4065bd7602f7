"""How a result reaches its view without importing upward: each view module registers the result class it shows.

    display.register(SweepResult, heatmap_for)   # interplab.views.patching, when it is imported
    display.view(result, lab=lab)                # SweepResult.show(): the viewer's widget, or None
"""

from __future__ import annotations

from collections.abc import Callable

_VIEWERS: dict[type, Callable] = {}


def register(result_type: type, viewer: Callable) -> None:
    """viewer(result, **kw) -> the widget that shows a result of this class (or of a subclass)."""
    _VIEWERS[result_type] = viewer


def view(result, **kw):
    """The widget for `result` from the viewer registered for its class, or None when none is (no views loaded)."""
    viewer = next((_VIEWERS[c] for c in type(result).__mro__ if c in _VIEWERS), None)
    return None if viewer is None else viewer(result, **kw)
