"""The feature view: an SAE's features on one prompt. Click a token: its top features as bars; click a feature: where
it fires most (each token shaded by its activation), the tokens its decoder direction raises and lowers, a steering
slider and an ablate toggle with the next-token bars they give.

    lab.features(prompt, sae).show()           # the prompt's tokens, each one's top features
    lab.feature(sae, 12).show(prompt)          # the same, feature 12 selected

    lab.features(prompt, sae).show(stats=s)   # each feature's page from these corpus statistics

With corpus statistics (ilab.analyses.feature_stats; by default the ones shipped with the SAE, as ioi-tiny-sae's over
its own training corpus), each feature in a token's list shows its density (marked "dense" above
interplab.analyses.feature_stats.DENSE), and its panel is its feature page: density, activation histogram, top
examples and examples per activation band from the corpus. Without them (or with contexts= given), the panel shows
its top contexts in a list of prompts.

The page holds every token's top features and, for each of those features, its panel (its page or top contexts,
logit effects, its activation at each token), so a click on a token or a feature paints at once; the kernel computes
only the steered and ablated logits (a forward each) and the panel of a feature the page was not given.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import traitlets as t

from .. import display
from ..analyses.feature_stats import DENSE, FeatureStats, feature_stats, shipped_file
from ..analyses.features import Feature, TokenFeatures, feature_acts, feature_logit_effects, features, top_contexts
from ..edits import steer, zero
from ..engine import Engine, engine_of
from ..errors import InterplabError
from ..metrics import as_metric
from ..tokens import token_text
from ..widgets.base import Float, Int, Labels, LabWidget
from ..widgets.jobs import job
from .logits import Bars, prompt_tokens

CONTEXTS = 5  # top contexts shown per feature
EFFECTS = 6  # tokens raised and lowered shown per feature
PREVIEW_TOP, PREVIEW_BAND = 3, 1  # examples a feature's page preview holds (until the feature is selected)


class FeatureView(LabWidget):
    """Traits (kernel -> page): tokens; top [per position: [[feature, activation], ...]]; densities {"<feature>":
    share of the corpus's tokens} and dense_threshold (with statistics); panels {"<feature>": {acts, contexts:
    [{tokens, acts, pos}] or stats (FeatureStats.feature), corpus (what the contexts come from), raised: [[token,
    value]], lowered: [...]}}; pos, feature (selected; -1: none);
    alpha, alpha_min, alpha_max, ablate; logits [{name, tokens, probs}] (base and the edited run); metric {name,
    values} (with an answer); title, d_sae.

    Requests (page -> kernel): token {pos}, feature {index}, steer {alpha}, ablate {on}."""

    _view_kind = t.Unicode("features").tag(sync=True)
    REQUESTS = {
        "token": {"pos": "int"},
        "feature": {"index": "int"},
        "steer": {"alpha": "number"},
        "ablate": {"on": "bool"},
    }

    tokens = Labels().tag(sync=True)
    top = t.List().tag(sync=True)
    panels = t.Dict().tag(sync=True)
    densities = t.Dict().tag(sync=True)
    dense_threshold = t.Float(DENSE).tag(sync=True)
    pos = t.Int(-1).tag(sync=True)
    feature = t.Int(-1).tag(sync=True)
    d_sae = t.Int(0).tag(sync=True)
    alpha = t.Float(0.0).tag(sync=True)
    alpha_min = t.Float(-8.0).tag(sync=True)
    alpha_max = t.Float(8.0).tag(sync=True)
    ablate = t.Bool(False).tag(sync=True)
    logits = t.List().tag(sync=True)
    metric = t.Dict().tag(sync=True)
    title = t.Unicode("").tag(sync=True)

    def _limits(self):
        return {"token": {"pos": Int(0, len(self.tokens) - 1)}, "feature": {"index": Int(0, self.d_sae - 1)},
                "steer": {"alpha": Float(self.alpha_min, self.alpha_max)}}

    def _handle_token(self, pos: int) -> None:
        self.pos = pos

    def on_feature(self, fn):
        return self._register("feature", fn)

    def on_steer(self, fn):
        return self._register("steer", fn)

    def on_ablate(self, fn):
        return self._register("ablate", fn)


# ---- what the view shows, as plain numbers --------------------------------------------------------------------
def token_tops(tf: TokenFeatures) -> list[list[list]]:
    """Per position, its active top features as [[feature, activation], ...], highest first."""
    return [[[f, round(a, 4)] for f, a in tf.at(p)] for p in range(len(tf.tokens))]


def feature_panels(engine: Engine, sae, prompt: str, feats: list[int], contexts: list[str] | None,
                   stats: FeatureStats | None = None, whole: set[int] | None = None) -> dict:
    """{str(feature): panel} for the page: the feature's activation at each token of `prompt`, its page from the
    corpus statistics `stats` (or else its top contexts in `contexts`, each token's activation for shading) and the
    tokens its decoder direction raises and lowers most. With statistics, the features in `whole` (default: all)
    get their whole page, the others a preview (`stats_page(..., preview=True)`), whole once selected."""
    if not feats:
        return {}
    here = feature_acts(engine, prompt, sae)[0][:, feats]  # [pos, n]
    found = top_contexts(engine, contexts, sae, feats, k=CONTEXTS, progress=False) if contexts and stats is None \
        else None
    shown = sorted({int(i) for i in found.prompt_index[torch.isfinite(found.values)].tolist()}) if found else []
    acts = feature_acts(engine, [contexts[i] for i in shown], sae)[..., feats] if shown else None  # one batched run
    row_of = {i: r for r, i in enumerate(shown)}
    out = {}
    for j, f in enumerate(feats):
        ctx = []
        if found is not None:
            for v, i, p in zip(found.values[j].tolist(), found.prompt_index[j].tolist(), found.pos[j].tolist()):
                if not math.isfinite(v) or v <= 0:
                    continue
                toks = prompt_tokens(engine, contexts[i])
                ctx.append({"tokens": toks, "acts": [round(x, 4) for x in acts[row_of[i], :len(toks), j].tolist()],
                            "pos": int(p)})
        effects = feature_logit_effects(engine, sae, f, EFFECTS)
        # named as every view names a token: a lone byte piece by its bytes ('<E2>'), not the decoder's U+FFFD
        ids_up = effects.values.topk(len(effects.raised)).indices.tolist()
        ids_down = effects.values.topk(len(effects.lowered), largest=False).indices.tolist()
        page = {"stats": stats_page(stats, f, preview=whole is not None and f not in whole),
                "corpus": corpus_name(stats)} if stats is not None else {
            "corpus": f"{len(contexts)} prompts" if contexts else None}
        out[str(f)] = {"acts": [round(x, 4) for x in here[:, j].tolist()], "contexts": ctx, **page,
                       "raised": [[token_text(engine.tokenizer, i), round(v, 4)]
                                  for i, (_, v) in zip(ids_up, effects.raised)],
                       "lowered": [[token_text(engine.tokenizer, i), round(v, 4)]
                                   for i, (_, v) in zip(ids_down, effects.lowered)]}
    return out


def stats_page(stats: FeatureStats, feature: int, preview: bool = False) -> dict:
    """stats.feature(feature) for the page; a preview keeps PREVIEW_TOP top examples and PREVIEW_BAND per band (a
    view holds every listed feature's page; the whole page is sent when the feature is selected), marked partial."""
    page = stats.feature(feature)
    r = lambda x: round(x, 4)  # noqa: E731  (what the page prints; a notebook saves every view's state)
    page.pop("top_tokens")  # (feature search's; the page does not draw them)
    page = {**page, "density": round(page["density"], 6), "mean": r(page["mean"]), "max": r(page["max"]),
            "hist_edges": [r(e) for e in page["hist_edges"]],
            "top": [{**e, "act": r(e["act"])} for e in page["top"]],
            "bands": [[{**e, "act": r(e["act"])} for e in b] for b in page["bands"]]}
    if preview:
        page = {**page, "top": page["top"][:PREVIEW_TOP], "bands": [b[:PREVIEW_BAND] for b in page["bands"]],
                "partial": True}
    return page


def corpus_name(stats: FeatureStats) -> str:
    return f"{stats.n_docs:,} documents ({stats.n_tokens:,} tokens)"


def densities(stats: FeatureStats | None, feats) -> dict:
    """{str(feature): its density} for the page's token lists."""
    return {} if stats is None else {str(f): round(float(stats.density[f]), 6) for f in feats}


def edited_logits(engine: Engine, prompt: str, sae, feature: int, alpha: float, ablate: bool, metric=None) -> dict:
    """Next-token bars of the prompt as is and with the feature edited (steered by alpha at every position, or set
    to 0 there: ablated; the site rebuilt as decode(edited features) + error), and the metric of each."""
    bars = Bars(engine, metric)
    bars.add("base", engine.run(prompt, log=False).last_logits)
    edits = ([zero(sae, feature=feature)] if ablate else []) + (
        [steer(sae, feature=feature, alpha=alpha)] if alpha != 0 else [])
    if edits:
        what = " + ".join((["ablated"] if ablate else []) + ([f"steered (alpha {alpha:.3g})"] if alpha != 0 else []))
        bars.add(f"F{feature} {what}", engine.last_logits(prompt, edits, log=False))
    return bars.panel()


# ---- the wiring: requests become jobs on the lab's worker --------------------------------------------------------
class FeatureExplorer:
    """Drives a FeatureView for one prompt and SAE (`explorer.view`; `lab.features(prompt, sae).show()` returns the
    view, its explorer as view.explorer). stats: corpus statistics of this SAE (ilab.analyses.feature_stats;
    default: those shipped with it, if any; False: none); contexts: prompts to find each feature's top contexts in
    instead (default, when there are no statistics: 200 prompts of ioi-tiny's IOI dataset); metric: an optional
    metric shown beside the bars."""

    def __init__(self, lab, prompt: str, sae, *, feature: int | None = None, k: int = 5, contexts=None,
                 stats: FeatureStats | bool | None = None, metric=None,
                 alpha_range: tuple[float, float] = (-8.0, 8.0)):
        self.engine = engine = engine_of(lab)
        self.prompt, self.sae = prompt, sae
        self.stats = _stats_for(engine, sae, stats, contexts)
        self.contexts = list(contexts) if contexts is not None else (default_contexts() if self.stats is None
                                                                     else None)
        self.metric = as_metric(metric).bind(engine.token_id) if metric is not None else None
        tf = features(engine, prompt, sae, k)
        top = token_tops(tf)
        feats = sorted({f for row in top for f, _ in row} | ({feature} if feature is not None else set()))
        last = len(tf.tokens) - 1
        first = feature if feature is not None else (top[last][0][0] if top[last] else (feats[0] if feats else 0))
        self.view = FeatureView(tokens=prompt_tokens(engine, prompt), top=top,
                                panels=feature_panels(engine, sae, prompt, feats, self.contexts, self.stats,
                                                      whole={first}),
                                densities=densities(self.stats, feats),
                                pos=last, feature=first, d_sae=sae.d_sae, alpha_min=float(alpha_range[0]),
                                alpha_max=float(alpha_range[1]),
                                title=f"{sae.describe()} on {prompt[-60:]!r}")
        self.view.explorer = self
        self.view.on_feature(lambda index: self.select(index))
        self.view.on_steer(lambda alpha: self._edit(alpha=alpha))
        self.view.on_ablate(lambda on: self._edit(ablate=on))
        self.refresh()

    def select(self, index: int) -> None:
        """Show feature `index`: its panel (computed if the page lacks it) and its edited logits."""
        v = self.view
        v.feature = index
        held = v.panels.get(str(index))
        if held is not None and held.get("stats", {}).get("partial"):  # the whole page: a lookup, no forward
            v.panels = {**v.panels, str(index): {**held, "stats": stats_page(self.stats, index)}}
        if held is None:
            v.status = f"F{index}: finding its top contexts..."

            def show(panel):
                v.panels = {**v.panels, **panel}
                v.densities = {**v.densities, **densities(self.stats, [index])}
                v.status = ""

            job(self.engine.worker, v, f"panel:{id(self)}",
                lambda: feature_panels(self.engine, self.sae, self.prompt, [index], self.contexts, self.stats), show)
        self.refresh()

    def _edit(self, alpha: float | None = None, ablate: bool | None = None) -> None:
        if alpha is not None:
            if not math.isfinite(alpha):
                raise InterplabError(f"alpha={alpha!r}: a finite number")
            self.view.alpha = alpha
        if ablate is not None:
            self.view.ablate = ablate
        self.refresh()

    def refresh(self) -> None:
        """Recompute the bars for the selected feature, alpha and ablate toggle (the latest request wins)."""
        v = self.view
        args = (self.prompt, self.sae, v.feature, v.alpha, v.ablate, self.metric)

        def show(out: dict[str, Any]):
            v.logits, v.metric = out["series"], out["metric"]

        job(self.engine.worker, v, f"logits:{id(self)}", lambda: edited_logits(self.engine, *args), show)


def _stats_for(engine: Engine, sae, stats, contexts) -> FeatureStats | None:
    """The statistics the view shows: those given, else (unless contexts= asks for prompts) the SAE's shipped ones."""
    if stats is False or (stats is None and contexts is not None):
        return None
    if stats is None or stats is True:
        return feature_stats(engine, None, sae) if shipped_file(sae) is not None else None
    if not isinstance(stats, FeatureStats):
        raise InterplabError(f"stats={stats!r}: the SAE's ilab.analyses.feature_stats.feature_stats(lab, corpus, "
                             f"sae), or False for none.")
    if stats.d != sae.d_sae or stats.key.get("dictionary") != sae.digest:
        raise InterplabError(f"these statistics were made for another SAE ({stats.d} features): compute this SAE's "
                             f"with ilab.analyses.feature_stats.feature_stats(lab, corpus, sae).")
    return stats


def default_contexts(n: int = 200) -> list[str]:
    """Prompts to look for top contexts in: the clean and corrupt prompts of ioi-tiny's IOI dataset (test split)."""
    from ..zoo import ioi_dataset

    return [p for pair in ioi_dataset(n // 2, split="test") for p in (pair["clean"], pair["corrupt"])][:n]


def show_token_features(tf: TokenFeatures, **kw) -> FeatureView:
    """TokenFeatures.show(): the view on its prompt."""
    if tf.engine is None or tf.sae is None:
        raise InterplabError("these token features know no lab or SAE: lab.features(prompt, sae).show()")
    kw.setdefault("k", int(tf.ids.shape[-1]))  # as many features per token as lab.features(..., k) found
    return FeatureExplorer(tf.engine, tf.prompt, tf.sae, **kw).view


def show_feature(f: Feature, prompt: str, **kw) -> FeatureView:
    """Feature.show(prompt): the view on that prompt, this feature selected."""
    return FeatureExplorer(f.engine, prompt, f.sae, feature=f.index, **kw).view


display.register(TokenFeatures, show_token_features)
display.register(Feature, show_feature)
