"""Edges: exact edge patching against a hand implementation with plain hooks; EAP against hand vector-Jacobian
products through the model's own modules; EAP-IG against exact on ioi-tiny (the issue's goal: Spearman >= 0.8 over
the top 50 edges)."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from interplab.analyses import edges as E

from ._hand import hand_run
from .test_invariants import CLEAN, CORRUPT, build_model

A, B = " Mary", " John"
PICK = ["embed -> L1H0.q", "L0H1 -> L2H1.k", "L0H2 -> MLP1", "MLP0 -> L2H3.q", "L1H3 -> logits", "MLP1 -> logits",
        "L2H0 -> MLP2", "embed -> L0H1.v"]
# Each architecture's modules, written out here (not taken from interplab's site map): block, attention output
# projection, MLP, the norms in front of attention and MLP, the final norm, and where q/k/v come from.
PATHS = {
    "llama": dict(block="model.layers.{}", o="self_attn.o_proj", mlp="mlp", ln1="input_layernorm",
                  ln2="post_attention_layernorm", final="model.norm", qkv="self_attn.{}_proj"),
    "gpt2": dict(block="transformer.h.{}", o="attn.c_proj", mlp="mlp", ln1="ln_1", ln2="ln_2",
                 final="transformer.ln_f", qkv="attn.c_attn"),  # one Conv1D: [q | k | v]
    "gpt_neox": dict(block="gpt_neox.layers.{}", o="attention.dense", mlp="mlp", ln1="input_layernorm",
                     ln2="post_attention_layernorm", final="gpt_neox.final_layer_norm",
                     qkv="attention.query_key_value"),  # one Linear: per head [q | k | v]
}
ARCHS = list(PATHS)


@pytest.fixture(scope="module")
def labs(tokenizer):
    return {a: ilab.Lab(build_model(a), tokenizer) for a in ARCHS}


def _path(arch, layer, part):
    return f"{PATHS[arch]['block'].format(layer)}.{PATHS[arch][part]}" if part != "block" else \
        PATHS[arch]["block"].format(layer)


def _qkv_module(arch, layer, site):
    return _path(arch, layer, "qkv").format(site)


def _head_slice(arch, lab, site, head):
    """(flat column indices of one head's q/k/v in its module's output)."""
    d = lab.engine.d_head
    if arch == "llama":
        return list(range(head * d, (head + 1) * d))
    part = "qkv".index(site)
    if arch == "gpt2":
        return list(range(part * lab.d_model + head * d, part * lab.d_model + (head + 1) * d))
    return list(range(head * 3 * d + part * d, head * 3 * d + (part + 1) * d))  # neox: [head, (q|k|v), d]


def _runs(lab, arch):
    """Hand captures of the base (corrupt: denoising) and source (clean) runs."""
    n = lab.n_layers
    cap = [(("z", i), _path(arch, i, "o"), "input", 0) for i in range(n)]
    cap += [(("mlp", i), _path(arch, i, "mlp"), "output", 0) for i in range(n)]
    cap += [(("pre", i), _path(arch, i, "block"), "input", 0) for i in range(n)]
    cap += [(("mid", i), _path(arch, i, "ln2"), "input", 0) for i in range(n)]
    cap += [("final", PATHS[arch]["final"], "input", 0)]
    cap += [((s, i), _qkv_module(arch, i, s), "output", 0) for i in range(n) for s in "qkv"]
    base = hand_run(lab.model, lab.to_tokens(CORRUPT), capture=cap)
    src = hand_run(lab.model, lab.to_tokens(CLEAN), capture=cap)
    return base, src


def _delta(lab, arch, writer, base, src):
    """u(source) - u(base) from the weights: a head's slice of z times its slice of W_O."""
    if writer == "embed":
        return src[1]["pre", 0] - base[1]["pre", 0]
    if writer.startswith("MLP"):
        i = int(writer[3:])
        return src[1]["mlp", i] - base[1]["mlp", i]
    layer, head = map(int, writer[1:].split("H"))
    d = lab.engine.d_head
    W = lab.model.get_submodule(_path(arch, layer, "o")).weight
    dz = (src[1]["z", layer] - base[1]["z", layer])[..., head * d:(head + 1) * d]
    if arch == "gpt2":  # Conv1D: x @ W, W [in, out]
        return dz @ W[head * d:(head + 1) * d]
    return dz @ W[:, head * d:(head + 1) * d].T


def _diff(logits, lab):
    return float(logits[0, -1, lab.token_id(A)] - logits[0, -1, lab.token_id(B)])


def _hand_exact(lab, arch, edge, base, src):
    writer, reader = edge.split(" -> ")
    with torch.no_grad():
        delta = _delta(lab, arch, writer, base, src)
    ids = lab.to_tokens(CORRUPT)
    if reader == "logits":
        with torch.no_grad():
            logits = lab.model.get_output_embeddings()(lab.model.get_submodule(PATHS[arch]["final"])(
                base[1]["final"] + delta))
        return _diff(logits, lab)
    if reader.startswith("MLP"):
        i = int(reader[3:])
        _, got = hand_run(lab.model, ids, edits=[(_path(arch, i, "ln2"), "input", lambda t: t + delta)],
                          capture=[("out", _path(arch, i, "mlp"), "output", 0)])
        logits, _ = hand_run(lab.model, ids, edits=[(_path(arch, i, "mlp"), "output", lambda t: got["out"])])
        return _diff(logits, lab)
    name, site = reader.split(".")
    layer, head = map(int, name[1:].split("H"))
    module = _qkv_module(arch, layer, site)
    _, got = hand_run(lab.model, ids, edits=[(_path(arch, layer, "block"), "input", lambda t: t + delta)],
                      capture=[("out", module, "output", 0)])
    cols = _head_slice(arch, lab, site, head)

    def put(t):
        t = t.clone()
        t[..., cols] = got["out"][..., cols]
        return t
    logits, _ = hand_run(lab.model, ids, edits=[(module, "output", put)])
    return _diff(logits, lab)


@pytest.mark.parametrize("arch", ARCHS)
def test_exact_edges_equal_the_hand_procedure(labs, arch):
    lab = labs[arch]
    res = lab.edge_patch(CLEAN, CORRUPT, ilab.logit_diff(A, B), edges=PICK, max_batch=3)
    base, src = _runs(lab, arch)
    base_diff = _diff(base[0], lab)
    assert abs(res.base_value - base_diff) < 1e-4
    for edge in PICK:
        want = _hand_exact(lab, arch, edge, base, src) - base_diff
        assert abs(res[edge] - want) < 1e-4, (edge, res[edge], want)
    assert max(abs(res[e]) for e in PICK) > 1e-2


def _hand_gradient(lab, arch, reader, base):
    """d metric / d (reader's input) through that reader alone: the metric's gradient at the reader's output
    (a zero added there by a hand hook, then backward), pulled back through the model's own norm and projection."""
    ids = lab.to_tokens(CORRUPT)
    m = lab.model
    a, b = lab.token_id(A), lab.token_id(B)
    if reader == "logits":
        x = base[1]["final"].clone().requires_grad_(True)
        out = m.get_output_embeddings()(m.get_submodule(PATHS[arch]["final"])(x))
        (out[0, -1, a] - out[0, -1, b]).backward()
        return x.grad.detach()
    if reader.startswith("MLP"):
        i = int(reader[3:])
        path, norm, layer_in, cols = _path(arch, i, "mlp"), m.get_submodule(_path(arch, i, "ln2")), \
            base[1]["mid", i], None
        example = base[1]["mlp", i]
    else:
        name, site = reader.split(".")
        layer, head = map(int, name[1:].split("H"))
        path, norm, layer_in = _qkv_module(arch, layer, site), m.get_submodule(_path(arch, layer, "ln1")), \
            base[1]["pre", layer]
        cols, example = _head_slice(arch, lab, site, head), base[1][site, layer]
    module = m.get_submodule(path)

    def fn(x):
        return module(norm(x))
    zero = torch.zeros_like(example).requires_grad_(True)
    handle = module.register_forward_hook(lambda mod, args, out: out + zero)
    try:
        logits = m(ids).logits
        (logits[0, -1, a] - logits[0, -1, b]).backward()
    finally:
        handle.remove()
        m.zero_grad(set_to_none=True)
    g = zero.grad
    if cols is not None:  # only this head's q/k/v columns
        keep = torch.zeros_like(g)
        keep[..., cols] = g[..., cols]
        g = keep
    _, back = torch.autograd.functional.vjp(fn, layer_in, g)
    return back.detach()


@pytest.mark.parametrize("arch", ARCHS)
def test_eap_is_the_delta_times_the_hand_gradient(labs, arch):
    lab = labs[arch]
    res = lab.edge_attribution(CLEAN, CORRUPT, ilab.logit_diff(A, B), method="eap")
    base, src = _runs(lab, arch)
    for edge in PICK:
        writer, reader = edge.split(" -> ")
        with torch.no_grad():
            delta = _delta(lab, arch, writer, base, src)
        want = float((delta * _hand_gradient(lab, arch, reader, base)).sum())
        assert abs(res[edge] - want) < 1e-4 * max(1.0, abs(want)), (edge, res[edge], want)
    # eap-ig with one step is eap at the source's embeddings: a different, still finite estimate
    ig = lab.edge_attribution(CLEAN, CORRUPT, ilab.logit_diff(A, B), method="eap-ig", steps=1)
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


def test_edges_refuse_what_they_cannot_split(labs, tokenizer):
    llama = labs["llama"]
    with pytest.raises(ilab.UnsupportedSiteError, match="normalises its sublayers"):
        E.edge_attribution(ilab.Lab(build_model("gemma2"), tokenizer), CLEAN, CORRUPT, ilab.logit_diff(A, B))
    with pytest.raises(ilab.InterplabError, match="unknown edge"):
        E.edge_patch(llama, CLEAN, CORRUPT, ilab.logit_diff(A, B), edges=["L2H0 -> L1H0.q"])
    with pytest.raises(ilab.InterplabError, match="'eap' or 'eap-ig'"):
        E.edge_attribution(llama, CLEAN, CORRUPT, ilab.logit_diff(A, B), method="atp")
    assert llama.hooks() == []


def _all_edges(lab):
    return [f"{w.name} -> {r.name}" for w, r in E.graph(lab)[2]]


@pytest.mark.parametrize("arch", ARCHS)
def test_circuit_faithfulness_meets_the_models_own_runs(arch, labs):
    """Every edge in: the clean run; none: the corrupt run; every edge but those into one reader: the clean run
    with that reader's output taken from the corrupt run (a plain patch); only the edges into the logits: the
    corrupt run's final residual plus the clean-minus-corrupt embeddings, read through the final norm by hand."""
    lab = labs[arch]
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
    norm = lab.model.get_submodule(PATHS[arch]["final"])
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
