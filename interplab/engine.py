"""How: hooks that are always removed, and a forward runner that applies edits and fills a cache.

The HookManager owns every hook interplab attaches. It removes exactly those - never the user's own hooks - when
its block exits, whether by success, an exception or KeyboardInterrupt. Runs happen under torch.no_grad unless a
gradient is asked for, and no edit writes into a parameter or into the tensor a module returned: a run never
changes a weight.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from .edits import ApplyContext, Edit, apply_edit
from .errors import UnsupportedSiteError
from .sites import READ_ONLY, HookPoint, Site

_LIVE: weakref.WeakSet[HookManager] = weakref.WeakSet()


class HookManager:
    """Attach hooks for one block of work; `with HookManager(model) as hm:` removes them all on exit."""

    def __init__(self, model: nn.Module, owner: str = "interplab"):
        self.model = model
        self.owner = owner
        self._handles: list[tuple[str, str, torch.utils.hooks.RemovableHandle]] = []
        _LIVE.add(self)

    def add(self, point: HookPoint, fn: Callable) -> None:
        module = self.model.get_submodule(point.module)
        if point.io == "input":
            handle = module.register_forward_pre_hook(fn, with_kwargs=True)
        else:
            handle = module.register_forward_hook(fn)
        self._handles.append((point.module, point.io, handle))

    def attached(self) -> list[dict]:
        return [{"module": m, "io": io, "owner": self.owner} for m, io, _ in self._handles]

    def remove_all(self) -> None:
        while self._handles:
            _, _, handle = self._handles.pop()
            handle.remove()

    def __enter__(self) -> HookManager:
        return self

    def __exit__(self, *exc) -> None:
        self.remove_all()  # runs on KeyboardInterrupt too: `with` exits through BaseException


def attached_hooks() -> list[dict]:
    """Every hook interplab holds right now, across all managers (empty between runs)."""
    return [h for hm in list(_LIVE) for h in hm.attached()]


@dataclass
class PlannedEdit:
    """An edit bound to one resolved site and layer, with its patch/mean source value if it has one."""

    edit: Edit
    site: Site
    source: torch.Tensor | None = None


@dataclass
class Plan:
    """Everything one forward needs: edits in program order and the sites to record."""

    edits: list[PlannedEdit] = field(default_factory=list)
    cache: list[tuple[object, Site]] = field(default_factory=list)  # (key, site)
    keep_grad: bool = False


def _get(container, index: int):
    if isinstance(container, torch.Tensor):
        if index != 0:
            raise UnsupportedSiteError("this module returned a single tensor where a tuple element was expected.")
        return container
    return container[index]


def _put(container, index: int, value):
    if isinstance(container, torch.Tensor):
        return value
    items = list(container)
    items[index] = value
    return tuple(items)


def _input_tensor(args, kwargs):
    if args and isinstance(args[0], torch.Tensor):
        return "arg", args[0]
    for key in ("hidden_states", "input", "x"):
        if isinstance(kwargs.get(key), torch.Tensor):
            return key, kwargs[key]
    raise UnsupportedSiteError("could not find the input tensor of this module (no positional tensor argument).")


def install(hm: HookManager, plan: Plan, ctx_for: Callable[[PlannedEdit | None], ApplyContext], out_cache: dict):
    """Attach one hook per hook point that applies the planned edits, then records the cached sites."""
    by_point: dict[HookPoint, list] = defaultdict(list)
    for pe in plan.edits:
        if not pe.edit.enabled:
            continue
        if pe.site.name in READ_ONLY:
            raise UnsupportedSiteError(
                f"site {pe.site.name!r} is read-only: attention weights are returned after they are used, so an "
                f"edit there would change nothing. Edit 'z' (per-head outputs) to change what a head writes."
            )
        by_point[pe.site.point].append(("edit", pe))
    for key, site in plan.cache:
        by_point[site.point].append(("cache", (key, site)))

    for point, ops in by_point.items():
        hm.add(point, _make_hook(point, ops, ctx_for, out_cache, plan.keep_grad))


def _make_hook(point: HookPoint, ops: list, ctx_for, out_cache: dict, keep_grad: bool):
    # Groups ops by tuple element, so one hook serves e.g. attn_out (element 0) and pattern (element 1).
    def transform(index: int, t: torch.Tensor) -> torch.Tensor:
        for kind, item in ops:
            if kind == "edit" and item.site.point.index == index:
                t = apply_edit(item.edit, t, ctx_for(item))
            elif kind == "cache" and item[1].point.index == index:
                if keep_grad:
                    t = t if t.requires_grad else t.requires_grad_(True)
                    t.retain_grad()
                    out_cache[item[0]] = t
                else:
                    out_cache[item[0]] = t.detach().clone()
        return t

    indices = sorted({(item.site.point.index if kind == "edit" else item[1].point.index) for kind, item in ops})

    if point.io == "output":
        def hook(module, args, output):
            for i in indices:
                output = _put(output, i, transform(i, _get(output, i)))
            return output
    else:
        def hook(module, args, kwargs):
            where, t = _input_tensor(args, kwargs)
            t = transform(0, t)
            if where == "arg":
                return (t, *args[1:]), kwargs
            return args, {**kwargs, where: t}
    return hook


_RUN_LOCK = threading.RLock()  # hooks live on the shared model: one forward at a time


def forward(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, plan: Plan,
            ctx_for: Callable[[PlannedEdit | None], ApplyContext], grad: bool = False,
            owner: str = "interplab.run") -> tuple[torch.Tensor, dict]:
    """One forward of the full model with the plan's hooks attached; returns (logits, cache)."""
    cache: dict = {}
    with _RUN_LOCK, HookManager(model, owner) as hm:
        install(hm, plan, ctx_for, cache)
        with torch.set_grad_enabled(grad):
            out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return out.logits, cache
