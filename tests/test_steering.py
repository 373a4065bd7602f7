"""Steering during generation, sampler edits, MoE expert bans, bound edits and vectors - each checked against a
hand-written plain PyTorch hook on model.generate (no interplab code in the reference path)."""

import pytest
import torch

import interplab as ilab
from interplab import engine
from interplab.analyses import steering, vectors

PROMPT = "The capital of France is"
N = 8
ARCHS3 = ["gpt2", "llama", "qwen3"]


# ---- hand-written references ------------------------------------------------------------------------------------

def blocks(model):
    return model.transformer.h if hasattr(model, "transformer") else model.model.layers


def o_proj(model, layer):
    b = blocks(model)[layer]
    return b.attn.c_proj if hasattr(b, "attn") else b.self_attn.o_proj


def on_hidden(out, fn):
    """Apply fn to the hidden-state element of a block's output (a tensor, or the first element of a tuple)."""
    if isinstance(out, torch.Tensor):
        return fn(out)
    return (fn(out[0]), *out[1:])


def ref_generate(model, tok, prompt, hooks, n=N, use_cache=True, processors=None):
    """Plain HF generate with plain hooks: hooks = [(module, 'fwd'|'pre'|'pre_kw', fn)]."""
    ids = torch.tensor([tok(prompt)["input_ids"]])
    handles = []
    try:
        for module, kind, fn in hooks:
            if kind == "fwd":
                handles.append(module.register_forward_hook(fn))
            elif kind == "pre":
                handles.append(module.register_forward_pre_hook(fn))
            else:
                handles.append(module.register_forward_pre_hook(fn, with_kwargs=True))
        kw = {"logits_processor": processors} if processors else {}
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                 do_sample=False, pad_token_id=0, use_cache=use_cache, **kw)
    finally:
        for h in handles:
            h.remove()
    return out[0, ids.shape[1]:].tolist()


def ours(lab, edits, n=N, prompt=PROMPT, **kw):
    a = lab.generate(prompt, edits, max_new_tokens=n, **kw).new_ids
    b = lab.generate(prompt, edits, max_new_tokens=n, use_cache=False, **kw).new_ids
    assert a == b, f"KV cache on/off differ: {a} vs {b}"
    assert lab.hooks() == [] and engine.attached_hooks() == []
    return a


def add_hook(vec):
    """A block forward hook adding vec to the hidden state at every position."""
    return lambda mod, a, o: on_hidden(o, lambda h: h + vec)


def unit(d, seed):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g)
    return v / v.norm()


@pytest.fixture(params=ARCHS3)
def lab(request, models, tokenizer):
    return ilab.Lab(models[request.param], tokenizer, model_id=f"tiny-{request.param}")


def hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


# ---- every operation vs a plain hook ------------------------------------------------------------------------------

def test_steer_every_step_matches_plain_hook(lab, tokenizer):
    m, d = lab.model, lab.d_model
    v = unit(d, 1)
    alpha = 4 * lab.residual_norm("resid_post", 1)
    plain = ours(lab, [])
    ref = ref_generate(m, tokenizer, PROMPT, [(blocks(m)[1], "fwd", add_hook(alpha * v))])
    got = ours(lab, [ilab.steer("resid_post", 1, v, alpha=alpha)])
    assert got == ref
    assert got != plain  # a steer of 4x the residual norm changes greedy output
    assert ref_generate(m, tokenizer, PROMPT, []) == plain


@pytest.mark.parametrize("coeff", [0.0, 3.0])
def test_project_matches_plain_hook(lab, tokenizer, coeff):
    m, u = lab.model, unit(lab.d_model, 2)

    def proj(h):
        c = (h @ u).unsqueeze(-1)
        return h - c * u + coeff * c * u
    ref = ref_generate(m, tokenizer, PROMPT, [(blocks(m)[1], "fwd", lambda mod, a, o: on_hidden(o, proj))])
    assert ours(lab, [ilab.project("resid_post", 1, u, coeff=coeff)]) == ref


def test_clamp_matches_plain_hook(lab, tokenizer):
    m, u = lab.model, unit(lab.d_model, 3)

    def cap(h):
        c = (h @ u).unsqueeze(-1)
        return h + (c.clamp(None, -1.0) - c) * u
    ref = ref_generate(m, tokenizer, PROMPT, [(blocks(m)[0], "fwd", lambda mod, a, o: on_hidden(o, cap))])
    assert ours(lab, [ilab.clamp("resid_post", 0, u, hi=-1.0)]) == ref


def test_many_layers_program_order(lab, tokenizer):
    m, d = lab.model, lab.d_model
    a, b = unit(d, 4), unit(d, 5)
    s = lab.residual_norm("resid_post", 0)

    def at2(h):
        h = h - (h @ b).unsqueeze(-1) * b
        return h + 2 * s * a
    ref = ref_generate(m, tokenizer, PROMPT, [
        (blocks(m)[0], "fwd", lambda mod, x, o: on_hidden(o, lambda h: h + 3 * s * a)),
        (blocks(m)[2], "fwd", lambda mod, x, o: on_hidden(o, at2))])
    got = ours(lab, [ilab.steer("resid_post", 0, a, alpha=3 * s), ilab.project("resid_post", 2, b),
                     ilab.steer("resid_post", 2, a, alpha=2 * s)])
    assert got == ref


def test_zero_head_before_o_proj(lab, tokenizer):
    m, dh, head = lab.model, lab.engine.d_head, 1

    def pre(mod, args):
        x = args[0].clone()
        x[..., head * dh:(head + 1) * dh] = 0
        return (x, *args[1:])
    ref = ref_generate(m, tokenizer, PROMPT, [(o_proj(m, 1), "pre", pre)])
    assert ours(lab, [ilab.zero("z", 1, head=head)]) == ref


# ---- positions during generation --------------------------------------------------------------------------------

def _counting(fn):
    """A block hook that knows its call index (0 = prefill with a KV cache)."""
    state = {"i": 0}

    def hook(mod, a, o):
        out = on_hidden(o, lambda h: fn(state["i"], h))
        state["i"] += 1
        return out
    return hook


def _add_rows(h, rows, vec):
    h = h.clone()
    h[:, rows] += vec
    return h


POSITION_CASES = {
    "prompt": lambda i, h, v: h + v if i == 0 else h,
    "generated": lambda i, h, v: h + v if i > 0 else h,
    "newest": lambda i, h, v: _add_rows(h, -1, v),
    "last_prompt_int": lambda i, h, v: _add_rows(h, -1, v) if i == 0 else h,
    "steps_2_4": lambda i, h, v: h + v if i in (2, 3) else h,
    "slice_prompt": lambda i, h, v: _add_rows(h, slice(1, 3), v) if i == 0 else h,
}
EDIT_KW = {"prompt": dict(pos="prompt"), "generated": dict(pos="generated"), "newest": dict(pos="newest"),
           "last_prompt_int": dict(pos=-1), "steps_2_4": dict(steps=range(2, 4)),
           "slice_prompt": dict(pos=slice(1, 3))}


@pytest.mark.parametrize("case", list(POSITION_CASES))
def test_positions_match_hand_written_cache_hooks(lab, tokenizer, case):
    m = lab.model
    v = 4 * lab.residual_norm("resid_post", 1) * unit(lab.d_model, 6)
    hook = _counting(lambda i, h: POSITION_CASES[case](i, h, v))
    ref = ref_generate(m, tokenizer, PROMPT, [(blocks(m)[1], "fwd", hook)])
    got = ours(lab, [ilab.steer("resid_post", 1, v, **EDIT_KW[case])])
    assert got == ref


def test_content_only_skips_special_tokens(lab, tokenizer):
    m = lab.model
    prompt = "<|endoftext|>The capital of France is"
    ids = tokenizer(prompt)["input_ids"]
    assert ids[0] == tokenizer.eos_token_id  # a special token the edit must skip
    v = 4 * lab.residual_norm("resid_post", 1) * unit(lab.d_model, 7)
    cur = {}

    def grab(mod, args, kwargs):
        cur["ids"] = kwargs.get("input_ids", args[0] if args else None)

    def add(mod, a, o):
        keep = ~torch.isin(cur["ids"], torch.tensor(tokenizer.all_special_ids))
        return on_hidden(o, lambda h: h + keep[..., None] * v)
    ref = ref_generate(m, tokenizer, prompt, [(m, "pre_kw", grab), (blocks(m)[1], "fwd", add)])
    got = ours(lab, [ilab.steer("resid_post", 1, v, pos="content")], prompt=prompt)
    assert got == ref
    everywhere = ours(lab, [ilab.steer("resid_post", 1, v)], prompt=prompt)
    ref_all = ref_generate(m, tokenizer, prompt, [(blocks(m)[1], "fwd", add_hook(v))])
    assert everywhere == ref_all


def test_batch_of_prompts_left_padded_matches_one_by_one(models, tokenizer):
    lab = ilab.Lab(models["llama"], tokenizer)
    v = 4 * lab.residual_norm("resid_post", 1) * unit(lab.d_model, 8)
    e = [ilab.steer("resid_post", 1, v, pos="newest")]
    prompts = ["The capital of France is", "After the party, Alice gave"]
    both = lab.generate(prompts, e, max_new_tokens=5, stop_at_eos=False)
    for i, p in enumerate(prompts):
        one = lab.generate(p, e, max_new_tokens=5, stop_at_eos=False)
        assert both.ids[i].tolist() == one.new_ids


# ---- MoE ---------------------------------------------------------------------------------------------------------

def _moe(kind):
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=320, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, attn_implementation="eager", bos_token_id=0, eos_token_id=0,
                  pad_token_id=0)
    if kind == "qwen2_moe":
        cfg = tf.Qwen2MoeConfig(intermediate_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                                num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, **common)
    else:
        cfg = tf.MixtralConfig(intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, **common)
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


@pytest.mark.parametrize("kind", ["qwen2_moe", "mixtral"])
def test_ban_expert_routes_no_tokens(kind, tokenizer):
    m = _moe(kind)
    lab = ilab.Lab(m, tokenizer)
    layer = 1
    counts = torch.zeros(4, dtype=torch.long)

    def count(mod, args):
        counts.add_(torch.bincount(args[1].reshape(-1), minlength=4))
    h = m.model.layers[layer].mlp.experts.register_forward_pre_hook(count)
    try:
        lab.generate(PROMPT, max_new_tokens=N)
        expert = int(counts.argmax())
        assert counts[expert] > 0
        counts.zero_()
        got = ours(lab, [steering.ban_expert(layer, expert)])
        assert counts[expert] == 0 and counts.sum() > 0
    finally:
        h.remove()

    def reroute(mod, args, out):  # hand-written: -inf logit, then the router's own top-k
        logits = out[0].clone()
        logits[:, expert] = float("-inf")
        p = torch.softmax(logits.float(), -1)
        v, i = torch.topk(p, mod.top_k, -1)
        if getattr(mod, "norm_topk_prob", True):
            v = v / v.sum(-1, keepdim=True)
        return logits, v.to(out[1].dtype), i
    ref = ref_generate(m, tokenizer, PROMPT, [(m.model.layers[layer].mlp.gate, "fwd", reroute)])
    assert got == ref
    with lab.edit([steering.ban_expert(layer, expert)]):  # bound: plain model calls re-route too
        counts.zero_()
        h = m.model.layers[layer].mlp.experts.register_forward_pre_hook(count)
        lab.model(torch.tensor([tokenizer(PROMPT)["input_ids"]]))
        h.remove()
        assert counts[expert] == 0
    assert lab.hooks() == []


# ---- sampler -----------------------------------------------------------------------------------------------------

def test_ban_token_and_force_token(lab, tokenizer):
    m = lab.model
    plain = ours(lab, [])
    banned = plain[0]

    class Ban:
        def __call__(self, input_ids, scores):
            scores = scores.clone()
            scores[:, banned] = float("-inf")
            return scores
    from transformers import LogitsProcessorList
    ref = ref_generate(m, tokenizer, PROMPT, [], processors=LogitsProcessorList([Ban()]))
    got = ours(lab, [steering.ban_token(banned)])
    assert got == ref and banned not in got

    step, forced = 2, 42
    got = ours(lab, [steering.force_token(forced, step)])
    assert got[:step] == plain[:step] and got[step] == forced
    cont = tokenizer.decode(plain[:step] + [forced])
    ids = torch.tensor([tokenizer(PROMPT)["input_ids"] + plain[:step] + [forced]])
    with torch.no_grad():
        rest = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=N - step - 1,
                          do_sample=False, pad_token_id=0)[0, ids.shape[1]:].tolist()
    assert got[step + 1:] == rest, cont  # the next step continues from the forced token


def test_sampling_with_seed_is_reproducible(models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    a = lab.generate(PROMPT, max_new_tokens=6, temperature=1.5, seed=3).new_ids
    b = lab.generate(PROMPT, max_new_tokens=6, temperature=1.5, seed=3).new_ids
    assert a == b


def test_generate_removes_hooks_on_keyboard_interrupt(models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    before = hook_count(lab.model)

    def boom(step, logits):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        lab.generate(PROMPT, [ilab.steer("resid_post", 1, unit(32, 0))], on_logits=boom)
    assert hook_count(lab.model) == before and lab.hooks() == []


# ---- bound edits --------------------------------------------------------------------------------------------------

def test_bound_edits_apply_to_plain_model_and_unbind_cleanly(lab, tokenizer):
    m = lab.model
    params = {k: p.detach().clone() for k, p in m.state_dict().items()}
    fired = []
    user = blocks(m)[1].register_forward_hook(lambda mod, a, o: fired.append(1))
    try:
        before = hook_count(m)
        v = 4 * lab.residual_norm("resid_post", 1) * unit(lab.d_model, 9)
        ref = ref_generate(m, tokenizer, PROMPT, [(blocks(m)[1], "fwd", add_hook(v))])
        e = ilab.steer("resid_post", 1, v)
        plain_run, edited_run = lab.run(PROMPT).logits, lab.run(PROMPT, edits=[e], log=False).logits
        lab.bind([e])
        assert lab.bound == [e] and lab.hooks() and all(h["owner"] == "interplab.bound" for h in lab.hooks())
        ids = torch.tensor([tokenizer(PROMPT)["input_ids"]])
        with torch.no_grad():
            got = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=N, do_sample=False,
                             pad_token_id=0)[0, ids.shape[1]:].tolist()
        assert got == ref
        # lab.run under a bound edit equals lab.run with the same edit (the memo does not serve stale runs)
        assert torch.allclose(lab.run(PROMPT).logits, edited_run, atol=1e-5)
        lab.unbind()
        assert lab.bound == [] and lab.hooks() == [] and hook_count(m) == before
        assert torch.equal(lab.run(PROMPT).logits, plain_run)
        n = len(fired)
        m(ids)
        assert len(fired) == n + 1  # the user's own hook is still attached and firing
    finally:
        user.remove()
    for k, p in m.state_dict().items():
        assert torch.equal(p, params[k])


def test_edit_context_removed_on_exception(lab, tokenizer):
    m = lab.model
    before = hook_count(m)
    ids = torch.tensor([tokenizer(PROMPT)["input_ids"]])
    clean = m(ids).logits
    with pytest.raises(RuntimeError, match="inside"):
        with lab.edit([ilab.zero("mlp_out", 0), ilab.steer("resid_post", 2, unit(lab.d_model, 1), pos="newest")]):
            assert len(lab.bound) == 2 and len(engine.attached_hooks()) >= 3
            assert not torch.allclose(m(ids).logits, clean)
            raise RuntimeError("inside")
    assert lab.bound == [] and lab.hooks() == [] and hook_count(m) == before
    assert torch.equal(m(ids).logits, clean)
    for mod in m.modules():
        for hook in list(mod._forward_hooks.values()) + list(mod._forward_pre_hooks.values()):
            assert "steering" not in getattr(hook, "__module__", "") and "engine" not in getattr(hook, "__module__", "")


def test_bound_rejects_prompt_relative_selectors(models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    with pytest.raises(ilab.InterplabError, match="lab.generate"):
        lab.bind([ilab.steer("resid_post", 0, unit(32, 0), pos="prompt")])
    with pytest.raises(ilab.InterplabError, match="steps"):
        lab.bind([ilab.steer("resid_post", 0, unit(32, 0), steps=1)])
    assert lab.bound == [] and lab.hooks() == []


def test_edit_json_round_trip_with_steps_and_words():
    e = ilab.steer("resid_post", 1, torch.ones(4), alpha=2.0, pos="generated", steps=slice(1, 5))
    back = ilab.Edit.from_json(e.to_json())
    assert back.pos == "generated" and back.steps == slice(1, 5) and torch.equal(back.vector, e.vector)
    b = ilab.Edit.from_json(steering.ban_expert(2, [1, 3]).to_json())
    assert b.op == "ban_expert" and b.meta["experts"] == [1, 3]
    with pytest.raises(ilab.InterplabError):
        ilab.steer("resid_post", 1, torch.ones(4), pos="first")
    with pytest.raises(ilab.OutOfRangeError):
        ilab.steer("resid_post", 1, torch.ones(4), steps=-1)


# ---- vectors --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["gpt2", "qwen3"])
def test_diff_of_means_and_residual_norm_by_hand(tokenizer, arch):
    from _tiny_models import make_model

    m = make_model(arch)  # its own: output_hidden_states makes transformers add hooks to the model for good
    lab = ilab.Lab(m, tokenizer)
    pos_p = ["Mary gave a drink", "The capital of France"]
    neg_p = ["John went to the store, then", "Bob"]

    def act(p, layer, pos):
        with torch.no_grad():
            hs = m(torch.tensor([tokenizer(p)["input_ids"]]), output_hidden_states=True).hidden_states
        return hs[layer + 1][0, pos]
    want = torch.stack([act(p, 1, -1) for p in pos_p]).mean(0) - torch.stack([act(p, 1, -1) for p in neg_p]).mean(0)
    got = vectors.diff_of_means(lab, pos_p, neg_p, site="resid_post", layer=1, pos=-1)
    assert got.shape == (lab.d_model,) and torch.allclose(got, want, atol=1e-5)
    norms = torch.cat([act(p, 0, slice(None)).norm(dim=-1) for p in pos_p])
    assert abs(steering.residual_norm(lab, "resid_post", 0, pos_p) - norms.mean().item()) < 1e-4


def test_vector_save_load_round_trip(tmp_path, models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer, model_id="tiny-gpt2")
    v = vectors.diff_of_means(lab, ["Mary"], ["John"], layer=1)
    sv = vectors.from_tensor(v, site="resid_post", layer=1, model_id=lab.model_id, note="mary-john")
    path = tmp_path / "v.safetensors"
    vectors.save(path, sv, {"prompts": 2})
    back = vectors.load(path)
    assert torch.equal(back.tensor, v) and back.site == "resid_post" and back.layer == 1
    assert back.model_id == "tiny-gpt2" and back.metadata == {"note": "mary-john", "prompts": 2}
    e = back.steer(alpha=3.0)
    assert e.op == "steer" and e.layer == 1 and e.alpha == 3.0
    vectors.save(tmp_path / "plain.safetensors", v, {"site": "resid_pre", "layer": 0, "model_id": "x"})
    p = vectors.load(tmp_path / "plain.safetensors")
    assert (p.site, p.layer, p.model_id) == ("resid_pre", 0, "x")
    with pytest.raises(ilab.LoadError):
        vectors.load(tmp_path / "missing.safetensors")


def test_patch_from_a_run_during_generation(lab, tokenizer):
    m = lab.model
    other = "The capital of Italy is"
    assert len(tokenizer(other)["input_ids"]) == len(tokenizer(PROMPT)["input_ids"])
    src = lab.run(other, cache=[("resid_post", 1)]).cache["resid_post", 1]
    ref = ref_generate(m, tokenizer, PROMPT, [(blocks(m)[1], "fwd", _counting(
        lambda i, h: src.clone() if i == 0 else h))])  # prompt positions take the other run's activations
    assert ours(lab, [ilab.patch("resid_post", 1, source=lab.run(other))]) == ref


def test_cancel_stops_generation_at_the_next_token(lab):
    """A widget's generation job stops when its event is set (interpreter exit): one token, not max_new_tokens."""
    import threading

    stop = threading.Event()
    full = lab.generate("When Mary and John went to the store,", max_new_tokens=6, stop_at_eos=False, cancel=stop)
    assert len(full.new_ids) == 6
    stop.set()
    cut = lab.generate("When Mary and John went to the store,", max_new_tokens=6, stop_at_eos=False, cancel=stop)
    assert cut.new_ids == full.new_ids[:1]


def test_resid_mid_edits_act_the_same_in_generation_and_bound(lab):
    """An edit at resid_mid changes the residual stream in lab.run (checked against the model's math in
    tests/core/test_invariants.py); generation and bound edits go through the same hooks, so the first generated
    token is lab.run's argmax and a bound edit gives lab.run's logits."""
    v = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(1)) * 8.0
    prompt = "When Mary and John went to the store,"
    edit = ilab.steer("resid_mid", 1, v, alpha=1.0)
    run = lab.run(prompt, [edit])
    assert not torch.allclose(run.logits, lab.run(prompt).logits, atol=1e-3)  # the edit does something
    gen = lab.generate(prompt, [edit], max_new_tokens=1, stop_at_eos=False)
    assert gen.new_ids[0] == int(run.last_logits[0].argmax())
    with lab.edit([edit]):
        with torch.no_grad():
            bound = lab.model(input_ids=lab.to_tokens(prompt)).logits.float()
    assert torch.allclose(bound, run.logits, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(), dict(pos=2), dict(pos=[0, -1]), dict(pos=slice(1, 4)), dict(pos="prompt"),
                                dict(pos="generated"), dict(pos="newest"), dict(pos="content"), dict(batch=1),
                                dict(steps=slice(2, None)), dict(steps=[0, 3], pos="generated"),
                                dict(pos="newest", steps=slice(0, None, 2), batch=[0])])
def test_a_generations_position_table_selects_what_each_step_did(kw):
    """lab.generate builds each edit's selection once (edits.position_table) and each decoding step reads its
    positions from it: the same mask as the per-step construction, on a left-padded batch, at the prefill and at
    every later step (issue #53 item 9)."""
    from dataclasses import replace

    from interplab.edits import ApplyContext, position_table, selection_mask

    edit = ilab.steer("resid_post", 0, torch.ones(4), **kw)
    prompt_lengths, width, new = [5, 3], 5, 6
    table = position_table(edit, prompt_lengths, width + new)
    special = torch.zeros(2, width, dtype=torch.bool)
    special[1, 2] = True  # (a special token in row 1's prompt)
    prefill = torch.tensor([[0, 1, 2, 3, 4], [-1, -1, 0, 1, 2]])  # left padding: -1
    steps = [(prefill, special)] + [(torch.tensor([[5 + s], [3 + s]]), torch.zeros(2, 1, dtype=torch.bool))
                                    for s in range(new)]
    for step, (positions, spec) in enumerate(steps):
        ctx = ApplyContext(lengths=(positions.max(1).values + 1).tolist(), positions=positions,
                           prompt_lengths=prompt_lengths, special=spec, step=step)
        b, t = positions.shape
        assert torch.equal(selection_mask(edit, b, t, replace(ctx, table=table)), selection_mask(edit, b, t, ctx)), \
            step
