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


class VectorError(InterplabError):
    """A steering vector / direction of the wrong size, or holding NaN or Inf."""


class EmptyPromptError(InterplabError):
    """An empty prompt (or an empty list of prompts)."""


class LoadError(InterplabError):
    """A model that cannot be loaded safely or at all."""


def format_tokens(tokens: list[str]) -> str:
    """Tokens shown with their boundaries visible: |When| Mary| and|."""
    return "|" + "|".join(tokens) + "|"
