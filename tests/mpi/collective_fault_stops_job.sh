#!/usr/bin/env bash
# A collective that fails on the communicator's progress thread must stop the
# job with its message (issue 22 s3): before the fix, Request::test() dropped
# the error and the engine added a never-written buffer to the gradient, so
# training went on with a wrong grad_norm and exited 0.
# The test-only switch FTRAIN_TEST_FAIL_COLLECTIVE makes the 6th reduce-scatter
# fail: the model has 4 units, so step 1 completes and step 2's
# backward fails.
# Usage: collective_fault_stops_job.sh FTRAIN FTRAIN_PREP WORKDIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
ftrain=$1 prep=$2 work=$3 mpiexec=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
"$prep" synthetic --out "$work/train.tok" --tokens 20000 --vocab 64 --seed 3 > /dev/null
cat > "$work/fault.in" <<DECK
model llama preset tiny vocab_size 64 hidden_size 32 intermediate_size 64 num_hidden_layers 2
data tokens $work/train.tok
batch micro 4 seq_len 32
max_steps 4
log every 1
run_dir $work/run
DECK
fail() { echo "FAIL: $*"; cat "$work/out.log"; exit 1; }
# on every rank, then on rank 1 only (rank 0 waits in the reduce-scatter
# until rank 1's error aborts the job: it must not hang)
for spec in reduce_scatter_sum:6 reduce_scatter_sum:6@1; do
  rm -rf "$work/run"
  status=0
  timeout 60 "$mpiexec" "$@" -x FTRAIN_TEST_FAIL_COLLECTIVE=$spec -np 2 "$ftrain" "$work/fault.in" \
    > "$work/out.log" 2>&1 || status=$?
  [[ $status -ne 124 ]] || fail "$spec: the job hung after the failed reduce-scatter"
  [[ $status -ne 0 ]] || fail "$spec: the job exited 0 although a reduce-scatter failed"
  # The lowest failing rank is heard (training-time errors, issue 22): rank 0
  # when every rank fails, rank 1 when only it does.
  failing_rank=0; [[ $spec == *@1 ]] && failing_rank=1
  grep -q "rank $failing_rank .*reduce_scatter_sum of .* failed: injected fault" "$work/out.log" \
    || fail "$spec: no error message names the failed reduce-scatter"
  grep -q '"step":1,' "$work/run/metrics.jsonl" || fail "$spec: step 1 (before the fault) was not logged"
  if grep -q '"step":[2-9]' "$work/run/metrics.jsonl"; then fail "$spec: a step after the failed reduce-scatter was logged"; fi
  echo "PASS: $spec: the failed reduce-scatter stopped the job (exit $status) with its message"
done
