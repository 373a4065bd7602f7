"""Copying scores: does a head's OV circuit write the token it reads? (Wang et al. 2022, section 3.3)

Attention says where a head reads; its OV circuit says what it writes there. The paper calls a head a name mover
only when, fed a name, its OV output read through the unembedding puts that same name among the top 5 tokens (a
*copying* score: the share of names for which it does), and a *negative* name mover when the negated output does.

For each name (a token of the given prompts at a given position):
  1. the name's state after the first MLP: the prompts run with layer 0's attention output set to 0, so the state
     is the token's embedding (and position embedding, where the model has one) plus what MLP0 makes of it, as in
     the paper, read at the name's position;
  2. each head's value of that state: the prompts run again with that state written into every position of the
     head's layer input. Every key then carries the same value, and attention weights sum to 1, so the head's
     output at the last position is its OV map of the state, whatever its pattern;
  3. that output through the head's slice of the output projection (its bias left out), the final norm and the
     unembedding: the name's rank among all tokens.
Steps 1 and 2 use only edits at named sites, so the scores hold on every architecture interplab maps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..edits import set_value, zero
from ..engine import Engine, as_prompts, engine_of, execution_device
from ..errors import InterplabError, LengthMismatchError, UnsupportedSiteError


@dataclass
class CopyingScores:
    positive: torch.Tensor  # [layers, heads] share of the names ranked within the top k by the head's OV output
    negative: torch.Tensor  # [layers, heads] the same for the negated output (a head that suppresses what it reads)
    ranks: torch.Tensor  # [layers, heads, names] each name's rank (0 = top) under the head's OV output
    names: list[str]  # the names scored, one per (prompt, position)
    k: int

    def heads(self, threshold: float = 0.5, negative: bool = False) -> list[tuple[int, int]]:
        """(layer, head) of the heads whose (negative) copying score is at least `threshold`, largest first."""
        scores = self.negative if negative else self.positive
        found = [(layer, h) for layer in range(scores.shape[0]) for h in range(scores.shape[1])
                 if float(scores[layer, h]) >= threshold]
        return sorted(found, key=lambda lh: -float(scores[lh]))


def copying_scores(lab: Engine, prompts, positions, k: int = 5) -> CopyingScores:
    """Every head's copying score over the names at `positions` of `prompts`: an int (the same position in every
    prompt), a tensor with one position per prompt, or a list of those (e.g. [IO, S1]: both names of each IOI
    prompt)."""
    engine = engine_of(lab)
    prompts = as_prompts(prompts)
    arch = engine.sites.arch
    if arch is None:
        raise UnsupportedSiteError("copying_scores needs a known architecture (see ilab.sites.ARCHS).")
    if arch.attn_out is not None:
        raise UnsupportedSiteError(f"copying_scores: this {arch.name} model normalises the attention output before "
                                   f"adding it to the residual stream, so a head's OV output is not what it writes.")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InterplabError(f"k={k!r}: how many top tokens count as copied, an int >= 1 (the paper uses 5).")
    ids, mask, lengths = engine.encode(prompts)
    if len(set(lengths)) > 1:
        raise LengthMismatchError(f"copying_scores reads one position per prompt: give prompts of equal token length "
                                  f"(got {sorted(set(lengths))}).")
    rows, cols = _name_positions(positions, len(prompts), lengths[0])
    n, H = engine.n_layers, engine.n_heads
    # 1. the name's state after MLP0, with no attention in layer 0
    first = engine.run(prompts, [zero("attn_out", 0)], cache=[("resid_post", 0)], log=False)
    state = first.cache["resid_post", 0][rows, cols]  # [names, d_model]
    name_ids = ids[rows, cols]
    names = [engine.tokenizer.decode([int(i)]) for i in name_ids]
    # 2.-3. one run per layer: row i carries name i's state at every position of the layer's input
    filler = [prompts[0]] * len(names)  # any prompt: every position is overwritten
    ranks = torch.zeros(n, H, len(names), dtype=torch.long)
    negated = torch.zeros(n, H, len(names), dtype=torch.long)  # ranks under the negated output
    norm = engine.model.get_submodule(arch.final_norm)
    unembed = engine.model.get_output_embeddings()
    for layer in range(n):
        run = engine.run(filler, [set_value("resid_pre", layer, state[:, None, :])], cache=[("z", layer)], log=False,
                      memo=False)  # (its edit is a tensor made here: a key would copy it to the host)
        o_proj = engine.model.get_submodule(f"{arch.layers}.{layer}.{arch.o_proj}")
        with torch.no_grad():  # the modules are called, so a device_map's hooks load their weights
            z = run.cache["z", layer][:, -1].to(execution_device(engine.model, o_proj), o_proj.weight.dtype)
            per_head = z.view(len(names), H, -1)
            bias_only = o_proj(torch.zeros_like(z))
            for h in range(H):
                only = torch.zeros_like(per_head)
                only[:, h] = per_head[:, h]
                out = o_proj(only.view_as(z)) - bias_only  # the head's write, without the projection's bias
                for sign, into in ((1, ranks), (-1, negated)):
                    logits = unembed(norm((sign * out).to(execution_device(engine.model, norm)))).float()
                    own = logits.gather(1, name_ids[:, None].to(logits.device))
                    into[layer, h] = (logits > own).sum(1).cpu()
    positive, negative = (ranks < k).float().mean(-1), (negated < k).float().mean(-1)
    return CopyingScores(positive, negative, ranks, names, k)


def _name_positions(positions, n_prompts: int, n_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) index tensors of the names. positions: an int (the same position in every prompt), a tensor
    with one position per prompt, or a list of those (several names per prompt, e.g. [IO, S1])."""
    groups = list(positions) if isinstance(positions, (list, tuple)) and positions else [positions]
    rows, cols = [], []
    for group in groups:
        col = group if isinstance(group, torch.Tensor) else None
        if col is None and isinstance(group, int) and not isinstance(group, bool):
            col = torch.tensor(group)
        if col is None and isinstance(group, (list, tuple)) and all(isinstance(p, int) for p in group):
            col = torch.tensor(group)
        if (col is None or col.dtype not in (torch.int64, torch.int32) or col.ndim > 1
                or (col.ndim == 1 and len(col) != n_prompts)):
            raise InterplabError(f"positions={positions!r}: give a token position (an int for every prompt, or a "
                                 f"tensor with one per prompt), or a list of such, e.g. [IO, S1].")
        col = col.expand(n_prompts) if col.ndim == 0 else col
        if bool(((col < -n_pos) | (col >= n_pos)).any()):
            raise InterplabError(f"positions={positions!r}: out of range for prompts of {n_pos} tokens.")
        rows.append(torch.arange(n_prompts))
        cols.append(col % n_pos)
    return torch.cat(rows), torch.cat(cols).long()
