#!/usr/bin/env python3
"""Offline merge of a sharded checkpoint (ftrain-convert sharded-to-h5 and
sharded-to-safetensors), run by CTest (labels mpi;checkpoint).

Usage: merge_test.py --ftrain BIN --prep BIN --convert BIN --mpirun "MPIEXEC FLAGS..." --workdir DIR

A tiny Llama trains 4 steps on 2 ranks with a sharded checkpoint at step 4
and save_final at the end (the same weights). Then, without training:
  * `ftrain-convert sharded-to-safetensors ck/step_4 A` on one process, and
  * `mpirun -np 3 ftrain-convert sharded-to-h5 ck/step_4 m.h5` (another rank
    count than the writer's) followed by h5-to-safetensors,
must give safetensors files byte-identical to h5-to-safetensors of
save_final's file. A directory that is not a checkpoint is one error naming
it, exit 1.
"""
import argparse
import os
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402
from ftrain_test import fail  # noqa: E402

DECK = """\
model llama preset tiny hidden_size 32 intermediate_size 64 num_hidden_layers 2 &
      num_attention_heads 4 num_key_value_heads 2 vocab_size 128
data tokens train.tok
batch micro 2 seq_len 32
max_steps 4
log every 2
checkpoint every 4 dir ck
save_final final.h5
run_dir run
"""



def main():
    ap = argparse.ArgumentParser()
    for name in ("ftrain", "prep", "convert", "mpirun", "workdir"):
        ap.add_argument("--" + name, required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    mpirun = shlex.split(a.mpirun)

    def run(cmd, expect=0):
        p = ftrain_test.run(cmd, 120, cwd=a.workdir, merge_output=False)
        if p.returncode != expect:
            fail(f"{' '.join(cmd)}: exit {p.returncode}, expected {expect}:\n{p.stdout}{p.stderr}")
        return p.stdout + p.stderr

    run([a.prep, "synthetic", "--out", "train.tok", "--tokens", "20000", "--vocab", "128", "--seed", "3"])
    with open(os.path.join(a.workdir, "m.in"), "w") as f:
        f.write(DECK)
    run(mpirun + ["-np", "2", a.ftrain, "m.in"])
    run([a.convert, "h5-to-safetensors", "final.h5", "want"])
    out = run([a.convert, "sharded-to-safetensors", "ck/step_4", "one"])
    if "written by 2 rank(s)" not in out or "merged on 1 rank(s)" not in out:
        fail("sharded-to-safetensors did not report the merge:\n" + out)
    run(mpirun + ["-np", "3", a.convert, "sharded-to-h5", "ck/step_4", "three.h5"])
    run([a.convert, "h5-to-safetensors", "three.h5", "three"])
    want = sorted(os.listdir(os.path.join(a.workdir, "want")))
    for got in ("one", "three"):
        names = sorted(os.listdir(os.path.join(a.workdir, got)))
        if names != want:
            fail(f"{got}: files {names}, save_final's conversion has {want}")
        for name in want:
            if open(os.path.join(a.workdir, got, name), "rb").read() != \
                    open(os.path.join(a.workdir, "want", name), "rb").read():
                fail(f"{got}/{name} differs from the conversion of save_final's file")
    print(f"ok: merged on 1 and on 3 ranks, byte-identical to save_final's weights ({', '.join(want)})")
    out = run([a.convert, "sharded-to-h5", "run", "x.h5"], expect=1)
    if out.count("ftrain-convert: error:") != 1 or "run" not in out:
        fail("a directory that is not a checkpoint: expected one error naming it:\n" + out)
    print("ok: not a checkpoint: one error, exit 1")


if __name__ == "__main__":
    main()
