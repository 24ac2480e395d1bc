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
