"""SAELens itself as the reference: the same folders loaded by sae_lens.SAE.load_from_disk and by interplab's SAE.load
give the same encode and decode (<= 1e-5), for standard, topk, jumprelu and gated SAEs, folders written by either
library, with and without apply_b_dec_to_input and SAELens's run-time normalisations; batchtopk and
matryoshka_batchtopk training checkpoints against the inference SAE SAELens saves for them; the SAE shipped with
ioi-tiny. And the release registry: interplab's table of common releases equals sae-lens's pretrained directory,
SAE.load(release, sae_id=) resolves through sae-lens's own table here, and gives what SAELens's from_pretrained
gives from the same hub cache (written here: no network).

Runs in build/venv-saelens (scripts/saelens.sh), where interplab is not installed: interplab/sae.py and errors.py
are loaded from this checkout under an empty `interplab` package (no interplab/__init__.py: no Lab, no widgets)."""

import json
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if "interplab" not in sys.modules:
    package = types.ModuleType("interplab")
    package.__path__ = [str(ROOT / "interplab")]
    sys.modules["interplab"] = package
from interplab import hub  # noqa: E402
from interplab.sae import SAE  # noqa: E402

sae_lens = pytest.importorskip("sae_lens")
from sae_lens import SAE as LensSAE  # noqa: E402
from sae_lens.loading.pretrained_saes_directory import (  # noqa: E402
    get_pretrained_saes_directory,
    get_repo_id_and_folder_name,
)
from sae_lens.saes.sae import SAEMetadata  # noqa: E402

ATOL = 1e-5


def _random(arch, seed, d_in=48, d_sae=96, k=7, **kw):
    g = torch.Generator().manual_seed(seed)
    extra = {}
    if arch == "jumprelu":
        extra["threshold"] = torch.rand(d_sae, generator=g) * 0.3
    if arch == "topk":
        extra["k"] = k
    if arch == "gated":
        extra.update(b_gate=torch.randn(d_sae, generator=g) * 0.2 - 0.1, r_mag=torch.randn(d_sae, generator=g) * 0.3)
    return SAE(torch.randn(d_in, d_sae, generator=g) * 0.3, torch.randn(d_sae, generator=g) * 0.1,
               torch.randn(d_sae, d_in, generator=g) * 0.2, torch.randn(d_in, generator=g) * 0.1,
               site="resid_post", layer=1, architecture=arch, **extra, **kw)


def _compare(folder: Path, x: torch.Tensor):
    ours = SAE.load(folder)
    ref = LensSAE.load_from_disk(str(folder), device="cpu")
    with torch.no_grad():
        f_ref = ref.encode(x)
        x_ref = ref.decode(f_ref)
    f = ours.encode(x)
    assert (f_ref != 0).any(), "no feature fires: the comparison would prove nothing"
    assert (f - f_ref).abs().max() <= ATOL
    assert (ours.decode(f_ref, x) - x_ref).abs().max() <= ATOL
    return ours, ref


@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu", "gated"])
@pytest.mark.parametrize("b_dec_in", [True, False])
def test_folders_interplab_writes(tmp_path, arch, b_dec_in):
    folder = _random(arch, 1, apply_b_dec_to_input=b_dec_in).save(tmp_path / "sae")
    ours, ref = _compare(folder, torch.randn(4, 9, 48))
    assert ref.cfg.metadata.hook_name == ours.hook_name == "blocks.1.hook_resid_post"


def test_topk_relu_after_the_top_k(tmp_path):
    """k = 80 of 96: some of the top k pre-activations are negative, and SAELens's ReLU after the top-k zeroes them."""
    x = torch.randn(4, 48)
    folder = _random("topk", 4, k=80).save(tmp_path / "sae")
    assert (SAE.load(folder).pre_acts(x).topk(80).values < 0).any()
    _compare(folder, x)


@pytest.mark.parametrize("norm", ["constant_norm_rescale", "layer_norm", "expected_average_only_in"])
def test_normalisations(tmp_path, norm):
    folder = _random("standard", 2, normalize_activations=norm).save(tmp_path / "sae")
    _compare(folder, torch.randn(5, 48) * 4 + 1)


@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu", "gated"])
def test_folders_saelens_writes(tmp_path, arch):
    cls, cfg_cls = {"standard": (sae_lens.StandardSAE, sae_lens.StandardSAEConfig),
                    "topk": (sae_lens.TopKSAE, sae_lens.TopKSAEConfig),
                    "jumprelu": (sae_lens.JumpReLUSAE, sae_lens.JumpReLUSAEConfig),
                    "gated": (sae_lens.GatedSAE, sae_lens.GatedSAEConfig)}[arch]
    extra = {"k": 5} if arch == "topk" else {}
    cfg = cfg_cls(d_in=32, d_sae=80, metadata=SAEMetadata(hook_name="blocks.0.hook_mlp_out"),
                  **extra)
    torch.manual_seed(3)
    ref = cls(cfg)
    with torch.no_grad():
        for p in ref.parameters():  # SAELens initialises some biases to 0: make every term count
            p.add_(torch.randn_like(p) * 0.1)
        if arch == "jumprelu":
            ref.threshold.abs_()
    ref.save_model(tmp_path / "lens")
    ours, _ = _compare(tmp_path / "lens", torch.randn(6, 32))
    assert (ours.site, ours.layer, ours.architecture) == ("mlp_out", 0, arch)


def test_the_sae_shipped_with_ioi_tiny():
    folder = ROOT / "interplab" / "zoo" / "ioi_tiny_sae"
    cfg = json.loads((folder / "cfg.json").read_text())
    ours, ref = _compare(folder, torch.randn(3, 11, cfg["d_in"]) * 3)
    assert ref.cfg.architecture() == "topk" and ref.cfg.k == ours.k


@pytest.mark.parametrize("arch", ["batchtopk", "matryoshka_batchtopk"])
@pytest.mark.parametrize("rescale", [True, False])
def test_batchtopk_checkpoints(tmp_path, arch, rescale):
    """SAELens's training checkpoint (save_model: architecture batchtopk, topk_threshold) read by interplab, against
    SAELens's own inference SAE (save_inference_model: a jumprelu folder) loaded by SAELens."""
    cls, cfg_cls = {"batchtopk": (sae_lens.BatchTopKTrainingSAE, sae_lens.BatchTopKTrainingSAEConfig),
                    "matryoshka_batchtopk": (sae_lens.MatryoshkaBatchTopKTrainingSAE,
                                             sae_lens.MatryoshkaBatchTopKTrainingSAEConfig)}[arch]
    extra = {"matryoshka_widths": [16, 40, 80]} if arch == "matryoshka_batchtopk" else {}
    cfg = cfg_cls(d_in=32, d_sae=80, k=6, rescale_acts_by_decoder_norm=rescale,
                  metadata=SAEMetadata(hook_name="blocks.1.hook_resid_post"), **extra)
    torch.manual_seed(5)
    ref = cls(cfg)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        ref.W_dec.mul_(torch.rand(80, 1) * 2 + 0.5)  # rows of several norms: the fold matters
        ref.topk_threshold.fill_(0.3)
    ref.save_model(tmp_path / "checkpoint")
    assert json.loads((tmp_path / "checkpoint" / "cfg.json").read_text())["architecture"] == arch
    ref.save_inference_model(tmp_path / "inference")
    lens = LensSAE.load_from_disk(str(tmp_path / "inference"), device="cpu")
    assert lens.cfg.architecture() == "jumprelu"
    x = torch.randn(6, 32)
    with torch.no_grad():
        f_ref = lens.encode(x)
        x_ref = lens.decode(f_ref)
    assert (f_ref != 0).any()
    for folder in ("checkpoint", "inference"):
        ours = SAE.load(tmp_path / folder)
        assert ours.architecture == "jumprelu"
        assert (ours.encode(x) - f_ref).abs().max() <= ATOL, folder
        assert (ours.decode(f_ref) - x_ref).abs().max() <= ATOL, folder


# ---- the release registry ------------------------------------------------------------------------------------------


def test_interplabs_table_equals_sae_lens_directory():
    """Every release interplab ships for machines without sae-lens is sae-lens's, entry for entry."""
    lens = get_pretrained_saes_directory()
    shipped = hub._shipped_releases()
    assert len(shipped) >= 12
    for name, ours in shipped.items():
        theirs = lens[name]
        assert (ours.repo_id, ours.model, ours.conversion_func) == (theirs.repo_id, theirs.model,
                                                                    theirs.conversion_func), name
        assert ours.saes == theirs.saes_map, name
        assert ours.norm_scaling_factor == theirs.norm_scaling_factor, name
        assert ours.model_kwargs == (theirs.config_overrides or {}).get("model_from_pretrained_kwargs", {}), name


def test_the_lookup_uses_sae_lens_table_and_agrees():
    """interplab reads sae-lens's packaged pretrained_saes.yaml itself (without importing sae_lens): the same
    directory as sae-lens's own reader, every release and every field interplab uses."""
    table = hub.release_table()
    lens = get_pretrained_saes_directory()
    assert set(table) == set(lens)
    for name, ours in table.items():
        theirs = lens[name]
        assert ours.table.startswith("sae-lens ")
        assert (ours.repo_id, ours.model, ours.conversion_func, ours.saes, ours.norm_scaling_factor) == (
            theirs.repo_id, theirs.model, theirs.conversion_func, theirs.saes_map, theirs.norm_scaling_factor), name
        assert ours.model_kwargs == (theirs.config_overrides or {}).get("model_from_pretrained_kwargs", {}), name
    for release, sae_id in [("gpt2-small-res-jb", "blocks.8.hook_resid_pre"),
                            ("gemma-scope-2b-pt-res-canonical", "layer_12/width_16k/canonical"),
                            ("pythia-70m-deduped-res-sm", "blocks.0.hook_resid_pre")]:
        found = hub.resolve_release(release, sae_id)
        assert (found.release.repo_id, found.folder) == get_repo_id_and_folder_name(release, sae_id)
    with pytest.raises(Exception, match="near names: gpt2-small-res-jb"):
        hub.resolve_release("gpt2-small-res-jbb", "blocks.8.hook_resid_pre")


def test_gemma_scope_hooks_are_sae_lens_own():
    """interplab's reading of where a Gemma Scope SAE reads equals SAELens's gemma_2 loader for every SAE of every
    gemma_2 release (the loader reads only the names: no download)."""
    from sae_lens.loading.pretrained_sae_loaders import get_gemma_2_config_from_hf

    n = 0
    for name, rel in get_pretrained_saes_directory().items():
        if rel.conversion_func != "gemma_2":
            continue
        for folder in rel.saes_map.values():
            want = get_gemma_2_config_from_hf(rel.repo_id, folder, "cpu")["hook_name"]
            assert hub.gemma_scope_hook(rel.repo_id, folder) == want, (name, folder)
            n += 1
    assert n > 500


def _cache(monkeypatch, tmp_path, repo, folder):
    import huggingface_hub

    commit = "2" * 40
    root = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root / "snapshots" / commit / folder


@pytest.mark.parametrize("release, sae_id, arch", [
    ("gpt2-small-res-jb", "blocks.8.hook_resid_pre", "standard"),
    ("gpt2-small-mlp-tm", "blocks.3.hook_mlp_out", "standard"),  # with a norm_scaling_factor to fold
    ("gemma-scope-2b-pt-mlp-canonical", "layer_4/width_16k/canonical", "jumprelu"),
    ("llama_scope_lxr_8x", "l3r_8x", "standard"),  # jumprelu with one threshold, from its hyperparams
])
def test_from_pretrained_and_interplab_agree(monkeypatch, tmp_path, release, sae_id, arch):
    """The same hub cache read by SAELens's SAE.from_pretrained and by interplab's SAE.load(release, sae_id=)."""
    import numpy as np

    repo, folder = get_repo_id_and_folder_name(release, sae_id)
    where = _cache(monkeypatch, tmp_path, repo, folder)
    norm = "expected_average_only_in" if release == "gpt2-small-mlp-tm" else "none"
    # SAELens reads a Gemma Scope SAE's shape from the names (gemma-2-2b: d_in 2304; width_16k: 16384 features)
    d_in, d_sae = (2304, 16384) if arch == "jumprelu" else (48, 64)
    made = _random(arch, 6, d_in=d_in, d_sae=d_sae, normalize_activations=norm)
    if release.startswith("llama_scope"):  # fnlp's layout: torch Linear layers and hyperparams.json
        from safetensors.torch import save_file

        (where / "checkpoints").mkdir(parents=True)
        save_file({"encoder.weight": made.W_enc.T.contiguous(), "encoder.bias": made.b_enc,
                   "decoder.weight": made.W_dec.T.contiguous(), "decoder.bias": made.b_dec},
                  where / "checkpoints" / "final.safetensors")
        (where / "hyperparams.json").write_text(json.dumps({
            "d_model": d_in, "d_sae": d_sae, "jump_relu_threshold": 0.2, "hook_point_in": "blocks.3.hook_resid_post",
            "hook_point_out": "blocks.3.hook_resid_post", "dataset_average_activation_norm": {"in": 5.0, "out": 5.0}}))
    elif release.startswith("gemma-scope"):
        where.mkdir(parents=True)
        np.savez(where / "params.npz", W_enc=made.W_enc.numpy(), W_dec=made.W_dec.numpy(), b_enc=made.b_enc.numpy(),
                 b_dec=made.b_dec.numpy(), threshold=made.threshold.numpy())
    else:  # the format of these releases' folders: SAELens's before 6.0 (hook_point, no sae_lens_version)
        made.save(where)
        (where / "cfg.json").write_text(json.dumps({
            "d_in": d_in, "d_sae": d_sae, "hook_point": made.hook_name, "hook_point_layer": made.layer,
            "model_name": "gpt2-small", "activation_fn_str": "relu", "apply_b_dec_to_input": True,
            "normalize_activations": norm, "dtype": "float32", "device": "cpu"}))
    ref = LensSAE.from_pretrained(release, sae_id, device="cpu")
    ours = SAE.load(release, sae_id=sae_id)
    assert ours.hook_name == ref.cfg.metadata.hook_name
    # SAELens says how to load the model these SAEs read: with centred writing weights, whose stream is the Hugging
    # Face model's less its mean over d_model (tests/features/test_registry.py checks that on a GPT-2)
    centred = bool((ref.cfg.metadata.model_from_pretrained_kwargs or {}).get("center_writing_weights"))
    assert ours.center_input == centred == release.startswith(("gpt2-small-res-jb", "gpt2-small-mlp-tm"))
    x = torch.randn(5, d_in) * (0.05 if release.startswith("llama_scope") else 2) + 0.3  # (llama: s is ~60)
    mean = x.mean(-1, keepdim=True) if centred else torch.zeros(5, 1)
    with torch.no_grad():
        f_ref = ref.encode(x - mean)
        x_ref = ref.decode(f_ref) + mean
    assert (f_ref != 0).any()
    assert (ours.encode(x) - f_ref).abs().max() <= ATOL
    assert (ours.decode(f_ref, x) - x_ref).abs().max() <= 1e-4
    if norm != "none" or release.startswith("llama_scope"):  # the release's factor was folded by both
        assert ref.cfg.normalize_activations == ours.normalize_activations == "none"
