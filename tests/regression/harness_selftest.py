#!/usr/bin/env python3
"""Self-test of run_case.py: runs it on a case that must FAIL and checks
that it does, for the stated reason.

A harness that passes whatever it is given proves nothing, so each file in
selftest/*.json is a broken case (a typo'd compared field, a reference that
really differs, an unmet "expect" bound, ...) with a "selftest" block:

    "selftest": {"must_fail_with": "REGEX"}

This script runs run_case.py on the file with the arguments given after the
case; it passes only when run_case.py exits 1 (a case failure, not a harness
error: 2, or a Python traceback) and one of its "FAIL: " lines matches REGEX.
Python 3 standard library only. Exit status: 0 pass, 1 fail.
"""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) < 2:
        print(f"usage: {sys.argv[0]} SELFTEST_CASE.json RUN_CASE_ARGS...", file=sys.stderr)
        return 1
    case_path, runner_args = sys.argv[1], sys.argv[2:]
    with open(case_path) as f:
        pattern = json.load(f)["selftest"]["must_fail_with"]
    cmd = [sys.executable, os.path.join(HERE, "run_case.py"), case_path, *runner_args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout + proc.stderr)
    failures = [line for line in proc.stdout.splitlines() if line.startswith("FAIL: ")]
    problems = []
    if proc.returncode != 1:
        problems.append(f"run_case.py exited {proc.returncode}; a failing case must exit 1")
    if "Traceback" in proc.stderr:
        problems.append("run_case.py crashed (traceback) instead of failing the case")
    if not any(re.search(pattern, line) for line in failures):
        problems.append(f"no 'FAIL: ' line matches /{pattern}/")
    for problem in problems:
        print("SELFTEST FAIL: " + problem)
    print("SELFTEST FAILED" if problems else f"SELFTEST PASSED: the harness rejected the case (/{pattern}/)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
