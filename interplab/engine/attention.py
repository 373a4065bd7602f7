"""Attention's inside as hook points: the rotated query and key, and an editable attention pattern.

No module outputs the rotated query/key or the pattern of a transformers attention layer: they live inside its
attention function. So the engine registers one attention function, "interplab", with transformers' attention
interface. It runs the model's own eager attention function (found in the model's modeling module: soft-capping,
scaling and masks stay the model's), and passes what it reads through identity modules that every attention layer
gets as a child (`AttentionProbes`, under the name sites.PROBES). Hooks on those identities read and edit them like
any module output:

    rot_q, rot_k   [batch, pos, heads * d_head]    the query and key after the rotary embedding
    pattern        [batch, query pos, heads * key pos]   the weights; an edited pattern is multiplied by v again

Each is laid out [batch, pos, heads * width] so that positions, heads and patch sources work as on every other
site. With no hook on a probe nothing is copied or recomputed: the model's own result passes through unchanged.
The probes and the attention function are there only while a hook needs them (acquire/release, called by the
HookManager): between runs the user's model is as it was loaded, its attention implementation included.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import nn

from ..errors import UnsupportedSiteError
from ..sites import PROBES

NAME = "interplab"  # the attention implementation's name in transformers' registry


class AttentionProbes(nn.Module):
    """Identity points inside one attention layer (hooks make them read or edit)."""

    def __init__(self):
        super().__init__()
        self.rot_q = nn.Identity()
        self.rot_k = nn.Identity()
        self.pattern = nn.Identity()


def _hooked(m: nn.Module) -> bool:
    return bool(m._forward_hooks or m._forward_pre_hooks)


def _through(probe: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x [batch, heads, pos, width] through the probe as [batch, pos, heads * width]; x itself when unhooked."""
    if not _hooked(probe):
        return x
    b, h, t, w = x.shape
    flat = x.transpose(1, 2).reshape(b, t, h * w)
    out = probe(flat)
    return x if out is flat else out.view(b, t, h, w).transpose(1, 2)


def own_eager(module: nn.Module) -> Callable:
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise UnsupportedSiteError(
            f"{type(module).__name__} has no eager attention function in {type(module).__module__}: rot_q, rot_k "
            f"and pattern cannot be reached on this model. Use 'z', 'q', 'k' or 'v'.")
    return fn


def attention(module: nn.Module, query, key, value, attention_mask, **kwargs):
    """The model's eager attention with rot_q, rot_k and the pattern passed through the layer's probes."""
    eager = own_eager(module)
    probes = getattr(module, PROBES, None)
    if probes is None:
        return eager(module, query, key, value, attention_mask, **kwargs)
    full = query.shape[-2] == key.shape[-2]
    if not full and (_hooked(probes.rot_k) or _hooked(probes.pattern)):
        raise UnsupportedSiteError(
            "rot_k and pattern span every key position, which a forward on top of a key-value cache does not "
            "compute: use them in full forwards (lab.run, sweeps), not in generation.")
    query = _through(probes.rot_q, query)
    key = _through(probes.rot_k, key)
    out, weights = eager(module, query, key, value, attention_mask, **kwargs)
    if weights is None or not _hooked(probes.pattern):
        return out, weights
    edited = _through(probes.pattern, weights)
    if edited is weights:
        return out, weights
    groups = edited.shape[1] // value.shape[1]  # grouped-query attention: each key-value head serves `groups`
    v = value.repeat_interleave(groups, dim=1) if groups > 1 else value
    return torch.matmul(edited.to(v.dtype), v).transpose(1, 2).contiguous(), edited


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if NAME not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(NAME, attention)
        AttentionMaskInterface.register(NAME, eager_mask)


_HELD: dict[int, list] = {}  # id(model) -> [attention implementation before, {attention module path: count}]


def acquire(model: nn.Module, point_module: str) -> None:
    """Before a hook goes on a probe (path '<attention module>.interplab_probes.<name>'): give that attention
    module its probes and the model the "interplab" attention function, for as long as a hook needs them."""
    attn_path = point_module.rsplit(f".{PROBES}.", 1)[0]
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise UnsupportedSiteError("rot_q, rot_k and pattern need a transformers model (with a config).")
    held = _HELD.get(id(model))
    if held is None:
        _register()
        held = _HELD[id(model)] = [getattr(cfg, "_attn_implementation", None), {}]
        model.set_attn_implementation(NAME)
    counts = held[1]
    if counts.get(attn_path, 0) == 0:
        model.get_submodule(attn_path).add_module(PROBES, AttentionProbes())
    counts[attn_path] = counts.get(attn_path, 0) + 1


def release(model: nn.Module, point_module: str) -> None:
    """After that hook is removed: the last one out takes the probes away and restores the model's attention."""
    attn_path = point_module.rsplit(f".{PROBES}.", 1)[0]
    held = _HELD[id(model)]
    counts = held[1]
    counts[attn_path] -= 1
    if counts[attn_path] == 0:
        delattr(model.get_submodule(attn_path), PROBES)
        del counts[attn_path]
    if not counts:
        del _HELD[id(model)]
        model.set_attn_implementation(held[0])
