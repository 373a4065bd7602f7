"""Seed 003 (intervene on a site and measure the effect), the interplab way.

The seed zeroes the second block's MLP output of a random-init GPT-2 on the IOI prompt with torchlens, reads the
change in the Mary-minus-John logit difference, checks it against a plain forward hook, applies the same edit "live"
(bound to the model), and runs a control edit (scale 1.0) that must change nothing. Same model and vocabulary here:
the vocabulary is the prompt's words, like the seed's, wrapped in a word-level tokenizer so interplab can read text.

    python examples/seeds/003_intervene_on_a_site.py
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402

import interplab as ilab  # noqa: E402

torch.set_num_threads(1)
PROMPT = "When Mary and John went to the store, John gave a drink to"
words = PROMPT.replace(",", " ,").split()
vocab = sorted(set(words))
x = torch.tensor([[vocab.index(word) for word in words]])
torch.manual_seed(0)
config = transformers.GPT2Config(
    vocab_size=len(vocab),
    n_positions=32,
    n_embd=64,
    n_layer=2,
    n_head=4,
    use_cache=False,
    attn_implementation="eager",
)
model = transformers.GPT2LMHeadModel(config).eval()

# The seed feeds ids by hand; a Lab reads text, so the same vocabulary becomes a word-level tokenizer
# ("store," splits into "store" and "," exactly as the seed's PROMPT.replace(",", " ,") does).
wl = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=vocab[0]))
wl.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=wl)
lab = ilab.Lab(model, tokenizer, model_id="seed-003-gpt2")
assert torch.equal(lab.to_tokens(PROMPT), x), "the word-level tokenizer must give the seed's ids"

# ---- the edit: zero the second block's MLP output ----------------------------------------------------------------
# torchlens: trace.fork().do(tl.module("transformer.h.1.mlp"), tl.zero_ablate(), ...). interplab: a site name
# (or the raw path "transformer.h.1.mlp.output"); every run keeps its own logits, so the clean run stays as it was.
clean = lab.run(PROMPT)
ablated = lab.run(PROMPT, edits=[ilab.zero("mlp_out", 1)], cache=[("mlp_out", 1)])
metric = ilab.logit_diff("Mary", "John").bind(lab.token_id)  # answers are single tokens (words here)
effect = metric(ablated.last_logits) - metric(clean.last_logits)
print(f"change in the Mary-minus-John logit difference: {effect.item():+.4f}")
mary, john = vocab.index("Mary"), vocab.index("John")
clean_logits, ablated_logits = clean.logits[0, -1], ablated.logits[0, -1]
by_hand = (ablated_logits[mary] - ablated_logits[john]) - (clean_logits[mary] - clean_logits[john])
assert torch.allclose(effect, by_hand, atol=1e-6)

# ---- a check: the same edit as a plain forward hook ---------------------------------------------------------------
handle = model.transformer.h[1].mlp.register_forward_hook(lambda module, args, out: torch.zeros_like(out))
with torch.no_grad():
    hooked_logits = model(x).logits[0, -1]
handle.remove()
assert torch.allclose(ablated_logits, hooked_logits, atol=1e-6)
assert torch.count_nonzero(ablated.cache["mlp_out", 1]) == 0
raw = lab.run(PROMPT, edits=[ilab.zero("transformer.h.1.mlp.output")])  # the raw module path: same edit
assert torch.allclose(raw.logits[0, -1], hooked_logits, atol=1e-6)
print("plain-hook check: identical logits; the edited site is all zeros")

# ---- the same edit, live ------------------------------------------------------------------------------------------
# torchlens: tl.when(site, edit).bind(model). interplab: lab.bind([...]) (until lab.unbind()) or `with lab.edit([...])`;
# the plain model then runs with the edit on every call (model(x), model.generate) at the cost of a forward hook.
with lab.edit([ilab.zero("mlp_out", 1)]):
    with torch.no_grad():
        live_logits = model(x).logits[0, -1]
assert torch.allclose(live_logits, hooked_logits, atol=1e-6)
lab.bind([ilab.zero("mlp_out", 1)])
try:
    with torch.no_grad():
        bound_logits = model(x).logits[0, -1]
finally:
    lab.unbind()
assert torch.allclose(bound_logits, hooked_logits, atol=1e-6)
with torch.no_grad():
    assert torch.allclose(model(x).logits[0, -1], clean_logits, atol=1e-6)  # unbound: the clean model again
assert lab.hooks() == []
print("live (bound) edit: identical logits; unbinding restores the clean model")

# ---- vary it --------------------------------------------------------------------------------------------------------
# Another site, another edit, a patch from a second prompt (same words, names swapped: equal length).
corrupt = "When John and Mary went to the store, Mary gave a drink to"
lab.check_pair(PROMPT, corrupt)
variants = {
    "zero mlp_out L0": [ilab.zero("mlp_out", 0)],
    "scale mlp_out L1 x0.5": [ilab.scale("mlp_out", 1, 0.5)],
    "steer resid_post L1 (last pos)": [ilab.steer("resid_post", 1, torch.randn(64, generator=torch.Generator()
                                                                               .manual_seed(0)), 4.0, pos=-1)],
    "patch resid_pre L1 from corrupt": [ilab.patch("resid_pre", 1, source=lab.run(corrupt))],
}
for name, edits in variants.items():
    d = metric(lab.run(PROMPT, edits=edits).last_logits) - metric(clean.last_logits)
    print(f"  {name:34s} change in logit diff {d.item():+.4f}")

# ---- a control: scale 1.0 changes nothing ----------------------------------------------------------------------------
control = lab.run(PROMPT, edits=[ilab.scale("mlp_out", 0, 1.0)])
assert torch.allclose(control.logits[0, -1], clean_logits, atol=1e-6)
print("control (scale 1.0 on mlp_out L0): no change")
print("\nall checks passed")
