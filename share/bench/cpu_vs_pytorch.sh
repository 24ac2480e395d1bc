#!/usr/bin/env bash
# ftrain's host backend against PyTorch on the CPU, same Llama architecture,
# same global batch and sequence length, each in its best configuration on
# this machine: PyTorch with 1..ncores threads; ftrain with ranks x threads
# covering the cores (no_shard and full_shard). Prints tokens/s and the ratio
# of the bests, measured in one run.
#   bash share/bench/cpu_vs_pytorch.sh [steps]
# Needs Debian's python3-torch (apt-get install python3-torch).
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
steps=${1:-20}
# Best configuration for both: OpenBLAS picks its kernels from the CPU.
let_openblas_pick_its_kernels
PY=/usr/bin/python3   # Debian's interpreter, where python3-torch lives
cores=$(nproc)
batch=8 seq=128
# name vocab hidden intermediate layers heads kv_heads
configs=(
  "tiny 256 64 176 2 4 2"
  "20M 8192 384 1024 6 6 6"
)
printf "%-6s %-8s %-34s %s\n" model params configuration "tokens/s"
for cfg in "${configs[@]}"; do
  read -r name vocab hidden inter layers heads kv <<<"$cfg"
  data=$(bench_corpus "$vocab" 300000)
  best_torch=0 best_ftrain=0
  # PyTorch's best configuration: every (intra-op threads, BLAS threads)
  # pair. Debian's torch computes GEMMs with OpenBLAS, whose pool
  # torch.set_num_threads does not control.
  for t in $(seq 1 "$cores"); do
    for b in $(seq 1 "$cores"); do
      r=$(OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$b $PY "$FTRAIN_ROOT/share/bench/pytorch_llama_cpu.py" \
          --data "$data" --threads "$t" --vocab "$vocab" --hidden "$hidden" --intermediate "$inter" \
          --layers "$layers" --heads "$heads" --kv-heads "$kv" --seq $seq --batch $batch --steps "$steps")
      tps=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['tokens_per_s']))" "$r")
      params=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['params'])" "$r")
      printf "%-6s %-8s %-34s %s\n" "$name" "$params" "pytorch $($PY -c 'import torch;print(torch.__version__)') t=$t blas=$b" "$tps"
      (( tps > best_torch )) && best_torch=$tps
    done
  done
  for np in 1 2 4; do
    (( np > cores )) && continue
    (( batch % np == 0 )) || continue
    for strategy in no_shard full_shard; do
      run="$WORK/cmp_${name}_np${np}_$strategy"
      bench_llama_deck "$run.in" "$data" "$vocab $hidden $inter $layers $heads $kv" $((batch / np)) $seq "$steps" \
        "$strategy" "$run"
      "${MPIRUN[@]}" -np $np "$FTRAIN" "$run.in" > "$run.log" 2>&1
      tps=$(steady_tokens_per_s "$run/metrics.jsonl")
      threads=$((cores / np))
      printf "%-6s %-8s %-34s %s\n" "$name" "" "ftrain np=$np x $threads thread(s) $strategy" "$tps"
      (( tps > best_ftrain )) && best_ftrain=$tps
    done
  done
  python3 -c "import sys; print(f'{sys.argv[1]:<6} best ftrain / best PyTorch = {int(sys.argv[2])/int(sys.argv[3]):.2f}x')" "$name" "$best_ftrain" "$best_torch"
done
