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
# # Primer: the residual stream, heads, queries, keys and values
#
# Before the workshop: about 45 minutes for a student new to the subject, an hour for the slowest quarter (the run
# sheet's count, `scripts/workshop_minutes.py`). The patching notebooks (01-04) use a few ideas about how a transformer is built; here each one comes with a
# cell to run and a check that says *right* or what is off. Nothing is assumed beyond this:
#
# - **Python**: functions, lists, dicts, f-strings.
# - **PyTorch**: a tensor's shape, indexing (`x[0, :, 2]`), `@` (matrix product), `.softmax(-1)`, `torch.allclose`.
# - **A transformer, in outline**: text is split into tokens; each token becomes a vector; layers of attention and
#   MLPs update those vectors; the last position's vector is turned into a score (a *logit*) for every possible next
#   token.
#
# The model is `ioi-tiny`, a 4-layer GPT-2 with 4 heads per layer that ships with interplab (offline, seconds). It was
# trained for this one task and solves it with **a circuit of its own**: the workshop maps *that* circuit, which is
# not GPT-2 small's (the paper's name movers and S-inhibition heads); notebook 04 compares the two, and what
# transfers to GPT-2 is the method, not the heads.
#
# **How to work through it.** Where a cell has `...`, replace it and run the check below it. Each answer is in a
# collapsed cell after its check, and it stays closed: Run All and Shift-Enter run it without showing anything. To see
# it, open it (click the bar on its left), change `show = False` to `show = True` and run it.

# %%
import torch

import interplab as ilab

lab = ilab.Lab.load("ioi-tiny")
prompt = "When Mary and John went to the store, John gave a drink to"
tokens = lab.to_str_tokens(prompt)
T, L, H = len(tokens), lab.n_layers, lab.n_heads
d_model = lab.model.config.n_embd
d_head = d_model // H
run = lab.run(prompt, cache=["resid_pre", "attn_out", "mlp_out", "resid_post", "q", "k", "v", "z", "pattern"])
cache = run.cache  # cache[site, layer]: [batch, positions, ...] (here one prompt: batch index 0)
print(f"{T} tokens: {tokens}")
print(f"{L} layers of {H} heads; each position's vector has d_model = {d_model} numbers, a head works in "
      f"d_head = {d_head}")

# %% [markdown]
# ## 1. The residual stream is a sum
#
# Each position carries one vector through the model, the **residual stream**. It starts as the token's embedding
# plus its position's embedding. Each block then *reads* the stream and *adds* to it: first its attention layer
# (`attn_out`), then its MLP (`mlp_out`). Nothing is overwritten: the stream leaving the last block is the embeddings
# plus everything every layer added. (That is why one can patch, or read, what one part wrote: it is a term of a sum.)
#
# `cache["resid_pre", 0]` is the stream entering block 0 (the embeddings); `cache["resid_post", L - 1]` the stream
# leaving the last block; `cache["attn_out", layer]` and `cache["mlp_out", layer]` what each layer added. All are
# `[1, positions, d_model]`.
#
# **Predict:** will the sum match the final stream exactly, or only roughly? Then write it.

# %%
embeddings = cache["resid_pre", 0]  # token + position embeddings: what enters block 0
final = cache["resid_post", L - 1]  # what leaves the last block
my_sum = ...  # embeddings plus every layer's attn_out and mlp_out


# %%
def check_sum(total):
    """The final residual stream against your sum, position by position."""
    if not isinstance(total, torch.Tensor) or total.shape != final.shape:
        print(f"not yet: my_sum should be a tensor of shape {tuple(final.shape)}, like each term")
        return False
    gap = float((total - final).abs().max())
    if gap > 1e-3:
        missing = float((total - final).norm() / final.norm())
        print(f"not yet: your sum is off by {gap:.3f} at most ({missing:.0%} of the stream's size): "
              "every layer, attention and MLP both?")
        return False
    print(f"right: the final stream is the sum of {1 + 2 * L} terms (largest difference {gap:.1e}, rounding)")
    return True


check_sum(my_sum)
wte, wpe = lab.model.transformer.wte.weight, lab.model.transformer.wpe.weight
ids = lab.tokenizer(prompt, return_tensors="pt")["input_ids"][0]
same = torch.allclose(embeddings[0], wte[ids] + wpe[:T], atol=1e-5)
print("the embeddings are token embedding + position embedding:", same)
assert same

# %%
# ANSWER
my_sum = embeddings + sum(cache["attn_out", layer] + cache["mlp_out", layer] for layer in range(L))
assert check_sum(my_sum)
# Exactly, up to float rounding (printed): resid_post of a block is resid_pre + attn_out + mlp_out, and resid_pre of
# the next block is that resid_post. The final LayerNorm and the unembedding then read this sum.

# %% [markdown]
# ## 2. What a head reads and writes
#
# An attention layer is `H` **heads** side by side. At each position a head makes a **value** vector `v` (d_head
# numbers) from that position's residual stream (after the block's LayerNorm). Then, at each query position `q`, it
# takes a weighted average of the values of positions `k <= q`; the weights are its **attention pattern**
# `pattern[q, k]` (each row sums to 1). That average is the head's output `z` at `q`. The head **writes** `z` into the
# stream through its slice of the output matrix `W_O`; the layer's `attn_out` is the sum of its heads' writes plus a
# bias.
#
# Write one head's `z` from its pattern and its values. `cache["v", layer]` and `cache["z", layer]` hold all heads
# side by side (`[1, positions, H * d_head]`, head `h` in columns `h * d_head` to `(h + 1) * d_head`);
# `cache["pattern", layer]` is `[1, H, query, key]`.

# %%
layer, head = 2, 0
cols = slice(head * d_head, (head + 1) * d_head)  # this head's columns in q, k, v and z
pattern = cache["pattern", layer][0, head]  # [query, key]
v = cache["v", layer][0, :, cols]  # [key, d_head]
my_z = ...  # [query, d_head]: at each query position, the pattern-weighted sum of the values


# %%
def check_z(z):
    """Your head output against the one the model computed."""
    want = cache["z", layer][0, :, cols]
    if not isinstance(z, torch.Tensor) or z.shape != want.shape:
        print(f"not yet: my_z should be a tensor of shape {tuple(want.shape)} (query positions x d_head)")
        return False
    if not torch.allclose(z, want, atol=1e-4):
        print("not yet: the shape is right, the numbers are not: row q of the pattern weighs the values of every key")
        return False
    print(f"right: head {head} of layer {layer} outputs pattern @ v")
    return True


check_z(my_z)
W_O = lab.model.transformer.h[layer].attn.c_proj.weight  # [H * d_head, d_model]: x @ W_O (GPT-2's Conv1D)
b_O = lab.model.transformer.h[layer].attn.c_proj.bias
z_all = cache["z", layer][0]
writes = [z_all[:, h * d_head:(h + 1) * d_head] @ W_O[h * d_head:(h + 1) * d_head] for h in range(H)]
same = torch.allclose(sum(writes) + b_O, cache["attn_out", layer][0], atol=1e-4)
print("attn_out = the heads' writes added up, plus a bias:", same)
assert same

# %%
# ANSWER
my_z = pattern @ v
assert check_z(my_z)
# A head moves information between positions: what it writes at q is made of what it read at the keys it attends
# to. Patching a head's `z` (notebooks 01 and 04) replaces exactly this vector.

# %% [markdown]
# ## 3. Queries, keys and values; the QK and OV circuits
#
# Where does the pattern come from? At each position the head also makes a **query** `q` and a **key** `k` (d_head
# numbers each, from the same LayerNorm'd stream). The score of query position `q` for key position `k` is their dot
# product divided by `sqrt(d_head)`; keys after the query are masked out (a position cannot look ahead); a softmax over
# the keys turns each row of scores into the pattern.
#
# Write the pattern from the cached queries and keys. (`torch.tril(torch.ones(T, T, dtype=torch.bool))` is `True`
# where the key is not after the query; `scores.masked_fill(~mask, float("-inf"))` masks the rest.)

# %%
q = cache["q", layer][0, :, cols]  # [query, d_head]
k = cache["k", layer][0, :, cols]  # [key, d_head]
my_pattern = ...  # [query, key]: softmax over keys of q . k / sqrt(d_head), later keys masked out


# %%
def check_pattern(p):
    """Your pattern against the model's."""
    if not isinstance(p, torch.Tensor) or p.shape != pattern.shape:
        print(f"not yet: my_pattern should be a tensor of shape {tuple(pattern.shape)} (query x key)")
        return False
    if not torch.allclose(p.sum(-1), torch.ones(T), atol=1e-4):
        print("not yet: each row of a pattern sums to 1: a softmax over the keys (the last dimension)?")
        return False
    if not torch.allclose(p, pattern, atol=1e-4):
        print("not yet: rows sum to 1 but the numbers differ: the mask, or the division by sqrt(d_head)?")
        return False
    print(f"right: the pattern of head {head}, layer {layer}, from its queries and keys")
    return True


check_pattern(my_pattern)

# %%
# ANSWER
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
my_pattern = ((q @ k.T) / d_head ** 0.5).masked_fill(~mask, float("-inf")).softmax(-1)
assert check_pattern(my_pattern)

# %% [markdown]
# Both `q` and `k` are the LayerNorm'd stream `x` times a matrix (plus a bias): `q = x W_Q`, `k = x W_K`. So a score
# is `x_q W_Q W_K^T x_k^T`: one `d_model x d_model` matrix, the **QK circuit** `W_Q W_K^T`, decides *where* the head
# looks. Likewise the head writes `pattern @ (x W_V) W_O`: the matrix `W_V W_O`, the **OV circuit**, decides *what* it
# writes for whatever it reads. Two questions about a head, two matrices: notebook 04's path patching into a head's
# query, key or value asks which one a change goes through, and its copying scores read the OV circuit. The cell
# checks both identities on this head (the biases make the small extra terms).

# %%
attn = lab.model.transformer.h[layer].attn
x = lab.model.transformer.h[layer].ln_1(cache["resid_pre", layer][0])  # the LayerNorm'd stream the head reads
W, b = attn.c_attn.weight, attn.c_attn.bias  # [d_model, 3 * d_model]: the q | k | v projections side by side
W_Q, W_K, W_V = (W[:, i * d_model:(i + 1) * d_model][:, cols] for i in range(3))
b_Q, b_K, b_V = (b[i * d_model:(i + 1) * d_model][cols] for i in range(3))
W_QK = W_Q @ W_K.T  # [d_model, d_model]
W_OV = W_V @ W_O[cols]  # [d_model, d_model]
scores = x @ W_QK @ x.T + ((x @ W_Q) @ b_K)[:, None] + (b_Q @ (x @ W_K).T)[None, :] + b_Q @ b_K  # + the biases
write = pattern @ (x @ W_OV + b_V @ W_O[cols])
same = torch.allclose(scores, q @ k.T, atol=1e-3), torch.allclose(write, writes[head], atol=1e-3)
print("scores through the QK circuit = q . k:", same[0])
print("the head's write through the OV circuit = its z @ W_O slice:", same[1])
assert all(same)

# %% [markdown]
# ## 4. The words of the patching notebooks: logit difference, denoising, noising
#
# The task: in the prompt above the next word should be *Mary*, the name that is not repeated. The **corrupt** prompt
# swaps the repeated name, so the answer flips to *John*.
#
# - **logit difference**: logit(" Mary") - logit(" John") at the last position. Above 0: the model prefers Mary.
# - **denoising**: run the *corrupt* prompt with one activation copied in from the *clean* run. If the answer comes
#   back, that activation is *sufficient* to carry it.
# - **noising**: run the *clean* prompt with one activation copied in from the *corrupt* run. If the answer breaks,
#   that activation is *necessary*.
# - Both are reported **normalised**: (value - corrupt) / (clean - corrupt), so 1 = the clean run's logit difference
#   and 0 = the corrupt run's.
#
# The two prompts differ in one token, the repeated name (S2). `ilab.patch("resid_pre", 0, pos=S2, source=...)` copies
# the residual stream entering block 0 at S2 from another run.
#
# **Predict:** denoising that one vector, and noising it: what will each give, normalised? (What else differs between
# the two runs at that point?)

# %%
corrupt = "When Mary and John went to the store, Mary gave a drink to"
S2 = next(i for i, (a, b) in enumerate(zip(tokens, lab.to_str_tokens(corrupt))) if a != b)
mary, john = lab.token_id(" Mary"), lab.token_id(" John")


def logit_diff(r):
    return float(r.last_logits[0, mary] - r.last_logits[0, john])


clean_run, corrupt_run = lab.run(prompt), lab.run(corrupt)
clean_ld, corrupt_ld = logit_diff(clean_run), logit_diff(corrupt_run)
denoised = logit_diff(lab.run(corrupt, edits=[ilab.patch("resid_pre", 0, pos=S2, source=clean_run)]))
noised = logit_diff(lab.run(prompt, edits=[ilab.patch("resid_pre", 0, pos=S2, source=corrupt_run)]))
print(f"S2 is position {S2} ({tokens[S2]!r}); logit difference: clean {clean_ld:+.2f}, corrupt {corrupt_ld:+.2f}")
for label, value in (("denoising", denoised), ("noising", noised)):
    print(f"{label} resid_pre 0 at S2: {value:+.2f}, normalised {(value - corrupt_ld) / (clean_ld - corrupt_ld):+.2f}")

# %%
# ANSWER
# Denoising gives 1 and noising 0 (printed): before block 0 the two runs differ only in the vector at S2, so
# copying it makes the corrupt run the clean run, and the reverse. Further in, the difference spreads over positions
# and parts of the model: one activation may carry all of it (notebook 01 finds such cells at S2 early and at the end
# late) or only part. That is what the sweeps of notebook 01 map, layer by layer.
assert abs((denoised - corrupt_ld) / (clean_ld - corrupt_ld) - 1) < 1e-3
assert abs((noised - corrupt_ld) / (clean_ld - corrupt_ld)) < 1e-3

# %% [markdown]
# ## 5. A hook: how a patch is made
#
# `ilab.patch` above changed the run for you with a **hook**: a function PyTorch calls while the model runs. Notebook
# 01 has you write one, so here is the smallest. A **forward pre-hook** on a module is called as `hook(module, args)`
# just before the module runs; `args[0]` is its input, here the residual stream `[batch, positions, d_model]`. (When
# the hook returns a tuple, the module runs on that instead: that is how a patch changes the run.) Remove it always,
# in `finally`: a hook left attached acts on every later run of the model.
#
# The cell attaches one to block 1 (`lab.model.transformer.h[1]`), whose input is `resid_pre` 1. Write its one line:
# keep a copy of the input in `seen`.

# %%
seen = []


def keep(module, args):
    ...  # append a copy of the block's input, args[0].clone(), to seen


handle = lab.model.transformer.h[1].register_forward_pre_hook(keep)
try:
    with torch.no_grad():
        lab.model(**lab.tokenizer(prompt, return_tensors="pt"))
finally:
    handle.remove()  # always: a hook left attached would act on every later run


# %%
def check_hook(seen):
    """What your hook kept against the cache's resid_pre 1 (the lab reads it at the same place)."""
    want = cache["resid_pre", 1]
    if len(seen) != 1 or not isinstance(seen[0], torch.Tensor):
        print(f"not yet: seen holds {len(seen)} tensor(s); the hook should append args[0] once (run both cells again)")
        return False
    if seen[0].shape != want.shape:
        print(f"not yet: you kept a {tuple(seen[0].shape)} tensor; the block's input, args[0], is {tuple(want.shape)}")
        return False
    gap = float((seen[0] - want).abs().max())
    if gap > 1e-4:
        print(f"not yet: what you kept differs from cache['resid_pre', 1] by up to {gap:.2g}: keep args[0]")
        return False
    print(f"right: the input of block 1 is resid_pre 1 (largest difference {gap:.1e}, rounding)")
    return True


check_hook(seen)

# %%
# ANSWER
seen = []


def keep(module, args):
    seen.append(args[0].clone())


handle = lab.model.transformer.h[1].register_forward_pre_hook(keep)
try:
    with torch.no_grad():
        lab.model(**lab.tokenizer(prompt, return_tensors="pt"))
finally:
    handle.remove()
assert check_hook(seen)
# To change the activation instead of keeping it, the hook edits a copy and returns it: (edited, *args[1:]).
# Notebook 01 has you write that: the clean run's vector put into the corrupt run at one position.

# %% [markdown]
# ## Ready
#
# You have used every idea the patching notebooks rely on: a sum of layer outputs you can patch term by term, heads
# that read with a pattern and write through `W_O`, the QK and OV circuits, the logit difference with its two
# patching directions, and a hook. Next: `01_ioi_patching.ipynb`.
