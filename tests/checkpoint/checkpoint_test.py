#!/usr/bin/env python3
"""Checkpoint regression scenarios, run by CTest (label mpi;checkpoint).

Usage: checkpoint_test.py SCENARIO --ftrain BIN --prep BIN --mpirun "MPIEXEC FLAGS..."

Each scenario makes its own tiny corpus with ftrain-prep in a fresh temporary
directory and trains a ~20k-parameter Llama for 20 steps, so it runs in
seconds. The global batch is kept equal across world sizes (micro x ranks is
constant) so that runs on different rank counts see the same samples.

Scenarios:
  same_world   run 20 steps; run 10 + resume to 20 (np 2); metrics identical.
  lora         LoRA: the checkpoint holds adapters + optimizer state only;
               resume bit-identical (np 2), resharded to np 4 within 1e-5;
               a changed base is refused.
  lora_bf16    LoRA under precision bf16 (the frozen base stored in bf16):
               resume bit-identical (np 2); the checkpoint records the
               base's dtype; an fp32 LoRA checkpoint resumes under bf16
               (the base checked by its init line, said so); merge_adapter
               + save_final work on a bf16 base.
  fp8_same_world  the same under precision fp8: the FP8 scaling state is
               checkpointed, so the resumed curve is identical; the FP8
               all-gather (on by default) saves the same datasets as with it
               off, and an off checkpoint resumes with it on bit-identically.
  reshard_4_2  10 steps on 4 ranks, resume on 2; loss within 1e-5 of the
               uninterrupted 2-rank run.
  reshard_2_4  10 steps on 2 ranks, resume on 4; within 1e-5.
  strategy     10 steps on 4 ranks full_shard, resume as hybrid_shard with
               shard groups of 2 (two replicas read the same old shards),
               and 2 ranks no_shard resumed as full_shard; within 1e-5.
  damaged      a truncated shard is refused naming the file; `resume auto`
               skips a checkpoint that a killed save left incomplete or
               truncated and takes the previous one; keep K prunes.
  damaged_fallback
               flipped bytes in a dataset only rank 1 reads, a damaged
               superblock (rank 0's or rank 1's file), a truncated or a
               missing shard of the newest checkpoint: `resume auto` falls
               back to the newest intact one on every rank and says why;
               an explicit resume stops with the error. Needs h5dump/h5ls.
  damaged_manifest
               the newest checkpoint's manifest.json as 200 random bytes, as
               valid JSON holding non-UTF-8 bytes, as JSON with fields of the
               wrong type or missing, and `latest` as random bytes: `resume
               auto` falls back to step_10 (exit 0), naming the file and the
               reason in printable text; an explicit resume of the damaged
               step stops with that error (no internal error, no MPI_ABORT).
               Resuming an fp32 checkpoint under precision bf16 says that the
               f32 masters load unchanged.
  lineage      resume ck/step_3 with keep 2 re-saves step_4: resume auto
               continues from it (not from step_6 of the abandoned branch),
               keep kept the branch point, empty or partial step dirs are
               removed at the next save.
  noncoherent  each rank in its own working directory (a stale view of the
               checkpoint dir on rank 1): rank 0's choice is followed, the
               step rank 1 cannot load is skipped by both.
  preempt      SIGUSR1 to mpirun and SIGTERM to the ranks: the step finishes,
               a checkpoint is written, exit status 0, `resume auto` goes on;
               SIGKILL while checkpointing every step: `resume auto` takes the
               newest complete checkpoint.
  preempt_save SLURM's preemption sequence with a 4 s save in flight (test
               write delay): SIGTERM to mpirun and to every rank as step_5
               is being written, SIGKILL to all 7 s later; mpirun runs with
               `--mca odls_base_sigkill_timeout 3` (share/doc/
               running-on-clusters.md), so it kills the ranks 6 s after its
               SIGTERM. The ranks finish the save in flight, commit step_5
               and stop before either kill: `stop signal received`, `latest`
               names step_5, no .tmp is left, `resume auto` continues (they
               may then wait in MPI_Finalize until mpirun's kill: nothing is
               left to lose).
               Blocking and `async on` saves.
  async_resume `checkpoint ... async on` with a 1.5 s test delay on every
               rank file write: the step_5 and step_10 saves commit only
               after later steps trained (the commit line says how many);
               resuming the asynchronously written step_10 gives exactly
               the uninterrupted curve.
  async_fault  rank 1's background write of step_10 fails (test-only fault
               switch): the run stops with exit 1 naming the step, rank and
               file, `latest` still names step_5, and `resume auto` resumes
               step_5 to exactly the uninterrupted curve.
  async_kill   SIGKILL to the ranks while the background write of step_10
               is in flight (4 s test delay): `latest` still names step_5,
               only step_10.tmp is left, and `resume auto` resumes step_5 to
               exactly the uninterrupted curve.
  consolidated_fault
               one rank fails mid-save_final (test-only fault switch): the
               job ends with its message within seconds instead of hanging.
  consolidated_a, consolidated_b
               save_final on np 1, 2 and 4 with every strategy: each dataset
               (of save_final's file and of the checkpoint's `consolidated on`
               step_20/model.h5) equals, bit for bit, the parameter gathered
               from the run's final sharded checkpoint (concatenated master
               shards); the file reloads with `init hdf5` on another np and
               reproduces the eval loss (exactly on the same np and batch
               shape); a model of another shape is refused naming the tensor.
               Needs h5dump (hdf5-tools).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402
from ftrain_test import fail  # noqa: E402

BASE_DECK = """\
variable micro 2
variable max_steps 20
variable strategy full_shard
variable seed 11
variable init random
model llama preset tiny hidden_size 32 intermediate_size 64 num_hidden_layers 2 &
      num_attention_heads 4 num_key_value_heads 2 vocab_size 128
seed ${seed}
data tokens train.tok packing on shuffle on
eval tokens eval.tok every 10
batch micro ${micro} seq_len 32
optimizer adamw lr 3e-3 weight_decay 0.01
schedule cosine warmup_steps 3 min_lr 1e-4
clip_grad_norm 1.0
max_steps ${max_steps}
init ${init}
fsdp ${strategy}
log every 1
run_dir ${run}
"""


class Runner(ftrain_test.Runner):
    def __init__(self, args, workdir):
        super().__init__(args.ftrain, args.mpirun, workdir)

    def deck(self, name, extra):
        return self.write(name, "include base.in\n" + extra)

    def command(self, np, deck, variables):
        return self.mpirun + ["-np", str(np)] + self.ftrain_argv(deck, variables)

    def run(self, np, deck, expect_ok=True, env=None, timeout=120, **variables):
        """Runs ftrain under mpirun; `env` adds environment variables (passed
        to the ranks with -x). A run past `timeout` seconds (a hang) is
        killed with its whole process group and fails the scenario."""
        what = f"ftrain -np {np} {os.path.basename(deck)} {variables} {env or ''}"
        p = super().run(np, self.ftrain_argv(deck, variables), env=env, timeout=timeout, what=what)
        if expect_ok and p.returncode != 0:
            print(p.stdout)
            fail(f"ftrain -np {np} {os.path.basename(deck)} {variables} exited {p.returncode}")
        return p


def entries(directory):
    """The directory's names, without the run's lock file (.ftrain.lock: one owner per directory)."""
    return sorted(n for n in os.listdir(directory) if n != ".ftrain.lock")


metrics = ftrain_test.curve


def compare(reference, resumed, tolerance):
    a, ea = metrics(reference)
    b, eb = metrics(resumed)
    if [r[0] for r in a] != list(range(1, 21)) or [r[0] for r in b] != list(range(1, 21)):
        fail(f"expected steps 1..20 once each: {[r[0] for r in a]} vs {[r[0] for r in b]}")
    if [e[0] for e in ea] != [e[0] for e in eb]:
        fail(f"eval steps differ: {ea} vs {eb}")
    worst = 0.0
    for x, y in zip(a, b):
        if x[2] != y[2]:
            fail(f"step {x[0]}: lr {x[2]} vs {y[2]}")
        d = max(abs(x[1] - y[1]), abs(x[3] - y[3]))
        worst = max(worst, d)
        if tolerance == 0 and (x[1] != y[1] or x[3] != y[3]):
            fail(f"step {x[0]}: not bit-identical: {x} vs {y}")
        if d > tolerance:
            fail(f"step {x[0]}: differs by {d} > {tolerance}: {x} vs {y}")
    for x, y in zip(ea, eb):
        d = abs(x[1] - y[1])
        worst = max(worst, d)
        if d > tolerance or (tolerance == 0 and x[1] != y[1]):
            fail(f"eval at step {x[0]}: {x[1]} vs {y[1]}")
    print(f"ok: 20 steps compared, largest difference {worst:g} (allowed {tolerance:g})")


def scenario_same_world(r):
    full = r.deck("full.in", "")
    part = r.deck("part.in", "checkpoint every 5 dir ck keep 2 stop_after 10\n")
    cont = r.deck("cont.in", "checkpoint every 5 dir ck keep 2\nresume auto\n")
    r.run(2, full, run="full")
    out = r.run(2, part, run="res").stdout
    if "stopped after step 10" not in out:
        fail("stop_after 10 did not stop the run:\n" + out)
    out = r.run(2, cont, run="res").stdout
    if "resumed from ck/step_10 at step 10" not in out:
        fail("resume auto did not take step_10:\n" + out)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res/metrics.jsonl"), 0.0)
    ck = os.path.join(r.dir, "ck")
    if entries(ck) != ["latest", "step_15", "step_20"]:
        fail(f"keep 2: expected latest, step_15, step_20, found {entries(ck)}")
    if open(os.path.join(ck, "latest")).read().strip() != "step_20":
        fail("latest does not name step_20")
    manifest = json.load(open(os.path.join(ck, "step_20/manifest.json")))
    if not manifest["complete"] or manifest["world_size"] != 2 or len(manifest["files"]) != 2:
        fail(f"manifest: {manifest}")
    for f in manifest["files"]:
        if os.path.getsize(os.path.join(ck, "step_20", f["name"])) != f["bytes"]:
            fail(f"size of {f['name']} differs from the manifest")


def scenario_lora(r):
    # LoRA (issue 16): a checkpoint holds the adapters and their AdamW state
    # only, the frozen base is referenced by init + checksum. Stop at 10 and
    # resume on the same world size: bit-identical to the uninterrupted run;
    # resume on 4 ranks: within 1e-5. A resume whose deck loads another base
    # is refused, naming both bases.
    lora = "lora rank 4 alpha 8 dropout 0.05 targets q_proj,v_proj\n"
    full = r.deck("full.in", lora)
    part = r.deck("part.in", lora + "checkpoint every 5 dir ck stop_after 10\n")
    cont = r.deck("cont.in", lora + "checkpoint every 5 dir ck\nresume auto\n")
    r.run(2, full, run="full")
    r.run(2, part, run="res")
    out = r.run(2, cont, run="res").stdout
    if "resumed from ck/step_10 at step 10" not in out or "frozen base bit-identical" not in out:
        fail("LoRA resume did not take step_10 or did not keep the base:\n" + out)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res/metrics.jsonl"), 0.0)
    h5ls = shutil.which("h5ls")
    if h5ls:
        listing = subprocess.run([h5ls, "-r", os.path.join(r.dir, "ck/step_10/rank_0.h5")], capture_output=True,
                                 text=True).stdout
        if "/units/model.layers.0.lora/exp_avg" not in listing or "/units/model.embed_tokens" in listing:
            fail("a LoRA checkpoint must hold the adapters with their optimizer state and no base unit:\n" + listing)
    # Another world size reshards the adapters.
    shutil.rmtree(os.path.join(r.dir, "res"))
    shutil.rmtree(os.path.join(r.dir, "ck"))
    r.run(2, part, run="res4")
    r.run(4, cont, run="res4", micro=1)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res4/metrics.jsonl"), 1e-5)
    # A changed base is refused.
    refuse = r.deck("refuse.in", lora + "resume ck/step_10\n")
    p = r.run(2, refuse, expect_ok=False, run="refused", init="random test_perturb_by_rank 0.01")
    if p.returncode == 0 or "was trained on a base model" not in p.stdout:
        fail("resuming LoRA adapters onto another base must be refused:\n" + p.stdout)
    print("ok: LoRA checkpoints hold adapters + optimizer state; a changed base is refused")


def scenario_lora_bf16(r):
    # Issue 36: under precision bf16 the frozen base is stored in bf16. Its
    # checksum hashes the stored values, and the checkpoint says which dtype
    # they had, so a resume across storage dtypes compares the init line.
    lora = "precision bf16\nlora rank 4 alpha 8 dropout 0.05 targets q_proj,v_proj\n"
    full = r.deck("full.in", lora)
    part = r.deck("part.in", lora + "checkpoint every 5 dir ck stop_after 10\n")
    cont = r.deck("cont.in", lora + "checkpoint every 5 dir ck\nresume auto\n")
    out = r.run(2, full, run="full").stdout
    if "base frozen in bf16" not in out:
        fail("a bf16 LoRA run must store (and say it stores) the frozen base in bf16:\n" + out)
    r.run(2, part, run="res")
    out = r.run(2, cont, run="res").stdout
    if "resumed from ck/step_10 at step 10" not in out or "frozen base bit-identical" not in out:
        fail("bf16 LoRA resume did not take step_10 or did not keep the base:\n" + out)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res/metrics.jsonl"), 0.0)
    h5dump = shutil.which("h5dump")
    if h5dump:
        dumped = subprocess.run([h5dump, "-d", "base_dtype", os.path.join(r.dir, "ck/step_10/rank_0.h5")],
                                capture_output=True, text=True).stdout
        if '"bf16"' not in dumped:
            fail("a bf16 LoRA checkpoint must record base_dtype bf16:\n" + dumped)
    # An fp32 LoRA checkpoint (f32 base, its checksum over f32 values) under bf16.
    f32 = "lora rank 4 alpha 8 dropout 0.05 targets q_proj,v_proj\n"
    r.run(2, r.deck("part32.in", f32 + "checkpoint every 5 dir ck32 stop_after 10\n"), run="res32")
    out = r.run(2, r.deck("cont32.in", lora + "resume ck32/step_10\n"), run="res32").stdout
    if "stored in f32, this run stores it in bf16" not in out or "resumed from ck32/step_10" not in out:
        fail("resuming an fp32 LoRA checkpoint under bf16 must compare the base by its init line and say so:\n" + out)
    # merge_adapter folds the adapters into the bf16 base; save_final writes it.
    out = r.run(2, r.deck("merge.in", lora + "merge_adapter on\nsave_final merged.h5\n"), run="merged").stdout
    if "merge_adapter: W +=" not in out or not os.path.exists(os.path.join(r.dir, "merged.h5")):
        fail("merge_adapter + save_final on a bf16 base failed:\n" + out)
    print("ok: bf16-base LoRA resumes bit-identically, records its base dtype, resumes fp32 checkpoints, merges")


def scenario_fp8_same_world(r):
    # precision fp8: the delayed-scaling state (amax histories, scales) is
    # part of the checkpoint; without it the resumed run would restart from
    # scale 1 and its curve would differ.
    full = r.deck("full.in", "precision fp8\n")
    part = r.deck("part.in", "precision fp8\ncheckpoint every 5 dir ck stop_after 10\n")
    cont = r.deck("cont.in", "precision fp8\ncheckpoint every 5 dir ck\nresume auto\n")
    r.run(2, full, run="full")
    r.run(2, part, run="res")
    out = r.run(2, cont, run="res").stdout
    if "resumed from ck/step_10 at step 10" not in out or "FP8 scales start at 1" in out:
        fail("resume did not restore the FP8 state:\n" + out)
    if ", fp8 all_gather on " not in out:
        fail("np 2 full_shard fp8 runs the FP8 all-gather by default; the header does not say so:\n" + out)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res/metrics.jsonl"), 0.0)
    # The FP8 all-gather (issue 20) changes no byte of what is saved: the
    # same 10 steps with it off write the same datasets (master shards, AdamW
    # state, FP8 scaling state, ...), and a checkpoint written with it off
    # resumes with it on to the same curve bit for bit.
    off = r.deck("part_off.in", "precision fp8\nfp8 all_gather off\ncheckpoint every 5 dir ck_off stop_after 10\n")
    out = r.run(2, off, run="res_off").stdout
    if ", fp8 all_gather off (fp8 all_gather off in the deck)" not in out:
        fail("the header does not say the FP8 all-gather is off:\n" + out)
    cont_off = r.deck("cont_off.in", "precision fp8\ncheckpoint every 5 dir ck_off\nresume auto\n")
    r.run(2, cont_off, run="res_off")
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res_off/metrics.jsonl"), 0.0)
    h5dump, h5ls = shutil.which("h5dump"), shutil.which("h5ls")
    if not (h5dump and h5ls):
        print("note: h5dump/h5ls not found: the checkpoint datasets were not compared byte for byte")
        return
    compared = 0
    for rank_file in ("rank_0.h5", "rank_1.h5"):
        on_file = os.path.join(r.dir, "ck/step_10", rank_file)
        off_file = os.path.join(r.dir, "ck_off/step_10", rank_file)
        listing = subprocess.run([h5ls, "-r", on_file], capture_output=True, text=True, check=True).stdout
        datasets = [line.split()[0] for line in listing.splitlines() if " Dataset " in line]
        if not any("fp8" in d for d in datasets) or not any("master" in d for d in datasets):
            fail(f"{rank_file}: expected master shards and FP8 state among {datasets}")
        for d in datasets:
            a = h5dump_binary(h5dump, on_file, d, os.path.join(r.dir, "on.bin"))
            b = h5dump_binary(h5dump, off_file, d, os.path.join(r.dir, "off.bin"))
            if a != b:
                fail(f"{rank_file} {d}: differs between fp8 all_gather on and off")
            compared += 1
    print(f"ok: {compared} datasets of step_10 identical with fp8 all_gather on and off; resumed across them bit-identically")


def scenario_reshard(r, np_from, np_to, strategy_to, strategy_from="full_shard"):
    total = 4  # sequences per optimizer step, on any number of ranks
    full = r.deck("full.in", "")
    part = r.deck("part.in", "checkpoint every 5 dir ck stop_after 10\n")
    cont = r.deck("cont.in", "checkpoint every 5 dir ck\nresume auto\n")
    r.run(np_to, full, run="full", micro=total // np_to, strategy=strategy_to)
    r.run(np_from, part, run="res", micro=total // np_from, strategy=strategy_from)
    out = r.run(np_to, cont, run="res", micro=total // np_to, strategy=strategy_to).stdout
    if "resharded" not in out:
        fail("the resume did not report resharding:\n" + out)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res/metrics.jsonl"), 1e-5)


def expect_error(p, *needles):
    if p.returncode == 0:
        fail("expected a failure, got exit 0:\n" + p.stdout)
    for n in needles:
        if n not in p.stdout:
            fail(f"expected '{n}' in the error output:\n" + p.stdout)


def scenario_damaged(r):
    part = r.deck("part.in", "checkpoint every 5 dir ck stop_after 15\n")
    r.run(2, part, run="res")
    ck = os.path.join(r.dir, "ck")
    # What SIGKILL during the save of step 20 leaves: a partial temp dir.
    os.makedirs(os.path.join(ck, "step_20.tmp"))
    with open(os.path.join(ck, "step_20.tmp/rank_0.h5"), "wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    # A truncated shard of the newest checkpoint.
    victim = os.path.join(ck, "step_15/rank_1.h5")
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.truncate(size // 2)
    explicit = r.deck("explicit.in", "resume ck/step_15\n")
    expect_error(r.run(2, explicit, expect_ok=False, run="x"), "step_15/rank_1.h5", "truncated")
    cont = r.deck("cont.in", "checkpoint every 5 dir ck\nresume auto\n")
    out = r.run(2, cont, run="res").stdout
    if "resumed from ck/step_10 at step 10" not in out or "skipping" not in out:
        fail("resume auto did not fall back to step_10:\n" + out)
    # No manifest (a save killed before its commit) is refused too.
    os.remove(os.path.join(ck, "step_20/manifest.json"))
    again = r.deck("again.in", "resume ck/step_20\n")
    expect_error(r.run(2, again, expect_ok=False, run="x"), "step_20", "manifest.json is missing")
    # A different seed is refused (the data order would differ).
    seed = r.deck("seed.in", "resume ck/step_10\n")
    expect_error(r.run(2, seed, expect_ok=False, run="x", seed=12), "written with seed 11")
    print("ok: damaged checkpoints refused, auto fell back")


def chunk_address(h5ls, file, dataset):
    """Byte offset of a dataset's data (h5ls -va): the `Address:` of a
    contiguous dataset (format 3), or the first chunk of a chunked one."""
    lines = subprocess.run([h5ls, "-va", f"{file}/{dataset}"], check=True, stdout=subprocess.PIPE,
                           text=True).stdout.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:1] == ["Address:"]:
            return int(line.split()[1])
        if line.split()[:3] == ["Flags", "Bytes", "Address"]:
            return int(lines[i + 2].split()[2])
    fail(f"no chunk address for {file}/{dataset} in h5ls output:\n" + "\n".join(lines))


def scenario_damaged_fallback(r, h5dump):
    # Damage of any kind in the newest checkpoint makes `resume auto` fall
    # back to the newest intact one and say what it skipped and why; damage
    # that only one rank reads (rank 1's file on a same-world resume) makes
    # every rank skip it. An explicit `resume step_N` stops with the error.
    h5ls = os.path.join(os.path.dirname(h5dump), "h5ls")
    part = r.deck("part.in", "checkpoint every 5 dir ck stop_after 15\n")
    r.run(2, part, run="base")
    ck = os.path.join(r.dir, "ck")
    unit = json.loads(h5dump_string(h5dump, os.path.join(ck, "step_15/rank_0.h5"), "/unit_names"))[1]

    def flip_dataset(path):  # inside the first chunk of a unit's master weights
        at = chunk_address(h5ls, path, f"units/{unit}/master") + 64
        with open(path, "r+b") as f:
            f.seek(at)
            data = f.read(16)
            f.seek(at)
            f.write(bytes(b ^ 0xFF for b in data))

    def superblock(path):  # keep the signature, wreck the rest of the superblock
        with open(path, "r+b") as f:
            f.seek(8)
            f.write(b"\xff" * 40)

    def truncate(path):
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)

    cases = [
        ("flipped bytes in a dataset of rank_1.h5 (only rank 1 reads it)",
         [("step_15/rank_1.h5", flip_dataset)], 10, ["rank 1:", "checksum mismatch", f"units/{unit}"]),
        ("damaged superblock of rank_0.h5", [("step_15/rank_0.h5", superblock)], 10, ["rank_0.h5"]),
        ("damaged superblock of rank_1.h5 (only rank 1 opens it)",
         [("step_15/rank_1.h5", superblock)], 10, ["rank 1:", "rank_1.h5"]),
        ("truncated rank_1.h5", [("step_15/rank_1.h5", truncate)], 10, ["rank_1.h5", "truncated"]),
        ("missing rank_0.h5", [("step_15/rank_0.h5", os.remove)], 10, ["rank_0.h5 is missing"]),
        ("step_15 and step_10 both damaged",
         [("step_15/rank_1.h5", flip_dataset), ("step_10/rank_1.h5", superblock)], 5, ["checksum mismatch"]),
    ]
    cont = r.deck("cont.in", "checkpoint every 5 dir ${ck}\nresume auto\n")
    for i, (what, damages, expect, needles) in enumerate(cases):
        name = f"ck_{i}"
        shutil.copytree(ck, os.path.join(r.dir, name))
        for file, damage in damages:
            damage(os.path.join(r.dir, name, file))
        out = r.run(2, cont, run=f"run_{i}", ck=name, max_steps=16).stdout
        if f"resumed from {name}/step_{expect} at step {expect}" not in out:
            fail(f"{what}: resume auto did not fall back to step_{expect}:\n" + out)
        for n in [f"skipping {name}/step_15"] + needles:
            if n not in out:
                fail(f"{what}: expected '{n}' in the output:\n" + out)
        print(f"ok: {what}: resume auto fell back to step_{expect}")
    # An explicit resume of the damaged checkpoint stops with the error.
    shutil.copytree(ck, os.path.join(r.dir, "ck_x"))
    flip_dataset(os.path.join(r.dir, "ck_x/step_15/rank_1.h5"))
    explicit = r.deck("explicit.in", "resume ck_x/step_15\n")
    expect_error(r.run(2, explicit, expect_ok=False, run="x"), "rank_1.h5", "checksum mismatch")
    print("ok: an explicit resume of the damaged checkpoint stops with the error")


def scenario_damaged_manifest(r):
    # Any damage to the newest checkpoint's manifest falls back (issue 35):
    # the parser's own message quotes the bytes it read, which must reach the
    # log (and the broadcast of the resume plan, as JSON) as printable text.
    part = r.deck("part.in", "checkpoint every 5 dir ck stop_after 15\n")
    r.run(2, part, run="base")
    ck = os.path.join(r.dir, "ck")
    manifest = json.load(open(os.path.join(ck, "step_15", "manifest.json")))
    random_bytes = bytes((i * 167 + 0xff) % 256 for i in range(200))  # fixed; starts with 0xff, not UTF-8
    non_utf8 = json.dumps(dict(manifest, checkpoint_id="ID")).encode().replace(b'"ID"', b'"\xff\xfe\xc3("')
    wrong_type = json.dumps(dict(manifest, checkpoint_id=5, complete="yes")).encode()
    no_name = json.dumps(dict(manifest, files=[{"bytes": f["bytes"]} for f in manifest["files"]])).encode()
    cases = [("200 random bytes as manifest.json", "step_15/manifest.json", random_bytes, "not valid JSON"),
             ("valid JSON holding non-UTF-8 bytes", "step_15/manifest.json", non_utf8, "not valid JSON"),
             ("manifest fields of the wrong type", "step_15/manifest.json", wrong_type, "manifest.json"),
             ("a file entry without its name", "step_15/manifest.json", no_name, "manifest.json"),
             ("random bytes as latest", "latest", random_bytes, "latest")]
    cont = r.deck("cont.in", "checkpoint every 5 dir ${ck}\nresume auto\n")
    for i, (what, file, content, reason) in enumerate(cases):
        name = f"ckm_{i}"
        shutil.copytree(ck, os.path.join(r.dir, name))
        with open(os.path.join(r.dir, name, file), "wb") as f:
            f.write(content)
        cmd = r.command(2, cont, {"run": f"run_{i}", "ck": name, "max_steps": 16})
        p = subprocess.run(cmd, cwd=r.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode("utf-8", errors="replace")
        unprintable = sorted({b for b in p.stdout if b >= 0x7f or (b < 0x20 and b not in (9, 10, 13))})
        if p.returncode != 0:
            fail(f"{what}: exit {p.returncode}, expected a fall-back to step_10:\n{out[-3000:]}")
        if unprintable:
            fail(f"{what}: the output holds unprintable bytes {unprintable[:8]}:\n{out[-3000:]}")
        if file == "latest":
            # `latest` unreadable: the newest intact checkpoint, step_15, is taken.
            if f"resumed from {name}/step_15 at step 15" not in out or "latest" not in out:
                fail(f"{what}: expected step_15 taken with a note on latest:\n{out[-3000:]}")
        else:
            if f"resumed from {name}/step_10 at step 10" not in out:
                fail(f"{what}: resume auto did not fall back to step_10:\n{out[-3000:]}")
            notes = [l for l in out.splitlines() if f"{name}/step_15" in l and "manifest.json" in l]
            if not notes or not any(reason in l for l in notes):
                fail(f"{what}: no note naming {name}/step_15/manifest.json and '{reason}':\n{out[-3000:]}")
        print(f"ok: {what}: resume auto fell back and said why in printable text")
    # An explicit resume of the damaged step stops with the reason, cleanly.
    # (A fresh copy: the runs above re-saved step_15 over the damage.)
    shutil.copytree(ck, os.path.join(r.dir, "ckm_x"))
    with open(os.path.join(r.dir, "ckm_x", "step_15", "manifest.json"), "wb") as f:
        f.write(random_bytes)
    explicit = r.deck("explicit.in", "resume ckm_x/step_15\n")
    p = subprocess.run(r.command(2, explicit, {"run": "x"}), cwd=r.dir, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode("utf-8", errors="replace")
    if p.returncode == 0 or "step_15/manifest.json is not valid JSON" not in out or "internal error" in out \
            or "MPI_ABORT" in out:
        fail(f"explicit resume of a garbage manifest: exit {p.returncode}:\n{out[-3000:]}")
    print("ok: an explicit resume of the damaged manifest stops with the error")
    # Resuming an fp32 checkpoint under precision bf16 says what happens to the masters.
    bf16 = r.deck("bf16.in", "precision bf16\nresume ck/step_10\n")
    out = r.run(2, bf16, run="bf16", max_steps=11).stdout
    if "written under precision fp32, this run uses bf16: the master weights and the optimizer state stay f32" \
            not in out:
        fail("resuming an fp32 checkpoint under precision bf16 did not say so:\n" + out[-3000:])
    print("ok: the precision change at the resume is stated")


def scenario_noncoherent(r):
    # Ranks that see the file system differently (a stale cache on another
    # node) must still resume the same checkpoint. Each rank runs in its own
    # working directory (mpirun MPMD, -wdir), so the deck's relative `ck`
    # is a different directory per rank: rank 0 sees step_5 and step_10,
    # rank 1 only step_5 with `latest` naming it. Rank 0 decides (step_10);
    # rank 1 cannot load it, every rank skips it and both resume step_5.
    part = r.deck("part.in", "checkpoint every 5 dir ck stop_after 10\n")
    r.run(2, part, run="base")
    cont = r.deck("cont.in", "checkpoint every 5 dir ck\nresume auto\n")
    other = os.path.join(r.dir, "node1")
    os.makedirs(os.path.join(other, "ck"))
    for f in ("base.in", "cont.in", "train.tok", "eval.tok"):
        shutil.copy(os.path.join(r.dir, f), other)
    shutil.copytree(os.path.join(r.dir, "ck/step_5"), os.path.join(other, "ck/step_5"))
    open(os.path.join(other, "ck/latest"), "w").write("step_5\n")
    # The saves of the resumed run (steps 10 and 12) must reach rank 0's
    # directory, as they would on a shared file system: rank 1 writes its
    # file through links to the temp directories rank 0 creates.
    for step in (10, 12):
        os.symlink(os.path.join(r.dir, f"ck/step_{step}.tmp"), os.path.join(other, f"ck/step_{step}.tmp"))
    variables = ["-var", "run", "res", "-var", "max_steps", "12"]
    cmd = (r.mpirun + ["-np", "1", "-wdir", r.dir, r.ftrain] + variables + ["cont.in", ":"] +
           ["-np", "1", "-wdir", other, r.ftrain] + variables + ["cont.in"])
    proc = subprocess.Popen(cmd, cwd=r.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out = proc.communicate(timeout=90)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        print(proc.communicate()[0])
        fail("the ranks did not agree on the checkpoint: the job hung")
    if proc.returncode != 0:
        print(out)
        fail(f"exit status {proc.returncode}")
    if "resumed from ck/step_5 at step 5" not in out:
        fail("the ranks did not resume step_5 together:\n" + out)
    if "skipping ck/step_10: rank 1:" not in out:
        fail("the skip of step_10 (which rank 1 cannot see) was not reported:\n" + out)
    train, _ = metrics(os.path.join(r.dir, "res/metrics.jsonl"))
    if [t[0] for t in train] != list(range(6, 13)):
        fail(f"steps {[t[0] for t in train]}, expected 6..12 once each")
    manifest = json.load(open(os.path.join(r.dir, "ck/step_12/manifest.json")))
    if [os.path.getsize(os.path.join(r.dir, "ck/step_12", f["name"])) for f in manifest["files"]] != \
            [f["bytes"] for f in manifest["files"]]:
        fail("the checkpoint of step 12 is not complete")
    print("ok: rank 0 decided, rank 1 could not load its choice, both fell back to step_5")


def scenario_lineage(r):
    # The branch of issue 22: a run saves steps 1..6; `resume ck/step_3`
    # with keep 2 stops at step 4 (re-saving step_4, `latest` = step_4);
    # `resume auto` must continue from that step_4, not from step_6 of the
    # abandoned branch, and keep must not have deleted step_3.
    ck = os.path.join(r.dir, "ck")
    first = r.deck("first.in", "checkpoint every 1 dir ck stop_after 6\n")
    r.run(2, first, run="a")
    step3_id = json.load(open(os.path.join(ck, "step_3/manifest.json"))).get("checkpoint_id")
    branch = r.deck("branch.in", "checkpoint every 1 dir ck keep 2 stop_after 4\nresume ck/step_3\n")
    out = r.run(2, branch, run="b").stdout
    if "resumed from ck/step_3 at step 3" not in out:
        fail("resume ck/step_3:\n" + out)
    left = entries(ck)
    if left != ["latest", "step_3", "step_4", "step_5", "step_6"]:
        fail(f"after the branch with keep 2: expected step_3 (branch point), step_4 and the abandoned step_5, "
             f"step_6, found {left}")
    parent = json.load(open(os.path.join(ck, "step_4/manifest.json"))).get("parent")
    # What a prune killed half-way (or an older ftrain) leaves: never a
    # checkpoint, removed at the next save.
    os.makedirs(os.path.join(ck, "step_12"))
    os.makedirs(os.path.join(ck, "step_11"))
    open(os.path.join(ck, "step_11/rank_0.h5"), "wb").write(b"\x89HDF\r\n\x1a\n")
    os.makedirs(os.path.join(ck, "step_2.pruning.tmp"))
    auto = r.deck("auto.in", "checkpoint every 1 dir ck keep 2\nresume auto\n")
    out = r.run(2, auto, run="b", max_steps=8).stdout
    if "resumed from ck/step_4 at step 4" not in out:
        fail("resume auto did not continue the lineage of latest (step_4):\n" + out)
    if "not resuming step_5, step_6" not in out:
        fail("resume auto did not report the abandoned branch:\n" + out)
    left = entries(ck)
    if left != ["latest", "step_7", "step_8"]:
        fail(f"after resume auto to step 8 with keep 2: expected latest, step_7, step_8, found {left}")
    train, _ = metrics(os.path.join(r.dir, "b/metrics.jsonl"))
    if [t[0] for t in train] != [4, 5, 6, 7, 8]:
        fail(f"metrics of the branch: steps {[t[0] for t in train]}, expected 4..8 once each")
    if step3_id is None or parent != {"step": 3, "checkpoint_id": step3_id}:
        fail(f"step_4's manifest records parent {parent}, expected step 3 with id {step3_id}")
    print("ok: resume auto followed latest's lineage; keep kept the branch point; leftovers removed")


def wait_for_steps(path, steps, proc, limit):
    deadline = time.time() + limit
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        if os.path.exists(path):
            rows = [l for l in open(path) if '"loss"' in l]
            if len(rows) >= steps:
                return True
        time.sleep(0.05)
    return False


def scenario_preempt(r):
    deck = r.deck("long.in", "checkpoint every 100000 dir ck\nresume auto\n")
    for how in ("SIGUSR1 to mpirun", "SIGTERM to the ranks"):
        run = "pre_" + how.split()[0]
        proc = subprocess.Popen(r.command(2, deck, {"run": run, "max_steps": 100000}), cwd=r.dir,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not wait_for_steps(os.path.join(r.dir, run, "metrics.jsonl"), 3, proc, 60):
            proc.kill()
            fail(f"{how}: the run did not reach step 3:\n" + proc.communicate()[0])
        if how.startswith("SIGUSR1"):
            proc.send_signal(signal.SIGUSR1)
        else:
            children = subprocess.run(["pgrep", "-P", str(proc.pid)], stdout=subprocess.PIPE, text=True).stdout.split()
            if not children:
                fail("no rank processes found under mpirun")
            for pid in children:
                os.kill(int(pid), signal.SIGTERM)
        try:
            out = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            fail(f"{how}: the run did not stop")
        if proc.returncode != 0 or "stop signal received" not in out:
            fail(f"{how}: exit {proc.returncode}, expected 0 and a message:\n{out}")
        latest = open(os.path.join(r.dir, "ck/latest")).read().strip()
        train, _ = metrics(os.path.join(r.dir, run, "metrics.jsonl"))
        if latest != f"step_{train[-1][0]}":
            fail(f"{how}: latest is {latest}, the last logged step is {train[-1][0]}")
        print(f"ok: {how}: stopped after step {train[-1][0]}, checkpoint {latest}")
    # The next start continues from there.
    step = int(latest.split("_")[1])
    out = r.run(2, deck, run="pre_next", max_steps=step + 2).stdout
    if f"resumed from ck/{latest} at step {step}" not in out:
        fail("resume auto after preemption:\n" + out)
    # SIGKILL while checkpointing every step (the kill often lands inside a
    # save): whatever it interrupted, `resume auto` finds a complete one.
    every = r.deck("every.in", "checkpoint every 1 dir ck_kill keep 2\nresume auto\n")
    for attempt in range(3):
        run = f"kill_{attempt}"
        proc = subprocess.Popen(r.command(2, every, {"run": run, "max_steps": 100000}), cwd=r.dir,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not wait_for_steps(os.path.join(r.dir, run, "metrics.jsonl"), 4, proc, 60):
            proc.kill()
            fail("SIGKILL run did not start:\n" + proc.communicate()[0])
        time.sleep(0.013 * (attempt + 1))
        for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], stdout=subprocess.PIPE, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        proc.communicate(timeout=60)
        kill_dir = os.path.join(r.dir, "ck_kill")
        left = sorted(os.listdir(kill_dir))
        steps = [int(n[5:].split(".")[0]) for n in left if n.startswith("step_")]
        complete = [int(n[5:]) for n in left if n.startswith("step_") and not n.endswith(".tmp")
                    and os.path.exists(os.path.join(kill_dir, n, "manifest.json"))]
        if not complete:
            fail(f"SIGKILL #{attempt + 1}: no complete checkpoint left: {left}")
        out = r.run(2, every, run="kill_resume", max_steps=max(steps) + 1).stdout
        if f"resumed from ck_kill/step_{max(complete)} at step {max(complete)}" not in out:
            fail(f"SIGKILL #{attempt + 1}: left {left}; resume auto did not take step_{max(complete)}:\n" + out)
        print(f"  after SIGKILL #{attempt + 1}: {left}; resumed from step_{max(complete)}")
    print("ok: SIGKILL during checkpointing")


def rank_alive(pid):
    """True while `pid` runs (not a zombie waiting for mpirun to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def scenario_preempt_save(r):
    # SIGTERM is what SLURM (and PBS) send at preemption and time limits, to
    # every process of the job, then SIGKILL after a grace time. Open MPI's
    # mpirun, on SIGTERM, sends the ranks SIGCONT, then SIGTERM after
    # odls_base_sigkill_timeout seconds, then SIGKILL after as many again.
    # The stop path must fit: finish the save in flight, commit, stop; not
    # train another step and write another checkpoint (twice the time).
    delay_s, kill_timeout_s, grace_s = 4, 3, 7
    for mode in ("blocking", "async"):
        ck = f"ck_{mode}"
        deck = r.deck(f"preempt_{mode}.in", f"checkpoint every 5 dir {ck}" + (" async on" if mode == "async" else "") +
                      "\nresume auto\n")
        cmd = r.command(2, deck, {"run": f"pre_{mode}", "max_steps": 100000})
        cmd = cmd[:len(r.mpirun)] + ["--mca", "odls_base_sigkill_timeout", str(kill_timeout_s), "-x",
                                     "FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS"] + cmd[len(r.mpirun):]
        env = dict(os.environ, FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS=str(delay_s * 1000))
        proc = subprocess.Popen(cmd, cwd=r.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        tmp = os.path.join(r.dir, ck, "step_5.tmp")
        deadline = time.time() + 60
        while not os.path.isdir(tmp):
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                fail(f"{mode}: the save of step 5 never started:\n" + proc.communicate()[0][-3000:])
            time.sleep(0.02)
        ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], stdout=subprocess.PIPE, text=True).stdout.split()
        if len(ranks) != 2:
            proc.kill()
            fail(f"{mode}: expected 2 rank processes under mpirun, found {ranks}")
        started = time.time()
        for pid in [int(p) for p in ranks] + [proc.pid]:  # SLURM: SIGTERM to every process of the job
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        # When the ranks end (mpirun itself may linger until its own kill
        # sequence is over), and whether the job outlived the grace time.
        ranks_ended = None
        while proc.poll() is None and time.time() - started < grace_s:
            if ranks_ended is None and not any(rank_alive(p) for p in ranks):
                ranks_ended = time.time() - started
            time.sleep(0.02)
        if ranks_ended is None and not any(rank_alive(p) for p in ranks):
            ranks_ended = time.time() - started
        ended = time.time() - started if proc.poll() is not None else None
        if ended is None:  # the grace time is over: SIGKILL to all
            for pid in ranks:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0]
        left = sorted(os.listdir(os.path.join(r.dir, ck)))
        latest = open(os.path.join(r.dir, ck, "latest")).read().strip() if "latest" in left else None
        if "stop signal received (SIGTERM)" not in out:
            fail(f"{mode}: the ranks did not stop on SIGTERM before they were killed (ended after {ended} s; "
                 f"left {left}):\n{out[-3000:]}")
        if latest != "step_5" or any(n.endswith(".tmp") for n in left):
            fail(f"{mode}: expected latest = step_5 and no .tmp left, found latest {latest}, {left}:\n{out[-3000:]}")
        # The ranks may sit in MPI_Finalize until mpirun's own kill: what
        # counts is that everything was committed and said before it.
        print(f"ok: {mode}: SIGTERM during the save of step 5: the ranks committed it and stopped; rank processes "
              f"gone after {ranks_ended if ranks_ended is None else round(ranks_ended, 1)} s, mpirun after "
              f"{ended if ended is None else round(ended, 1)} s (mpirun kills at {2 * kill_timeout_s} s, SIGKILL at {grace_s} s)")
        out = r.run(2, deck, run=f"pre_{mode}_next", max_steps=6).stdout
        if f"resumed from {ck}/step_5 at step 5" not in out:
            fail(f"{mode}: resume auto after the preemption:\n{out[-3000:]}")


def scenario_consolidated_fault(r):
    # One rank fails in the middle of the collective save_final (test-only
    # switch FTRAIN_TEST_FAULT_CONSOLIDATED, src/ckpt/consolidated.cpp), once
    # before the collective write of a dataset and once after it. The other
    # rank must not be left waiting in the next collective HDF5 call: the job
    # ends, non-zero, with the failing rank's message, within seconds.
    deck = r.deck("final.in", "save_final final.h5\n")
    for spec, needle in (("1:3:select", "preparing '"), ("1:7:write", "writing '")):
        start = time.time()
        p = r.run(2, deck, expect_ok=False, env={"FTRAIN_TEST_FAULT_CONSOLIDATED": spec}, timeout=90,
                  run="fault", max_steps=4)
        elapsed = time.time() - start
        expect_error(p, "rank 1: save_final", needle, "FTRAIN_TEST_FAULT_CONSOLIDATED")
        for left in ("final.h5", "final.h5.tmp"):
            if os.path.exists(os.path.join(r.dir, left)):
                fail(f"{spec}: {left} was left behind by the failed save")
        print(f"ok: fault {spec}: the job ended in {elapsed:.1f} s with the message")


def h5dump_binary(h5dump, file, dataset, out):
    subprocess.run([h5dump, "-d", dataset, "-b", "LE", "-o", out, file], check=True, stdout=subprocess.DEVNULL)
    return open(out, "rb").read()


def h5dump_string(h5dump, file, dataset):
    text = subprocess.run([h5dump, "-w0", "-d", dataset, file], check=True, stdout=subprocess.PIPE,
                          text=True).stdout
    start = text.index('(0): "') + len('(0): "')
    return text[start:text.rindex('"')]


def eval_losses(path):
    return {step: loss for step, loss in metrics(path)[1]}


def scenario_consolidated(r, h5dump, part):
    deck = r.deck("final.in", "checkpoint every 1000 dir ${ck} consolidated on\nsave_final ${out}\n")
    reload = r.deck("reload.in", "")
    total = 4
    runs = [(1, "full_shard"), (2, "full_shard"), (2, "shard_grad_op"), (2, "no_shard"), (4, "full_shard"),
            (4, "hybrid_shard shard_group_size 2")]
    # Part a: np 1 and 2 full_shard plus the reload checks; part b: the other
    # strategies and np 4 (two CTest entries, so each stays short).
    chosen = [0, 1] if part == "a" else [2, 3, 4, 5]
    for i in chosen:
        np, strategy = runs[i]
        out, ck = f"final_{i}.h5", f"ck_{i}"
        r.run(np, deck, run=f"run_{i}", micro=total // np, strategy=strategy, ck=ck, out=out)
        step_dir = os.path.join(r.dir, ck, "step_20")
        manifest = json.load(open(os.path.join(step_dir, "manifest.json")))
        shards = [os.path.join(step_dir, f"rank_{s}.h5") for s in range(manifest["shard_group_size"])]
        units = json.loads(h5dump_string(h5dump, shards[0], "/unit_names"))
        compared = 0
        for unit in units:
            flat = b"".join(h5dump_binary(h5dump, f, f"/units/{unit}/master", os.path.join(r.dir, "shard.bin"))
                            for f in shards)
            for e in json.loads(h5dump_string(h5dump, shards[0], f"/units/{unit}/entries")):
                want = flat[4 * e["offset"]:4 * (e["offset"] + e["numel"])]
                got = h5dump_binary(h5dump, os.path.join(r.dir, out), e["name"], os.path.join(r.dir, "final.bin"))
                if got != want:
                    fail(f"np {np} {strategy}: consolidated '{e['name']}' differs from the gathered shards")
                in_step = h5dump_binary(h5dump, os.path.join(step_dir, "model.h5"), e["name"],
                                        os.path.join(r.dir, "step.bin"))
                if in_step != want:
                    fail(f"np {np} {strategy}: step_20/model.h5 '{e['name']}' differs from the gathered shards")
                compared += 1
        print(f"ok: np {np} {strategy}: {compared} consolidated datasets equal the gathered parameters")
    if part == "b":
        return
    # Reload the np 2 full_shard file: same np and batch shape -> the same eval
    # loss exactly; 4 ranks (another eval split) -> within 1e-6.
    trained = eval_losses(os.path.join(r.dir, "run_1/metrics.jsonl"))[20]
    for np, strategy, tolerance in ((2, "full_shard", 0.0), (4, "hybrid_shard shard_group_size 2", 1e-6)):
        r.run(np, reload, run=f"reload_{np}", micro=total // np, strategy=strategy, init="hdf5 final_1.h5")
        loaded = eval_losses(os.path.join(r.dir, f"reload_{np}/metrics.jsonl"))[0]
        if abs(loaded - trained) > tolerance:
            fail(f"init hdf5 on np {np}: eval loss {loaded}, the trained model had {trained}")
        print(f"ok: init hdf5 on np {np}: eval loss {loaded} (trained: {trained})")
    # A shape mismatch is a clear error naming the tensor.
    with open(os.path.join(r.dir, "wide.in"), "w") as f:
        f.write(BASE_DECK.replace("hidden_size 32", "hidden_size 48"))
    expect_error(r.run(2, os.path.join(r.dir, "wide.in"), expect_ok=False, run="x", micro=2, init="hdf5 final_1.h5"),
                 "final_1.h5", "model.embed_tokens.weight", "[128, 48]")
    print("ok: a mismatched model is refused naming the tensor")


def overlapped_steps(out, step):
    """K of the commit line "checkpoint step N -> ... while K step(s) trained"."""
    m = re.search(rf"^checkpoint step {step} -> \S+ \(written in the background in [\d.]+ s while (\d+) step\(s\) "
                  rf"trained; training paused [\d.]+ s\)$", out, re.M)
    if not m:
        fail(f"no background commit line for step {step}:\n" + out)
    return int(m.group(1))


def scenario_async_resume(r):
    full = r.deck("full.in", "")
    part = r.deck("part.in", "checkpoint every 5 dir ck async on stop_after 12\n")
    cont = r.deck("cont.in", "checkpoint every 5 dir ck async on\nresume ck/step_10\n")
    r.run(2, full, run="full")
    slow = {"FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS": "1500"}
    out = r.run(2, part, run="res", env=slow).stdout
    # Training went on while the writes were in flight: the commit of step 5
    # came after later steps, and those steps' lines were printed before it.
    for step in (5, 10):
        if overlapped_steps(out, step) < 1:
            fail(f"the save of step {step} did not overlap any training step:\n" + out)
    if out.index("step 7/20") > out.index("checkpoint step 5 ->"):
        fail("step 7 was not logged before the step 5 checkpoint committed:\n" + out)
    if not re.search(r"^checkpoint step 12 -> ck/step_12 \([\d.]+ s\)$", out, re.M) or \
            "stopped after step 12" not in out:
        fail("the last save (stop_after 12) was not a blocking save:\n" + out)
    out = r.run(2, cont, run="res").stdout
    if "resumed from ck/step_10 at step 10" not in out:
        fail("did not resume the asynchronously written step_10:\n" + out)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res/metrics.jsonl"), 0.0)
    manifest = json.load(open(os.path.join(r.dir, "ck/step_15/manifest.json")))
    if manifest["parent"]["step"] != 10 or manifest["format_version"] != 3:
        fail(f"step_15 manifest: {manifest}")


def scenario_async_fault(r):
    full = r.deck("full.in", "")
    run = r.deck("run.in", "checkpoint every 5 dir ck async on\n")
    cont = r.deck("cont.in", "checkpoint every 5 dir ck async on\nresume auto\n")
    r.run(2, full, run="full")
    p = r.run(2, run, expect_ok=False, run="res", timeout=90, env={"FTRAIN_TEST_FAULT_CHECKPOINT_WRITE": "1:10"})
    expect_error(p, "rank 1: checkpoint step 10 (background write): writing ck/step_10.tmp/rank_1.h5 failed",
                 "injected fault", "the previous checkpoint stays the latest")
    if "checkpoint step 5 -> ck/step_5" not in p.stdout or "checkpoint step 10 ->" in p.stdout:
        fail("expected step 5 committed and step 10 not:\n" + p.stdout)
    if "step 20/20" in p.stdout:
        fail("the run went on after the failed checkpoint:\n" + p.stdout)
    ck = os.path.join(r.dir, "ck")
    if open(os.path.join(ck, "latest")).read().strip() != "step_5" or os.path.exists(os.path.join(ck, "step_10")):
        fail(f"latest should still name step_5: {sorted(os.listdir(ck))}")
    out = r.run(2, cont, run="res").stdout
    if "resumed from ck/step_5 at step 5" not in out:
        fail("resume auto did not take step_5:\n" + out)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res/metrics.jsonl"), 0.0)


def scenario_async_kill(r):
    full = r.deck("full.in", "")
    run = r.deck("run.in", "checkpoint every 5 dir ck async on\n")
    cont = r.deck("cont.in", "checkpoint every 5 dir ck async on\nresume auto\n")
    r.run(2, full, run="full")
    delay = "FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS"
    cmd = r.command(2, run, {"run": "res"})
    cmd = cmd[:len(r.mpirun)] + ["-x", delay] + cmd[len(r.mpirun):]
    proc = subprocess.Popen(cmd, cwd=r.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, **{delay: "4000"}))
    # Step 11 logged: step_5 was committed at the save of step 10, whose own
    # write now sleeps 4 s in the background before its data.
    if not wait_for_steps(os.path.join(r.dir, "res", "metrics.jsonl"), 11, proc, 90):
        proc.kill()
        fail("the run did not reach step 11:\n" + proc.communicate()[0])
    ck = os.path.join(r.dir, "ck")
    before = sorted(os.listdir(ck))
    for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], stdout=subprocess.PIPE, text=True).stdout.split():
        os.kill(int(pid), signal.SIGKILL)
    proc.communicate(timeout=60)
    left = sorted(os.listdir(ck))
    if "step_10.tmp" not in before:
        fail(f"the write of step 10 was not in flight at the kill: {before}")
    if open(os.path.join(ck, "latest")).read().strip() != "step_5" or "step_10" in left:
        fail(f"a kill mid-write must leave step_5 the latest: {left}")
    out = r.run(2, cont, run="res").stdout
    if "resumed from ck/step_5 at step 5" not in out:
        fail(f"left {left}; resume auto did not take step_5:\n" + out)
    compare(os.path.join(r.dir, "full/metrics.jsonl"), os.path.join(r.dir, "res/metrics.jsonl"), 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--h5dump", default=shutil.which("h5dump"))
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix=f"ftrain_ckpt_{args.scenario}_")
    try:
        subprocess.run([args.prep, "synthetic", "--out", "train.tok", "--tokens", "60000", "--vocab", "128",
                        "--seed", "7", "--eval-out", "eval.tok", "--eval-tokens", "2048"],
                       cwd=workdir, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(workdir, "base.in"), "w") as f:
            f.write(BASE_DECK)
        r = Runner(args, workdir)
        if args.scenario == "same_world":
            scenario_same_world(r)
        elif args.scenario == "reshard_4_2":
            scenario_reshard(r, 4, 2, "full_shard")
        elif args.scenario == "reshard_2_4":
            scenario_reshard(r, 2, 4, "full_shard")
        elif args.scenario == "strategy":
            scenario_reshard(r, 4, 4, "hybrid_shard shard_group_size 2")
            for d in ("full", "res", "ck"):
                shutil.rmtree(os.path.join(workdir, d))
            scenario_reshard(r, 2, 2, "full_shard", strategy_from="no_shard")
        elif args.scenario == "lora":
            scenario_lora(r)
        elif args.scenario == "lora_bf16":
            scenario_lora_bf16(r)
        elif args.scenario == "fp8_same_world":
            scenario_fp8_same_world(r)
        elif args.scenario == "damaged":
            scenario_damaged(r)
        elif args.scenario == "preempt_save":
            scenario_preempt_save(r)
        elif args.scenario == "preempt":
            scenario_preempt(r)
        elif args.scenario == "damaged_fallback":
            scenario_damaged_fallback(r, args.h5dump)
        elif args.scenario == "damaged_manifest":
            scenario_damaged_manifest(r)
        elif args.scenario == "noncoherent":
            scenario_noncoherent(r)
        elif args.scenario == "lineage":
            scenario_lineage(r)
        elif args.scenario == "async_resume":
            scenario_async_resume(r)
        elif args.scenario == "async_kill":
            scenario_async_kill(r)
        elif args.scenario == "async_fault":
            scenario_async_fault(r)
        elif args.scenario == "consolidated_fault":
            scenario_consolidated_fault(r)
        elif args.scenario in ("consolidated_a", "consolidated_b"):
            scenario_consolidated(r, args.h5dump, args.scenario[-1])
        else:
            fail("unknown scenario " + args.scenario)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
