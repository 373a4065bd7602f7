"""Train the SAE shipped with ioi-tiny (``ioi-tiny-sae``) and write its card: CPU, fixed seeds, a minute or two.

    python -m interplab.zoo.train_ioi_tiny_sae              # writes interplab/zoo/ioi_tiny_sae/ (the shipped SAE)
    python -m interplab.zoo.train_ioi_tiny_sae --card       # recompute the shipped SAE's card.json and print it
    python -m interplab.zoo.train_ioi_tiny_sae --steps 20 --out /tmp/sae   # smoke test

A TopK SAE (SAELens's "topk" architecture: the k largest pre-activations, ReLU'd) with 512 features on
``blocks.2.hook_resid_pre`` of ioi-tiny (interplab's resid_pre at layer 2: the residual stream after layers 0 and 1,
inside the IOI circuit, where the S2 token's state is read by the layer-2 heads). Training data: the residual at
every token of documents of ioi-tiny's own training corpus (corpus_repeated_name.training_document) plus IOI prompts
of the train split. Loss: reconstruction MSE plus AuxK (Gao et al. 2024: features that have not fired for a while
reconstruct the residual error with their own top-k), decoder rows kept at unit norm. Saved in SAELens's format
(cfg.json + sae_weights.safetensors).

The card (card.json, printed by --card) is measured here with plain PyTorch hooks on the transformers model, none of
interplab's own code (tests/features/test_shipped_sae.py recomputes it through interplab's Lab): on held-out
documents, the fraction of variance explained, the cross-entropy loss recovered when the site is replaced by the
reconstruction (against zero-ablating it), the mean L0 and the share of dead features; and the evidence for one
IOI feature: where it fires, and what ablating or steering it at S2 does to the logit difference IO - S.

Determinism: one CPU thread, seeded generators; the same torch version and CPU give the same bytes (as
train_ioi_tiny.py says, another instruction set may change float sums).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from interplab.zoo import EMBEDDED, corpus_repeated_name

DEFAULT_OUT = Path(__file__).parent / "ioi_tiny_sae"
LAYER = 2
HOOK = f"blocks.{LAYER}.hook_resid_pre"


def corpus_texts(n: int, seed: int) -> list[str]:
    """n documents of ioi-tiny's training corpus (IOI prompts with their answer, narratives, roll calls, ...)."""
    rng = random.Random(f"sae-{seed}")
    return ["".join(corpus_repeated_name.training_document(rng, 0.85)) for _ in range(n)]


def _model():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(EMBEDDED["ioi-tiny"], attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(EMBEDDED["ioi-tiny"])


def _batches(tok, texts, size=128):
    import torch

    for i in range(0, len(texts), size):
        rows = [tok(t)["input_ids"][:128] for t in texts[i:i + size]]
        n = max(map(len, rows))
        ids = torch.full((len(rows), n), tok.pad_token_id)
        mask = torch.zeros((len(rows), n), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, :len(row)], mask[r, :len(row)] = torch.tensor(row), 1
        yield ids, mask


def activations(model, tok, texts):
    """[tokens, d_model]: the residual entering block LAYER at every real token (hidden_states[LAYER])."""
    import torch

    out = []
    with torch.no_grad():
        for ids, mask in _batches(tok, texts):
            h = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[LAYER]
            out.append(h[mask.bool()])
    return torch.cat(out)


# ---- the SAE, as SAELens's topk architecture computes it ------------------------------------------------------
def encode(p, x, k):
    import torch

    pre = (x - p["b_dec"]) @ p["W_enc"] + p["b_enc"]
    v, i = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, i, v.relu()), pre


def decode(p, f):
    return f @ p["W_dec"] + p["b_dec"]


def train(acts, d_sae: int, k: int, steps: int, seed: int, batch: int = 4096, lr: float = 2e-3,
          aux_k: int = 64, dead_after: int = 50_000):
    import torch

    g = torch.Generator().manual_seed(seed)
    d = acts.shape[1]
    W_dec = torch.randn(d_sae, d, generator=g)
    W_dec /= W_dec.norm(dim=-1, keepdim=True)
    p = {"W_enc": W_dec.T.clone().contiguous(), "b_enc": torch.zeros(d_sae), "W_dec": W_dec,
         "b_dec": acts.mean(0).clone()}
    for t in p.values():
        t.requires_grad_(True)
    opt = torch.optim.Adam(p.values(), lr=lr, betas=(0.9, 0.999))
    since = torch.zeros(d_sae)  # tokens since each feature last fired
    var = (acts - acts.mean(0)).pow(2).sum(-1).mean()
    for step in range(steps):
        x = acts[torch.randint(0, len(acts), (batch,), generator=g)]
        f, pre = encode(p, x, k)
        recon = decode(p, f)
        err = x - recon
        loss = err.pow(2).sum(-1).mean() / var
        since += batch
        since[(f > 0).any(0)] = 0
        dead = since > dead_after
        if dead.any():  # AuxK: the dead features' own top-k reconstruct what the live ones missed
            pre_dead = pre.masked_fill(~dead, float("-inf"))
            kk = min(aux_k, int(dead.sum()))
            v, i = pre_dead.topk(kk, dim=-1)
            f_aux = torch.zeros_like(pre).scatter(-1, i, v.relu())
            loss = loss + (err.detach() - f_aux @ p["W_dec"]).pow(2).sum(-1).mean() / var / 32
        opt.zero_grad()
        loss.backward()
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, 5 * (steps - step) / steps)  # the last fifth decays to 0
        opt.step()
        with torch.no_grad():
            p["W_dec"] /= p["W_dec"].norm(dim=-1, keepdim=True)
        if step % 500 == 0 or step == steps - 1:
            print(f"step {step:5d}  normalised mse {float(err.detach().pow(2).sum(-1).mean() / var):.4f}  dead "
                  f"{int(dead.sum())}", flush=True)
    return {n: t.detach().clone() for n, t in p.items()}


def save(p, k: int, out: Path, info: dict) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({n: t.contiguous() for n, t in p.items()}, out / "sae_weights.safetensors")
    d_sae, d_in = p["W_dec"].shape
    cfg = {"architecture": "topk", "d_in": int(d_in), "d_sae": int(d_sae), "k": k, "dtype": "float32",
           "device": "cpu", "apply_b_dec_to_input": True, "normalize_activations": "none",
           "reshape_activations": "none", "rescale_acts_by_decoder_norm": False,
           "metadata": {"model_name": "ioi-tiny", "hook_name": HOOK, "hook_head_index": None,
                        "sae_lens_version": "6.0.0", "prepend_bos": False, "context_size": 128,
                        "dataset_path": "interplab.zoo.corpus_repeated_name"}}
    (out / "cfg.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")


def load(folder: Path):
    from safetensors.torch import load_file

    cfg = json.loads((folder / "cfg.json").read_text())
    return load_file(folder / "sae_weights.safetensors"), cfg["k"]


# ---- the card: plain hooks on the transformers model ----------------------------------------------------------
def _with_site(model, fn):
    """A forward pre-hook on block LAYER replacing its input (the residual) by fn(input); returns the handle."""
    block = model.transformer.h[LAYER]

    def pre(module, args, kwargs):
        if args:
            return (fn(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": fn(kwargs["hidden_states"])}
    return block.register_forward_pre_hook(pre, with_kwargs=True)


def _ce(model, tok, texts, fn=None) -> float:
    """Mean next-token cross-entropy over the documents' real tokens, with the site replaced by fn(x) if given."""
    import torch

    total, count = 0.0, 0
    handle = _with_site(model, fn) if fn is not None else None
    try:
        with torch.no_grad():
            for ids, mask in _batches(tok, texts):
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
                keep = mask[:, 1:].bool()
                loss = torch.nn.functional.cross_entropy(logits[keep], ids[:, 1:][keep], reduction="sum")
                total, count = total + float(loss), count + int(keep.sum())
    finally:
        if handle is not None:
            handle.remove()
    return total / count


def _logit_diffs(model, tok, pairs, fn=None):
    """[n] logit(IO) - logit(S) at the last token of each clean prompt (all of equal length), site replaced by fn."""
    import torch

    ids = torch.tensor([tok(p["clean"])["input_ids"] for p in pairs])
    io = torch.tensor([tok(p["answer"])["input_ids"][0] for p in pairs])
    s = torch.tensor([tok(p["wrong"])["input_ids"][0] for p in pairs])
    handle = _with_site(model, fn) if fn is not None else None
    try:
        with torch.no_grad():
            last = model(input_ids=ids).logits[:, -1]
    finally:
        if handle is not None:
            handle.remove()
    rows = torch.arange(len(pairs))
    return last[rows, io] - last[rows, s]


def _s2_position(tok, pair) -> int:
    """The position of S2: the first token where the clean and corrupt prompts differ."""
    a, b = tok(pair["clean"])["input_ids"], tok(pair["corrupt"])["input_ids"]
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)


def card(folder: Path = DEFAULT_OUT, n_docs: int = 400, n_pairs: int = 200) -> dict:
    import torch

    torch.manual_seed(0)
    model, tok = _model()
    p, k = load(folder)
    texts = corpus_texts(n_docs, seed=1)  # seed 1: documents the SAE was not trained on (training used seed 0)
    x = activations(model, tok, texts)
    f, _ = encode(p, x, k)
    recon = decode(p, f)
    fve = 1 - float((x - recon).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
    l0 = float((f > 0).sum(-1).float().mean())
    fired = (f > 0).any(0)
    ce_clean = _ce(model, tok, texts)
    ce_spliced = _ce(model, tok, texts, lambda h: decode(p, encode(p, h, k)[0]))
    ce_zero = _ce(model, tok, texts, torch.zeros_like)
    recovered = (ce_zero - ce_spliced) / (ce_zero - ce_clean)

    # the IOI feature: of the features active at S2, the one whose ablation there (feature set to 0, the error
    # term kept) lowers the logit difference most; pairs of one template so that S2 sits at one position
    data = corpus_repeated_name.ioi_dataset(4000, "test", seed=0)
    keys = [(len(tok(d["clean"])["input_ids"]), _s2_position(tok, d)) for d in data]
    common, s2 = max(set(keys), key=keys.count)  # the commonest (length, S2 position)
    pairs = [d for d, key in zip(data, keys) if key == (common, s2)][:n_pairs]
    base = _logit_diffs(model, tok, pairs)
    clean_x = activations(model, tok, [d["clean"] for d in pairs]).view(len(pairs), common, -1)
    fa, _ = encode(p, clean_x, k)
    candidates = ((fa[:, s2] > 0).float().mean(0) > 0.5).nonzero().flatten().tolist()

    def ablate(feature, pos, alpha=None):
        def fn(h):
            h = h.clone()
            fh = encode(p, h[:, pos], k)[0]
            change = -fh[:, feature:feature + 1] if alpha is None else alpha
            h[:, pos] = h[:, pos] + change * p["W_dec"][feature]
            return h
        return fn

    drops = {i: float((base - _logit_diffs(model, tok, pairs, ablate(i, s2))).mean()) for i in candidates}
    feature = max(drops, key=drops.get)
    acts = fa[..., feature]  # [pairs, pos]
    where = {"mean at S2": float(acts[:, s2].mean()), "share of pairs firing at S2": float((acts[:, s2] > 0).float()
                                                                                              .mean()),
             "mean at other positions": float(torch.cat([acts[:, :s2], acts[:, s2 + 1:]], 1).mean()),
             "share of other positions firing": float((torch.cat([acts[:, :s2], acts[:, s2 + 1:]], 1) > 0).float()
                                                      .mean())}
    tokens = tok.convert_ids_to_tokens(tok(pairs[0]["clean"])["input_ids"])
    steer = float(-2 * acts[:, s2].mean())  # pushing the feature to minus its own mean activation at S2
    steered = _logit_diffs(model, tok, pairs, ablate(feature, s2, alpha=steer))
    return {
        "hook_name": HOOK, "d_sae": int(p["W_dec"].shape[0]), "k": k, "documents": n_docs, "tokens": int(len(x)),
        "fraction_of_variance_explained": round(fve, 4), "mean_l0": round(l0, 2),
        "dead_features_share": round(1 - float(fired.float().mean()), 4),
        "ce_loss": {"clean": round(ce_clean, 4), "spliced": round(ce_spliced, 4), "zero_ablated": round(ce_zero, 4)},
        "ce_loss_recovered": round(recovered, 4),
        "ioi_feature": {
            "feature": feature, "pairs": len(pairs), "s2_position": s2, "example": pairs[0]["clean"],
            "s2_token": tokens[s2], "where_it_fires": {k_: round(v, 4) for k_, v in where.items()},
            "logit_diff_clean": round(float(base.mean()), 4),
            "logit_diff_feature_ablated_at_s2": round(float(base.mean()) - drops[feature], 4),
            "steer_alpha_at_s2": round(steer, 4),
            "logit_diff_steered_at_s2": round(float(steered.mean()), 4),
            "ablation_drop_of_runner_up": round(sorted(drops.values())[-2], 4) if len(drops) > 1 else None,
        },
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--card", action="store_true", help="recompute --out's card.json and print it (no training)")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--d-sae", type=int, default=512)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--docs", type=int, default=12000, help="training documents of ioi-tiny's corpus")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # one thread: the float sums, so the bytes, do not depend on the core count
    if args.card:
        result = card(args.out)
        (args.out / "card.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        return
    t0 = time.time()
    model, tok = _model()
    torch.manual_seed(args.seed)
    ioi = [d["clean"] + d["answer"] for d in corpus_repeated_name.ioi_dataset(2000, "train", seed=args.seed)]
    acts = activations(model, tok, corpus_texts(args.docs, args.seed) + ioi)
    print(f"{len(acts)} activations of {HOOK} in {time.time() - t0:.0f} s", flush=True)
    p = train(acts, args.d_sae, args.k, args.steps, args.seed)
    info = {"steps": args.steps, "d_sae": args.d_sae, "k": args.k, "docs": args.docs, "seed": args.seed,
            "tokens": int(len(acts)), "torch": torch.__version__, "threads": 1,
            "seconds": round(time.time() - t0, 1)}
    save(p, args.k, args.out, info)
    result = card(args.out)
    (args.out / "card.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"saved {args.out} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
