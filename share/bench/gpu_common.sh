# Shared by the GPU benchmarks and share/scripts/gpu-check.sh (sourced).
# gpu_unavailable_reason BUILD_DIR prints why no GPU run is possible here
# ("" when one is): no driver (nvidia-smi), no device, or no libftrain_cuda.so
# in the build. require_gpu BUILD_DIR WHAT stops a benchmark with that reason
# (exit 2) instead of printing numbers that were never measured.
gpu_unavailable_reason() {
  local build=$1
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "nvidia-smi is not installed (no NVIDIA driver)"
  elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "nvidia-smi lists no GPU"
  elif [[ ! -f "$build/libftrain_cuda.so" ]]; then
    echo "$build/libftrain_cuda.so was not built (configure with a CUDA toolkit, FTRAIN_CUDA=ON)"
  fi
}
require_gpu() {
  local reason
  reason=$(gpu_unavailable_reason "$1")
  if [[ -n "$reason" ]]; then
    echo "$2: refusing to run: it measures a GPU and there is none usable here: $reason." >&2
    exit 2
  fi
}
# H100 SXM dense bf16 peak (NVIDIA's datasheet, without sparsity), the MFU
# denominator for both ftrain and PyTorch; override with FTRAIN_PEAK_TFLOPS
# on another GPU (H200 SXM has the same 989).
GPU_PEAK_TFLOPS="${FTRAIN_PEAK_TFLOPS:-989}"
