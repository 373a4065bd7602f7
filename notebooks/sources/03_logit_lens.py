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
# # Logit lens and attention patterns
#
# The **logit lens** reads each layer's residual stream through the model's final norm and unembedding: what would
# the model predict if it stopped here? Attention patterns show where each head looks.
#
# **After the workshop** (or for a room ahead of schedule): the workshop's core path (docs/teaching/RUN_SHEET.md) runs
# through notebooks 00, 01 and 04; this notebook looks at the same prompt from another side.
#
# **How to work through it: predict, then check.** Write down your prediction *and why you expect it* before you run
# the check. The answer is in the collapsed cell after the check, and it stays closed: Run All and Shift-Enter run it
# without showing anything. Once you have compared, open it (click the bar on its left), change `show = False` to
# `show = True` and run it. Every number the text relies on is printed by a cell.

# %%
import interplab as ilab
from interplab.analyses.lens import logit_lens

lab = ilab.Lab.load("ioi-tiny")
prompt = "When Mary and John went to the store, John gave a drink to"   # IO = Mary, S = John (ABBA)
swapped = "When John and Mary went to the store, John gave a drink to"  # the intro's order swapped (BABA)
tokens = lab.to_str_tokens(prompt)
END = len(tokens) - 1
FIRST, SECOND = tokens.index(" Mary"), tokens.index(" John")  # the intro's two name slots
S2 = END - tokens[::-1].index(" John")                         # the repeated name
mary, john = lab.token_id(" Mary"), lab.token_id(" John")
print(f"intro names at positions {FIRST} and {SECOND}, S2 at {S2}, END at {END}")

# %% [markdown]
# ## Exercise 1 (after the workshop): what does the end predict, layer by layer?
#
# **Predict** (with your reasoning): after layer 0 (before any head could have moved what S2 means to the end), which
# name will the final position predict, if any? After which layer is ' Mary' on top, and when near-certain? If you
# did notebook 01, its exercise 4 (what a layer-0 head at the end can see) is a clue.

# %%
lab.lens(prompt)  # hover a cell for its top-5

# %%
res = logit_lens(lab, prompt)
for layer in range(res.n_layers):
    print(f"after layer {layer}: top {res.top_tokens[layer][-1][0]!r}, p(' Mary') = {res.prob_of(mary)[layer, -1]:.3f}, "
          f"p(' John') = {res.prob_of(john)[layer, -1]:.3f}")

# %%
# ANSWER
first_mary = next(layer for layer in range(res.n_layers) if res.top_tokens[layer][-1][0] == " Mary")
print(f"after layer 0 the end predicts {res.top_tokens[0][-1][0]!r} (p = {float(res.prob_of(john)[0, -1]):.3f})")
print(f"' Mary' is first on top after layer {first_mary}; p(' Mary') at the end: {res.prob_of(mary)[-1, -1]:.3f}")
# After layer 0 the end predicts ' John', the repeated name, the subject (printed): the first layer at the end
# already leans to the name seen twice, the wrong answer. After the heads that read S2 from the end, the prediction
# flips to ' Mary' (printed), and the later layers make it near-certain.
# Earlier positions predict ordinary continuations (see the widget).
assert res.top_tokens[0][-1][0] == " John" and 0 < first_mary < res.n_layers - 1
assert res.prob_of(mary)[-1, -1] > 0.5


# %% [markdown]
# ## Write it yourself (after the workshop): the lens
#
# The logit lens reads the residual stream after a layer as if it were the last: the model's **final LayerNorm**, then
# its **unembedding**. In ioi-tiny (a GPT-2) they are the modules `lab.model.transformer.ln_f` and `lab.model.lm_head`.
# Write `my_lens(resid)`: `resid` is the residual stream after one layer at the last position, a `[d_model]` tensor;
# return the `[vocab]` logits. The check compares your lens with the library's at every layer.

# %%
def my_lens(resid):
    # the final LayerNorm, then the unembedding
    ...


# %%
import torch


def lens_hint(got, resid, layer):
    """What a lens that is not yet right most likely missed."""
    vocab = lab.model.lm_head.out_features
    if got.shape != (vocab,):
        return (f"your lens returns shape {tuple(got.shape)}; the logits have shape ({vocab},): the unembedding "
                f"lab.model.lm_head maps the {resid.shape[-1]} numbers of the residual stream to one per token")
    with torch.no_grad():
        unnormed = lab.model.lm_head(resid).float().cpu()
    if torch.allclose(got, unnormed, atol=1e-3):
        return "that is the unembedding without the final LayerNorm: apply lab.model.transformer.ln_f first"
    if got.min() >= 0 and abs(float(got.sum()) - 1) < 1e-3:
        return "those look like probabilities: return the logits (the check applies the softmax itself)"
    return (f"your top token is {lab.tokenizer.decode([int(got.argmax())])!r}, the library's "
            f"{res.top_tokens[layer][-1][0]!r}; the lens is two modules, in order: the final LayerNorm "
            "(lab.model.transformer.ln_f), then the unembedding (lab.model.lm_head)")


def check_lens(fn):
    """Compare fn's next-token probabilities with the library's lens after every layer, at the last position."""
    run = lab.run(prompt, cache=["resid_post"])
    for layer in range(res.n_layers):
        with torch.no_grad():
            got = fn(run.cache["resid_post", layer][0, -1])
        if got is None:
            print("not yet: my_lens returns nothing; write it above and run both cells again")
            return False
        got = torch.as_tensor(got).float().cpu()  # (the lens is on the host; a GPU model's cache is not)
        probs = got.softmax(-1)
        if probs.shape != res.probs[layer, -1].shape or not torch.allclose(probs, res.probs[layer, -1], atol=1e-4):
            print(f"not yet, after layer {layer}: {lens_hint(got, run.cache['resid_post', layer][0, -1], layer)}")
            return False
    print(f"right: your lens gives the library's probabilities after all {res.n_layers} layers")
    return True


check_lens(my_lens)


# %%
# ANSWER
def my_lens(resid):
    return lab.model.lm_head(lab.model.transformer.ln_f(resid))


assert check_lens(my_lens)

# %% [markdown]
# ## Exercise 2 (after the workshop): where do the heads look from the end?
#
# Pick a layer and head in the widget: queries on the vertical axis, keys on the horizontal. It opens on the last
# layer's head that attends most from the end to a name (the cell chooses it).
#
# **Predict:** from the final position, which heads look at a name, and at which one: the first intro name, the second,
# or the repeated name S2? Think about what each layer has to do (notebook 01 named the roles).

# %%
run = lab.run(prompt, cache=["pattern"])


def att(run, layer, head, key):
    return float(run.cache["pattern", layer][0, head, END, key])


names = {"first intro name": FIRST, "second intro name": SECOND, "S2": S2}
last = lab.n_layers - 1
opening = max(range(lab.n_heads), key=lambda h: max(att(run, last, h, k) for k in names.values()))
print(f"the widget opens on L{last}H{opening}")
lab.attention(prompt, layer=last, head=opening)

# %%
print("head   " + "  ".join(f"END->{label}" for label in names))
for layer in range(lab.n_layers):
    for head in range(lab.n_heads):
        print(f"L{layer}H{head}   " + "  ".join(f"{att(run, layer, head, k):>{len(label) + 5}.2f}"
                                          for label, k in names.items()))

# %%
# ANSWER
for layer in range(lab.n_layers):
    on = {f"L{layer}H{h}": max(names, key=lambda label: att(run, layer, h, names[label])) for h in range(lab.n_heads)
          if max(att(run, layer, h, k) for k in names.values()) > 0.5}
    print(f"layer {layer}, heads with > 0.5 on one name, and which:", on)
# Layer 0 spreads its attention over the names, never mostly on S2. Later layers have two kinds of heads: some look
# at S2, where the repeated name stands (notebook 01's END heads); others put almost all their attention
# on *one* intro name each, in the last layer too. Which one, and why?
later = [(layer, h) for layer in range(1, lab.n_layers) for h in range(lab.n_heads)]
assert all(att(run, 0, h, S2) < 0.5 for h in range(lab.n_heads))
assert any(att(run, *h, S2) > 0.5 for h in later)
assert any(max(att(run, *h, FIRST), att(run, *h, SECOND)) > 0.9 for h in later)

# %%
# Run this whether or not you opened the answer: the next exercises use these names.
later = [(layer, h) for layer in range(1, lab.n_layers) for h in range(lab.n_heads)]  # the heads after layer 0

# %% [markdown]
# ## Exercise 3 (after the workshop): heads on one intro name, answer or position?
#
# The heads after layer 0 that look from the end at one intro name could read the *answer* (the name that is not
# repeated), or read a *slot* of the intro (the first name, or the second) whatever it holds. Swap the order of the
# intro, *"When John and Mary went to the store, John gave a drink to"*: the answer is still Mary, but it now sits in
# the second slot.
#
# **Predict:** for each of these heads, will its attention follow Mary into the second slot, or stay on its slot?

# %%
run_swapped = lab.run(swapped, cache=["pattern"])
slot_heads = [h for h in later if max(att(run, *h, k) for k in (FIRST, SECOND)) > 0.5]
print(f"head     {'ABBA (Mary first)':>20}     {'BABA (Mary second)':>20}")
for h in slot_heads:
    cells = [f"first {att(r, *h, FIRST):.2f} second {att(r, *h, SECOND):.2f}" for r in (run, run_swapped)]
    print(f"L{h[0]}H{h[1]}   " + "     ".join(cells))

# %%
# ANSWER
slot = {h: ("first" if att(run, *h, FIRST) > att(run, *h, SECOND) else "second") for h in slot_heads}
print("each head's slot, in both orders:", {f"L{h[0]}H{h[1]}": s for h, s in slot.items()})
# They stay: each head attends to one *position* of the intro, the first or the second name, in both orders
# (printed). Attention says where a head reads, not what it writes: whether these heads copy the name they read
# would take their OV circuit (or their direct effect on each name) to show. What their attention does show is that
# they cannot be choosing between the names by where they look: they look at a slot, whichever name fills it.
# Notebook 01 (exercise 6) finds the logit difference written by the heads that look at S2 from the end.
# (GPT-2's name movers instead attend to the IO itself.)
for h in slot_heads:
    k = FIRST if slot[h] == "first" else SECOND
    assert att(run, *h, k) > 0.8 and att(run_swapped, *h, k) > 0.8
assert {"first", "second"} <= set(slot.values())
