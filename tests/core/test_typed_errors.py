"""The last raw errors and silent results (issue #40): each bad call raises an InterplabError that names the
argument and what to pass, before any work, leaving no hook behind; a question a method cannot answer is refused
or marked not answered, never answered with 0; one rule for negative layers everywhere (-1 = the last layer)."""

from __future__ import annotations

import math

import pytest
import torch

import interplab as ilab
from interplab.errors import InterplabError

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def raises(fn, *words):
    with pytest.raises(InterplabError) as info:
        fn()
    for w in words:
        assert w in str(info.value), str(info.value)
    assert not ilab.attached_hooks()
    return str(info.value)


@pytest.mark.parametrize("kw, words", [
    ({"dtype": 3}, ["dtype=3", "torch.float16"]),
    ({"dtype": "tensor"}, ["dtype='tensor'"]),
    ({"device": "banana"}, ["device='banana'", "'cpu'"]),
    ({"device": "cuda:7"}, ["device='cuda:7'"]),
])
def test_lab_load_refuses_a_bad_dtype_or_device_before_loading(kw, words, monkeypatch):
    import transformers

    def no_load(*a, **k):  # the refusal must come before any weights are read
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_load)
    if kw.get("device") == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    raises(lambda: ilab.Lab.load("ioi-tiny", **kw), *words)


def test_lab_of_objects_refuses_a_bad_device(models, tokenizer):
    raises(lambda: ilab.Lab(models["gpt2"], tokenizer, device="banana"), "device='banana'")
    raises(lambda: ilab.Lab(models["gpt2"], tokenizer, dtype="float17"), "dtype='float17'")
    assert next(models["gpt2"].parameters()).device.type == "cpu"


def test_edits_from_json_says_what_it_needs():
    raises(lambda: ilab.edits_from_json("not json"), "edits_from_json", "not JSON")
    raises(lambda: ilab.edits_from_json('{"site": "z"}'), "a JSON list of edit objects")
    raises(lambda: ilab.edits_from_json(None), "edits_from_json")
    edits = [ilab.zero("resid_pre", 1, pos=2)]
    assert ilab.edits_from_json(ilab.edits_to_json(edits))[0].to_dict() == edits[0].to_dict()


def test_run_refuses_a_grad_or_log_that_is_not_a_bool(gpt2_lab):
    raises(lambda: gpt2_lab.run(CLEAN, grad="yes"), "grad='yes'", "True or False")
    raises(lambda: gpt2_lab.run(CLEAN, log=1), "log=1")


def test_an_infinite_metric_is_refused_not_swept_into_nan(gpt2_lab):
    def inf_metric(logits):
        return torch.full((logits.shape[0],), math.inf)

    raises(lambda: gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=inf_metric, progress=False), "infinite value")


def test_path_patching_refuses_senders_that_cannot_reach_their_receivers(gpt2_lab):
    metric = ilab.logit_diff(5, 9)
    n = gpt2_lab.n_layers
    last = n - 1
    raises(lambda: gpt2_lab.path_patch(CLEAN, CORRUPT, metric, senders=[(last, 0)], receivers=[(1, 0, "q")]),
           "L" + str(last) + "H0", "earliest receiver is in layer 1")
    raises(lambda: gpt2_lab.path_patch(CLEAN, CORRUPT, metric, senders=[(1, 1)], receivers=[(1, 0, "q")]),
           "L1H1", "own layer")
    # every head as senders (the default): those at or after the receiver are not answered (NaN), not 0
    res = gpt2_lab.path_patch(CLEAN, CORRUPT, metric, receivers=[(1, 0, "q")])
    assert torch.isnan(res.values[0, 1:]).all() and torch.isfinite(res.values[0, :1]).all()
    view = res.show()
    assert view is None or all(v is None or v == v for v in view.bars.values)


def test_negative_layers_follow_one_rule(gpt2_lab):
    n = gpt2_lab.n_layers
    run = gpt2_lab.run(CLEAN, cache=[("resid_pre", -1)])  # accepted, as in edits
    assert torch.equal(run.cache["resid_pre", -1], run.cache["resid_pre", n - 1])
    full = gpt2_lab.run(CLEAN, cache=["resid_pre"])
    assert torch.equal(run.cache["resid_pre", -1], full.cache["resid_pre", n - 1])
    a = gpt2_lab.run(CLEAN, edits=[ilab.zero("resid_pre", -1, pos=3)]).last_logits
    b = gpt2_lab.run(CLEAN, edits=[ilab.zero("resid_pre", n - 1, pos=3)]).last_logits
    assert torch.equal(a, b)
    for call in (lambda: gpt2_lab.run(CLEAN, edits=[ilab.zero("resid_pre", -n - 1)]),
                 lambda: gpt2_lab.run(CLEAN, cache=[("resid_pre", -n - 1)])):
        raises(call, f"layer={-n - 1} out of range", f"-{n}..-1")


def test_a_layer_head_pair_where_a_layer_goes_is_refused_everywhere(gpt2_lab):
    """A (layer, head) tuple passed as the layer (a head from a list of heads, `patch("z", sender, ...)`) was read
    as two layers and ran; it is now refused wherever a layer goes, naming both readings. Several layers: a list."""
    run = gpt2_lab.run(CLEAN)
    calls = [lambda: ilab.patch("z", (1, 2), head=0, source=run), lambda: ilab.zero("z", (1, 2)),
             lambda: ilab.Edit("zero", "z", (1, 2)), lambda: gpt2_lab.run(CLEAN, cache=[("resid_pre", (1, 2))]),
             lambda: gpt2_lab.residual_norm("resid_pre", (1, 2)),
             lambda: gpt2_lab.patch_sweep(CLEAN, CORRUPT, "z", ("layer", "head"), ilab.logit_diff(" Mary", " John"),
                                          layers=(1, 2), progress=False)]
    for call in calls:
        raises(call, "layer=(1, 2) is a tuple", "(layer=1, head=2)", "layer=[1, 2]")
    # a list of layers still means several layers
    a = gpt2_lab.run(CLEAN, edits=[ilab.zero("resid_pre", [1, 2], pos=3)]).last_logits
    b = gpt2_lab.run(CLEAN, edits=[ilab.zero("resid_pre", 1, pos=3), ilab.zero("resid_pre", 2, pos=3)]).last_logits
    assert torch.allclose(a, b, atol=1e-5)
