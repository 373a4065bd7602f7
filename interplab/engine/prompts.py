"""What a caller may pass as prompts: a string or a non-empty list of non-blank strings, checked once for every
entry point of the engine (runs, sweeps, sampling on any backend)."""

from __future__ import annotations

from ..errors import EmptyPromptError, InterplabError


def as_prompts(prompts) -> list[str]:
    """The prompts as a list of strings; a typed error naming what was wrong otherwise."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if prompts is None or isinstance(prompts, (bytes, bytearray)) or not hasattr(prompts, "__iter__"):
        raise InterplabError(f"prompts must be a string or a list of strings, got {type(prompts).__name__}: "
                             f"{prompts!r}" + (" (decode bytes first)" if isinstance(prompts, bytes) else ""))
    prompts = list(prompts)
    if not prompts:
        raise EmptyPromptError("no prompts given: pass a string or a non-empty list of strings.")
    for p in prompts:
        if not isinstance(p, str):
            raise InterplabError(f"prompts must be strings, got {type(p).__name__}: {p!r}")
        if not p.strip():
            raise EmptyPromptError("empty prompt: give some text, e.g. 'When Mary and John went to the store,'.")
    return prompts
