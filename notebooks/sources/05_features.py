# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Features: a sparse autoencoder on the IOI circuit
#
# About 20 minutes, after the workshop (optional). Notebooks 01 and 04 found *where* the model decides the answer of
# *"When Mary and John went to the store, John gave a drink to"*: at the repeated name (S2) and at the end. Here we
# ask *what* it represents at S2, in **features** of a **sparse autoencoder** (SAE): you will encode by hand, see why
# feature edits keep an error term, find a feature the IOI task uses (patching misses it, an ablation sweep finds
# it), steer it, and read its page over the corpus the SAE was trained on.
#
# The SAE ships with interplab: `ilab.SAE.load("ioi-tiny-sae")`, a TopK SAE on the residual stream entering layer 2,
# with a card of its figures (`interplab/zoo/ioi_tiny_sae/card.json`). Everything runs offline, in seconds.
#
# **How to work through it**, as in 01-04: write your prediction in the box under each question, then run the check;
# replace each `...` and run the check under it. The answers stay closed under Run All: open one (click the bar on its
# left), set `show = True` and run it.

# %%
import torch

import interplab as ilab

lab = ilab.Lab.load("ioi-tiny")
sae = ilab.SAE.load("ioi-tiny-sae")
clean = "When Mary and John went to the store, John gave a drink to"
corrupt = "When Mary and John went to the store, Mary gave a drink to"
answer, wrong = " Mary", " John"

lab.check_pair(clean, corrupt)
tokens = lab.to_str_tokens(clean)
S2 = next(i for i, (a, b) in enumerate(zip(tokens, lab.to_str_tokens(corrupt))) if a != b)  # the repeated name
END = len(tokens) - 1
metric = ilab.logit_diff(answer, wrong)
bound = metric.bind(lab.token_id)


def logit_diff(prompt=clean, edits=()):
    """logit(answer) - logit(wrong) at the last position of `prompt`, run with `edits`."""
    return float(bound(lab.run(prompt, edits=list(edits)).last_logits))


site = (sae.site, sae.layer)  # where the SAE reads: ("resid_pre", 2)
x = lab.run(clean, cache=[site]).cache[site]  # [1, positions, d_model]: the residual stream the SAE reads
clean_ld = logit_diff()
print(sae)
print(f"S2 = position {S2} ({tokens[S2]!r}), END = position {END}; clean logit diff {clean_ld:+.2f}")

# %% [markdown]
# ## 1. What an SAE is
#
# An SAE reads one activation `x` (here `d_model` numbers per position) and writes it as a sum of a few **features**:
#
# - **encode**: `f = act(W_enc x + b_enc)`, one number per feature (`d_sae` of them). `act` keeps most at 0: a ReLU,
#   a threshold (JumpReLU), or, for this **TopK** SAE, only the `k` largest at each position. (An SAE saved with
#   SAELens's `apply_b_dec_to_input`, as this one is, subtracts `b_dec` from `x` first.)
# - **decode**: `x_hat = f W_dec + b_dec`: each active feature adds its activation times its **decoder direction**, a
#   row of `W_dec`.
#
# It is **overcomplete** (more features than `d_model`) and **sparse** (few active at once), trained so that `x_hat`
# is close to `x`. The cell prints the sizes, the active features per position, and the fraction of `x`'s variance
# that `x_hat` explains (FVE).

# %%
f = sae.encode(x)  # [1, positions, d_sae]
x_hat = sae.decode(f)  # [1, positions, d_model]
print(f"d_model = {sae.d_in}, d_sae = {sae.d_sae} features ({sae.d_sae / sae.d_in:.0f}x overcomplete), k = {sae.k}")
print("active features at each position:", (f > 0).sum(-1)[0].tolist())
fve = 1 - float((x - x_hat).pow(2).sum() / (x - x.mean(1, keepdim=True)).pow(2).sum())
print(f"fraction of variance explained on this prompt: {fve:.3f}")
assert (f > 0).sum(-1).max() <= sae.k and sae.d_sae > sae.d_in

# %% [markdown]
# ## 2. Why the error term matters
#
# To ask what a feature *does*, we edit it and run the rest of the model on the result. The reconstruction is not
# perfect (the FVE above is below 1), so the site's value is rebuilt as
#
#     decode(f') + (x - decode(f))
#
# where `f'` are the edited features and `x - decode(f)` is the **error term** of the same run, what the SAE misses.
# interplab does this for every feature edit (`ilab.zero(sae, feature=i)`, `ilab.steer(sae, ...)`, ...), as the sparse
# feature circuits paper does (Marks et al. 2024). An edit that changes no feature then gives back `x` itself.
#
# **Predict:** (a) the splice with nothing edited: the model's own logits exactly, or close? (b) Replace `x` by the
# reconstruction `decode(encode(x))` alone, no error term: the FVE is high, so does the logit difference stay where it
# is, move a little, or move a lot?

# %%
own = lab.run(clean).last_logits
spliced = lab.run(clean, edits=[ilab.scale(sae, 1.0, feature=0)]).last_logits  # a feature edit that changes nothing
gap = float((spliced - own).abs().max())
print(f"(a) splice with nothing edited: largest logit difference from the model's own {gap:.1e}")
recon_ld = logit_diff(edits=[ilab.set_value("resid_pre", sae.layer, value=x_hat)])  # x replaced by x_hat alone
print(f"(b) logit diff: the model's own {clean_ld:+.2f}, with x replaced by decode(encode(x)) {recon_ld:+.2f}")

# %%
# ANSWER
assert gap <= 1e-5
print(f"without the error term the logit difference moves by {recon_ld - clean_ld:+.2f} "
      f"({abs(recon_ld - clean_ld) / abs(clean_ld):.0%} of it), though the FVE is {fve:.3f}")
assert abs(recon_ld - clean_ld) > 0.05 * abs(clean_ld)
# (a) Exactly the model's logits (up to float rounding): decode(f) + (x - decode(f)) is x.
# (b) It moves, by the share printed: the few percent of variance the SAE misses is not noise the model ignores.
# Without the error term, an ablation's effect would mix the feature's effect with the reconstruction's; with it,
# the only change to the model is the edited feature's own: df * its decoder direction.

# %% [markdown]
# ## Write it yourself: encode by hand
#
# Write the encoder of this TopK SAE from its weights: `sae.W_enc` `[d_model, d_sae]`, `sae.b_enc` `[d_sae]`,
# `sae.b_dec` `[d_model]`, `sae.k`. In SAELens's convention (`sae.apply_b_dec_to_input` is `True` for this one):
#
# 1. `pre = (x - b_dec) @ W_enc + b_enc`, the pre-activations `[..., d_sae]`;
# 2. at each position keep the `k` largest pre-activations (`torch.topk(..., dim=-1)`), ReLU them, and set every
#    other feature to 0 (`torch.zeros_like(pre).scatter(-1, indices, values)` puts values back at their indices).
#
# The check compares yours with `sae.encode(x)` and with `lab.feature_acts(clean, sae)`, which runs the model and
# encodes its activation at the SAE's site.

# %%
def my_encode(x):
    # x: [..., d_model] -> [..., d_sae]
    ...


# %%
def check_encode(fn):
    """Your encoder on the clean prompt's activation against the library's."""
    want = sae.encode(x)
    assert torch.allclose(want, lab.feature_acts(clean, sae), atol=1e-5)  # the library agrees with itself
    got = fn(x)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        print(f"not yet: my_encode(x) should return a tensor of shape {tuple(want.shape)} "
              f"(got {type(got).__name__} {tuple(getattr(got, 'shape', ()))})")
        return False
    active = int((got != 0).sum(-1).max())
    if active > sae.k:
        print(f"not yet: {active} features are nonzero at some position; a TopK SAE keeps only the k = {sae.k} "
              "largest pre-activations at each position and sets the rest to 0")
        return False
    if not torch.allclose(got, want, atol=1e-3):
        pre = x @ sae.W_enc + sae.b_enc
        v, i = pre.topk(sae.k, dim=-1)
        no_b_dec = torch.zeros_like(pre).scatter(-1, i, v.relu())
        if torch.allclose(got, no_b_dec, atol=1e-3):
            print("not yet: subtract b_dec from x before W_enc (sae.apply_b_dec_to_input is True)")
        elif torch.equal(got != 0, want != 0):
            print("not yet: the right features are active, their values are not: keep the pre-activations "
                  "(ReLU'd), not their ranks or indices")
        else:
            print("not yet: other features are active than sae.encode's: pre = (x - b_dec) @ W_enc + b_enc, then "
                  "the k largest of pre at each position")
        return False
    print(f"right: {sae.k} of {sae.d_sae} features at each position, equal to sae.encode and lab.feature_acts")
    return True


check_encode(my_encode)


# %%
# ANSWER
def my_encode(x):
    pre = (x - sae.b_dec) @ sae.W_enc + sae.b_enc
    values, indices = pre.topk(sae.k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, indices, values.relu())


assert check_encode(my_encode)
# A ReLU SAE would be pre.relu(); a JumpReLU one pre.relu() * (pre > sae.threshold). The rest of the lab reads
# every architecture through sae.encode and sae.decode.

# %% [markdown]
# ## Exercise 1: which features fire at S2?
#
# `lab.features(prompt, sae)` lists the most active features at each token; `.show()` opens the feature view. Click a
# token: its top features as bars. Click a feature: where it fires on this prompt, its top contexts (other IOI
# prompts, each token shaded by the activation), the tokens its decoder direction raises and lowers, and a steering
# slider and an ablate toggle with the logits they give.
#
# **Predict:** at S2 (the repeated name), will the most active feature be one that fires on that particular name
# wherever it appears, or one that fires only at this position?

# %%
features = lab.features(clean, sae)  # the top 5 at each token, as the view shows them
view = features.show()
view

# %%
print("top features (feature, activation) at S2:", [(i, round(a, 1)) for i, a in features.at(S2)])
s2_top = features.at(S2)[0][0]
acts = lab.feature_acts(clean, sae)[0, :, s2_top]
print(f"feature {s2_top} at every position:", {f"{p}:{t!r}": round(float(a), 1) for p, (t, a) in
                                               enumerate(zip(tokens, acts)) if a > 0})

# %%
# ANSWER
others = float(acts[torch.arange(len(tokens)) != S2].max())
in_corrupt = float(lab.feature_acts(corrupt, sae)[0, S2, s2_top])
print(f"feature {s2_top}: {float(acts[S2]):.1f} at S2, at most {others:.1f} at any other position of this prompt; "
      f"at S2 in the corrupt prompt {in_corrupt:.1f}")
assert float(acts[S2]) > 1.5 * others
# It fires most at S2, more than at the first John (position 3; both printed).
# And it fires as strongly at S2 of the corrupt prompt, where the repeated name is Mary. One prompt says little:
# exercise 3 asks whether the model uses it, exercise 4 looks at a dataset.

# %% [markdown]
# ## Exercise 2: attribution over features x positions
#
# Activation patching works on features as on any site: patch feature `i` at position `p` from the clean run into the
# corrupt run, and see how much of the clean logit difference comes back (normalised: 1 = clean, 0 = corrupt). There
# are `d_sae` x positions cells, so first the **attribution** estimate (one forward and one backward per run, as in
# 01's attribution patching); a click on a cell of the heatmap runs the exact patch of that feature at that position.
#
# **Predict:** will the feature that fires most at S2 (exercise 1) carry the largest attribution at S2? (What differs
# between the clean and the corrupt prompt at S2?)

# %%
attr = lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), metric, method="attribution")
top_at_s2 = attr.values[:, S2].topk(5).indices.tolist()
exact = lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), metric, features=top_at_s2)  # exact: one run each
for row, i in enumerate(top_at_s2):
    print(f"feature {i:3d} at S2: attribution {float(attr.values[i, S2]):+.3f}, exact patch "
          f"{float(exact.values[row, S2]):+.3f}")
print(f"feature {s2_top} (exercise 1) at S2: attribution {float(attr.values[s2_top, S2]):+.3f}")
attr.show()

# %%
# ANSWER
rank = int((attr.values[:, S2] > attr.values[s2_top, S2]).sum())
in_both = [float(lab.feature_acts(p, sae)[0, S2, s2_top]) for p in (clean, corrupt)]
print(f"feature {s2_top} ranks {rank + 1} of {sae.d_sae} at S2; its activation there: clean {in_both[0]:.1f}, "
      f"corrupt {in_both[1]:.1f}")
print("largest |exact - attribution| of the top 5:",
      round(float((exact.values[:, S2] - attr.values[top_at_s2, S2]).abs().max()), 3))
both = lab.feature_acts([clean, corrupt], sae)[:, S2]  # [2, d_sae]: S2's features in each prompt
print("the top 5's activations at S2, clean -> corrupt:",
      {i: f"{float(both[0, i]):.1f} -> {float(both[1, i]):.1f}" for i in top_at_s2})
assert s2_top not in top_at_s2 and float((exact.values[:, S2] - attr.values[top_at_s2, S2]).abs().max()) < 0.05
# No. Patching measures what *differs* between the two prompts. The features on top at S2 are ones whose activation
# changes with the name there (printed), each a small share, and the exact patches confirm the estimates (printed).
# The feature that fires most at S2 fires in both prompts alike, so patching from one into the other cannot see it.
# The corruption decides what a patching experiment can find: to test that feature, remove it instead (exercise 3).

# %% [markdown]
# ## Exercise 3: which feature does the model need at S2? An ablation sweep
#
# Patching asks what *differs* between two prompts. **Ablation** asks what the model loses without a feature, with no
# second prompt: `lab.patch_sweep(clean, None, sae, ("feature", "pos"), metric, baseline="zero")` is exercise 2's
# sweep with no corrupt prompt. Each cell zeroes one feature at one position (`ilab.zero(sae, feature=i, pos=p)`, the
# error term kept), and its value is the change of the logit difference, ablated minus clean (0: no change); a cell
# whose feature is 0 there needs no run. `baseline="mean", reference=prompts` would set each feature to its mean over
# other prompts instead. The heatmap shows the features that matter most at S2; a click on a cell runs that
# ablation and shows its logits.
#
# **Predict:** which feature's ablation at S2 lowers the logit difference most, and by how much of it: a tenth, a
# third, all of it?

# %%
ablation = lab.patch_sweep(clean, None, sae, ("feature", "pos"), metric, baseline="zero")
active = [i for i, a in enumerate(lab.feature_acts(clean, sae)[0, S2].tolist()) if a > 0]
drops = {i: -float(ablation.values[i, S2]) for i in active}  # the sweep's column S2: minus the change
ranked = sorted(drops, key=drops.get, reverse=True)
print(f"{ablation.cells_run} of {ablation.values.numel()} cells ran (the rest zero a feature that is 0 there)")
for i in ranked[:5]:
    print(f"zero feature {i:3d} at S2: logit diff {clean_ld:+.2f} -> {clean_ld - drops[i]:+.2f}")
ioi_feature = ranked[0]
# the heatmap of the ten features whose ablation at S2 costs most, at every position (a click runs that ablation)
lab.patch_sweep(clean, None, sae, ("feature", "pos"), metric, baseline="zero", features=ranked[:10]).show()

# %%
# ANSWER
by_hand = logit_diff(edits=[ilab.zero(sae, feature=ioi_feature, pos=S2)])
print(f"feature {ioi_feature}: drop {drops[ioi_feature]:.2f} ({drops[ioi_feature] / clean_ld:.0%} of the logit "
      f"diff); the runner-up, feature {ranked[1]}: {drops[ranked[1]]:.2f}")
print(f"the sweep's cell: logit diff {clean_ld - drops[ioi_feature]:+.3f}; ilab.zero run by hand: {by_hand:+.3f}")
estimate = lab.patch_sweep(clean, None, sae, ("feature", "pos"), metric, baseline="zero", method="attribution")
by_patching = int((attr.values[:, S2] > attr.values[ioi_feature, S2]).sum()) + 1
by_estimate = int((estimate.values[:, S2] < estimate.values[ioi_feature, S2]).sum()) + 1
print(f"feature {ioi_feature} at S2 ranks {by_patching} of {sae.d_sae} by patching's attribution, {by_estimate} by "
      f"the ablation's attribution estimate, 1 by the exact ablation sweep")
assert ioi_feature == s2_top and drops[ioi_feature] > 1.5 * drops[ranked[1]]
assert abs(by_hand - (clean_ld - drops[ioi_feature])) < 1e-3 and by_patching > 10 and by_estimate > 10
# The feature that fires most at S2 is also the one the model needs most there: zeroing it alone removes the share
# printed, more than any other active feature, and the sweep's cell is the hand-made ilab.zero run. Patching
# (exercise 2) missed it; the exact ablation sweep finds it. Its attribution estimate misses it too (its rank is
# printed): removing a feature that strong is no small step, so a first-order estimate of it is wrong. Estimate to
# choose, then run the cells that matter.

# %%
# Run this whether or not you opened the answer: the next exercises use these names.
ioi_feature = ranked[0]

# %% [markdown]
# ## Exercise 4: one prompt can mislead: the evidence over a dataset of pairs
#
# The evidence the literature asks for is over many prompts: where the feature fires (at S2 and elsewhere), and what
# ablating it does compared with ablating the other features. The cell takes held-out pairs (other names, other
# templates; S2 is where each clean and corrupt prompt differ), and for every feature active at S2 in more than half
# of them, zeroes it at each pair's S2.
#
# **Predict:** will the same feature stand out on the dataset as on our one prompt? Will it fire anywhere but S2?

# %%
data = ilab.zoo.ioi_dataset(64, split="test")
cleans = [d["clean"] for d in data]
s2s = [next(i for i, (a, b) in enumerate(zip(lab.to_str_tokens(d["clean"]), lab.to_str_tokens(d["corrupt"])))
            if a != b) for d in data]
lengths = [len(lab.to_str_tokens(p)) for p in cleans]
pairs_bound = ilab.logit_diff([d["answer"] for d in data], [d["wrong"] for d in data]).bind(lab.token_id)
all_acts = lab.feature_acts(cleans, sae)  # [pairs, positions, d_sae], 0 on padding
rows = torch.arange(len(data))
at_s2 = all_acts[rows, torch.tensor(s2s)]  # [pairs, d_sae]


def ablate_at_s2(feature):
    """Zero `feature` at each pair's own S2: one edit per S2 position counted from the end (pos=-5 is the fifth
    token from the end of each row, whatever its length), on the rows that have S2 there."""
    from_end = [s - n for s, n in zip(s2s, lengths)]
    return [ilab.zero(sae, feature=feature, pos=p, batch=[r for r in range(len(data)) if from_end[r] == p])
            for p in sorted(set(from_end))]


base = pairs_bound(lab.run(cleans).last_logits)
candidates = (at_s2 > 0).float().mean(0).gt(0.5).nonzero().flatten().tolist()
data_drops = {i: float((base - pairs_bound(lab.run(cleans, edits=ablate_at_s2(i)).last_logits)).mean())
              for i in candidates}
data_ranked = sorted(data_drops, key=data_drops.get, reverse=True)
print(f"{len(data)} pairs, S2 at positions {sorted(set(s2s))}; mean logit diff {float(base.mean()):+.2f}")
for i in data_ranked[:4]:
    print(f"zero feature {i:3d} at S2: mean drop {data_drops[i]:.2f}")
elsewhere = torch.ones(all_acts.shape[:2], dtype=torch.bool)
elsewhere[rows, torch.tensor(s2s)] = False
elsewhere &= torch.arange(all_acts.shape[1])[None, :] < torch.tensor(lengths)[:, None]  # real tokens only
a = all_acts[..., ioi_feature]
print(f"feature {ioi_feature}: fires at S2 in {float((a[rows, torch.tensor(s2s)] > 0).float().mean()):.0%} of pairs "
      f"(mean {float(a[rows, torch.tensor(s2s)].mean()):.1f}); at {float((a[elsewhere] > 0).float().mean()):.0%} of "
      f"the other tokens (mean {float(a[elsewhere].mean()):.1f})")

# %%
# ANSWER
import json
from importlib.resources import files

card = json.loads((files("interplab") / "zoo" / "ioi_tiny_sae" / "card.json").read_text())["ioi_feature"]
print(f"the card's IOI feature: {card['feature']} (chosen the same way, by ablation at S2, on {card['pairs']} pairs of "
      f"one template); found here on one prompt: {ioi_feature}; on the dataset: {data_ranked[0]}")
assert ioi_feature == data_ranked[0] == card["feature"]
assert data_drops[data_ranked[0]] > 1.5 * data_drops[data_ranked[1]]
at_s2_share = float((a[rows, torch.tensor(s2s)] > 0).float().mean())
assert at_s2_share > 0.9 and float((a[elsewhere] > 0).float().mean()) < 0.3
# Yes: on held-out pairs it fires at S2 in (nearly) every pair and on few other tokens, and ablating it at S2 costs
# more than ablating any other feature, by the margin printed. That is the kind of evidence a feature claim needs:
# where it fires, over a dataset, and a causal effect compared with the alternatives.

# %% [markdown]
# ## Exercise 5: steering the feature
#
# `ilab.steer(sae, feature=i, alpha=a, pos=S2)` adds `a` times the feature's decoder direction at S2 (the site's value
# becomes decode(f with feature i raised by a) + error). With `a` equal to minus the feature's activation there, the
# feature is at 0.
#
# **Predict:** steering with `a` = minus its activation at S2: the same logit difference as zeroing it, or not? With
# twice that (the feature pushed below 0)? With plus its activation (the feature doubled)?

# %%
act_s2 = float(lab.feature_acts(clean, sae)[0, S2, ioi_feature])
ablated = logit_diff(edits=[ilab.zero(sae, feature=ioi_feature, pos=S2)])
steered = {m: logit_diff(edits=[ilab.steer(sae, feature=ioi_feature, alpha=m * act_s2, pos=S2)])
           for m in (-2, -1, 0, 1, 2)}
print(f"feature {ioi_feature} at S2: activation {act_s2:.1f}; zeroed: logit diff {ablated:+.2f}")
for m, v in steered.items():
    print(f"steered at S2 by alpha = {m:+d} x {act_s2:.1f}: logit diff {v:+.2f}")

# %%
# ANSWER
assert abs(steered[-1] - ablated) < 1e-3 and steered[-2] < steered[-1] < clean_ld and steered[1] <= clean_ld
# -1 x the activation is the ablation exactly (the same change of the site: minus the activation times the
# direction). Twice that lowers the logit difference further. Doubling the feature does not raise it (printed): the
# model already reads enough of it at its usual size; more of a feature is not more of the behaviour.
print({m: round(v - clean_ld, 2) for m, v in steered.items()})

# %% [markdown]
# The feature view steers and ablates too: `lab.feature(sae, i).show(prompt)` opens it with feature `i` selected; its
# slider adds `alpha` times the decoder direction at every position, its toggle zeroes the feature at every position,
# and the bars show the logits that gives.

# %%
steer_view = lab.feature(sae, ioi_feature).show(clean, metric=metric, alpha_range=(-2 * act_s2, 2 * act_s2))
steer_view

# %% [markdown]
# ## Caveats
#
# - **The reconstruction is not perfect**: the FVE (printed below) is below 1, and section 2 showed that the missing
#   part moves the logit difference. Feature edits keep the error term for that reason.
# - **A feature's label is a hypothesis.** "Fires at the repeated name" is what we saw on IOI prompts; the cell below
#   tests it on a prompt where nothing is repeated.
# - **The SAE sits at one site**, the residual stream entering layer 2. What reads the feature in layers 2 and 3, and
#   what made it in layers 0 and 1, other sites describe (notebooks 01 and 04), or other SAEs.
#
# **Predict:** on *"When Mary and John went to the store, Tom gave a drink to"* (the second name is new), will the
# feature fire at that name, and how strongly compared with the repeated *John*?

# %%
import json
from importlib.resources import files

card_all = json.loads((files("interplab") / "zoo" / "ioi_tiny_sae" / "card.json").read_text())
print(f"FVE: this prompt {fve:.3f}; the card's {card_all['documents']} held-out documents "
      f"{card_all['fraction_of_variance_explained']:.3f}")
new_name = "When Mary and John went to the store, Tom gave a drink to"
lab.check_pair(clean, new_name)
on_new = float(lab.feature_acts(new_name, sae)[0, S2, ioi_feature])
print(f"feature {ioi_feature} at S2: {act_s2:.1f} on 'John' (repeated), {on_new:.1f} on 'Tom' (new)")

# %%
# ANSWER
assert on_new > 0.5 * act_s2
# It fires about as strongly on a name that is *not* repeated. So "repeated name" is the wrong label: on this evidence
# it is closer to "a name in the second clause's subject slot", which in IOI prompts is S2. The model uses it there
# (exercises 3 and 4); what it means in general is a hypothesis to test on more prompts (the top contexts).


# %% [markdown]
# ## Exercise 6: the feature's page over its training corpus
#
# A label read off IOI prompts is a hypothesis; the feature's page over the corpus the SAE was trained on tests it,
# as Neuronpedia's and sae-dashboard's pages do. `feature_stats(lab, None, sae)` reads the statistics that ship with
# the SAE (pass a list of documents instead of None to compute them for another corpus; they are cached on disk):
# for every feature its **density** (the share of the corpus's tokens it fires on), its activation histogram, its
# top examples, and examples drawn from each band of activation down to the weakest firing.
#
# **Predict:** on what share of the corpus's tokens does the feature fire: under one in a hundred, a few in a
# hundred, or more than one in ten? Are its weakest examples names too?

# %%
from interplab.analyses.feature_stats import feature_stats

stats = feature_stats(lab, None, sae)  # shipped with the SAE: over its own training corpus
page = stats.feature(ioi_feature)
density_rank = int((stats.density > stats.density[ioi_feature]).sum()) + 1
print(f"corpus: {stats.n_docs} documents, {stats.n_tokens} tokens")
print(f"feature {ioi_feature}: fires on {page['density']:.1%} of tokens, density rank {density_rank} of {stats.d} "
      f"(1: the densest); when it fires: mean {page['mean']:.1f}, max {page['max']:.1f}")


def in_context(example):
    """An example's context, its token in [brackets]."""
    tokens = list(example["tokens"])
    tokens[example["at"]] = f"[{tokens[example['at']]}]"
    return "".join(tokens).replace("\n", " ")


for example in page["top"][:3]:
    print(f"top      {example['act']:5.1f}: {in_context(example)}")
for band, examples in enumerate(page["bands"]):
    for example in examples[:2]:
        print(f"band {band}   {example['act']:5.1f}: {in_context(example)}")

# %%
# ANSWER
firing = page["top"] + sum(page["bands"], [])
named = [e for e in firing if e["tokens"][e["at"]][1:2].isupper()]  # " Mary": a capitalised word
weak = page["bands"][0] + page["bands"][1]
print(f"densest features: {stats.dense(0.1)[:5]}")
weak_named = sum(e in named for e in weak)
print(f"{len(named)} of {len(firing)} examples sit on a capitalised word; of the two weakest bands' examples, "
      f"{weak_named} of {len(weak)}")
assert page["density"] > 0.1 and density_rank <= 3
assert all(e in named for e in page["top"]) and 2 * weak_named < len(weak)
# More than one token in ten (printed), one of the densest features of this SAE (its rank printed). So it fires in
# the clean and the corrupt prompt alike, which is why patching could not see it, and a dense feature's label is a
# weak one. Its top examples are all names that open a clause; in its two weakest bands most examples are other
# tokens (printed). The model needs it at S2 (exercises 3 and 4), but "S2 feature" names one use of a feature that
# fires all over the text: read its page before trusting a label.
