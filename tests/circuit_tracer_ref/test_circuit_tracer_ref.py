"""circuit-tracer itself as the reference for interplab's attribution graphs: the same model (ioi-tiny, converted to
circuit-tracer's TransformerLens backend), the same transcoders (written in circuit-tracer's own format: a
config.yaml and one layer_N.safetensors per layer; a cross-layer transcoder's W_enc_N / W_dec_N.safetensors), the
same prompt. Random TopK transcoders (with and without a skip term), random JumpReLU ones (which interplab reads from
the very files circuit-tracer reads), a random cross-layer transcoder, and the shipped set. circuit_tracer.attribute's
adjacency equals interplab's to 1e-4 of each row's largest entry, circuit_tracer.graph.prune_graph keeps the same nodes
and edges (on interplab's adjacency exactly; on its own graph wherever float rounding cannot move a cut:
cut_is_settled), and compute_graph_scores gives the same replacement and completeness scores.

Runs in build/venv-saelens (scripts/circuit_tracer.sh): circuit-tracer pins transformers <= 4.57, interplab needs
>= 5.15, so interplab's graph is computed in the main environment by interplab_graph.py (a subprocess: INTERPLAB_PYTHON,
default .venv/bin/python) and read back from a file.

What is aligned, and why (each is a definition, not an error; test_what_circuit_tracer_does_unaligned measures them):
- ioi-tiny's prompts have no BOS. circuit-tracer's ensure_tokenized prepends one to every prompt that does not start
  with a special token, and cannot here: it picks the first truthy id of (bos, pad, eos, special ids), and ioi-tiny's
  only special token has id 0, so it raises StopIteration. It is given interplab's token ids as they are.
- circuit-tracer zeroes every feature and error at position 0 (its BOS, zero_positions = slice(0, 1)); interplab
  keeps position 0's nodes (no BOS). Set to slice(0, 0).
- circuit-tracer's token node is the token embedding W_E[token] (its other models have no learned positions);
  interplab's is the first residual, W_E[token] + W_pos[pos]. Its token vectors get W_pos added.
- circuit-tracer's transcoder files hold relu or JumpReLU transcoders; a TopK one gets its activation set in code:
  circuit-tracer's TopK, then a ReLU. Its TopK keeps the k largest pre-activations even when negative; a TopK
  transcoder of SAELens's (and interplab's, and the shipped ones, trained so) ReLUs them. On the IOI prompt some
  shipped transcoders keep a negative one, which circuit-tracer's TopK alone would make a feature node.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "interplab" / "zoo" / "ioi_tiny"
SHIPPED = ROOT / "interplab" / "zoo" / "ioi_tiny_transcoders"
PROMPT = "When Mary and John went to the store, John gave a drink to"
RTOL = 1e-4
LOOSE = (0.95, 0.99)  # interplab_graph.py's second pruning (node, edge threshold)

pytest.importorskip("circuit_tracer")
yaml = pytest.importorskip("yaml")
from circuit_tracer import attribute  # noqa: E402
from circuit_tracer.graph import (  # noqa: E402
    Graph,
    compute_edge_influence,
    compute_graph_scores,
    compute_node_influence,
    find_threshold,
    prune_graph,
)
from circuit_tracer.replacement_model.replacement_model_transformerlens import (  # noqa: E402
    TransformerLensReplacementModel,
)
from circuit_tracer.transcoder.activation_functions import TopK  # noqa: E402
from circuit_tracer.transcoder.cross_layer_transcoder import load_clt  # noqa: E402
from circuit_tracer.utils.hf_utils import load_transcoders  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformer_lens import HookedTransformerConfig  # noqa: E402
from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights  # noqa: E402
from transformers import AutoTokenizer, GPT2LMHeadModel  # noqa: E402


# ---- the transcoders, written in both formats ----------------------------------------------------------------------
def random_params(n_layers=4, d=128, d_tc=64, seed=0, skip=False, threshold=None):
    """Seeded random transcoders (interplab's convention: W_enc [d, d_tc], W_dec [d_tc, d], W_skip [d, d]); JumpReLU
    ones where a threshold is given (each feature's: threshold + U(0, 0.5))."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_layers):
        p = {"W_enc": torch.randn(d, d_tc, generator=g) / d ** 0.5,
             "W_dec": torch.randn(d_tc, d, generator=g) / d_tc ** 0.5,
             "b_enc": torch.randn(d_tc, generator=g) * 0.1, "b_dec": torch.randn(d, generator=g) * 0.1}
        if skip:
            p["W_skip"] = torch.randn(d, d, generator=g) * 0.05
        if threshold is not None:
            p["threshold"] = threshold + torch.rand(d_tc, generator=g) * 0.5
        out.append(p)
    return out


def write_saelens(params, k, folder: Path) -> Path:
    """SAELens transcoder folders (layer_N/cfg.json + sae_weights.safetensors), as the shipped ones: interplab reads
    these."""
    for layer, p in enumerate(params):
        d_in, d_tc = p["W_enc"].shape
        sub = folder / f"layer_{layer}"
        sub.mkdir(parents=True)
        save_file({n: t.contiguous() for n, t in p.items()}, sub / "sae_weights.safetensors")
        skip = "skip_" if "W_skip" in p else ""
        kind = ({"architecture": f"jumprelu_{skip}transcoder"} if k is None
                else {"architecture": f"{skip}transcoder", "activation": "topk", "k": k})
        cfg = {**kind, "d_in": d_in, "d_sae": d_tc, "d_out": p["W_dec"].shape[1],
               "metadata": {"hook_name": f"blocks.{layer}.ln2.hook_normalized",
                            "hook_name_out": f"blocks.{layer}.hook_mlp_out"}}
        (sub / "cfg.json").write_text(json.dumps(cfg))
    return folder


def read_saelens(folder: Path):
    layers = sorted(folder.glob("layer_*"), key=lambda p: int(p.name.split("_")[1]))
    params = [load_file(sub / "sae_weights.safetensors") for sub in layers]
    ks = {json.loads((sub / "cfg.json").read_text())["k"] for sub in layers}
    assert len(ks) == 1
    return params, ks.pop()


def write_circuit_tracer(params, folder: Path) -> Path:
    """The same transcoders in circuit-tracer's format (config.yaml + layer_N.safetensors, W_enc [d_tc, d] and
    W_skip applied as x @ W_skip.T). The MLP's input and output are circuit-tracer's ReplacementMLP hooks
    mlp.hook_in / mlp.hook_out: after ln_2 (with its weight and bias), where interplab's transcoders read."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for layer, p in enumerate(params):
        path = folder / f"layer_{layer}.safetensors"
        tensors = {"W_enc": p["W_enc"].T, "W_dec": p["W_dec"], "b_enc": p["b_enc"], "b_dec": p["b_dec"]}
        if "W_skip" in p:
            tensors["W_skip"] = p["W_skip"].T
        if "threshold" in p:
            tensors["activation_function.threshold"] = p["threshold"]
        save_file({n: t.contiguous() for n, t in tensors.items()}, path)
        paths.append(str(path))
    config = {"model_kind": "transcoder_set", "feature_input_hook": "mlp.hook_in",
              "feature_output_hook": "mlp.hook_out", "scan": "interplab-ref", "transcoders": paths}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return folder


def circuit_tracer_transcoders(params, k, folder: Path):
    """The transcoders written in circuit-tracer's format, loaded by circuit-tracer's own loader."""
    if not (folder / "config.yaml").exists():
        write_circuit_tracer(params, folder)
    tcs = load_transcoders(yaml.safe_load((folder / "config.yaml").read_text()), device=torch.device("cpu"),
                           dtype=torch.float32, lazy_encoder=False, lazy_decoder=False)
    for tc in tcs if k is not None else ():
        tc.activation_function = torch.nn.Sequential(TopK(k), torch.nn.ReLU())  # its files say relu or JumpReLU
    return tcs


# ---- the model --------------------------------------------------------------------------------------------------
def circuit_tracer_model(transcoders):
    """ioi-tiny as a circuit-tracer replacement model: a HookedTransformer of ioi-tiny's shape, its GPT-2 weights
    converted by TransformerLens's own converter, nothing folded (as circuit-tracer loads GPT-2)."""
    hf = GPT2LMHeadModel.from_pretrained(MODEL, attn_implementation="eager").eval()
    c = hf.config
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_heads=c.n_head, d_head=c.n_embd // c.n_head,
        d_mlp=c.n_inner or 4 * c.n_embd, d_vocab=c.vocab_size, n_ctx=c.n_positions, act_fn=c.activation_function,
        eps=c.layer_norm_epsilon, normalization_type="LN", positional_embedding_type="standard",
        original_architecture="GPT2LMHeadModel", model_name="ioi-tiny", default_prepend_bos=False,
        device="cpu", dtype=torch.float32)
    model = TransformerLensReplacementModel.from_config(cfg, transcoders,
                                                        tokenizer=AutoTokenizer.from_pretrained(MODEL))
    # circuit-tracer wraps each MLP (ReplacementMLP.old_mlp) and the unembedding (ReplacementUnembed.old_unembed)
    state = {}
    for name, t in convert_gpt2_weights(hf, cfg).items():
        parts = name.split(".")
        if len(parts) > 2 and parts[2] == "mlp":
            parts.insert(3, "old_mlp")
        if parts[0] == "unembed":
            parts.insert(1, "old_unembed")
        state[".".join(parts)] = t
    state.setdefault("unembed.old_unembed.b_U", torch.zeros(c.vocab_size))  # GPT-2 has no unembedding bias
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    other = [n for n in missing if not n.endswith(("mask", "IGNORE")) and not n.startswith("transcoders.")]
    assert not other, other
    return hf, model


def ours(jobs: dict[str, str], tmp: Path) -> dict[str, dict]:
    """interplab's graphs of PROMPT over each transcoder set {name: folder}, computed in the main environment."""
    python = os.environ.get("INTERPLAB_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    if not Path(python).exists():
        pytest.fail(f"no interplab environment at {python}: run scripts/setup.sh or set INTERPLAB_PYTHON")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([python, str(Path(__file__).with_name("interplab_graph.py")), PROMPT, str(tmp),
                    *(f"{name}={folder}" for name, folder in jobs.items())], check=True, env=env, cwd=ROOT)
    return {name: torch.load(tmp / f"{name}.pt") for name in jobs}


def theirs(model, ids: torch.Tensor, aligned: bool = True) -> Graph:
    """circuit_tracer.attribute on these token ids, with the alignments the module docstring lists."""
    model.ensure_tokenized = lambda prompt: ids  # its own cannot pick a BOS for ioi-tiny (see above)
    if aligned:
        model.zero_positions = slice(0, 0)
        setup = type(model).setup_attribution

        def setup_attribution(inputs):
            ctx = setup(model, inputs)
            ctx.token_vectors = ctx.token_vectors + model.W_pos[:len(ids)]
            return ctx

        model.setup_attribution = setup_attribution
    try:
        return attribute(ids, model, batch_size=128)
    finally:
        for name in ("ensure_tokenized", "setup_attribution"):
            model.__dict__.pop(name, None)
        model.zero_positions = slice(0, 1)


# ---- the comparisons --------------------------------------------------------------------------------------------
def row_relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """max over rows of max |a - b| / max |b|; a row of b that is all zero must be all zero in a."""
    scale = b.abs().amax(1)
    diff = (a - b).abs()
    assert diff[scale == 0].max() == 0  # rows without inputs (errors, tokens) in both
    return float((diff[scale > 0] / scale[scale > 0, None]).max())


def cut_is_settled(a: torch.Tensor, b: torch.Tensor, threshold: float) -> tuple[bool, dict]:
    """Whether prune_graph's cut at `threshold` keeps the same items for scores `a` (circuit-tracer's graph) as for
    `b` (interplab's), whatever their rounding: find_threshold cuts where the cumulative fraction of the sorted scores
    reaches the threshold. The top-n sums of a and b differ by at most D = sum|a - b|, so their cumulative fractions
    by at most 2D / min(sum a, sum b): the cut is at the same rank n if the fractions either side of it are further
    than that from the threshold; and the top n are the same items if the n-th and (n+1)-th scores are more than
    2 max|a - b| apart. Where a cut is nearer than that, rounding decides it, and the two graphs' pruned sets are not
    compared (interplab's pruning is still compared exactly with circuit-tracer's on the same adjacency)."""
    a, b = a.flatten().double(), b.flatten().double()
    s = torch.sort(a, descending=True).values
    c = torch.cumsum(s, 0) / s.sum()
    n = min(int(torch.searchsorted(c, threshold)), len(s) - 1)
    diff = (a - b).abs()
    figures = {"cumulative_gap": min([float(c[n]) - threshold] + [threshold - float(c[n - 1])] * (n > 0)),
               "cumulative_bound": float(2 * diff.sum() / min(a.sum(), b.sum())),
               "value_gap": float(s[n] - s[n + 1]) if n + 1 < len(s) else float("inf"),
               "value_bound": float(2 * diff.max())}
    settled = figures["cumulative_gap"] > figures["cumulative_bound"] and figures["value_gap"] > figures["value_bound"]
    return settled, figures


def pruning_is_settled(graph: Graph, mine: dict, node_threshold: float, edge_threshold: float) -> tuple[bool, dict]:
    """cut_is_settled for both of prune_graph's cuts (nodes, then edges among the kept nodes), its scores computed by
    circuit-tracer's own functions from each graph's adjacency. Settled: the two graphs' pruned sets must be equal."""
    n_logits, n_tokens = len(graph.logit_targets), len(graph.input_tokens)
    weights = []
    for probs in (graph.logit_probabilities, mine["logit_probs"]):
        weights.append(torch.zeros(len(mine["adjacency"])))
        weights[-1][-n_logits:] = probs
    adjacency = (graph.adjacency_matrix, mine["adjacency"])
    influence = [compute_node_influence(m, w) for m, w in zip(adjacency, weights)]
    nodes_settled, node_figures = cut_is_settled(*influence, node_threshold)
    kept = influence[0] >= find_threshold(influence[0], node_threshold)  # (interplab's too, where settled)
    kept[-n_logits - n_tokens:] = True
    edges = []
    for m, w in zip(adjacency, weights):
        pruned = m.clone()
        pruned[~kept] = 0
        pruned[:, ~kept] = 0
        edges.append(compute_edge_influence(pruned, w))
    edges_settled, edge_figures = cut_is_settled(*edges, edge_threshold)
    return nodes_settled and edges_settled, {"nodes": node_figures, "edges": edge_figures}


def compare(mine: dict, graph: Graph, report: str) -> dict:
    """Every check of one graph pair; returns the figures (printed with -s)."""
    assert graph.input_tokens.tolist() == mine["input_ids"].tolist()
    assert (graph.activation_values != 0).all()  # (negative where a JumpReLU threshold is)
    assert torch.equal(graph.active_features.cpu(), mine["features"])  # same features, same (layer, pos, f) order
    assert len(graph.selected_features) == len(mine["features"]) > 50
    # each activation to RTOL of itself, or of the largest for one near 0 (a JumpReLU with a negative threshold
    # passes pre-activations near 0, whose last bits two summation orders set differently)
    act = float(((graph.activation_values - mine["activations"]).abs()
                 / mine["activations"].abs().clamp(min=1e-2 * float(mine["activations"].abs().max()))).max())
    assert act <= RTOL
    assert [t.vocab_idx for t in graph.logit_targets] == mine["logit_ids"].tolist()
    assert (graph.logit_probabilities - mine["logit_probs"]).abs().max() <= 1e-5
    a, b = mine["adjacency"], graph.adjacency_matrix
    assert a.shape == b.shape
    rel = row_relative(a, b)
    assert rel <= RTOL, rel
    # pruning: on interplab's adjacency, circuit-tracer's prune_graph keeps exactly the nodes and edges interplab
    # keeps (same input, two codes); on its own graph it keeps the same, wherever rounding cannot move a cut
    same_input = Graph(input_string=PROMPT, input_tokens=graph.input_tokens, active_features=graph.active_features,
                       adjacency_matrix=mine["adjacency"], cfg=graph.cfg, selected_features=graph.selected_features,
                       activation_values=mine["activations"], logit_targets=graph.logit_targets,
                       logit_probabilities=mine["logit_probs"], scan="interplab")
    cuts = {}
    for name, thresholds, prefix in (("default", (0.8, 0.98), ""), ("loose", LOOSE, "loose_")):
        nodes, edges = mine[f"{prefix}node_mask"], mine[f"{prefix}edge_mask"]
        same = prune_graph(same_input, *thresholds)
        assert torch.equal(same.node_mask, nodes) and torch.equal(same.edge_mask, edges), name
        settled, cuts[name] = pruning_is_settled(graph, mine, *thresholds)
        on_its_graph = prune_graph(graph, *thresholds)
        cuts[name]["kept_features"] = int(on_its_graph.node_mask[:len(mine["features"])].sum())
        cuts[name]["kept_edges"] = int(on_its_graph.edge_mask.sum())
        cuts[name]["settled"] = settled
        if settled:
            assert torch.equal(on_its_graph.node_mask, nodes) and torch.equal(on_its_graph.edge_mask, edges), name
        else:
            cuts[name]["same_as_interplab"] = bool(torch.equal(on_its_graph.node_mask, nodes)
                                                   and torch.equal(on_its_graph.edge_mask, edges))
    same_scores = torch.tensor(compute_graph_scores(same_input), dtype=torch.float64)
    assert (same_scores - mine["scores"].double()).abs().max() <= 1e-6
    scores = torch.tensor(compute_graph_scores(graph), dtype=torch.float64)
    score_diff = float((scores - mine["scores"].double()).abs().max())
    assert score_diff <= RTOL
    figures = {"graph": report, "nodes": len(a), "features": len(mine["features"]), "max_row_relative": rel,
               "activation_relative": act, "pruning": cuts, "circuit_tracer_scores": scores.tolist(),
               "interplab_scores": mine["scores"].tolist(), "score_diff": score_diff}
    print("\n" + json.dumps(figures))
    return figures


# circuit-tracer keeps x @ W_skip in its linear replacement (skip + (mlp_out - skip).detach()); so does interplab
# (negative: thresholds in [-0.3, 0.2], where circuit-tracer's JumpReLU, pre * (pre > threshold), passes negative
#  activations that SAELens's relu(pre) * (pre > threshold) would zero)
RANDOM = {"topk": (dict(), 6), "jumprelu": (dict(threshold=1.0), None), "topk+skip": (dict(skip=True), 6),
          "jumprelu negative": (dict(threshold=-0.3), None)}
CT_FORMAT = ("jumprelu", "jumprelu negative")  # interplab reads these from circuit-tracer's files (TopK is not in its
# format)


def random_clt(n_layers=4, d=128, d_tc=64, seed=5, threshold=1.0):
    """A seeded random cross-layer transcoder in circuit-tracer's file layout (W_enc_N [d_tc, d], W_dec_N [d_tc,
    n_layers - N, d], JumpReLU thresholds threshold_N)."""
    g = torch.Generator().manual_seed(seed)
    p = {}
    for i in range(n_layers):
        p[f"W_enc_{i}"] = torch.randn(d_tc, d, generator=g) / d ** 0.5
        p[f"b_enc_{i}"] = torch.randn(d_tc, generator=g) * 0.1
        p[f"b_dec_{i}"] = torch.randn(d, generator=g) * 0.1
        p[f"threshold_{i}"] = threshold + torch.rand(d_tc, generator=g) * 0.5
        p[f"W_dec_{i}"] = torch.randn(d_tc, n_layers - i, d, generator=g) / (d_tc * (n_layers - i)) ** 0.5
    return p


def write_clt(p: dict, folder: Path) -> Path:
    """circuit-tracer's CLT files, as its CrossLayerTranscoder.to_safetensors writes them."""
    folder.mkdir(parents=True)
    n_layers = sum(k.startswith("W_enc_") for k in p)
    for i in range(n_layers):
        save_file({f"{k}_{i}": p[f"{k}_{i}"].contiguous() for k in ("W_enc", "b_enc", "b_dec", "threshold")},
                  folder / f"W_enc_{i}.safetensors")
        save_file({f"W_dec_{i}": p[f"W_dec_{i}"].contiguous()}, folder / f"W_dec_{i}.safetensors")
    return folder


@pytest.fixture(scope="module")
def ids():
    return AutoTokenizer.from_pretrained(MODEL)(PROMPT, add_special_tokens=False, return_tensors="pt").input_ids[0]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """{name: (transcoder params, k, interplab's graph)}: the random sets and the shipped one."""
    tmp = tmp_path_factory.mktemp("graphs")
    params = {name: (random_params(**kw), k) for name, (kw, k) in RANDOM.items()}
    jobs = {name: str(write_circuit_tracer(p, tmp / name / "ct") / "config.yaml") if name in CT_FORMAT
            else str(write_saelens(p, k, tmp / name)) for name, (p, k) in params.items()}
    params["shipped"] = read_saelens(SHIPPED)
    jobs["shipped"] = "ioi-tiny-transcoders"
    params["clt"] = (random_clt(), None)
    jobs["clt"] = str(write_clt(params["clt"][0], tmp / "clt"))
    params["clt negative"] = (random_clt(threshold=-0.3), None)
    jobs["clt negative"] = str(write_clt(params["clt negative"][0], tmp / "clt negative"))
    graphs = ours(jobs, tmp)
    return {name: (*params[name], graphs[name]) for name in jobs}


def reference(name, cases, tmp_path):
    params, k, mine = cases[name]
    if name.startswith("clt"):  # circuit-tracer's own CLT loader on the files interplab read
        tcs = load_clt(mine["source"], feature_input_hook="mlp.hook_in", feature_output_hook="mlp.hook_out",
                       scan="interplab-ref", device=torch.device("cpu"), dtype=torch.float32, lazy_decoder=False)
    else:
        folder = Path(mine["source"]).parent if name in CT_FORMAT else tmp_path / "ct"
        tcs = circuit_tracer_transcoders(params, k, folder)
    _, model = circuit_tracer_model(tcs)
    return mine, model


def test_the_converted_model_is_ioi_tiny(tmp_path, ids):
    hf, model = circuit_tracer_model(circuit_tracer_transcoders(random_params(), 6, tmp_path / "ct"))
    with torch.no_grad():
        want = hf(ids[None]).logits
        got = model(ids[None])
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()


def test_random_topk_transcoders(cases, tmp_path, ids):
    mine, model = reference("topk", cases, tmp_path)
    compare(mine, theirs(model, ids), "random topk")


def test_random_jumprelu_transcoders(cases, tmp_path, ids):
    """JumpReLU: circuit-tracer's own file format and activation, nothing set in code."""
    mine, model = reference("jumprelu", cases, tmp_path)
    compare(mine, theirs(model, ids), "random jumprelu")


def test_random_jumprelu_transcoders_with_negative_thresholds(cases, tmp_path, ids):
    """Negative thresholds: the activations between a threshold and 0 are negative nodes in both graphs."""
    mine, model = reference("jumprelu negative", cases, tmp_path)
    assert (mine["activations"] < 0).sum() > 10
    compare(mine, theirs(model, ids), "random jumprelu, negative thresholds")


def test_random_topk_skip_transcoders(cases, tmp_path, ids):
    """A skip term: circuit-tracer's gradients pass through x @ W_skip, and so do interplab's."""
    mine, model = reference("topk+skip", cases, tmp_path)
    assert model.skip_transcoder
    compare(mine, theirs(model, ids), "random topk+skip")


def test_a_random_cross_layer_transcoder(cases, tmp_path, ids):
    """circuit-tracer's CrossLayerTranscoder from its own files: each feature's decoders into every later MLP."""
    mine, model = reference("clt", cases, tmp_path)
    compare(mine, theirs(model, ids), "random cross-layer transcoder")


def test_a_random_cross_layer_transcoder_with_negative_thresholds(cases, tmp_path, ids):
    mine, model = reference("clt negative", cases, tmp_path)
    assert (mine["activations"] < 0).sum() > 10
    compare(mine, theirs(model, ids), "random cross-layer transcoder, negative thresholds")


def test_the_shipped_transcoders(cases, tmp_path, ids):
    mine, model = reference("shipped", cases, tmp_path)
    compare(mine, theirs(model, ids), "shipped")


def test_what_circuit_tracer_does_unaligned(cases, tmp_path, ids):
    """circuit-tracer with its own defaults (only the token ids given, which it cannot make itself here) on the
    shipped transcoders: the nodes at position 0 are gone, and the token columns lack the position embedding; every
    other edge is interplab's."""
    mine, model = reference("shipped", cases, tmp_path)
    with pytest.raises(StopIteration):  # its BOS pick skips id 0, ioi-tiny's only special token
        model.ensure_tokenized(PROMPT)
    graph = theirs(model, ids, aligned=False)
    feats, n_pos, n_layers = mine["features"], len(ids), mine["n_layers"]
    later = (feats[:, 1] > 0).nonzero()[:, 0]
    assert torch.equal(graph.active_features, feats[later])  # position 0's features are zeroed
    n_ours, n_theirs = len(feats), len(later)
    # their node i is our node index[i]
    index = torch.cat([later, torch.arange(n_ours, len(mine["adjacency"]))])
    a, b = mine["adjacency"][index][:, index], graph.adjacency_matrix
    rows = torch.cat([torch.arange(n_theirs), torch.arange(len(b) - len(mine["logit_ids"]), len(b))])
    errors = torch.arange(n_theirs, n_theirs + n_layers * n_pos).view(n_layers, n_pos)
    tokens = torch.arange(n_theirs + n_layers * n_pos, n_theirs + (n_layers + 1) * n_pos)
    assert b[:, errors[:, 0]].abs().max() == 0  # position 0's errors are zeroed
    same = torch.cat([torch.arange(n_theirs), errors[:, 1:].flatten()])
    scale = a[rows].abs().amax(1, keepdim=True)
    rel_same = float(((a[rows][:, same] - b[rows][:, same]).abs() / scale).max())
    rel_tokens = float(((a[rows][:, tokens] - b[rows][:, tokens]).abs() / scale).max())
    assert rel_same <= RTOL
    assert rel_tokens > 100 * RTOL  # the position embedding is a large part of the first residual
    print("\n" + json.dumps({"graph": "shipped, circuit-tracer unaligned", "max_row_relative_shared": rel_same,
                             "max_row_relative_token_columns": rel_tokens,
                             "dropped_position_0_features": n_ours - n_theirs,
                             "circuit_tracer_scores": list(compute_graph_scores(graph)),
                             "interplab_scores": mine["scores"].tolist()}))
