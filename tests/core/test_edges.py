"""Edges: exact edge patching against a hand implementation with plain hooks; EAP against hand vector-Jacobian
products through the model's own modules; EAP-IG against exact on ioi-tiny (the issue's goal: Spearman >= 0.8 over
the top 50 edges)."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from interplab import edges as E

from ._hand import hand_run
from .test_invariants import CLEAN, CORRUPT, build_model

A, B = " Mary", " John"
LL = "model.layers.{}"
PICK = ["embed -> L1H0.q", "L0H1 -> L2H1.k", "L0H2 -> MLP1", "MLP0 -> L2H3.q", "L1H3 -> logits", "MLP1 -> logits",
        "L2H0 -> MLP2", "embed -> L0H1.v"]


@pytest.fixture(scope="module")
def llama(tokenizer):
    return ilab.Lab(build_model("llama"), tokenizer)


def _runs(lab):
    """Hand captures of the base (corrupt: denoising) and source (clean) runs of a Llama."""
    n = lab.n_layers
    cap = [(("z", i), f"{LL.format(i)}.self_attn.o_proj", "input", 0) for i in range(n)]
    cap += [(("mlp", i), f"{LL.format(i)}.mlp", "output", 0) for i in range(n)]
    cap += [(("pre", i), LL.format(i), "input", 0) for i in range(n)]
    cap += [(("mid", i), f"{LL.format(i)}.post_attention_layernorm", "input", 0) for i in range(n)]
    cap += [("final", "model.norm", "input", 0)]
    cap += [((s, i), f"{LL.format(i)}.self_attn.{s}_proj", "output", 0) for i in range(n) for s in "qkv"]
    base = hand_run(lab.model, lab.to_tokens(CORRUPT), capture=cap)
    src = hand_run(lab.model, lab.to_tokens(CLEAN), capture=cap)
    return base, src


def _delta(lab, writer, base, src):
    """u(source) - u(base) from the weights: a head's slice of z times its slice of W_O."""
    if writer == "embed":
        return src[1]["pre", 0] - base[1]["pre", 0]
    if writer.startswith("MLP"):
        i = int(writer[3:])
        return src[1]["mlp", i] - base[1]["mlp", i]
    layer, head = map(int, writer[1:].split("H"))
    d = lab.d_head
    W = lab.model.get_submodule(f"{LL.format(layer)}.self_attn.o_proj").weight
    dz = src[1]["z", layer] - base[1]["z", layer]
    return dz[..., head * d:(head + 1) * d] @ W[:, head * d:(head + 1) * d].T


def _diff(logits, lab):
    return float(logits[0, -1, lab.token_id(A)] - logits[0, -1, lab.token_id(B)])


def _hand_exact(lab, edge, base, src):
    writer, reader = edge.split(" -> ")
    delta = _delta(lab, writer, base, src)
    ids = lab.to_tokens(CORRUPT)
    if reader == "logits":
        with torch.no_grad():
            logits = lab.model.lm_head(lab.model.model.norm(base[1]["final"] + delta))
        return _diff(logits, lab)
    if reader.startswith("MLP"):
        i = int(reader[3:])
        _, got = hand_run(lab.model, ids, edits=[(f"{LL.format(i)}.post_attention_layernorm", "input",
                                                  lambda t: t + delta)],
                          capture=[("out", f"{LL.format(i)}.mlp", "output", 0)])
        logits, _ = hand_run(lab.model, ids, edits=[(f"{LL.format(i)}.mlp", "output", lambda t: got["out"])])
        return _diff(logits, lab)
    name, site = reader.split(".")
    layer, head = map(int, name[1:].split("H"))
    proj = f"{LL.format(layer)}.self_attn.{site}_proj"
    _, got = hand_run(lab.model, ids, edits=[(LL.format(layer), "input", lambda t: t + delta)],
                      capture=[("out", proj, "output", 0)])
    d = lab.d_head

    def put(t):
        t = t.clone()
        t[..., head * d:(head + 1) * d] = got["out"][..., head * d:(head + 1) * d]
        return t
    logits, _ = hand_run(lab.model, ids, edits=[(proj, "output", put)])
    return _diff(logits, lab)


def test_exact_edges_equal_the_hand_procedure(llama):
    res = llama.edge_patch(CLEAN, CORRUPT, ilab.logit_diff(A, B), edges=PICK, max_batch=3)
    base, src = _runs(llama)
    base_diff = _diff(base[0], llama)
    assert abs(res.base_value - base_diff) < 1e-4
    for edge in PICK:
        want = _hand_exact(llama, edge, base, src) - base_diff
        assert abs(res[edge] - want) < 1e-4, (edge, res[edge], want)
    assert max(abs(res[e]) for e in PICK) > 1e-2


def _hand_gradient(lab, reader, base):
    """d metric / d (reader's input) through that reader alone: the metric's gradient at the reader's output
    (a zero added there by a hand hook, then backward), pulled back through the model's own norm and projection."""
    ids = lab.to_tokens(CORRUPT)
    m = lab.model
    a, b = lab.token_id(A), lab.token_id(B)
    if reader == "logits":
        x = base[1]["final"].clone().requires_grad_(True)
        out = m.lm_head(m.model.norm(x))
        (out[0, -1, a] - out[0, -1, b]).backward()
        return x.grad.detach()
    if reader.startswith("MLP"):
        i = int(reader[3:])
        path = f"{LL.format(i)}.mlp"
        layer_in, head, site = base[1]["mid", i], None, None
        norm = m.get_submodule(f"{LL.format(i)}.post_attention_layernorm")
        fn = lambda x: m.get_submodule(path)(norm(x))  # noqa: E731
    else:
        name, site = reader.split(".")
        layer, head = map(int, name[1:].split("H"))
        path = f"{LL.format(layer)}.self_attn.{site}_proj"
        layer_in = base[1]["pre", layer]
        norm = m.get_submodule(f"{LL.format(layer)}.input_layernorm")
        fn = lambda x: m.get_submodule(path)(norm(x))  # noqa: E731
    zero = torch.zeros_like(base[1]["mlp", 0] if site is None else base[1][site, 0]).requires_grad_(True)
    handle = m.get_submodule(path).register_forward_hook(lambda mod, args, out: out + zero)
    try:
        logits = m(ids).logits
        (logits[0, -1, a] - logits[0, -1, b]).backward()
    finally:
        handle.remove()
        m.zero_grad(set_to_none=True)
    g = zero.grad
    if head is not None:
        d = lab.d_head
        keep = torch.zeros_like(g)
        keep[..., head * d:(head + 1) * d] = g[..., head * d:(head + 1) * d]
        g = keep
    _, back = torch.autograd.functional.vjp(fn, layer_in, g)
    return back.detach()


def test_eap_is_the_delta_times_the_hand_gradient(llama):
    res = llama.edge_attribution(CLEAN, CORRUPT, ilab.logit_diff(A, B), method="eap")
    base, src = _runs(llama)
    for edge in PICK:
        writer, reader = edge.split(" -> ")
        with torch.no_grad():
            delta = _delta(llama, writer, base, src)
        want = float((delta * _hand_gradient(llama, reader, base)).sum())
        assert abs(res[edge] - want) < 1e-4 * max(1.0, abs(want)), (edge, res[edge], want)
    # eap-ig with one step is eap at the source's embeddings: a different, still finite estimate
    ig = E.edge_attribution(llama, CLEAN, CORRUPT, ilab.logit_diff(A, B), method="eap-ig", steps=1)
    assert ig.edges == res.edges and torch.isfinite(ig.scores).all()
    assert (ig.scores - res.scores).abs().max() > 1e-4


def _spearman(a, b):
    ra, rb = a.argsort().argsort().float(), b.argsort().argsort().float()
    return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])


def test_eap_ig_ranks_ioi_tinys_edges_like_exact_patching():
    lab = ilab.Lab.load("ioi-tiny")
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    metric = ilab.logit_diff(" Mary", " John")
    exact = E.edge_patch(lab, clean, corrupt, metric)
    ig = E.edge_attribution(lab, clean, corrupt, metric, method="eap-ig", steps=5)
    assert ig.edges == exact.edges
    top = exact.scores.abs().argsort(descending=True)[:50]
    assert _spearman(exact.scores[top], ig.scores[top]) >= 0.8


def test_edges_refuse_what_they_cannot_split(llama, tokenizer):
    with pytest.raises(ilab.UnsupportedSiteError, match="normalises its sublayers"):
        E.edge_attribution(ilab.Lab(build_model("gemma2"), tokenizer), CLEAN, CORRUPT, ilab.logit_diff(A, B))
    with pytest.raises(ilab.InterplabError, match="unknown edge"):
        E.edge_patch(llama, CLEAN, CORRUPT, ilab.logit_diff(A, B), edges=["L2H0 -> L1H0.q"])
    with pytest.raises(ilab.InterplabError, match="'eap' or 'eap-ig'"):
        E.edge_attribution(llama, CLEAN, CORRUPT, ilab.logit_diff(A, B), method="atp")
    assert llama.hooks() == []


def _all_edges(lab):
    return [f"{w.name} -> {r.name}" for w, r in E.graph(lab)[2]]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_circuit_faithfulness_meets_the_models_own_runs(arch, tokenizer):
    """Every edge in: the clean run; none: the corrupt run; every edge but those into one reader: the clean run
    with that reader's output taken from the corrupt run (a plain patch); only the edges into the logits: the
    corrupt run's final residual plus the clean-minus-corrupt embeddings, read through the final norm by hand."""
    lab = ilab.Lab(build_model(arch), tokenizer)
    metric = ilab.logit_diff(A, B)
    everything = _all_edges(lab)
    clean, corrupt = lab.run(CLEAN), lab.run(CORRUPT)
    full = lab.circuit(CLEAN, CORRUPT, metric, everything)
    assert abs(full.value - _diff(clean.logits, lab)) < 1e-4 and abs(full.faithfulness - 1) < 1e-4
    none = lab.circuit(CLEAN, CORRUPT, metric, [])
    assert abs(none.value - _diff(corrupt.logits, lab)) < 1e-4 and abs(none.faithfulness) < 1e-4
    for reader, edit in [("L1H2.q", ilab.patch("q", 1, head=2, source=corrupt)),
                         ("L2H1.v", ilab.patch("v", 2, head=1, source=corrupt)),
                         ("MLP1", ilab.patch("mlp_out", 1, source=corrupt))]:
        got = lab.circuit(CLEAN, CORRUPT, metric, [e for e in everything if not e.endswith(f"-> {reader}")])
        want = _diff(lab.run(CLEAN, edits=[edit]).logits, lab)
        assert abs(got.value - want) < 1e-4, (reader, got.value, want)
        assert abs(want - full.value) > 1e-4  # that reader mattered
    direct = lab.circuit(CLEAN, CORRUPT, metric, [e for e in everything if e.endswith("-> logits")])
    runs = {p: lab.run(p, cache=[("resid_pre", 0), ("resid_post", lab.n_layers - 1)]) for p in (CLEAN, CORRUPT)}
    final = (runs[CORRUPT].cache["resid_post", lab.n_layers - 1] + runs[CLEAN].cache["resid_pre", 0]
             - runs[CORRUPT].cache["resid_pre", 0])
    norm = lab.model.transformer.ln_f if arch == "gpt2" else lab.model.model.norm
    with torch.no_grad():
        want = _diff(lab.model.lm_head(norm(final)), lab)
    assert abs(direct.value - want) < 1e-4


def test_a_small_circuit_keeps_ioi_tinys_behaviour():
    """The issue's goal: a circuit of <= 20% of the edges (the top edges by EAP-IG) keeps >= 80% of the logit
    difference, everything else carrying the corrupt run."""
    lab = ilab.Lab.load("ioi-tiny")
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    metric = ilab.logit_diff(" Mary", " John")
    ig = lab.edge_attribution(clean, corrupt, metric, method="eap-ig")
    ranked = [ig.edges[i] for i in ig.scores.abs().argsort(descending=True)]
    budget = len(ranked) // 5
    res = lab.circuit(clean, corrupt, metric, ranked[:budget])
    assert res.n_edges <= 0.2 * res.total_edges
    assert res.faithfulness >= 0.8, res
