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
from sae_dashboard.components_config import FeatureTablesConfig  # noqa: E402
from sae_dashboard.sae_vis_runner import SaeVisRunner  # noqa: E402
from test_sae_dashboard_ref import loaded_sae, tl_model, vis_config  # noqa: E402


def main(tokens_file: str, repeats: str) -> None:
    torch.set_num_threads(1)
    tokens = torch.load(tokens_file)
    sae = loaded_sae()
    model = tl_model()
    # the work interplab's statistics do: the activation histogram and the top and interval examples (and the logit
    # table and histogram SaeVisRunner cannot run without: one small product); the smallest feature table it takes
    tables = FeatureTablesConfig(n_rows=1, neuron_alignment_table=False, correlated_neurons_table=False,
                                 correlated_features_table=False)
    cfg = vis_config(sae, tables)
    best = float("inf")
    for _ in range(int(repeats)):
        t = time.perf_counter()
        SaeVisRunner(cfg).run(encoder=sae, model=model, tokens=tokens)
        best = min(best, time.perf_counter() - t)
    print(json.dumps({"seconds": best, "tokens": int(tokens.numel())}))


if __name__ == "__main__":
    main(*sys.argv[1:])
