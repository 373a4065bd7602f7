"""sae-dashboard's side of benchmarks/bench_references.py: run in build/venv-saedash. It loads ioi-tiny (converted as
test_sae_dashboard_ref.py converts it) and ioi-tiny-sae, reads the token ids interplab's side chose, and times
SaeVisRunner.run over all 512 features on them (the model's and SAE's loading not counted), best of REPEATS, one
thread. Prints one JSON line: {"seconds": ..., "tokens": ...}.

    build/venv-saedash/bin/python tests/sae_dashboard_ref/timed_sae_dashboard.py TOKENS.pt REPEATS"""

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
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
from sae_dashboard.sae_vis_runner import SaeVisRunner  # noqa: E402
from sae_lens import SAE  # noqa: E402
from test_sae_dashboard_ref import HOOK, N_BANDS, N_BINS, SAE_FOLDER, TOP_K, tl_model  # noqa: E402


def main(tokens_file: str, repeats: str) -> None:
    torch.set_num_threads(1)
    tokens = torch.load(tokens_file)
    sae = SAE.load_from_disk(str(SAE_FOLDER), device="cpu")
    assert (sae.W_dec.norm(dim=1) - 1).abs().max() <= 1e-5  # folding the decoder norms is the identity (see the test)
    sae.fold_W_dec_norm = lambda: None
    model = tl_model()
    # the work interplab's statistics do: the activation histogram and the top and interval examples. SaeVisRunner
    # cannot run without a feature table (the smallest, its correlation tables off) and the logit table and
    # histogram (one product of the decoder with the unembedding: small beside the scan)
    seq = SequencesConfig(buffer=None, n_quantiles=N_BANDS, top_acts_group_size=TOP_K, quantile_group_size=5)
    tables = FeatureTablesConfig(n_rows=1, neuron_alignment_table=False, correlated_neurons_table=False,
                                 correlated_features_table=False)
    layout = SaeVisLayoutConfig(columns=[Column(tables), Column(ActsHistogramConfig(n_bins=N_BINS), LogitsTableConfig(),
                                                                 LogitsHistogramConfig()), Column(seq)])
    cfg = SaeVisConfig(hook_point=HOOK, features=list(range(sae.cfg.d_sae)), minibatch_size_tokens=64,
                       feature_centric_layout=layout, device="cpu", seed=0)
    best = float("inf")
    for _ in range(int(repeats)):
        t = time.perf_counter()
        SaeVisRunner(cfg).run(encoder=sae, model=model, tokens=tokens)
        best = min(best, time.perf_counter() - t)
    print(json.dumps({"seconds": best, "tokens": int(tokens.numel())}))


if __name__ == "__main__":
    main(*sys.argv[1:])
