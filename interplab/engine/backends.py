"""Runs on a serving engine (vLLM): steered generation, sampling for evaluation, prefill-only patched runs.

The lab keeps its Hugging Face model (caches, gradients, attention patterns, every site); a lab with a vLLM engine
(`lab.use_vllm()`, or `Lab.load(name, engine="vllm")`) also sends these through vLLM, which batches requests of any
length without padding and keeps a paged key-value cache. Edits are planned on the Hugging Face side first (so a
wrong site, layer or position fails the same way, before anything runs), then each prompt's request carries the
edits whose batch= selects it: per request.
"""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass

import torch

from .. import edits as ed
from ..errors import InterplabError, LengthMismatchError, NumberError, OutOfRangeError, UnsupportedSiteError
from . import generate as gen
from .core import as_prompts
from .vllm import VLLM_SITES, RequestPlan

BACKENDS = (None, "hf", "vllm")


def check_backend(lab, backend) -> bool:
    """True when this call goes to vLLM: backend='vllm' (the lab must have an engine), or None and it has one."""
    if backend not in BACKENDS:
        raise InterplabError(f"backend={backend!r}: use 'hf' (the Hugging Face model), 'vllm' (the lab's vLLM "
                             f"engine) or None (vLLM when the lab has one).")
    if backend == "vllm" and getattr(lab, "vllm", None) is None:
        raise InterplabError("backend='vllm' but this lab has no vLLM engine: start one with lab.use_vllm() (pip "
                             "install 'interplab[vllm]'), or load with Lab.load(name, engine='vllm').")
    return backend == "vllm" or (backend is None and getattr(lab, "vllm", None) is not None)


def unsupported(edits: list, **options) -> str | None:
    """Why vLLM cannot run these edits or options (None: it can)."""
    for name, value in options.items():
        if value:
            return f"{name}= runs on the Hugging Face model only"
    for e in edits:
        if isinstance(e, ed.Edit):
            if e.op == "ban_expert":
                return "ban_expert re-routes inside vLLM's fused mixture-of-experts kernels"
            if e.site not in VLLM_SITES:
                return (f"site {e.site!r} is not reachable in vLLM (it takes {', '.join(VLLM_SITES)}; attention's "
                        f"insides are fused kernels there)")
            if e.op == "stop_grad":
                return "stop_grad is for gradients, which vLLM does not compute"
    return None


def request_plans(lab, prompts: list[str], edits: list, lengths: list[int], *, want_logits: bool = False,
                  record=()) -> list[RequestPlan]:
    """One plan per prompt: the edits whose batch= selects it, each resolved to one layer, its source sliced to
    this prompt's row (a source of one row serves every prompt)."""
    planned = gen.plan_edits(lab, edits, lengths)  # the Hugging Face side's checks and sources
    plans = [RequestPlan([], n, tuple(record), want_logits) for n in lengths]
    for pe in planned:
        rows = ed.selected_rows(pe.edit.batch, len(prompts))
        # one Edit object for all its requests: the engine applies an edit shared this way to them in one call
        e = pe.edit.with_(batch=None, layer=pe.site.layer)
        for i in rows:
            src = pe.source
            if src is not None and src.dim() >= 2 and src.shape[0] > 1:
                if src.shape[0] != len(prompts):
                    raise LengthMismatchError(
                        f"{e.describe()}: the patch source has {src.shape[0]} rows but there are {len(prompts)} "
                        f"prompts; use a source of 1 row or of one row per prompt.")
                src = src[i:i + 1]
            plans[i].edits.append((e, src))
    return plans


def token_rows(lab, prompts: list[str], new_tokens: int = 0) -> tuple[list[list[int]], list[int]]:
    """Each prompt's token ids, unpadded (vLLM batches without padding), checked against the context like lab.run's."""
    ids, _, lengths = lab.encode(prompts, new_tokens=new_tokens)
    return [ids[i, :n].tolist() for i, n in enumerate(lengths)], lengths


# ---- generation --------------------------------------------------------------------------------------------------

def generate(lab, prompt, edits=None, *, backend: str | None = None, max_new_tokens: int = 20,
             greedy: bool | None = None, temperature: float | None = None, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop_at_eos: bool = True,
             cancel: threading.Event | None = None, **hf_only) -> gen.Generation:
    """lab.generate: on the lab's vLLM engine or its Hugging Face model (interplab.steering.generate, whose
    arguments these are). backend None takes vLLM when the lab has an engine and the call needs nothing vLLM lacks
    (on_logits, logits_processor, use_cache=False, model.generate keywords, sites inside attention, ban_expert);
    'hf' or 'vllm' choose. Greedy output is the same token for token on both."""
    common = dict(max_new_tokens=max_new_tokens, greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
                  seed=seed)
    args = gen.check_generate(lab, prompt, edits, on_logits=hf_only.get("on_logits"), **common)
    if check_backend(lab, backend):
        why = unsupported(args.model_edits, **{k: v for k, v in hf_only.items() if k != "use_cache"},
                          use_cache=hf_only.get("use_cache") is False)
        if why is None:
            return _generate_vllm(lab, args, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                  stop_at_eos=stop_at_eos, cancel=cancel)
        if backend == "vllm":
            raise UnsupportedSiteError(f"lab.generate on vLLM: {why}. Use backend='hf' (or None: the Hugging Face "
                                       f"model takes such calls).")
    return gen.generate(lab, prompt, edits, stop_at_eos=stop_at_eos, cancel=cancel, **common, **hf_only)


def _generate_vllm(lab, args: gen.GenerateArgs, *, temperature, top_k, top_p, seed, stop_at_eos: bool,
                   cancel: threading.Event | None) -> gen.Generation:
    prompts, model_edits, sampler = args.prompts, args.model_edits, args.sampler
    max_new_tokens, greedy = args.max_new_tokens, args.greedy
    rows, lengths = token_rows(lab, prompts, max_new_tokens)
    plans = request_plans(lab, prompts, model_edits, lengths)
    bans = [lab.token_id(s.token) for s in sampler if s.op == "ban"]
    forces = {s.step: lab.token_id(s.token) for s in sampler if s.op == "force"}
    new = [[] for _ in prompts]
    open_rows = list(range(len(prompts)))
    eos = _eos_ids(lab)
    # a forced token splits generation: run to the step before it, append it, go on from there (the plans keep the
    # original prompt length, so position words and steps= still count from the real prompt)
    for stop in sorted(forces) + [max_new_tokens]:
        todo = [i for i in open_rows if len(new[i]) < stop]
        if todo:
            params = [_params(stop - len(new[i]), greedy, temperature, top_k, top_p,
                              None if seed is None else seed + i + 7919 * len(new[i]), stop_at_eos, bans)
                      for i in todo]
            outs = lab.vllm.run([rows[i] + new[i] for i in todo], [plans[i] for i in todo], params, cancel=cancel)
            for i, out in zip(todo, outs):
                new[i] += out.ids
                if out.finish_reason == "abort" or (stop_at_eos and out.ids and out.ids[-1] in eos):
                    open_rows.remove(i)
        if cancel is not None and cancel.is_set():
            break
        if stop in forces:
            for i in open_rows:
                new[i].append(forces[stop])
    return _as_generation(lab, prompts, rows, lengths, new, args.edits, stop_at_eos, eos)


def _params(max_tokens: int, greedy: bool, temperature, top_k, top_p, seed, stop_at_eos: bool, bans,
            logprobs: bool = False, logprob_ids=None):
    from vllm import SamplingParams

    kw = dict(max_tokens=max_tokens, ignore_eos=not stop_at_eos, detokenize=False, seed=seed)
    if greedy:
        kw["temperature"] = 0.0
    else:
        kw.update(temperature=1.0 if temperature is None else float(temperature), top_k=top_k or 0,
                  top_p=1.0 if top_p is None else float(top_p))
    if bans:
        kw["logit_bias"] = {int(t): -math.inf for t in bans}
    if logprobs or logprob_ids:  # the drawn token's own log-probability (raw: the edited model's, before the sampler)
        kw["logprobs"] = len(logprob_ids or [])  # (vLLM: as many as the ids asked for, or 0 for the drawn one only)
    if logprob_ids:
        kw["logprob_token_ids"] = list(logprob_ids)
    return SamplingParams(**kw)


def _eos_ids(lab) -> set[int]:
    cfg = getattr(lab.model, "generation_config", None)
    e = getattr(cfg, "eos_token_id", None)
    ids = set(e) if isinstance(e, (list, tuple)) else {e}
    ids.add(lab.tokenizer.eos_token_id)
    return {i for i in ids if i is not None}


def _as_generation(lab, prompts, rows, lengths, new, edits, stop_at_eos, eos):
    tok = lab.tokenizer
    pad = lab.pad_id
    width, longest = max(lengths), max((len(n) for n in new), default=0)
    ids = torch.full((len(prompts), longest), pad, dtype=torch.long)
    seqs = torch.full((len(prompts), width + longest), pad, dtype=torch.long)
    texts, toks = [], []
    for i, (row, got) in enumerate(zip(rows, new)):
        ids[i, :len(got)] = torch.tensor(got, dtype=torch.long)
        seqs[i, width - len(row):width] = torch.tensor(row)
        seqs[i, width:width + len(got)] = ids[i, :len(got)]
        real = got[:next((k for k, t in enumerate(got) if t in eos), len(got))] if stop_at_eos else got
        texts.append(tok.decode(real, skip_special_tokens=True))
        toks.append([tok.decode([t]) for t in real])
    return gen.Generation(prompts, texts, ids, seqs, lengths, list(edits), toks)


# ---- sampling for evaluation --------------------------------------------------------------------------------------

@dataclass
class Samples:
    """What lab.sample returns: n completions per prompt under the edits, with log-probabilities."""

    prompts: list[str]
    texts: list[list[str]]  # [prompt][sample]
    ids: list[list[list[int]]]  # [prompt][sample][step]
    logprobs: list[list[list[float]]]  # [prompt][sample][step]: the drawn token's log-probability
    score_tokens: list[int]  # the token ids asked for with score=
    scores: torch.Tensor | None  # [prompt, sample, step, len(score)] their log-probabilities (NaN after the end)
    backend: str

    def mean_logprob(self) -> torch.Tensor:
        """[prompt, sample]: each completion's mean per-token log-probability."""
        return torch.tensor([[sum(s) / max(len(s), 1) for s in p] for p in self.logprobs])

    def __repr__(self) -> str:
        return (f"Samples({len(self.prompts)} prompts x {len(self.texts[0]) if self.texts else 0}, "
                f"backend={self.backend!r})")


def sample(lab, prompts, edits=None, *, n: int = 1, max_new_tokens: int = 20, temperature: float | None = 1.0,
           top_k: int | None = None, top_p: float | None = None, seed: int | None = 0, score=None,
           backend: str | None = None) -> Samples:
    """n completions of each prompt with `edits` active (lab.generate's edits: model edits and ban_token), each
    token's log-probability, and the log-probabilities of the `score` tokens at every step (e.g. [" love", " hate"]
    to read a steering vector's effect). temperature=None samples greedily (then n must be 1). On the vLLM engine
    when the lab has one; the same numbers come from the Hugging Face model with backend='hf'."""
    prompts = as_prompts(prompts)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise OutOfRangeError(f"n must be an int >= 1 (completions per prompt), got {n!r}.")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 1:
        raise OutOfRangeError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}.")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
                                    or not math.isfinite(temperature) or temperature <= 0):
        raise NumberError(f"temperature={temperature!r}: a finite number > 0, or None for greedy decoding.")
    if temperature is None and n != 1:
        raise InterplabError(f"temperature=None decodes greedily, which gives one completion; n={n} needs sampling "
                             f"(temperature=1.0).")
    edits = list(edits or [])
    if any(isinstance(e, gen.SamplerEdit) and e.op == "force" for e in edits):
        raise InterplabError("lab.sample takes ban_token but not force_token: force a token by putting it at the "
                             "end of the prompt.")
    model_edits = [e for e in edits if isinstance(e, ed.Edit)]
    bans = [lab.token_id(e.token) for e in edits if isinstance(e, gen.SamplerEdit)]
    score_ids = [lab.token_id(t) for t in ([score] if isinstance(score, (str, int)) else list(score or []))]
    use_vllm = check_backend(lab, backend)
    if use_vllm:
        why = unsupported(model_edits)
        if why is not None:
            if backend == "vllm":
                raise UnsupportedSiteError(f"lab.sample on vLLM: {why}. Use backend='hf'.")
            use_vllm = False
    greedy = temperature is None
    if use_vllm:
        rows, lengths = token_rows(lab, prompts, max_new_tokens)
        plans = request_plans(lab, prompts, model_edits, lengths)
        # one request per sample, each with its own seed: samples are reproducible one by one
        params = [_params(max_new_tokens, greedy, temperature, top_k, top_p,
                          None if seed is None else seed + k, True, bans, logprobs=True,
                          logprob_ids=score_ids or None)
                  for k in range(len(prompts) * n)]
        outs = lab.vllm.run([r for r in rows for _ in range(n)], [plans[k // n] for k in range(len(params))], params)
        ids = [[o.ids for o in outs[i * n:(i + 1) * n]] for i in range(len(prompts))]
        lps = [[[step.get(t, math.nan) for t, step in zip(o.ids, o.logprobs)] for o in outs[i * n:(i + 1) * n]]
               for i in range(len(prompts))]
        scores = None
        if score_ids:
            scores = torch.full((len(prompts), n, max_new_tokens, len(score_ids)), math.nan)
            for k, o in enumerate(outs):
                for s, step in enumerate(o.logprobs):
                    scores[k // n, k % n, s] = torch.tensor([step.get(t, math.nan) for t in score_ids])
        which = "vllm"
    else:
        ids, lps, scores = _sample_hf(lab, prompts, model_edits, bans, n, max_new_tokens, greedy, temperature,
                                      top_k, top_p, seed, score_ids)
        which = "hf"
    eos = _eos_ids(lab)
    texts = [[lab.tokenizer.decode([t for t in s if t not in eos], skip_special_tokens=True) for s in p] for p in ids]
    return Samples(prompts, texts, ids, lps, score_ids, scores, which)


def _sample_hf(lab, prompts, model_edits, bans, n, max_new_tokens, greedy, temperature, top_k, top_p, seed,
               score_ids):
    """The Hugging Face side of lab.sample: one generate per sample (its own seed), reading the edited model's
    log-probabilities at each step from the logits the sampler sees."""
    ids, lps = [[] for _ in prompts], [[] for _ in prompts]
    scores = torch.full((len(prompts), n, max_new_tokens, len(score_ids)), math.nan) if score_ids else None
    for i, p in enumerate(prompts):
        rows = [e.with_(batch=None) for e in model_edits if i in ed.selected_rows(e.batch, len(prompts))]
        for k in range(n):
            seen = []
            g = gen.generate(
                lab, p, rows + [gen.SamplerEdit("ban", t) for t in bans], max_new_tokens=max_new_tokens, greedy=greedy,
                temperature=temperature, top_k=top_k, top_p=top_p, seed=None if seed is None else seed + i * n + k,
                on_logits=lambda step, logits, seen=seen: seen.append(logits[0].float().log_softmax(-1)))
            got = g.ids[0].tolist()[:len(seen)]  # (one logits row per step taken: EOS ends it early)
            ids[i].append(got)
            lps[i].append([float(seen[s][t]) for s, t in enumerate(got)])
            if scores is not None:
                for s in range(len(got)):
                    scores[i, k, s] = seen[s][score_ids]
    return ids, lps, scores


# ---- prefill-only patched runs ------------------------------------------------------------------------------------

def last_logits(lab, prompts, edits=None, *, per_prompt: list | None = None) -> torch.Tensor:
    """[prompts, vocab] logits at each prompt's last position, with `edits` (or one list of edits per prompt in
    per_prompt) applied, each prompt one vLLM request. Equal to lab.run(prompts, edits).last_logits up to vLLM's
    arithmetic."""
    prompts = as_prompts(prompts)
    rows, lengths = token_rows(lab, prompts)
    if per_prompt is not None:
        if len(per_prompt) != len(prompts):
            raise LengthMismatchError(f"per_prompt has {len(per_prompt)} edit lists for {len(prompts)} prompts.")
        plans = [request_plans(lab, [p], list(es), [n], want_logits=True)[0]
                 for p, es, n in zip(prompts, per_prompt, lengths)]
    else:
        plans = request_plans(lab, prompts, list(edits or []), lengths, want_logits=True)
    _prefill(lab, rows, plans)
    return torch.stack([p.logits for p in plans])


def _prefill(lab, rows, plans) -> None:
    from vllm import SamplingParams

    why = unsupported([e for p in plans for e, _ in p.edits])
    if why is not None:
        raise UnsupportedSiteError(f"vLLM: {why}. Use the Hugging Face engine (backend='hf').")
    # a recording request computes every prompt token itself (a cached prefix would skip them)
    params = [SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                             skip_reading_prefix_cache=bool(p.record) or None) for p in plans]
    lab.vllm.run(rows, plans, params)
    missing = [i for i, p in enumerate(plans) if p.want_logits and p.logits is None]
    if missing:
        raise InterplabError(f"internal: vLLM returned no logits for requests {missing[:5]}.")


def cached(lab, prompts, sites: list[tuple[str, int]]) -> tuple[torch.Tensor, dict]:
    """Prompts run once through vLLM recording (site, layer) activations: (last logits [n, vocab],
    {(site, layer): [n, pos, width]}) - prompts of one token length, as a sweep by position needs."""
    prompts = as_prompts(prompts)
    rows, lengths = token_rows(lab, prompts)
    plans = [RequestPlan([], n, tuple(sites), True) for n in lengths]
    _prefill(lab, rows, plans)
    if len(set(lengths)) > 1:
        raise LengthMismatchError(f"recorded prompts must have one token length; got {sorted(set(lengths))}.")
    return torch.stack([p.logits for p in plans]), {k: torch.stack([p.cache[k] for p in plans]) for k in sites}




__all__ = ["generate", "sample", "Samples", "last_logits", "cached", "check_backend", "unsupported"]
