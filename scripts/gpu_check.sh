#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the GPU tests (tests/gpu: every analysis and the four notebooks on cuda against
# the CPU) and the GPU benchmarks (benchmarks/bench_gpu.py --big, which writes the "GPU scale" section of
# benchmarks/RESULTS.md, and benchmarks/bench_graph.py, its "Attribution graphs" section).
#   bash scripts/gpu_check.sh               # tests, then the benchmark
#   SKIP_BENCH=1 bash scripts/gpu_check.sh  # tests only;  BENCH_ARGS="--shapes gpt2-small" picks the benchmark's shapes
# Which Python: .venv's where it exists; else, where a python3 with a CUDA torch is there already (a CUDA image, which
# may have no package index to reach), that one, with interplab run from this checkout and what it lacks installed
# from .whl/ (made beforehand by scripts/gpu_wheels.sh on a machine that reaches one); else scripts/setup.sh makes
# .venv (it picks the CUDA torch build when nvidia-smi sees a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda_python() { "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }
if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
elif command -v python3 >/dev/null && cuda_python python3; then
  PY=python3
  if [ -d .whl ]; then
    "$PY" -m pip install -q --no-index --find-links .whl anywidget ipywidgets plotly nbclient nbformat ipykernel
  fi
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # (the notebooks' kernels inherit it)
else
  bash scripts/setup.sh
  PY=.venv/bin/python
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: torch sees no CUDA GPU here ($("$PY" -c 'import torch; print(torch.__version__)')); nothing to check." >&2
  exit 1
fi
"$PY" -c "import torch; print('gpu_check:', torch.cuda.get_device_name(0), 'torch', torch.__version__)"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
status=0
"$PY" -m pytest -q -p no:randomly -p no:cacheprovider tests/gpu tests/core/test_device_placement.py "$@" || status=$?
if [ -z "${SKIP_BENCH:-}" ]; then
  # shellcheck disable=SC2086
  "$PY" benchmarks/bench_gpu.py ${BENCH_ARGS:---big} || status=$?
  # attribution graphs: the IOI graph, memory as prompts grow, and (CUDA present) GPT-2-small and a
  # Gemma-2-2B shape at 32 and 64 tokens, 7,500 kept nodes (the "Attribution graphs" section of RESULTS.md)
  "$PY" benchmarks/bench_graph.py --tokens "" --no-write || status=$?
fi
exit $status
