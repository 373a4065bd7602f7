"""SAELens release names (SAE.load(release, sae_id=...)) through interplab's table of the common releases (the main
environment has no sae-lens; tests/saelens_ref checks the table and the lookup against sae-lens itself), read from
huggingface_hub's cache in its own layout, written here, with no network; the typed errors for unknown releases,
unknown sae_ids and a missing download. And the architectures SAELens trains that interplab reads: gated, and
batchtopk / matryoshka_batchtopk checkpoints (jumprelu at inference), against SAELens's formulas written out here."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import interplab as ilab
from interplab.errors import LoadError
from interplab.hub import RELEASES_FILE, release_table

from ._saes import hand_decode, hand_encode, random_sae

COMMIT = "1" * 40


@pytest.fixture()
def hub(monkeypatch, tmp_path):
    """An empty huggingface_hub cache here, no network: returns folder(repo, path) -> where to write a file's
    snapshot."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def folder(repo, path):
        root = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / "main").write_text(COMMIT)
        return root / "snapshots" / COMMIT / path
    return folder


def test_the_shipped_table_is_used_without_sae_lens():
    try:
        import sae_lens  # noqa: F401
        pytest.skip("sae-lens is installed here: its own table is used (tests/saelens_ref checks that path)")
    except ImportError:
        pass
    table = release_table()
    shipped = json.loads(RELEASES_FILE.read_text())["releases"]
    assert set(table) == set(shipped) and len(table) >= 12
    rel = table["gpt2-small-res-jb"]
    assert (rel.repo_id, rel.model, rel.saes["blocks.8.hook_resid_pre"]) == (
        "jbloom/GPT2-Small-SAEs-Reformatted", "gpt2-small", "blocks.8.hook_resid_pre")
    assert "interplab's table" in rel.table
    assert table["gemma-scope-2b-pt-res-canonical"].saes["layer_12/width_16k/canonical"] == \
        "layer_12/width_16k/average_l0_82"


def test_a_release_loads_from_the_hub_cache(hub):
    sae = random_sae("standard", "resid_pre", 8, d_in=32, d_sae=48)
    sae.save(hub("jbloom/GPT2-Small-SAEs-Reformatted", "blocks.8.hook_resid_pre"))
    back = ilab.SAE.load("gpt2-small-res-jb", sae_id="blocks.8.hook_resid_pre")
    assert (back.site, back.layer, back.d_sae) == ("resid_pre", 8, 48)
    assert torch.equal(back.W_enc, sae.W_enc)
    assert back.source == {"source": "gpt2-small-res-jb", "sae_id": "blocks.8.hook_resid_pre"}


def test_a_gemma_scope_release_reads_where_its_repository_says(hub):
    """Gemma Scope's params.npz says nothing of where it reads: the release's repository (-res, -mlp, -att) and the
    folder's layer_N do, as in SAELens's gemma_2 loader; the canonical id names the folder average_l0_82."""
    sae = random_sae("jumprelu", d_in=32, d_sae=48, seed=4)
    tensors = {"W_enc": sae.W_enc, "b_enc": sae.b_enc, "W_dec": sae.W_dec, "b_dec": sae.b_dec,
               "threshold": sae.threshold}
    where = hub("google/gemma-scope-2b-pt-res", "layer_12/width_16k/average_l0_82")
    where.mkdir(parents=True)
    np.savez(where / "params.npz", **{k: v.numpy() for k, v in tensors.items()})
    back = ilab.SAE.load("gemma-scope-2b-pt-res-canonical", sae_id="layer_12/width_16k/canonical")
    assert (back.site, back.layer, back.architecture, back.apply_b_dec_to_input) == ("resid_post", 12, "jumprelu",
                                                                                      False)
    x = torch.randn(4, 32)
    assert torch.allclose(back.encode(x).double(), hand_encode(back, x), atol=1e-5)
    where = hub("google/gemma-scope-2b-pt-att",
                release_table()["gemma-scope-2b-pt-att-canonical"].saes["layer_3/width_16k/canonical"])
    where.mkdir(parents=True)
    np.savez(where / "params.npz", **{k: v.numpy() for k, v in tensors.items()})
    att = ilab.SAE.load("gemma-scope-2b-pt-att-canonical", sae_id="layer_3/width_16k/canonical")
    assert (att.site, att.layer) == ("z", 3)
    with pytest.raises(LoadError, match="embedding SAE"):
        ilab.SAE.load("gemma-scope-2b-pt-res", sae_id="embedding/width_4k/average_l0_6")


def test_a_releases_norm_scaling_factor_is_folded(hub):
    """gpt2-small-mlp-tm's SAEs normalise by expected_average_only_in: SAELens's from_pretrained folds the directory's
    factor s into the weights (x * s before the encoder, / s after the decoder), and so does SAE.load. Its model was
    TransformerLens's with centred writing weights: the input is centred first (and the mean added back)."""
    s = release_table()["gpt2-small-mlp-tm"].norm_scaling_factor["blocks.0.hook_mlp_out"]
    assert abs(s - 1.049317316132615) < 1e-12
    sae = random_sae("standard", "mlp_out", 0, d_in=32, d_sae=48, seed=5,
                     normalize_activations="expected_average_only_in")
    sae.save(hub("tommmcgrath/gpt2-small-mlp-out-saes", "sae_group_gpt2_blocks.0.hook_mlp_out_24576:v1"))
    back = ilab.SAE.load("gpt2-small-mlp-tm", sae_id="blocks.0.hook_mlp_out")
    assert back.center_input and back.normalize_activations == "none"
    x = torch.randn(5, 32) * 3 + 2
    mean = x.double().mean(-1, keepdim=True)
    f = back.encode(x)
    assert (f > 0).any()
    assert torch.allclose(f.double(), hand_encode(sae, (x.double() - mean) * s), atol=1e-5)
    assert torch.allclose(back.decode(f, x).double(), hand_decode(sae, f) / s + mean, atol=1e-5)
    plain = ilab.SAE.load("gpt2-small-mlp-tm", sae_id="blocks.0.hook_mlp_out", center_input=False)
    assert not torch.allclose(plain.encode(x), f, atol=1e-3)  # the centring changes what fires


def test_unknown_releases_and_ids_list_the_near_names(hub):
    with pytest.raises(LoadError, match="not a SAELens release known here.*near names: gpt2-small-res-jb"):
        ilab.SAE.load("gpt2-small-res-jbb", sae_id="blocks.8.hook_resid_pre")
    with pytest.raises(LoadError, match="not a SAELens release.*near release names: gpt2-small-res-jb"):
        ilab.SAE.load("gpt2-smal-res-jb")
    with pytest.raises(LoadError) as e:
        ilab.SAE.load("gpt2-small-res-jb", sae_id="blocks.8.hook_resid")
    assert "(nearest first): blocks.8.hook_resid_pre," in str(e.value)
    assert "blocks.11.hook_resid_post" in str(e.value)  # and then every other id of the release
    with pytest.raises(LoadError, match="is a SAELens release: say which.*sae_id="):
        ilab.SAE.load("gpt2-small-res-jb")
    with pytest.raises(LoadError, match="not both"):
        ilab.SAE.load("gpt2-small-res-jb", sae_id="blocks.8.hook_resid_pre", path="blocks.8.hook_resid_pre")


def test_no_network_names_the_real_repository_and_a_local_folder(hub):
    """The issue's error read the release name as a hub repository and suggested downloading it; now the message
    names the release's repository and folder, and the SAE.load call for the local copy."""
    with pytest.raises(LoadError) as e:
        ilab.SAE.load("gpt2-small-res-jb", sae_id="blocks.8.hook_resid_pre")
    text = str(e.value)
    assert "HF_HUB_OFFLINE is set" in text
    assert "snapshot_download('jbloom/GPT2-Small-SAEs-Reformatted'" in text
    assert "SAE.load('saes/blocks.8.hook_resid_pre', center_input=True)" in text  # its model was centred
    assert "'gpt2-small-res-jb'" not in text  # the release is no repository
    with pytest.raises(LoadError) as e:
        ilab.SAE.load("gemma-scope-2b-pt-mlp-canonical", sae_id="layer_5/width_16k/canonical")
    assert "SAE.load('saes/layer_5/width_16k/average_l0_" in str(e.value) and "site='mlp_out', layer=5)" in str(
        e.value)


def test_gated_arithmetic_is_saelens(tmp_path):
    """SAELens's GatedSAE: f = relu(sae_in @ (W_enc * exp(r_mag)) + b_mag) * (sae_in @ W_enc + b_gate > 0), in a
    folder with SAELens's tensor names (b_mag, b_gate, r_mag; no b_enc)."""
    sae = random_sae("gated", seed=6)
    sae.b_gate = sae.b_gate - 1.0  # a gate that shuts where the magnitude path alone would fire
    folder = sae.save(tmp_path / "gated")
    from safetensors.torch import load_file

    assert set(load_file(folder / "sae_weights.safetensors")) == {"W_enc", "b_mag", "b_gate", "r_mag", "W_dec",
                                                                  "b_dec"}
    back = ilab.SAE.load(folder)
    x = torch.randn(50, 128)
    f = back.encode(x)
    want = hand_encode(sae, x)
    assert (want > 0).any() and (want == 0).any()
    assert torch.allclose(f.double(), want, atol=1e-5)
    # the gate and the magnitude disagree somewhere: a feature whose magnitude is positive but whose gate is shut
    sae_in = x.double() - sae.b_dec.double()
    shut = (sae_in @ sae.W_enc.double() + sae.b_gate.double() <= 0) & (back.pre_acts(x).double() > 0)
    assert shut.any() and (f[shut] == 0).all()
    assert torch.allclose(back.decode(f).double(), hand_decode(sae, f), atol=1e-5)


@pytest.mark.parametrize("arch", ["batchtopk", "matryoshka_batchtopk"])
@pytest.mark.parametrize("rescale", [True, False])
def test_batchtopk_checkpoints_are_jumprelu_at_inference(tmp_path, arch, rescale):
    """A batchtopk training checkpoint (SAELens's save_model: topk_threshold, one number) is, at inference,
    SAELens's jumprelu SAE: f = relu(pre) where pre > topk_threshold, pre computed with the decoder's row norms folded
    into the encoder when rescale_acts_by_decoder_norm (so pre = raw pre * |W_dec row|), and W_dec's rows unit."""
    g = torch.Generator().manual_seed(7)
    W_enc, b_enc = torch.randn(40, 60, generator=g) * 0.3, torch.randn(60, generator=g) * 0.1
    W_dec, b_dec = torch.randn(60, 40, generator=g) * 0.4, torch.randn(40, generator=g) * 0.1
    tau = 0.35
    folder = tmp_path / arch
    folder.mkdir()
    save_file({"W_enc": W_enc, "b_enc": b_enc, "W_dec": W_dec, "b_dec": b_dec, "topk_threshold": torch.tensor(tau)},
              folder / "sae_weights.safetensors")
    cfg = {"architecture": arch, "d_in": 40, "d_sae": 60, "k": 9, "rescale_acts_by_decoder_norm": rescale,
           "apply_b_dec_to_input": True, "metadata": {"hook_name": "blocks.1.hook_resid_post"}}
    (folder / "cfg.json").write_text(json.dumps(cfg))
    sae = ilab.SAE.load(folder)
    assert (sae.architecture, sae.site, sae.layer, sae.rescale_acts_by_decoder_norm) == ("jumprelu", "resid_post", 1,
                                                                                        False)
    x = torch.randn(7, 40, dtype=torch.float64)
    norm = W_dec.double().norm(dim=-1) if rescale else torch.ones(60, dtype=torch.float64)
    pre = ((x - b_dec.double()) @ W_enc.double() + b_enc.double()) * norm
    want = torch.where(pre > tau, pre.clamp(min=0), torch.zeros_like(pre))
    f = sae.encode(x.float()).double()
    assert (want > 0).any() and ((pre > 0) & (pre <= tau)).any()  # the threshold, not the ReLU, cuts some
    assert torch.allclose(f, want, atol=1e-5)
    # decode: the reconstruction of the training SAE (acts / |W_dec row| @ W_dec when rescaled) is unchanged
    recon = (want / norm) @ W_dec.double() + b_dec.double()
    assert torch.allclose(sae.decode(f.float()).double(), recon, atol=1e-5)
    (folder / "sae_weights.safetensors").unlink()
    save_file({"W_enc": W_enc, "b_enc": b_enc, "W_dec": W_dec, "b_dec": b_dec, "topk_threshold": torch.ones(3)},
              folder / "sae_weights.safetensors")
    with pytest.raises(LoadError, match="topk_threshold has 3 values"):
        ilab.SAE.load(folder)


def _llama_scope_folder(where, d_in=40, d_sae=56, tau=0.4, norm_in=3.5, seed=8):
    """A Llama Scope folder as fnlp publishes them: hyperparams.json and checkpoints/final.safetensors holding
    torch Linear layers (encoder.weight [d_sae, d_in], decoder.weight [d_in, d_sae])."""
    g = torch.Generator().manual_seed(seed)
    t = {"encoder.weight": torch.randn(d_sae, d_in, generator=g) * 0.3, "encoder.bias": torch.randn(d_sae, generator=g),
         "decoder.weight": torch.randn(d_in, d_sae, generator=g) * 0.2, "decoder.bias": torch.randn(d_in, generator=g)}
    (where / "checkpoints").mkdir(parents=True)
    save_file(t, where / "checkpoints" / "final.safetensors")
    hp = {"d_model": d_in, "d_sae": d_sae, "jump_relu_threshold": tau, "hook_point_in": "blocks.3.hook_resid_post",
          "hook_point_out": "blocks.3.hook_resid_post", "dataset_average_activation_norm": {"in": norm_in, "out": 1.0}}
    (where / "hyperparams.json").write_text(json.dumps(hp))
    return t


def test_llama_scope_folders_and_releases(hub, tmp_path):
    """SAELens's llama_scope loader written out: W_enc = encoder.weight.T, threshold = jump_relu_threshold * s_hp for
    every feature (s_hp = sqrt(d_model) / the mean input norm of its hyperparams), no b_dec on the input; then the
    release's norm_scaling_factor s is folded (x * s before the encoder, / s after the decoder). A folder loaded by
    itself folds s_hp."""
    release = release_table()["llama_scope_lxr_8x"]
    s_rel = release.norm_scaling_factor["l3r_8x"]
    t = _llama_scope_folder(hub(release.repo_id, release.saes["l3r_8x"]))
    s_hp = 40 ** 0.5 / 3.5
    x = torch.randn(9, 40, dtype=torch.float64) * 0.2

    def want(s):
        pre = (x * s) @ t["encoder.weight"].double().T + t["encoder.bias"].double()
        f = torch.where(pre > 0.4 * s_hp, pre.clamp(min=0), torch.zeros_like(pre))
        return f, (f @ t["decoder.weight"].double().T + t["decoder.bias"].double()) / s

    _llama_scope_folder(tmp_path / "local")
    for sae, s in ((ilab.SAE.load("llama_scope_lxr_8x", sae_id="l3r_8x"), s_rel),
                   (ilab.SAE.load(tmp_path / "local"), s_hp)):
        assert (sae.site, sae.layer, sae.architecture, sae.normalize_activations) == ("resid_post", 3, "jumprelu",
                                                                                     "none")
        f_want, x_want = want(s)
        f = sae.encode(x.float()).double()
        pre = (x * s) @ t["encoder.weight"].double().T + t["encoder.bias"].double()
        assert (f_want > 0).any() and ((pre > 0) & (pre <= 0.4 * s_hp)).any()  # the threshold cuts some
        assert torch.allclose(f, f_want, atol=1e-4)
        assert torch.allclose(sae.decode(f.float()).double(), x_want, atol=1e-4)


def test_another_folder_of_the_repository_in_the_cache_is_not_this_one(hub):
    """Only blocks.7 of the release's repository is cached: blocks.8 is not found there and, offline, the error is
    the one that says how to get it (before, the cached snapshot was taken for the repository and the folder
    reported missing from it)."""
    random_sae("standard", "resid_pre", 7, d_in=32, d_sae=48).save(
        hub("jbloom/GPT2-Small-SAEs-Reformatted", "blocks.7.hook_resid_pre"))
    assert ilab.SAE.load("gpt2-small-res-jb", sae_id="blocks.7.hook_resid_pre").layer == 7
    with pytest.raises(LoadError, match="not in the hub cache and HF_HUB_OFFLINE is set"):
        ilab.SAE.load("gpt2-small-res-jb", sae_id="blocks.8.hook_resid_pre")


def test_center_input_is_transformer_lens_centred_model():
    """What center_input stands for, on ioi-tiny (a GPT-2): TransformerLens's center_writing_weights (every weight
    and bias writing the residual stream centred over d_model, the unembedding untied) gives the same logits and a
    residual stream equal to the Hugging Face model's less its mean; so an SAE trained there, spliced here with
    center_input, reads the same features, and a feature edit gives the logits of the same edit written out by hand
    on the centred model."""
    import copy

    lab = ilab.Lab.load("ioi-tiny")
    prompt = "When Mary and John went to the store, John gave a drink to"
    ids = torch.tensor([lab.tokenizer(prompt)["input_ids"]])
    centred = copy.deepcopy(lab.model)
    with torch.no_grad():
        centred.lm_head.weight = torch.nn.Parameter(lab.model.lm_head.weight.detach().clone())  # untied, as in TL
        t = centred.transformer
        for w in [t.wte.weight, t.wpe.weight] + [p for b in t.h for p in (b.attn.c_proj.weight, b.attn.c_proj.bias,
                                                                          b.mlp.c_proj.weight, b.mlp.c_proj.bias)]:
            w.sub_(w.mean(-1, keepdim=True))  # (Conv1D weights are [in, out]: the mean over the written d_model)
        own = lab.model(input_ids=ids, output_hidden_states=True)
        cen = centred(input_ids=ids, output_hidden_states=True)
    assert (own.logits - cen.logits).abs().max() <= 1e-4
    x, x_c = own.hidden_states[2], cen.hidden_states[2]  # resid_pre of block 2
    assert (x.mean(-1).abs() > 1e-2).any()  # the stream is not centred already: the test can fail
    assert (x - x.mean(-1, keepdim=True) - x_c).abs().max() <= 1e-4

    sae = random_sae("standard", "resid_pre", 2, seed=9)
    trained_there = ilab.SAE(sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec, site="resid_pre", layer=2,
                             center_input=True)
    f = trained_there.encode(x)
    assert (f > 0).any()
    assert torch.allclose(f.double(), hand_encode(sae, x_c), atol=1e-4)
    assert torch.allclose(trained_there.decode(f, x).double() - x.double().mean(-1, keepdim=True),
                          hand_decode(sae, f), atol=1e-4)
    live = int((f[0] > 0).sum(0).argmax())
    pos = int(f[0, :, live].argmax())

    def zero_by_hand(m, args, kw):  # the splice on the centred model: x_c + (0 - f) * W_dec[live] at pos
        h = args[0] if args else kw["hidden_states"]
        fc = hand_encode(sae, h)
        h = h.clone()
        h[0, pos] -= (fc[0, pos, live] * sae.W_dec[live].double()).to(h.dtype)
        return ((h, *args[1:]), kw) if args else (args, {**kw, "hidden_states": h})

    handle = centred.transformer.h[2].register_forward_pre_hook(zero_by_hand, with_kwargs=True)
    try:
        with torch.no_grad():
            want = centred(input_ids=ids).logits.float()
    finally:
        handle.remove()
    got = lab.run(prompt, [ilab.zero(trained_there, feature=live, pos=pos)]).logits
    assert (got - want).abs().max() <= 1e-4
    assert (got - own.logits).abs().max() > 1e-3  # the edit changed something


def test_a_failed_download_says_the_same(hub, monkeypatch):
    """Not offline, but the hub cannot be reached (a closed local port stands for no network): the same how-to."""
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(LoadError, match="could not be downloaded from the hub") as e:
        ilab.SAE.load("gpt2-small-res-jb", sae_id="blocks.8.hook_resid_pre")
    assert "snapshot_download('jbloom/GPT2-Small-SAEs-Reformatted'" in str(e.value)
    assert "SAE.load('saes/blocks.8.hook_resid_pre', center_input=True)" in str(e.value)
