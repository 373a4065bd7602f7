"""SAE.load: SAELens folders (standard, topk, jumprelu; cfg formats before and after SAELens 6), Gemma Scope
params.npz, hub ids without network, and typed errors for every kind of bad folder. Encode and decode are checked
against the SAE arithmetic written out in tests/features/_saes.py."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import interplab as ilab
from interplab.errors import LoadError, OutOfRangeError, UnsupportedSiteError

from ._saes import hand_decode, hand_encode, random_sae


@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu", "topk-wide", "gated"])
def test_saved_folder_reloads_with_the_same_arithmetic(tmp_path, arch):
    # topk-wide: k = 48 of 64, so some of the top k pre-activations are negative (the ReLU after the top-k matters)
    sae = random_sae("topk", k=48) if arch == "topk-wide" else random_sae(arch)
    arch = sae.architecture
    sae.save(tmp_path / "sae")
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["architecture"] == arch and cfg["metadata"]["hook_name"] == "blocks.2.hook_resid_pre"
    back = ilab.SAE.load(tmp_path / "sae")
    assert (back.site, back.layer, back.d_in, back.d_sae, back.architecture) == ("resid_pre", 2, 128, 64, arch)
    x = torch.randn(3, 5, 128)
    f = back.encode(x)
    assert torch.allclose(f.double(), hand_encode(sae, x), atol=1e-5)
    assert (f > 0).sum(-1).float().mean() > 0  # some features fire: the comparison is not between zeros
    if arch == "topk":
        assert ((f != 0).sum(-1) <= sae.k).all()
    assert torch.allclose(back.decode(f).double(), hand_decode(sae, f), atol=1e-5)


def _write(folder, cfg, tensors):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cfg.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in tensors.items()}, folder / "sae_weights.safetensors")
    return folder


def _tensors(sae):
    out = {"W_enc": sae.W_enc, "b_enc": sae.b_enc, "W_dec": sae.W_dec, "b_dec": sae.b_dec}
    if sae.threshold is not None:
        out["threshold"] = sae.threshold
    if sae.architecture == "gated":
        out.update(b_mag=out.pop("b_enc"), b_gate=sae.b_gate, r_mag=sae.r_mag)
    return out


def test_pre_6_config_hook_point_and_topk_activation(tmp_path):
    sae = random_sae("topk", k=5)
    cfg = {"d_in": 128, "d_sae": 64, "hook_point": "blocks.1.hook_mlp_out", "activation_fn_str": "topk",
           "activation_fn_kwargs": {"k": 5}, "apply_b_dec_to_input": False, "normalize_activations": False}
    back = ilab.SAE.load(_write(tmp_path / "old", cfg, _tensors(sae)))
    assert (back.site, back.layer, back.architecture, back.k, back.apply_b_dec_to_input) == ("mlp_out", 1, "topk",
                                                                                           5, False)
    x = torch.randn(4, 128)
    assert torch.allclose(back.encode(x).double(), hand_encode(back, x), atol=1e-5)


@pytest.mark.parametrize("hook, site, layer", [("blocks.0.hook_resid_pre", "resid_pre", 0),
                                               ("blocks.3.hook_resid_post", "resid_post", 3),
                                               ("blocks.1.hook_resid_mid", "resid_mid", 1),
                                               ("blocks.2.hook_attn_out", "attn_out", 2),
                                               ("blocks.2.attn.hook_z", "z", 2), ("hook_embed", "embed", None)])
def test_hook_names_map_to_sites(hook, site, layer):
    assert ilab.sae.site_of_hook(hook) == (site, layer)


def test_normalisations_as_saelens_defines_them(tmp_path):
    sae = random_sae("standard")
    x = torch.randn(6, 128) * 3
    for norm in ("constant_norm_rescale", "layer_norm"):
        cfg = {"architecture": "standard", "d_in": 128, "d_sae": 64, "normalize_activations": norm,
               "metadata": {"hook_name": "blocks.2.hook_resid_pre"}}
        s = ilab.SAE.load(_write(tmp_path / norm, cfg, _tensors(sae)))
        if norm == "constant_norm_rescale":
            c = 128 ** 0.5 / x.double().norm(dim=-1, keepdim=True)
            xin, undo = x.double() * c, (lambda y, c=c: y / c)
        else:
            mu = x.double().mean(-1, keepdim=True)
            std = (x.double() - mu).std(-1, keepdim=True)
            xin, undo = (x.double() - mu) / (std + 1e-5), (lambda y, mu=mu, std=std: y * std + mu)
        f = s.encode(x)
        assert torch.allclose(f.double(), hand_encode(sae, xin), atol=1e-5)
        assert torch.allclose(s.decode(f, x).double(), undo(hand_decode(sae, f)), atol=1e-4)
        with pytest.raises(OutOfRangeError, match="decode needs the input"):
            s.decode(f)
    # expected_average_only_in: nothing at run time (SAELens folds the factor when it saves); a known factor folds
    cfg = {"architecture": "standard", "d_in": 128, "d_sae": 64, "normalize_activations": "expected_average_only_in",
           "metadata": {"hook_name": "blocks.2.hook_resid_pre"}}
    folder = _write(tmp_path / "avg", cfg, _tensors(sae))
    assert torch.equal(ilab.SAE.load(folder).encode(x), sae.encode(x))
    s = ilab.SAE.load(folder, norm_scaling_factor=0.5)
    assert torch.allclose(s.encode(x).double(), hand_encode(sae, x * 0.5), atol=1e-5)  # x * s before the encoder
    f = s.encode(x)
    assert torch.allclose(s.decode(f).double(), hand_decode(sae, f) / 0.5, atol=1e-4)  # and / s after the decoder


def test_gemma_scope_npz(tmp_path):
    sae = random_sae("jumprelu")
    np.savez(tmp_path / "params.npz", **{k: v.numpy() for k, v in _tensors(sae).items()})
    with pytest.raises(LoadError, match="give site= and layer="):
        ilab.SAE.load(tmp_path / "params.npz")
    s = ilab.SAE.load(tmp_path / "params.npz", site="resid_post", layer=1)
    assert (s.site, s.layer, s.architecture, s.apply_b_dec_to_input) == ("resid_post", 1, "jumprelu", False)
    x = torch.randn(5, 128)
    assert torch.allclose(s.encode(x).double(), hand_encode(s, x), atol=1e-5)
    assert s.source == {"source": str(tmp_path / "params.npz"), "site": "resid_post", "layer": 1}


def test_hub_without_network_says_how_to_use_a_local_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(LoadError, match="local copy") as e:
        ilab.SAE.load("someone/some-saes", path="blocks.8.hook_resid_pre")
    assert "snapshot_download" in str(e.value)
    with pytest.raises(LoadError, match="local copy"):
        ilab.SAE.load("hf://someone/some-saes/blocks.8.hook_resid_pre")
    with pytest.raises(LoadError, match="path="):
        ilab.SAE.load("someone/some-saes")


def test_hub_sae_from_the_cache_without_network(monkeypatch, tmp_path):
    """A hub SAE downloaded once is read from huggingface_hub's cache (its own layout, written here) with no network."""
    import huggingface_hub

    commit = "0" * 40
    repo = tmp_path / "hub" / "models--someone--some-saes"
    random_sae("topk").save(repo / "snapshots" / commit / "blocks.2.hook_resid_pre")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sae = ilab.SAE.load("someone/some-saes", path="blocks.2.hook_resid_pre")
    assert (sae.site, sae.layer, sae.architecture) == ("resid_pre", 2, "topk")
    assert sae.source == {"source": "someone/some-saes", "path": "blocks.2.hook_resid_pre"}
    again = ilab.SAE.load("hf://someone/some-saes/blocks.2.hook_resid_pre")
    assert torch.equal(again.W_enc, sae.W_enc)


def test_bad_folders_get_typed_errors(tmp_path):
    sae = random_sae("jumprelu")
    good = {"architecture": "jumprelu", "d_in": 128, "d_sae": 64, "metadata": {"hook_name": "blocks.2.hook_resid_pre"}}
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError, match="cfg.json and sae_weights.safetensors missing"):
        ilab.SAE.load(tmp_path / "empty")
    with pytest.raises(LoadError, match="no SAE at"):
        ilab.SAE.load(tmp_path / "nowhere")
    no_threshold = {k: v for k, v in _tensors(sae).items() if k != "threshold"}
    with pytest.raises(LoadError, match="lacks threshold"):
        ilab.SAE.load(_write(tmp_path / "a", good, no_threshold))
    bent = {**_tensors(sae), "W_dec": sae.W_dec.T}
    with pytest.raises(LoadError, match="W_dec has shape"):
        ilab.SAE.load(_write(tmp_path / "b", good, bent))
    with pytest.raises(LoadError, match="unknown SAE architecture .matching_pursuit."):
        ilab.SAE.load(_write(tmp_path / "c", {**good, "architecture": "matching_pursuit"}, _tensors(sae)))
    with pytest.raises(UnsupportedSiteError, match="hook_name 'blocks.2.ln2.hook_normalized'"):
        ilab.SAE.load(_write(tmp_path / "d", {**good, "metadata": {"hook_name": "blocks.2.ln2.hook_normalized"}},
                             _tensors(sae)))
    with pytest.raises(LoadError, match="d_sae=65"):
        ilab.SAE.load(_write(tmp_path / "e", {**good, "d_sae": 65}, _tensors(sae)))
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "cfg.json").write_text("{not json")
    (tmp_path / "f" / "sae_weights.safetensors").write_bytes(b"junk")
    with pytest.raises(LoadError, match="not JSON"):
        ilab.SAE.load(tmp_path / "f")
    nan = {**_tensors(sae), "b_enc": torch.full((64,), float("nan"))}
    with pytest.raises(LoadError, match="NaN"):
        ilab.SAE.load(_write(tmp_path / "g", good, nan))
    with pytest.raises(LoadError, match="needs k"):
        ilab.SAE.load(_write(tmp_path / "h", {**good, "architecture": "topk"}, _tensors(sae)))


def test_feature_indices_are_checked():
    sae = random_sae()
    assert sae.features_of([0, 63]) == [0, 63]
    assert sae.features_of(slice(-2, None)) == [62, 63]  # a slice keeps Python's meaning
    for bad in (-1, [0, -1]):
        with pytest.raises(OutOfRangeError, match="negative feature indices are refused.*write feature=63"):
            sae.features_of(bad)
    with pytest.raises(OutOfRangeError, match="negative feature indices are refused"):
        sae.features_of(-65)
    with pytest.raises(OutOfRangeError, match="feature 64 out of range: this SAE has 64 features"):
        sae.features_of(64)
    with pytest.raises(OutOfRangeError, match="encode takes"):
        sae.encode(torch.randn(3, 100))
