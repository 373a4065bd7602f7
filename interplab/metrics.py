"""Metrics on the final-position logits: logit_diff, prob, logprob, or any callable.

A metric is called with logits of shape [rows, vocab] (each row's last real token) and returns one value per row.
Token arguments may be strings (each must be a single token) or ids, one per prompt pair or one for all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


class Metric:
    name = "metric"

    def bind(self, token_id: Callable[[str | int], int]) -> Metric:
        """Resolve answer strings to token ids (raising MultiTokenAnswerError for multi-token strings)."""
        return self

    def __call__(self, logits: torch.Tensor, pair: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError


def _ids(tokens, token_id) -> torch.Tensor:
    items = list(tokens) if isinstance(tokens, (list, tuple)) else [tokens]
    return torch.tensor([token_id(t) for t in items], dtype=torch.long)


def _pick(logits: torch.Tensor, ids: torch.Tensor, pair: torch.Tensor | None) -> torch.Tensor:
    """logits[row, id of that row's pair] (one id broadcasts to every row)."""
    ids = ids.to(logits.device)
    if ids.numel() == 1:
        return logits[:, ids[0]]
    if pair is None:
        if ids.numel() != logits.shape[0]:
            raise ValueError(f"{ids.numel()} answer tokens for {logits.shape[0]} rows: give one per prompt.")
        pair = torch.arange(logits.shape[0])
    return logits.gather(1, ids[pair.to(logits.device)].unsqueeze(1)).squeeze(1)


class LogitDiff(Metric):
    def __init__(self, answer, wrong):
        self.answer, self.wrong = answer, wrong
        self._a = self._w = None
        self.name = f"logit diff {_show(answer)} - {_show(wrong)}"

    def bind(self, token_id):
        m = LogitDiff(self.answer, self.wrong)
        m._a, m._w = _ids(self.answer, token_id), _ids(self.wrong, token_id)
        return m

    def __call__(self, logits, pair=None):
        return _pick(logits, self._a, pair) - _pick(logits, self._w, pair)


class Prob(Metric):
    def __init__(self, token, log: bool = False):
        self.token, self.log = token, log
        self._t = None
        self.name = f"{'log' if log else ''}prob {_show(token)}"

    def bind(self, token_id):
        m = Prob(self.token, self.log)
        m._t = _ids(self.token, token_id)
        return m

    def __call__(self, logits, pair=None):
        lp = torch.log_softmax(logits.float(), dim=-1)
        v = _pick(lp, self._t, pair)
        return v if self.log else v.exp()


class Custom(Metric):
    """Any callable on [rows, vocab] logits that returns a value per row (or one scalar for all rows)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "metric")

    def __call__(self, logits, pair=None):
        v = self.fn(logits)
        v = torch.as_tensor(v, dtype=torch.float32, device=logits.device)
        return v.expand(logits.shape[0]) if v.dim() == 0 else v


def logit_diff(answer, wrong) -> LogitDiff:
    """logit(answer) - logit(wrong) at the last position; strings must be single tokens (e.g. ' Mary')."""
    return LogitDiff(answer, wrong)


def prob(token) -> Prob:
    return Prob(token)


def logprob(token) -> Prob:
    return Prob(token, log=True)


def as_metric(m) -> Metric:
    if isinstance(m, Metric):
        return m
    if callable(m):
        return Custom(m)
    raise TypeError(f"metric must be ilab.logit_diff(...), ilab.prob(...), ilab.logprob(...) or a callable, got {m!r}")


def _show(t) -> str:
    if isinstance(t, Sequence) and not isinstance(t, str):
        return f"[{len(t)} answers]"
    return repr(t)
