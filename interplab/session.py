"""Deprecated: interplab.session (every view's numbers) moved to interplab.views
(one module per view: what it shows and its wiring). The old
names answer here, with a DeprecationWarning, for one release."""

import importlib
import warnings

_MOVED = {
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


def __getattr__(name: str):
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module 'interplab.session' has no attribute {name!r}")
    warnings.warn(f"interplab.session.{name} moved to {where}.{name}; this alias goes in the next release",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(where), name)


def __dir__() -> list[str]:
    return sorted(_MOVED)
