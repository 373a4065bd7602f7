"""Backends: what runs a forward with edits, a generation with edits and a sweep's cells, behind one interface.

An Engine holds its backends in `engine.backends` by name: "hf", the Hugging Face model it was built on (always
there), and "vllm", a vLLM engine in this process once `engine.use_vllm()` started one (interplab.engine.vllm).
Callers never branch on the backend: they name one or none (`backend=None | "hf" | "vllm"`, as lab.generate,
lab.sample and lab.patch_sweep take it) and the engine chooses (`choose`): a named one must exist and be able to
run the call, else a typed error says why; None takes the serving engine when there is one and it can run the call
(its `unsupported` says what it lacks: sites inside attention, gradients, on_logits, ...), else the Hugging Face
model. Every method takes the Engine, which tokenizes and plans the edits (the Hugging Face side's checks, so bad
input fails the same way on every backend, before anything runs).
"""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass

import torch

from .. import edits as ed
from ..errors import InterplabError, NumberError, OutOfRangeError, UnsupportedSiteError
from . import core
from . import generate as gen

BACKENDS = (None, "hf", "vllm")


class Backend:
    """One way to run the model. Subclasses implement the three kinds of work; `unsupported` says what they lack."""

    name = "?"
    label = "?"  # how errors name it

    def unsupported(self, edits=(), **options) -> str | None:
        """Why this backend cannot run these edits with these options (a truthy option is one asked for), or None."""
        return None

    def forward(self, engine, prompts: list[str], edits=None, *, per_prompt: list | None = None,
                record=()) -> tuple[torch.Tensor, dict]:
        """A forward with edits: (last-position logits [prompts, vocab], {(site, layer): [prompts, pos, width]}
        for the `record`ed sites). per_prompt: one list of edits per prompt instead of `edits`."""
        raise NotImplementedError

    def generate(self, engine, args: gen.GenerateArgs, **options) -> gen.Generation:
        """Generation with edits: `args` checked by generate.check_generate; options are lab.generate's."""
        raise NotImplementedError

    def sample(self, engine, prompts: list[str], model_edits: list, bans: list[int], *, n: int, max_new_tokens: int,
               temperature, top_k, top_p, seed, score_ids: list[int]) -> tuple[list, list, torch.Tensor | None]:
        """n completions per prompt: (ids [prompt][sample][step], the drawn tokens' log-probabilities (same
        shape), the score tokens' log-probabilities [prompt, sample, step, score] or None)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class HFBackend(Backend):
    """The Hugging Face model the Engine holds: every site, gradients, caches; generation through model.generate."""

    name, label = "hf", "the Hugging Face model"

    def forward(self, engine, prompts, edits=None, *, per_prompt=None, record=()):
        record = list(record)
        groups = [(prompts, list(edits or []))] if per_prompt is None else [([p], list(es)) for p, es in
                                                                              zip(prompts, per_prompt)]
        runs = [engine.run(ps, es, cache=record, log=False) for ps, es in groups]
        return (torch.cat([r.last_logits for r in runs]),
                {k: torch.cat([r.cache[k] for r in runs]) for k in map(tuple, record)})

    def generate(self, engine, args, **options):
        return gen.generate(engine, args.prompts, args.edits, **options)

    def sample(self, engine, prompts, model_edits, bans, *, n, max_new_tokens, temperature, top_k, top_p, seed,
               score_ids):
        """One generate per sample (its own seed), reading the edited model's log-probabilities at each step from
        the logits the sampler sees."""
        greedy = temperature is None
        ids, lps = [[] for _ in prompts], [[] for _ in prompts]
        scores = torch.full((len(prompts), n, max_new_tokens, len(score_ids)), math.nan) if score_ids else None
        for i, p in enumerate(prompts):
            rows = [e.with_(batch=None) for e in model_edits if i in ed.selected_rows(e.batch, len(prompts))]
            for k in range(n):
                seen = []
                g = gen.generate(
                    engine, p, rows + [gen.SamplerEdit("ban", t) for t in bans], max_new_tokens=max_new_tokens,
                    greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
                    seed=None if seed is None else seed + i * n + k,
                    on_logits=lambda step, logits, seen=seen: seen.append(logits[0].float().log_softmax(-1)))
                got = g.ids[0].tolist()[:len(seen)]  # (one logits row per step taken: EOS ends it early)
                ids[i].append(got)
                lps[i].append([float(seen[s][t]) for s, t in enumerate(got)])
                if scores is not None:
                    for s in range(len(got)):
                        scores[i, k, s] = seen[s][score_ids]
        return ids, lps, scores


def choose(engine, name: str | None = None, edits=(), *, what: str = "this call", **options) -> Backend:
    """The backend that runs this call: `name` ('hf', 'vllm'), or None for the serving engine when the engine has
    one and it can run the call, else the Hugging Face model. A named backend that is missing or cannot run the
    call raises, saying why and what to use instead."""
    if name not in BACKENDS:
        raise InterplabError(f"backend={name!r}: use 'hf' (the Hugging Face model), 'vllm' (the lab's vLLM "
                             f"engine) or None (vLLM when the lab has one).")
    if name is not None and name not in engine.backends:
        raise InterplabError(f"backend={name!r} but this lab has no vLLM engine: start one with lab.use_vllm() (pip "
                             f"install 'interplab[vllm]'), or load with Lab.load(name, engine='vllm').")
    order = [name] if name is not None else [n for n in ("vllm", "hf") if n in engine.backends]
    for n in order:
        backend = engine.backends[n]
        why = backend.unsupported(edits, **options)
        if why is None:
            return backend
        if name is not None:
            raise UnsupportedSiteError(f"{what} on {backend.label}: {why}. Use backend='hf' (or None: the Hugging "
                                       f"Face model takes such calls).")
    raise InterplabError(f"internal: no backend can run {what}.")


def eos_ids(engine) -> set[int]:
    """The token ids that end a generation: the model's generation config's and the tokenizer's."""
    cfg = getattr(engine.model, "generation_config", None)
    e = getattr(cfg, "eos_token_id", None)
    ids = set(e) if isinstance(e, (list, tuple)) else {e}
    ids.add(engine.tokenizer.eos_token_id)
    return {i for i in ids if i is not None}


# ---- generation ----------------------------------------------------------------------------------------------------

def generate(engine, prompt, edits=None, *, backend: str | None = None, max_new_tokens: int = 20,
             greedy: bool | None = None, temperature: float | None = None, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop_at_eos: bool = True,
             cancel: threading.Event | None = None, **hf_only) -> gen.Generation:
    """lab.generate (interplab.engine.generate.generate's arguments) on the backend `choose` picks: backend None
    takes vLLM when the lab has an engine and the call needs nothing vLLM lacks (on_logits, logits_processor,
    use_cache=False, model.generate keywords, sites inside attention, ban_expert); 'hf' or 'vllm' choose. Greedy
    output is the same token for token on both."""
    common = dict(max_new_tokens=max_new_tokens, greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
                  seed=seed)
    args = gen.check_generate(engine, prompt, edits, on_logits=hf_only.get("on_logits"), **common)
    options = {k: v for k, v in hf_only.items() if k != "use_cache"}
    chosen = choose(engine, backend, args.model_edits, what="lab.generate", use_cache=hf_only.get("use_cache") is False,
                    **options)
    return chosen.generate(engine, args, stop_at_eos=stop_at_eos, cancel=cancel, **common, **hf_only)


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


def sample(engine, prompts, edits=None, *, n: int = 1, max_new_tokens: int = 20, temperature: float | None = 1.0,
           top_k: int | None = None, top_p: float | None = None, seed: int | None = 0, score=None,
           backend: str | None = None) -> Samples:
    """n completions of each prompt with `edits` active (lab.generate's edits: model edits and ban_token), each
    token's log-probability, and the log-probabilities of the `score` tokens at every step (e.g. [" love", " hate"]
    to read a steering vector's effect). temperature=None samples greedily (then n must be 1). On the vLLM engine
    when the lab has one; the same numbers come from the Hugging Face model with backend='hf'."""
    prompts = core.as_prompts(prompts)
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
    bans = [engine.token_id(e.token) for e in edits if isinstance(e, gen.SamplerEdit)]
    score_ids = [engine.token_id(t) for t in ([score] if isinstance(score, (str, int)) else list(score or []))]
    chosen = choose(engine, backend, model_edits, what="lab.sample")
    ids, lps, scores = chosen.sample(engine, prompts, model_edits, bans, n=n, max_new_tokens=max_new_tokens,
                                     temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                     score_ids=score_ids)
    eos = eos_ids(engine)
    texts = [[engine.tokenizer.decode([t for t in s if t not in eos], skip_special_tokens=True) for s in p]
             for p in ids]
    return Samples(prompts, texts, ids, lps, score_ids, scores, chosen.name)


__all__ = ["Backend", "HFBackend", "BACKENDS", "choose", "generate", "sample", "Samples", "eos_ids"]
