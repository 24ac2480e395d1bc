#!/usr/bin/env python3
"""The consolidated state dict is readable as-is with h5py (issue: "h5py must
read it as-is"): a tiny Llama trains 5 steps on 2 ranks and writes
save_final in f32 and in bf16; h5py opens both, every dataset has the Hugging
Face name and shape the config attributes imply, f32 values are finite, and
the bf16 file decoded as share/doc/checkpoints.md says equals the f32 file
rounded to bfloat16. Exit 77 (skipped) when h5py is not installed.

usage: h5py_reads_consolidated.py FTRAIN FTRAIN_PREP WORKDIR MPIEXEC [MPI FLAGS...]
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from ftrain_test import fail  # noqa: E402

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-h5py)")
    sys.exit(77)

ftrain, prep, work, mpiexec, *mpi_flags = sys.argv[1:]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
subprocess.run([prep, "synthetic", "--out", "train.tok", "--tokens", "20000", "--vocab", "64", "--seed", "5"],
               cwd=work, check=True, stdout=subprocess.DEVNULL)
deck = """model llama preset tiny vocab_size 64 hidden_size 32 intermediate_size 64 num_hidden_layers 2 &
      num_attention_heads 4 num_key_value_heads 2
data tokens train.tok
batch micro 2 seq_len 16
max_steps 5
run_dir run_${dtype}
save_final final_${dtype}.h5 dtype ${dtype}
"""
with open(os.path.join(work, "final.in"), "w") as f:
    f.write(deck)
for dtype in ("f32", "bf16"):
    subprocess.run([mpiexec, *mpi_flags, "-np", "2", ftrain, "-var", "dtype", dtype, "final.in"], cwd=work,
                   check=True, stdout=subprocess.DEVNULL)

with h5py.File(os.path.join(work, "final_f32.h5"), "r") as f, h5py.File(os.path.join(work, "final_bf16.h5"), "r") as g:
    hidden = int(f.attrs["hidden_size"])
    heads = int(f.attrs["num_attention_heads"])
    kv = int(f.attrs["num_key_value_heads"])
    inter = int(f.attrs["intermediate_size"])
    vocab = int(f.attrs["vocab_size"])
    layers = int(f.attrs["num_hidden_layers"])
    d = hidden // heads
    expected = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,),
                "lm_head.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        expected.update({p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
                         p + "self_attn.q_proj.weight": (heads * d, hidden), p + "self_attn.k_proj.weight": (kv * d, hidden),
                         p + "self_attn.v_proj.weight": (kv * d, hidden), p + "self_attn.o_proj.weight": (hidden, heads * d),
                         p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
                         p + "mlp.down_proj.weight": (hidden, inter)})
    if set(f.keys()) != set(expected):
        fail(f"datasets {sorted(set(f.keys()) ^ set(expected))} differ from the HF names")
    for name, shape in expected.items():
        a = f[name][...]  # exactly what a user types
        if a.shape != shape or a.dtype != np.float32 or not np.isfinite(a).all():
            fail(f"{name}: shape {a.shape} dtype {a.dtype} (expected {shape} float32, finite)")
        raw = g[name][...]
        decoded = (raw.astype(np.uint32) << 16).view(np.float32)  # the recipe in checkpoints.md
        bits = a.view(np.uint32).astype(np.uint64)
        rounded = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
        if decoded.shape != shape or not np.array_equal(decoded, rounded):
            fail(f"{name}: the bf16 file is not the f32 file rounded to bfloat16")
print(f"PASS: h5py read {len(expected)} datasets from the f32 and bf16 consolidated files")
