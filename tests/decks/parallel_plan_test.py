#!/usr/bin/env python3
"""`ftrain --check` of tensor and context parallelism against numbers
computed here, from the model's published shapes, not from ftrain's output.

    parallel_plan_test.py --repo R --ftrain F --prep P --workdir W

  * inputs/llama70b_tp8.in (Llama 2 70B, 16 ranks = 2 nodes x 8, parallel
    tensor 8, FSDP over the 2 nodes): each rank's parameters (1/8 of every
    matrix + the norms), its sharded f32 state and gathered units, its
    activations (Korthikanti et al. 2022: every term / T with sequence
    parallelism) and the bytes each group sends per step; against -var
    tensor 1 (pure FSDP over 16) each rank's parameters, gathered units and
    activations fall by ~8 and the sharded state per rank stays (1/16 of the
    model either way); against T 1 x FSDP 2 the state per rank falls by ~8.
  * The 70B recipe at seq_len 8192 with parallel tensor 8 context 2 on the
    same 16 ranks: the state per rank stays, the activations per rank fall
    by ~2 against context 1, each equal to the count here.
  * Llama 3 8B at seq_len 8192 on 8 ranks with parallel context C = 2 and 4:
    the activations per rank fall by ~C against C = 1, each equal to the
    count here (seq_len / C tokens per rank plus the ring's 2 K/V blocks),
    and the ring's K/V bytes.
  * Refusals: tensor 16 (8 KV heads), context 3 at seq_len 8192 (not
    divisible by 6), a tensor group across nodes; each names the deck line.
  * The fit advice: pure FSDP of the recipe on 80GiB does not fit and is
    told `parallel tensor T`, and that T fits.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import safetensors_stand_in  # noqa: E402

GIB = 1024.0 ** 3
# Llama 2 70B (Hugging Face config.json of meta-llama/Llama-2-70b-hf).
LLAMA2_70B = dict(vocab=32000, hidden=8192, inter=28672, layers=80, heads=64, kv_heads=8, head_dim=128, tied=False)
# Llama 3 8B (meta-llama/Meta-Llama-3-8B).
LLAMA3_8B = dict(vocab=128256, hidden=4096, inter=14336, layers=32, heads=32, kv_heads=8, head_dim=128, tied=False)

FAILURES = []


def check(condition, message):
    if condition:
        print("ok:", message)
    else:
        FAILURES.append(message)
        print("FAIL:", message, file=sys.stderr)


def units(m, tensor):
    """Each FSDP unit's parameters as one tensor rank holds them: the
    matrices (q, k, v, o, gate, up, down, embedding, head) / T, the norm
    weights whole."""
    h, q, kv, f, v = m["hidden"], m["heads"] * m["head_dim"], m["kv_heads"] * m["head_dim"], m["inter"], m["vocab"]
    block_matrices = q * h + 2 * kv * h + h * q + 3 * f * h
    out = [v * h // tensor]
    out += [block_matrices // tensor + 2 * h] * m["layers"]
    out.append((0 if m["tied"] else v * h // tensor) + h)
    return out


def state_bytes(m, tensor, shard_group):
    return sum(16 * -(-u // shard_group) for u in units(m, tensor))


def gathered_bytes(m, tensor, shard_group, limit_all_gathers=2, param_bytes=2):
    largest = max(units(m, tensor))
    return (limit_all_gathers * largest * param_bytes if shard_group > 1 else 0) + 4 * largest


def activation_bytes(m, tensor, context, seq_len, micro, checkpointed, vocab_chunk=4096, element=2):
    """One rank's activations per micro batch: per block the input, the two
    norms' outputs, q, k, v, the attention output and the MLP's 4 tensors
    (compute dtype) and the softmax statistics (f32), all / T under sequence
    parallelism, for seq_len / C tokens; the head's f32 logits and gradient
    for a vocab_chunk of the vocabulary split over the T ranks; on the ring 2
    K/V blocks in flight and the backward's f32 dQ and six key-sized dK/dV
    buffers. Checkpointed: every block keeps its input, one is recomputed."""
    h, f = m["hidden"], m["inter"]
    q, kv = m["heads"] * m["head_dim"], m["kv_heads"] * m["head_dim"]
    tokens = seq_len / context
    block = tokens * (3 * h + q + 2 * kv + q + 4 * f) / tensor * element + 4 * tokens * m["heads"] / tensor
    block_input = tokens * h / tensor * element
    head = 4 * 2 * tokens * min(m["vocab"], vocab_chunk) / tensor
    ring = (2 * tokens * 2 * kv / tensor * element + 4 * tokens * (q + 6 * kv) / tensor) if context > 1 else 0
    layers = m["layers"]
    kept = block_input * layers + block if checkpointed else block * layers
    return micro * (kept + head + ring)


def gib(text):
    number, unit = text.split()
    return float(number) * {"GiB": GIB, "MiB": 1024.0 ** 2, "KiB": 1024.0}[unit]


def field(pattern, out, what):
    found = re.search(pattern, out)
    if not found:
        FAILURES.append(f"{what}: /{pattern}/ not in the output")
        print(out, file=sys.stderr)
        raise SystemExit(report())
    return found


def close(printed, expected, what, rel=0.0, absolute=0.0):
    """Printed values are rounded (2 decimals of GiB): within that."""
    ok = abs(printed - expected) <= max(rel * abs(expected), absolute)
    check(ok, f"{what}: printed {printed / GIB:.4f} GiB, computed here {expected / GIB:.4f} GiB")


def report():
    if FAILURES:
        print(f"{len(FAILURES)} failure(s):", file=sys.stderr)
        for f in FAILURES:
            print("  -", f, file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    a.repo, a.ftrain, a.prep, a.workdir = (os.path.abspath(x) for x in (a.repo, a.ftrain, a.prep, a.workdir))
    os.makedirs(a.workdir, exist_ok=True)
    train, evalf = os.path.join(a.workdir, "train.tok"), os.path.join(a.workdir, "eval.tok")
    subprocess.run([a.prep, "synthetic", "--out", train, "--tokens", "20000", "--vocab", "256", "--seed", "7",
                    "--eval-out", evalf, "--eval-tokens", "4096"], check=True, stdout=subprocess.DEVNULL)
    weights = os.path.join(a.workdir, "stand_in.safetensors")
    recipe = os.path.join(a.repo, "inputs", "llama70b_tp8.in")
    stand_ins = ["-var", "hf_weights", weights, "-var", "train_tokens", train, "-var", "eval_tokens", evalf,
                 "-var", "run_dir", os.path.join(a.workdir, "run")]
    safetensors_stand_in.write_stand_in(weights, [a.ftrain, "--check", *stand_ins, recipe], cwd=a.workdir)

    def run(*args, expect_ok=True):
        p = subprocess.run([a.ftrain, "--check", *args], cwd=a.workdir, capture_output=True, text=True, timeout=120)
        out = p.stdout + p.stderr
        if expect_ok and p.returncode != 0:
            FAILURES.append(f"ftrain --check {' '.join(args)}: exit {p.returncode}")
            print(out, file=sys.stderr)
            raise SystemExit(report())
        return p.returncode, out

    def plan_70b(tensor, *extra):
        return run("--ranks", "16", "--ranks-per-node", "8", *extra, *stand_ins, "-var", "tensor", str(tensor), recipe)[1]

    # --- Llama 2 70B, tensor 8 x FSDP 2 against pure FSDP over 16 ----------
    m = LLAMA2_70B
    per_rank = {}
    for tensor in (8, 1):
        out = plan_70b(tensor)
        fsdp = 16 // tensor
        state = field(r"memory per rank\s+([0-9.]+ \w+) sharded state .*?\+ ([0-9.]+ \w+) gathered", out, "memory line")
        close(gib(state.group(1)), state_bytes(m, tensor, fsdp), f"T {tensor}: sharded f32 state per rank",
              absolute=0.006 * GIB)
        close(gib(state.group(2)), gathered_bytes(m, tensor, fsdp), f"T {tensor}: gathered units in flight",
              absolute=0.006 * GIB)
        activations = field(r"activations\s+([0-9.]+ \w+) per micro batch of 4", out, "activations line")
        close(gib(activations.group(1)), activation_bytes(m, tensor, 1, 2048, 4, True),
              f"T {tensor}: activations per micro batch of 4 (checkpointed)", rel=0.005)
        comm = field(r"communication\s+sent per rank and step: fsdp ([0-9.]+ \w+) \(parameter all-gathers "
                     r"([0-9.]+ \w+), gradient reductions ([0-9.]+ \w+)", out, "communication line")
        shards = sum(-(-u // fsdp) for u in units(m, tensor))
        micro_steps = 2
        close(gib(comm.group(2)), micro_steps * 2 * (fsdp - 1) * shards * 2,
              f"T {tensor}: FSDP all-gathers per step (bf16, forward + backward, 2 micro-steps)", rel=0.005)
        close(gib(comm.group(3)), micro_steps * (fsdp - 1) * shards * 4,
              f"T {tensor}: FSDP reduce-scatters per step (f32, 2 micro-steps)", rel=0.005)
        per_rank[tensor] = (gib(state.group(1)), gib(state.group(2)), gib(activations.group(1)), out)

    out8 = per_rank[8][3]
    slice_params = sum(units(m, 8))
    check(f"per tensor rank   {slice_params} (" in out8,
          f"T 8: each tensor rank holds {slice_params} parameters (1/8 of the matrices + the norms)")
    check("grid              data 2 x context 1 x tensor 8 (16 ranks)" in out8, "T 8: the grid is data 2 x tensor 8")
    check("ranks             16, shard group 2, replicas 1" in out8, "T 8: FSDP shards each slice over 2 ranks")
    check("global batch      16 samples, 32768 tokens per step" in out8,
          "T 8: 2 data-parallel ranks x micro 4 x accumulate 2 = 16 samples")
    tensor_comm = field(r"; tensor ([0-9.]+ \w+) \((\d+) sequence-parallel", out8, "tensor traffic")
    collectives = 2 * (8 * m["layers"] + 4 * m["layers"] + 4)  # forward, backward, recompute + embedding/head; 2 micro
    check(int(tensor_comm.group(2)) == collectives, f"T 8: {collectives} sequence-parallel collectives per step")
    close(gib(tensor_comm.group(1)), collectives * 7 / 8 * 4 * 2048 * m["hidden"] * 2,
          "T 8: tensor group bytes per step", rel=0.005)
    # Each rank's own parameters (before FSDP shards them) and what it
    # gathers fall by ~8 (the norms stay whole); on the same 16 ranks the
    # sharded state is 1/16 of the model either way (8 x 2 or 1 x 16).
    slice_t1 = int(field(r"parameters\s+(\d+) ", per_rank[1][3], "parameters line").group(1))
    ratio = slice_t1 / slice_params
    check(7.99 < ratio <= 8.0, f"T 8 lowers each rank's parameters by {ratio:.4f} (~8) against T 1")
    check("per tensor rank" not in per_rank[1][3], "T 1 prints no per-tensor-rank line")
    ratio = per_rank[1][1] / per_rank[8][1]
    check(7.9 < ratio <= 8.01, f"T 8 lowers the gathered units in flight by {ratio:.3f} (~8) against T 1")
    ratio = per_rank[1][0] / per_rank[8][0]
    check(0.999 < ratio < 1.001, f"on 16 ranks the sharded state per rank is the same at T 8 and T 1 ({ratio:.4f})")
    ratio = per_rank[1][2] / per_rank[8][2]
    check(7.95 < ratio <= 8.05, f"T 8 lowers the activations per rank by {ratio:.3f} (~8) against T 1")
    # With the same FSDP group (2 ranks), T 8 holds 1/8 of the state per rank.
    out = run("--ranks", "2", "--ranks-per-node", "2", *stand_ins, "-var", "tensor", "1", recipe)[1]
    fsdp2 = gib(field(r"memory per rank\s+([0-9.]+ \w+) sharded state", out, "memory line").group(1))
    close(fsdp2, state_bytes(m, 1, 2), "T 1 x FSDP 2: sharded f32 state per rank", absolute=0.006 * GIB)
    ratio = fsdp2 / per_rank[8][0]
    check(7.99 < ratio <= 8.0, f"T 8 x FSDP 2 holds {ratio:.4f}x (~8) less state per rank than T 1 x FSDP 2")

    # --- The 70B recipe at 8192 tokens: tensor 8 x context 2 against
    # tensor 8 x context 1 on the same 16 ranks. The fsdp group stays 2
    # ranks (data 2 x context 1 or data 1 x context 2), so the state per rank
    # stays; each rank's activations per micro batch fall by ~C.
    per_context = {}
    for context in (1, 2):
        out = plan_70b(8, "-var", "context", str(context), "-var", "seq_len", "8192")
        check(f"grid              data {2 // context} x context {context} x tensor 8 (16 ranks)" in out,
              f"70B, T 8, C {context}: the grid is data {2 // context} x context {context} x tensor 8")
        state = gib(field(r"memory per rank\s+([0-9.]+ \w+) sharded state", out, "memory line").group(1))
        close(state, state_bytes(m, 8, 2), f"70B, T 8, C {context}, seq_len 8192: sharded f32 state per rank",
              absolute=0.006 * GIB)
        got = gib(field(r"activations\s+([0-9.]+ \w+) per micro batch of 4", out, "activations line").group(1))
        close(got, activation_bytes(m, 8, context, 8192, 4, True),
              f"70B, T 8, C {context}, seq_len 8192: activations per rank per micro batch of 4 (checkpointed)",
              rel=0.005)
        per_context[context] = got
    r = per_context[1] / per_context[2]
    check(0.95 * 2 < r <= 2.0, f"70B at seq_len 8192: context 2 lowers the activations per rank by {r:.3f} (~2)")

    # --- Llama 3 8B at 8192 tokens: context 2 and 4 against 1 -----------
    deck = os.path.join(a.workdir, "llama3_8b_8192.in")
    with open(deck, "w") as f:
        f.write("variable context 1\nmodel llama preset llama3-8b\nprecision bf16\n"
                f"data tokens {train}\nbatch micro 1 seq_len 8192\nparallel context ${{context}}\n"
                "fsdp full_shard param_dtype bf16 reduce_dtype fp32\nmax_steps 10\n")
    m = LLAMA3_8B
    activations = {}
    for context in (1, 2, 4):
        out = run("--ranks", "8", "--ranks-per-node", "8", "-var", "context", str(context), deck)[1]
        got = gib(field(r"activations\s+([0-9.]+ \w+) per micro batch of 1", out, "activations line").group(1))
        close(got, activation_bytes(m, 1, context, 8192, 1, False),
              f"Llama 3 8B, seq_len 8192, C {context}: activations per rank", rel=0.005)
        activations[context] = got
        if context > 1:
            ring = field(r"; context ring ([0-9.]+ \w+) \((\d+) sends to the next", out, "ring traffic")
            # K/V: forward and backward C - 1 each (bf16); dK/dV sums: C
            # (one f32 message each).
            kv_sends, sum_sends = 2 * m["layers"] * (context - 1), m["layers"] * context
            kv_elements = 8192 / context * 2 * m["kv_heads"] * m["head_dim"]
            check(int(ring.group(2)) == kv_sends + sum_sends,
                  f"C {context}: {kv_sends + sum_sends} block sends per step")
            close(gib(ring.group(1)), kv_sends * kv_elements * 2 + sum_sends * kv_elements * 4,
                  f"C {context}: ring bytes per step", rel=0.005)
    for context in (2, 4):
        r = activations[1] / activations[context]
        check(0.95 * context < r <= 1.0 * context,
              f"seq_len 8192: context {context} lowers the activations per rank by {r:.3f} (~{context})")

    # --- Refusals naming the deck line -----------------------------------
    rc, out = run("--ranks", "16", "--ranks-per-node", "16", *stand_ins, "-var", "tensor", "16", recipe,
                  expect_ok=False)
    check(rc != 0 and re.search(r"llama70b_tp8\.in:\d+: parallel tensor 16 context 1 does not fit model llama", out)
          and "num_key_value_heads 8 is not divisible by tensor 16" in out,
          "tensor 16 is refused: 8 KV heads, naming the parallel line")
    rc, out = run("--ranks", "6", "-var", "context", "3", deck, expect_ok=False)
    check(rc != 0 and "seq_len 8192 is not divisible by 2 x context 3 = 6" in out and "llama3_8b_8192.in:" in out,
          "context 3 at seq_len 8192 is refused: 2C = 6 does not divide it")
    rc, out = run("--ranks", "16", "--ranks-per-node", "4", *stand_ins, recipe, expect_ok=False)
    check(rc != 0 and "a tensor group would span two nodes" in out,
          "tensor 8 on nodes of 4 ranks is refused: a tensor group would span two nodes")

    # --- Fit advice: pure FSDP does not fit 80GiB, parallel tensor does ----
    out = plan_70b(1, "--device-memory", "80GiB")
    advice = re.search(r"- parallel tensor (\d+) \(", out)
    check("DOES NOT FIT" in out and advice is not None,
          "tensor 1 on 80GiB does not fit and the advice names parallel tensor T")
    if advice:
        out = plan_70b(int(advice.group(1)), "--device-memory", "80GiB")
        check("DOES NOT FIT" not in out and "fit on 80.00 GiB per device" in out,
              f"the advised parallel tensor {advice.group(1)} fits 80GiB")
    return report()


if __name__ == "__main__":
    sys.exit(main())
