"""sae-dashboard itself as the reference for interplab's feature statistics (ilab.analyses.feature_stats): the same
model (ioi-tiny, converted to a TransformerLens HookedSAETransformer), the same SAE (ioi-tiny-sae, loaded by SAELens
from its folder), the same token ids (N_DOCS documents of the SAE's training corpus that tokenize to exactly LENGTH
tokens: a [batch, seq] tensor with no padding, which is what sae-dashboard takes). sae-dashboard's SaeVisRunner
computes every feature's data; it is compared with interplab's:
- density (sae-dashboard's frac_nonzero) and max activation: equal to float rounding;
- the activation histogram: sae-dashboard draws N_BINS equal-width bins from the feature's smallest to its largest
  firing activation (torch.histc), not log bins; interplab's firings, rebinned the same way, give the same counts
  (up to a firing that float rounding moves across an edge), and interplab's own log-binned counts sum to them;
- the top examples: the same activations (where equal activations tie, at positions either side may pick);
- the interval groups (sae-dashboard's "quantiles": N_BANDS equal-width intervals of [0, max]): the examples are
  random picks, so each one sae-dashboard shows must lie in its interval, and interplab's examples in the same band
  must lie in it too.

The two sides compute activations by different forwards (TransformerLens in minibatches, transformers), so they
differ by float rounding, and by how much depends on the CPU: a near tie can order differently, a token within
rounding of an interval's edge can fall on either side. So the fixture also takes sae-dashboard's own activations
for every token (its FeatureDataGenerator, the computation SaeVisRunner runs), asserts them within `Both.gap` of
interplab's, and each test checks sae-dashboard's choices against its own activations and compares the values the
two sides chose to that gap (the k-th largest of two arrays that differ by at most g differ by at most g).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "interplab" / "zoo" / "ioi_tiny"
SAE_FOLDER = ROOT / "interplab" / "zoo" / "ioi_tiny_sae"
HOOK = "blocks.2.hook_resid_pre"
N_DOCS, LENGTH, N_BANDS, TOP_K, N_BINS = 300, 26, 5, 20, 50

pytest.importorskip("sae_dashboard")
from sae_dashboard.components_config import (  # noqa: E402
    ActsHistogramConfig,
    Column,
    FeatureTablesConfig,
    LogitsHistogramConfig,
    LogitsTableConfig,
    SequencesConfig,
)
from sae_dashboard.layout import SaeVisLayoutConfig  # noqa: E402
from sae_dashboard.sae_vis_data import SaeVisConfig  # noqa: E402
from sae_dashboard.sae_vis_runner import FeatureDataGeneratorFactory, SaeVisRunner  # noqa: E402
from sae_lens import SAE, HookedSAETransformer  # noqa: E402
from transformer_lens import HookedTransformerConfig  # noqa: E402
from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights  # noqa: E402
from transformers import AutoTokenizer, GPT2LMHeadModel  # noqa: E402


def tl_model() -> HookedSAETransformer:
    """ioi-tiny as a HookedSAETransformer of its shape, its GPT-2 weights converted by TransformerLens's own converter,
    nothing folded (as tests/circuit_tracer_ref does)."""
    hf = GPT2LMHeadModel.from_pretrained(MODEL, attn_implementation="eager").eval()
    c = hf.config
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_heads=c.n_head, d_head=c.n_embd // c.n_head,
        d_mlp=c.n_inner or 4 * c.n_embd, d_vocab=c.vocab_size, n_ctx=c.n_positions, act_fn=c.activation_function,
        eps=c.layer_norm_epsilon, normalization_type="LN", positional_embedding_type="standard",
        original_architecture="GPT2LMHeadModel", model_name="ioi-tiny", default_prepend_bos=False,
        device="cpu", dtype=torch.float32)
    model = HookedSAETransformer(cfg, tokenizer=AutoTokenizer.from_pretrained(MODEL))
    state = convert_gpt2_weights(hf, cfg)
    state.setdefault("unembed.b_U", torch.zeros(c.vocab_size))  # GPT-2 has no unembedding bias
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(n.endswith(("mask", "IGNORE")) for n in missing), missing
    return model.eval()


def loaded_sae() -> SAE:
    """ioi-tiny-sae as SAELens loads it, ready for SaeVisRunner. Its run first calls fold_W_dec_norm, which SAELens 6
    refuses for a TopK SAE (NotImplementedError: folding may change which k are kept). ioi-tiny-sae's decoder rows
    have unit norm, so folding is the identity: checked, then skipped."""
    sae = SAE.load_from_disk(str(SAE_FOLDER), device="cpu")
    assert (sae.W_dec.norm(dim=1) - 1).abs().max() <= 1e-5
    sae.fold_W_dec_norm = lambda: None
    return sae


def vis_config(sae: SAE, tables: FeatureTablesConfig) -> SaeVisConfig:
    """sae-dashboard's run over every feature: the activation histogram (N_BINS), the top TOP_K and N_BANDS interval
    groups of examples, the logit table and histogram (it cannot run without them), and `tables`."""
    seq = SequencesConfig(buffer=None, n_quantiles=N_BANDS, top_acts_group_size=TOP_K, quantile_group_size=5)
    layout = SaeVisLayoutConfig(columns=[Column(tables), Column(ActsHistogramConfig(n_bins=N_BINS),
                                         LogitsTableConfig(), LogitsHistogramConfig()), Column(seq)])
    return SaeVisConfig(hook_point=HOOK, features=list(range(sae.cfg.d_sae)), minibatch_size_tokens=64,
                        feature_centric_layout=layout, device="cpu", seed=0)


def ours(tmp: Path) -> dict:
    python = os.environ.get("INTERPLAB_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    if not Path(python).exists():
        pytest.fail(f"no interplab environment at {python}: run scripts/setup.sh or set INTERPLAB_PYTHON")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = tmp / "interplab.pt"
    subprocess.run([python, str(Path(__file__).with_name("interplab_stats.py")), str(out), str(N_DOCS), str(LENGTH),
                    str(N_BANDS), str(TOP_K)], check=True, env=env, cwd=ROOT)
    return torch.load(out)


@dataclass
class Both:
    mine: dict  # interplab's statistics and activations (interplab_stats.py)
    data: object  # sae-dashboard's SaeVisData
    theirs: torch.Tensor  # sae-dashboard's activations, [N_DOCS, LENGTH, d_sae]
    gap: float  # the largest |sae-dashboard's activation - interplab's|


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> Both:
    mine = ours(tmp_path_factory.mktemp("stats"))
    sae = loaded_sae()
    model = tl_model()
    cfg = vis_config(sae, FeatureTablesConfig())
    data = SaeVisRunner(cfg).run(encoder=sae, model=model, tokens=mine["tokens"])
    generator = FeatureDataGeneratorFactory.create(cfg, model, sae, mine["tokens"])
    theirs = generator.get_feature_data(list(range(sae.cfg.d_sae)))[0]
    return Both(mine, data, theirs, float((theirs - mine["acts"]).abs().max()))


def test_same_tokens_and_activations(both):
    mine, theirs = both.mine, both.theirs
    assert mine["tokens"].shape == (N_DOCS, LENGTH) and mine["n_tokens"] == N_DOCS * LENGTH
    # sae-dashboard's own forward (TransformerLens) and SAE (SAELens) give interplab's activations, to float rounding
    assert theirs.shape == mine["acts"].shape
    assert torch.equal(theirs > 0, mine["acts"] > 0)  # the same tokens fire for every feature
    top = float(mine["acts"].max())
    print("\n" + json.dumps({"max_activation": top, "largest_activation_gap": both.gap, "relative": both.gap / top}))
    assert both.gap <= 1e-4 * top
    # and they are the activations SaeVisRunner ranked: its top example of every firing feature is its own max
    for f, fd in both.data.feature_data_dict.items():
        first = fd.sequence_data.seq_group_data[0].seq_data[0]
        assert float(theirs[first.original_index, first.qualifying_token_index, f]) == float(theirs[..., f].max())


def test_density_and_max(both):
    mine, data = both.mine, both.data
    fs = data.feature_stats
    density, mx = torch.tensor(fs.frac_nonzero, dtype=torch.float64), torch.tensor(fs.max)
    d_density = float((density - mine["density"].double()).abs().max())
    rel_max = float(((mx - mine["max"]).abs() / mine["max"].clamp(min=1e-6)).max())
    print("\n" + json.dumps({"features": len(density), "tokens": N_DOCS * LENGTH,
                             "max_abs_density_diff": d_density, "max_relative_max_diff": rel_max}))
    assert d_density <= 0.5 / (N_DOCS * LENGTH)  # the same firing count for every feature
    assert rel_max <= 1e-4


def linear_counts(values: torch.Tensor, n_bins: int) -> list[int]:
    """sae-dashboard's binning, written out: n_bins equal-width bins from the smallest to the largest value, the last
    bin closed."""
    lo, hi = float(values.min()), float(values.max())
    if hi == lo:
        return [len(values)] + [0] * (n_bins - 1)
    where = ((values.double() - lo) / (hi - lo) * n_bins).floor().long().clamp(0, n_bins - 1)
    return torch.bincount(where, minlength=n_bins).tolist()


def test_histograms(both):
    mine, data = both.mine, both.data
    acts = mine["acts"].flatten(0, 1)
    moved, worst, compared = 0, 0, 0
    for f, fd in data.feature_data_dict.items():
        firing = acts[:, f][acts[:, f] > 0]
        heights = fd.acts_histogram_data.bar_heights
        assert int(mine["hist_counts"][f].sum()) == len(firing)  # interplab's log histogram holds every firing
        if len(firing) == 0:
            assert heights == []
            continue
        assert sum(heights) == len(firing)
        diff = [abs(a - b) for a, b in zip(heights, linear_counts(firing, N_BINS))]
        moved += sum(diff) // 2
        worst = max(worst, max(diff))
        compared += 1
    print("\n" + json.dumps({"features_compared": compared, "firings_moved_across_an_edge": moved,
                             "max_bin_count_diff": worst}))
    assert worst <= 2 and moved <= 0.001 * int((acts > 0).sum())


def test_top_examples(both):
    """The same top activations: the corpus repeats documents and prefixes (its templates), so equal activations tie
    at different (document, position) pairs and either side may pick either; the activations shown must be equal, to
    the gap between the two sides' activations."""
    mine, data, theirs = both.mine, both.data, both.theirs
    differ = worst = 0
    for f, fd in data.feature_data_dict.items():
        picked = [(s.original_index, s.qualifying_token_index) for s in fd.sequence_data.seq_group_data[0].seq_data]
        picked = [p for p in picked if theirs[p[0], p[1], f] > 0]  # fewer firings than TOP_K: it shows zeros too
        rows = (mine["ex_feature"] == f) & (mine["ex_band"] == -1)
        assert len(picked) == int(rows.sum()) == min(TOP_K, int((theirs[..., f] > 0).sum()))
        if not picked:  # a feature that never fires here
            continue
        a = torch.tensor(sorted(float(theirs[d, p, f]) for d, p in picked))
        b = torch.tensor(sorted(mine["ex_act"][rows].tolist()))
        worst = max(worst, float((a - b).abs().max()))
        differ += set(picked) != set(zip(mine["ex_doc"][rows].tolist(), mine["ex_pos"][rows].tolist()))
    print("\n" + json.dumps({"features_compared": len(data.feature_data_dict), "largest_difference": worst,
                             "gap": both.gap, "of_them_picking_other_positions_among_ties": differ}))
    assert worst <= both.gap


def test_interval_groups(both):
    mine, data, theirs = both.mine, both.data, both.theirs
    acts = mine["acts"]
    shown = zero_shown = 0
    for f, fd in data.feature_data_dict.items():
        mx, their_mx = float(mine["max"][f]), float(theirs[..., f].max())
        groups = fd.sequence_data.seq_group_data[1:]
        if mx == 0:
            continue
        assert len(groups) == N_BANDS
        for g, group in enumerate(groups):
            band = N_BANDS - 1 - g  # sae-dashboard lists the highest interval first
            # sae-dashboard's interval, from its own activations: closed, and the lowest one holds the non-firing
            # tokens; it shows min(5, the tokens in it). (edge: float rounding of the interval's ends, not of the
            # activations, which are its own)
            lo, hi, edge = band * their_mx / N_BANDS, (band + 1) * their_mx / N_BANDS, 1e-6 * their_mx
            for s in group.seq_data:
                a = float(theirs[s.original_index, s.qualifying_token_index, f])
                assert lo - edge <= a <= hi + edge, (f, band, a, lo, hi)
                shown += 1
                zero_shown += a == 0
            values = theirs[..., f]
            inside = int(((values >= (lo + edge if band else 0)) & (values <= hi - edge)).sum())
            around = int(((values >= lo - edge) & (values <= hi + edge)).sum())
            assert min(5, inside) <= len(group.seq_data) <= min(5, around), (f, band)
            # interplab's band, from its own activations: the firings in (lo, hi]; it shows min(5, that many)
            lo, hi, tol = band * mx / N_BANDS, (band + 1) * mx / N_BANDS, 1e-4 * mx
            rows = (mine["ex_feature"] == f) & (mine["ex_band"] == band)
            for doc, pos, a in zip(mine["ex_doc"][rows].tolist(), mine["ex_pos"][rows].tolist(),
                                   mine["ex_act"][rows].tolist()):
                assert abs(a - float(acts[doc, pos, f])) <= tol
                assert lo - tol < a <= hi + tol and a > 0
            values = acts[..., f]
            n_firing = int(((values > (lo if band else 0)) & (values <= hi)).sum())
            assert int(rows.sum()) == min(5, n_firing)
    print("\n" + json.dumps({"interval_examples_shown_by_sae_dashboard": shown,
                             "of_them_where_the_feature_does_not_fire": zero_shown}))
    assert zero_shown > 0  # the definition that differs (module docstring): if sae-dashboard changes it, say so
