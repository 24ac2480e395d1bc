#!/usr/bin/python3
"""share/scripts/plot_metrics.py on real runs: the PNGs it writes must be valid.

    plot_test.py --repo R --ftrain F --prep P --workdir W

Trains the regression tests' tiny Llama (tests/regression/decks/tiny.in,
eval every 10 steps) twice for 20 steps, full_shard and no_shard, plots
both runs together (and each panel separately), and checks every PNG: the
8-byte signature, every chunk's CRC, IHDR first with a plausible size,
IDAT present, IEND last; then decodes it and requires more than a few
distinct colours (a blank canvas would pass the format checks). Also: a
missing run is a one-line error, not a traceback.

Must run under Debian's /usr/bin/python3 (python3-matplotlib), which is what
CMake passes; exits 77 (ctest: skipped) when that has no matplotlib.
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from ftrain_test import fail  # noqa: E402



def check_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path}: not a PNG signature")
    pos, chunks = 8, []
    while pos < len(data):
        if pos + 12 > len(data):
            fail(f"{path}: truncated chunk at byte {pos}")
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            fail(f"{path}: bad CRC in chunk {kind!r}")
        chunks.append((kind, body))
        pos += 12 + length
    if chunks[0][0] != b"IHDR" or chunks[-1][0] != b"IEND" or not any(k == b"IDAT" for k, _ in chunks):
        fail(f"{path}: chunk order {[k for k, _ in chunks][:4]}... is not IHDR ... IDAT ... IEND")
    width, height = struct.unpack(">II", chunks[0][1][:8])
    if not (200 <= width <= 5000 and 200 <= height <= 5000):
        fail(f"{path}: implausible size {width}x{height}")
    import matplotlib.image
    pixels = matplotlib.image.imread(path)
    colours = {tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7].tolist()}
    if len(colours) < 10:
        fail(f"{path}: only {len(colours)} distinct colours: nothing drawn")
    return width, height


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"SKIP: {sys.executable} has no matplotlib (apt-get install python3-matplotlib)")
        return 77
    w = os.path.abspath(a.workdir)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(os.path.join(w, "data"))
    subprocess.run([a.prep, "synthetic", "--out", f"{w}/data/train.tok", "--tokens", "20000", "--vocab", "64",
                    "--seed", "5", "--eval-out", f"{w}/data/eval.tok", "--eval-tokens", "2048"],
                   check=True, stdout=subprocess.DEVNULL)
    deck = os.path.join(a.repo, "tests/regression/decks/tiny.in")
    for strategy in ("full_shard", "no_shard"):
        subprocess.run([a.ftrain, "-var", "data_dir", f"{w}/data", "-var", "run_dir", f"{w}/{strategy}",
                        "-var", "strategy", strategy, deck], check=True, stdout=subprocess.DEVNULL)
    script = os.path.join(a.repo, "share/scripts/plot_metrics.py")
    out = os.path.join(w, "plots", "both.png")
    p = subprocess.run([sys.executable, script, f"{w}/full_shard", f"{w}/no_shard/metrics.jsonl", "--smooth", "3",
                        "--separate", "-o", out], capture_output=True, text=True)
    if p.returncode != 0:
        fail("plot_metrics.py failed:\n" + p.stdout + p.stderr)
    expected = [out] + [out[:-4] + f"-{n}.png" for n in ("loss", "lr", "throughput", "memory")]
    if p.stdout.split() != expected:
        fail(f"it reported {p.stdout.split()}, expected {expected}")
    for path in expected:
        width, height = check_png(path)
        print(f"ok: {os.path.relpath(path, w)} is a valid {width}x{height} PNG")
    # Default output: metrics.png beside the run's metrics.jsonl.
    p = subprocess.run([sys.executable, script, f"{w}/full_shard"], capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(f"{w}/full_shard/metrics.png"):
        fail("default output: " + p.stdout + p.stderr)
    check_png(f"{w}/full_shard/metrics.png")
    p = subprocess.run([sys.executable, script, f"{w}/missing"], capture_output=True, text=True)
    if p.returncode == 0 or "no such file" not in p.stderr or "Traceback" in p.stderr:
        fail("a missing run should be a one-line error:\n" + p.stderr)
    print("ok: default output path, missing run reported")
    # A full disk (/dev/full behind the output name: every write fails with
    # ENOSPC, no root needed) is a one-line error naming the file.
    full = os.path.join(w, "plots", "full.png")
    os.symlink("/dev/full", full)
    p = subprocess.run([sys.executable, script, f"{w}/full_shard", "-o", full], capture_output=True, text=True)
    if p.returncode == 0 or f"cannot write {full}" not in p.stderr or "Traceback" in p.stderr:
        fail(f"a plot on a full disk should be a one-line error naming {full} (exit {p.returncode}):\n" + p.stderr)
    print("ok: a failed plot write names the file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
