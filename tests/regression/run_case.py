#!/usr/bin/env python3
"""Runs one regression case: the ftrain executable on a deck, checked
against what the case file (cases/*.json) says must happen.

A case file is data, after the LAMMPS unittest YAML files: the deck, its
variables, the number of ranks, what to compare, the tolerance and the golden
values all live in the file; this script only knows how to run and compare.
Kinds (the "kind" key):

  train    run the deck once; compare the metric fields in "compare" with
           the goldens in "golden" (or, with "reference": "OTHER.json", with
           OTHER.json's goldens), step by step, within "tolerance".relative.
           Every golden step must be present and no other step may appear;
           ftrain's stdout must match every "stdout_regex" (the printed plan
           proves the case's configuration took effect). With
           "reference_run": {"np": N, "variables": {...}} the reference is
           that configuration run here and now instead of stored goldens.
           Every field in "compare" must be present in every metrics row
           of its kind (below), in this run, in the reference run and in
           the goldens: a typo'd or renamed field fails the case, it does
           not compare two empty sets.
           "expect": {"FIELD": {"min": A, "max": B}, ...} bounds a metric
           of this run at every row of its kind (either bound optional):
           it proves a feature acted, e.g. activation checkpointing
           recomputed units (recomputed_units_per_step >= 1) or
           limit_all_gathers 1 held one unit (gathered_units_high_water
           <= 1).
           "tolerance": {"relative": R, "per_field": {"FIELD": R2}} gives
           FIELD its own bound (and names why in the case's description);
           a per_field entry for a field not compared fails the case.
           "tolerance": "reference" takes the "reference" case's bounds
           (the must-fail self-tests of a golden: selftest/golden_*.json).
           "must_differ": {"relative": X} requires the run to differ from
           its reference by more than X (relative) in some compared value:
           with X = 0 the curves may not be bit-identical (e.g.
           reduce_dtype bf16 against f32 reduction). Without "tolerance"
           the case asserts only the difference (a run that must not
           reproduce the reference, e.g. unsynchronised initialisations).
           "env": {"NAME": "value"} runs ftrain (every rank) with those
           environment variables (e.g. FTRAIN_HOST_STREAM=async,
           FTRAIN_ALLOC_DEBUG=1); "stderr_regex" as "stdout_regex", on
           stderr (the notice proving such a mode was on).
  repeat   run the deck twice; the fields in "compare" must be the same
           strings in both metrics.jsonl files (bit-identical training).
  error    run a bad deck; the exit status must be non-zero, stderr must
           hold exactly one "ftrain: error:" line, containing every string in
           "stderr_contains" (file:line, the offending word), and no sign of
           a crash (signal, abort, uncaught exception); stdout no error line.
  check    `ftrain --check DECK`; stdout must match every "stdout_regex" and
           the process's peak RSS stay under "max_rss_mib" (it must plan the
           model, not allocate it).
  cli      each entry of "invocations" (plain arguments) must exit 0 and
           print every string in its "stdout_contains".
  curves   run the deck once per entry of "runs" ({"name", "np",
           "variables"}): every run must log the first run's steps, and each
           field in "compare" must be within "tolerance".relative of the
           first run's value at that step (|a - b| <= R * max(|b|, 1e-12)),
           e.g. results that must not depend on the rank count. "falls": F
           requires every run's last training loss to be below F times its
           first (the task is learnable and was learnt). The case's "np" is
           its largest run (ctest reserves that many processors). Without
           "corpus" the deck gets no -var data_dir (image decks read none).

Rows of metrics.jsonl are of two kinds: evaluation rows (a field named
eval_*) and training rows (the others). A field that appears in rows of a
kind must appear in every row of that kind.

Conventions: paths in a case ("deck", "reference") are relative to this
script's directory; "{fixtures}" in a variable's value is the --fixtures
directory (files other ctests made, e.g. an HDF5 image set); the deck gets -var data_dir (the case's corpus, made
here with ftrain-prep from "corpus") and -var run_dir (a fresh directory
under --workdir) plus the case's "variables". Metric values are compared as
JSON text (parse_float=str) so "repeat" compares exactly what was written.

The runner is tested itself: selftest/*.json are broken cases it must reject
(harness_selftest.py), harness_unit_test.py checks its metric checks on
hand-written metrics files.

--regenerate rewrites the "golden" block of a train case from this run (and
does not compare); review the diff before committing it. Python 3 standard
library only. Exit status: 0 pass, 1 fail, 2 usage or harness error.
"""

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 60  # per ftrain process: a hang is a failure, not a stuck ctest
CRASH_SIGNS = re.compile(
    r"terminate called|Segmentation fault|core dumped|MPI_ABORT|exited on signal|"
    r"Aborted|AddressSanitizer|free\(\)|double free|stack smashing")


class CaseFailure(Exception):
    pass


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("case", help="case file (JSON)")
    p.add_argument("--ftrain", required=True, help="the ftrain executable")
    p.add_argument("--prep", help="the ftrain-prep executable (train and repeat cases)")
    p.add_argument("--workdir", required=True, help="scratch directory of this case (wiped first)")
    p.add_argument("--mpiexec", default="mpirun", help="MPI launcher, used when np > 1")
    p.add_argument("--numproc-flag", default="-np")
    p.add_argument("--mpi-flag", action="append", default=[],
                   help="one launcher flag (repeatable), e.g. --mpi-flag=--oversubscribe")
    p.add_argument("--fixtures", default="", help="directory of files made by fixture ctests ({fixtures} in variables)")
    p.add_argument("--regenerate", action="store_true", help="rewrite the case's goldens from this run")
    return p.parse_args()


def load_case(path):
    with open(path) as f:
        return json.load(f)


def launcher(args, np_):
    if np_ <= 1:
        return []
    return [args.mpiexec, *args.mpi_flag, args.numproc_flag, str(np_)]


def run(cmd, cwd, label, env=None):
    """Runs cmd with the hang timeout; returns (rc, stdout, stderr, seconds)."""
    start = time.monotonic()
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update({name: str(value) for name, value in env.items()})
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, env=full_env)
    except subprocess.TimeoutExpired as e:
        raise CaseFailure(f"{label}: no exit within {TIMEOUT_S} s (hang?): {' '.join(cmd)}\n"
                          f"stdout tail:\n{(e.stdout or b'')[-2000:]!r}") from None
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def make_corpus(args, case, workdir):
    spec = case.get("corpus")
    data_dir = os.path.join(workdir, "data")
    os.makedirs(data_dir, exist_ok=True)
    if spec is None:
        return data_dir
    if not args.prep:
        raise CaseFailure("this case needs a corpus: pass --prep")
    cmd = [args.prep, "synthetic", "--out", os.path.join(data_dir, "train.tok"),
           "--tokens", str(spec["tokens"]), "--vocab", str(spec["vocab"]), "--seed", str(spec["seed"])]
    if "eval_tokens" in spec:
        cmd += ["--eval-out", os.path.join(data_dir, "eval.tok"), "--eval-tokens", str(spec["eval_tokens"])]
    rc, out, err, _ = run(cmd, workdir, "ftrain-prep")
    if rc != 0:
        raise CaseFailure(f"ftrain-prep failed ({rc}):\n{out}{err}")
    return data_dir


def train_once(args, case, workdir, data_dir, tag):
    run_dir = os.path.join(workdir, "run_" + tag)
    env = case.get("env", {})
    cmd = launcher(args, case.get("np", 1))
    if cmd:
        for name in env:
            cmd += ["-x", name]  # every rank gets the variable, wherever it runs
    cmd += [args.ftrain]
    variables = {"data_dir": data_dir, "run_dir": run_dir, **case.get("variables", {})}
    if data_dir is None:
        del variables["data_dir"]
    for name, value in variables.items():
        cmd += ["-var", name, str(value).replace("{fixtures}", args.fixtures)]
    cmd.append(os.path.join(HERE, case["deck"]))
    rc, out, err, seconds = run(cmd, workdir, "ftrain", env)
    with open(os.path.join(workdir, tag + ".log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + out + err)
    if rc != 0:
        raise CaseFailure(f"ftrain exited {rc}: {' '.join(cmd)}\n{out[-3000:]}{err[-3000:]}")
    print(f"run {tag}: {seconds:.2f} s: {' '.join(cmd)}")
    # The plan ftrain prints shows the configuration took effect (a case
    # whose variables were silently ignored would compare the reference
    # with itself and prove nothing).
    for pattern in case.get("stdout_regex", []):
        if not re.search(pattern, out, re.MULTILINE):
            raise CaseFailure(f"ftrain's stdout does not match /{pattern}/ (see {tag}.log)")
    for pattern in case.get("stderr_regex", []):
        if not re.search(pattern, err, re.MULTILINE):
            raise CaseFailure(f"ftrain's stderr does not match /{pattern}/ (see {tag}.log)")
    return read_metrics(os.path.join(run_dir, "metrics.jsonl"))


class Metrics(dict):
    """{field: {step: value-as-text}}, plus the steps of each row kind."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.steps_of_kind = {"training": set(), "evaluation": set()}
        self.kinds_of_field = {}  # field -> the row kinds it appeared in


def row_kind(record):
    return "evaluation" if any(key.startswith("eval_") for key in record) else "training"


def missing_steps(metrics, field, side):
    """Problems if `field` is not in every row of its kind on `side`."""
    column = metrics.get(field)
    if not column:
        return [f"{field}: not in {side}'s metrics at any step (a typo, or a renamed metric?): {metrics.path}"]
    kinds = metrics.kinds_of_field[field]
    expected = set().union(*(metrics.steps_of_kind[kind] for kind in kinds))
    absent = sorted(expected - set(column))
    if absent:
        return [f"{field}: missing at step {absent[0]} of {side} ({len(absent)} of {len(expected)} "
                f"{'/'.join(sorted(kinds))} rows lack it): {metrics.path}"]
    return []


def read_metrics(path):
    """{field: {step: value-as-text}} for every field of every line."""
    fields = Metrics(path)
    try:
        with open(path) as f:
            lines = [line for line in f if line.strip()]
    except OSError as e:
        raise CaseFailure(f"no metrics: {e}") from None
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line, parse_float=str, parse_int=str)
        except json.JSONDecodeError as e:
            raise CaseFailure(f"{path}:{n}: not JSON ({e}): {line!r}") from None
        step = int(record["step"])
        fields.steps_of_kind[row_kind(record)].add(step)
        for key, value in record.items():
            if key == "step":
                continue
            column = fields.setdefault(key, {})
            fields.kinds_of_field.setdefault(key, set()).add(row_kind(record))
            if step in column:
                raise CaseFailure(f"{path}:{n}: step {step} has '{key}' twice")
            column[step] = value
    return fields


def write_case(path, case):
    # One [step, value] pair per line keeps golden diffs reviewable.
    text = json.dumps(case, indent=2)
    text = re.sub(r"\[\s+(-?\d+),\s+([-+0-9.eE]+)\s+\]", r"[\1, \2]", text)
    with open(path, "w") as f:
        f.write(text + "\n")


def golden_of(case, case_path):
    if "reference" in case:
        ref_path = os.path.join(HERE, case["reference"])
        ref = load_case(ref_path)
        if "golden" not in ref:
            raise CaseFailure(f"reference {ref_path} has no golden block")
        return ref["golden"], ref_path
    if "golden" not in case:
        raise CaseFailure(f"{case_path} has no golden block: run with --regenerate once")
    return case["golden"], case_path


def compare_with_golden(metrics, golden, tolerance, source, per_field=None):
    """Problems beyond `tolerance` (None: no bound; `per_field` maps a field
    to its own bound), and the largest relative difference seen (for
    "must_differ")."""
    problems, worst, bounds = [], {}, {}
    for field in per_field or {}:
        if field not in golden:
            problems.append(f'"tolerance" "per_field" names {field}, which this case does not compare')
    for field, pairs in golden.items():
        bound_of_field = (per_field or {}).get(field, tolerance)
        bounds[field] = bound_of_field
        got = metrics.get(field, {})
        expected = {int(step): float(value) for step, value in pairs}
        if not expected:
            problems.append(f"{field}: {source} has no value of it at any step")
            continue
        if sorted(got) != sorted(expected):
            problems.append(f"{field}: steps {sorted(got)} but {source} has {sorted(expected)}")
            continue
        for step in sorted(expected):
            want, have = expected[step], float(got[step])
            rel = abs(have - want) / max(abs(want), 1e-30)
            if rel > worst.get(field, (-1.0, 0))[0]:
                worst[field] = (rel, step)
            if bound_of_field is not None and rel > bound_of_field:
                problems.append(f"{field} step {step}: {have!r} vs {want!r} in {source} "
                                f"(relative {rel:.3e} > {bound_of_field:g})")
    for field, (rel, step) in sorted(worst.items()):
        bound = f"tolerance {bounds[field]:g}" if bounds[field] is not None else "no tolerance: must differ"
        print(f"{field}: worst relative difference {rel:.3e} at step {step} ({bound})")
    largest = max((rel for rel, _ in worst.values()), default=0.0)
    return problems, largest


def check_expectations(metrics, expect):
    """The case's "expect" bounds, at every row of each field's kind."""
    problems = []
    for field, bounds in expect.items():
        unknown = set(bounds) - {"min", "max"}
        if unknown or not bounds:
            raise CaseFailure(f'"expect" {field}: bounds are "min" and/or "max", got {sorted(bounds) or "none"}')
        absent = missing_steps(metrics, field, "this run")
        if absent:
            problems += absent
            continue
        values = {step: float(text) for step, text in metrics[field].items()}
        for step, value in sorted(values.items()):
            if "min" in bounds and value < bounds["min"]:
                problems.append(f"{field} step {step}: {value:g} < expected min {bounds['min']:g}")
            if "max" in bounds and value > bounds["max"]:
                problems.append(f"{field} step {step}: {value:g} > expected max {bounds['max']:g}")
        print(f"{field}: {len(values)} values in [{min(values.values()):g}, {max(values.values()):g}], "
              f"expected within [{bounds.get('min', '-inf')}, {bounds.get('max', 'inf')}]")
    return problems


def case_train(args, case, case_path, workdir):
    data_dir = make_corpus(args, case, workdir)
    metrics = train_once(args, case, workdir, data_dir, "a")
    if args.regenerate:
        if "reference" in case or "reference_run" in case:
            raise CaseFailure("this case compares with its reference's goldens: regenerate the reference")
        absent = [p for field in case["compare"] for p in missing_steps(metrics, field, "this run")]
        if absent:
            raise CaseFailure("cannot regenerate goldens: " + "; ".join(absent))
        case["golden"] = {field: [[step, float(metrics[field][step])] for step in sorted(metrics.get(field, {}))]
                          for field in case["compare"]}
        write_case(case_path, case)
        print(f"wrote goldens of {', '.join(case['compare'])} to {case_path}")
        return []
    # Every compared field in every row of its kind, on every side: two
    # empty sets compare equal, so an absent field would prove nothing.
    problems = [p for field in case["compare"] for p in missing_steps(metrics, field, "this run")]
    if "reference_run" in case:
        # A reference with no stored goldens (e.g. a global batch the golden
        # case does not use): run it here, same deck and corpus.
        reference = {**case, "np": case["reference_run"].get("np", 1),
                     "variables": case["reference_run"].get("variables", {}), "stdout_regex": []}
        ref_metrics = train_once(args, reference, workdir, data_dir, "reference")
        problems += [p for field in case["compare"] for p in missing_steps(ref_metrics, field, "the reference run")]
        golden = {field: [[step, value] for step, value in ref_metrics.get(field, {}).items()]
                  for field in case["compare"]}
        source = "the reference run"
    else:
        golden, source = golden_of(case, case_path)
        absent = [field for field in case["compare"] if not golden.get(field)]
        problems += [f"{field}: not in the goldens of {os.path.basename(source)}" for field in absent]
        golden = {field: golden[field] for field in case["compare"] if field not in absent}
        source = os.path.basename(source)
    if problems:
        return problems
    if "tolerance" not in case and "must_differ" not in case:
        raise CaseFailure('a train case needs "tolerance" (and/or "must_differ")')
    if case.get("tolerance") == "reference":
        # A golden's must-fail self-test: held to the golden's own bounds,
        # so widening them past what the self-test's break moves fails it.
        if "reference" not in case:
            raise CaseFailure('"tolerance": "reference" needs a "reference" case')
        case["tolerance"] = load_case(os.path.join(HERE, case["reference"]))["tolerance"]
        print(f"tolerance of {case['reference']}: {json.dumps(case['tolerance'])}")
    tolerance = float(case["tolerance"]["relative"]) if "tolerance" in case else None
    per_field = {f: float(v) for f, v in case.get("tolerance", {}).get("per_field", {}).items()}
    problems, largest = compare_with_golden(metrics, golden, tolerance, source, per_field)
    if "must_differ" in case:
        floor = float(case["must_differ"]["relative"])
        if largest <= floor:
            what = "bit-identical to" if largest == 0.0 else f"within relative {largest:.3e} of"
            problems.append(f"the run is {what} {source} in {', '.join(case['compare'])}; it must differ by more "
                            f"than {floor:g}: the configuration under test did not act")
        else:
            print(f"differs from {source} by up to {largest:.3e} (must exceed {floor:g})")
    problems += check_expectations(metrics, case.get("expect", {}))
    return problems


def case_repeat(args, case, case_path, workdir):
    data_dir = make_corpus(args, case, workdir)
    first = train_once(args, case, workdir, data_dir, "a")
    second = train_once(args, case, workdir, data_dir, "b")
    problems = []
    for field in case["compare"]:
        a, b = first.get(field, {}), second.get(field, {})
        absent = missing_steps(first, field, "the first run") + missing_steps(second, field, "the second run")
        if absent:
            problems += absent
            continue
        for step in sorted(set(a) | set(b)):
            if a.get(step) != b.get(step):
                problems.append(f"{field} step {step}: '{a.get(step)}' then '{b.get(step)}'")
        print(f"{field}: {len(a)} values compared as text")
    return problems


def case_error(args, case, case_path, workdir):
    cmd = launcher(args, case.get("np", 1)) + [args.ftrain]
    for name, value in case.get("variables", {}).items():
        cmd += ["-var", name, str(value)]
    cmd.append(os.path.join(HERE, case["deck"]))
    rc, out, err, seconds = run(cmd, workdir, "ftrain")
    print(f"{seconds:.2f} s, exit {rc}: {' '.join(cmd)}\n--- stderr:\n{err}--- end")
    problems = []
    if rc == 0:
        problems.append("exit status 0 for a bad deck")
    elif rc < 0 or rc > 125:
        problems.append(f"exit status {rc}: killed by a signal")
    if CRASH_SIGNS.search(err) or CRASH_SIGNS.search(out):
        problems.append("output shows a crash: " + (CRASH_SIGNS.search(err) or CRASH_SIGNS.search(out)).group(0))
    error_lines = [line for line in err.splitlines() if "ftrain: error:" in line]
    if len(error_lines) != 1:
        problems.append(f"{len(error_lines)} 'ftrain: error:' lines on stderr, expected exactly 1")
    if any("error" in line.lower() for line in out.splitlines()):
        problems.append("stdout has an error line (errors go to stderr)")
    if error_lines:
        for needle in case["stderr_contains"]:
            if needle not in error_lines[0]:
                problems.append(f"the error line lacks '{needle}': {error_lines[0]}")
    return problems


def case_check(args, case, case_path, workdir):
    # The runner starts no other child, so RUSAGE_CHILDREN's ru_maxrss is ftrain's.
    cmd = [args.ftrain, "--check", os.path.join(HERE, case["deck"])]
    rc, out, err, seconds = run(cmd, workdir, "ftrain --check")
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    print(f"{seconds:.2f} s, exit {rc}, peak RSS {rss_mib:.1f} MiB: {' '.join(cmd)}\n{out}{err}")
    problems = []
    if rc != 0:
        problems.append(f"exit status {rc}")
    for pattern in case["stdout_regex"]:
        if not re.search(pattern, out, re.MULTILINE):
            problems.append(f"stdout does not match /{pattern}/")
    if rss_mib >= case["max_rss_mib"]:
        problems.append(f"peak RSS {rss_mib:.1f} MiB >= {case['max_rss_mib']} MiB: --check allocated the model?")
    return problems


def case_cli(args, case, case_path, workdir):
    problems = []
    for invocation in case["invocations"]:
        cmd = [args.ftrain, *invocation["args"]]
        rc, out, err, seconds = run(cmd, workdir, " ".join(cmd))
        print(f"{seconds:.2f} s, exit {rc}: {' '.join(cmd)}")
        if rc != 0:
            problems.append(f"{' '.join(invocation['args'])}: exit status {rc}\n{err}")
        for needle in invocation["stdout_contains"]:
            if needle not in out:
                problems.append(f"{' '.join(invocation['args'])}: stdout lacks '{needle}'")
    return problems


def case_curves(args, case, case_path, workdir):
    runs = case["runs"]
    if len(runs) < 2:
        raise CaseFailure('a curves case needs at least two "runs"')
    if case.get("np", 1) != max(r.get("np", 1) for r in runs):
        raise CaseFailure('"np" must be the largest run\'s np (ctest reserves that many processors)')
    tolerance = float(case["tolerance"]["relative"])
    data_dir = make_corpus(args, case, workdir) if "corpus" in case else None
    curves = []
    for r in runs:
        config = {**case, "np": r.get("np", 1), "variables": r.get("variables", {})}
        curves.append((r["name"], train_once(args, config, workdir, data_dir, r["name"])))
    problems = [p for name, metrics in curves for field in case["compare"]
                for p in missing_steps(metrics, field, name)]
    if problems:
        return problems
    ref_name, ref = curves[0]
    for field in case["compare"]:
        worst = 0.0
        for name, metrics in curves[1:]:
            if sorted(metrics[field]) != sorted(ref[field]):
                problems.append(f"{name}: {field} at steps {sorted(metrics[field])}, {ref_name} at {sorted(ref[field])}")
                continue
            for step in sorted(ref[field]):
                want, have = float(ref[field][step]), float(metrics[field][step])
                rel = abs(have - want) / max(abs(want), 1e-12)
                worst = max(worst, rel)
                if rel > tolerance:
                    problems.append(f"{name}: step {step} {field} = {have!r}, {ref_name} has {want!r} "
                                    f"(relative {rel:.3g} > {tolerance:.3g})")
        print(f"{field}: worst relative difference from {ref_name} {worst:.3e} (tolerance {tolerance:g})")
    if "falls" in case:
        falls = float(case["falls"])
        for name, metrics in curves:
            losses = [float(metrics["loss"][step]) for step in sorted(metrics.get("loss", {}))]
            if len(losses) < 2 or not losses[-1] < falls * losses[0]:
                problems.append(f"{name}: the loss did not fall below {falls:.2f} x its first value: {losses}")
            else:
                print(f"{name}: loss {losses[0]:.6g} -> {losses[-1]:.6g} (must fall below {falls:g} x)")
    return problems


KINDS = {"curves": case_curves, "train": case_train, "repeat": case_repeat, "error": case_error, "check": case_check, "cli": case_cli}


def main():
    args = parse_args()
    # Processes run in the case's work directory: make given paths absolute.
    args.ftrain = os.path.abspath(args.ftrain)
    args.prep = args.prep and os.path.abspath(args.prep)
    if os.sep in args.mpiexec:
        args.mpiexec = os.path.abspath(args.mpiexec)
    case_path = os.path.abspath(args.case)
    case = load_case(case_path)
    kind = case.get("kind")
    if kind not in KINDS:
        print(f"{case_path}: unknown kind {kind!r} (expected one of {', '.join(KINDS)})", file=sys.stderr)
        return 2
    if args.regenerate and kind != "train":
        print(f"{case_path}: only train cases have goldens to regenerate", file=sys.stderr)
        return 2
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    print(f"case {os.path.basename(case_path)} ({kind}): {case.get('description', '')}")
    try:
        problems = KINDS[kind](args, case, case_path, os.path.abspath(args.workdir))
    except CaseFailure as e:
        problems = [str(e)]
    for problem in problems:
        print("FAIL: " + problem)
    print("FAILED" if problems else "PASSED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
