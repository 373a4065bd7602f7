"""Writes the teaching notebooks (without outputs) from the cells below: `python notebooks/build.py`.

Keeping the source here makes the notebooks reviewable as plain Python and keeps megabytes of widget state out of git.
Cells starting with "# ANSWER" are collapsed in JupyterLab: the workshop answers.
"""

from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent


def md(text):
    return nbf.v4.new_markdown_cell(text.strip())


def code(text):
    cell = nbf.v4.new_code_cell(text.strip())
    if text.strip().startswith("# ANSWER"):
        cell.metadata["jupyter"] = {"source_hidden": True}
    return cell


IOI = [
    md("""
# Activation patching on IOI

**Indirect object identification**: in *"When Mary and John went to the store, John gave a drink to"* the next word
should be **Mary**, the name that is *not* repeated. We ask *where* in the model that answer is computed, by
**activation patching**: run the model on a *corrupt* prompt (the repeated name swapped, so the answer flips), copy in
one activation from the *clean* run, and see how much of the clean behaviour comes back.

The model is `ioi-tiny`, a 4-layer GPT-2 trained for this task and shipped with interplab: everything here runs offline.
"""),
    code("""
import torch
import interplab as ilab

lab = ilab.Lab.load("ioi-tiny")
lab
"""),
    md("## The task: clean and corrupt prompts\n\nPosition-wise patching needs both prompts to have the same tokens "
       "except the one we change. Answers must be single tokens (with their leading space)."),
    code("""
clean = "When Mary and John went to the store, John gave a drink to"
corrupt = "When Mary and John went to the store, Mary gave a drink to"
answer, wrong = " Mary", " John"

lab.check_pair(clean, corrupt)          # raises, showing both tokenizations, if the lengths differ
for i, (a, b) in enumerate(zip(lab.to_str_tokens(clean), lab.to_str_tokens(corrupt))):
    print(f"{i:2d} {a!r:12} {b!r:12}" + ("   <- differs" if a != b else ""))
"""),
    md("## The metric: logit difference\n\n`logit(answer) - logit(wrong)` at the last position. Positive means the "
       "model prefers the right name."),
    code("""
metric = ilab.logit_diff(answer, wrong)
runs = lab.run([clean, corrupt])
bound = metric.bind(lab.token_id)
clean_ld, corrupt_ld = bound(runs.last_logits).tolist()
print(f"clean logit diff {clean_ld:.2f}, corrupt logit diff {corrupt_ld:.2f}")
"""),
    md("""
**What you should see:** a clearly positive logit difference on the clean prompt and a negative one on the corrupt
prompt: the model really does the task, and the corruption flips it.

### Predict, then click
Before running the next cell: at which **positions** do you expect patching the residual stream to matter? In which
layers? Write your guess down.
"""),
    code("""
res = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, direction="denoise")
explorer = res.show()
explorer
"""),
    md("""
**What you should see:** the position of the changed name (S2, the second " John") carries the effect in layers
0 and 1 and most of it in layer 2; the **final position** takes over in the last layers. The model works out *at
S2* that this name is the subject of the last clause, and later layers move that to the end: the information
travels through the layers, not in one hop. The values are normalised: **1 = clean behaviour restored,
0 = corrupted**.

Click a cell: the patch is applied and the logit panel shows clean / corrupt / patched next-token probabilities.
Shift-click adds cells to the active set; untick an entry to switch it off.
"""),
    code("""
# ANSWER: the S2 position carries the signal early; the final position late.
s2 = [i for i, (a, b) in enumerate(zip(lab.to_str_tokens(clean), lab.to_str_tokens(corrupt))) if a != b][0]
print("S2 position:", s2, "| final position:", len(lab.to_str_tokens(clean)) - 1)
print("restored by resid_pre at S2, per layer:   ", [round(v, 2) for v in res.values[:, s2].tolist()])
print("restored by resid_pre at the end, per layer:", [round(v, 2) for v in res.values[:, -1].tolist()])
"""),
    md("## Attention and MLP outputs, and individual heads\n\nWhich component writes the answer? Patch each "
       "layer's attention output and MLP output, then every head's output (`z`, the input of the output projection)."),
    code("""
attn = lab.patch_sweep(clean, corrupt, site="attn_out", by=("layer", "pos"), metric=metric, progress=False)
mlp = lab.patch_sweep(clean, corrupt, site="mlp_out", by=("layer", "pos"), metric=metric, progress=False)
heads = lab.patch_sweep(clean, corrupt, site="z", by=("layer", "head"), metric=metric, progress=False)
print("attn_out, final position:", [round(v, 2) for v in attn.values[:, -1].tolist()])
print("mlp_out,  final position:", [round(v, 2) for v in mlp.values[:, -1].tolist()])
heads.show()
"""),
    md("""
**What you should see:** two groups of heads, none doing it alone. In layer 0, two heads that read the S2
position: patched everywhere they carry the S2 name to where later heads read it. In layers 1 and 2, heads that
attend from the end to S2 and move the information to the end, each restoring a part of the logit difference; the
`attn_out` line shows the same (at the final position the attention outputs of layers 1 and 2 matter) and the MLPs
add little. The model card
(`interplab/zoo/ioi_tiny/MODEL_CARD.md`) describes the circuit. In GPT-2 small the IOI circuit spans many more
layers and heads — run this notebook on `gpt2` at home and compare.
"""),
    md("## Noising vs denoising\n\nDenoising patches clean into corrupt (is this component *sufficient*?); noising "
       "patches corrupt into clean (is it *necessary*?). Both use the same scale: 1 = clean behaviour."),
    code("""
noise = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, direction="noise",
                        progress=False)
print(noise.describe())
noise.figure()
"""),
    md("## Attribution patching: all cells from one forward and one backward pass"),
    code("""
attr = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, method="attribution")
corr = torch.corrcoef(torch.stack([attr.values.flatten(), res.values.flatten()]))[0, 1]
print(f"correlation of the attribution estimate with exact patching: {corr:.3f}")
"""),
    md("**What you should see:** a high correlation: the linear estimate finds the same cells, at a fraction of the "
       "cost. Where they disagree, trust the exact value."),
    md("## A dataset of pairs\n\nOne prompt can mislead. The IOI papers average over many pairs with different names "
       "and templates; each pair has its own answer."),
    code("""
data = ilab.zoo.ioi_dataset(16, split="test")
same_len = [d for d in data if len(lab.to_str_tokens(d["clean"])) == len(lab.to_str_tokens(data[0]["clean"]))]
pairs_metric = ilab.logit_diff([d["answer"] for d in same_len], [d["wrong"] for d in same_len])
avg = lab.patch_sweep([d["clean"] for d in same_len], [d["corrupt"] for d in same_len], site="z",
                      by=("layer", "head"), metric=pairs_metric, progress=False)
print(f"{len(same_len)} pairs;", avg.describe())
print(avg.values)
"""),
    md("## Testing a hypothesis by clicking — or by code\n\nThe selection is shared between the widget and Python: "
       "set it from code and the heatmap and logits follow; read back the edits you clicked."),
    code("""
final = len(lab.to_str_tokens(clean)) - 1
explorer.heatmap.selected = [[lab.n_layers - 1, final]]
explorer.queue.join()
print(explorer.edits)
print(explorer.logits.metric)
"""),
    code("""
print(lab.log.to_code())   # every edit you applied, as runnable Python
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
the property; **projecting it out** tests whether the model *uses* that direction.
"""),
    code("""
import interplab as ilab
from interplab.widgets.controller import steering_panel

lab = ilab.Lab.load("ioi-tiny")
positive = ["The capital of France is", "The capital city of France is"]
negative = ["The capital of Spain is", "The capital city of Spain is"]
layer = lab.n_layers // 2
v = ilab.vectors.diff_of_means(lab, positive, negative, site="resid_post", layer=layer)
print("vector norm", float(v.norm()), "| residual norm at that layer", lab.residual_norm("resid_post", layer))
"""),
    md("### Predict, then drag\nThe vector points from *Spain* to *France*. Steer *\"The capital of Spain is\"* with "
       "it: what should the top next token become as alpha grows?"),
    code("""
panel = steering_panel(lab, "The capital of Spain is", positive, negative, site="resid_post", layer=layer)
panel
"""),
    md("**What you should see:** while you drag, the next-token bars update; at alpha 0 the model says ' Madrid', and "
       "from about alpha 1 ' Paris' is on top."),
    code("""
# ANSWER: the steered distribution, computed directly
prompt = "The capital of Spain is"
for alpha in (0.0, 1.0, 2.0):
    r = lab.run(prompt, edits=[ilab.steer("resid_post", layer, v, alpha=alpha, pos=-1)])
    top = r.last_logits[0].softmax(-1).topk(3)
    print(alpha, [(lab.tokenizer.decode([i]), round(p, 3)) for p, i in zip(top.values.tolist(), top.indices.tolist())])
"""),
    md("## Does the model use this direction? Project it out\n\n`ilab.project(site, layer, v, coeff=0)` removes the "
       "component along `v` (coeff=1 keeps it, 3 triples it). Compare p(' Paris') for *France*: if it survives the "
       "ablation, the model does not need that direction."),
    code("""
france = "The capital of France is"
paris = lab.token_id(" Paris")
for coeff in (1.0, 0.0, 3.0):
    r = lab.run(france, edits=[ilab.project("resid_post", layer, v, coeff=coeff)])
    print(f"coeff {coeff}: p(' Paris') = {r.last_logits[0].softmax(-1)[paris]:.3f}")
"""),
    md("## Generation with the steer on at every step"),
    code("""
plain = lab.generate("The capital of Spain is", max_new_tokens=8)
steered = lab.generate("The capital of Spain is", [ilab.steer("resid_post", layer, v, alpha=1.5)], max_new_tokens=8)
print("plain:  ", plain.text)
print("steered:", steered.text)
"""),
    md("## Persistent edits\n\nBind an edit to the model itself: every call — including `model.generate` from "
       "other code — runs with it, at the cost of a plain forward hook."),
    code("""
with lab.edit([ilab.steer("resid_post", layer, v, alpha=1.5)]):
    ids = lab.model.generate(**lab.tokenizer("The capital of Spain is", return_tensors="pt"), max_new_tokens=4,
                             do_sample=False)
print(lab.tokenizer.decode(ids[0]))
print("hooks left:", lab.hooks())
"""),
]

LENS = [
    md("""
# Logit lens and attention patterns

The **logit lens** reads each layer's residual stream through the model's final norm and unembedding: what would
the model predict if it stopped here? Attention patterns show where each head looks.
"""),
    code("""
import interplab as ilab
from interplab.lens import logit_lens
from interplab.widgets.controller import attention_widget, lens_widget

lab = ilab.Lab.load("ioi-tiny")
prompt = "When Mary and John went to the store, John gave a drink to"
lens_widget(lab, prompt)
"""),
    md("**What you should see:** after layer 0 the final position predicts ' John', the repeated name; layers 1 and "
       "2, whose heads read the second ' John' and push it down, flip the prediction to ' Mary', which is "
       "near-certain after the last layer. Earlier positions predict ordinary continuations. Hover a cell for its "
       "top-5."),
    md("### Predict, then check\nAt which layer does p(' Mary') at the final position jump close to 1? Where is "
       "' John' before that?"),
    code("""
# ANSWER
res = logit_lens(lab, prompt)
mary, john = lab.token_id(" Mary"), lab.token_id(" John")
for layer in range(res.n_layers):
    print(f"layer {layer}: top {res.top_tokens[layer][-1][0]!r}, p(' Mary') = {res.prob_of(mary)[layer, -1]:.3f}, "
          f"p(' John') = {res.prob_of(john)[layer, -1]:.3f}")
"""),
    md("## Attention patterns\n\nPick a layer and head: queries on the vertical axis, keys on the horizontal. Look "
       "for heads whose final position attends to the second ' John' (in layers 1 and 2: they move the subject to "
       "the end) and for heads that attend to both names of the intro (layer 3: they copy the candidates)."),
    code("""
attention_widget(lab, prompt, layer=lab.n_layers - 1, head=0)
"""),
    code("""
# ANSWER: for each head, how much the final position attends to each name
run = lab.run(prompt, cache=["pattern"])
tokens = lab.to_str_tokens(prompt)
names = {i: t for i, t in enumerate(tokens) if t in (" Mary", " John")}
for layer in range(lab.n_layers):
    for head in range(lab.n_heads):
        att = run.cache["pattern", layer][0, head, -1]
        print(f"L{layer}H{head}", {f"{t}@{i}": round(float(att[i]), 2) for i, t in names.items()})
"""),
]


def write(name, cells):
    nb = nbf.v4.new_notebook()
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbf.write(nb, HERE / name)


if __name__ == "__main__":
    write("01_ioi_patching.ipynb", IOI)
    write("02_steering.ipynb", STEERING)
    write("03_logit_lens.ipynb", LENS)
    print("wrote", ", ".join(p.name for p in sorted(HERE.glob("*.ipynb"))))
