"""Transcoders in circuit-tracer's formats, written here as circuit-tracer's loaders read them (its
single_layer_transcoder.load_relu_transcoder and cross_layer_transcoder.load_clt):

- a transcoder set: config.yaml (model_kind: transcoder_set, feature_input_hook, feature_output_hook, transcoders: one
  path per layer) or layer_N.safetensors beside it; each file W_enc [d_tc, d_in], W_dec [d_tc, d_out], b_enc, b_dec,
  W_skip applied as x @ W_skip.T, activation_function.threshold for a JumpReLU;
- a cross-layer transcoder: W_enc_N.safetensors (W_enc_N [d_tc, d_in], b_enc_N, b_dec_N, threshold_N) and
  W_dec_N.safetensors (W_dec_N [d_tc, n_layers - N, d_out]) per layer.

Each loaded set is checked against the tensors written (the layouts' transposes), its arithmetic against the formula
written out here, and its graph against the graph of the same weights built in memory; bad files get LoadError."""

from __future__ import annotations

import pytest
import torch
import yaml
from safetensors.torch import save_file

import interplab as ilab
from interplab.analyses.graph import attribution_graph
from interplab.errors import LoadError

PROMPT = "When Mary and John went to the store, John gave a drink to"
D, D_TC, N_LAYERS = 128, 32, 4


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def ct_params(seed=0, skip=True, jumprelu=True, low=0.2) -> list[dict]:
    """Per-layer tensors in circuit-tracer's layout (JumpReLU thresholds in [low, low + 0.2])."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(N_LAYERS):
        p = {"W_enc": torch.randn(D_TC, D, generator=g) / D ** 0.5, "W_dec": torch.randn(D_TC, D, generator=g) / 6,
             "b_enc": torch.randn(D_TC, generator=g) * 0.1, "b_dec": torch.randn(D, generator=g) * 0.1}
        if skip:
            p["W_skip"] = torch.randn(D, D, generator=g) * 0.05
        if jumprelu:
            p["activation_function.threshold"] = low + torch.rand(D_TC, generator=g) * 0.2
        out.append(p)
    return out


def write_set(folder, params, *, listed=True, **config) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, p in enumerate(params):
        save_file({k: v.contiguous() for k, v in p.items()}, folder / f"layer_{i}.safetensors")
        paths.append(str(folder / f"layer_{i}.safetensors"))
    cfg = {"model_kind": "transcoder_set", "feature_input_hook": "mlp.hook_in", "feature_output_hook": "mlp.hook_out",
           "scan": "test", **({"transcoders": paths} if listed else {}), **config}
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))


def test_a_circuit_tracer_transcoder_set(tmp_path, lab):
    params = ct_params()
    write_set(tmp_path / "set", params)
    tcs = ilab.Transcoders.load(tmp_path / "set" / "config.yaml")
    assert len(tcs) == N_LAYERS and tcs.has_skip
    for layer, (t, p) in enumerate(zip(tcs, params)):
        assert t.layer == layer and t.activation == "jumprelu"
        assert torch.equal(t.W_enc, p["W_enc"].T) and torch.equal(t.W_dec, p["W_dec"])
        assert torch.equal(t.W_skip, p["W_skip"].T) and torch.equal(t.threshold, p["activation_function.threshold"])
    # its arithmetic is circuit-tracer's: JumpReLU of x @ W_enc.T + b_enc, decoded, plus x @ W_skip.T
    x = torch.randn(5, D, generator=torch.Generator().manual_seed(3))
    p = params[2]
    pre = x @ p["W_enc"].T + p["b_enc"]
    f = pre * (pre > p["activation_function.threshold"])
    want = f @ p["W_dec"] + p["b_dec"] + x @ p["W_skip"].T
    assert (tcs[2](x) - want).abs().max() <= 1e-5 * want.abs().max()
    # the folder (config.yaml inside) and a config without `transcoders` (layer_N.safetensors beside it) read the same
    write_set(tmp_path / "beside", params, listed=False)
    for other in (ilab.Transcoders.load(tmp_path / "set"), ilab.Transcoders.load(tmp_path / "beside")):
        assert all(torch.equal(a.W_enc, b.W_enc) and torch.equal(a.W_skip, b.W_skip) for a, b in zip(tcs, other))
    # the graph of the loaded set is the graph of the same weights built in memory
    built = ilab.Transcoders([ilab.Transcoder(p["W_enc"].T, p["b_enc"], p["W_dec"], p["b_dec"], layer=i,
                                              activation="jumprelu", threshold=p["activation_function.threshold"],
                                              W_skip=p["W_skip"].T) for i, p in enumerate(params)])
    a = attribution_graph(lab, PROMPT, tcs, progress=False)
    b = attribution_graph(lab, PROMPT, built, progress=False)
    assert torch.equal(a.features, b.features) and a.n_features > 20
    assert (a.adjacency - b.adjacency).abs().max() <= 1e-6 * b.adjacency.abs().max()


def test_circuit_tracer_jumprelu_has_no_relu_below_a_negative_threshold(tmp_path):
    """circuit-tracer's JumpReLU is pre * (pre > threshold): with a negative threshold, a pre-activation between it
    and 0 passes, negative. SAELens's (relu(pre) * (pre > threshold)) would give 0 there."""
    params = ct_params(skip=False, low=-0.3)
    write_set(tmp_path / "set", params)
    tcs = ilab.Transcoders.load(tmp_path / "set")
    assert all(t.gate_only for t in tcs) and "gate only" in repr(tcs[0])
    x = torch.randn(64, D, generator=torch.Generator().manual_seed(5))
    p = params[1]
    pre = x @ p["W_enc"].T + p["b_enc"]
    want = pre * (pre > p["activation_function.threshold"])
    assert (want < 0).sum() > 20  # the case is exercised: negative activations
    assert (tcs[1].encode(x) - want).abs().max() <= 1e-5 * want.abs().max()
    saelens = ilab.Transcoder(p["W_enc"].T, p["b_enc"], p["W_dec"], p["b_dec"], layer=1, activation="jumprelu",
                              threshold=p["activation_function.threshold"])
    assert (saelens.encode(x) >= 0).all() and saelens.digest != tcs[1].digest
    with pytest.raises(LoadError, match="gate_only"):
        ilab.Transcoder(p["W_enc"].T, p["b_enc"], p["W_dec"], p["b_dec"], layer=1, activation="relu", gate_only=True)


def test_a_relu_set_without_skip(tmp_path):
    write_set(tmp_path / "relu", ct_params(skip=False, jumprelu=False))
    tcs = ilab.Transcoders.load(tmp_path / "relu")
    assert all(t.activation == "relu" and t.W_skip is None for t in tcs) and not tcs.has_skip


def test_bad_circuit_tracer_sets_are_refused(tmp_path):
    params = ct_params()
    write_set(tmp_path / "resid", params, feature_input_hook="hook_resid_mid")
    with pytest.raises(LoadError, match="MLP's input"):  # read elsewhere than the MLP's input: not a replacement
        ilab.Transcoders.load(tmp_path / "resid")
    write_set(tmp_path / "kind", params, model_kind="cross_layer_transcoder")
    with pytest.raises(LoadError, match="CrossLayerTranscoder.load"):
        ilab.Transcoders.load(tmp_path / "kind")
    write_set(tmp_path / "other", params, model_kind="sae")
    with pytest.raises(LoadError, match="transcoder_set"):
        ilab.Transcoders.load(tmp_path / "other")
    lacking = [dict(p) for p in params]
    del lacking[1]["W_dec"]
    write_set(tmp_path / "lacking", lacking)
    with pytest.raises(LoadError, match="lacks W_dec"):
        ilab.Transcoders.load(tmp_path / "lacking")
    write_set(tmp_path / "gone", params)
    (tmp_path / "gone" / "layer_2.safetensors").unlink()
    with pytest.raises(LoadError, match="does not exist"):
        ilab.Transcoders.load(tmp_path / "gone")
    write_set(tmp_path / "gap", params, listed=False)
    (tmp_path / "gap" / "layer_1.safetensors").unlink()
    with pytest.raises(LoadError, match="0..n-1"):
        ilab.Transcoders.load(tmp_path / "gap")
    write_set(tmp_path / "torn", params)
    (tmp_path / "torn" / "layer_0.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(LoadError, match="could not read"):
        ilab.Transcoders.load(tmp_path / "torn")
    (tmp_path / "yaml").mkdir()
    (tmp_path / "yaml" / "config.yaml").write_text("model_kind: [unclosed")
    with pytest.raises(LoadError, match="could not read"):
        ilab.Transcoders.load(tmp_path / "yaml")
    wrong = [dict(p) for p in params]
    wrong[3]["W_dec"] = wrong[3]["W_dec"][:-1]  # one feature fewer than the encoder
    write_set(tmp_path / "wrong", wrong)
    with pytest.raises(LoadError, match="W_dec has shape"):
        ilab.Transcoders.load(tmp_path / "wrong")


# ---- cross-layer transcoders ------------------------------------------------------------------------------------
def ct_clt(seed=0, threshold=True, low=0.2) -> dict:
    g = torch.Generator().manual_seed(seed)
    p = {}
    for i in range(N_LAYERS):
        p[f"W_enc_{i}"] = torch.randn(D_TC, D, generator=g) / D ** 0.5
        p[f"b_enc_{i}"] = torch.randn(D_TC, generator=g) * 0.1
        p[f"b_dec_{i}"] = torch.randn(D, generator=g) * 0.1
        if threshold:
            p[f"threshold_{i}"] = low + torch.rand(D_TC, generator=g) * 0.2
        p[f"W_dec_{i}"] = torch.randn(D_TC, N_LAYERS - i, D, generator=g) / 10
    return p


def write_clt(folder, p: dict) -> None:
    """As circuit-tracer's CrossLayerTranscoder.to_safetensors writes: encoders, biases and thresholds in W_enc_N,
    decoders in W_dec_N."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(N_LAYERS):
        save_file({k: v.contiguous() for k, v in p.items() if k.endswith(f"_{i}") and not k.startswith("W_dec")},
                  folder / f"W_enc_{i}.safetensors")
        save_file({f"W_dec_{i}": p[f"W_dec_{i}"].contiguous()}, folder / f"W_dec_{i}.safetensors")


def test_a_circuit_tracer_cross_layer_transcoder(tmp_path):
    p = ct_clt(low=-0.3)  # thresholds negative: its JumpReLU has no ReLU
    write_clt(tmp_path / "clt", p)
    clt = ilab.CrossLayerTranscoder.load(tmp_path / "clt")
    assert (clt.n_layers, clt.d_in, clt.d_tc, clt.activation) == (N_LAYERS, D, D_TC, "jumprelu")
    for i in range(N_LAYERS):
        assert torch.equal(clt.W_enc[i], p[f"W_enc_{i}"].T) and torch.equal(clt.W_dec[i], p[f"W_dec_{i}"])
    # circuit-tracer's arithmetic: JumpReLU f * (f > threshold); MLP l's output sums the decoders of layers <= l
    xs = torch.randn(N_LAYERS, 5, D, generator=torch.Generator().manual_seed(4))
    acts = []
    for i in range(N_LAYERS):
        pre = xs[i] @ p[f"W_enc_{i}"].T + p[f"b_enc_{i}"]
        acts.append(pre * (pre > p[f"threshold_{i}"]))
        assert (acts[i] < 0).any()
        assert (clt.encode_at(i, xs[i]) - acts[i]).abs().max() <= 1e-5 * acts[i].abs().max()
    want = p["b_dec_2"] + sum(acts[s] @ p[f"W_dec_{s}"][:, 2 - s] for s in range(3))
    assert (clt.output_at(2, acts, xs[2]) - want).abs().max() <= 1e-5 * want.abs().max()
    with pytest.raises(LoadError, match="CrossLayerTranscoder.load"):  # not a per-layer set
        ilab.Transcoders.load(tmp_path / "clt")
    # a config.yaml beside the files is checked for where the features read and write
    (tmp_path / "clt" / "config.yaml").write_text(yaml.safe_dump({
        "model_kind": "cross_layer_transcoder", "feature_input_hook": "hook_resid_mid",
        "feature_output_hook": "hook_mlp_out"}))
    with pytest.raises(LoadError, match="MLP's input"):
        ilab.CrossLayerTranscoder.load(tmp_path / "clt")
    with pytest.raises(LoadError, match="CrossLayerTranscoder.load"):
        ilab.Transcoders.load(tmp_path / "clt")


def test_bad_cross_layer_files_are_refused(tmp_path):
    p = ct_clt()
    write_clt(tmp_path / "short", {**p, "W_dec_1": p["W_dec_1"][:, :2]})  # a decoder that misses the last layer
    with pytest.raises(LoadError, match=r"W_dec\[1\] has shape"):
        ilab.CrossLayerTranscoder.load(tmp_path / "short")
    write_clt(tmp_path / "gone", p)
    (tmp_path / "gone" / "W_dec_3.safetensors").unlink()
    with pytest.raises(LoadError, match="does not exist"):
        ilab.CrossLayerTranscoder.load(tmp_path / "gone")
    write_clt(tmp_path / "thr", {k: v for k, v in p.items() if k != "threshold_2"})
    with pytest.raises(LoadError, match="threshold_N"):
        ilab.CrossLayerTranscoder.load(tmp_path / "thr")
    write_clt(tmp_path / "bias", {k: v for k, v in p.items() if k != "b_enc_0"})
    with pytest.raises(LoadError, match="lacks b_enc_0"):
        ilab.CrossLayerTranscoder.load(tmp_path / "bias")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError, match="W_enc_0.safetensors"):
        ilab.CrossLayerTranscoder.load(tmp_path / "empty")
    with pytest.raises(LoadError, match="no transcoder at"):
        ilab.CrossLayerTranscoder.load(tmp_path / "nowhere")
