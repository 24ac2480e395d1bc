#!/usr/bin/env bash
# tsan-check.sh — FSDP on asynchronous host streams under ThreadSanitizer
# (issue 19): builds the `tsan` preset's targets (build-tsan: libftrain with
# the threaded concerns instrumented, the llama plugin, ftrain, the async
# engine test; CMakeLists.txt FTRAIN_TSAN) and runs the async engine test at
# np 2 — every strategy, prefetch on/off, limit_all_gathers, activation
# checkpointing, gradient accumulation, each on synchronous and then
# asynchronous streams — then ftrain itself on a tiny deck with
# `host_streams async`, and the same deck with `fsdp ... offload optimizer`
# and `offload all` on the simulated device (tests/support: the gradient
# shards' copies to the host on the copy stream, the host stream's adds and
# sums of squares, clip and AdamW, the copies back enqueued by the host
# stream's worker), offload optimizer with precision fp8, and `parallel
# tensor 2` at np 4 (the tensor group's collectives inside the units). Fails
# on any ThreadSanitizer report.
#
#   share/scripts/tsan-check.sh                  the check (CI: .ci/run)
#   share/scripts/tsan-check.sh --prove-it-fails the check must FAIL: for each
#       FTRAIN_DEBUG_DROP_WAIT=gather|reduce|after (the engine drops one event
#       wait) TSan must report a data race, and for FTRAIN_DEBUG_DROP_WAIT=offload
#       (the host adds a gradient shard without waiting for its copy) on the
#       offload optimizer run, for FTRAIN_DEBUG_DROP_WAIT=tensor (a unit
#       reads a tensor-group collective's output without waiting for it) on
#       the tensor-parallel run, and for FTRAIN_DEBUG_DROP_WAIT=context (the
#       attention reads a ring step's K/V block without waiting for it) on
#       the context-parallel run; exits 0 only if it did every time
#
# Environment: FTRAIN_TSAN_BUILD_DIR (default build-tsan), FTRAIN_JOBS.
# OpenBLAS is not instrumented and its own threads would report inside it:
# OPENBLAS_NUM_THREADS=1 keeps its GEMMs on the calling (stream) thread, where
# they are ordinary uninstrumented code. Open MPI's internals are suppressed
# (share/scripts/tsan.supp), ftrain's never.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${FTRAIN_TSAN_BUILD_DIR:-$ROOT/build-tsan}"
JOBS="${FTRAIN_JOBS:-$(nproc)}"
MODE="${1:-check}"
case "$MODE" in
  check | --prove-it-fails) ;;
  *) echo "usage: $0 [--prove-it-fails]" >&2; exit 2 ;;
esac

MPIRUN=(mpirun --oversubscribe)
if [[ $(id -u) -eq 0 ]]; then MPIRUN+=(--allow-run-as-root); fi

t0=$(date +%s)
cd "$ROOT"
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake --preset tsan -B "$BUILD" >/dev/null
fi
cmake --build "$BUILD" -j "$JOBS" --target ftrain ftrain_plugin_llama ftrain_exe ftrain_prep mpi_test_async_engine \
  ftrain_test_sim_device
t_build=$(( $(date +%s) - t0 ))

LOG_DIR="$BUILD/tsan-logs"
rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"
export FTRAIN_PLUGIN_PATH="$BUILD/lib/ftrain/plugins"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# exitcode: a report fails the rank; log_path: one file per process, so the
# reports are counted whatever mpirun does with stderr.
tsan_options() {
  echo "suppressions=$ROOT/share/scripts/tsan.supp halt_on_error=0 exitcode=66 second_deadlock_stack=1 log_path=$LOG_DIR/$1"
}

# Runs the async engine test at np 2 under TSan; returns the number of
# reports (0 = clean). $1: a label for the log files; env passes through.
run_engine_test() {
  local label="$1"
  local rc=0
  TSAN_OPTIONS="$(tsan_options "$label")" "${MPIRUN[@]}" -np 2 -x TSAN_OPTIONS -x FTRAIN_PLUGIN_PATH \
    -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x FTRAIN_DEBUG_DROP_WAIT \
    "$BUILD/tests/mpi/mpi_test_async_engine" --gtest_filter='Fsdp/AsyncEquivalence.*:AsyncStreams.Limit*' \
    >"$LOG_DIR/$label.out" 2>&1 || rc=$?
  local reports
  reports=$(cat "$LOG_DIR/$label".* 2>/dev/null | grep -c "WARNING: ThreadSanitizer" || true)
  echo "$label: exit $rc, ThreadSanitizer reports: $reports" >&2
  if [[ "$reports" -eq 0 && "$rc" -ne 0 ]]; then
    echo "$label: failed without a TSan report; output:" >&2
    tail -40 "$LOG_DIR/$label.out" >&2
    return 255
  fi
  REPORTS=$reports
}

# ftrain with `fsdp ... offload $2` on the simulated device, np 2, asynchronous
# streams; returns the number of reports. $1: a label for the log files.
WORK="$BUILD/tsan-work"
rm -rf "$WORK" && mkdir -p "$WORK"
"$BUILD/bin/ftrain-prep" synthetic --out "$WORK/train.tok" --tokens 20000 --vocab 64 --seed 7 \
  --eval-out "$WORK/eval.tok" --eval-tokens 2048 >/dev/null
# The tiny deck logging every 5 steps instead of every step: a log step's
# read of the step's health waits for the host's updates, so only the steps
# between log steps overlap the update with the next forward.
sed 's/^log every 1$/log every 5/' "$ROOT/tests/regression/decks/tiny.in" >"$WORK/tiny_log5.in"
grep -q '^log every 5$' "$WORK/tiny_log5.in" || { echo "tsan-check: tiny.in no longer says 'log every 1'" >&2; exit 2; }
printf 'device cuda\ndevice_comm mpi\ninclude %s\nhost_streams async\n' "$WORK/tiny_log5.in" >"$WORK/offload.in"
run_offload() {
  local label="$1" setting="$2" precision="${3:-fp32}"
  local rc=0
  TSAN_OPTIONS="$(tsan_options "$label")" FTRAIN_CUDA_BACKEND="$BUILD/tests/libftrain_test_sim_device.so" \
    "${MPIRUN[@]}" -np 2 -x TSAN_OPTIONS -x FTRAIN_PLUGIN_PATH -x FTRAIN_CUDA_BACKEND \
    -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x FTRAIN_DEBUG_DROP_WAIT \
    "$BUILD/bin/ftrain" -var data_dir "$WORK" -var run_dir "$WORK/$label" -var max_steps 5 -var micro 2 \
    -var accumulate 2 -var precision "$precision" -var fsdp_extra "offload $setting" "$WORK/offload.in" \
    >"$LOG_DIR/$label.out" 2>&1 || rc=$?
  local reports
  reports=$(cat "$LOG_DIR/$label".[0-9]* 2>/dev/null | grep -c "WARNING: ThreadSanitizer" || true)
  echo "$label (offload $setting $precision on the simulated device, np 2): exit $rc, ThreadSanitizer reports: $reports" >&2
  if [[ "$reports" -eq 0 && "$rc" -ne 0 ]]; then
    tail -40 "$LOG_DIR/$label.out" >&2
    return 255
  fi
  REPORTS=$reports
}

# ftrain with `parallel $2` at np 4 on asynchronous host streams,
# activation checkpointing on: the tensor group's collectives inside the
# units and the context group's ring steps in the attention, ordered by the
# compute stream's events; returns the number of reports. $1: a label for
# the log files, $3: the micro batch (global batch 8 over the data indices).
run_model_parallel() {
  local label="$1" grid="$2" micro="$3"
  local rc=0
  printf 'device host\ninclude %s\nhost_streams async\nparallel %s\n' "$ROOT/tests/regression/decks/tiny.in" \
    "$grid" >"$WORK/$label.in"
  TSAN_OPTIONS="$(tsan_options "$label")" "${MPIRUN[@]}" -np 4 -x TSAN_OPTIONS -x FTRAIN_PLUGIN_PATH \
    -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x FTRAIN_DEBUG_DROP_WAIT \
    "$BUILD/bin/ftrain" -var data_dir "$WORK" -var run_dir "$WORK/$label" -var max_steps 5 -var micro "$micro" \
    -var checkpointing on "$WORK/$label.in" >"$LOG_DIR/$label.out" 2>&1 || rc=$?
  local reports
  reports=$(cat "$LOG_DIR/$label".[0-9]* 2>/dev/null | grep -c "WARNING: ThreadSanitizer" || true)
  echo "$label (parallel $grid, host_streams async, np 4): exit $rc, ThreadSanitizer reports: $reports" >&2
  if [[ "$reports" -eq 0 && "$rc" -ne 0 ]]; then
    tail -40 "$LOG_DIR/$label.out" >&2
    return 255
  fi
  REPORTS=$reports
}

if [[ "$MODE" == "--prove-it-fails" ]]; then
  failed=0
  # expect_race WAIT: the run just made with FTRAIN_DEBUG_DROP_WAIT=WAIT
  # (logs drop_WAIT.*) must have a ThreadSanitizer data race report.
  expect_race() {
    local wait=$1 races
    races=$(cat "$LOG_DIR"/drop_"$wait".[0-9]* 2>/dev/null | grep -c "WARNING: ThreadSanitizer: data race" || true)
    if [[ "$REPORTS" -gt 0 && "$races" -gt 0 ]]; then
      echo "FTRAIN_DEBUG_DROP_WAIT=$wait: ThreadSanitizer reported the race (as it must):" >&2
      cat "$LOG_DIR"/drop_"$wait".[0-9]* | grep -m1 -A6 "WARNING: ThreadSanitizer" >&2 || true
    else
      echo "FTRAIN_DEBUG_DROP_WAIT=$wait: NO ThreadSanitizer report: the check cannot see this missing wait" >&2
      failed=1
    fi
  }
  # offload: the host adds a gradient shard before its copy landed.
  REPORTS=0
  FTRAIN_DEBUG_DROP_WAIT=offload run_offload drop_offload optimizer || true
  expect_race offload
  # tensor: a unit reads a tensor-group collective's output before it landed;
  # context: the attention reads a ring step's K/V block before it landed.
  for wait in "tensor:tensor 2:4" "context:context 2:4"; do
    IFS=: read -r which grid micro <<<"$wait"
    REPORTS=0
    FTRAIN_DEBUG_DROP_WAIT=$which run_model_parallel "drop_$which" "$grid" "$micro" || true
    expect_race "$which"
  done
  for wait in gather reduce after; do
    REPORTS=0
    FTRAIN_DEBUG_DROP_WAIT=$wait run_engine_test "drop_$wait" || true
    expect_race "$wait"
  done
  echo "tsan-check --prove-it-fails: build ${t_build}s, total $(( $(date +%s) - t0 ))s" >&2
  exit $failed
fi

status=0
REPORTS=0
run_engine_test engine || status=1
[[ "$REPORTS" -eq 0 ]] || status=1

# ftrain end to end on asynchronous streams (deck host_streams async), np 2.
rc=0
TSAN_OPTIONS="$(tsan_options ftrain)" "${MPIRUN[@]}" -np 2 -x TSAN_OPTIONS -x FTRAIN_PLUGIN_PATH \
  -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS \
  "$BUILD/bin/ftrain" -var data_dir "$WORK" -var run_dir "$WORK/run" -var max_steps 5 -var micro 2 \
  -var accumulate 2 -var forward_prefetch on -var checkpointing on \
  "$ROOT/tests/regression/decks/tiny_host_streams.in" >"$LOG_DIR/ftrain.out" 2>&1 || rc=$?
ftrain_reports=$(cat "$LOG_DIR"/ftrain.[0-9]* 2>/dev/null | grep -c "WARNING: ThreadSanitizer" || true)
echo "ftrain (host_streams async, np 2): exit $rc, ThreadSanitizer reports: $ftrain_reports" >&2
if [[ "$rc" -ne 0 || "$ftrain_reports" -ne 0 ]]; then
  status=1
  tail -20 "$LOG_DIR/ftrain.out" >&2
fi

for setting in optimizer all; do
  REPORTS=0
  run_offload "offload_$setting" "$setting" || status=1
  [[ "$REPORTS" -eq 0 ]] || status=1
done
# precision fp8: the FP8 all-gather of the device's compute-dtype shard.
REPORTS=0
run_offload offload_optimizer_fp8 optimizer fp8 || status=1
[[ "$REPORTS" -eq 0 ]] || status=1

# Each grid of `parallel tensor T context C` at np 4: global batch 8 = micro
# x the data indices (2, 2, 1).
for run in "tensor_parallel:tensor 2:4" "context_parallel:context 2:4" \
  "tensor_context_parallel:tensor 2 context 2:8"; do
  IFS=: read -r label grid micro <<<"$run"
  REPORTS=0
  run_model_parallel "$label" "$grid" "$micro" || status=1
  [[ "$REPORTS" -eq 0 ]] || status=1
done

if [[ $status -ne 0 ]]; then
  echo "tsan-check: FAILED; reports in $LOG_DIR:" >&2
  for f in "$LOG_DIR"/*.[0-9]*; do [[ -f "$f" ]] && grep -m3 -A12 "WARNING: ThreadSanitizer" "$f" >&2; done
fi
echo "tsan-check: build ${t_build}s, total $(( $(date +%s) - t0 ))s" >&2
exit $status
