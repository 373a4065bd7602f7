"""Patching sweeps equal a plain one-forward-per-cell hook loop (written here with bare PyTorch hooks)."""

import threading

import pytest
import torch
from core._hand import hooks_everywhere  # tests/ is on sys.path (rootdir conftest)

import interplab as ilab
from interplab.analyses.patching import SweepCancelled

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"

# Hook points written out by hand per architecture: (module path template, "in"/"out"). resid_mid is no module's
# output: it is read where the model reads it (the input of the norm in front of the MLP) and written, as the block
# computes it, by changing what attention adds: (block, attention's output module, the MLP's norm).
POINTS = {
    "gpt2": {"resid_pre": ("transformer.h.{}", "in"), "resid_post": ("transformer.h.{}", "out"),
             "resid_mid": (("transformer.h.{}", "transformer.h.{}.attn", "transformer.h.{}.ln_2"), "mid"),
             "attn_out": ("transformer.h.{}.attn", "out"),
             "mlp_out": ("transformer.h.{}.mlp", "out"), "z": ("transformer.h.{}.attn.c_proj", "in")},
    "llama": {"resid_pre": ("model.layers.{}", "in"), "resid_post": ("model.layers.{}", "out"),
              "resid_mid": (("model.layers.{}", "model.layers.{}.self_attn",
                             "model.layers.{}.post_attention_layernorm"), "mid"),
              "attn_out": ("model.layers.{}.self_attn", "out"), "mlp_out": ("model.layers.{}.mlp", "out"),
              "z": ("model.layers.{}.self_attn.o_proj", "in")},
    "gpt_neox": {"resid_pre": ("gpt_neox.layers.{}", "in"), "resid_post": ("gpt_neox.layers.{}", "out"),
                 "resid_mid": (("gpt_neox.layers.{}", "gpt_neox.layers.{}.attention",
                                "gpt_neox.layers.{}.post_attention_layernorm"), "mid"),
                 "attn_out": ("gpt_neox.layers.{}.attention", "out"), "mlp_out": ("gpt_neox.layers.{}.mlp", "out"),
                 "z": ("gpt_neox.layers.{}.attention.dense", "in")},
}


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def _replace(x, new):
    return (new, *x[1:]) if isinstance(x, tuple) else new


def _forward(model, ids, hooks):
    """The last position's logits of a no-grad forward of ``ids`` with the hook handles ``hooks`` attached; they are
    removed after it, also when it fails."""
    try:
        with torch.no_grad():
            return model(ids).logits[0, -1]
    finally:
        for h in hooks:
            h.remove()


def plain_loop(model, ids_clean, ids_corrupt, point, n_layers, cells, metric, n_heads=None):
    """The reference: record the clean activation, then one hooked forward of corrupt per cell."""
    path, io = point
    if io == "mid":
        return _plain_loop_mid(model, ids_clean, ids_corrupt, path, n_layers, cells, metric)
    saved = {}
    handles = []
    for l in range(n_layers):
        mod = model.get_submodule(path.format(l))
        if io == "in":
            handles.append(mod.register_forward_pre_hook(lambda m, a, l=l: saved.__setitem__(l, a[0].clone())))
        else:
            handles.append(mod.register_forward_hook(lambda m, a, o, l=l: saved.__setitem__(l, _first(o).clone())))
    _forward(model, ids_clean, handles)
    out = {}
    for l in range(n_layers):
        for key, (pos, head) in cells.items():
            def edit(x, l=l, pos=pos, head=head):
                x = x.clone()
                src = saved[l]
                p = slice(None) if pos is None else pos
                if head is None:
                    x[:, p] = src[:, p]
                else:
                    d = x.shape[-1] // n_heads
                    x[:, p, head * d:(head + 1) * d] = src[:, p, head * d:(head + 1) * d]
                return x
            mod = model.get_submodule(path.format(l))
            if io == "in":
                h = mod.register_forward_pre_hook(lambda m, a, edit=edit: (edit(a[0]), *a[1:]))
            else:
                h = mod.register_forward_hook(lambda m, a, o, edit=edit: _replace(o, edit(_first(o))))
            out[(l, *key)] = metric(_forward(model, ids_corrupt, [h]))
    return out


def _plain_loop_mid(model, ids_clean, ids_corrupt, paths, n_layers, cells, metric):
    """resid_mid: the clean value read at the MLP's norm input; written by making attention add (clean - resid_pre)
    at the patched positions, so the skip connection and the MLP both carry the clean residual."""
    block, attn, norm = paths
    saved = {}
    handles = [model.get_submodule(norm.format(l)).register_forward_pre_hook(
        lambda m, a, l=l: saved.__setitem__(l, a[0].clone())) for l in range(n_layers)]
    _forward(model, ids_clean, handles)
    out = {}
    for l in range(n_layers):
        for key, (pos, _) in cells.items():
            p = slice(None) if pos is None else pos
            pre = {}

            def write(m, a, o, l=l, p=p, pre=pre):
                x = _first(o).clone()
                x[:, p] = saved[l][:, p] - pre["x"][:, p]
                return _replace(o, x)
            def keep(m, a, kw, pre=pre):
                pre["x"] = a[0] if a else kw["hidden_states"]
            hs = [model.get_submodule(block.format(l)).register_forward_pre_hook(keep, with_kwargs=True),
                  model.get_submodule(attn.format(l)).register_forward_hook(write)]
            out[(l, *key)] = metric(_forward(model, ids_corrupt, hs))
    return out


@pytest.mark.parametrize("arch", ["gpt2", "llama", "gpt_neox"])
@pytest.mark.parametrize("site,by", [
    ("resid_pre", ("layer", "pos")), ("resid_post", ("layer", "pos")), ("resid_mid", ("layer", "pos")),
    ("attn_out", ("layer", "pos")), ("mlp_out", ("layer", "pos")), ("resid_pre", ("layer",)),
    ("mlp_out", ("layer",)), ("z", ("layer", "head")), ("z", ("layer", "head", "pos")),
])
def test_exact_sweep_equals_hook_loop(models, tokenizer, arch, site, by):
    model = models[arch]
    lab = ilab.Lab(model, tokenizer)
    a, w = 5, 9  # token ids: any pair works for equality
    metric = ilab.logit_diff(a, w)
    res = lab.patch_sweep(CLEAN, CORRUPT, site=site, by=by, metric=metric, progress=False, max_batch=16)
    n = len(lab.to_str_tokens(CLEAN))
    if by == ("layer",):
        cells = {(): (None, None)}
    elif by == ("layer", "pos"):
        cells = {(p,): (p, None) for p in range(n)}
    elif by == ("layer", "head"):
        cells = {(h,): (None, h) for h in range(lab.n_heads)}
    else:
        cells = {(h, p): (p, h) for h in range(lab.n_heads) for p in range(n)}
    ids_c = tokenizer(CLEAN, return_tensors="pt")["input_ids"]
    ids_k = tokenizer(CORRUPT, return_tensors="pt")["input_ids"]
    ref = plain_loop(model, ids_c, ids_k, POINTS[arch][site], lab.n_layers, cells,
                     lambda lg: float(lg[a] - lg[w]), lab.n_heads)
    expected = torch.zeros_like(res.raw)
    for k, v in ref.items():
        expected[k] = v
    assert torch.allclose(res.raw, expected, atol=1e-4), (res.raw - expected).abs().max()
    # normalisation: (patched - corrupt) / (clean - corrupt), with clean/corrupt from plain forwards
    with torch.no_grad():
        lc, lk = model(ids_c).logits[0, -1], model(ids_k).logits[0, -1]
    clean_v, corrupt_v = float(lc[a] - lc[w]), float(lk[a] - lk[w])
    assert torch.allclose(res.values, (expected - corrupt_v) / (clean_v - corrupt_v), atol=1e-3)


def test_noising_patches_corrupt_into_clean(models, tokenizer):
    model = models["gpt2"]
    lab = ilab.Lab(model, tokenizer)
    res = lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", by=("layer", "pos"), metric=ilab.logit_diff(5, 9),
                          direction="noise", progress=False)
    n = len(lab.to_str_tokens(CLEAN))
    ids_c = tokenizer(CLEAN, return_tensors="pt")["input_ids"]
    ids_k = tokenizer(CORRUPT, return_tensors="pt")["input_ids"]
    # noising = the same loop with the roles swapped
    ref = plain_loop(model, ids_k, ids_c, POINTS["gpt2"]["resid_pre"], lab.n_layers,
                     {(p,): (p, None) for p in range(n)}, lambda lg: float(lg[5] - lg[9]))
    for k, v in ref.items():
        assert abs(res.raw[k].item() - v) < 1e-4


def test_dataset_of_pairs_averages_metric(models, tokenizer):
    """Several pairs at once, per-pair answers: equals the mean of single-pair sweeps."""
    lab = ilab.Lab(models["llama"], tokenizer)
    clean = [CLEAN, "When John and Mary went to the store, Mary gave a drink to"]
    corrupt = [CORRUPT, "When John and Mary went to the store, John gave a drink to"]
    metric = ilab.logit_diff([5, 9], [9, 5])
    res = lab.patch_sweep(clean, corrupt, site="resid_pre", metric=metric, progress=False, max_batch=7)
    singles = [lab.patch_sweep(c, k, site="resid_pre", metric=ilab.logit_diff(a, w), progress=False).raw
               for c, k, a, w in zip(clean, corrupt, [5, 9], [9, 5])]
    assert torch.allclose(res.raw, (singles[0] + singles[1]) / 2, atol=1e-5)


def test_custom_metric_prob_and_logprob(models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    cases = [(ilab.prob(5), lambda lg: lg.softmax(-1)[5]), (ilab.logprob(5), lambda lg: lg.log_softmax(-1)[5]),
             (lambda lg: lg[:, 5] * 2, lambda lg: lg[5] * 2)]
    for metric, fn in cases:
        res = lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", by=("layer",), metric=metric, progress=False)
        ids_c = tokenizer(CLEAN, return_tensors="pt")["input_ids"]
        ids_k = tokenizer(CORRUPT, return_tensors="pt")["input_ids"]
        ref = plain_loop(lab.model, ids_c, ids_k, POINTS["gpt2"]["resid_pre"], lab.n_layers, {(): (None, None)},
                         lambda lg, fn=fn: float(fn(lg)))
        for k, v in ref.items():
            assert abs(res.raw[k].item() - v) < 1e-5


def test_attribution_correlates_with_exact(models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    m = ilab.logit_diff(5, 9)
    exact = lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=m, progress=False)
    attr = lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=m, method="attribution")
    assert attr.values.shape == exact.values.shape
    corr = torch.corrcoef(torch.stack([attr.raw.flatten(), exact.raw.flatten()]))[0, 1]
    assert corr > 0.8, corr
    # the gradient pass never leaves grads on parameters and never changes a weight
    assert all(p.grad is None for p in lab.model.parameters())


def test_cancel_returns_no_partial_result_and_leaves_no_hooks(models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    before_hooks = hooks_everywhere(lab.model)
    cancel = threading.Event()
    seen = []

    def on_partial(res):
        seen.append(res.raw.isnan().sum().item())
        cancel.set()

    with pytest.raises(SweepCancelled):
        lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), progress=False, max_batch=4,
                        cancel=cancel, on_partial=on_partial)
    assert seen and seen[0] > 0  # the partial view had cells still missing
    assert ilab.engine.attached_hooks() == []
    layers = lab.model.transformer.h
    assert len(layers) == lab.n_layers  # the layer list was restored
    assert hooks_everywhere(lab.model) == before_hooks  # none of interplab's left; anyone else's still there


def test_keyboard_interrupt_mid_sweep_restores_model(models, tokenizer):
    lab = ilab.Lab(models["llama"], tokenizer)
    before_hooks = hooks_everywhere(lab.model)
    before = [p.detach().clone() for p in lab.model.parameters()]
    calls = {"n": 0}

    def progress(done, total):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), progress=progress, max_batch=4)
    assert len(lab.model.model.layers) == lab.n_layers
    layer_types = getattr(lab.model.config, "layer_types", None)
    assert layer_types is None or len(layer_types) == lab.n_layers
    assert hooks_everywhere(lab.model) == before_hooks  # none of interplab's left; anyone else's still there
    assert all(torch.equal(a, b) for a, b in zip(before, lab.model.parameters()))


def test_sweep_errors(models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    m = ilab.logit_diff(5, 9)
    with pytest.raises(ilab.InterplabError, match="by="):
        lab.patch_sweep(CLEAN, CORRUPT, by=("pos",), metric=m)
    with pytest.raises(ilab.InterplabError, match="cannot be swept"):
        lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", by=("layer", "head"), metric=m)
    with pytest.raises(ilab.LengthMismatchError, match="clean:"):
        lab.patch_sweep(CLEAN, "When Mary went to the store, Mary gave a drink to", metric=m)
    with pytest.raises(ilab.InterplabError, match="nothing to restore"):
        lab.patch_sweep(CLEAN, CLEAN, metric=m)


def test_out_of_memory_halves_the_chunk_and_retries(models, tokenizer, monkeypatch):
    """A chunk that raises OutOfMemoryError is split in halves until it fits; the numbers do not change."""
    from interplab.analyses import patching

    lab = ilab.Lab(models["gpt2"], tokenizer)
    m = ilab.logit_diff(5, 9)
    expected = lab.patch_sweep(CLEAN, CORRUPT, metric=m, progress=False).raw
    real = patching._run_cells
    sizes = []

    def limited(lab_, site, layer, chunk, *rest):
        sizes.append(len(chunk))
        if len(chunk) > 3:
            raise torch.OutOfMemoryError("simulated: chunk too large")
        return real(lab_, site, layer, chunk, *rest)

    monkeypatch.setattr(patching, "_run_cells", limited)
    lab.engine.clear_memo()
    got = lab.patch_sweep(CLEAN, CORRUPT, metric=m, progress=False, max_batch=16).raw
    big = max(sizes)  # cells whose activation is equal in both runs need no forward, so chunks are < 16 here
    first = sizes.index(big)
    assert big > 3 and sizes[first:first + 3] == [big, big // 2, big // 4]  # halved until it fits
    assert torch.allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("arch", ["gpt2", "llama", "gpt_neox", "gemma2"])
def test_edited_last_logits_resumes_exactly(models, tokenizer, arch):
    """The click path (resume from the lowest edited layer, unembed the last position) equals a full edited run."""
    lab = ilab.Lab(models[arch], tokenizer)
    before_hooks = hooks_everywhere(lab.model)
    src = lab.run(CLEAN, cache=["resid_pre", "z", "attn_out"])
    v = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(0))  # the same whatever ran before
    cases = [
        [ilab.patch("resid_pre", 2, pos=3, source=src)],
        [ilab.patch("resid_pre", 1, pos=-1, source=src), ilab.patch("z", 2, head=1, source=src)],
        [ilab.zero("attn_out", 1, pos=[2, 4]), ilab.steer("resid_post", 2, v, alpha=2.0, pos=-1)],
        [ilab.patch("resid_pre", 0, source=src)],
        [ilab.scale("mlp_out", 2, 0.5)],
    ]
    for edits in cases:
        got = lab.engine.last_logits([CORRUPT, CLEAN[:30]], edits)
        lab.engine.clear_memo()
        want = lab.run([CORRUPT, CLEAN[:30]], edits).last_logits
        assert torch.allclose(got, want, atol=1e-4), (edits, (got - want).abs().max())
    assert hooks_everywhere(lab.model) == before_hooks  # none of interplab's left; anyone else's still there


def test_embedded_model_sweeps_equal_the_loop_and_attribution_correlates():
    """On ioi-tiny (GPT-2 architecture, trained): exact = plain loop; attribution tracks exact."""
    lab = ilab.Lab.load("ioi-tiny")
    tok = lab.tokenizer
    metric = ilab.logit_diff(" Mary", " John")
    a, w = lab.token_id(" Mary"), lab.token_id(" John")
    ids_c = tok(CLEAN, return_tensors="pt")["input_ids"]
    ids_k = tok(CORRUPT, return_tensors="pt")["input_ids"]
    n = ids_c.shape[1]
    for site, by, cells in [("resid_pre", ("layer", "pos"), {(p,): (p, None) for p in range(n)}),
                            ("z", ("layer", "head"), {(h,): (None, h) for h in range(lab.n_heads)})]:
        res = lab.patch_sweep(CLEAN, CORRUPT, site=site, by=by, metric=metric, progress=False)
        ref = plain_loop(lab.model, ids_c, ids_k, POINTS["gpt2"][site], lab.n_layers, cells,
                         lambda lg: float(lg[a] - lg[w]), lab.n_heads)
        expected = torch.zeros_like(res.raw)
        for k, v in ref.items():
            expected[k] = v
        assert torch.allclose(res.raw, expected, atol=1e-4)
    exact = lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=metric, progress=False)
    attr = lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=metric, method="attribution")
    corr = torch.corrcoef(torch.stack([attr.values.flatten(), exact.values.flatten()]))[0, 1]
    print(f"ioi-tiny: attribution vs exact correlation (resid_pre, layer x pos) = {corr:.3f}")
    assert corr > 0.5


@pytest.mark.parametrize("arch", ["gpt2", "llama", "gpt_neox", "qwen3", "gemma2"])
def test_click_path_reuses_keys_values_before_the_patched_position(models, tokenizer, arch):
    """One prompt, edits from position p on: positions < p come from cached keys/values; logits are unchanged."""
    lab = ilab.Lab(models[arch], tokenizer)
    before_hooks = hooks_everywhere(lab.model)
    src = lab.run(CLEAN, cache=["resid_pre", "z", "attn_out", "mlp_out"])
    n = len(lab.to_str_tokens(CORRUPT))
    v = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(0))  # the same whatever ran before
    cases = [
        [ilab.patch("resid_pre", 1, pos=5, source=src)],
        [ilab.patch("resid_pre", 0, pos=n - 1, source=src)],
        [ilab.patch("z", 1, head=2, pos=[7, 9], source=src), ilab.zero("mlp_out", 2, pos=-2)],
        [ilab.steer("resid_post", 0, v, alpha=3.0, pos=-1), ilab.patch("attn_out", 2, pos=4, source=src)],
    ]
    for edits in cases:
        got = lab.engine.last_logits(CORRUPT, edits)
        used = lab.engine.memo.get(lab.engine.memo.key(("kv", CORRUPT)))
        assert used is not None, "the key/value prefix was not looked up"
        if arch != "gemma2":  # gemma2's sliding-window layers are not croppable: it falls back to the full prefix
            assert used[1] is not None, "the key/value prefix was not used"
        lab.engine.clear_memo()
        want = lab.run(CORRUPT, edits).last_logits
        assert torch.allclose(got, want, atol=1e-4), (arch, edits, (got - want).abs().max())
    assert hooks_everywhere(lab.model) == before_hooks  # none of interplab's left; anyone else's still there


def test_cells_equal_in_both_runs_are_not_run(models, tokenizer):
    """Positions before the first differing token are equal at every layer (causal attention), and at layer 0
    every position with equal tokens is: those cells need no forward. Which cells differ is found here with bare
    hooks; the values of the skipped cells are checked against the loop in test_exact_sweep_equals_hook_loop."""
    model = models["gpt2"]
    lab = ilab.Lab(model, tokenizer)
    seen = []
    res = lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=ilab.logit_diff(5, 9),
                          progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] == res.values.numel()  # progress counts the skipped cells too
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    acts = {}
    for name, text in (("clean", CLEAN), ("corrupt", CORRUPT)):
        hs = [model.transformer.h[l].register_forward_pre_hook(
            lambda m, a, l=l, name=name: acts.__setitem__((name, l), a[0][0].clone())) for l in range(lab.n_layers)]
        _forward(model, tokenizer(text, return_tensors="pt")["input_ids"], hs)
    differ = [(l, p) for l in range(lab.n_layers) for p in range(acts["clean", 0].shape[0])
              if not torch.equal(acts["clean", l][p], acts["corrupt", l][p])]
    assert res.cells_run == len(differ) < res.values.numel() // 2
    # chunks of late positions reused the cached keys/values of the corrupt run
    assert any(r[0] == "kv" and isinstance(r[1], tuple) for r in lab.engine.memo.requests())
    for l in range(lab.n_layers):  # unchanged cells read exactly "corrupt" (0 after normalising)
        for p in range(res.values.shape[1]):
            if (l, p) not in differ:
                assert res.values[l, p] == 0.0


def test_a_resumed_forward_leaves_the_model_whole(models, tokenizer):
    """A click's resumed forward skips the lower layers on a view of the model: anyone looking at the model during
    it (here a hook of the test's own, inside the resumed forward) still sees every layer."""
    model = models["gpt2"]
    lab = ilab.Lab(model, tokenizer)
    seen = []
    h = model.transformer.h[2].register_forward_hook(lambda m, a, o: seen.append(len(model.transformer.h)))
    try:
        lab.engine.last_logits(CORRUPT, [ilab.zero("resid_pre", 2, pos=-1)])
    finally:
        h.remove()
    assert seen and all(n == lab.n_layers for n in seen), seen


def test_a_sweep_in_a_script_leaves_no_half_drawn_bar(tmp_path):
    """progress=True in a script whose stderr is a file or pipe draws no bar (its \\r frames would stay half drawn)."""
    import subprocess
    import sys

    script = tmp_path / "sweep.py"
    script.write_text(
        "import interplab as ilab\n"
        "lab = ilab.Lab.load('ioi-tiny')\n"
        f"res = lab.patch_sweep({CLEAN!r}, {CORRUPT!r}, metric=ilab.logit_diff(' Mary', ' John'), progress=True)\n"
        "print('done', res.values.shape[0])\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("done")
    assert "\r" not in out.stderr and "patch sweep" not in out.stderr, out.stderr[-500:]
