#!/usr/bin/env python3
"""Unit tests of run_case.py's metric checks on hand-written metrics.jsonl
files: the cases no real ftrain run produces (a field missing at one step
only, a field in some rows of a kind but not others), so the selftest/
cases, which run ftrain, cannot reach them. Python 3 standard library only.
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_case  # noqa: E402


def metrics_of(lines):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    try:
        return run_case.read_metrics(f.name)
    finally:
        os.unlink(f.name)


COMPLETE = [
    '{"step": 0, "eval_loss": 4.2, "eval_tokens": 100}',
    '{"step": 1, "loss": 4.1, "grad_norm": 1.0, "recomputed_units_per_step": 2}',
    '{"step": 2, "loss": 4.0, "grad_norm": 0.9, "recomputed_units_per_step": 2}',
    '{"step": 2, "eval_loss": 4.0, "eval_tokens": 100}',
]


class MissingSteps(unittest.TestCase):
    def test_complete_log_has_no_problem(self):
        m = metrics_of(COMPLETE)
        for field in ("loss", "grad_norm", "eval_loss"):
            self.assertEqual(run_case.missing_steps(m, field, "run"), [], field)

    def test_typo_is_reported(self):
        problems = run_case.missing_steps(metrics_of(COMPLETE), "grad_nrom", "run")
        self.assertEqual(len(problems), 1)
        self.assertIn("grad_nrom: not in run's metrics at any step", problems[0])

    def test_field_missing_at_one_training_step(self):
        lines = list(COMPLETE)
        lines[2] = '{"step": 2, "loss": 4.0, "recomputed_units_per_step": 2}'
        problems = run_case.missing_steps(metrics_of(lines), "grad_norm", "run")
        self.assertEqual(len(problems), 1)
        self.assertIn("grad_norm: missing at step 2 of run", problems[0])

    def test_eval_field_missing_at_one_evaluation_step(self):
        lines = list(COMPLETE)
        lines[3] = '{"step": 2, "eval_tokens": 100}'
        problems = run_case.missing_steps(metrics_of(lines), "eval_loss", "run")
        self.assertEqual(len(problems), 1)
        self.assertIn("eval_loss: missing at step 2 of run", problems[0])

    def test_training_field_is_not_required_in_evaluation_rows(self):
        # step 0 has only an evaluation row: loss is not missing there.
        self.assertEqual(run_case.missing_steps(metrics_of(COMPLETE), "loss", "run"), [])


class Expectations(unittest.TestCase):
    def test_bounds_met(self):
        self.assertEqual(run_case.check_expectations(metrics_of(COMPLETE),
                                                     {"recomputed_units_per_step": {"min": 2, "max": 2}}), [])

    def test_bound_violated_names_field_step_and_bound(self):
        problems = run_case.check_expectations(metrics_of(COMPLETE), {"recomputed_units_per_step": {"max": 0}})
        self.assertEqual(problems[0], "recomputed_units_per_step step 1: 2 > expected max 0")

    def test_expected_field_missing_at_a_step(self):
        lines = list(COMPLETE)
        lines[1] = '{"step": 1, "loss": 4.1, "grad_norm": 1.0}'
        problems = run_case.check_expectations(metrics_of(lines), {"recomputed_units_per_step": {"min": 1}})
        self.assertIn("recomputed_units_per_step: missing at step 1", problems[0])

    def test_unknown_bound_is_a_case_error(self):
        with self.assertRaises(run_case.CaseFailure):
            run_case.check_expectations(metrics_of(COMPLETE), {"loss": {"maximum": 1}})


class Compare(unittest.TestCase):
    def test_difference_beyond_tolerance_and_largest(self):
        m = metrics_of(COMPLETE)
        problems, largest = run_case.compare_with_golden(m, {"loss": [[1, 4.1], [2, 4.4]]}, 1e-5, "ref")
        self.assertEqual(len(problems), 1)
        self.assertIn("loss step 2", problems[0])
        self.assertAlmostEqual(largest, 0.4 / 4.4)

    def test_empty_golden_field_fails(self):
        problems, _ = run_case.compare_with_golden(metrics_of(COMPLETE), {"loss": []}, 1e-5, "ref")
        self.assertIn("loss: ref has no value of it at any step", problems[0])

    def test_per_field_bound_replaces_the_case_bound_for_that_field_only(self):
        m = metrics_of(COMPLETE)
        golden = {"loss": [[1, 4.1], [2, 4.0 * (1 + 1e-10)]], "grad_norm": [[1, 1.0], [2, 0.9 * (1 + 1e-10)]]}
        problems, _ = run_case.compare_with_golden(m, golden, 0.0, "ref", {"grad_norm": 1e-9})
        self.assertEqual(len(problems), 1)
        self.assertIn("loss step 2", problems[0])
        problems, _ = run_case.compare_with_golden(m, golden, 0.0, "ref", {"grad_norm": 1e-11})
        self.assertEqual(len(problems), 2)

    def test_per_field_bound_for_a_field_not_compared_fails(self):
        problems, _ = run_case.compare_with_golden(metrics_of(COMPLETE), {"loss": [[1, 4.1], [2, 4.0]]}, 0.0,
                                                   "ref", {"grad_nrom": 1e-9})
        self.assertEqual(len(problems), 1)
        self.assertIn("grad_nrom", problems[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
