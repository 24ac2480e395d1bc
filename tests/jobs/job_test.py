#!/usr/bin/env python3
"""Run a batch template's launch section locally, with the scheduler faked.

    job_test.py SCENARIO --repo R --ftrain F --prep P --workdir W [--mpi-flag X ...]

jobs/slurm/launch.sh and jobs/pbs/launch.sh are what the batch scripts run
after their #SBATCH / #PBS headers; here they run on 2 local ranks with the
environment a scheduler would set (SLURM_JOB_ID, SLURM_NTASKS, ... or
PBS_JOBID, PBS_NODEFILE) and FTRAIN_REQUEUE_CMD pointed at a marker file in
place of `scontrol requeue` / `qrerun`. Scenarios:

  slurm_srun    FTRAIN_LAUNCHER=srun, with a stand-in `srun` on PATH that
                turns `srun --mpi=pmix --ntasks=N ... PROG ARGS` into
                `mpirun -np N PROG ARGS` (no SLURM here). SIGUSR1 to the batch
                shell (what --signal=B:USR1@120 does) mid-run: exit 0, a
                checkpoint at the last logged step, the requeue command run;
                a second SIGUSR1 while it requeues (ftrain has ended) must
                not kill the shell. Then the "requeued" job: resume auto continues from that step
                and, finishing normally, is NOT requeued again.
  slurm_mpirun  the same with FTRAIN_LAUNCHER=mpirun.
  pbs           the walltime timer (FTRAIN_WALLTIME_S) signals the job 3 s in:
                exit 0, checkpoint, qrerun stand-in run. Then a second start
                is preempted with SIGTERM to the batch shell (PBS's
                preemption signal), which must be forwarded as SIGUSR1 (a
                SIGTERM to mpirun would kill the job): exit 0 again, and the
                checkpoint is further on than the first.
  templates     the whole batch scripts (jobs/slurm/*.sbatch, jobs/pbs/*.pbs)
                run as a scheduler would run them, from a submit directory
                that links jobs/ and inputs/, with FTRAIN=/bin/echo: each of
                the 2 ranks must print the deck, the -var paths and
                `-var device cuda` (a GPU job must not fall back to the
                CPUs), so the header-to-launch wiring is exercised without
                training. Then the scheduler's warning (SIGUSR1 for SLURM,
                SIGTERM for PBS) to the script's own process, not its
                children, must reach both ranks and end the job with exit 0.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402
from ftrain_test import fail  # noqa: E402



def train_steps(run_dir):
    # partial_ok: the job may be writing a line right now
    rows = ftrain_test.read_metrics(os.path.join(run_dir, "metrics.jsonl"), partial_ok=True)
    return [row["step"] for row in rows if "loss" in row and "eval_loss" not in row and "step" in row]


class Job:
    def __init__(self, a, scenario):
        self.a, self.scenario = a, scenario
        self.dir = os.path.abspath(a.workdir)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(os.path.join(self.dir, "data"))
        subprocess.run([a.prep, "synthetic", "--out", os.path.join(self.dir, "data/train.tok"), "--tokens", "20000",
                        "--vocab", "64", "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
        self.run_dir = os.path.join(self.dir, "run")
        self.marker = os.path.join(self.dir, "requeued")
        mpi = " ".join(a.mpi_flag)
        env = dict(os.environ, FTRAIN=a.ftrain, FTRAIN_JOB_LOG=os.path.join(self.dir, "job.log"),
                   FTRAIN_REQUEUE_CMD=f"echo requeue >> {self.marker}", FTRAIN_MPIRUN_ARGS=mpi)
        if scenario.startswith("slurm"):
            env.update(SLURM_JOB_ID="4242", SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2(x1)",
                       SLURM_JOB_NUM_NODES="1", FTRAIN_LAUNCHER=scenario.split("_")[1])
            self.script = os.path.join(a.repo, "jobs/slurm/launch.sh")
            if scenario == "slurm_srun":
                bindir = os.path.join(self.dir, "bin")
                os.makedirs(bindir)
                fake = os.path.join(bindir, "srun")
                with open(fake, "w") as f:
                    f.write(f"""#!/usr/bin/env bash
# stand-in srun: keeps --ntasks, drops the other options, runs mpirun
echo "srun $*" >> {self.dir}/srun_calls
n=1
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in --ntasks=*) n=${{1#--ntasks=}} ;; esac
  shift
done
exec {a.mpiexec} {mpi} -np "$n" "$@"
""")
                os.chmod(fake, 0o755)
                env["PATH"] = bindir + os.pathsep + env["PATH"]
        else:
            nodefile = os.path.join(self.dir, "nodefile")
            with open(nodefile, "w") as f:
                f.write((socket.gethostname() + "\n") * 2)
            env.update(PBS_JOBID="77.pbs-server", PBS_NODEFILE=nodefile)
            self.script = os.path.join(a.repo, "jobs/pbs/launch.sh")
        self.env = env

    def start(self, max_steps=100000, extra_env=None):
        env = dict(self.env, **(extra_env or {}))
        cmd = ["bash", self.script, os.path.join(self.a.repo, "tests/jobs/tiny_job.in"),
               "-var", "data_dir", os.path.join(self.dir, "data"), "-var", "run_dir", self.run_dir,
               "-var", "max_steps", str(max_steps)]
        print("$", " ".join(cmd), flush=True)
        return subprocess.Popen(cmd, cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def wait_steps(self, proc, at_least, limit=60):
        deadline = time.time() + limit
        while time.time() < deadline:
            if proc.poll() is not None:
                fail(f"the job ended before step {at_least}:\n" + proc.communicate()[0])
            steps = train_steps(self.run_dir)
            if steps and steps[-1] >= at_least:
                return
            time.sleep(0.05)
        proc.kill()
        fail(f"no step {at_least} within {limit} s")

    def finish(self, proc, what):
        try:
            out = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            fail(f"{what}: the job did not stop:\n" + proc.communicate()[0])
        print(out)
        if proc.returncode != 0:
            fail(f"{what}: exit status {proc.returncode}, expected 0")
        return out

    def requeues(self):
        return len(open(self.marker).readlines()) if os.path.exists(self.marker) else 0

    def check_stopped(self, out, what, requeues):
        if "stop signal received" not in out:
            fail(f"{what}: ftrain did not report a signal stop")
        latest = open(os.path.join(self.run_dir, "ckpt/latest")).read().strip()
        last = train_steps(self.run_dir)[-1]
        if latest != f"step_{last}":
            fail(f"{what}: ckpt/latest is {latest}, the last logged step is {last}")
        if self.requeues() != requeues:
            fail(f"{what}: requeue command ran {self.requeues()} time(s), expected {requeues}")
        print(f"ok: {what}: exit 0, checkpoint {latest}, requeued")
        return last


def slurm(job):
    # The requeue command takes a while; a second warning comes during it,
    # after ftrain has ended (a time limit's signal just as a run ends): the
    # batch shell must not die of it.
    requeue_started = os.path.join(job.dir, "requeue_started")
    proc = job.start(extra_env={"FTRAIN_REQUEUE_CMD": f"touch {requeue_started}; sleep 2; echo requeue >> {job.marker}"})
    job.wait_steps(proc, 3)
    proc.send_signal(signal.SIGUSR1)  # --signal=B:USR1@120 signals the batch shell
    deadline = time.time() + 30
    while not os.path.exists(requeue_started) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    out = job.finish(proc, "SIGUSR1 to the batch shell, and again while it requeues")
    if "signal received after ftrain ended" not in out:
        fail("the second SIGUSR1 (after ftrain ended) was not reported by the batch shell")
    stopped = job.check_stopped(out, "SIGUSR1 to the batch shell", 1)
    # The requeued job (same script, same deck) runs to the end this time.
    target = stopped + 5
    out = job.finish(job.start(max_steps=target), "requeued job")
    if f"resumed from {job.run_dir}/ckpt/step_{stopped} at step {stopped}" not in out:
        fail("the requeued job did not resume from the checkpoint")
    steps = train_steps(job.run_dir)
    if steps[-1] != target or steps.count(stopped + 1) != 1:
        fail(f"after resume the steps are {steps[-8:]}, expected to end at {target}, each once")
    if job.requeues() != 1:
        fail("a job that finished normally was requeued")
    if job.scenario == "slurm_srun":
        calls = open(os.path.join(job.dir, "srun_calls")).read()
        if "--mpi=pmix" not in calls or "--ntasks=2" not in calls:
            fail("srun was not called with --mpi=pmix --ntasks=2: " + calls)
    print(f"ok: requeued job resumed at step {stopped}, finished at {target}, not requeued again")


def pbs(job):
    # Walltime 123 s with the 120 s warning: the timer fires 3 s in.
    proc = job.start(extra_env={"FTRAIN_WALLTIME_S": "123", "FTRAIN_WARNING_S": "120"})
    first = job.check_stopped(job.finish(proc, "walltime warning"), "walltime warning (timer)", 1)
    proc = job.start()
    job.wait_steps(proc, first + 3)
    proc.send_signal(signal.SIGTERM)  # PBS preemption / qdel
    out = job.finish(proc, "SIGTERM to the batch shell")
    if f"resumed from {job.run_dir}/ckpt/step_{first} at step {first}" not in out:
        fail("the second start did not resume from the first checkpoint")
    second = job.check_stopped(out, "SIGTERM to the batch shell", 2)
    if second <= first:
        fail(f"the second checkpoint (step {second}) is not after the first ({first})")


def templates(a):
    w = os.path.abspath(a.workdir)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    for d in ("jobs", "inputs"):
        os.symlink(os.path.join(a.repo, d), os.path.join(w, d))
    nodefile = os.path.join(w, "nodefile")
    with open(nodefile, "w") as f:
        f.write((socket.gethostname() + "\n") * 2)
    base = dict(os.environ, FTRAIN="/bin/echo", FTRAIN_REQUEUE_CMD="", FTRAIN_MPIRUN_ARGS=" ".join(a.mpi_flag),
                HF_WEIGHTS="/models/x", TOKENS="/tok")
    scripts = {"slurm": dict(SLURM_SUBMIT_DIR=w, SLURM_JOB_ID="5", SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2",
                             FTRAIN_LAUNCHER="mpirun"),
               "pbs": dict(PBS_O_WORKDIR=w, PBS_JOBID="6.server", PBS_NODEFILE=nodefile)}
    found = 0
    for kind, env in scripts.items():
        folder = os.path.join(a.repo, "jobs", kind)
        for name in sorted(os.listdir(folder)):
            if name == "launch.sh" or not name.endswith((".sbatch", ".pbs")):
                continue
            found += 1
            p = subprocess.run(["bash", os.path.join(folder, name)], cwd="/", env=dict(base, **env),
                               capture_output=True, text=True, timeout=60)
            lines = [l for l in p.stdout.splitlines() if l.startswith("inputs/")]
            if p.returncode != 0 or len(lines) != 2:
                fail(f"{kind}/{name}: exit {p.returncode}, {len(lines)} rank line(s):\n{p.stdout}{p.stderr}")
            # A job that holds GPUs asks for them: with `device auto` a node
            # whose GPU backend does not load would train on its CPUs.
            for want in ("-var hf_weights /models/x", "-var train_tokens /tok/train.tok", "-var run_dir ",
                         "-var device cuda"):
                if want not in lines[0]:
                    fail(f"{kind}/{name}: the ranks were not given '{want}': {lines[0]}")
            print(f"ok: {kind}/{name} launches 2 ranks with: {lines[0]}")
            signal_batch_process(os.path.join(folder, name), kind, dict(base, **env), w)
    if found < 2:
        fail("expected at least one SLURM and one PBS template")


def signal_batch_process(script, kind, env, w):
    """The scheduler's warning goes to the batch script's own process only
    (SLURM's --signal=B:, PBS's SIGTERM): that process must forward it, so
    the ranks (a stand-in ftrain that waits for SIGUSR1) stop and the job
    exits 0. A template that runs launch.sh as a child dies of the signal
    while the ranks never hear of it."""
    stand_in = os.path.join(w, "ftrain_stand_in")
    with open(stand_in, "w") as f:
        f.write("#!/usr/bin/env bash\n"
                "trap 'echo \"stop signal received (SIGUSR1)\"; exit 0' USR1\n"
                "echo ready >> \"$READY_FILE\"\n"
                "for _ in $(seq 600); do sleep 0.1; done\n"  # gone by itself if never told
                "exit 3\n")
    os.chmod(stand_in, 0o755)
    ready = os.path.join(w, f"ready_{kind}")
    if os.path.exists(ready):
        os.remove(ready)
    env = dict(env, FTRAIN=stand_in, READY_FILE=ready, FTRAIN_MPIRUN_ARGS=env["FTRAIN_MPIRUN_ARGS"] + " -x READY_FILE")
    proc = subprocess.Popen(["bash", script], cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline and not (os.path.exists(ready) and len(open(ready).readlines()) >= 2):
        time.sleep(0.05)
    sig = signal.SIGUSR1 if kind == "slurm" else signal.SIGTERM
    proc.send_signal(sig)  # the script's own process, as the scheduler does; not its process group
    try:
        out = proc.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        fail(f"{script}: {sig.name} to the batch script's process did not stop the ranks:\n{proc.communicate()[0]}")
    if proc.returncode != 0 or out.count("stop signal received") != 2:
        os.killpg(proc.pid, signal.SIGKILL) if proc.returncode is None else None
        fail(f"{script}: {sig.name} to the batch script's process: exit {proc.returncode}, "
             f"{out.count('stop signal received')} of 2 ranks stopped, expected exit 0 and both:\n{out}")
    print(f"ok: {os.path.basename(script)}: {sig.name} to the batch script's own process reaches both ranks, exit 0")


def physical_cores():
    out = subprocess.run(["lscpu", "-b", "-p=Core,Socket"], capture_output=True, text=True).stdout
    return len({l for l in out.splitlines() if l and not l.startswith("#")}) or os.cpu_count()


def bound_cores(report, rank):
    """Cores mpirun --report-bindings says RANK is bound to (all the node's when it says 'not bound')."""
    for line in report.splitlines():
        m = re.search(r"MCW rank (\d+) (bound to|is not bound)(.*)", line)
        if m and int(m.group(1)) == rank:
            if m.group(2) == "is not bound":
                return physical_cores()
            return m.group(3).split(":")[0].count("[core ")
    fail(f"mpirun reported no binding for rank {rank}:\n{report}")


def bindings(a):
    """The launchers bind each rank to its share of cores (issue: one core per rank with 12 threads).

    mpirun's own --report-bindings is read for 2 ranks x 1 core and 1 rank x
    2 cores through the SLURM (mpirun) and PBS launchers; the srun launcher
    is checked for --cpus-per-task; and ftrain's run header, started through
    the launcher, says how many threads and CPUs a rank got."""
    cores = physical_cores()
    if cores < 2:
        print("skipped: one core here, nothing to bind two ways")
        sys.exit(77)
    w = os.path.abspath(a.workdir)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    nodefile = os.path.join(w, "nodefile")
    with open(nodefile, "w") as f:
        f.write((socket.gethostname() + "\n") * 2)
    base = dict(os.environ, FTRAIN="/bin/true", FTRAIN_REQUEUE_CMD="", FTRAIN_JOB_LOG=os.path.join(w, "job.log"),
                FTRAIN_MPIRUN_ARGS=" ".join(a.mpi_flag + ["--report-bindings"]))
    base.pop("OMP_NUM_THREADS", None)
    launchers = {
        "slurm mpirun": (os.path.join(a.repo, "jobs/slurm/launch.sh"),
                         lambda ranks: dict(SLURM_JOB_ID="7", SLURM_NTASKS=str(ranks), SLURM_NTASKS_PER_NODE=str(ranks),
                                            FTRAIN_LAUNCHER="mpirun")),
        "pbs": (os.path.join(a.repo, "jobs/pbs/launch.sh"),
                lambda ranks: dict(PBS_JOBID="8.server", PBS_NODEFILE=nodefile, FTRAIN_RANKS=str(ranks))),
    }
    for name, (script, env_for) in launchers.items():
        for ranks, per_rank in ((2, 1), (1, 2)):
            env = dict(base, FTRAIN_CORES_PER_RANK=str(per_rank), **env_for(ranks))
            p = subprocess.run(["bash", script, "deck.in"], cwd=w, env=env, capture_output=True, text=True, timeout=60)
            report = p.stdout + p.stderr
            if p.returncode != 0:
                fail(f"{name}, {ranks} rank(s) x {per_rank} core(s): exit {p.returncode}:\n{report}")
            got = [bound_cores(report, r) for r in range(ranks)]
            if got != [per_rank] * ranks:
                fail(f"{name}, {ranks} rank(s) x {per_rank} core(s): mpirun bound them to {got} core(s):\n{report}")
            print(f"ok: {name}: {ranks} rank(s) bound to {per_rank} core(s) each")
    # srun: the stand-in records its arguments; srun's own binding is SLURM's.
    bindir = os.path.join(w, "bin")
    os.makedirs(bindir)
    with open(os.path.join(bindir, "srun"), "w") as f:
        f.write(f"#!/usr/bin/env bash\necho \"srun $*\" >> {w}/srun_calls\n")
    os.chmod(os.path.join(bindir, "srun"), 0o755)
    env = dict(base, PATH=bindir + os.pathsep + base["PATH"], SLURM_JOB_ID="9", SLURM_NTASKS="1",
               SLURM_NTASKS_PER_NODE="1", SLURM_CPUS_PER_TASK="2", FTRAIN_LAUNCHER="srun")
    subprocess.run(["bash", os.path.join(a.repo, "jobs/slurm/launch.sh"), "deck.in"], cwd=w, env=env, check=True,
                   capture_output=True, timeout=60)
    calls = open(os.path.join(w, "srun_calls")).read()
    if "--cpus-per-task=2" not in calls or "--cpu-bind=cores" not in calls:
        fail("srun was not given --cpus-per-task=2 --cpu-bind=cores: " + calls)
    print("ok: srun gets --cpus-per-task from SLURM_CPUS_PER_TASK")
    # The run header, one rank started through the launcher with 2 cores.
    data = os.path.join(w, "data")
    os.makedirs(data)
    subprocess.run([a.prep, "synthetic", "--out", os.path.join(data, "train.tok"), "--tokens", "20000",
                    "--vocab", "64", "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
    env = dict(base, FTRAIN=a.ftrain, FTRAIN_MPIRUN_ARGS=" ".join(a.mpi_flag), FTRAIN_CORES_PER_RANK="2",
               **launchers["slurm mpirun"][1](1))
    p = subprocess.run(["bash", launchers["slurm mpirun"][0], os.path.join(a.repo, "tests/jobs/tiny_job.in"),
                        "-var", "data_dir", data, "-var", "run_dir", os.path.join(w, "run"), "--check"],
                       cwd=w, env=env, capture_output=True, text=True, timeout=120)
    header = [l for l in p.stdout.splitlines() if l.startswith("host threads:")]
    want = "host threads: 2 per rank, " + ("ranks not bound" if cores == 2 else "bound to 2 CPU(s) per rank")
    if p.returncode != 0 or not header or not header[0].startswith(want):
        fail(f"the run header does not start its thread line with '{want}': exit {p.returncode}\n{p.stdout}{p.stderr}")
    print(f"ok: the run header says: {header[0]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=["slurm_srun", "slurm_mpirun", "pbs", "templates", "bindings"])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--mpi-flag", action="append", default=[])
    a = ap.parse_args()
    if a.scenario == "templates":
        return templates(a)
    if a.scenario == "bindings":
        return bindings(a)
    job = Job(a, a.scenario)
    (pbs if a.scenario == "pbs" else slurm)(job)


if __name__ == "__main__":
    main()
