#!/usr/bin/env bash
# ViT-H/14 images/s on one GPU, FP8 (delayed scaling, hybrid) against BF16,
# with the recipe of inputs/vit_huge_fp8.in (seed article 002's experiment),
# a few steps each, one rank. Run by share/scripts/gpu-check.sh.
#
#   bash share/bench/vit_huge_fp8_gpu.sh [steps] [micro]
#
# Without a GPU it refuses, saying why, and exits 2. With one, ftrain itself
# refuses `device cuda` while the training engine runs on the host only
# (share/doc/status.md); the script then prints ftrain's reason and exits 1.
set -euo pipefail
FTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${FTRAIN_BUILD_DIR:-$FTRAIN_ROOT/build}"
STEPS="${1:-20}"
MICRO="${2:-32}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "vit_huge_fp8_gpu: no GPU here (nvidia-smi lists none): ViT-H/14 images/s can only be measured on a GPU." >&2
  exit 2
fi
FTRAIN="$BUILD/bin/ftrain"
[[ -x "$FTRAIN" ]] || { echo "vit_huge_fp8_gpu: build ftrain first ($BUILD)" >&2; exit 2; }
WORK="$(mktemp -d /tmp/ftrain-vit-fp8.XXXXXX)"
echo "device:  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
echo "commit:  $(git -C "$FTRAIN_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
for precision in bf16 fp8; do
  deck="$WORK/vit_h14_$precision.in"
  { echo "device cuda"; cat "$FTRAIN_ROOT/inputs/vit_huge_fp8.in"; } > "$deck"
  log="$WORK/$precision.log"
  if ! (cd "$WORK" && "$FTRAIN" -var precision "$precision" -var micro "$MICRO" -var max_steps "$STEPS" \
        -var run_dir "$WORK/run_$precision" "$deck") > "$log" 2>&1; then
    echo "vit_huge_fp8_gpu: precision $precision did not run:" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  # Throughput of the steps after the first (warm-up), as the log reports it.
  echo "precision $precision: $(grep -Eo '[0-9.]+ img/s' "$log" | tail -n +2 | awk '{s+=$1; n++} END {if (n) printf "%.1f images/s (mean of %d steps)", s/n, n; else print "no throughput in the log"}')"
done
