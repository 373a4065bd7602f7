"""Train the transcoders shipped with ioi-tiny (``ioi-tiny-transcoders``, one per layer) and write their card.

    python -m interplab.zoo.train_ioi_tiny_transcoders            # writes interplab/zoo/ioi_tiny_transcoders/
    python -m interplab.zoo.train_ioi_tiny_transcoders --card     # recompute the card.json and print it
    python -m interplab.zoo.train_ioi_tiny_transcoders --steps 20 --out /tmp/tc   # smoke test

A transcoder reads an MLP's input (the block's second LayerNorm's output, interplab's site ``mlp_in``) and predicts
that MLP's output (``mlp_out``): SAELens's "transcoder" arithmetic with a TopK activation, no input centring:
    f = relu of the k largest of (x @ W_enc + b_enc), 0 elsewhere;    out = f @ W_dec + b_dec
Training data: the MLP's input and output at every token of ioi-tiny's own corpus (the documents the SAE trains
on, corpus_repeated_name.training_document) plus IOI prompts of the train split. Loss: output MSE over the output's
variance plus AuxK for features that have not fired for a while; decoder rows kept at unit norm. Each layer is a
SAELens-format folder (cfg.json + sae_weights.safetensors) under the output folder: ``layer_0`` ... ``layer_3``.

The card (card.json) is measured with plain PyTorch hooks on the transformers model, none of interplab's code
(tests/features/test_shipped_transcoders.py recomputes it through interplab): on held-out documents, per layer the
fraction of the MLP output's variance explained, mean L0 and share of dead features; and the next-token loss
recovered with all four MLPs replaced by their transcoders at once, against all four zero-ablated.

Determinism: one CPU thread, seeded generators (as train_ioi_tiny_sae.py says).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from interplab.zoo import corpus_repeated_name
from interplab.zoo.train_ioi_tiny_sae import _batches, _model, corpus_texts

DEFAULT_OUT = Path(__file__).parent / "ioi_tiny_transcoders"


def mlp_io(model, tok, texts):
    """{layer: ([tokens, d_model] MLP input, [tokens, d_model] MLP output)} at every real token."""
    import torch

    blocks = model.transformer.h
    got = {layer: ([], []) for layer in range(len(blocks))}
    mask_now = {}

    def keep(layer):
        def hook(module, args, out):
            m = mask_now["m"]
            got[layer][0].append(args[0][m].clone())
            got[layer][1].append(out[m].clone())
        return hook

    handles = [b.mlp.register_forward_hook(keep(i)) for i, b in enumerate(blocks)]
    try:
        with torch.no_grad():
            for ids, mask in _batches(tok, texts):
                mask_now["m"] = mask.bool()
                model(input_ids=ids, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()
    return {layer: (torch.cat(x), torch.cat(y)) for layer, (x, y) in got.items()}


def encode(p, x, k):
    import torch

    pre = x @ p["W_enc"] + p["b_enc"]
    v, i = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, i, v.relu()), pre


def decode(p, f):
    return f @ p["W_dec"] + p["b_dec"]


def train(x_all, y_all, d_tc: int, k: int, steps: int, seed: int, batch: int = 1024, lr: float = 2e-3,
          aux_k: int = 64, dead_after: int = 50_000, resample_every: int = 250):
    import torch

    g = torch.Generator().manual_seed(seed)
    d_in, d_out = x_all.shape[1], y_all.shape[1]
    W_dec = torch.randn(d_tc, d_out, generator=g)
    W_dec /= W_dec.norm(dim=-1, keepdim=True)
    W_enc = torch.randn(d_in, d_tc, generator=g) / d_in ** 0.5
    p = {"W_enc": W_enc, "b_enc": torch.zeros(d_tc), "W_dec": W_dec, "b_dec": y_all.mean(0).clone()}
    for t in p.values():
        t.requires_grad_(True)
    opt = torch.optim.Adam(p.values(), lr=lr)
    since = torch.zeros(d_tc)
    var = (y_all - y_all.mean(0)).pow(2).sum(-1).mean()
    for step in range(steps):
        rows = torch.randint(0, len(x_all), (batch,), generator=g)
        x, y = x_all[rows], y_all[rows]
        f, pre = encode(p, x, k)
        err = y - decode(p, f)
        loss = err.pow(2).sum(-1).mean() / var
        since += batch
        since[(f > 0).any(0)] = 0
        dead = since > dead_after
        if dead.any():  # AuxK (Gao et al. 2024): dead features' own top-k predict what the live ones missed
            v, i = pre.masked_fill(~dead, float("-inf")).topk(min(aux_k, int(dead.sum())), dim=-1)
            f_aux = torch.zeros_like(pre).scatter(-1, i, v.relu())
            loss = loss + (err.detach() - f_aux @ p["W_dec"]).pow(2).sum(-1).mean() / var / 32
        opt.zero_grad()
        loss.backward()
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, 5 * (steps - step) / steps)  # the last fifth decays to 0
        opt.step()
        with torch.no_grad():
            if step % resample_every == resample_every - 1 and step < 0.7 * steps and dead.any():
                # resample dead features onto the inputs predicted worst (Bricken et al. 2023): each reads one
                # such input's direction and writes its error's
                worst = err.detach().pow(2).sum(-1).topk(int(dead.sum())).indices
                xs, es = x[worst], err.detach()[worst]
                live_norm = p["W_enc"][:, ~dead].norm(dim=0).mean() if (~dead).any() else 1.0
                p["W_enc"][:, dead] = (xs / xs.norm(dim=-1, keepdim=True)).T * live_norm
                p["b_enc"][dead] = 0
                p["W_dec"][dead] = es / es.norm(dim=-1, keepdim=True)
                since[dead] = 0
                for t, part in ((p["W_enc"], (slice(None), dead)), (p["b_enc"], dead), (p["W_dec"], dead)):
                    state = opt.state.get(t)  # a fresh start for the resampled features' Adam moments only
                    if state:
                        state["exp_avg"][part] = 0
                        state["exp_avg_sq"][part] = 0
            p["W_dec"] /= p["W_dec"].norm(dim=-1, keepdim=True)
        if step % 500 == 0 or step == steps - 1:
            print(f"  step {step:5d}  normalised mse {float(err.detach().pow(2).sum(-1).mean() / var):.4f}  "
                  f"dead {int(dead.sum())}", flush=True)
    return {n: t.detach().clone() for n, t in p.items()}


def save(p, k: int, layer: int, out: Path) -> None:
    from safetensors.torch import save_file

    folder = out / f"layer_{layer}"
    folder.mkdir(parents=True, exist_ok=True)
    save_file({n: t.contiguous() for n, t in p.items()}, folder / "sae_weights.safetensors")
    d_tc, d_out = p["W_dec"].shape
    cfg = {"architecture": "transcoder", "activation": "topk", "d_in": int(p["W_enc"].shape[0]), "d_sae": int(d_tc),
           "d_out": int(d_out), "k": k, "dtype": "float32", "device": "cpu", "apply_b_dec_to_input": False,
           "normalize_activations": "none",
           "metadata": {"model_name": "ioi-tiny", "hook_name": f"blocks.{layer}.ln2.hook_normalized",
                        "hook_name_out": f"blocks.{layer}.hook_mlp_out", "hook_head_index": None,
                        "prepend_bos": False, "context_size": 128,
                        "dataset_path": "interplab.zoo.corpus_repeated_name"}}
    (folder / "cfg.json").write_text(json.dumps(cfg, indent=2) + "\n")


def load(out: Path):
    from safetensors.torch import load_file

    layers = sorted(int(d.name.split("_")[1]) for d in out.glob("layer_*"))
    return {layer: (load_file(out / f"layer_{layer}" / "sae_weights.safetensors"),
                    json.loads((out / f"layer_{layer}" / "cfg.json").read_text())["k"]) for layer in layers}


def _ce(model, tok, texts, replace=None) -> float:
    """Mean next-token cross-entropy over the documents' real tokens, each MLP's output replaced by
    replace(layer, mlp_input) where given."""
    import torch

    handles = []
    if replace is not None:
        for layer, block in enumerate(model.transformer.h):
            handles.append(block.mlp.register_forward_hook(
                lambda m, args, out, layer=layer: replace(layer, args[0])))
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for ids, mask in _batches(tok, texts):
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
                keep = mask[:, 1:].bool()
                loss = torch.nn.functional.cross_entropy(logits[keep], ids[:, 1:][keep], reduction="sum")
                total, count = total + float(loss), count + int(keep.sum())
    finally:
        for h in handles:
            h.remove()
    return total / count


def card(out: Path = DEFAULT_OUT, n_docs: int = 400) -> dict:
    """The transcoders' card on held-out documents (seed 1; training used seed 0), by plain hooks."""
    import torch

    torch.manual_seed(0)
    model, tok = _model()
    tcs = load(out)
    texts = corpus_texts(n_docs, seed=1)
    io = mlp_io(model, tok, texts)
    layers = {}
    for layer, (p, k) in tcs.items():
        x, y = io[layer]
        with torch.no_grad():
            f, _ = encode(p, x, k)
            resid = y - decode(p, f)
        fve = 1 - float(resid.pow(2).sum() / (y - y.mean(0)).pow(2).sum())
        layers[str(layer)] = {"fraction of variance explained": round(fve, 4),
                              "mean L0": round(float((f > 0).sum(-1).float().mean()), 2),
                              "dead share": round(float(((f > 0).sum(0) == 0).float().mean()), 4)}
    clean = _ce(model, tok, texts)
    zero = _ce(model, tok, texts, lambda layer, x: torch.zeros(*x.shape[:-1], model.config.n_embd))
    spliced = _ce(model, tok, texts, lambda layer, x: decode(tcs[layer][0], encode(tcs[layer][0], x,
                                                                                    tcs[layer][1])[0]))
    return {"held-out documents": n_docs, "layers": layers,
            "loss": {"clean": round(clean, 4), "all MLPs zero-ablated": round(zero, 4),
                     "all four transcoders spliced": round(spliced, 4),
                     "loss recovered": round((zero - spliced) / (zero - clean), 4)}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--card", action="store_true", help="recompute --out's card.json and print it (no training)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--d-tc", type=int, default=512)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--docs", type=int, default=4000, help="training documents of ioi-tiny's corpus")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if not args.card:
        t0 = time.time()
        torch.manual_seed(args.seed)
        model, tok = _model()
        ioi = [d["clean"] + d["answer"] for d in corpus_repeated_name.ioi_dataset(1000, "train", seed=args.seed)]
        io = mlp_io(model, tok, corpus_texts(args.docs, args.seed) + ioi)
        for layer, (x, y) in io.items():
            print(f"layer {layer}: {len(x)} tokens", flush=True)
            save(train(x, y, args.d_tc, args.k, args.steps, args.seed + layer), args.k, layer, args.out)
        info = {"steps": args.steps, "d_tc": args.d_tc, "k": args.k, "docs": args.docs, "seed": args.seed,
                "tokens": len(io[0][0]), "torch": torch.__version__, "threads": 1,
                "batch": 1024, "seconds": round(time.time() - t0, 1)}
        (args.out / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
    c = card(args.out)
    (args.out / "card.json").write_text(json.dumps(c, indent=2) + "\n")
    print(json.dumps(c, indent=2))


if __name__ == "__main__":
    main()
