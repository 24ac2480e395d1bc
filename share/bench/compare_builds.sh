#!/usr/bin/env bash
# Two ftrain builds side by side in one run: the 20M Llama of
# cpu_vs_pytorch.sh in ftrain's best configuration there (2 ranks x 1 thread,
# no_shard, fp32; or PRECISION=bf16), runs alternating A, B, A, B ... so
# that machine noise hits both alike. Prints tokens/s of each run, the means
# and the ratio B / A (a refactor must keep it within a few percent).
#   bash share/bench/compare_builds.sh BUILD_A BUILD_B [repeats] [steps]
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
build_a=$1 build_b=$2 repeats=${3:-4} steps=${4:-12}
precision=${PRECISION:-fp32}
let_openblas_pick_its_kernels
read -r vocab hidden inter layers heads kv <<<"8192 384 1024 6 6 6"
data=$(bench_corpus "$vocab" 300000)
echo "A: $build_a ($(git -C "$build_a/.." rev-parse --short HEAD 2>/dev/null || echo ?))"
echo "B: $build_b ($(git -C "$build_b/.." rev-parse --short HEAD 2>/dev/null || echo ?))"
declare -A sum=([A]=0 [B]=0)
for r in $(seq 1 "$repeats"); do
  for which in A B; do
    build=$([[ $which == A ]] && echo "$build_a" || echo "$build_b")
    run="$WORK/cmp_${which}_$r"
    bench_llama_deck "$run.in" "$data" "$vocab $hidden $inter $layers $heads $kv" 4 128 "$steps" no_shard "$run" \
      "precision $precision" "peak_tflops 1"
    FTRAIN_PLUGIN_PATH="$build/lib/ftrain/plugins" "${MPIRUN[@]}" -np 2 "$build/bin/ftrain" "$run.in" > "$run.log" 2>&1 \
      || { echo "run failed: $run.log"; tail -5 "$run.log"; exit 1; }
    tps=$(steady_tokens_per_s "$run/metrics.jsonl")
    echo "run $r $which: $tps tokens/s"
    sum[$which]=$(( ${sum[$which]} + tps ))
  done
done
python3 -c "import sys; a,b,n=map(int,sys.argv[1:]); print(f'mean A {a/n:.0f}  mean B {b/n:.0f} tokens/s   B/A = {b/a:.3f}')" "${sum[A]}" "${sum[B]}" "$repeats"
