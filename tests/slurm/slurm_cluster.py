"""A real SLURM cluster on this machine, for the tests of jobs/slurm/.

    with SlurmCluster(workdir, nodes=2) as cluster:
        job = cluster.sbatch(script, cwd=submit_dir, env=env)
        cluster.wait_job(job, ("COMPLETED",), timeout=60)

Starts munged (a key generated for this cluster), slurmctld and one slurmd
per node, all in the foreground in process groups of their own, with a
slurm.conf written under the work directory: state, spool, logs, pid files
and the sockets live there too, the daemons listen on free ports of
127.0.0.1, and nothing under /etc or /run is read or written. The clients
find the cluster through SLURM_CONF (cluster.env).

Several nodes on one host: Debian's slurmd is built with multiple-slurmd
support, so every node is a NodeName of this host with a Port of its own
(`slurmd -N nodeN`); TmpFS and SlurmdSpoolDir carry %n so that the PMIx
plugin's per-step directories of two nodes do not collide. No cgroups
(a container): proctrack/linuxproc and task/none.

Two partitions: `batch` (default, preemptible: PreemptMode=REQUEUE after
the partition's GraceTime) and `urgent` (a higher PriorityTier: a job there
preempts batch jobs). A requeued job waits cred_expire seconds before it is
eligible again (SLURM's default is 120); here it is short.

Teardown (also after a failure): every job is cancelled, the daemons get
SIGTERM and then SIGKILL by process group, and any process still carrying
this cluster's SLURM_CONF in its environment (a job's task, a slurmstepd)
is killed by pid. Should the test be killed before that, the daemons die
with it (setpriv --pdeathsig).

Where the packages are missing, the test does not run as root, or munged
or slurmctld cannot start, the test is skipped (exit 77) with the reason, unless FTRAIN_SLURM_REQUIRED=1
(CI), where that is a failure.
"""

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from ftrain_test import fail  # noqa: E402

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "scancel", "squeue", "sinfo")
SKIP_RETURN_CODE = 77
# A Unix socket path holds at most 107 bytes; SLURM and PMIx put theirs
# (with job and step numbers) a few levels under the spool directory.
LONGEST_RUNTIME_ROOT = 60


def skip(reason):
    """Skips the test (exit 77) naming the reason; in CI (FTRAIN_SLURM_REQUIRED=1) fails it."""
    if os.environ.get("FTRAIN_SLURM_REQUIRED") == "1":
        fail(f"SLURM is required here (FTRAIN_SLURM_REQUIRED=1) but {reason}")
    print(f"skipped: {reason}", flush=True)
    sys.exit(SKIP_RETURN_CODE)


def find_programs():
    """The daemon and client paths; skips the test naming what is missing."""
    found, missing = {}, []
    for name in DAEMONS + CLIENTS:
        path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
        if path:
            found[name] = path
        else:
            missing.append(name)
    if missing:
        skip(f"{', '.join(missing)} not found (Debian: apt-get install slurmd slurmctld slurm-client munge; "
             "share/scripts/install-deps.sh installs them)")
    return found


def free_ports(count):
    """`count` consecutive TCP ports of 127.0.0.1 that nothing listens on now."""
    for _ in range(200):
        base = random.randrange(20000, 40000 - count)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    fail(f"no {count} free consecutive ports on 127.0.0.1 between 20000 and 40000")


class SlurmCluster:
    def __init__(self, workdir, nodes=2, cpus_per_node=1, grace_time=10, cred_expire=5, kill_wait=10):
        self.programs = find_programs()
        if os.geteuid() != 0:
            # slurmd starts each job's processes as the job's user, which needs root.
            skip("the test cluster runs slurmd and slurmctld as root (SlurmUser=root) and this is not root")
        self.workdir = os.path.abspath(workdir)
        self.nodes = [f"node{i + 1}" for i in range(nodes)]
        self.cpus_per_node = cpus_per_node
        self.grace_time, self.cred_expire, self.kill_wait = grace_time, cred_expire, kill_wait
        self.procs = {}
        self.owned_tmp = None
        os.makedirs(self.workdir, exist_ok=True)
        self.logs = os.path.join(self.workdir, "slurm-logs")
        # Sockets, spool and state: under the work dir when its path is short
        # enough for the sockets, else in a private directory under /tmp.
        root = os.path.join(self.workdir, "slurm")
        if len(root) > LONGEST_RUNTIME_ROOT:
            self.owned_tmp = tempfile.mkdtemp(prefix="ftrain-slurm-")
            root = self.owned_tmp
            print(f"slurm cluster: runtime files under {root} (the work dir's path is too long for sockets)")
        self.root = root
        self.conf = os.path.join(root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for name in list(self.env):
            # A test run inside a SLURM job must not talk to that job's cluster.
            if name.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and name != "SLURM_CONF":
                del self.env[name]

    # --- start and stop ---------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        for d in (self.root, self.logs):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        os.chmod(self.root, 0o755)
        for d in ["state"] + [f"spool/{n}" for n in self.nodes] + [f"tmp/{n}" for n in self.nodes]:
            os.makedirs(os.path.join(self.root, d))
        self._start_munged()
        self._write_conf()
        self._spawn("slurmctld", [self.programs["slurmctld"], "-D", "-f", self.conf])
        self._wait_for(lambda: self._client_ok(["scontrol", "ping"], "UP"), 20, "slurmctld",
                       os.path.join(self.logs, "slurmctld.log"), skip_on_timeout=True)
        for n in self.nodes:
            self._spawn(f"slurmd-{n}", [self.programs["slurmd"], "-D", "-f", self.conf, "-N", n])
        self._wait_for(self._all_idle, 30, "the slurmd(s)", os.path.join(self.logs, f"slurmd-{self.nodes[0]}.log"))
        print(f"slurm cluster up: {len(self.nodes)} node(s) x {self.cpus_per_node} CPU(s), "
              f"controller on 127.0.0.1:{self.ctld_port}, SLURM_CONF={self.conf}", flush=True)

    def _start_munged(self):
        mdir = os.path.join(self.root, "munge")
        os.makedirs(mdir)
        # munged refuses a socket directory others cannot traverse, and a key
        # anyone but the owner can read.
        os.chmod(mdir, 0o711)
        self.munge_socket = os.path.join(mdir, "munge.socket")
        key = os.path.join(mdir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        log = os.path.join(self.logs, "munged.log")
        self._spawn("munged", [self.programs["munged"], "--foreground", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={mdir}/munged.pid", f"--log-file={log}",
                               f"--seed-file={mdir}/munged.seed"])
        self._wait_for(lambda: os.path.exists(self.munge_socket), 10, "munged", log, skip_on_timeout=True)

    def _write_conf(self):
        port = free_ports(1 + len(self.nodes))
        self.ctld_port = port
        # slurmctld knows itself by its short host name.
        host = socket.gethostname().split(".")[0]
        r, logs = self.root, self.logs
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={port + 1 + i} "
            f"CPUs={self.cpus_per_node} RealMemory=1000 State=UNKNOWN" for i, n in enumerate(self.nodes))
        names = ",".join(self.nodes)
        text = f"""# Written by tests/slurm/slurm_cluster.py for one test; everything under {r}
ClusterName=ftraintest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket},cred_expire={self.cred_expire}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
TmpFS={r}/tmp/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={logs}/slurmctld.log
SlurmdLogFile={logs}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# A requeued job becomes eligible cred_expire s later and nothing wakes the
# scheduler then but its own timers: look every second, not every 30 s.
SchedulerParameters=bf_interval=1,sched_interval=1
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait={self.kill_wait}
MinJobAge=600
InactiveLimit=0
Waittime=0
FirstJobId={random.randrange(1000, 900000)}
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
{nodes}
PartitionName=batch Nodes={names} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime={self.grace_time}
PartitionName=urgent Nodes={names} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
"""
        with open(self.conf, "w") as f:
            f.write(text)

    def _spawn(self, name, argv):
        # Should the test itself be killed (a ctest timeout) before its
        # teardown, the kernel kills the daemons with it (setpriv --pdeathsig).
        setpriv = shutil.which("setpriv")
        if setpriv:
            argv = [setpriv, "--pdeathsig", "KILL", "--"] + argv
        out = open(os.path.join(self.logs, f"{name}.out"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                            start_new_session=True)
        out.close()

    def _wait_for(self, ready, timeout, what, log, skip_on_timeout=False):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if ready():
                return
            for name, p in self.procs.items():
                if p.poll() is not None:
                    self._gave_up(f"{name} exited with status {p.returncode} while starting", log, skip_on_timeout)
            time.sleep(0.2)
        self._gave_up(f"{what} did not come up within {timeout} s", log, skip_on_timeout)

    def _gave_up(self, reason, log, skip_it):
        tail = ""
        for path in (log, log.replace(".log", ".out")):
            if os.path.exists(path):
                tail += f"--- {path}:\n" + "".join(open(path, errors="replace").readlines()[-15:])
        for name in self.procs:
            path = os.path.join(self.logs, f"{name}.out")
            if os.path.exists(path) and os.path.getsize(path):
                tail += f"--- {path}:\n" + "".join(open(path, errors="replace").readlines()[-10:])
        print(tail, flush=True)
        self.stop()
        if skip_it:
            skip(f"{reason} (logs above; {self.logs})")
        fail(f"{reason} (logs above; {self.logs})")

    def _client_ok(self, argv, want):
        p = subprocess.run([self.programs[argv[0]]] + argv[1:], env=self.env, capture_output=True, text=True,
                           timeout=20)
        return p.returncode == 0 and want in p.stdout

    def _all_idle(self):
        p = subprocess.run([self.programs["sinfo"], "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True,
                           text=True, timeout=20)
        states = dict(line.split() for line in p.stdout.splitlines() if line.strip())
        return all(states.get(n, "").startswith("idle") for n in self.nodes)

    def stop(self):
        if not self.procs:
            return
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                jobs = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10).stdout.split()
                if jobs:
                    self.run("scancel", *jobs, check=False, timeout=10)
                    deadline = time.time() + 15
                    while time.time() < deadline and self.run("squeue", "-h", "-o", "%i", check=False,
                                                              timeout=10).stdout.split():
                        time.sleep(0.3)
            except Exception as e:  # teardown goes on whatever the controller says
                print(f"slurm cluster: cancelling the jobs at teardown: {e}")
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 10
        for name, p in self.procs.items():
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                print(f"slurm cluster: {name} did not stop on SIGTERM; SIGKILL")
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.procs = {}
        self._kill_leftovers()
        if self.owned_tmp:
            shutil.rmtree(self.owned_tmp, ignore_errors=True)

    def _kill_leftovers(self):
        """Kills (by pid) what this cluster started and left behind: job tasks, slurmstepd."""
        marker = f"SLURM_CONF={self.conf}".encode()
        me = os.getpid()
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            if pid == me:
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if marker in env:
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
                    os.kill(pid, signal.SIGKILL)
                    print(f"slurm cluster: killed leftover pid {pid}: {cmd[:120]}")
                except (OSError, ProcessLookupError):
                    pass

    # --- clients ----------------------------------------------------------
    def run(self, prog, *args, check=True, timeout=30, env=None, cwd=None):
        p = subprocess.run([self.programs[prog]] + [str(a) for a in args], env=env or self.env, cwd=cwd,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            fail(f"{prog} {' '.join(map(str, args))}: exit {p.returncode}: {p.stdout}{p.stderr}")
        return p

    def sbatch(self, script, *args, cwd, env=None):
        """Submits `script` from `cwd` with `env` (the cluster's SLURM_CONF added); returns the job id."""
        environment = dict(env or os.environ)
        environment.update(SLURM_CONF=self.conf)
        p = self.run("sbatch", "--parsable", *args, script, env=environment, cwd=cwd)
        job = p.stdout.strip().split(";")[0]
        print(f"$ sbatch {' '.join(args)} {script}: job {job}", flush=True)
        return job

    def job(self, job):
        """scontrol's fields of `job` (JobState, Restarts, ExitCode, ...)."""
        out = self.run("scontrol", "show", "job", "-o", job).stdout
        return dict(re.findall(r"(\S+?)=(\S*)", out))

    def wait_job(self, job, states, timeout, what=None):
        """Waits until `job` is in one of `states`; fails naming the job's last state past `timeout`."""
        deadline = time.time() + timeout
        info = {}
        while time.time() < deadline:
            info = self.job(job)
            if info.get("JobState") in states:
                return info
            time.sleep(0.3)
        fail(f"{what or 'job ' + job}: not {'/'.join(states)} within {timeout} s: JobState={info.get('JobState')} "
             f"Reason={info.get('Reason')} Restarts={info.get('Restarts')} (slurm logs: {self.logs})")

    def log_tail(self, name, lines=20):
        path = os.path.join(self.logs, name)
        if not os.path.exists(path):
            return f"({path} missing)"
        return "".join(open(path, errors="replace").readlines()[-lines:])
