"""interplab's side of the sae-dashboard reference: run in the MAIN environment (.venv, where interplab and its
transformers live). It picks the corpus (documents of ioi-tiny's SAE training corpus that tokenize to exactly LENGTH
tokens, so that sae-dashboard's [batch, seq] token tensor holds them with no padding), computes
ilab.analyses.feature_stats.feature_stats over them with ioi-tiny-sae, and writes to one .pt file: the token ids it
used (sae-dashboard is given these same ids), the statistics, and every feature's activation at every token read by
a hook on the model's own block (its input, blocks.2.hook_resid_pre) and SAE.encode, for rebinning.

    python tests/sae_dashboard_ref/interplab_stats.py OUT.pt N_DOCS LENGTH N_BANDS TOP_K"""

import sys

import torch

import interplab as ilab
from interplab.analyses.feature_stats import feature_stats
from interplab.zoo.train_ioi_tiny_sae import corpus_texts


def main(out: str, n_docs: str, length: str, n_bands: str, top_k: str) -> None:
    n_docs, length, n_bands, top_k = int(n_docs), int(length), int(n_bands), int(top_k)
    lab = ilab.Lab.load("ioi-tiny")
    sae = ilab.SAE.load("ioi-tiny-sae")
    docs = [d for d in corpus_texts(40 * n_docs, 1) if len(lab.tokenizer(d)["input_ids"]) == length][:n_docs]
    assert len(docs) == n_docs, f"only {len(docs)} documents of {length} tokens"
    stats = feature_stats(lab, docs, sae, top_k=top_k, n_bands=n_bands, per_band=5, cache=False, progress=False)
    tokens = torch.tensor([lab.tokenizer(d)["input_ids"] for d in docs])
    seen = []
    block = lab.model.transformer.h[2]  # blocks.2.hook_resid_pre is this block's input
    handle = block.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            for i in range(0, n_docs, 64):
                lab.model(tokens[i:i + 64])
            acts = sae.encode(torch.cat(seen).float())  # [n_docs, length, d_sae]
    finally:
        handle.remove()
    torch.save({"tokens": tokens, "acts": acts, "n_tokens": stats.n_tokens,
                **{n: getattr(stats, n) for n in stats.TENSORS}}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
