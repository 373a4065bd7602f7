#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the GPU tests (tests/gpu: every analysis and the four notebooks on cuda against
# the CPU) and the GPU benchmark (benchmarks/bench_gpu.py --big, which writes the "GPU scale" section of
# benchmarks/RESULTS.md). Sets up .venv first if there is none (scripts/setup.sh picks the CUDA torch build when
# nvidia-smi sees a GPU).
#   bash scripts/gpu_check.sh               # tests, then the benchmark
#   SKIP_BENCH=1 bash scripts/gpu_check.sh  # tests only;  BENCH_ARGS="--shapes gpt2-small" picks the benchmark's shapes
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
PY=.venv/bin/python
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
fi
exit $status
