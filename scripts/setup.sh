#!/usr/bin/env bash
# Sets up .venv from scratch (idempotent): CPU torch first, then the project with its dev extra.
# Sourced by scripts/lab.sh and scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
# The CPU build first: a bare `torch` requirement would otherwise pull a multi-GB CUDA build.
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
# The widget bundle is committed (pip users need no node); the build hook rebuilds it only when missing.
python -m pip install -q -e ".[dev]"
