#!/usr/bin/env bash
# FSDP on one GPU (issue 19): how much communication the step hides behind
# compute, and the --check memory plan next to the device memory measured.
# Llama 3.2 1B's layer shape (4 layers, so 2 ranks fit one GPU), seq 2048,
# bf16, full_shard with forward and backward prefetch:
#   np 1, device_comm nccl  (NCCL on the communication stream)
#   np 2, device_comm mpi   (the staged communicator: NCCL refuses two ranks
#                            on one GPU, and lent machines have one)
# comm_s_per_step is the collectives' busy time (NCCL: CUDA events on the
# communication stream; staged: the progress thread), comm_exposed_s_per_step
# the part the compute stream or the host waited for; hidden = 1 - exposed/busy.
#   bash share/bench/gpu_fsdp_overlap.sh [steps]   (default 10; steps 4+ averaged)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/gpu_common.sh"
require_gpu "${FTRAIN_BUILD_DIR:-$here/../../build}" "gpu_fsdp_overlap.sh"
source "$here/bench_common.sh"
steps=${1:-10}
micro=2
seq=2048
echo "device:  $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
echo "model:   Llama 3.2 1B layer shape, 4 layers, seq $seq, $micro sequence(s) per rank per step, bf16, full_shard"
data=$(bench_corpus 65536 $(( (steps + 1) * 2 * micro * (seq + 1) + 1 )))
printf "%-22s %10s %12s %14s %8s %16s %16s\n" "run" "step s" "comm s/step" "exposed s/step" "hidden" "planned state/rank" "measured peak MiB"
for run_kind in "1 nccl" "2 mpi"; do
  read -r np comm <<<"$run_kind"
  run="$WORK/overlap_np${np}_${comm}"
  cat > "$run.in" <<DECK
device cuda
device_comm $comm
model llama preset llama3.2-1b num_hidden_layers 4
precision bf16
seed 1
data tokens $data
batch micro $micro seq_len $seq
optimizer adamw lr 1e-4
max_steps $steps
init random std 0.02
fsdp full_shard forward_prefetch on backward_prefetch backward_pre
log every 1
run_dir $run
DECK
  planned=$("$FTRAIN" "$run.in" --check --ranks "$np" 2>&1 | sed -n 's/^  memory per rank   //p' | head -1)
  if "${MPIRUN[@]}" -np "$np" "$FTRAIN" "$run.in" > "$run.log" 2>&1; then
    python3 - "$run/metrics.jsonl" "$np x $comm" "$planned" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steady = [r for r in rows if r.get("step", 0) >= 4 and "step_time_s" in r]
mean = lambda k: sum(r.get(k, 0.0) for r in steady) / max(len(steady), 1)
busy, exposed = mean("comm_s_per_step"), mean("comm_exposed_s_per_step")
hidden = f"{100 * (1 - exposed / busy):.0f}%" if busy > 0 else "-"
peak = max((r.get("device_peak_mib_max_rank", 0) for r in rows), default=0)
print(f"{sys.argv[2]:<22} {mean('step_time_s'):10.3f} {busy:12.3f} {exposed:14.3f} {hidden:>8} {sys.argv[3].split(' sharded')[0]:>16} {peak:16.0f}")
PY
  else
    printf "%-22s FAILED\n" "$np x $comm"
    tail -n 15 "$run.log" | sed 's/^/  | /'
  fi
done
echo "planned = --check's sharded state per rank (gathered units and activations come on top: see the full --check line in $WORK)"
