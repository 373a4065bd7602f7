"""Lab.load's dtype (issue #46): the checkpoint's own on a GPU (tests/gpu loads a bf16 checkpoint there), float32 on
the CPU and for the embedded model, whatever was asked for when asked."""

from __future__ import annotations

import torch
from _tiny_models import make_model

import interplab as ilab
from interplab.loading import load_dtype


def test_the_dtype_chosen_before_loading():
    assert load_dtype(None, None, None, False) == torch.float32  # the CPU: as it always was
    assert load_dtype(None, "cpu", None, False) == torch.float32
    assert load_dtype("bf16", "cpu", None, False) == torch.bfloat16  # asked for: that
    assert load_dtype(torch.float16, None, None, True) == torch.float16
    if not torch.cuda.is_available():  # a device_map on a machine without a GPU places on the CPU and disk
        assert load_dtype(None, None, "auto", False) == torch.float32
    else:
        assert load_dtype(None, "cuda", None, False) == "auto"
        assert load_dtype(None, "cuda", None, True) == torch.float32  # the embedded model


def test_a_bf16_checkpoint_loads_in_fp32_on_the_cpu_unless_asked(tmp_path, capsys):
    tok = ilab.Lab.load("ioi-tiny").tokenizer
    make_model("llama", vocab=len(tok)).to(torch.bfloat16).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert ilab.Lab.load(str(tmp_path)).engine.dtype_name == "float32"
    assert ilab.Lab.load(str(tmp_path), dtype="bfloat16").engine.dtype_name == "bfloat16"
    assert "checkpoint's own dtype" not in capsys.readouterr().out  # the line is for the GPU's "auto" only
