"""The replacement model: every MLP replaced by its transcoder, with or without the error terms.

    from interplab.analyses.replacement import replacement
    out = replacement(lab, prompts, tcs)                 # with errors: the model's own logits, rebuilt
    out = replacement(lab, prompts, tcs, errors=False)   # the transcoders alone
    out.logits, out.model_logits, out.kl()               # [batch, pos, vocab]; KL(model || replacement)

With the error terms (each MLP's real output minus its transcoder's) the replacement computes the model's logits
exactly, which is what makes an attribution graph's nodes account for the whole output. Without them each MLP's
output is its transcoder's prediction from the MLP's input in the replaced run (layer by layer: a transcoder reads
what the transcoders before it produced; a cross-layer transcoder's MLP output gathers the decoders of every
earlier layer's features, read in the replaced run too), attention and norms live, as the transcoders' card
measures the loss recovered. How much of the graph's influence passes through error nodes is the graph's
`scores()` (circuit-tracer's replacement and completeness scores).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import edits
from ..engine import Engine, as_prompts, engine_of
from ..errors import InterplabError
from ..transcoders import TRANSCODER_SETS, CrossLayerTranscoder, Transcoders


@dataclass
class ReplacementRun:
    prompts: list[str]
    logits: torch.Tensor  # [batch, pos, vocab] the replacement's
    model_logits: torch.Tensor  # [batch, pos, vocab] the model's
    mask: torch.Tensor  # [batch, pos] 1 on real tokens
    errors: bool

    def kl(self) -> float:
        """Mean KL(model || replacement) of the next-token distributions over real tokens."""
        p = self.model_logits.float().log_softmax(-1)
        q = self.logits.float().log_softmax(-1)
        per = (p.exp() * (p - q)).sum(-1)
        keep = self.mask.bool()
        return float(per[keep].mean())


def replacement(lab: Engine, prompts, transcoders: Transcoders | CrossLayerTranscoder, *,
                errors: bool = True) -> ReplacementRun:
    """The logits of the model with each MLP replaced by its transcoder (+ its error term where errors=True)."""
    engine = engine_of(lab)
    if not isinstance(transcoders, TRANSCODER_SETS):
        raise InterplabError(f"replacement takes a transcoder set (ilab.Transcoders.load(...)) or a cross-layer "
                             f"transcoder (ilab.CrossLayerTranscoder.load(...)), got {type(transcoders).__name__}.")
    if not isinstance(errors, bool):
        raise InterplabError(f"errors={errors!r}: True (the error terms added back) or False.")
    transcoders.check_fits(engine)
    prompts = as_prompts(prompts)
    n_layers = engine.n_layers
    reads = [("mlp_in", layer) for layer in range(n_layers)] + [("mlp_out", layer) for layer in range(n_layers)]
    plain = engine.run(prompts, cache=reads, log=False)
    outputs: list[torch.Tensor] = []
    acts: list[torch.Tensor] = []
    for layer in range(n_layers):
        if errors:
            x = plain.cache["mlp_in", layer].float()
            acts.append(transcoders.encode_at(layer, x))
            predicted = transcoders.output_at(layer, acts, x)
            err = plain.cache["mlp_out", layer].float() - predicted
            outputs.append(predicted + err)
        else:  # what this layer's MLP reads once the layers below are replaced
            run = engine.run(prompts, _set(outputs), cache=[("mlp_in", layer)], log=False, memo=False)
            x = run.cache["mlp_in", layer].float()
            acts.append(transcoders.encode_at(layer, x))
            outputs.append(transcoders.output_at(layer, acts, x))
    final = engine.run(prompts, _set(outputs), log=False, memo=False)
    return ReplacementRun(prompts, final.logits, plain.logits, plain.attention_mask, errors)


def _set(outputs: list[torch.Tensor]) -> list:
    return [edits.set_value("mlp_out", layer, value=out) for layer, out in enumerate(outputs)]
