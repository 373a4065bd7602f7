#!/usr/bin/env bash
# sae-dashboard as the independent reference for interplab's feature statistics (ilab.analyses.feature_stats):
# tests/sae_dashboard_ref runs sae-dashboard's own feature-data computation (SaeVisRunner) on ioi-tiny + ioi-tiny-sae
# over corpus tokens and compares densities, maxima, histograms, top examples and interval-group examples with
# interplab's over the same tokens. sae-dashboard 0.8 pins transformer-lens < 3, transformers < 4.57, datasets < 4,
# jaxtyping < 0.3 and safetensors < 0.5, which build/venv-saelens (transformer-lens 3.2, transformers 4.57) does not
# take, so it has an environment of its own, build/venv-saedash; interplab's side runs in the main .venv in a
# subprocess (INTERPLAB_PYTHON overrides which python). Run by scripts/test.sh after circuit_tracer.sh; like
# saelens.sh it installs only when pyproject.toml or this script changed (FORCE=1 reinstalls).
#   bash scripts/sae_dashboard.sh            build if needed, run tests/sae_dashboard_ref
#   bash scripts/sae_dashboard.sh -s         extra arguments go to pytest (-s prints the measured differences)
#   bash scripts/sae_dashboard.sh --build    build if needed, run nothing
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/side_venv.sh
VENV=build/venv-saedash

if side_venv_stale "$VENV" scripts/sae_dashboard.sh; then
  echo "sae-dashboard: building $VENV (sae-dashboard and its dependencies: a few minutes)"
  side_venv_start "$VENV"
  # Its own requirements, less decode-clt (only its Neuronpedia runner's cross-layer transcoders import it), which
  # brings torchvision and torchaudio and with them a CUDA torch from PyPI (6 GB); the pinned CPU torch is held.
  # hf-transfer (hub downloads) is left out too. pyarrow < 23: transformer-lens 2 holds numpy < 2, which newer lack.
  "$VENV/bin/python" -m pip install -q --no-deps "sae-dashboard==0.8.0"
  "$VENV/bin/python" -m pip install -q -c <(echo "torch==$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')") \
    "dataclasses-json>=0.6.4,<0.7" "datasets>=3,<4" "eindex-callum>=0.1,<0.2" "einops>=0.7" "jaxtyping>=0.2.28,<0.3" \
    "matplotlib>=3.8.4,<4" "rich>=13.7.1,<14" "sae-lens>=6.8,<7" "safetensors>=0.4.3,<0.5" "transformer-lens>=2.2,<3" \
    "transformers<4.57" "typer>=0.12.3,<0.13" "pyarrow<23" "pytest>=8"
  side_venv_done "$VENV" scripts/sae_dashboard.sh
  echo "sae-dashboard: $VENV ready, $("$VENV/bin/python" -c 'import importlib.metadata as m
print(", ".join(f"{p} {m.version(p)}" for p in ("sae-dashboard", "sae-lens", "transformer-lens", "transformers")))'), $(du -sh "$VENV" | cut -f1) on disk"
fi
[ "${1:-}" = --build ] && exit 0
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false INTERPLAB_PYTHON="${INTERPLAB_PYTHON:-$PWD/.venv/bin/python}"
# (its own rootdir: the main suite's conftest and pytest settings are the main environment's)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly -c /dev/null --rootdir tests/sae_dashboard_ref \
  --confcutdir tests/sae_dashboard_ref tests/sae_dashboard_ref "$@"
