"""interplab widgets: thin anywidget views (synced traits + validated messages + Python callbacks).

They never import torch or the controller; ``interplab.lab`` sets their traits and registers callbacks.
All of them render from one bundled ESM, ``interplab/static/widgets.js`` (plotly included, works offline).
"""

from .attention import AttentionView
from .base import LabWidget, MessageError
from .circuit import CircuitGraph
from .heatmap import PatchingHeatmap
from .lens import LensView
from .logits import LogitPanel
from .steering import SteeringPanel
from .values import ValueBars

__all__ = ["AttentionView", "CircuitGraph", "LabWidget", "LensView", "LogitPanel", "MessageError", "PatchingHeatmap",
           "SteeringPanel", "ValueBars"]
