"""Seed 000 (setting activations), the interplab way.

The seed edits GPT-2's activations with nnsight: in-place zeroing, replacing the embedding with a scaled copy,
editing specific positions, adding a steering vector, handling tuple outputs, and checking the downstream effect on
the logits. Here each example is one interplab edit on a randomly initialised 8-layer GPT-2 with a small byte-level
BPE tokenizer (offline), and each is checked against the same edit written as a plain PyTorch forward hook.
Random weights say nothing about Paris; the checks hold whatever the weights are.

    python examples/seeds/000_setting_activations.py
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers as tf  # noqa: E402

import interplab as ilab  # noqa: E402

torch.set_num_threads(1)
PROMPT = "The Eiffel Tower is in the city of"
ATOL = 1e-5


CORPUS = ["The Eiffel Tower is in the city of Paris.", "The capital of France is Paris.",
          "When Mary and John went to the store, John gave a drink to Mary.", "Rome is the capital of Italy."] * 20


def small_tokenizer():
    """A byte-level BPE like GPT-2's, trained here on a few sentences (vocab 400): a small vocabulary keeps this
    script fast; the real GPT-2 tokenizer (interplab.zoo.gpt2_tokenizer()) works the same way, only bigger."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=400, min_frequency=1, special_tokens=["<|endoftext|>"])
    return tf.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                      bos_token="<|endoftext|>", pad_token="<|endoftext|>")


# A GPT-2 with 8 small layers, so the seed's layer numbers (0, 5, 6) exist.
torch.manual_seed(0)
config = tf.GPT2Config(vocab_size=400, n_layer=8, n_head=4, n_embd=64, n_positions=128, bos_token_id=0,
                       eos_token_id=0, attn_implementation="eager")
model = tf.GPT2LMHeadModel(config).eval()
lab = ilab.Lab(model, small_tokenizer(), model_id="random-gpt2-8L")
ids = lab.to_tokens(PROMPT)
print(lab)
print("tokens:", lab.to_str_tokens(PROMPT))


def plain(fn_by_module: dict) -> torch.Tensor:
    """Logits of the plain model with hand-written forward hooks {module: fn(output) -> new output}."""
    handles = [m.register_forward_hook(lambda mod, args, out, fn=fn: fn(out)) for m, fn in fn_by_module.items()]
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        for h in handles:
            h.remove()


def first(out):
    """The hidden state of a module output that may be a tensor or a tuple (see 'tuple outputs' below)."""
    return out if isinstance(out, torch.Tensor) else out[0]


def rebuild(out, new):
    return new if isinstance(out, torch.Tensor) else (new, *out[1:])


def predicted(logits) -> str:
    return lab.to_string([int(logits[0, -1].argmax())])


clean = lab.run(PROMPT, cache=[("resid_post", 0), "embed"])

# ---- in-place setting: zero every activation at layer 0 -----------------------------------------------------------
# nnsight: model.transformer.h[0].output[0][:] = 0, with a .clone() to keep "before".
# interplab never writes into the tensor a module returned: cached values are copies, so "before" is simply the
# clean run's cache, and there is no clone-before-save pitfall.
zeroed = lab.run(PROMPT, edits=[ilab.zero("resid_post", 0)], cache=[("resid_post", 0)])
before, after = clean.cache["resid_post", 0], zeroed.cache["resid_post", 0]
print("\n[in-place zero, layer 0]")
print("Before:", before[0, 0, :5])
print("After: ", after[0, 0, :5])
assert torch.count_nonzero(after) == 0 and torch.count_nonzero(before) > 0
hooked = plain({model.transformer.h[0]: lambda out: rebuild(out, torch.zeros_like(first(out)))})
assert torch.allclose(zeroed.logits, hooked, atol=ATOL)

# ---- replacement setting: the embedding output scaled by 0.5 -------------------------------------------------------
# nnsight: model.transformer.wte.output = model.transformer.wte.output * 0.5. interplab: the 'embed' site.
half = lab.run(PROMPT, edits=[ilab.scale("embed", factor=0.5)], cache=["embed"])
print("\n[replacement: embedding x 0.5]")
print("Before:", clean.cache["embed"][0, 0, :5])
print("After: ", half.cache["embed"][0, 0, :5])
assert torch.allclose(half.cache["embed"], 0.5 * clean.cache["embed"], atol=ATOL)
assert torch.allclose(half.logits, plain({model.transformer.wte: lambda out: out * 0.5}), atol=ATOL)

# ---- specific positions: zero only the last token at layer 5 -------------------------------------------------------
# nnsight: model.transformer.h[5].output[0][:, -1, :] = 0. interplab: pos=-1 (the last real token of each prompt,
# also in a padded batch); batch=, head= select rows and heads the same way.
last5 = lab.run(PROMPT, edits=[ilab.zero("resid_post", 5, pos=-1)])
print(f"\n[zero the last position at layer 5] predicted next token: {predicted(last5.logits)!r} "
      f"(clean: {predicted(clean.logits)!r})")


def zero_last(out):
    h = first(out).clone()
    h[:, -1, :] = 0
    return rebuild(out, h)


assert torch.allclose(last5.logits, plain({model.transformer.h[5]: zero_last}), atol=ATOL)
assert torch.allclose(last5.logits[0, :-1], clean.logits[0, :-1], atol=ATOL)  # earlier positions untouched
assert not torch.allclose(last5.logits[0, -1], clean.logits[0, -1], atol=ATOL)

# ---- a steering vector added at the last position of layer 6 -------------------------------------------------------
steering = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(1)) * 10
steered = lab.run(PROMPT, edits=[ilab.steer("resid_post", 6, steering, alpha=1.0, pos=-1)])
print(f"\n[steering at layer 6, last position] predicted next token: {predicted(steered.logits)!r}")


def add_last(out):
    h = first(out).clone()
    h[:, -1, :] += steering
    return rebuild(out, h)


assert torch.allclose(steered.logits, plain({model.transformer.h[6]: add_last}), atol=ATOL)
assert torch.allclose(steered.logits[0, :-1], clean.logits[0, :-1], atol=ATOL)

# ---- tuple outputs --------------------------------------------------------------------------------------------------
# Some modules return tuples: GPT-2's attention returns (output, attention weights); blocks returned tuples in older
# transformers and a plain tensor in newer ones. With nnsight you index output[0] and rebuild the tuple yourself.
# interplab's sites know which element holds which tensor, so an edit names the site and never the tuple element:
# 'attn_out' is element 0 of the attention module's output, 'pattern' (read-only) is element 1.
seen = {}
h = model.transformer.h[0].attn.register_forward_hook(lambda m, a, out: seen.setdefault("attn", out))
with torch.no_grad():
    model(ids)
h.remove()
out = seen["attn"]
print(f"\n[tuple outputs] transformer.h[0].attn returns a {type(out).__name__} with {len(out)} elements;")
print("  interplab sites:", {s: lab.sites.describe()[s] for s in ("resid_post", "attn_out", "pattern")})
assert isinstance(out, tuple)
attn0 = lab.run(PROMPT, edits=[ilab.zero("attn_out", 0)], cache=[("pattern", 0), ("attn_out", 0)])
hooked = plain({model.transformer.h[0].attn: lambda out: (torch.zeros_like(out[0]), *out[1:])})
assert torch.allclose(attn0.logits, hooked, atol=ATOL)
assert torch.count_nonzero(attn0.cache["attn_out", 0]) == 0
assert torch.allclose(attn0.cache["pattern", 0], out[1], atol=ATOL)  # element 1 left as it was

# ---- downstream effects: clean vs layer-0 zeroed logits --------------------------------------------------------------
diff = (clean.logits - zeroed.logits).abs().mean()
print(f"\n[downstream] mean absolute difference in logits: {diff:.4f}")
print(f"Clean prediction:    {predicted(clean.logits)!r}")
print(f"Modified prediction: {predicted(zeroed.logits)!r}")
assert diff > 0
assert lab.hooks() == [] and all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
print("\nall checks passed")
