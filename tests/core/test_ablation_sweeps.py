"""Ablation sweeps (lab.patch_sweep(prompt, None, baseline="zero" | "mean", ...)) against hooks written here on the
model's own modules: a zeroed head is zeros written into its output projection's input, a zeroed or mean-ablated
residual cell is a value written into the block's input, the attribution estimate is (baseline - activation) . an
autograd gradient taken through a hand hook, and a click on the heatmap runs that cell's ablation. Bad input: typed
errors, no hook left."""

import pytest
import torch

import interplab as ilab
from interplab.errors import EmptyPromptError, InterplabError, UnsupportedSiteError

from ._hand import hooks_everywhere

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"  # same token length: a template's second
OTHER = "The capital of France is"  # another length: the mean is then over every token
A, W = 5, 9  # token ids of the metric's answer and wrong answer (any pair works for equality)
METRIC = ilab.logit_diff(A, W)
PATHS = {  # block, and the input of attention's output projection (where z lives), per architecture
    "gpt2": ("transformer.h.{}", "transformer.h.{}.attn.c_proj"),
    "llama": ("model.layers.{}", "model.layers.{}.self_attn.o_proj"),
}


def _ids(tokenizer, prompt):
    return tokenizer(prompt, return_tensors="pt")["input_ids"]


def _pre(model, path, fn):
    """A forward pre-hook on `path` whose fn(x) gives the module's new first input (given positionally or as
    hidden_states)."""
    def hook(m, args, kw):
        if args:
            return (fn(args[0]), *args[1:]), kw
        return args, {**kw, "hidden_states": fn(kw["hidden_states"])}
    return model.get_submodule(path).register_forward_pre_hook(hook, with_kwargs=True)


def _metric(model, ids, hooks=()):
    try:
        with torch.no_grad():
            lg = model(ids).logits[0, -1]
        return float(lg[A] - lg[W])
    finally:
        for h in hooks:
            h.remove()


def _inputs(model, tokenizer, path, prompts):
    """The input of module `path` (formatted per layer) at every layer, for each prompt: {layer: [[pos, width]]}."""
    n = model.config.num_hidden_layers
    got = {layer: [] for layer in range(n)}
    for p in prompts:
        hooks = [_pre(model, path.format(layer), lambda x, layer=layer: got[layer].append(x[0].clone()) or x)
                 for layer in range(n)]
        _metric(model, _ids(tokenizer, p), hooks)
    return got


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_zeroing_a_head_at_a_position_equals_zeros_written_into_its_output_projection(models, tokenizer, arch):
    model = models[arch]
    lab = ilab.Lab(model, tokenizer)
    res = lab.patch_sweep(CLEAN, None, site="z", by=("layer", "head", "pos"), metric=METRIC, baseline="zero",
                          progress=False)
    ids = _ids(tokenizer, CLEAN)
    n_pos, H = ids.shape[1], lab.n_heads
    d = lab.d_model // H
    clean = _metric(model, ids)
    expected = torch.empty_like(res.raw)
    for layer in range(lab.n_layers):
        for h in range(H):
            for p in range(n_pos):
                def zero(x, h=h, p=p):
                    x = x.clone()
                    x[:, p, h * d:(h + 1) * d] = 0
                    return x
                expected[layer, h, p] = _metric(model, ids, [_pre(model, PATHS[arch][1].format(layer), zero)])
    assert torch.allclose(res.raw, expected, atol=1e-4), (res.raw - expected).abs().max()
    assert torch.allclose(res.values, expected - clean, atol=1e-4)  # values: the change from the clean value
    assert res.clean_value == pytest.approx(clean, abs=1e-4)
    assert float((expected - clean).abs().max()) > 1e-3  # the ablations change the metric, by 10x the tolerance
    assert "zero-ablated" in res.describe() and res.ablation.baseline == "zero"
    heat = res.figure().data[0]  # the static figure: the change, on a scale symmetric around 0
    assert heat.colorbar.title.text.startswith("change in") and heat.zmax > 0 and heat.zmin == -heat.zmax
    assert not hooks_everywhere(model) and lab.hooks() == []


def _block_cells(model, tokenizer, lab, value_of):
    """The metric with the block's input at (layer, pos) replaced by value_of(layer, pos, x), for every cell."""
    ids = _ids(tokenizer, CLEAN)
    out = torch.empty(lab.n_layers, ids.shape[1])
    for layer in range(lab.n_layers):
        for p in range(ids.shape[1]):
            def write(x, layer=layer, p=p):
                x = x.clone()
                x[:, p] = value_of(layer, p, x).to(x.dtype)
                return x
            out[layer, p] = _metric(model, ids, [_pre(model, PATHS["gpt2"][0].format(layer), write)])
    return out


def test_resid_pre_zero_and_mean_cells_equal_a_value_written_into_the_block(models, tokenizer):
    """Zero; the mean at each position over reference prompts of the prompt's length (a template dataset); the mean
    over every token when a reference prompt has another length. The two means differ, so each check can tell
    them apart."""
    model = models["gpt2"]
    lab = ilab.Lab(model, tokenizer)
    assert len(lab.to_str_tokens(OTHER)) != len(lab.to_str_tokens(CLEAN))
    template, mixed = [CLEAN, CORRUPT], [CORRUPT, OTHER]
    block = PATHS["gpt2"][0]
    acts_t = _inputs(model, tokenizer, block, template)
    acts_m = _inputs(model, tokenizer, block, mixed)
    per_pos = {layer: torch.stack(xs).double().mean(0) for layer, xs in acts_t.items()}  # [pos, width]
    every = {layer: torch.cat(xs).double().mean(0) for layer, xs in acts_m.items()}  # [width]
    want = {
        "zero": _block_cells(model, tokenizer, lab, lambda layer, p, x: torch.zeros_like(x[:, p])),
        "template": _block_cells(model, tokenizer, lab, lambda layer, p, x: per_pos[layer][p]),
        "mixed": _block_cells(model, tokenizer, lab, lambda layer, p, x: every[layer]),
    }
    got = {"zero": lab.patch_sweep(CLEAN, None, metric=METRIC, baseline="zero", progress=False),
           "template": lab.patch_sweep(CLEAN, None, metric=METRIC, baseline="mean", reference=template,
                                       progress=False),
           "mixed": lab.patch_sweep(CLEAN, None, metric=METRIC, baseline="mean", reference=mixed, progress=False)}
    clean = _metric(model, _ids(tokenizer, CLEAN))
    for name, res in got.items():
        assert torch.allclose(res.raw, want[name], atol=1e-4), (name, (res.raw - want[name]).abs().max())
        assert float((want[name] - clean).abs().max()) > 1e-3, name
    assert float((want["template"] - want["mixed"]).abs().max()) > 1e-3  # per position is not over every token
    assert "at each position of 2 reference prompts" in got["template"].describe()
    assert "over every token of 2 reference prompts" in got["mixed"].describe()
    # the means a click writes are the ones the cells took
    assert torch.allclose(got["mixed"].baseline_means[("resid_pre", 1)].double(), every[1], atol=1e-5)
    assert not hooks_everywhere(model)


def test_attribution_is_baseline_minus_activation_dot_an_autograd_gradient(models, tokenizer):
    """resid_pre by (layer, pos) and z by (layer, head), zero and mean: the estimate, against the gradient of the
    metric at the block's input and at the output projection's input, taken through hooks written here."""
    model = models["gpt2"]
    lab = ilab.Lab(model, tokenizer)
    ids = _ids(tokenizer, CLEAN)
    template = [CLEAN, CORRUPT]
    acts = {}

    def keep(key):
        return lambda x: acts.__setitem__(key, x) or x
    hooks = [_pre(model, PATHS["gpt2"][j].format(layer), keep((j, layer)))
             for layer in range(lab.n_layers) for j in (0, 1)]
    try:
        lg = model(ids).logits[0, -1]
    finally:
        for h in hooks:
            h.remove()
    keys = sorted(acts)
    grads = dict(zip(keys, torch.autograd.grad(lg[A] - lg[W], [acts[k] for k in keys])))
    model.zero_grad(set_to_none=True)
    means = {j: {layer: torch.stack(xs).mean(0) for layer, xs in _inputs(model, tokenizer, PATHS["gpt2"][j],
                                                                          template).items()} for j in (0, 1)}
    H = lab.n_heads
    for baseline in ("zero", "mean"):
        kw = {"baseline": baseline, **({"reference": template} if baseline == "mean" else {})}
        resid = lab.patch_sweep(CLEAN, None, metric=METRIC, method="attribution", **kw)
        heads = lab.patch_sweep(CLEAN, None, site="z", by=("layer", "head"), metric=METRIC, method="attribution",
                                **kw)
        for layer in range(lab.n_layers):
            for j, res in ((0, resid), (1, heads)):
                x, g = acts[j, layer][0].detach(), grads[j, layer][0]
                base = torch.zeros_like(x) if baseline == "zero" else means[j][layer]
                delta = (base - x) * g  # [pos, width]
                want = delta.sum(-1) if j == 0 else delta.view(len(x), H, -1).sum((0, 2))
                # (a random tiny model's heads move the metric by ~1e-4: a tolerance relative to the values)
                assert torch.allclose(res.values[layer], want, rtol=1e-3, atol=1e-7), (baseline, j, layer)
                assert float(want.abs().max()) > 1e-5  # 100x the tolerance: an estimate of 0 would fail
    assert not hooks_everywhere(model)


def test_a_click_on_an_ablation_cell_runs_that_ablation(models, tokenizer):
    """res.show() opens the explorer for an ablation sweep as for a patching one; a click on a cell ablates it: the
    logit panel's ablated value is the sweep's cell, and a fresh forward of the edit the click built gives the
    same number (no float ==: tolerances), different from the clean value."""
    model = models["gpt2"]
    lab = ilab.Lab(model, tokenizer)
    for kw in ({"site": "z", "by": ("layer", "head", "pos"), "baseline": "zero"},
               {"site": "resid_mid", "baseline": "mean", "reference": [CLEAN, CORRUPT]},
               {"site": "mlp_out", "baseline": "mean", "reference": [CORRUPT, OTHER]}):
        res = lab.patch_sweep(CLEAN, None, metric=METRIC, progress=False, **kw)
        ex = res.show()
        lab.engine.worker.join()
        grid = res.cells.grid(res.values)
        row, col = divmod(int(grid.abs().argmax()), grid.shape[1])
        cell = float(res.cells.grid(res.raw)[row, col])
        assert abs(cell - res.clean_value) > 1e-3
        ex.heatmap.send_test_message({"type": "click", "row": row, "col": col, "shift": False})
        lab.engine.worker.join()
        values = ex.logits.metric["values"]
        assert set(values) == {"clean", "ablated", "change"}, values
        assert values["ablated"] == pytest.approx(cell, abs=1e-4)
        assert values["change"] == pytest.approx(float(grid[row, col]), abs=1e-4)
        edit = ex.session.cell_edit(row, col)
        assert edit.op == {"zero": "zero", "mean": "mean" if res.ablation.per_position else "set"}[kw["baseline"]]
        fresh = ex.session.logits_view([edit], log=False)["metric"]["values"]["ablated"]  # no cell: a forward
        assert fresh == pytest.approx(cell, abs=1e-4)
        assert "ablate" in ex.heatmap.active_edits[0]["label"] and "ablated" in ex.heatmap.title
        assert ex.heatmap.metric_name.startswith("change in")
    heads = lab.patch_sweep_heads(CLEAN, None, METRIC, baseline="zero")
    view = heads.show()
    lab.engine.worker.join()
    assert "zero-ablated" in view.status and "ablate it" in view.status
    assert lab.hooks() == [] and not hooks_everywhere(model)


BAD = [
    ("corrupt and baseline", dict(corrupt=CORRUPT, baseline="zero"), InterplabError, "not both"),
    ("neither", dict(corrupt=None), InterplabError, "baseline='zero'"),
    ("an unknown baseline", dict(baseline="median"), InterplabError, "'zero'.*'mean'"),
    ("a baseline that is no string", dict(baseline=0), InterplabError, "baseline=0"),
    ("mean without reference", dict(baseline="mean"), InterplabError, "needs reference="),
    ("an empty reference", dict(baseline="mean", reference=[]), EmptyPromptError, "reference= holds no prompts"),
    ("a reference with zero", dict(baseline="zero", reference=[CLEAN]), InterplabError, "drop reference="),
    ("a reference with a patch", dict(corrupt=CORRUPT, reference=[CLEAN]), InterplabError, "baseline='mean'"),
    ("a direction with a baseline", dict(baseline="zero", direction="noise"), InterplabError, "drop direction="),
    ("qk_fix with a baseline", dict(baseline="zero", site="q", by=("layer", "head"), method="attribution",
                                    qk_fix=True), InterplabError, "patching sweeps"),
    ("a pattern's mean over every token", dict(baseline="mean", reference=[OTHER], site="pattern",
                                              by=("layer", "head")), UnsupportedSiteError, "token length"),
]


@pytest.mark.parametrize("name,kw,error,match", BAD, ids=[b[0] for b in BAD])
def test_bad_ablation_arguments_are_typed_errors_and_leave_no_hook(models, tokenizer, name, kw, error, match):
    model = models["gpt2"]
    lab = ilab.Lab(model, tokenizer)
    kw = {"corrupt": None, **kw}
    with pytest.raises(error, match=match):
        lab.patch_sweep(CLEAN, metric=METRIC, progress=False, **kw)
    assert lab.hooks() == [] and not hooks_everywhere(model)
