"""Edges between components: exact edge patching, and its gradient estimates EAP and EAP-IG.

The residual stream is a sum of what the components wrote: the embeddings, each head, each MLP. Every reader (a
head's query, key or value input, an MLP's input, the logits) reads that sum. An *edge* u -> v is what writer u
contributes to reader v. Patching one edge from the source run into the base run gives reader v the input

    base input of v + (u's output in the source run - u's output in the base run)

while every other reader keeps its base input; what v computes from it then flows on to everything downstream.

- `edge_patch` measures that exactly: per edge, one forward computes v from the shifted input, a second runs the
  base prompt with v's output (that head's q/k/v, the MLP's output, or the final residual) set to it. Edges are
  batched, one row each.
- `edge_attribution(method="eap")` estimates every edge at once (Syed et al. 2023): (source u - base u) . the
  metric's gradient with respect to v's input, from one forward and backward of the base run. "eap-ig" (Hanna et
  al. 2024) averages that gradient over `steps` runs whose embeddings move from the base run's to the source's.

Names: writers "embed", "L2H3" (layer 2, head 3), "MLP1"; readers "L3H1.q" / ".k" / ".v" (k and v by key-value
head), "MLP2", "logits"; an edge "L2H3 -> L3H1.q". Models whose sublayers normalise their outputs (Gemma 2/3,
OLMo 2) or with a parallel residual are refused: there a writer's share of the stream is not a fixed vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import edits as ed
from ..engine import Engine, engine_of, execution_device
from ..errors import InterplabError, UnsupportedSiteError


@dataclass
class EdgeScores:
    edges: list[str]  # "writer -> reader"
    scores: torch.Tensor  # [edges] metric(patched) - metric(base), exact or estimated
    method: str  # "exact" | "eap" | "eap-ig"
    metric_name: str
    base_value: float
    source_value: float

    def __getitem__(self, edge: str) -> float:
        return float(self.scores[self.edges.index(edge)])

    def top(self, k: int = 10) -> list[tuple[str, float]]:
        """The k edges with the largest |score|."""
        order = self.scores.abs().argsort(descending=True)[:k]
        return [(self.edges[i], float(self.scores[i])) for i in order]

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.edges, self.scores.tolist()))

    def show(self, lab=None, clean=None, corrupt=None, metric=None, direction: str = "denoise", count=None):
        """The circuit graph (nodes by layer, edges by score, a slider choosing the top edges); with the lab and the
        pair, clicking an edge patches it exactly and a button evaluates the chosen circuit. None without widgets."""
        from .. import display

        return display.view(self, lab=lab, clean=clean, corrupt=corrupt, metric=metric,
                            direction=direction, count=count)


@dataclass(frozen=True)
class _Writer:
    name: str
    layer: int  # -1 for the embeddings
    head: int | None  # None for an MLP or the embeddings


@dataclass(frozen=True)
class _Reader:
    name: str
    layer: int  # n_layers for the logits
    head: int | None
    site: str  # "q" | "k" | "v" | "mlp" | "logits"


def graph(lab: Engine) -> tuple[list[_Writer], list[_Reader], list[tuple[_Writer, _Reader]]]:
    """Every writer, reader and edge of the model (a writer feeds every reader after it)."""
    engine = engine_of(lab)
    _check_model(engine)
    n, H = engine.n_layers, engine.n_heads
    kv = engine.sites.n_kv_heads
    writers = [_Writer("embed", -1, None)]
    readers = []
    for layer in range(n):
        for site in ("q", "k", "v"):
            readers += [_Reader(f"L{layer}H{h}.{site}", layer, h, site) for h in range(H if site == "q" else kv)]
        writers += [_Writer(f"L{layer}H{h}", layer, h) for h in range(H)]
        readers.append(_Reader(f"MLP{layer}", layer, None, "mlp"))
        writers.append(_Writer(f"MLP{layer}", layer, None))
    readers.append(_Reader("logits", n, None, "logits"))
    edges = [(w, r) for r in readers for w in writers if _before(w, r)]
    return writers, readers, edges


def _before(w: _Writer, r: _Reader) -> bool:
    if w.layer < r.layer:
        return True
    return w.layer == r.layer and w.head is not None and r.site == "mlp"  # a head feeds its own layer's MLP


def _check_model(engine: Engine) -> None:
    arch = engine.sites.arch
    if arch is None:
        raise UnsupportedSiteError("edges need a known architecture (see ilab.sites.ARCHS).")
    if arch.attn_out is not None or arch.mlp_out is not None or arch.attn_in is None:
        raise UnsupportedSiteError(
            f"edges: this {arch.name} model normalises its sublayers' outputs or runs attention and MLP in "
            f"parallel, so a writer's share of a reader's input is not a fixed vector; use patch_sweep or "
            f"path_patch.")


def _setup(engine: Engine, clean, corrupt, metric, direction: str):
    return engine.paired(clean, corrupt, metric, direction, "an edge analysis")


def _writer_deltas(engine: Engine, base_run, source_run) -> dict[str, torch.Tensor]:
    """u(source) - u(base) for every writer, [pairs, pos, d_model]."""
    base, source = (_writer_outputs(engine, run, range(engine.n_layers)) for run in (base_run, source_run))
    out = {"embed": source_run.cache["resid_pre", 0] - base_run.cache["resid_pre", 0]}
    out.update({name: source[name] - base[name] for name in base})
    return out


def _cache_sites(engine: Engine) -> list:
    n = engine.n_layers
    return (["embed"] + [(s, layer) for layer in range(n) for s in ("resid_pre", "resid_mid", "z", "mlp_out")]
            + [("resid_post", n - 1)])


# ---- the estimates --------------------------------------------------------------------------------------------

def edge_attribution(lab: Engine, clean, corrupt, metric, method: str = "eap", steps: int = 5,
                     direction: str = "denoise") -> EdgeScores:
    """Every edge's estimated effect: (source u - base u) . d metric / d (v's input); see the module docstring."""
    engine = engine_of(lab)
    if method not in ("eap", "eap-ig"):
        raise InterplabError(f"method={method!r}: use 'eap' or 'eap-ig'.")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InterplabError(f"steps={steps!r}: the number of interpolation steps of eap-ig, an int >= 1.")
    base, source, metric = _setup(engine, clean, corrupt, metric, direction)
    _, readers, edges = graph(engine)
    base_run = engine.run(base, cache=_cache_sites(engine), log=False)
    source_run = engine.run(source, cache=_cache_sites(engine), log=False)
    deltas = _writer_deltas(engine, base_run, source_run)
    if method == "eap":
        alphas = [0.0]
    else:
        alphas = [(k + 1) / steps for k in range(steps)]
    grads: dict[str, torch.Tensor] = {}
    embed_delta = deltas["embed"]
    for alpha in alphas:
        start = base_run.cache["resid_pre", 0] + alpha * embed_delta
        g = _reader_gradients(engine, base, readers, metric, start if alpha else None)
        for name, value in g.items():
            grads[name] = grads.get(name, 0) + value / len(alphas)
    # one copy to the host for every edge (each read of a device value waits for the device)
    scores = torch.stack([(deltas[w.name] * grads[r.name]).sum((1, 2)).mean() for w, r in edges]).float().cpu()
    pair_idx = torch.arange(len(base))
    return EdgeScores([f"{w.name} -> {r.name}" for w, r in edges], scores, method, metric.name,
                      float(metric(base_run.last_logits.float(), pair_idx).mean()),
                      float(metric(source_run.last_logits.float(), pair_idx).mean()))


def _reader_gradients(engine: Engine, base, readers, metric, start) -> dict[str, torch.Tensor]:
    """d metric / d (each reader's input) in the base run (its embeddings set to `start` if given), [pairs, pos, d]:
    the gradient reaching the residual stream through that reader alone."""
    n = engine.n_layers
    sites = ([(s, layer) for layer in range(n) for s in ("resid_pre", "resid_mid", "q", "k", "v", "mlp_out")]
             + [("resid_post", n - 1)])
    edits = [] if start is None else [ed.set_value("resid_pre", 0, value=start)]
    run = engine.run(base, edits=edits, cache=sites, grad=True, log=False)
    try:
        value = metric(run.last_logits.float(), torch.arange(len(base))).sum()
        outs = [("q", layer) for layer in range(n)] + [("k", layer) for layer in range(n)] +\
               [("v", layer) for layer in range(n)] + [("mlp_out", layer) for layer in range(n)] +\
               [("resid_post", n - 1)]
        got = torch.autograd.grad(value, [run.cache[k] for k in outs], retain_graph=True, allow_unused=True)
        d_out = {k: (g if g is not None else torch.zeros_like(run.cache[k])) for k, g in zip(outs, got)}
        # kept on the model's device (lab.device), where the writers' deltas are: the scores combine them there
        out = {"logits": d_out["resid_post", n - 1].detach().float().to(engine.device)}
        for r in readers:
            if r.site == "logits":
                continue
            if r.site == "mlp":
                target, src, g = run.cache["mlp_out", r.layer], run.cache["resid_mid", r.layer],\
                    d_out["mlp_out", r.layer]
            else:
                target, src = run.cache[r.site, r.layer], run.cache["resid_pre", r.layer]
                g = d_out[r.site, r.layer]
                heads = engine.n_heads if r.site == "q" else engine.sites.n_kv_heads
                mask = torch.zeros(heads, dtype=g.dtype, device=g.device)
                mask[r.head] = 1
                g = (g.view(*g.shape[:2], heads, -1) * mask[:, None]).view_as(g)
            (back,) = torch.autograd.grad(target, src, grad_outputs=g, retain_graph=True, allow_unused=True)
            out[r.name] = (torch.zeros_like(src) if back is None else back).detach().float().to(engine.device)
    finally:
        engine.model.zero_grad(set_to_none=True)
    return out


# ---- exact edge patching --------------------------------------------------------------------------------------

def edge_patch(lab: Engine, clean, corrupt, metric, edges=None, direction: str = "denoise",
               max_batch: int = 64) -> EdgeScores:
    """Each edge patched on its own, exactly (see the module docstring); edges: names ("L0H1 -> L2H3.q"), or None
    for every edge of the model."""
    engine = engine_of(lab)
    base, source, metric = _setup(engine, clean, corrupt, metric, direction)
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise InterplabError(f"max_batch={max_batch!r}: the most rows per forward, an int >= 1.")
    _, _, all_edges = graph(engine)
    by_name = {f"{w.name} -> {r.name}": (w, r) for w, r in all_edges}
    if edges is None:
        chosen = list(by_name)
    else:
        if isinstance(edges, str) or not isinstance(edges, (list, tuple)):
            raise InterplabError(f"edges={edges!r}: a list of edge names such as 'L0H1 -> L2H3.q', or None for all.")
        unknown = [e for e in edges if e not in by_name]
        if unknown:
            raise InterplabError(f"unknown edge(s) {unknown[:3]}: edges look like 'embed -> L1H0.k', 'L0H1 -> MLP2', "
                                 f"'MLP1 -> logits'; a writer feeds only readers after it "
                                  f"(interplab.analyses.edges.graph).")
        chosen = list(edges)
    base_run = engine.run(base, cache=_cache_sites(engine), log=False)
    source_run = engine.run(source, cache=_cache_sites(engine), log=False)
    deltas = _writer_deltas(engine, base_run, source_run)
    n_pairs = len(base)
    per_chunk = max(1, max_batch // n_pairs)
    scores = []
    for i in range(0, len(chosen), per_chunk):
        part = [by_name[e] for e in chosen[i:i + per_chunk]]
        scores.append(_exact_chunk(engine, part, base, base_run, deltas, metric, n_pairs))
    pair_idx = torch.arange(n_pairs)
    base_value = float(metric(base_run.last_logits.float(), pair_idx).mean())
    return EdgeScores(chosen, torch.cat(scores) - base_value, "exact", metric.name, base_value,
                      float(metric(source_run.last_logits.float(), pair_idx).mean()))


def _exact_chunk(engine: Engine, part, base, base_run, deltas, metric, n_pairs: int) -> torch.Tensor:
    """Metric per edge of `part` (one row per edge and pair): first the reader's output from the shifted input,
    then the base run with that output."""
    n, rows = engine.n_layers, len(part) * n_pairs
    prompts = [p for _ in part for p in base]

    def rows_of(i):
        return list(range(i * n_pairs, (i + 1) * n_pairs))

    def rows_for(which):
        return [row for i in which for row in rows_of(i)]

    def shifted(site, layer, which):  # in the rows of the chosen edges (only): the base value + the edge's delta
        value = base_run.cache[site, layer].repeat(len(part), 1, 1).clone()
        for i in which:
            value[rows_of(i)] += deltas[part[i][0].name]
        return ed.patch(site, layer, batch=rows_for(which), source=value)

    first = []
    for layer in range(n):
        heads = [i for i, (_, r) in enumerate(part) if r.layer == layer and r.site in ("q", "k", "v")]
        mlps = [i for i, (_, r) in enumerate(part) if r.layer == layer and r.site == "mlp"]
        if heads:
            first.append(shifted("resid_pre", layer, heads))
        if mlps:
            first.append(shifted("resid_mid", layer, mlps))
    logit_rows = [i for i, (_, r) in enumerate(part) if r.site == "logits"]
    if logit_rows:
        first.append(shifted("resid_post", n - 1, logit_rows))
    # each shift sits at its reader's own layer: the reader's output in this run is what the edge gives it
    reads = sorted({(r.site if r.site != "mlp" else "mlp_out", r.layer) for _, r in part if r.site != "logits"})
    # (memo=False: these runs' edits are tensors made here; digesting them for a key would copy each to the host)
    run1 = engine.run(prompts, edits=first, cache=reads, log=False, memo=False)
    final_logits = run1.last_logits
    second = []  # each row's reader output set in that row only: the rest of the row computes on from it
    for site, layer in reads:
        value = _base_rows(engine, base_run, base, site, layer, len(part)).clone()
        which = [i for i, (_, r) in enumerate(part) if (r.site if r.site != "mlp" else "mlp_out") == site
                 and r.layer == layer]
        for i in which:
            r = part[i][1]
            if r.head is None:
                value[rows_of(i)] = run1.cache[site, layer][rows_of(i)]
            else:
                heads = engine.n_heads if site == "q" else engine.sites.n_kv_heads
                v = value.view(rows, value.shape[1], heads, -1)
                v[rows_of(i), :, r.head] = run1.cache[site, layer][rows_of(i)].view(n_pairs, -1, heads,
                                                                                  v.shape[-1])[:, :, r.head]
        second.append(ed.patch(site, layer, batch=rows_for(which), source=value))
    logits = engine.run(prompts, edits=second, log=False, memo=False).last_logits if second else final_logits
    if logit_rows:
        keep = torch.tensor([i * n_pairs + j for i in logit_rows for j in range(n_pairs)])
        logits = logits.clone()
        logits[keep] = final_logits[keep]
    pair_idx = torch.arange(n_pairs).repeat(len(part))
    return metric(logits.float(), pair_idx).view(len(part), n_pairs).mean(1)


def _base_rows(engine: Engine, base_run, base, site: str, layer: int, copies: int) -> torch.Tensor:
    """The base run's value of (site, layer) tiled `copies` times along the rows (from its cache, or one run)."""
    key = (site, layer)
    if key not in base_run.cache:
        base_run = engine.run(base, cache=[key], log=False)
    return base_run.cache[key].repeat(copies, 1, 1)


# ---- a circuit's faithfulness -----------------------------------------------------------------------------------

@dataclass
class CircuitResult:
    value: float  # the metric with only the circuit's edges carrying the clean run
    faithfulness: float  # (value - corrupt) / (clean - corrupt): 1 = the whole clean behaviour, 0 = none
    clean_value: float
    corrupt_value: float
    n_edges: int
    total_edges: int


def circuit(lab: Engine, clean, corrupt, metric, edges) -> CircuitResult:
    """Run the clean prompt with every edge *outside* `edges` carrying the corrupt run instead (as Wang et al.
    evaluate the IOI circuit): each reader's input is the corrupt run's, plus (circuit writer now - that writer in
    the corrupt run) for each circuit edge into it. Computed layer by layer: one forward gives each reader of a layer
    its q/k/v from its own input, one the heads' outputs from those, one the MLP's. Every edge in gives the clean
    run, none the corrupt run."""
    engine = engine_of(lab)
    corrupt_p, clean_p, metric = _setup(engine, clean, corrupt, metric, "denoise")  # (base, source) = (corrupt, clean)
    _, _, all_edges = graph(engine)
    by_name = {f"{w.name} -> {r.name}": (w, r) for w, r in all_edges}
    if isinstance(edges, str) or not isinstance(edges, (list, tuple, set)):
        raise InterplabError(f"edges={edges!r}: the circuit, as a list of edge names such as 'L0H1 -> L2H3.q'.")
    unknown = [e for e in edges if e not in by_name]
    if unknown:
        raise InterplabError(f"unknown edge(s) {unknown[:3]}: edges look like 'embed -> L1H0.k', 'L0H1 -> MLP2', "
                             f"'MLP1 -> logits' (interplab.analyses.edges.graph lists them).")
    into: dict[str, list[str]] = {}
    for e in edges:
        w, r = by_name[e]
        into.setdefault(r.name, []).append(w.name)
    n, H, kv = engine.n_layers, engine.n_heads, engine.sites.n_kv_heads
    corrupt_run = engine.run(corrupt_p, cache=_cache_sites(engine) + [(s, layer) for layer in range(engine.n_layers)
                                                                 for s in ("q", "k", "v")], log=False)
    clean_run = engine.run(clean_p, cache=["embed", ("resid_pre", 0)], log=False)
    n_pairs = len(corrupt_p)
    # what each writer writes in the corrupt run, and (filled layer by layer) in the circuit's run
    corrupt_out = _writer_outputs(engine, corrupt_run, range(n))
    now = {"embed": clean_run.cache["resid_pre", 0]}

    def shift(reader: str) -> torch.Tensor:
        return sum((now[w] - (corrupt_run.cache["resid_pre", 0] if w == "embed" else corrupt_out[w])
                    for w in into.get(reader, [])), torch.zeros_like(corrupt_run.cache["resid_pre", 0]))

    patches = []  # q/k/v of every layer done so far, as computed for the circuit
    for layer in range(n):
        names = ([(f"L{layer}H{h}.q", "q", h) for h in range(H)] + [(f"L{layer}H{h}.k", "k", h) for h in range(kv)]
                 + [(f"L{layer}H{h}.v", "v", h) for h in range(kv)])
        inputs = torch.cat([corrupt_run.cache["resid_pre", layer] + shift(name) for name, _, _ in names])
        prompts = [p for _ in names for p in corrupt_p]
        run = engine.run(prompts, edits=[ed.set_value("resid_pre", layer, value=inputs)],
                      cache=[("q", layer), ("k", layer), ("v", layer)], log=False, memo=False)
        for site in ("q", "k", "v"):
            heads = H if site == "q" else kv
            value = corrupt_run.cache[site, layer].clone()
            v = value.view(*value.shape[:2], heads, -1)
            for i, (_, s, h) in enumerate(names):
                if s == site:
                    got = run.cache[site, layer][i * n_pairs:(i + 1) * n_pairs]
                    v[:, :, h] = got.view(*got.shape[:2], heads, -1)[:, :, h]
            patches.append(ed.patch(site, layer, source=value))
        heads_run = engine.run(corrupt_p, edits=patches, cache=[("z", layer)], log=False, memo=False)
        now.update(_writer_outputs(engine, heads_run, [layer], heads_only=True))
        mlp_in = corrupt_run.cache["resid_mid", layer] + shift(f"MLP{layer}")
        mlp_run = engine.run(corrupt_p, edits=[ed.set_value("resid_mid", layer, value=mlp_in)],
                          cache=[("mlp_out", layer)], log=False, memo=False)
        now[f"MLP{layer}"] = mlp_run.cache["mlp_out", layer]
    final = corrupt_run.cache["resid_post", n - 1] + shift("logits")
    out = engine.run(corrupt_p, edits=[ed.set_value("resid_post", n - 1, value=final)], log=False, memo=False)
    pair_idx = torch.arange(n_pairs)
    value = float(metric(out.last_logits.float(), pair_idx).mean())
    clean_value = float(metric(engine.run(clean_p, log=False).last_logits.float(), pair_idx).mean())
    corrupt_value = float(metric(corrupt_run.last_logits.float(), pair_idx).mean())
    return CircuitResult(value, (value - corrupt_value) / (clean_value - corrupt_value), clean_value,
                         corrupt_value, len(set(edges)), len(all_edges))


def _writer_outputs(engine: Engine, run, layers, heads_only: bool = False) -> dict[str, torch.Tensor]:
    """Each head's output (its slice of z through W_O, no bias) and each MLP's output in a run, for `layers`."""
    arch = engine.sites.arch
    out = {}
    with torch.no_grad():
        for layer in layers:
            o_proj = engine.model.get_submodule(f"{arch.layers}.{layer}.{arch.o_proj}")
            param = next(o_proj.parameters())
            z = run.cache["z", layer].to(execution_device(engine.model, o_proj), param.dtype)
            per_head = z.view(*z.shape[:2], engine.n_heads, -1)
            zero = o_proj(torch.zeros_like(z))
            for h in range(engine.n_heads):
                only = torch.zeros_like(per_head)
                only[:, :, h] = per_head[:, :, h]
                out[f"L{layer}H{h}"] = (o_proj(only.view_as(z)) - zero).float().to(engine.device)  # with the cache
            if not heads_only:
                out[f"MLP{layer}"] = run.cache["mlp_out", layer]
    return out
