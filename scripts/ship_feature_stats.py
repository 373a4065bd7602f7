"""Writes the feature statistics shipped beside ioi-tiny-sae: every feature's density, histogram and examples over
the SAE's own training corpus (the documents and IOI prompts train_ioi_tiny_sae.py trains on), so the feature view
is complete offline from the first click: interplab/zoo/ioi_tiny_sae/feature_stats.safetensors.

    python scripts/ship_feature_stats.py
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import interplab as ilab  # noqa: E402
from interplab.analyses.feature_stats import SHIPPED, feature_stats  # noqa: E402
from interplab.sae import EMBEDDED_SAES  # noqa: E402
from interplab.zoo import corpus_repeated_name  # noqa: E402
from interplab.zoo.train_ioi_tiny_sae import corpus_texts  # noqa: E402


def training_corpus(docs: int = 12000, seed: int = 0) -> list[str]:
    """The SAE's training texts, as train_ioi_tiny_sae.py makes them with its defaults."""
    ioi = [d["clean"] + d["answer"] for d in corpus_repeated_name.ioi_dataset(2000, "train", seed=seed)]
    return corpus_texts(docs, seed) + ioi


def main() -> None:
    lab = ilab.Lab.load("ioi-tiny")
    sae = ilab.SAE.load("ioi-tiny-sae")
    stats = feature_stats(lab, training_corpus(), sae, cache=False)
    out = stats.save(EMBEDDED_SAES["ioi-tiny-sae"] / SHIPPED)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB): {stats.n_docs} documents, {stats.n_tokens} tokens")


if __name__ == "__main__":
    main()
