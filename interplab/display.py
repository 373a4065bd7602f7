"""How a result reaches its widget without importing upward: widgets register a viewer here by kind.

    display.register("sweep", heatmap_for)      # interplab.views.patching, when it is imported
    display.view("sweep", result, lab=lab)      # SweepResult.show(): the viewer's widget, or None
"""

from __future__ import annotations

from collections.abc import Callable

_VIEWERS: dict[str, Callable] = {}


def register(kind: str, viewer: Callable) -> None:
    _VIEWERS[kind] = viewer


def view(kind: str, obj, **kw):
    """The widget for obj from the viewer registered for `kind`, or None when none is (no widgets installed)."""
    viewer = _VIEWERS.get(kind)
    return None if viewer is None else viewer(obj, **kw)
