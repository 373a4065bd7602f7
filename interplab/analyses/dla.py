"""Direct logit attribution: what each head, MLP and embedding writes straight into the metric.

The residual stream the final norm reads is a sum of parts: the embeddings, and each layer's attention output
(one term per head, plus the output bias) and MLP output. With the final norm's scale frozen at its value on the
actual run, the norm is affine, so a metric linear in the logits (ilab.logit_diff) splits into one number per part,
and the parts add up to the model's own metric at every position:

    metric = embed + pos_embed + sum(heads) + sum(attn_bias) + sum(mlp) + final_bias

(final_bias: the final norm's shift and the unembedding's bias). A part's number is its *direct* effect: what it
writes that the unembedding reads with no later layer in between; effects through later layers are what patching
and path patching measure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine import Engine, as_prompts, engine_of, execution_device, own_weights
from ..errors import InterplabError, LengthMismatchError, UnsupportedSiteError
from ..metrics import as_metric


@dataclass
class DLAResult:
    heads: torch.Tensor  # [layers, heads, pos]
    attn_bias: torch.Tensor  # [layers, pos]
    mlp: torch.Tensor  # [layers, pos]
    embed: torch.Tensor  # [pos] token embeddings (and everything else before layer 0 on models without pos_embed)
    pos_embed: torch.Tensor  # [pos] learned position embeddings (GPT-2); zeros elsewhere
    final_bias: torch.Tensor  # [pos]
    total: torch.Tensor  # [pos] the model's own metric at each position
    tokens: list[str]
    metric_name: str

    def parts_sum(self) -> torch.Tensor:
        """[pos] the sum of every part: equals `total` (the decomposition is exact, up to float rounding)."""
        return (self.heads.sum((0, 1)) + self.attn_bias.sum(0) + self.mlp.sum(0) + self.embed + self.pos_embed
                + self.final_bias)

    def top(self, k: int = 10, pos: int = -1) -> list[tuple[str, float]]:
        """The k parts with the largest |direct effect| at one position, as ('L2H3' / 'MLP1' / ..., value)."""
        named = [(f"L{layer}H{h}", float(self.heads[layer, h, pos])) for layer in range(self.heads.shape[0])
                 for h in range(self.heads.shape[1])]
        named += [(f"MLP{layer}", float(self.mlp[layer, pos])) for layer in range(self.mlp.shape[0])]
        named += [("embed", float(self.embed[pos])), ("pos_embed", float(self.pos_embed[pos]))]
        return sorted(named, key=lambda x: -abs(x[1]))[:k]

    def show(self, pos: int = -1):
        """Heads at a position (a click on the per-position row picks it) and the other parts as bars (None
        without widgets)."""
        from .. import display

        return display.view(self, pos=pos)


def direct_logit_attribution(lab: Engine, prompts, metric) -> DLAResult:
    """Each head's, MLP's and embedding's direct contribution to `metric` (linear in the logits, e.g.
    ilab.logit_diff(" Mary", " John")) at every position, averaged over equal-length prompts."""
    engine = engine_of(lab)
    prompts = as_prompts(prompts)
    arch = engine.sites.arch
    if arch is None:
        raise UnsupportedSiteError("direct_logit_attribution needs a known architecture (see ilab.sites.ARCHS).")
    if arch.attn_out is not None or arch.mlp_out is not None:
        raise UnsupportedSiteError(
            f"direct_logit_attribution: this {arch.name} model normalises each sublayer's output before adding it "
            f"to the residual stream, so a head's share of that output is not a fixed sum; use patching instead.")
    if getattr(engine.model.config, "final_logit_softcapping", None):
        raise UnsupportedSiteError("direct_logit_attribution: this model soft-caps its logits (tanh), which does not "
                                   "split into parts; use patching instead.")
    ids, mask, lengths = engine.encode(prompts)
    if len(set(lengths)) > 1:
        raise LengthMismatchError(f"direct_logit_attribution averages prompts position by position: give prompts of "
                                  f"equal token length (got {sorted(set(lengths))}), or one prompt at a time.")
    metric = as_metric(metric).bind(engine.token_id)
    rows = torch.arange(len(prompts))
    n, H = engine.n_layers, engine.n_heads
    cache = ["embed", ("resid_pre", 0), ("resid_post", n - 1)] + [(s, layer) for layer in range(n)
                                                                     for s in ("z", "mlp_out")]
    run = engine.run(prompts, cache=cache, log=False)
    unembed = engine.model.get_output_embeddings()
    with own_weights(unembed):  # (offloaded by a device_map: loaded for this block)
        param = unembed.weight
        direction = _metric_direction(metric, rows, param.shape[0])  # [rows, vocab]
        # [rows, d_model]: the metric's residual direction
        d_resid = direction.to(param.device, param.dtype) @ param
        bias = getattr(unembed, "bias", None)
        bias_value = None if bias is None else float((direction.to(bias.device, bias.dtype) @ bias).mean())
    final = run.cache["resid_post", n - 1].to(d_resid.device, d_resid.dtype)
    frozen, shift = _frozen_final_norm(engine.model.get_submodule(arch.final_norm), final)

    def score(part: torch.Tensor) -> torch.Tensor:  # [rows, pos, d] -> [pos], the rows' mean (where it ran)
        return (frozen(part.to(d_resid.device, d_resid.dtype)) * d_resid[:, None]).sum(-1).mean(0).float()

    with torch.no_grad():  # every score stays on the device until the end: one copy, not one per head
        heads, attn_bias, mlp = [], [], []
        for layer in range(n):
            o_proj = engine.model.get_submodule(f"{arch.layers}.{layer}.{arch.o_proj}")
            z = run.cache["z", layer].to(execution_device(engine.model, o_proj), d_resid.dtype)
            zero = o_proj(torch.zeros_like(z))
            per_head = z.view(*z.shape[:2], H, -1)
            for h in range(H):
                only = torch.zeros_like(per_head)
                only[:, :, h] = per_head[:, :, h]
                heads.append(score(o_proj(only.view_as(z)) - zero))
            attn_bias.append(score(zero))
            mlp.append(score(run.cache["mlp_out", layer]))
        embed_tok = run.cache["embed"]
        before = run.cache["resid_pre", 0]
        has_pos = arch.name == "gpt2"  # the one mapped family with learned absolute position embeddings
        embed = score(embed_tok if has_pos else before)
        pos_embed = score(before - embed_tok) if has_pos else torch.zeros_like(embed)
        final_bias = (shift.to(d_resid) @ d_resid.T).mean(-1).float().expand(ids.shape[1])
        # the model's own metric at every position, from its logits where they are (not a [pos, vocab] host copy)
        held = run.held_logits
        total = metric(held.reshape(-1, held.shape[-1]).float(),
                       rows.repeat_interleave(ids.shape[1]).to(held.device)).view(len(prompts), -1).mean(0)
        parts = torch.stack([*heads, *attn_bias, *mlp, embed, pos_embed, final_bias, total.to(embed.device)]).cpu()
    heads, attn_bias, mlp = parts[:n * H].view(n, H, -1), parts[n * H:n * H + n], parts[n * H + n:n * (H + 2)]
    embed, pos_embed, final_bias, total = parts[n * (H + 2):]
    if bias_value is not None:
        final_bias = final_bias + bias_value
    result = DLAResult(heads, attn_bias, mlp, embed, pos_embed, final_bias, total, engine.to_str_tokens(prompts[0]),
                       metric.name)
    err = (result.parts_sum() - total).abs().max()
    if err > 1e-3 * max(1.0, float(total.abs().max())):
        raise InterplabError(f"internal: the direct contributions add up to within {float(err):.2e} of the model's "
                             f"metric, not exactly; this architecture's residual stream has a part interplab does "
                             f"not know (please report it).")
    return result


def _metric_direction(metric, rows: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows, vocab] d metric / d logits, checked constant (the metric must be linear in the logits)."""
    probe = [torch.zeros(len(rows), vocab, requires_grad=True), torch.randn(len(rows), vocab, requires_grad=True)]
    grads = []
    for x in probe:
        with torch.enable_grad():
            value = metric(x, rows)
            (g,) = torch.autograd.grad(value.sum(), x, allow_unused=True)
        grads.append(torch.zeros_like(x) if g is None else g)
        if not torch.allclose(value.detach(), (x.detach() * grads[-1]).sum(-1), atol=1e-4):
            raise InterplabError(f"direct_logit_attribution needs a metric linear in the logits, such as "
                                 f"ilab.logit_diff(' Mary', ' John'); {metric.name} is not.")
    if not torch.allclose(grads[0], grads[1], atol=1e-6):
        raise InterplabError(f"direct_logit_attribution needs a metric linear in the logits; {metric.name} is not.")
    return grads[0]


def _frozen_final_norm(norm: torch.nn.Module, final: torch.Tensor):
    """(x -> the norm's linear part at the actual run's scale, the norm's constant shift [d_model])."""
    with torch.no_grad():
        want = norm(final).to(final.device)  # (a device_map may run the norm on another device)
        with own_weights(norm):  # (offloaded by a device_map: loaded for this block, copied out)
            weight, b = (None if getattr(norm, k, None) is None else
                         getattr(norm, k).detach().to(final.device, copy=True) for k in ("weight", "bias"))
        shift = b if b is not None else torch.zeros(final.shape[-1], dtype=final.dtype, device=final.device)
        centred = isinstance(norm, torch.nn.LayerNorm)
        eps = getattr(norm, "eps", None) or getattr(norm, "variance_epsilon", None) or 1e-6
        x = final - final.mean(-1, keepdim=True) if centred else final
        scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        for gain in ([weight, 1 + weight] if weight is not None else [torch.ones_like(shift)]):
            if torch.allclose(gain * x / scale + shift, want, atol=1e-4, rtol=1e-4):
                break
        else:
            raise UnsupportedSiteError(f"direct_logit_attribution: the final norm {type(norm).__name__} is neither a "
                                       f"LayerNorm nor an RMSNorm that interplab can freeze; use patching instead.")

    def frozen(part: torch.Tensor) -> torch.Tensor:
        p = part - part.mean(-1, keepdim=True) if centred else part
        return gain * p / scale

    return frozen, shift
