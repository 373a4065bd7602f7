"""The bad-input catalogue: every public function's arguments with wrong types, out-of-range values, NaN / Inf,
empty and oversized inputs. Each case must raise a typed ilab.InterplabError whose message names the problem, and
leave no hook on the model and every weight as it was; most must fail before the model runs at all.

One parametrized test runs the table CASES (its length is the catalogue's size); a few tests after it pin the exact
context-length message, the unknown-token rule and the valid neighbours of each rejected value (so the checks do not
reject what is allowed).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from _tiny_models import CORPUS

import interplab as ilab
import interplab.engine as engine
from interplab.analyses import vectors
from interplab.analyses.lens import logit_lens

from ._hand import hooks_everywhere, param_hash

P = "When Mary and John went to the store, John gave a drink to"
C = "When Mary and John went to the store, Mary gave a drink to"
LONG = "a b " * 100  # about 200 tokens: past the tiny models' 64-token context
LONG_P, LONG_C = P * 5, C * 5  # equal lengths (125 tokens), so a sweep gets past its length check to the context
NAN, INF = float("nan"), float("inf")
D = 32  # d_model of the tiny models


@pytest.fixture(scope="module")
def unk_tokenizer():
    """A word-level tokenizer with an unknown token: words outside CORPUS all become [UNK] (one token)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")


class Env:
    """What a case may use: labs on the shared tiny models (gpt2, llama), a lab whose tokenizer has an unknown
    token, a few vectors and a temporary folder."""

    def __init__(self, models, tokenizer, unk_tokenizer, tmp_path):
        self.lab = ilab.Lab(models["gpt2"], tokenizer)
        self.llama = ilab.Lab(models["llama"], tokenizer)
        self.unk = ilab.Lab(models["gpt2"], unk_tokenizer)
        self.tmp = tmp_path
        self.v = torch.ones(D)
        self.zeros = torch.zeros(D)
        self.metric = ilab.logit_diff(" Mary", " John")

    def nan_vec(self, bad=NAN):
        v = torch.ones(D)
        v[3] = bad
        return v

    def sweep(self, **kw):
        args = {"clean": P, "corrupt": C, "metric": self.metric, "progress": False, **kw}
        return self.lab.patch_sweep(**args)

    def gen(self, prompt=P, edits=None, **kw):
        return self.lab.generate(prompt, edits, **{"max_new_tokens": 2, **kw})

    def file(self, name, text):
        path = self.tmp / name
        path.write_text(text)
        return path


@dataclass
class Case:
    what: str
    call: Callable[[Env], Any]
    error: type
    fragment: str | tuple[str, ...]  # every one must be in the message
    ran: bool = False  # True where the error can only be seen once the model has run (then hooks must be gone)


def _bad_config_dir(x: Env):
    (x.tmp / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    return ilab.Lab.load(str(x.tmp))


def _bound(x: Env, edits):
    with x.lab.edit(edits):
        x.lab.run(P)


def _nan_metric(logits):
    return logits[:, 0] * NAN


E = ilab.InterplabError
CASES = [
    # ---- Lab.load ------------------------------------------------------------------------------------------------
    Case("load None", lambda x: ilab.Lab.load(None), ilab.LoadError, "non-empty string"),
    Case("load empty name", lambda x: ilab.Lab.load(""), ilab.LoadError, "non-empty string"),
    Case("load an int", lambda x: ilab.Lab.load(5), ilab.LoadError, "got int 5"),
    Case("load a dir of an unknown architecture", _bad_config_dir, ilab.LoadError, ("could not load", "How to fix")),
    Case("load a file, not a dir", lambda x: ilab.Lab.load(str(x.file("f.txt", "hi"))), ilab.LoadError,
         "could not load"),
    Case("load with an unknown dtype", lambda x: ilab.Lab.load("ioi-tiny", dtype="float33"), E,
         ("dtype='float33' is not a dtype", "bfloat16")),
    # ---- Lab.run: prompts --------------------------------------------------------------------------------------
    Case("run empty prompt", lambda x: x.lab.run(""), ilab.EmptyPromptError, "empty prompt"),
    Case("run whitespace prompt", lambda x: x.lab.run("  \n "), ilab.EmptyPromptError, "empty prompt"),
    Case("run no prompts", lambda x: x.lab.run([]), ilab.EmptyPromptError, "no prompts"),
    Case("run None", lambda x: x.lab.run(None), E, "string or a list of strings"),
    Case("run an int", lambda x: x.lab.run(5), E, "got int"),
    Case("run bytes", lambda x: x.lab.run(b"When Mary"), E, "decode bytes"),
    Case("run a list holding a non-string", lambda x: x.lab.run([P, 3]), E, "prompts must be strings"),
    Case("run a prompt past the context", lambda x: x.lab.run(LONG), ilab.ContextLengthError,
         ("context is 64 tokens", "Shorten")),
    Case("run a batch with one prompt past the context", lambda x: x.lab.run([P, LONG]), ilab.ContextLengthError,
         ("prompt 1", "context is 64 tokens")),
    Case("run past the context of a rotary model (no IndexError there: silent)", lambda x: x.llama.run(LONG_P),
         ilab.ContextLengthError, ("is 125 tokens", "context is 64 tokens")),
    # ---- Lab.run: edits and cache -------------------------------------------------------------------------------
    Case("run edits= one edit, not a list", lambda x: x.lab.run(P, edits=ilab.zero("resid_pre", 0)), E,
         "wrap it in a list"),
    Case("run edits= a string", lambda x: x.lab.run(P, edits=["zero"]), E, "edits must be ilab edits"),
    Case("run edit on a layer past the model", lambda x: x.lab.run(P, edits=[ilab.zero("resid_pre", 3)]),
         ilab.OutOfRangeError, "has 3 layers"),
    Case("run edit at a position past the prompt", lambda x: x.lab.run(P, edits=[ilab.zero("resid_pre", 0, pos=99)]),
         ilab.OutOfRangeError, "position 99 out of range"),
    Case("run edit on a batch row past the prompts", lambda x: x.lab.run(P, edits=[ilab.zero("resid_pre", 0,
                                                                                              batch=1)]),
         ilab.OutOfRangeError, "batch row 1"),
    Case("run cache a bare string", lambda x: x.lab.run(P, cache="resid_post"), ilab.InterplabError,
         ("give a list", "cache=['resid_post']")),
    Case("run cache a number", lambda x: x.lab.run(P, cache=[5]), ilab.InterplabError, "not int"),
    Case("run cache a triple", lambda x: x.lab.run(P, cache=[("resid_post", 1, 2)]), ilab.InterplabError,
         "(site name, layer)"),
    Case("run cache not iterable", lambda x: x.lab.run(P, cache=7), ilab.InterplabError, "got int"),
    Case("run cache a misspelt site", lambda x: x.lab.run(P, cache=["resid_psot"]), ilab.UnknownSiteError,
         "resid_psot"),
    Case("run cache a string layer", lambda x: x.lab.run(P, cache=[("resid_post", "1")]), ilab.OutOfRangeError,
         "layer must be an int"),
    Case("run cache a layer past the model", lambda x: x.lab.run(P, cache=[("resid_post", 7)]),
         ilab.OutOfRangeError, "has 3 layers"),
    # ---- edit constructors: sites and selections -----------------------------------------------------------------
    Case("zero on an int site", lambda x: ilab.zero(3, 0), ilab.UnknownSiteError, "site must be a name"),
    Case("zero on an empty site", lambda x: ilab.zero("", 0), ilab.UnknownSiteError, "site must be a name"),
    Case("layer a string", lambda x: ilab.zero("resid_pre", "a"), ilab.OutOfRangeError, "layer takes an int"),
    Case("layer a float", lambda x: ilab.zero("resid_pre", 1.5), ilab.OutOfRangeError, "got float 1.5"),
    Case("layer an empty list", lambda x: ilab.zero("resid_pre", []), ilab.OutOfRangeError, "selects nothing"),
    Case("layer a slice with step 0", lambda x: ilab.zero("resid_pre", slice(None, None, 0)), ilab.OutOfRangeError,
         "step cannot be 0"),
    Case("pos a float (was truncated to 1)", lambda x: ilab.zero("resid_pre", 0, pos=1.5), ilab.OutOfRangeError,
         "pos takes an int"),
    Case("pos NaN", lambda x: ilab.zero("resid_pre", 0, pos=NAN), ilab.OutOfRangeError, "pos takes an int"),
    Case("pos a bool", lambda x: ilab.zero("resid_pre", 0, pos=True), ilab.OutOfRangeError, "got bool True"),
    Case("pos a list holding a float", lambda x: ilab.zero("resid_pre", 0, pos=[0, 2.0]), ilab.OutOfRangeError,
         "got float 2.0"),
    Case("pos an empty list", lambda x: ilab.zero("resid_pre", 0, pos=[]), ilab.OutOfRangeError, "selects nothing"),
    Case("pos an unknown word", lambda x: ilab.zero("resid_pre", 0, pos="last"), E, "unknown position selector"),
    Case("head a string", lambda x: ilab.zero("z", 0, head="a"), ilab.OutOfRangeError, "head takes an int"),
    Case("head past the model", lambda x: x.lab.run(P, edits=[ilab.zero("z", 0, head=4)]), ilab.OutOfRangeError,
         "4 heads per layer"),
    Case("batch a string", lambda x: ilab.zero("resid_pre", 0, batch="a"), ilab.OutOfRangeError,
         "batch takes an int"),
    Case("steps negative", lambda x: ilab.zero("resid_pre", 0, steps=-1), ilab.OutOfRangeError, "ints >= 0"),
    Case("unknown edit op", lambda x: ilab.Edit("rotate", "resid_pre", 0), E, "unknown edit op"),
    Case("edit from JSON with a NaN factor", lambda x: ilab.Edit.from_dict(
        {"op": "scale", "site": "resid_pre", "layer": 0, "factor": {"__float__": "nan"}}), ilab.NumberError,
         "not a finite number"),
    Case("edit from JSON with an unknown field", lambda x: ilab.Edit.from_dict({"op": "zero", "site": "embed",
                                                                               "strength": 2}),
         E, "unknown edit fields"),
    # ---- scale / steer / project / clamp / set_value numbers ---------------------------------------------------
    Case("scale by NaN", lambda x: ilab.scale("resid_post", 1, NAN), ilab.NumberError,
         ("factor=nan", "finite factor")),
    Case("scale by inf", lambda x: ilab.scale("resid_post", 1, INF), ilab.NumberError, "factor=inf"),
    Case("scale by -inf", lambda x: ilab.scale("resid_post", 1, -INF), ilab.NumberError, "factor=-inf"),
    Case("scale by a string", lambda x: ilab.scale("resid_post", 1, "2"), ilab.NumberError, "must be a number"),
    Case("scale by None", lambda x: ilab.scale("resid_post", 1, None), ilab.NumberError, "must be a number"),
    Case("scale by a bool", lambda x: ilab.scale("resid_post", 1, True), ilab.NumberError, "got bool"),
    Case("scale by a NaN tensor", lambda x: ilab.scale("resid_post", 1, torch.tensor(NAN)), ilab.NumberError,
         "factor=nan"),
    Case("steer alpha NaN", lambda x: ilab.steer("resid_post", 1, x.v, alpha=NAN), ilab.NumberError,
         ("alpha=nan", "residual_norm")),
    Case("steer alpha inf", lambda x: ilab.steer("resid_post", 1, x.v, alpha=INF), ilab.NumberError, "alpha=inf"),
    Case("steer alpha a string", lambda x: ilab.steer("resid_post", 1, x.v, alpha="4"), ilab.NumberError,
         "must be a number"),
    Case("steer without a vector", lambda x: ilab.steer("resid_post", 1), ilab.VectorError, "steer needs vector="),
    Case("steer vector with NaN", lambda x: ilab.steer("resid_post", 1, x.nan_vec()), ilab.VectorError, "NaN/Inf"),
    Case("steer vector with inf", lambda x: ilab.steer("resid_post", 1, x.nan_vec(INF)), ilab.VectorError,
         "NaN/Inf"),
    Case("steer vector a string", lambda x: ilab.steer("resid_post", 1, "up"), ilab.VectorError,
         "tensor or a list of numbers"),
    Case("steer vector a 0-d tensor", lambda x: ilab.steer("resid_post", 1, torch.tensor(1.0)), ilab.VectorError,
         "shape ()"),
    Case("steer vector empty", lambda x: ilab.steer("resid_post", 1, torch.ones(0)), ilab.VectorError,
         "shape (0,)"),
    Case("steer vector of the wrong width", lambda x: x.lab.run(P, edits=[ilab.steer("resid_post", 1,
                                                                                      torch.ones(31))]),
         ilab.VectorError, ("size 31", "32")),
    Case("steer vector of a shape that does not broadcast", lambda x: x.lab.run(
        P, edits=[ilab.steer("resid_post", 1, torch.ones(2, D))]), ilab.VectorError, "does not fit the activation",
         ran=True),
    Case("project onto a zero direction", lambda x: ilab.project("resid_post", 1, direction=x.zeros),
         ilab.VectorError, ("zero vector", "non-zero direction")),
    Case("project onto a direction with a zero row", lambda x: ilab.project("resid_post", 1, direction=torch.stack(
        [torch.ones(D), torch.zeros(D)])), ilab.VectorError, "zero vector"),
    Case("project onto a NaN direction", lambda x: ilab.project("resid_post", 1, x.nan_vec()), ilab.VectorError,
         "NaN/Inf"),
    Case("project without a direction", lambda x: ilab.project("resid_post", 1), ilab.VectorError,
         "needs direction="),
    Case("project coeff NaN", lambda x: ilab.project("resid_post", 1, x.v, coeff=NAN), ilab.NumberError,
         "coeff=nan"),
    Case("project coeff inf", lambda x: ilab.project("resid_post", 1, x.v, coeff=INF), ilab.NumberError,
         "coeff=inf"),
    Case("clamp along a zero direction", lambda x: ilab.clamp("resid_post", 1, x.zeros, lo=0.0), ilab.VectorError,
         "zero vector"),
    Case("clamp with lo > hi", lambda x: ilab.clamp("resid_post", 1, x.v, lo=2.0, hi=1.0), ilab.NumberError,
         ("lo=2 > hi=1", "swap")),
    Case("clamp lo NaN", lambda x: ilab.clamp("resid_post", 1, x.v, lo=NAN), ilab.NumberError,
         ("lo=nan", "None for no lower bound")),
    Case("clamp hi inf", lambda x: ilab.clamp("resid_post", 1, x.v, hi=INF), ilab.NumberError,
         ("hi=inf", "None for no upper bound")),
    Case("clamp lo a string", lambda x: ilab.clamp("resid_post", 1, x.v, lo="0"), ilab.NumberError,
         "must be a number"),
    Case("clamp without bounds", lambda x: ilab.clamp("resid_post", 1, x.v), E, "needs lo= and/or hi="),
    Case("set_value without a value", lambda x: ilab.set_value("resid_post", 1), E, "set needs value="),
    Case("set_value NaN", lambda x: ilab.set_value("resid_post", 1, x.nan_vec()), ilab.VectorError, "NaN/Inf"),
    Case("set_value a bare number", lambda x: ilab.set_value("resid_post", 1, 0.0), ilab.VectorError,
         "torch.full"),
    Case("set_value of a shape that does not broadcast", lambda x: x.lab.run(
        P, edits=[ilab.set_value("resid_post", 1, torch.ones(5, 7, D))]), ilab.VectorError,
         "does not fit the activation", ran=True),
    # ---- patch / mean_ablate sources ---------------------------------------------------------------------------
    Case("patch without a source", lambda x: ilab.patch("resid_pre", 0), E, "patch needs source="),
    Case("patch from an int", lambda x: ilab.patch("resid_pre", 0, source=5), E, "patch source must be a Run"),
    Case("patch from a NaN tensor", lambda x: ilab.patch("resid_pre", 0, source=torch.full((25, D), NAN)),
         ilab.VectorError, "NaN/Inf"),
    Case("patch from a run of another length", lambda x: x.lab.run(P, edits=[ilab.patch(
        "resid_post", 1, source=x.lab.run("The capital of France is"))]), ilab.OutOfRangeError, "positions",
         ran=True),
    Case("mean_ablate without a reference", lambda x: ilab.mean_ablate("resid_pre", 0), E, "needs reference="),
    Case("mean_ablate an empty reference list", lambda x: ilab.mean_ablate("resid_pre", 0, reference=[]), E,
         "an empty list"),
    Case("mean_ablate a prompt string (was an AttributeError in lab.run)",
         lambda x: ilab.mean_ablate("resid_pre", 0, reference=P), E, "reference=lab.run("),
    Case("mean_ablate an int reference", lambda x: ilab.mean_ablate("resid_pre", 0, reference=5), E, "got int"),
    # ---- generation edit constructors ----------------------------------------------------------------------------
    Case("ban_expert a string expert", lambda x: ilab.ban_expert(0, "a"), ilab.OutOfRangeError, "ints >= 0"),
    Case("ban_expert a negative expert", lambda x: ilab.ban_expert(0, -1), ilab.OutOfRangeError, "ints >= 0"),
    Case("force_token a negative step", lambda x: ilab.force_token(" Mary", -1), ilab.OutOfRangeError,
         "int >= 0"),
    Case("force_token a float step", lambda x: ilab.force_token(" Mary", 1.0), ilab.OutOfRangeError, "int >= 0"),
    # ---- metrics and answers -----------------------------------------------------------------------------------
    Case("logit_diff answer None", lambda x: ilab.logit_diff(None, " John"), E, "single-token string"),
    Case("logit_diff answer a float", lambda x: ilab.logit_diff(5.5, " John"), E, "got float 5.5"),
    Case("logit_diff answers an empty list", lambda x: ilab.logit_diff([], " John"), E, "names no token"),
    Case("prob of None", lambda x: ilab.prob(None), E, "token must be"),
    Case("logprob of a list holding None", lambda x: ilab.logprob([" Mary", None]), E, "got NoneType"),
    Case("metric a string", lambda x: x.sweep(metric="logit_diff"), E, "metric must be ilab.logit_diff"),
    Case("metric missing", lambda x: x.sweep(metric=None), E, "metric= is required"),
    Case("answer the tokenizer maps to its unknown token",
         lambda x: x.unk.patch_sweep("When Mary and John went to the store , John gave a drink to",
                                     "When Mary and John went to the store , Mary gave a drink to",
                                     metric=ilab.logit_diff("Zanzibar", "John"), progress=False),
         ilab.UnknownTokenError, ("'Zanzibar' is not in the vocabulary", "[UNK]", "pass a token id")),
    Case("answer of several tokens", lambda x: x.sweep(metric=ilab.logit_diff(" Zanzibar", " John")),
         ilab.MultiTokenAnswerError, "not one"),
    Case("answer id past the vocabulary", lambda x: x.sweep(metric=ilab.logit_diff(10**6, " John")),
         ilab.OutOfRangeError, "ids are 0..319"),
    Case("per-pair answers: more answers than pairs (the extra was ignored)",
         lambda x: x.sweep(clean=[P, P], corrupt=[C, C], metric=ilab.logit_diff([" Mary"] * 3, [" John"] * 3)),
         ilab.LengthMismatchError, "3 answer tokens for 2 prompt pair(s)"),
    Case("calling a metric that was never bound", lambda x: ilab.logit_diff(" Mary", " John")(torch.zeros(1, 320)),
         E, "bind(lab.token_id)"),
    Case("a metric that returns NaN", lambda x: x.sweep(metric=_nan_metric), E, "returned NaN", ran=True),
    Case("a metric that returns the wrong shape", lambda x: x.sweep(metric=lambda lg: lg[:, :3]), E,
         "one value per row", ran=True),
    # ---- patch_sweep -------------------------------------------------------------------------------------------
    Case("sweep by an int", lambda x: x.sweep(by=5), E, "not a sweep layout"),
    Case("sweep by an unknown layout", lambda x: x.sweep(by=("pos",)), E, "not a sweep layout"),
    Case("sweep a layerless site", lambda x: x.sweep(site="logits"), E, "cannot be swept"),
    Case("sweep an int site", lambda x: x.sweep(site=5), E, "cannot be swept"),
    Case("sweep heads on the residual", lambda x: x.sweep(site="resid_pre", by=("layer", "head")), E,
         "allowed sites z"),
    Case("sweep direction unknown", lambda x: x.sweep(direction="sideways"), E, "'denoise'"),
    Case("sweep method unknown", lambda x: x.sweep(method="fast"), E, "'exact' or 'attribution'"),
    Case("sweep max_batch 0 (was silently 1)", lambda x: x.sweep(max_batch=0), E, "an int >= 1"),
    Case("sweep max_batch a float", lambda x: x.sweep(max_batch=2.5), E, "an int >= 1"),
    Case("sweep max_batch a bool", lambda x: x.sweep(max_batch=True), E, "an int >= 1"),
    Case("sweep progress an int", lambda x: x.sweep(progress=5), E, "a function (done, total)"),
    Case("sweep cancel not an Event", lambda x: x.sweep(cancel=5), E, "threading.Event"),
    Case("sweep on_partial not callable", lambda x: x.sweep(on_partial=5), E, "on_partial=5"),
    Case("sweep layers past the model", lambda x: x.sweep(layers=[7]), ilab.OutOfRangeError, "has 3 layers"),
    Case("sweep prompt lists of different sizes", lambda x: x.sweep(clean=[P, P], corrupt=[C]),
         ilab.LengthMismatchError, "give them in pairs"),
    Case("sweep prompts of different token lengths", lambda x: x.sweep(corrupt="When Mary and Zanzibarquux went"),
         ilab.LengthMismatchError, "different lengths"),
    Case("sweep prompts past the context", lambda x: x.sweep(clean=LONG_P, corrupt=LONG_C), ilab.ContextLengthError,
         ("is 125 tokens", "context is 64 tokens")),
    Case("sweep an empty clean prompt", lambda x: x.sweep(clean=""), ilab.EmptyPromptError, "empty prompt"),
    Case("sweep clean None", lambda x: x.sweep(clean=None), E, "string or a list of strings"),
    # ---- generate ----------------------------------------------------------------------------------------------
    Case("generate from an int", lambda x: x.gen(5), E, "non-empty prompt"),
    Case("generate from an empty prompt", lambda x: x.gen(""), E, "non-empty prompt"),
    Case("generate from a whitespace prompt", lambda x: x.gen("   "), E, "non-empty prompt"),
    Case("generate from no prompts", lambda x: x.gen([]), E, "non-empty prompt"),
    Case("generate edits= one edit, not a list", lambda x: x.gen(edits=ilab.zero("resid_pre", 0)), E,
         "takes a list"),
    Case("generate edits= one sampler edit", lambda x: x.gen(edits=ilab.ban_token(" Mary")), E, "takes a list"),
    Case("generate edits= a string", lambda x: x.gen(edits=["zero"]), E, "unknown edit"),
    Case("generate an edit on a layer past the model", lambda x: x.gen(edits=[ilab.zero("resid_pre", 9)]),
         ilab.OutOfRangeError, "has 3 layers"),
    Case("max_new_tokens 0", lambda x: x.gen(max_new_tokens=0), ilab.OutOfRangeError, ">= 1"),
    Case("max_new_tokens a float", lambda x: x.gen(max_new_tokens=2.5), ilab.OutOfRangeError, "an int >= 1"),
    Case("max_new_tokens NaN (was an IndexError)", lambda x: x.gen(max_new_tokens=NAN), ilab.OutOfRangeError,
         "an int >= 1"),
    Case("max_new_tokens a string", lambda x: x.gen(max_new_tokens="2"), ilab.OutOfRangeError, "an int >= 1"),
    Case("temperature 0", lambda x: x.gen(temperature=0), ilab.NumberError, ("must be > 0", "temperature=None")),
    Case("temperature negative", lambda x: x.gen(temperature=-1.0), ilab.NumberError, "must be > 0"),
    Case("temperature NaN", lambda x: x.gen(temperature=NAN), ilab.NumberError, "finite number"),
    Case("temperature inf", lambda x: x.gen(temperature=INF), ilab.NumberError, "finite number"),
    Case("top_k 0 (was silently no top-k)", lambda x: x.gen(top_k=0), ilab.NumberError, "int >= 1"),
    Case("top_k a float", lambda x: x.gen(top_k=2.5), ilab.NumberError, "int >= 1"),
    Case("top_p 0", lambda x: x.gen(top_p=0.0), ilab.NumberError, "(0, 1]"),
    Case("top_p above 1 (was silently all)", lambda x: x.gen(top_p=1.5), ilab.NumberError, "(0, 1]"),
    Case("top_p NaN", lambda x: x.gen(top_p=NAN), ilab.NumberError, "finite number"),
    Case("seed a string", lambda x: x.gen(seed="a", temperature=1.0), ilab.NumberError, "seed must be an int"),
    Case("greedy a string", lambda x: x.gen(greedy="yes"), E, "greedy must be"),
    Case("on_logits not callable", lambda x: x.gen(on_logits=5), E, "on_logits must be a function"),
    Case("ban_token None", lambda x: x.gen(edits=[ilab.ban_token(None)]), E, "single-token string"),
    Case("ban_token of several tokens", lambda x: x.gen(edits=[ilab.ban_token(" Zanzibar")]),
         ilab.MultiTokenAnswerError, "not one"),
    Case("ban_token id past the vocabulary", lambda x: x.gen(edits=[ilab.ban_token(10**6)]), ilab.OutOfRangeError,
         "out of range"),
    Case("ban_token an unknown word", lambda x: x.unk.generate("Mary and John", [ilab.ban_token("Zanzibar")],
                                                             max_new_tokens=2),
         ilab.UnknownTokenError, "unknown token"),
    Case("force_token past the last step (was silently ignored)",
         lambda x: x.gen(edits=[ilab.force_token(" Mary", 5)], max_new_tokens=2), ilab.OutOfRangeError,
         ("never reached", "0..1")),
    Case("force_token at a bool step", lambda x: x.gen(edits=[ilab.force_token(" Mary", True)]),
         ilab.OutOfRangeError, "never reached"),
    Case("force_token twice at one step (the first was dropped)",
         lambda x: x.gen(edits=[ilab.force_token(" Mary", 0), ilab.force_token(" John", 0)]), E, "one per step"),
    Case("generate a prompt past the context", lambda x: x.gen(LONG), ilab.ContextLengthError,
         ("context is 64 tokens", "Shorten")),
    Case("generate: prompt fits, prompt + max_new_tokens does not", lambda x: x.gen(P, max_new_tokens=60),
         ilab.ContextLengthError, ("60 new tokens", "at most 39 new tokens")),
    # ---- residual_norm -----------------------------------------------------------------------------------------
    Case("residual_norm of attention patterns (was a meaningless number)",
         lambda x: x.lab.residual_norm("pattern", 0), ilab.UnsupportedSiteError, "attention weights"),
    Case("residual_norm at a layer past the model", lambda x: x.lab.residual_norm("resid_post", 9),
         ilab.OutOfRangeError, "has 3 layers"),
    Case("residual_norm at a string layer", lambda x: x.lab.residual_norm("resid_post", "a"), ilab.OutOfRangeError,
         "layer must be an int"),
    Case("residual_norm at a misspelt site", lambda x: x.lab.residual_norm("resid_psot", 0), ilab.UnknownSiteError,
         "resid_psot"),
    Case("residual_norm over no prompts", lambda x: x.lab.residual_norm("resid_post", 0, []),
         ilab.EmptyPromptError, "no prompts"),
    Case("residual_norm over a prompt past the context", lambda x: x.lab.residual_norm("resid_post", 0, [LONG]),
         ilab.ContextLengthError, "context is 64 tokens"),
    # ---- bind / edit -------------------------------------------------------------------------------------------
    Case("bind one edit, not a list", lambda x: x.lab.bind(ilab.zero("resid_pre", 0)), E, "wrap it in a list"),
    Case("bind a string", lambda x: x.lab.bind(["zero"]), E, "edits must be ilab edits"),
    Case("bind a sampler edit", lambda x: x.lab.bind([ilab.ban_token(" Mary")]), E, "lab.generate only"),
    Case("bind an edit on a layer past the model", lambda x: x.lab.bind([ilab.zero("resid_pre", 9)]),
         ilab.OutOfRangeError, "has 3 layers"),
    Case("bind an edit with steps", lambda x: x.lab.bind([ilab.zero("resid_pre", 0, steps=1)]), E,
         "steps= needs"),
    Case("edit block with one edit, not a list", lambda x: _bound(x, ilab.zero("resid_pre", 0)), E,
         "wrap it in a list"),
    Case("edit block on a misspelt site", lambda x: _bound(x, [ilab.zero("resid_psot", 0)]), ilab.UnknownSiteError,
         "resid_psot"),
    # ---- to_str_tokens / token_id ------------------------------------------------------------------------------
    Case("to_str_tokens of an int", lambda x: x.lab.to_str_tokens(5), E, "one prompt string"),
    Case("to_str_tokens of a list (came back nested)", lambda x: x.lab.to_str_tokens([P]), E,
         "[lab.to_str_tokens(p) for p in prompts]"),
    Case("to_str_tokens of None", lambda x: x.lab.to_str_tokens(None), E, "one prompt string"),
    Case("token_id of None", lambda x: x.lab.token_id(None), E, "got NoneType"),
    Case("token_id of a float", lambda x: x.lab.token_id(1.0), E, "got float"),
    Case("token_id of a bool (was returned as id 1)", lambda x: x.lab.token_id(True), E, "got bool"),
    Case("token_id negative", lambda x: x.lab.token_id(-1), ilab.OutOfRangeError, "ids are 0..319"),
    Case("token_id past the vocabulary", lambda x: x.lab.token_id(10**6), ilab.OutOfRangeError, "out of range"),
    Case("token_id of several tokens", lambda x: x.lab.token_id(" Zanzibar"), ilab.MultiTokenAnswerError,
         "single tokens"),
    Case("token_id of an empty string", lambda x: x.lab.token_id(""), ilab.MultiTokenAnswerError, "0 tokens"),
    Case("token_id of an unknown word", lambda x: x.unk.token_id("Zanzibar"), ilab.UnknownTokenError,
         ("not in the vocabulary", "[UNK]")),
    # ---- vectors ------------------------------------------------------------------------------------------------
    Case("SteeringVector with NaN", lambda x: ilab.SteeringVector(x.nan_vec()), ilab.VectorError, "NaN/Inf"),
    Case("SteeringVector with inf", lambda x: ilab.SteeringVector(x.nan_vec(-INF)), ilab.VectorError, "NaN/Inf"),
    Case("SteeringVector empty", lambda x: ilab.SteeringVector(torch.ones(0)), ilab.VectorError, "1-D [width]"),
    Case("SteeringVector 2-D", lambda x: ilab.SteeringVector(torch.ones(2, D)), ilab.VectorError, "1-D [width]"),
    Case("SteeringVector of a string", lambda x: ilab.SteeringVector("love"), ilab.VectorError,
         "tensor or a list of numbers"),
    Case("SteeringVector with a string layer", lambda x: ilab.SteeringVector(x.v, layer="3"), E,
         "layer is an int"),
    Case("SteeringVector.unit of zero", lambda x: ilab.SteeringVector(x.zeros).unit(), ilab.VectorError,
         "zero vector"),
    Case("SteeringVector.steer alpha NaN", lambda x: ilab.SteeringVector(x.v, layer=1).steer(alpha=NAN),
         ilab.NumberError, "alpha=nan"),
    Case("SteeringVector.project a zero vector", lambda x: ilab.SteeringVector(x.zeros, layer=1).project(),
         ilab.VectorError, "zero vector"),
    Case("SteeringVector.clamp lo > hi", lambda x: ilab.SteeringVector(x.v, layer=1).clamp(lo=1.0, hi=0.0),
         ilab.NumberError, "lo=1 > hi=0"),
    Case("vectors.from_tensor NaN", lambda x: vectors.from_tensor(x.nan_vec()), ilab.VectorError, "NaN/Inf"),
    Case("vectors.from_tensor a string", lambda x: vectors.from_tensor("love"), ilab.VectorError,
         "tensor or a list of numbers"),
    Case("vectors.save into a missing folder", lambda x: vectors.save(x.tmp / "no" / "v.safetensors", x.v), E,
         ("does not exist", "os.makedirs")),
    Case("vectors.save a NaN vector", lambda x: vectors.save(x.tmp / "v.safetensors", x.nan_vec()),
         ilab.VectorError, "NaN/Inf"),
    Case("vectors.save metadata not a dict", lambda x: vectors.save(x.tmp / "v.safetensors", x.v, metadata=5),
         E, "metadata must be a dict"),
    Case("vectors.load a missing file", lambda x: vectors.load(x.tmp / "none.safetensors"), ilab.LoadError,
         "could not read"),
    Case("vectors.load a text file", lambda x: vectors.load(x.file("v.safetensors", "not safetensors")),
         ilab.LoadError, "could not read"),
    Case("diff_of_means given the model, not the lab", lambda x: vectors.diff_of_means(
        x.lab.model, ["I love it"], ["I hate it"]), E, "must be an ilab.Lab"),
    Case("diff_of_means of no prompts", lambda x: vectors.diff_of_means(x.lab, [], ["I hate it"]),
         ilab.EmptyPromptError, "no prompts"),
    Case("diff_of_means of a prompt past the context (Compute vector)",
         lambda x: vectors.diff_of_means(x.lab, [LONG], ["I hate it"]), ilab.ContextLengthError,
         ("context is 64 tokens", "Shorten")),
    Case("diff_of_means pos a float", lambda x: vectors.diff_of_means(x.lab, ["a"], ["b"], pos=1.5), E,
         "pos must be an int"),
    Case("diff_of_means pos past a prompt", lambda x: vectors.diff_of_means(x.lab, ["a"], ["b"], pos=50), E,
         "out of range", ran=True),
    Case("diff_of_means of attention patterns", lambda x: vectors.diff_of_means(x.lab, ["a"], ["b"],
                                                                                     site="pattern"),
         ilab.UnsupportedSiteError, "'resid_post'"),
    Case("diff_of_means at a layer past the model", lambda x: vectors.diff_of_means(x.lab, ["a"], ["b"],
                                                                                         layer=9),
         ilab.OutOfRangeError, "has 3 layers"),
    Case("diff_of_means of a non-string prompt", lambda x: vectors.diff_of_means(x.lab, [None], ["b"]), E,
         "prompts must be strings"),
    # ---- logit_lens --------------------------------------------------------------------------------------------
    Case("logit_lens past the context", lambda x: logit_lens(x.lab, LONG), ilab.ContextLengthError,
         "context is 64 tokens"),
    Case("logit_lens k 0", lambda x: logit_lens(x.lab, P, k=0), E, "an int in 1..320"),
    Case("logit_lens k past the vocabulary", lambda x: logit_lens(x.lab, P, k=10**6), E, "an int in 1..320"),
    Case("logit_lens k a string", lambda x: logit_lens(x.lab, P, k="5"), E, "an int in 1..320"),
    Case("logit_lens of attention patterns", lambda x: logit_lens(x.lab, P, site="pattern"),
         ilab.UnsupportedSiteError, "resid_post"),
    Case("logit_lens of z", lambda x: logit_lens(x.lab, P, site="z"), ilab.UnsupportedSiteError, "resid_pre"),
    Case("logit_lens of a list (showed only the first)", lambda x: logit_lens(x.lab, [P, C]), E,
         "one prompt string"),
    Case("logit_lens of an empty prompt", lambda x: logit_lens(x.lab, ""), ilab.EmptyPromptError, "empty prompt"),
    Case("logit_lens without the lab", lambda x: logit_lens(P, P), E, "must be an ilab.Lab"),
]


@pytest.fixture()
def env(models, tokenizer, unk_tokenizer, tmp_path):
    return Env(models, tokenizer, unk_tokenizer, tmp_path)


def _fragments(case: Case) -> tuple[str, ...]:
    return (case.fragment,) if isinstance(case.fragment, str) else case.fragment


def test_catalogue_is_well_formed():
    whats = [c.what for c in CASES]
    assert len(whats) == len(set(whats)), "two cases share a description"
    for c in CASES:
        assert issubclass(c.error, ilab.InterplabError) and _fragments(c), c.what


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_bad_input(case, env, models):
    watched = [models["gpt2"], models["llama"]]  # every lab in Env runs one of these
    weights = [param_hash(m) for m in watched]
    forwards = {"n": 0}

    def count(module, args):
        forwards["n"] += 1

    # counted at the embedding, which every forward (and every resumed sweep forward) goes through
    counters = [m.get_input_embeddings().register_forward_pre_hook(count) for m in watched]
    try:
        hooks = [{id(h) for _, _, h in hooks_everywhere(m)} for m in watched]
        with pytest.raises(case.error) as info:
            case.call(env)
        left = [[(n, k) for n, k, h in hooks_everywhere(m) if id(h) not in before]
                for m, before in zip(watched, hooks)]
    finally:
        for c in counters:
            c.remove()
    err = info.value
    assert isinstance(err, ilab.InterplabError) and isinstance(err, ValueError)
    msg = str(err)
    for fragment in _fragments(case):
        assert fragment in msg, f"{fragment!r} not in the message: {msg}"
    assert left == [[], []], f"hooks left on the model: {left}"
    assert engine.attached_hooks() == [] and env.lab.bound == []
    assert [param_hash(m) for m in watched] == weights, "a weight changed"
    if not case.ran:  # checked before the model runs: no forward at all
        assert forwards["n"] == 0, f"the model ran {forwards['n']} time(s) before the error"


# ---- the context-length message, exactly ------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["run", "sweep", "compute vector", "residual_norm", "logit_lens", "generate"])
def test_context_message_names_the_token_count_and_the_limit(env, tokenizer, where):
    n = len(tokenizer(LONG_P)["input_ids"])
    assert n > 64
    calls = {
        "run": lambda: env.lab.run(LONG_P),
        "sweep": lambda: env.sweep(clean=LONG_P, corrupt=LONG_C),
        "compute vector": lambda: vectors.diff_of_means(env.lab, ["I love it"], [LONG_P]),
        "residual_norm": lambda: env.lab.residual_norm("resid_post", 0, [LONG_P]),
        "logit_lens": lambda: logit_lens(env.lab, LONG_P),
        "generate": lambda: env.gen(LONG_P, max_new_tokens=3),
    }
    with pytest.raises(ilab.ContextLengthError) as info:
        calls[where]()
    msg = str(info.value)
    assert isinstance(info.value, ilab.OutOfRangeError)
    assert f"is {n} tokens" in msg and "context is 64 tokens (config." in msg, msg
    assert ("Shorten the prompt to at most 61 tokens" if where == "generate" else "Shorten it to at most 64") in msg


def test_the_context_limit_itself_is_allowed(env, tokenizer):
    ids = tokenizer(LONG)["input_ids"][:64]
    prompt = tokenizer.decode(ids)
    assert len(tokenizer(prompt)["input_ids"]) == 64
    assert env.lab.run(prompt).logits.shape[1] == 64
    assert env.llama.run(prompt).logits.shape[1] == 64
    short = tokenizer.decode(ids[:60])
    assert len(env.gen(short, max_new_tokens=4).new_ids) == 4  # 60 + 4 = 64 fits exactly
    with pytest.raises(ilab.ContextLengthError):
        env.gen(short, max_new_tokens=5)


def test_context_limit_read_from_the_config(models):
    from interplab.errors import context_window

    assert context_window(models["gpt2"]) == (64, "max_position_embeddings")  # GPT-2: n_positions, aliased
    assert context_window(models["llama"]) == (64, "max_position_embeddings")
    assert context_window(torch.nn.Linear(2, 2)) == (None, "")  # no config: nothing to check against


# ---- the unknown token --------------------------------------------------------------------------------------------

def test_unknown_token_rule(env, unk_tokenizer):
    unk = unk_tokenizer.unk_token_id
    assert env.unk.token_id("[UNK]") == unk  # asking for the unknown token by name is allowed
    assert env.unk.token_id("John") != unk
    assert env.unk.token_id(unk) == unk
    assert env.lab.tokenizer.unk_token_id is None  # byte-level BPE: nothing is unknown, the rule never fires
    assert env.lab.token_id(" John") >= 0


# ---- the neighbours of rejected values stay allowed ----------------------------------------------------------------

def test_valid_neighbours_are_accepted(env):
    lab, v = env.lab, env.v
    edits = [
        ilab.scale("resid_post", 1, 0.0), ilab.scale("resid_post", 1, -2), ilab.scale("resid_post", 1, np.float32(2)),
        ilab.scale("resid_post", 1, torch.tensor(0.5)),
        ilab.steer("resid_post", 1, v, alpha=-1e6), ilab.steer("resid_post", 1, torch.ones(D, dtype=torch.long)),
        ilab.project("resid_post", 1, torch.full((D,), 1e-3), coeff=2),
        ilab.clamp("resid_post", 1, v, lo=1.0, hi=1.0), ilab.clamp("resid_post", 1, v, hi=-3),
        ilab.set_value("resid_post", 0, torch.zeros(D), pos=[0, -1]),
        ilab.zero("resid_pre", np.int64(0), pos=np.int64(-1)), ilab.zero("z", torch.tensor(1), head=range(2)),
        ilab.zero("resid_pre", slice(0, 2), pos=slice(None, None, -1)),
        ilab.mean_ablate("resid_pre", 0, reference=[lab.run(C), lab.run("The capital of France is")]),
        ilab.patch("resid_pre", 0, source=C),
    ]
    out = lab.run([P, C], edits=edits)
    assert torch.isfinite(out.logits).all()
    assert [ilab.Edit.from_json(e.to_json()).to_dict() for e in edits[:-2]] == [e.to_dict() for e in edits[:-2]]
    assert lab.token_id(np.int64(5)) == 5
    assert lab.to_str_tokens("") == []  # a pure query: nothing to tokenize is not an error
    g = lab.generate([P, C], [ilab.force_token(" Mary", 1)], max_new_tokens=2, temperature=0.5, top_k=1,
                     top_p=1.0, seed=0)
    assert len(g.texts) == 2
    res = lab.patch_sweep([P, P], [C, C], metric=ilab.logit_diff([" Mary", " Mary"], " John"), by=["layer"],
                          max_batch=1, progress=lambda done, total: None, cancel=threading.Event())
    assert res.values.shape == (3,)
    sv = vectors.from_tensor([1.0] * D, layer=1)
    vectors.save(env.tmp / "v.safetensors", sv, metadata={"note": "ok"})
    assert torch.equal(vectors.load(env.tmp / "v.safetensors").tensor, sv.tensor)
    assert logit_lens(lab, P, site="mlp_out", k=320).top_ids.shape[-1] == 320
    assert lab.residual_norm("mlp_out", 2) > 0
