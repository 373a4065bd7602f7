#!/usr/bin/env bash
# Checks the lower bounds pyproject.toml declares: installs the project's direct dependencies at their lowest allowed
# versions (uv's --resolution lowest-direct; what they pull in at its newest) in a separate environment,
# build/venv-lowest, and runs the non-browser tests that exercise them there. Run by .ci/run after scripts/test.sh.
#
# torch too: the lowest version pyproject.toml allows (its CPU build where PyTorch's CPU index answers; else PyPI's
# Linux build, which brings its CUDA libraries, about 3 GB, kept in pip's cache for the next run).
#   bash scripts/lowest.sh                  the check (a package index is needed: it installs)
#   bash scripts/lowest.sh -k sites         extra arguments go to pytest
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh  # the main .venv brings uv (dev extra)
VENV=build/venv-lowest
UV=.venv/bin/uv
rm -rf "$VENV"
"$UV" venv -q --seed --python .venv/bin/python "$VENV"
# torch at the floor pyproject.toml declares ("torch>=2.6" -> torch==2.6.0); pip honours the machine's configuration
TORCH_FLOOR=$(sed -n 's/^ *"torch>=\([0-9.]*\)".*/\1/p' pyproject.toml)
case "$TORCH_FLOOR" in *.*.*) ;; *) TORCH_FLOOR="$TORCH_FLOOR.0" ;; esac
"$VENV/bin/python" -m pip install -q "torch==$TORCH_FLOOR" --extra-index-url https://download.pytorch.org/whl/cpu \
  --retries 1
# The project at the lowest versions it allows; torch held at the one just installed.
echo "torch==$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')" > build/lowest-constraints.txt
# The [big] extra (accelerate) too: tests/core/test_offload.py checks its lower bound.
"$UV" pip install -q --python "$VENV/bin/python" --resolution lowest-direct -c build/lowest-constraints.txt -e ".[big]"
# Test tools at their newest: they are not what is being checked. (ipykernel: widgets live in a kernel, and
# ipywidgets 8.0 cannot make one without it.)
"$UV" pip install -q --python "$VENV/bin/python" "pytest>=8" "pytest-randomly>=3.15" "ipykernel>=6"
echo "lowest allowed versions:"
"$UV" pip list --python "$VENV/bin/python" 2>/dev/null \
  | grep -iE '^(torch|transformers|tokenizers|safetensors|huggingface-hub|anywidget|ipywidgets|plotly|numpy|tqdm|accelerate) ' \
  | sed 's/^/  /'
# The library's tests, without a browser or JupyterLab (the lab extra is not installed here); test_peer_nnsight needs
# the dev extra's nnsight.
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false INTERPLAB_LOWEST=1
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly \
  tests/test_install.py::test_this_environment_holds_the_declared_lowest_versions \
  tests/core tests/features tests/test_patching.py tests/test_steering.py tests/test_controller.py \
  --ignore=tests/core/test_peer_nnsight.py "$@"
