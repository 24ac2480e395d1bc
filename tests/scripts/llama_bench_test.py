#!/usr/bin/env python3
"""What share/bench/gpu_llama.sh computes without a GPU, checked on the host.

  llama_bench_test.py plan  --repo R --ftrain F --prep P --sim-device LIB --workdir W
  llama_bench_test.py torch --repo R --ftrain F --prep P --workdir W

plan (no torch): FLOPs per token and parameters of Llama 3.2 1B / 3B against
values computed by hand here; the four decks the benchmark writes (1B/3B x
bf16/fp8) pass `ftrain --check --device-memory 80GB` with `device cuda` on
the simulated device (tests/support/sim_device_backend.cpp), and ftrain's
plan has the same parameter count and FLOPs per step as the benchmark's
arithmetic, fits, and leaves at least the activations + logits the
arithmetic expects; the summary's PASS / FAIL / NOT JUDGED wording against
the three targets on made-up rows.

torch (exit 77 = skipped when this python has no torch): the PyTorch model
of pytorch_llama_gpu.py built on the CPU with a tiny config (head_dim apart
from hidden / heads, GQA) has exactly ftrain's parameter count for the same
config (ftrain --check); the FP8 autograd Function's forward, dgrad and
wgrad on the CPU against the f32 products: within FP8's rounding with
torch's float8 dtypes (torch >= 2.1), else with float32 standing in for them
(scales paired with the right operands, the right products; not the memory
layouts torch._scaled_mm needs on the GPU).
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from ftrain_test import fail  # noqa: E402

SKIP = 77


def run(cmd, env=None, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


def check(cond, what):
    if not cond:
        fail(f"{what}")
    print(f"ok: {what}")


def plan_field(out, name):
    m = re.search(rf"^\s*{name}\s+(\S+)", out, re.M)
    if not m:
        fail(f"no '{name}' line in ftrain --check's output:\n{out}")
    return float(m.group(1))


def test_plan(a, plan):
    # Hand-computed (share/bench/gpu_llama.sh header):
    # 1B: per layer 2048 x (2 x 2048 + 2 x 512) + 3 x 2048 x 8192 = 60,817,408; x 16 = 973,078,528;
    #     + 128256 x 2048 = 262,668,288 -> 1,235,746,816 matmul params; 6 x = 7,414,480,896;
    #     attention 12 x 16 x 2048 x 4096 = 1,610,612,736 -> 9,025,093,632 FLOPs per token.
    #     Parameters: + (2 x 16 + 1) x 2048 norm weights = 1,235,814,400.
    # 3B: per layer 3072 x (2 x 3072 + 2 x 1024) + 3 x 3072 x 8192 = 100,663,296; x 28 = 2,818,572,288;
    #     + 128256 x 3072 = 394,002,432 -> 3,212,574,720; 6 x = 19,275,448,320;
    #     attention 12 x 28 x 3072 x 4096 = 4,227,858,432 -> 23,503,306,752 FLOPs per token.
    #     Parameters: + (2 x 28 + 1) x 3072 = 3,212,749,824.
    want = {"1b": (9_025_093_632, 1_235_814_400), "3b": (23_503_306_752, 3_212_749_824)}
    for name, (flops, params) in want.items():
        m = plan.MODELS[name]
        check(plan.flops_per_token(m) == flops, f"{name} FLOPs per token {plan.flops_per_token(m)} == {flops}")
        check(plan.parameters(m) == params, f"{name} parameters {plan.parameters(m)} == {params}")

    os.makedirs(a.workdir, exist_ok=True)
    data = os.path.join(a.workdir, "corpus.tok")
    run([a.prep, "synthetic", "--out", data, "--tokens", "100000", "--vocab", "65536", "--seed", "11"])
    env = dict(os.environ, FTRAIN_CUDA_BACKEND=a.sim_device)
    for name in plan.MODELS:
        micro, ckpt = plan.SETTINGS[name]
        for precision, peak in (("bf16", 989.0), ("fp8", 1979.0)):
            deck = os.path.join(a.workdir, f"llama{name}_{precision}.in")
            with open(deck, "w") as f:
                f.write(plan.deck(name, precision, data, os.path.join(a.workdir, f"run_{name}_{precision}"), 12, peak))
            out = run([a.ftrain, "--check", "--device-memory", "80GB", deck], env=env, cwd=a.workdir)
            what = f"{name} {precision} deck"
            check(re.search(r"device: cuda .*simulated device", out) is not None, f"{what}: checked with device cuda")
            check(f"precision {precision}" in out and f"activation_checkpointing {ckpt}" in out,
                  f"{what}: precision {precision}, activation_checkpointing {ckpt}")
            check(plan_field(out, "parameters") == plan.parameters(plan.MODELS[name]),
                  f"{what}: ftrain's parameter count equals the benchmark's")
            per_step = plan.flops_per_token(plan.MODELS[name]) * micro * plan.SEQ
            got = plan_field(out, "FLOPs per step")  # printed with 4 significant digits
            check(abs(got - per_step) <= 5e-4 * per_step, f"{what}: ftrain's FLOPs per step {got:.4g} == {per_step:.4g}")
            # The fit counts ftrain's activation estimate; it must agree with the
            # arithmetic's activations (the same block tensors; ftrain adds the
            # softmax statistics and one vocab_chunk of f32 logits and gradient).
            fit = re.search(r"fit on .* = ([0-9.]+) GiB per rank \(\d+%\), ([0-9.]+) GiB left", out)
            check(fit is not None and "DOES NOT FIT" not in out, f"{what}: fits an 80 GB device")
            estimate = re.search(r"^  activations +([0-9.]+) GiB per micro batch", out, re.M)
            parts = plan.memory_bytes(plan.MODELS[name], micro, ckpt)
            arithmetic = parts["activations (bf16)"] / plan.GIB
            check(estimate is not None and arithmetic <= float(estimate.group(1)) <= 1.15 * arithmetic,
                  f"{what}: ftrain's activation estimate {estimate and estimate.group(1)} GiB is the arithmetic's "
                  f"{arithmetic:.2f} GiB to 15% above")

    # The rows the script collects: ftrain's from a real (tiny, host) run's metrics.jsonl, PyTorch's from
    # pytorch_llama_gpu.py's JSON line, its "unavailable" line, and output that is no JSON at all.
    tiny_data = os.path.join(a.workdir, "tiny.tok")
    run([a.prep, "synthetic", "--out", tiny_data, "--tokens", "4000", "--vocab", "256", "--seed", "1"])
    tiny_run = os.path.join(a.workdir, "tiny_run")
    tiny_deck = os.path.join(a.workdir, "tiny.in")
    with open(tiny_deck, "w") as f:
        f.write("model llama preset tiny vocab_size 256\n"
                f"data tokens {tiny_data}\nbatch micro 1 seq_len 32\nmax_steps 6\nlog every 1\nrun_dir {tiny_run}\n")
    log = run([a.ftrain, tiny_deck], cwd=a.workdir)
    metrics = open(os.path.join(tiny_run, "metrics.jsonl")).readlines()
    row = plan.ftrain_row("1b", "bf16", metrics, log)
    steps = [json.loads(line) for line in metrics if '"loss"' in line]
    want = 32 / (sum(r["step_time_s"] for r in steps[3:]) / 3)  # steps 4-6, 32 tokens each
    check(len(steps) == 6 and abs(row["tokens_per_s"] - want) <= 1e-9 * want,
          f"ftrain row: tokens/s {row['tokens_per_s']:.1f} = 32 tokens / mean step time of steps 4-6")
    check(plan.ftrain_row("1b", "bf16", metrics[:3], "")["tokens_per_s"] is None,
          "ftrain row: a run with no step after the warm-up has no tokens/s")
    good = json.dumps({"tokens_per_s": 51234.5, "peak_memory_gib": 40.25, "baseline": "torch 2.5 sdpa, eager"})
    row = plan.pytorch_row("3b", "fp8", "pytorch eager", "compile chatter\n" + good + "\n")
    check(row["tokens_per_s"] == 51234.5 and "peak memory 40.2 GiB; torch 2.5 sdpa, eager" in row["note"],
          "pytorch row: tokens/s and note from the last JSON line")
    row = plan.pytorch_row("3b", "fp8", "pytorch compiled", json.dumps({"unavailable": "no _scaled_mm"}))
    check(row["tokens_per_s"] is None and row["note"] == "UNAVAILABLE: no _scaled_mm", "pytorch row: unavailable")
    row = plan.pytorch_row("3b", "fp8", "pytorch compiled", "Traceback ...")
    check(row["tokens_per_s"] is None and "no JSON result line" in row["note"], "pytorch row: no JSON")

    rows = [
        {"model": "1b", "precision": "bf16", "framework": "ftrain", "tokens_per_s": 62000.0, "note": ""},
        {"model": "1b", "precision": "fp8", "framework": "ftrain", "tokens_per_s": 74400.0, "note": ""},
        {"model": "1b", "precision": "bf16", "framework": "pytorch compiled", "tokens_per_s": 50000.0, "note": ""},
        {"model": "1b", "precision": "fp8", "framework": "pytorch compiled", "tokens_per_s": None,
         "note": "UNAVAILABLE: torch 2.0 has no torch._scaled_mm"},
    ]
    lines = "\n".join(plan.summary(rows, 989.0, 1979.0))
    print(lines)
    # 62000 tokens/s x 9.025 GFLOP = 559.6 TFLOP/s = 56.6% of 989
    check("llama3.2-1b ftrain bf16 MFU: 56.6%, target >= 55%: PASS" in lines, "summary: bf16 MFU judged PASS")
    check("llama3.2-1b ftrain FP8/BF16 tokens/s: 1.20x, target >= 1.3x: FAIL" in lines, "summary: FP8/BF16 FAIL")
    check("llama3.2-1b bf16 ftrain/PyTorch-compiled tokens/s: 1.24x, target >= 1.2x: PASS" in lines,
          "summary: ftrain/compiled PASS")
    check("fp8 ftrain/PyTorch-compiled tokens/s: not measured (UNAVAILABLE: torch 2.0 has no torch._scaled_mm)"
          in lines and "NOT JUDGED" in lines, "summary: a row that did not run is not judged and says why")
    check("llama3.2-3b" not in lines, "summary: a model without rows is left out")
    # fp8 MFU against the fp8 peak: 74400 x 9.025e9 / 1979e12 = 33.9%
    check(re.search(r"llama3.2-1b\s+fp8\s+ftrain\s+74400\s+671.5\s+33.9%", lines) is not None,
          "summary: fp8 MFU against the fp8 peak")
    # The exit status: a row that crashed fails the benchmark, an UNAVAILABLE one or a missed target does not.
    results = os.path.join(a.workdir, "results.jsonl")
    for extra, want_rc in (([], 0), ([plan.failed_row("1b", "fp8", "pytorch eager", "FAILED: CUDA out of memory")], 1)):
        with open(results, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows + extra)
        rc = subprocess.run([sys.executable, plan.__file__, "summary", results, "989", "1979"],
                            capture_output=True).returncode
        check(rc == want_rc, f"summary exits {want_rc} with {len(extra)} FAILED row(s) (got {rc})")


def check_fp8_function(torch, pt, forward_tol, backward_tol):
    """Fp8LinearFunction on the CPU (pytorch_llama_gpu.scaled_mm's host path) against the f32 products.
    Operands of very different magnitudes, so a scale paired with the wrong operand shows."""
    torch.manual_seed(0)
    x = (3.0 * torch.randn(4, 16, 64)).requires_grad_()
    w = (0.01 * torch.randn(48, 64)).requires_grad_()
    dy = 1e-3 * torch.randn(4, 16, 48)
    y = pt.Fp8LinearFunction.apply(x, w)
    y.float().backward(dy)
    xd, wd = x.detach(), w.detach()
    dy = dy.bfloat16().float()  # what reaches the Function: y is bf16, so is its gradient

    def rel(a_, b_):
        return float((a_.float() - b_).norm() / b_.norm())

    ref_dw = dy.reshape(-1, 48).t() @ xd.reshape(-1, 64)
    check(y.shape == (4, 16, 48) and y.dtype == torch.bfloat16, "FP8 forward: bf16 output of x w^T's shape")
    # bf16 output: its own rounding (2^-9) counts too
    check(rel(y, xd @ wd.t()) < max(forward_tol, 4e-3), f"FP8 forward = x w^T ({rel(y, xd @ wd.t()):.2e})")
    check(rel(x.grad, dy @ wd) < max(backward_tol, 4e-3), f"FP8 dgrad = dy w ({rel(x.grad, dy @ wd):.2e})")
    check(rel(w.grad, ref_dw) < backward_tol, f"FP8 wgrad = dy^T x, f32 ({rel(w.grad, ref_dw):.2e})")
    check(w.grad.dtype == torch.float32 and x.grad.shape == x.shape and x.grad.dtype == x.dtype,
          "gradients in the operands' dtypes and shapes")


def test_torch(a, plan):
    try:
        import torch
    except ImportError as e:
        print(f"SKIP: this python ({sys.executable}) has no torch: {e}")
        return SKIP
    sys.path.insert(0, os.path.join(a.repo, "share", "bench"))
    import pytorch_llama_gpu as pt

    os.makedirs(a.workdir, exist_ok=True)
    data = os.path.join(a.workdir, "tiny.tok")
    run([a.prep, "synthetic", "--out", data, "--tokens", "4000", "--vocab", "256", "--seed", "1"])
    tiny = ["--vocab", "256", "--hidden", "64", "--intermediate", "96", "--layers", "2", "--heads", "4",
            "--kv-heads", "2", "--head-dim", "32", "--seq", "32"]
    deck = os.path.join(a.workdir, "tiny.in")
    with open(deck, "w") as f:
        f.write("model llama preset llama3.2-1b vocab_size 256 hidden_size 64 intermediate_size 96 &\n"
                "      num_hidden_layers 2 num_attention_heads 4 num_key_value_heads 2 head_dim 32\n"
                f"data tokens {data}\nbatch micro 1 seq_len 32\nmax_steps 1\n")
    ftrain_params = plan_field(run([a.ftrain, "--check", deck], cwd=a.workdir), "parameters")
    for precision in ("bf16", "fp8"):
        model = pt.Llama(pt.parse_args(tiny + ["--precision", precision]))
        n = sum(p.numel() for p in model.parameters())
        check(n == ftrain_params, f"PyTorch {precision} model parameters {n} == ftrain's {ftrain_params:.0f}")
        check(n == plan.parameters(pt.shape_of(pt.parse_args(tiny))), "and == llama_bench_plan.parameters")

    why = pt.fp8_unavailable_reason(torch.device("cpu"))
    if why and not hasattr(torch, "float8_e4m3fn"):
        # No float8 dtypes: float32 stands in for both formats (no rounding), which still checks which scale
        # goes with which operand, which product each pass computes, shapes and dtypes, to f32 accuracy.
        # Not the row/column-major layouts torch._scaled_mm demands: the host path multiplies logical values.
        print(f"FP8 autograd Function: {why}; checking its scaling and layouts with float32 standing in for "
              "E4M3/E5M2 (the FP8 grid itself is not checked here)")
        torch.float8_e4m3fn = torch.float8_e5m2 = torch.float32
        try:
            check_fp8_function(torch, pt, forward_tol=1e-5, backward_tol=1e-5)
        finally:
            del torch.float8_e4m3fn, torch.float8_e5m2
        return 0
    if why:
        print(f"SKIP (FP8 autograd Function on the CPU): {why}")
        return 0
    # E4M3 keeps 3 mantissa bits (relative step 2^-4 at worst, ~2^-5.5 rms), E5M2 2 bits.
    check_fp8_function(torch, pt, forward_tol=0.06, backward_tol=0.12)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("part", choices=("plan", "torch"))
    p.add_argument("--repo", required=True)
    p.add_argument("--ftrain", required=True)
    p.add_argument("--prep", required=True)
    p.add_argument("--sim-device")
    p.add_argument("--workdir", required=True)
    a = p.parse_args()
    sys.path.insert(0, os.path.join(a.repo, "share", "bench"))
    import llama_bench_plan as plan
    if a.part == "plan":
        test_plan(a, plan)
        return 0
    return test_torch(a, plan)


if __name__ == "__main__":
    sys.exit(main())
