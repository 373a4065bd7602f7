"""Deprecated alias of interplab.session: its names live in interplab.views now (interplab.moved)."""

from interplab.moved import moved

_HOMES = {
    "PROB_DIGITS": "interplab.views.logits",
    "PatchSession": "interplab.views.patching",
    "TOP_K": "interplab.views.logits",
    "attention_view": "interplab.views.attention",
    "circuit_view": "interplab.views.circuit",
    "dla_view": "interplab.views.dla",
    "edge_exact": "interplab.views.circuit",
    "edge_graph": "interplab.views.circuit",
    "lens_view": "interplab.views.lens",
    "node_exact": "interplab.views.circuit",
    "path_strongest": "interplab.views.paths",
    "path_view": "interplab.views.paths",
    "steering_generate": "interplab.views.steering",
    "steering_preview": "interplab.views.steering",
    "steering_vector": "interplab.views.steering",
    "top_k": "interplab.views.logits",
    "top_k_probs": "interplab.views.logits",
}

__getattr__, __dir__ = moved(__name__, _HOMES)
