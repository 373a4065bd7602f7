"""A memo of results that cannot go stale: its key holds everything besides the inputs that decides a forward.

That is every parameter and buffer (which tensor, its storage, its in-place version counter, dtype and device), the
hooks on every module and the global ones (a user's own, or bound edits), each module's train/eval mode and the
attention implementation. A fine-tuning step, `load_state_dict`, `with torch.no_grad(): w.zero_()`, a new hook or
`model.train()` all change the key, so the next lookup computes afresh.

One hole, PyTorch's own: an in-place write through `.data` (`w.data.zero_()`) bumps no version counter, so it
cannot be seen without reading every weight. Call `lab.engine.clear_memo()` after such a write. Weights offloaded by a
device_map (accelerate) sit in the module as "meta" placeholders that accelerate replaces at every forward: the key
holds only their dtype and shape, so a write to the offloaded copy (its weights map, the offload folder) needs
`lab.engine.clear_memo()` too.

The memo is bounded in bytes, on the host and on each device separately: an entry is sized by the storages of the
tensors it holds (a Run's logits and cache, a key/value cache), per device; the oldest entries (least recently
used) go first until every device is within its budget, and a result bigger than its device's budget is returned
to the caller but not kept. The default budget per device is a share of the memory free when the device is first
used, with a ceiling (MEMO_SHARE, MEMO_CAP); `memo_budget=` (Engine, Lab, Lab.load) sets it: bytes for every device,
or {device: bytes} ("cpu", "cuda", "cuda:1"; a type covers its indices).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Hashable
from itertools import chain

import torch
from torch import nn
from torch.nn.modules import module as _torch_module

from ..errors import InterplabError
from .resume import free_memory


def model_state(model: nn.Module) -> tuple:
    """A hashable summary of what, besides its inputs, decides the model's output (see the module docstring).

    One walk over the module tree by hand: model.parameters() de-duplicates through a set and costs twice as
    much, and this runs before every lab.run (about 0.4 ms on GPT-2 small; benchmarks/bench_memo.py)."""
    tensors, modules = [], []
    stack = [model]
    while stack:
        m = stack.pop()
        for t in chain(m._parameters.values(), m._buffers.values()):
            if t is None:
                continue
            if t.is_meta:  # offloaded (a device_map): a new placeholder after every forward, the weight elsewhere
                tensors.append(("meta", t.dtype, tuple(t.shape)))
            else:
                tensors.append((id(t), t.data_ptr(), t._version, t.dtype, t.device))
        if m.training or m._forward_pre_hooks or m._forward_hooks:
            modules.append((id(m), m.training, tuple(m._forward_pre_hooks), tuple(m._forward_hooks)))
        stack.extend(c for c in m._modules.values() if c is not None)
    global_hooks = (tuple(_torch_module._global_forward_pre_hooks), tuple(_torch_module._global_forward_hooks))
    attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return tuple(tensors), tuple(modules), global_hooks, attn


MEMO_SHARE = 8  # the default budget is at most 1/MEMO_SHARE of a device's free memory when first used ...
MEMO_CAP = {"cpu": 512 * 2**20, "cuda": 4 * 2**30}  # ... and at most this (other device types: the CPU's)


def default_memo_budget(device) -> int:
    """Bytes the memo may hold on `device` when no memo_budget is given (see MEMO_SHARE, MEMO_CAP)."""
    device = torch.device(device)
    cap = MEMO_CAP.get(device.type, MEMO_CAP["cpu"])
    free = free_memory(device)
    return cap if free is None else max(0, min(cap, free // MEMO_SHARE))


def tensor_bytes(value) -> dict[str, int]:
    """{device: bytes} of the tensors `value` holds (in tensors, lists, tuples, dicts, dataclasses, and objects'
    attributes such as a transformers key/value cache), each storage counted once, at its full size: a view keeps
    its whole storage alive."""
    out: dict[str, int] = {}
    seen_storages: set = set()
    seen_objects: set = set()

    def walk(v, depth: int) -> None:
        if isinstance(v, torch.Tensor):
            if v.is_meta:
                return
            storage = v.untyped_storage()
            key = (str(v.device), storage.data_ptr())
            if key not in seen_storages:
                seen_storages.add(key)
                out[str(v.device)] = out.get(str(v.device), 0) + storage.nbytes()
            return
        if depth > 6 or v is None or isinstance(v, (str, bytes, int, float, bool, torch.dtype, torch.device)) \
                or id(v) in seen_objects:
            return
        seen_objects.add(id(v))
        if isinstance(v, dict):
            items = v.values()
        elif isinstance(v, (list, tuple, set, frozenset)):
            items = v
        elif dataclasses.is_dataclass(v):
            items = [getattr(v, f.name) for f in dataclasses.fields(v)]
        elif hasattr(v, "__dict__") and not isinstance(v, (nn.Module, type)):
            items = vars(v).values()
        else:
            return
        for item in items:
            walk(item, depth + 1)

    walk(value, 0)
    return out


class Memo:
    """An LRU of results keyed by (what was asked, the model's state), bounded in entries and in bytes per device;
    safe to use from several threads.

    budget: None (a default per device: default_memo_budget), bytes for every device, or {device: bytes} where a
    device is "cpu", "cuda", "cuda:1"... (a type covers its indices; a device not named gets the default)."""

    def __init__(self, model: nn.Module, size: int = 64, budget=None):
        self.model = model
        self.size = size
        self._budget = _check_budget(budget)
        self._budgets: dict[str, int] = {}  # device -> bytes, resolved on first use
        self._items: OrderedDict = OrderedDict()  # key -> (value, {device: bytes})
        self._held: dict[str, int] = {}  # device -> bytes held now
        self._lock = threading.Lock()

    def key(self, request: Hashable) -> tuple:
        """The full key for `request` under the model's current state (compute it before the run)."""
        return request, model_state(self.model)

    def budget(self, device) -> int:
        """The bytes this memo may hold on `device`."""
        device = str(torch.device(device))
        if device not in self._budgets:
            b = self._budget
            if isinstance(b, dict):
                b = b.get(device, b.get(torch.device(device).type))
            self._budgets[device] = default_memo_budget(device) if b is None else int(b)
        return self._budgets[device]

    def held(self) -> dict[str, int]:
        """{device: bytes} held now."""
        with self._lock:
            return {d: n for d, n in self._held.items() if n}

    def get(self, key: tuple):
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key][0]

    def put(self, key: tuple, value) -> bool:
        """Keep `value` under `key`, dropping the oldest entries to stay within the budgets; a value bigger than a
        device's whole budget is not kept (False)."""
        sizes = tensor_bytes(value)
        budgets = {d: self.budget(d) for d in sizes}
        if any(n > budgets[d] for d, n in sizes.items()):
            with self._lock:
                self._drop(key)
            return False
        with self._lock:
            self._drop(key)
            self._items[key] = (value, sizes)
            for d, n in sizes.items():
                self._held[d] = self._held.get(d, 0) + n
            while len(self._items) > self.size or any(self._held.get(d, 0) > budgets[d] for d in budgets):
                self._drop(next(iter(self._items)))
        return True

    def _drop(self, key) -> None:
        if key in self._items:
            _, sizes = self._items.pop(key)
            for d, n in sizes.items():
                self._held[d] -= n

    def requests(self) -> list:
        """What is held, oldest first (the request part of each key), for inspection."""
        with self._lock:
            return [request for request, _ in self._items]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._held.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key) -> bool:
        return key in self._items


def _check_budget(budget):
    def bad():
        return InterplabError(f"memo_budget={budget!r}: give bytes (an int >= 0, e.g. 2**30 for 1 GiB) for every "
                              f"device, a dict {{device: bytes}} such as {{'cpu': 2**30, 'cuda': 8 * 2**30}}, or "
                              f"None for the default (1/{MEMO_SHARE} of free memory, at most "
                              f"{MEMO_CAP['cpu'] >> 20} MiB on the host and {MEMO_CAP['cuda'] >> 30} GiB per GPU).")
    if budget is None:
        return None
    items = budget.items() if isinstance(budget, dict) else [(None, budget)]
    for device, b in items:
        if isinstance(b, bool) or not isinstance(b, int) or b < 0:
            raise bad()
        if device is not None:
            try:
                torch.device(device)
            except (RuntimeError, TypeError):
                raise bad() from None
    return dict(budget) if isinstance(budget, dict) else budget
