"""Hooks that are always removed, and the one place that attaches them: edits applied, sites recorded.

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

from ..edits import ApplyContext, Edit, apply_edit
from ..errors import UnsupportedSiteError
from ..sites import PROBES, HookPoint, Layout, Site
from . import attention, frozen

_LIVE: weakref.WeakSet[HookManager] = weakref.WeakSet()


class HookManager:
    """Attach hooks for one block of work; `with HookManager(model) as hm:` removes them all on exit.

    The hooks act only on forwards run by the thread that made the manager: the model is shared, and a view's job
    runs on the worker thread while the user may call lab.model(...) in the notebook; that forward must not see the
    job's edits. every_thread=True: they act on every forward (edits bound to the model until unbound, the serving
    engine's batches, which its own threads may run)."""

    def __init__(self, model: nn.Module, owner: str = "interplab", *, every_thread: bool = False):
        self.model = model
        self.owner = owner
        self._thread = None if every_thread else threading.get_ident()
        self._handles: list[tuple[str, str, torch.utils.hooks.RemovableHandle]] = []
        _LIVE.add(self)

    def add(self, point: HookPoint, fn: Callable, prepend: bool = False) -> None:
        if self._thread is not None:
            fn = _in_thread(fn, self._thread)
        probe = f".{PROBES}." in point.module
        if probe:  # a point inside attention exists only while a hook needs it
            attention.acquire(self.model, point.module)
        try:
            module = self.model.get_submodule(point.module)
            if point.io == "input":
                handle = module.register_forward_pre_hook(fn, with_kwargs=True, prepend=prepend)
            else:
                handle = module.register_forward_hook(fn, prepend=prepend)
        except BaseException:
            if probe:
                attention.release(self.model, point.module)
            raise
        self._handles.append((point.module, point.io, handle))

    def attached(self) -> list[dict]:
        return [{"module": m, "io": io, "owner": self.owner} for m, io, _ in self._handles]

    def remove_all(self) -> None:
        while self._handles:
            module, _, handle = self._handles.pop()
            handle.remove()
            if f".{PROBES}." in module:
                attention.release(self.model, module)

    def __enter__(self) -> HookManager:
        return self

    def __exit__(self, *exc) -> None:
        self.remove_all()  # runs on KeyboardInterrupt too: `with` exits through BaseException


def _in_thread(fn: Callable, thread: int) -> Callable:
    """fn, acting only in `thread`: elsewhere the hook returns None, which leaves the module's input or output as it
    is."""
    def hook(*args, **kwargs):
        return fn(*args, **kwargs) if threading.get_ident() == thread else None
    return hook


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
    frozen_norms: list[str] = field(default_factory=list)  # norm modules whose scale is held at the run's value
    # (mlp_in site, mlp_out site, W or None): the MLP's output keeps its value, its gradient flows only as
    # mlp_in @ W (a replacement model's linear MLP path, e.g. a transcoder's skip term; none where W is None)
    linear_mlps: list[tuple[Site, Site, torch.Tensor | None]] = field(default_factory=list)


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


def with_input(args, kwargs, value: torch.Tensor) -> tuple[tuple, dict]:
    """(args, kwargs) of a forward pre-hook with the module's input tensor replaced by value."""
    where, _ = _input_tensor(args, kwargs)
    if where == "arg":
        return (value, *args[1:]), kwargs
    return args, {**kwargs, where: value}


def _input_tensor(args, kwargs):
    if args and isinstance(args[0], torch.Tensor):
        return "arg", args[0]
    for key in ("hidden_states", "input", "x"):
        if isinstance(kwargs.get(key), torch.Tensor):
            return key, kwargs[key]
    raise UnsupportedSiteError("could not find the input tensor of this module (no positional tensor argument).")


def install(hm: HookManager, plan: Plan, ctx_for: Callable[[PlannedEdit | None], ApplyContext], out_cache: dict):
    """Attach the hooks that apply the planned edits (in program order) and record the cached sites."""
    ops: list[tuple[HookPoint, Callable]] = []
    captured: list[tuple[HookPoint, Callable]] = []
    for site_in, site_out, W in plan.linear_mlps:  # before the edits and recorders at the MLP's output
        slot: dict = {}
        ops.append((site_out.point, lambda t, slot=slot, W=W: _linear_mlp(t, slot, W)))
        if W is not None:  # the input it reads
            captured.append((site_in.point, lambda t, slot=slot: slot.__setitem__("x", t) or t))
    for pe in plan.edits:
        if not pe.edit.enabled:
            continue
        ops.append((pe.site.point, lambda t, pe=pe: apply_edit(pe.edit, t, ctx_for(pe))))
    for key, site in plan.cache:
        heads = site.n_heads if site.name == "pattern" else None
        ops.append((site.point, _recorder(key, out_cache, plan.keep_grad, heads)))
    ops.extend(captured)  # after the input's recorder: the recorded mlp_in is what the linear path reads
    for path in plan.frozen_norms:  # first at its module: the site hooks there see the frozen output
        hm.add(HookPoint(path, "output"), frozen.frozen_norm_hook, prepend=True)
    attach(hm, ops, keep_graph=plan.keep_grad)


def _linear_mlp(t: torch.Tensor, slot: dict, W: torch.Tensor | None) -> torch.Tensor:
    """The MLP's output t in value; in gradient, the linear map x @ W of its input x (captured in slot)."""
    if W is None or not torch.is_grad_enabled():
        return t.detach()
    x = slot.pop("x")
    dx = x - x.detach()  # zero in value; its gradient is the identity
    return t.detach() + dx @ W.to(x.device, x.dtype)


def _recorder(key, out_cache: dict, keep_grad: bool, pattern_heads: int | None = None) -> Callable:
    """Records the site's value. A pattern is recorded as [batch, head, query, key] (TransformerLens's layout),
    while hooks see it as [batch, query, head * key]; with keep_grad the model then computes on from the recorded
    tensor, so that its .grad is the metric's gradient."""
    def record(t: torch.Tensor) -> torch.Tensor:
        if pattern_heads is not None:
            b, q, width = t.shape
            public = t.view(b, q, pattern_heads, width // pattern_heads).transpose(1, 2)
        else:
            public = t
        if not keep_grad:
            out_cache[key] = public.detach().clone()
            return t
        public = public if public.requires_grad else public.requires_grad_(True)
        public = public.view_as(public)  # a tensor of its own, which the model computes on: gradients reach it
        public.retain_grad()
        out_cache[key] = public
        return public.transpose(1, 2).reshape(t.shape) if pattern_heads is not None else public
    return record


def attach(hm: HookManager, ops: list[tuple[HookPoint, Callable]], keep_graph: bool = False) -> None:
    """Attach `fn(tensor) -> tensor` at each hook point, one hook per module input/output, in list order.

    At one module, plain points come before points read as residual + this tensor (resid_mid): that is the order
    of the model's own dataflow (attention's output exists before it is added to the stream). keep_graph: a
    composite point's value is always written back, so that gradients reach what it recorded."""
    groups: dict[tuple[str, str], list[tuple[HookPoint, Callable]]] = defaultdict(list)
    for point, fn in ops:
        groups[point.module, point.io].append((point, fn))
    for (module, io), group in groups.items():
        residual = {}
        bases = {p.plus_input_of for p, _ in group if p.plus_input_of}
        hm.add(HookPoint(module, io), _make_hook(io, group, residual, keep_graph))
        for base in bases:  # the residual entering the sublayer; prepended, so no edit of that module's input leaks
            hm.add(HookPoint(base, "input"), _residual_capture(residual, base), prepend=True)


def _residual_capture(slot: dict, base: str) -> Callable:
    def capture(module, args, kwargs):
        slot[base] = _input_tensor(args, kwargs)[1]
    return capture


def _make_hook(io: str, group: list[tuple[HookPoint, Callable]], residual: dict, keep_graph: bool):
    # Groups ops by tuple element, so one hook serves e.g. attn_out (element 0) and pattern (element 1).
    def transform(index: int, t: torch.Tensor) -> torch.Tensor:
        composite = []
        for point, fn in group:
            if point.index != index:
                continue
            if point.plus_input_of:
                composite.append((point, fn))
            elif point.layout is not None:
                t = _through_layout(point.layout, t, fn)
            else:
                t = fn(t)
        if composite:
            pre = residual[composite[0][0].plus_input_of]
            value = pre + t
            new = value
            for _, fn in composite:
                new = fn(new)
            if keep_graph:  # gradients must reach the recorded value through what the block adds
                t = new - pre
            elif new is not value:  # written back where edited; elsewhere t stays bit for bit
                t = torch.where(new == value, t, new - pre)
        return t

    indices = sorted({point.index for point, _ in group})

    if io == "output":
        def hook(module, args, output):
            for i in indices:
                output = _put(output, i, transform(i, _get(output, i)))
            return output
    else:
        def hook(module, args, kwargs):
            return with_input(args, kwargs, transform(0, _input_tensor(args, kwargs)[1]))
    return hook


def _through_layout(layout: Layout, t: torch.Tensor, fn: Callable) -> torch.Tensor:
    """fn applied to the site's [batch, pos, heads * width] view of t, written back into t's own layout (t itself
    when fn changed nothing)."""
    kind = layout.kind
    if kind == "bthd":
        flat = t.reshape(*t.shape[:2], -1)
        new = fn(flat)
        return t if new is flat else new.view(t.shape)
    if kind == "bhtd":
        b, h, n, w = t.shape
        flat = t.transpose(1, 2).reshape(b, n, h * w)
        new = fn(flat)
        return t if new is flat else new.view(b, n, h, w).transpose(1, 2)
    if kind == "third":  # [.., q | k | v]
        parts = list(t.chunk(3, dim=-1))
        new = fn(parts[layout.part])
        if new is parts[layout.part]:
            return t
        parts[layout.part] = new
        return torch.cat(parts, dim=-1)
    if kind == "head_third":  # [.., head, (q | k | v) of that head]
        grid = t.view(*t.shape[:-1], layout.n_heads, 3, -1)
        parts = list(grid.unbind(-2))
        flat = parts[layout.part].reshape(*t.shape[:-1], -1)
        new = fn(flat)
        if new is flat:
            return t
        parts[layout.part] = new.view(parts[layout.part].shape)
        return torch.stack(parts, dim=-2).view(t.shape)
    raise AssertionError(kind)


run_lock = threading.RLock()  # hooks live on the shared model: one forward at a time


class _Enough(Exception):
    """Raised inside a forward once every site asked for is recorded: the rest of the model is not needed."""


def read(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, plan: Plan,
         ctx_for: Callable[[PlannedEdit | None], ApplyContext], owner: str = "interplab.read") -> dict:
    """The plan's cached sites (detached, on the model's device) from a forward that stops as soon as the last of
    them is recorded: no logits, nothing kept but the sites (what scanning many prompts needs)."""
    cache: dict = {}
    wanted = len(plan.cache)

    def enough(t: torch.Tensor) -> torch.Tensor:
        if len(cache) >= wanted:
            raise _Enough
        return t

    with run_lock, HookManager(model, owner) as hm:
        install(hm, plan, ctx_for, cache)
        attach(hm, [(site.point, enough) for _, site in plan.cache])  # after each recorder at its module
        try:
            with torch.no_grad():
                model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        except _Enough:
            pass
    return cache


def forward(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, plan: Plan,
            ctx_for: Callable[[PlannedEdit | None], ApplyContext], grad: bool = False,
            owner: str = "interplab.run") -> tuple[torch.Tensor, dict]:
    """One forward of the full model with the plan's hooks attached; returns (logits, cache)."""
    cache: dict = {}
    with run_lock, HookManager(model, owner) as hm:
        install(hm, plan, ctx_for, cache)
        with torch.set_grad_enabled(grad):
            out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return out.logits, cache
