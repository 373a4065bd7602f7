#!/usr/bin/env bash
# SAELens as the independent reference for interplab's SAEs, in an environment of its own: sae-lens brings
# transformer-lens and its own pins, which the main .venv does not take. Builds build/venv-saelens: the CPU torch
# scripts/setup.sh pins, then sae-lens (which brings safetensors and huggingface-hub, all interplab.sae needs: the
# tests load interplab/sae.py and interplab/errors.py from this checkout without interplab/__init__.py, so no
# widgets, no Lab, and this project is not installed there). circuit-tracer shares it (scripts/circuit_tracer.sh):
# one torch, about a minute more than sae-lens alone and the same 1.9 GB; its pins hold transformers at 4.57 and
# transformer-lens at 3.2 (sae-lens alone takes 5.x and 3.9; tests/saelens_ref passes on either). Then
# runs tests/saelens_ref there. Run by scripts/test.sh after the main tests; like vllm.sh it installs only when
# pyproject.toml or this script changed (FORCE=1 reinstalls).
#   bash scripts/saelens.sh              build if needed, run tests/saelens_ref
#   bash scripts/saelens.sh -k topk      extra arguments go to pytest
#   bash scripts/saelens.sh --build      build if needed, run nothing
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/side_venv.sh
VENV=build/venv-saelens

if side_venv_stale "$VENV" scripts/saelens.sh; then
  echo "saelens: building $VENV (sae-lens and its dependencies: a few minutes)"
  side_venv_start "$VENV"
  "$VENV/bin/python" -m pip install -q "sae-lens>=6.5,<7" "circuit-tracer==0.5.0" "pytest>=8"
  side_venv_done "$VENV" scripts/saelens.sh
  echo "saelens: $VENV ready, $("$VENV/bin/python" -c 'import importlib.metadata as m
print(", ".join(f"{p} {m.version(p)}" for p in ("sae-lens", "circuit-tracer")))'), $(du -sh "$VENV" | cut -f1) on disk"
fi
[ "${1:-}" = --build ] && exit 0
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# (its own rootdir: the main suite's conftest and pytest settings are the main environment's)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly -c /dev/null --rootdir tests/saelens_ref \
  --confcutdir tests/saelens_ref tests/saelens_ref "$@"
