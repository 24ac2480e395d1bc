#!/usr/bin/env bash
# Attention alone on the GPU: ftrain's CUDA attention ops (cuDNN fused SDPA
# through attention_backend cudnn, and optionally the reference kernel)
# against PyTorch's F.scaled_dot_product_attention, fwd and fwd+bwd TFLOP/s
# on the same GPU in one run, same shapes, bf16, causal and full.
#   bash share/bench/gpu_attention.sh [B T Hq Hkv D]   defaults: the Llama 3.2 1B shape at seq 4096
# Needs: a GPU, build/tests/bench/bench_cuda_attention, python3 with torch (CUDA).
# FLOP accounting (both sides, FlashAttention's): forward 4 B Hq T^2 D, the
# backward 2.5 times that, halved when causal (with the document mask: the
# sum over documents, T^2 becoming each document's length squared).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FTRAIN_ROOT="$(cd "$here/../.." && pwd)"
BUILD="${FTRAIN_BUILD_DIR:-$FTRAIN_ROOT/build}"
source "$here/gpu_common.sh"
require_gpu "$BUILD" "gpu_attention.sh"
B=${1:-2} T=${2:-4096} HQ=${3:-32} HKV=${4:-8} D=${5:-64}
PY="${FTRAIN_BENCH_PYTHON:-python3}"
bench="$BUILD/tests/bench/bench_cuda_attention"
[[ -x "$bench" ]] || { echo "gpu_attention.sh: $bench is not built (cmake --build $BUILD --target bench_cuda_attention)" >&2; exit 1; }
echo "device:  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
echo "commit:  $(git -C "$FTRAIN_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "shape:   B $B, T $T, Hq $HQ, Hkv $HKV, D $D, bf16"
echo "== ftrain (libftrain_cuda) =="
"$bench" "$B" "$T" "$HQ" "$HKV" "$D" 20 ${FTRAIN_BENCH_BACKENDS:-cudnn}
# The document mask (FTRAIN_BENCH_DOCUMENTS documents per row, 0 skips it):
# fewer calls, since its plans are built on the first one.
DOCS=${FTRAIN_BENCH_DOCUMENTS:-4}
if [[ "$DOCS" != 0 ]]; then
  echo "== ftrain, document mask: $DOCS documents per row (the FLOPs each document needs) =="
  "$bench" "$B" "$T" "$HQ" "$HKV" "$D" 5 ${FTRAIN_BENCH_BACKENDS:-cudnn} --documents "$DOCS"
fi
echo "== PyTorch F.scaled_dot_product_attention =="
"$PY" "$here/pytorch_sdpa_gpu.py" --batch "$B" --seq "$T" --q-heads "$HQ" --kv-heads "$HKV" --head-dim "$D" --repeats 20
