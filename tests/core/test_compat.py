"""interplab.compat: a CUDA build of torchvision beside a CPU torch (what `pip install "interplab[vllm]"` brings
from PyPI) must not stop a model from loading. Real files: a package named torchvision whose version says +cu130
and whose import fails the way PyPI's does without CUDA, first on the path of a fresh Python."""

import os
import subprocess
import sys
import textwrap

import pytest

CHECK = textwrap.dedent("""
    import sys, warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        import interplab as ilab
    import importlib.util
    lab = ilab.Lab.load("ioi-tiny")          # transformers imports torchvision for the model class when it is there
    print("hidden", sys.modules.get("torchvision", "absent"), importlib.util.find_spec("torchvision") is None)
    print("warned", any("torchvision" in str(w.message) for w in seen))
    print("logits", round(float(lab.run("When Mary and John went to the store, John gave a drink to")
                                  .last_logits[0].max()), 3))
""")


def _fake(root, version: str) -> None:
    pkg = root / "torchvision"
    pkg.mkdir()
    (pkg / "version.py").write_text(f"__version__ = '{version}'\ncuda = '13.0'\n")
    (pkg / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')


def _run(path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300)
    return r.stdout + r.stderr


def test_a_cuda_torchvision_beside_a_cpu_torch_is_hidden_and_the_model_loads(tmp_path):
    import torch

    if torch.version.cuda is not None:
        pytest.skip("a CUDA torch: a CUDA torchvision may work here, so nothing is hidden")
    _fake(tmp_path, "0.29.1+cu130")
    out = _run(tmp_path)
    assert "hidden None True" in out and "warned True" in out and "logits" in out, out


def test_a_torchvision_that_is_not_a_cuda_build_is_left_alone(tmp_path):
    """The rule is narrow: a CPU build is not hidden (nor warned about), even one that fails to import."""
    _fake(tmp_path, "0.29.1+cpu")
    out = _run(tmp_path)
    assert "hidden absent False" in out and "warned False" in out, out
