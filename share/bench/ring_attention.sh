#!/usr/bin/env bash
# Ring attention (context parallelism) at sequence 8192: the causal ring
# forward + backward over C = 1, 2, 4 ranks (one context group), bf16, one
# sample, 8 heads of 64 (8 KV heads). Per C: fwd+bwd time of the slowest
# rank, tokens/s of the whole sequence, per-rank growth of the resident
# set's high-water mark during the call and the attention's tensors by
# shape; at C 1 also the single-sequence attention op.
#   bash share/bench/ring_attention.sh [T] [repeats]
# The attention alone: the model around it (embedding, MLP, head) is not
# run, so these are not training tokens/s.
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
BENCH="$BUILD/tests/bench/bench_ring_attention"
[[ -x "$BENCH" ]] || { echo "build bench_ring_attention first (ninja -C $BUILD bench_ring_attention)" >&2; exit 1; }
seq="${1:-8192}"
repeats="${2:-1}"
echo "ranks on this machine share $(nproc) cores: with C above the core count the ranks take turns"
for np in 1 2 4; do
  OPENBLAS_NUM_THREADS=1 "${MPIRUN[@]}" -np "$np" "$BENCH" "$seq" 8 8 64 "$repeats"
done
