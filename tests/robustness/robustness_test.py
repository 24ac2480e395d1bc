#!/usr/bin/env python3
"""Failures that must lose nothing and say what happened (issue 22), run by CTest.

Usage: robustness_test.py SCENARIO --ftrain BIN --prep BIN --mpirun "MPIEXEC FLAGS..." --workdir DIR

Each scenario trains (or checks) a ~20k-parameter Llama on its own tiny
corpus, so it takes seconds. Exit 0 = pass, 1 = fail, 77 = skipped (the
reason is printed).

Scenarios:
  nonfinite     lr 1e9 without clipping, `checkpoint every 1 ... keep 1`:
                the run stops at the first non-finite gradient norm or loss,
                naming the step and a unit and tensor, once, exit non-zero;
                the committed checkpoint is the last finite one and `resume
                auto` loads it (the same step, the same finite loss) and
                prunes nothing. lr 1e39 makes the master weights infinite
                with finite gradients: the save is refused, nothing commits.
  full_disk     metrics.jsonl and a rank log on a full disk (/dev/full behind
                the name: every write fails with ENOSPC, no root needed): a
                warning naming the file once, training completes, exit
                non-zero. Where tmpfs can be mounted (root, in a private mount
                namespace): run_dir and checkpoint dir on a full tmpfs fail
                before step 1 naming the deck line.
  readonly      run_dir, checkpoint dir and save_final under a read-only
                location: `--check` and a real run fail before step 1, once,
                naming the deck file:line of the command and the reason. A
                read-only tmpfs mount where mount works (root bypasses
                permission bits), chmod 0555 for other users; skipped as root
                without mount.
  plan_overflow `batch micro 99999999999 seq_len 99999999999` and `micro
                99999999999 seq_len 64` are deck errors at --check naming the
                batch line and field, not wrapped numbers or an internal
                check.
  errors_once   `model lama` suggests llama, printed once at np 2; a
                checkpoint disk that fills during training (tmpfs; part
                skipped without mount) fails on every rank and is reported by
                one rank only.
  run_dir_lock  (issue 35) a second run on the run_dir of a running one, and a
                run with another run_dir but the same checkpoint dir, stop
                before step 1 naming the deck line, the directory and the
                first run's host and pid; the first run trains on with whole
                metrics lines. After kill -9 of the first job, a restart
                takes the lock over and says the holder crashed; after a
                clean end, the next run says nothing about the lock.
  launcher_gone (issue 35) kill -9 of mpirun while checkpointing every step:
                the ranks end within 0.5 s and commit no checkpoint after
                the kill; a restart then finds the directory free.
  nan_weights   (issue 35) a safetensors file with a NaN weight: ftrain-convert
                safetensors-to-h5 fails naming the file, the tensor and the
                element; `init safetensors` at lr 1e-12 with clipping stops at
                load with the same names, not as a divergence that suggests
                lowering the learning rate; `init hdf5` of a NaN file too.
  image_check   (issue 35) `--check` opens image HDF5 files as the run does:
                random bytes, and images of the wrong shape, fail naming the
                deck line and the file; a good file passes. A token file of
                random bytes names the deck line and the file too, at
                `--check` and at the start of a run.
  untrained_steps (issue 36) instruction data (`ftrain-prep instruct`) whose
                responses lie past seq_len with packing off: --check and the
                run stop naming the data line and how many examples are cut
                and lose every response token; `allow_untrained_steps on`
                runs with trained_tokens 0 in metrics.jsonl and the log; a
                half-cut file warns at --check, and the run stops at the
                first step whose samples are all cut.
  startup_error a deck missing on one rank, and a ${VAR} set in the
                environment of one rank only, at np 2 and np 3: the user's
                message appears (once), exit non-zero, within seconds (no
                collective runs before every rank has read its deck).
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402
from ftrain_test import fail  # noqa: E402

DECK = """\
model llama preset tiny hidden_size 32 intermediate_size 64 num_hidden_layers 2 &
      num_attention_heads 4 num_key_value_heads 2 vocab_size 64
data tokens ${data}
batch micro ${micro} seq_len ${seq}
optimizer adamw lr ${lr}
max_steps ${max_steps}
log every 1 rank_files ${rank_files}
run_dir ${run}
checkpoint every 1 dir ${ckpt} keep 1
save_final ${final}
"""
# 1-based deck lines of the commands the tests expect errors to name.
LINE = {"batch": 4, "run_dir": 8, "checkpoint": 9, "save_final": 10}
SKIP = 77



class Runner(ftrain_test.Runner):
    def __init__(self, a):
        super().__init__(a.ftrain, a.mpirun, os.path.abspath(a.workdir))
        self.prep = a.prep
        self.convert, self.vit_plugin_dir, self.make_images = a.convert, a.vit_plugin_dir, a.make_images
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.data = os.path.join(self.dir, "train.tok")
        subprocess.run([self.prep, "synthetic", "--out", self.data, "--tokens", "20000", "--vocab", "64",
                        "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
        self.deck = self.write("deck.in", DECK)

    def variables(self, **overrides):
        v = {"data": self.data, "lr": "1e-3", "max_steps": "4", "micro": "2", "seq": "16", "rank_files": "off", "run": os.path.join(self.dir, "run"),
             "ckpt": os.path.join(self.dir, "ckpt"), "final": os.path.join(self.dir, "final", "model.h5")}
        v.update({k: str(x) for k, x in overrides.items()})
        return v

    def ftrain_args(self, variables, check=False, deck=None):
        return self.ftrain_argv(deck or self.deck, variables, check)

    def run(self, np=2, check=False, timeout=120, **overrides):
        cmd = self.mpirun + ["-np", str(np)] + self.ftrain_args(self.variables(**overrides), check)
        return self.launch(cmd, timeout)

    def launch(self, cmd, timeout=120):
        return ftrain_test.run(cmd, timeout, cwd=self.dir)


def expect_failure(p, pattern, what, once=True, mpi_errors_allowed=False):
    """Non-zero exit, `pattern` in an 'ftrain: error' line, that line printed once, before any step."""
    errors = [l for l in p.stdout.splitlines() if l.startswith("ftrain: error")]
    if p.returncode == 0:
        fail(f"{what}: exited 0; output:\n{p.stdout[-3000:]}")
    if not any(re.search(pattern, l) for l in errors):
        fail(f"{what}: no error line matches {pattern!r}; output:\n{p.stdout[-3000:]}")
    if once and len(errors) != 1:
        fail(f"{what}: {len(errors)} error lines, expected exactly one:\n" + "\n".join(errors))
    # A startup error must never reach MPI (MPI_ERR_TRUNCATE, ORTE unpack
    # errors); after MPI_Abort, Open MPI's own help aggregation may log one.
    for bad in ("internal error", "check failed") + (() if mpi_errors_allowed else ("MPI_ERR", "ORTE_ERROR")):
        if bad in p.stdout:
            fail(f"{what}: '{bad}' in the output:\n{p.stdout[-3000:]}")
    print(f"ok: {what}: exit {p.returncode} in {p.seconds:.1f} s: {errors[0][:160]}")


def train_rows(run_dir):
    import json
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f if '"loss"' in l]


# ---- private mounts -------------------------------------------------------------

def enter_private_mount_namespace():
    """Root re-runs this script in its own mount namespace, so tmpfs mounts made
    by the test vanish with it (even when it is killed)."""
    if os.environ.get("FTRAIN_TEST_MOUNT_NS") or os.geteuid() != 0 or not shutil.which("unshare"):
        return
    if subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode != 0:
        return
    os.environ["FTRAIN_TEST_MOUNT_NS"] = "1"
    os.execvp("unshare", ["unshare", "-m", "--propagation", "private", sys.executable] + sys.argv)


def mount_tmpfs(path, options):
    """True when a tmpfs is mounted at `path` (only inside our namespace)."""
    if not os.environ.get("FTRAIN_TEST_MOUNT_NS"):
        return False
    os.makedirs(path, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path],
                          capture_output=True).returncode == 0


def fill(path):
    """Writes into `path` until its filesystem is full."""
    try:
        with open(os.path.join(path, "filler"), "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)
    except OSError:
        pass


# ---- scenarios ------------------------------------------------------------------

def scenario_nonfinite(r):
    p = r.run(np=2, lr="1e9", max_steps=8)
    expect_failure(p, r"step (\d+) diverged: .*first non-finite gradient \(backward order\): unit '[^']+', tensor '[^']+'",
                   "lr 1e9 without clipping")
    stopped = int(re.search(r"step (\d+) diverged", p.stdout).group(1))
    if f"checkpoint step {stopped} " in p.stdout:
        fail(f"a checkpoint was written for the diverged step {stopped}")
    ckpt = os.path.join(r.dir, "ckpt")
    steps = sorted(d for d in os.listdir(ckpt) if d.startswith("step_"))
    if steps != [f"step_{stopped - 1}"]:
        fail(f"expected only step_{stopped - 1} (the last finite state) under keep 1, found {steps}")
    for row in train_rows(os.path.join(r.dir, "run")):
        if row["step"] >= stopped:
            fail(f"a metrics row for the diverged step: {row}")
    # `resume auto` loads that finite state: the resumed run reaches the same
    # step with the same finite loss and stops the same way, and still
    # prunes nothing. (On a poisoned checkpoint its first loss is NaN.)
    first = re.search(r"ftrain: error: (step \d+ diverged: .*)", p.stdout).group(1)
    loss = float(re.search(r"\(loss ([^)]+)\)|the loss is (\S+)", first).group(1) or "nan")
    if not abs(loss) < 1e30:
        fail(f"the loss at the diverged step should be finite with finite weights: {first}")
    resume = r.write("resume.in", DECK + "resume auto\n")
    cmd = r.mpirun + ["-np", "2"] + r.ftrain_args(r.variables(lr="1e9", max_steps=8), deck=resume)
    q = r.launch(cmd)
    if f"ckpt/step_{stopped - 1} at step {stopped - 1}" not in q.stdout:
        fail(f"resume auto did not load step_{stopped - 1}:\n{q.stdout[-3000:]}")
    expect_failure(q, re.escape(first), "the resumed run repeats the same finite step")
    steps = sorted(d for d in os.listdir(ckpt) if d.startswith("step_"))
    if steps != [f"step_{stopped - 1}"]:
        fail(f"after the resumed stop, expected only step_{stopped - 1}, found {steps}")
    print(f"ok: resume auto took step_{stopped - 1}, the finite state, and nothing was pruned")

    # The norm and the diverged flag stay on the device between host reads
    # (execution-model.md): without checkpoints and with `log every 100` the
    # host first looks at the last step, yet the stop names the same first
    # diverged step, norm, loss and tensor (every update after it was skipped,
    # so replaying it sees the same weights), and no metrics row is written.
    quiet = r.write("quiet.in", DECK.replace("log every 1 ", "log every 100 ").replace(
        "checkpoint every 1 dir ${ckpt} keep 1\n", ""))
    cmd = r.mpirun + ["-np", "2"] + r.ftrain_args(r.variables(lr="1e9", max_steps=8, run=os.path.join(r.dir, "run_quiet")),
                                                  deck=quiet)
    q = r.launch(cmd)
    same = first[:first.index("no checkpoint was written or pruned")]
    expect_failure(q, re.escape(same), "a divergence first read at the last step names the first diverged step")
    if train_rows(os.path.join(r.dir, "run_quiet")):
        fail("a metrics row was written after a diverged step")
    print(f"ok: read at step 8, the stop still names step {stopped}: {same}")

    # An update that overflows the master weights (lr beyond float range; the
    # gradients are finite) is refused at the save: nothing is committed.
    ckpt2 = os.path.join(r.dir, "ckpt_overflow")
    p = r.run(np=2, lr="1e39", ckpt=ckpt2, run=os.path.join(r.dir, "run_overflow"))
    expect_failure(p, r"step 1: a master weight is not finite \(first: unit '[^']+', tensor '[^']+'\); no checkpoint "
                      r"was written or pruned", "lr 1e39 overflows the master weights")
    left = [d for d in os.listdir(ckpt2) if d.startswith("step_")] if os.path.isdir(ckpt2) else []
    if left:
        fail(f"a checkpoint of non-finite weights was committed: {left}")


def scenario_full_disk(r):
    # metrics.jsonl on a full disk: /dev/full behind the name.
    run = os.path.join(r.dir, "run")
    os.makedirs(run)
    os.symlink("/dev/full", os.path.join(run, "metrics.jsonl"))
    p = r.run(np=2)
    metrics = os.path.join(run, "metrics.jsonl")
    warnings = [l for l in p.stdout.splitlines() if l.startswith("ftrain: warning") and metrics in l]
    if p.returncode == 0:
        fail(f"metrics on a full disk: exit 0:\n{p.stdout[-3000:]}")
    if len(warnings) != 1 or "No space left on device" not in warnings[0]:
        fail(f"expected one warning naming {metrics} and ENOSPC, got {warnings}:\n{p.stdout[-3000:]}")
    if "done: 4 steps" not in p.stdout or not re.search(r"ftrain: error: .*" + re.escape(metrics), p.stdout):
        fail(f"training should complete and the end should repeat the loss as an error:\n{p.stdout[-3000:]}")
    print(f"ok: metrics on a full disk: warned once, trained on, exit {p.returncode}")

    # A per-rank log on a full disk (rank 1's only).
    run2 = os.path.join(r.dir, "run2")
    os.makedirs(run2)
    os.symlink("/dev/full", os.path.join(run2, "rank_1.log"))
    p = r.run(np=2, run=run2, ckpt=os.path.join(r.dir, "ckpt2"), rank_files="on")
    if p.returncode == 0 or not re.search(r"ftrain: warning: rank 1: cannot write .*rank_1\.log: No space", p.stdout):
        fail(f"rank 1's log on a full disk (exit {p.returncode}):\n{p.stdout[-3000:]}")
    print(f"ok: a rank log on a full disk: warned, exit {p.returncode}")

    # run_dir and checkpoint dir on a full filesystem fail before step 1.
    full = os.path.join(r.dir, "full")
    if not mount_tmpfs(full, "size=256k"):
        print("SKIP (part): cannot mount a tmpfs here (needs root and a private mount namespace); "
              "the full-filesystem start checks were not run")
        return
    fill(full)
    for what, var, line in (("run_dir", "run", LINE["run_dir"]), ("checkpoint dir", "ckpt", LINE["checkpoint"])):
        for check in (True, False):
            p = r.run(np=2, check=check, **{var: os.path.join(full, "sub")})
            expect_failure(p, rf"deck\.in:{line}: {what} '.*': cannot write in .*: No space left on device",
                           f"{what} on a full tmpfs{' (--check)' if check else ''}")
            if re.search(r"^step \d", p.stdout, re.M):
                fail(f"{what} on a full tmpfs: training started")

    # metrics.jsonl on a disk that fills during training (issue 35): whole
    # lines or none, never a torn last line. Two pages stay free (the lock
    # file takes one): the disk fills after a dozen rows.
    filling = os.path.join(r.dir, "filling")
    if not mount_tmpfs(filling, "size=128k"):
        return
    fill(filling)
    filler = os.path.join(filling, "filler")
    os.truncate(filler, max(0, os.path.getsize(filler) - 8192))
    p = r.run(np=2, max_steps=80, run=os.path.join(filling, "run"), ckpt=os.path.join(r.dir, "ckpt_filling"))
    metrics = os.path.join(filling, "run", "metrics.jsonl")
    if p.returncode == 0 or not re.search(r"cannot write .*metrics\.jsonl: No space left on device", p.stdout):
        fail(f"metrics on a disk that fills: expected the ENOSPC warning and exit 1 (exit {p.returncode}):\n"
             f"{p.stdout[-3000:]}")
    import json
    with open(metrics, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        fail(f"metrics.jsonl ends in a torn line: {data[-120:]!r}")
    rows = [json.loads(l) for l in data.decode().splitlines()]
    print(f"ok: the disk filled after {len(rows)} metrics lines; every line is whole")


def scenario_readonly(r):
    ro = os.path.join(r.dir, "ro")
    if mount_tmpfs(ro, "ro,size=64k"):
        reason = "Read-only file system"
    elif os.geteuid() != 0:
        os.makedirs(ro)
        os.chmod(ro, 0o555)
        reason = "Permission denied"
    else:
        print("SKIP: running as root without permission to mount: a read-only location cannot be made "
              "(root bypasses permission bits)")
        sys.exit(SKIP)
    cases = (("run_dir", "run", "ro/run", LINE["run_dir"]), ("checkpoint dir", "ckpt", "ro/ckpt", LINE["checkpoint"]),
             ("save_final directory", "final", "ro/sub/model.h5", LINE["save_final"]))
    for what, var, value, line in cases:
        for check in (True, False):
            p = r.run(np=2, check=check, **{var: os.path.join(r.dir, value)})
            expect_failure(p, rf"deck\.in:{line}: {what} '.*': cannot (write in|create the directory).*{reason}",
                           f"{what} read-only{' (--check)' if check else ''}")
            if re.search(r"^step \d", p.stdout, re.M):
                fail(f"{what} read-only: training started")


def scenario_plan_overflow(r):
    for micro, seq, field in (("99999999999", "99999999999", "seq_len"), ("99999999999", "64", "micro")):
        p = r.run(np=1, check=True, micro=micro, seq=seq)
        expect_failure(p, rf"deck\.in:{LINE['batch']}: batch micro {micro} seq_len {seq}: .*lower {field}",
                       f"batch micro {micro} seq_len {seq}")
        if re.search(r"^  global batch", p.stdout, re.M):
            fail("a plan was printed for an impossible batch")


def scenario_errors_once(r):
    lama = r.write("lama.in", DECK.replace("model llama", "model lama"))
    cmd = r.mpirun + ["-np", "2"] + r.ftrain_args(r.variables(), check=True, deck=lama)
    expect_failure(r.launch(cmd), r"lama\.in:1: unknown model 'lama' \(did you mean 'llama'\?\)", "model lama")

    small = os.path.join(r.dir, "small")
    if not mount_tmpfs(small, "size=64k"):
        print("SKIP (part): cannot mount a tmpfs here; the every-rank training failure was not run")
        return
    # Room for the start checks, not for a checkpoint: every rank's save fails.
    # The ranks agree on the failure (ckpt/checkpoint_writer.hpp) and stop
    # cleanly: rank 0 prints the lowest failing rank's message once.
    p = r.run(np=3, ckpt=os.path.join(small, "ckpt"))
    expect_failure(p, r"ftrain: error: rank 0: .*small/ckpt.*\(and 2 other rank\(s\)\)",
                   "a checkpoint disk full on all 3 ranks", mpi_errors_allowed=True)


def scenario_run_dir_lock(r):
    run, ckpt = os.path.join(r.dir, "run"), os.path.join(r.dir, "ckpt")
    cmd = r.mpirun + ["-np", "2"] + r.ftrain_args(r.variables(max_steps=100000))
    first = subprocess.Popen(cmd, cwd=r.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(os.path.join(run, "metrics.jsonl")) and len(train_rows(run)) >= 2):
            if first.poll() is not None or time.monotonic() > deadline:
                fail("the first run did not reach step 2:\n" + first.communicate()[0][-3000:])
            time.sleep(0.05)
        ranks = subprocess.run(["pgrep", "-P", str(first.pid)], stdout=subprocess.PIPE, text=True).stdout.split()
        # The same deck again: run_dir is taken.
        p = r.run(np=2)
        expect_failure(p, rf"deck\.in:{LINE['run_dir']}: run_dir '{re.escape(run)}' is in use by another ftrain run: "
                          rf"host \S+ pid ({'|'.join(ranks)}),", "a second run on a running run's run_dir")
        if re.search(r"^step \d", p.stdout, re.M):
            fail("the second run trained")
        # Another run_dir, the same checkpoint dir (two decks sharing one).
        p = r.run(np=2, run=os.path.join(r.dir, "run_other"))
        expect_failure(p, rf"deck\.in:{LINE['checkpoint']}: checkpoint dir '{re.escape(ckpt)}' is in use by another "
                          rf"ftrain run: host \S+ pid ({'|'.join(ranks)}),", "a second deck on the same checkpoint dir")
        if first.poll() is not None:
            fail("the first run ended while the others were refused:\n" + first.communicate()[0][-3000:])
        # Its metrics are its own: whole lines, steps 1, 2, 3... once each.
        with open(os.path.join(run, "metrics.jsonl")) as f:
            lines = f.read().splitlines()
        import json
        steps = [json.loads(l)["step"] for l in lines[:-1] if '"loss"' in l]  # the last line may be in flight
        if steps != list(range(1, len(steps) + 1)):
            fail(f"metrics.jsonl of the first run is not its own: steps {steps}")
    finally:
        # kill -9 of the whole job (mpirun and its ranks): the lock must go with them.
        for pid in subprocess.run(["pgrep", "-P", str(first.pid)], stdout=subprocess.PIPE, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    print(f"ok: the first run held run_dir and checkpoint dir; {len(steps)} whole metrics lines of its own")
    # A restart after the crash: the lock is free, its file names the dead run.
    p = r.run(np=2, ckpt=os.path.join(r.dir, "ckpt_after"))
    if p.returncode != 0:
        fail(f"a restart after kill -9 failed (exit {p.returncode}):\n{p.stdout[-3000:]}")
    if not re.search(r"taking over .*\.ftrain\.lock from an earlier run that no longer holds it \(host \S+ pid "
                     rf"({'|'.join(ranks)}),.*crashed or was killed", p.stdout):
        fail(f"the restart did not report the crashed holder:\n{p.stdout[-3000:]}")
    # A clean end leaves nothing to report.
    p = r.run(np=2, ckpt=os.path.join(r.dir, "ckpt_after2"))
    if p.returncode != 0 or "taking over" in p.stdout:
        fail(f"after a clean end (exit {p.returncode}) the lock should be free and quiet:\n{p.stdout[-3000:]}")
    print("ok: after kill -9 a restart took the lock over and said so; after a clean end nothing was said")


def alive(pid):
    """True while `pid` runs (a zombie, reaped by nobody once mpirun is gone, does not run)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def committed_steps(ckpt):
    return {int(d[5:]) for d in os.listdir(ckpt) if re.fullmatch(r"step_\d+", d)} if os.path.isdir(ckpt) else set()


def scenario_launcher_gone(r):
    run, ckpt = os.path.join(r.dir, "run"), os.path.join(r.dir, "ckpt")
    cmd = r.mpirun + ["-np", "2"] + r.ftrain_args(r.variables(max_steps=100000))
    job = subprocess.Popen(cmd, cwd=r.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    deadline = time.monotonic() + 60
    while not (os.path.exists(os.path.join(run, "metrics.jsonl")) and len(train_rows(run)) >= 3):
        if job.poll() is not None or time.monotonic() > deadline:
            fail("the run did not reach step 3:\n" + job.communicate()[0][-3000:])
        time.sleep(0.05)
    ranks = [int(p) for p in subprocess.run(["pgrep", "-P", str(job.pid)], stdout=subprocess.PIPE,
                                            text=True).stdout.split()]
    if len(ranks) != 2:
        fail(f"expected 2 rank processes under mpirun, found {ranks}")
    os.kill(job.pid, signal.SIGKILL)  # mpirun only: the ranks are on their own now
    killed = time.monotonic()
    newest_at_kill = max(committed_steps(ckpt), default=0)
    while any(alive(p) for p in ranks) and time.monotonic() - killed < 0.5:
        time.sleep(0.01)
    left = [p for p in ranks if alive(p)]
    ran_on = time.monotonic() - killed
    time.sleep(1.5)  # what orphans would still commit
    newest_after = max(committed_steps(ckpt), default=0)
    for p in ranks:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.communicate()
    if left:
        fail(f"ranks {left} still ran {ran_on:.2f} s after mpirun was killed (newest checkpoint step_{newest_at_kill} "
             f"at the kill, step_{newest_after} 1.5 s later)")
    # One more step may land: its commit (a rename) can be under way when the
    # kill comes. Orphans that kept training would commit many more in 1.5 s.
    if newest_after > newest_at_kill + 1:
        fail(f"step_{newest_after} was committed after mpirun was killed (step_{newest_at_kill} at the kill)")
    print(f"ok: the ranks ended {ran_on:.2f} s after kill -9 of mpirun; newest checkpoint step_{newest_after} "
          f"(step_{newest_at_kill} at the kill)")
    p = r.run(np=2, ckpt=os.path.join(r.dir, "ckpt_after"))
    if p.returncode != 0:
        fail(f"a restart after the orphaned ranks ended failed (exit {p.returncode}):\n{p.stdout[-3000:]}")
    print("ok: the restart found the run directory free")


def safetensors_poison(path, element):
    """Writes a NaN into `element` of the first f32 tensor of a safetensors file; returns its name."""
    import json
    import struct
    with open(path, "r+b") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        name = sorted(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")[0]
        f.seek(8 + size + header[name]["data_offsets"][0] + 4 * element)
        f.write(struct.pack("<f", float("nan")))
    return name


def scenario_nan_weights(r):
    if not r.convert:
        fail("nan_weights needs --convert")
    p = r.run(np=2, max_steps=2)
    if p.returncode != 0:
        fail(f"the run that writes the weights failed:\n{p.stdout[-3000:]}")
    good = os.path.join(r.dir, "final", "model.h5")
    st = os.path.join(r.dir, "st")
    q = subprocess.run([r.convert, "h5-to-safetensors", good, st], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if q.returncode != 0:
        fail(f"h5-to-safetensors: {q.stdout}")
    shard = sorted(f for f in os.listdir(st) if f.endswith(".safetensors"))[0]
    tensor = safetensors_poison(os.path.join(st, shard), 3)
    named = rf"{re.escape(shard)}: tensor '{re.escape(tensor)}' holds a non-finite value \(NaN\) at element 3"
    q = subprocess.run([r.convert, "safetensors-to-h5", st, os.path.join(r.dir, "back.h5")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if q.returncode == 0 or not re.search(named, q.stdout):
        fail(f"ftrain-convert safetensors-to-h5 of a NaN weight: exit {q.returncode}, expected {named!r}:\n{q.stdout}")
    print(f"ok: ftrain-convert refused the NaN weight: {q.stdout.strip()[:200]}")
    # init safetensors at a tiny lr with clipping on (the probe's lr 0 is a deck error): stopped at load,
    # named, and not reported as a divergence with advice that cannot apply.
    deck = r.write("init_st.in", DECK + "init safetensors ${st}\nclip_grad_norm 1.0\n")
    variables = dict(r.variables(lr="1e-12", max_steps=2), st=st)
    q = r.launch(r.mpirun + ["-np", "2"] + r.ftrain_args(variables, deck=deck))
    if q.returncode == 0 or not re.search(named, q.stdout):
        fail(f"init safetensors with a NaN weight: exit {q.returncode}, expected {named!r}:\n{q.stdout[-3000:]}")
    if "Lower the learning rate" in q.stdout or re.search(r"step \d+ diverged", q.stdout):
        fail(f"a NaN initial weight was reported as a divergence:\n{q.stdout[-3000:]}")
    print("ok: init safetensors stopped at load naming the file, tensor and element")
    # init hdf5 of a consolidated file with a NaN weight, poisoned with h5py
    # (Debian's interpreter has it where this one may not).
    bad_h5 = os.path.join(r.dir, "bad.h5")
    shutil.copy(good, bad_h5)
    poison = ("import h5py, sys\nwith h5py.File(sys.argv[1], 'r+') as f:\n    d = f[sys.argv[2]]\n"
              "    v = d[()]\n    v.flat[3] = float('nan')\n    d[...] = v\n")
    for python in (sys.executable, "/usr/bin/python3"):
        if subprocess.run([python, "-c", poison, bad_h5, tensor], capture_output=True).returncode == 0:
            break
    else:
        print("SKIP (part): no h5py here; init hdf5 of a NaN file was not tried")
        return
    deck = r.write("init_h5.in", DECK + "init hdf5 ${h5}\nclip_grad_norm 1.0\n")
    variables = dict(r.variables(lr="1e-12", max_steps=2), h5=bad_h5)
    q = r.launch(r.mpirun + ["-np", "2"] + r.ftrain_args(variables, deck=deck))
    if q.returncode == 0 or f"dataset '{tensor}' holds a non-finite value (NaN) at element 3" not in q.stdout:
        fail(f"init hdf5 with a NaN weight: exit {q.returncode}:\n{q.stdout[-3000:]}")
    print("ok: init hdf5 stopped at load naming the file, dataset and element")


VIT_DECK = """\
model vit preset tiny
data images hdf5 ${images} shuffle on
batch micro 4
optimizer adamw lr 1e-3
max_steps 2
run_dir ${run}
"""


def scenario_image_check(r):
    if not (r.vit_plugin_dir and r.make_images):
        fail("image_check needs --vit-plugin-dir and --make-images")
    env = dict(os.environ, FTRAIN_PLUGIN_PATH=r.vit_plugin_dir)
    deck = r.write("vit.in", VIT_DECK)
    good, small, garbage = (os.path.join(r.dir, n) for n in ("good.h5", "small.h5", "garbage.h5"))
    subprocess.run([r.make_images, good, "16", "32", "10"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([r.make_images, small, "16", "16", "10"], check=True, stdout=subprocess.DEVNULL)
    with open(garbage, "wb") as f:
        f.write(bytes((i * 131 + 7) % 256 for i in range(4096)))

    def check(images):
        cmd = r.mpirun + ["-np", "2", r.ftrain, "--check", "-var", "images", images, "-var", "run",
                          os.path.join(r.dir, "run"), deck]
        p = subprocess.run(cmd, cwd=r.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           timeout=120)
        p.seconds = 0.0
        return p

    p = check(good)
    if p.returncode != 0:
        fail(f"--check with a good image file failed:\n{p.stdout[-3000:]}")
    expect_failure(check(garbage), rf"vit\.in:2: {re.escape(garbage)}: cannot open as an HDF5 file",
                   "--check with random bytes as the image file")
    expect_failure(check(small), rf"vit\.in:2: {re.escape(small)}: dataset 'images' has shape \[16, 16, 16, 3\], "
                                 rf"the model expects \[N, 32, 32, 3\]", "--check with images of the wrong shape")

    # Token files (issue 35, item 7): deck.md promises the file and the deck line, at --check and at the start.
    tokens = os.path.join(r.dir, "garbage.tok")
    with open(tokens, "wb") as f:
        f.write(bytes((i * 61 + 0xff) % 256 for i in range(512)))
    for checking in (True, False):
        p = r.run(np=2, check=checking, data=tokens)
        expect_failure(p, rf"deck\.in:3: token file {re.escape(tokens)} has the wrong magic", f"random bytes as the token file"
                                                                 f"{' (--check)' if checking else ''}",
                       mpi_errors_allowed=True)


def scenario_untrained_steps(r):
    # Issue 36: instruction data whose responses lie past seq_len trained on
    # nothing while logging loss 0. Prompts of 40 bytes, seq_len 16, packing
    # off: the window holds the prompt only, every target is masked.
    def prepare(name, examples):
        jsonl = r.write(name + ".jsonl", "".join(f'{{"prompt": "{p}", "response": "{a}"}}\n' for p, a in examples))
        out = os.path.join(r.dir, name + ".tok")
        subprocess.run([r.prep, "instruct", "--tokenizer", "bytes", "--template", "fields", "--out", out, jsonl],
                       check=True, stdout=subprocess.DEVNULL)
        return out

    long_prompt = "x" * 40
    cut = prepare("all_cut", [(long_prompt, "yes"), (long_prompt, "no")])
    mixed = prepare("mixed", [("q", "ok"), (long_prompt, "lost")])  # example 2 loses its response
    strict = DECK.replace("vocab_size 64", "vocab_size 320").replace("data tokens ${data}",
                                                                     "data tokens ${data} packing off")
    strict_deck = r.write("strict.in", strict)
    allow_deck = r.write("allow.in", strict.replace("packing off", "packing off allow_untrained_steps on"))

    def run(deck, data, check=False, np=1, **overrides):
        overrides.setdefault("run", os.path.join(r.dir, "run_" + os.path.basename(deck)))
        overrides.setdefault("micro", 1)
        overrides.setdefault("max_steps", 2)
        v = r.variables(data=data, **overrides)
        return r.launch(r.mpirun + ["-np", str(np)] + r.ftrain_args(v, check=check, deck=deck))

    lost_all = rf"strict\.in:3: 2 of 2 examples in {re.escape(cut)} are longer than seq_len\+1 = 17 tokens " \
               rf"\(the longest has \d+\) and packing off cuts them; 2 of them lose every response token"
    expect_failure(run(strict_deck, cut, check=True), lost_all, "--check, every response past seq_len")
    expect_failure(run(strict_deck, cut, np=2), lost_all, "a run, every response past seq_len", mpi_errors_allowed=True)

    # Allowed: it runs, and metrics.jsonl and the log say that nothing trained.
    p = run(allow_deck, cut)
    if p.returncode != 0:
        fail(f"allow_untrained_steps on: exit {p.returncode}:\n{p.stdout[-3000:]}")
    rows = train_rows(os.path.join(r.dir, "run_allow.in"))
    if [row.get("trained_tokens") for row in rows] != [0, 0]:
        fail(f"allow_untrained_steps on: trained_tokens per step should be [0, 0]: {rows}")
    if "(0 trained tok)" not in p.stdout or not re.search(r"warning: \S*allow\.in:3: 2 of 2 examples", p.stdout):
        fail(f"allow_untrained_steps on: the log does not say that no token trained:\n{p.stdout[-3000:]}")
    print("ok: allow_untrained_steps on: the steps run with trained_tokens 0 in metrics.jsonl and the log")

    # Mixed: --check warns with the counts; step 1 trains, step 2 (the cut example) stops the run.
    p = run(strict_deck, mixed, check=True)
    if p.returncode != 0 or not re.search(r"warning: \S*strict\.in:3: 1 of 2 examples .* 1 of them loses every "
                                          r"response token", p.stdout):
        fail(f"--check on a half-cut file: exit {p.returncode}, no warning with the counts:\n{p.stdout[-3000:]}")
    # 2 ranks x micro 1: every step holds both examples, one of them trains.
    p = run(strict_deck, mixed, np=2, max_steps=4, run=os.path.join(r.dir, "run_mixed_np2"))
    if p.returncode != 0:
        fail(f"a step holding one trained example stopped:\n{p.stdout[-3000:]}")
    p = run(strict_deck, mixed, np=1, max_steps=4)
    expect_failure(p, r"step 2 has no trained target token: every target of its 1 samples is masked", "step 2: "
                   "only the cut example", mpi_errors_allowed=True)
    rows = train_rows(os.path.join(r.dir, "run_strict.in"))
    if not rows or rows[0]["step"] != 1 or rows[0].get("trained_tokens", 0) <= 0 or len(rows) != 1:
        fail(f"step 1 (trained) should be logged with its trained_tokens, step 2 not: {rows}")
    print(f"ok: step 1 trained {rows[0]['trained_tokens']} token(s); step 2 with none stopped the run")


def scenario_startup_error(r):
    # MPMD: the last rank reads another deck (missing) or has a variable only in its environment.
    env_deck = r.write("env.in", DECK.replace("${data}", "${FTRAIN_TEST_ONLY_HERE}"))
    variables = r.variables()
    del variables["data"]
    for np in (2, 3):
        good = r.ftrain_args(r.variables(), check=True)
        missing = r.ftrain_args(r.variables(), check=True, deck=os.path.join(r.dir, "missing.in"))
        cmd = r.mpirun + ["-np", str(np - 1)] + good + [":", "-np", "1"] + missing
        p = r.launch(cmd, timeout=60)
        expect_failure(p, r"missing\.in: cannot read input deck", f"deck missing on rank {np - 1} of {np}")
        if p.seconds > 30:
            fail(f"took {p.seconds:.0f} s")
        with_var = ["env", f"FTRAIN_TEST_ONLY_HERE={r.data}"] + r.ftrain_args(variables, check=True, deck=env_deck)
        without = r.ftrain_args(variables, check=True, deck=env_deck)
        cmd = r.mpirun + ["-np", str(np - 1)] + with_var + [":", "-np", "1"] + without
        p = r.launch(cmd, timeout=60)
        expect_failure(p, r"undefined variable '\$\{FTRAIN_TEST_ONLY_HERE\}'",
                       f"${{VAR}} only in the environment of ranks 0..{np - 2} of {np}")
        if p.seconds > 30:
            fail(f"took {p.seconds:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--convert", help="ftrain-convert (nan_weights)")
    ap.add_argument("--vit-plugin-dir", help="the directory of the vit plugin (image_check)")
    ap.add_argument("--make-images", help="vit_make_image_h5 (image_check)")
    a = ap.parse_args()
    scenario = globals().get("scenario_" + a.scenario)
    if scenario is None:
        fail(f"unknown scenario {a.scenario}")
    enter_private_mount_namespace()
    scenario(Runner(a))
    print("PASS")


if __name__ == "__main__":
    main()
