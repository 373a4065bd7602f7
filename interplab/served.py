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

from .engine import backends as _backends
from .engine import engine_of
from .engine.backends import Samples


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


@_deprecated('lab.patch_sweep(clean, corrupt, site, by, metric, direction, backend="vllm")')
def patch_sweep(lab, clean, corrupt, site: str, by, metric, direction: str):
    """An exact sweep with each cell a request on the lab's vLLM engine."""
    from .patching import patch_sweep as sweep

    return sweep(engine_of(lab), clean, corrupt, site, by, metric, direction, backend="vllm")


__all__ = ["generate", "sample", "Samples", "last_logits", "cached", "patch_sweep", "check_backend", "unsupported"]
