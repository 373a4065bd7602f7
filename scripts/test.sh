#!/usr/bin/env bash
# Every test: sets up the venv, node deps and Debian's Chromium (browser tests), then runs pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
. .venv/bin/activate
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; browser tests will be skipped"
  else
    echo "warning: chromium missing (sudo apt-get install chromium); browser tests will be skipped"
  fi
fi
if command -v npm >/dev/null 2>&1; then
  (cd js && npm ci --no-audit --no-fund --loglevel=error)   # the staleness check rebuilds from these
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p artifacts
# Random test order (pytest-randomly), reproducible: -q hides pytest-randomly's own "Using --randomly-seed=N" line,
# so the seed is chosen and printed here; SEED=N repeats an order, -p no:randomly runs in file order.
seed="${SEED:-$RANDOM}"
echo "test order: random, --randomly-seed=$seed (repeat it: SEED=$seed bash scripts/test.sh)"
python -m pytest -q -p no:cacheprovider -p randomly --randomly-seed="$seed" "$@"
# The vLLM engine's tests, in their own environment (scripts/vllm.sh builds it); only for a whole run
if [ $# -eq 0 ] && [ -z "${SKIP_VLLM:-}" ]; then
  bash scripts/vllm.sh
fi
# SAELens as the reference for interplab's SAEs, in its own environment too (scripts/saelens.sh builds it)
if [ $# -eq 0 ] && [ -z "${SKIP_SAELENS:-}" ]; then
  bash scripts/saelens.sh
fi
# circuit-tracer as the reference for interplab's attribution graphs, in SAELens's environment
if [ $# -eq 0 ] && [ -z "${SKIP_CIRCUIT_TRACER:-}" ]; then
  bash scripts/circuit_tracer.sh
fi
# sae-dashboard as the reference for interplab's feature statistics, in its own environment (its pins differ)
if [ $# -eq 0 ] && [ -z "${SKIP_SAE_DASHBOARD:-}" ]; then
  bash scripts/sae_dashboard.sh
fi
