#!/usr/bin/env bash
# Do the pinned kernels (train_ioi_tiny --cpu-isa avx2) give the same weights on other x86-64 CPUs?
#
# Trains a few steps of the shipped recipe with the kernels pinned, here and under QEMU's user-mode emulation of
# other CPUs (an Intel without AVX-512, an AMD EPYC), and compares the bytes of model.safetensors. QEMU's emulated
# floating point is exact (a check: ONEDNN_MAX_CPU_ISA=AVX2 makes this CPU's exact GELU match emulated Haswell's
# bit for bit, and without it the two differ), so a difference is the kernels' doing. Emulated arithmetic is some
# 4000 times slower (a 302 MFLOP matrix product: 0.03 s here, 104 s under qemu), so the runs are the recipe's
# model, threads and every part of its step (forward, backward, AdamW, the weight average) at batch 2, for a few
# steps, without the evaluation: 4 steps (the default) took 12 minutes on a 2-core machine. A script to run by
# hand, not a test.
#
# usage: bash scripts/pinned_weights.sh [STEPS] [CPU...]      (defaults: 4 steps, Haswell EPYC-Rome)
# needs: .venv (scripts/setup.sh) and qemu-x86_64 (apt-get install -y qemu-user); x86-64 with AVX2 only
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4}
shift || true
cpus=("$@")
[ ${#cpus[@]} -gt 0 ] || cpus=(Haswell EPYC-Rome)
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found: apt-get install -y qemu-user" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=$PWD/.venv/bin/python

train() {  # NAME [qemu-x86_64 -cpu CPU]: a pinned run into $work/NAME, then the sha256 of its weights
    local name=$1
    shift
    local t0=$SECONDS
    HF_HUB_OFFLINE=1 "$@" "$py" -m interplab.zoo.train_ioi_tiny --cpu-isa avx2 --steps "$steps" --batch 2 \
        --eval-every 0 --out "$work/$name" >"$work/$name.log" 2>&1 \
        || { echo "$name: the run failed; the end of its log:" >&2; tail -n 20 "$work/$name.log" >&2; exit 1; }
    printf '%-22s %s  %s  %4ds\n' "$name" \
        "$(sed -n 's/.*"cpu_capability": "\([A-Z0-9]*\)".*/\1/p' "$work/$name/training_info.json")" \
        "$(sha256sum "$work/$name/model.safetensors" | cut -c1-16)" $((SECONDS - t0))
}

echo "run                    kernels  sha256 of the weights  time"
row=$(train "this CPU")
echo "$row"
reference=$(awk '{print $(NF-1)}' <<<"$row")
pids=()
for cpu in "${cpus[@]}"; do  # the emulated runs side by side
    (train "qemu $cpu" qemu-x86_64 -cpu "$cpu" >"$work/$cpu.row"; cat "$work/$cpu.row") &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
differ=0
for cpu in "${cpus[@]}"; do
    grep -q "$reference" "$work/$cpu.row" || { echo "qemu $cpu: other weights than this CPU's" >&2; differ=1; }
done
[ $differ = 0 ] && echo "the same weights on every CPU (${#cpus[@]} emulated, $steps steps)"
exit $differ
