"""Independent peer for the exact patching sweeps: the same sweeps written as plain nnsight loops.

The peer runs one `model.trace` per cell on a deep copy of each model (so nnsight's instrumentation never touches the
shared fixtures), addresses modules through the model's own module tree, written out here per architecture from
transformers' modeling code, and shares nothing with interplab (no site map, engine, hooks or metric code). Sweeps
are denoising (clean patched into the corrupt run), compared on `res.raw` to 1e-4.

resid_mid is patched as a change of the residual stream itself: no module outputs it, so the peer rewrites what the
attention sublayer adds, attn contribution := clean resid_mid - this run's resid_pre, which the MLP, the skip
connection and every later layer then see.

PEER_TABLE=path writes a markdown table of the worst absolute error per model and site to that path.
"""

from __future__ import annotations

import copy
import importlib
import os

import pytest
import torch
from _tiny_models import CORPUS

import interplab as ilab

ATOL = 1e-4
SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z")
MODELS = ("gpt2", "gpt_neox", "llama", "gemma2", "ioi-tiny")
# IOI pair; for the random models it is the first conftest corpus sentence, which the tiny tokenizer splits into
# 25 tokens either way, with " Mary" and " John" single tokens
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
ANSWER, WRONG = " Mary", " John"


# ---- the peer's own view of each architecture ------------------------------------------------------------
# Per site: envoy of the block -> (envoy, how its value is reached): "in" = first forward input, "out" = output
# tensor, "out0" = element 0 of a tuple output. resid_pre / resid_post are the block's input / output everywhere.

def _gpt2(b, site):  # GPT2Block: h + attn(ln_1(h)); then + mlp(ln_2(.))
    return {"z": (b.attn.c_proj, "in"), "attn_out": (b.attn, "out0"), "resid_mid": (b.ln_2, "in"),
            "mlp_out": (b.mlp, "out")}[site]


def _neox(b, site):  # GPTNeoXLayer, serial residual: h + attention(...), then + mlp(post_attention_layernorm(.))
    return {"z": (b.attention.dense, "in"), "attn_out": (b.attention, "out0"),
            "resid_mid": (b.post_attention_layernorm, "in"), "mlp_out": (b.mlp, "out")}[site]


def _llama(b, site):  # LlamaDecoderLayer: h + self_attn(input_layernorm(h)); then + mlp(post_attention_layernorm(.))
    return {"z": (b.self_attn.o_proj, "in"), "attn_out": (b.self_attn, "out0"),
            "resid_mid": (b.post_attention_layernorm, "in"), "mlp_out": (b.mlp, "out")}[site]


def _gemma2(b, site):  # Gemma2DecoderLayer: each sublayer's output is normalised before the add
    return {"z": (b.self_attn.o_proj, "in"), "attn_out": (b.post_attention_layernorm, "out"),
            "resid_mid": (b.pre_feedforward_layernorm, "in"), "mlp_out": (b.post_feedforward_layernorm, "out")}[site]


BLOCKS = {"gpt2": lambda m: m.transformer.h, "gpt_neox": lambda m: m.gpt_neox.layers,
          "llama": lambda m: m.model.layers, "gemma2": lambda m: m.model.layers}
POINTS = {"gpt2": _gpt2, "gpt_neox": _neox, "llama": _llama, "gemma2": _gemma2}
# reads within a trace must follow execution order
ORDER = ("resid_pre", "z", "attn_out", "resid_mid", "mlp_out", "resid_post")


def _read(env, kind):
    return {"in": lambda: env.input, "out": lambda: env.output, "out0": lambda: env.output[0]}[kind]()


def _write(env, kind, fn):
    """Replace the value with fn(value) (a new tensor: nothing the model returned is edited in place)."""
    if kind == "in":
        env.input = fn(env.input)
    elif kind == "out":
        env.output = fn(env.output)
    else:
        out = env.output
        env.output = (fn(out[0]), *out[1:])


class Peer:
    """nnsight on a deep copy of `model`; `arch` picks the hand-written module addressing above."""

    def __init__(self, model, tokenizer, arch: str):
        # imported here, not at collection: importing nnsight first breaks a later `import marimo` (marimo's config
        # dataclasses fail to build), and tests/e2e/test_marimo.py imports marimo when it is collected. The dev extra
        # has nnsight: a missing peer fails here, it does not skip.
        nnsight = importlib.import_module("nnsight")
        self.nm = nnsight.NNsight(copy.deepcopy(model))
        self.arch, self.tok = arch, tokenizer
        self.n_heads = model.config.num_attention_heads
        self.n_layers = len(BLOCKS[arch](self.nm))
        self.a, self.w = (self._single(t) for t in (ANSWER, WRONG))
        self.clean_ids, self.corrupt_ids = (torch.tensor([tokenizer(p)["input_ids"]]) for p in (CLEAN, CORRUPT))
        assert self.clean_ids.shape == self.corrupt_ids.shape
        self.clean_cache, clean_logits = self._clean_run()
        self.clean_value = self.metric(clean_logits)
        self.corrupt_value = self.metric(self.patched(None, 0))

    def _single(self, text):
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, (text, ids)
        return ids[0]

    def point(self, block, site):
        if site == "resid_pre":
            return block, "in"
        if site == "resid_post":
            return block, "out"
        return POINTS[self.arch](block, site)

    def metric(self, last_logits):
        return float(last_logits[self.a] - last_logits[self.w])

    def _clean_run(self):
        cache = {}
        with torch.no_grad(), self.nm.trace(self.clean_ids):
            for layer, block in enumerate(BLOCKS[self.arch](self.nm)):
                for site in ORDER:
                    cache[site, layer] = _read(*self.point(block, site)).clone()
            logits = self.nm.output.logits[0, -1].clone().save()
        return cache, logits

    def patched(self, site, layer, pos=None, head=None):
        """Last-position logits of the corrupt run with the clean activation patched in at (site, layer) and one
        position (pos) or one head at every position (head); site None: the unpatched corrupt run."""
        src = self.clean_cache.get((site, layer))
        n = self.corrupt_ids.shape[1]
        sel = slice(None) if pos is None else slice(pos % n, pos % n + 1)

        def put(t, value):
            t = t.clone()
            if head is None:
                t[:, sel] = value[:, sel]
            else:  # head h = columns h*d_head:(h+1)*d_head of the output projection's input
                d_head = t.shape[-1] // self.n_heads
                cols = slice(head * d_head, (head + 1) * d_head)
                t[:, sel, cols] = value[:, sel, cols]
            return t

        with torch.no_grad(), self.nm.trace(self.corrupt_ids):
            if site is not None:
                block = BLOCKS[self.arch](self.nm)[layer]
                if site == "resid_mid":  # rewrite the attention contribution so the stream itself becomes clean
                    pre = block.input.clone()
                    _write(*self.point(block, "attn_out"), lambda t: put(t, src - pre))
                else:
                    _write(*self.point(block, site), lambda t: put(t, src))
            logits = self.nm.output.logits[0, -1].clone().save()
        return logits

    def sweep(self, site, by):
        n_pos = self.corrupt_ids.shape[1]
        cols = range(n_pos) if by == ("layer", "pos") else range(self.n_heads)
        out = torch.empty(self.n_layers, len(cols))
        for layer in range(self.n_layers):
            for c in cols:
                kw = {"pos": c} if by == ("layer", "pos") else {"head": c}
                out[layer, c] = self.metric(self.patched(site, layer, **kw))
        return out


# ---- fixtures --------------------------------------------------------------------------------------------

ERRORS: dict[tuple[str, str], float] = {}  # (model, column) -> worst |lab - peer| of a sweep
RUN_ERRORS: dict[tuple[str, str], float] = {}  # (model, site) -> worst |lab.run - peer| over the single cells


@pytest.fixture(scope="module")
def subject_of(models, tokenizer):
    """name -> (lab, peer, the model the lab runs), built once per module."""
    built = {}

    def get(name):
        if name not in built:
            if name == "ioi-tiny":  # a GPT-2 architecture with its own tokenizer
                lab = ilab.Lab.load("ioi-tiny")
                built[name] = (lab, Peer(lab.model, lab.tokenizer, "gpt2"), lab.model)
            else:
                lab = ilab.Lab(models[name], tokenizer, model_id=f"tiny-{name}")
                built[name] = (lab, Peer(models[name], tokenizer, name), models[name])
        return built[name]

    yield get
    if os.environ.get("PEER_TABLE"):
        _write_table(os.environ["PEER_TABLE"])


def _write_table(path):
    def table(errors, cols):
        lines = ["| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for name in MODELS:
            cells = [f"{errors[name, c]:.1e}" if (name, c) in errors else "-" for c in cols]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    with open(path, "w") as f:
        f.write(f"Worst |res.raw - peer| per sweep (logit diff, fp32; tolerance {ATOL:g}):\n\n")
        f.write(table(ERRORS, [*SITES, "z by head"]) + "\n\n")
        f.write("Worst |lab.run(...).last_logits - peer| over single patched cells:\n\n")
        f.write(table(RUN_ERRORS, list(SITES)) + "\n")


def _snapshot(model):
    return model.config.to_dict(), {k: v.clone() for k, v in model.state_dict().items()}


def _assert_untouched(model, before):
    """No hook, no nnsight controller, same config and weights as before the test."""
    config, weights = before
    g = torch.nn.modules.module
    assert not (g._global_forward_hooks or g._global_forward_pre_hooks or g._global_backward_hooks)
    for path, m in model.named_modules():
        hooks = [m._forward_hooks, m._forward_pre_hooks, m._backward_hooks, m._backward_pre_hooks]
        assert not any(hooks), f"hook left on {path or 'model'}"
        assert "forward" not in m.__dict__, f"forward replaced on {path or 'model'}"
    assert model.config.to_dict() == config
    now = model.state_dict()
    assert all(torch.equal(now[k], v) for k, v in weights.items())


# ---- the peer checks itself ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODELS)
def test_peer_is_sound(subject_of, name):
    """Cases whose answer follows from the definitions alone, so that a peer bug cannot pass for agreement."""
    _, peer, model = subject_of(name)
    last = peer.n_layers - 1
    assert CORPUS[0].startswith(CLEAN)  # the random models' pair comes from the conftest corpus
    assert abs(peer.clean_value - peer.corrupt_value) > 1e-3  # something to restore
    # clean resid_pre of layer 0 everywhere is the clean run
    assert peer.metric(peer.patched("resid_pre", 0)) == pytest.approx(peer.clean_value, abs=ATOL)
    # the final logits read only the last position's final residual: a clean resid_post there, or a clean
    # resid_mid there (the last MLP then also sees clean input), restores the clean run
    for site in ("resid_post", "resid_mid"):
        assert peer.metric(peer.patched(site, last, pos=-1)) == pytest.approx(peer.clean_value, abs=ATOL)
    # resid_mid = resid_pre + attn_out, read independently in the clean run
    for layer in range(peer.n_layers):
        c = peer.clean_cache
        torch.testing.assert_close(c["resid_mid", layer], c["resid_pre", layer] + c["attn_out", layer])
    # a head is a part of z: each changes the run, none equals patching all of z, and they differ from each other
    corrupt, all_z = peer.patched(None, 0), peer.patched("z", 1)
    heads = [peer.patched("z", 1, head=h) for h in range(peer.n_heads)]
    for h, logits in enumerate(heads):
        assert not torch.allclose(logits, corrupt) and not torch.allclose(logits, all_z), h
    assert not torch.allclose(heads[0], heads[1])


# ---- the lab against the peer ----------------------------------------------------------------------------

def _sweep(lab, site, by):
    return lab.patch_sweep(CLEAN, CORRUPT, site=site, by=by, metric=ilab.logit_diff(ANSWER, WRONG),
                           method="exact", direction="denoise", progress=False)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("site", SITES)
def test_layer_pos_sweep_matches_peer(subject_of, name, site):
    lab, peer, model = subject_of(name)
    before = _snapshot(model)
    res = _sweep(lab, site, ("layer", "pos"))
    want = peer.sweep(site, ("layer", "pos"))
    ERRORS[name, site] = float((res.raw - want).abs().max())
    _assert_untouched(model, before)
    assert res.clean_value == pytest.approx(peer.clean_value, abs=ATOL)
    assert res.corrupt_value == pytest.approx(peer.corrupt_value, abs=ATOL)
    torch.testing.assert_close(res.raw, want, atol=ATOL, rtol=0)
    # normalisation from the peer's own end points
    norm = (want - peer.corrupt_value) / (peer.clean_value - peer.corrupt_value)
    torch.testing.assert_close(res.values, norm, atol=ATOL / abs(peer.clean_value - peer.corrupt_value), rtol=0)


@pytest.mark.parametrize("name", MODELS)
def test_layer_head_sweep_matches_peer(subject_of, name):
    lab, peer, model = subject_of(name)
    before = _snapshot(model)
    res = _sweep(lab, "z", ("layer", "head"))
    want = peer.sweep("z", ("layer", "head"))
    ERRORS[name, "z by head"] = float((res.raw - want).abs().max())
    _assert_untouched(model, before)
    torch.testing.assert_close(res.raw, want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("site", SITES)
def test_single_cell_run_matches_peer(subject_of, name, site):
    """lab.run with one patch edit gives the peer's patched logits (every vocabulary entry, not just the metric)."""
    lab, peer, model = subject_of(name)
    before = _snapshot(model)
    n = peer.corrupt_ids.shape[1]
    first = int((peer.clean_ids != peer.corrupt_ids)[0].nonzero()[0])  # the token that differs
    source = lab.run(CLEAN)
    cells = [({"layer": 1, "pos": first}, {"pos": first}), ({"layer": peer.n_layers - 1, "pos": n - 1}, {"pos": n - 1})]
    if site == "z":
        cells.append(({"layer": 1, "head": 2}, {"head": 2}))
    worst = 0.0
    for lab_kw, peer_kw in cells:
        got = lab.run(CORRUPT, edits=[ilab.patch(site, source=source, **lab_kw)]).last_logits[0]
        want = peer.patched(site, lab_kw["layer"], **peer_kw)
        worst = max(worst, float((got - want).abs().max()))
    RUN_ERRORS[name, site] = worst
    _assert_untouched(model, before)
    assert worst <= ATOL, f"{name} {site}: lab.run differs from the peer by {worst:.3g}"
