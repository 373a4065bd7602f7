#!/usr/bin/env bash
# Sets up .venv (idempotent): torch for this machine first, then the project with its dev extra.
# Run by scripts/lab.sh and scripts/test.sh.
#
# Installs only when needed: after a successful install, .venv/.interplab-setup holds a hash of pyproject.toml, this
# script and the Python version; while it matches, nothing is installed and no package index is contacted, so
# `bash scripts/lab.sh` relaunches offline. FORCE=1 installs anyway.
#
# torch: the CPU-only build (pinned) unless nvidia-smi sees an NVIDIA GPU, then PyPI's default CUDA build.
# TORCH=cpu or TORCH=cuda overrides the choice; `bash scripts/setup.sh --torch-choice` prints it and installs nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
STAMP=.venv/.interplab-setup
TORCH_PIN="torch==2.13.0"
CPU_INDEX=https://download.pytorch.org/whl/cpu

# Sets TORCH_BUILD (cpu|cuda), TORCH_WHY and TORCH_PIP (the pip arguments).
choose_torch() {
  TORCH_BUILD=${TORCH:-}
  if [ -n "$TORCH_BUILD" ]; then
    TORCH_WHY="TORCH=$TORCH_BUILD"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    TORCH_BUILD=cuda TORCH_WHY="nvidia-smi sees an NVIDIA GPU"
  else
    TORCH_BUILD=cpu TORCH_WHY="no NVIDIA GPU: nvidia-smi absent or failing"
  fi
  case "$TORCH_BUILD" in
    # a bare `torch` would pull a multi-GB CUDA build; one retry: where the index is unreachable but a local wheel
    # is configured (pip's find-links), pip's default five retries per package only cost minutes
    cpu) TORCH_PIP=("$TORCH_PIN" --index-url "$CPU_INDEX" --retries 1) ;;
    cuda) TORCH_PIP=("$TORCH_PIN") ;;                           # PyPI's default Linux build bundles CUDA
    *) echo "setup: TORCH=$TORCH_BUILD: use TORCH=cpu or TORCH=cuda" >&2; exit 2 ;;
  esac
}

if [ "${1:-}" = "--torch-choice" ]; then
  choose_torch
  echo "setup: torch: $TORCH_BUILD build ($TORCH_WHY): pip install ${TORCH_PIP[*]}"
  exit 0
fi

stamp() { cat pyproject.toml scripts/setup.sh | "$1" -c 'import hashlib, sys
print(hashlib.sha256(sys.stdin.buffer.read() + sys.version.encode()).hexdigest())'; }

if [ -z "${FORCE:-}" ] && [ -x .venv/bin/python ] && [ -f "$STAMP" ] \
    && [ "$(cat "$STAMP")" = "$(stamp .venv/bin/python)" ]; then
  echo "setup: .venv is up to date; nothing to install (FORCE=1 bash scripts/setup.sh reinstalls)"
  exit 0
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
rm -f "$STAMP"  # (an interrupted install must not look current)
python -m pip install -q --upgrade pip >/dev/null
if python -c "import torch" 2>/dev/null; then
  echo "setup: torch: keeping the installed $(python -c 'import torch
print(torch.__version__, "(CUDA " + torch.version.cuda + ")" if torch.version.cuda else "(CPU-only)")')"
else
  choose_torch
  echo "setup: torch: installing the $TORCH_BUILD build ($TORCH_WHY): pip install ${TORCH_PIP[*]}"
  python -m pip install -q "${TORCH_PIP[@]}"
fi
# The widget bundle is committed (pip users need no node); the build hook rebuilds it only when missing.
python -m pip install -q -e ".[dev]"
stamp python > "$STAMP"
echo "setup: .venv is ready"
