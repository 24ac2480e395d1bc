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
import subprocess
import sys
import time

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


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


class Runner:
    def __init__(self, a):
        self.ftrain, self.prep = a.ftrain, a.prep
        self.mpirun = shlex.split(a.mpirun)
        self.dir = os.path.abspath(a.workdir)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.data = os.path.join(self.dir, "train.tok")
        subprocess.run([self.prep, "synthetic", "--out", self.data, "--tokens", "20000", "--vocab", "64",
                        "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
        self.deck = self.write("deck.in", DECK)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def variables(self, **overrides):
        v = {"data": self.data, "lr": "1e-3", "max_steps": "4", "micro": "2", "seq": "16", "rank_files": "off", "run": os.path.join(self.dir, "run"),
             "ckpt": os.path.join(self.dir, "ckpt"), "final": os.path.join(self.dir, "final", "model.h5")}
        v.update({k: str(x) for k, x in overrides.items()})
        return v

    def ftrain_args(self, variables, check=False, deck=None):
        args = [self.ftrain] + (["--check"] if check else [])
        for k, x in variables.items():
            args += ["-var", k, x]
        return args + [deck or self.deck]

    def run(self, np=2, check=False, timeout=120, **overrides):
        cmd = self.mpirun + ["-np", str(np)] + self.ftrain_args(self.variables(**overrides), check)
        return self.launch(cmd, timeout)

    def launch(self, cmd, timeout=120):
        start = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            fail(f"{' '.join(cmd)} still ran after {timeout} s (a hang):\n{out[-3000:]}")
        p.seconds = time.monotonic() - start
        return p


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
    a = ap.parse_args()
    scenario = globals().get("scenario_" + a.scenario)
    if scenario is None:
        fail(f"unknown scenario {a.scenario}")
    enter_private_mount_namespace()
    scenario(Runner(a))
    print("PASS")


if __name__ == "__main__":
    main()
