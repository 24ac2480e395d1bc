#!/usr/bin/env bash
# Asynchronous checkpoints (`checkpoint ... async on`) against blocking ones
# and none, and the save bandwidth against `dd` on the same file system, in
# one run. Not a test (label: benchmark; never run by ctest).
#   bash share/bench/checkpoint_async.sh
#   NP=2 STEPS=12 EVERY=4 ARCH="32000 512 1408 8 8 8" bash share/bench/checkpoint_async.sh
#   FTRAIN_BEFORE=/path/to/older/bin/ftrain bash ...  # adds that build's blocking save
#   BENCH_WORK=/dev/shm/ckb bash ...  # tmpfs: no disk, so the write path's own CPU cost shows
# Method. The same Llama trains STEPS steps on NP ranks (full_shard) three
# times: without checkpoints, with `checkpoint every EVERY` (blocking) and with
# `async on`. Step period = wall time between the log lines of step 2 and of
# step STEPS (read as they appear) / (STEPS - 2): it contains the saves at
# EVERY, 2 EVERY, ... below STEPS (the save after the last step is outside).
# Save bandwidth = bytes of one step directory (all rank files) / the save's
# duration in ftrain's own log line (blocking: the whole collective save,
# directory creation to commit; async: the background write of rank 0's
# file, and the time training paused). dd writes the same byte count with
# bs=16M conv=fsync into the same directory. Everything goes through the
# page cache, as ftrain does; nothing drops caches.
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
NP="${NP:-2}"
STEPS="${STEPS:-12}"
EVERY="${EVERY:-4}"
ARCH="${ARCH:-32000 512 1408 8 8 8}"
data=$(bench_corpus "${ARCH%% *}" 200000)
bench_llama_deck "$WORK/base.in" "$data" "$ARCH" 1 32 "$STEPS" full_shard '${run}'
printf 'include base.in\n' > "$WORK/none.in"
printf 'include base.in\ncheckpoint every %s dir ${ck} keep 1\n' "$EVERY" > "$WORK/blocking.in"
printf 'include base.in\ncheckpoint every %s dir ${ck} keep 1 async on\n' "$EVERY" > "$WORK/async.in"
echo "command: NP=$NP STEPS=$STEPS EVERY=$EVERY ARCH=\"$ARCH\" bash share/bench/checkpoint_async.sh"
echo "work dir: $WORK ($(df -T "$WORK" | awk 'NR==2{print $2" on "$1}'))"
MPIRUN_LINE="${MPIRUN[*]}" FTRAIN="$FTRAIN" FTRAIN_BEFORE="${FTRAIN_BEFORE:-}" WORK="$WORK" NP="$NP" STEPS="$STEPS" \
  EVERY="$EVERY" python3 - <<'PY'
import os, re, shlex, subprocess, time

work, np_, steps, every = os.environ["WORK"], int(os.environ["NP"]), int(os.environ["STEPS"]), int(os.environ["EVERY"])
mpirun = shlex.split(os.environ["MPIRUN_LINE"])


def run(ftrain, deck, name):
    cmd = mpirun + ["-np", str(np_), ftrain, "-var", "run", name, "-var", "ck", name + "_ck", os.path.join(work, deck)]
    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = [(time.monotonic(), l.rstrip("\n")) for l in proc.stdout]
    if proc.wait() != 0:
        print("\n".join(l for _, l in lines[-30:]))
        raise SystemExit(f"ftrain {deck} exited {proc.returncode}")
    at = {}
    for t, l in lines:
        m = re.match(r"step (\d+)/", l)
        if m:
            at[int(m.group(1))] = t
    return (at[steps] - at[2]) / (steps - 2), [l for _, l in lines]


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


mb = 1e6
rows = []
period_none, _ = run(os.environ["FTRAIN"], "none.in", "none")
period_block, out_block = run(os.environ["FTRAIN"], "blocking.in", "blocking")
saves = [(int(m.group(1)), float(m.group(2))) for m in
         (re.match(r"checkpoint step (\d+) -> \S+ \(([\d.]+) s\)$", l) for l in out_block) if m]
step_bytes = du(os.path.join(work, "blocking_ck", f"step_{steps}"))
rank0_bytes = os.path.getsize(os.path.join(work, "blocking_ck", f"step_{steps}", "rank_0.h5"))
count = max(1, step_bytes // (16 << 20))
t0 = time.monotonic()
subprocess.run(["dd", "if=/dev/zero", f"of={work}/dd.bin", "bs=16M", f"count={count}", "conv=fsync"], check=True,
               stderr=subprocess.DEVNULL)
dd_s = time.monotonic() - t0
os.remove(f"{work}/dd.bin")
dd_rate = count * (16 << 20) / dd_s
period_async, out_async = run(os.environ["FTRAIN"], "async.in", "async")
bg = [(int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))) for m in
      (re.match(r"checkpoint step (\d+) -> \S+ \(written in the background in ([\d.]+) s while (\d+) step\(s\) "
                r"trained; training paused ([\d.]+) s\)$", l) for l in out_async) if m]
before = []
if os.environ.get("FTRAIN_BEFORE"):
    _, out_before = run(os.environ["FTRAIN_BEFORE"], "blocking.in", "before")
    before = [(int(m.group(1)), float(m.group(2))) for m in
              (re.match(r"checkpoint step (\d+) -> \S+ \(([\d.]+) s\)$", l) for l in out_before) if m]
    before_bytes = du(os.path.join(work, "before_ck", f"step_{steps}"))

print(f"\ncheckpoint: {step_bytes/mb:.0f} MB per step directory ({np_} rank files, rank 0's {rank0_bytes/mb:.0f} MB), "
      f"saves every {every} of {steps} steps")
print(f"\n{'run':<34} {'step period s':>14} {'vs none':>8}")
for name, p in (("no checkpoints", period_none), ("blocking checkpoints", period_block),
                ("async checkpoints", period_async)):
    print(f"{name:<34} {p:>14.3f} {p/period_none:>8.2f}")
print(f"\n{'save':<44} {'seconds':>8} {'MB/s':>8} {'vs dd':>6}")
print(f"{'dd bs=16M conv=fsync (same size, same dir)':<44} {dd_s:>8.2f} {dd_rate/mb:>8.0f} {1:>6.2f}")
for step, s in saves:
    r = step_bytes / s
    print(f"{'blocking save, step ' + str(step):<44} {s:>8.2f} {r/mb:>8.0f} {r/dd_rate:>6.2f}")
for step, s in before:
    r = before_bytes / s
    print(f"{'FTRAIN_BEFORE blocking save, step ' + str(step):<44} {s:>8.2f} {r/mb:>8.0f} {r/dd_rate:>6.2f}")
for step, w, k, paused in bg:
    print(f"{'async save, step ' + str(step) + ': rank 0 background write':<44} {w:>8.2f} {rank0_bytes/w/mb:>8.0f}"
          f"   (training paused {paused:.2f} s; {k} step(s) trained during the write)")
PY
