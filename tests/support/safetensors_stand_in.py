"""A safetensors stand-in for a deck's `init safetensors ${hf_weights}`.

`ftrain --check` reads the weights' header and holds every tensor's name,
shape and dtype to the model, so an empty file no longer stands in for a
70B checkpoint. This writes one that passes: the deck is checked once with
a file that holds no tensor, and --check's error names every tensor the
model expects with its shape; the stand-in then declares exactly those, as
BF16. Its data is a hole (a sparse file: a 70B stand-in takes no disk
space), which --check never reads.

Python 3 standard library only. As a command:

    safetensors_stand_in.py PATH -- FTRAIN --check [-var ...] DECK
"""

import json
import os
import re
import struct
import subprocess
import sys

MISSING = re.compile(r"has no tensor '([^']+)' \(shape \[([0-9, ]*)\]\)")


ELEMENT_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8}


def write_header(path, tensors, dtype="BF16", dtypes=None):
    """`tensors`: {name: shape}, each of `dtype` unless `dtypes` names another.
    The data buffer is left a hole of the right size (it reads as zeros)."""
    dtypes = dtypes or {}
    header, offset = {}, 0
    for name, shape in sorted(tensors.items()):
        tensor_dtype = dtypes.get(name, dtype)
        n = ELEMENT_BYTES[tensor_dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": tensor_dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + offset)


def write_stand_in(path, check_command, cwd=None, env=None):
    """`check_command`: the `ftrain --check ... DECK` argv whose deck reads `path` as its weights."""
    write_header(path, {})
    p = subprocess.run(check_command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    tensors = {name: [int(d) for d in dims.split(",") if d.strip()]
               for name, dims in MISSING.findall(p.stdout + p.stderr)}
    if not tensors:
        raise RuntimeError("--check with an empty safetensors file named no missing tensor:\n" + p.stdout + p.stderr)
    write_header(path, tensors)
    return len(tensors)


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: safetensors_stand_in.py PATH -- FTRAIN --check [-var ...] DECK")
    print(f"safetensors stand-in {sys.argv[1]}: {write_stand_in(sys.argv[1], sys.argv[3:])} tensors")
