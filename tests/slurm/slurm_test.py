#!/usr/bin/env python3
"""jobs/slurm/llama70b.sbatch under a real SLURM (slurm_cluster.py): sbatch,
signals, requeue, preemption, with both launch forms of jobs/slurm/launch.sh.

    slurm_test.py SCENARIO --repo R --ftrain F --prep P --workdir W [--mpi-flag X ...]

The job script is the template with only what a 2-node x 1-CPU test
cluster needs changed (--ntasks-per-node=1, --cpus-per-task=1, no
--gpus-per-node) and tests/slurm/tiny_slurm.in in place of
inputs/llama70b.in; every other line, the #SBATCH --signal, --requeue,
--open-mode and --output lines included, is the template's. Each change must
match its line exactly once, so a template that drifts fails here rather
than being tested half-changed. The paths go in through the template's own
variables (TOKENS, RUN_DIR, DEVICE=host, FTRAIN, FTRAIN_LAUNCHER).

Every scenario compares the job's losses (metrics.jsonl, all rows, across
restarts) with a direct `mpirun -np 2` run of the same deck: equal bit for
bit, step by step. Scenarios:

  srun        FTRAIN_LAUNCHER=srun (srun --mpi=pmix across the 2 nodes).
              `scancel --signal=USR1 --batch` mid-run (what
              --signal=B:USR1@600 does before the time limit): ftrain
              checkpoints, exits 0, the job runs `scontrol requeue`; the
              requeued job resumes at that step. Then `scancel
              --signal=USR1` (the job's steps, the command ftrain's run
              header prints): the same again. The job completes (exit 0:0,
              Restarts=2), its log where the template says (ftrain-<job>.log
              and the --output file, appended across the restarts).
  mpirun      the same with FTRAIN_LAUNCHER=mpirun inside the allocation.
  preempt_srun    srun. A job in the `urgent` partition preempts it (SLURM
              22.05: SIGTERM to the job's steps when GraceTime starts, at
              its end cancel and requeue): the ranks stop cleanly within
              the grace, nothing is lost. Then SIGTERM to every process
              (`scancel --full --signal=TERM`) and SIGKILL at once
              (`--signal=KILL`), a grace no save fits in: requeued, the
              job resumes from its newest committed checkpoint (ckpt/latest
              as the killed run left it), at most `checkpoint every` (10)
              steps back.
  preempt_mpirun  the same with mpirun: the preemption's SIGTERM reaches
              Open MPI's daemons (mpirun starts them as a job step), which
              end the ranks, maybe before a save; mpirun fails and the job
              must requeue itself (launch.sh's FTRAIN_PREEMPTED_CMD) and
              lose at most the steps since its newest checkpoint.
  time_limit  mpirun. #SBATCH --time=1 with the template's --signal at 20 s
              (the template's `B:` kept or not, as the template has it):
              SLURM's own warning must reach the batch shell, which makes
              the job checkpoint and requeue itself before its time limit;
              the requeued job resumes there, and is stopped and cancelled
              a few steps later (SLURM checks the warning every 30 s, so it
              comes 10 to 40 s into the job).
"""
import argparse
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402
from ftrain_test import fail  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402

TEMPLATE = "jobs/slurm/llama70b.sbatch"
DECK = "tests/slurm/tiny_slurm.in"
RANKS = 2


def job_script(repo, deck, extra=()):
    """The template, changed only where the test cluster needs it (each change on exactly one line)."""
    text = open(os.path.join(repo, TEMPLATE)).read()
    changes = [(r"^#SBATCH --nodes=\d+$", "#SBATCH --nodes=2"),
               (r"^#SBATCH --ntasks-per-node=\d+$", "#SBATCH --ntasks-per-node=1"),
               (r"^#SBATCH --gpus-per-node=\d+\n", ""),
               (r"^#SBATCH --cpus-per-task=\d+$", "#SBATCH --cpus-per-task=1"),
               (r"^((?:exec )?bash jobs/slurm/launch\.sh) inputs/llama70b\.in ", rf"\1 {deck} ")] + list(extra)
    for pattern, replacement in changes:
        text, n = re.subn(pattern, replacement, text, flags=re.M)
        if n != 1:
            fail(f"{TEMPLATE}: expected one line matching {pattern!r} to adapt for the test cluster, found {n}")
    return text


def train_rows(run_dir):
    rows = ftrain_test.read_metrics(os.path.join(run_dir, "metrics.jsonl"), partial_ok=True)
    return [r for r in rows if "loss" in r and "eval_loss" not in r and "step" in r]


def last_step(run_dir):
    rows = train_rows(run_dir)
    return rows[-1]["step"] if rows else 0


class Test:
    def __init__(self, a):
        self.a = a
        self.dir = os.path.abspath(a.workdir)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.data = os.path.join(self.dir, "data")
        self.submit = os.path.join(self.dir, "submit")
        self.run_dir = os.path.join(self.dir, "run")
        self.tmp = os.path.join(self.dir, "tmp")
        for d in (self.data, self.submit, self.tmp):
            os.makedirs(d)
        # The template runs `bash jobs/slurm/launch.sh` from the submit directory.
        os.symlink(os.path.join(a.repo, "jobs"), os.path.join(self.submit, "jobs"))
        for name, seed in (("train.tok", 3), ("eval.tok", 4)):
            ftrain_test.run([a.prep, "synthetic", "--out", os.path.join(self.data, name), "--tokens", "20000",
                             "--vocab", "64", "--seed", str(seed)], 60, expect_ok=True)
        self.deck = os.path.join(a.repo, DECK)

    def job_env(self, launcher, max_steps, checkpoint_every=100000):
        env = dict(os.environ, TOKENS=self.data, RUN_DIR=self.run_dir, DEVICE="host", HF_WEIGHTS="/nonexistent",
                   FTRAIN=self.a.ftrain, FTRAIN_LAUNCHER=launcher, FTRAIN_MPIRUN_ARGS=" ".join(self.a.mpi_flag),
                   FTRAIN_TEST_MAX_STEPS=str(max_steps), FTRAIN_TEST_CHECKPOINT_EVERY=str(checkpoint_every),
                   # Open MPI's session directories: per test, not shared /tmp.
                   TMPDIR=self.tmp)
        env.pop("OMP_NUM_THREADS", None)
        return env

    def direct_run(self, steps):
        """The reference: the same deck on 2 ranks under mpirun, no scheduler."""
        run_dir = os.path.join(self.dir, f"direct_{steps}")
        shutil.rmtree(run_dir, ignore_errors=True)
        env = dict(os.environ, FTRAIN_TEST_MAX_STEPS=str(steps), FTRAIN_TEST_CHECKPOINT_EVERY="100000")
        for name in [n for n in env if n.startswith("SLURM_")]:
            del env[name]
        cmd = [self.a.mpiexec] + self.a.mpi_flag + ["-x", "FTRAIN_TEST_MAX_STEPS", "-x", "FTRAIN_TEST_CHECKPOINT_EVERY",
                                                    "-np", str(RANKS), self.a.ftrain, self.deck,
                                                    "-var", "train_tokens", os.path.join(self.data, "train.tok"),
                                                    "-var", "eval_tokens", os.path.join(self.data, "eval.tok"),
                                                    "-var", "run_dir", run_dir, "-var", "device", "host"]
        ftrain_test.run(cmd, 180, cwd=self.dir, env=env, expect_ok=True, what=f"the direct run of {steps} steps")
        rows = train_rows(run_dir)
        if [r["step"] for r in rows] != list(range(1, steps + 1)):
            fail(f"the direct run logged steps {[r['step'] for r in rows][:5]}..., expected 1..{steps}")
        return {r["step"]: r for r in rows}

    def compare_with_direct(self, steps, what):
        """Every training row the job logged (a step logged twice, before and after a
        kill, included) equals the direct run's row of that step."""
        reference = self.direct_run(steps)
        rows = train_rows(self.run_dir)
        if not rows:
            fail(f"{what}: the job logged no training step in {self.run_dir}/metrics.jsonl")
        for r in rows:
            want = reference.get(r["step"])
            if want is None:
                fail(f"{what}: the job logged step {r['step']}, beyond the direct run's {steps}")
            for field in ("loss", "grad_norm", "lr"):
                if field not in r or field not in want or r[field] != want[field]:
                    fail(f"{what}: step {r['step']} {field}: job {r.get(field)}, direct run {want.get(field)}")
        missing = sorted(set(reference) - {r["step"] for r in rows})
        if missing:
            fail(f"{what}: the job never logged steps {missing[:10]}")
        print(f"ok: {what}: {len(rows)} logged step(s) equal the direct run's (loss, grad_norm, lr, bit for bit)")

    def submit_job(self, cluster, launcher, max_steps, checkpoint_every=100000, extra=()):
        script = os.path.join(self.submit, "ftrain-test.sbatch")
        with open(script, "w") as f:
            f.write(job_script(self.a.repo, self.deck, extra))
        return cluster.sbatch(script, cwd=self.submit, env=self.job_env(launcher, max_steps, checkpoint_every))

    def job_log(self, job):
        path = os.path.join(self.submit, f"ftrain-{job}.log")
        return open(path, errors="replace").read() if os.path.exists(path) else ""

    def output_file(self, cluster, job):
        """The --output file (the template's ftrain-%x-%j.out: job name and id)."""
        name = cluster.job(job).get("JobName", "")
        path = os.path.join(self.submit, f"ftrain-{name}-{job}.out")
        if not os.path.exists(path):
            fail(f"the job's --output file {path} is missing (submit dir: {sorted(os.listdir(self.submit))})")
        return open(path, errors="replace").read()

    def wait_for(self, cluster, job, ready, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if ready():
                return
            info = cluster.job(job)
            if info.get("JobState") in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"):
                self.show(cluster, job)
                fail(f"{what}: the job ended {info.get('JobState')} (exit {info.get('ExitCode')}) first")
            time.sleep(0.1)
        self.show(cluster, job)
        fail(f"{what}: not within {timeout} s (job state {cluster.job(job).get('JobState')})")

    def wait_step(self, cluster, job, step, timeout=90):
        self.wait_for(cluster, job, lambda: last_step(self.run_dir) >= step, timeout, f"job {job} reaching step {step}")

    def show(self, cluster, job):
        print(f"--- ftrain-{job}.log (tail):\n" + "\n".join(self.job_log(job).splitlines()[-30:]))
        print("--- slurmctld.log (tail):\n" + cluster.log_tail("slurmctld.log"))

    def finish(self, cluster, job, restarts, what, timeout=120):
        info = cluster.wait_job(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), timeout, what)
        if info.get("JobState") != "COMPLETED" or info.get("ExitCode") != "0:0":
            self.show(cluster, job)
            fail(f"{what}: job {job} ended {info.get('JobState')} with exit {info.get('ExitCode')}, "
                 "expected COMPLETED 0:0")
        if info.get("Restarts") != str(restarts):
            fail(f"{what}: job {job} was started {int(info.get('Restarts', 0)) + 1} time(s), "
                 f"expected {restarts + 1} (Restarts={info.get('Restarts')})")
        return info


def stop_by_signal_and_requeue(t, cluster, launcher):
    """sbatch the template; SIGUSR1 to the batch shell mid-run, requeue, resume;
    SIGUSR1 to the job's steps (the stop command ftrain's run header prints
    first), requeue, resume; complete."""
    steps = 150  # both signals must land mid-run: 40 steps take 1 s on 2 idle cores
    job = t.submit_job(cluster, launcher, steps)
    stops = []
    for restarts, how in ((0, ["--batch"]), (1, [])):
        t.wait_for(cluster, job, lambda: len(resumed_at(t, job)) == restarts, 60, f"start {restarts + 1} of job {job}")
        t.wait_step(cluster, job, (stops[-1] if stops else 0) + 5)
        cluster.run("scancel", "--signal=USR1", *how, job)
        stops.append(last_step(t.run_dir))
        print(f"$ scancel --signal=USR1 {' '.join(how)} {job}  (at step {stops[-1]})", flush=True)
        t.wait_for(cluster, job, lambda: cluster.job(job).get("Restarts") == str(restarts + 1), 60,
                   f"the requeue after the stop at step {stops[-1]}")
    t.finish(cluster, job, 2, f"{launcher}: the twice requeued job")
    log = t.job_log(job)
    if not log:
        fail(f"the job wrote no log where the template says: {t.submit}/ftrain-{job}.log")
    for want in ("stop signal received (SIGUSR1)", "done: "):
        if want not in log:
            t.show(cluster, job)
            fail(f"ftrain-{job}.log lacks '{want}'")
    resumed = resumed_at(t, job)
    if len(resumed) != 2 or not all(stop <= at < steps for stop, at in zip(stops, resumed)):
        fail(f"the requeued job resumed at {resumed}, expected twice, at or after the steps the signals came at "
             f"({stops}) and before {steps}")
    out = t.output_file(cluster, job)
    start_line = f"ftrain job {job}: {RANKS} ranks on 2 node(s), 1 per node, 1 core(s) each, via {launcher}"
    if out.count(start_line) != 3 or out.count(f"requeueing: scontrol requeue {job}") != 2 or "done: " not in out:
        fail(f"the --output file does not hold the 3 starts of job {job} ('{start_line}', --open-mode=append), "
             f"the 2 requeues and the end:\n{out[-3000:]}")
    print(f"ok: {launcher}: stopped by SIGUSR1 to the batch shell at step {resumed[0]} and to the job's steps at "
          f"step {resumed[1]}, requeued by scontrol each time, resumed there, completed {steps} steps; "
          f"ftrain-{job}.log and the --output file hold all 3 starts")
    t.compare_with_direct(steps, f"{launcher}: two stops, requeues and resumes")


def committed_step(run_dir):
    """The step of the newest committed checkpoint (ckpt/latest), 0 without one."""
    path = os.path.join(run_dir, "ckpt", "latest")
    if not os.path.exists(path):
        return 0
    m = re.fullmatch(r"step_(\d+)", open(path).read().strip())
    if not m:
        fail(f"{path} does not name a step_N checkpoint: {open(path).read()!r}")
    return int(m.group(1))


def resumed_at(t, job):
    return [int(m) for m in re.findall(r"resumed from \S+/ckpt/step_\d+ at step (\d+)", t.job_log(job))]


def preempt(t, cluster, launcher):
    # Steps enough that a loaded machine, where the test's polling falls
    # behind the training, still kills the job well before its last step
    # (at 100 a run once finished before the SIGTERM+SIGKILL reached it).
    steps, every = 400, 10
    job = t.submit_job(cluster, launcher, steps, checkpoint_every=every)
    t.wait_step(cluster, job, 13)
    # SLURM's preemption: a job in the higher-priority partition needs the nodes.
    urgent = cluster.run("sbatch", "--parsable", "--partition=urgent", "--nodes=2", "--ntasks-per-node=1",
                         "--job-name=urgent", f"--output={t.dir}/urgent.out", "--wrap", "sleep 1",
                         cwd=t.dir).stdout.strip()
    print(f"$ sbatch --partition=urgent ... (job {urgent}) at step {last_step(t.run_dir)}: preempts job {job}",
          flush=True)
    t.wait_for(cluster, job, lambda: cluster.job(job).get("Restarts") == "1", 60, "the preemption's requeue")
    # The requeued job starts cred_expire (5 s) later at the earliest: what
    # the first run left is read before it.
    preempted_at, committed = last_step(t.run_dir), committed_step(t.run_dir)
    cluster.wait_job(urgent, ("COMPLETED",), 60, f"the urgent job {urgent}")
    t.wait_for(cluster, job, lambda: "resumed from" in t.job_log(job), 60, "the preempted job's restart")
    log = t.job_log(job)
    resumed = resumed_at(t, job)
    if resumed != [committed]:
        fail(f"the preempted job resumed at {resumed}, expected once, at its newest checkpoint, step {committed}")
    if launcher == "srun":
        # srun's tasks get the SIGTERM themselves: a clean stop in the grace time.
        if "stop signal received (SIGTERM)" not in log or committed != preempted_at:
            t.show(cluster, job)
            fail(f"the preemption's SIGTERM did not stop ftrain cleanly within the {cluster.grace_time} s grace: "
                 f"last step {preempted_at}, newest checkpoint {committed} ('stop signal received (SIGTERM)' "
                 f"{'logged' if 'stop signal received (SIGTERM)' in log else 'not logged'})")
        print(f"ok: preempted at step {preempted_at} (GraceTime {cluster.grace_time} s): clean stop on SIGTERM, "
              f"requeued, resumed at step {preempted_at}: nothing lost")
    else:
        # Under mpirun the SIGTERM goes to Open MPI's daemons (the job step
        # mpirun started with srun), which end the ranks, maybe before a
        # save: the job must still be requeued, and lose at most the steps
        # since the last periodic checkpoint.
        if preempted_at - committed > every:
            fail(f"preempted at step {preempted_at}, the newest checkpoint is step {committed}: more than the "
                 f"{every} steps between periodic checkpoints were lost")
        print(f"ok: preempted at step {preempted_at}: requeued, resumed at step {committed}, lost "
              f"{preempted_at - committed} step(s) (periodic checkpoints every {every})")

    # A grace too short for a save: SIGTERM to every process, SIGKILL at once.
    t.wait_step(cluster, job, (preempted_at // every + 1) * every + 3)
    cluster.run("scancel", "--full", "--signal=TERM", job)
    # (check=False: should the TERM already have ended the job, there is nothing left to kill)
    cluster.run("scancel", "--full", "--signal=KILL", job, check=False)
    print(f"$ scancel --full --signal=TERM {job}; scancel --full --signal=KILL {job}  (at step "
          f"{last_step(t.run_dir)})", flush=True)
    info = cluster.wait_job(job, ("PENDING", "FAILED", "CANCELLED", "COMPLETED"), 60, "the killed job")
    killed_at, committed = last_step(t.run_dir), committed_step(t.run_dir)
    if killed_at >= steps:
        fail(f"the job trained all {steps} steps before the SIGTERM+SIGKILL reached it: nothing was killed "
             "(the machine ran the test's polling too slowly for this many steps)")
    if info.get("JobState") != "PENDING":
        # What a preemption does next: requeue (the job is --requeue).
        cluster.run("scontrol", "requeue", job)
        print(f"$ scontrol requeue {job}  (it ended {info.get('JobState')})", flush=True)
    t.finish(cluster, job, 2, "the job after SIGTERM+SIGKILL")
    resumed = resumed_at(t, job)
    if len(resumed) != 2 or resumed[1] != committed or killed_at - committed > every:
        fail(f"killed at step {killed_at} with the newest checkpoint at step {committed}, the job resumed at "
             f"{resumed[1:]}: expected step {committed}, losing at most the {every} steps between periodic "
             "checkpoints")
    print(f"ok: SIGTERM+SIGKILL at step {killed_at}: resumed at step {committed}, lost {killed_at - committed} "
          f"step(s) (periodic checkpoints every {every})")
    t.compare_with_direct(steps, f"{launcher}: preemption, kill, requeues and resumes")


def time_limit(t, cluster):
    # Longer than the 40 s the warning may take (~40 steps/s on 2 idle
    # cores): the test ends the job. The constant learning rate makes a
    # direct run of as many steps as it did the reference.
    job = t.submit_job(cluster, "mpirun", 5000,
                       extra=[(r"^#SBATCH --time=.*$", "#SBATCH --time=1"),
                              (r"^(#SBATCH --signal=(?:B:)?USR1)@\d+$", r"\1@20")])
    t.wait_for(cluster, job, lambda: "resumed from" in t.job_log(job), 110,
               "SLURM's time-limit warning (--signal ...@20 with --time=1) stopping and requeueing the job")
    log = t.job_log(job)
    first = log.split("resumed from")[0]
    out = t.output_file(cluster, job).split("resumed from")[0]
    if f"Time limit exhausted for JobId={job}" in open(os.path.join(cluster.logs, "slurmctld.log")).read():
        t.show(cluster, job)
        fail(f"job {job} ran into its time limit: the --signal warning did not stop it before")
    for want in ("ftrain job: signal received, asking ftrain to checkpoint and stop", "stop signal received (SIGUSR1)",
                 f"requeueing: scontrol requeue {job}"):
        if want not in out:
            t.show(cluster, job)
            fail(f"before the requeue the job's --output file lacks '{want}':\n{out[-3000:]}")
    resumed = int(re.search(r"resumed from \S+/ckpt/step_\d+ at step (\d+)", log).group(1))
    stop_line = re.findall(r"checkpoint step (\d+) ->", first)
    if not stop_line or int(stop_line[-1]) != resumed:
        fail(f"the requeued job resumed at step {resumed}, the stop checkpoint was {stop_line}")
    print(f"ok: SLURM's warning signal stopped the job at step {resumed} (checkpoint, exit 0, scontrol requeue); "
          f"the requeued job resumed there")
    # End it: one more stop and requeue, and the requeued job is cancelled
    # while it waits to start again.
    t.wait_step(cluster, job, resumed + 5)
    cluster.run("scancel", "--signal=USR1", "--batch", job)
    cluster.wait_job(job, ("PENDING",), 60, "the second stop's requeue")
    cluster.run("scancel", job)
    cluster.wait_job(job, ("CANCELLED",), 30, "cancelling the pending job")
    t.compare_with_direct(last_step(t.run_dir), "time-limit stop, requeue and resume")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=["srun", "mpirun", "preempt_srun", "preempt_mpirun", "time_limit"])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--mpi-flag", action="append", default=[])
    a = ap.parse_args()
    t = Test(a)
    start = time.time()
    with SlurmCluster(os.path.join(t.dir, "cluster"), nodes=2, cpus_per_node=1) as cluster:
        if a.scenario in ("srun", "mpirun"):
            stop_by_signal_and_requeue(t, cluster, a.scenario)
        elif a.scenario.startswith("preempt_"):
            preempt(t, cluster, a.scenario.split("_")[1])
        else:
            time_limit(t, cluster)
    print(f"ok: {a.scenario} under SLURM in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
