"""A memo of results that cannot go stale: its key holds everything besides the inputs that decides a forward.

That is every parameter and buffer (which tensor, its storage, its in-place version counter, dtype and device), the
hooks on every module and the global ones (a user's own, or bound edits), each module's train/eval mode and the
attention implementation. A fine-tuning step, `load_state_dict`, `with torch.no_grad(): w.zero_()`, a new hook or
`model.train()` all change the key, so the next lookup computes afresh.

One hole, PyTorch's own: an in-place write through `.data` (`w.data.zero_()`) bumps no version counter, so it
cannot be seen without reading every weight. Call `lab.clear_memo()` after such a write. Weights offloaded by a
device_map (accelerate) sit in the module as "meta" placeholders that accelerate replaces at every forward: the key
holds only their dtype and shape, so a write to the offloaded copy (its weights map, the offload folder) needs
`lab.clear_memo()` too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from itertools import chain

from torch import nn
from torch.nn.modules import module as _torch_module


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


class Memo:
    """A small LRU of results keyed by (what was asked, the model's state); safe to use from several threads."""

    def __init__(self, model: nn.Module, size: int = 64):
        self.model = model
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def key(self, request: Hashable) -> tuple:
        """The full key for `request` under the model's current state (compute it before the run)."""
        return request, model_state(self.model)

    def get(self, key: tuple):
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: tuple, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def requests(self) -> list:
        """What is held, oldest first (the request part of each key), for inspection."""
        with self._lock:
            return [request for request, _ in self._items]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key) -> bool:
        return key in self._items
