"""Deprecated: interplab.widgets.lens moved to interplab.views
(one module per view: what it shows and its wiring). The old
names answer here, with a DeprecationWarning, for one release."""

import importlib
import warnings

_MOVED = {
    "LensView": "interplab.views.lens",
}


def __getattr__(name: str):
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module 'interplab.widgets.lens' has no attribute {name!r}")
    warnings.warn(f"interplab.widgets.lens.{name} moved to {where}.{name}; this alias goes in the next release",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(where), name)


def __dir__() -> list[str]:
    return sorted(_MOVED)
