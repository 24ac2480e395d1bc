#!/usr/bin/env python3
"""Runs the golden regression cases under each host code path this machine
can take and reports how far apart their results are (share/doc/
reproducibility.md says what ftrain promises and how the tolerances were set
from this report).

The host backend's f32 GEMMs run on OpenBLAS, which picks a kernel set for
the CPU (OPENBLAS_CORETYPE forces one); its BF16 GEMMs (precision bf16) run
on oneDNN where the CPU has AVX512-BF16 and are widened to f32 on OpenBLAS
elsewhere (ONEDNN_MAX_CPU_ISA caps what oneDNN sees; precision fp8 always
widens them); ftrain's own element-wise kernels are compiled for
FTRAIN_HOST_ISA (native or portable: a second build). Another CPU takes one
of these paths, so their spread on one machine is what a golden curve must
tolerate on any x86-64 CPU.

    share/scripts/golden_codepaths.py                 every combination (a
        portable build in build-portable is configured and built first)
    share/scripts/golden_codepaths.py --ci            CI's two code paths
    share/scripts/golden_codepaths.py --report FILE   also writes the tables
                                                       as Markdown

Each combination runs the selected ctest cases (default: every case
compared with stored goldens, the goldens' own and the rank-count cases that
use them) with the environment set, then reads each case's run header (which
code path really ran: a kernel set the CPU cannot run is replaced by
OpenBLAS, and the combination is then reported as skipped) and metrics, and
compares them step by step with the case's stored goldens. Exit status: 0
when every case passed under every combination that ran, 1 otherwise, 2 on
usage errors. Python 3 standard library only.
"""

import argparse
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CASES_DIR = os.path.join(ROOT, "tests", "regression", "cases")

# "" = the variable unset: the library picks for this CPU.
OPENBLAS_CORETYPES = ["", "Cooperlake", "SkylakeX", "Haswell", "Zen", "Sandybridge", "Prescott"]
ONEDNN_ISAS = ["", "AVX2", "AVX512_CORE", "AVX512_CORE_VNNI"]
HOST_ISAS = ["native", "portable"]
# CI's two paths, the cheapest that differ (no second build): an AVX2 CPU
# without BF16 (Haswell to Zen 3) and an AVX-512 one without BF16
# (Skylake-SP, Cascade Lake). Their f32 kernels differ from each other and
# from what OpenBLAS picks on CI's CPU, and the oneDNN cap takes BF16 away;
# with the suite's own run, three code paths go through every golden.
CI_PATHS = [("Haswell", "AVX2", "native"), ("SkylakeX", "AVX512_CORE_VNNI", "native")]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.environ.get("FTRAIN_BUILD_DIR", os.path.join(ROOT, "build")),
                   help="the native build (default: $FTRAIN_BUILD_DIR or build, as test.sh)")
    p.add_argument("--portable-build", default=os.path.join(ROOT, "build-portable"),
                   help="the FTRAIN_HOST_ISA=portable build, configured and built here if absent")
    p.add_argument("--ci", action="store_true", help="only CI's two code paths, native build only")
    p.add_argument("--cases", help="ctest -R regex of the cases to run (default: every case compared with "
                   "stored goldens: its own, or its \"reference\"'s)")
    p.add_argument("--coretypes", help="comma-separated OPENBLAS_CORETYPE values ('' = unset; default: "
                   + ",".join(OPENBLAS_CORETYPES) + ")")
    p.add_argument("--onednn-isas", help="comma-separated ONEDNN_MAX_CPU_ISA values ('' = unset; default: "
                   + ",".join(ONEDNN_ISAS) + ")")
    p.add_argument("--host-isas", help="comma-separated FTRAIN_HOST_ISA builds (default: native,portable)")
    p.add_argument("--report", help="write the tables as Markdown to this file")
    p.add_argument("--jobs", default=os.environ.get("FTRAIN_JOBS", str(os.cpu_count() or 1)),
                   help="build jobs for the portable build, and ctest -j")
    return p.parse_args()


def path_label(coretype, onednn_isa, host_isa):
    return (f"OPENBLAS_CORETYPE={coretype or '(unset)'} ONEDNN_MAX_CPU_ISA={onednn_isa or '(unset)'} "
            f"FTRAIN_HOST_ISA={host_isa}")


def ensure_portable_build(args):
    """Configures (once) and builds the targets the regression cases run."""
    build = args.portable_build
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        subprocess.run(["cmake", "--preset", "host", "-B", build, "-DFTRAIN_HOST_ISA=portable",
                        "-DFTRAIN_INTEROP_PYTHON=OFF"], cwd=ROOT, check=True)
    subprocess.run(["cmake", "--build", build, "-j", args.jobs, "--target",
                    "ftrain_exe", "ftrain_prep", "ftrain_plugin_llama"], cwd=ROOT, check=True)


def case_names(build, regex):
    out = subprocess.run(["ctest", "--test-dir", build, "-N", "-R", regex], capture_output=True, text=True,
                         check=True).stdout
    return [m.group(1) for m in re.finditer(r"Test\s+#\d+: (\S+)", out)]


def read_metrics(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                for field, value in record.items():
                    rows.setdefault(field, {})[int(record["step"])] = value
    return rows


def header_facts(log_path):
    """(OpenBLAS kernel set, BF16 route, host ISA) as the run header states them."""
    with open(log_path) as f:
        text = f.read()
    kernels = re.search(r"^host GEMM: f32 OpenBLAS (\S+) kernels", text, re.MULTILINE)
    bf16 = re.search(r"; bf16 (oneDNN|widened)", text)
    isa = re.search(r"^host kernels: built for (\S+)", text, re.MULTILINE)
    return (kernels.group(1) if kernels else "?", bf16.group(1) if bf16 else "?", isa.group(1) if isa else "?")


def run_path(args, build, coretype, onednn_isa, names):
    env = dict(os.environ)
    for name, value in (("OPENBLAS_CORETYPE", coretype), ("ONEDNN_MAX_CPU_ISA", onednn_isa)):
        env.pop(name, None)
        if value:
            env[name] = value
    start = time.monotonic()
    proc = subprocess.run(["ctest", "--test-dir", build, "-R", args.cases, "--output-on-failure", "-j", args.jobs],
                          capture_output=True, text=True, env=env)
    seconds = time.monotonic() - start
    results = {}
    for name in names:
        case = name[len("regression_"):]
        workdir = os.path.join(build, "tests", "regression", "work", case)
        passed = re.search(rf"Test\s+#\d+: {re.escape(name)} \.+\s+Passed", proc.stdout) is not None
        try:
            metrics = read_metrics(os.path.join(workdir, "run_a", "metrics.jsonl"))
            facts = header_facts(os.path.join(workdir, "a.log"))
        except OSError as e:
            metrics, facts = None, ("?", "?", "?")
            print(f"  {case}: no run to read ({e})")
        results[case] = {"passed": passed, "metrics": metrics, "facts": facts}
    return proc, seconds, results


def relative(have, want):
    return abs(have - want) / max(abs(want), 1e-30)


def golden_cases():
    """{case: (its spec, the goldens it is compared with)} for every train
    case compared with stored goldens, its own or its "reference"'s."""
    found = {}
    for file in sorted(os.listdir(CASES_DIR)):
        with open(os.path.join(CASES_DIR, file)) as f:
            spec = json.load(f)
        if spec.get("kind") != "train" or "tolerance" not in spec:
            continue
        if "golden" in spec:
            golden = spec["golden"]
        elif "reference" in spec:
            with open(os.path.join(ROOT, "tests", "regression", spec["reference"])) as f:
                golden = json.load(f)["golden"]
        else:
            continue
        found[file[:-len(".json")]] = (spec, golden)
    return found


def axis(value, default):
    return default if value is None else value.split(",")


def main():
    args = parse_args()
    if args.ci:
        combos = CI_PATHS
    else:
        host_isas = axis(args.host_isas, HOST_ISAS)
        if "portable" in host_isas:
            ensure_portable_build(args)
        combos = list(itertools.product(axis(args.coretypes, OPENBLAS_CORETYPES), axis(args.onednn_isas, ONEDNN_ISAS),
                                        host_isas))
    candidates = golden_cases()
    if args.cases is None:
        args.cases = "^regression_(" + "|".join(candidates) + ")$"
    names = [n for n in case_names(args.build, args.cases) if n[len("regression_"):] in candidates]
    if not names:
        print(f"no golden-compared ctest case matches /{args.cases}/ in {args.build}", file=sys.stderr)
        return 2
    cases = {n[len("regression_"):]: candidates[n[len("regression_"):]] for n in names}

    runs = []  # (label, facts, results) of the combinations that ran as asked
    failures, skipped = [], []
    for coretype, onednn_isa, host_isa in combos:
        label = path_label(coretype, onednn_isa, host_isa)
        build = args.build if host_isa == "native" else args.portable_build
        proc, seconds, results = run_path(args, build, coretype, onednn_isa, names)
        kernels = {r["facts"][0] for r in results.values()}
        if "?" not in kernels and coretype and kernels != {coretype}:
            # OpenBLAS falls back to the CPU's own set when the forced one
            # needs instructions this CPU lacks: not the asked-for path.
            skipped.append(f"{label}: OpenBLAS ran {', '.join(sorted(kernels))} kernels (not on this CPU)")
            print(f"skipped {label}: OpenBLAS ran {', '.join(sorted(kernels))}")
            continue
        facts = sorted({r["facts"] for r in results.values()})
        # A case whose header could not be read did not run as asked: failed.
        verdict = "passed" if all(r["passed"] and "?" not in r["facts"] for r in results.values()) else "FAILED"
        print(f"{verdict} {label} in {seconds:.0f} s: " + " | ".join(
            f"OpenBLAS {k}, bf16 {b}, host ISA {i}" for k, b, i in facts))
        for case, r in results.items():
            if not r["passed"] or "?" in r["facts"]:
                failures.append(f"{case} under {label}")
        if verdict != "passed":
            print(proc.stdout[-6000:])
        runs.append((label, facts, results))

    # Per case and field: the largest difference from the stored goldens over
    # every path and step, and the widest spread between two paths.
    rows = []
    for case, (spec, golden) in cases.items():
        tol = spec.get("tolerance", {})
        ran = [r[case]["metrics"] for _, _, r in runs if r[case]["metrics"]]
        for field in spec["compare"]:
            want = {int(step): float(value) for step, value in golden[field]}
            worst, worst_at, spread = 0.0, "-", 0.0
            for step, value in want.items():
                seen = [float(m[field][step]) for m in ran if step in m.get(field, {})]
                if seen:
                    spread = max(spread, (max(seen) - min(seen)) / max(abs(value), 1e-30))
            for label, _, r in runs:
                metrics = r[case]["metrics"]
                for step, value in want.items():
                    if metrics and step in metrics.get(field, {}):
                        rel = relative(float(metrics[field][step]), value)
                        if rel > worst:
                            worst, worst_at = rel, f"step {step}, {label}"
            bound = float(tol.get("per_field", {}).get(field, tol.get("relative", 0.0)))
            rows.append((case, field, worst, spread, bound, worst_at))

    # Which paths give the same bits: the distinct results this machine can produce.
    groups = {}
    for label, facts, r in runs:
        compared = {case: {field: (x["metrics"] or {}).get(field) for field in cases[case][0]["compare"]}
                    for case, x in sorted(r.items())}
        digest = hashlib.sha256(json.dumps(compared, sort_keys=True).encode()).hexdigest()[:12]
        groups.setdefault(digest, []).append(label)

    lines = [f"{len(runs)} code paths ran ({len(skipped)} skipped), {len(groups)} distinct results, "
             f"{len(cases)} cases each.", "",
             "| case | field | max relative difference from the goldens | spread between paths | tolerance |"
             " where the max was |",
             "| --- | --- | --- | --- | --- | --- |"]
    for case, field, worst, spread, bound, where in rows:
        lines.append(f"| {case} | {field} | {worst:.2e} | {spread:.2e} | {bound:g} | {where} |")
    lines += ["", "Paths giving identical results (bit for bit, every selected case):", ""]
    for digest, labels in groups.items():
        lines.append(f"- {digest}: " + "; ".join(labels))
    if skipped:
        lines += ["", "Skipped:", ""] + [f"- {s}" for s in skipped]
    text = "\n".join(lines)
    print("\n" + text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")
    if failures:
        print(f"\n{len(failures)} failed: " + "; ".join(failures))
        return 1
    if not runs:
        print("\nno code path ran as asked on this CPU")
        return 1
    print(f"\nall {len(names)} cases passed under {len(runs)} code paths")
    return 0


if __name__ == "__main__":
    sys.exit(main())
