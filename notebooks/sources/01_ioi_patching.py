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
# # Activation patching on IOI: from heads to a circuit
#
# **Indirect object identification**: in *"When Mary and John went to the store, John gave a drink to"* the next word
# should be **Mary**, the name that is *not* repeated. We ask *where* in the model that answer is computed, by
# **activation patching**: run the model on a *corrupt* prompt (the repeated name swapped, so the answer flips), copy in
# one activation from the *clean* run, and see how much of the clean behaviour comes back. Then we look at the heads
# that matter (where they sit, where they look, what they write) and test whether they carry the behaviour.
#
# **Before you start.** You need Python (functions, lists, dicts), a little PyTorch (indexing a tensor, `torch.allclose`)
# and the idea of a transformer: tokens, layers, attention heads. The words this notebook uses are defined, with a cell
# to run for each, in the primer `00_primer.ipynb` (the workshop's pre-work; do it first if the residual stream, a head's
# query / key / value or the QK and OV circuits are new to you). In short:
#
# - **logit difference**: logit(answer) - logit(wrong name) at the last position; above 0, the model prefers the answer.
# - **denoising**: patch an activation from the clean run into the corrupt run: does this piece bring the answer back
#   (is it *sufficient*)? Most of this notebook denoises.
# - **noising**: patch an activation from the corrupt run into the clean run: does the answer break without it (is it
#   *necessary*)? Exercises 8 and 9.
# - Both are reported **normalised**: 1 = the clean run's logit difference, 0 = the corrupt run's.
#
# The model is `ioi-tiny`, a 4-layer GPT-2 with 4 heads per layer, trained for this task and shipped with interplab:
# everything here runs offline, in seconds. Its circuit is its own, not GPT-2 small's: the heads you find here are
# ioi-tiny's (notebook 04 compares them with the paper's).
#
# **How to work through it: predict, then check.** Every exercise starts with a question. Write down your prediction
# *and why you expect it* before you run anything. Then run the check and compare. The answer is in the collapsed cell
# after the check, and it stays closed: Run All and Shift-Enter run it without showing anything. Once you have compared,
# open it (click the bar on its left), change `show = False` to `show = True` and run it. Every number the text relies
# on is printed by a cell, so the text stays true when the model is retrained.

# %%
import random

import torch

import interplab as ilab
from interplab.zoo import corpus

lab = ilab.Lab.load("ioi-tiny")
clean = "When Mary and John went to the store, John gave a drink to"
corrupt = "When Mary and John went to the store, Mary gave a drink to"
answer, wrong = " Mary", " John"

lab.check_pair(clean, corrupt)          # raises, showing both tokenizations, if the lengths differ
tokens = lab.to_str_tokens(clean)
S2 = next(i for i, (a, b) in enumerate(zip(tokens, lab.to_str_tokens(corrupt))) if a != b)  # the repeated name
END = len(tokens) - 1                                                                         # where it predicts
HEADS = [(layer, head) for layer in range(lab.n_layers) for head in range(lab.n_heads)]
for i, (a, b) in enumerate(zip(tokens, lab.to_str_tokens(corrupt))):
    print(f"{i:2d} {a!r:12} {b!r:12}" + ("   <- S2: differs" if i == S2 else "   <- END" if i == END else ""))


def name(head):
    return f"L{head[0]}H{head[1]}"


def major(scores, share=0.15):
    """The heads carrying at least `share` of the effect on their own, largest first ({head: score})."""
    return sorted((h for h in scores if scores[h] >= share), key=scores.get, reverse=True)


# %% [markdown]
# ## The metric: logit difference
#
# `logit(answer) - logit(wrong)` at the last position: positive means the model prefers the right name. Sweeps report
# it **normalised**: (patched - corrupt) / (clean - corrupt), so 0 = the corrupt run's value, 1 = the clean run's.

# %%
metric = ilab.logit_diff(answer, wrong)
bound = metric.bind(lab.token_id)
clean_run, corrupt_run = lab.run(clean), lab.run(corrupt)
clean_ld, corrupt_ld = float(bound(clean_run.last_logits)), float(bound(corrupt_run.last_logits))
print(f"clean logit diff {clean_ld:+.2f}, corrupt logit diff {corrupt_ld:+.2f}")
assert clean_ld > 0 > corrupt_ld  # the model does the task, and the corruption flips it


def restored(edits, base=corrupt):
    """The normalised logit difference of `base` run with `edits` (1 = clean, 0 = corrupt)."""
    return (float(bound(lab.run(base, edits=edits).last_logits)) - corrupt_ld) / (clean_ld - corrupt_ld)


# %% [markdown]
# ## Write it yourself (after the workshop): the metric
#
# Every number in this notebook is a **logit difference**: the answer's logit minus the wrong name's, at the last
# position. `ilab.logit_diff` computes it for you; write it yourself first. `logits` is a tensor `[rows, vocab]` (one
# row per prompt, the last position's logits); `lab.token_id(" Mary")` is a token's id. Replace the `...` and run the
# check below it: it says *right* or what is off.

# %%
def my_logit_diff(logits):
    # return one number per row: logit(answer) - logit(wrong)
    ...


# %%
def check_metric(fn):
    """Compare fn with the library's metric on the clean and corrupt prompts' last-position logits."""
    logits = lab.run([clean, corrupt]).last_logits
    got, want = fn(logits), bound(logits)
    if got is None:
        print("not yet: my_logit_diff returns nothing; write it above and run both cells again")
        return False
    got = torch.as_tensor(got, dtype=torch.float32).flatten()
    if got.shape != want.shape or not torch.allclose(got, want, atol=1e-4):
        print(f"not yet: got {got.tolist()}, want one value per row: {[round(v, 3) for v in want.tolist()]}")
        return False
    print(f"right: {[round(v, 3) for v in got.tolist()]} (clean, corrupt)")
    return True


check_metric(my_logit_diff)


# %%
# ANSWER
def my_logit_diff(logits):
    return logits[:, lab.token_id(answer)] - logits[:, lab.token_id(wrong)]


assert check_metric(my_logit_diff)

# %% [markdown]
# ## Exercise 1: where does the information travel?
#
# `resid_pre` at layer L and position p is the residual stream entering block L at token p. The sweep patches each
# (layer, position) cell on its own.
#
# **Predict** (with your reasoning): in layer 0, which cells can restore anything at all? (What differs between the two
# runs *before* any block has run?) In the layers between, where will the effect sit? And in the last row, the input
# of the last block: at the final position only, or still partly at S2? (Is there a block left that could move
# information from S2 to the end?)
#
# In the heatmap, click a cell: the patch is applied and the logit panel shows clean / corrupt / patched next-token
# probabilities. **Shift-click** adds cells to the active set, so several patches run *together*; untick an entry to
# switch it off.

# %%
res = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, direction="denoise")
explorer = res.show()
explorer

# %%
# ANSWER
for layer in range(lab.n_layers):
    row = res.values[layer]
    carried = {f"{p}:{tokens[p]!r}": round(float(row[p]), 2) for p in range(len(tokens)) if abs(row[p]) > 0.05}
    print(f"resid_pre {layer}: positions with |value| > 0.05: {carried}")
# Layer 0: only S2 differs between the runs, so only S2 can restore anything, and it restores everything (1.00).
# At layer 1 the effect is still at S2: layer 0 works out *at S2* what this name means. The end holds a little, the
# wrong way (printed: slightly negative): after layer 0 the end already leans to the name at S2, the subject (exercise
# 4 prints the lean), so the clean run's end, patched in, pulls towards the clean subject, against the clean answer.
# At layer 2 it is split between S2 and END: layer-1 heads have already carried part of it to
# the end, layer-2 heads carry the rest (exercise 5). In the last row it is all at END: the last block no longer
# reads S2. Only S2 and END ever matter.
assert torch.isclose(res.values[0, S2], torch.tensor(1.0), atol=1e-3) and res.values[0].abs().sum() < 1.001
assert float(res.values[1, S2]) > 0.9 and min(float(res.values[2, S2]), float(res.values[2, END])) > 0.2
assert -0.2 < float(res.values[1, END]) < 0  # the end's lean after layer 0, the wrong way
assert float(res.values[-1, END]) > 0.9 and abs(float(res.values[-1, S2])) < 0.05
assert set(torch.nonzero(res.values.abs() > 0.05)[:, 1].tolist()) == {S2, END}

# %% [markdown]
# ## Write it yourself: activation patching, one cell, then a row
#
# Every cell of that heatmap is one run: the corrupt prompt, with the residual stream entering block `layer` replaced
# *at one position* by the clean run's. Write that run yourself, with a PyTorch hook, then a whole row of the heatmap.
#
# - `resid_pre` at layer L is the input of block L, the module `lab.model.transformer.h[L]`. A **forward pre-hook** on
#   a module is called as `hook(module, args)` just before the module runs; `args[0]` is the residual stream,
#   `[batch, positions, d_model]`; when the hook returns a tuple, the module runs on that instead of `args`.
# - `clean_cache["resid_pre", L]` (set in the cell below) is the clean run's residual stream entering block L,
#   `[1, positions, d_model]`.
# - The value of a cell is normalised: (patched - corrupt) / (clean - corrupt); `bound(logits)` is the raw logit
#   difference, `clean_ld` and `corrupt_ld` the two runs' (the metric cell above).
#
# Replace the three `...` and run the check below: it compares your cell `(1, S2)`, then your rows, with the sweep's.

# %%
clean_cache = lab.run(clean, cache=["resid_pre"]).cache
corrupt_ids = lab.tokenizer(corrupt, return_tensors="pt")


def my_patch(layer, pos):
    """The corrupt run with the clean resid_pre at (layer, pos) patched in: its normalised logit difference."""
    def hook(module, args):
        resid = args[0].clone()
        ...  # put the clean run's vector at position `pos` into resid
        return (resid, *args[1:])

    handle = lab.model.transformer.h[layer].register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            logits = lab.model(**corrupt_ids).logits[:, -1]  # [1, vocab]: the last position
    finally:
        handle.remove()  # always: a hook left attached would patch every later run of the model too
    ...  # return the normalised logit difference of `logits`


def my_row(layer):
    ...  # my_patch(layer, pos) for every position, as a list


# %%
def check_patching(my_patch, my_row):
    """Your cell (1, S2), then your row of every layer, against lab.patch_sweep's values (res, exercise 1). When they
    differ, it names the slip it recognises: a shape slip inside the hook, the wrong run, the wrong position or
    layer, the wrong normalisation."""
    want = float(res.values[1, S2])
    ran = []  # the token ids each forward of my_patch ran on (read at the embedding, removed after)
    probe = lab.model.transformer.wte.register_forward_pre_hook(lambda module, args: ran.append(args[0][0].tolist()))
    try:
        one = my_patch(1, S2)
    except (RuntimeError, IndexError) as err:  # raised inside the hook, while the model ran
        print(f"not yet: my_patch(1, S2) raised {type(err).__name__}: {str(err).splitlines()[0][:160]}\n"
              f"A shape slip inside the hook: resid and clean_cache['resid_pre', layer] are both {tuple(res_shape)} "
              f"(batch, position, d_model). Take one position from both: resid[:, pos] = "
              f"clean_cache['resid_pre', layer][:, pos], a {tuple(res_shape[::2])} vector.")
        return False
    finally:
        probe.remove()
    if one is None:
        print("not yet: my_patch returns nothing; return the normalised logit difference")
        return False
    one = float(one)
    if abs(one - want) > 1e-3:
        print(f"not yet: my_patch(1, S2) = {one:+.3f}, the sweep's cell {want:+.3f}.", patching_hint(one, ran))
        return False
    print(f"one cell right: my_patch(1, S2) = {one:+.3f}")
    for layer in range(lab.n_layers):
        row = my_row(layer)
        if row is None:
            print("not yet: my_row returns nothing; return [my_patch(layer, pos) for each position]")
            return False
        got = torch.tensor([float(v) for v in row])
        if got.shape != res.values[layer].shape or not torch.allclose(got, res.values[layer], atol=1e-3):
            same = got.numel() > 1 and bool((got - got[0]).abs().max() < 1e-3)
            print(f"not yet: my_row({layer}) = {[round(v, 2) for v in got.tolist()]};",
                  f"the sweep's row: {[round(v, 2) for v in res.values[layer].tolist()]}.",
                  "Every position gives the same value: is `pos`, the argument, the position your hook writes?"
                  if same else f"my_row({layer}) should hold my_patch({layer}, pos) for pos in range({len(tokens)}).")
            return False
    print(f"right: your {lab.n_layers} rows are the sweep's heatmap, cell for cell")
    return True


res_shape = clean_cache["resid_pre", 0].shape
raw = float(res.raw[1, S2])  # the patched run's raw logit difference at (1, S2)
NORMALISATION_SLIPS = {  # what a slip in the last line gives, from the patched run's raw logit difference
    "the raw logit difference": raw,
    "(patched - corrupt) / clean, not / (clean - corrupt)": (raw - corrupt_ld) / clean_ld,
    "patched / clean": raw / clean_ld,
    "(patched - clean) / (clean - corrupt): subtract corrupt_ld, not clean_ld":
        (raw - clean_ld) / (clean_ld - corrupt_ld),
    "the sign flipped: (corrupt - patched), or / (corrupt - clean)": -(raw - corrupt_ld) / (clean_ld - corrupt_ld),
    "(clean - patched) / (clean - corrupt), the noising direction": (clean_ld - raw) / (clean_ld - corrupt_ld),
}


def vector_in_block(block, layer, pos):
    """The normalised cell of the corrupt run with the clean resid_pre of `layer` at `pos` written into `block`."""
    def write(module, args):
        resid = args[0].clone()
        resid[:, pos] = clean_cache["resid_pre", layer][:, pos]
        return (resid, *args[1:])

    handle = lab.model.transformer.h[block].register_forward_pre_hook(write)
    try:
        with torch.no_grad():
            patched = float(bound(lab.model(**corrupt_ids).logits[:, -1]))
    finally:
        handle.remove()
    return (patched - corrupt_ld) / (clean_ld - corrupt_ld)


def patching_hint(one, ran):
    """What a wrong value of my_patch(1, S2) most likely comes from (ran: the token ids of each forward it ran)."""
    if ran and ran[-1] != corrupt_ids["input_ids"][0].tolist():
        return ("Patching the wrong run: the forward ran the clean prompt. Run the corrupt one, "
                "lab.model(**corrupt_ids), and write the clean vector into it.")
    for slip, value in NORMALISATION_SLIPS.items():
        if abs(one - value) < 1e-3:
            return (f"A normalisation slip: that is {slip}. The cell is "
                    f"(patched - corrupt_ld) / (clean_ld - corrupt_ld), with patched = bound(logits).")
    if abs(one - 1) < 1e-3:
        return ("That is the whole clean run: write one position, resid[:, pos], not resid[:] (nor the whole "
                "cached tensor).")
    for block in (0, 2):  # layer 1's clean vector written into the block before or after
        if abs(one - vector_in_block(block, 1, S2)) < 1e-3:
            return (f"The wrong layer: that is layer 1's clean vector written into block {block}. The hook goes on "
                    f"lab.model.transformer.h[layer], the block whose input is resid_pre `layer`.")
    cells = [(layer, pos) for layer in range(lab.n_layers) for pos in range(len(tokens))
             if (layer, pos) != (1, S2) and abs(float(res.values[layer, pos])) > 0.05
             and abs(float(res.values[layer, pos]) - one) < 1e-3]
    if cells:
        layer, pos = cells[0]
        where = f"position {pos} ({tokens[pos]!r})" if layer == 1 else f"layer {layer}"
        return (f"That is the sweep's cell at layer {layer}, position {pos}: the wrong {where.split()[0]}. The hook "
                f"goes on block `layer` (lab.model.transformer.h[layer]) and writes at resid[:, pos], both the "
                f"arguments.")
    if abs(one) < 1e-3:
        return ("Nothing changed: the vector written in is the corrupt run's own, or it goes where the two runs do not "
                "differ. Write clean_cache['resid_pre', layer][:, pos] at resid[:, pos], and return the edited resid.")
    return "Print resid[0, pos, :4] before and after your line, and the raw bound(logits), to see which step is off."


check_patching(my_patch, my_row)


# %%
# ANSWER
def my_patch(layer, pos):
    def hook(module, args):
        resid = args[0].clone()
        resid[:, pos] = clean_cache["resid_pre", layer][:, pos]
        return (resid, *args[1:])

    handle = lab.model.transformer.h[layer].register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            logits = lab.model(**corrupt_ids).logits[:, -1]
    finally:
        handle.remove()
    return (float(bound(logits)) - corrupt_ld) / (clean_ld - corrupt_ld)


def my_row(layer):
    return [my_patch(layer, pos) for pos in range(len(tokens))]


assert check_patching(my_patch, my_row)
# lab.patch_sweep runs this loop for you (batched, and only the cells that can differ: the positions before S2 are
# the same in both runs). interplab's edits are the same hooks: ilab.patch("resid_pre", layer, pos=pos,
# source=clean_run) in lab.run(corrupt, edits=[...]) is the run you just wrote.

# %% [markdown]
# ## Exercise 2 (after the workshop): values above 1, values below 0
#
# Look at the middle layers of the heatmap again (the cell prints the extremes): one cell restores **more than the
# clean run**, another **less than the corrupt run**.
#
# **Predict:** how can patching one activation make the model *more* sure of the answer than the clean run itself?
# What would you get if you patched the S2 and END cells of one layer *together*? (Hint: in those layers, which
# positions still differ between the runs?)

# %%
print(f"largest cell {float(res.values.max()):+.2f}, smallest {float(res.values.min()):+.2f}")
for layer in range(1, lab.n_layers - 1):
    alone = [float(res.values[layer, p]) for p in (S2, END)]
    both = restored([ilab.patch("resid_pre", layer, pos=p, source=clean_run) for p in (S2, END)])
    print(f"resid_pre {layer}: S2 alone {alone[0]:+.2f}, END alone {alone[1]:+.2f}, S2 and END together {both:+.2f}")

# the same joint patch from the heatmap: shift-click selects several cells; code can set the selection too
explorer.heatmap.selected = [[1, S2], [1, END]]
explorer.queue.join()
print("heatmap selection:", [e.describe() for e in explorer.edits], "->",
      {k: round(v, 2) for k, v in explorer.logits.metric["values"].items()})

# %%
# ANSWER
# In these layers the difference between the runs lives at two positions, S2 and END, and the two patches together
# restore the clean run (printed: about 1). One alone can overshoot: patching only S2 leaves END as it was in the
# corrupt run, and the corrupt END holds something that helps the *clean* answer (in the corrupt prompt it leans
# towards the repeated name, which is the clean answer). Patching only END brings in the clean END, which leans
# towards the clean run's repeated name, the wrong answer: below 0. Notebook 03 shows that lean with the logit lens.
# Normalised values are not shares that must lie in [0, 1]: a cell can help more than the whole, and another take
# it back.
for layer in range(1, lab.n_layers - 1):
    both = restored([ilab.patch("resid_pre", layer, pos=p, source=clean_run) for p in (S2, END)])
    assert abs(both - 1) < 0.02
assert res.values.max() > 1 and res.values.min() < 0

# %% [markdown]
# ## Exercise 3: attention or MLP?
#
# The residual stream is a sum: each block adds its attention output (`attn_out`) and its MLP output (`mlp_out`).
#
# **Predict:** at END, which layers' attention outputs will restore the answer, and will any MLP matter there? At S2,
# what must the layer-0 block do (attention, MLP, or both) for the information to be there at layer 1?

# %%
attn = lab.patch_sweep(clean, corrupt, site="attn_out", by=("layer", "pos"), metric=metric, progress=False)
mlp = lab.patch_sweep(clean, corrupt, site="mlp_out", by=("layer", "pos"), metric=metric, progress=False)
for label, sweep in (("attn_out", attn), ("mlp_out ", mlp)):
    for pos, where in ((S2, "S2 "), (END, "END")):
        print(f"{label} at {where}, per layer:", [round(v, 2) for v in sweep.values[:, pos].tolist()])
mlp.figure()

# %%
# ANSWER
late_attn = float(attn.values[1:, END].sum())
print(f"attn_out at END, layers 1 and later together: {late_attn:+.2f}; largest |mlp_out| at END: "
      f"{float(mlp.values[:, END].abs().max()):.2f}")
# At S2, MLP0 restores about everything, and the layer-0 attention a good part of it: MLP0 reads the S2 name (its
# embedding) and what layer-0 attention wrote there, and turns them into what later layers read. Patch the
# attention alone and MLP0 still sees the corrupt name; patch MLP0 and everything it says is clean.
# At END, attention of the later layers carries the answer: those heads move it from S2 to the end. The MLPs at END
# add little for this corruption: the answer is not computed at the end, it is fetched.
assert mlp.values[0, S2] > 0.9 and 0.2 < attn.values[0, S2] < mlp.values[0, S2]
assert late_attn > 0.8 and all(abs(float(mlp.values[layer, END])) < 0.15 for layer in range(lab.n_layers))

# %% [markdown]
# ## Exercise 4: which heads, at which position?
#
# Now split each attention output into its heads (`z`, a head's output before the output projection), and patch
# each head at each position on its own.
#
# **Predict:** which heads will matter at S2, and which at END? Could a layer-0 head help *at END*? (A layer-0 head
# at the end reads the tokens as they enter the model, not what layer 0 works out at S2. Which name would the end
# lean to after layer 0: the one seen twice, or the other?)

# %%
by_pos = lab.patch_sweep(clean, corrupt, site="z", by=("layer", "head", "pos"), metric=metric, progress=False)
head_explorer = by_pos.show()  # columns: head-major (H0 at every position, then H1, ...)
head_explorer

# %%
# ANSWER
print("heads restoring > 0.05 at S2: ", {name(h): round(float(by_pos.values[h][S2]), 2) for h in HEADS
                                          if float(by_pos.values[h][S2]) > 0.05})
print("heads restoring > 0.05 at END:", {name(h): round(float(by_pos.values[h][END]), 2) for h in HEADS
                                          if float(by_pos.values[h][END]) > 0.05})
print("layer-0 heads at END:         ", {name(h): round(float(by_pos.values[h][END]), 2) for h in HEADS if h[0] == 0})
from interplab.analyses.lens import logit_lens  # noqa: E402 (notebook 03's tool, here for one number)

lean = logit_lens(lab, clean)
print(f"clean run, the end after layer 0 (logit lens): top {lean.top_tokens[0][END][0]!r}, "
      f"p({wrong!r}) = {float(lean.prob_of(lab.token_id(wrong))[0, END]):.3f}: the subject, the name seen twice")
elsewhere = float(by_pos.values[..., [p for p in range(len(tokens)) if p not in (S2, END)]].abs().max())
print(f"largest effect anywhere else: {elsewhere:.3f}")
s2_heads = major({h: float(by_pos.values[h][S2]) for h in HEADS})
end_heads = major({h: float(by_pos.values[h][END]) for h in HEADS})
print("S2 heads (>= 0.15 at S2):", [name(h) for h in s2_heads], "| END heads (>= 0.15 at END):",
      [name(h) for h in end_heads])
# Layer-0 heads at S2, later heads at END, nothing at other positions (printed). A layer-0 head at END does not help
# (its cells there are slightly negative, printed): after layer 0 the end already leans to the name seen twice, the
# subject (the logit lens, printed: notebook 03 shows it layer by layer), so the clean run's layer-0 heads at the end
# pull towards the clean subject, the wrong answer. What decides the answer is worked out at S2, the one position where
# the two prompts differ, by layer-0 heads; later heads carry it to the end. From here on the heads that carry at least
# 0.15 on their own are called the **S2 heads** and the **END heads** (printed; notebook 04 uses the same rule). Note
# what this corruption keeps: both prompts repeat a name at S2, so these cells trace *which* name stands there, not how
# the model notices a repeat (a corruption without the repeat would ask that).
assert s2_heads and all(h[0] == 0 for h in s2_heads) and end_heads and all(h[0] > 0 for h in end_heads)
assert elsewhere < 0.05 and all(float(by_pos.values[(0, h)][END]) < 0.05 for h in range(lab.n_heads))
assert lean.top_tokens[0][END][0] == wrong
assert min(float(by_pos.values[(0, h)][END]) for h in range(lab.n_heads)) < 0

# %%
# Run this whether or not you opened the answer: the next exercises use these names.
s2_heads = major({h: float(by_pos.values[h][S2]) for h in HEADS})  # the heads carrying >= 0.15 at S2
end_heads = major({h: float(by_pos.values[h][END]) for h in HEADS})  # ... and at END
print("S2 heads:", [name(h) for h in s2_heads], "| END heads:", [name(h) for h in end_heads])

# %% [markdown]
# ## Exercise 5 (after the workshop): where do these heads look?
#
# **Predict:** from END, which token will the END heads of exercise 4 attend to: the first name (IO), the intro's
# second name (S1) or S2? And the S2 heads, from S2? GPT-2 small has **duplicate-token heads**: from S2 they look back
# at the earlier copy of the same name, S1. Will some head of ioi-tiny do that? And how would you tell a head that
# looks at *the copy of its name* from one that looks at *a place in the sentence* that happens to hold it?

# %%
cached = lab.run(clean, cache=["pattern"])
IO, S1 = tokens.index(answer), tokens.index(wrong)


def attn_prob(head, q, k):
    return float(cached.cache["pattern", head[0]][0, head[1], q, k])


print(f"head    from  ->IO   ->S1   ->{tokens[S2 - 1]!r} (before S2)   ->S2   ->itself")
for h in s2_heads + end_heads:
    q = S2 if h in s2_heads else END
    print(f"{name(h)}   {'S2 ' if q == S2 else 'END'}   {attn_prob(h, q, IO):.2f}   {attn_prob(h, q, S1):.2f}   "
          f"{attn_prob(h, q, S2 - 1):.2f}             {attn_prob(h, q, S2):.2f}   {attn_prob(h, q, q):.2f}")
print("from S2, every head (-> S1, -> IO):", {name(h): (round(attn_prob(h, S2, S1), 2), round(attn_prob(h, S2, IO), 2))
                                              for h in HEADS})
top_end = max(end_heads, key=lambda h: float(by_pos.values[h][END]))
lab.attention(clean, layer=top_end[0], head=top_end[1])  # pick other heads in the view

# %%
# ANSWER
# Swap the intro's order: S1 moves to the first slot. A duplicate-token head follows the copy of its name there.
swapped = "When John and Mary went to the store, John gave a drink to"
swapped_run = lab.run(swapped, cache=["pattern"])
S1_swapped, IO_swapped = lab.to_str_tokens(swapped).index(wrong), lab.to_str_tokens(swapped).index(answer)


def attn_swapped(head, k):
    return float(swapped_run.cache["pattern", head[0]][0, head[1], S2, k])


looks_at_s1 = [h for h in HEADS if attn_prob(h, S2, S1) > 0.4]
print("from S2, > 0.4 on S1 in our prompt:", [name(h) for h in looks_at_s1])
print("the same heads, intro swapped (-> S1, now first; -> IO, now second):",
      {name(h): (round(attn_swapped(h, S1_swapped), 2), round(attn_swapped(h, IO_swapped), 2)) for h in looks_at_s1})
both_orders = max(HEADS, key=lambda h: min(attn_prob(h, S2, S1), attn_swapped(h, S1_swapped)))
print(f"most on S1 in both orders: {name(both_orders)}, {attn_prob(both_orders, S2, S1):.2f} and "
      f"{attn_swapped(both_orders, S1_swapped):.2f}")
print("on S1, the mean of the two orders:",
      {name(h): round((attn_prob(h, S2, S1) + attn_swapped(h, S1_swapped)) / 2, 2) for h in looks_at_s1})
# The END heads look at S2, where the repeated name stands: most of their attention (printed). The S2 heads give S2
# itself more attention than either intro name, but less than half of it (printed): the rest is spread over the
# sentence. In our prompt a later head looks from S2 back at S1, as a duplicate-token head would. Swap the intro and it
# stays on the intro's *second* slot, now holding the other name: it looks at a place, not at the copy of its name. No
# head follows the copy in both orders (printed). Averaged over prompts of both orders, such a head still gives S1 a
# good share of its attention (the mean of the two orders, printed) and looks like a duplicate-token head; only the swap
# tells them apart (the model card's attention table has the two orders apart). Where ioi-tiny notices the repetition,
# attention patterns do not show; patching says only that what decides the answer is written at S2 by layer 0 and MLP0
# (exercises 1, 3, 4).
assert all(attn_prob(h, END, S2) > 0.5 for h in end_heads)
assert all(max(attn_prob(h, S2, IO), attn_prob(h, S2, S1)) < attn_prob(h, S2, S2) < 0.5 for h in s2_heads)
assert looks_at_s1 and all(attn_swapped(h, IO_swapped) > 0.3 > 0.1 > attn_swapped(h, S1_swapped) for h in looks_at_s1)
assert min(attn_prob(both_orders, S2, S1), attn_swapped(both_orders, S1_swapped)) < 0.3

# %% [markdown]
# ## Exercise 6 (after the workshop): who writes the answer directly?
#
# **Direct logit attribution** (`lab.direct_logit_attribution`) splits the last residual stream into what each part
# wrote (embeddings, every head, every MLP) and reads each part through the unembedding; the parts add up to the
# model's logit difference.
#
# **Predict:** do the S2 heads write to the logits directly? Do the END heads, and with which sign on each name: do they
# push the answer up or the repeated name down? (They look at S2, exercise 5.)

# %%
dla_clean = lab.direct_logit_attribution(clean, metric)
print("largest parts at END:", [(part, round(v, 2)) for part, v in dla_clean.top(8)])
print(f"sum of the parts {float(dla_clean.parts_sum()[END]):+.2f} = the logit diff {float(dla_clean.total[END]):+.2f}")
dla_clean.show()

# %%
# ANSWER
push = {who: lab.direct_logit_attribution(clean, ilab.logit_diff(token, " the")) for who, token in
        (("IO", answer), ("S", wrong))}  # each name's logit against a neutral token
for h in s2_heads + end_heads:
    print(f"{name(h)}: direct on the logit diff {float(dla_clean.heads[h][END]):+.2f} | on logit(IO) - logit(the) "
          f"{float(push['IO'].heads[h][END]):+.2f}, on logit(S) - logit(the) {float(push['S'].heads[h][END]):+.2f}")
# The S2 heads write almost nothing directly: their effect reaches the logits through later parts. The END heads
# write most of the logit difference. How, is in the two printed columns (each name's logit against ' the'): the
# layer-1 END heads push *both* names down, the S name by more; the layer-2 ones push IO up and S down. Either way
# S ends far below IO. Against another reference token a single column can change sign (a logit difference is
# always relative to something); the gap IO - S cannot.
first, latest = ([h for h in end_heads if h[0] == layer] for layer in (min(h[0] for h in end_heads),
                                                                        max(h[0] for h in end_heads)))
assert all(abs(float(dla_clean.heads[h][END])) < 0.5 for h in s2_heads)
assert sum(float(dla_clean.heads[h][END]) for h in end_heads) > 0.5 * clean_ld
assert all(float(push["S"].heads[h][END]) < float(push["IO"].heads[h][END]) < 0 for h in first)
assert all(float(push["IO"].heads[h][END]) > 0 > float(push["S"].heads[h][END]) for h in latest)

# %% [markdown]
# ## What these heads are called here, and what this notebook cannot show
#
# The heads are named by *where* patching finds them: the **S2 heads** (layer 0, working at S2) and the **END heads**
# (later layers, working at END). Names for what a head *does*, such as Wang et al.'s duplicate-token, S-inhibition
# and name-mover heads in GPT-2 small, rest on evidence this notebook does not collect: which head's output reaches
# which other head's query, key or value (**path patching**), and what a head's OV circuit writes for a name it reads
# (**copying scores**). Notebook 04 collects that evidence and only then asks which of those roles, if any, these
# heads play.
#
# ## Exercise 7 (after the workshop): is that the circuit? Sufficiency
#
# If the story is right, the S2 heads' outputs at S2 and the END heads' outputs at END should carry the clean behaviour
# into the corrupt run by themselves. In the head x position heatmap above, **shift-click** those cells (each head at
# its position) and watch the logit panel; the cell below does the same from code, as several edits in one run.
#
# **Predict:** patched together, will they restore about 1, less, or more? What about the S2 heads alone, or the
# END heads alone? (Remember exercises 2 and 4: what did the layer-0 heads write at END?)

# %%
T = len(tokens)
circuit = [(h, S2) for h in s2_heads] + [(h, END) for h in end_heads]
head_explorer.heatmap.selected = [[h[0], h[1] * T + pos] for h, pos in circuit]  # head-major columns
head_explorer.queue.join()
print("selected in the heatmap:", len(head_explorer.edits), "edits ->",
      {k: round(v, 2) for k, v in head_explorer.logits.metric["values"].items()})


def patches(cells, source=clean_run):
    return [ilab.patch("z", h[0], pos=pos, head=h[1], source=source) for h, pos in cells]


end0 = [(h, END) for h in s2_heads]
suff = {"S2 heads at S2": restored(patches(circuit[:len(s2_heads)])),
        "END heads at END": restored(patches(circuit[len(s2_heads):])),
        "both": restored(patches(circuit)),
        "both + the S2 heads at END": restored(patches(circuit + end0))}
for label, value in suff.items():
    print(f"denoising {label:26} restores {value:+.2f}")

# %%
# ANSWER
# The END heads alone restore about as much as the S2 and END heads together (printed). That is no evidence for the
# S2 heads: the END heads are the last writers before the logits, so patching their clean output is sufficient
# almost by definition, whatever feeds them. The S2 heads alone restore only part of it: MLP0 at S2 still reads the
# corrupt name's own embedding (exercise 3), so what the END heads find at S2 is only partly clean. Whether the S2
# heads are *needed* is a question for necessity (exercise 8), not for this test.
assert suff["END heads at END"] > 0.9 and 0.1 < suff["S2 heads at S2"] < suff["END heads at END"]
assert suff["both"] > 0.9 and abs(suff["both + the S2 heads at END"] - 1) < 0.1

# %% [markdown]
# ## Exercise 8 (after the workshop): necessity, by noising and by mean ablation
#
# Sufficiency is half the test: is the circuit also *needed*? Two ways to take a part out of the **clean** run:
#
# - **noising**: patch in the *corrupt* run's activation (the part now says "the other name is the subject");
# - **mean ablation**: replace it by its mean over a **reference distribution**, prompts of the same template with
#   other, random names (Wang et al. use such an "ABC" distribution: three different names, no name repeated). The
#   part keeps its average behaviour for this template and loses the information specific to this prompt.
#
# **Predict:** noising the END heads at END, or mean-ablating them: which hurts more, and will either *flip* the
# answer (logit difference below 0)? And mean-ablating every head **outside** the circuit (every head at every position
# except the S2 heads at S2 and the END heads at END): how much of the clean logit difference will survive?

# %%
rng = random.Random(0)
reference = []
for _ in range(40):  # the ABC distribution: the same template (so the same positions), three different names
    a, b, c = rng.sample(corpus.NAMES, 3)
    reference.append(f"When {a} and {b} went to the store, {c} gave a drink to")
assert {len(lab.to_str_tokens(p)) for p in reference} == {len(tokens)}  # one length: a mean per position
ref_run = lab.run(reference)


def ablate(cells):
    return [ilab.mean_ablate("z", h[0], pos=pos, head=h[1], reference=ref_run) for h, pos in cells]


def logit_diff(edits):
    return float(bound(lab.run(clean, edits=edits).last_logits))


others = [(h, [p for p in range(T) if (h, p) not in circuit]) for h in HEADS]  # everything but the circuit's cells
need = {"noising the END heads at END": logit_diff(patches(circuit[len(s2_heads):], source=corrupt_run)),
        "mean-ablating the END heads at END": logit_diff(ablate(circuit[len(s2_heads):])),
        "mean-ablating the S2 heads at S2": logit_diff(ablate(circuit[:len(s2_heads)])),
        "mean-ablating all but the circuit": logit_diff(ablate(others))}
print(f"clean logit diff {clean_ld:+.2f}, corrupt {corrupt_ld:+.2f}")
for label, value in need.items():
    print(f"{label:36} logit diff {value:+.2f}")

# %%
# ANSWER
# Noising puts the *other* subject into the END heads: the answer flips, about as far as the corrupt run (printed).
# Mean ablation removes what the END heads know instead: the logit difference falls below 0 (the lean towards the
# repeated name is left, exercise 2), without the full flip. Mean-ablating the S2 heads at S2 hurts, but the answer
# survives: MLP0 at S2 still reads the name itself (exercise 3), so the S2 heads are a part of the S2 step, not all
# of it. Mean-ablating everything outside the circuit keeps most of the behaviour (printed): the circuit is
# sufficient, in the clean run too. Note what mean ablation leaves alone: the MLPs (recomputed from their ablated
# inputs) and the embeddings.
assert need["noising the END heads at END"] < 0 and need["mean-ablating the END heads at END"] < 0.3 * clean_ld
assert need["mean-ablating the END heads at END"] > need["noising the END heads at END"]
assert 0 < need["mean-ablating the S2 heads at S2"] < 0.8 * clean_ld
assert need["mean-ablating all but the circuit"] > 0.7 * clean_ld

# %% [markdown]
# ## Exercise 9 (after the workshop): noising vs denoising on the residual stream
#
# Denoising patches clean into corrupt (is this cell *sufficient*?); noising patches corrupt into clean (is it
# *necessary*?). Both report on the same scale: 1 = clean behaviour. For noising the plot's scale still says
# "restored", but read it as **"how much of the clean behaviour is left"**: the important cells are the *low* ones.
#
# **Predict:** for the `resid_pre` sweep, how will the noising heatmap relate to the denoising one of exercise 1?
# Think about what one cell of the residual stream holds, in a layer where only that position differs.

# %%
noise = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, direction="noise",
                        progress=False)
gap = (noise.values + res.values - 1).abs()
print(f"largest |noise + denoise - 1| over all cells: {float(gap.max()):.3f}, at layer {int(gap.max(1).values.argmax())}")
noise.figure()

# %%
# ANSWER
# noise ~ 1 - denoise, cell by cell. Where one position holds the whole difference between the runs (layer 0: S2),
# swapping it is swapping everything: denoising restores 1, noising leaves 0. Elsewhere a cell that holds nothing
# different does nothing either way. The small gap (printed) is where S2 and END share the difference. The two can
# disagree where a part is sufficient without being necessary (others back it up, exercise 8); on this residual
# stream they nearly never do.
assert float(gap.max()) < 0.1

# %% [markdown]
# ## Exercise 10 (after the workshop): attribution patching, one forward and one backward pass
#
# Attribution patching estimates every cell at once, from the gradient: the change of the metric if the activation
# moved by (clean - corrupt), to first order.
#
# **Predict:** the corruption flips the answer, a large change through softmax attention, layer norms and MLP0. Will
# the estimate find the right cells? Will it get their *sizes* right?

# %%
attr = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, method="attribution")
corr = float(torch.corrcoef(torch.stack([attr.values.flatten(), res.values.flatten()]))[0, 1])
print(f"correlation of the attribution estimate with exact patching: {corr:.3f}")
for layer, pos in ((0, S2), (1, S2), (2, S2), (lab.n_layers - 1, END)):
    print(f"resid_pre {layer} at {tokens[pos]!r}: exact {float(res.values[layer, pos]):+.2f}, "
          f"estimate {float(attr.values[layer, pos]):+.2f}")
heads_attr = lab.patch_sweep(clean, corrupt, site="z", by=("layer", "head"), metric=metric, method="attribution",
                             progress=False)
heads_exact = lab.patch_sweep(clean, corrupt, site="z", by=("layer", "head"), metric=metric, progress=False)
print("S2 heads' outputs, exact:", {name(h): round(float(heads_exact.values[h]), 2) for h in s2_heads},
      "| estimate:", {name(h): round(float(heads_attr.values[h]), 2) for h in s2_heads})

# %%
# ANSWER
# A high correlation: the estimate lights up the same cells (S2 early, END late), so it is a good *map*. But the
# large cells come out too small (asserted below): a first-order step cannot follow the model's curvature between
# the two runs, and QUESTIONS.md traces where this model bends. One correlation over a grid of mostly-zero cells
# hides that. Use the estimate to find where to look, exact patching to measure.
assert corr > 0.8
assert float(attr.values[0, S2]) < 0.8 * float(res.values[0, S2])
big = [h for h in s2_heads if float(heads_exact.values[h]) > 0.15]
assert big and all(float(heads_attr.values[h]) < 0.8 * float(heads_exact.values[h]) for h in big)

# %% [markdown]
# ## Exercise 11 (after the workshop): one prompt can mislead, a dataset of pairs
#
# The IOI papers average over many pairs with different names and templates; each pair has its own answer. A
# **head** sweep patches a head at every position at once, so pairs of different lengths can share it; a **position**
# sweep needs every prompt to have its tokens at the same positions, so it takes pairs of one length (04 uses one
# template for that).
#
# **Predict:** on held-out pairs in held-out templates, will the same heads stand out as on our one prompt?

# %%
data = ilab.zoo.ioi_dataset(16, split="test")
pairs_metric = ilab.logit_diff([d["answer"] for d in data], [d["wrong"] for d in data])
avg = lab.patch_sweep([d["clean"] for d in data], [d["corrupt"] for d in data], site="z", by=("layer", "head"),
                      metric=pairs_metric, progress=False)
print(f"{len(data)} pairs, lengths {sorted({len(lab.to_str_tokens(d['clean'])) for d in data})}, e.g.",
      *[d["clean"] for d in data[:2]], sep="\n  ")
print("heads restoring > 0.05, dataset:", {name(h): round(float(avg.values[h]), 2) for h in HEADS
                                            if avg.values[h] > 0.05})
print("heads restoring > 0.05, one prompt:", {name(h): round(float(heads_exact.values[h]), 2) for h in HEADS
                                               if heads_exact.values[h] > 0.05})
avg.figure()

# %%
# ANSWER
similar = float(torch.corrcoef(torch.stack([avg.values.flatten(), heads_exact.values.flatten()]))[0, 1])
print(f"correlation of the two head maps: {similar:.2f}")
# The same heads stand out (the maps correlate, printed). A cut-off picks the heads printed below on each: where
# several heads carry similar shares, one prompt can reorder them and a cut-off can then pick other heads than the
# dataset does. The dataset's answer is the one to report; one prompt is for exploring.
print("restores > 0.15 on the dataset:", sorted(name(h) for h in HEADS if avg.values[h] > 0.15),
      "| on the prompt:", sorted(name(h) for h in HEADS if heads_exact.values[h] > 0.15))
one_prompt = {h for h in HEADS if heads_exact.values[h] > 0.1}  # the heads that stand out clearly on the prompt
assert similar > 0.7 and all(avg.values[h] > 0.05 for h in one_prompt)

# %% [markdown]
# ## Everything you clicked, as code

# %%
script = lab.log.to_code()  # every run with edits of this session, clicks included, as runnable Python
print(f"{len(script.splitlines())} lines; it starts:", *script.splitlines()[:8], sep="\n")

# %% [markdown]
# ## The dashboard
#
# Everything together: heatmap + logits, a steering slider, the logit lens and attention.

# %%
lab.show(clean, corrupt, answer=answer, wrong=wrong)

# %% [markdown]
# ## On real GPT-2
#
# The same code runs on any Hugging Face causal LM. GPT-2 needs a one-time download; offline (as in a classroom without internet) you get a clear message instead.

# %%
try:
    gpt2 = ilab.Lab.load("gpt2")
    print(gpt2)
except ilab.LoadError as e:
    print("GPT-2 is not available here:", str(e).splitlines()[-1])
