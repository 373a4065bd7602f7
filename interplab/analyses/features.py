"""Features: what an SAE (interplab.sae) reads in a model, and what its features do.

    lab.feature_acts(prompts, sae)                 # [batch, pos, d_sae] activations (0 on padding)
    lab.features(prompt, sae, k=5)                 # the top k features at each token
    lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), metric, method="attribution")   # every feature x pos
    lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), metric, features=[...])   # exact, chosen features
    f = lab.feature(sae, 12)                       # one feature:
    f.logit_effects()                              #   the tokens its decoder direction raises and lowers most
    f.top_contexts(prompts)                        #   where it fires most in a list of prompts
    f.ablate(pos=-1), f.steer(alpha=4.0)           #   its edits
    ilab.analyses.features.top_contexts(lab, prompts, sae, features)   # many features in one scan
    ilab.analyses.features.feature_attribution(lab, clean, corrupt, sae, metric)

Edits on features (ilab.zero(sae, feature=i), steer, scale, set_value, patch) are interplab.edits'; the engine
applies them like any other edit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .. import display, edits
from ..engine import Engine, as_prompts, engine_of, own_weights
from ..errors import InterplabError, NumberError, OutOfRangeError
from ..sae import SAE
from ..tokens import token_text
from .patching import SweepResult, budget_bytes, patch_sweep


def _check(lab: Engine, sae) -> SAE:
    engine = engine_of(lab)
    if not isinstance(sae, SAE):
        raise InterplabError(f"expected an SAE (ilab.SAE.load(...)), got {type(sae).__name__} {sae!r}.")
    sae.check_fits(engine)
    return sae


def _key(sae: SAE):
    """The SAE's site as a cache request and key: (site, layer), or the bare name of a layerless site (embed)."""
    return sae.site if sae.layer is None else (sae.site, sae.layer)


def _k(k, limit: int, what: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise OutOfRangeError(f"{what}={k!r}: an int >= 1.")
    return min(k, limit)


def feature_acts(lab: Engine, prompts, sae: SAE) -> torch.Tensor:
    """[batch, pos, d_sae] feature activations of the unedited run (CPU, float32); padded positions are 0."""
    engine = engine_of(lab)
    sae = _check(engine, sae)
    run = engine.run(as_prompts(prompts), cache=[_key(sae)], log=False)
    acts = sae.encode(run.cache[_key(sae)].float())
    # (the run's cache is on the model's device; the result on the host, as documented)
    return (acts * run.attention_mask[..., None].to(acts.device, acts.dtype)).cpu()


@dataclass
class TokenFeatures:
    """The top features at each token of one prompt."""

    tokens: list[str]
    ids: torch.Tensor  # [pos, k] feature indices, highest activation first
    acts: torch.Tensor  # [pos, k] their activations
    prompt: str = ""
    engine: object = field(default=None, repr=False)
    sae: SAE | None = field(default=None, repr=False)

    def at(self, pos: int) -> list[tuple[int, float]]:
        """(feature, activation) at a position, highest first, active features only."""
        return [(int(i), float(a)) for i, a in zip(self.ids[pos], self.acts[pos]) if a > 0]

    def show(self, **kw):
        """The feature view (interplab.views.features): click a token for its top features, a feature for its top
        contexts, logit effects, steering slider and ablate toggle. kw: contexts (prompts to find top contexts in),
        metric, k, alpha_range."""
        return display.view(self, **kw)

    def __repr__(self) -> str:
        rows = [f"{p:3d} {t!r:>12}: " + ", ".join(f"F{i} {a:.2f}" for i, a in self.at(p))
                for p, t in enumerate(self.tokens)]
        return "TokenFeatures(\n" + "\n".join(rows) + "\n)"


def features(lab: Engine, prompt: str, sae: SAE, k: int = 5) -> TokenFeatures:
    """The k most active features at each token of `prompt` (inactive ones have activation 0)."""
    engine = engine_of(lab)
    if not isinstance(prompt, str):
        raise InterplabError(f"features takes one prompt string, got {type(prompt).__name__}; for several: "
                             f"lab.feature_acts(prompts, sae).")
    acts = feature_acts(engine, prompt, sae)[0]
    values, ids = acts.topk(_k(k, sae.d_sae), dim=-1)
    return TokenFeatures(engine.to_str_tokens(prompt), ids, values, prompt, engine, sae)


def feature_attribution(engine: Engine, clean, corrupt, sae: SAE, metric, direction: str = "denoise",
                        features=None) -> SweepResult:
    """Every feature x position's attribution-patching estimate of the metric (one forward of the source run, one
    forward and one backward of the base run): (f_source - f_base) * d metric / d f, a SweepResult by
    ("feature", "pos") normalised like every sweep (1 = clean behaviour). features: which rows (default all)."""
    return patch_sweep(engine, clean, corrupt, _check(engine, sae), ("feature", "pos"), metric, direction,
                       "attribution",
                       features=features)


@dataclass
class LogitEffects:
    """What a feature's decoder direction does to the logits, read through the final norm and the unembedding."""

    feature: int
    values: torch.Tensor  # [vocab]: the change of each logit per unit of the feature
    raised: list[tuple[str, float]]
    lowered: list[tuple[str, float]]

    def __repr__(self) -> str:
        up = ", ".join(f"{t!r} {v:+.2f}" for t, v in self.raised)
        down = ", ".join(f"{t!r} {v:+.2f}" for t, v in self.lowered)
        return f"LogitEffects(F{self.feature}\n  raised: {up}\n  lowered: {down}\n)"


def _unembedded(engine: Engine, directions: torch.Tensor, tokens=None) -> torch.Tensor:
    """[n, vocab] (or [n, len(tokens)]) residual directions [n, d] through the final norm (centred where it is a
    LayerNorm, times its weight; its 1/std left out, shared by every token) and the unembedding."""
    arch = engine.sites.arch
    if arch is None:
        raise InterplabError("logit effects need a known architecture (the final norm and unembedding).")
    norm = engine.model.get_submodule(arch.final_norm)
    unembed = engine.model.get_submodule(arch.unembed)
    with torch.no_grad(), own_weights(norm), own_weights(unembed):
        v = directions.float().cpu()
        if "layernorm" in type(norm).__name__.lower() or getattr(norm, "bias", None) is not None:
            v = v - v.mean(-1, keepdim=True)
        weight = getattr(norm, "weight", None)
        if weight is not None:
            w = weight.detach().float().cpu()
            v = v * (1 + w if "gemma" in type(norm).__name__.lower() else w)
        W_U = unembed.weight.detach().float().cpu()
        return v @ (W_U if tokens is None else W_U[tokens]).T


def features_by_logit_effect(lab: Engine, sae: SAE, token, k: int = 10) -> dict:
    """The features whose decoder directions raise and lower `token`'s logit most (each feature's logit effect on
    it, as feature_logit_effects computes them): {"raise": [(feature, effect)], "lower": [...]}."""
    engine = engine_of(lab)
    sae = _check(engine, sae)
    if sae.site == "z":
        raise InterplabError("logit effects read directions in the residual stream; a z SAE's do not live there.")
    tid = engine.token_id(token)
    effects = _unembedded(engine, sae.direction(list(range(sae.d_sae))).float(), [tid])[:, 0]
    k = _k(k, effects.numel())
    top, low = effects.topk(k), effects.topk(k, largest=False)
    return {"token": token_text(engine.tokenizer, tid),
            "raise": [(int(i), float(v)) for v, i in zip(top.values, top.indices)],
            "lower": [(int(i), float(v)) for v, i in zip(low.values, low.indices)]}


def feature_logit_effects(lab: Engine, sae: SAE, feature: int, k: int = 10) -> LogitEffects:
    """The tokens feature `feature`'s decoder direction raises and lowers most: the direction through the final
    norm (centred where the norm is a LayerNorm, times its weight; its scale 1/std left out, as it is shared by
    every token) and the unembedding. The same direction as the logits' change when the feature is steered at the
    last layer's output, for a small alpha."""
    engine = engine_of(lab)
    sae = _check(engine, sae)
    if isinstance(feature, bool) or not isinstance(feature, int):
        raise OutOfRangeError(f"feature={feature!r}: one feature index, an int 0..{sae.d_sae - 1}.")
    sae.features_of(feature)
    if sae.site == "z":  # a head output: through each head's slice of the output projection first
        raise InterplabError("feature_logit_effects reads directions in the residual stream; a z SAE's "
                             "directions pass through the attention output projection first (not supported).")
    with torch.no_grad():
        values = _unembedded(engine, sae.direction(feature).float()[None])[0]
    k = _k(k, values.numel())
    top, low = values.topk(k), values.topk(k, largest=False)
    def name(i) -> str:  # as the views name a token: a lone byte piece as its bytes ('<C0>'), not U+FFFD
        return token_text(engine.tokenizer, int(i))

    return LogitEffects(feature, values, [(name(i), float(x)) for x, i in zip(*top)],
                        [(name(i), float(x)) for x, i in zip(*low)])


@dataclass
class TopContexts:
    """Where each feature fires most over a list of prompts: per feature, the k highest activations, the prompt
    each is in and its token position."""

    features: list[int]
    values: torch.Tensor  # [n_features, k] highest first (-inf where fewer than k tokens were seen)
    prompt_index: torch.Tensor  # [n_features, k]
    pos: torch.Tensor  # [n_features, k]
    prompts: list[str] = field(repr=False)
    engine: Engine | None = field(default=None, repr=False)
    sae: SAE | None = field(default=None, repr=False)

    def examples(self, feature: int, n: int | None = None) -> list[dict]:
        """The feature's top contexts as {prompt, pos, value, tokens, acts}: acts is the feature's activation at
        every token of the prompt (for shading)."""
        if feature not in self.features:
            raise OutOfRangeError(f"feature {feature} was not scanned: these contexts hold {self.features[:10]}"
                                  f"{'...' if len(self.features) > 10 else ''}.")
        row = self.features.index(feature)
        out = []
        for v, i, p in list(zip(self.values[row], self.prompt_index[row], self.pos[row]))[:n]:
            if not torch.isfinite(v):
                continue
            prompt = self.prompts[int(i)]
            acts = feature_acts(self.engine, prompt, self.sae)[0, :, feature] if self.engine is not None else None
            out.append({"prompt": prompt, "pos": int(p), "value": float(v),
                        "tokens": self.engine.to_str_tokens(prompt) if self.engine is not None else None,
                        "acts": acts.tolist() if acts is not None else None})
        return out


def top_contexts(lab: Engine, prompts, sae: SAE, features=None, k: int = 10, *, batch_size: int = 256,
                 memory_budget: int | str | None = None,
                 progress: bool | Callable[[int, int], None] = True) -> TopContexts:
    """The k highest activations of each feature over every token of `prompts`, with where they are.

    Prompts run in batches of at most batch_size, fewer where a batch's activations would not fit memory_budget
    (bytes or '600MiB'; default as patch_sweep's); each forward stops at the SAE's site. progress: a tqdm bar
    (True), none (False) or a function (done, total)."""
    engine = engine_of(lab)
    sae = _check(engine, sae)
    prompts = as_prompts(prompts)
    feats = sae.features_of(features)
    k = _k(k, 10**9)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise NumberError(f"batch_size={batch_size!r}: the most prompts per forward, an int >= 1.")
    if not (isinstance(progress, bool) or callable(progress)):
        raise InterplabError(f"progress={progress!r}: True (a progress bar), False, or a function (done, total).")
    budget = budget_bytes(memory_budget, engine.device)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths pad little
    values = torch.full((len(feats), k), float("-inf"))
    where = torch.zeros((len(feats), k), dtype=torch.long)  # flat index: prompt * stride + pos
    stride = 1 << 20
    idx = torch.tensor(feats)
    bar = None
    if progress is True and len(prompts) > 1:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(prompts), desc="top contexts", unit="prompt", leave=False)
    done, i = 0, 0
    try:
        while i < len(order):
            n_tok = max(8, len(engine.tokenizer(prompts[order[min(i + batch_size, len(order)) - 1]])["input_ids"]))
            per_row = n_tok * (sae.d_sae * 4 * 3 + engine.d_model * 4 * 16)  # features (+ topk temporaries), forward
            rows = max(1, min(batch_size, budget // per_row))
            batch = order[i:i + rows]
            got, lengths = engine.read_sites([prompts[j] for j in batch], [_key(sae)])
            x = got[_key(sae)]
            acts = sae.encode(x)[..., idx.to(x.device)].float().cpu()  # [b, t, n_feats]
            t = acts.shape[1]
            real = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
            acts = acts.masked_fill(~real[..., None], float("-inf")).reshape(-1, len(feats))
            flat = (torch.tensor(batch)[:, None] * stride + torch.arange(t)[None, :]).reshape(-1)
            kk = min(k, acts.shape[0])
            v, j = acts.topk(kk, dim=0)  # [kk, n_feats]
            values, pick = torch.cat([values, v.T], 1).topk(k, dim=1)
            where = torch.cat([where, flat[j].T], 1).gather(1, pick)
            i += len(batch)
            done += len(batch)
            if bar is not None:
                bar.update(len(batch))
            if callable(progress):
                progress(done, len(prompts))
    finally:
        if bar is not None:
            bar.close()
    return TopContexts(feats, values, where // stride, where % stride, prompts, engine, sae)


@dataclass
class Feature:
    """One feature of an SAE on a lab's model: what a click on a feature shows, and the edits it offers."""

    engine: Engine = field(repr=False)  # (a Lab given here is replaced by its engine)
    sae: SAE = field(repr=False)
    index: int = 0

    def __post_init__(self):
        self.engine = engine_of(self.engine)
        _check(self.engine, self.sae)
        if isinstance(self.index, bool) or not isinstance(self.index, int):
            raise OutOfRangeError(f"feature {self.index!r}: one feature index, an int 0..{self.sae.d_sae - 1}.")
        self.index = self.sae.features_of(self.index)[0]

    @property
    def direction(self) -> torch.Tensor:
        """[d_in]: what one unit of the feature adds at the SAE's site."""
        return self.sae.direction(self.index)

    def acts(self, prompts) -> torch.Tensor:
        """[batch, pos]: the feature's activation at every token (0 on padding)."""
        return feature_acts(self.engine, prompts, self.sae)[..., self.index]

    def logit_effects(self, k: int = 10) -> LogitEffects:
        """The tokens its decoder direction raises and lowers most (feature_logit_effects)."""
        return feature_logit_effects(self.engine, self.sae, self.index, k)

    def top_contexts(self, prompts, k: int = 10, **kw) -> list[dict]:
        """Its k highest activations over the prompts, each {prompt, pos, value, tokens, acts} (top_contexts)."""
        return top_contexts(self.engine, prompts, self.sae, [self.index], k, **kw).examples(self.index)

    def ablate(self, pos=None, **kw):
        """The edit that sets the feature to 0 (ilab.zero(sae, feature=index))."""
        return edits.zero(self.sae, pos=pos, feature=self.index, **kw)

    def steer(self, alpha: float, pos=None, **kw):
        """The edit that adds alpha times its decoder direction (ilab.steer(sae, feature=index, alpha=alpha))."""
        return edits.steer(self.sae, alpha=alpha, pos=pos, feature=self.index, **kw)

    def show(self, prompt: str, **kw):
        """The feature view on `prompt` with this feature selected (see TokenFeatures.show)."""
        return display.view(self, prompt=prompt, **kw)

    def __repr__(self) -> str:
        return f"Feature({self.index} of {self.sae.describe()})"


__all__ = ["feature_acts", "features", "feature_attribution", "feature_logit_effects", "features_by_logit_effect",
           "top_contexts",
           "TokenFeatures", "LogitEffects", "TopContexts", "Feature"]
