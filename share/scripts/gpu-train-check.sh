#!/usr/bin/env bash
# Training on the GPU, the steps of share/scripts/gpu-check.sh that run the
# ftrain executable with `device cuda` (one subcommand each):
#
#   gpu-train-check.sh loader          `device cuda` planned with --check (tiny ViT, synthetic
#                                      images): the backend library loads, finds the GPU and
#                                      the run header says the engine runs on cuda
#   gpu-train-check.sh memcheck-step   compute-sanitizer memcheck on the first training
#                                      steps of the regression deck (tests/regression/decks/tiny.in):
#                                      4, its warmup length (fewer is refused by its schedule)
#   gpu-train-check.sh llama-golden    the tiny Llama's 20-step curve against the host goldens
#                                      (tests/regression/cases/golden_np1_full_shard.json)
#   gpu-train-check.sh vit-golden      the tiny ViT (inputs/tiny_vit.in), 40 steps, on the GPU
#                                      against the same deck on the host, run now
#   gpu-train-check.sh tensor-parallel the regression deck with `parallel tensor 2` at np 2 on one
#                                      GPU (the vocabulary-parallel embedding and head, the tensor
#                                      group's collectives on the staged communicator: NCCL refuses
#                                      two ranks on one GPU) against tensor 2 and pure FSDP (np 1)
#                                      on the host, run now
#   gpu-train-check.sh context-parallel the same with `parallel context 2`: each rank holds two
#                                      chunks of every window and the attention runs as a ring
#                                      (the block kernels, send/recv on the staged communicator)
#
# Each wraps the unchanged deck in one that sets `device` first (decks
# include each other), so the GPU runs exactly the configuration the host
# goldens come from. The curves may differ from the host's by reduction
# order only: FTRAIN_GPU_GOLDEN_TOLERANCE (relative, default 1e-4) is the
# bound, looser than the host-vs-host 1e-5. FTRAIN_GPU_CHECK_DEVICE=host runs
# the same harness on the host (how it is checked without a GPU).
set -euo pipefail
FTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${FTRAIN_BUILD_DIR:-$FTRAIN_ROOT/build}"
DEVICE="${FTRAIN_GPU_CHECK_DEVICE:-cuda}"
TOLERANCE="${FTRAIN_GPU_GOLDEN_TOLERANCE:-1e-4}"
WORK="${FTRAIN_GPU_CHECK_WORK:-$(mktemp -d /tmp/ftrain-gpu-train.XXXXXX)}"
mkdir -p "$WORK"
FTRAIN="$BUILD/bin/ftrain" PREP="$BUILD/bin/ftrain-prep"
MPI_FLAGS=(--mpi-flag=--oversubscribe)
if [[ $(id -u) -eq 0 ]]; then MPI_FLAGS+=(--mpi-flag=--allow-run-as-root); fi

# wrap DECK OUT [device-as-variable]: OUT sets the device, then includes DECK.
wrap() {
  if [[ "${3:-}" == variable ]]; then
    printf 'variable device %s\ndevice ${device}\ninclude %s\n' "$DEVICE" "$1" > "$2"
  else
    printf 'device %s\ninclude %s\n' "$DEVICE" "$1" > "$2"
  fi
}

case "${1:-}" in
  loader)
    wrap "$FTRAIN_ROOT/inputs/tiny_vit.in" "$WORK/loader_device.in" variable
    "$FTRAIN" -var run_dir "$WORK/loader_run" "$WORK/loader_device.in" --check > "$WORK/loader.out" 2>&1 ||
      { cat "$WORK/loader.out"; exit 1; }
    head -n 3 "$WORK/loader.out"
    grep -q "device: $DEVICE \\[" "$WORK/loader.out" ||
      { echo "gpu-train-check loader: the run header does not say 'device: $DEVICE ['"; exit 1; }
    # --check plans `device cuda` even where no GPU is usable: the backend
    # must have loaded, not only been planned for.
    [[ "$DEVICE" == host ]] || grep -q "(ops backend: $DEVICE)" "$WORK/loader.out" ||
      { echo "gpu-train-check loader: the CUDA backend did not load (the header does not say '(ops backend: $DEVICE)')"; exit 1; }
    ;;
  memcheck-step)
    wrap "$FTRAIN_ROOT/tests/regression/decks/tiny.in" "$WORK/tiny_device.in"
    mkdir -p "$WORK/data"
    "$PREP" synthetic --out "$WORK/data/train.tok" --tokens 50000 --vocab 64 --seed 7 \
      --eval-out "$WORK/data/eval.tok" --eval-tokens 4096 > /dev/null
    sanitizer=()
    # Memory errors only: NCCL's start-up probes kernels for other GPUs and
    # gets cudaErrorNoKernelImageForDevice, which memcheck would count (16 on
    # an H100); ftrain checks every CUDA call's status itself.
    [[ "$DEVICE" == host ]] || sanitizer=(compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1)
    "${sanitizer[@]}" "$FTRAIN" -var data_dir "$WORK/data" -var run_dir "$WORK/memcheck_run" -var max_steps 4 \
      "$WORK/tiny_device.in"
    ;;
  llama-golden)
    wrap "$FTRAIN_ROOT/tests/regression/decks/tiny.in" "$WORK/tiny_device.in"
    python3 - "$FTRAIN_ROOT/tests/regression/cases/golden_np1_full_shard.json" "$WORK/golden_device.json" \
      "$WORK/tiny_device.in" "$TOLERANCE" "$DEVICE" <<'PY'
import json, sys
case = json.load(open(sys.argv[1]))
case["deck"] = sys.argv[3]  # absolute: the runner joins it to its own directory, which keeps it
case["tolerance"] = {"relative": float(sys.argv[4])}
case["description"] = f"golden_np1_full_shard on device {sys.argv[5]} (share/scripts/gpu-train-check.sh)"
json.dump(case, open(sys.argv[2], "w"), indent=1)
PY
    python3 "$FTRAIN_ROOT/tests/regression/run_case.py" "$WORK/golden_device.json" --ftrain "$FTRAIN" --prep "$PREP" \
      --workdir "$WORK/golden_run" "${MPI_FLAGS[@]}"
    ;;
  vit-golden)
    wrap "$FTRAIN_ROOT/inputs/tiny_vit.in" "$WORK/tiny_vit_device.in" variable
    python3 - "$FTRAIN_ROOT/tests/regression/cases/vit_np124_fp32.json" "$WORK/vit_device.json" \
      "$WORK/tiny_vit_device.in" "$TOLERANCE" "$DEVICE" <<'PY'
import json, sys
case = json.load(open(sys.argv[1]))
case["deck"] = sys.argv[3]  # absolute: the runner joins it to its own directory, which keeps it
case["tolerance"] = {"relative": float(sys.argv[4])}
case["description"] = f"vit_np124_fp32's np1 run on the host and on device {sys.argv[5]} (share/scripts/gpu-train-check.sh)"
one_rank = case["runs"][0]["variables"]
case["runs"] = [{"name": name, "np": 1, "variables": {**one_rank, "device": device}}
                for name, device in (("host", "host"), ("on_" + sys.argv[5], sys.argv[5]))]
case["np"] = 1
json.dump(case, open(sys.argv[2], "w"), indent=1)
PY
    python3 "$FTRAIN_ROOT/tests/regression/run_case.py" "$WORK/vit_device.json" --ftrain "$FTRAIN" --prep "$PREP" \
      --workdir "$WORK/vit_runs" "${MPI_FLAGS[@]}"
    ;;
  tensor-parallel|context-parallel)
    dim=${1%-parallel}  # tensor | context: the parallel line's word
    printf 'variable device host\nvariable degree 2\ndevice ${device}\ndevice_comm mpi\ninclude %s\nparallel %s ${degree}\n' \
      "$FTRAIN_ROOT/tests/regression/decks/tiny.in" "$dim" > "$WORK/tiny_${dim}_parallel.in"
    python3 - "$FTRAIN_ROOT/tests/regression/cases/golden_np1_full_shard.json" "$WORK/${dim}_parallel.json" \
      "$WORK/tiny_${dim}_parallel.in" "$TOLERANCE" "$DEVICE" "$dim" <<'PY'
import json, sys
golden = json.load(open(sys.argv[1]))
device, dim = sys.argv[5], sys.argv[6]
runs = [("fsdp_host", 1, "host", "1"), (dim + "2_host", 2, "host", "2"), (dim + "2_on_" + device, 2, device, "2")]
case = {
    "kind": "curves",
    "description": f"tiny.in with parallel {dim} 2 at np 2 on device {device} against {dim} 2 and pure FSDP on the "
                   "host (share/scripts/gpu-train-check.sh)",
    "deck": sys.argv[3],  # absolute: the runner joins it to its own directory, which keeps it
    "np": 2,
    "corpus": golden["corpus"],
    "runs": [{"name": name, "np": np, "variables": {"device": dev, "degree": degree, "max_steps": "12"}}
             for name, np, dev, degree in runs],
    "compare": ["loss", "grad_norm", "eval_loss"],
    "tolerance": {"relative": float(sys.argv[4])},
    "falls": 0.9,
}
json.dump(case, open(sys.argv[2], "w"), indent=1)
PY
    python3 "$FTRAIN_ROOT/tests/regression/run_case.py" "$WORK/${dim}_parallel.json" --ftrain "$FTRAIN" --prep "$PREP" \
      --workdir "$WORK/${dim}_parallel_runs" "${MPI_FLAGS[@]}"
    ;;
  *)
    echo "usage: $0 loader|memcheck-step|llama-golden|vit-golden|tensor-parallel|context-parallel" >&2
    exit 2
    ;;
esac
