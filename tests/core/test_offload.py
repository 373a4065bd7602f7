"""Models bigger than one device: Lab.load(..., device_map=...) through accelerate gives the numbers of the model in
memory, for runs with every kind of edit, exact and attribution sweeps, clicks, generation and the explorer's path.

There is no GPU here, so "bigger than one device" is played by a device_map that keeps some modules on the CPU and
offloads the others to disk: an offloaded module's weights are "meta" placeholders, read from the safetensors files
by accelerate's hook at every forward, which is what a model spread over GPUs and offloaded to the CPU looks like to
the engine. Every number is compared with the same model loaded in memory, to 1e-5.
"""

import hashlib
from pathlib import Path

import pytest
import torch

import interplab as ilab
from interplab.analyses.lens import logit_lens
from interplab.errors import LoadError
from interplab.views.patching import PatchSession
from interplab.zoo import EMBEDDED, random_model

pytest.importorskip("accelerate", reason="device_map needs accelerate (pip install 'interplab[big]')")

ATOL = 1e-5
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
METRIC = ilab.logit_diff(" Mary", " John")
DIFF = 9  # the one position where CLEAN and CORRUPT differ (both models use ioi-tiny's tokenizer)

# name -> (model, device_map). ioi-tiny: GPT-2, 4 layers, tied embedding/unembedding (they must share a device);
# llama-tiny: untied, its embedding and unembedding on disk too; then the base model placed as one block, on the
# CPU (its hook only moves inputs) or on disk (its hook loads every layer's weights).
MAPS = {
    "gpt2-split": ("ioi-tiny", {
        "transformer.wte": "cpu", "transformer.wpe": "disk", "transformer.drop": "cpu", "transformer.h.0": "cpu",
        "transformer.h.1": "disk", "transformer.h.2": "cpu", "transformer.h.3": "disk", "transformer.ln_f": "disk",
        "lm_head": "cpu"}),
    "llama-split": ("llama-tiny", {
        "model.embed_tokens": "disk", "model.layers.0": "cpu", "model.layers.1": "disk", "model.norm": "cpu",
        "model.rotary_emb": "cpu", "lm_head": "disk"}),
    "llama-block-cpu": ("llama-tiny", {"model": "cpu", "lm_head": "disk"}),
    "llama-block-disk": ("llama-tiny", {"model": "disk", "lm_head": "cpu"}),
}


def _hooks(model) -> dict:
    """Every module's PyTorch hooks (accelerate's are not among them: it wraps forward) and accelerate's hook."""
    return {n: (tuple(m._forward_hooks), tuple(m._forward_pre_hooks), id(getattr(m, "_hf_hook", None)),
                m.__dict__.get("forward"))
            for n, m in model.named_modules()}


def _weights(lab, files) -> tuple:
    """The weights in memory (offloaded ones are placeholders) and the bytes of every file offloaded ones come from."""
    mem = {k: v.detach().clone() for k, v in lab.model.state_dict().items() if not v.is_meta}
    return mem, {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.fixture(scope="module", params=list(MAPS))
def pair(request, tmp_path_factory):
    """(the model in memory, the same model spread by a device_map, its name, the files its weights come from)."""
    model_name, device_map = MAPS[request.param]
    if model_name == "ioi-tiny":
        path = EMBEDDED["ioi-tiny"]
    else:
        path = tmp_path_factory.mktemp(model_name)
        model, tok = random_model(model_name)
        model.save_pretrained(path)
        tok.save_pretrained(path)
    offload = tmp_path_factory.mktemp("offload")
    ref = ilab.Lab.load(str(path))
    lab = ilab.Lab.load(str(path), device_map=device_map, offload_folder=offload)
    files = sorted(Path(path).glob("*.safetensors")) + sorted(offload.rglob("*"))
    lab._loaded = (_hooks(lab.model), _weights(lab, [f for f in files if f.is_file()]))
    return ref, lab, request.param


def _close(a, b, what=""):
    assert a.shape == b.shape, what
    err = (a.float() - b.float()).abs().max().item()
    # float32 rounding grows with the values' size (ioi-tiny's logits reach ~20): other summation orders (a resumed
    # forward over fewer positions) differ by ~1e-6 of it; a wrong edit is off by orders of magnitude more
    tol = ATOL + 1e-6 * b.float().abs().max().item()
    assert err <= tol, f"{what}: off by {err:.3g} (tolerance {tol:.3g})"


def test_the_model_is_spread_as_asked(pair):
    ref, lab, name = pair
    assert lab.model.hf_device_map == MAPS[name][1]
    assert any(p.is_meta for p in lab.model.parameters()), "nothing offloaded: the test would prove nothing"
    assert lab.engine.device == torch.device("cpu")  # where accelerate runs the embedding, not "meta"
    tokens = lab.to_str_tokens(CLEAN), lab.to_str_tokens(CORRUPT)
    assert [i for i, (a, b) in enumerate(zip(*tokens)) if a != b] == [DIFF]
    assert "device_map=" in lab.log.to_code() and "offload_folder=" in lab.log.to_code()
    run = lab.run(CLEAN)
    assert lab.run(CLEAN) is run, "the memo must hit on an offloaded model (placeholders change every forward)"


def test_a_plain_run_and_its_cache(pair):
    ref, lab, _ = pair
    sites = ["embed", "resid_pre", "resid_mid", "attn_out", "mlp_out", "resid_post", "z", "pattern"]
    a, b = ref.run([CLEAN, CORRUPT], cache=sites), lab.run([CLEAN, CORRUPT], cache=sites)
    _close(a.logits, b.logits, "logits")
    assert a.cache.keys() == b.cache.keys()
    for k in a.cache:
        _close(a.cache[k], b.cache[k], str(k))


def _edits(lab, kind: str) -> list:
    """The edits of one kind, their sources and references run on `lab` itself."""
    v = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(1))
    clean = lab.run(CLEAN, cache=["resid_pre", "z"])
    last = lab.n_layers - 1
    return {
        "patch-resid-from-cache": [ilab.patch("resid_pre", 1, pos=DIFF, source=clean)],
        "patch-resid-from-prompt": [ilab.patch("resid_post", 0, pos=[2, DIFF], source=CLEAN)],
        "patch-head-z": [ilab.patch("z", last, head=1, source=clean)],
        "zero-attn": [ilab.zero("attn_out", last)],
        "zero-mlp": [ilab.zero("mlp_out", 0, pos=-1)],
        "zero-heads-z": [ilab.zero("z", 0, head=[0, 2])],
        "zero-pattern": [ilab.zero("pattern", last, head=0)],  # inside attention: the lab's attention function
        "mean-ablate": [ilab.mean_ablate("mlp_out", 0, reference=lab.run([CLEAN, CORRUPT]))],
        "steer-resid": [ilab.steer("resid_pre", 1, vector=v, alpha=3.0)],
        "steer-resid-mid": [ilab.steer("resid_mid", 0, vector=v, alpha=2.0, pos=-1)],
        "project": [ilab.project("resid_post", 0, direction=v)],
        "scale": [ilab.scale("attn_out", 1, factor=0.5)],
        "all-at-once": [ilab.patch("resid_pre", 1, pos=DIFF, source=clean), ilab.zero("z", 0, head=2),
                        ilab.steer("resid_post", last, vector=v, alpha=2.0)],
    }[kind]


EDIT_KINDS = ["patch-resid-from-cache", "patch-resid-from-prompt", "patch-head-z", "zero-attn", "zero-mlp",
              "zero-heads-z", "zero-pattern", "mean-ablate", "steer-resid", "steer-resid-mid", "project", "scale",
              "all-at-once"]


@pytest.mark.parametrize("kind", EDIT_KINDS)
def test_runs_with_edits(pair, kind):
    ref, lab, _ = pair
    want = ref.run(CORRUPT, edits=_edits(ref, kind), cache=["resid_post"])
    got = lab.run(CORRUPT, edits=_edits(lab, kind), cache=["resid_post"])
    assert not torch.allclose(want.logits, ref.run(CORRUPT).logits, atol=1e-4), "the edit changed nothing"
    _close(got.logits, want.logits, kind)
    for k in want.cache:
        _close(got.cache[k], want.cache[k], f"{kind} {k}")


@pytest.mark.parametrize("kind", ["patch-resid-from-cache", "patch-head-z", "steer-resid", "zero-mlp",
                                  "all-at-once"])
def test_clicks_resume_from_cached_state(pair, kind):
    """A click's forward (last_logits: from the lowest edited layer, from the first edited position on top of
    cached keys and values) equals the full run on the model in memory."""
    ref, lab, _ = pair
    want = ref.run(CORRUPT, edits=_edits(ref, kind)).last_logits
    _close(lab.engine.last_logits(CORRUPT, _edits(lab, kind)), want, kind)


@pytest.mark.parametrize("site, by", [("resid_pre", ("layer", "pos")), ("z", ("layer", "head"))])
@pytest.mark.parametrize("method", ["exact", "attribution"])
def test_sweeps(pair, site, by, method):
    ref, lab, _ = pair
    clean, corrupt = [CLEAN, CLEAN.replace("store", "park")], [CORRUPT, CORRUPT.replace("store", "park")]
    want = ref.patch_sweep(clean, corrupt, site=site, by=by, metric=METRIC, method=method, progress=False)
    got = lab.patch_sweep(clean, corrupt, site=site, by=by, metric=METRIC, method=method, progress=False)
    _close(got.raw, want.raw, f"{method} {site}")
    assert got.clean_value == pytest.approx(want.clean_value, abs=ATOL)
    assert got.corrupt_value == pytest.approx(want.corrupt_value, abs=ATOL)
    if method == "exact":
        assert got.cells_run == want.cells_run


def test_the_explorer_click_path(pair):
    """What a click on the heatmap runs (PatchSession.logits_view on a cell's patch) gives the same bars."""
    ref, lab, _ = pair
    views = [PatchSession(x, CLEAN, CORRUPT, " Mary", " John").logits_view(
        [PatchSession(x, CLEAN, CORRUPT, " Mary", " John").cell_edit(1, DIFF)], log=False) for x in (ref, lab)]
    for want, got in zip(views[0]["series"], views[1]["series"]):
        assert got["name"] == want["name"] and got["tokens"] == want["tokens"]
        assert got["probs"] == pytest.approx(want["probs"], abs=1.1e-4)  # shown to 4 digits: one step apart at most
    for k, value in views[0]["metric"]["values"].items():
        assert views[1]["metric"]["values"][k] == pytest.approx(value, abs=ATOL)


def test_a_click_skips_the_layers_below_the_edit(pair):
    """What makes a click cheap holds on a spread model too (also where the base model is one dispatched block,
    whose accelerate hook is bound to the whole model): the layers below the edited one do not run."""
    ref, lab, _ = pair
    calls = []
    first = lab.model.get_submodule(f"{lab.sites.arch.layers}.0")
    handle = first.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        # the cached residuals and keys/values a click resumes from (memoised with this hook on)
        lab.engine.warm(CORRUPT)
        source = lab.run(CLEAN, cache=["resid_pre"])
        calls.clear()
        got = lab.engine.last_logits(CORRUPT, [ilab.patch("resid_pre", 1, pos=DIFF, source=source)])
    finally:
        handle.remove()
    assert calls == []
    _close(got, ref.run(CORRUPT, edits=[ilab.patch("resid_pre", 1, pos=DIFF, source=CLEAN)]).last_logits, "click")


def test_a_click_on_the_explorer(pair):
    """The widget path: a click message on an exact sweep's heatmap, answered on the lab's worker thread."""
    ref, lab, _ = pair
    patched = []
    for x in (ref, lab):
        ex = x.patch_sweep(CLEAN, CORRUPT, metric=METRIC, progress=False).show()
        x.engine.worker.join()
        ex.heatmap.send_test_message({"type": "click", "row": 1, "col": DIFF, "shift": False})
        x.engine.worker.join()
        assert [e["id"] for e in ex.heatmap.active_edits] == [f"r1c{DIFF}"]
        patched.append(ex.logits.metric["values"]["patched"])
    assert patched[1] == pytest.approx(patched[0], abs=ATOL)
    assert lab.hooks() == []


ANALYSES = {
    "logit_lens": lambda x: logit_lens(x, CLEAN).probs,
    "direct_logit_attribution": lambda x: x.direct_logit_attribution([CLEAN], METRIC).heads,
    "path_patch": lambda x: x.path_patch(CLEAN, CORRUPT, METRIC).values,
    "edge_attribution": lambda x: x.edge_attribution(CLEAN, CORRUPT, METRIC).scores,
    "residual_norm": lambda x: torch.tensor(x.residual_norm("resid_post", 1)),
}


@pytest.mark.parametrize("analysis", list(ANALYSES))
def test_analyses_that_read_weights_or_call_modules(pair, analysis):
    """The lens and DLA call the final norm and the unembedding themselves, DLA and edges read weights as matrices
    (loaded for the moment where a device_map offloaded them): the same numbers."""
    ref, lab, _ = pair
    _close(ANALYSES[analysis](lab), ANALYSES[analysis](ref), analysis)


def test_steered_generation(pair):
    ref, lab, _ = pair
    v = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(2))
    v = v / v.norm() * 3 * ref.residual_norm("resid_pre", 1)  # three times the stream's own size
    prompts = [CLEAN, "After the party, Alice gave a book to"]
    edits = [ilab.steer("resid_pre", 1, vector=v)]
    want = ref.generate(prompts, edits, max_new_tokens=6, stop_at_eos=False)
    got = lab.generate(prompts, edits, max_new_tokens=6, stop_at_eos=False)
    assert torch.equal(got.ids, want.ids)
    assert not torch.equal(want.ids, ref.generate(prompts, max_new_tokens=6, stop_at_eos=False).ids)
    ids = ref.tokenizer(CLEAN, return_tensors="pt")
    bound = []
    for x in (ref, lab):  # bound edits: hooks on the plain model (accelerate's wrapping underneath), model.generate
        with x.edit(edits):
            bound.append(x.model.generate(**ids, max_new_tokens=6, do_sample=False, min_new_tokens=6))
    assert torch.equal(bound[0], bound[1])


def test_no_hook_stays_and_no_weight_changes(pair):
    """After everything above (in whatever order it ran) and a run of each kind here: the modules' hooks, and
    accelerate's, are those the model was loaded with, and no weight changed, in memory or in the files."""
    ref, lab, _ = pair
    hooks_then, (mem_then, files_then) = lab._loaded
    clean = lab.run(CLEAN, cache=["resid_pre"])
    lab.run(CORRUPT, edits=_edits(lab, "all-at-once") + _edits(lab, "zero-pattern"))
    lab.engine.last_logits(CORRUPT, [ilab.patch("resid_pre", 1, pos=DIFF, source=clean)])
    lab.patch_sweep(CLEAN, CORRUPT, metric=METRIC, progress=False)
    lab.patch_sweep(CLEAN, CORRUPT, site="z", by=("layer", "head"), metric=METRIC, method="attribution",
                    progress=False)
    lab.generate(CLEAN, [ilab.steer("resid_pre", 0, vector=torch.ones(lab.d_model))], max_new_tokens=2)
    assert lab.hooks() == [] and ilab.attached_hooks() == []
    assert _hooks(lab.model) == hooks_then
    mem_now, files_now = _weights(lab, [Path(f) for f in files_then])
    assert files_now == files_then
    assert mem_now.keys() == mem_then.keys()
    for k, t in mem_then.items():
        assert torch.equal(mem_now[k], t), k
    assert lab.model.config._attn_implementation == ref.model.config._attn_implementation == "eager"
    _close(lab.run(CLEAN).logits, ref.run(CLEAN).logits, "after everything")


def test_load_checks_its_placement_arguments(monkeypatch, tmp_path):
    path = str(EMBEDDED["ioi-tiny"])
    with pytest.raises(LoadError, match="give one"):
        ilab.Lab.load(path, device="cpu", device_map="auto")
    with pytest.raises(LoadError, match="device_map='auto'"):
        ilab.Lab.load(path, offload_folder=tmp_path)
    with pytest.raises(LoadError, match="device_map='auto'"):
        ilab.Lab.load(path, max_memory={"cpu": "1GiB"})
    import importlib.metadata

    real = importlib.metadata.version

    def no_accelerate(name):
        if name == "accelerate":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", no_accelerate)
    with pytest.raises(LoadError, match=r"pip install 'interplab\[big\]'"):
        ilab.Lab.load(path, device_map="auto")


def test_auto_with_max_memory_offloads_what_does_not_fit(tmp_path):
    """device_map="auto" with a CPU budget smaller than the model: accelerate sends the rest to disk."""
    path = str(EMBEDDED["ioi-tiny"])
    ref = ilab.Lab.load(path)
    lab = ilab.Lab.load(path, device_map="auto", max_memory={"cpu": "3MiB"}, offload_folder=tmp_path / "off")
    assert "disk" in set(lab.model.hf_device_map.values()) and "cpu" in set(lab.model.hf_device_map.values())
    _close(lab.run(CORRUPT).logits, ref.run(CORRUPT).logits, "auto")
    edits = [ilab.patch("resid_pre", 2, pos=DIFF, source=CLEAN)]
    _close(lab.engine.last_logits(CORRUPT, edits), ref.run(CORRUPT, edits=edits).last_logits, "auto click")
