#!/usr/bin/env python3
"""Run `ftrain --check` on one deck from inputs/ and hold its comments to it.

    check_deck.py DECK --ftrain F --prep P --workdir W [--mpiexec M] [--mpi-flag X ...]

Every deck in inputs/ must pass --check with its path variables pointed at
small stand-ins made here (the deck's defaults name files a user has, not
this machine):

  * data_dir, train_tokens, eval_tokens: a tiny token file from ftrain-prep
    (vocab 256: --check compares the file's vocabulary with the model's, and
    256 ids fit every deck's model, the tiny demo's included); data_dir holds
    it under the names tiny_llama.in uses too;
  * hf_weights: a header-only safetensors stand-in declaring every tensor
    the deck's model expects (tests/support/safetensors_stand_in.py: --check
    reads the header and holds each name, shape and dtype to the model; the
    data is a hole in a sparse file, never read);
  * run_dir: a directory under the work directory.

A deck whose comments record a plan (lines `#   parameters ...`, `#   ranks
N, ...`, `#   memory per rank ...`, `#   grid ...` as --check prints them) is checked on the
recorded number of ranks (mpirun --oversubscribe: --check allocates nothing
model-sized, so 16 small processes are fine), and every recorded plan line
must appear verbatim in the output: the numbers in a deck's comments cannot
drift from what the code computes. Other decks run on one rank.
"""
import argparse
import os
import re
import resource
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import safetensors_stand_in  # noqa: E402

PLAN_KEYS = ("parameters", "trainable", "ranks", "global batch", "FLOPs per step", "memory per rank", "grid",
             "per tensor rank", "communication")
# --check builds no model-sized tensor: a 70B plan in a few MiB. The limit is
# per process (ru_maxrss of the largest child), far below any real model.
MAX_RSS_MIB = 400


def recorded_plan(deck_text):
    lines = []
    for line in deck_text.splitlines():
        m = re.match(r"#\s{3}(\S.*)$", line)
        if m and m.group(1).startswith(PLAN_KEYS):
            lines.append(m.group(1).strip())
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("deck")
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--numproc-flag", default="-np")
    ap.add_argument("--mpi-flag", action="append", default=[])
    a = ap.parse_args()

    deck_text = open(a.deck, encoding="utf-8").read()
    plan = recorded_plan(deck_text)
    ranks = 1
    for line in plan:
        m = re.match(r"ranks\s+(\d+),", line)
        if m:
            ranks = int(m.group(1))

    data = os.path.join(a.workdir, "data")
    os.makedirs(data, exist_ok=True)
    train, evalf = os.path.join(data, "tiny_train.tok"), os.path.join(data, "tiny_eval.tok")
    subprocess.run([a.prep, "synthetic", "--out", train, "--tokens", "20000", "--vocab", "256", "--seed", "7",
                    "--eval-out", evalf, "--eval-tokens", "4096"], check=True, stdout=subprocess.DEVNULL)
    weights = os.path.join(a.workdir, "stand_in.safetensors")
    open(weights, "wb").close()
    variables = {"data_dir": data, "train_tokens": train, "eval_tokens": evalf, "hf_weights": weights,
                 "run_dir": os.path.join(a.workdir, "run")}
    if "init safetensors ${hf_weights}" in deck_text:
        one_rank = [a.ftrain, "--check"] + [w for k, v in variables.items() for w in ("-var", k, v)] + [a.deck]
        safetensors_stand_in.write_stand_in(weights, one_rank)

    cmd = [a.mpiexec, *a.mpi_flag, a.numproc_flag, str(ranks), a.ftrain, "--check"]
    for k, v in variables.items():
        cmd += ["-var", k, v]
    cmd.append(a.deck)
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    failures = []
    if p.returncode != 0:
        failures.append(f"ftrain --check exited {p.returncode}")
    if "plan:" not in p.stdout:
        failures.append("no plan printed")
    printed = {re.sub(r"\s+", " ", l.strip()) for l in p.stdout.splitlines()}
    for line in plan:
        if re.sub(r"\s+", " ", line) not in printed:
            failures.append(f"the deck's comments record the plan line\n    {line}\n  but --check on {ranks} "
                            "rank(s) did not print it: update the comment from the output above")
    # Until a GPU backend exists everything runs on the host: a deck written
    # for GPUs (>= 1B parameters, or precision fp8) must say so; a small deck
    # (state per rank in MiB) must not cry wolf. (train/gpu_sized_deck.hpp)
    params = re.search(r"(?m)^\s*parameters\s+(\d+)", p.stdout)
    gpu_sized = (params is not None and int(params.group(1)) >= 10**9) or \
        re.search(r"(?m):\d+: precision fp8\s*$", p.stdout) is not None  # the resolved deck
    small = re.search(r"(?m)^\s*memory per rank\s+[0-9.]+ (KiB|MiB) sharded", p.stdout) is not None
    warned = "looks written for GPUs, but ftrain trains on the host backend" in p.stdout
    if gpu_sized and not warned:
        failures.append("a deck written for GPUs (>= 1B parameters or precision fp8) was planned on the host "
                        "backend without the warning that says so")
    if small and not gpu_sized and warned:
        failures.append("a small host-sized deck got the GPU-recipe warning")
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if rss_mib > MAX_RSS_MIB:
        failures.append(f"--check used {rss_mib:.0f} MiB in one process (limit {MAX_RSS_MIB}): it allocated model-sized memory")
    if ranks > 1 and f"{ranks} rank(s)" not in p.stdout:
        failures.append(f"expected a {ranks}-rank header")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if not failures:
        print(f"ok: {os.path.basename(a.deck)} passes --check on {ranks} rank(s), {len(plan)} recorded plan line(s) "
              f"match, peak RSS {rss_mib:.0f} MiB")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
