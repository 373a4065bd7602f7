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
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import edits as ed
from ..errors import InterplabError, NumberError, OutOfRangeError, UnsupportedSiteError
from ..sites import FULL_FORWARD, HEADED
from . import generate as gen
from . import heap, resume
from .prompts import as_prompts

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

    def sweep_cells(self, engine, site: str, layer: int, cells: list, base: list[str], *, ids: torch.Tensor,
                    mask: torch.Tensor, lengths: list[int], hidden: torch.Tensor, source: torch.Tensor,
                    n_heads: int) -> torch.Tensor:
        """A sweep's cells: for each cell ((pos, head), first changed position) of (site, layer) and each base
        prompt (ids, mask, lengths: the padded batch), the base run with the source activation [pairs, pos, ...]
        patched in at the cell; their last-position logits [cells * pairs, vocab], cell-major (row c * pairs + i is
        cell c, pair i). hidden: the base run's residual where a patched forward at this layer starts."""
        raise NotImplementedError

    def sweep_fits(self, engine, site: str, base: list[str], ids: torch.Tensor, mask: torch.Tensor,
                   budget: int) -> Callable[[int], int] | None:
        """first changed position -> how many cells one sweep_cells call may take within `budget` bytes; None: no
        limit of the backend's own (it schedules its memory itself)."""
        return None

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
        if len(runs) == 1:  # (the run's own tensors, not copies: a sweep's caches can be large)
            return runs[0].last_logits, {k: runs[0].cache[k] for k in map(tuple, record)}
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


    def sweep_fits(self, engine, site, base, ids, mask, budget):
        """The chunk computes positions first.. (all of them where its forward cannot resume at a position, see
        sweep_cells) over every key position, n_pairs rows per cell."""
        n_pairs, n_pos = ids.shape
        resumes = bool(mask.all()) and site not in FULL_FORWARD and engine.kv_prefix(base, 1) is not None

        def fits(first: int) -> int:
            q_len = n_pos - first if resumes and first else n_pos
            return max(1, budget // (resume.row_bytes(engine.model, q_len, n_pos) * n_pairs))
        return fits

    def sweep_cells(self, engine, site, layer, cells, base, *, ids, mask, lengths, hidden, source, n_heads):
        """One batched forward for the cells, resumed from `hidden` (the base run's residual at the start layer),
        with `source` patched in; positions before the cells' earliest change come from the base run's cached keys
        and values."""
        return _resumed_cells(engine, site, layer, cells, base, ids, mask, lengths, hidden, source, n_heads)


def _row_patch(src: torch.Tensor, row_mask: torch.Tensor, n_heads: int | None) -> Callable:
    """t -> t with src written where row_mask holds: src [n_pairs, pos, ...] is every cell's (rows are cell-major,
    row c * n_pairs + i = pair i), row_mask [rows, pos] or [rows, pos, heads]."""
    n_pairs = src.shape[0]

    def edit(t):
        mask, value = row_mask.to(t.device), src.to(t.device)  # (a device_map may run the layer elsewhere)
        cells = t.unflatten(0, (-1, n_pairs))  # [cells, n_pairs, pos, ...]: value broadcasts over the cells
        mask = mask.unflatten(0, (-1, n_pairs))
        if n_heads is not None and mask.dim() == 4:
            x = cells.unflatten(-1, (n_heads, -1))
            return torch.where(mask[..., None], value.unflatten(-1, (n_heads, -1)), x).flatten(-2).flatten(0, 1)
        return torch.where(mask[..., None], value, cells).flatten(0, 1)
    return edit


def _resumed_cells(engine, site, layer, chunk, base, base_ids, pair_mask, lengths, base_hidden, src, n_heads):
    dev = engine.device
    n_pairs, n_pos = base_ids.shape
    n_cells = len(chunk)
    rows = n_cells * n_pairs  # cell-major: rows [c * n_pairs + i] = cell c, pair i
    site_point = engine.sites.point(site, layer)
    start = layer + 1 if site == "resid_post" else layer
    # positions before the chunk's earliest changed one are those of the base run: keys/values from its cache
    first = min(c[1] for c in chunk)
    # (rot_k and the pattern span every key position: their forwards cannot start on top of cached keys)
    resumable = first and bool(pair_mask.all()) and site not in FULL_FORWARD
    prefix = engine.kv_prefix(base, first, n_cells) if resumable else None
    first = first if prefix is not None else 0

    heads = site in HEADED
    mask = torch.zeros(n_cells, n_pairs, n_pos, *( [n_heads] if heads else []), dtype=torch.bool)
    for c, ((p, h), _) in enumerate(chunk):
        sel_pos = slice(None) if p is None else slice(p, p + 1)
        if heads:
            mask[c, :, sel_pos, slice(None) if h is None else slice(h, h + 1)] = True
        else:
            mask[c, :, sel_pos] = True
    real = pair_mask.bool()[None, :, :]  # never patch padding
    mask &= real.reshape(1, n_pairs, n_pos, *([1] if heads else []))
    mask = mask.reshape(rows, n_pos, *([n_heads] if heads else []))[:, first:].to(dev)
    src = src[:, first:].to(dev)  # [n_pairs, ...]: broadcast over the cells, never repeated per row
    base_hidden = base_hidden[:, first:].to(dev)
    patches = []
    if site in ("resid_pre", "resid_post"):
        cell_mask = mask.unflatten(0, (n_cells, n_pairs))[..., None]
        hidden = torch.where(cell_mask, src, base_hidden).flatten(0, 1)
    else:
        hidden = base_hidden.repeat(n_cells, 1, 1)
        patches.append((site_point, _row_patch(src, mask, n_heads if heads else None)))
    ids = base_ids[:, first:].to(dev).repeat(n_cells, 1)
    attn = pair_mask.to(dev).repeat(n_cells, 1)
    last = (torch.tensor(lengths) - 1 - first).repeat(n_cells).to(dev)
    kw = {}
    if prefix is not None:
        kw = {"position_ids": torch.arange(first, n_pos, device=dev)[None].expand(rows, -1), "use_cache": True,
              **prefix}
    with torch.no_grad():
        logits = resume.resumed_last_logits(engine.model, engine.sites.arch, start, hidden, ids, attn, last, patches,
                                            owner="interplab.sweep", **kw)
    if dev.type == "cpu":  # the chunk's activations, freed, go back to the system (engine.heap)
        heap.release_free()
    return logits


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
