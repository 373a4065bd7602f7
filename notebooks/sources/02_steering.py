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
# # Steering with a contrast-pair vector
#
# A **steering vector** is a direction in the residual stream. The classic recipe: the mean activation on prompts
# with a property minus the mean on prompts without it. Adding `alpha * v` at one layer pushes the model towards
# the property; **projecting it out** tests whether the model *uses* that direction. Each exercise below has a
# surprise in it, if you predict first.
#
# **Optional: after the workshop.** This notebook steers another behaviour than the IOI task of notebooks 01, 03 and
# 04: the capital of a country. Steering is a second method, taught here on the simplest contrast the model knows,
# where "more France" has one right answer to check against; an IOI quantity (which name is the subject) has no
# single direction to add at one position, and finding one is a research question of its own. The workshop's core
# path (docs/teaching/RUN_SHEET.md) leaves this notebook out.
#
# **How to work through it: predict, then check.** Write down your prediction *and why you expect it* before you run
# the check. The answer is in the collapsed cell after the check, and it stays closed: Run All and Shift-Enter run it
# without showing anything. Once you have compared, open it (click the bar on its left), change `show = False` to
# `show = True` and run it. Every number the text relies on is printed by a cell.

# %%
import torch

import interplab as ilab

lab = ilab.Lab.load("ioi-tiny")
positive = ["The capital of France is", "The capital city of France is"]
negative = ["The capital of Spain is", "The capital city of Spain is"]
layer = lab.n_layers // 2
v = ilab.analyses.vectors.diff_of_means(lab, positive, negative, site="resid_post", layer=layer)  # at the last position
print(f"steering at resid_post {layer}; vector norm {float(v.norm()):.1f}, "
      f"typical residual norm there {lab.residual_norm('resid_post', layer):.1f}")

spain, france, italy = "The capital of Spain is", "The capital of France is", "The capital of Italy is"
paris = lab.token_id(" Paris")


def top(prompt, edits=(), k=3):
    """The k most likely next tokens, with their probabilities."""
    probs = lab.run(prompt, edits=list(edits)).last_logits[0].softmax(-1)
    best = probs.topk(k)
    return [(lab.tokenizer.decode([i]), round(p, 3)) for p, i in zip(best.values.tolist(), best.indices.tolist())]


def p_paris(prompt, edits=()):
    return float(lab.run(prompt, edits=list(edits)).last_logits[0].softmax(-1)[paris])


for prompt in (spain, france, italy):
    print(f"{prompt!r:28} -> {top(prompt)}")


# %% [markdown]
# ## Write it yourself (after the workshop): the steering vector
#
# `v` above is the mean residual stream of the positive prompts minus that of the negative ones, at `resid_post` of
# `layer`, at each prompt's last position. Build it yourself from cached activations: `lab.run(prompt,
# cache=[("resid_post", layer)]).cache["resid_post", layer]` is a tensor `[1, positions, d_model]` for one prompt (run
# them one at a time: they differ in length). The check compares your vector with `v`.

# %%
def my_vector(positive, negative):
    # mean over the positive prompts minus mean over the negative ones, resid_post of `layer`, last position
    ...


# %%
def check_vector(fn):
    """Compare fn's vector with the library's diff_of_means on the same prompts."""
    got = fn(positive, negative)
    if got is None:
        print("not yet: my_vector returns nothing; write it above and run both cells again")
        return False
    got = torch.as_tensor(got).float().flatten()
    if got.shape != v.shape or not torch.allclose(got, v, atol=1e-4):
        print(f"not yet: your vector has shape {tuple(got.shape)} and norm {float(got.norm()):.2f}; v has "
              f"{tuple(v.shape)} and {float(v.norm()):.2f}")
        return False
    print(f"right: your vector is v (norm {float(got.norm()):.2f})")
    return True


check_vector(my_vector)


# %%
# ANSWER
def my_vector(positive, negative):
    def mean_last(prompts):
        return torch.stack([lab.run(p, cache=[("resid_post", layer)]).cache["resid_post", layer][0, -1]
                            for p in prompts]).mean(0)

    return mean_last(positive) - mean_last(negative)


assert check_vector(my_vector)

# %% [markdown]
# ## Exercise 1 (after the workshop): steer Spain towards France
#
# `ilab.steer("resid_post", layer, v, alpha=alpha, pos=-1)` adds `alpha * v` to the last position's residual stream.
#
# **Predict** (with your reasoning): on *"The capital of Spain is"*, at which alpha does ' Paris' take the top? What
# is the Spain prompt's activation plus exactly `1 * v`, given how `v` was made? Would you get something different by
# copying the France prompt's activation in its place (`ilab.patch`)? Drag the slider to check.

# %%
panel = lab.steering(spain, positive, negative, site="resid_post", layer=layer)
panel

# %%
for alpha in (0.0, 0.5, 1.0, 1.5):
    print(f"alpha {alpha}: {top(spain, [ilab.steer('resid_post', layer, v, alpha=alpha, pos=-1)])}")
france_run = lab.run(france, cache=[("resid_post", layer)])
print("France's activation patched in:", top(spain, [ilab.patch("resid_post", layer, pos=-1, source=france_run)]))
spain_act = lab.run(spain, cache=[("resid_post", layer)]).cache["resid_post", layer][0, -1]
france_act = france_run.cache["resid_post", layer][0, -1]
gap = float((spain_act + v - france_act).norm())
print(f"|Spain's activation + v - France's activation| = {gap:.1f}, against |v| = {float(v.norm()):.1f}")

# %%
# ANSWER
# v is the mean of (France - Spain) over two templates, and the template's share of each activation is the same
# for both countries: so Spain's activation + 1 * v is almost exactly France's activation (the gap printed is small
# next to |v|). At alpha 1 the steer *is* an activation patch from the France prompt, and gives the same
# distribution (printed). Below 1 the model is in between; from about 1, ' Paris' is on top.
assert gap < 0.2 * float(v.norm())
steer_1 = p_paris(spain, [ilab.steer("resid_post", layer, v, alpha=1.0, pos=-1)])
patched = p_paris(spain, [ilab.patch("resid_post", layer, pos=-1, source=france_run)])
assert abs(steer_1 - patched) < 0.05 and top(spain, [ilab.steer("resid_post", layer, v, alpha=1.0, pos=-1)])[0][0] == " Paris"

# %% [markdown]
# ## Exercise 2 (after the workshop): more is better?
#
# **Predict:** if alpha 1 turns Spain into France, will alpha 6 make ' Paris' *more* likely than alpha 1.5? And on the
# France prompt itself, `ilab.project(site, layer, v, coeff=10)` multiplies the component along `v` by ten (coeff 1
# leaves the activation as it is): more ' Paris', or less?

# %%
for alpha in (1.0, 1.5, 3.0, 6.0):
    print(f"Spain steered, alpha {alpha}: p(' Paris') = "
          f"{p_paris(spain, [ilab.steer('resid_post', layer, v, alpha=alpha, pos=-1)]):.3f}")
for coeff in (1.0, 3.0, 10.0):
    print(f"France, coeff {coeff}: {top(france, [ilab.project('resid_post', layer, v, coeff=coeff)])}")

# %%
# ANSWER
# Less, both times. A little past the point where the activation looks like France's, ' Paris' may still gain a
# little (printed), but pushing further moves the activation off the ones the model was trained on: the later
# layers were never shown such a residual stream, and probability leaks to other tokens (printed). A steering
# vector has a useful range; size alpha against the residual norm (printed at the top) and check the output, not
# the direction.
alphas = {a: p_paris(spain, [ilab.steer("resid_post", layer, v, alpha=a, pos=-1)]) for a in (1.5, 6.0)}
coeffs = {c: p_paris(france, [ilab.project("resid_post", layer, v, coeff=c)]) for c in (1.0, 10.0)}
assert alphas[6.0] < alphas[1.5] and coeffs[10.0] < coeffs[1.0]

# %% [markdown]
# ## Exercise 3 (after the workshop): the same vector on Italy
#
# **Predict:** steer *"The capital of Italy is"* with the same `v` at alpha 1. Does it say ' Paris'? What is Italy's
# activation + v, written as a sum of the activations you know?

# %%
print("Italy:           ", top(italy))
print("Italy + 1 * v:   ", top(italy, [ilab.steer("resid_post", layer, v, alpha=1.0, pos=-1)]))

# %%
# ANSWER
at_1 = [ilab.steer("resid_post", layer, v, alpha=1.0, pos=-1)]
steered = {prompt: p_paris(prompt, at_1) for prompt in (spain, italy)}
print("p(' Paris') at alpha 1:", {prompt: round(p, 3) for prompt, p in steered.items()})
# Not on this checkpoint: Italy's own capital keeps the top, and ' Paris' only rises from next to nothing, far
# below where it gets on Spain (printed). Italy + v = Italy + France - Spain: it adds France and subtracts a Spain
# that was never there. For Spain the subtraction cancelled exactly, and the result *is* France's activation
# (exercise 1); for Italy it lands on no prompt's activation, and the France part of v is not strong enough to win
# there (try a larger alpha). Whether a contrast vector, a *difference between two things*, also moves a third
# thing is a question for each model: on another checkpoint the same recipe can answer something else (an earlier
# ioi-tiny said ' Paris' here). Check it, as here, before calling v "the France direction".
assert top(italy, at_1)[0][0] == top(italy)[0][0] == " Rome" and p_paris(italy) < steered[italy]
assert steered[italy] < steered[spain]

# %% [markdown]
# ## Exercise 4 (after the workshop): does the model use this direction? Project it out
#
# `ilab.project(site, layer, v, coeff=0)` removes the component along `v` from every position. If `v` were "the
# country" direction, removing it should leave the model unsure which capital to name.
#
# **Predict:** what will the model say on the France prompt with `v` projected out? On the Spain prompt? On Italy?
# (Hint: the cell also prints how far along `v` each prompt's activation sits, in units of |v|.)

# %%
unit = v / v.norm()
for prompt in (france, spain, italy):
    act = lab.run(prompt, cache=[("resid_post", layer)]).cache["resid_post", layer][0, -1]
    print(f"{prompt!r:28} along v: {float(act @ unit) / float(v.norm()):+.2f} |v|   "
          f"projected out: {top(prompt, [ilab.project('resid_post', layer, v, coeff=0.0)])}")

# %%
# ANSWER
# France and Spain now give the same answer, with the same probabilities (printed); Italy barely changes. France
# sits about one |v| further along v than Spain; removing the direction sets every prompt's coordinate to 0, a
# point between the two, so both land in the same place, and whichever capital wins there is a default of the
# model, not "no country". So projecting out does not remove "country": it removes the France-vs-Spain difference,
# and falls back to a point of the contrast that neither prompt chose. What an ablation tells you depends on the
# direction *and* on where the ablation moves the activation.
france_out = top(france, [ilab.project("resid_post", layer, v, coeff=0.0)])
spain_out = top(spain, [ilab.project("resid_post", layer, v, coeff=0.0)])
assert france_out[0][0] == spain_out[0][0] in (" Paris", " Madrid") and abs(france_out[0][1] - spain_out[0][1]) < 0.05
assert top(italy, [ilab.project("resid_post", layer, v, coeff=0.0)])[0][0] == top(italy)[0][0]

# %% [markdown]
# ## Generation with the steer on at every step

# %%
plain = lab.generate(spain, max_new_tokens=8)
steered = lab.generate(spain, [ilab.steer("resid_post", layer, v, alpha=1.5)], max_new_tokens=8)
print("plain:  ", plain.text)
print("steered:", steered.text)

# %% [markdown]
# ## Persistent edits
#
# Bind an edit to the model itself: every call — including `model.generate` from other code — runs with it, at the cost of a plain forward hook.

# %%
with lab.edit([ilab.steer("resid_post", layer, v, alpha=1.5)]):
    ids = lab.model.generate(**lab.tokenizer(spain, return_tensors="pt"), max_new_tokens=4, do_sample=False)
print(lab.tokenizer.decode(ids[0]))
print("hooks left:", lab.hooks())
