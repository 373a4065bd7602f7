"""interplab widgets: thin anywidget views (synced traits + validated messages + Python callbacks).

They never import torch or the controller; ``interplab.lab`` sets their traits and registers callbacks.
All of them render from one bundled ESM, ``interplab/static/widgets.js`` (plotly included, works offline).
"""

from .base import LabWidget, MessageError
from .heatmap import PatchingHeatmap

__all__ = ["LabWidget", "MessageError", "PatchingHeatmap"]
