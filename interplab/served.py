"""Runs on a serving engine (vLLM): steered generation, sampling for evaluation, prefill-only patched runs.

The lab keeps its Hugging Face model (caches, gradients, attention patterns, every site); a lab with a vLLM engine
(`lab.use_vllm()`, or `Lab.load(name, engine="vllm")`) also sends these through vLLM, which batches requests of any
length without padding and keeps a paged key-value cache:

    lab.generate(prompts, [ilab.steer("resid_post", 1, v, alpha=8, batch=[0, 2])])      # vLLM when the lab has one
    s = lab.sample(prompts, [ilab.steer(...)], n=16, max_new_tokens=32, score=[" love", " hate"])
    lab.patch_sweep(clean, corrupt, metric=..., backend="vllm")                          # each cell a request

Edits are planned on the Hugging Face side first (so a wrong site, layer or position fails the same way, before
anything runs), then each prompt's request carries the edits whose batch= selects it: per request.
"""

from __future__ import annotations

import torch

from . import edits as ed
from .engine import as_prompts, engine_of
from .engine.backends import Samples, cached, check_backend, generate, last_logits, sample, unsupported
from .engine.vllm import VLLM_SITES
from .errors import InterplabError, LengthMismatchError, UnsupportedSiteError
from .metrics import as_metric
from .patching import AXES, Cells, SweepResult


def patch_sweep(lab, clean, corrupt, site: str, by, metric, direction: str):
    """An exact activation-patching sweep on vLLM: every cell of every pair is one prefill-only request, the
    source activation recorded by vLLM too (so it holds for models only vLLM can hold). Sites resid_pre/mid/post,
    attn_out, mlp_out by ('layer', 'pos') or ('layer',), and z by ('layer', 'head') or ('layer', 'head', 'pos')."""
    lab = engine_of(lab)
    by = tuple([by] if isinstance(by, str) else by) if isinstance(by, (str, list, tuple)) else by
    if by not in AXES or site not in AXES[by]:
        raise InterplabError(f"site {site!r} by {by!r} is not a sweep: layouts {', '.join(map(str, AXES))}, each with "
                             f"its sites (interplab.patching.AXES).")
    if site not in VLLM_SITES:
        raise UnsupportedSiteError(f"a vLLM sweep takes {', '.join(VLLM_SITES)}; sweep {site!r} with backend='hf'.")
    if direction not in ("denoise", "noise"):
        raise InterplabError(f"direction={direction!r}: use 'denoise' (clean into corrupt) or 'noise'.")
    if metric is None:
        raise InterplabError("metric= is required, e.g. ilab.logit_diff(' Mary', ' John').")
    clean, corrupt = as_prompts(clean), as_prompts(corrupt)
    if len(clean) != len(corrupt):
        raise LengthMismatchError(f"{len(clean)} clean prompts but {len(corrupt)} corrupt: give them in pairs.")
    lab.check_pair(clean, corrupt)
    base, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    metric = as_metric(metric).bind(lab.token_id)
    layers = list(range(lab.n_layers))
    keys = [(site, layer) for layer in layers]
    base_logits, _ = cached(lab, base, [])
    source_logits, acts = cached(lab, source, keys)
    pair = torch.arange(len(base))
    base_value = float(metric(base_logits, pair).mean())
    source_value = float(metric(source_logits, pair).mean())
    clean_value, corrupt_value = (source_value, base_value) if direction == "denoise" else (base_value, source_value)
    if abs(clean_value - corrupt_value) < 1e-6:
        raise InterplabError(f"clean and corrupt give the same {metric.name} ({clean_value:.4f}): nothing to restore. "
                             f"Pick a corrupt prompt that changes the answer.")
    tokens = tuple(lab.to_str_tokens(clean[0]))
    n_heads = lab.n_heads
    cells = Cells(tuple(by), tuple(layers), tokens, n_heads)
    raw = torch.full(cells.shape, float("nan"))
    prompts, per_prompt, where = [], [], []
    for li, layer in enumerate(layers):
        for index, (pos, head) in cells.in_layer():
            for i, p in enumerate(base):
                src = acts[(site, layer)][i:i + 1]
                prompts.append(p)
                per_prompt.append([ed.patch(site, layer, pos=pos, head=head, source=src)])
                where.append((li, index, i))
    logits = last_logits(lab, prompts, per_prompt=per_prompt)
    values = metric(logits, torch.tensor([i for _, _, i in where]))
    sums: dict = {}
    for (li, index, _), v in zip(where, values.tolist()):
        sums.setdefault((li, *index), []).append(v)
    for k, vs in sums.items():
        raw[k] = sum(vs) / len(vs)
    result = SweepResult(raw.clone(), raw, tuple(by), {"layer": layers, "pos": list(tokens),
                                                       "head": list(range(n_heads))},
                         site, metric.name, direction, "exact", clean_value, corrupt_value, clean, corrupt, lab, metric)
    result.values = (raw - corrupt_value) / (clean_value - corrupt_value)
    result.cells_run = len(prompts)
    return result


__all__ = ["generate", "sample", "Samples", "last_logits", "cached", "patch_sweep", "check_backend", "unsupported"]
