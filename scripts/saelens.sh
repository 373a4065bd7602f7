#!/usr/bin/env bash
# SAELens as the independent reference for interplab's SAEs, in an environment of its own: sae-lens brings
# transformer-lens and its own pins, which the main .venv does not take. Builds build/venv-saelens: the CPU torch
# scripts/setup.sh pins, then sae-lens (which brings safetensors and huggingface-hub, all interplab.sae needs: the
# tests load interplab/sae.py and interplab/errors.py from this checkout without interplab/__init__.py, so no
# widgets, no Lab, and this project is not installed there). Then runs
# tests/saelens_ref there. Run by scripts/test.sh after the main tests; like vllm.sh it installs only when
# pyproject.toml or this script changed (FORCE=1 reinstalls).
#   bash scripts/saelens.sh              build if needed, run tests/saelens_ref
#   bash scripts/saelens.sh -k topk      extra arguments go to pytest
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
VENV=build/venv-saelens
STAMP=$VENV/.interplab-setup
stamp() { cat pyproject.toml scripts/saelens.sh | "$1" -c 'import hashlib, sys
print(hashlib.sha256(sys.stdin.buffer.read() + sys.version.encode()).hexdigest())'; }

if [ -n "${FORCE:-}" ] || [ ! -x "$VENV/bin/python" ] || [ ! -f "$STAMP" ] \
    || [ "$(cat "$STAMP")" != "$(stamp "$VENV/bin/python")" ]; then
  echo "saelens: building $VENV (sae-lens and its dependencies: a few minutes)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu --retries 1
  "$VENV/bin/python" -m pip install -q "sae-lens>=6.5,<7" "pytest>=8"
  stamp "$VENV/bin/python" > "$STAMP"
  echo "saelens: $VENV ready, sae-lens $("$VENV/bin/python" -c 'import importlib.metadata as m
print(m.version("sae-lens"))'), $(du -sh "$VENV" | cut -f1) on disk"
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# (its own rootdir: the main suite's conftest and pytest settings are the main environment's)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly -c /dev/null --rootdir tests/saelens_ref \
  --confcutdir tests/saelens_ref tests/saelens_ref "$@"
