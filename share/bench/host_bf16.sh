#!/usr/bin/env bash
# Host BF16 against host FP32, and both against PyTorch on the CPU, side by
# side in one run (share/doc/performance.md, "Host GEMMs (BF16 through oneDNN)"):
#  1. this machine's matmul peaks: OpenBLAS f32 and oneDNN bf16 (bench_gemm);
#  2. tokens/s on the 20M Llama: ftrain precision fp32 (OpenBLAS) and bf16
#     (oneDNN), each at its best ranks x threads and FSDP strategy (no_shard:
#     DDP; shard_grad_op: ZeRO-2, the parameters gathered once per step;
#     full_shard: gathered again for backward); PyTorch fp32 and PyTorch
#     with torch.cpu.amp.autocast(bfloat16), each at its best thread counts;
#  3. CPU-MFU: model FLOP/s over the measured matmul peak of the precision
#     used (ftrain's own MFU column, given that peak with peak_tflops).
#   bash share/bench/host_bf16.sh [steps]
# Needs Debian's python3-torch (apt-get install python3-torch).
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
steps=${1:-15}
let_openblas_pick_its_kernels
PY=/usr/bin/python3
cores=$(nproc)
batch=8 seq=128
read -r vocab hidden inter layers heads kv <<<"8192 384 1024 6 6 6"   # the 20M model of cpu_vs_pytorch.sh

gemm_out=$("$BUILD/tests/bench/bench_gemm" 3072 "$cores" 3)
echo "$gemm_out"
peak_f32=$(awk '/OpenBLAS f32/{print $(NF-1)}' <<<"$gemm_out")
peak_bf16=$(awk '/oneDNN bf16/{print $(NF-1)}' <<<"$gemm_out")
[[ -n "$peak_bf16" && "$peak_bf16" != "not" ]] || { echo "no native BF16 GEMM on this machine: nothing to compare"; exit 0; }

data=$(bench_corpus "$vocab" 300000)
printf "\n%-34s %10s %8s\n" configuration "tokens/s" "CPU-MFU"
best() { sort -k2 -n | tail -1; }
results=()

for precision in fp32 bf16; do
  peak=$([[ $precision == fp32 ]] && echo "$peak_f32" || echo "$peak_bf16")
  for np in 1 2; do
    (( np > cores )) && continue
    for strategy in no_shard shard_grad_op full_shard; do
      run="$WORK/bf16_${precision}_np${np}_$strategy"
      per_rank_tflops=$(python3 -c "print($peak / 1000 / $np)")
      bench_llama_deck "$run.in" "$data" "$vocab $hidden $inter $layers $heads $kv" $((batch / np)) $seq "$steps" \
        "$strategy" "$run" "precision $precision" "peak_tflops $per_rank_tflops"
      "${MPIRUN[@]}" -np $np "$FTRAIN" "$run.in" > "$run.log" 2>&1 || { echo "ftrain failed: $run.log"; tail -5 "$run.log"; exit 1; }
      read -r tps mfu < <(steady_tokens_per_s "$run/metrics.jsonl" mfu)
      line="ftrain $precision np=$np x $((cores / np)) $strategy"
      printf "%-34s %10s %8s\n" "$line" "$tps" "$mfu"
      results+=("ftrain_$precision $tps $mfu")
    done
  done
done

for mode in fp32 bf16; do
  flag=$([[ $mode == bf16 ]] && echo "--bf16-autocast" || true)
  for t in $(seq 1 "$cores"); do
    for b in $(seq 1 "$cores"); do
      r=$(OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$b $PY "$FTRAIN_ROOT/share/bench/pytorch_llama_cpu.py" $flag \
          --data "$data" --threads "$t" --vocab "$vocab" --hidden "$hidden" --intermediate "$inter" \
          --layers "$layers" --heads "$heads" --kv-heads "$kv" --seq $seq --batch $batch --steps "$steps")
      tps=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['tokens_per_s']))" "$r")
      printf "%-34s %10s\n" "pytorch $mode t=$t blas=$b" "$tps"
      results+=("pytorch_$mode $tps -")
    done
  done
done

python3 - "${results[@]}" <<'PY'
import sys
best = {}
for r in sys.argv[1:]:
    name, tps, mfu = r.split()
    if int(tps) > best.get(name, (0, ""))[0]:
        best[name] = (int(tps), mfu)
print()
for name, (tps, mfu) in best.items():
    print(f"best {name:<14} {tps:>8} tokens/s   CPU-MFU {mfu}")
f32, b16 = best["ftrain_fp32"][0], best["ftrain_bf16"][0]
print(f"ftrain bf16 / ftrain fp32      = {b16 / f32:.2f}x   (target >= 1.5x)")
print(f"ftrain bf16 / PyTorch autocast = {b16 / best['pytorch_bf16'][0]:.2f}x   (target >= 1.2x)")
print(f"ftrain fp32 / PyTorch fp32     = {f32 / best['pytorch_fp32'][0]:.2f}x")
PY
