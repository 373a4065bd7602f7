"""Generation with edits, and edits bound to every call of the plain model: the hooks of both, attached here.

Edits are active at every decoding step. Which tokens an edit touches is a function of each token's absolute
position only (see interplab.edits: pos words "prompt", "generated", "newest", "content" and `steps`), so greedy
output is identical with and without a KV cache. Every hook goes through interplab's HookManager: it is removed
when generation ends, by success, an exception or KeyboardInterrupt, and the user's own hooks are never touched.

Sampler edits act on what the sampler draws from: ban_token(t) sets the logit of t to -inf at every step;
force_token(t, step) makes the token drawn at `step` (0 = the first new token) be t, and the next step continues
from it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from ..edits import FRESH_OPS, POS_SELECTORS, ApplyContext, Edit, position_table, selection_mask
from ..errors import (
    InterplabError,
    NumberError,
    OutOfRangeError,
    UnknownSiteError,
    UnsupportedSiteError,
)
from ..sites import HookPoint
from .hooks import HookManager, Plan, PlannedEdit, install, run_lock


@dataclass(frozen=True)
class SamplerEdit:
    """An edit of what the sampler draws from: 'ban' a token at every step, or 'force' a token at one step."""

    op: str  # "ban" | "force"
    token: int | str
    step: int | None = None  # force: the generation step (0 = the first new token)

    def describe(self) -> str:
        return f"ban {self.token!r}" if self.op == "ban" else f"force {self.token!r} at step {self.step}"


# ---- per-forward position state --------------------------------------------------------------------------------

class _State:
    """What the current forward of the model holds: set by a pre-hook on the model before any edit hook runs."""

    def __init__(self, special_ids: list[int], prompt_lengths: list[int] | None = None, needs_special: bool = True):
        self.special_ids = torch.tensor(sorted(set(special_ids)), dtype=torch.long)
        self.needs_special = needs_special  # an edit reads which tokens are special (pos='content')
        self.prompt_lengths = prompt_lengths
        self.positions: torch.Tensor | None = None
        self.lengths: list[int] = []
        self.special: torch.Tensor | None = None
        self.step = -1
        self.shape: tuple[int, int] | None = None
        self.tables: dict[int, torch.Tensor] = {}  # id(PlannedEdit) -> its position_table, for the generation
        self.everywhere: set[int] = set()  # id(PlannedEdit) of those that act at every row and position

    def pre_hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is None and args and isinstance(args[0], torch.Tensor):
            ids = args[0]
        x = ids if ids is not None else kwargs.get("inputs_embeds")
        if x is None:
            self.positions = None
            return None
        b, t = x.shape[0], x.shape[1]
        mask = kwargs.get("attention_mask")
        if mask is None and len(args) > 1 and isinstance(args[1], torch.Tensor):
            mask = args[1]
        pos_ids = kwargs.get("position_ids")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2 and mask.shape[0] == b and mask.shape[1] >= t:
            mask = mask.detach().cpu().long()  # covers cache + this input: padding anywhere, real positions counted
            cur = (mask.cumsum(1) - 1)[:, -t:].clone()
            cur[mask[:, -t:] == 0] = -1
        elif isinstance(pos_ids, torch.Tensor) and pos_ids.dim() == 2 and tuple(pos_ids.shape) == (b, t):
            cur = pos_ids.detach().cpu().long().clone()  # generate drops an all-ones mask but passes positions
        else:
            offset = _past_length(kwargs)
            cur = torch.arange(offset, offset + t).expand(b, t).clone()
        self.positions = cur
        self.lengths = (cur.max(1).values + 1).clamp(min=0).tolist()
        self.special = torch.isin(ids.detach().cpu(), self.special_ids) if ids is not None and self.needs_special \
            else None
        self.shape = (b, t)
        self.step += 1
        return None

    def post_hook(self, module, args, output):
        self.positions = None
        self.shape = None
        return None

    def ctx_for(self, lab):
        """The lab's edit contexts for the forward running now (its positions change every decoding step)."""
        def ctx_for(pe) -> ApplyContext:
            if self.positions is None:  # a submodule called on its own: plain positions 0..t-1
                return lab.contexts([])(pe)
            return lab.contexts(self.lengths, positions=self.positions, prompt_lengths=self.prompt_lengths,
                                special=self.special, step=self.step, table=self.tables.get(id(pe)),
                                everywhere=id(pe) in self.everywhere)(pe)
        return ctx_for


def _past_length(kwargs) -> int:
    cp = kwargs.get("cache_position")
    if isinstance(cp, torch.Tensor) and cp.numel():
        return int(cp.reshape(-1)[0])
    past = kwargs.get("past_key_values", kwargs.get("cache"))
    if past is not None and hasattr(past, "get_seq_length"):
        try:
            return int(past.get_seq_length())
        except Exception:  # noqa: BLE001 - an exotic cache: assume none
            return 0
    return 0


# ---- planning ------------------------------------------------------------------------------------------------

@dataclass
class _Planned:
    plan: Plan = field(default_factory=Plan)
    routers: dict = field(default_factory=dict)  # module path -> [Edit]


def _plan(lab, edits: list, lengths: list[int], *, generating: bool) -> _Planned:
    out = _Planned()
    for e in edits:
        if not isinstance(e, Edit):
            raise InterplabError(
                f"edits must be ilab edits (ilab.steer, ilab.zero, ilab.ban_expert ...), got {type(e).__name__}. "
                f"Sampler edits (ban_token / force_token) work in lab.generate only.")
        if not generating:
            if e.steps is not None:
                raise InterplabError(
                    f"{e.describe()}: steps= needs to know where the prompt ends, which only lab.generate does. "
                    f"Bound edits apply to every forward; use pos= (e.g. pos='newest') instead.")
            if e.pos in ("prompt", "generated"):
                raise InterplabError(
                    f"{e.describe()}: pos={e.pos!r} needs to know where the prompt ends, which only lab.generate "
                    f"does. Bound edits take None, ints, slices, 'newest' or 'content'.")
        if e.op == "ban_expert":
            for layer in lab.sites.layers_of(e.layer):
                path = _router_path(lab, e.site, layer)
                out.routers.setdefault(path, []).append(e)
            continue
        probe = e.with_(pos=None) if isinstance(e.pos, str) else e
        if isinstance(e.pos, str) and e.pos not in POS_SELECTORS:
            raise InterplabError(f"unknown position selector {e.pos!r}: allowed {', '.join(POS_SELECTORS)}.")
        if not generating:
            probe = e.with_(pos=None, batch=None)  # bound: positions and rows are checked per call
        for pe in lab.plan_edit(probe, len(lengths), lengths):
            pe.edit = e
            out.plan.edits.append(pe)
    return out


def plan_edits(lab, edits: list, lengths: list[int]) -> list[PlannedEdit]:
    """lab.generate's planning (checks, one PlannedEdit per layer, patch sources resolved), for an engine that
    applies the edits itself (the vLLM backend); ban_expert has no such form."""
    planned = _plan(lab, edits, lengths, generating=True)
    if planned.routers:
        raise UnsupportedSiteError("ban_expert re-routes inside the model's router: it runs on the Hugging Face "
                                   "model only (backend='hf').")
    return planned.plan.edits


def _router_path(lab, site: str, layer: int) -> str:
    if site != "router":
        path = site.replace("{layer}", str(layer))
        for suffix in (".output", ".input"):
            path = path.removesuffix(suffix)
        try:
            lab.model.get_submodule(path)
        except AttributeError:
            raise UnknownSiteError(f"ban_expert: no module {path!r} in this model; "
                                   f"see lab.engine.module_names().") from None
        return path
    arch = lab.sites.arch
    if arch is None:
        raise UnsupportedSiteError("ban_expert: unknown architecture; pass site='<path to the router>.{layer}...'.")
    block = f"{arch.layers}.{layer}"
    for name, mod in lab.model.get_submodule(block).named_modules():
        if name and name.split(".")[-1] in ("gate", "router") and hasattr(mod, "top_k"):
            return f"{block}.{name}"
    raise UnsupportedSiteError(
        f"ban_expert: layer {layer} has no mixture-of-experts router (a 'gate' or 'router' module with top_k). "
        f"Is this an MoE model, and is layer {layer} sparse? Pass site= with a raw module path otherwise.")


def _router_hook(edits: list[Edit], state: _State):
    """Set banned experts' logits to -inf for the selected tokens, then redo the router's top-k on them."""

    def hook(module, args, output):
        logits = output if isinstance(output, torch.Tensor) else output[0]
        n_exp = logits.shape[-1]
        flat = logits.reshape(-1, n_exp)
        if state.positions is not None and state.shape[0] * state.shape[1] == flat.shape[0]:
            b, t = state.shape
            ctx = ApplyContext(lengths=state.lengths, positions=state.positions, prompt_lengths=state.prompt_lengths,
                               special=state.special, step=state.step)
        else:
            b, t = 1, flat.shape[0]
            ctx = ApplyContext(lengths=[t])
        ban = torch.zeros_like(flat, dtype=torch.bool)
        for e in edits:
            if not e.enabled:
                continue
            rows = selection_mask(e, b, t, ctx).reshape(-1).to(flat.device)
            cols = torch.zeros(n_exp, dtype=torch.bool, device=flat.device)
            try:
                cols[e.meta["experts"]] = True
            except IndexError:
                raise OutOfRangeError(
                    f"ban_expert: expert {e.meta['experts']} out of range: this router has {n_exp} experts "
                    f"(0..{n_exp - 1}).") from None
            ban |= rows[:, None] & cols
        new = flat.masked_fill(ban, float("-inf")).reshape(logits.shape)
        if isinstance(output, torch.Tensor):  # a plain linear gate: routing happens after it
            return new
        if len(output) < 3 or not hasattr(module, "top_k"):
            raise UnsupportedSiteError(
                f"ban_expert: router {type(module).__name__} returns {len(output)} values; interplab knows "
                f"routers that return logits (a linear gate) or (logits, scores, indices) with a top_k attribute.")
        probs = torch.softmax(new.reshape(-1, n_exp).float(), dim=-1)
        top_v, top_i = torch.topk(probs, module.top_k, dim=-1)
        if getattr(module, "norm_topk_prob", True):
            top_v = top_v / top_v.sum(dim=-1, keepdim=True)
        top_v = top_v.to(output[1].dtype)
        return (new, top_v, top_i.to(output[2].dtype), *output[3:])

    return hook


def _install(hm: HookManager, lab, planned: _Planned, state: _State) -> None:
    if not planned.routers and all(id(pe) in state.everywhere for pe in planned.plan.edits):
        # every edit acts everywhere: no step needs its positions, so each hook is the edit's arithmetic alone
        contexts = {id(pe): replace(lab.contexts([])(pe), everywhere=True) for pe in planned.plan.edits}
        install(hm, planned.plan, lambda pe: contexts[id(pe)], {})
        return
    hm.add(HookPoint("", "input"), state.pre_hook)  # first: every edit hook reads what it sets
    install(hm, planned.plan, state.ctx_for(lab), {})
    for path, edits in planned.routers.items():
        hm.add(HookPoint(path, "output"), _router_hook(edits, state))
    hm.add(HookPoint("", "output"), state.post_hook)


def _special_ids(lab) -> list[int]:
    return list(getattr(lab.tokenizer, "all_special_ids", None) or [])


# ---- generation -------------------------------------------------------------------------------------------------

@dataclass
class Generation:
    """What lab.generate returns. For one prompt `.text` is a string; for several, a list (also in `.texts`)."""

    prompts: list[str]
    texts: list[str]  # the new text of each prompt
    ids: torch.Tensor  # [batch, new] new token ids (rows that stopped early are padded)
    sequences: torch.Tensor  # [batch, prompt + new] (left-padded prompts)
    prompt_lengths: list[int]
    edits: list = field(default_factory=list)
    tokens_list: list[list[str]] = field(default_factory=list)

    @property
    def text(self):
        return self.texts[0] if len(self.texts) == 1 else self.texts

    @property
    def full_text(self):
        full = [p + t for p, t in zip(self.prompts, self.texts)]
        return full[0] if len(full) == 1 else full

    @property
    def tokens(self):
        """The new tokens as strings (a list of lists for several prompts)."""
        return self.tokens_list[0] if len(self.tokens_list) == 1 else self.tokens_list

    @property
    def new_ids(self) -> list[int]:
        return self.ids[0].tolist()

    def __str__(self) -> str:
        return self.texts[0] if len(self.texts) == 1 else "\n".join(self.texts)

    def __repr__(self) -> str:
        return f"Generation({self.text!r}, edits={len(self.edits)})"


class _SamplerProcessor:
    """A logits processor: edits what the sampler draws from at every step."""

    def __init__(self, bans: list[int], forces: dict[int, int], prompt_width: int,
                 on_logits: Callable | None = None):
        self.bans, self.forces, self.prompt_width, self.on_logits = bans, forces, prompt_width, on_logits

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_width
        scores = scores.clone()
        if self.on_logits is not None:
            new = self.on_logits(step, scores)
            scores = scores if new is None else new
        if self.bans:
            scores[:, self.bans] = float("-inf")
        if step in self.forces:
            tok = self.forces[step]
            scores[:] = float("-inf")
            scores[:, tok] = 0.0
        return scores


@dataclass
class GenerateArgs:
    """generate's arguments, checked: what any engine that generates needs."""

    prompts: list[str]
    edits: list  # as given: model edits and sampler edits
    model_edits: list[Edit]
    sampler: list[SamplerEdit]
    max_new_tokens: int
    greedy: bool


def check_generate(lab, prompt, edits, *, max_new_tokens, greedy, temperature, top_k, top_p, seed,
                   on_logits) -> GenerateArgs:
    """Every check of generate's arguments: each fails before a hook is attached or a model runs."""
    import math
    import numbers

    # argument checks: every one fails before a hook is attached or the model runs
    if not isinstance(prompt, (str, list, tuple)) or not prompt or not all(
            isinstance(p, str) and p.strip() for p in ([prompt] if isinstance(prompt, str) else prompt)):
        raise InterplabError(f"generate needs a non-empty prompt string (or a list of them), got {prompt!r}.")
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    if isinstance(edits, (Edit, SamplerEdit)):
        raise InterplabError(f"generate: edits= takes a list; wrap the one edit: [{edits.describe()}].")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
        raise OutOfRangeError(f"max_new_tokens must be an int >= 1, got {type(max_new_tokens).__name__} "
                              f"{max_new_tokens!r}.")
    max_new_tokens = int(max_new_tokens)
    if greedy is not None and not isinstance(greedy, bool):
        raise InterplabError(f"greedy must be True, False or None (= greedy unless a sampling option is given), got "
                             f"{greedy!r}.")
    for name, v in (("temperature", temperature), ("top_p", top_p)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)):
            raise NumberError(f"{name} must be a finite number or None, got {type(v).__name__} {v!r}.")
    if temperature is not None and temperature <= 0:
        raise NumberError(f"temperature={temperature} must be > 0; for greedy decoding leave temperature=None (or "
                          f"pass greedy=True).")
    if top_p is not None and not 0 < top_p <= 1:
        raise NumberError(f"top_p={top_p} must be in (0, 1]: the share of probability mass to sample from (None = "
                          f"all).")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1):
        raise NumberError(f"top_k must be an int >= 1 (the number of likeliest tokens to sample from) or None, got "
                          f"{top_k!r}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise NumberError(f"seed must be an int or None, got {type(seed).__name__} {seed!r}.")
    if on_logits is not None and not callable(on_logits):
        raise InterplabError(f"on_logits must be a function (step, logits) -> logits or None, got {on_logits!r}.")
    edits = list(edits or [])
    model_edits = [e for e in edits if isinstance(e, Edit)]
    sampler = [e for e in edits if isinstance(e, SamplerEdit)]
    others = [e for e in edits if not isinstance(e, (Edit, SamplerEdit))]
    if others:
        raise InterplabError(f"generate: unknown edit {others[0]!r}; use ilab edits or ban_token/force_token.")
    if greedy is None:
        greedy = temperature is None and top_k is None and top_p is None
    if max_new_tokens < 1:
        raise OutOfRangeError(f"max_new_tokens must be >= 1, got {max_new_tokens}.")
    forced = [s.step for s in sampler if s.op == "force"]
    for step in forced:
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < max_new_tokens:
            raise OutOfRangeError(f"force_token step={step!r} is never reached: with max_new_tokens={max_new_tokens} "
                                  f"the steps are 0..{max_new_tokens - 1}; force an earlier step or generate more.")
    if len(set(forced)) < len(forced):
        raise InterplabError(f"two force_token edits at the same step ({sorted(forced)}): keep one per step.")

    return GenerateArgs(prompts, edits, model_edits, sampler, max_new_tokens, greedy)


def generate(lab, prompt, edits=None, *, max_new_tokens: int = 20, greedy: bool | None = None,
             temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = None, use_cache: bool = True, stop_at_eos: bool = True,
             on_logits: Callable | None = None, logits_processor=None, cancel: threading.Event | None = None,
             **generate_kwargs) -> Generation:
    """Generate from `prompt` (a string or a list) with `edits` active at every decoding step.

    edits: ilab edits (steer, project, clamp, zero, scale, set, patch, ban_expert ...) and sampler edits
    (ban_token, force_token), applied in program order. Greedy unless temperature/top_k/top_p is given or
    greedy=False; seed makes sampling reproducible without touching the global RNG. on_logits(step, logits) may
    return edited logits (what the sampler draws from). Other keyword arguments go to model.generate.
    This runs the Hugging Face model (the "hf" backend); lab.generate chooses (interplab.engine.backends.generate).
    """
    from transformers import LogitsProcessorList

    args = check_generate(lab, prompt, edits, max_new_tokens=max_new_tokens, greedy=greedy,
                          temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, on_logits=on_logits)
    prompts, model_edits, sampler = args.prompts, args.model_edits, args.sampler
    max_new_tokens, greedy, edits = args.max_new_tokens, args.greedy, args.edits

    tok = lab.tokenizer
    ids, mask, lengths = lab.encode(prompts, side="left", new_tokens=max_new_tokens)
    width = ids.shape[1]
    pad = lab.pad_id

    bans = [lab.token_id(s.token) for s in sampler if s.op == "ban"]
    forces = {s.step: lab.token_id(s.token) for s in sampler if s.op == "force"}
    processors = LogitsProcessorList(list(logits_processor or []))
    if bans or forces or on_logits is not None:
        processors.append(_SamplerProcessor(bans, forces, width, on_logits))

    planned = _plan(lab, model_edits, lengths, generating=True)
    state = _State(_special_ids(lab), prompt_lengths=lengths,
                   needs_special=any(e.pos == "content" for e in model_edits))
    # which absolute positions each edit selects, once for the whole generation (not per decoding step); an edit
    # that selects them all, in prompts with no padding, needs no mask and no positions at any step
    state.tables = {id(pe): position_table(pe.edit, lengths, width + max_new_tokens) for pe in planned.plan.edits}
    state.everywhere = {id(pe) for pe in planned.plan.edits if len(set(lengths)) == 1 and pe.edit.op in FRESH_OPS
                        and pe.edit.head is None and pe.edit.sae is None and pe.edit.pos != "content"
                        and bool(state.tables[id(pe)].all())}
    kw = dict(max_new_tokens=max_new_tokens, do_sample=not greedy, use_cache=use_cache, pad_token_id=pad,
              logits_processor=processors)
    if not greedy:
        kw.update(temperature=1.0 if temperature is None else temperature, top_k=top_k, top_p=top_p)
    else:
        kw.update(temperature=None, top_k=None, top_p=None)
    if not stop_at_eos:
        kw["eos_token_id"] = None
    if cancel is not None:  # a widget's job stops at the next token when its event is set (e.g. at exit)
        from transformers import StoppingCriteriaList

        kw["stopping_criteria"] = StoppingCriteriaList([_Cancelled(cancel), *kw.get("stopping_criteria", [])])
    kw.update(generate_kwargs)
    model = lab.model
    dev = lab.device
    with run_lock, HookManager(model, "interplab.generate") as hm, _seeded(seed):
        if planned.plan.edits or planned.routers:  # (no edit: no hook, and plain generate's speed)
            _install(hm, lab, planned, state)
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), **kw)
    seqs = out if isinstance(out, torch.Tensor) else out.sequences
    seqs = seqs.cpu()
    new = seqs[:, width:]
    texts, toks = [], []
    specials = set(_special_ids(lab))
    for row in new.tolist():
        real = []
        for t in row:
            if stop_at_eos and t in specials and t == _eos(lab, model):
                break
            real.append(t)
        texts.append(tok.decode(real, skip_special_tokens=True))
        toks.append([tok.decode([t]) for t in real])
    return Generation(prompts, texts, new, seqs, lengths, edits, toks)


class _Cancelled:
    """A stopping criterion: every row is done once the event is set."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def _eos(lab, model):
    e = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(e, (list, tuple)):
        e = e[0] if e else None
    return e if e is not None else lab.tokenizer.eos_token_id


@contextlib.contextmanager
def _seeded(seed):
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


# ---- persistent edits ----------------------------------------------------------------------------------------------

def bind_hooks(lab, edits: list) -> HookManager:
    """Attach `edits` to every call of the plain model (lab.model(...), lab.model.generate(...), lab.run ...) and
    return the manager that holds their hooks (remove_all() detaches them). Positions count within each forward's
    input (plus its KV cache): None, ints, slices, 'newest' (the last token of each forward) and 'content' work;
    'prompt', 'generated' and steps= need lab.generate. The Lab keeps what is bound (Lab.bind / Lab.edit)."""
    for e in edits:
        if isinstance(e, SamplerEdit):
            raise InterplabError(f"{e.describe()}: sampler edits work in lab.generate only, not bound to the model.")
    planned = _plan(lab, edits, [1], generating=False)  # resolves patch sources before any hook is on
    hm = HookManager(lab.model, "interplab.bound", every_thread=True)  # every forward, whoever runs it
    try:
        _install(hm, lab, planned, _State(_special_ids(lab)))
    except BaseException:
        hm.remove_all()
        raise
    return hm


__all__ = ["generate", "Generation", "GenerateArgs", "check_generate", "bind_hooks", "plan_edits", "SamplerEdit"]
