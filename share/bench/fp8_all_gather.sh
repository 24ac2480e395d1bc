#!/usr/bin/env bash
# FP8 all-gather (issue 20): the time to all-gather one Llama decoder
# block's parameters over MPI, bf16 (the plain FSDP gather) vs FP8 (each
# rank casts its shard of the linear weights to FP8 with the layer's weight
# scale; the gather moves 1 byte per element). Casts included in both.
# Default: Llama 3.2 1B's block (hidden 2048, intermediate 8192, 8 KV heads
# of 64) on 2 ranks; a step gathers every block twice (forward, backward).
#   bash share/bench/fp8_all_gather.sh [np] [iterations] [hidden intermediate kv_heads head_dim]
# Not part of any test run (benchmarks never pass or fail on speed).
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
np=${1:-2}
iterations=${2:-10}
shape=(${3:-2048} ${4:-8192} ${5:-8} ${6:-64})
bench="$BUILD/tests/bench/bench_fp8_all_gather"
[[ -x "$bench" ]] || { echo "build it first: cmake --build $BUILD --target bench_fp8_all_gather" >&2; exit 1; }
echo "command: ${MPIRUN[*]} -np $np $bench ${shape[*]} $iterations"
"${MPIRUN[@]}" -np "$np" "$bench" "${shape[@]}" "$iterations"

# End to end: a small Llama (hidden 512, 4 layers) trained under precision
# fp8, full_shard, with the FP8 all-gather on and off: step time, collective
# time per step and the gathered bytes (the metrics' counters). Steps 1-2 are
# warm-up and not averaged.
steps=${FP8_AG_STEPS:-6}
data=$(bench_corpus 8192 200000)
for mode in off on; do
  run="$WORK/fp8ag_$mode"
  bench_llama_deck "$WORK/fp8ag_$mode.in" "$data" "8192 512 1408 4 8 8" 1 128 "$steps" full_shard "$run" \
    "precision fp8" "fp8 all_gather $mode"
  "${MPIRUN[@]}" -np "$np" "$FTRAIN" "$WORK/fp8ag_$mode.in" > "$run.log" 2>&1
  python3 - "$run/metrics.jsonl" "$mode" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][2:]
mean = lambda k: sum(r[k] for r in rows) / len(rows)
print(f"fp8 all_gather {sys.argv[2]:<3}: step {mean('step_time_s'):.3f} s, collectives {mean('comm_s_per_step'):.3f} s/step "
      f"(exposed {mean('comm_exposed_s_per_step'):.3f}), all_gather_bytes/step {mean('all_gather_bytes_per_step'):.0f}, "
      f"of which FP8 weights {mean('all_gather_fp8_weight_bytes_per_step'):.0f}, final loss {rows[-1]['loss']:.6f}")
PY
done
