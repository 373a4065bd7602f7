"""circuit-tracer's side of benchmarks/bench_references.py: run in build/venv-saelens. It loads ioi-tiny as
circuit-tracer's TransformerLens replacement model with the shipped transcoders (as test_circuit_tracer_ref.py does)
and times circuit_tracer.attribute on the IOI prompt (the model's loading not counted), best of REPEATS, one thread.
Prints one JSON line: {"seconds": ..., "features": ...}.

    build/venv-saelens/bin/python tests/circuit_tracer_ref/timed_circuit_tracer.py REPEATS"""

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_circuit_tracer_ref import (  # noqa: E402
    MODEL,
    PROMPT,
    SHIPPED,
    circuit_tracer_model,
    circuit_tracer_transcoders,
    read_saelens,
    theirs,
)
from transformers import AutoTokenizer  # noqa: E402


def main(repeats: str) -> None:
    torch.set_num_threads(1)
    params, k = read_saelens(SHIPPED)
    with tempfile.TemporaryDirectory() as tmp:
        _, model = circuit_tracer_model(circuit_tracer_transcoders(params, k, Path(tmp) / "transcoders"))
    ids = torch.tensor(AutoTokenizer.from_pretrained(MODEL)(PROMPT)["input_ids"])
    best, graph = float("inf"), None
    for _ in range(int(repeats)):
        t = time.perf_counter()
        graph = theirs(model, ids)
        best = min(best, time.perf_counter() - t)
    print(json.dumps({"seconds": best, "features": int(len(graph.active_features))}))


if __name__ == "__main__":
    main(*sys.argv[1:])
