"""Seed 001 (activation patching on IOI), the interplab way.

The seed patches GPT-2 with nnsight on an IOI pair (clean "... Mary gave a bottle of milk to" -> " John", corrupt:
the second name swapped -> " Mary"): a layer sweep of the block outputs, layer x position, single heads (slices of
c_proj's input), noising vs denoising, the normalised logit difference, and a heatmap. Here each is one
lab.patch_sweep on ioi-tiny, the embedded 4-layer GPT-2 trained on IOI (GPT-2's weights are not at hand offline),
and each is checked to 1e-4 against the seed's own loop - one forward per cell, written with plain PyTorch hooks on
the model's modules, no interplab code.

    python examples/seeds/001_activation_patching.py
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import time  # noqa: E402

import plotly.graph_objects as go  # noqa: E402
import torch  # noqa: E402

import interplab as ilab  # noqa: E402

torch.set_num_threads(1)
ATOL = 1e-4
started = time.perf_counter()

lab = ilab.Lab.load("ioi-tiny")
model, tokenizer = lab.model, lab.tokenizer
clean_prompt = "After John and Mary went to the store, Mary gave a bottle of milk to"
corrupted_prompt = "After John and Mary went to the store, John gave a bottle of milk to"
correct_token = tokenizer(" John")["input_ids"][0]  # clean answer
incorrect_token = tokenizer(" Mary")["input_ids"][0]  # corrupted answer
# interplab's metric names the answers; it reads the last real position of each prompt, as the seed's [0, -1] does
metric = ilab.logit_diff(" John", " Mary")
assert (lab.token_id(" John"), lab.token_id(" Mary")) == (correct_token, incorrect_token)

blocks = model.transformer.h
n_layers, n_heads = len(blocks), model.config.n_head
head_dim = model.config.n_embd // n_heads
seq_len = len(tokenizer.encode(clean_prompt))
lab.check_pair(clean_prompt, corrupted_prompt)  # same length: positions line up, as patching by position needs
tokens = lab.to_str_tokens(clean_prompt)
print(lab)
print("tokens:", tokens)


# ---- the reference: the seed's loop with plain PyTorch hooks (no interplab code) ------------------------------------

def logit_diff(logits, correct_idx, incorrect_idx):
    """The seed's metric: how much the model prefers the correct over the incorrect token."""
    return (logits[0, -1, correct_idx] - logits[0, -1, incorrect_idx]).item()


def first(out):
    return out if isinstance(out, torch.Tensor) else out[0]  # a block returns a tensor or a tuple (transformers' age)


def trace(prompt, blocks_out=None, c_proj_in=None):
    """One forward, like nnsight's `with model.trace(prompt)`: returns the logits and every block's output and every
    c_proj input (the heads' outputs side by side, before the projection). blocks_out / c_proj_in = {layer: fn}
    rewrite those tensors in place (fn gets a copy it may write into); what is saved is after the rewrite."""
    blocks_out, c_proj_in = blocks_out or {}, c_proj_in or {}
    hiddens, zs, handles = {}, {}, []

    def on_block(layer):
        def hook(module, args, out):
            h = first(out)
            if layer in blocks_out:
                h = blocks_out[layer](h.clone())
                out = h if isinstance(out, torch.Tensor) else (h, *out[1:])
            hiddens[layer] = h.detach().clone()
            return out
        return hook

    def on_c_proj(layer):
        def hook(module, args):
            z = args[0]
            if layer in c_proj_in:
                z = c_proj_in[layer](z.clone())
            zs[layer] = z.detach().clone()
            return (z, *args[1:])
        return hook

    try:
        for layer, block in enumerate(blocks):
            handles.append(block.register_forward_hook(on_block(layer)))
            handles.append(block.attn.c_proj.register_forward_pre_hook(on_c_proj(layer)))
        with torch.no_grad():
            logits = model(tokenizer(prompt, return_tensors="pt")["input_ids"]).logits
    finally:
        for h in handles:
            h.remove()
    return logits, [hiddens[i] for i in range(n_layers)], [zs[i] for i in range(n_layers)]


def put(index, src):
    """fn for trace(): write src[index] into the tensor at index (the seed's `x[index] = clean[index]`)."""
    def fn(x):
        x[index] = src[index]
        return x
    return fn


def close(a, b, what):
    a, b = torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32)
    assert a.shape == b.shape, f"{what}: shapes {tuple(a.shape)} vs {tuple(b.shape)}"
    err = (a - b).abs().max().item()
    assert err < ATOL, f"{what}: max error {err:.2e}"  # a NaN fails too
    return err


def show(name, values, labels):
    print(f"  {name}:")
    for label, row in zip(labels, values.reshape(len(labels), -1).tolist()):
        print(f"    {label:>3}  " + " ".join(f"{v:+6.2f}" for v in row))


# ---- runs 1 and 2: clean (activations saved) and the corrupted baseline ---------------------------------------------
# nnsight: [layer.output[0].save() for layer in model.transformer.h] and model.lm_head.output.save().
# interplab: lab.run(prompt, cache=[site, ...]) keeps copies of the sites it names, and every run keeps its logits.
clean_logits, clean_hiddens, clean_attn = trace(clean_prompt)
corrupted_logits, corrupted_hiddens, _ = trace(corrupted_prompt)
clean_diff = logit_diff(clean_logits, correct_token, incorrect_token)
corrupted_diff = logit_diff(corrupted_logits, correct_token, incorrect_token)
clean_run = lab.run(clean_prompt, cache=["resid_post", "z"])
corrupted_run = lab.run(corrupted_prompt)
close(clean_run.logits, clean_logits, "clean logits")
close(corrupted_run.logits, corrupted_logits, "corrupted logits")
for layer in range(n_layers):  # resid_post: the block's output; z: c_proj's input (head h = h-th d_head columns)
    close(clean_run.cache["resid_post", layer], clean_hiddens[layer], f"cached resid_post {layer}")
    close(clean_run.cache["z", layer], clean_attn[layer], f"cached z {layer}")
close(metric.bind(lab.token_id)(clean_run.last_logits), [clean_diff], "logit_diff metric")
print(f"\nlogit diff ' John' - ' Mary': clean {clean_diff:+.3f}, corrupted {corrupted_diff:+.3f}")
assert clean_diff > 0 > corrupted_diff  # the model solves both prompts: there is something to restore

# ---- layer sweep (denoising): each block's output, every position, clean into corrupted -----------------------------
# nnsight: a trace of the corrupted prompt per layer with model.transformer.h[l].output[0][:] = clean_hiddens[l].
# interplab: one call; site="resid_post" is the block output, by=("layer",) patches every position at once.
results = torch.zeros(n_layers)
for layer_idx in range(n_layers):
    patched_logits, _, _ = trace(corrupted_prompt, blocks_out={layer_idx: put(slice(None), clean_hiddens[layer_idx])})
    results[layer_idx] = logit_diff(patched_logits, correct_token, incorrect_token)
normalized = (results - corrupted_diff) / (clean_diff - corrupted_diff)

by_layer = lab.patch_sweep(clean_prompt, corrupted_prompt, site="resid_post", by=("layer",), metric=metric,
                           progress=False)
print("\n[layer sweep]", by_layer.describe())
show("normalised (1 = clean restored)", by_layer.values, [f"L{layer}" for layer in range(n_layers)])
close(by_layer.raw, results, "layer sweep, raw logit diff")
close(by_layer.values, normalized, "layer sweep, normalised")
close([by_layer.clean_value, by_layer.corrupt_value], [clean_diff, corrupted_diff], "clean / corrupted metric")
# The whole residual stream after a block is everything later layers read: patching all of it restores the clean
# run exactly at every layer. The seed's layer sweep so locates nothing; by position and by head do (below).
close(by_layer.values, torch.ones(n_layers), "a whole-residual patch restores the clean run")
# one cell, as one edit: the body of the seed's loop for layer 2
one = lab.run(corrupted_prompt, edits=[ilab.patch("resid_post", 2, source=clean_run)])
close([logit_diff(one.logits, correct_token, incorrect_token)], [results[2]], "one layer patched with lab.run")

# ---- layer x position: one block output at one position ----------------------------------------------------------
# nnsight: model.transformer.h[l].output[0][:, p, :] = clean_hiddens[l][:, p, :], a trace per (layer, position).
results = torch.zeros(n_layers, seq_len)
for layer_idx in range(n_layers):
    for pos_idx in range(seq_len):
        fn = put((slice(None), pos_idx), clean_hiddens[layer_idx])
        patched_logits, _, _ = trace(corrupted_prompt, blocks_out={layer_idx: fn})
        results[layer_idx, pos_idx] = logit_diff(patched_logits, correct_token, incorrect_token)
layer_pos_results = results

by_pos = lab.patch_sweep(clean_prompt, corrupted_prompt, site="resid_post", by=("layer", "pos"), metric=metric,
                         progress=False)
print("\n[layer x position]", by_pos.describe())
print("  positions:", " ".join(f"{i}:{t!r}" for i, t in enumerate(by_pos.labels["pos"])))
show("normalised", by_pos.values, [f"L{layer}" for layer in range(n_layers)])
close(by_pos.raw, results, "layer x position, raw logit diff")
close(by_pos.values, (results - corrupted_diff) / (clean_diff - corrupted_diff), "layer x position, normalised")
assert by_pos.labels["pos"] == tokens and by_pos.shape == (n_layers, seq_len)
# positions before the first token where the prompts differ (9) are equal in both runs (attention is causal): the
# sweep computes them without a forward, and they read exactly "corrupted" (0)
assert by_pos.cells_run < by_pos.values.numel() and bool((by_pos.values[:, :9] == 0).all())
one = lab.run(corrupted_prompt, edits=[ilab.patch("resid_post", 1, pos=9, source=clean_run)])
close([logit_diff(one.logits, correct_token, incorrect_token)], [results[1, 9]], "one (layer, position) cell")

# ---- individual attention heads: slices of c_proj's input ----------------------------------------------------------
# nnsight: c_proj.input[0][0][:, :, h*head_dim:(h+1)*head_dim] = the clean slice, a trace per (layer, head).
# interplab: site "z" is that input, head h its h-th block of head_dim columns; by=("layer", "head").
results = torch.zeros(n_layers, n_heads)
for layer_idx in range(n_layers):
    for head_idx in range(n_heads):
        start, end = head_idx * head_dim, (head_idx + 1) * head_dim
        fn = put((slice(None), slice(None), slice(start, end)), clean_attn[layer_idx])
        patched_logits, _, _ = trace(corrupted_prompt, c_proj_in={layer_idx: fn})
        results[layer_idx, head_idx] = logit_diff(patched_logits, correct_token, incorrect_token)

by_head = lab.patch_sweep(clean_prompt, corrupted_prompt, site="z", by=("layer", "head"), metric=metric,
                          progress=False)
print("\n[layer x head]", by_head.describe())
show("normalised (columns: heads 0..3)", by_head.values, [f"L{layer}" for layer in range(n_layers)])
close(by_head.raw, results, "layer x head, raw logit diff")
close(by_head.values, (results - corrupted_diff) / (clean_diff - corrupted_diff), "layer x head, normalised")
best_layer, best_head = divmod(int(by_head.values.argmax()), n_heads)
print(f"  the head that restores most: L{best_layer}H{best_head} ({by_head.values.max():.2f})")
one = lab.run(corrupted_prompt, edits=[ilab.patch("z", best_layer, head=best_head, source=clean_run)])
close([logit_diff(one.logits, correct_token, incorrect_token)], [results[best_layer, best_head]], "one head")

# ---- noising: corrupted activations into the clean run --------------------------------------------------------------
# nnsight: a trace of the clean prompt per layer with model.transformer.h[l].output[0][:] = corrupted_hiddens[l].
# interplab: direction="noise". Values stay 1 = clean behaviour, 0 = corrupted, so a cell near 0 is necessary for
# the clean answer (noising) where a cell near 1 in a denoising sweep is sufficient to bring it back.
noising_results = torch.zeros(n_layers)
for layer_idx in range(n_layers):
    noised_logits, _, _ = trace(clean_prompt, blocks_out={layer_idx: put(slice(None), corrupted_hiddens[layer_idx])})
    noising_results[layer_idx] = logit_diff(noised_logits, correct_token, incorrect_token)

noised = lab.patch_sweep(clean_prompt, corrupted_prompt, site="resid_post", by=("layer",), metric=metric,
                         direction="noise", progress=False)
print("\n[noising, layer sweep]", noised.describe())
show("normalised", noised.values, [f"L{layer}" for layer in range(n_layers)])
close(noised.raw, noising_results, "noising, raw logit diff")
close(noised.values, (noising_results - corrupted_diff) / (clean_diff - corrupted_diff), "noising, normalised")
close([noised.clean_value, noised.corrupt_value], [clean_diff, corrupted_diff], "noising: the same two end points")
# the mirror image of the denoising layer sweep: the whole corrupted residual gives the corrupted run (0)
close(noised.values, torch.zeros(n_layers), "a whole-residual noise gives the corrupted run")

# the same by position, where noising and denoising differ (not in the seed; the same loop, one position at a time)
results = torch.zeros(n_layers, seq_len)
for layer_idx in range(n_layers):
    for pos_idx in range(seq_len):
        fn = put((slice(None), pos_idx), corrupted_hiddens[layer_idx])
        noised_logits, _, _ = trace(clean_prompt, blocks_out={layer_idx: fn})
        results[layer_idx, pos_idx] = logit_diff(noised_logits, correct_token, incorrect_token)
noised_pos = lab.patch_sweep(clean_prompt, corrupted_prompt, site="resid_post", by=("layer", "pos"), metric=metric,
                             direction="noise", progress=False)
show("noising by position, normalised", noised_pos.values, [f"L{layer}" for layer in range(n_layers)])
close(noised_pos.raw, results, "noising by position, raw logit diff")

# ---- the heatmap ------------------------------------------------------------------------------------------------
# seaborn: sns.heatmap(results, xticklabels=positions, yticklabels=layers, cmap="RdBu_r", center=0, annot=True).
# interplab: by_pos.figure() is a static plotly heatmap (RdBu, centred at 0, token strings on the x axis; .show() it
# or .write_html() it); by_pos.show() in a notebook is the clickable one: a click patches that cell and repaints the
# next-token logits.
fig = by_pos.figure()
heat = fig.data[0]
close(heat.z, by_pos.values, "heatmap cells")
assert heat.zmid == 0 and heat.colorscale == go.Heatmap(colorscale="RdBu").colorscale
assert list(fig.layout.yaxis.ticktext) == [f"L{layer}" for layer in range(n_layers)]
assert list(fig.layout.xaxis.ticktext) == [f"{i}: {t}" for i, t in enumerate(tokens)]
explorer = by_pos.show()
assert hasattr(explorer, "heatmap"), f"res.show() gave a {type(explorer).__name__}, not the clickable heatmap"
close(explorer.heatmap.values, by_pos.values, "widget heatmap cells")
# a click on (layer 1, position 9) - what the frontend sends - patches that cell; the logit panel shows its metric
explorer.heatmap.send_test_message({"type": "click", "row": 1, "col": 9, "shift": False})
explorer.queue.join()  # clicks run on the lab's worker thread
shown = explorer.logits.metric["values"]
close([shown["patched"], shown["clean"], shown["corrupt"]], [layer_pos_results[1, 9], clean_diff, corrupted_diff],
      "a click on the heatmap")
print(f"\n[heatmap] plotly figure {len(heat.z)} x {len(heat.z[0])}; a click on L1, position 9 shows logit diff "
      f"{shown['patched']:+.3f} (the loop: {layer_pos_results[1, 9]:+.3f})")

assert lab.hooks() == [] and ilab.engine.attached_hooks() == []
assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
print(f"\nran in {time.perf_counter() - started:.1f} s (after imports)")
print("all checks passed")
