"""Every public analysis of a lab, run once, as plain numbers on the host: what tests/gpu/ compares between a GPU and
the CPU, and tests/core/test_device_placement.py between the CPU and a simulated second device (tests/_fake_device).

    results = battery(lab)       # {name: tensor | float | list}, each computed by the library's public API
    compare(a, b, tol)           # [(name, largest difference)] over the names where the two differ by more than tol
"""

from __future__ import annotations

import math

import torch

import interplab as ilab
from interplab.views.attention import attention_view
from interplab.views.patching import PatchSession

CLEAN = ["When Mary and John went to the store, John gave a drink to",
         "When Tom and Anna went to the park, Tom gave a ball to"]
CORRUPT = ["When Mary and John went to the store, Mary gave a drink to",
           "When Tom and Anna went to the park, Anna gave a ball to"]
ANSWERS, WRONGS = [" Mary", " Anna"], [" John", " Tom"]
RESID = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")


def _final(lab):
    """The model's final norm and unembedding, written out per architecture (not taken from interplab)."""
    m = lab.model
    norm = m.transformer.ln_f if hasattr(m, "transformer") else (
        m.gpt_neox.final_layer_norm if hasattr(m, "gpt_neox") else m.model.norm)
    return norm, m.get_output_embeddings()


def cases(lab) -> dict:
    """name -> a function of the lab returning numbers. Two IOI pairs (a dataset) unless the name says one."""
    clean, corrupt = CLEAN, CORRUPT
    one_c, one_k = CLEAN[0], CORRUPT[0]
    metric = ilab.logit_diff(ANSWERS, WRONGS)
    one_metric = ilab.logit_diff(ANSWERS[0], WRONGS[0])
    heads = ["z", "q", "k", "v", "pattern"]
    rot = lab.sites.arch.rotary
    c = {}

    # runs: logits (all, last), every cached site, edits of each kind, a click (a resumed forward)
    every = list(RESID) + heads + (["rot_q", "rot_k"] if rot else [])
    c["run.logits"] = lambda: lab.run(clean, log=False).logits
    c["run.last_logits"] = lambda: lab.run(clean, log=False).last_logits
    for site in every:
        c[f"cache {site}"] = lambda site=site: torch.stack([
            lab.run(clean, cache=[site], log=False).cache[site, l].float().cpu().flatten()
            for l in range(lab.n_layers)])
    src = lambda: lab.run(clean, cache=["resid_pre", "z"], log=False)  # noqa: E731
    edit_sets = {
        "patch resid": lambda: [ilab.patch("resid_pre", 1, pos=4, source=src())],
        "patch head": lambda: [ilab.patch("z", 1, head=2, source=src())],
        "patch from prompt": lambda: [ilab.patch("resid_mid", 0, source=clean)],
        "zero+scale": lambda: [ilab.zero("mlp_out", 0), ilab.scale("attn_out", 1, 0.5, pos=-1)],
        "mean": lambda: [ilab.mean_ablate("z", 1, head=0, reference=lab.run(clean + corrupt, cache=["z"], log=False))],
        "steer+project": lambda: [ilab.steer("resid_post", 0, torch.ones(lab.d_model), alpha=0.3),
                                  ilab.project("resid_pre", 1, torch.arange(lab.d_model).float(), coeff=0.0)],
        "pattern": lambda: [ilab.zero("pattern", 1, head=1)],
    }
    for name, edits in edit_sets.items():
        c[f"run with {name}"] = lambda edits=edits: lab.run(corrupt, edits(), log=False).last_logits
    c["click (resumed)"] = lambda: lab.engine.last_logits(one_k, [ilab.patch("resid_pre", 2, pos=6, source=one_c)],
                                                   log=False)
    c["click (resumed, head)"] = lambda: lab.engine.last_logits(one_k, [ilab.patch("z", 1, head=3, source=one_c)],
                                                         log=False)
    # the student's own lens on the cache (notebook 03), and the library's
    def student_lens():
        run = lab.run(one_c, cache=["resid_post"], log=False)
        norm, unembed = _final(lab)
        with torch.no_grad():
            return torch.stack([unembed(norm(run.cache["resid_post", l][0, -1])).float().cpu()
                                for l in range(lab.n_layers)])
    c["student lens"] = student_lens
    c["logit lens"] = lambda: ilab.analyses.lens.logit_lens(lab, one_c).probs
    c["attention view"] = lambda: attention_view(lab, one_c, 1, 2)["pattern"]

    # sweeps: every site and layout, exact and attribution, AtP*'s options
    layouts = {site: [("layer", "pos"), ("layer",)] for site in RESID}
    layouts.update({site: [("layer", "head"), ("layer", "head", "pos")] for site in heads})
    for site, bys in layouts.items():
        for by in bys:
            for method in ("exact", "attribution"):
                c[f"sweep {site} {'x'.join(by)} {method}"] = lambda site=site, by=by, method=method: lab.patch_sweep(
                    clean, corrupt, site, by, metric, method=method, progress=False).values
    qk = ("rot_q", "rot_k") if rot else ("q", "k")
    for site in qk:
        c[f"sweep {site} qk_fix"] = lambda site=site: lab.patch_sweep(
            clean, corrupt, site, ("layer", "head"), metric, method="attribution", qk_fix=True, progress=False).values
        c[f"sweep {site} qk_fix by pos"] = lambda site=site: lab.patch_sweep(
            clean, corrupt, site, ("layer", "head", "pos"), metric, method="attribution", qk_fix=True,
            progress=False).values
    for site, by in (("z", ("layer", "head")), ("resid_pre", ("layer", "pos"))):
        c[f"sweep {site} grad_drop"] = lambda site=site, by=by: lab.patch_sweep(
            clean, corrupt, site, by, metric, method="attribution", grad_drop=True, progress=False).values
    c["sweep noise one pair"] = lambda: lab.patch_sweep(one_c, one_k, "resid_pre", ("layer", "pos"), one_metric,
                                                        direction="noise", progress=False).values
    c["sweep heads (all five)"] = lambda: torch.cat([r.values.flatten() for r in lab.patch_sweep_heads(
        clean, corrupt, metric, progress=False).results.values()])

    # the click path of the explorer: a fresh cell, and a cell the sweep computed
    def click_view():
        s = PatchSession(lab, one_c, one_k, ANSWERS[0], WRONGS[0])
        fresh = s.logits_view([ilab.patch("resid_pre", 1, pos=6, source=one_c)], log=False)
        s.result = lab.patch_sweep(one_c, one_k, "resid_pre", ("layer", "pos"), one_metric, progress=False)
        own = s.logits_view([s.cell_edit(1, 6)], cells=[(1, 6)], log=False)
        return [v["probs"] for v in fresh["series"] + own["series"]] + [fresh["metric"]["values"]["patched"],
                                                                        own["metric"]["values"]["patched"]]
    c["click view"] = click_view

    # circuits
    c["path patch"] = lambda: lab.path_patch(clean, corrupt, metric).values
    c["path patch to q/k/v"] = lambda: lab.path_patch(clean, corrupt, metric, senders="heads+mlps",
                                                      receivers=[(1, 0, "q"), (2, 1, "k"), (2, 0, "v")]).values
    c["dla"] = lambda: _dla(lab.direct_logit_attribution(clean, metric))
    c["copying scores"] = lambda: lab.copying_scores(clean, [[2, 4], [2, 4]]).ranks.float()
    pick = ["embed -> L1H0.q", "L0H1 -> L2H1.k", "L0H2 -> MLP1", "MLP0 -> L2H3.q", "L1H3 -> logits",
            "MLP1 -> logits", "L2H0 -> MLP2", "embed -> L0H1.v"]
    c["edge patch"] = lambda: lab.edge_patch(clean, corrupt, metric, edges=pick).scores
    c["eap"] = lambda: lab.edge_attribution(clean, corrupt, metric).scores
    c["eap-ig"] = lambda: lab.edge_attribution(clean, corrupt, metric, method="eap-ig", steps=3).scores
    c["circuit"] = lambda: [lab.circuit(clean, corrupt, metric, pick).value,
                            lab.circuit(clean, corrupt, metric, pick).faithfulness]

    # features: the shipped SAE of ioi-tiny
    if lab.model_id == "ioi-tiny":
        sae = ilab.SAE.load("ioi-tiny-sae")
        c["feature acts"] = lambda: lab.feature_acts(clean, sae)
        c["feature sweep exact"] = lambda: lab.patch_sweep(one_c, one_k, sae, ("feature", "pos"), one_metric,
                                                           progress=False).values
        c["feature sweep attribution"] = lambda: lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), metric,
                                                                 method="attribution", progress=False).values
        c["feature logit effects"] = lambda: _numbers(ilab.analyses.features.feature_logit_effects(lab, sae, 321))
        c["feature top contexts"] = lambda: _numbers(ilab.analyses.features.top_contexts(lab, clean + corrupt, sae,
                                                                                features=[321, 5], k=2))
        c["run with feature edits"] = lambda: lab.run(clean, [ilab.zero(sae, feature=321, pos=6),
                                                              ilab.steer(sae, feature=5, alpha=4.0)],
                                                      log=False).last_logits

    # generation with edits (greedy: the same ids)
    c["generate"] = lambda: lab.generate(one_c, [ilab.steer("resid_post", 1, torch.ones(lab.d_model), alpha=0.5)],
                                         max_new_tokens=6, greedy=True).ids.float()
    c["steering vector"] = lambda: ilab.analyses.vectors.diff_of_means(lab, [clean[0]], [corrupt[0]], "resid_post", 1)
    c["residual norm"] = lambda: lab.residual_norm("resid_post", 1, prompts=clean)
    return c


def _numbers(res) -> list:
    """The tensors and numbers of a result object's fields."""
    return [v for v in vars(res).values() if isinstance(v, (torch.Tensor, float, int)) and not isinstance(v, bool)]


def _dla(res) -> torch.Tensor:
    return torch.cat([t.float().flatten() for t in (res.heads, res.attn_bias, res.mlp, res.embed, res.pos_embed,
                                                     res.final_bias, res.total)])


def battery(lab, names=None) -> dict:
    """{name: numbers} for every case (or those in `names`)."""
    out = {}
    for name, fn in cases(lab).items():
        if names is None or name in names:
            try:
                out[name] = _host(fn())
            except ilab.UnsupportedSiteError as e:  # (this architecture has no such analysis: the same on both)
                out[name] = f"unsupported: {e}"
    return out


def _host(x):
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu()
    if isinstance(x, (list, tuple)):
        return [_host(v) for v in x]
    return x


def _flat(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.flatten().double()
    if isinstance(x, (list, tuple)):
        return torch.cat([_flat(v) for v in x]) if x else torch.zeros(0, dtype=torch.float64)
    return torch.tensor([float(x)], dtype=torch.float64)


def compare(a: dict, b: dict, tol: float) -> list[tuple[str, float]]:
    """[(name, largest absolute difference)] where a and b differ by more than tol (NaN where only one is NaN;
    inf where shapes differ)."""
    bad = []
    for name in a:
        if isinstance(a[name], str) or isinstance(b[name], str):
            if a[name] != b[name]:
                bad.append((name, math.inf))
            continue
        x, y = _flat(a[name]), _flat(b[name])
        if x.shape != y.shape:
            bad.append((name, math.inf))
            continue
        both_nan = x.isnan() & y.isnan()
        diff = (x - y).abs().masked_fill(both_nan, 0.0)
        worst = float(diff.nan_to_num(nan=math.inf).max()) if len(diff) else 0.0
        if worst > tol:
            bad.append((name, worst))
    return bad
