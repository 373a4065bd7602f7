"""ValueBars: signed numbers as labelled horizontal bars around zero (a DLA's MLP and embedding parts at a position,
a sender's effect through each receiver). No requests: it shows what Python sets.

Traits:
    labels       list[str]            one per bar
    values       list[float | None]   one per bar (None: not computed, no bar); NaN/inf become None
    title, metric_name   str
"""

from __future__ import annotations

import traitlets as t

from ..widgets.base import Converted, Labels, LabWidget, plain_grid

__all__ = ["ValueBars"]


def _numbers(v) -> list[float | None]:
    return plain_grid([v if v is not None else []])[0]


class ValueBars(LabWidget):
    _view_kind = t.Unicode("values").tag(sync=True)
    REQUESTS: dict = {}

    labels = Labels().tag(sync=True)
    values = Converted(_numbers, "a list of numbers (None = missing)", default_value=[]).tag(sync=True)
    title = t.Unicode("").tag(sync=True)
    metric_name = t.Unicode("").tag(sync=True)
