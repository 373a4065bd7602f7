#!/usr/bin/env bash
# For a GPU machine that cannot reach a package index but has Python with a CUDA torch and transformers (a typical
# CUDA image): downloads, here, the wheels interplab and the GPU checks need beyond such an image into .whl/ (git
# ignores it), for that machine's Python; copy .whl/ along with the checkout and `bash scripts/gpu_check.sh` installs
# what is missing from it (pip --no-index: what the machine already has, torch above all, stays).
#   bash scripts/gpu_wheels.sh                  # Python 3.12, x86-64 Linux
#   PYVER=3.11 bash scripts/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYVER=${PYVER:-3.12}
PY=${PYTHON:-python3}
# the widgets and plots (interplab's own dependencies beyond torch/transformers), and a kernel for the notebooks
WANT=(anywidget ipywidgets plotly nbclient nbformat ipykernel)
# what a CUDA image already holds, and big: not downloaded (gpu_check.sh then fails with pip's own message where one
# is missing after all)
SKIP='^(torch|numpy|nvidia|triton|sympy|networkx|jinja2|markupsafe|filelock|fsspec|typing.extensions|packaging|setuptools)'
rm -rf .whl
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
"$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp "${platforms[@]}" \
  -d .whl "${WANT[@]}"
for f in .whl/*.whl; do
  name=$(basename "$f" | tr 'A-Z' 'a-z')
  if [[ "$name" =~ $SKIP ]]; then rm -f "$f"; fi
done
echo "gpu_wheels: $(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1), for Python $PYVER in .whl/ (${WANT[*]} and their needs)"
