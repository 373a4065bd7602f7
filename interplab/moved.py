"""Names that moved: a module whose names went elsewhere answers them for one release, with a DeprecationWarning.

    __getattr__, __dir__ = moved(__name__, {"PatchSession": "interplab.views.patching"})

The new home is imported by name when an old name is first read (the old module depends on nothing, so it sits in no
layer above its new home).
"""

from __future__ import annotations

import importlib
import warnings


def moved(old: str, homes: dict[str, str]):
    """(module __getattr__, module __dir__) for module `old`, whose names now live in homes[name]."""

    def __getattr__(name: str):  # noqa: N807 (a module's __getattr__, PEP 562)
        where = homes.get(name)
        if where is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(f"{old}.{name} moved to {where}.{name}; this alias goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), name)

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(homes)

    return __getattr__, __dir__
