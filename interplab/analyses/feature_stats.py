"""Feature statistics over a corpus: what a feature's page shows (Neuronpedia's and sae-dashboard's meanings).

    from interplab.analyses.feature_stats import feature_stats
    stats = feature_stats(lab, corpus, sae)     # every feature of an SAE (or a Transcoder), one pass
    stats.density[321], stats.mean[321], stats.max[321]   # share of tokens it fires on; mean when firing; max
    stats.feature(321)        # its page: density, histogram, top examples and examples at each activation band
    stats.dense(0.1)          # features firing on more than 10% of tokens
    ilab.FeatureStats.load(path, lab, sae)                # a saved one, refused if made for another SAE or model

One forward pass over the corpus in batches; the active (feature, token, activation) triples are kept (sparse: an
SAE of L0 16 keeps 16 per token), within a memory budget, and every statistic is computed from them:
- density: firing tokens / all tokens; mean (over firing tokens) and max activation.
- histogram: the firing activations in `n_bins` bins equally spaced in log10(activation), from max / 10^3 to
  max (smaller values fall in the first bin), as a feature page's activation histogram draws them.
- examples: the `top_k` highest activations, then `n_bands` equal-width activation intervals of (0, max] (sae-
  dashboard's interval groups), up to `per_band` examples drawn at random (seeded) from each; each example is a
  window of `context` tokens either side of its token.
Cached on disk under a key made of the SAE's weights, the model's identity, the corpus and the settings, so the
second call reads the file (~/.cache/interplab/feature_stats, or INTERPLAB_CACHE).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..engine import Engine, engine_of
from ..errors import EmptyPromptError, InterplabError, LoadError, OutOfRangeError
from ..sae import EMBEDDED_SAES, SAE
from ..transcoders import Transcoder

SETTINGS = ("top_k", "n_bands", "per_band", "n_bins", "context", "seed")
LOG_RANGE = 3.0  # the histogram spans max / 10^LOG_RANGE .. max
FORMAT = 3  # of the saved file; part of the cache key, so a file of another format is never read
TOP_TOKENS = 8  # per feature, the tokens it fires on most (feature search by token)
DENSE = 0.1  # a feature firing on more than this share of the corpus's tokens is dense (the views mark it)


@dataclass
class FeatureStats:
    """Statistics of every feature of one SAE or transcoder over one corpus."""

    n_docs: int
    n_tokens: int
    density: torch.Tensor  # [d] share of tokens where the feature fires
    mean: torch.Tensor  # [d] mean activation where it fires (0 where it never does)
    max: torch.Tensor  # [d]
    hist_edges: torch.Tensor  # [d, n_bins + 1] the bin edges as log10(activation), equally spaced
    hist_counts: torch.Tensor  # [d, n_bins] firing tokens per bin
    ex_feature: torch.Tensor  # [n_ex] the examples, grouped by feature
    ex_band: torch.Tensor  # [n_ex] -1 for a top example, else its interval 0..n_bands-1 (0: the weakest)
    ex_doc: torch.Tensor  # [n_ex]
    ex_pos: torch.Tensor  # [n_ex]
    ex_act: torch.Tensor  # [n_ex]
    ex_context: torch.Tensor  # [n_ex, 2 * context + 1] token ids, -1 beyond the document
    top_tokens: torch.Tensor  # [d, TOP_TOKENS] the tokens each feature fires on most (activation summed), -1: none
    top_token_mass: torch.Tensor  # [d, TOP_TOKENS] that sum, over the corpus
    key: dict  # what it was made from: dictionary, model, corpus digests and the settings
    tokenizer: object = field(default=None, repr=False)

    @property
    def d(self) -> int:
        return len(self.density)

    def dense(self, threshold: float = DENSE) -> list[int]:
        """Features that fire on more than `threshold` of the corpus's tokens, densest first."""
        order = self.density.argsort(descending=True)
        return [int(i) for i in order if self.density[i] > threshold]

    def features_for_token(self, token_id: int, k: int = 10) -> list[tuple[int, float]]:
        """The features that fire most on this token over the corpus: (feature, activation summed over its
        occurrences), largest first, among the features that have it in their TOP_TOKENS most-fired-on tokens."""
        hit = self.top_tokens == int(token_id)
        mass = torch.where(hit, self.top_token_mass, torch.zeros_like(self.top_token_mass)).sum(1)
        order = mass.argsort(descending=True)[:k]
        return [(int(f), float(mass[f])) for f in order if mass[f] > 0]

    def feature(self, i: int) -> dict:
        """Feature i's page: density, mean, max, histogram, top examples and examples per activation band."""
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.d:
            raise OutOfRangeError(f"feature={i!r}: an int in 0..{self.d - 1} (negative indices are not read as "
                                  f"counting from the end: write {self.d - 1} for the last feature).")
        rows = (self.ex_feature == i).nonzero()[:, 0]
        examples = [self._example(int(r)) for r in rows]
        return {"feature": i, "density": float(self.density[i]), "mean": float(self.mean[i]),
                "max": float(self.max[i]), "hist_edges": self.hist_edges[i].tolist(),
                "hist_counts": self.hist_counts[i].tolist(),
                "top_tokens": [(self._decode(int(t)), float(m)) for t, m in zip(self.top_tokens[i],
                                                                                 self.top_token_mass[i]) if t >= 0],
                "top": [e for e in examples if e["band"] == -1],
                "bands": [[e for e in examples if e["band"] == b] for b in range(self.key["settings"]["n_bands"])]}

    def _example(self, r: int) -> dict:
        ids = [int(t) for t in self.ex_context[r]]
        c = self.key["settings"]["context"]
        tokens = [self._decode(t) if t >= 0 else None for t in ids]
        return {"band": int(self.ex_band[r]), "doc": int(self.ex_doc[r]), "pos": int(self.ex_pos[r]),
                "act": float(self.ex_act[r]), "tokens": [t for t in tokens if t is not None],
                "at": sum(1 for t in tokens[:c] if t is not None)}

    def _decode(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id]) if self.tokenizer is not None else str(token_id)

    # ---- disk ----------------------------------------------------------------------------------------------
    TENSORS = ("density", "mean", "max", "hist_edges", "hist_counts", "ex_feature", "ex_band", "ex_doc", "ex_pos",
               "ex_act", "ex_context", "top_tokens", "top_token_mass")

    def save(self, path: str | os.PathLike) -> Path:
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"key": json.dumps(self.key), "n_docs": str(self.n_docs), "n_tokens": str(self.n_tokens)}
        save_file({n: getattr(self, n).contiguous() for n in self.TENSORS}, str(path), metadata=meta)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, lab=None, dictionary: SAE | Transcoder | None = None) -> FeatureStats:
        """Statistics saved by `save`. Given the lab and the SAE (or transcoder), refused unless made for them."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        path = Path(path)
        try:
            with safe_open(str(path), "pt") as f:
                meta = f.metadata() or {}
            tensors = load_file(str(path))
            key = json.loads(meta["key"])
            if key.get("format") != FORMAT or any(n not in tensors for n in cls.TENSORS):
                raise ValueError(f"format {key.get('format')}, this interplab reads format {FORMAT}")
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
            raise LoadError(f"{path} holds no feature statistics interplab wrote ({type(e).__name__}: {e}).") from None
        engine = engine_of(lab) if lab is not None else None
        if dictionary is not None and key["dictionary"] != _dictionary_digest(dictionary):
            raise LoadError(f"{path} holds the statistics of another SAE or transcoder than the one given (its "
                            f"weights differ): compute them again with "
                            f"ilab.analyses.feature_stats.feature_stats(lab, corpus, sae).")
        if engine is not None and key["model"] != model_digest(engine):
            raise LoadError(f"{path} holds statistics made with another model than this lab's ({engine.model_id}): "
                            f"compute them again with ilab.analyses.feature_stats.feature_stats(lab, corpus, sae).")
        return cls(int(meta["n_docs"]), int(meta["n_tokens"]), **{n: tensors[n] for n in cls.TENSORS}, key=key,
                   tokenizer=engine.tokenizer if engine is not None else None)


def model_digest(engine: Engine) -> str:
    """The model's identity: its type, its parameters' shapes and its input embedding's bytes (a change of weights
    shows). Not its name or its config's text, which differ between a hub id and a local copy, and between versions
    of transformers, for the same weights."""
    h = hashlib.blake2b(digest_size=16)
    config = getattr(engine.model, "config", None)
    h.update(str(getattr(config, "model_type", type(engine.model).__name__)).encode())
    h.update(json.dumps([list(p.shape) for p in engine.model.parameters()]).encode())
    emb = engine.model.get_input_embeddings().weight.detach()
    h.update(emb.flatten()[: 1 << 20].float().cpu().numpy().tobytes())
    return h.hexdigest()


def _dictionary_digest(dictionary) -> str:
    return dictionary.digest


def corpus_digest(corpus: list[str]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for doc in corpus:
        h.update(doc.encode())
        h.update(b"\0")
    return h.hexdigest()


SHIPPED = "feature_stats.safetensors"  # beside an SAE's weights: its statistics over its own training corpus


def shipped_file(dictionary) -> Path | None:
    """The statistics file shipped beside an SAE's weights (its folder's feature_stats.safetensors), if any."""
    if isinstance(dictionary, Transcoder):
        folder = Path(dictionary.source) if dictionary.source else None
    else:
        given = (dictionary.source or {}).get("source")
        folder = EMBEDDED_SAES.get(given) or (Path(given) if given else None)
    file = folder / SHIPPED if folder is not None and folder.is_dir() else None
    return file if file is not None and file.exists() else None


def cache_dir() -> Path:
    root = os.environ.get("INTERPLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "interplab")
    return Path(root) / "feature_stats"


def feature_stats(lab: Engine, corpus, dictionary: SAE | Transcoder, *, top_k: int = 10, n_bands: int = 5,
                  per_band: int = 5, n_bins: int = 32, context: int = 8, seed: int = 0, batch_size: int = 64,
                  budget_mb: int = 1024, cache: bool = True, progress: bool = True) -> FeatureStats:
    """Every feature's statistics over `corpus` (a list of documents): see the module's docstring.

    corpus=None: the statistics shipped with the SAE (ioi-tiny-sae's, over its own training corpus), checked to be
    this SAE's and this model's.
    budget_mb: the memory the kept activations may take (16 bytes a firing); a corpus that needs more is refused
    with the numbers (pass fewer documents or a larger budget). cache=False: neither read nor write the disk cache."""
    engine = engine_of(lab)
    if corpus is None and isinstance(dictionary, (SAE, Transcoder)):
        file = shipped_file(dictionary)
        if file is None:
            raise EmptyPromptError("this SAE ships no statistics: pass a corpus (a list of documents, ideally the one "
                                   "it was trained on).")
        return FeatureStats.load(file, engine, dictionary)
    if not isinstance(dictionary, (SAE, Transcoder)):
        raise InterplabError(f"feature_stats takes an SAE (ilab.SAE.load) or a Transcoder, got "
                             f"{type(dictionary).__name__}.")
    if isinstance(dictionary, SAE):
        dictionary.check_fits(engine)
    elif dictionary.d_in != engine.d_model or dictionary.layer >= engine.n_layers:
        raise OutOfRangeError(f"{dictionary!r} does not fit this model ({engine.n_layers} layers, width "
                              f"{engine.d_model}).")
    if isinstance(corpus, str) or not isinstance(corpus, (list, tuple)) or not corpus \
            or not all(isinstance(d, str) and d for d in corpus):
        raise EmptyPromptError("feature_stats needs a corpus: a non-empty list of non-empty strings (documents).")
    settings = {"top_k": top_k, "n_bands": n_bands, "per_band": per_band, "n_bins": n_bins, "context": context,
                "seed": seed}
    for name, v in settings.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name in ("seed", "context") else 1):
            raise OutOfRangeError(f"{name}={v!r}: an int >= {0 if name in ('seed', 'context') else 1}.")
    for name, v in (("batch_size", batch_size), ("budget_mb", budget_mb)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise OutOfRangeError(f"{name}={v!r}: an int >= 1.")
    key = {"format": FORMAT, "dictionary": _dictionary_digest(dictionary), "model": model_digest(engine),
           "corpus": corpus_digest(list(corpus)), "n_docs": len(corpus), "settings": settings}
    file = cache_dir() / (hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=16).hexdigest()
                          + ".safetensors")
    if cache and file.exists():
        return FeatureStats.load(file, engine, dictionary)
    feats, toks, vals, docs = _scan(engine, list(corpus), dictionary, batch_size, budget_mb, progress)
    stats = _compute(feats, toks, vals, docs, dictionary, settings, key)
    stats.tokenizer = engine.tokenizer
    if cache:
        stats.save(file)
    return stats


def _site(dictionary) -> tuple:
    if isinstance(dictionary, Transcoder):
        return ("mlp_in", dictionary.layer)
    return dictionary.site if dictionary.layer is None else (dictionary.site, dictionary.layer)


def _scan(engine: Engine, corpus: list[str], dictionary, batch_size: int, budget_mb: int, progress: bool):
    """(feature, token, activation) of every firing, and each document's token ids (in corpus order).

    Documents are batched by length (little padding) and each forward stops at the site (Engine.read_sites)."""
    site = _site(dictionary)
    ids = [engine.tokenizer(doc)["input_ids"] for doc in corpus]
    docs = [torch.tensor(x, dtype=torch.long) for x in ids]
    starts = torch.tensor([0] + [len(x) for x in ids]).cumsum(0)
    by_length = sorted(range(len(corpus)), key=lambda i: len(ids[i]))
    feats, toks, vals = [], [], []
    kept = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(corpus), desc="feature statistics", unit="doc", leave=False)
    try:
        for start in range(0, len(corpus), batch_size):
            rows = by_length[start:start + batch_size]
            values, lengths = engine.read_sites([corpus[i] for i in rows], [site])
            with torch.no_grad():
                acts = dictionary.encode(values[site].float())  # [b, pos, d]
            for r, (doc, n) in enumerate(zip(rows, lengths)):
                t, f = acts[r, :n].nonzero(as_tuple=True)
                feats.append(f.cpu())
                toks.append(t.cpu() + starts[doc])
                vals.append(acts[r, t, f].float().cpu())
                kept += len(t)
            if kept * 16 > budget_mb * 2 ** 20:
                raise OutOfRangeError(
                    f"feature_stats: the firings kept so far ({kept:,} after {start + len(rows)} of {len(corpus)} "
                    f"documents, 16 bytes each) pass budget_mb={budget_mb}: pass fewer documents, or a larger "
                    f"budget_mb if the memory is there.")
            if bar is not None:
                bar.update(len(rows))
    finally:
        if bar is not None:
            bar.close()
    return torch.cat(feats).long(), torch.cat(toks), torch.cat(vals), docs


def _grouped_rank(group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """For entries already sorted by group: each entry's rank inside its group."""
    counts = torch.bincount(group, minlength=n_groups)
    starts = counts.cumsum(0) - counts
    return torch.arange(len(group)) - starts[group]


def _compute(feats, toks, vals, docs, dictionary, settings: dict, key: dict) -> FeatureStats:
    d = dictionary.d_sae if isinstance(dictionary, SAE) else dictionary.d_tc
    n_tokens = sum(len(x) for x in docs)
    counts = torch.bincount(feats, minlength=d)
    total = torch.bincount(feats, weights=vals.double(), minlength=d)
    mx = torch.zeros(d).scatter_reduce(0, feats, vals, "amax", include_self=True)
    density = counts.double() / n_tokens
    mean = torch.where(counts > 0, total / counts.clamp(min=1), torch.zeros_like(total))
    # histogram: log10-spaced bins from max / 10^LOG_RANGE to max
    n_bins = settings["n_bins"]
    hi = mx.clamp(min=1e-12).log10()
    edges = hi[:, None] - LOG_RANGE + LOG_RANGE * torch.linspace(0, 1, n_bins + 1)[None, :]
    where = ((vals.clamp(min=1e-12).log10() - (hi[feats] - LOG_RANGE)) / LOG_RANGE * n_bins).floor()
    where = where.long().clamp(0, n_bins - 1)
    hist = torch.bincount(feats * n_bins + where, minlength=d * n_bins).view(d, n_bins)
    # top examples: by feature, highest first
    order = vals.argsort(descending=True, stable=True)
    order = order[feats[order].argsort(stable=True)]
    top = order[_grouped_rank(feats[order], d) < settings["top_k"]]
    # interval groups: band b holds activations in (b, b + 1] * max / n_bands; a seeded random pick in each
    n_bands = settings["n_bands"]
    band = ((vals / mx[feats].clamp(min=1e-12)) * n_bands).ceil().long().clamp(1, n_bands) - 1
    g = torch.Generator().manual_seed(settings["seed"])
    order = torch.randperm(len(vals), generator=g)
    group = feats * n_bands + band
    order = order[group[order].argsort(stable=True)]
    picked = order[_grouped_rank(group[order], d * n_bands) < settings["per_band"]]
    chosen = torch.cat([top, picked])
    ex_band = torch.cat([torch.full((len(top),), -1), band[picked]])
    order = (feats[chosen] * (n_bands + 1) + ex_band + 1).argsort(stable=True)  # by feature, top first
    chosen, ex_band = chosen[order], ex_band[order]
    starts = torch.tensor([0] + [len(x) for x in docs]).cumsum(0)
    ex_tok = toks[chosen]
    ex_doc = torch.searchsorted(starts, ex_tok, right=True) - 1
    ex_pos = ex_tok - starts[ex_doc]
    c = settings["context"]
    windows = torch.full((len(chosen), 2 * c + 1), -1, dtype=torch.long)
    for r, (doc, pos) in enumerate(zip(ex_doc.tolist(), ex_pos.tolist())):
        ids = docs[doc]
        lo, hi_ = max(0, pos - c), min(len(ids), pos + c + 1)
        windows[r, lo - (pos - c):hi_ - (pos - c)] = ids[lo:hi_]
    # each feature's most fired-on tokens: activation summed per (feature, token id)
    token_of = torch.cat(docs)[toks]
    pair, inverse = torch.unique(feats * (int(token_of.max()) + 1) + token_of, return_inverse=True)
    mass = torch.zeros(len(pair), dtype=torch.float64).index_add_(0, inverse, vals.double())
    pf, pt = pair // (int(token_of.max()) + 1), pair % (int(token_of.max()) + 1)
    order = mass.argsort(descending=True, stable=True)
    order = order[pf[order].argsort(stable=True)]
    keep = order[_grouped_rank(pf[order], d) < TOP_TOKENS]
    slot = _grouped_rank(pf[keep], d)
    top_tokens = torch.full((d, TOP_TOKENS), -1, dtype=torch.int32)
    top_mass = torch.zeros(d, TOP_TOKENS)
    top_tokens[pf[keep], slot] = pt[keep].int()
    top_mass[pf[keep], slot] = mass[keep].float()
    return FeatureStats(len(docs), n_tokens, density.float(), mean.float(), mx, edges.float(), hist.int(),
                        feats[chosen].int(), ex_band.int(), ex_doc.int(), ex_pos.int(), vals[chosen], windows.int(),
                        top_tokens, top_mass, key)
