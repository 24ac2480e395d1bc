#!/usr/bin/env python3
"""The pure parts of share/bench/gpu_llama.sh (issue 20's Llama benchmark):
model shapes, FLOPs per token, the memory arithmetic behind each model's
micro batch and checkpointing, the ftrain decks, and the summary that puts
the measured rows against the issue's three targets. No torch, no GPU:
tests/scripts/llama_bench_test.py runs all of it on the host.

  llama_bench_plan.py flops MODEL                  FLOPs per token at seq 4096
  llama_bench_plan.py settings MODEL               "micro checkpointing" the benchmark uses
  llama_bench_plan.py memory MODEL [MICRO CKPT]    the memory arithmetic, printed
  llama_bench_plan.py deck MODEL PRECISION DATA RUN_DIR STEPS PEAK_TFLOPS [MICRO CKPT]
  llama_bench_plan.py ftrain-row MODEL PRECISION METRICS.jsonl LOG   one result row (JSON) from an ftrain run
  llama_bench_plan.py pytorch-row MODEL PRECISION FRAMEWORK STDOUT   one from pytorch_llama_gpu.py's output
  llama_bench_plan.py failed-row MODEL PRECISION FRAMEWORK REASON    a row that did not run
  llama_bench_plan.py summary RESULTS.jsonl BF16_PEAK FP8_PEAK   (exit 1 when a row FAILED to run)

MODEL is 1b or 3b (Llama 3.2, Hugging Face config.json values below; the
same numbers as ftrain's presets llama3.2-1b / llama3.2-3b in
plugins/llama/llama_config.cpp).
"""
import json
import sys

SEQ = 4096

# meta-llama/Llama-3.2-1B and -3B config.json: vocab_size 128256,
# intermediate_size 8192, num_key_value_heads 8, rope_theta 500000,
# rope_scaling llama3 (factor 32, low 1, high 4, original 8192),
# tie_word_embeddings true, rms_norm_eps 1e-5; 1B: hidden_size 2048,
# num_hidden_layers 16, num_attention_heads 32, head_dim 64; 3B: hidden_size
# 3072, num_hidden_layers 28, num_attention_heads 24, head_dim 128.
MODELS = {
    "1b": dict(preset="llama3.2-1b", vocab=128256, hidden=2048, intermediate=8192, layers=16, heads=32,
               kv_heads=8, head_dim=64, rope_theta=500000.0),
    "3b": dict(preset="llama3.2-3b", vocab=128256, hidden=3072, intermediate=8192, layers=28, heads=24,
               kv_heads=8, head_dim=128, rope_theta=500000.0),
}

# Micro batch (sequences of 4096 tokens per step, one GPU) and activation
# checkpointing per model; memory_lines() shows why (H100 80GB).
SETTINGS = {"1b": (2, "off"), "3b": (1, "on")}

# The targets for the first GPU run.
TARGET_BF16_MFU = 0.55
TARGET_FP8_OVER_BF16 = 1.3
TARGET_FTRAIN_OVER_COMPILED = 1.2

GIB = 2.0**30
H100_80GB_BYTES = 81559 * 2**20  # what nvidia-smi reports for an H100 SXM 80GB: 79.6 GiB


def parameters(m):
    """Every parameter (tied head: the embedding counts once), as ftrain's plan counts them."""
    q, kv = m["heads"] * m["head_dim"], m["kv_heads"] * m["head_dim"]
    per_layer = m["hidden"] * (2 * q + 2 * kv) + 3 * m["hidden"] * m["intermediate"] + 2 * m["hidden"]
    return m["vocab"] * m["hidden"] + m["layers"] * per_layer + m["hidden"]


def flops_per_token(m, seq=SEQ):
    """LlamaModel::training_flops_per_sample / seq: 6 x matmul parameters (the tied head counted as a
    GEMM) plus 12 x layers x q_size x seq for attention (QK^T and PV, forward and backward, no causal
    discount). The same count for ftrain and PyTorch, bf16 and fp8."""
    q, kv = m["heads"] * m["head_dim"], m["kv_heads"] * m["head_dim"]
    per_layer = m["hidden"] * (2 * q + 2 * kv) + 3 * m["hidden"] * m["intermediate"]
    matmul = per_layer * m["layers"] + m["vocab"] * m["hidden"]
    return 6 * matmul + 12 * m["layers"] * q * seq


def memory_bytes(m, micro, checkpointing, seq=SEQ):
    """A paper estimate of one GPU's peak (no_shard, fp32 master weights, AdamW): returns a dict of parts."""
    p = parameters(m)
    q, kv = m["heads"] * m["head_dim"], m["kv_heads"] * m["head_dim"]
    tokens = micro * seq
    # bf16 tensors a block keeps for backward, per token: its input, the two norms' outputs, q, k, v,
    # the attention output, the MLP's gate, up, silu(gate) and their product.
    saved_per_token_layer = 2 * (3 * m["hidden"] + q + 2 * kv + q + 4 * m["intermediate"])
    if checkpointing == "off":
        activations = saved_per_token_layer * tokens * m["layers"]
    else:  # only each block's input stays, plus one block recomputed at a time
        activations = 2 * m["hidden"] * tokens * m["layers"] + saved_per_token_layer * tokens
    return {
        "state (f32 master + grad + AdamW m, v: 16 B/param)": 16 * p,
        "bf16 weight copies (2 B/param)": 2 * p,
        "activations (bf16)": activations,
        # bf16 logits, their f32 copy for the loss and its f32 gradient
        "logits and loss (10 B per token x vocab)": 10 * tokens * m["vocab"],
    }


def memory_lines(name, micro=None, checkpointing=None):
    m = MODELS[name]
    micro = micro if micro is not None else SETTINGS[name][0]
    checkpointing = checkpointing if checkpointing is not None else SETTINGS[name][1]
    parts = memory_bytes(m, micro, checkpointing)
    total = sum(parts.values())
    lines = [f"{m['preset']}: {parameters(m):,} parameters; micro {micro} x seq {SEQ}, "
             f"activation_checkpointing {checkpointing}"]
    lines += [f"  {k:52s} {v / GIB:6.1f} GiB" for k, v in parts.items()]
    verdict = "fits" if total < 0.9 * H100_80GB_BYTES else "does NOT fit with 10% left for workspaces"
    lines.append(f"  {'total (paper estimate)':52s} {total / GIB:6.1f} GiB of {H100_80GB_BYTES / GIB:.1f}: {verdict}")
    return lines


def deck(name, precision, data, run_dir, steps, peak_tflops, micro=None, checkpointing=None):
    """ftrain's deck for one row: one rank, device cuda, the model's preset."""
    m = MODELS[name]
    micro = micro if micro is not None else SETTINGS[name][0]
    checkpointing = checkpointing if checkpointing is not None else SETTINGS[name][1]
    if precision not in ("bf16", "fp8"):
        raise ValueError(f"precision {precision}: the benchmark compares bf16 and fp8")
    lines = [
        f"# {m['preset']} seq {SEQ} {precision}: written by share/bench/llama_bench_plan.py for gpu_llama.sh",
        "device cuda",
        "attention_backend auto",
        f"model llama preset {m['preset']}",
        f"precision {precision}",
    ]
    if precision == "fp8":
        # Transformer Engine's DelayedScaling defaults (HYBRID: E4M3 forward, E5M2 gradients).
        lines.append("fp8 format hybrid amax_history 1024 margin 0 amax_algo max")
    lines += [
        f"peak_tflops {peak_tflops:g}",
        "seed 1",
        f"data tokens {data}",
        f"batch micro {micro} seq_len {SEQ}",
        "optimizer adamw lr 1e-4",
        f"max_steps {steps}",
        "init random std 0.02",
        "fsdp no_shard",
        f"activation_checkpointing {checkpointing}",
        "log every 1",
        f"run_dir {run_dir}",
    ]
    return "\n".join(lines) + "\n"


WARMUP_STEPS = 3  # steps left out of the means: the first ones build plans, caches and pools


def ftrain_row(model, precision, metrics_lines, log_text):
    """The row of an ftrain run: mean tokens/s over the steps after the warm-up (each step's tokens over
    its step_time_s; metrics.jsonl's "tokens" is cumulative), ftrain's own MFU and attention kernel as a note."""
    rows = [json.loads(line) for line in metrics_lines if '"loss"' in line]
    steady = rows[WARMUP_STEPS:]
    if not steady:
        return failed_row(model, precision, "ftrain", f"only {len(rows)} logged steps, none after the "
                          f"{WARMUP_STEPS} warm-up steps")
    tokens_per_step = rows[0]["tokens"] / rows[0]["step"]
    tps = tokens_per_step / (sum(r["step_time_s"] for r in steady) / len(steady))
    mfu = sum(r["mfu"] for r in steady) / len(steady)
    note = f"ftrain's own MFU {100 * mfu:.1f}%"
    for line in log_text.splitlines():
        if "attention_forward (" in line:
            note += "; " + line.strip()[:160]
            break
    return {"model": model, "precision": precision, "framework": "ftrain", "tokens_per_s": tps, "note": note}


def pytorch_row(model, precision, framework, stdout):
    """The row of a pytorch_llama_gpu.py run from its last stdout line (JSON)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        j = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as e:
        return failed_row(model, precision, framework, f"no JSON result line ({type(e).__name__})")
    if "unavailable" in j:
        return failed_row(model, precision, framework, f"UNAVAILABLE: {j['unavailable']}")
    return {"model": model, "precision": precision, "framework": framework, "tokens_per_s": j["tokens_per_s"],
            "note": f"peak memory {j['peak_memory_gib']:.1f} GiB; {j['baseline']}"}


def failed_row(model, precision, framework, reason):
    return {"model": model, "precision": precision, "framework": framework, "tokens_per_s": None, "note": reason}


def _ratio_line(what, value, target, missing):
    if value is None:
        return f"  {what}: not measured ({missing}) -- target >= {target:g}x: NOT JUDGED"
    verdict = "PASS" if value >= target else "FAIL"
    return f"  {what}: {value:.2f}x, target >= {target:g}x: {verdict}"


def summary(rows, bf16_peak, fp8_peak):
    """rows: dicts with model, precision, framework (ftrain | pytorch eager | pytorch compiled),
    tokens_per_s (None when the row did not run) and note. Returns the printed lines: the table with MFU
    recomputed from tokens/s with flops_per_token (same count for every row), then the targets."""
    peak = {"bf16": bf16_peak, "fp8": fp8_peak}
    table = {}
    out = [f"{'model':12s} {'precision':9s} {'framework':22s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'MFU':>6s}  note"]
    for r in rows:
        m = MODELS[r["model"]]
        tps = r.get("tokens_per_s")
        key = (r["model"], r["precision"], r["framework"])
        table[key] = r
        if tps:
            tflops = tps * flops_per_token(m) / 1e12
            mfu = tflops / peak[r["precision"]]
            out.append(f"{m['preset']:12s} {r['precision']:9s} {r['framework']:22s} {tps:10.0f} {tflops:8.1f} "
                       f"{100 * mfu:5.1f}%  {r.get('note', '')}")
        else:
            out.append(f"{m['preset']:12s} {r['precision']:9s} {r['framework']:22s} {'-':>10s} {'-':>8s} "
                       f"{'-':>6s}  {r.get('note', 'did not run')}")
    out.append(f"MFU = tokens/s x model FLOPs per token (incl. attention) / the precision's dense peak: "
               f"bf16 {bf16_peak:g}, fp8 {fp8_peak:g} TFLOP/s")

    def tps(model, precision, framework):
        r = table.get((model, precision, framework))
        return r.get("tokens_per_s") if r else None

    def why(model, precision, framework):
        r = table.get((model, precision, framework))
        return (r.get("note") or "did not run") if r else "row absent"

    out.append("Targets (issue 20, first GPU run):")
    for name in MODELS:
        if not any(k[0] == name for k in table):
            continue
        preset = MODELS[name]["preset"]
        t = tps(name, "bf16", "ftrain")
        if t:
            mfu = t * flops_per_token(MODELS[name]) / 1e12 / bf16_peak
            out.append(f"  {preset} ftrain bf16 MFU: {100 * mfu:.1f}%, target >= {100 * TARGET_BF16_MFU:.0f}%: "
                       f"{'PASS' if mfu >= TARGET_BF16_MFU else 'FAIL'}")
        else:
            out.append(f"  {preset} ftrain bf16 MFU: not measured ({why(name, 'bf16', 'ftrain')}) -- target >= "
                       f"{100 * TARGET_BF16_MFU:.0f}%: NOT JUDGED")
        b, f = tps(name, "bf16", "ftrain"), tps(name, "fp8", "ftrain")
        out.append(_ratio_line(f"{preset} ftrain FP8/BF16 tokens/s", f / b if b and f else None,
                               TARGET_FP8_OVER_BF16,
                               why(name, "fp8" if b else "bf16", "ftrain")))
        for precision in ("bf16", "fp8"):
            a, c = tps(name, precision, "ftrain"), tps(name, precision, "pytorch compiled")
            missing = why(name, precision, "ftrain") if not a else why(name, precision, "pytorch compiled")
            out.append(_ratio_line(f"{preset} {precision} ftrain/PyTorch-compiled tokens/s",
                                   a / c if a and c else None, TARGET_FTRAIN_OVER_COMPILED, missing))
    return out


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd = argv[1]
    if cmd == "flops":
        print(flops_per_token(MODELS[argv[2]]))
    elif cmd == "params":
        print(parameters(MODELS[argv[2]]))
    elif cmd == "settings":
        print(*SETTINGS[argv[2]])
    elif cmd == "memory":
        extra = argv[3:5]
        print("\n".join(memory_lines(argv[2], int(extra[0]) if extra else None, extra[1] if extra else None)))
    elif cmd == "deck":
        name, precision, data, run_dir, steps, peak = argv[2:8]
        extra = argv[8:10]
        sys.stdout.write(deck(name, precision, data, run_dir, int(steps), float(peak),
                              int(extra[0]) if extra else None, extra[1] if extra else None))
    elif cmd == "ftrain-row":
        with open(argv[4]) as metrics, open(argv[5], errors="replace") as log:
            print(json.dumps(ftrain_row(argv[2], argv[3], metrics.readlines(), log.read())))
    elif cmd == "pytorch-row":
        print(json.dumps(pytorch_row(argv[2], argv[3], argv[4], open(argv[5]).read())))
    elif cmd == "failed-row":
        print(json.dumps(failed_row(*argv[2:6])))
    elif cmd == "summary":
        rows = [json.loads(line) for line in open(argv[2]) if line.strip()]
        print("\n".join(summary(rows, float(argv[3]), float(argv[4]))))
        # A row that crashed fails the benchmark (gpu-check.sh reports it); one that was UNAVAILABLE (no FP8
        # GEMMs in this torch or on this GPU) does not, and speed alone never does: PASS/FAIL above is the verdict.
        failed = [r for r in rows if r.get("note", "").startswith("FAILED")]
        if failed:
            print(f"{len(failed)} row(s) FAILED to run: exit 1")
            sys.exit(1)
    else:
        sys.exit(f"llama_bench_plan.py: unknown command {cmd!r}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv)
