"""Seed 002 (steering during generation), the interplab way.

Every example of the seed - no steering, additive, orthogonal decomposition, projection cap, many layers and
operations, which positions, a head before W_O, an MoE expert, the sampler, and edits on every request - on a tiny
random-init Qwen3 (and a tiny random-init Qwen2-MoE for the expert). Random weights say nothing about France; each
section asserts what the operation must do whatever the weights are. Runs in a few seconds on a CPU:

    python examples/seeds/002_steering.py
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import time  # noqa: E402

import torch  # noqa: E402
import transformers as tf  # noqa: E402
from tokenizers import ByteLevelBPETokenizer, processors  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.analyses import steering, vectors  # noqa: E402

torch.set_num_threads(1)  # tiny models: one thread is fastest, and polite on a shared machine
torch.manual_seed(0)
START = time.perf_counter()
CORPUS = ["The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is Madrid.",
          "When Mary and John went to the store, John gave a drink to Mary.",
          "Paris is a city in France, and Berlin is a city in Germany."] * 20


def tokenizer():
    """A small byte-level BPE that puts a BOS token in front of every prompt (like many chat models)."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=400, min_frequency=1, special_tokens=["<|endoftext|>"])
    bpe._tokenizer.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)])
    return tf.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                      eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def qwen3(vocab):
    torch.manual_seed(0)
    cfg = tf.Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0, attn_implementation="eager")
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def qwen2_moe(vocab):
    torch.manual_seed(0)
    cfg = tf.Qwen2MoeConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                            shared_expert_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
                            decoder_sparse_step=1, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=128, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                            attn_implementation="eager")
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def kl(p_logits, q_logits):
    p, q = p_logits.log_softmax(-1), q_logits.log_softmax(-1)
    return (p.exp() * (p - q)).sum(-1).mean().item()


tok = tokenizer()
lab = ilab.Lab(qwen3(len(tok)), tok, model_id="tiny-qwen3-random")
PROMPT = "The capital of France is"
L, T = 2, 16  # edit layer, new tokens

# ---- Without steering ------------------------------------------------------------------------------------------
base = lab.generate(PROMPT, max_new_tokens=T, stop_at_eos=False)
print("plain:      ", repr(base.text))
assert base.new_ids == lab.generate(PROMPT, max_new_tokens=T, stop_at_eos=False, use_cache=False).new_ids
assert lab.hooks() == []  # nothing left on the model

# ---- Additive: h -> h + scale * v at the residual leaving block L, at every step ----------------------------------
norm = lab.residual_norm("resid_post", L, [PROMPT])  # size the vector against the residual's own norm
vector = torch.randn(lab.d_model)
vector = vector / vector.norm()
steer = ilab.steer("resid_post", L, vector, alpha=4 * norm)
steered = lab.generate(PROMPT, [steer], max_new_tokens=T, stop_at_eos=False)
print("additive:   ", repr(steered.text))
assert steered.new_ids != base.new_ids  # a steer of 4x the residual norm takes over greedy output
assert steered.new_ids == lab.generate(PROMPT, [steer], max_new_tokens=T, stop_at_eos=False,
                                       use_cache=False).new_ids  # same tokens with and without the KV cache

# ---- Orthogonal decomposition: (I - P) h + coeff * P h; coeff=0 ablates -----------------------------------------
u = torch.randn(lab.d_model)
u = u / u.norm()
clean = lab.run(PROMPT).logits
ablated = lab.run(PROMPT, [ilab.project("resid_post", L, u, coeff=0.0)]).logits
pushed = lab.run(PROMPT, [steer]).logits
print(f"projection: KL(ablate random direction) = {kl(clean, ablated):.4f}, KL(steer) = {kl(clean, pushed):.4f}")
assert kl(clean, ablated) < 0.1 * kl(clean, pushed)  # a random direction carries little the model uses
out = lab.generate(PROMPT, [ilab.project("resid_post", L, u, coeff=0.0)], max_new_tokens=T, stop_at_eos=False)
print("ablate u:   ", repr(out.text))
with lab.edit([ilab.project("resid_post", L, u, coeff=0.0)]):  # the direction really is gone
    r = lab.run(PROMPT, cache=[("resid_post", L)])
assert (r.cache["resid_post", L] @ u).abs().max() < 1e-4

# ---- Projection cap: clamp the coefficient along u into [lo, hi] --------------------------------------------------
cap = ilab.clamp("resid_post", L, u, hi=0.5)
out = lab.generate(PROMPT, [cap], max_new_tokens=T, stop_at_eos=False)
print("cap:        ", repr(out.text))
with lab.edit([cap]):
    r = lab.run(PROMPT, cache=[("resid_post", L)])
assert (r.cache["resid_post", L] @ u).max() <= 0.5 + 1e-5

# ---- Many layers, many operations, in program order ---------------------------------------------------------------
a, b = torch.randn(2, lab.d_model)
a, b = a / a.norm(), b / b.norm()
program = [ilab.steer("resid_post", 1, a, alpha=2 * norm),
           ilab.project("resid_post", 3, b),              # ablate b at 3 ...
           ilab.steer("resid_post", 3, a, alpha=norm)]    # ... then add a
out = lab.generate(PROMPT, program, max_new_tokens=T, stop_at_eos=False)
print("many:       ", repr(out.text))
reordered = lab.run(PROMPT, [program[0], program[2], program[1]]).logits
assert not torch.allclose(lab.run(PROMPT, program).logits, reordered)  # order is program order

# ---- Which positions -------------------------------------------------------------------------------------------
ids = tok(PROMPT)["input_ids"]
assert ids[0] == tok.bos_token_id  # this tokenizer puts a BOS first: 'content' skips it
content = lab.generate(PROMPT, [steer.with_(pos="content")], max_new_tokens=T, stop_at_eos=False)
print("content:    ", repr(content.text))
# "prompt" = the prefill only; "generated" = decode steps only; "newest" = the newest token of every step;
# steps=range(a, b) = the tokens fed in at those steps. The first new token comes from the prefill, so a
# decode-only edit cannot change it.
decode_only = lab.generate(PROMPT, [steer.with_(pos="generated")], max_new_tokens=T, stop_at_eos=False)
assert decode_only.new_ids[0] == base.new_ids[0]
late = lab.generate(PROMPT, [steer.with_(steps=range(5, T))], max_new_tokens=T, stop_at_eos=False)
assert late.new_ids[:5] == base.new_ids[:5]  # tokens before step 5 are untouched
for pos in ("prompt", "generated", "newest", "content", -1):
    e = [steer.with_(pos=pos)]
    assert (lab.generate(PROMPT, e, max_new_tokens=T, stop_at_eos=False).new_ids
            == lab.generate(PROMPT, e, max_new_tokens=T, stop_at_eos=False, use_cache=False).new_ids), pos

# ---- Somewhere other than the residual: one head before W_O -------------------------------------------------------
head = 1
zero_head = ilab.zero("z", L, head=head)
out = lab.generate(PROMPT, [zero_head], max_new_tokens=T, stop_at_eos=False)
print("head zeroed:", repr(out.text))
with lab.edit([zero_head]):
    z = lab.run(PROMPT, cache=[("z", L)]).cache["z", L]
dh = lab.engine.d_head
assert torch.count_nonzero(z[..., head * dh:(head + 1) * dh]) == 0 and torch.count_nonzero(z) > 0

# ---- An expert: the router logit of one expert set to -inf ------------------------------------------------------
moe = ilab.Lab(qwen2_moe(len(tok)), tok, model_id="tiny-qwen2-moe-random")
routed = torch.zeros(8, dtype=torch.long)
experts = moe.model.model.layers[1].mlp.experts


def count_tokens(module, args):  # experts(hidden, top_k_index, top_k_weights): count tokens sent to each expert
    routed.add_(torch.bincount(args[1].flatten(), minlength=8))


count = experts.register_forward_pre_hook(count_tokens)
try:
    moe.generate(PROMPT, max_new_tokens=8, stop_at_eos=False)
    expert = int(routed.argmax())
    busy = int(routed[expert])
    routed.zero_()
    out = moe.generate(PROMPT, [steering.ban_expert(1, expert)], max_new_tokens=8, stop_at_eos=False)
    print(f"expert {expert} banned (had {busy} tokens, now {int(routed[expert])}):", repr(out.text))
    assert busy > 0 and routed[expert] == 0 and routed.sum() > 0
finally:
    count.remove()

# ---- The sampler: ban a token at every step, force one at a step ----------------------------------------------
never = base.new_ids[0]  # the token greedy decoding picks first ("Paris")
forced = tok(" Berlin", add_special_tokens=False)["input_ids"][0]
out = lab.generate(PROMPT, [steering.ban_token(never), steering.force_token(forced, 3)], max_new_tokens=6,
                   stop_at_eos=False)
print("sampler:    ", repr(out.text))
assert never not in out.new_ids and out.new_ids[3] == forced
# the forced token is what the next step continues from: step 4 is the greedy pick after it (Paris still banned)
with torch.no_grad():
    after = lab.model(torch.tensor([ids + out.new_ids[:4]])).logits[0, -1]
after[never] = float("-inf")
assert int(after.argmax()) == out.new_ids[4]

# ---- Every request, not just yours: bind edits to the plain model ------------------------------------------------
with lab.edit([steer]):  # model.generate called by any other code now runs steered
    x = torch.tensor([ids])
    plain_call = lab.model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=T,
                                    do_sample=False, pad_token_id=0, eos_token_id=None)[0, len(ids):].tolist()
    assert lab.bound == [steer] and lab.hooks()
assert plain_call == steered.new_ids
assert lab.bound == [] and lab.hooks() == []

# ---- A vector from contrast prompts, saved with where it came from ----------------------------------------------
v = vectors.diff_of_means(lab, ["Paris is a city in France"], ["Berlin is a city in Germany"], layer=L)
sv = vectors.from_tensor(v, site="resid_post", layer=L, model_id=lab.model_id)
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "interplab_002_vector.safetensors")
vectors.save(path, sv)
back = vectors.load(path)
assert torch.equal(back.tensor, v) and (back.site, back.layer, back.model_id) == ("resid_post", L, lab.model_id)
out = lab.generate(PROMPT, [back.unit().steer(alpha=4 * norm)], max_new_tokens=T, stop_at_eos=False)
print("diff-means: ", repr(out.text))
os.remove(path)
print(f"002 steering: all examples passed in {time.perf_counter() - START:.1f}s")
