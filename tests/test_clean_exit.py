"""A script that shows widgets and ends at once exits cleanly: code 0, no "terminate called".

Before the worker was stopped at exit, such a script aborted (exit 134, "terminate called without an active
exception") whenever the worker thread was inside a torch call as the interpreter finalised: CPython ends that daemon
thread with pthread_exit when it takes the GIL back, and the unwind through pybind11's noexcept gil_scoped_release
destructor calls std::terminate (see interplab/worker.py).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNS = 5

# every widget, each with work queued on the lab's worker; the dashboard (README) last, so that its sweep is queued
SCRIPT = r'''
import interplab as ilab
from interplab.views.attention import attention_widget
from interplab.views.lens import lens_widget
from interplab.views.steering import steering_panel

lab = ilab.Lab.load("ioi-tiny")
clean = "When Mary and John went to the store, John gave a drink to"
corrupt = "When Mary and John went to the store, Mary gave a drink to"

res = lab.patch_sweep(clean, corrupt, by=("layer",), metric=ilab.logit_diff(" Mary", " John"), progress=False)
explorer = res.show()
explorer.heatmap.send_test_message({"type": "click", "row": 0, "col": 0, "shift": False})
panel = steering_panel(lab, corrupt, [clean], [corrupt])
panel.send_test_message({"type": "generate", "alpha": 2.0, "layer": 1, "site": "resid_post", "positions": "all",
                         "max_new_tokens": 8})
lens = lens_widget(lab, clean)
attention = attention_widget(lab, clean)
attention.send_test_message({"type": "select", "layer": 1, "head": 0})
dashboard = lab.show(clean, corrupt, answer=" Mary", wrong=" John")
print("in flight at exit:", not lab.engine.worker.idle(), flush=True)
'''


@pytest.mark.parametrize("run", range(RUNS))
def test_a_script_that_shows_every_widget_exits_cleanly(run):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("OMP_NUM_THREADS", "1")  # the abort does not depend on it (it happens with 1 thread too)
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=env)
    assert "terminate called" not in out.stderr, out.stderr[-3000:]
    assert out.returncode == 0, f"exit code {out.returncode}\n{out.stderr[-3000:]}"
    assert "in flight at exit: True" in out.stdout, "the worker was idle: this run did not test an exit mid-job"
