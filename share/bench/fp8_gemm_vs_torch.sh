#!/usr/bin/env bash
# FP8 GEMMs: ftrain's CUDA backend (cuBLASLt FP8 plans, tests/bench/bench_fp8_gemm)
# against torch._scaled_mm on the same shapes (Llama 3.2 1B / 3B linears at
# 4096 tokens, and 8192^3), in TFLOP/s, on one GPU in one run. Run by
# share/scripts/gpu-check.sh on a GPU machine.
#
#   bash share/bench/fp8_gemm_vs_torch.sh [iterations]
#
# Without a GPU it refuses, saying why, and exits 2: there is nothing to
# measure here, and no number is written.
set -euo pipefail
FTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${FTRAIN_BUILD_DIR:-$FTRAIN_ROOT/build}"
ITER="${1:-50}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "fp8_gemm_vs_torch: no GPU here (nvidia-smi lists none): FP8 GEMM speed can only be measured on a GPU." >&2
  exit 2
fi
[[ -x "$BUILD/tests/bench/bench_fp8_gemm" ]] || { echo "fp8_gemm_vs_torch: build tests/bench/bench_fp8_gemm first ($BUILD)" >&2; exit 2; }
echo "device:  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
echo "commit:  $(git -C "$FTRAIN_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "== ftrain (cuBLASLt FP8 plans; bf16 linear for reference) =="
"$BUILD/tests/bench/bench_fp8_gemm" "$ITER"
echo "== PyTorch torch._scaled_mm (E4M3 x E4M3, fast accum) and bf16 matmul =="
python3 - "$ITER" <<'PY'
import sys, time, torch
iters = int(sys.argv[1])
assert torch.cuda.is_available(), "torch sees no GPU"
shapes = [("1B q/o_proj", 4096, 2048, 2048), ("1B k/v_proj", 4096, 2048, 512), ("1B gate/up", 4096, 2048, 8192),
          ("1B down", 4096, 8192, 2048), ("3B q/o_proj", 4096, 3072, 3072), ("3B gate/up", 4096, 3072, 8192),
          ("3B down", 4096, 8192, 3072), ("8192^3", 8192, 8192, 8192)]
def timed(f):
    f(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters): f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters
print(f"{'shape':14s} {'tokens':>6s} {'in':>6s} {'out':>6s}  {'bf16 mm':>12s} {'_scaled_mm':>12s}")
one = torch.ones((), device="cuda")
for name, t, k, n in shapes:
    x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    xq, wq = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    flops = 2.0 * t * k * n
    bf16 = timed(lambda: x @ w.t())
    fp8 = timed(lambda: torch._scaled_mm(xq, wq.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True))
    print(f"{name:14s} {t:6d} {k:6d} {n:6d}  {flops/bf16/1e12:9.1f} TF {flops/fp8/1e12:9.1f} TF")
PY
