"""Logit lens: read each layer's residual stream through the model's own final norm and unembedding."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine import Engine, engine_of, execution_device
from ..errors import InterplabError, UnsupportedSiteError

LENS_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")  # [batch, pos, d_model], per layer


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


def logit_lens(lab: Engine, prompt: str, site: str = "resid_post", k: int = 5) -> LensResult:
    """Top-k next tokens that each layer's residual (site 'resid_post' or 'resid_pre') would predict."""
    engine = engine_of(lab)
    if not isinstance(engine, Engine):
        raise InterplabError(f"logit_lens(lab, prompt): the first argument must be an ilab.Lab, got "
                             f"{type(engine).__name__}.")
    if not isinstance(prompt, str):  # only row 0 would be read: a list would silently show its first prompt
        raise InterplabError(f"logit_lens reads one prompt string, got {type(prompt).__name__}; call it once per "
                             f"prompt.")
    if site not in LENS_SITES:
        raise UnsupportedSiteError(f"logit_lens site {site!r}: the lens reads a residual-width activation at every "
                                   f"layer; use one of {', '.join(LENS_SITES)}.")
    if engine.sites.arch is None:
        raise UnsupportedSiteError("logit_lens needs a known architecture to find the final norm and unembedding "
                                   "(see ilab.sites.ARCHS).")
    n_vocab = engine.model.get_output_embeddings().weight.shape[0]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_vocab:
        raise InterplabError(f"k={k!r}: the number of top tokens to show per cell, an int in 1..{n_vocab} "
                             f"(the vocabulary size).")
    run = engine.run(prompt, cache=[site], log=False)
    arch = engine.sites.arch
    norm = engine.model.get_submodule(arch.final_norm)
    unembed = engine.model.get_output_embeddings()
    cap = getattr(engine.model.config, "final_logit_softcapping", None)
    param = next(engine.model.parameters())  # (its dtype; the device is where the norm runs: see device_map)
    where = execution_device(engine.model, norm)
    n_pos = run.cache[site, 0].shape[1]
    probs = torch.empty(engine.n_layers, n_pos, n_vocab)  # on the host, as the result gives them
    # one layer at a time: all of them at once would hold [layers, pos, vocab] fp32 logits and their softmax on the
    # device (8.6 GB for a 32-layer model, 256 tokens, a 128k vocabulary)
    with torch.no_grad():
        for layer in range(engine.n_layers):
            logits = unembed(norm(run.cache[site, layer][0].to(device=where, dtype=param.dtype))).float()
            if cap:
                logits = torch.tanh(logits / cap) * cap
            probs[layer] = logits.softmax(-1)  # (copied to the host)
    top_probs, top_ids = probs.topk(k, dim=-1)
    decode = engine.tokenizer.decode
    top_tokens = [[[decode([i]) for i in pos] for pos in layer] for layer in top_ids.tolist()]
    return LensResult(probs, top_ids, top_probs, engine.to_str_tokens(prompt), top_tokens, site)
