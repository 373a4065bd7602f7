"""Part: what lets a widget live inside a Composite (widgets/composite.py) without a comm of its own.

An ipywidgets Widget opens a comm when it is built and sends its whole state down it. A widget built with
``part=True`` does not: a Composite that adopts it carries its state (as the composite's ``<part>.<trait>`` traits)
and its messages (tagged ``part``), so a view in a dashboard costs no second comm, no second copy of its state in
the notebook's stored widget state, and no second copy of the bundle (``_esm``). Its Python API stays what it was:
set a trait and the composite's view follows; `send` reaches the composite's view; requests reach its callbacks.

A part displayed on its own after all (``display(explorer.heatmap)``) opens its comm then and is a widget like any
other, still followed by the composites that hold it.

Kept apart from base.py so that the base class only mixes it in.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Part"]


class Part:
    """Mixin for LabWidget: ``part=True`` defers the comm; every state update and custom message is also relayed to
    the composites holding the widget (``_hosts``: (composite, the name it gave this part))."""

    def __init__(self, *args: Any, part: bool = False, **kwargs: Any):
        self._hosts: list[tuple[Any, str]] = []
        self._comm_deferred = bool(part)
        super().__init__(*args, **kwargs)

    @property
    def is_part(self) -> bool:
        """True while the widget has no comm of its own and its state travels in composites."""
        return self.comm is None and self._comm_deferred

    def open(self) -> None:
        if getattr(self, "_comm_deferred", False):
            return  # a part: the composite that adopts it opens the one comm
        super().open()

    def _repr_mimebundle_(self, **kwargs: Any):
        if self.comm is None and self._comm_deferred:  # shown on its own after all: it gets its comm now
            self._comm_deferred = False
            self.open()
        return super()._repr_mimebundle_(**kwargs)

    def notify_change(self, change) -> None:
        # ipywidgets sends a changed trait only down the widget's own comm; a part has none, so the change goes to
        # its composites here (batched like ipywidgets' own: inside hold_sync it waits for the end of the block)
        name = change["name"]
        if self._hosts and self.comm is None and name in self.keys \
                and self._should_send_property(name, getattr(self, name)):
            self.send_state(key=name)
        super().notify_change(change)

    def _send(self, msg: dict, buffers=None) -> None:
        for host, name in list(self._hosts):
            host._relay(name, msg, buffers)
        super()._send(msg, buffers)  # its own comm, when it was displayed on its own
