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
# # Circuits of features: an attribution graph of the IOI prompt
#
# About 25 minutes, after notebook 05 (optional). Notebook 05 found a feature the model uses at S2; a researcher then
# asks "what writes it, and what reads it?". An **attribution graph** answers for every feature at once: its nodes are
# the features active at each position, its edges say how much each one writes into each later one, down to the
# logit. Here you build the graph of *"When Mary and John went to the store, John gave a drink to"*, read it, see which
# attention heads carry an edge, compute one edge by hand, and test the graph by intervention on the live model.
#
# The features come from **transcoders** shipped with interplab: `ilab.Transcoders.load("ioi-tiny-transcoders")`,
# one per layer (card: `interplab/zoo/ioi_tiny_transcoders/card.json`). The method is Ameisen et al. 2025, "Circuit
# tracing" (the graphs of circuit-tracer and Neuronpedia). Everything runs offline, in under a minute.
#
# **How to work through it**, as in 01-05: write your prediction in the box under each question, then run the check;
# replace each `...` and run the check under it. The answers stay closed under Run All: open one (click the bar on its
# left), set `show = True` and run it.

# %%
from pathlib import Path

import torch

import interplab as ilab
from interplab.analyses.attention_attribution import edge_heads, qk_attribution
from interplab.analyses.graph import attribution_graph
from interplab.analyses.replacement import replacement

lab = ilab.Lab.load("ioi-tiny")
tcs = ilab.Transcoders.load("ioi-tiny-transcoders")
clean = "When Mary and John went to the store, John gave a drink to"
corrupt = "When Mary and John went to the store, Mary gave a drink to"

lab.check_pair(clean, corrupt)
tokens = lab.to_str_tokens(clean)
S2 = next(i for i, (a, b) in enumerate(zip(tokens, lab.to_str_tokens(corrupt))) if a != b)  # the repeated name
S1 = tokens.index(tokens[S2])  # its first occurrence
END = len(tokens) - 1
base = lab.run(clean, cache=[("resid_post", lab.n_layers - 1)])
print(tcs)
print(f"S1 = position {S1} ({tokens[S1]!r}), S2 = position {S2} ({tokens[S2]!r}), END = position {END} "
      f"({tokens[END]!r})")

# %% [markdown]
# ## 1. Transcoders and the replacement model
#
# A **transcoder** is a sparse autoencoder that reads one thing and writes another: it reads an MLP's *input* and
# predicts that MLP's *output*, through a few active features (`f = TopK(x W_enc + b_enc)`, `out = f W_dec + b_dec`).
# Where an SAE describes one activation, a transcoder describes a computation, an MLP, with features whose decoder
# rows are what they write.
#
# The **replacement model** swaps every MLP for its transcoder plus an **error term** (the MLP's real output minus the
# transcoder's, on this prompt), and freezes each attention pattern and each LayerNorm's scale at the real run's
# values. Then, between the features, everything is linear: that is what lets a graph's edges add up.
#
# **Predict:** (a) with the error terms, will the replacement give the model's logits exactly, or only close?
# (b) Without them (the transcoders alone, attention and norms live), will *Mary* still win?

# %%
with_errors = replacement(lab, clean, tcs)
alone = replacement(lab, clean, tcs, errors=False)
gap = float((with_errors.logits - with_errors.model_logits).abs().max())
print(f"(a) with error terms: largest logit difference from the model's own {gap:.1e}")
p_model, p_alone = (x[0, -1].float().softmax(-1) for x in (alone.model_logits, alone.logits))
print(f"(b) transcoders alone: top token {lab.to_string([int(p_alone.argmax())])!r} p = {float(p_alone.max()):.4f} "
      f"(the model: {lab.to_string([int(p_model.argmax())])!r} p = {float(p_model.max()):.4f}); "
      f"mean KL from the model over the prompt's positions {alone.kl():.3f}")

# %%
# ANSWER
assert gap <= 1e-4 and int(p_alone.argmax()) == int(p_model.argmax())
# (a) Exactly, up to float rounding (printed): each MLP's output is rebuilt as the transcoder's plus what it misses.
# (b) Yes, Mary still wins (printed), though the distributions differ (the KL printed). How much of the *answer* the
# transcoders explain, the graph's scores say (section 2).

# %% [markdown]
# ## 2. Build the graph
#
# `attribution_graph(lab, prompt, tcs)` builds it. Its nodes:
#
# - **features**: every transcoder feature active at each position (layer, position, feature index, activation);
# - **error nodes**: one per layer and position, each MLP's error term (what the transcoder misses);
# - **token nodes**: each position's embedding (token plus position);
# - **logit nodes**: the most likely next tokens, as few as cover 95 percent of the probability (at most 10), each
#   node's value being its logit minus the mean logit.
#
# An **edge** from a source to a target is the source's **direct effect** in the replacement model: how much the
# source adds to the target through the frozen linear paths (attention with its patterns fixed, the residual stream),
# not through other nodes. Removing the source would change the target by minus the edge. For a feature `s` at layer `l` writing `a_s * W_dec[s]`:
# `edge = a_s * W_dec[s] . d target / d mlp_out[l]`. `g.adjacency[target, source]` holds every edge (rows targets,
# columns sources; node order: features, errors, tokens, logits).
#
# Two scores say how much the features explain: the **replacement score**, the share of the tokens' influence on the
# logits that reaches them without passing through an error node, and the **completeness score**, the share of every
# node's inputs that come from features and tokens rather than errors (weighted by the node's influence). Both are 1
# when the transcoders are perfect.
#
# **Predict:** how many logit nodes will the graph have? Will the replacement score be closer to 0.5 or to 1?

# %%
g = attribution_graph(lab, clean, tcs, progress=False)
print(g)
print("logit nodes:", [(t, round(float(p), 4)) for t, p in zip(g.logit_tokens, g.logit_probs)])
r_score, c_score = g.scores()
print(f"{g.n_features} active features, {g.n_layers * g.n_pos} error nodes, {g.n_pos} token nodes, "
      f"{len(g.logit_ids)} logit node(s); replacement score {r_score:.3f}, completeness {c_score:.3f}")
LOGIT = g.logit_start  # the first (most likely) logit node
answer_id = g.logit_ids[0]

# %%
# ANSWER
assert len(g.logit_ids) == 1 and g.logit_tokens[0] == " Mary" and r_score > 0.8 and c_score > 0.9
# One: the model gives Mary more than the 95 percent the logit nodes must cover, on its own (printed).
# The replacement score is close to 1 (printed): most of the tokens' influence on the answer runs through features,
# not error nodes. The rest is what the transcoders miss; a graph with a low score would explain little.

# %% [markdown]
# ## 3. Read the graph
#
# A node's **influence** is its effect on the logit nodes through every path of the graph (the edges' absolute values,
# each row normalised to sum to 1, summed over paths of every length and weighted by the logits' probabilities).
# It ranks what matters. `g.node(i)` says what node `i` is.
#
# **Predict:** where will the most influential features be: at the names (S1, the first *Mary*), at S2, or at END
# (the last token, where the answer is read)? In early layers or late ones?

# %%
influence = g.influence()
ranked = influence[:g.n_features].argsort(descending=True).tolist()
print(" node  layer  pos token     feature  activation  influence  edge to the logit")
for i in ranked[:10]:
    n = g.node(i)
    print(f"{i:5d}  {n['layer']:5d}  {n['pos']:3d} {n['token']!r:10} {n['feature']:7d}  {n['activation']:10.2f}  "
          f"{float(influence[i]):9.4f}  {float(g.adjacency[LOGIT, i]):+.2f}")
kept = g.nodes  # the pruned graph (circuit-tracer's pruning): what a graph viewer draws
print(f"pruned graph: {len(kept)} nodes, {len(g.edges)} edges; its features by position:",
      {p: sum(1 for n in kept if n["kind"] == "feature" and n["pos"] == p) for p in range(g.n_pos)
       if any(n["kind"] == "feature" and n["pos"] == p for n in kept)})

# %%
# ANSWER
top = g.node(ranked[0])
at_end = [i for i in ranked[:10] if g.node(i)["pos"] == END]
print(f"the most influential feature: layer {top['layer']}, feature {top['feature']} at position {top['pos']} "
      f"({top['token']!r}); of the top 10, {len(at_end)} at END, in layers "
      f"{sorted({g.node(i)['layer'] for i in at_end})}")
assert top["pos"] == S2 and top["layer"] == 0 and len(at_end) >= 5
# The single most influential feature is an early one at S2 (printed); the rest of the top sits mostly at END, in the
# first and last layers. That is the IOI shape notebooks 01 and 04 found with heads: what happens at the repeated name
# is read at the end. Note the signs: an edge to the logit can be negative (a feature that lowers Mary's logit).

# %%
# Run this whether or not you opened the answer: the next sections use these names.
s2_node = next(i for i in ranked if g.node(i)["pos"] == S2)  # the most influential feature at S2
end_l3 = [i for i in ranked if g.node(i)["pos"] == END and g.node(i)["layer"] == g.n_layers - 1]
hand_node = end_l3[0]  # the most influential last-layer feature at END
s2 = g.node(s2_node)
fires = tcs[s2["layer"]].encode(lab.run(clean, cache=[("mlp_in", s2["layer"])]).cache["mlp_in", s2["layer"]][0])
print(f"node {s2_node}: layer {s2['layer']} feature {s2['feature']} at S2; where it fires on this prompt:",
      {f"{p}:{tokens[p]!r}": round(float(v), 1) for p, v in enumerate(fires[:, s2["feature"]]) if v > 0})

# %% [markdown]
# A feature's label is a hypothesis, as in notebook 05. Where does the S2 feature fire on this prompt (the cell above):
# on the repeated name only, or on many tokens? A feature that fires nearly everywhere is part of what every position
# holds, which matters in section 5.
#
# ## 4. Which attention heads carry an edge
#
# The S2 feature writes at S2, the logit is read at END: the edge between them must cross positions, and only
# attention moves information between positions. `edge_heads(g, source, target)` recomputes the edge with every
# head's value path closed but one, for each head in between, and with every head closed (the residual stream alone);
# paths through two heads or more are the rest.
#
# **Predict:** how much of the S2 feature's edge to the logit will the residual stream carry on its own? Which heads
# will carry it: ones that attend from END to S2, or others?

# %%
split = edge_heads(g, s2_node, LOGIT)
carriers = sorted(split["heads"], key=lambda h: -abs(split["heads"][h]))[:4]
patterns = lab.run(clean, cache=[("pattern", layer) for layer in range(g.n_layers)]).cache
print(f"edge {split['edge']:+.2f} = residual {split['residual']:+.2f} + heads {sum(split['heads'].values()):+.2f} "
      f"+ paths through several heads {split['rest']:+.2f}")
for layer, head in carriers:
    print(f"L{layer}H{head}: carries {split['heads'][layer, head]:+.2f}; its attention from END to S2 "
          f"{float(patterns['pattern', layer][0, head, END, S2]):.2f}")

# %%
# ANSWER
assert abs(split["residual"]) < 1e-6
assert all(float(patterns["pattern", layer][0, head, END, S2]) > 0.5 for layer, head in carriers)
# None: the residual stream keeps each position's own content, so it carries nothing from S2 to END (printed 0).
# The heads that carry the edge are heads of the layers after the feature that attend from END to S2 (their
# attention printed): they move what the S2 feature wrote to the end. circuit-tracer freezes attention and stops
# here; interplab can also ask *why* such a head attends to S2 (the next cell).

# %% [markdown]
# **Why does a head attend there?** `qk_attribution` splits a head's attention score from a query position to a key
# position over what the residual stream holds at each side: the token embedding, each earlier layer's attention
# output, each earlier transcoder feature and error term. The score is bilinear in the two sides, so each side's parts
# plus a bias term add up to it (printed).

# %%
layer, head = carriers[0]
qk = qk_attribution(lab, clean, tcs, layer=layer, head=head, query=END, key=S2)
print(qk)
print(f"key side: parts {sum(v for _, v in qk.key_parts):+.2f} + bias {qk.key_bias:+.2f} = score {qk.score:+.2f}")
print(f"is the S2 feature (L{s2['layer']} F{s2['feature']}) among the key side's top 5? ",
      f"L{s2['layer']} F{s2['feature']}" in [name for name, _ in qk.key_parts[:5]])

# %% [markdown]
# ## Write it yourself: one edge by hand
#
# Compute the edge from the most influential last-layer feature at END (`hand_node`) to the logit node. Its MLP is the
# last one, at the same position as the logit, so the path is short: the feature adds `a * w_dec` to the residual
# stream `x` at END, which enters the final LayerNorm `ln_f`, whose output is multiplied by the unembedding `W_U`.
# The graph's target is the logit minus the mean logit, and the norm's scale `s` is frozen at the run's value:
#
#     target(x) = ln_f(x) . u,   u = W_U[token] - (the mean of W_U's rows)
#     ln_f(x) = (x - mean(x)) / s * gain + bias,   s = sqrt(var(x) + eps)   (var over d_model, not unbiased)
#
# With `s` held fixed, `target` is linear in `x`, and its gradient is `grad = centre(gain * u) / s`, where
# `centre(v) = v - v.mean()` (the mean subtraction is a projection, its own transpose). The edge is `a * w_dec . grad`.
#
# Write `my_edge(a, w_dec, x, token)`; `W_U`, `gain`, `bias` and `eps` (`ln_f`'s) are given. The check compares
# yours with `g.adjacency` on two features (the graph's own edges come from autograd through the frozen model) and
# says what is off.

# %%
W_U = lab.model.lm_head.weight.detach().cpu()  # [vocab, d_model]: logits = ln_f(x) @ W_U.T
ln_f = lab.model.transformer.ln_f
gain, bias, eps = ln_f.weight.detach().cpu(), ln_f.bias.detach().cpu(), ln_f.eps  # ln_f's gain, bias and epsilon
x_end = base.cache["resid_post", g.n_layers - 1][0, END].cpu()  # [d_model]: the residual entering ln_f at END


def my_edge(a, w_dec, x, token):
    # a: the feature's activation; w_dec: its decoder row [d_model]; x: the residual entering ln_f at END [d_model];
    # token: the logit node's token id. Return the edge, a float.
    ...


# %%
def check_edge(fn):
    """Your edge against the graph's, for the two most influential last-layer features at END."""
    def edge(node, mean=True, centre=True, scale=True, use_gain=True, act=True, unbiased=False):
        n = g.node(node)
        u = W_U[answer_id] - (W_U.mean(0) if mean else 0)
        wu = (gain if use_gain else 1) * u
        grad = (wu - wu.mean()) if centre else wu
        if scale:
            grad = grad / (x_end.var(unbiased=unbiased) + eps).sqrt()
        a = n["activation"] if act else 1.0
        return float(a * tcs[n["layer"]].W_dec[n["feature"]] @ grad)

    slips = {"the mean logit is not subtracted: the target is the logit minus the mean logit, so u = W_U[token] - "
             "W_U.mean(0)": {"mean": False},
             "no centring: ln_f subtracts x's mean, so the gradient is centred too: "
             "grad = (gain * u - (gain * u).mean()) / s": {"centre": False},
             "the scale is missing: ln_f divides by s = sqrt(var(x) + eps), so the gradient does too": {"scale": False},
             "the gain is missing: ln_f multiplies by its gain, so the gradient does too": {"use_gain": False},
             "the activation is missing: the feature writes a * w_dec, not w_dec": {"act": False},
             "unbiased variance: LayerNorm's var is the plain mean of squares, x.var(unbiased=False)":
                 {"unbiased": True}}
    for node in end_l3[:2]:
        n = g.node(node)
        want = float(g.adjacency[LOGIT, node])
        assert abs(edge(node) - want) <= 1e-3 * abs(want)  # the formula above is the graph's edge
        try:
            got = fn(n["activation"], tcs[n["layer"]].W_dec[n["feature"]], x_end, answer_id)
            got = float(got)
        except Exception as e:  # noqa: BLE001 (the student's slip, named instead of a traceback)
            print(f"not yet: my_edge raised {type(e).__name__}: {e}; it should return a float")
            return False
        if abs(got - want) <= 1e-3 * abs(want):
            continue
        if abs(got + want) <= 1e-3 * abs(want):
            print(f"not yet: the sign is flipped ({got:+.3f}, the graph {want:+.3f}): the edge is a * w_dec . grad")
            return False
        for hint, kw in slips.items():
            if abs(got - edge(node, **kw)) <= 1e-4 * max(abs(got), 1e-6):
                print(f"not yet ({got:+.3f}, the graph {want:+.3f}): {hint}")
                return False
        print(f"not yet: {got:+.3f} for node {node}, the graph says {want:+.3f}: u = W_U[token] - W_U.mean(0); "
              "grad = centre(gain * u) / s; edge = a * w_dec . grad")
        return False
    edges = ", ".join(f"{float(g.adjacency[LOGIT, i]):+.3f}" for i in end_l3[:2])
    print(f"right: your edges equal the graph's ({edges}) for the two most influential last-layer features at END")
    return True


check_edge(my_edge)


# %%
# ANSWER
def my_edge(a, w_dec, x, token):
    u = W_U[token] - W_U.mean(0)  # d(logit - mean logit) / d(ln_f's output)
    s = (x.var(unbiased=False) + eps).sqrt()  # the norm's scale at this run, held fixed
    wu = gain * u
    grad = (wu - wu.mean()) / s  # back through the frozen norm: the gain, the centring, the scale
    return float(a * w_dec @ grad)


assert check_edge(my_edge)
# An edge from an earlier layer or another position goes through attention and several norms: the same idea (the
# gradient at the source's MLP output, patterns and scales frozen), which the graph computes with autograd.

# %% [markdown]
# ## 5. Test the graph on the live model
#
# The graph describes the replacement model with its patterns and norms frozen. Does it predict what the *model* does?
# `g.intervene(node, factor=0)` removes a feature from the live model (subtracts `a * w_dec` from its MLP's output at
# its position; everything after it recomputed) and returns the change of the logit node's target (`real`) beside the
# graph's prediction: `direct` (the feature's own edge) and `total` (also through the later features it writes into,
# each responding linearly, errors fixed).
#
# **Predict:** removing the last-layer feature at END (`hand_node`), and removing the S2 feature (`s2_node`): will each
# move the logit by about what the graph predicts? If one misses, which one, and why?

# %%
tests = {"last-layer feature at END": hand_node, "layer-0 feature at S2": s2_node}
results = {name: g.intervene(node, 0.0) for name, node in tests.items()}
late, early = results["last-layer feature at END"], results["layer-0 feature at S2"]
for name, r in results.items():
    n = g.node(tests[name])
    print(f"{name} (L{n['layer']} F{n['feature']}): real {r['real'][0]:+.2f}, predicted direct "
          f"{r['predicted']['direct'][0]:+.2f}, total {r['predicted']['total'][0]:+.2f}; top token after "
          f"{r['top'][0][0]!r}")

# %%
# ANSWER
assert late["real"][0] * late["predicted"]["total"][0] > 0 and abs(late["real"][0]) > 0.4 * abs(late["predicted"][
    "total"][0])
assert abs(early["real"][0] - early["predicted"]["total"][0]) > 0.5 * abs(early["predicted"]["total"][0])
# The last-layer feature: the right sign and size, a little smaller than predicted. Only the final norm lies between
# it and the logit, and the live norm recomputes its scale once the feature is gone. By hand, with your pieces:
n = g.node(hand_node)
w = n["activation"] * tcs[n["layer"]].W_dec[n["feature"]]  # what the feature adds to the residual stream at END
u = W_U[answer_id] - W_U.mean(0)
s0 = (x_end.var(unbiased=False) + eps).sqrt()  # the scale with the feature, as the graph holds it
live = lambda x: float(torch.nn.functional.layer_norm(x, x.shape, gain, bias, eps) @ u)  # noqa: E731  its own scale
frozen = lambda x: float(((x - x.mean()) / s0 * gain + bias) @ u)  # noqa: E731  the scale held at s0
print(f"through the live ln_f by hand: {live(x_end - w) - live(x_end):+.2f} (the run: {late['real'][0]:+.2f}); "
      f"with its scale frozen: {frozen(x_end - w) - frozen(x_end):+.2f} (the graph: "
      f"{late['predicted']['direct'][0]:+.2f}); the scale s: {float(s0):.2f} with the feature, "
      f"{float(((x_end - w).var(unbiased=False) + eps).sqrt()):.2f} without")
assert abs(live(x_end - w) - live(x_end) - late["real"][0]) < 1e-3
assert abs(frozen(x_end - w) - frozen(x_end) - late["predicted"]["direct"][0]) < 1e-3
assert abs(late["real"][0]) < abs(late["predicted"]["direct"][0])
# The layer-0 feature at S2 misses: the live model moves the logit far less than the graph predicts (printed). The
# graph is exact for the frozen replacement model and a linear approximation of the live one; a feature early in the
# model has many nonlinear steps after it. The next cell finds which.

# %% [markdown]
# **Predict:** between the layer-0 feature at S2 and the logit, three things are frozen in the graph and live in the
# model: the attention patterns, the later MLPs, and the LayerNorms' scales. Which one makes the gap?
#
# The cell reruns the ablation with the attention patterns patched back to the clean run's, then the later MLPs'
# outputs too (only the norms are then left live), and prints how the scale that layer 1's attention divides by at S2
# changes when the feature goes.

# %%
n = g.node(s2_node)
remove = ilab.steer("mlp_out", n["layer"], vector=-n["activation"] * tcs[n["layer"]].W_dec[n["feature"]], pos=S2)
frozen_patterns = [ilab.patch("pattern", layer, source=base) for layer in range(g.n_layers)]
frozen_mlps = [ilab.patch("mlp_out", layer, source=base) for layer in range(n["layer"] + 1, g.n_layers)]


def change(edits):
    logits = lab.run(clean, edits=edits).last_logits[0].float()
    return float(logits[answer_id] - logits.mean()) - early["before"][0]


print(f"live model: {change([remove]):+.2f}")
print(f"attention patterns frozen: {change([remove, *frozen_patterns]):+.2f}")
only_norms = change([remove, *frozen_patterns, *frozen_mlps])
print(f"patterns and later MLPs frozen (only the norms live): {only_norms:+.2f}")
print(f"the graph: direct {early['predicted']['direct'][0]:+.2f}, total {early['predicted']['total'][0]:+.2f}")
scales = [float(lab.run(clean, edits=e, cache=[("resid_pre", n["layer"] + 1)]).cache["resid_pre", n["layer"] + 1][
    0, S2].var(unbiased=False).sqrt()) for e in ([], [remove])]
print(f"the scale of the residual stream at S2 entering layer {n['layer'] + 1}: {scales[0]:.2f} with the feature, "
      f"{scales[1]:.2f} without")

# %%
# ANSWER
assert abs(only_norms - early["predicted"]["direct"][0]) > 0.5 * abs(early["predicted"]["direct"][0])
# The norms. With the patterns and the later MLPs frozen, only the LayerNorms are live, and the logit still moves far
# less than the direct edge predicts (printed). The feature is part of what the residual stream holds at S2: without
# it the scale the next norm divides by there changes (printed), which rescales everything else S2 holds, and every
# head that reads S2 reads that. The graph holds the scale fixed, so it sees only the feature's own share.
# The lesson: an edge is exact in the model it describes (the frozen replacement), a hypothesis about the live model,
# and an intervention on the live model is its test. Here the late feature passes it and the early one fails it.

# %% [markdown]
# ## Caveats, and the graph elsewhere
#
# - **The error nodes** hold what the transcoders miss: the replacement score (section 2) says what share of the
#   answer's influence passes through them. A path through an error node is a path the graph cannot name.
# - **One prompt, one graph.** The features and edges are this prompt's; a claim about the IOI task needs many
#   prompts, as notebook 05's dataset of pairs.
# - **Frozen attention**: the graph's edges see attention as fixed weights. Which heads carry an edge, and what the
#   attention score is made of, section 4 and its QK cell showed.
#
# `g.to_json()` writes the pruned graph in the format circuit-tracer's and Neuronpedia's graph frontend reads, so a
# graph made here opens there (the cell writes it next to the notebook).

# %%
Path("ioi_graph.json").write_text(g.to_json(slug="ioi-tiny-ioi"))
print(f"wrote ioi_graph.json: {len(g.nodes)} nodes, {len(g.edges)} edges")
