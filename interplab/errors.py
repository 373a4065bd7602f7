"""One error family: every message says what was wrong, what is allowed, and how to fix it."""

from __future__ import annotations


class InterplabError(ValueError):
    """Base class of every error interplab raises on bad input."""


class UnknownSiteError(InterplabError):
    """A site name that is neither canonical nor a module path of this model."""


class UnsupportedSiteError(InterplabError):
    """A canonical site this architecture does not have (or an edit the site cannot take)."""


class OutOfRangeError(InterplabError):
    """A layer, head, position or batch row outside the model or the prompt."""


class LengthMismatchError(InterplabError):
    """Clean and corrupt prompts that tokenize to different lengths."""


class MultiTokenAnswerError(InterplabError):
    """An answer string that is not exactly one token."""


class NumberError(InterplabError):
    """A number that is not one, is NaN/Inf, or lies outside its allowed range (scale factor, clamp lo > hi ...)."""


class VectorError(InterplabError):
    """A steering vector / direction of the wrong size, or holding NaN or Inf."""


class EmptyPromptError(InterplabError):
    """An empty prompt (or an empty list of prompts)."""


class LoadError(InterplabError):
    """A model that cannot be loaded safely or at all."""


class ContextLengthError(OutOfRangeError):
    """A prompt (plus the tokens to generate) longer than the model's context window."""


class UnknownTokenError(InterplabError):
    """An answer string the tokenizer maps to its unknown token: every such answer would read the same logit."""


# Config fields that hold the context window, in the order transformers' families use them.
_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length")


def context_window(model) -> tuple[int | None, str]:
    """(the model's context length, the config field it came from); (None, "") when the config names none."""
    cfg = getattr(model, "config", None)
    for name in _CONTEXT_FIELDS:
        n = getattr(cfg, name, None)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n, name
    return None, ""


def check_context(model, n_tokens: int, what: str = "the prompt", new_tokens: int = 0) -> None:
    """Raise ContextLengthError when n_tokens (+ new_tokens to generate) do not fit the model's context window:
    past it, position embeddings are indexed out of range (a bare IndexError) or silently extrapolated."""
    limit, name = context_window(model)
    if limit is None or n_tokens + new_tokens <= limit:
        return
    if new_tokens:
        raise ContextLengthError(
            f"{what} is {n_tokens} tokens and {new_tokens} new tokens were asked for: {n_tokens + new_tokens} "
            f"tokens, but this model's context is {limit} tokens (config.{name}). Shorten the prompt to at most "
            f"{max(limit - new_tokens, 0)} tokens or ask for at most {max(limit - n_tokens, 0)} new tokens.")
    raise ContextLengthError(
        f"{what} is {n_tokens} tokens but this model's context is {limit} tokens (config.{name}). Shorten it to at "
        f"most {limit} tokens (e.g. keep its last {limit}), or split it into several prompts.")


def short(text: str, n: int = 40) -> str:
    """A prompt as a message shows it: repr, cut to about n characters."""
    return repr(text if len(text) <= n else text[:n] + "...")


def format_tokens(tokens: list[str]) -> str:
    """Tokens shown with their boundaries visible: |When| Mary| and|."""
    return "|" + "|".join(tokens) + "|"
