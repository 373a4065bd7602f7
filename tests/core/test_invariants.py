"""Invariants that follow from the models' own math, not from interplab's module mapping.

Every canonical site on every mapped architecture (tiny random fp32 models built here, with weights large enough
that every edit moves the logits by far more than the tolerance):

1. patching a clean residual site (resid_pre/mid/post, one layer, all positions) into the corrupt run restores the
   clean logits; patching clean embed + attn_out (or z) + mlp_out of every layer does too (the stream is their sum);
2. patching a run's own activation into itself changes nothing;
3. the residual decomposition holds as an edit (setting resid_mid / resid_post to the sum equals patching the
   component; setting resid_mid overrides every edit upstream of it in its layer, in dataflow order) and as a
   read, in clean, corrupt and edited runs;
4. locality: an edit at (layer L, position p) leaves earlier layers, earlier sublayers of L and earlier positions
   untouched, and changes the stream at (L, p);
5. zeroing every head at z equals writing the output projection's bias (or zero) at attn_out;
6. the logit lens at the last layer is the model's own next-token distribution;
7. resid_mid on a parallel-residual GPT-NeoX raises UnsupportedSiteError naming the parallel residual.

Set INVARIANT_TABLE=path to write the worst absolute error per site x architecture (and per invariant x
architecture) as markdown at the end of the module.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
import torch
from _tiny_models import CORPUS

import interplab as ilab
from interplab.analyses.lens import logit_lens

from ._hand import hooks_everywhere, param_hash

ATOL = 1e-4  # fp32, absolute
LOCAL_TOL = 1e-6  # "untouched": the same computation before the edit point, so (nearly) bitwise
# MoE blocks run each expert on the tokens routed to it: an edit that re-routes one token changes the shape of the
# other tokens' expert matmuls, hence their last bits (measured: 1.2e-7 at mixtral mlp_out L0, ~1e-6 after three
# layers). That is the model's arithmetic, not a leak; a leaked edit moves values by O(1).
LOCAL_TOL_MOE = 1e-5
MOE = {"qwen2_moe", "qwen3_moe", "mixtral"}
EFFECT = 1e-2  # every edit whose invariant we test must move the logits by more than this (100x ATOL)
INIT = 0.15  # initializer_range: large enough for clearly different clean / corrupt runs

CLEAN = CORPUS[0]  # "When Mary and John went to the store, John gave a drink to Mary."
CORRUPT = "When John and Mary went to the store, Mary gave a drink to John."  # names swapped: same 27 tokens

ARCH_LIST = ["gpt2", "gpt_neox", "gpt_neox_parallel", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
             "gemma3_text", "olmo2", "qwen2_moe", "qwen3_moe", "mixtral"]
N_LAYERS = 3
PARALLEL = {"gpt_neox_parallel"}
# Families that normalise each sublayer's output before adding it to the stream (read from the transformers
# sources by hand): Gemma 2/3 (post_attention_layernorm, post_feedforward_layernorm) and OLMo 2 (the same names).
POST_NORM = {"gemma2", "gemma3_text", "olmo2"}
LAYER_SITES = ["resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z"]  # editable, per layer
ALL_SITES = ["embed", "resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z", "pattern", "logits"]


def _layer_path(arch: str) -> str:
    return {"gpt2": "transformer.h", "gpt_neox": "gpt_neox.layers", "gpt_neox_parallel": "gpt_neox.layers"}.get(
        arch, "model.layers")


def _o_proj(model, arch: str, L: int):
    """The attention output projection (whose input is z), by hand."""
    sub = {"gpt2": "attn.c_proj", "gpt_neox": "attention.dense", "gpt_neox_parallel": "attention.dense"}.get(
        arch, "self_attn.o_proj")
    return model.get_submodule(f"{_layer_path(arch)}.{L}.{sub}")


def _sites_of(arch: str) -> list[str]:
    return [s for s in LAYER_SITES if not (s == "resid_mid" and arch in PARALLEL)]


# ---- models -----------------------------------------------------------------------------------------------

def _config(arch: str):
    import transformers as tf

    common = dict(vocab_size=320, attn_implementation="eager", initializer_range=INIT, bos_token_id=0,
                  eos_token_id=0)
    small = dict(num_hidden_layers=N_LAYERS, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=64, max_position_embeddings=64, head_dim=8, pad_token_id=0, **common)
    if arch == "gpt2":
        return tf.GPT2Config(n_layer=N_LAYERS, n_embd=32, n_head=4, n_positions=64, **common)
    if arch in ("gpt_neox", "gpt_neox_parallel"):
        return tf.GPTNeoXConfig(num_hidden_layers=N_LAYERS, hidden_size=32, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=64,
                                use_parallel_residual=arch == "gpt_neox_parallel", **common)
    if arch in ("llama", "mistral", "qwen2", "qwen3", "gemma"):
        cls = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config,
               "qwen3": tf.Qwen3Config, "gemma": tf.GemmaConfig}[arch]
        return cls(**small)
    if arch == "gemma2":
        # a sliding window shorter than the prompt, so the local layers really are local
        return tf.Gemma2Config(**small, sliding_window=16,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    return _new_family_config(arch, small)


def _new_family_config(arch: str, small: dict):
    """The five families that conftest.make_model does not build."""
    import transformers as tf

    if arch == "gemma3_text":
        return tf.Gemma3TextConfig(**small, sliding_window=16, query_pre_attn_scalar=8,
                                   layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    if arch == "olmo2":
        return tf.Olmo2Config(**small)
    if arch == "qwen2_moe":
        return tf.Qwen2MoeConfig(**small, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                 shared_expert_intermediate_size=32, decoder_sparse_step=1)
    if arch == "qwen3_moe":
        return tf.Qwen3MoeConfig(**small, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                 decoder_sparse_step=1)
    if arch == "mixtral":
        return tf.MixtralConfig(**small, num_local_experts=4, num_experts_per_tok=2)
    raise ValueError(arch)


def build_model(arch: str):
    """A tiny fp32 random model; biases and norm gains are randomised too (they init to 0 / 1, which would let
    'bias' and 'zero' coincide and hide mistakes)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(arch)).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    for name, p in model.named_parameters():  # a weight left at zero would make some invariant pass by luck
        assert p.detach().abs().max() > 0, f"{arch}: parameter {name} is all zeros"
    return model


class World:
    """One architecture: model, lab, and the clean / corrupt runs with every site cached."""

    def __init__(self, arch: str, tokenizer):
        self.arch = arch
        self.model = build_model(arch)
        self.lab = ilab.Lab(self.model, tokenizer)
        self.parallel = arch in PARALLEL
        self.sites = _sites_of(arch)
        self.cache_all = ["embed", "logits", "pattern", *self.sites]
        self.clean = self.lab.run(CLEAN, cache=self.cache_all)
        self.corrupt = self.lab.run(CORRUPT, cache=self.cache_all)
        self.T = self.clean.logits.shape[1]

    def run(self, edits, cache=None):
        return self.lab.run(CORRUPT, edits=edits, cache=cache or [])


@pytest.fixture(scope="module")
def worlds(tokenizer):
    built: dict[str, World] = {}

    def get(arch: str) -> World:
        if arch not in built:
            built[arch] = World(arch, tokenizer)
        return built[arch]
    return get


# ---- error book-keeping (for the table) and soft checks -----------------------------------------------------

_SITE_ERR: dict = defaultdict(float)  # (site, arch) -> worst abs error
_INV_ERR: dict = defaultdict(float)  # (invariant, arch) -> worst abs error
_RAISED: dict = {}  # (site, arch) -> exception name
_NOTES: dict = {}  # (site, arch) -> text for cells that hold an expected outcome rather than an error
_EFFECT: dict = {}  # arch -> smallest logit change of an edit whose invariant is tested
_FAILED: set = set()  # (site or invariant, arch) with an error above its check's tolerance


def _maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return (a.float() - b.float()).abs().max().item()


class Checks:
    """Collects every failure of one test so that the table sees all of them; the test fails at the end."""

    def __init__(self, world: World, invariant: str):
        self.w = world
        self.inv = invariant
        self.failures: list[str] = []
        self.plain_bad: set[str] = set()  # relations already broken in unedited runs
        self._hash = param_hash(world.model)
        self._hooks = hooks_everywhere(world.model)

    def _record(self, sites, err: float, failed: bool):
        for s in sites:
            _SITE_ERR[s, self.w.arch] = max(_SITE_ERR[s, self.w.arch], err)
        _INV_ERR[self.inv, self.w.arch] = max(_INV_ERR[self.inv, self.w.arch], err)
        if failed:
            _FAILED.update((k, self.w.arch) for k in [*sites, self.inv])

    def close(self, what: str, got, want, sites, tol: float = ATOL) -> float:
        err = _maxdiff(got, want)
        self._record(sites, err, not err <= tol)
        if not err <= tol:
            self.failures.append(f"{what}: max abs error {err:.3g} > {tol:g}")
        return err

    def moved(self, what: str, a, b, least: float = EFFECT) -> None:
        """The edit under test must change the logits clearly, else its invariant would hold by luck."""
        d = _maxdiff(a, b)
        _EFFECT[self.w.arch] = min(_EFFECT.get(self.w.arch, float("inf")), d)
        if not d > least:
            self.failures.append(f"{what}: the edit moved the logits by only {d:.3g} (needs > {least:g})")

    def guard(self, what: str, sites, fn):
        try:
            return fn()
        except Exception as e:  # a library error is a failure of this invariant, not the end of the test
            for s in sites:
                _RAISED[s, self.w.arch] = type(e).__name__
            _INV_ERR[self.inv, self.w.arch] = float("inf")
            self.failures.append(f"{what}: raised {type(e).__name__}: {str(e)[:200]}")
            return None

    def finish(self) -> None:
        # shared models stay as they were: no weight changed, no hook left (ours or anyone's)
        assert param_hash(self.w.model) == self._hash, f"{self.w.arch}: a weight changed"
        assert hooks_everywhere(self.w.model) == self._hooks, f"{self.w.arch}: hooks left on the model"
        assert ilab.attached_hooks() == [], "interplab still holds hooks"
        n = len(self.failures)
        assert not n, f"{self.w.arch} / {self.inv}: {n} failure(s):\n  " + "\n  ".join(self.failures[:40])


# ---- 0. the set-up itself is meaningful ----------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCH_LIST)
def test_setup_clean_and_corrupt_differ(arch, worlds, tokenizer):
    w = worlds(arch)
    c = Checks(w, "0 setup")
    assert len(tokenizer(CLEAN)["input_ids"]) == len(tokenizer(CORRUPT)["input_ids"]) == w.T
    assert w.lab.sites.arch is not None, f"{arch} is not mapped"
    assert w.lab.n_layers == N_LAYERS
    c.moved("clean vs corrupt logits", w.clean.logits, w.corrupt.logits)
    # run.logits is the model's own output (what every invariant below compares)
    with torch.no_grad():
        plain = w.model(input_ids=w.clean.input_ids, use_cache=False).logits
    c.close("run.logits vs a plain forward", w.clean.logits, plain, ["logits"])
    c.finish()


# ---- 1. patching clean activations restores the clean run --------------------------------------------------

@pytest.mark.parametrize("arch", ARCH_LIST)
def test_patching_a_clean_residual_site_restores_the_clean_logits(arch, worlds):
    w = worlds(arch)
    c = Checks(w, "1 residual patch restores clean")
    for site in ("resid_pre", "resid_mid", "resid_post"):
        if site not in w.sites:
            continue
        for L in range(N_LAYERS):
            r = c.guard(f"patch clean {site} L{L}", [site],
                        lambda site=site, L=L: w.run([ilab.patch(site, layer=L, source=w.clean)]))
            if r is not None:
                c.close(f"patch clean {site} L{L} (all positions)", r.logits, w.clean.logits, [site])
    c.finish()


@pytest.mark.parametrize("arch", ARCH_LIST)
@pytest.mark.parametrize("attn_site", ["attn_out", "z"])
def test_patching_every_component_restores_the_clean_logits(arch, attn_site, worlds):
    """The stream is embed (+ position embeddings, equal here: equal lengths) + every attn_out + every mlp_out.
    Single-layer component patches do not restore the clean run (the stream keeps the corrupt embedding)."""
    w = worlds(arch)
    c = Checks(w, f"1 embed+{attn_site}+mlp_out restores clean")
    edits = [ilab.patch("embed", source=w.clean)]
    for L in range(N_LAYERS):
        edits += [ilab.patch(attn_site, layer=L, source=w.clean), ilab.patch("mlp_out", layer=L, source=w.clean)]
    sites = ["embed", attn_site, "mlp_out"]
    r = c.guard("patch every component", sites, lambda: w.run(edits))
    if r is not None:
        c.close(f"embed + {attn_site} + mlp_out of every layer", r.logits, w.clean.logits, sites)
    # without the embedding the corrupt tokens still sit in the stream: the patch must not restore the clean run
    r = c.guard("patch components without embed", sites, lambda: w.run(edits[1:]))
    if r is not None:
        c.moved("components without embed vs clean", r.logits, w.clean.logits)
    c.finish()


# ---- 2. patching a run into itself changes nothing --------------------------------------------------------

@pytest.mark.parametrize("arch", ARCH_LIST)
def test_self_patching_changes_nothing(arch, worlds):
    w = worlds(arch)
    c = Checks(w, "2 self patch is identity")
    cells = [("embed", None), ("logits", None)] + [(s, L) for s in w.sites for L in range(N_LAYERS)]
    for site, L in cells:
        tag = f"{site}" + (f" L{L}" if L is not None else "")
        r = c.guard(f"self patch {tag}", [site], lambda site=site, L=L: w.run([ilab.patch(site, layer=L,
                                                                                        source=w.corrupt)]))
        if r is not None:
            c.close(f"self patch {tag}", r.logits, w.corrupt.logits, [site])
        # the same edit with the clean source must act, else "nothing changed" proves nothing
        r = c.guard(f"clean patch {tag}", [site], lambda site=site, L=L: w.run([ilab.patch(site, layer=L,
                                                                                         source=w.clean)]))
        if r is not None:
            c.moved(f"clean patch {tag} vs corrupt", r.logits, w.corrupt.logits)
        # a tensor source (the run's own cached activation) is the same edit
        key = (site, L) if L is not None else site
        r = c.guard(f"self patch {tag} (tensor)", [site], lambda site=site, L=L, key=key: w.run(
            [ilab.patch(site, layer=L, source=w.corrupt.cache[key].clone())]))
        if r is not None:
            c.close(f"self patch {tag} (tensor source)", r.logits, w.corrupt.logits, [site])
    c.finish()


# ---- 3. the residual decomposition, as an edit and as a read ----------------------------------------------

@pytest.mark.parametrize("arch", ARCH_LIST)
def test_residual_decomposition_as_an_edit(arch, worlds):
    w = worlds(arch)
    c = Checks(w, "3 decomposition as an edit")
    cl, co = w.clean.cache, w.corrupt.cache
    g = torch.Generator().manual_seed(4)
    for L in range(N_LAYERS):
        if not w.parallel:
            # (a) resid_mid := corrupt resid_pre + clean attn_out  ==  patch clean attn_out
            want = c.guard(f"patch attn_out L{L}", ["attn_out"],
                           lambda L=L: w.run([ilab.patch("attn_out", layer=L, source=w.clean)]))
            got = c.guard(f"set resid_mid L{L}", ["resid_mid"], lambda L=L: w.run(
                [ilab.set_value("resid_mid", layer=L, value=co["resid_pre", L] + cl["attn_out", L])]))
            if want is not None and got is not None:
                c.moved(f"patch clean attn_out L{L} vs corrupt", want.logits, w.corrupt.logits)
                c.close(f"(a) set resid_mid L{L} = resid_pre* + attn_out vs patch attn_out", got.logits,
                        want.logits, ["resid_mid"])
            # (c) resid_mid := clean resid_pre + clean attn_out  ==  patch both clean resid_pre and attn_out
            want = c.guard(f"patch resid_pre+attn_out L{L}", ["resid_pre", "attn_out"], lambda L=L: w.run(
                [ilab.patch("resid_pre", layer=L, source=w.clean), ilab.patch("attn_out", layer=L, source=w.clean)]))
            got = c.guard(f"set resid_mid L{L} (clean)", ["resid_mid"], lambda L=L: w.run(
                [ilab.patch("resid_mid", layer=L, source=cl["resid_pre", L] + cl["attn_out", L])]))
            if want is not None and got is not None:
                c.moved(f"patch clean resid_pre+attn_out L{L} vs corrupt", want.logits, w.corrupt.logits)
                c.close(f"(c) resid_mid L{L} := clean resid_pre + attn_out vs patching both", got.logits,
                        want.logits, ["resid_mid"])
        # (b) resid_post := corrupt resid_mid + clean mlp_out (parallel: corrupt resid_pre + attn_out + clean mlp_out)
        if w.parallel:
            value = co["resid_pre", L] + co["attn_out", L] + cl["mlp_out", L]
        else:
            value = co["resid_mid", L] + cl["mlp_out", L]
        want = c.guard(f"patch mlp_out L{L}", ["mlp_out"],
                       lambda L=L: w.run([ilab.patch("mlp_out", layer=L, source=w.clean)]))
        got = c.guard(f"set resid_post L{L}", ["resid_post"],
                      lambda L=L, value=value: w.run([ilab.set_value("resid_post", layer=L, value=value)]))
        if want is not None and got is not None:
            c.moved(f"patch clean mlp_out L{L} vs corrupt", want.logits, w.corrupt.logits)
            c.close(f"(b) set resid_post L{L} = sum vs patch mlp_out", got.logits, want.logits, ["mlp_out"])
        if w.parallel:
            continue
        # (d) edits upstream of resid_mid in the same layer are overridden by setting it (dataflow order)
        v = torch.randn(w.lab.d_model, generator=g) * co["resid_pre", L].norm(dim=-1).mean()
        set_mid = ilab.patch("resid_mid", layer=L, source=w.clean)
        want = c.guard(f"patch resid_mid L{L}", ["resid_mid"], lambda e=set_mid: w.run([e]))
        upstream = [ilab.steer("resid_pre", layer=L, vector=v), ilab.zero("z", layer=L, head=0)]
        alone = c.guard(f"steer resid_pre + zero z L{L}", ["resid_pre"], lambda up=upstream: w.run(up))
        got = c.guard(f"upstream + patch resid_mid L{L}", ["resid_mid"],
                      lambda up=upstream, e=set_mid: w.run([*up, e]))
        if want is not None and got is not None and alone is not None:
            c.moved(f"steer resid_pre + zero z L{L} vs corrupt", alone.logits, w.corrupt.logits)
            c.close(f"(d) steer resid_pre + zero z + patch resid_mid L{L} vs patch resid_mid", got.logits,
                    want.logits, ["resid_mid"])
        # (e) zero attn_out then steer resid_mid (either order) = set resid_mid to resid_pre + v
        want = c.guard(f"set resid_mid L{L} = resid_pre + v", ["resid_mid"],
                       lambda L=L, v=v: w.run([ilab.set_value("resid_mid", layer=L, value=co["resid_pre", L] + v)]))
        za, sm = ilab.zero("attn_out", layer=L), ilab.steer("resid_mid", layer=L, vector=v)
        for order in ([za, sm], [sm, za]):
            got = c.guard(f"{[e.op for e in order]} L{L}", ["resid_mid"], lambda order=order: w.run(order))
            if want is not None and got is not None:
                c.moved(f"set resid_mid L{L} = resid_pre + v vs corrupt", want.logits, w.corrupt.logits)
                c.close(f"(e) {' then '.join(e.describe() for e in order)} vs set resid_mid = resid_pre + v",
                        got.logits, want.logits, ["resid_mid"])
    c.finish()


def _decomposition_reads(c: Checks, run, label: str, edited=None) -> None:
    """resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out (or the parallel sum), the next layer
    reads resid_post, the stream starts at embed (+ GPT-2's position embeddings), attn_out is made from z.
    edited = (site, layer) of an edit in this run: the relation that defines that site there does not hold (the
    edit overrides it); every other relation, at every layer, must."""
    w, cache = c.w, run.cache

    def check(site, L, what, got, want, sites):
        if (site, L) == edited:
            return
        rel = what.split(": ", 1)[1]
        if edited is None:
            if not c.close(what, got, want, sites) <= ATOL:
                c.plain_bad.add(rel)
        else:  # a relation that holds in plain runs and breaks in an edited one is the edit's fault
            c.close(what, got, want, sites if rel in c.plain_bad else [edited[0]])

    model = w.model
    T = run.logits.shape[1]
    pos = model.transformer.wpe.weight[:T] if w.arch == "gpt2" else 0.0  # GPT-2 adds them after the wte module
    check("resid_pre", 0, f"{label}: resid_pre L0 = embed + position embeddings", cache["resid_pre", 0],
          cache["embed"] + pos, ["embed"])
    for L in range(N_LAYERS):
        if w.parallel:
            check("resid_post", L, f"{label}: resid_post L{L} = resid_pre + attn_out + mlp_out",
                  cache["resid_post", L], cache["resid_pre", L] + cache["attn_out", L] + cache["mlp_out", L],
                  ["attn_out", "mlp_out"])
        else:
            check("resid_mid", L, f"{label}: resid_mid L{L} = resid_pre + attn_out", cache["resid_mid", L],
                  cache["resid_pre", L] + cache["attn_out", L], ["resid_mid", "attn_out"])
            check("resid_post", L, f"{label}: resid_post L{L} = resid_mid + mlp_out", cache["resid_post", L],
                  cache["resid_mid", L] + cache["mlp_out", L], ["mlp_out"])
        if L + 1 < N_LAYERS:
            check("resid_pre", L + 1, f"{label}: resid_pre L{L + 1} = resid_post L{L}", cache["resid_pre", L + 1],
                  cache["resid_post", L], ["resid_post"])
        with torch.no_grad():  # what the stream receives from attention, by hand from the model's modules
            made = _o_proj(model, w.arch, L)(cache["z", L])
            if w.arch in POST_NORM:
                made = model.get_submodule(f"{_layer_path(w.arch)}.{L}.post_attention_layernorm")(made)
        check("attn_out", L, f"{label}: attn_out L{L} = (post-norm of) o_proj(z)", cache["attn_out", L], made,
              ["attn_out"])
        p = cache["pattern", L]
        c.close(f"{label}: pattern L{L} rows sum to 1", p.sum(-1), torch.ones_like(p.sum(-1)), ["pattern"])
        c.close(f"{label}: pattern L{L} is causal", p.triu(1), torch.zeros_like(p), ["pattern"])


@pytest.mark.parametrize("arch", ARCH_LIST)
def test_residual_decomposition_as_a_read(arch, worlds):
    w = worlds(arch)
    c = Checks(w, "3 decomposition as a read")
    _decomposition_reads(c, w.clean, "clean")
    _decomposition_reads(c, w.corrupt, "corrupt")
    g = torch.Generator().manual_seed(2)
    d = w.lab.d_model
    for L in range(N_LAYERS):
        v = torch.randn(d, generator=g) * w.corrupt.cache["resid_pre", L].norm(dim=-1).mean()
        edited = [(f"zero attn_out L{L}", ilab.zero("attn_out", layer=L), "attn_out"),
                  (f"zero mlp_out L{L}", ilab.zero("mlp_out", layer=L), "mlp_out"),
                  (f"steer resid_pre L{L}", ilab.steer("resid_pre", layer=L, vector=v), "resid_pre"),
                  (f"steer resid_post L{L}", ilab.steer("resid_post", layer=L, vector=v), "resid_post")]
        if not w.parallel:
            edited.append((f"steer resid_mid L{L}", ilab.steer("resid_mid", layer=L, vector=v), "resid_mid"))
        for label, e, site in edited:
            r = c.guard(label, [site], lambda e=e: w.run([e], cache=w.cache_all))
            if r is None:
                continue
            c.moved(f"{label} vs corrupt", r.logits, w.corrupt.logits)
            _decomposition_reads(c, r, label, edited=(site, L))
            cache = r.cache
            if label.startswith("zero attn_out") and not w.parallel:  # the stream gets resid_pre + 0
                c.close(f"{label}: resid_mid = resid_pre", cache["resid_mid", L], cache["resid_pre", L],
                        ["resid_mid"])
            if label.startswith("zero mlp_out"):
                base = cache["resid_pre", L] + cache["attn_out", L] if w.parallel else cache["resid_mid", L]
                c.close(f"{label}: resid_post = what came before the MLP", cache["resid_post", L], base,
                        ["mlp_out"])
            if label.startswith("steer"):  # the cached value is the edited one: corrupt + v
                c.close(f"{label}: cached {site} = corrupt + v", cache[site, L], w.corrupt.cache[site, L] + v,
                        [site])
    c.finish()


# ---- 4. locality in layers, sublayers and positions --------------------------------------------------------

# What is computed strictly before each site inside one layer (serial and parallel blocks).
_BEFORE_SERIAL = {"resid_pre": [], "z": ["resid_pre", "pattern"], "attn_out": ["resid_pre", "pattern", "z"],
                  "resid_mid": ["resid_pre", "pattern", "z", "attn_out"],
                  "mlp_out": ["resid_pre", "pattern", "z", "attn_out", "resid_mid"],
                  "resid_post": ["resid_pre", "pattern", "z", "attn_out", "resid_mid", "mlp_out"]}
_BEFORE_PARALLEL = {"resid_pre": [], "z": ["resid_pre", "pattern", "mlp_out"],
                    "attn_out": ["resid_pre", "pattern", "z", "mlp_out"],
                    "mlp_out": ["resid_pre", "pattern", "z", "attn_out"],
                    "resid_post": ["resid_pre", "pattern", "z", "attn_out", "mlp_out"]}


def _pos_axis(key) -> int:
    return 2 if (key[0] if isinstance(key, tuple) else key) == "pattern" else 1  # pattern: [b, head, q, k]


@pytest.mark.parametrize("arch", ARCH_LIST)
def test_edits_are_local_in_layers_and_positions(arch, worlds):
    w = worlds(arch)
    c = Checks(w, "4 locality")
    base = w.corrupt
    p = w.T // 2
    tol = LOCAL_TOL_MOE if arch in MOE else LOCAL_TOL
    before = _BEFORE_PARALLEL if w.parallel else _BEFORE_SERIAL
    g = torch.Generator().manual_seed(3)
    cells = [("embed", None)] + [(s, L) for L in range(N_LAYERS) for s in w.sites] + [("logits", None)]
    for site, L in cells:
        key = (site, L) if L is not None else site
        tag = f"{site}" + (f" L{L}" if L is not None else "")
        ref = base.cache[key]
        v = torch.randn(ref.shape[-1], generator=g) * ref[0, p].norm()  # as large as the activation itself
        r = c.guard(f"steer {tag} pos {p}", [site], lambda site=site, L=L, v=v: w.run(
            [ilab.steer(site, layer=L, vector=v, pos=p)], cache=w.cache_all))
        if r is None:
            continue
        c.moved(f"steer {tag} pos {p}: logits at pos {p}", r.logits[:, p], base.logits[:, p])
        c.close(f"steer {tag} pos {p}: logits before pos {p}", r.logits[:, :p], base.logits[:, :p], [site], tol)
        c.moved(f"steer {tag} pos {p}: the edited site itself", r.cache[key][:, p], ref[:, p])
        if L is not None:
            c.moved(f"steer {tag} pos {p}: resid_post L{L}", r.cache["resid_post", L][:, p],
                    base.cache["resid_post", L][:, p])
        for k in base.cache:
            if not isinstance(k, tuple) or k == key:
                continue
            kname, kl = k
            full = (site == "logits" or (L is not None and (kl < L or (kl == L and kname in before[site]))))
            if full:  # computed before the edit: untouched at every position
                c.close(f"steer {tag} pos {p}: {kname} L{kl} (computed earlier)", r.cache[k], base.cache[k],
                        [site], tol)
            else:  # downstream: untouched before position p (causal attention)
                c.close(f"steer {tag} pos {p}: {kname} L{kl} before pos {p}",
                        r.cache[k].narrow(_pos_axis(k), 0, p), base.cache[k].narrow(_pos_axis(k), 0, p), [site],
                        tol)
        if site != "embed":
            c.close(f"steer {tag}: embed untouched", r.cache["embed"], base.cache["embed"], [site], tol)
        if site != "logits":
            c.close(f"steer {tag}: logits site before pos {p}", r.cache["logits"][:, :p],
                    base.cache["logits"][:, :p], [site], tol)
    c.finish()


# ---- 5. zeroing every head = writing the output projection's bias -----------------------------------------

@pytest.mark.parametrize("arch", ARCH_LIST)
def test_zeroing_every_head_writes_the_output_bias(arch, worlds):
    w = worlds(arch)
    c = Checks(w, "5 zero z = o_proj bias")
    H = w.lab.n_heads
    for L in range(N_LAYERS):
        bias = _o_proj(w.model, arch, L).bias
        if arch in POST_NORM:
            # the stream sees norm(o_proj(z)); norm(0) = 0 only without a bias, so there must be none
            assert bias is None, f"{arch}: o_proj has a bias; norm(bias) is not bias"
        want_edit = (ilab.set_value("attn_out", layer=L, value=bias.detach().clone()) if bias is not None
                     else ilab.zero("attn_out", layer=L))
        want = c.guard(f"attn_out := bias L{L}", ["attn_out"], lambda e=want_edit: w.run([e], cache=["attn_out"]))
        for head in (None, list(range(H))):
            got = c.guard(f"zero z L{L} head={head}", ["z"], lambda L=L, head=head: w.run(
                [ilab.zero("z", layer=L, head=head)], cache=[("attn_out", L)]))
            if got is None or want is None:
                continue
            c.moved(f"zero z L{L} vs corrupt", got.logits, w.corrupt.logits)
            c.close(f"zero z L{L} (head={head}) vs attn_out := bias", got.logits, want.logits, ["z"])
            b = bias.detach() if bias is not None else torch.zeros(w.lab.d_model)
            c.close(f"zero z L{L} (head={head}): cached attn_out = bias", got.cache["attn_out", L],
                    b.expand_as(got.cache["attn_out", L]), ["attn_out"])
    c.finish()


# ---- 6. logit lens at the last layer --------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCH_LIST)
def test_logit_lens_at_the_last_layer_is_the_model_output(arch, worlds):
    w = worlds(arch)
    c = Checks(w, "6 logit lens last layer")
    res = c.guard("logit_lens", ["resid_post"], lambda: logit_lens(w.lab, CLEAN))
    if res is not None:
        want = torch.softmax(w.clean.logits[0].double(), -1).float()
        c.close("lens probs[-1] vs softmax(run.logits)", res.probs[-1], want, ["resid_post"])
        # probabilities near 1/vocab would hide a wrong lens: compare log-probabilities too
        c.close("lens log-probs[-1] vs log_softmax(run.logits)", res.probs[-1].clamp_min(1e-30).log(),
                want.log(), ["resid_post"], 1e-3)
        c.moved("lens layer 0 vs the model output", res.probs[0], want, 1e-3)
    c.finish()


# ---- 7. parallel residual: no resid_mid ------------------------------------------------------------------

def test_parallel_neox_has_no_resid_mid(worlds):
    w = worlds("gpt_neox_parallel")
    c = Checks(w, "7 parallel resid_mid raises")
    calls = {"cache all layers": lambda: w.lab.run(CLEAN, cache=["resid_mid"]),
             "cache one layer": lambda: w.lab.run(CLEAN, cache=[("resid_mid", 1)]),
             "zero edit": lambda: w.lab.run(CLEAN, edits=[ilab.zero("resid_mid", layer=1)]),
             "patch edit": lambda: w.lab.run(CORRUPT, edits=[ilab.patch("resid_mid", layer=0, source=w.clean)])}
    for what, call in calls.items():
        try:
            call()
        except ilab.UnsupportedSiteError as e:
            if "parallel residual" not in str(e):
                c.failures.append(f"{what}: the message does not mention the parallel residual: {e}")
        except Exception as e:  # noqa: BLE001 - any other error type is a failure too
            c.failures.append(f"{what}: raised {type(e).__name__}, not UnsupportedSiteError: {e}")
        else:
            c.failures.append(f"{what}: did not raise")
    _NOTES["resid_mid", w.arch] = "raises ✓" if not c.failures else "**wrong error**"
    c.finish()


# ---- the table ----------------------------------------------------------------------------------------------

def _cell(key, table: dict) -> str:
    if key in _NOTES:
        return _NOTES[key]
    if key in _RAISED:
        return f"**raised {_RAISED[key]}**"
    err = table.get(key)
    if err is None:
        return "-"
    text = "inf" if err == float("inf") else f"{err:.1e}"
    return f"**{text}**" if key in _FAILED or err == float("inf") else text


def _table() -> str:
    archs = ARCH_LIST
    head = (f"Worst absolute error per site and architecture over all invariants (tolerance {ATOL:g}; locality "
            f"{LOCAL_TOL:g}, {LOCAL_TOL_MOE:g} on MoE; **bold** = fails). A check is charged to the site(s) it tests: "
            f"the site an edit acts on or sets, or the derived site of a read (a read that breaks only in an edited "
            f"run: the edited site).")
    lines = [head, "", "| site | " + " | ".join(archs) + " |", "|---" * (len(archs) + 1) + "|"]
    for s in ALL_SITES:
        row = [_cell((s, a), _SITE_ERR) for a in archs]
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    invs = sorted({k[0] for k in _INV_ERR})
    lines += ["", "Worst absolute error per invariant and architecture (inf = the library raised).", "",
              "| invariant | " + " | ".join(archs) + " |", "|---" * (len(archs) + 1) + "|"]
    for i in invs:
        lines.append(f"| {i} | " + " | ".join(_cell((i, a), _INV_ERR) for a in archs) + " |")
    effects = [f"{_EFFECT[a]:.2g}" if a in _EFFECT else "-" for a in archs]
    lines.append(f"| smallest edit effect on the logits (must be > {EFFECT:g}) | " + " | ".join(effects) + " |")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    path = os.environ.get("INVARIANT_TABLE")
    if path:
        with open(path, "w") as f:
            f.write(_table())
