#!/usr/bin/env python3
"""What a user sees and how a run stops: console scenarios, run by CTest
(label console; mpi where mpirun is involved).

Usage: console_test.py SCENARIO --repo DIR --ftrain BIN --prep BIN --workdir DIR --mpirun "MPIEXEC FLAGS..."

The demo deck (inputs/tiny_llama.in, as share/scripts/demo.sh runs it) is
shortened to a few steps on a small corpus so that each scenario takes
seconds. The scheduler and progress variables of the calling environment
(SLURM_JOB_ID, PBS_JOBID, FTRAIN_PROGRESS) are removed: each scenario sets
what it tests.

Scenarios:
  batch_log   `mpirun -np 2 ftrain demo > file`: Open MPI gives each rank a
              pseudo-terminal, yet the file holds no escape sequence and no
              carriage return (no progress line), and the header says why.
  terminal    the same with mpirun's stdout a terminal (a pty): the progress
              line is drawn (so batch_log is not passing by never drawing it).
  scheduler   under a pty but with SLURM_JOB_ID, then PBS_JOBID set: no
              progress line; FTRAIN_PROGRESS=on to a file: drawn; a bad
              FTRAIN_PROGRESS value is one error naming the variable.
  sigint      SIGINT to a run started without mpirun (Ctrl-C at a terminal)
              and SIGINT to the ranks of an mpirun job (what srun and other
              forwarding launchers deliver): the step finishes, a checkpoint
              is written, exit 0, the message names SIGINT; the header says
              how to stop cleanly.
  mfu         a deck whose peak_tflops is far below what the run reaches:
              MFU is printed as n/a (never above 100%), one warning says the
              peak is wrong, metrics.jsonl has mfu null. Without a stated
              peak the first run benchmarks the host and records it
              (FTRAIN_PEAK_FILE), the second reads the same number back.
  check       `ftrain --check` finds what the run would hit, all in one pass:
              byte-token data (257 ids) for a 256-id model with the hint
              `vocab_size 257`, an fsdp group that does not divide the ranks,
              stop_after beyond max_steps, and a warning for a misspelt -var;
              the header prints the effective (default) optimizer values.
  resume      a run stopped at step 4 and resumed to 6: `done` counts this
              run's 2 steps and says the total apart, elapsed_s continues
              across the resume, running it again exits 0 with "nothing left
              to train", and resuming on another world size that changes the
              global batch says so. metrics.jsonl records the resume and
              plot_metrics.py plots it from an interpreter without
              matplotlib (re-running with /usr/bin/python3).
  plan_ranks  `ftrain --check --ranks 4` (one process) prints the same plan
              as a real `mpirun -np 4 ftrain --check`, for the 70B recipe and
              for hybrid_shard with `--ranks-per-node 2` (against
              shard_group_size 2); `--device-memory 80GB` says the 70B plan
              on 4 ranks does not fit and that 20 ranks would; 16 ranks of 8
              fit 80GiB; 8 ranks of 8 on 80GiB are advised 2 nodes (16 ranks,
              which the verdict says fit), not 3; `--ranks 16` alone says it
              planned one node of 16.
  gpu_plan    `--check` as a cluster planner on a machine without a GPU:
              the 70B recipe with `-var device cuda --gpu h100-80gb` plans
              for the GPU (header, fit with activations and the CUDA/NCCL
              allowance, what it could not check) where a real run still
              stops; with `--job-script jobs/slurm/llama70b.sbatch` it prints
              the checkpoint size, save and step times, and warns that the
              120 s window cannot hold a step plus a save. The checkpoint
              bytes per rank --check prints for a tiny deck are the bytes a
              real save of that deck writes (its rank file, less HDF5
              metadata).
  offload_plan `fsdp ... offload` (issue 37) planned by --check: the
              8-rank 70B recipe (inputs/llama70b_8gpu.in) fits 80GiB with
              offload optimizer and all and not with none (which -var
              offload none shows as the deck's verdict, advising offload);
              --host-memory checks the offloaded state per node (1 TiB:
              512GiB is too little, 2TiB holds it); on the host backend the
              header says offload changes nothing; with device cuda the
              plan's fsdp line says what moves to host memory; --host-memory
              needs --check and a device size.
"""
import argparse
import json
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402
import safetensors_stand_in  # noqa: E402
from ftrain_test import fail  # noqa: E402

SCRUBBED = ("SLURM_JOB_ID", "PBS_JOBID", "FTRAIN_PROGRESS")



class Env(ftrain_test.Runner):
    def __init__(self, args):
        super().__init__(args.ftrain, args.mpirun, args.workdir)
        self.args = args
        os.makedirs(self.dir, exist_ok=True)
        if not os.path.exists(os.path.join(self.dir, "tiny_train.tok")):
            subprocess.run([args.prep, "synthetic", "--out", "tiny_train.tok", "--tokens", "100000", "--vocab", "256",
                            "--seed", "7", "--eval-out", "tiny_eval.tok", "--eval-tokens", "4096"],
                           cwd=self.dir, check=True, stdout=subprocess.DEVNULL)

    def demo_deck(self, name, max_steps=6, log_every=4, extra=""):
        """The demo deck, shortened: fewer steps, a log interval that leaves
        steps for the progress line, the run directory under the workdir."""
        text = open(os.path.join(self.args.repo, "inputs", "tiny_llama.in")).read()
        text, n1 = re.subn(r"(?m)^max_steps \d+", f"max_steps {max_steps}", text)
        text, n2 = re.subn(r"(?m)^log every \d+", f"log every {log_every}", text)
        text, n3 = re.subn(r"(?m)^run_dir .*", f"run_dir runs/{name}", text)
        if (n1, n2, n3) != (1, 1, 1):
            fail("inputs/tiny_llama.in no longer has max_steps, log every and run_dir lines")
        return self.write(name + ".in", text + extra)

    def environment(self, **extra):
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
        env.update(extra)
        return env

    def command(self, deck, np=2):
        ftrain = self.ftrain_argv(deck, {"data_dir": "."})
        return self.mpi_argv(np) + ftrain if np else ftrain

    def run_to_file(self, deck, np=2, **env):
        log = os.path.join(self.dir, os.path.basename(deck) + ".log")
        with open(log, "wb") as out:
            rc = subprocess.run(self.command(deck, np), cwd=self.dir, stdout=out, stderr=subprocess.STDOUT,
                                env=self.environment(**env), timeout=120).returncode
        return rc, open(log, "rb").read()

    def run_on_pty(self, deck, np=2, **env):
        """The launcher's stdout and stderr are a terminal, as for a person
        typing the command."""
        master, slave = pty.openpty()
        proc = subprocess.Popen(self.command(deck, np), cwd=self.dir, stdout=slave, stderr=slave, stdin=slave,
                                env=self.environment(**env), start_new_session=True)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            out += chunk
        os.close(master)
        return proc.wait(timeout=120), out


def expect_plain(what, rc, out):
    if rc != 0:
        fail(f"{what}: exit {rc}:\n{out.decode(errors='replace')}")
    if b"\x1b" in out or b"\r" in out:
        line = next(l for l in out.split(b"\n") if b"\x1b" in l or b"\r" in l)
        fail(f"{what}: escape sequence or carriage return in the output: {line!r}")


def expect_progress(what, rc, out):
    if rc != 0:
        fail(f"{what}: exit {rc}:\n{out.decode(errors='replace')}")
    if b"\r\x1b[K" not in out or b"] " not in out:
        fail(f"{what}: no progress line drawn:\n{out.decode(errors='replace')}")


def header_line(out, prefix):
    for line in out.decode(errors="replace").replace("\r", "").split("\n"):
        if line.startswith(prefix):
            return line
    fail(f"no '{prefix}' line in the header:\n{out.decode(errors='replace')}")


def scenario_batch_log(e):
    deck = e.demo_deck("batch_log")
    rc, out = e.run_to_file(deck)
    expect_plain("mpirun -np 2 ftrain demo > file", rc, out)
    line = header_line(out, "progress line:")
    if "off" not in line or "not a terminal" not in line:
        fail("the header does not say why the progress line is off: " + line)
    print("ok: mpirun > file: no escape sequences;", line)


def scenario_terminal(e):
    deck = e.demo_deck("terminal")
    rc, out = e.run_on_pty(deck)
    expect_progress("mpirun -np 2 ftrain demo on a terminal", rc, out)
    print("ok: on a terminal the progress line is drawn;", header_line(out, "progress line:"))


def scenario_scheduler(e):
    deck = e.demo_deck("scheduler", max_steps=3, log_every=2)
    for var in ("SLURM_JOB_ID", "PBS_JOBID"):
        rc, out = e.run_on_pty(deck, **{var: "4242"})
        expect_plain(f"{var} set, on a terminal", rc, out.replace(b"\r\n", b"\n"))
        if var not in header_line(out, "progress line:"):
            fail(f"the header does not name {var}")
        print(f"ok: {var} set: no progress line")
    rc, out = e.run_to_file(deck, FTRAIN_PROGRESS="on")
    expect_progress("FTRAIN_PROGRESS=on to a file", rc, out)
    print("ok: FTRAIN_PROGRESS=on draws it even into a file")
    rc, out = e.run_to_file(deck, np=0, FTRAIN_PROGRESS="yes")
    text = out.decode(errors="replace")
    if rc != 1 or text.count("FTRAIN_PROGRESS must be auto, on or off, got 'yes'") != 1:
        fail(f"FTRAIN_PROGRESS=yes: exit {rc}, expected 1 and one error naming the variable:\n{text}")
    print("ok: FTRAIN_PROGRESS=yes is refused")


def wait_for_file(path, proc, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def scenario_sigint(e):
    for how in ("Ctrl-C without mpirun", "SIGINT to the ranks"):
        name = "sigint_" + how.split()[-1]
        deck = e.demo_deck(name, max_steps=100000, log_every=1,
                           extra=f"checkpoint every 100000 dir ck_{name}\n")
        metrics = os.path.join(e.dir, "runs", name, "metrics.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        np = 0 if "without" in how else 2
        proc = subprocess.Popen(e.command(deck, np), cwd=e.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=e.environment(), start_new_session=True)
        if not wait_for_file(metrics, proc, 60):
            proc.kill()
            fail(f"{how}: the run did not log a step:\n" + proc.communicate()[0].decode(errors="replace"))
        if np == 0:
            proc.send_signal(signal.SIGINT)
        else:
            ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], stdout=subprocess.PIPE, text=True).stdout.split()
            if not ranks:
                fail("no rank processes found under mpirun")
            for pid in ranks:
                os.kill(int(pid), signal.SIGINT)
        try:
            out = proc.communicate(timeout=60)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            proc.kill()
            fail(f"{how}: the run did not stop")
        if proc.returncode != 0 or "stop signal received (SIGINT)" not in out:
            fail(f"{how}: exit {proc.returncode}, expected 0 and 'stop signal received (SIGINT)':\n{out}")
        latest = os.path.join(e.dir, f"ck_{name}", "latest")
        if not os.path.exists(latest):
            fail(f"{how}: no checkpoint written:\n{out}")
        if "to stop cleanly" not in out:
            fail(f"{how}: the header does not say how to stop cleanly:\n{out}")
        print(f"ok: {how}: exit 0, checkpoint {open(latest).read().strip()}")


def scenario_mfu(e):
    deck = e.demo_deck("mfu", max_steps=3, log_every=1, extra="peak_tflops 0.000001\n")
    record = os.path.join(e.dir, "peak.json")
    rc, out = e.run_to_file(deck, np=0, FTRAIN_PEAK_FILE=record)
    text = out.decode(errors="replace")
    if rc != 0:
        fail(f"exit {rc}:\n{text}")
    over = re.findall(r"MFU (\d+\.\d)%", text)
    if any(float(x) > 100 for x in over) or text.count("| MFU n/a |") != 3:
        fail(f"MFU above 100% printed, or not n/a on every step:\n{text}")
    if text.count("the peak is wrong") != 1:
        fail(f"expected one warning that the peak is wrong:\n{text}")
    rows = [json.loads(l) for l in open(os.path.join(e.dir, "runs", "mfu", "metrics.jsonl")) if '"loss"' in l]
    if [r.get("mfu", "absent") for r in rows] != [None] * 3:
        fail(f"metrics.jsonl mfu should be null: {rows}")
    print("ok: peak below the achieved rate: MFU n/a, one warning, mfu null")
    if os.path.exists(record):
        os.remove(record)
    deck = e.demo_deck("mfu_recorded", max_steps=2, log_every=1)
    peaks = []
    for attempt, expected in enumerate(("measured now and recorded in " + record, "recorded ")):
        rc, out = e.run_to_file(deck, np=2, FTRAIN_PEAK_FILE=record)
        line = header_line(out, "ftrain ")
        if rc != 0 or expected not in line:
            fail(f"run {attempt + 1}: expected '{expected}' in the header: {line}")
        peaks.append(re.search(r"peak ([0-9.e+]+) GFLOP/s per rank", line).group(1))
        for m in re.findall(r"MFU (\d+\.\d)%", out.decode(errors="replace")):
            if float(m) > 100:
                fail("MFU above 100% printed:\n" + out.decode(errors="replace"))
    if peaks[0] != peaks[1]:
        fail(f"the recorded peak differs between runs: {peaks}")
    print(f"ok: peak benchmarked once, recorded, read back: {peaks[0]} GFLOP/s per rank both times")


SMALL_MODEL = ("model llama preset tiny hidden_size 32 intermediate_size 64 num_hidden_layers 2 "
               "num_attention_heads 4 num_key_value_heads 2")


def write(e, name, text):
    path = os.path.join(e.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def scenario_check(e):
    with open(os.path.join(e.dir, "text.txt"), "w") as f:
        for i in range(200):
            f.write(f"line {i} of some text to tokenize as bytes\n")
    subprocess.run([e.args.prep, "text", "--out", "bytes.tok", "--tokenizer", "bytes", "--doc-per-line", "text.txt"],
                   cwd=e.dir, check=True, stdout=subprocess.DEVNULL)
    deck = write(e, "check.in", "variable data_dir .\nmodel llama preset tiny\n"
                 "data tokens ${data_dir}/bytes.tok\nbatch micro 2 seq_len 32\nmax_steps 4\n"
                 "fsdp hybrid_shard shard_group_size 3\ncheckpoint every 2 dir ck stop_after 5\nrun_dir runs/check\n")
    p = subprocess.run([e.args.ftrain, "--check", "-var", "data_dri", ".", "check.in"], cwd=e.dir, capture_output=True,
                       text=True, env=e.environment(), timeout=60)
    expected = ["3 problems:",
                "check.in:3: the data has 257 token ids / classes but the model's output size is 256; "
                "set `vocab_size 257` on the model line (check.in:2)",
                "check.in:6: fsdp hybrid_shard shard_group_size 3 does not divide the 1 ranks",
                "check.in:7: stop_after 5 must be below max_steps 4",
                "warning: command line: -var data_dri is never read by the deck (no ${data_dri} in it), so it "
                "changes nothing (did you mean 'data_dir'?)"]
    missing = [x for x in expected if x not in p.stderr]
    if p.returncode != 1 or missing or p.stderr.count("ftrain: error") != 1:
        fail(f"--check: exit {p.returncode}, expected 1 and one error with all of\n  " + "\n  ".join(missing) +
             f"\ngot:\n{p.stdout}{p.stderr}")
    print("ok: --check reports the vocabulary (with the hint), fsdp and stop_after problems at once, and the -var")
    # Fixed as the hint says, it passes, and the warning stays (in the header).
    fixed = write(e, "fixed.in", open(deck).read().replace("preset tiny", "preset tiny vocab_size 257")
                  .replace("hybrid_shard shard_group_size 3", "full_shard").replace("stop_after 5", "stop_after 3"))
    p = subprocess.run([e.args.ftrain, "--check", "-var", "data_dri", ".", "fixed.in"], cwd=e.dir, capture_output=True,
                       text=True, env=e.environment(), timeout=60)
    if p.returncode != 0 or "warning: command line: -var data_dri is never read" not in p.stdout:
        fail(f"fixed deck: exit {p.returncode}, expected 0 and the -var warning:\n{p.stdout}{p.stderr}")
    print("ok: with vocab_size 257 the deck passes --check; the -var warning is in the header")
    # The values the deck left to defaults are printed, where HF's differ.
    line = header_line(p.stdout.encode(), "training:")
    for part in ("beta2 0.95", "schedule constant warmup_steps 0", "clip_grad_norm 0 (off)", "lr 0.0003"):
        if part not in line:
            fail(f"the effective-values line lacks '{part}': {line}")
    print("ok:", line)


def scenario_resume(e):
    deck = write(e, "resume.in", f"variable data_dir .\nvariable stop 4\n{SMALL_MODEL}\n"
                 "data tokens ${data_dir}/tiny_train.tok\nbatch micro 2 seq_len 32\nmax_steps 6\nlog every 1\n"
                 "checkpoint every 2 dir ${ck} stop_after ${stop}\nresume auto\nrun_dir runs/${ck}\n")

    def run(np, ck, *extra):
        cmd = e.mpirun + ["-np", str(np), e.args.ftrain, "-var", "ck", ck, *extra, deck]
        p = subprocess.run(cmd, cwd=e.dir, capture_output=True, text=True, env=e.environment(), timeout=120)
        return p.returncode, p.stdout + p.stderr

    import shutil
    for d in ("ck_a", "ck_b", "runs"):
        shutil.rmtree(os.path.join(e.dir, d), ignore_errors=True)
    rc, out = run(2, "ck_a")
    if rc != 0 or "stopped after step 4" not in out:
        fail(f"first run: exit {rc}:\n{out}")
    rc, out = run(2, "ck_a")
    done = [l for l in out.splitlines() if l.startswith("done:")]
    if rc != 0 or not done or "this run trained 2 steps (4 -> 6)" not in done[0] or "across resumes" not in done[0]:
        fail(f"resumed run: exit {rc}, the done line should count this run's 2 steps:\n{out}")
    rows = [json.loads(l) for l in open(os.path.join(e.dir, "runs", "ck_a", "metrics.jsonl")) if '"loss"' in l]
    elapsed = [r["elapsed_s"] for r in rows]
    if [r["step"] for r in rows] != [1, 2, 3, 4, 5, 6] or any(b <= a for a, b in zip(elapsed, elapsed[1:])):
        fail(f"elapsed_s must grow across the resume: {list(zip([r['step'] for r in rows], elapsed))}")
    print("ok:", done[0], "| elapsed_s", [round(x, 3) for x in elapsed])
    resumes = [json.loads(l) for l in open(os.path.join(e.dir, "runs", "ck_a", "metrics.jsonl")) if "resumed_from" in l]
    if [(r["step"], r["resumed_from"], r["world_size"]) for r in resumes] != [(4, "ck_a/step_4", 2)]:
        fail(f"metrics.jsonl should record the resume after step 4: {resumes}")
    # plot_metrics.py marks it; run with this interpreter, which may lack
    # matplotlib: the script then re-runs itself with Debian's python3.
    plot = os.path.join(e.args.repo, "share", "scripts", "plot_metrics.py")
    p = subprocess.run([sys.executable, plot, os.path.join("runs", "ck_a")], cwd=e.dir, capture_output=True, text=True,
                       timeout=120, env=e.environment(MPLCONFIGDIR=os.path.join(e.dir, "mpl")))
    have = [py for py in (sys.executable, "/usr/bin/python3") if os.path.exists(py) and subprocess.run(
        [py, "-c", "import matplotlib"], capture_output=True).returncode == 0]
    if have:
        if p.returncode != 0 or not os.path.exists(os.path.join(e.dir, "runs", "ck_a", "metrics.png")):
            fail(f"plot_metrics.py with {sys.executable} (matplotlib in {have}): exit {p.returncode}:\n{p.stderr}")
        print(f"ok: resume row at step 4; plotted with {sys.executable}{' via /usr/bin/python3' if sys.executable not in have else ''}")
    elif p.returncode == 0 or "matplotlib is missing" not in p.stderr:
        fail(f"no matplotlib anywhere: expected the message naming the interpreters:\n{p.stderr}")
    rc, out = run(2, "ck_a")
    if rc != 0 or "nothing left to train" not in out:
        fail(f"a finished run started again: exit {rc}, expected 0 and 'nothing left to train':\n{out}")
    print("ok: a finished run started again exits 0: nothing left to train")
    rc, out = run(2, "ck_b", "-var", "stop", "2")
    rc, out = run(1, "ck_b")
    if rc != 0 or "the global batch changes from 4 samples per step (2 rank(s)) to 2" not in out:
        fail(f"resume on 1 rank of a 2-rank checkpoint: exit {rc}, expected the global batch change:\n{out}")
    print("ok: resuming on 1 rank says the global batch changes from 4 to 2")


def plan_lines(out):
    lines = out.splitlines()
    if "plan:" not in lines:
        fail("no plan printed:\n" + out)
    i = lines.index("plan:") + 1
    block = []
    while i < len(lines) and lines[i].startswith("  "):
        block.append(lines[i])
        i += 1
    return block


def scenario_plan_ranks(e):
    stand_ins = ["-var", "hf_weights", "stand_in.safetensors", "-var", "train_tokens", "tiny_train.tok",
                 "-var", "eval_tokens", "tiny_eval.tok", "-var", "run_dir", "runs/plan"]
    recipe = os.path.join(e.args.repo, "inputs", "llama70b.in")
    # --check reads the weights' header: a stand-in with the 70B's tensors.
    safetensors_stand_in.write_stand_in(os.path.join(e.dir, "stand_in.safetensors"),
                                        [e.args.ftrain, "--check", *stand_ins, recipe], cwd=e.dir, env=e.environment())
    # Shard groups = the ranks per node by default; the real 4-rank run on
    # this one node states the group of 2 that --ranks-per-node 2 implies.
    hybrid = write(e, "hybrid.in", f"{SMALL_MODEL}\ndata tokens tiny_train.tok\n"
                   "batch micro 2 seq_len 32\nmax_steps 4\nfsdp hybrid_shard\nrun_dir runs/plan\n")
    hybrid_group = write(e, "hybrid_group.in", open(hybrid).read().replace("hybrid_shard", "hybrid_shard shard_group_size 2"))

    def check(cmd):
        p = subprocess.run(cmd, cwd=e.dir, capture_output=True, text=True, env=e.environment(), timeout=120)
        if p.returncode != 0:
            fail(f"{' '.join(cmd)}: exit {p.returncode}:\n{p.stdout}{p.stderr}")
        return p.stdout

    cases = [
        ("llama70b.in, 4 ranks", e.mpirun + ["-np", "4", e.args.ftrain, "--check", *stand_ins, recipe],
         [e.args.ftrain, "--check", "--ranks", "4", *stand_ins, recipe]),
        ("hybrid_shard, 2 per node", e.mpirun + ["-np", "4", e.args.ftrain, "--check", hybrid_group],
         [e.args.ftrain, "--check", "--ranks", "4", "--ranks-per-node", "2", hybrid]),
    ]
    for what, real, planned in cases:
        want, got = plan_lines(check(real)), plan_lines(check(planned))
        if want != got:
            fail(f"{what}: --ranks plan differs from the real one:\n  real:    " + "\n           ".join(want) +
                 "\n  planned: " + "\n           ".join(got))
        print(f"ok: {what}: --ranks prints the plan of the real mpirun --check ({len(want)} lines)")
    out = check([e.args.ftrain, "--check", "--ranks", "4", "--device-memory", "80GB", *stand_ins, recipe])
    if "DOES NOT FIT" not in out or "--ranks 20 (5 node(s) of 4) with full_shard" not in out:
        fail("--device-memory 80GB: expected 'DOES NOT FIT' and the --ranks 20 suggestion:\n" + out)
    out = check([e.args.ftrain, "--check", "--ranks", "16", "--ranks-per-node", "8", "--device-memory", "80GiB",
                 *stand_ins, recipe])
    if "DOES NOT FIT" in out or "16 rank(s), 8 per node (planned with --ranks" not in out:
        fail("16 ranks on 80GiB: expected a fit and the planned geometry in the header:\n" + out)
    print("ok: --device-memory 80GB: 4 ranks do not fit (20 would), 16 ranks of 8 per node fit 80GiB")
    # The advice passes the verdict's own test: 16 ranks of 8 fit 80GiB (above),
    # so 8 ranks of 8 are told 2 nodes, not 3.
    out = check([e.args.ftrain, "--check", "--ranks", "8", "--ranks-per-node", "8", "--device-memory", "80GiB",
                 *stand_ins, recipe])
    if "--ranks 16 (2 node(s) of 8) with full_shard" not in out or "--ranks 24" in out:
        fail("8 ranks of 8 on 80GiB: expected the advice --ranks 16 (2 nodes), which fit:\n" + out)
    for needed in ("activations (estimate)", "CUDA context and workspaces", "NCCL buffers"):
        if needed not in out:
            fail(f"the fit does not count '{needed}':\n" + out)
    print("ok: 8 ranks of 8 on 80GiB: advised 2 nodes (16 ranks), the fit counting activations and CUDA/NCCL")
    out = check([e.args.ftrain, "--check", "--ranks", "16", *stand_ins, recipe])
    if "--ranks 16 without --ranks-per-node: planned as ONE node of 16 ranks" not in out:
        fail("--ranks 16 alone: expected it to say it planned one node of 16:\n" + out)
    print("ok: --ranks 16 without --ranks-per-node says it planned one node of 16")


def login_node_recipe(e, recipe_name, run_dir, *extra_vars):
    """A 70B recipe as a login node sees it: stand-in token files and a
    header-only weights stand-in (--check reads the weights' header), and a
    CUDA backend that cannot load. Returns (the -var arguments, the recipe
    path, run(argv) -> (exit code, output))."""
    stand_ins = ["-var", "hf_weights", "stand_in.safetensors", "-var", "train_tokens", "tiny_train.tok",
                 "-var", "eval_tokens", "tiny_eval.tok", "-var", "run_dir", run_dir, *extra_vars]
    recipe = os.path.join(e.args.repo, "inputs", recipe_name)
    env = e.environment(FTRAIN_CUDA_BACKEND="/nonexistent/libftrain_cuda.so")
    safetensors_stand_in.write_stand_in(os.path.join(e.dir, "stand_in.safetensors"),
                                        [e.args.ftrain, "--check", *stand_ins, recipe], cwd=e.dir, env=env)

    def run(cmd):
        p = subprocess.run(cmd, cwd=e.dir, capture_output=True, text=True, env=env, timeout=120)
        return p.returncode, p.stdout + p.stderr
    return stand_ins, recipe, run


def scenario_gpu_plan(e):
    stand_ins, recipe, run = login_node_recipe(e, "llama70b.in", "runs/gpu_plan", "-var", "device", "cuda")
    sbatch = os.path.join(e.args.repo, "jobs", "slurm", "llama70b.sbatch")

    # The shipped template's window holds a step plus a save; one with the
    # common two-minute window does not.
    rc, out = run([e.args.ftrain, "--check", "--ranks", "16", "--ranks-per-node", "8", "--gpu", "h100-80gb",
                   "--job-script", sbatch, *stand_ins, recipe])
    if rc != 0 or "stop window: 600 s" not in out or "warning: the stop window" in out:
        fail(f"--check with the shipped {sbatch}: expected its 600 s window and no window warning:\n{out}")
    print("ok: the shipped sbatch's 600 s stop window holds a 70B step plus a save")
    with open(sbatch) as f:
        two_minutes = f.read().replace("#SBATCH --signal=B:USR1@600", "#SBATCH --signal=B:USR1@120")
    sbatch = write(e, "llama70b_two_minutes.sbatch", two_minutes)
    rc, out = run([e.args.ftrain, "--check", "--ranks", "16", "--ranks-per-node", "8", "--gpu", "h100-80gb",
                   "--job-script", sbatch, *stand_ins, recipe])
    if rc != 0:
        fail(f"--check of the recipe with device cuda and --gpu h100-80gb: exit {rc}, expected a plan:\n{out}")
    wanted = ["device: cuda [device cuda, planned: no usable CUDA GPU here", "not checked without a GPU",
              "NCCL", "cuDNN", "target GPU: h100-80gb", "fit on 79.65 GiB per device",
              "CUDA context and workspaces", "activations       ",
              "checkpoint: 48.18 GiB (51732486144 bytes) per rank, 770.87 GiB in all",
              "save time ~207 s", "at 2 GB/s per node (assumed", "step time ~2.2 s",
              "at 40% MFU (assumed", "stop window: 120 s", "#SBATCH --signal=B:USR1@120",
              "warning: the stop window (120 s (2.0 min)) is shorter than a step plus a save"]
    missing = [w for w in wanted if w not in out]
    if missing:
        fail("--check --gpu h100-80gb --job-script: missing\n  " + "\n  ".join(missing) + "\n" + out)
    print("ok: --check plans the device cuda recipe for an h100-80gb without a GPU and says what it could not check")
    print("ok: checkpoint 770.87 GiB, save ~207 s at 2 GB/s per node, step ~2.2 s: the 120 s window is too short")
    rc, out = run([e.args.ftrain, "--check", "--ranks", "16", "--ranks-per-node", "8", "--gpu", "h100-80gb",
                   "--fs-bandwidth", "50GB/s", "--mfu", "0.5", "--job-script", sbatch, *stand_ins, recipe])
    if rc != 0 or "warning: the stop window" in out or "at 50 GB/s per node (--fs-bandwidth" not in out \
            or "at 50% MFU (--mfu)" not in out:
        fail(f"--fs-bandwidth 50GB/s --mfu 0.5: expected no window warning and the stated rates:\n{out}")
    print("ok: --fs-bandwidth 50GB/s and --mfu 0.5: a step plus a save fit the window, no warning")
    # A real run (no --check) of the same deck still stops with the reason.
    rc, out = run([e.args.ftrain, *stand_ins, recipe])
    if rc == 0 or "device cuda: no usable CUDA GPU" not in out:
        fail(f"a real run with device cuda and no GPU: exit {rc}, expected the stop with its reason:\n{out}")
    print("ok: a real run of the same deck still stops: device cuda: no usable CUDA GPU")
    rc, out = run([e.args.ftrain, "--check", "--gpu", "h10-80gb", *stand_ins, recipe])
    if rc == 0 or "did you mean 'h100-80gb'" not in out:
        fail(f"--gpu h10-80gb: exit {rc}, expected an unknown-GPU error with a suggestion:\n{out}")
    print("ok: --gpu h10-80gb: unknown, did you mean 'h100-80gb'")
    # The checkpoint bytes --check prints are the bytes a save writes, on 2
    # ranks (shards padded to the group), for a full fine-tune and for LoRA
    # (the adapters only: the frozen base is referenced, not saved).
    base = f"{SMALL_MODEL}\ndata tokens tiny_train.tok\nbatch micro 2 seq_len 32\nmax_steps 2\ninit random std 0.02\n"
    planned = {}
    for name, extra in (("full", ""), ("lora", "lora rank 4 alpha 8 targets all-linear\n")):
        deck = write(e, f"ckpt_{name}.in", base + extra +
                     f"run_dir runs/ckpt_{name}\ncheckpoint every 2 dir runs/ckpt_{name}/checkpoints\n")
        rc, out = run([e.args.ftrain, "--check", "--ranks", "2", deck])
        m = re.search(r"checkpoint: .*? \((\d+) bytes\) per rank", out)
        if rc != 0 or not m:
            fail(f"--check of {deck}: exit {rc}, no 'checkpoint: ... (N bytes) per rank':\n{out}")
        planned[name] = int(m.group(1))
        shutil.rmtree(os.path.join(e.dir, "runs", f"ckpt_{name}"), ignore_errors=True)
        rc, out = run(e.mpi_argv(2) + [e.args.ftrain, deck])
        files = sorted(os.path.join(r, f) for r, _, fs in os.walk(os.path.join(e.dir, "runs", f"ckpt_{name}", "checkpoints"))
                       for f in fs if f.endswith(".h5"))
        if rc != 0 or len(files) != 2:
            fail(f"the 2-rank {name} run: exit {rc}, rank files {files}:\n{out}")
        for path in files:
            written = os.path.getsize(path)
            if not planned[name] <= written <= planned[name] + 64 * 1024:
                fail(f"{name}: --check said {planned[name]} bytes per rank, the save wrote {written} ({path})")
        print(f"ok: {name}: --check's checkpoint bytes per rank ({planned[name]}) are what the save wrote "
              f"({', '.join(str(os.path.getsize(f)) for f in files)}: HDF5 metadata on top)")
    if not planned["lora"] < planned["full"] / 4:
        fail(f"LoRA's checkpoint ({planned['lora']} bytes per rank) should hold the adapters only")


def scenario_offload_plan(e):
    stand_ins, recipe, run = login_node_recipe(e, "llama70b_8gpu.in", "runs/offload_plan")

    def check(*extra):
        rc, out = run([e.args.ftrain, "--check", "--ranks", "8", "--ranks-per-node", "8", *extra, *stand_ins, recipe])
        if rc != 0:
            fail(f"--check {' '.join(extra)} of {recipe}: exit {rc}:\n{out}")
        return out

    def expect(what, out, wanted, unwanted=()):
        missing = [w for w in wanted if w not in out]
        present = [u for u in unwanted if u in out]
        if missing or present:
            fail(f"{what}: missing {missing}, unexpected {present}:\n{out}")

    out = check("--device-memory", "80GiB")
    verdict = next((l for l in out.splitlines() if l.startswith("fit on 80.00 GiB per device")), "")
    if not verdict or "DOES NOT FIT" in verdict or "(the device's part under offload optimizer)" not in verdict:
        fail("the 8-rank recipe with offload optimizer on 80GiB: expected a fit verdict for the device's part:\n" + out)
    # The verdict's state is the plan's device part, each term with its own bytes (the gathered units were once
    # folded into the state's number, so the two lines disagreed).
    device_part = re.search(r"^  offload +optimizer on a device backend: ([0-9.]+ GiB) of the state", out, re.M)
    gathered = re.search(r"^  memory per rank .* \+ ([0-9.]+ GiB) gathered units in flight", out, re.M)
    if not device_part or not gathered or \
            f": {device_part.group(1)} sharded state (the device's part under offload optimizer) + " \
            f"{gathered.group(1)} gathered units in flight + " not in verdict:
        fail("the fit verdict's state and gathered units are not the plan's:\n" + out)
    expect("the offload table on 80GiB", out,
           ["offload (fsdp ... offload) on 80.00 GiB per device and host memory not checked",
            "  none       device ", "  optimizer  device ", "<- this deck",
            "128.48 GiB per rank, 1027.83 GiB per node",
            "fits with offload optimizer, all; does not fit with offload none (device memory only)",
            "offload           optimizer on a device backend: 16.46 GiB of the state on the device",
            ", offload optimizer (no effect on the host backend: the sharded state already is host memory)"])
    none_line = next(l for l in out.splitlines() if l.startswith("  none       device "))
    if "DOES NOT FIT" not in none_line:
        fail("offload none on 8 ranks of 80GiB should not fit:\n" + out)
    print("ok: llama70b_8gpu.in on 8 ranks of 80GiB fits with offload optimizer (and all), not with none")
    out = check("--device-memory", "80GiB", "-var", "offload", "none")
    verdict = next((l for l in out.splitlines() if l.startswith("fit on 80.00 GiB per device")), "")
    expect("the recipe with -var offload none", verdict + "\n" + out,
           ["DOES NOT FIT", "to make it fit, one of:", "  - fsdp ... offload optimizer (f32 state and AdamW in host "
            "memory: 128.48 GiB per rank)"])
    print("ok: -var offload none: the deck's verdict is DOES NOT FIT and the advice names offload optimizer")
    out = check("--gpu", "h100-80gb", "--host-memory", "512GiB")
    expect("--host-memory 512GiB", out,
           ["host memory per node (--host-memory)", "1027.83 GiB per node: DOES NOT FIT", "fits with no offload setting"])
    out = check("--gpu", "h100-80gb", "--host-memory", "2TiB")
    expect("--host-memory 2TiB", out,
           ["2048.00 GiB of host memory per node", "1027.83 GiB per node: fits", "fits with offload optimizer, all; "
            "does not fit with offload none\n"])
    print("ok: --host-memory: 1 TiB of offloaded state per node does not fit 512GiB and fits 2TiB")
    rc, out = run([e.args.ftrain, "--check", "--ranks", "8", "--gpu", "h100-80gb", *stand_ins, "-var", "device",
                   "cuda", recipe])
    if rc != 0 or ", offload optimizer (f32 state and AdamW in host memory)" not in out or \
            "not implemented yet" in out:
        fail(f"offload optimizer with device cuda: exit {rc}, expected a plan whose fsdp line names the offload:\n{out}")
    print("ok: device cuda with offload optimizer plans, its fsdp line saying what moves to host memory")
    rc, out = run([e.args.ftrain, "--host-memory", "2TiB", *stand_ins, recipe])
    if rc == 0 or "--host-memory" not in out or "use them with --check" not in out:
        fail(f"--host-memory without --check: exit {rc}:\n{out}")
    rc, out = run([e.args.ftrain, "--check", "--host-memory", "2TiB", *stand_ins, recipe])
    if rc == 0 or "give --device-memory S or --gpu NAME too" not in out:
        fail(f"--host-memory without a device size: exit {rc}:\n{out}")
    print("ok: --host-memory needs --check and a device size")


SCENARIOS = {
    "plan_ranks": scenario_plan_ranks,
    "gpu_plan": scenario_gpu_plan,
    "offload_plan": scenario_offload_plan,
    "check": scenario_check,
    "resume": scenario_resume,
    "mfu": scenario_mfu,
    "batch_log": scenario_batch_log,
    "terminal": scenario_terminal,
    "scheduler": scenario_scheduler,
    "sigint": scenario_sigint,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--repo", required=True)
    parser.add_argument("--ftrain", required=True)
    parser.add_argument("--prep", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--mpirun", required=True)
    args = parser.parse_args()
    SCENARIOS[args.scenario](Env(args))


if __name__ == "__main__":
    main()
