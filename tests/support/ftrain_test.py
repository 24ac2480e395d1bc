"""What ftrain's Python tests share: one FAIL line and exit status 1, a
process run with a timeout that kills its whole process group (a hang is a
failure, not a stuck ctest), metrics.jsonl read back, and the runner that
puts ftrain under mpirun with `-var` settings and environment variables
forwarded to every rank.

A test script imports it from its own folder with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import ftrain_test

Python 3 standard library only: the interop tests run it in their venv and
the plot test with Debian's python3.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time


def fail(message, stream=None):
    """Ends the test: one `FAIL: message` line (on stdout unless `stream`), exit status 1."""
    print("FAIL:", message, file=stream or sys.stdout, flush=True)
    sys.exit(1)


def run(cmd, timeout, cwd=None, env=None, merge_output=True, expect_ok=False, what=None):
    """Runs `cmd` in a process group of its own and returns its
    CompletedProcess (text output; stderr folded into stdout unless
    `merge_output` is false), with `.seconds` the wall time. Past `timeout`
    seconds the whole group (mpirun and its ranks) is killed and the test
    fails naming `what`; with `expect_ok` a non-zero exit fails it too."""
    what = what or " ".join(map(str, cmd))
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_output else subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        print((out or "")[-4000:], (err or "")[-4000:])
        fail(f"{what} did not end within {timeout} s (a hang)")
    p = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    p.seconds = time.monotonic() - start
    if expect_ok and p.returncode != 0:
        print(p.stdout[-8000:], (p.stderr or "")[-8000:])
        fail(f"{what} exited {p.returncode}")
    return p


def read_metrics(path, partial_ok=False):
    """The rows of a metrics.jsonl file. With `partial_ok`, a missing file is
    no rows and a line that is not JSON (being written) is skipped."""
    if partial_ok and not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if not partial_ok:
                    raise
    return rows


def curve(path):
    """(training rows as (step, loss, lr, grad_norm), evaluation rows as (step, eval_loss))."""
    rows = read_metrics(path)
    train = [(r["step"], r["loss"], r["lr"], r["grad_norm"]) for r in rows if "loss" in r]
    evals = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    return train, evals


class Runner:
    """ftrain (or another executable of the build) under mpirun, in a work
    directory. Tests subclass it for their decks and data."""

    def __init__(self, ftrain, mpirun, workdir):
        self.ftrain = ftrain
        self.mpirun = shlex.split(mpirun) if isinstance(mpirun, str) else list(mpirun)
        self.dir = workdir

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def write(self, name, text):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def ftrain_argv(self, deck, variables=None, check=False):
        argv = [self.ftrain] + (["--check"] if check else [])
        for k, v in (variables or {}).items():
            argv += ["-var", k, str(v)]
        return argv + [deck]

    def mpi_argv(self, np, env_names=()):
        """mpirun's arguments for `np` ranks, forwarding each variable in `env_names` (-x)."""
        argv = list(self.mpirun)
        for name in env_names:
            argv += ["-x", name]
        return argv + ["-np", str(np)]

    def run(self, np, argv, env=None, timeout=120, merge_output=True, expect_ok=False, what=None):
        """`argv` (usually ftrain_argv()) on `np` ranks with `env` added to
        every rank's environment."""
        environment = dict(os.environ)
        environment.update(env or {})
        cmd = self.mpi_argv(np, env or {}) + list(argv)
        return run(cmd, timeout, cwd=self.dir, env=environment, merge_output=merge_output, expect_ok=expect_ok,
                   what=what)
