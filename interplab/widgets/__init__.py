"""interplab widgets: the anywidget machinery every view shares, torch-free.

base.py: LabWidget (synced traits, requests validated against their declaration, one reply each, callbacks) and the
shared widget code; composite.py / parts.py: one anywidget that shows several views. The views themselves (each one's
widget class, numbers and wiring) are in interplab.views.
"""

from .base import LabWidget, MessageError

__all__ = ["LabWidget", "MessageError"]
