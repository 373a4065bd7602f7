"""Deprecated alias of interplab.widgets.controller: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
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

__getattr__, __dir__ = moved(__name__, _HOMES)
