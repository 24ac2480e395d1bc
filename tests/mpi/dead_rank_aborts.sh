#!/usr/bin/env bash
# A rank that dies (SIGKILL: OOM killer, node failure) must end the whole job
# promptly with a message naming it, never leave the other ranks hanging in
# a collective. Usage: dead_rank_aborts.sh FTRAIN FTRAIN_PREP WORKDIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
ftrain=$1 prep=$2 work=$3 mpiexec=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
"$prep" synthetic --out "$work/train.tok" --tokens 200000 --vocab 64 --seed 3 > /dev/null
cat > "$work/long.in" <<DECK
model llama preset tiny vocab_size 64 hidden_size 32 intermediate_size 64 num_hidden_layers 2
data tokens $work/train.tok
batch micro 4 seq_len 32
max_steps 1000000
log every 100
run_dir $work/run
DECK
"$mpiexec" "$@" -np 2 "$ftrain" -var tag dead_rank_test "$work/long.in" > "$work/out.log" 2>&1 &
launcher=$!
# Wait until training runs on both ranks, then kill one rank.
for _ in $(seq 1 300); do
  grep -q "^step " "$work/out.log" 2>/dev/null && break
  sleep 0.1
done
victim=$(pgrep -f -- "-var tag dead_rank_test" | grep -v "^$launcher\$" | tail -1)
[[ -n "$victim" ]] || { echo "FAIL: no rank process found"; cat "$work/out.log"; exit 1; }
start=$(date +%s)
kill -9 "$victim"
for _ in $(seq 1 300); do
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$launcher" 2>/dev/null; then
  echo "FAIL: the job still runs 30 s after a rank was killed"
  pkill -9 -f -- "-var tag dead_rank_test" || true
  exit 1
fi
status=0
wait "$launcher" || status=$?
elapsed=$(( $(date +%s) - start ))
[[ $status -ne 0 ]] || { echo "FAIL: the job exited 0 after losing a rank"; exit 1; }
grep -qE "exited on signal 9|killed|Killed" "$work/out.log" || { echo "FAIL: no message names the dead rank"; cat "$work/out.log"; exit 1; }
echo "PASS: job aborted ${elapsed}s after rank pid $victim was killed (exit $status)"
