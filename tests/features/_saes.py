"""Random SAEs of each architecture, and the SAE arithmetic written out by hand (the reference the tests compare
interplab's SAE against: SAELens's formulas, not interplab's code)."""

from __future__ import annotations

import torch

from interplab.sae import SAE


def random_sae(arch="standard", site="resid_pre", layer=2, d_in=128, d_sae=64, seed=0, **kw) -> SAE:
    g = torch.Generator().manual_seed(seed)
    W_enc = torch.randn(d_in, d_sae, generator=g) * 0.2
    W_dec = torch.randn(d_sae, d_in, generator=g) * 0.1
    b_enc = torch.randn(d_sae, generator=g) * 0.1 - 0.2
    b_dec = torch.randn(d_in, generator=g) * 0.05
    extra = {}
    if arch == "jumprelu":
        extra["threshold"] = torch.rand(d_sae, generator=g) * 0.5
    if arch == "topk":
        extra["k"] = kw.pop("k", 8)
    if arch == "gated":
        extra["b_gate"] = torch.randn(d_sae, generator=g) * 0.1
        extra["r_mag"] = torch.randn(d_sae, generator=g) * 0.3
    return SAE(W_enc, b_enc, W_dec, b_dec, site=site, layer=layer, architecture=arch, **extra, **kw)


def hand_encode(sae: SAE, x: torch.Tensor) -> torch.Tensor:
    """f = act(pre), pre = (x - b_dec [if applied]) @ W_enc + b_enc; no run-time normalisation."""
    x = x.double()
    W_enc, b_enc, b_dec = sae.W_enc.double(), sae.b_enc.double(), sae.b_dec.double()
    sae_in = x - b_dec if sae.apply_b_dec_to_input else x
    if sae.architecture == "gated":  # SAELens's GatedSAE.encode; interplab keeps b_mag as b_enc
        gate = sae_in @ W_enc + sae.b_gate.double()
        magnitude = sae_in @ (W_enc * torch.exp(sae.r_mag.double())) + b_enc
        return torch.where(gate > 0, torch.clamp(magnitude, min=0), torch.zeros_like(magnitude))
    pre = sae_in @ W_enc + b_enc
    if sae.architecture == "standard":
        return torch.clamp(pre, min=0)
    if sae.architecture == "jumprelu":
        return torch.where(pre > sae.threshold.double(), torch.clamp(pre, min=0), torch.zeros_like(pre))
    keep = pre >= pre.sort(dim=-1, descending=True).values[..., sae.k - 1:sae.k]
    return torch.where(keep, torch.clamp(pre, min=0), torch.zeros_like(pre))


def hand_decode(sae: SAE, f: torch.Tensor) -> torch.Tensor:
    return f.double() @ sae.W_dec.double() + sae.b_dec.double()
