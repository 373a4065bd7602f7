"""Normalisations with their scale frozen: the run's values, a linear map for gradients.

An attribution graph (circuit-tracer's replacement model) treats every LayerNorm or RMSNorm as linear: its
denominator (the input's standard deviation or root mean square) is read from the actual run and held constant,
so that the effect of one node on another is a product of linear maps. `frozen_norm_hook` returns the module's own
output, unchanged in value, with the gradient of `gain * centre(x) / scale` where scale is a constant.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import UnsupportedSiteError


def is_norm(module: nn.Module) -> bool:
    """A LayerNorm or an RMSNorm (transformers names every one of them ...Norm)."""
    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(("Norm", "RMSNorm"))


def norm_paths(model: nn.Module) -> list[str]:
    """The module paths of every normalisation in the model."""
    return [name for name, m in model.named_modules() if name and is_norm(m)]


def linear_part(module: nn.Module, x: torch.Tensor, y: torch.Tensor):
    """(centred, gain, scale) with y == gain * centre(x) / scale + shift: how this norm computed y from x.

    Tries a LayerNorm (centred) and an RMSNorm with gain w or 1 + w (Gemma); raises where none reproduces y."""
    eps = getattr(module, "eps", None) or getattr(module, "variance_epsilon", None) or 1e-6
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    with torch.no_grad():
        xf, yf = x.detach().float(), y.detach().float()
        shift = bias.detach().float() if isinstance(bias, torch.Tensor) else 0.0
        for centred in ((True, False) if isinstance(module, nn.LayerNorm) else (False, True)):
            xc = xf - xf.mean(-1, keepdim=True) if centred else xf
            scale = (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt()
            gains = [weight.detach().float(), 1 + weight.detach().float()] if isinstance(weight, torch.Tensor) \
                else [torch.ones(x.shape[-1], device=x.device)]
            for gain in gains:
                if torch.allclose(gain * xc / scale + shift, yf, atol=1e-3, rtol=1e-3):
                    return centred, gain.to(x.dtype), scale.to(x.dtype)
    raise UnsupportedSiteError(f"{type(module).__name__} is neither a LayerNorm nor an RMSNorm whose scale "
                               f"interplab can freeze (its output is not gain * x / scale [+ bias]); attribution "
                               f"graphs need one.")


def frozen_norm_hook(module: nn.Module, args, output):
    """Forward hook: the output's value, with the gradient of the norm at its frozen scale."""
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor) or not isinstance(output, torch.Tensor) or not torch.is_grad_enabled():
        return None
    centred, gain, scale = linear_part(module, x, output)
    dx = x - x.detach()  # zero in value; its gradient is the identity
    if centred:
        dx = dx - dx.mean(-1, keepdim=True)
    return output.detach() + gain * dx / scale
