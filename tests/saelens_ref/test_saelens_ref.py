"""SAELens itself as the reference: the same folders loaded by sae_lens.SAE.load_from_disk and by interplab's SAE.load
give the same encode and decode (<= 1e-5), for standard, topk and jumprelu SAEs, folders written by either library,
with and without apply_b_dec_to_input and SAELens's run-time normalisations; and the SAE shipped with ioi-tiny.

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
from interplab.sae import SAE  # noqa: E402

sae_lens = pytest.importorskip("sae_lens")
from sae_lens import SAE as LensSAE  # noqa: E402
from sae_lens.saes.sae import SAEMetadata  # noqa: E402

ATOL = 1e-5


def _random(arch, seed, d_in=48, d_sae=96, k=7, **kw):
    g = torch.Generator().manual_seed(seed)
    extra = {}
    if arch == "jumprelu":
        extra["threshold"] = torch.rand(d_sae, generator=g) * 0.3
    if arch == "topk":
        extra["k"] = k
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


@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu"])
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


@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu"])
def test_folders_saelens_writes(tmp_path, arch):
    cls, cfg_cls = {"standard": (sae_lens.StandardSAE, sae_lens.StandardSAEConfig),
                    "topk": (sae_lens.TopKSAE, sae_lens.TopKSAEConfig),
                    "jumprelu": (sae_lens.JumpReLUSAE, sae_lens.JumpReLUSAEConfig)}[arch]
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
