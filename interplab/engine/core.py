"""The runner a Lab is built on: tokens in, runs with edits and caches out, memoised and logged.

    engine = Engine(model, tokenizer)     # what interplab.Lab extends
    run = engine.run(prompts, edits=[...], cache=["resid_post"])
    engine.last_logits(prompts, edits)    # the same last logits, resumed from cached state (what a click costs)
"""

from __future__ import annotations

import contextlib
import json
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from ..edits import ApplyContext, Edit, SourceRef, edits_key, edits_to_json, selected_rows
from ..errors import (
    EmptyPromptError,
    InterplabError,
    LengthMismatchError,
    MultiTokenAnswerError,
    OutOfRangeError,
    UnknownTokenError,
    VectorError,
    check_context,
    format_tokens,
    short,
)
from ..metrics import as_metric
from ..sites import HEADED, IN_ATTENTION, LAYERED, NEURONS, SITE_NAMES, Site, SiteMap
from ..tokens import token_texts
from ..worker import Worker
from . import attention, backends, frozen, hooks, resume
from . import generate as gen
from .memo import Memo
from .prompts import as_prompts


class Cache(dict):
    """Cached activations keyed by (site, layer), or by site name for layerless sites and raw paths. A negative
    layer counts from the end (-1: the last), as everywhere in interplab."""

    def __init__(self, *args, n_layers: int | None = None, **kw):
        super().__init__(*args, **kw)
        self.n_layers = n_layers

    def __getitem__(self, key):
        if isinstance(key, tuple) and len(key) == 2 and key[1] is None:
            key = key[0]
        if (isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], int) and key[1] < 0 and self.n_layers
                and key[1] >= -self.n_layers):
            key = (key[0], key[1] + self.n_layers)
        try:
            return super().__getitem__(key)
        except KeyError:
            have = ", ".join(map(repr, self.keys())) or "nothing"
            raise KeyError(
                f"{key!r} is not in this run's cache (it holds {have}). Ask for it: lab.run(..., cache=[...])."
            ) from None


@dataclass
class Run:
    """The result of one forward: its logits and cached activations, plus what produced them.

    Both stay where the model computed them (its device; logits in its dtype, fp32 on the CPU) until read:
    `run.logits` and `run.last_logits` copy to the host as float32 when read (the last positions only, for
    last_logits), and `run.cache[...]` is on the model's device, so a cached activation goes straight back into
    the model's modules (the student's own lens:
    `lab.model.lm_head(lab.model.transformer.ln_f(run.cache["resid_post", l]))`). With grad=True (attribution),
    logits are the model's own tensor, on its device, in its graph."""

    prompts: list[str]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    lengths: list[int]
    held_logits: torch.Tensor  # [batch, pos, vocab] where the model computed them, in its dtype
    cache: Cache
    edits: list[Edit] = field(default_factory=list)
    str_tokens: list[list[str]] = field(default_factory=list)
    grad: bool = False

    @property
    def logits(self) -> torch.Tensor:
        """[batch, pos, vocab] float32 on the host (copied there when read: on a GPU, read only what you need, e.g.
        run.last_logits); with grad=True the model's own tensor."""
        return self.held_logits if self.grad else _host(self.held_logits)

    @property
    def last_logits(self) -> torch.Tensor:
        """[batch, vocab]: logits at each row's last real token (padding skipped); only these rows are copied."""
        held = self.held_logits
        idx = torch.tensor(self.lengths, device=held.device) - 1
        out = held[torch.arange(len(self.lengths), device=held.device), idx]
        return out if self.grad else _host(out)

    def source_ref(self) -> SourceRef:
        return SourceRef(tuple(self.prompts), tuple(e.to_dict() for e in self.edits))

    def __repr__(self) -> str:
        return (f"Run({len(self.prompts)} prompt(s), {max(self.lengths)} tokens, edits={len(self.edits)}, "
                f"cache={list(self.cache.keys())})")


class InterventionLog:
    """Every run with edits, in order; to_code() writes Python that reproduces the session."""

    def __init__(self, lab: Engine):
        self._lab = lab
        self._lock = threading.Lock()  # the lab's worker records (clicks) while the notebook does
        self.entries: list[dict] = []

    def record(self, prompts: list[str], edits: list[Edit], cache: list) -> None:
        entry = {"prompts": list(prompts), "edits": edits_to_json(edits), "cache": list(cache)}
        with self._lock:
            self.entries.append(entry)

    def __len__(self) -> int:
        return len(self.entries)

    def to_code(self) -> str:
        lab = self._lab
        lines = [
            "# Reproduces this interplab session.",
            "import torch",
            "import interplab as ilab",
            "",
            f"torch.manual_seed({lab.seed})",
            f"lab = ilab.Lab.load({lab.model_id!r}, dtype={lab.dtype_name!r}, {_placed(lab)})",
        ]
        with self._lock:  # one consistent snapshot, not a list growing under the loop
            entries = list(self.entries)
        for i, e in enumerate(entries, 1):
            lines.append(f"run_{i} = lab.run({e['prompts']!r}, edits=ilab.edits_from_json({e['edits']!r}))")
        return "\n".join(lines) + "\n"


def _placed(lab: Engine) -> str:
    """Lab.load's keywords that put the model where it is: the device, or the device_map it was loaded with."""
    options = getattr(lab, "load_options", None) or {}
    if options.get("device_map") is None:
        return f"device={lab.device_name!r}"
    return ", ".join(f"{k}={v!r}" for k, v in options.items())


class Engine:
    """Runs one model and tokenizer: tokens, runs with edits and caches, resumed runs, a memo and a log.

    The Lab (interplab.lab) holds one (lab.engine) and puts the analyses on top; analyses take any Engine."""

    def __init__(self, model: nn.Module, tokenizer, *, model_id: str | None = None, device=None, dtype=None,
                 seed: int = 0, memo_size: int = 64, memo_budget=None):
        if device is not None or dtype is not None:
            model = model.to(device=device_of(device), dtype=dtype_of(dtype))
        self.model = model.eval()
        self.tokenizer = tokenizer  # the caller's object: read, never changed (its pad_token stays as it was)
        self.model_id = model_id or getattr(getattr(model, "config", None), "_name_or_path", None) or "<in-memory>"
        self.seed = seed
        self.load_options: dict = {}  # Lab.load's placement keywords (device_map, ...), for the log's to_code()
        self.sites = SiteMap(model)
        self.log = InterventionLog(self)
        # runs, and the click path's cached keys/values (interplab.analyses.patching); bounded in bytes per device
        # (memo_budget: bytes, {device: bytes}, or None for a share of free memory; engine.memo)
        self.memo = Memo(model, memo_size, memo_budget)
        self._worker: Worker | None = None
        self._worker_lock = threading.Lock()  # widgets built on two threads at once still share one worker
        # what runs forwards, generation and sweeps' cells: the model, and vLLM once use_vllm() starts it
        self.backends: dict[str, backends.Backend] = {"hf": backends.HFBackend()}
        self._vllm_dir = None  # where use_vllm saved an in-memory model for vLLM to load
        self._bound_edits: list = []
        self._bound_hooks: hooks.HookManager | None = None  # the hooks of the bound edits

    @property
    def worker(self) -> Worker:
        """The one thread that runs this lab's widget requests (interplab.worker): made on first use, stopped at
        interpreter exit. `lab.engine.worker.join()` waits until it is idle."""
        with self._worker_lock:
            if self._worker is None:
                self._worker = Worker(f"interplab-worker {self.model_id}")
        return self._worker

    # ---- model facts ----------------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return self.sites.n_layers

    @property
    def n_heads(self) -> int:
        return self.sites.n_heads

    @property
    def d_model(self) -> int:
        return self.sites.d_model

    @property
    def d_head(self) -> int:
        return self.sites.d_head

    @property
    def device(self) -> torch.device:
        """Where the model computes its first step, and so where inputs go: the input embedding's device. A model
        loaded with a device_map (layers over devices, or offloaded to the CPU or disk) reports its parameters on
        "meta" or on the CPU wherever they are offloaded: there it is the device accelerate runs the embedding on."""
        return execution_device(self.model, _input_embeddings(self.model))

    @property
    def device_name(self) -> str:
        return str(self.device)

    @property
    def dtype_name(self) -> str:
        return str(next(self.model.parameters()).dtype).replace("torch.", "")

    def module_names(self) -> list[str]:
        return [n for n, _ in self.model.named_modules() if n]

    def hooks(self) -> list[dict]:
        """The hooks interplab has attached right now (empty between runs, unless edits are bound)."""
        return hooks.attached_hooks()

    # ---- tokens ----------------------------------------------------------------------------------------
    @property
    def pad_id(self) -> int:
        """The id that fills padded positions: the tokenizer's pad token, else its eos token (GPT-2 has no pad
        token), else 0. Padded positions are masked, so the choice changes no number, only what a decoded row
        shows."""
        for name in ("pad_token_id", "eos_token_id"):
            i = getattr(self.tokenizer, name, None)
            if i is not None:
                return i
        return 0

    def encode(self, prompts, *, side: str = "right", new_tokens: int = 0) -> tuple[torch.Tensor, torch.Tensor,
                                                                                   list[int]]:
        """Padded input ids, attention mask and real lengths: the one place prompts become a batch.

        Right padding (runs) keeps every prompt's positions at 0..n-1, so batched runs give the same numbers as
        one-by-one runs; left padding (generation) starts every row's new tokens in the same column. new_tokens:
        positions the context must also hold (tokens still to be generated)."""
        if side not in ("right", "left"):
            raise InterplabError(f"side={side!r}: pad on the 'right' (runs) or the 'left' (generation).")
        prompts = as_prompts(prompts)
        rows = [self.tokenizer(p)["input_ids"] for p in prompts]
        for i, (p, r) in enumerate(zip(prompts, rows)):
            if not r:
                raise EmptyPromptError(f"prompt {p!r} tokenizes to nothing: give some text.")
            which = f"prompt {i} ({short(p)})" if len(prompts) > 1 else f"the prompt {short(p)}"
            # past it: a bare IndexError, or silent extrapolation
            check_context(self.model, len(r), which, new_tokens=new_tokens)
        n = max(len(r) for r in rows)
        ids = torch.full((len(rows), n), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), n), dtype=torch.long)
        for i, r in enumerate(rows):
            cols = slice(0, len(r)) if side == "right" else slice(n - len(r), n)
            ids[i, cols] = torch.tensor(r)
            mask[i, cols] = 1
        return ids, mask, [len(r) for r in rows]

    def to_tokens(self, prompts) -> torch.Tensor:
        return self.encode(prompts)[0]

    def to_str_tokens(self, prompt: str) -> list[str]:
        if not isinstance(prompt, str):  # a list would be tokenized as a batch and come back nested
            raise InterplabError(f"to_str_tokens takes one prompt string, got {type(prompt).__name__}; for several: "
                                 f"[lab.to_str_tokens(p) for p in prompts].")
        # as every view labels them: a lone byte piece of a character as its bytes ('<C0>'), not U+FFFD
        return token_texts(self.tokenizer, self.tokenizer(prompt)["input_ids"])

    def to_string(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def token_id(self, token: str | int) -> int:
        """The id of a single-token string (' Mary'); a clear error, with the tokenization, when it is not one."""
        if isinstance(token, bool) or not isinstance(token, (str, int)):
            try:  # numpy / torch integers are ids too; bools, floats, None, lists are not
                if isinstance(token, bool):
                    raise TypeError
                token = operator.index(token)
            except TypeError:
                raise InterplabError(f"an answer token must be a single-token string (' Mary') or a token id (int), "
                                     f"got {type(token).__name__} {token!r}.") from None
        if isinstance(token, int):
            n_vocab = self.model.get_output_embeddings().weight.shape[0]
            if not 0 <= token < n_vocab:
                raise OutOfRangeError(f"token id {token} out of range for this vocabulary: ids are 0..{n_vocab - 1}.")
            return token
        ids = self.tokenizer(token, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            pieces = [self.tokenizer.decode([i]) for i in ids]
            hint = " (answers usually start with a space: ' Mary')" if token and not token.startswith(" ") else ""
            raise MultiTokenAnswerError(
                f"answer {token!r} is {len(ids)} tokens {format_tokens(pieces)}, not one. Answers must be single "
                f"tokens{hint}; pick a word the tokenizer keeps whole, or pass a token id."
            )
        unk = getattr(self.tokenizer, "unk_token_id", None)
        if unk is not None and ids[0] == unk and token != self.tokenizer.unk_token:
            raise UnknownTokenError(
                f"answer {token!r} is not in the vocabulary: the tokenizer maps it to its unknown token "
                f"{self.tokenizer.unk_token!r} (id {unk}), so the metric would read the logit of that token, the same "
                f"for every unknown word. Pick an answer the vocabulary has (lab.to_str_tokens shows how text "
                f"splits), or pass a token id.")
        return ids[0]

    def check_pair(self, clean, corrupt) -> None:
        """Clean and corrupt must tokenize to the same length for position-wise patching."""
        for c, k in zip(as_prompts(clean), as_prompts(corrupt)):
            a, b = self.to_str_tokens(c), self.to_str_tokens(k)
            if len(a) != len(b):
                raise LengthMismatchError(
                    f"clean and corrupt prompts tokenize to different lengths ({len(a)} vs {len(b)} tokens):\n"
                    f"  clean:   {format_tokens(a)}\n  corrupt: {format_tokens(b)}\n"
                    f"Position-wise patching needs equal lengths: use names/words that are one token each."
                )

    def paired(self, clean, corrupt, metric, direction: str, what: str):
        """(base prompts, source prompts, bound metric) for an analysis that compares the runs of prompt pairs
        position by position, every prompt of the same token length; `what` names the analysis in the errors.
        direction "denoise": the clean run's values go into the corrupt run; "noise": the other way."""
        clean, corrupt = as_prompts(clean), as_prompts(corrupt)
        if len(clean) != len(corrupt):
            raise LengthMismatchError(f"{len(clean)} clean prompts but {len(corrupt)} corrupt: give them in pairs.")
        if direction not in ("denoise", "noise"):
            raise InterplabError(f"direction={direction!r}: use 'denoise' (clean into corrupt) or 'noise' (corrupt "
                                 f"into clean).")
        self.check_pair(clean, corrupt)
        lengths = self.encode(clean + corrupt)[2]
        if len(set(lengths)) > 1:
            raise LengthMismatchError(f"{what} compares runs position by position: every prompt must have the same "
                                      f"token length (got {sorted(set(lengths))}).")
        as_metric(metric).check_pairs(len(clean))
        metric = as_metric(metric).bind(self.token_id)
        return (corrupt, clean, metric) if direction == "denoise" else (clean, corrupt, metric)

    # ---- runs -------------------------------------------------------------------------------------------
    def run(self, prompts, edits=None, cache=None, *, grad: bool = False, log: bool = True,
            memo: bool = True, frozen_norms: bool = False, linear_mlps: dict | None = None) -> Run:
        """Forward the prompts with edits applied, recording the cached sites.

        cache: site names ('resid_post' = every layer), (name, layer) pairs, or raw module paths.
        memo=False: neither looked up in the memo nor kept there. For an analysis's own runs whose edits carry
        tensors it computed: the memo's key digests every tensor's bytes, a copy to the host of each (megabytes per
        edit on a big model), for a run no later call repeats.
        frozen_norms=True: every LayerNorm/RMSNorm keeps its value but passes gradients as a linear map, its scale
        held at this run's (engine/frozen.py; attribution graphs). Never memoised.
        linear_mlps={layer: W or None}: each listed MLP's output keeps its value but passes gradients only as its
        input (site mlp_in) @ W, W [d_model, d_model]; None: no gradient through it (a stop_grad). The replacement
        model's MLP: a transcoder's features and error are constants, its skip term linear. Never memoised.
        """
        for name, value in (("grad", grad), ("log", log), ("memo", memo), ("frozen_norms", frozen_norms)):
            if not isinstance(value, bool):
                raise InterplabError(f"{name}={value!r}: pass True or False.")
        prompts = as_prompts(prompts)
        edits = list(edits or [])
        cache_req = _cache_request(cache)
        key = self.memo.key(("run", tuple(prompts), edits_key(edits), json.dumps(cache_req, default=str))) \
            if memo else None
        mlps = self._linear_mlps(linear_mlps)
        memo = memo and not frozen_norms and not mlps
        hit = None if grad or not memo else self.memo.get(key)
        if hit is not None:
            return hit
        ids, mask, lengths = self.encode(prompts)
        plan = hooks.Plan(keep_grad=grad, frozen_norms=frozen.norm_paths(self.model) if frozen_norms else [],
                          linear_mlps=mlps)
        for e in edits:
            plan.edits.extend(self.plan_edit(e, len(prompts), lengths))
        for item in cache_req:
            plan.cache.extend(self._plan_cache(item))
        ctx = self.contexts(lengths)
        logits, raw = hooks.forward(self.model, ids.to(self.device), mask.to(self.device), plan, ctx, grad=grad)
        # logits and cache stay on the model's device, in its dtype: read, they come to the host (Run.logits). The
        # cache is gathered on lab.device (a device_map may have run its layers on several), except with grad=True,
        # where each tensor must stay the one the model computed on.
        cached = raw if grad else {k: v.to(self.device) for k, v in raw.items()}
        held = logits if grad else logits.detach()
        if not grad and held.device.type == "cpu":
            held = held.float()  # on the host already: fp32 once, so every read is the same tensor, as before
        result = Run(prompts, ids, mask, lengths, held, Cache(cached, n_layers=self.n_layers), edits,
                     _Decoded(self.tokenizer, ids, lengths), grad=grad)
        if edits and log:
            self.log.record(prompts, edits, cache_req)
        if not grad and memo:
            self.memo.put(key, result)
        return result

    def _linear_mlps(self, given) -> list:
        if not given:
            return []
        if not isinstance(given, dict):
            raise InterplabError(f"linear_mlps={given!r}: a dict {{layer: W [d_model, d_model] or None}}.")
        out = []
        for layer, W in given.items():
            if W is not None and (not isinstance(W, torch.Tensor) or W.dim() != 2):
                raise InterplabError(f"linear_mlps[{layer!r}]: a matrix [d_in, d_out] or None, got {type(W).__name__}.")
            out.append((self.resolve("mlp_in", layer), self.resolve("mlp_out", layer), W))
        return out

    def read_sites(self, prompts, sites: list) -> tuple[dict, list[int]]:
        """(values, lengths): the unedited values of (site, layer) pairs for the prompts, on the model's device,
        from a forward that stops once the last is read. Not memoised or logged, no logits: for scanning many
        prompts (top-activating contexts)."""
        prompts = as_prompts(prompts)
        ids, mask, lengths = self.encode(prompts)
        plan = hooks.Plan()
        for item in _cache_request(sites):
            plan.cache.extend(self._plan_cache(item))
        values = hooks.read(self.model, ids.to(self.device), mask.to(self.device), plan, self.contexts(lengths))
        return values, lengths

    def contexts(self, lengths: list[int], **where) -> Callable[[hooks.PlannedEdit | None], ApplyContext]:
        """What each planned edit needs to know about the tensor it edits: real lengths, heads, its source value;
        `where` adds what a forward over only some positions sets (offset, positions; see ApplyContext)."""
        def ctx_for(pe):
            heads = pe.site.n_heads or self.n_heads if pe is not None and pe.site.heads else None
            return ApplyContext(lengths=lengths, n_heads=heads, source=pe.source if pe is not None else None,
                                **where)
        return ctx_for

    def resolve(self, name: str, layer) -> Site:
        site = self.sites.resolve(name, layer)
        if name in IN_ATTENTION and name in SITE_NAMES:
            self._check_attention_reachable()
        return site

    def _check_attention_reachable(self) -> None:
        """rot_q, rot_k and pattern are read inside the attention function: the model's own eager one must exist
        (checked here, before any hook goes on)."""
        layer = self.model.get_submodule(f"{self.sites.arch.layers}.0")
        attention.own_eager(layer.get_submodule(self.sites.arch.attn))

    def _plan_cache(self, item) -> list[tuple]:
        if isinstance(item, (tuple, list)):
            name, layer = item
            if name in LAYERED and layer is not None and self.sites.arch is not None:
                layer = self.sites.layer_index(layer, name)  # -1: the last layer, as in edits
            key = (name, layer) if layer is not None else name  # ("embed", None) is stored as "embed", as read
            return [(key, self.resolve(name, layer))]
        if item in LAYERED:
            if self.sites.arch is None:
                self.sites.point(item, 0)  # unknown architecture: raises UnsupportedSiteError with the how-to
            return [((item, l), self.resolve(item, l)) for l in range(self.n_layers)]
        return [(item, self.resolve(item, None))]

    def plan_edit(self, e: Edit, n_rows: int, lengths: list[int]) -> list[hooks.PlannedEdit]:
        """The edit checked against the model and these prompts, resolved to one PlannedEdit per layer."""
        if not isinstance(e, Edit):
            raise InterplabError(f"edits must be ilab edits (ilab.patch, ilab.zero, ...), got {type(e).__name__}.")
        canonical = e.site in SITE_NAMES
        if canonical and self.sites.arch is None:
            self.sites.point(e.site, 0)  # unknown architecture: raises UnsupportedSiteError with the how-to
        if canonical and e.site not in LAYERED and e.layer is not None:
            raise InterplabError(f"site {e.site!r} has no layers: drop layer={e.layer!r}.")
        if e.sae is not None:
            e.sae.check_fits(self)  # the SAE's layer exists and its d_in is the site's width here
        layers = self.sites.layers_of(e.layer) if canonical and e.site in LAYERED else [e.layer]
        _check_rows(e.batch, n_rows)
        _check_positions(e.pos, lengths, e.batch)
        out = []
        for layer in layers:
            site = self.resolve(e.site, layer)
            if e.head is not None and not site.heads:
                raise InterplabError(
                    f"head={e.head!r} given for site {e.site!r}, which has no heads: per-head edits go on "
                    f"{', '.join(map(repr, sorted(HEADED)))}."
                )
            if e.head is not None:
                self.sites.heads_of(e.head, site.n_heads)
            if e.neuron is not None:
                self.sites.neurons_of(e.neuron)
            residual = canonical and not site.heads and e.site not in ("logits", *NEURONS)
            if e.vector is not None and e.op in ("steer", "project", "clamp") and residual:
                if self.d_model and e.vector.shape[-1] != self.d_model:
                    raise VectorError(
                        f"{e.op} vector has size {e.vector.shape[-1]} but {e.site!r} has width d_model="
                        f"{self.d_model}. Vectors must come from this model's residual stream."
                    )
            out.append(hooks.PlannedEdit(e, site, self._source_value(e, e.site, layer)))
        return out

    def _source_value(self, e: Edit, site: str, layer):
        """The cached activation a patch copies, or the mean a mean-ablation writes."""
        if e.op == "patch" and e.source is not None:
            return self._cached(e.source, site, layer)
        if e.op == "mean":
            refs = e.reference if isinstance(e.reference, (list, tuple)) else [e.reference]
            acts = [(self._cached(r, site, layer), r) for r in refs]
            same = len({a.shape[1] for a, _ in acts}) == 1 and all(len(set(self._lengths(r))) == 1 for _, r in acts)
            if same:  # equal-length prompts: a per-position mean over rows
                return torch.cat([a for a, _ in acts]).mean(0, keepdim=True)
            toks = [a[i, :n] for a, r in acts for i, n in enumerate(self._lengths(r))]
            return torch.cat(toks).mean(0)  # otherwise: the mean over every real token
        return None

    @staticmethod
    def as_hooked(site: str, value: torch.Tensor) -> torch.Tensor:
        """A cached value in the layout hooks see: a pattern, cached [batch, head, query, key], becomes
        [batch, query, head * key] like every per-head site; other sites are returned as they are."""
        if site == "pattern" and value.dim() == 4:
            b, h, q, k = value.shape
            return value.transpose(1, 2).reshape(b, q, h * k)
        return value

    def _lengths(self, r) -> list[int]:
        return r.lengths if isinstance(r, Run) else self.encode(list(r.prompts))[2]

    def _cached(self, source, site: str, layer) -> torch.Tensor:
        key = (site, layer) if layer is not None else site
        if isinstance(source, Run) and key in source.cache:
            return self.as_hooked(site, source.cache[key])
        if isinstance(source, Run):
            ref = source.source_ref()
        elif isinstance(source, SourceRef):
            ref = source
        elif isinstance(source, (str, list)):
            ref = SourceRef(tuple(as_prompts(source)))
        else:
            raise InterplabError(f"patch source must be a Run, a prompt, or a tensor; got {type(source).__name__}.")
        # every layer of the site at once (a layered site): one memoised forward serves a click at any layer, and
        # it is the run a heatmap session's source already is
        whole = layer is not None and site in LAYERED and site in SITE_NAMES
        rerun = self.run(list(ref.prompts), [Edit.from_dict(d) for d in ref.edits], cache=[site if whole else key],
                         log=False)
        return self.as_hooked(site, rerun.cache[key])

    # ---- forwards that resume from cached state: what makes a click cheap ------------------------------------
    def last_logits(self, prompts, edits, log: bool = True) -> torch.Tensor:
        """[rows, vocab] last-position logits of self.run(prompts, edits), computed from the lowest edited layer up.

        Layers below every edit see nothing new, so they come from the cached unedited run; for one prompt whose
        edits all start at a position p, positions before p are unchanged too, so their keys and values come from
        a cached run and only positions p.. are computed. Only the final position is unembedded. Falls back to a
        full run where it cannot resume. log=False: not recorded in the intervention log (a caller that records
        it itself, e.g. a click recorded when it arrived)."""
        prompts = as_prompts(prompts)
        edits = [e for e in edits if e.enabled]
        layered = all(e.site in LAYERED and e.site not in IN_ATTENTION and e.op != "ban_expert" for e in edits)
        if not edits or self.sites.arch is None or not layered:
            return self.run(prompts, edits, log=log and bool(edits)).last_logits
        start = min(min(self.sites.layers_of(e.layer)) for e in edits)
        ids, mask, lengths = self.encode(prompts)
        plan = hooks.Plan()
        for e in edits:
            plan.edits.extend(self.plan_edit(e, len(prompts), lengths))
        hidden = self.residuals(prompts).cache["resid_pre", start].to(self.device)
        first = _first_position(edits, lengths)
        prefix = self.kv_prefix(prompts[0], first) if first else None
        ids, mask = ids.to(self.device), mask.to(self.device)
        kw, ctx_for, last = {}, self.contexts(lengths), torch.tensor(lengths, device=self.device) - 1
        if prefix is not None:  # only positions first.. are computed, on top of the cached keys and values
            hidden, ids, last = hidden[:, first:], ids[:, first:], last - first
            kw = {"position_ids": torch.arange(first, lengths[0], device=self.device)[None], "use_cache": True,
                  **prefix}
            ctx_for = self.contexts(lengths, offset=first, positions=torch.arange(first, lengths[0])[None])
        with torch.no_grad():
            logits = resume.resumed_last_logits(self.model, self.sites.arch, start, hidden, ids, mask, last,
                                                install=lambda hm: hooks.install(hm, plan, ctx_for, {}),
                                                owner="interplab.run", **kw)
        if log:
            self.log.record(prompts, edits, [])
        return logits.float().cpu()

    def residuals(self, prompts) -> Run:
        """The unedited run with resid_pre of every layer cached: one memoised run serves a resume at any layer."""
        return self.run(prompts, cache=[("resid_pre", l) for l in range(self.n_layers)], log=False)

    def kv_prefix(self, prompts, first: int, repeats: int = 1) -> dict | None:
        """Keyword arguments that make a forward start at position `first` of `prompts` (one string, or a list of
        equal-length prompts): the unedited run's keys/values for the first `first` positions, read by a batch of
        `repeats` copies of the prompts (shared, not copied per row: engine.resume.prefix). None where the model's
        cache cannot be cropped (sliding windows)."""
        key = prompts if isinstance(prompts, str) else tuple(prompts)
        memo_key = self.memo.key(("kv", key))
        entry = self.memo.get(memo_key)
        if entry is None:
            ids, mask, _ = self.encode(list(key) if isinstance(key, tuple) else key)
            entry = resume.key_values(self.model, ids.to(self.device), mask.to(self.device)) or ("uncroppable", None)
            self.memo.put(memo_key, entry)
        if entry[1] is None:
            return None
        return resume.prefix(entry, first, 1 if isinstance(key, str) else len(key), repeats, self.device)

    def warm(self, prompts) -> None:
        """Compute ahead what every later resumed run of `prompts` reuses (the cached residuals and, for one
        prompt, keys and values), so that even the first click costs one resumed forward."""
        prompts = as_prompts(prompts)
        if self.sites.arch is None:
            return
        self.residuals(prompts)
        if len(prompts) == 1 and len(self.to_str_tokens(prompts[0])) > 1:
            self.kv_prefix(prompts[0], 1)

    def clear_memo(self) -> None:
        """Forget memoised runs. Needed only after writing weights through `.data` (see interplab.memo)."""
        self.memo.clear()

    # ---- backends, generation and bound edits (interplab.engine.backends, interplab.engine.generate) ------------
    def backend(self, name: str | None = None, edits=(), **options) -> backends.Backend:
        """The backend that runs a call with these edits and options: 'hf', 'vllm', or None for vLLM when it is
        started and can run the call, else the Hugging Face model (interplab.engine.backends.choose)."""
        return backends.choose(self, name, edits, **options)

    @property
    def vllm(self):
        """The vLLM backend use_vllm() started (interplab.engine.vllm.VLLMBackend), or None."""
        return self.backends.get("vllm")

    def use_vllm(self, path: str | None = None, **options):
        """Start a vLLM engine on this model (in this process) as the "vllm" backend and return it. path: the
        model's directory or hub id (default: this model saved to a temporary directory). options go to
        interplab.engine.vllm.VLLMBackend (prefix_caching, kv_cache_gib, cache_dir, max_num_seqs, ...)."""
        import tempfile

        from .vllm import VLLMBackend

        old = self.backends.pop("vllm", None)
        if old is not None:
            old.close()
        if path is None:
            self._vllm_dir = tempfile.TemporaryDirectory(prefix="interplab-vllm-model-")
            path = self._vllm_dir.name
            self.model.save_pretrained(path)
            self.tokenizer.save_pretrained(path)
        self.backends["vllm"] = VLLMBackend(
            path, special_ids=list(getattr(self.tokenizer, "all_special_ids", None) or []), **options)
        return self.backends["vllm"]

    def forward(self, prompts, edits=None, *, per_prompt: list | None = None, record=(),
                backend: str | None = None) -> tuple[torch.Tensor, dict]:
        """A forward with edits on the chosen backend (None: vLLM when started and able, else the Hugging Face
        model): (last-position logits [prompts, vocab], {(site, layer): [prompts, pos, width]} for the `record`ed
        sites). per_prompt: one list of edits per prompt instead of `edits`. Not memoised, not logged."""
        prompts = as_prompts(prompts)
        every = [e for es in (per_prompt or [edits or []]) for e in es]
        return self.backend(backend, every).forward(self, prompts, edits, per_prompt=per_prompt, record=record)

    def generate(self, prompt, edits=None, **kw) -> gen.Generation:
        """Generate with edits active at every decoding step, on the backend chosen by backend= (None: vLLM when
        started and able, else the Hugging Face model); interplab.engine.backends.generate."""
        return backends.generate(self, prompt, edits, **kw)

    def sample(self, prompts, edits=None, **kw) -> backends.Samples:
        """n completions per prompt under edits, with log-probabilities (interplab.engine.backends.sample)."""
        return backends.sample(self, prompts, edits, **kw)

    @property
    def bound(self) -> list:
        """The edits bound to every call of the plain model right now."""
        return list(self._bound_edits)

    def rebind(self, edits: list) -> None:
        """Bind exactly `edits` to every call of the plain model (interplab.engine.generate.bind_hooks); if they
        cannot be bound, what was bound before stays bound. (The memo needs no clearing: hooks are in its key.)"""
        before = self._bound_edits
        self._detach_bound()
        try:
            self._attach_bound(edits)
        except BaseException:
            self._attach_bound(before)
            raise

    def _attach_bound(self, edits: list) -> None:
        if edits:
            self._bound_hooks = gen.bind_hooks(self, edits)
        self._bound_edits = list(edits)

    def _detach_bound(self) -> None:
        if self._bound_hooks is not None:
            self._bound_hooks.remove_all()
        self._bound_edits, self._bound_hooks = [], None


class _Decoded(Sequence):
    """Each prompt's tokens as strings (what to_str_tokens gives), decoded on first read: one decode per token
    costs about as much as a small model's forward, and most runs are never read this way."""

    def __init__(self, tokenizer, ids: torch.Tensor, lengths: list[int]):
        self._args, self._rows = (tokenizer, ids, lengths), None

    def _decoded(self) -> list[list[str]]:
        if self._rows is None:
            tokenizer, ids, lengths = self._args
            self._rows = [[tokenizer.decode([i]) for i in ids[r, :n].tolist()] for r, n in enumerate(lengths)]
        return self._rows

    def __getitem__(self, i):
        return self._decoded()[i]

    def __len__(self) -> int:
        return len(self._args[2])

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and self._decoded() == list(other)

    def __repr__(self) -> str:
        return repr(self._decoded())


def _host(t: torch.Tensor) -> torch.Tensor:
    """t as float32 on the host: t itself where it is already that (a CPU fp32 run reads as it always did)."""
    if t.device.type == "cpu" and t.dtype == torch.float32 and not t.requires_grad:
        return t
    return t.detach().to("cpu", torch.float32)


def execution_device(model: nn.Module, module: nn.Module | None = None) -> torch.device:
    """The device `module` (default: the model) computes on. A model dispatched by accelerate (a device_map) holds
    its offloaded weights as "meta" tensors, moved in for each call by a hook on the module or on an enclosing one,
    whose execution_device is the answer; otherwise it is where the module's first real parameter lives."""
    module = model if module is None else module
    for m in _enclosing(model, module):
        dev = getattr(getattr(m, "_hf_hook", None), "execution_device", None)
        if dev is not None:
            return torch.device(dev)
    for m in (module, model):
        for p in m.parameters():
            if p.device.type != "meta":
                return p.device
    return torch.device("cpu")


@contextlib.contextmanager
def own_weights(module: nn.Module):
    """`with own_weights(module):` the module's own parameters are real tensors on its execution device inside the
    block, also where a device_map offloaded them (accelerate's hook loads them, and puts them back after). For code
    that reads a weight as a matrix instead of calling the module; a call of the module inside the block offloads
    them again when it returns."""
    hook = getattr(module, "_hf_hook", None)
    if hook is None or not getattr(hook, "offload", False):
        yield module
        return
    hook.pre_forward(module)
    try:
        yield module
    finally:
        hook.post_forward(module, None)


def _input_embeddings(model: nn.Module) -> nn.Module | None:
    try:
        return model.get_input_embeddings()
    except (AttributeError, NotImplementedError):  # not a transformers model
        return None


def _enclosing(model: nn.Module, module: nn.Module) -> list[nn.Module]:
    """module and the modules holding it, innermost first (the model last); [model] if it is not inside."""
    if module is model:
        return [model]
    for name, m in model.named_modules():
        if m is module:
            parts = name.split(".")
            return [model.get_submodule(".".join(parts[:i])) for i in range(len(parts), 0, -1)] + [model]
    return [model]


def _cache_request(cache) -> list:
    """cache=: site names, (name, layer) pairs or raw module paths, in a list; checked before any forward."""
    if cache is None:
        return []
    if isinstance(cache, (str, tuple)):
        raise InterplabError(f"cache={cache!r}: give a list, e.g. cache=[{cache!r}] (a list of site names, "
                             f"(name, layer) pairs or module paths).")
    try:
        items = list(cache)
    except TypeError:
        raise InterplabError(f"cache must be a list of site names, (name, layer) pairs or module paths, got "
                             f"{type(cache).__name__}.") from None
    for item in items:
        pair = isinstance(item, (tuple, list))
        if pair and (len(item) != 2 or not isinstance(item[0], str)):
            raise InterplabError(f"cache entry {item!r}: a pair is (site name, layer), e.g. ('resid_post', 3).")
        if not pair and not isinstance(item, str):
            raise InterplabError(f"cache entry {item!r}: use a site name ('resid_post'), a (name, layer) pair or "
                                 f"a module path, not {type(item).__name__}.")
    return items


def _check_rows(batch, n_rows: int) -> None:
    items = [] if batch is None or isinstance(batch, slice) else (
        batch if isinstance(batch, (list, tuple, range)) else [batch])
    for r in items:
        if not -n_rows <= int(r) < n_rows:
            raise OutOfRangeError(f"batch row {r} out of range: this run has {n_rows} prompt(s) (0..{n_rows - 1}).")


def _check_positions(pos, lengths: list[int], batch=None) -> None:
    """Every position must exist in each prompt the edit selects (batch=): a longer prompt's later positions may be
    edited when the edit leaves the shorter ones alone."""
    if pos is None or isinstance(pos, (slice, str)):  # words ("prompt", "newest", ...) are checked by Edit
        return
    rows = selected_rows(batch, len(lengths))
    if not rows:
        return
    n = min(lengths[r] for r in rows)
    which = "the shortest prompt" if len(rows) == len(lengths) else "the shortest prompt this edit's batch= selects"
    for p in pos if isinstance(pos, (list, tuple, range)) else [pos]:
        if not -n <= int(p) < n:
            raise OutOfRangeError(
                f"position {p} out of range: {which} has {n} tokens (positions 0..{n - 1}, or -{n}..-1)."
            )


def _first_position(edits, lengths: list[int]) -> int:
    """The earliest position any edit touches, for a single prompt with explicit int positions (else 0)."""
    if len(lengths) != 1:
        return 0
    n = lengths[0]
    firsts = []
    for e in edits:
        if e.pos is None or isinstance(e.pos, (str, slice)) or e.batch not in (None, 0, [0]):
            return 0
        items = e.pos if isinstance(e.pos, (list, tuple, range)) else [e.pos]
        firsts.append(min(int(p) % n for p in items))
    return min(firsts) if firsts else 0


def dtype_of(dtype):
    """A dtype argument as a torch.dtype (None stays None): a torch.dtype, or its name ('float16', 'bf16', ...)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    short = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    found = (short.get(dtype) or getattr(torch, dtype, None)) if isinstance(dtype, str) else None
    if not isinstance(found, torch.dtype):
        raise InterplabError(f"dtype={dtype!r} is not a dtype: pass torch.float32, torch.float16 or torch.bfloat16, "
                             f"or their names 'float32', 'float16', 'bfloat16'.")
    return found


def device_of(device):
    """A device argument checked before any work (None stays None): torch's spelling ('cpu', 'cuda', 'cuda:1',
    'mps', a torch.device), on a device this machine has."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise InterplabError(f"device={device!r} is not a device: pass 'cpu', 'cuda', 'cuda:N' or 'mps' (or a "
                             f"torch.device).") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise InterplabError(f"device={device!r}: this machine has no CUDA GPU that torch can use (torch "
                                 f"{torch.__version__}, CUDA build: {torch.version.cuda is not None}); use "
                                 f"device='cpu'.")
        if dev.index is not None and dev.index >= n:
            raise InterplabError(f"device={device!r}: this machine has {n} CUDA GPU(s), cuda:0..cuda:{n - 1}.")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise InterplabError(f"device={device!r}: MPS (Apple's GPU) is not available here; use device='cpu'.")
    return dev



__all__ = ["Engine", "Run", "Cache", "InterventionLog", "device_of", "dtype_of", "execution_device",
           "own_weights"]


def engine_of(lab) -> Engine:
    """The Engine behind what a caller passed: a Lab (which holds one as lab.engine) or an Engine itself. Analyses
    and views call it first, so `ilab.analyses.vectors.diff_of_means(lab, ...)` takes the notebook's Lab."""
    return lab if isinstance(lab, Engine) else getattr(lab, "engine", lab)
