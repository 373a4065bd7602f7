"""Forwards that start part-way: from a cached residual at some layer, and from cached keys/values at some position.

A patch at (layer L, position p) changes nothing below layer L, nor at positions before p. So a patched forward can
feed the unedited run's residual into layer L (the layers below are skipped) and reuse the unedited run's keys and
values for positions < p (only positions p.. are computed). Only the final position is unembedded. The cached keys
and values are shared by every row of a batch, never copied per row. Chunks of such forwards are sized to a memory
budget (row_bytes, default_budget) and halve on out-of-memory.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence

import torch
from torch import nn
from transformers.cache_utils import DynamicLayer

from ..sites import Arch, HookPoint
from .hooks import HookManager, attach, run_lock, with_input


def start_at(hm: HookManager, model: nn.Module, arch: Arch, layer: int, hidden: torch.Tensor) -> nn.Module:
    """A view of the model's base that skips layers < `layer` and feeds `hidden` into layer `layer` (or, at
    n_layers, into the final norm): call it like model.base_model. The model itself is not changed, so another
    caller running it meanwhile sees every layer: the view is a shallow copy holding the later layers (the same
    modules, weights and hooks) and a copy of the config whose per-layer lists start at `layer`."""
    base = model.base_model
    attr = arch.layers.rpartition(".")[2]
    layers = getattr(base, attr)
    view = copy.copy(base)
    view.__dict__["_modules"] = {**base._modules, attr: nn.ModuleList(list(layers)[layer:])}
    cfg = copy.copy(base.config)
    if isinstance(getattr(cfg, "layer_types", None), list):  # the model's loop reads these by loop position
        cfg.layer_types = cfg.layer_types[layer:]
    view.__dict__["config"] = cfg
    target = f"{arch.layers}.{layer}" if layer < len(layers) else arch.final_norm
    # prepended: the fed residual is what every edit of this layer's input sees
    hm.add(HookPoint(target, "input"), lambda module, args, kwargs: with_input(args, kwargs, hidden), prepend=True)
    return _dispatched(view, base)


def _dispatched(view: nn.Module, base: nn.Module) -> nn.Module:
    """The view, run through the accelerate hook of a base that a device_map placed as one block (the hook is an
    instance `forward` bound to the base, which the shallow copy would call: every layer). Where that hook offloads,
    it loads weights by their names under the module, which in the view name other layers: there the base itself
    runs, every layer (the result is the same: the fed residual replaces layer `layer`'s input; nothing is saved)."""
    hook = base.__dict__.get("_hf_hook")
    if hook is None or "forward" not in base.__dict__:
        return view
    if getattr(hook, "offload", False):
        return base
    own = type(base).forward.__get__(view)

    def forward(*args, **kwargs):
        args, kwargs = hook.pre_forward(view, *args, **kwargs)
        return hook.post_forward(view, own(*args, **kwargs))

    view.__dict__["forward"] = forward
    return view


def final_logits(model: nn.Module, hidden: torch.Tensor, last_idx: torch.Tensor) -> torch.Tensor:
    """[rows, vocab] logits of the final-normed hidden states at one position per row (Gemma 2's soft-cap too)."""
    h = hidden[torch.arange(hidden.shape[0], device=hidden.device), last_idx.to(hidden.device)]
    logits = model.get_output_embeddings()(h)
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def resumed_last_logits(model: nn.Module, arch: Arch, start: int, hidden: torch.Tensor, ids: torch.Tensor,
                        mask: torch.Tensor, last_idx: torch.Tensor, ops: Sequence[tuple] = (),
                        install: Callable[[HookManager], None] | None = None, owner: str = "interplab.resume",
                        **forward_kw) -> torch.Tensor:
    """Final-position logits of a forward that starts at layer `start` from `hidden` [rows, pos, d].

    ops: (HookPoint, fn(tensor) -> tensor) pairs for this forward (e.g. a per-row patch in layer `start`);
    install(hm): attaches planned edits instead (engine.hooks.install). forward_kw: e.g. position_ids and a
    key/value cache when `hidden` holds only the later positions."""
    forward_kw.setdefault("use_cache", False)
    with run_lock, HookManager(model, owner) as hm:
        attach(hm, list(ops))
        if install is not None:
            install(hm)
        out = start_at(hm, model, arch, start, hidden)(input_ids=ids, attention_mask=mask, **forward_kw)
    return final_logits(model, out.last_hidden_state, last_idx)


def key_values(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[str, object] | None:
    """(keyword, cache) of an unedited forward's keys/values, or None where the cache cannot be cropped to a prefix
    (sliding windows). The keyword is the one the model's forward takes ('cache' or 'past_key_values')."""
    with torch.no_grad(), run_lock:
        out = model.base_model(input_ids=ids, attention_mask=mask, use_cache=True)
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    name = "cache" if "cache" in inspect.signature(model.base_model.forward).parameters else "past_key_values"
    sliding = getattr(cache, "is_sliding", False)
    sliding = any(sliding) if isinstance(sliding, (list, tuple)) else bool(sliding)
    ok = cache is not None and getattr(cache, "is_croppable", True) and not sliding and hasattr(cache, "crop")
    return (name, cache) if ok else None


def prefix(entry: tuple[str, object], first: int, n_rows: int, repeats: int, device) -> dict:
    """{keyword: a cache holding the first `first` positions of `entry`'s keys/values, for a batch of `repeats`
    copies of its `n_rows` prompts}: the prefix is shared by every copy (see SharedPrefixLayer); caches of other
    layer kinds are copied, cropped and tiled."""
    name, cache = entry
    layers = getattr(cache, "layers", None)
    if layers and all(type(layer) is DynamicLayer and layer.is_initialized for layer in layers) \
            and not getattr(cache, "offloading", False):
        shared = copy.copy(cache)  # the memoised cache itself is left as it is
        shared.layers = [SharedPrefixLayer(layer.keys[..., :first, :], layer.values[..., :first, :], repeats)
                         for layer in layers]
        return {name: shared}
    cropped = copy.deepcopy(cache)
    cropped.crop(first - cropped.get_seq_length())  # negative: drop that many trailing positions (all versions)
    if repeats > 1:  # rows are cell-major (row c * n_rows + i = prompt i), so tile rather than interleave
        cropped.reorder_cache(torch.arange(n_rows, device=device).repeat(repeats))
    return {name: cropped}


class SharedPrefixLayer(DynamicLayer):
    """One layer's cached prefix keys/values [n_rows, heads, first, d], read by a batch of `repeats` x n_rows rows
    (row c * n_rows + i continues prompt i). update() returns prefix + this forward's positions and keeps nothing: a
    resumed forward runs each layer once, so no layer's joined keys outlive it (a DynamicLayer keeps them all, one
    copy of the prefix per row in every layer at once). The join itself is materialised, one layer at a time: the
    models' attention takes one key tensor per row, so reading the prefix in place would mean rewriting attention."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, repeats: int):
        super().__init__()
        self.keys, self.values, self.repeats = keys, values, repeats
        self.device, self.is_initialized = keys.device, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return _joined(self.keys, key_states, self.repeats), _joined(self.values, value_states, self.repeats)


def _joined(prefix: torch.Tensor, new: torch.Tensor, repeats: int) -> torch.Tensor:
    """[repeats * n, heads, first + q, d]: the prefix [n, heads, first, d] broadcast to every repeat, then `new`."""
    n, first = prefix.shape[0], prefix.shape[-2]
    out = new.new_empty(repeats, n, new.shape[1], first + new.shape[-2], new.shape[-1])
    out[..., :first, :] = prefix.to(new.dtype)
    out[..., first:, :] = new.unflatten(0, (repeats, n))
    return out.flatten(0, 1)


def halving(run: Callable[[list], list], items: list) -> list:
    """run(items), and on out-of-memory run each half in turn (down to one item)."""
    try:
        return run(items)
    except torch.OutOfMemoryError:
        if len(items) == 1:
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        half = len(items) // 2
        return halving(run, items[:half]) + halving(run, items[half:])


# ---- chunk sizes from a memory budget ----------------------------------------------------------------------------

# The default budget's ceiling. On a CPU a forward of a thousand token rows already runs its matrix products at full
# speed (benchmarks/bench_long_sweep.py: the same CPU time at 64 MiB as at 512 MiB), so more memory buys nothing; and
# the C heap holds up to about twice a forward's tensors while it runs (blocks freed by one op that the next op's do
# not fit), so 128 MiB of tensors keep a 256-token sweep's peak near 350 MiB. A GPU needs larger batches to be busy.
BUDGET_CAP = {"cuda": 2**30}
BUDGET_CAP_OTHER = 128 * 2**20
FREE_SHARE = 4  # the default budget takes at most this fraction (1/FREE_SHARE) of the device's free memory
# The most rows one batched forward of a sweep takes when the caller names no max_batch (the budget may allow fewer).
# A CPU gains nothing above 64; on a GPU a chunk of cells that compute few positions each (a late first change) is a
# few hundred token rows, too few to keep it busy, so it takes more: each forward costs its kernels' launches.
MAX_ROWS = {"cuda": 512}
MAX_ROWS_OTHER = 64


def default_max_rows(device) -> int:
    """The rows a sweep's forward takes at most by default on `device` (MAX_ROWS)."""
    return MAX_ROWS.get(torch.device(device).type, MAX_ROWS_OTHER)


def default_budget(device) -> int:
    """Bytes a chunk's forward may use when the caller names no budget: a quarter of the device's free memory (CUDA:
    mem_get_info; CPU: MemAvailable), at most 1 GiB on CUDA and 128 MiB elsewhere (the ceiling alone where free
    memory cannot be read)."""
    device = torch.device(device)
    cap = BUDGET_CAP.get(device.type, BUDGET_CAP_OTHER)
    free = free_memory(device)
    return cap if free is None else max(1, min(cap, free // FREE_SHARE))


def free_memory(device) -> int | None:
    """Free bytes on `device` (CUDA: mem_get_info; CPU: MemAvailable), or None where they cannot be read."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError, IndexError):
            return None
    return None


def row_bytes(model: nn.Module, q_len: int, k_len: int) -> int:
    """Bytes one row of a resumed forward holds at its peak, computing `q_len` positions over `k_len` keys: what a
    layer keeps alive at once (residual and norm copies, queries/keys/values, the MLP's hidden and its activation's
    temporaries, this layer's joined keys/values and the attention scores), and its last position's logits (the
    unembedding in the model's dtype, then fp32 for the metric and its softmax: a 128k vocabulary takes more than a
    late cell's forward), from the config's sizes. An estimate (calibrated by benchmarks/bench_long_sweep.py), not a
    bound: chunks still halve if memory runs out."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    d = cfg.hidden_size
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or d // heads
    kv_width = (getattr(cfg, "num_key_value_heads", None) or heads) * head_dim
    d_ff = next((v for v in (getattr(cfg, k, None) for k in ("intermediate_size", "n_inner", "ffn_dim", "d_ff"))
                 if isinstance(v, int)), 4 * d)
    eager = getattr(cfg, "_attn_implementation", "eager") in (None, "eager")
    per_position = 6 * d + 3 * d_ff + heads * head_dim + 2 * kv_width
    elements = q_len * per_position + 2 * kv_width * k_len + (2 if eager else 1) * heads * q_len * k_len
    itemsize = torch.empty((), dtype=getattr(model, "dtype", torch.float32)).element_size()  # activations' dtype
    mask = q_len * k_len * itemsize  # the row's attention mask
    logits = (getattr(cfg, "vocab_size", None) or 0) * (itemsize + 3 * 4)  # model dtype, then 3 fp32 copies
    return elements * itemsize + mask + logits
