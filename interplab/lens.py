"""Logit lens: read each layer's residual stream through the model's own final norm and unembedding."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .lab import Lab


@dataclass
class LensResult:
    probs: torch.Tensor  # [layers, pos, vocab] softmax of the lens logits
    top_ids: torch.Tensor  # [layers, pos, k]
    top_probs: torch.Tensor  # [layers, pos, k]
    tokens: list[str]  # the prompt's tokens (x axis)
    top_tokens: list[list[list[str]]]  # [layers][pos][k] decoded
    site: str

    @property
    def n_layers(self) -> int:
        return self.probs.shape[0]

    def prob_of(self, token_id: int) -> torch.Tensor:
        """[layers, pos] probability of one token under the lens."""
        return self.probs[..., token_id]


def logit_lens(lab: Lab, prompt: str, site: str = "resid_post", k: int = 5) -> LensResult:
    """Top-k next tokens that each layer's residual (site 'resid_post' or 'resid_pre') would predict."""
    run = lab.run(prompt, cache=[site], log=False)
    arch = lab.sites.arch
    norm = lab.model.get_submodule(arch.final_norm)
    unembed = lab.model.get_output_embeddings()
    cap = getattr(lab.model.config, "final_logit_softcapping", None)
    stack = torch.stack([run.cache[site, l][0] for l in range(lab.n_layers)])  # [layers, pos, d]
    with torch.no_grad():
        param = next(lab.model.parameters())
        logits = unembed(norm(stack.to(device=param.device, dtype=param.dtype))).float()
        if cap:
            logits = torch.tanh(logits / cap) * cap
    probs = logits.softmax(-1).cpu()
    top_probs, top_ids = probs.topk(k, dim=-1)
    decode = lab.tokenizer.decode
    top_tokens = [[[decode([i]) for i in pos] for pos in layer] for layer in top_ids.tolist()]
    return LensResult(probs, top_ids, top_probs, lab.to_str_tokens(prompt), top_tokens, site)
