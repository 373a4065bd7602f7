"""tests/gpu: the library on a CUDA GPU against the CPU; every test here is skipped where torch sees no GPU.
Run them with `bash scripts/gpu_check.sh` on a machine with one."""

import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (tests/gpu; bash scripts/gpu_check.sh runs them)")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False here)")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.cuda)
            if not torch.cuda.is_available():
                item.add_marker(skip)
