"""Deprecated: what lived here runs in the engine now, behind one backend interface (interplab.engine.backends).

    lab.generate(prompts, edits, backend=None | "hf" | "vllm")       was served.generate(lab, ...)
    lab.sample(prompts, edits, ...)                                  was served.sample(lab, ...)
    lab.engine.forward(prompts, edits, backend="vllm")[0]            was served.last_logits(lab, prompts, edits)
    lab.engine.forward(prompts, record=sites, backend="vllm")        was served.cached(lab, prompts, sites)
    lab.patch_sweep(..., backend="vllm")                             was served.patch_sweep(lab, ...)

These names stay for one release and warn (DeprecationWarning) when called.
"""

from __future__ import annotations

import functools
import warnings

import torch

from . import edits as ed
from .engine import as_prompts, engine_of
from .engine import backends as _backends
from .engine.backends import Samples
from .engine.vllm import VLLM_SITES
from .errors import InterplabError, LengthMismatchError, UnsupportedSiteError
from .metrics import as_metric
from .patching import AXES, Cells, SweepResult


def _deprecated(new: str):
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kw):
            warnings.warn(f"interplab.served.{fn.__name__} is deprecated and goes in the next release: use {new}.",
                          DeprecationWarning, stacklevel=2)
            return fn(*args, **kw)
        return call
    return wrap


@_deprecated("lab.generate(prompt, edits, backend=...)")
def generate(lab, prompt, edits=None, **kw):
    """lab.generate."""
    return lab.generate(prompt, edits, **kw)


@_deprecated("lab.sample(prompts, edits, ...)")
def sample(lab, prompts, edits=None, **kw) -> Samples:
    """lab.sample."""
    return lab.sample(prompts, edits, **kw)


@_deprecated('lab.engine.forward(prompts, edits, backend="vllm")[0]')
def last_logits(lab, prompts, edits=None, *, per_prompt: list | None = None) -> torch.Tensor:
    """[prompts, vocab] last-position logits on the lab's vLLM engine, each prompt one request."""
    return engine_of(lab).forward(prompts, edits, per_prompt=per_prompt, backend="vllm")[0]


@_deprecated('lab.engine.forward(prompts, record=sites, backend="vllm")')
def cached(lab, prompts, sites: list[tuple[str, int]]) -> tuple[torch.Tensor, dict]:
    """(last logits, {(site, layer): [n, pos, width]}) recorded on the lab's vLLM engine."""
    return engine_of(lab).forward(prompts, record=sites, backend="vllm")


@_deprecated('lab.engine.backend(backend).name == "vllm"')
def check_backend(lab, backend) -> bool:
    """True when a call with `backend` goes to vLLM."""
    return _backends.choose(engine_of(lab), backend).name == "vllm"


@_deprecated('lab.engine.vllm.unsupported(edits, **options)')
def unsupported(edits: list, **options) -> str | None:
    """Why vLLM cannot run these edits or options (None: it can)."""
    from .engine.vllm import VLLMBackend

    return VLLMBackend.unsupported(None, edits, **options)


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
    base_logits, _ = lab.forward(base, backend="vllm")
    source_logits, acts = lab.forward(source, record=keys, backend="vllm")
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
    logits = lab.forward(prompts, per_prompt=per_prompt, backend="vllm")[0]
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
