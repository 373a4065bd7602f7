"""Composite: one anywidget that shows several views ("parts"), e.g. the heatmap and its logit panel, or the dashboard.

Every frontend (JupyterLab, Notebook 7, VS Code, marimo) hosts an anywidget; marimo hosts nothing else (an
ipywidgets box fails there with "No ESM spec"). So each view the lab gives users is one anywidget, and a view made
of several is this one: one model, one comm, one copy of the bundle.

The parts stay the widgets they are in Python (``explorer.heatmap.selected``, ``.on_click``, ``hold_sync``), built
with ``part=True`` so they open no comm (parts.py); the composite carries them:

    state     each part's declared traits (its class's synced traits, plus the common ones) are the composite's traits
              ``<part>.<trait>`` (``heatmap.selected``); a part's trait change is relayed as an update of those
    messages  kernel -> frontend: a part's custom messages (replies, "cells") get a ``part`` field naming it;
              frontend -> kernel: a request carries ``part``; the composite checks it names one of its parts and hands
              the rest of the message to that part, which validates it against its own view's declaration and
              replies as ever (its reply goes back tagged with ``part``)
    layout    ``parts``: [{name, kind}]; ``panes``: [{part: name} | {row: [name, ...]} | {tabs: [{title, part}, ...]}],
              drawn top to bottom (a row's parts side by side)
              (tabs are switched in the page: which tab is open is no kernel state)

The frontend (js/src/composite.js) renders each part with its own view module on an adapter of the one model that
maps get/on/off/send to the prefixed traits and the ``part`` field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import traitlets as t

from .base import VIEW_CLASSES, Choice, LabWidget, MessageError, view_traits

__all__ = ["Composite"]

_NAME = re.compile(r"[a-z][a-z0-9_]*")


def mirrored_traits(kind: str) -> list[str]:
    """The traits of a `kind` view a composite carries: its declared ones and the common ones."""
    return view_traits(kind)


class Composite(LabWidget):
    """Several LabWidgets shown as one anywidget. `parts`: {name: widget} (built with ``part=True``; a widget that
    already has its comm works too, it then also keeps its own); `panes`: how they are laid out (default: one under
    the other)."""

    _view_kind = t.Unicode("composite").tag(sync=True)
    REQUESTS: dict = {}
    parts = t.List().tag(sync=True)
    panes = t.List().tag(sync=True)

    def __init__(self, parts: Mapping[str, LabWidget] | None = None,
                 panes: Sequence[Mapping[str, Any]] | None = None, **kwargs: Any):
        parts = parts or {}
        self._parts: dict[str, LabWidget] = {}
        self._keys: dict[str, frozenset[str]] = {}
        for name, widget in parts.items():
            if not (isinstance(name, str) and _NAME.fullmatch(name)):
                raise ValueError(f"a part's name must be lower-case letters, digits and _, got {name!r}")
            if not isinstance(widget, LabWidget) or isinstance(widget, Composite):
                raise TypeError(f"part {name!r}: expected a LabWidget view (not a composite), "
                                f"got {type(widget).__name__}")
            kind = widget._view_kind
            if kind not in VIEW_CLASSES:
                raise ValueError(f"part {name!r}: no view class declares the {kind!r} view")
            self._parts[name] = widget
            self._keys[name] = frozenset(mirrored_traits(kind))
        panes = [dict(p) for p in (panes if panes is not None else [{"part": n} for n in self._parts])]
        shown = [p["part"] for p in panes if "part" in p] + [tab["part"] for p in panes for tab in p.get("tabs", ())]
        shown += [name for p in panes for name in p.get("row", ())]
        unknown = sorted(set(shown) - set(self._parts))
        if unknown:
            raise ValueError(f"panes name unknown part(s) {unknown} (parts: {sorted(self._parts)})")
        kwargs["parts"] = [{"name": n, "kind": w._view_kind} for n, w in self._parts.items()]
        kwargs["panes"] = panes
        # adopted before the comm opens: a change from another thread while it opens is relayed, not lost
        for name, widget in self._parts.items():
            widget._hosts.append((self, name))
        super().__init__(**kwargs)

    # -- state: the parts' traits as "<part>.<trait>" --------------------------------------------------------------
    def part(self, name: str) -> LabWidget:
        return self._parts[name]

    def get_state(self, key=None, drop_defaults: bool = False) -> dict[str, Any]:
        if key is None:
            state = super().get_state(None, drop_defaults)
            for name, widget in self._parts.items():
                for k, v in widget.get_state(sorted(self._keys[name]), drop_defaults).items():
                    state[f"{name}.{k}"] = v
            return state
        keys = [key] if isinstance(key, str) else list(key)
        state = super().get_state([k for k in keys if "." not in k], drop_defaults)
        for k in keys:
            name, _, sub = k.partition(".")
            if sub and name in self._parts and sub in self._keys[name]:
                state[k] = self._parts[name].get_state(sub)[sub]
        return state

    def _relay(self, name: str, msg: Mapping[str, Any], buffers=None) -> None:
        """A part's outgoing message, as this composite's: updates with prefixed trait names (only the traits the
        view declares), custom messages tagged with the part's name."""
        if self.comm is None and not getattr(self, "_hosts", None):
            # not shown (a composite held by another one), or still being built (a part it shares with another
            # composite changed meanwhile, from the worker): nothing to send
            return
        method = msg.get("method")
        if method == "update":
            keep = self._keys[name]
            state = {f"{name}.{k}": v for k, v in msg.get("state", {}).items() if k in keep}
            if not state:
                return
            paths, bufs = [], []
            for path, buf in zip(msg.get("buffer_paths", []), buffers or []):
                if path and path[0] in keep:
                    paths.append([f"{name}.{path[0]}", *path[1:]])
                    bufs.append(buf)
            self._send({"method": "update", "state": state, "buffer_paths": paths}, buffers=bufs)
        elif method == "custom":
            content = msg.get("content")
            if isinstance(content, Mapping):
                self._send({"method": "custom", "content": {**content, "part": name}}, buffers=buffers)

    # -- requests: routed to the part they name ---------------------------------------------------------------------
    def _on_frontend_msg(self, widget: Any, content: Any, buffers: Any = None) -> None:
        if isinstance(content, Mapping) and isinstance(content.get("part"), str) and content["part"] in self._parts:
            part = self._parts[content["part"]]
            part._on_frontend_msg(part, {k: v for k, v in content.items() if k != "part"}, buffers)
            return
        super()._on_frontend_msg(widget, content, buffers)  # a bad message: answered with its error

    def _validate(self, msg: Any) -> tuple[str, dict[str, Any]]:
        if isinstance(msg, Mapping):
            if "part" not in msg:
                raise MessageError("a composite's request names its part: 'part' is missing "
                                   f"(parts: {', '.join(repr(n) for n in self._parts)})")
            Choice(self._parts).check("part", msg["part"])
        return super()._validate(msg)

    def close(self) -> None:
        for name, widget in getattr(self, "_parts", {}).items():  # (also called by __del__ of a failed __init__)
            if (self, name) in widget._hosts:
                widget._hosts.remove((self, name))
        super().close()
