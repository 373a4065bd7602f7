"""interplab's side of the circuit-tracer reference: run in the MAIN environment (.venv, where interplab and its
transformers live), it computes ilab.analyses.graph.attribution_graph of one prompt over transcoder sets and writes
what the reference compares to .pt files. tests/circuit_tracer_ref/test_circuit_tracer_ref.py runs it as a
subprocess (once: loading interplab is most of its time).

    python tests/circuit_tracer_ref/interplab_graph.py PROMPT OUT_DIR NAME=TRANSCODERS ...   -> OUT_DIR/NAME.pt
TRANSCODERS: a folder of SAELens transcoder folders (layer_0, ...), 'ioi-tiny-transcoders', circuit-tracer's
config.yaml of a transcoder set, or a folder of circuit-tracer's cross-layer transcoder files (W_enc_0.safetensors,
...)."""

import sys
from pathlib import Path

import torch

import interplab as ilab

LOOSE = (0.95, 0.99)  # a second pruning, keeping more nodes than circuit-tracer's defaults (0.8, 0.98)


def main(prompt: str, out_dir: str, *jobs: str) -> None:
    lab = ilab.Lab.load("ioi-tiny")
    for job in jobs:
        name, transcoders = job.split("=", 1)
        write(lab, prompt, transcoders, f"{out_dir}/{name}.pt")


def write(lab, prompt: str, transcoders: str, out: str) -> None:
    clt = (Path(transcoders) / "W_enc_0.safetensors").exists()
    tcs = ilab.CrossLayerTranscoder.load(transcoders) if clt else ilab.Transcoders.load(transcoders)
    g = ilab.analyses.graph.attribution_graph(lab, prompt, tcs, progress=False)
    node_mask, edge_mask = g.prune()
    loose_nodes, loose_edges = g.prune(*LOOSE)
    torch.save({"input_ids": lab.tokenizer(prompt, return_tensors="pt").input_ids[0], "tokens": g.tokens,
                "features": g.features, "activations": g.activations, "adjacency": g.adjacency,
                "logit_ids": torch.tensor(g.logit_ids), "logit_probs": g.logit_probs,
                "node_mask": node_mask, "edge_mask": edge_mask, "loose_node_mask": loose_nodes,
                "loose_edge_mask": loose_edges, "scores": torch.tensor(g.scores()),
                "n_layers": g.n_layers, "source": transcoders}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
