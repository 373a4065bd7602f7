#!/usr/bin/env bash
# circuit-tracer as the independent reference for interplab's attribution graphs: tests/circuit_tracer_ref runs
# circuit_tracer.attribute, prune_graph and compute_graph_scores on ioi-tiny (converted to its TransformerLens backend)
# and compares them with interplab's graph of the same prompt and transcoders. circuit-tracer pins transformers <= 4.57
# (interplab needs >= 5.15), so it lives in SAELens's environment, build/venv-saelens (scripts/saelens.sh builds it),
# and interplab's graph is computed by the main .venv in a subprocess (INTERPLAB_PYTHON overrides which python).
# Run by scripts/test.sh after saelens.sh.
#   bash scripts/circuit_tracer.sh            build if needed, run tests/circuit_tracer_ref
#   bash scripts/circuit_tracer.sh -s         extra arguments go to pytest (-s prints the measured differences)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/saelens.sh --build
VENV=build/venv-saelens
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false INTERPLAB_PYTHON="${INTERPLAB_PYTHON:-$PWD/.venv/bin/python}"
# (its own rootdir: the main suite's conftest and pytest settings are the main environment's)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly -c /dev/null --rootdir tests/circuit_tracer_ref \
  --confcutdir tests/circuit_tracer_ref tests/circuit_tracer_ref "$@"
