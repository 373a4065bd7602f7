"""Metrics on the final-position logits: logit_diff, prob, logprob, or any callable.

A metric is called with logits of shape [rows, vocab] (each row's last real token) and returns one value per row.
Token arguments may be strings (each must be a single token) or ids, one per prompt pair or one for all.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch

from .errors import InterplabError, LengthMismatchError


class AnswerSpaceWarning(UserWarning):
    """An answer word without its leading space ('Mary' where ' Mary' is a token too). Shown every time a metric is
    bound to a model (not once per place, Python's default), and by the views on their metric line (Metric.notes)."""


warnings.simplefilter("always", AnswerSpaceWarning)


class Metric:
    name = "metric"
    notes: tuple[str, ...] = ()  # what the views print beside the metric line (an answer without its space)

    def bind(self, token_id: Callable[[str | int], int]) -> Metric:
        """Resolve answer strings to token ids (raising MultiTokenAnswerError for multi-token strings)."""
        return self

    def check_pairs(self, n_pairs: int) -> None:
        """Answers given per prompt pair must be one per pair (or one for all); checked before a sweep runs."""
        for what, tokens in self._answers():
            if isinstance(tokens, (list, tuple)) and len(tokens) not in (1, n_pairs):
                raise LengthMismatchError(
                    f"{self.name}: {len(tokens)} {what} tokens for {n_pairs} prompt pair(s): give one per pair, in "
                    f"the pairs' order, or a single one for all.")

    def _answers(self) -> list[tuple[str, object]]:
        return []

    def __call__(self, logits: torch.Tensor, pair: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError


def _check_tokens(tokens, what: str) -> None:
    """A single-token string, a token id, or a non-empty list of them (one per prompt pair); fails at construction."""
    items = list(tokens) if isinstance(tokens, (list, tuple)) else [tokens]
    if not items:
        raise InterplabError(f"{what}=[] names no token: give a single-token string (' Mary'), a token id, or one "
                             f"per prompt pair.")
    for t in items:
        if isinstance(t, bool) or not isinstance(t, (str, int)) and not hasattr(t, "__index__"):
            raise InterplabError(f"{what} must be a single-token string (' Mary') or a token id (int), or a list of "
                                 f"them (one per prompt pair); got {type(t).__name__} {t!r}.")


def _ids(tokens, token_id, notes: list[str]) -> torch.Tensor:
    items = list(tokens) if isinstance(tokens, (list, tuple)) else [tokens]
    return torch.tensor([_unspaced(t, token_id(t), token_id, notes) for t in items], dtype=torch.long)


def _unspaced(token, i: int, token_id, notes: list[str]) -> int:
    """A word without its leading space ('Mary') is a token the model rarely predicts after a space; when ' Mary'
    is one token too, it is almost surely the answer meant: say so, as a warning and in `notes` (the views show
    them; the sweep still runs, on 'Mary')."""
    if isinstance(token, str) and token[:1].isalnum():
        try:
            spaced = token_id(" " + token)
        except InterplabError:
            return i
        if spaced != i:
            text = (f"answer {token!r} has no leading space: the metric reads the token {token!r} (id {i}), not "
                    f"{' ' + token!r} (id {spaced}), the word as it follows a space. Use {' ' + token!r} (or pass "
                    f"the id {i} to keep {token!r}).")
            if text not in notes:  # a dataset names the same answer in many pairs: said once per bind
                notes.append(text)
                warnings.warn(text, AnswerSpaceWarning, stacklevel=4)
    return i


def _bound_to(metric: Metric, token_id) -> bool:
    """True when the metric is already bound by this token_id (a view binding a bound metric again: no new
    warning, the same notes)."""
    return getattr(metric, "_token_id", None) is not None and metric._token_id == token_id


def _pick(logits: torch.Tensor, ids: torch.Tensor, pair: torch.Tensor | None) -> torch.Tensor:
    """logits[row, id of that row's pair] (one id broadcasts to every row)."""
    ids = ids.to(logits.device)
    if ids.numel() == 1:
        return logits[:, ids[0]]
    if pair is None:
        if ids.numel() != logits.shape[0]:
            raise InterplabError(f"{ids.numel()} answer tokens for {logits.shape[0]} rows: give one per prompt, or one "
                                 f"for all.")
        pair = torch.arange(logits.shape[0])
    return logits.gather(1, ids[pair.to(logits.device)].unsqueeze(1)).squeeze(1)


class LogitDiff(Metric):
    def __init__(self, answer, wrong):
        _check_tokens(answer, "answer")
        _check_tokens(wrong, "wrong")
        self.answer, self.wrong = answer, wrong
        self._a = self._w = None
        n = max(_count(answer), _count(wrong))
        # a dataset's answers are named by their first pair: the names differ from pair to pair
        self.name = (f"logit diff {_show(answer)} - {_show(wrong)}" if n == 1 else
                     f"logit diff over {n} pairs ({_show(answer)} - {_show(wrong)}, ...)")

    def _answers(self):
        return [("answer", self.answer), ("wrong", self.wrong)]

    def bind(self, token_id):
        if _bound_to(self, token_id):
            return self
        m, notes = LogitDiff(self.answer, self.wrong), []
        m._a, m._w = _ids(self.answer, token_id, notes), _ids(self.wrong, token_id, notes)
        m.notes, m._token_id = tuple(notes), token_id
        return m

    def __call__(self, logits, pair=None):
        _check_bound(self, self._a)
        # in fp32 whatever the model's dtype: a bf16 difference of two large logits loses the answer
        return _pick(logits, self._a, pair).float() - _pick(logits, self._w, pair).float()


class Prob(Metric):
    def __init__(self, token, log: bool = False):
        _check_tokens(token, "token")
        self.token, self.log = token, log
        self._t = None
        kind, n = f"{'log' if log else ''}prob", _count(token)
        self.name = f"{kind} {_show(token)}" if n == 1 else f"{kind} over {n} pairs ({_show(token)}, ...)"

    def _answers(self):
        return [("token", self.token)]

    def bind(self, token_id):
        if _bound_to(self, token_id):
            return self
        m, notes = Prob(self.token, self.log), []
        m._t = _ids(self.token, token_id, notes)
        m.notes, m._token_id = tuple(notes), token_id
        return m

    def __call__(self, logits, pair=None):
        _check_bound(self, self._t)
        lp = torch.log_softmax(logits.float(), dim=-1)
        v = _pick(lp, self._t, pair)
        return v if self.log else v.exp()


class Custom(Metric):
    """Any callable on [rows, vocab] logits that returns a value per row (or one scalar for all rows)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "metric")

    def __call__(self, logits, pair=None):
        v = self.fn(logits.float())  # fp32 logits, whatever the model's dtype (bf16, fp16)
        try:
            v = torch.as_tensor(v, dtype=torch.float32, device=logits.device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise InterplabError(f"metric {self.name!r} returned {type(v).__name__}, not numbers: {e}") from None
        rows = logits.shape[0]
        if v.dim() == 0:
            v = v.expand(rows)
        elif v.numel() == rows:
            v = v.reshape(rows)
        else:
            raise InterplabError(f"metric {self.name!r} returned shape {tuple(v.shape)} for {rows} rows of logits: "
                                 f"return one value per row (or one scalar for all).")
        if not torch.isfinite(v).all():  # a NaN or an inf would pass silently into every normalised value
            bad = "NaN" if torch.isnan(v).any() else "an infinite value"
            raise InterplabError(f"metric {self.name!r} returned {bad}: make it finite on [rows, vocab] logits (e.g. "
                                 f"use log_softmax, not log(softmax)).")
        return v


def logit_diff(answer, wrong) -> LogitDiff:
    """logit(answer) - logit(wrong) at the last position; strings must be single tokens (e.g. ' Mary')."""
    return LogitDiff(answer, wrong)


def prob(token) -> Prob:
    return Prob(token)


def logprob(token) -> Prob:
    return Prob(token, log=True)


def top_k(logits: torch.Tensor, k: int) -> tuple[list[list[int]], list[list[float]]]:
    """Per row of [rows, vocab] logits: the k most probable next-token ids, and their probabilities."""
    p, i = logits.float().softmax(-1).topk(k)
    return i.tolist(), p.tolist()


def as_metric(m) -> Metric:
    if isinstance(m, Metric):
        return m
    if callable(m):
        return Custom(m)
    raise InterplabError(
        f"metric must be ilab.logit_diff(...), ilab.prob(...), ilab.logprob(...) or a callable on [rows, vocab] "
        f"logits, got {type(m).__name__} {m!r}.")


def _check_bound(metric: Metric, ids) -> None:
    if ids is None:
        raise InterplabError(f"{metric.name}: its answer strings are not resolved to token ids yet; call "
                             f"metric.bind(lab.token_id) first (patch_sweep does this for you).")


def _count(t) -> int:
    return len(t) if isinstance(t, Sequence) and not isinstance(t, str) else 1


def _show(t) -> str:
    """An answer as a label: the token, or a dataset's first one."""
    if isinstance(t, Sequence) and not isinstance(t, str):
        return repr(t[0]) if len(t) else "[]"
    return repr(t)
