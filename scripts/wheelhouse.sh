#!/usr/bin/env bash
# The offline wheelhouse for one kind of laptop, made on any machine with network (docs/teaching/INSTALL.md):
#   bash scripts/wheelhouse.sh windows 3.12      -> wheelhouse-windows-py3.12/
#   bash scripts/wheelhouse.sh macos-arm64 3.11  -> wheelhouse-macos-arm64-py3.11/
#   bash scripts/wheelhouse.sh linux 3.11        -> wheelhouse-linux-py3.11/ (x86_64, torch's CPU build)
# `pip download --platform` alone picks dependencies by the machine it runs on (a Windows wheelhouse made on Linux
# would lack pywinpty and hold ptyprocess), so uv first resolves the whole set for the target platform
# (`uv pip compile --python-platform`), then pip downloads exactly that set's wheels for it (`--no-deps`).
# Needs uv (the dev extra has it) and the interplab wheel in dist/ (`python -m pip wheel --no-deps . -w dist`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KIND=${1:?"which laptops: windows, macos-arm64 or linux"}
PY=${2:?"their Python minor version, e.g. 3.11"}
TORCH=${TORCH:-2.13.0}
UV=${UV:-$(command -v uv || echo .venv/bin/uv)}
CPU_INDEX=https://download.pytorch.org/whl/cpu
case "$KIND" in
  windows)     TARGET=x86_64-pc-windows-msvc;   PLATFORM=(--platform win_amd64);         INDEX=() ;;
  macos-arm64) TARGET=aarch64-apple-darwin;     PLATFORM=(--platform macosx_14_0_arm64); INDEX=()
               export MACOSX_DEPLOYMENT_TARGET=14.0 ;;  # torch 2.13's macOS wheels need macOS 14
  linux)       TARGET=x86_64-unknown-linux-gnu; PLATFORM=(--platform manylinux_2_28_x86_64)
               INDEX=(--extra-index-url "$CPU_INDEX"); TORCH="$TORCH+cpu" ;;  # PyPI's Linux torch is the CUDA build
  *) echo "wheelhouse: unknown kind $KIND: use windows, macos-arm64 or linux" >&2; exit 2 ;;
esac
WHEEL=$(ls dist/interplab-*-py3-none-any.whl | tail -1)
OUT=${OUT:-wheelhouse-$KIND-py$PY}
mkdir -p "$OUT" build
printf 'interplab[lab] @ file://%s\ntorch==%s\n' "$PWD/$WHEEL" "$TORCH" > build/wheelhouse-$KIND.in
"$UV" pip compile -q --python-platform "$TARGET" --python-version "$PY" "${INDEX[@]}" --index-strategy unsafe-best-match \
  build/wheelhouse-$KIND.in -o build/wheelhouse-$KIND.txt
grep -v '^interplab' build/wheelhouse-$KIND.txt > build/wheelhouse-$KIND-deps.txt
python -m pip download -q --isolated --no-deps --only-binary=:all: "${PLATFORM[@]}" --python-version "$PY" \
  --implementation cp "${INDEX[@]}" --retries 1 -r build/wheelhouse-$KIND-deps.txt -d "$OUT"
cp "$WHEEL" "$OUT/"
echo "wheelhouse: $OUT: $(ls "$OUT" | wc -l) wheels, $(du -sh "$OUT" | cut -f1), for $KIND, Python $PY"
