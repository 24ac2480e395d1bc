#!/usr/bin/env python3
"""Runs inputs/tiny_vit.in (or another deck) in several configurations and
compares their metrics.jsonl curves step by step.

  compare_runs.py --ftrain BIN --deck DECK --workdir DIR \
      [--mpiexec mpirun --numproc-flag -np --mpi-flag F ...] \
      --run NAME:NP[:VAR=VALUE,...] --run ... \
      --fields loss,grad_norm,eval_loss --tolerance 1e-5 [--falls 0.7]

The first --run is the reference; every other run must have the same steps
and each field within --tolerance relative of the reference
(|a - b| <= tol * max(|b|, 1e-12)). --falls F additionally requires every
run's last training loss to be below F times its first. Each run gets
-var run_dir (a fresh directory under --workdir) plus its own variables.
Prints a table of the curves; exit 0 pass, 1 fail, 2 harness error.
Python 3 standard library only.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

TIMEOUT_S = 120


def parse_run(text):
    parts = text.split(":")
    if len(parts) < 2:
        raise SystemExit("--run expects NAME:NP[:VAR=VALUE,...], got " + text)
    variables = {}
    if len(parts) > 2 and parts[2]:
        for item in parts[2].split(","):
            key, _, value = item.partition("=")
            variables[key] = value
    return parts[0], int(parts[1]), variables


def run(args, name, np, variables):
    run_dir = os.path.join(args.workdir, name)
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    command = []
    if args.mpiexec:
        command += [args.mpiexec] + args.mpi_flag + [args.numproc_flag, str(np)]
    elif np != 1:
        raise SystemExit("np %d needs --mpiexec" % np)
    command += [args.ftrain, args.deck, "-var", "run_dir", run_dir]
    for key, value in variables.items():
        command += ["-var", key, value]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=args.workdir)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise RuntimeError("%s: ftrain exited with %d: %s" % (name, result.returncode, " ".join(command)))
    curve = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            curve.setdefault(record["step"], {}).update(record)
    return curve


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ftrain", required=True)
    parser.add_argument("--deck", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--mpiexec", default="")
    parser.add_argument("--numproc-flag", default="-np")
    parser.add_argument("--mpi-flag", action="append", default=[])
    parser.add_argument("--run", action="append", required=True)
    parser.add_argument("--fields", default="loss,grad_norm,eval_loss")
    parser.add_argument("--tolerance", type=float, required=True)
    parser.add_argument("--falls", type=float, default=0.0)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    fields = args.fields.split(",")

    runs = [parse_run(r) for r in args.run]
    try:
        curves = [(name, run(args, name, np, variables)) for name, np, variables in runs]
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        print("harness error:", e)
        return 2

    failures = []
    ref_name, ref = curves[0]
    print("step  field       " + "  ".join("%14s" % name for name, _ in curves) + "   max rel diff")
    for step in sorted(ref):
        for field in fields:
            if field not in ref[step]:
                continue
            b = ref[step][field]
            values, worst = [], 0.0
            for name, curve in curves:
                a = curve.get(step, {}).get(field)
                values.append(a)
                if a is None:
                    failures.append("%s: step %d has no %s" % (name, step, field))
                    continue
                diff = abs(a - b) / max(abs(b), 1e-12)
                worst = max(worst, diff)
                if diff > args.tolerance:
                    failures.append("%s: step %d %s = %r, reference %s has %r (relative %.3g > %.3g)"
                                    % (name, step, field, a, ref_name, b, diff, args.tolerance))
            print("%4d  %-10s  " % (step, field) +
                  "  ".join("%14.8f" % v if v is not None else "%14s" % "-" for v in values) + "   %.3g" % worst)
    for name, curve in curves:
        if set(curve) != set(ref):
            failures.append("%s logs steps %s, reference %s" % (name, sorted(curve), sorted(ref)))
        losses = [curve[s]["loss"] for s in sorted(curve) if "loss" in curve[s]]
        if args.falls > 0 and (len(losses) < 2 or not losses[-1] < args.falls * losses[0]):
            failures.append("%s: loss did not fall below %.2f x its first value: %s" % (name, args.falls, losses))
    for f in failures:
        print("FAIL:", f)
    print("PASS" if not failures else "%d failure(s)" % len(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
