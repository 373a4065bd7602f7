"""Writes the teaching notebooks (without outputs) from the cells below: `python notebooks/build.py`.

Keeping the source here makes the notebooks reviewable as plain Python and keeps megabytes of widget state out of git.
Cells starting with "# ANSWER" are the workshop answers: their input is collapsed in JupyterLab and Notebook 7, and
their code runs only once the student sets `show = True` in the cell (so Run All and Shift-Enter leave them closed).
"""

from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent

# The line of every answer cell that keeps it closed; the student (or a test) sets it to True.
CLOSED = "show = False  # set to True, then run this cell, to see the answer"
ANSWER_HEADER = "# ANSWER (closed: Run All and Shift-Enter leave it closed until you set show = True below)"

# Appended to each notebook's first code cell: what an answer cell calls to decide whether to run.
ANSWER_GATE = """

SHOW_ANSWERS = False  # True runs every answer cell too (a solved copy for the teacher)


def opened(show):
    \"\"\"Whether an answer cell runs: its own `show = True`, or SHOW_ANSWERS for the whole notebook.\"\"\"
    if not (show or SHOW_ANSWERS):
        print("Answer closed. To see it: open the cell (click the bar on its left), set show = True, run the cell.")
    return bool(show or SHOW_ANSWERS)
"""


def md(text):
    return nbf.v4.new_markdown_cell(text.strip())


def code(text):
    text = text.strip()
    if text.startswith("# ANSWER"):
        body = text.split("\n", 1)[1] if "\n" in text else "pass"
        indented = "\n".join(("    " + line) if line.strip() else "" for line in body.splitlines())
        cell = nbf.v4.new_code_cell(f"{ANSWER_HEADER}\n{CLOSED}\nif opened(show):\n{indented}")
        cell.metadata["jupyter"] = {"source_hidden": True}
        return cell
    return nbf.v4.new_code_cell(text)


def setup(text):
    """A notebook's first code cell, with the answer gate after it."""
    return code(text.strip() + ANSWER_GATE)


def carry(text):
    """A cell after an answer that sets what later cells use, as the answer does: the notebook runs top to bottom
    with every answer cell closed (a student who skips one is not stopped by a NameError)."""
    return code("# Run this whether or not you opened the answer: the next exercises use these names.\n" + text.strip())


PRIMER = [
    md("""
# Primer: the residual stream, heads, queries, keys and values

About 20 minutes (the run sheet's estimate for a student new to the subject), before the workshop or at its
start. The patching notebooks (01-04) use a few ideas about how a transformer is built; here each one comes with a
cell to run and a check that says *right* or what is off. Nothing is assumed beyond this:

- **Python**: functions, lists, dicts, f-strings.
- **PyTorch**: a tensor's shape, indexing (`x[0, :, 2]`), `@` (matrix product), `.softmax(-1)`, `torch.allclose`.
- **A transformer, in outline**: text is split into tokens; each token becomes a vector; layers of attention and
  MLPs update those vectors; the last position's vector is turned into a score (a *logit*) for every possible next
  token.

The model is `ioi-tiny`, a 4-layer GPT-2 with 4 heads per layer that ships with interplab (offline, seconds).

**How to work through it.** Where a cell has `...`, replace it and run the check below it. Each answer is in a
collapsed cell after its check, and it stays closed: Run All and Shift-Enter run it without showing anything. To see
it, open it (click the bar on its left), change `show = False` to `show = True` and run it.
"""),
    setup("""
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
"""),
    md("""
## 1. The residual stream is a sum

Each position carries one vector through the model, the **residual stream**. It starts as the token's embedding
plus its position's embedding. Each block then *reads* the stream and *adds* to it: first its attention layer
(`attn_out`), then its MLP (`mlp_out`). Nothing is overwritten: the stream leaving the last block is the embeddings
plus everything every layer added. (That is why one can patch, or read, what one part wrote: it is a term of a sum.)

`cache["resid_pre", 0]` is the stream entering block 0 (the embeddings); `cache["resid_post", L - 1]` the stream
leaving the last block; `cache["attn_out", layer]` and `cache["mlp_out", layer]` what each layer added. All are
`[1, positions, d_model]`.

**Predict:** will the sum match the final stream exactly, or only roughly? Then write it.
"""),
    code("""
embeddings = cache["resid_pre", 0]  # token + position embeddings: what enters block 0
final = cache["resid_post", L - 1]  # what leaves the last block
my_sum = ...  # embeddings plus every layer's attn_out and mlp_out
"""),
    code("""
def check_sum(total):
    \"\"\"The final residual stream against your sum, position by position.\"\"\"
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
"""),
    code("""
# ANSWER
my_sum = embeddings + sum(cache["attn_out", layer] + cache["mlp_out", layer] for layer in range(L))
assert check_sum(my_sum)
# Exactly, up to float rounding (printed): resid_post of a block is resid_pre + attn_out + mlp_out, and resid_pre of
# the next block is that resid_post. The final LayerNorm and the unembedding then read this sum.
"""),
    md("""
## 2. What a head reads and writes

An attention layer is `H` **heads** side by side. At each position a head makes a **value** vector `v` (d_head
numbers) from that position's residual stream (after the block's LayerNorm). Then, at each query position `q`, it
takes a weighted average of the values of positions `k <= q`; the weights are its **attention pattern**
`pattern[q, k]` (each row sums to 1). That average is the head's output `z` at `q`. The head **writes** `z` into the
stream through its slice of the output matrix `W_O`; the layer's `attn_out` is the sum of its heads' writes plus a
bias.

Write one head's `z` from its pattern and its values. `cache["v", layer]` and `cache["z", layer]` hold all heads
side by side (`[1, positions, H * d_head]`, head `h` in columns `h * d_head` to `(h + 1) * d_head`);
`cache["pattern", layer]` is `[1, H, query, key]`.
"""),
    code("""
layer, head = 2, 0
cols = slice(head * d_head, (head + 1) * d_head)  # this head's columns in q, k, v and z
pattern = cache["pattern", layer][0, head]  # [query, key]
v = cache["v", layer][0, :, cols]  # [key, d_head]
my_z = ...  # [query, d_head]: at each query position, the pattern-weighted sum of the values
"""),
    code("""
def check_z(z):
    \"\"\"Your head output against the one the model computed.\"\"\"
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
"""),
    code("""
# ANSWER
my_z = pattern @ v
assert check_z(my_z)
# A head moves information between positions: what it writes at q is made of what it read at the keys it attends
# to. Patching a head's `z` (notebooks 01 and 04) replaces exactly this vector.
"""),
    md("""
## 3. Queries, keys and values; the QK and OV circuits

Where does the pattern come from? At each position the head also makes a **query** `q` and a **key** `k` (d_head
numbers each, from the same LayerNorm'd stream). The score of query position `q` for key position `k` is their dot
product divided by `sqrt(d_head)`; keys after the query are masked out (a position cannot look ahead); a softmax over
the keys turns each row of scores into the pattern.

Write the pattern from the cached queries and keys. (`torch.tril(torch.ones(T, T, dtype=torch.bool))` is `True`
where the key is not after the query; `scores.masked_fill(~mask, float("-inf"))` masks the rest.)
"""),
    code("""
q = cache["q", layer][0, :, cols]  # [query, d_head]
k = cache["k", layer][0, :, cols]  # [key, d_head]
my_pattern = ...  # [query, key]: softmax over keys of q . k / sqrt(d_head), later keys masked out
"""),
    code("""
def check_pattern(p):
    \"\"\"Your pattern against the model's.\"\"\"
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
"""),
    code("""
# ANSWER
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
my_pattern = ((q @ k.T) / d_head ** 0.5).masked_fill(~mask, float("-inf")).softmax(-1)
assert check_pattern(my_pattern)
"""),
    md("""
Both `q` and `k` are the LayerNorm'd stream `x` times a matrix (plus a bias): `q = x W_Q`, `k = x W_K`. So a score
is `x_q W_Q W_K^T x_k^T`: one `d_model x d_model` matrix, the **QK circuit** `W_Q W_K^T`, decides *where* the head
looks. Likewise the head writes `pattern @ (x W_V) W_O`: the matrix `W_V W_O`, the **OV circuit**, decides *what* it
writes for whatever it reads. Two questions about a head, two matrices: notebook 04's path patching into a head's
query, key or value asks which one a change goes through, and its copying scores read the OV circuit. The cell
checks both identities on this head (the biases make the small extra terms).
"""),
    code("""
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
"""),
    md("""
## 4. The words of the patching notebooks: logit difference, denoising, noising

The task: in the prompt above the next word should be *Mary*, the name that is not repeated. The **corrupt** prompt
swaps the repeated name, so the answer flips to *John*.

- **logit difference**: logit(" Mary") - logit(" John") at the last position. Above 0: the model prefers Mary.
- **denoising**: run the *corrupt* prompt with one activation copied in from the *clean* run. If the answer comes
  back, that activation is *sufficient* to carry it.
- **noising**: run the *clean* prompt with one activation copied in from the *corrupt* run. If the answer breaks,
  that activation is *necessary*.
- Both are reported **normalised**: (value - corrupt) / (clean - corrupt), so 1 = the clean run's logit difference
  and 0 = the corrupt run's.

The two prompts differ in one token, the repeated name (S2). `ilab.patch("resid_pre", 0, pos=S2, source=...)` copies
the residual stream entering block 0 at S2 from another run.

**Predict:** denoising that one vector, and noising it: what will each give, normalised? (What else differs between
the two runs at that point?)
"""),
    code("""
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
"""),
    code("""
# ANSWER
# Denoising gives 1 and noising 0 (printed): before block 0 the two runs differ only in the vector at S2, so
# copying it makes the corrupt run the clean run, and the reverse. Any later layer, or any other activation, holds
# only part of the difference: that is what the sweeps of notebook 01 map, layer by layer.
assert abs((denoised - corrupt_ld) / (clean_ld - corrupt_ld) - 1) < 1e-3
assert abs((noised - corrupt_ld) / (clean_ld - corrupt_ld)) < 1e-3
"""),
    md("""
## Ready

You have used every idea the patching notebooks rely on: a sum of layer outputs you can patch term by term, heads
that read with a pattern and write through `W_O`, the QK and OV circuits, and the logit difference with its two
patching directions. Next: `01_ioi_patching.ipynb`.
"""),
]


IOI = [
    md("""
# Activation patching on IOI: from heads to a circuit

**Indirect object identification**: in *"When Mary and John went to the store, John gave a drink to"* the next word
should be **Mary**, the name that is *not* repeated. We ask *where* in the model that answer is computed, by
**activation patching**: run the model on a *corrupt* prompt (the repeated name swapped, so the answer flips), copy in
one activation from the *clean* run, and see how much of the clean behaviour comes back. Then we look at the heads
that matter (where they sit, where they look, what they write) and test whether they carry the behaviour.

**Before you start.** You need Python (functions, lists, dicts), a little PyTorch (indexing a tensor, `torch.allclose`)
and the idea of a transformer: tokens, layers, attention heads. The words this notebook uses are defined, with a cell
to run for each, in the primer `00_primer.ipynb` (about 20 minutes; do it first if the residual stream, a head's
query / key / value or the QK and OV circuits are new to you). In short:

- **logit difference**: logit(answer) - logit(wrong name) at the last position; above 0, the model prefers the answer.
- **denoising**: patch an activation from the clean run into the corrupt run: does this piece bring the answer back
  (is it *sufficient*)? Most of this notebook denoises.
- **noising**: patch an activation from the corrupt run into the clean run: does the answer break without it (is it
  *necessary*)? Exercises 8 and 9.
- Both are reported **normalised**: 1 = the clean run's logit difference, 0 = the corrupt run's.

The model is `ioi-tiny`, a 4-layer GPT-2 with 4 heads per layer, trained for this task and shipped with interplab:
everything here runs offline, in seconds.

**How to work through it: predict, then check.** Every exercise starts with a question. Write down your prediction
*and why you expect it* before you run anything. Then run the check and compare. The answer is in the collapsed cell
after the check, and it stays closed: Run All and Shift-Enter run it without showing anything. Once you have compared,
open it (click the bar on its left), change `show = False` to `show = True` and run it. Every number the text relies
on is printed by a cell, so the text stays true when the model is retrained.
"""),
    setup("""
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
    \"\"\"The heads carrying at least `share` of the effect on their own, largest first ({head: score}).\"\"\"
    return sorted((h for h in scores if scores[h] >= share), key=scores.get, reverse=True)
"""),
    md("""
## The metric: logit difference

`logit(answer) - logit(wrong)` at the last position: positive means the model prefers the right name. Sweeps report
it **normalised**: (patched - corrupt) / (clean - corrupt), so 0 = the corrupt run's value, 1 = the clean run's.
"""),
    code("""
metric = ilab.logit_diff(answer, wrong)
bound = metric.bind(lab.token_id)
clean_run, corrupt_run = lab.run(clean), lab.run(corrupt)
clean_ld, corrupt_ld = float(bound(clean_run.last_logits)), float(bound(corrupt_run.last_logits))
print(f"clean logit diff {clean_ld:+.2f}, corrupt logit diff {corrupt_ld:+.2f}")
assert clean_ld > 0 > corrupt_ld  # the model does the task, and the corruption flips it


def restored(edits, base=corrupt):
    \"\"\"The normalised logit difference of `base` run with `edits` (1 = clean, 0 = corrupt).\"\"\"
    return (float(bound(lab.run(base, edits=edits).last_logits)) - corrupt_ld) / (clean_ld - corrupt_ld)
"""),
    md("""
## Write it yourself (after the workshop): the metric

Every number in this notebook is a **logit difference**: the answer's logit minus the wrong name's, at the last
position. `ilab.logit_diff` computes it for you; write it yourself first. `logits` is a tensor `[rows, vocab]` (one
row per prompt, the last position's logits); `lab.token_id(" Mary")` is a token's id. Replace the `...` and run the
check below it: it says *right* or what is off.
"""),
    code("""
def my_logit_diff(logits):
    # return one number per row: logit(answer) - logit(wrong)
    ...
"""),
    code("""
def check_metric(fn):
    \"\"\"Compare fn with the library's metric on the clean and corrupt prompts' last-position logits.\"\"\"
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
"""),
    code("""
# ANSWER
def my_logit_diff(logits):
    return logits[:, lab.token_id(answer)] - logits[:, lab.token_id(wrong)]


assert check_metric(my_logit_diff)
"""),
    md("""
## Exercise 1: where does the information travel?

`resid_pre` at layer L and position p is the residual stream entering block L at token p. The sweep patches each
(layer, position) cell on its own.

**Predict** (with your reasoning): in layer 0, which cells can restore anything at all? (What differs between the two
runs *before* any block has run?) In the layers between, where will the effect sit? And in the last row, the input
of the last block: at the final position only, or still partly at S2? (Is there a block left that could move
information from S2 to the end?)

In the heatmap, click a cell: the patch is applied and the logit panel shows clean / corrupt / patched next-token
probabilities. **Shift-click** adds cells to the active set, so several patches run *together*; untick an entry to
switch it off.
"""),
    code("""
res = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, direction="denoise")
explorer = res.show()
explorer
"""),
    code("""
# ANSWER
for layer in range(lab.n_layers):
    row = res.values[layer]
    carried = {f"{p}:{tokens[p]!r}": round(float(row[p]), 2) for p in range(len(tokens)) if abs(row[p]) > 0.05}
    print(f"resid_pre {layer}: positions with |value| > 0.05: {carried}")
# Layer 0: only S2 differs between the runs, so only S2 can restore anything, and it restores everything (1.00).
# At layer 1 the effect is still all at S2: layer 0 works out *at S2* what this name means, and the end knows
# nothing of it yet. At layer 2 it is split between S2 and END: layer-1 heads have already carried part of it to
# the end, layer-2 heads carry the rest (exercise 5). In the last row it is all at END: the last block no longer
# reads S2. Only S2 and END ever matter.
assert torch.isclose(res.values[0, S2], torch.tensor(1.0), atol=1e-3) and res.values[0].abs().sum() < 1.001
assert float(res.values[1, S2]) > 0.9 and min(float(res.values[2, S2]), float(res.values[2, END])) > 0.2
assert float(res.values[-1, END]) > 0.9 and abs(float(res.values[-1, S2])) < 0.05
assert set(torch.nonzero(res.values.abs() > 0.05)[:, 1].tolist()) == {S2, END}
"""),
    md("""
## Write it yourself: activation patching, one cell, then a row

Every cell of that heatmap is one run: the corrupt prompt, with the residual stream entering block `layer` replaced
*at one position* by the clean run's. Write that run yourself, with a PyTorch hook, then a whole row of the heatmap.

- `resid_pre` at layer L is the input of block L, the module `lab.model.transformer.h[L]`. A **forward pre-hook** on
  a module is called as `hook(module, args)` just before the module runs; `args[0]` is the residual stream,
  `[batch, positions, d_model]`; when the hook returns a tuple, the module runs on that instead of `args`.
- `clean_cache["resid_pre", L]` (set in the cell below) is the clean run's residual stream entering block L,
  `[1, positions, d_model]`.
- The value of a cell is normalised: (patched - corrupt) / (clean - corrupt); `bound(logits)` is the raw logit
  difference, `clean_ld` and `corrupt_ld` the two runs' (the metric cell above).

Replace the three `...` and run the check below: it compares your cell `(1, S2)`, then your rows, with the sweep's.
"""),
    code("""
clean_cache = lab.run(clean, cache=["resid_pre"]).cache
corrupt_ids = lab.tokenizer(corrupt, return_tensors="pt")


def my_patch(layer, pos):
    \"\"\"The corrupt run with the clean resid_pre at (layer, pos) patched in: its normalised logit difference.\"\"\"
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
"""),
    code("""
def check_patching(my_patch, my_row):
    \"\"\"Your cell (1, S2), then your row of every layer, against lab.patch_sweep's values (res, exercise 1).\"\"\"
    one, want = my_patch(1, S2), float(res.values[1, S2])
    if one is None:
        print("not yet: my_patch returns nothing; return the normalised logit difference")
        return False
    if abs(float(one) - want) > 1e-3:
        hints = [(abs(float(one) - float(res.raw[1, S2])) < 1e-3, "that is the raw logit difference: normalise it"),
                 (abs(float(one)) < 1e-3, "nothing changed: is the clean vector written into resid at [:, pos]?"),
                 (abs(float(one) - 1) < 1e-3, "that is the whole clean run: replace one position, not all of them")]
        print(f"not yet: my_patch(1, S2) = {float(one):+.3f}, the sweep's cell {want:+.3f}.",
              next((hint for found, hint in hints if found), "Print resid[0, pos, :4] before and after your line."))
        return False
    print(f"one cell right: my_patch(1, S2) = {float(one):+.3f}")
    for layer in range(lab.n_layers):
        row = my_row(layer)
        if row is None:
            print("not yet: my_row returns nothing; return [my_patch(layer, pos) for each position]")
            return False
        got = torch.tensor([float(v) for v in row])
        if got.shape != res.values[layer].shape or not torch.allclose(got, res.values[layer], atol=1e-3):
            print(f"not yet: my_row({layer}) = {[round(v, 2) for v in got.tolist()]};",
                  f"the sweep's row: {[round(v, 2) for v in res.values[layer].tolist()]}")
            return False
    print(f"right: your {lab.n_layers} rows are the sweep's heatmap, cell for cell")
    return True


check_patching(my_patch, my_row)
"""),
    code("""
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
"""),
    md("""
## Exercise 2 (after the workshop): values above 1, values below 0

Look at the middle layers of the heatmap again (the cell prints the extremes): one cell restores **more than the
clean run**, another **less than the corrupt run**.

**Predict:** how can patching one activation make the model *more* sure of the answer than the clean run itself?
What would you get if you patched the S2 and END cells of one layer *together*? (Hint: in those layers, which
positions still differ between the runs?)
"""),
    code("""
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
"""),
    code("""
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
"""),
    md("""
## Exercise 3: attention or MLP?

The residual stream is a sum: each block adds its attention output (`attn_out`) and its MLP output (`mlp_out`).

**Predict:** at END, which layers' attention outputs will restore the answer, and will any MLP matter there? At S2,
what must the layer-0 block do (attention, MLP, or both) for the information to be there at layer 1?
"""),
    code("""
attn = lab.patch_sweep(clean, corrupt, site="attn_out", by=("layer", "pos"), metric=metric, progress=False)
mlp = lab.patch_sweep(clean, corrupt, site="mlp_out", by=("layer", "pos"), metric=metric, progress=False)
for label, sweep in (("attn_out", attn), ("mlp_out ", mlp)):
    for pos, where in ((S2, "S2 "), (END, "END")):
        print(f"{label} at {where}, per layer:", [round(v, 2) for v in sweep.values[:, pos].tolist()])
mlp.figure()
"""),
    code("""
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
"""),
    md("""
## Exercise 4: which heads, at which position?

Now split each attention output into its heads (`z`, a head's output before the output projection), and patch
each head at each position on its own.

**Predict:** which heads will matter at S2, and which at END? Could a layer-0 head help *at END*? (A layer-0 head
at the end sees the tokens, each on its own: can it tell which name is the subject, when the only sign of it is
that the name occurs twice?)
"""),
    code("""
by_pos = lab.patch_sweep(clean, corrupt, site="z", by=("layer", "head", "pos"), metric=metric, progress=False)
head_explorer = by_pos.show()  # columns: head-major (H0 at every position, then H1, ...)
head_explorer
"""),
    code("""
# ANSWER
print("heads restoring > 0.05 at S2: ", {name(h): round(float(by_pos.values[h][S2]), 2) for h in HEADS
                                          if float(by_pos.values[h][S2]) > 0.05})
print("heads restoring > 0.05 at END:", {name(h): round(float(by_pos.values[h][END]), 2) for h in HEADS
                                          if float(by_pos.values[h][END]) > 0.05})
print("layer-0 heads at END:         ", {name(h): round(float(by_pos.values[h][END]), 2) for h in HEADS if h[0] == 0})
elsewhere = float(by_pos.values[..., [p for p in range(len(tokens)) if p not in (S2, END)]].abs().max())
print(f"largest effect anywhere else: {elsewhere:.3f}")
s2_heads = major({h: float(by_pos.values[h][S2]) for h in HEADS})
end_heads = major({h: float(by_pos.values[h][END]) for h in HEADS})
print("S2 heads (>= 0.15 at S2):", [name(h) for h in s2_heads], "| END heads (>= 0.15 at END):",
      [name(h) for h in end_heads])
# Layer-0 heads at S2, later heads at END, nothing at other positions (printed). A layer-0 head at END cannot help
# (its cells there are about 0 or slightly negative, printed): at the end it reads the tokens as they are, before
# anything has marked which name is the repeated one. That is worked out at S2, the one position where the two
# prompts differ, by layer-0 heads; later heads carry it to the end. From here on the heads that carry at least
# 0.15 on their own are called the **S2 heads** and the **END heads** (printed; notebook 04 uses the same rule).
# Note what this corruption keeps: both prompts repeat a name at S2, so these cells trace *which* name stands
# there, not how the model notices a repeat (a corruption without the repeat would ask that).
assert s2_heads and all(h[0] == 0 for h in s2_heads) and end_heads and all(h[0] > 0 for h in end_heads)
assert elsewhere < 0.05 and all(float(by_pos.values[(0, h)][END]) < 0.05 for h in range(lab.n_heads))
"""),
    carry("""
s2_heads = major({h: float(by_pos.values[h][S2]) for h in HEADS})  # the heads carrying >= 0.15 at S2
end_heads = major({h: float(by_pos.values[h][END]) for h in HEADS})  # ... and at END
print("S2 heads:", [name(h) for h in s2_heads], "| END heads:", [name(h) for h in end_heads])
"""),
    md("""
## Exercise 5 (after the workshop): where do these heads look?

**Predict:** from END, which token will the END heads of exercise 4 attend to: the first name (IO), the intro's
second name (S1) or S2? And the S2 heads, from S2? GPT-2 small has **duplicate-token heads**: from S2 they look back
at the earlier copy of the same name, S1. Will some head of ioi-tiny do that? And how would you tell a head that
looks at *the copy of its name* from one that looks at *a place in the sentence* that happens to hold it?
"""),
    code("""
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
"""),
    code("""
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
# The END heads look at S2, where the repeated name stands: most of their attention (printed). The S2 heads give S2
# itself more attention than either intro name, but less than half of it (printed): the rest is spread over the
# sentence. In our prompt a later head looks from S2 back at S1, as a duplicate-token head would. Swap the intro and
# it stays on the intro's *second* slot, now holding the other name: it looks at a place, not at the copy of its
# name. No head follows the copy in both orders (printed). Averaged over prompts of both orders, such a head gives S1
# a third or more of its attention and looks like a duplicate-token head; only the swap tells them apart (the model
# card's attention table has the two orders apart). Where ioi-tiny notices the repetition, attention patterns do not
# show; patching says only that what decides the answer is written at S2 by layer 0 and MLP0 (exercises 1, 3, 4).
assert all(attn_prob(h, END, S2) > 0.5 for h in end_heads)
assert all(max(attn_prob(h, S2, IO), attn_prob(h, S2, S1)) < attn_prob(h, S2, S2) < 0.5 for h in s2_heads)
assert looks_at_s1 and all(attn_swapped(h, IO_swapped) > 0.3 > 0.1 > attn_swapped(h, S1_swapped) for h in looks_at_s1)
assert min(attn_prob(both_orders, S2, S1), attn_swapped(both_orders, S1_swapped)) < 0.3
"""),
    md("""
## Exercise 6 (after the workshop): who writes the answer directly?

**Direct logit attribution** (`lab.direct_logit_attribution`) splits the last residual stream into what each part
wrote (embeddings, every head, every MLP) and reads each part through the unembedding; the parts add up to the
model's logit difference.

**Predict:** do the S2 heads write to the logits directly? Do the END heads, and with which sign on each name: do they
push the answer up or the repeated name down? (They look at S2, exercise 5.)
"""),
    code("""
dla_clean = lab.direct_logit_attribution(clean, metric)
print("largest parts at END:", [(part, round(v, 2)) for part, v in dla_clean.top(8)])
print(f"sum of the parts {float(dla_clean.parts_sum()[END]):+.2f} = the logit diff {float(dla_clean.total[END]):+.2f}")
dla_clean.show()
"""),
    code("""
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
"""),
    md("""
## What these heads are called here, and what this notebook cannot show

The heads are named by *where* patching finds them: the **S2 heads** (layer 0, working at S2) and the **END heads**
(later layers, working at END). Names for what a head *does*, such as Wang et al.'s duplicate-token, S-inhibition
and name-mover heads in GPT-2 small, rest on evidence this notebook does not collect: which head's output reaches
which other head's query, key or value (**path patching**), and what a head's OV circuit writes for a name it reads
(**copying scores**). Notebook 04 collects that evidence and only then asks which of those roles, if any, these
heads play.

## Exercise 7 (after the workshop): is that the circuit? Sufficiency

If the story is right, the S2 heads' outputs at S2 and the END heads' outputs at END should carry the clean behaviour
into the corrupt run by themselves. In the head x position heatmap above, **shift-click** those cells (each head at
its position) and watch the logit panel; the cell below does the same from code, as several edits in one run.

**Predict:** patched together, will they restore about 1, less, or more? What about the S2 heads alone, or the
END heads alone? (Remember exercises 2 and 4: what did the layer-0 heads write at END?)
"""),
    code("""
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
"""),
    code("""
# ANSWER
# The END heads alone restore about as much as the S2 and END heads together (printed). That is no evidence for the
# S2 heads: the END heads are the last writers before the logits, so patching their clean output is sufficient
# almost by definition, whatever feeds them. The S2 heads alone restore only part of it: MLP0 at S2 still reads the
# corrupt name's own embedding (exercise 3), so what the END heads find at S2 is only partly clean. Whether the S2
# heads are *needed* is a question for necessity (exercise 8), not for this test.
assert suff["END heads at END"] > 0.9 and 0.1 < suff["S2 heads at S2"] < suff["END heads at END"]
assert suff["both"] > 0.9 and abs(suff["both + the S2 heads at END"] - 1) < 0.1
"""),
    md("""
## Exercise 8 (after the workshop): necessity, by noising and by mean ablation

Sufficiency is half the test: is the circuit also *needed*? Two ways to take a part out of the **clean** run:

- **noising**: patch in the *corrupt* run's activation (the part now says "the other name is the subject");
- **mean ablation**: replace it by its mean over a **reference distribution**, prompts of the same template with
  other, random names (Wang et al. use such an "ABC" distribution: three different names, no name repeated). The
  part keeps its average behaviour for this template and loses the information specific to this prompt.

**Predict:** noising the END heads at END, or mean-ablating them: which hurts more, and will either *flip* the
answer (logit difference below 0)? And mean-ablating every head **outside** the circuit (every head at every position
except the S2 heads at S2 and the END heads at END): how much of the clean logit difference will survive?
"""),
    code("""
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
"""),
    code("""
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
"""),
    md("""
## Exercise 9 (after the workshop): noising vs denoising on the residual stream

Denoising patches clean into corrupt (is this cell *sufficient*?); noising patches corrupt into clean (is it
*necessary*?). Both report on the same scale: 1 = clean behaviour. For noising the plot's scale still says
"restored", but read it as **"how much of the clean behaviour is left"**: the important cells are the *low* ones.

**Predict:** for the `resid_pre` sweep, how will the noising heatmap relate to the denoising one of exercise 1?
Think about what one cell of the residual stream holds, in a layer where only that position differs.
"""),
    code("""
noise = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, direction="noise",
                        progress=False)
gap = (noise.values + res.values - 1).abs()
print(f"largest |noise + denoise - 1| over all cells: {float(gap.max()):.3f}, at layer {int(gap.max(1).values.argmax())}")
noise.figure()
"""),
    code("""
# ANSWER
# noise ~ 1 - denoise, cell by cell. Where one position holds the whole difference between the runs (layer 0: S2),
# swapping it is swapping everything: denoising restores 1, noising leaves 0. Elsewhere a cell that holds nothing
# different does nothing either way. The small gap (printed) is where S2 and END share the difference. The two can
# disagree where a part is sufficient without being necessary (others back it up, exercise 8); on this residual
# stream they nearly never do.
assert float(gap.max()) < 0.1
"""),
    md("""
## Exercise 10 (after the workshop): attribution patching, one forward and one backward pass

Attribution patching estimates every cell at once, from the gradient: the change of the metric if the activation
moved by (clean - corrupt), to first order.

**Predict:** the corruption flips the answer, a large change through softmax attention, layer norms and MLP0. Will
the estimate find the right cells? Will it get their *sizes* right?
"""),
    code("""
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
"""),
    code("""
# ANSWER
# A high correlation: the estimate lights up the same cells (S2 early, END late), so it is a good *map*. But the
# large cells come out too small (asserted below): a first-order step cannot follow the model's curvature between
# the two runs, and QUESTIONS.md traces where this model bends. One correlation over a grid of mostly-zero cells
# hides that. Use the estimate to find where to look, exact patching to measure.
assert corr > 0.8
assert float(attr.values[0, S2]) < 0.8 * float(res.values[0, S2])
big = [h for h in s2_heads if float(heads_exact.values[h]) > 0.15]
assert big and all(float(heads_attr.values[h]) < 0.8 * float(heads_exact.values[h]) for h in big)
"""),
    md("""
## Exercise 11 (after the workshop): one prompt can mislead, a dataset of pairs

The IOI papers average over many pairs with different names and templates; each pair has its own answer. A
**head** sweep patches a head at every position at once, so pairs of different lengths can share it; a **position**
sweep needs every prompt to have its tokens at the same positions, so it takes pairs of one length (04 uses one
template for that).

**Predict:** on held-out pairs in held-out templates, will the same heads stand out as on our one prompt?
"""),
    code("""
data = ilab.zoo.ioi_dataset(16, split="test")
pairs_metric = ilab.logit_diff([d["answer"] for d in data], [d["wrong"] for d in data])
avg = lab.patch_sweep([d["clean"] for d in data], [d["corrupt"] for d in data], site="z", by=("layer", "head"),
                      metric=pairs_metric, progress=False)
print(f"{len(data)} pairs, lengths {sorted({len(lab.to_str_tokens(d['clean'])) for d in data})}, e.g.",
      *[d["clean"] for d in data[:2]], sep="\\n  ")
print("heads restoring > 0.05, dataset:", {name(h): round(float(avg.values[h]), 2) for h in HEADS
                                            if avg.values[h] > 0.05})
print("heads restoring > 0.05, one prompt:", {name(h): round(float(heads_exact.values[h]), 2) for h in HEADS
                                               if heads_exact.values[h] > 0.05})
avg.figure()
"""),
    code("""
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
"""),
    md("## Everything you clicked, as code"),
    code("""
script = lab.log.to_code()  # every run with edits of this session, clicks included, as runnable Python
print(f"{len(script.splitlines())} lines; it starts:", *script.splitlines()[:8], sep="\\n")
"""),
    md("## The dashboard\n\nEverything together: heatmap + logits, a steering slider, the logit lens and attention."),
    code("""
lab.show(clean, corrupt, answer=answer, wrong=wrong)
"""),
    md("## On real GPT-2\n\nThe same code runs on any Hugging Face causal LM. GPT-2 needs a one-time download; "
       "offline (as in a classroom without internet) you get a clear message instead."),
    code("""
try:
    gpt2 = ilab.Lab.load("gpt2")
    print(gpt2)
except ilab.LoadError as e:
    print("GPT-2 is not available here:", str(e).splitlines()[-1])
"""),
]

STEERING = [
    md("""
# Steering with a contrast-pair vector

A **steering vector** is a direction in the residual stream. The classic recipe: the mean activation on prompts
with a property minus the mean on prompts without it. Adding `alpha * v` at one layer pushes the model towards
the property; **projecting it out** tests whether the model *uses* that direction. Each exercise below has a
surprise in it, if you predict first.

**Optional: after the workshop.** This notebook steers another behaviour than the IOI task of notebooks 01, 03 and
04: the capital of a country. Steering is a second method, taught here on the simplest contrast the model knows,
where "more France" has one right answer to check against; an IOI quantity (which name is the subject) has no
single direction to add at one position, and finding one is a research question of its own. The workshop's core
path (docs/teaching/RUN_SHEET.md) leaves this notebook out.

**How to work through it: predict, then check.** Write down your prediction *and why you expect it* before you run
the check. The answer is in the collapsed cell after the check, and it stays closed: Run All and Shift-Enter run it
without showing anything. Once you have compared, open it (click the bar on its left), change `show = False` to
`show = True` and run it. Every number the text relies on is printed by a cell.
"""),
    setup("""
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
    \"\"\"The k most likely next tokens, with their probabilities.\"\"\"
    probs = lab.run(prompt, edits=list(edits)).last_logits[0].softmax(-1)
    best = probs.topk(k)
    return [(lab.tokenizer.decode([i]), round(p, 3)) for p, i in zip(best.values.tolist(), best.indices.tolist())]


def p_paris(prompt, edits=()):
    return float(lab.run(prompt, edits=list(edits)).last_logits[0].softmax(-1)[paris])


for prompt in (spain, france, italy):
    print(f"{prompt!r:28} -> {top(prompt)}")
"""),
    md("""
## Write it yourself (after the workshop): the steering vector

`v` above is the mean residual stream of the positive prompts minus that of the negative ones, at `resid_post` of
`layer`, at each prompt's last position. Build it yourself from cached activations: `lab.run(prompt,
cache=[("resid_post", layer)]).cache["resid_post", layer]` is a tensor `[1, positions, d_model]` for one prompt (run
them one at a time: they differ in length). The check compares your vector with `v`.
"""),
    code("""
def my_vector(positive, negative):
    # mean over the positive prompts minus mean over the negative ones, resid_post of `layer`, last position
    ...
"""),
    code("""
def check_vector(fn):
    \"\"\"Compare fn's vector with the library's diff_of_means on the same prompts.\"\"\"
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
"""),
    code("""
# ANSWER
def my_vector(positive, negative):
    def mean_last(prompts):
        return torch.stack([lab.run(p, cache=[("resid_post", layer)]).cache["resid_post", layer][0, -1]
                            for p in prompts]).mean(0)

    return mean_last(positive) - mean_last(negative)


assert check_vector(my_vector)
"""),
    md("""
## Exercise 1 (after the workshop): steer Spain towards France

`ilab.steer("resid_post", layer, v, alpha=alpha, pos=-1)` adds `alpha * v` to the last position's residual stream.

**Predict** (with your reasoning): on *"The capital of Spain is"*, at which alpha does ' Paris' take the top? What
is the Spain prompt's activation plus exactly `1 * v`, given how `v` was made? Would you get something different by
copying the France prompt's activation in its place (`ilab.patch`)? Drag the slider to check.
"""),
    code("""
panel = lab.steering(spain, positive, negative, site="resid_post", layer=layer)
panel
"""),
    code("""
for alpha in (0.0, 0.5, 1.0, 1.5):
    print(f"alpha {alpha}: {top(spain, [ilab.steer('resid_post', layer, v, alpha=alpha, pos=-1)])}")
france_run = lab.run(france, cache=[("resid_post", layer)])
print("France's activation patched in:", top(spain, [ilab.patch("resid_post", layer, pos=-1, source=france_run)]))
spain_act = lab.run(spain, cache=[("resid_post", layer)]).cache["resid_post", layer][0, -1]
france_act = france_run.cache["resid_post", layer][0, -1]
gap = float((spain_act + v - france_act).norm())
print(f"|Spain's activation + v - France's activation| = {gap:.1f}, against |v| = {float(v.norm()):.1f}")
"""),
    code("""
# ANSWER
# v is the mean of (France - Spain) over two templates, and the template's share of each activation is the same
# for both countries: so Spain's activation + 1 * v is almost exactly France's activation (the gap printed is small
# next to |v|). At alpha 1 the steer *is* an activation patch from the France prompt, and gives the same
# distribution (printed). Below 1 the model is in between; from about 1, ' Paris' is on top.
assert gap < 0.2 * float(v.norm())
steer_1 = p_paris(spain, [ilab.steer("resid_post", layer, v, alpha=1.0, pos=-1)])
patched = p_paris(spain, [ilab.patch("resid_post", layer, pos=-1, source=france_run)])
assert abs(steer_1 - patched) < 0.05 and top(spain, [ilab.steer("resid_post", layer, v, alpha=1.0, pos=-1)])[0][0] == " Paris"
"""),
    md("""
## Exercise 2 (after the workshop): more is better?

**Predict:** if alpha 1 turns Spain into France, will alpha 6 make ' Paris' *more* likely than alpha 1.5? And on the
France prompt itself, `ilab.project(site, layer, v, coeff=10)` multiplies the component along `v` by ten (coeff 1
leaves the activation as it is): more ' Paris', or less?
"""),
    code("""
for alpha in (1.0, 1.5, 3.0, 6.0):
    print(f"Spain steered, alpha {alpha}: p(' Paris') = "
          f"{p_paris(spain, [ilab.steer('resid_post', layer, v, alpha=alpha, pos=-1)]):.3f}")
for coeff in (1.0, 3.0, 10.0):
    print(f"France, coeff {coeff}: {top(france, [ilab.project('resid_post', layer, v, coeff=coeff)])}")
"""),
    code("""
# ANSWER
# Less, both times. A little past the point where the activation looks like France's, ' Paris' may still gain a
# little (printed), but pushing further moves the activation off the ones the model was trained on: the later
# layers were never shown such a residual stream, and probability leaks to other tokens (printed). A steering
# vector has a useful range; size alpha against the residual norm (printed at the top) and check the output, not
# the direction.
alphas = {a: p_paris(spain, [ilab.steer("resid_post", layer, v, alpha=a, pos=-1)]) for a in (1.5, 6.0)}
coeffs = {c: p_paris(france, [ilab.project("resid_post", layer, v, coeff=c)]) for c in (1.0, 10.0)}
assert alphas[6.0] < alphas[1.5] and coeffs[10.0] < coeffs[1.0]
"""),
    md("""
## Exercise 3 (after the workshop): the same vector on Italy

**Predict:** steer *"The capital of Italy is"* with the same `v` at alpha 1. Does it say ' Paris'? What is Italy's
activation + v, written as a sum of the activations you know?
"""),
    code("""
print("Italy:           ", top(italy))
print("Italy + 1 * v:   ", top(italy, [ilab.steer("resid_post", layer, v, alpha=1.0, pos=-1)]))
"""),
    code("""
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
"""),
    md("""
## Exercise 4 (after the workshop): does the model use this direction? Project it out

`ilab.project(site, layer, v, coeff=0)` removes the component along `v` from every position. If `v` were "the
country" direction, removing it should leave the model unsure which capital to name.

**Predict:** what will the model say on the France prompt with `v` projected out? On the Spain prompt? On Italy?
(Hint: the cell also prints how far along `v` each prompt's activation sits, in units of |v|.)
"""),
    code("""
unit = v / v.norm()
for prompt in (france, spain, italy):
    act = lab.run(prompt, cache=[("resid_post", layer)]).cache["resid_post", layer][0, -1]
    print(f"{prompt!r:28} along v: {float(act @ unit) / float(v.norm()):+.2f} |v|   "
          f"projected out: {top(prompt, [ilab.project('resid_post', layer, v, coeff=0.0)])}")
"""),
    code("""
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
"""),
    md("## Generation with the steer on at every step"),
    code("""
plain = lab.generate(spain, max_new_tokens=8)
steered = lab.generate(spain, [ilab.steer("resid_post", layer, v, alpha=1.5)], max_new_tokens=8)
print("plain:  ", plain.text)
print("steered:", steered.text)
"""),
    md("## Persistent edits\n\nBind an edit to the model itself: every call — including `model.generate` from "
       "other code — runs with it, at the cost of a plain forward hook."),
    code("""
with lab.edit([ilab.steer("resid_post", layer, v, alpha=1.5)]):
    ids = lab.model.generate(**lab.tokenizer(spain, return_tensors="pt"), max_new_tokens=4, do_sample=False)
print(lab.tokenizer.decode(ids[0]))
print("hooks left:", lab.hooks())
"""),
]

LENS = [
    md("""
# Logit lens and attention patterns

The **logit lens** reads each layer's residual stream through the model's final norm and unembedding: what would
the model predict if it stopped here? Attention patterns show where each head looks.

**After the workshop** (or for a room ahead of schedule): the workshop's core path (docs/teaching/RUN_SHEET.md) runs
through notebooks 00, 01 and 04; this notebook looks at the same prompt from another side.

**How to work through it: predict, then check.** Write down your prediction *and why you expect it* before you run
the check. The answer is in the collapsed cell after the check, and it stays closed: Run All and Shift-Enter run it
without showing anything. Once you have compared, open it (click the bar on its left), change `show = False` to
`show = True` and run it. Every number the text relies on is printed by a cell.
"""),
    setup("""
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
"""),
    md("""
## Exercise 1 (after the workshop): what does the end predict, layer by layer?

**Predict** (with your reasoning): after layer 0 (before any head could have moved what S2 means to the end), which
name will the final position predict, if any? After which layer is ' Mary' on top, and when near-certain? If you
did notebook 01, its exercise 4 (what a layer-0 head at the end can see) is a clue.
"""),
    code("""
lab.lens(prompt)  # hover a cell for its top-5
"""),
    code("""
res = logit_lens(lab, prompt)
for layer in range(res.n_layers):
    print(f"after layer {layer}: top {res.top_tokens[layer][-1][0]!r}, p(' Mary') = {res.prob_of(mary)[layer, -1]:.3f}, "
          f"p(' John') = {res.prob_of(john)[layer, -1]:.3f}")
"""),
    code("""
# ANSWER
first_mary = next(layer for layer in range(res.n_layers) if res.top_tokens[layer][-1][0] == " Mary")
print(f"' Mary' is first on top after layer {first_mary}; p(' Mary') at the end: {res.prob_of(mary)[-1, -1]:.3f}")
# After layer 0 the end predicts ' John', the repeated name (printed): layer 0 at the end cannot yet know which
# name is the subject. After the heads that read S2 from the end, the prediction flips to ' Mary' (printed), and
# the later layers make it near-certain.
# Earlier positions predict ordinary continuations (see the widget).
assert res.top_tokens[0][-1][0] == " John" and 0 < first_mary < res.n_layers - 1
assert res.prob_of(mary)[-1, -1] > 0.5
"""),
    md("""
## Write it yourself (after the workshop): the lens

The logit lens reads the residual stream after a layer as if it were the last: the model's **final LayerNorm**, then
its **unembedding**. In ioi-tiny (a GPT-2) they are the modules `lab.model.transformer.ln_f` and `lab.model.lm_head`.
Write `my_lens(resid)`: `resid` is the residual stream after one layer at the last position, a `[d_model]` tensor;
return the `[vocab]` logits. The check compares your lens with the library's at every layer.
"""),
    code("""
def my_lens(resid):
    # the final LayerNorm, then the unembedding
    ...
"""),
    code("""
import torch


def lens_hint(got, resid, layer):
    \"\"\"What a lens that is not yet right most likely missed.\"\"\"
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
    \"\"\"Compare fn's next-token probabilities with the library's lens after every layer, at the last position.\"\"\"
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
"""),
    code("""
# ANSWER
def my_lens(resid):
    return lab.model.lm_head(lab.model.transformer.ln_f(resid))


assert check_lens(my_lens)
"""),
    md("""
## Exercise 2 (after the workshop): where do the heads look from the end?

Pick a layer and head in the widget: queries on the vertical axis, keys on the horizontal. It opens on the last
layer's head that attends most from the end to a name (the cell chooses it).

**Predict:** from the final position, which heads look at a name, and at which one: the first intro name, the second,
or the repeated name S2? Think about what each layer has to do (notebook 01 named the roles).
"""),
    code("""
run = lab.run(prompt, cache=["pattern"])


def att(run, layer, head, key):
    return float(run.cache["pattern", layer][0, head, END, key])


names = {"first intro name": FIRST, "second intro name": SECOND, "S2": S2}
last = lab.n_layers - 1
opening = max(range(lab.n_heads), key=lambda h: max(att(run, last, h, k) for k in names.values()))
print(f"the widget opens on L{last}H{opening}")
lab.attention(prompt, layer=last, head=opening)
"""),
    code("""
print("head   " + "  ".join(f"END->{label}" for label in names))
for layer in range(lab.n_layers):
    for head in range(lab.n_heads):
        print(f"L{layer}H{head}   " + "  ".join(f"{att(run, layer, head, k):>{len(label) + 5}.2f}"
                                          for label, k in names.items()))
"""),
    code("""
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
"""),
    carry("""
later = [(layer, h) for layer in range(1, lab.n_layers) for h in range(lab.n_heads)]  # the heads after layer 0
"""),
    md("""
## Exercise 3 (after the workshop): heads on one intro name, answer or position?

The heads after layer 0 that look from the end at one intro name could read the *answer* (the name that is not
repeated), or read a *slot* of the intro (the first name, or the second) whatever it holds. Swap the order of the
intro, *"When John and Mary went to the store, John gave a drink to"*: the answer is still Mary, but it now sits in
the second slot.

**Predict:** for each of these heads, will its attention follow Mary into the second slot, or stay on its slot?
"""),
    code("""
run_swapped = lab.run(swapped, cache=["pattern"])
slot_heads = [h for h in later if max(att(run, *h, k) for k in (FIRST, SECOND)) > 0.5]
print(f"head     {'ABBA (Mary first)':>20}     {'BABA (Mary second)':>20}")
for h in slot_heads:
    cells = [f"first {att(r, *h, FIRST):.2f} second {att(r, *h, SECOND):.2f}" for r in (run, run_swapped)]
    print(f"L{h[0]}H{h[1]}   " + "     ".join(cells))
"""),
    code("""
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
"""),
]


CIRCUIT = [
    md("""
# The IOI circuit, tool by tool

Notebook 01 found *where* patching restores the answer. Here we ask *how the pieces connect*, following the workflow
of Wang et al. 2022 (*Interpretability in the Wild*), which found the IOI circuit of GPT-2 small, with interplab's
circuit tools on `ioi-tiny`: which heads matter and through which input, where they look, who writes the answer
directly, path patching to the logits and into the heads that write it, every edge at once (EAP-IG), and whether
the circuit you end up with keeps the behaviour.

**How to work through it: predict, then check.** Every exercise starts with a question. Write down your prediction
*and why you expect it* before you run anything. Then run the check and compare. The answer is in the collapsed cell
after the check, and it stays closed: Run All and Shift-Enter run it without showing anything. Once you have
compared, open it (click the bar on its left), change `show = False` to `show = True` and run it.

At the end you compare what you found with the model's card, which was written from plain-PyTorch figures when the
model was trained, and see where the two disagree.
"""),
    setup("""
import re

import torch

import interplab as ilab
from interplab.zoo import EMBEDDED
from interplab.zoo.evaluate_ioi_tiny import fixed_template_dataset

lab = ilab.Lab.load("ioi-tiny")
pairs = fixed_template_dataset(8)  # held-out name pairs in one held-out template: every token at the same position
clean = [p["clean"] for p in pairs]
corrupt = [p["corrupt"] for p in pairs]  # S2 replaced by the IO name: the answer flips
metric = ilab.logit_diff([p["answer"] for p in pairs], [p["wrong"] for p in pairs])

tokens = lab.to_str_tokens(clean[0])
S2 = next(i for i, (a, b) in enumerate(zip(tokens, lab.to_str_tokens(corrupt[0]))) if a != b)
END = len(tokens) - 1
IO = torch.tensor([lab.to_str_tokens(c).index(p["answer"]) for c, p in zip(clean, pairs)])  # per pair (ABBA / BABA)
S1 = torch.tensor([lab.to_str_tokens(c).index(p["wrong"]) for c, p in zip(clean, pairs)])
HEADS = [(layer, head) for layer in range(lab.n_layers) for head in range(lab.n_heads)]


def name(head):
    return f"L{head[0]}H{head[1]}"


def major(scores, share=0.15):
    \"\"\"The heads carrying at least `share` of the effect on their own, largest first ({head: score}).\"\"\"
    return sorted((h for h in scores if scores[h] >= share), key=scores.get, reverse=True)


bound = metric.bind(lab.token_id)
clean_ld, corrupt_ld = (float(bound(lab.run(p).last_logits).mean()) for p in (clean, corrupt))
print(clean[0])
print(corrupt[0])
print(f"{len(pairs)} pairs of {len(tokens)} tokens; S2 at position {S2} ({tokens[S2]!r}), END at {END}")
print(f"mean logit diff IO - S: clean {clean_ld:+.2f}, corrupt {corrupt_ld:+.2f}")
assert clean_ld > 0 > corrupt_ld
"""),
    md("""
## Exercise 1: which part of which head?

Patching a head's **output** (`z`) from the clean run into the corrupt run tells you the head matters. Patching its
**query**, **key**, **value** or attention **pattern** instead tells you *which of its inputs* carries the difference.
The two prompts differ in one token: the name at S2.

**Predict** (with your reasoning): (a) in which layers will patching a head's output restore the answer? (b) for those
heads, which panel will look like the output panel: query, key, value or pattern? Think about what differs between
the runs: *which name* sits at S2, or *where* S2 is?
"""),
    code("""
sweeps = lab.patch_sweep_heads(clean, corrupt, metric, progress=False)  # output, q, k, v, pattern: 1 = clean restored
sweeps.show()
"""),
    code("""
# ANSWER
for site in ("z", "q", "k", "v", "pattern"):  # each panel's strongest heads
    values = sweeps[site].values
    top = sorted(HEADS, key=lambda h: -abs(float(values[h])))[:4]
    print(f"{site:8}", "  ".join(f"{name(h)} {float(values[h]):+.2f}" for h in top))
print("layers with a head whose output restores > 0.05:",
      sorted({h[0] for h in HEADS if float(sweeps["z"].values[h]) > 0.05}))
# The value panel looks like the output panel; query, key and pattern stay near 0. The heads read *what* is at S2
# through their values; *where* they look is the same in both runs: both prompts repeat a name at S2, and the
# corruption only changes which name.
reach = {site: float(sweeps[site].values.abs().max()) for site in ("q", "k", "pattern", "v")}
assert max(reach["q"], reach["k"], reach["pattern"]) < 0.25 * reach["v"], reach
"""),
    md("""
## Write it yourself: path patching, one sender into one receiver

Exercise 1 found a layer-0 head whose output matters, and later heads that matter through their **value** input.
Does the layer-0 head's output reach a later head's value *directly*, or only through other heads? **Path patching**
(Wang et al. 2022) asks exactly that, for one **sender** (a head's output) and one **receiver** (a later head's
query, key or value). As the paper does, it *noises*: it takes the clean run and asks how much of the corruption's
effect passes along that one path.

1. Run the clean prompts with the sender's output (`z`) taken from the corrupt run, and **every other head's output
   frozen** at its clean value (MLPs are recomputed). What changes in this run, changes because of the sender.
2. Run the clean prompts again with *only* the receiver's input (here its `v`) taken from run 1. Everything else is
   clean, so the only thing that differs is what reached the receiver from the sender.
3. Normalise: (metric of run 2 - clean) / (corrupt - clean): 1 = the whole effect of the corruption, 0 = none.

The lab's edits do the hooks for you: `ilab.patch("z", layer, head=h, source=some_run)` copies head h's output from
`some_run` (a `lab.run(...)`) at every position; `lab.run(prompts, edits=[...])` runs with a list of them;
`float(bound(run.last_logits).mean())` is a run's mean logit difference over the pairs; `clean_ld` and `corrupt_ld`
are the two runs'. The cell picks the sender and the receiver from exercise 1's sweeps. Replace the three `...`.
"""),
    code("""
sender = max([h for h in HEADS if h[0] == 0], key=lambda h: float(sweeps["z"].values[h]))  # layer 0's strongest
receiver = max([h for h in HEADS if h[0] > 0], key=lambda h: float(sweeps["v"].values[h]))  # the strongest value
print(f"sender {name(sender)}'s output -> receiver {name(receiver)}'s value")
clean_run, corrupt_run = lab.run(clean), lab.run(corrupt)


def my_path_patch(sender, receiver):
    \"\"\"The normalised effect of the corruption through sender -> receiver's value only (noising, as the paper).\"\"\"
    frozen = ...  # step 1a: a list of patches, every head but the sender, its z from clean_run
    sent = lab.run(clean, edits=frozen + [...])  # step 1b: and the sender's z from corrupt_run
    final = lab.run(clean, edits=[...])  # step 2: only the receiver's v, from `sent`
    return (float(bound(final.last_logits).mean()) - clean_ld) / (corrupt_ld - clean_ld)  # step 3
"""),
    code("""
def check_path_patch(my_path_patch):
    \"\"\"Your path patch against lab.path_patch, for this sender and receiver.\"\"\"
    want = lab.path_patch(clean, corrupt, metric, senders=[sender], receivers=[(*receiver, "v")]).value(*sender)
    try:
        got = my_path_patch(sender, receiver)
    except (TypeError, ilab.InterplabError) as err:  # a `...` still in place, or an edit that does not fit
        print(f"not yet: {type(err).__name__}: {str(err).splitlines()[0]}")
        return False
    if abs(got - want) > 1e-3:
        free = lab.run(clean, edits=[ilab.patch("z", sender[0], head=sender[1], source=corrupt_run)])
        unfrozen = lab.run(clean, edits=[ilab.patch("v", receiver[0], head=receiver[1], source=free)])
        loose = (float(bound(unfrozen.last_logits).mean()) - clean_ld) / (corrupt_ld - clean_ld)
        hint = ("that is the sender's effect with the other heads left free: freeze every other head's z at the clean "
                "run" if abs(got - loose) < 1e-3 else "check each step: which run each patch copies from, and that the "
                "last run patches only the receiver's v")
        print(f"not yet: yours {got:+.3f}, lab.path_patch {want:+.3f}: {hint}")
        return False
    print(f"right: {name(sender)} -> {name(receiver)}.v carries {got:+.3f} of the corruption's effect "
          f"(lab.path_patch: {want:+.3f})")
    return True


check_path_patch(my_path_patch)
"""),
    code("""
# ANSWER
def my_path_patch(sender, receiver):
    frozen = [ilab.patch("z", layer, head=head, source=clean_run) for layer, head in HEADS if (layer, head) != sender]
    sent = lab.run(clean, edits=frozen + [ilab.patch("z", sender[0], head=sender[1], source=corrupt_run)])
    final = lab.run(clean, edits=[ilab.patch("v", receiver[0], head=receiver[1], source=sent)])
    return (float(bound(final.last_logits).mean()) - clean_ld) / (corrupt_ld - clean_ld)


assert check_path_patch(my_path_patch)
# Part of the corruption's effect (printed) passes from the layer-0 head into this one later head's value, with
# every other head held clean: the path exists. (MLPs are recomputed, so a path through MLP0 counts as this head's
# path.) lab.path_patch runs the same two steps for many senders at once, one row per sender in a batch; exercise 6
# uses it for every earlier head into all the END heads' values together.
assert check_path_patch(my_path_patch) and my_path_patch(sender, receiver) > 0.05
"""),
    md("""
## Exercise 2 (after the workshop): at which position?

**Predict:** for each head you found in exercise 1, at which position does patching its output matter: at S2, at the
final position (END), or elsewhere? Could a head of the first layer do its job at END? (What can a first-layer head
at END know about which of the names is the subject?)
"""),
    code("""
by_pos = lab.patch_sweep(clean, corrupt, "z", ("layer", "head", "pos"), metric=metric, progress=False)
by_pos.show()
"""),
    code("""
# ANSWER
for h in HEADS:
    row = by_pos.values[h]
    if row.abs().max() > 0.05:
        p = int(row.abs().argmax())
        print(f"{name(h)}: largest effect {float(row[p]):+.2f} at position {p} ({tokens[p]!r})")
s2_heads = major({h: float(by_pos.values[h][S2]) for h in HEADS})
at_end = major({h: float(by_pos.values[h][END]) for h in HEADS})
print("S2 heads (>= 0.15 at S2):", [name(h) for h in s2_heads])
print("at END (>= 0.15):          ", [name(h) for h in at_end])
# The heads that matter at S2 are first-layer heads working at S2 itself; the heads that matter at END sit in later
# layers. A first-layer head at END sees the tokens one by one: nothing there says which name is the subject. What
# this corruption changes is *which* name stands at S2 (both runs repeat a name there), so these cells trace that
# name's identity from S2 to the end, not how the model notices the repeat: exercise 11 asks that.
assert all(h[0] == 0 for h in s2_heads) and all(h[0] > 0 for h in at_end)
"""),
    carry("""
s2_heads = major({h: float(by_pos.values[h][S2]) for h in HEADS})  # the heads carrying >= 0.15 at S2
at_end = major({h: float(by_pos.values[h][END]) for h in HEADS})  # ... and at END
print("at S2:", [name(h) for h in s2_heads], "| at END:", [name(h) for h in at_end])
"""),
    md("""
## Exercise 3 (after the workshop): where do they look?

**Predict:** from END, which name do the heads that matter at END attend to: IO, S1 or S2? And the heads after layer 0
that no sweep has shown so far: where do they look from END?
"""),
    code("""
run = lab.run(clean, cache=["pattern"])
rows = torch.arange(len(clean))


def attn(head, q, k):  # mean attention probability of `head` from position q to position k, over the pairs
    return float(run.cache["pattern", head[0]][rows, head[1], q, k].mean())


print("head   END->IO  END->S1  END->S2   S2->S2")
for h in HEADS:
    print(f"{name(h)}    {attn(h, END, IO):.2f}     {attn(h, END, S1):.2f}     {attn(h, END, S2):.2f}      "
          f"{attn(h, S2, S2):.2f}")
lab.attention(clean[0], layer=at_end[0][0], head=at_end[0][1])  # pick other heads in the view
"""),
    code("""
# ANSWER
print("END heads, attention END->S2:", {name(h): round(attn(h, END, S2), 2) for h in at_end})
intro_readers = [h for h in HEADS if attn(h, END, IO) >= 0.2 and attn(h, END, S1) >= 0.2]
slot_readers = [h for h in intro_readers if h[0] > 0 and h not in at_end]
print("heads attending from END to IO and S1 alike, on average over the pairs (>= 0.2 each):",
      [name(h) for h in intro_readers])
FIRST, SECOND = torch.minimum(IO, S1), torch.maximum(IO, S1)  # the intro names by position, whichever is IO
print("the same heads, by intro position (first name / second name):",
      {name(h): (round(attn(h, END, FIRST), 2), round(attn(h, END, SECOND), 2)) for h in intro_readers})
# The END heads look at S2, where the repeated name (the subject) stands; exercise 1 found them reading it through
# their values.
# Some heads (printed) look at IO and S1 alike on average, but split by position each of the later ones looks
# mostly at ONE intro slot, the first name or the second, whatever name stands there (the pairs mix both orders,
# so the averages come out about equal): positional heads, by their attention (what they write, an OV check would
# tell). Patching one changes little (asserted below), as it would for a head that does the same in the clean and
# in the corrupt run: that is why no sweep showed them.
assert all(attn(h, END, S2) > max(attn(h, END, IO), attn(h, END, S1)) for h in at_end)
assert slot_readers and all(abs(float(sweeps["z"].values[h])) < 0.1 for h in slot_readers)
assert all(max(attn(h, END, FIRST), attn(h, END, SECOND)) > 0.4 and
           max(attn(h, END, FIRST), attn(h, END, SECOND)) > 3 * min(attn(h, END, FIRST), attn(h, END, SECOND))
           for h in slot_readers)
"""),
    carry("""
intro_readers = [h for h in HEADS if attn(h, END, IO) >= 0.2 and attn(h, END, S1) >= 0.2]  # END -> IO and S1 alike
slot_readers = [h for h in intro_readers if h[0] > 0 and h not in at_end]
"""),
    md("""
## Exercise 4 (after the workshop): who writes the answer directly?

**Direct logit attribution** splits the last residual stream into what each part wrote (embeddings, every head, every
MLP) and reads each part through the unembedding, the final norm's scale frozen at its value on the run: the parts
add up exactly to the logit difference.

**Predict:** on the clean prompts, which heads write the most logit difference *directly*, and with which sign? What
is the direct share of the later intro readers, which look at both names? Does any part push towards the *wrong*
name?
"""),
    code("""
dla = lab.direct_logit_attribution(clean, metric)
print("largest parts at END:", [(part, round(v, 2)) for part, v in dla.top(8)])
print(f"sum of the parts {float(dla.parts_sum()[END]):+.3f} = the model's logit diff {float(dla.total[END]):+.3f}")
dla.show()
"""),
    code("""
# ANSWER
direct = {h: float(dla.heads[h][END]) for h in HEADS}
writers = sorted(direct, key=direct.get, reverse=True)[:len(at_end)]
print("largest direct writers:", [name(h) for h in writers], "| at END (exercise 2):", [name(h) for h in at_end])
print("parts pushing the wrong name by more than 1:", [(p, round(v, 2)) for p, v in dla.top(40) if v < -1])
print("later intro readers, direct share of the difference:", {name(h): round(direct[h], 2) for h in slot_readers})
# The heads that look at S2 from END write the answer directly: all push the S2 name *down*, and lift the other
# name, the layer-2 ones most (printed below): the other name wins.
# Other parts push the wrong way (printed), and these heads more than make up for it. The intro readers' share of the
# difference is small (printed): what each writes moves the two names about alike, whichever is the answer.
# What they write for each name, with another metric:
push = {}
for who, answer in (("IO", [p["answer"] for p in pairs]), ("S", [p["wrong"] for p in pairs])):
    d = lab.direct_logit_attribution(clean, ilab.logit_diff(answer, " the"))
    push[who] = {h: float(d.heads[h][END]) for h in HEADS}
    print(f"  logit({who}) - logit(' the'), intro readers:", {name(h): round(push[who][h], 2) for h in slot_readers},
          "| END heads:", {name(h): round(push[who][h], 2) for h in at_end})
assert torch.allclose(dla.parts_sum(), dla.total, atol=1e-3)
assert set(writers) == set(at_end)
assert all(push["S"][h] < 0 for h in at_end) and any(v < -1 for _, v in dla.top(40))
assert all(abs(direct[h]) < 0.1 * max(direct.values()) for h in slot_readers)
"""),
    md("""
## Exercise 5 (after the workshop): path patching, senders → logits

Wang et al. found GPT-2's **name movers** as the heads whose *direct path to the logits* carries the effect. Path
patching runs the clean prompt with one sender's output taken from the corrupt run and every other head frozen at
its clean value (MLPs are recomputed), so only the sender's own path reaches the logits. The default,
`direction="noise"`, is the paper's; 1 = the whole effect of the corruption, 0 = none.

**Predict:** the S2 heads had the largest effects in exercises 1 and 2. How large is their *direct* path to the
logits? Which heads carry it, and how will this list compare with exercise 4?
"""),
    code("""
to_logits = lab.path_patch(clean, corrupt, metric, senders="heads+mlps")
paths = {h: to_logits.value(*h) for h in HEADS}
print("path to the logits:", "  ".join(f"{name(h)} {v:+.2f}" for h, v in sorted(paths.items(), key=lambda x: -x[1])))
to_logits.show()
"""),
    code("""
# ANSWER
end_heads = major(paths)
writers = sorted(HEADS, key=lambda h: -float(dla.heads[h][END]))[:len(end_heads)]  # exercise 4's largest
print("heads with a direct path to the logits >= 0.15:", [name(h) for h in end_heads])
print("the same number of largest direct writers (exercise 4):", [name(h) for h in writers])
print("S2 heads' own direct path:", {name(h): round(paths[h], 2) for h in s2_heads})
# The S2 heads matter a lot, but not directly: their effect reaches the logits through later heads. The heads with
# the direct path are the ones exercise 4 found writing the answer: path patching and direct logit attribution agree.
# They are the heads that look at S2 from END. Are they name movers? Not yet shown: a name mover copies the name
# it reads (exercise 5b tests that), and these read S2, the subject.
assert set(end_heads) == set(writers)
assert all(abs(paths[h]) < min(paths[m] for m in end_heads) for h in s2_heads)
"""),
    carry("""
end_heads = major(paths)  # the heads whose path to the logits carries >= 0.15
"""),
    md("""
## Exercise 5b (after the workshop): what do they write? Copying scores

Attention says where a head reads; its **OV circuit** says what it writes there. Wang et al. call a head a *name
mover* only when, fed a name, its OV output read through the unembedding ranks that same name among the top 5
tokens. The share of names for which it does is the head's **copying score**; with the output negated, its
*negative* copying score (their negative name movers). `lab.copying_scores(prompts, positions)` computes both for
every head, over the names at the given positions (each name's state after MLP0, as in the paper).

**Predict:** the END heads read S2 and the S name ends up far below the IO name (exercise 4). Do they copy the name
they read, or write it negated? And the later heads that read one intro slot (exercise 3): do they copy its name?
"""),
    code("""
scores = lab.copying_scores(clean, [IO, S1])  # both intro names of every pair
print(f"{len(scores.names)} names, e.g. {scores.names[:4]}; top {scores.k} of {lab.model.config.vocab_size} tokens")
print("head    copying score   negative copying score   found as")
for h in end_heads + slot_readers:
    found = "END head (direct path)" if h in end_heads else "reads one intro slot"
    print(f"{name(h)}    {float(scores.positive[h]):.2f}            {float(scores.negative[h]):.2f}"
          f"                     {found}")
"""),
    code("""
# ANSWER
suppressors = [h for h in end_heads if float(scores.negative[h]) >= 0.9 and float(scores.positive[h]) < 0.1]
slot_copiers = [h for h in slot_readers if float(scores.positive[h]) >= 0.5]
print("END heads writing the name they read, negated:", [name(h) for h in suppressors], "of",
      [name(h) for h in end_heads])
print("intro-slot heads copying the name they read:  ", [name(h) for h in slot_copiers], "of",
      [name(h) for h in slot_readers])
# Every END head writes the name it reads *negated* (printed): fed a name, it pushes that same name down. It reads
# S2, so it pushes the subject down, and the other name wins. By the paper's evidence these are not name movers
# (those copy, and attend to IO): they are negative copying heads that attend to S2. The heads that read one intro
# slot do copy the name in it (printed): copiers by their OV circuit, positional by their attention.
assert set(suppressors) == set(end_heads)
assert set(slot_copiers) == set(slot_readers)
"""),
    md("""
## Exercise 6 (after the workshop): what feeds the END heads? senders → their queries, keys, values

In GPT-2 small the **S-inhibition heads** were found this way: path patching with the *name movers' queries* as the
receivers. The sender's path now reaches only the receivers (here all the END heads' queries, or keys, or values);
everything else stays clean.

**Predict:** which senders feed the END heads, and through which input: query, key or value? Use what exercise 1 told
you about which input of these heads sees the corruption.
"""),
    code("""
earlier = [h for h in HEADS if h[0] < max(m[0] for m in end_heads)]  # a sender must come before its receivers
into = {site: lab.path_patch(clean, corrupt, metric, senders=earlier, receivers=[(*m, site) for m in end_heads])
        for site in ("q", "k", "v")}
for site, res in into.items():
    top = sorted(earlier, key=lambda h: -abs(res.value(*h)))[:4]
    print(f"into the END heads' {site}:", "  ".join(f"{name(h)} {res.value(*h):+.2f}" for h in top))
into["v"].show()
"""),
    code("""
# ANSWER
feeders = major({h: into["v"].value(*h) for h in earlier})
reach = {site: float(into[site].values.nan_to_num().abs().max()) for site in ("q", "k", "v")}
print("senders into the END heads' values (>= 0.15):", [name(h) for h in feeders],
      "| S2 heads:", [name(h) for h in s2_heads])
print("largest |path| into the queries, keys, values:", {s: round(v, 3) for s, v in reach.items()})
# The S2 heads feed the END heads' *values*: what they wrote at S2 is what the END heads read there. Nothing of note
# reaches the queries from an earlier head (printed): no head's output steers where the END heads look, which is what
# S-inhibition heads do in GPT-2 small, so by the paper's evidence these are not S-inhibition heads either: with
# exercise 5b, each reads the subject at S2 and writes it negated.
assert set(feeders) == set(s2_heads)
assert max(reach["q"], reach["k"]) < 0.3 * reach["v"], reach
"""),
    carry("""
feeders = major({h: into["v"].value(*h) for h in earlier})  # the senders into the END heads' values (>= 0.15)
"""),
    md("""
**Predict:** and the later intro readers, which look at both names? If something steered their attention towards IO
(as GPT-2's S-inhibition heads steer the name movers), path patching into their queries would show it. Will it?
"""),
    code("""
into_slot_readers = lab.path_patch(clean, corrupt, metric,
                              senders=[h for h in HEADS if h[0] < min(c[0] for c in slot_readers)],
                              receivers=[(*h, s) for h in slot_readers for s in ("q", "k", "v")])
print("largest |path| into the intro readers' q, k, v together:",
      round(float(into_slot_readers.values.nan_to_num().abs().max()), 3))
"""),
    code("""
# ANSWER
# Next to nothing: each of them looks at its intro slot, whichever name stands there, whatever the END heads did. Their
# work is real (exercise 4, with another metric), but this corruption, which changes only S2, does not touch it.
assert float(into_slot_readers.values.nan_to_num().abs().max()) < 0.05
"""),
    md("""
## Exercise 7 (after the workshop): every edge at once (EAP-IG)

Path patching asks about one sender and chosen receivers. **Edge attribution** estimates *every* edge writer → reader
(the embeddings, heads and MLPs → each head's query, key and value, each MLP, the logits) from gradients; EAP-IG
averages the gradients along a path from the corrupt run's embeddings to the clean run's. In the graph, a click on an
edge patches exactly that edge; the slider picks how many top edges form a circuit.

**Predict:** which edges come out on top? Will a component appear that none of the head-level tools above listed?
"""),
    code("""
edges = lab.edge_attribution(clean, corrupt, metric, method="eap-ig", steps=5)
print(len(edges.edges), "edges; the top 12 by |estimate|:")
for edge, score in edges.top(12):
    print(f"  {edge:20} {score:+.2f}")
edges.show(lab, clean, corrupt, metric)
"""),
    code("""
# ANSWER
top = [edge for edge, _ in edges.top(12)]
exact = lab.edge_patch(clean, corrupt, metric, edges=top)  # the same edges, each patched exactly
for edge in top:
    print(f"  {edge:20} EAP-IG {edges[edge]:+6.2f}   exact {exact[edge]:+6.2f}")
mlps = sorted({part for edge in top for part in edge.split(" -> ") if part.startswith("MLP")})
print("MLPs among the top edges:", mlps)
# An MLP sits in the middle of the strongest chain: the S2 heads write into it, and it writes into the END heads'
# values. The head-level tools cannot show it as a step of its own: path patching recomputes the MLPs, so a sender
# is credited with its path through them.
mlp = mlps[0]
assert any(f"{name(r)} -> {mlp}" in top for r in s2_heads) and any(f"{mlp} -> {name(m)}.v" in top for m in end_heads)
assert torch.corrcoef(torch.tensor([[edges[e] for e in top], [exact[e] for e in top]]))[0, 1] > 0.8
"""),
    carry("""
top = [edge for edge, _ in edges.top(12)]
mlp = sorted({part for edge in top for part in edge.split(" -> ") if part.startswith("MLP")})[0]  # in the top edges
"""),
    md("""
## Exercise 8 (after the workshop): is that the circuit? Faithfulness

`lab.circuit(clean, corrupt, metric, edges)` runs the clean prompt with every edge *outside* your list carrying the
corrupt run instead (the IO-swap prompts of this notebook): faithfulness 1 = the whole clean logit difference kept,
0 = none of it. This is the edge-level test of the edge-attribution papers (EAP, EAP-IG). Wang et al. test their
GPT-2 circuit another way: they mean-ablate every *head* outside it over the ABC distribution (exercise 8 of
notebook 01 does that for ioi-tiny's heads) and compare the metric with and without the ablation, F(C) / F(M).
The two numbers answer related questions and need not agree.

### Write it yourself (after the workshop): the circuit's edges

Write your circuit as a list of edges, in the names `edges.top` prints (these examples are the format, not the
answer): `"embed -> L0H1.v"` (the token embeddings into a head's value input), `"L1H3 -> MLP2"`, `"MLP2 -> L3H1.v"`,
`"L3H1 -> logits"`. Build it from what you found,
with the names the earlier cells set: `s2_heads` (the S2 heads), `mlp` (the MLP of exercise 7), `end_heads` and
`name(head)`. The chain: S2's token → the S2 heads' values → ... → the END heads' values → the logits, with S2's
token also straight into the MLP (edge attribution ranks that edge high).

**Predict:** how much of the behaviour will your circuit keep? And the same circuit with the MLP left out (the S2
readers straight into the END heads' values)?
"""),
    code("""
my_circuit = [
    # your edges here, e.g. f"embed -> {name(s2_heads[0])}.v", ...
]
"""),
    code("""
def check_circuit(edges_list):
    \"\"\"Right when the list keeps >= 0.8 of the behaviour with at most 15 edges, each a real edge of the graph.\"\"\"
    unknown = [e for e in edges_list if e not in edges.edges]
    if not edges_list or unknown:
        print("not yet:", "the list is empty" if not edges_list else f"not edges of this graph: {unknown}")
        return False
    kept = lab.circuit(clean, corrupt, metric, edges_list).faithfulness
    ok = kept >= 0.8 and len(edges_list) <= 15
    print(f"{'right' if ok else 'not yet'}: {len(edges_list)} edges keep {kept:.2f} of the behaviour"
          + ("" if ok else " (aim: >= 0.80 with at most 15 edges)"))
    return ok


check_circuit(my_circuit)
"""),
    code("""
# ANSWER
my_circuit = ([f"embed -> {name(r)}.v" for r in s2_heads] + [f"embed -> {mlp}"] + [f"{name(r)} -> {mlp}" for r in s2_heads]
              + [f"{mlp} -> {name(m)}.v" for m in end_heads] + [f"{name(m)} -> logits" for m in end_heads])
assert check_circuit(my_circuit)
"""),
    md("""
The cell below compares your chain with the same chain without the MLP, and with the top edges of edge
attribution.
"""),
    code("""
def chain(middle):
    readers_in = [f"embed -> {name(r)}.v" for r in s2_heads]
    out = [f"{name(m)} -> logits" for m in end_heads]
    if middle is None:
        return readers_in + [f"{name(r)} -> {name(m)}.v" for r in s2_heads for m in end_heads] + out
    return (readers_in + [f"embed -> {middle}"] + [f"{name(r)} -> {middle}" for r in s2_heads]
            + [f"{middle} -> {name(m)}.v" for m in end_heads] + out)


circuits = {"heads only": chain(None), f"through {mlp}": chain(mlp)}
if my_circuit and all(e in edges.edges for e in my_circuit):
    circuits["yours"] = my_circuit
size = len(circuits[f"through {mlp}"])
circuits["top EAP-IG, |score|"] = [edge for edge, _ in edges.top(size)]
circuits["top EAP-IG, > 0"] = [edge for edge, score in edges.top(len(edges.edges)) if score > 0][:size]
faith = {}
for label, circ in circuits.items():
    res = lab.circuit(clean, corrupt, metric, circ)
    faith[label] = res.faithfulness
    print(f"{label:20} {res.n_edges:3d} of {res.total_edges} edges: faithfulness {res.faithfulness:.2f}")
"""),
    code("""
# ANSWER
print("the circuit through the MLP:", circuits[f"through {mlp}"])
hand = set(circuits[f"through {mlp}"])
for label in ("top EAP-IG, |score|", "top EAP-IG, > 0"):
    print(f"{label}: adds {sorted(set(circuits[label]) - hand)}, leaves out {sorted(hand - set(circuits[label]))}")
wrong_way = next(edge for edge, score in edges.top(len(edges.edges)) if score < 0)
with_it = lab.circuit(clean, corrupt, metric, circuits[f"through {mlp}"] + [wrong_way]).faithfulness
print(f"the strongest edge that pushes the wrong way: {wrong_way} ({edges[wrong_way]:+.2f}); "
      f"the circuit with it kept: faithfulness {with_it:.2f}")
# Through the MLP the small circuit keeps most of the logit difference; without the MLP almost none: the S2
# readers' output matters as that MLP's input, next to the name's own embedding. Here the top edges by |score| are
# the circuit you wrote, or nearly (printed): the ranking and the reasoning agree. They need not: an edge that
# pushes the *wrong* way ranks by its size like the others, and keeping it costs faithfulness (printed); a link of
# the chain can fall just below a cut. Rankings propose, `lab.circuit` checks.
assert faith[f"through {mlp}"] > 0.5 and faith["heads only"] < 0.2
assert edges[wrong_way] < 0 and with_it < faith[f"through {mlp}"]
"""),
    md("""
## Exercise 9 (after the workshop): estimates against exact patching (AtP and AtP*)

Attribution patching estimates every cell of a sweep from one forward and one backward pass. AtP* (Kramár et al.
2024) adds two fixes: `qk_fix` computes the attention pattern exactly for query and key cells (a linear step through
the softmax misses saturation) and `grad_drop` re-estimates with each layer's gradient path cut in turn (catching
effects that cancel).

**Predict:** the corruption flips the answer, a large and far from linear change. Will the plain estimate of the heads'
outputs find the heads of exercise 1 at the right size? Which of the two fixes could help, and where?
"""),
    code("""
def corr(a, b):
    return float(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1])


estimates = {label: lab.patch_sweep(clean, corrupt, site, ("layer", "head"), metric=metric, method="attribution", **kw)
             for label, site, kw in [("z", "z", {}), ("z, grad_drop", "z", {"grad_drop": True}),
                                     ("q", "q", {}), ("q, qk_fix", "q", {"qk_fix": True}),
                                     ("k", "k", {}), ("k, qk_fix", "k", {"qk_fix": True})]}
for label, est in estimates.items():
    exact_values = sweeps[label.split(",")[0]].values
    print(f"{label:13} correlation with exact {corr(est.values, exact_values):.2f}")
later = [h for h in HEADS if h[0] > 0]
print("later heads' output: correlation of the estimate with exact",
      round(corr(torch.tensor([float(estimates["z"].values[h]) for h in later]),
                 torch.tensor([float(sweeps["z"].values[h]) for h in later])), 2))
print("S2 heads' output, exact:", {name(h): round(float(sweeps["z"].values[h]), 2) for h in s2_heads},
      "| estimate:", {name(h): round(float(estimates["z"].values[h]), 2) for h in s2_heads},
      "| with grad_drop:", {name(h): round(float(estimates["z, grad_drop"].values[h]), 2) for h in s2_heads})
"""),
    code("""
# ANSWER
# The estimate finds the later heads (in the right order, a little low) but underestimates the S2 heads, by
# about half or more: their effect runs through nonlinear steps (an MLP, the final norm) to a logit difference
# that flips sign, far outside the range where one gradient is a good guide. grad_drop does not rescue them: it
# catches effects that cancel, not this. qk_fix brings the query and key estimates closer to exact (they are
# small here: the corruption does not change where the heads look). Use the estimates to rank, exact patching to
# measure.
assert corr(torch.tensor([float(estimates["z"].values[h]) for h in later]),
            torch.tensor([float(sweeps["z"].values[h]) for h in later])) > 0.8
for h in s2_heads:
    assert abs(float(estimates["z"].values[h])) < 0.6 * float(sweeps["z"].values[h])
    assert abs(float(estimates["z, grad_drop"].values[h])) < 0.6 * float(sweeps["z"].values[h])
for site in ("q", "k"):
    assert corr(estimates[f"{site}, qk_fix"].values, sweeps[site].values) > corr(estimates[site].values,
                                                                                   sweeps[site].values)
"""),
    md("""
## Your findings and the model card

The card (`interplab/zoo/ioi_tiny/MODEL_CARD.md`) was generated from plain-PyTorch patching and attention figures when
the model was trained. Its circuit section lists the heads whose output restores the most at the final position and
at S2. The cell reads those lists from the card and puts the heads restoring at least 0.15 next to
what path patching found (the same rule as above).
"""),
    code("""
card = (EMBEDDED["ioi-tiny"] / "MODEL_CARD.md").read_text()
section = card.split("## The circuit")[1]
end_text, s2_text = section.split("**final position**")[1].split("**S2 position**")


def card_heads(text):
    found = re.findall(r"^- L(\\d+)H(\\d+): ([+-][\\d.]+)", text, flags=re.M)  # "- L<layer>H<head>: <score> ..."
    return {(int(layer), int(head)): float(v) for layer, head, v in found}


card_end, card_s2 = card_heads(end_text), card_heads(s2_text.split("Largest")[0])
print("card, output at END:", {name(h): v for h, v in card_end.items()}, "-> restoring >= 0.15",
      [name(h) for h in major(card_end)])
print("path patching, END heads (senders -> logits):        ", [name(h) for h in end_heads])
print("card, output at S2: ", {name(h): v for h, v in card_s2.items()}, "-> restoring >= 0.15",
      [name(h) for h in major(card_s2)])
print("path patching, senders -> the END heads' values:     ", [name(h) for h in feeders])
claims = {key: [line.strip() for line in card.splitlines() if key in line]
          for key in ("not name movers", "by position", "MLPs add little")}
for key, lines in claims.items():
    print(f"the card on {key!r}:", lines)
mlp_sweep = lab.patch_sweep(clean, corrupt, "mlp_out", ("layer", "pos"), metric=metric, progress=False)
layer = int(mlp[3:])
print(f"{mlp}'s output patched at S2 alone restores {float(mlp_sweep.values[layer, S2]):.2f}; "
      f"at END {float(mlp_sweep.values[layer, END]):+.2f}")
extra = [h for h in major(card_end) if h not in end_heads]
print("the card counts at END, path patching here not:", {name(h): round(paths[h], 2) for h in extra})
assert set(end_heads) <= set(major(card_end)) and set(major(card_s2)) == set(feeders)
assert all(0.05 < paths[h] < 0.15 for h in extra)
assert all(claims.values()) and float(mlp_sweep.values[layer, S2]) > 0.5
"""),
    md("""
**Where they agree.** Path patching names the card's heads for both roles (the assert above checks it): the heads
whose output matters at the end are the ones with the direct path to the logits, and the heads whose output matters
at S2 are the ones that feed them. The lists are printed side by side above; where they differ, look at the heads
near the cut: the card averages 200 pairs of many templates, this notebook one template (exercise 10 mixes
templates). The card also says that some heads pick an intro name by position and that
patching one of them changes little: exercises 3, 4 and 6 agree.

**Where the tools say more, or otherwise.**
- The card calls the END heads neither name movers nor S-inhibition heads (printed above), with this notebook's
  evidence: they write the name they read negated (exercise 5b), and nothing reaches their queries (exercise 6).
  The card finds no duplicate-token head: the head that looks from S2 at S1 looks at a place in the sentence
  (notebook 01, exercise 5); if it is in these lists, it is for its other job, at END. The S2 heads carry the
  difference.
- The card's sentence on the MLPs (printed above): they add little at the final position, where notebook 01 looked;
  at S2, one MLP is a link the circuit cannot do without: its output patched at S2 alone restores most of the
  behaviour (printed above), edge attribution puts it in the strongest chain (exercise 7), and the circuit without it
  keeps almost nothing (exercise 8).
- The card's step where heads pick intro names by position (printed above) is read from attention patterns; no
  patching tool can test it with this corruption, which leaves both intro names in place. A direct logit attribution
  with another metric (exercise 4) supports it; a corruption that changes the intro names would test it causally.

## Exercise 10 (after the workshop): one template can mislead

Everything above used one template. **Predict:** on pairs from mixed held-out templates (of one token length, as path
patching needs), will path patching name the same END heads, and the same heads feeding their values? Why might it not?
"""),
    code("""
mixed = ilab.zoo.ioi_dataset(60, split="test")
lengths = [len(lab.to_str_tokens(d["clean"])) for d in mixed]
common = max(set(lengths), key=lengths.count)
mixed = [d for d, n in zip(mixed, lengths) if n == common]
mixed_clean, mixed_corrupt = [d["clean"] for d in mixed], [d["corrupt"] for d in mixed]
mixed_metric = ilab.logit_diff([d["answer"] for d in mixed], [d["wrong"] for d in mixed])
mixed_paths = lab.path_patch(mixed_clean, mixed_corrupt, mixed_metric)
mixed_direct = {h: mixed_paths.value(*h) for h in HEADS}
mixed_end_heads = sorted(HEADS, key=lambda h: -mixed_direct[h])[:len(end_heads)]  # as many as on the one template
mixed_v = lab.path_patch(mixed_clean, mixed_corrupt, mixed_metric, senders=earlier,
                         receivers=[(*m, "v") for m in mixed_end_heads])
mixed_feeders = sorted(earlier, key=lambda h: -mixed_v.value(*h))[:len(feeders)]
print(f"{len(mixed)} pairs of {common} tokens, e.g.:", *mixed_clean[:3], sep="\\n  ")
print("path to the logits:", "  ".join(f"{name(h)} {mixed_direct[h]:+.2f}" for h in
                                       sorted(HEADS, key=lambda h: -mixed_direct[h]) if mixed_direct[h] > 0.05))
print("top END heads:", [name(h) for h in mixed_end_heads], "| top senders into their values:",
      [name(h) for h in mixed_feeders], f"({', '.join(f'{mixed_v.value(*h):+.2f}' for h in mixed_feeders)})")
"""),
    code("""
# ANSWER
mixed_run = lab.run(mixed_clean, cache=["pattern"])
mixed_s2 = [next(i for i, (a, b) in enumerate(zip(lab.to_str_tokens(c), lab.to_str_tokens(k))) if a != b)
            for c, k in zip(mixed_clean, mixed_corrupt)]
to_s2 = {h: float(torch.stack([mixed_run.cache["pattern", h[0]][i, h[1], -1, s2] for i, s2 in enumerate(mixed_s2)])
                  .mean()) for h in HEADS}
print("heads with a direct path > 0.05 on the mixed pairs, attention END->S2 there:",
      {name(h): round(to_s2[h], 2) for h in HEADS if mixed_direct[h] > 0.05})
# The same heads feed the END heads' values, and the template's END heads all have a large direct path here too, but
# in another order and with other shares (printed above), and any head above the cut looks at S2 from END. The
# templates put S2 at other distances from the end, with other words between, and the heads share the work
# differently on each: a head near the cut can move across it, and a threshold on such a list is a choice, not a
# finding.
assert set(end_heads) <= set(major(mixed_direct)) and set(mixed_feeders) == set(feeders)
assert all(to_s2[h] > 0.5 for h in HEADS if mixed_direct[h] > 0.05)
"""),
    md("""
## Exercise 11 (after the workshop): a corruption without the repeat (ABC)

Every corruption so far kept a repeated name: the clean prompts repeat S at S2, the corrupt ones repeat IO there. So
every result above traced *which* name stands at S2, never *how the model notices* that a name is repeated. Wang et
al. also corrupt with an "ABC" prompt: S2 replaced by a third name, so no name repeats.

**Predict:** in the ABC prompts, will the END heads still look at S2 from the end? If their attention to S2 falls,
the repeat steers where they look: will restoring their queries or keys (patching from the clean run) then bring
the answer back, or is it still all in their values?
"""),
    code("""
others = [p["answer"] for p in pairs] + [p["wrong"] for p in pairs]
abc = []
for c, p in zip(clean, pairs):  # S2 (the last occurrence of the S name) replaced by a name not in the prompt
    before, _, after = c.rpartition(p["wrong"])
    abc.append(before + next(n for n in others if n not in c) + after)
lab.check_pair(clean, abc)  # the same token positions
abc_ld = float(bound(lab.run(abc).last_logits).mean())
print(abc[0])
print(f"mean logit diff IO - S: clean {clean_ld:+.2f}, ABC {abc_ld:+.2f}, corrupt {corrupt_ld:+.2f}")
abc_run = lab.run(abc, cache=["pattern"])
to_s2 = {h: (attn(h, END, S2), float(abc_run.cache["pattern", h[0]][rows, h[1], END, S2].mean())) for h in end_heads}
print("END heads, attention END->S2, clean / ABC:",
      {name(h): (round(a, 2), round(b, 2)) for h, (a, b) in to_s2.items()})
abc_sweeps = {site: lab.patch_sweep(clean, abc, site, ("layer", "head"), metric=metric, progress=False)
              for site in ("z", "q", "k", "v")}
for site, res in abc_sweeps.items():
    top = sorted(HEADS, key=lambda h: -abs(float(res.values[h])))[:4]
    print(f"patched from clean into ABC, {site:2}", "  ".join(f"{name(h)} {float(res.values[h]):+.2f}" for h in top))
"""),
    code("""
# ANSWER
dropped = [h for h, (a, b) in to_s2.items() if a - b > 0.15]
reach = {site: float(res.values.abs().max()) for site, res in abc_sweeps.items()}
print("END heads whose attention to S2 falls by more than 0.15 without the repeat:", [name(h) for h in dropped])
print("largest restored by one head's z, q, k, v:", {site: round(v, 2) for site, v in reach.items()})
print("each END head's value restores, ABC / IO swap (exercise 1):",
      {name(h): (round(float(abc_sweeps["v"].values[h]), 2), round(float(sweeps["v"].values[h]), 2)) for h in at_end})
# Without the repeat, some END heads look at S2 less (printed): the repeat does steer where they look. Yet restoring
# their queries or keys brings back next to nothing, while their values still bring back a clear share (printed,
# next to the same head under the IO swap: for some heads less than there): what the answer needs from these heads
# still comes in through their values, from S2, not through how hard they look there. Where ioi-tiny registers the
# repeat, these tools do not put in one head's query or key.
assert dropped and max(reach["q"], reach["k"]) < 0.1 < 0.3 < reach["z"]
assert all(float(abc_sweeps["v"].values[h]) > 0.1 for h in at_end)
"""),
    md("""
## Exercise 12 (after the workshop): the same cells on GPT-2 small

Wang et al.'s roles in GPT-2 small are defined by the evidence you used here: name movers have a direct path to the
logits, attend from the end to IO and copy it (copying score); S-inhibition heads are the senders into the name
movers' *queries*. The cells below run that evidence on GPT-2 small where it is at hand (downloaded once, or a
folder named by `INTERPLAB_GPT2`; docs/teaching/CHECKLIST.md) and put the heads it finds next to the paper's list.
ioi-tiny has a vocabulary of its own, much smaller than GPT-2's (the cell prints both sizes), so the pairs can be
reused only if GPT-2's tokenizer splits them into the same tokens: the cell checks that before using them. Without
the model the cells say so and skip.

**Predict:** will path patching and copying scores name the paper's name movers? And the senders into their queries:
the paper's S-inhibition heads?
"""),
    code("""
import os

try:
    big = ilab.Lab.load(os.environ.get("INTERPLAB_GPT2", "gpt2"))  # a hub id, or a folder holding GPT-2 small
except ilab.LoadError as err:
    big = None
    print("GPT-2 small is not at hand, so the cells of this exercise skip:", str(err).splitlines()[0])
if big is not None:
    print(f"vocabulary: ioi-tiny {len(lab.tokenizer)} tokens, this model {len(big.tokenizer)}")
    if [big.to_str_tokens(p) for p in clean + corrupt] != [lab.to_str_tokens(p) for p in clean + corrupt]:
        big = None
        print("this model's tokenizer splits the pairs into other tokens than ioi-tiny's: the cells skip")
    else:
        print("its tokenizer splits the pairs into the same tokens as ioi-tiny's: same positions")
PAPER = {"name movers": [(9, 6), (9, 9), (10, 0)], "S-inhibition heads": [(7, 3), (7, 9), (8, 6), (8, 10)]}
if big is not None:
    big_heads = [(layer, head) for layer in range(big.n_layers) for head in range(big.n_heads)]
    big_paths = big.path_patch(clean, corrupt, metric)  # every head -> the logits
    big_direct = {h: big_paths.value(*h) for h in big_heads}
    big_run = big.run(clean, cache=["pattern"])
    pair_rows = torch.arange(len(clean))
    big_scores = big.copying_scores(clean, [IO, S1])

    def big_attn(head, k):
        return float(big_run.cache["pattern", head[0]][pair_rows, head[1], END, k].mean())

    print("head     path to logits   END->IO   END->S1   END->S2   copying   negative copying")
    for h in sorted(big_heads, key=lambda h: -abs(big_direct[h]))[:10]:
        print(f"{h[0]}.{h[1]:<6} {big_direct[h]:+.2f}            {big_attn(h, IO):.2f}      {big_attn(h, S1):.2f}"
              f"      {big_attn(h, S2):.2f}      {float(big_scores.positive[h]):.2f}"
              f"      {float(big_scores.negative[h]):.2f}")
"""),
    code("""
if big is not None:
    found = {"name movers": [h for h in big_heads if big_direct[h] >= 0.05 and float(big_scores.positive[h]) >= 0.5
                             and big_attn(h, IO) > max(big_attn(h, S1), big_attn(h, S2))]}
    movers_first = min((h[0] for h in found["name movers"]), default=big.n_layers)
    senders = [h for h in big_heads if h[0] < movers_first]
    if found["name movers"] and senders:
        into_q = big.path_patch(clean, corrupt, metric, senders=senders,
                                receivers=[(*h, "q") for h in found["name movers"]])
        found["S-inhibition heads"] = [h for h in senders if into_q.value(*h) >= 0.05]
    for role, heads in PAPER.items():
        mine = found.get(role, [])
        dotted = [f"{h[0]}.{h[1]}" for h in mine]
        print(f"{role}: found here {dotted}; the paper's {[f'{h[0]}.{h[1]}' for h in heads]};",
              f"in both {[f'{h[0]}.{h[1]}' for h in heads if h in mine]}")
"""),
]


FEATURES = [
    md("""
# Features: a sparse autoencoder on the IOI circuit

About 20 minutes, after the workshop (optional). Notebooks 01 and 04 found *where* the model decides the answer of
*"When Mary and John went to the store, John gave a drink to"*: at the repeated name (S2) and at the end. Here we
ask *what* it represents at S2, in **features** of a **sparse autoencoder** (SAE): you will encode by hand, see why
feature edits keep an error term, find a feature the IOI task uses, then ablate and steer it.

The SAE ships with interplab: `ilab.SAE.load("ioi-tiny-sae")`, a TopK SAE on the residual stream entering layer 2,
with a card of its figures (`interplab/zoo/ioi_tiny_sae/card.json`). Everything runs offline, in seconds.

**How to work through it**, as in 01-04: write your prediction in the box under each question, then run the check;
replace each `...` and run the check under it. The answers stay closed under Run All: open one (click the bar on its
left), set `show = True` and run it.
"""),
    setup("""
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
    \"\"\"logit(answer) - logit(wrong) at the last position of `prompt`, run with `edits`.\"\"\"
    return float(bound(lab.run(prompt, edits=list(edits)).last_logits))


site = (sae.site, sae.layer)  # where the SAE reads: ("resid_pre", 2)
x = lab.run(clean, cache=[site]).cache[site]  # [1, positions, d_model]: the residual stream the SAE reads
clean_ld = logit_diff()
print(sae)
print(f"S2 = position {S2} ({tokens[S2]!r}), END = position {END}; clean logit diff {clean_ld:+.2f}")
"""),
    md("""
## 1. What an SAE is

An SAE reads one activation `x` (here `d_model` numbers per position) and writes it as a sum of a few **features**:

- **encode**: `f = act(W_enc x + b_enc)`, one number per feature (`d_sae` of them). `act` keeps most at 0: a ReLU,
  a threshold (JumpReLU), or, for this **TopK** SAE, only the `k` largest at each position. (An SAE saved with
  SAELens's `apply_b_dec_to_input`, as this one is, subtracts `b_dec` from `x` first.)
- **decode**: `x_hat = f W_dec + b_dec`: each active feature adds its activation times its **decoder direction**, a
  row of `W_dec`.

It is **overcomplete** (more features than `d_model`) and **sparse** (few active at once), trained so that `x_hat`
is close to `x`. The cell prints the sizes, the active features per position, and the fraction of `x`'s variance
that `x_hat` explains (FVE).
"""),
    code("""
f = sae.encode(x)  # [1, positions, d_sae]
x_hat = sae.decode(f)  # [1, positions, d_model]
print(f"d_model = {sae.d_in}, d_sae = {sae.d_sae} features ({sae.d_sae / sae.d_in:.0f}x overcomplete), k = {sae.k}")
print("active features at each position:", (f > 0).sum(-1)[0].tolist())
fve = 1 - float((x - x_hat).pow(2).sum() / (x - x.mean(1, keepdim=True)).pow(2).sum())
print(f"fraction of variance explained on this prompt: {fve:.3f}")
assert (f > 0).sum(-1).max() <= sae.k and sae.d_sae > sae.d_in
"""),
    md("""
## 2. Why the error term matters

To ask what a feature *does*, we edit it and run the rest of the model on the result. The reconstruction is not
perfect (the FVE above is below 1), so the site's value is rebuilt as

    decode(f') + (x - decode(f))

where `f'` are the edited features and `x - decode(f)` is the **error term** of the same run, what the SAE misses.
interplab does this for every feature edit (`ilab.zero(sae, feature=i)`, `ilab.steer(sae, ...)`, ...), as the sparse
feature circuits paper does (Marks et al. 2024). An edit that changes no feature then gives back `x` itself.

**Predict:** (a) the splice with nothing edited: the model's own logits exactly, or close? (b) Replace `x` by the
reconstruction `decode(encode(x))` alone, no error term: the FVE is high, so does the logit difference stay where it
is, move a little, or move a lot?
"""),
    code("""
own = lab.run(clean).last_logits
spliced = lab.run(clean, edits=[ilab.scale(sae, 1.0, feature=0)]).last_logits  # a feature edit that changes nothing
gap = float((spliced - own).abs().max())
print(f"(a) splice with nothing edited: largest logit difference from the model's own {gap:.1e}")
recon_ld = logit_diff(edits=[ilab.set_value("resid_pre", sae.layer, value=x_hat)])  # x replaced by x_hat alone
print(f"(b) logit diff: the model's own {clean_ld:+.2f}, with x replaced by decode(encode(x)) {recon_ld:+.2f}")
"""),
    code("""
# ANSWER
assert gap <= 1e-5
print(f"without the error term the logit difference moves by {recon_ld - clean_ld:+.2f} "
      f"({abs(recon_ld - clean_ld) / abs(clean_ld):.0%} of it), though the FVE is {fve:.3f}")
assert abs(recon_ld - clean_ld) > 0.05 * abs(clean_ld)
# (a) Exactly the model's logits (up to float rounding): decode(f) + (x - decode(f)) is x.
# (b) It moves, by the share printed: the few percent of variance the SAE misses is not noise the model ignores.
# Without the error term, an ablation's effect would mix the feature's effect with the reconstruction's; with it,
# the only change to the model is the edited feature's own: df * its decoder direction.
"""),
    md("""
## Write it yourself: encode by hand

Write the encoder of this TopK SAE from its weights: `sae.W_enc` `[d_model, d_sae]`, `sae.b_enc` `[d_sae]`,
`sae.b_dec` `[d_model]`, `sae.k`. In SAELens's convention (`sae.apply_b_dec_to_input` is `True` for this one):

1. `pre = (x - b_dec) @ W_enc + b_enc`, the pre-activations `[..., d_sae]`;
2. at each position keep the `k` largest pre-activations (`torch.topk(..., dim=-1)`), ReLU them, and set every
   other feature to 0 (`torch.zeros_like(pre).scatter(-1, indices, values)` puts values back at their indices).

The check compares yours with `sae.encode(x)` and with `lab.feature_acts(clean, sae)`, which runs the model and
encodes its activation at the SAE's site.
"""),
    code("""
def my_encode(x):
    # x: [..., d_model] -> [..., d_sae]
    ...
"""),
    code("""
def check_encode(fn):
    \"\"\"Your encoder on the clean prompt's activation against the library's.\"\"\"
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
"""),
    code("""
# ANSWER
def my_encode(x):
    pre = (x - sae.b_dec) @ sae.W_enc + sae.b_enc
    values, indices = pre.topk(sae.k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, indices, values.relu())


assert check_encode(my_encode)
# A ReLU SAE would be pre.relu(); a JumpReLU one pre.relu() * (pre > sae.threshold). The rest of the lab reads
# every architecture through sae.encode and sae.decode.
"""),
    md("""
## Exercise 1: which features fire at S2?

`lab.features(prompt, sae)` lists the most active features at each token; `.show()` opens the feature view. Click a
token: its top features as bars. Click a feature: where it fires on this prompt, its top contexts (other IOI
prompts, each token shaded by the activation), the tokens its decoder direction raises and lowers, and a steering
slider and an ablate toggle with the logits they give.

**Predict:** at S2 (the repeated name), will the most active feature be one that fires on that particular name
wherever it appears, or one that fires only at this position?
"""),
    code("""
features = lab.features(clean, sae)  # the top 5 at each token, as the view shows them
view = features.show()
view
"""),
    code("""
print("top features (feature, activation) at S2:", [(i, round(a, 1)) for i, a in features.at(S2)])
s2_top = features.at(S2)[0][0]
acts = lab.feature_acts(clean, sae)[0, :, s2_top]
print(f"feature {s2_top} at every position:", {f"{p}:{t!r}": round(float(a), 1) for p, (t, a) in
                                               enumerate(zip(tokens, acts)) if a > 0})
"""),
    code("""
# ANSWER
others = float(acts[torch.arange(len(tokens)) != S2].max())
in_corrupt = float(lab.feature_acts(corrupt, sae)[0, S2, s2_top])
print(f"feature {s2_top}: {float(acts[S2]):.1f} at S2, at most {others:.1f} at any other position of this prompt; "
      f"at S2 in the corrupt prompt {in_corrupt:.1f}")
assert float(acts[S2]) > 1.5 * others
# It fires most at S2, more than at the first John (position 3; both printed).
# And it fires as strongly at S2 of the corrupt prompt, where the repeated name is Mary. One prompt says little:
# exercise 3 asks whether the model uses it, exercise 4 looks at a dataset.
"""),
    md("""
## Exercise 2: attribution over features x positions

Activation patching works on features as on any site: patch feature `i` at position `p` from the clean run into the
corrupt run, and see how much of the clean logit difference comes back (normalised: 1 = clean, 0 = corrupt). There
are `d_sae` x positions cells, so first the **attribution** estimate (one forward and one backward per run, as in
01's attribution patching); a click on a cell of the heatmap runs the exact patch of that feature at that position.

**Predict:** will the feature that fires most at S2 (exercise 1) carry the largest attribution at S2? (What differs
between the clean and the corrupt prompt at S2?)
"""),
    code("""
attr = lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), metric, method="attribution")
top_at_s2 = attr.values[:, S2].topk(5).indices.tolist()
exact = lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), metric, features=top_at_s2)  # exact: one run each
for row, i in enumerate(top_at_s2):
    print(f"feature {i:3d} at S2: attribution {float(attr.values[i, S2]):+.3f}, exact patch "
          f"{float(exact.values[row, S2]):+.3f}")
print(f"feature {s2_top} (exercise 1) at S2: attribution {float(attr.values[s2_top, S2]):+.3f}")
attr.show()
"""),
    code("""
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
"""),
    md("""
## Exercise 3: which feature does the model need at S2? Ablate

Zero one feature at S2, `ilab.zero(sae, feature=i, pos=S2)` (the error term kept, so nothing else changes), and
measure the clean logit difference. Do it for each feature active at S2.

**Predict:** which one lowers the logit difference most, and by how much of it: a tenth, a third, all of it?
"""),
    code("""
active = [i for i, a in enumerate(lab.feature_acts(clean, sae)[0, S2].tolist()) if a > 0]
drops = {i: clean_ld - logit_diff(edits=[ilab.zero(sae, feature=i, pos=S2)]) for i in active}
ranked = sorted(drops, key=drops.get, reverse=True)
for i in ranked[:5]:
    print(f"zero feature {i:3d} at S2: logit diff {clean_ld:+.2f} -> {clean_ld - drops[i]:+.2f}")
ioi_feature = ranked[0]
"""),
    code("""
# ANSWER
print(f"feature {ioi_feature}: drop {drops[ioi_feature]:.2f} ({drops[ioi_feature] / clean_ld:.0%} of the logit "
      f"diff); the runner-up, feature {ranked[1]}: {drops[ranked[1]]:.2f}")
assert ioi_feature == s2_top and drops[ioi_feature] > 1.5 * drops[ranked[1]]
# The feature that fires most at S2 is also the one the model needs most there: zeroing it alone removes the share
# printed, more than any other active feature. Patching (exercise 2) missed it; ablation finds it.
"""),
    carry("""
ioi_feature = ranked[0]
"""),
    md("""
## Exercise 4: one prompt can mislead: the evidence over a dataset of pairs

The evidence the literature asks for is over many prompts: where the feature fires (at S2 and elsewhere), and what
ablating it does compared with ablating the other features. The cell takes held-out pairs (other names, other
templates; S2 is where each clean and corrupt prompt differ), and for every feature active at S2 in more than half
of them, zeroes it at each pair's S2.

**Predict:** will the same feature stand out on the dataset as on our one prompt? Will it fire anywhere but S2?
"""),
    code("""
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
    \"\"\"Zero `feature` at each pair's own S2: one edit per S2 position counted from the end (pos=-5 is the fifth
    token from the end of each row, whatever its length), on the rows that have S2 there.\"\"\"
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
"""),
    code("""
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
"""),
    md("""
## Exercise 5: steering the feature

`ilab.steer(sae, feature=i, alpha=a, pos=S2)` adds `a` times the feature's decoder direction at S2 (the site's value
becomes decode(f with feature i raised by a) + error). With `a` equal to minus the feature's activation there, the
feature is at 0.

**Predict:** steering with `a` = minus its activation at S2: the same logit difference as zeroing it, or not? With
twice that (the feature pushed below 0)? With plus its activation (the feature doubled)?
"""),
    code("""
act_s2 = float(lab.feature_acts(clean, sae)[0, S2, ioi_feature])
ablated = logit_diff(edits=[ilab.zero(sae, feature=ioi_feature, pos=S2)])
steered = {m: logit_diff(edits=[ilab.steer(sae, feature=ioi_feature, alpha=m * act_s2, pos=S2)])
           for m in (-2, -1, 0, 1, 2)}
print(f"feature {ioi_feature} at S2: activation {act_s2:.1f}; zeroed: logit diff {ablated:+.2f}")
for m, v in steered.items():
    print(f"steered at S2 by alpha = {m:+d} x {act_s2:.1f}: logit diff {v:+.2f}")
"""),
    code("""
# ANSWER
assert abs(steered[-1] - ablated) < 1e-3 and steered[-2] < steered[-1] < clean_ld and steered[1] <= clean_ld
# -1 x the activation is the ablation exactly (the same change of the site: minus the activation times the
# direction). Twice that lowers the logit difference further. Doubling the feature does not raise it (printed): the
# model already reads enough of it at its usual size; more of a feature is not more of the behaviour.
print({m: round(v - clean_ld, 2) for m, v in steered.items()})
"""),
    md("""
The feature view steers and ablates too: `lab.feature(sae, i).show(prompt)` opens it with feature `i` selected; its
slider adds `alpha` times the decoder direction at every position, its toggle zeroes the feature at every position,
and the bars show the logits that gives.
"""),
    code("""
steer_view = lab.feature(sae, ioi_feature).show(clean, metric=metric, alpha_range=(-2 * act_s2, 2 * act_s2))
steer_view
"""),
    md("""
## Caveats

- **The reconstruction is not perfect**: the FVE (printed below) is below 1, and section 2 showed that the missing
  part moves the logit difference. Feature edits keep the error term for that reason.
- **A feature's label is a hypothesis.** "Fires at the repeated name" is what we saw on IOI prompts; the cell below
  tests it on a prompt where nothing is repeated.
- **The SAE sits at one site**, the residual stream entering layer 2. What reads the feature in layers 2 and 3, and
  what made it in layers 0 and 1, other sites describe (notebooks 01 and 04), or other SAEs.

**Predict:** on *"When Mary and John went to the store, Tom gave a drink to"* (the second name is new), will the
feature fire at that name, and how strongly compared with the repeated *John*?
"""),
    code("""
import json
from importlib.resources import files

card_all = json.loads((files("interplab") / "zoo" / "ioi_tiny_sae" / "card.json").read_text())
print(f"FVE: this prompt {fve:.3f}; the card's {card_all['documents']} held-out documents "
      f"{card_all['fraction_of_variance_explained']:.3f}")
new_name = "When Mary and John went to the store, Tom gave a drink to"
lab.check_pair(clean, new_name)
on_new = float(lab.feature_acts(new_name, sae)[0, S2, ioi_feature])
print(f"feature {ioi_feature} at S2: {act_s2:.1f} on 'John' (repeated), {on_new:.1f} on 'Tom' (new)")
"""),
    code("""
# ANSWER
assert on_new > 0.5 * act_s2
# It fires about as strongly on a name that is *not* repeated. So "repeated name" is the wrong label: on this evidence
# it is closer to "a name in the second clause's subject slot", which in IOI prompts is S2. The model uses it there
# (exercises 3 and 4); what it means in general is a hypothesis to test on more prompts (the top contexts).
"""),
]

NOTEBOOKS = {"00_primer.ipynb": PRIMER, "01_ioi_patching.ipynb": IOI, "02_steering.ipynb": STEERING, "03_logit_lens.ipynb": LENS,
             "04_circuit.ipynb": CIRCUIT, "05_features.ipynb": FEATURES}


PREDICTION = """**Your prediction** (double-click this cell, write it with your reason, then run the next cell):

..."""


def with_prediction_boxes(cells):
    """After each question that asks for a prediction, a markdown cell to write it in before the reveal."""
    out = []
    for cell in cells:
        out.append(cell)
        if cell.cell_type == "markdown" and "**Predict" in cell.source:
            out.append(md(PREDICTION))
    return out


def write(name, cells, folder=HERE):
    nb = nbf.v4.new_notebook()
    nb.cells = with_prediction_boxes(cells)
    for i, cell in enumerate(nb.cells):  # fixed ids (nbformat draws random ones), so a rebuild changes only what changed
        cell.id = f"cell-{i}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbf.write(nb, Path(folder) / name)


if __name__ == "__main__":
    for name, cells in NOTEBOOKS.items():
        write(name, cells)
    print("wrote", ", ".join(p.name for p in sorted(HERE.glob("*.ipynb"))))
