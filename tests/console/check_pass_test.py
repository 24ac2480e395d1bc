#!/usr/bin/env python3
"""`ftrain --check` in one pass, and what a resume says: scenarios run by
CTest (label console; mpi where mpirun is involved). The environment and
the small token corpus are console_test.py's.

Usage: check_pass_test.py SCENARIO --repo DIR --ftrain BIN --prep BIN --workdir DIR --mpirun "MPIEXEC FLAGS..."

Scenarios:
  check_paths        a deck with five bad paths (training and evaluation
                     token files, the init safetensors directory, a resume
                     step that does not exist, a checkpoint dir below a
                     regular file): --check reports all five in one error,
                     each naming its deck line and the path.
  check_safetensors  `init safetensors` of a file written here for the
                     deck's model: --check passes for the right file and,
                     with one tensor of a wrong shape, the embedding of
                     another vocabulary and an integer tensor, fails naming
                     each (file and tensor), without any step run.
  resume_max_steps   a run stopped at step 4 of 8 and resumed with
                     max_steps 12: --check warns, and the resume says,
                     that max_steps changes from 8 to 12 and what it does
                     to the cosine schedule.
  resume_deleted     `keep 2` deleted step_2; `resume ck/step_2` says that
                     checkpoint does not exist and lists the steps that do
                     (not "manifest.json is missing").
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from console_test import SMALL_MODEL, Env, write  # noqa: E402
from safetensors_stand_in import write_header  # noqa: E402
from ftrain_test import fail  # noqa: E402


def run(e, cmd, timeout=120):
    p = subprocess.run(cmd, cwd=e.dir, capture_output=True, text=True, env=e.environment(), timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def scenario_check_paths(e):
    open(os.path.join(e.dir, "blocker"), "w").close()  # a regular file where a directory would have to be
    deck = write(e, "paths.in", f"{SMALL_MODEL}\n"                                   # 1
                 "data tokens missing/train.tok\n"                                   # 2
                 "eval tokens missing/eval.tok every 2\n"                            # 3
                 "init safetensors missing/hf_weights\n"                             # 4
                 "batch micro 2 seq_len 32\nmax_steps 4\n"                           # 5, 6
                 "checkpoint every 2 dir blocker/ck\n"                               # 7
                 "resume no_such_ck/step_2\n"                                        # 8
                 "run_dir runs/paths\n")
    rc, out = run(e, [e.args.ftrain, "--check", deck])
    expected = ["5 problems:",
                "paths.in:2: file 'missing/train.tok' given to 'data tokens' does not exist",
                "paths.in:3: file 'missing/eval.tok' given to 'eval tokens' does not exist",
                "paths.in:4: file 'missing/hf_weights' given to 'init safetensors' does not exist",
                "paths.in:7: checkpoint dir",
                "paths.in:8: checkpoint no_such_ck/step_2 does not exist"]
    missing = [x for x in expected if x not in out]
    if rc != 1 or missing or out.count("ftrain: error") != 1:
        fail(f"--check of a deck with five bad paths: exit {rc}, expected 1 and one error with all of\n  " +
             "\n  ".join(missing) + f"\ngot:\n{out}")
    print("ok: --check reports the five bad paths in one error:\n" + out.strip())


# The safetensors tensors of SMALL_MODEL (tie_word_embeddings false): what
# Hugging Face's LlamaForCausalLM has for that configuration.
def llama_tensors(vocab=256, hidden=32, inter=64, layers=2, heads=4, kv_heads=2):
    head_dim = hidden // heads
    t = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden], "lm_head.weight": [vocab, hidden]}
    for i in range(layers):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": [hidden], p + "post_attention_layernorm.weight": [hidden],
                  p + "self_attn.q_proj.weight": [heads * head_dim, hidden],
                  p + "self_attn.k_proj.weight": [kv_heads * head_dim, hidden],
                  p + "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
                  p + "self_attn.o_proj.weight": [hidden, heads * head_dim],
                  p + "mlp.gate_proj.weight": [inter, hidden], p + "mlp.up_proj.weight": [inter, hidden],
                  p + "mlp.down_proj.weight": [hidden, inter]})
    return t


def scenario_check_safetensors(e):
    model = SMALL_MODEL + " tie_word_embeddings false"
    deck = write(e, "st.in", f"{model}\ndata tokens tiny_train.tok\ninit safetensors ${{weights}}\n"
                 "batch micro 2 seq_len 32\nmax_steps 4\nrun_dir runs/st\n")
    good = llama_tensors()
    write_header(os.path.join(e.dir, "good.safetensors"), good, dtype="F32")
    rc, out = run(e, [e.args.ftrain, "--check", "-var", "weights", "good.safetensors", deck])
    if rc != 0:
        fail(f"--check with safetensors that fit the model: exit {rc}:\n{out}")
    print("ok: --check passes safetensors whose every tensor fits the model")
    bad = dict(good)
    bad["model.layers.1.self_attn.k_proj.weight"] = [32, 32]       # k_proj as if MHA: wrong shape
    bad["model.embed_tokens.weight"] = [320, 32]                    # another tokenizer's vocabulary
    del bad["model.layers.0.mlp.up_proj.weight"]                    # absent
    write_header(os.path.join(e.dir, "bad.safetensors"), bad, dtype="F32", dtypes={"model.norm.weight": "I64"})
    rc, out = run(e, [e.args.ftrain, "--check", "-var", "weights", "bad.safetensors", deck])
    expected = ["st.in:3: bad.safetensors: 4 tensor(s) do not fit the model",
                "bad.safetensors: tensor 'model.embed_tokens.weight' has shape [320, 32], the model expects [256, 32]"
                " (a vocabulary of 320: set `vocab_size 320` on the model line (",
                "st.in:1), or use the tokenizer these weights were trained with)",
                "bad.safetensors: tensor 'model.layers.1.self_attn.k_proj.weight' has shape [32, 32], the model "
                "expects [16, 32]",
                "bad.safetensors: tensor 'model.norm.weight' has dtype I64, not a floating-point type",
                "has no tensor 'model.layers.0.mlp.up_proj.weight' (shape [64, 32])"]
    missing = [x for x in expected if x not in out]
    if rc != 1 or missing or re.search(r"^step ", out, re.M):
        fail(f"--check with mismatched safetensors: exit {rc}, expected 1 naming\n  " + "\n  ".join(missing) +
             f"\ngot:\n{out}")
    print("ok: --check names every tensor that does not fit:\n" + out.strip())


def resume_deck(e, name, extra=""):
    return write(e, name, f"variable max 8\nvariable stop 4\n{SMALL_MODEL}\ndata tokens tiny_train.tok\n"
                 "batch micro 2 seq_len 32\noptimizer adamw lr 0.001\nschedule cosine warmup_steps 2 min_lr 0.0001\n"
                 "max_steps ${max}\nlog every 1\n"
                 f"checkpoint every 2 dir ${{ck}} stop_after ${{stop}} {extra}\nresume ${{from}}\nrun_dir runs/${{ck}}\n")


def scenario_resume_max_steps(e):
    deck = resume_deck(e, "max_steps.in")
    shutil.rmtree(os.path.join(e.dir, "ck_max"), ignore_errors=True)
    shutil.rmtree(os.path.join(e.dir, "runs"), ignore_errors=True)
    base = [e.args.ftrain, "-var", "ck", "ck_max", "-var", "from", "auto"]
    rc, out = run(e, base + [deck])
    if rc != 0 or "stopped after step 4" not in out:
        fail(f"first run: exit {rc}:\n{out}")
    want = ("resume: max_steps changes from 8 (the run that wrote ck_max/step_4) to 12: the cosine schedule is "
            "recomputed over 12 steps, so the learning rate at step 5 is ")
    rc, out = run(e, base + ["--check", "-var", "stop", "10", "-var", "max", "12", deck])
    if rc != 0 or "warning: " + want not in out:
        fail(f"--check of the resume with another max_steps: exit {rc}, expected the warning\n  {want}\ngot:\n{out}")
    print("ok: --check warns before the job runs")
    rc, out = run(e, base + ["-var", "stop", "10", "-var", "max", "12", deck])
    line = next((l for l in out.splitlines() if l.startswith("resume: max_steps")), "")
    if rc != 0 or not line.startswith(want) or "where the old run's schedule had " not in line:
        fail(f"resume with another max_steps: exit {rc}, expected a line starting\n  {want}\ngot:\n{out}")
    print("ok:", line)
    # The same max_steps: no such line.
    shutil.rmtree(os.path.join(e.dir, "ck_max"), ignore_errors=True)
    run(e, base + [deck])
    rc, out = run(e, base + ["-var", "stop", "6", deck])
    if rc != 0 or "resume: max_steps" in out or "resumed from" not in out:
        fail(f"resume with the same max_steps: exit {rc}, expected no max_steps line:\n{out}")
    print("ok: resuming with the same max_steps says nothing about it")


def scenario_resume_deleted(e):
    deck = resume_deck(e, "deleted.in", "keep 2")
    shutil.rmtree(os.path.join(e.dir, "ck_keep"), ignore_errors=True)
    shutil.rmtree(os.path.join(e.dir, "runs"), ignore_errors=True)
    base = [e.args.ftrain, "-var", "ck", "ck_keep"]
    rc, out = run(e, base + ["-var", "from", "auto", "-var", "stop", "6", deck])
    steps = sorted(d for d in os.listdir(os.path.join(e.dir, "ck_keep")) if d.startswith("step_"))
    if rc != 0 or steps != ["step_4", "step_6"]:
        fail(f"the run that keeps 2 checkpoints: exit {rc}, {steps}:\n{out}")
    rc, out = run(e, base + ["-var", "from", "ck_keep/step_2", deck])
    want = ("deleted.in:11: checkpoint ck_keep/step_2 does not exist; ck_keep holds step_4, step_6 "
            "(resume one of them, or `resume auto` for the newest)")
    if rc != 1 or want not in out or "manifest.json" in out:
        fail(f"resume of a step keep deleted: exit {rc}, expected 1 and\n  {want}\ngot:\n{out}")
    print("ok:", want)


SCENARIOS = {
    "check_paths": scenario_check_paths,
    "check_safetensors": scenario_check_safetensors,
    "resume_max_steps": scenario_resume_max_steps,
    "resume_deleted": scenario_resume_deleted,
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
