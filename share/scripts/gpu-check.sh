#!/usr/bin/env bash
# The one command for a GPU machine (share/doc/status.md, GPU.md): records
# the device, runs what a GPU must confirm about the CUDA backend and writes
# a markdown report for share/doc/gpu-runs/. Run it after building
# (share/scripts/test.sh, or a build shipped with device-pack.sh):
#
#   bash share/scripts/gpu-check.sh            # report to share/doc/gpu-runs/
#   FTRAIN_GPU_REPORT=/tmp/r.md bash share/scripts/gpu-check.sh
#
# Without a GPU (no nvidia-smi, no device, or no libftrain_cuda.so) it says
# so, lists what it would have run, and exits 0: CI runs it that way
# (.ci/run), so the script itself cannot rot unnoticed.
set -euo pipefail
FTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FTRAIN_BUILD_DIR="${FTRAIN_BUILD_DIR:-$FTRAIN_ROOT/build}"
STAMP="$(date -u +%Y-%m-%dT%H%MZ)"
REPORT="${FTRAIN_GPU_REPORT:-$FTRAIN_ROOT/share/doc/gpu-runs/$STAMP.md}"

# What a GPU run does, in order; each step's command is run from $FTRAIN_ROOT.
STEPS=(
  "device|nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv"
  "gpu tests|ctest --test-dir $FTRAIN_BUILD_DIR -L gpu --output-on-failure"
  "memcheck of the CUDA op tests|compute-sanitizer --tool memcheck --error-exitcode 1 $FTRAIN_BUILD_DIR/tests/gpu/gpu_test_cuda_ops"
  "memcheck of the CUDA reference attention tests|compute-sanitizer --tool memcheck --error-exitcode 1 $FTRAIN_BUILD_DIR/tests/gpu/gpu_test_cuda_attention --gtest_filter=CudaReferenceAttention.ForwardAndBackwardMatchTheHost"
  "device communicators: NCCL at np 1, the staged communicator (device_comm mpi) at np 2 and 4 on one GPU (issue 19)|ctest --test-dir $FTRAIN_BUILD_DIR -R '^gpu_device_comm_' --output-on-failure"
  "memcheck of the NCCL communicator at np 1|FTRAIN_TEST_DEVICE_COMM=nccl compute-sanitizer --tool memcheck --error-exitcode 1 $FTRAIN_BUILD_DIR/tests/gpu/gpu_test_device_comm"
  "racecheck of the CUDA op tests|compute-sanitizer --tool racecheck --error-exitcode 1 $FTRAIN_BUILD_DIR/tests/gpu/gpu_test_cuda_ops --gtest_filter=CudaOps.EveryImplementedOpMatchesTheHost"
)
# Not runnable yet, because the training engine runs on the host only
# (share/doc/status.md): listed so a GPU run reports them as still open.
PENDING=(
  "compute-sanitizer memcheck on one training step (device cuda)"
  "tiny Llama and tiny ViT curves on the GPU against the host goldens (tests/regression)"
  "Llama 3.2 1B at seq 4096, bf16: tokens/s and MFU next to PyTorch SDPA (torch.compile on/off)"
  "FSDP on the GPU, all four strategies, through NCCL (np 1) and the staged communicator (np 2/4 on one GPU), against the host curves"
  "kill one rank of a GPU run (SIGKILL): the job ends within 60 s; stall one rank: the NCCL watchdog (ncclCommAbort, MPI_Abort) ends it within collective_timeout + 10 s naming rank, collective and unit"
  "communication hidden behind compute on the GPU: CUDA events timed on the compute and communication streams over a step (Llama 3.2 1B shape)"
  "memory report: per-rank device memory after load and peak in the step, next to the --check plan"
  "attention alone vs PyTorch SDPA, fwd+bwd TFLOP/s (needs the cuDNN SDPA path)"
)

no_gpu_reason=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  no_gpu_reason="nvidia-smi is not installed (no NVIDIA driver)"
elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  no_gpu_reason="nvidia-smi lists no GPU"
elif [[ ! -f "$FTRAIN_BUILD_DIR/libftrain_cuda.so" ]]; then
  no_gpu_reason="$FTRAIN_BUILD_DIR/libftrain_cuda.so was not built (configure with a CUDA toolkit, FTRAIN_CUDA=ON)"
fi

if [[ -n "$no_gpu_reason" ]]; then
  echo "gpu-check: no GPU here: $no_gpu_reason."
  echo "gpu-check: on a GPU machine this would run, from $FTRAIN_ROOT:"
  for step in "${STEPS[@]}"; do echo "  - ${step%%|*}: ${step#*|}"; done
  echo "gpu-check: and report as not yet runnable (the engine is host-only):"
  for item in "${PENDING[@]}"; do echo "  - $item"; done
  echo "gpu-check: nothing was run; exiting 0."
  exit 0
fi

mkdir -p "$(dirname "$REPORT")"
failed=0
{
  echo "# GPU check $STAMP"
  echo
  echo "commit: $(git -C "$FTRAIN_ROOT" rev-parse HEAD 2>/dev/null || echo unknown), host: $(hostname)"
  echo
} > "$REPORT"
cd "$FTRAIN_ROOT"
for step in "${STEPS[@]}"; do
  name="${step%%|*}" command="${step#*|}"
  echo "gpu-check: $name: $command"
  set +e
  output="$(bash -c "$command" 2>&1)"
  status=$?
  set -e
  [[ $status -eq 0 ]] || failed=1
  {
    echo "## $name: $([[ $status -eq 0 ]] && echo passed || echo "FAILED (exit $status)")"
    echo
    echo '```'
    echo "\$ $command"
    echo "$output" | tail -n 60
    echo '```'
    echo
  } >> "$REPORT"
done
{
  echo "## Not yet runnable (engine host-only)"
  echo
  for item in "${PENDING[@]}"; do echo "- $item"; done
} >> "$REPORT"
echo "gpu-check: report written to $REPORT"
exit $failed
