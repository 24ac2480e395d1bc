#!/usr/bin/env bash
# A rank that stops calling collectives must end the job within
# collective_timeout + 10 s, with a message naming the waiting rank, the
# collective and the FSDP unit (issue 19, must-show 5). The test-only switch
# FTRAIN_TEST_STALL_COLLECTIVE=all_gather:12@1 makes rank 1 stop before its
# 12th all-gather (in step 2: FULL_SHARD gathers each of the 4 units in the forward and again in the backward); rank 0 then waits in that all-gather
# until its watchdog (collective_timeout seconds 4) aborts the job.
# Without the watchdog the job hangs and `timeout` ends it: the test fails.
# Usage: stalled_rank_times_out.sh FTRAIN FTRAIN_PREP WORKDIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
ftrain=$1 prep=$2 work=$3 mpiexec=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
"$prep" synthetic --out "$work/train.tok" --tokens 20000 --vocab 64 --seed 3 > /dev/null
timeout_s=4
cat > "$work/stall.in" <<DECK
model llama preset tiny vocab_size 64 hidden_size 32 intermediate_size 64 num_hidden_layers 2
data tokens $work/train.tok
batch micro 4 seq_len 32
max_steps 50
log every 1
collective_timeout seconds $timeout_s
run_dir $work/run
DECK
fail() { echo "FAIL: $*"; cat "$work/out.log"; exit 1; }
status=0
timeout 60 "$mpiexec" "$@" -x FTRAIN_TEST_STALL_COLLECTIVE=all_gather:12@1 -np 2 "$ftrain" "$work/stall.in" \
  > "$work/out.log" 2>&1 &
launcher=$!
# From the moment rank 1 stalls, the job has collective_timeout + 10 s.
for _ in $(seq 1 600); do
  grep -q "stalling before all_gather" "$work/out.log" 2>/dev/null && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
grep -q "stalling before all_gather" "$work/out.log" || fail "rank 1 never stalled (the test hook did nothing)"
start=$(date +%s.%N)
wait "$launcher" || status=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[[ $status -ne 124 ]] || fail "the job hung after rank 1 stopped calling collectives (killed by timeout 60)"
[[ $status -ne 0 ]] || fail "the job exited 0 although rank 1 stalled"
awk -v e="$elapsed" -v t="$timeout_s" 'BEGIN { exit !(e < t + 10) }' || fail "the job ended ${elapsed}s after the stall (limit $timeout_s + 10 s)"
grep -Eq "rank 0: all_gather of .* on MPI communicator rank 0/2 for unit '[^']+' has not completed after [0-9]+ s \(collective_timeout $timeout_s s\)" \
  "$work/out.log" || fail "no message names rank 0, the all_gather and the unit"
grep -q '"step":1,' "$work/run/metrics.jsonl" || fail "step 1 (before the stall) was not logged"
echo "PASS: the job ended ${elapsed}s after rank 1 stalled (collective_timeout $timeout_s s, exit $status):"
grep "has not completed" "$work/out.log"
