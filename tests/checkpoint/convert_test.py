#!/usr/bin/env python3
"""ftrain-convert and `init safetensors DIR` regression scenarios (CTest label
mpi;checkpoint). Reuses checkpoint_test.py's corpus, base deck and helpers.

Usage: convert_test.py SCENARIO --ftrain BIN --prep BIN --convert BIN --mpirun "..." --h5dump BIN

Scenarios:
  roundtrip  a 20-step np 2 run writes save_final final.h5; h5-to-safetensors
             with a small --shard-size gives several model-0000K-of-0000N
             shards, an index whose weight_map covers every dataset and whose
             total_size is the data size, and a Llama config.json; converting
             back gives a file whose every dataset equals final.h5's byte for
             byte (h5dump -b) with the same root attributes; `init
             safetensors DIR` (np 2, and np 2 with sync_module_states: only
             rank 0 reads) reproduces `init hdf5 final.h5`'s eval loss
             exactly.
  bf16       --dtype bf16 both ways: the bf16 directory and the bf16
             consolidated file made from it load to the same eval loss
             (same bits), close to the f32 model's; the bf16 file's datasets
             are uint16 with the ftrain_dtype attribute.
  save_final_bf16
             (registered once the deck has `save_final PATH dtype bf16`)
             the bf16 file save_final writes equals the same run's f32
             consolidated file rounded to bf16 by ftrain-convert (safetensors
             shards byte-identical) and reloads with `init hdf5`.
  errors     a directory whose index names a missing shard, a shard lacking
             a listed tensor, a broken index JSON: ftrain refuses each with the
             file and tensor named; ftrain-convert refuses a bad size and a
             missing input.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_test as ct  # noqa: E402

fail = ct.fail


def convert(args, *argv, expect_ok=True):
    p = subprocess.run([args.convert, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if expect_ok and p.returncode != 0:
        fail(f"ftrain-convert {' '.join(argv)} exited {p.returncode}:\n{p.stdout}")
    return p


def h5_datasets(h5dump, path):
    """Root dataset names of an HDF5 file (h5dump -n lists objects)."""
    text = subprocess.run([h5dump, "-n", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    return sorted(line.split()[1][1:] for line in text.splitlines() if line.strip().startswith("dataset "))


def h5_root_attributes(h5dump, path):
    """The root attributes' h5dump text, one entry per attribute, without the file name."""
    text = subprocess.run([h5dump, "-A", "-w0", "-g", "/", path], check=True, stdout=subprocess.PIPE,
                          text=True).stdout
    return [line.strip() for line in text.splitlines()[1:]]


def train_final(r):
    deck = r.deck("final.in", "save_final ${out}\n")
    r.run(2, deck, run="train", out="final.h5")
    return os.path.join(r.dir, "final.h5")


def eval_loss_with(r, run, init, strategy="full_shard"):
    deck = r.deck("reload.in", "")
    r.run(2, deck, run=run, init=init, strategy=strategy, max_steps=4)
    return ct.eval_losses(os.path.join(r.dir, run, "metrics.jsonl"))[0]


def scenario_roundtrip(r, args):
    final = train_final(r)
    st = os.path.join(r.dir, "st")
    convert(args, "h5-to-safetensors", final, st, "--shard-size", "20KB")
    names = h5_datasets(args.h5dump, final)
    index = json.load(open(os.path.join(st, "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 3 or shards[0] != f"model-00001-of-{len(shards):05d}.safetensors":
        fail(f"expected several model-0000K-of-0000N shards, got {shards}")
    if sorted(index["weight_map"]) != names:
        fail(f"weight_map {sorted(index['weight_map'])} != datasets {names}")
    data_bytes = 0
    for shard in shards:
        with open(os.path.join(st, shard), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        if header["__metadata__"].get("format") != "pt":
            fail(f"{shard}: __metadata__ lacks format pt: {header['__metadata__']}")
        data_bytes += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
    if index["metadata"]["total_size"] != data_bytes:
        fail(f"total_size {index['metadata']['total_size']} != {data_bytes} bytes of tensors")
    config = json.load(open(os.path.join(st, "config.json")))
    want = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "torch_dtype": "float32",
            "architectures": ["LlamaForCausalLM"]}
    for k, v in want.items():
        if config.get(k) != v:
            fail(f"config.json {k} = {config.get(k)!r}, expected {v!r}")
    print(f"ok: {len(names)} tensors in {len(shards)} shards, index and config.json as expected")

    back = os.path.join(r.dir, "back.h5")
    convert(args, "safetensors-to-h5", st, back)
    if h5_datasets(args.h5dump, back) != names:
        fail("the converted-back file has other datasets")
    for name in names:
        a = ct.h5dump_binary(args.h5dump, final, name, os.path.join(r.dir, "a.bin"))
        b = ct.h5dump_binary(args.h5dump, back, name, os.path.join(r.dir, "b.bin"))
        if a != b or len(a) == 0:
            fail(f"dataset '{name}' differs after h5 -> safetensors -> h5")
    if h5_root_attributes(args.h5dump, final) != h5_root_attributes(args.h5dump, back):
        fail("root attributes differ after the round trip:\n" + "\n".join(h5_root_attributes(args.h5dump, back)))
    print(f"ok: round trip exact for {len(names)} datasets and the root attributes")

    reference = eval_loss_with(r, "from_h5", "hdf5 final.h5")
    for run, strategy in (("from_dir", "full_shard"), ("from_dir_sync", "full_shard sync_module_states on")):
        loss = eval_loss_with(r, run, "safetensors st", strategy)
        if loss != reference:
            fail(f"init safetensors st ({strategy}): eval loss {loss}, init hdf5: {reference}")
    trained = ct.eval_losses(os.path.join(r.dir, "train", "metrics.jsonl"))[20]
    if reference != trained:
        fail(f"init hdf5: eval loss {reference}, the trained model had {trained}")
    print(f"ok: init safetensors DIR (also with sync_module_states) = init hdf5 = trained: eval loss {reference}")


def scenario_bf16(r, args):
    final = train_final(r)
    st16 = os.path.join(r.dir, "st16")
    convert(args, "h5-to-safetensors", final, st16, "--dtype", "bf16")
    if json.load(open(os.path.join(st16, "config.json")))["torch_dtype"] != "bfloat16":
        fail("config.json torch_dtype should be bfloat16")
    h16 = os.path.join(r.dir, "h16.h5")
    convert(args, "safetensors-to-h5", st16, h16)  # BF16 tensors stay bf16 by default
    text = subprocess.run([args.h5dump, "-H", "-A", "-d", "model.norm.weight", h16], check=True,
                          stdout=subprocess.PIPE, text=True).stdout
    if "H5T_STD_U16LE" not in text or "bfloat16" not in text:
        fail("bf16 dataset should be uint16 with ftrain_dtype = bfloat16:\n" + text)
    # bf16 -> bf16 again is bit-exact.
    st16b = os.path.join(r.dir, "st16b")
    convert(args, "h5-to-safetensors", h16, st16b)
    for shard in sorted(os.listdir(st16)):
        if shard.endswith(".safetensors") and open(os.path.join(st16, shard), "rb").read() != \
                open(os.path.join(st16b, shard), "rb").read():
            fail(f"{shard}: bf16 h5 -> safetensors is not bit-exact")
    l32 = eval_loss_with(r, "f32", "hdf5 final.h5")
    l_dir = eval_loss_with(r, "bf16_dir", "safetensors st16")
    l_h5 = eval_loss_with(r, "bf16_h5", "hdf5 h16.h5")
    if l_dir != l_h5:
        fail(f"bf16 dir eval loss {l_dir} != bf16 h5 {l_h5}")
    if abs(l_dir - l32) > 0.05 or l_dir == l32:
        fail(f"bf16 eval loss {l_dir} vs f32 {l32}: expected close but rounded")
    print(f"ok: bf16 directory and bf16 consolidated file both give eval loss {l_dir} (f32: {l32})")


def scenario_save_final_bf16(r, args):
    """`save_final PATH dtype bf16`: the collective bf16 file equals the same
    run's f32 consolidated file rounded by ftrain-convert --dtype bf16 (shard
    files byte-identical) and reloads with `init hdf5`."""
    deck = r.deck("final16.in", "checkpoint every 1000 dir ck consolidated on\nsave_final final16.h5 dtype bf16\n")
    r.run(2, deck, run="train")
    final16 = os.path.join(r.dir, "final16.h5")
    text = subprocess.run([args.h5dump, "-H", "-A", "-d", "model.norm.weight", final16], check=True,
                          stdout=subprocess.PIPE, text=True).stdout
    if "H5T_STD_U16LE" not in text or "bfloat16" not in text:
        fail("save_final dtype bf16 should store uint16 with ftrain_dtype = bfloat16:\n" + text)
    convert(args, "h5-to-safetensors", os.path.join(r.dir, "ck", "step_20", "model.h5"), os.path.join(r.dir, "a"),
            "--dtype", "bf16")
    convert(args, "h5-to-safetensors", final16, os.path.join(r.dir, "b"))
    shards = sorted(f for f in os.listdir(os.path.join(r.dir, "a")) if f.endswith(".safetensors"))
    for shard in shards:
        if open(os.path.join(r.dir, "a", shard), "rb").read() != open(os.path.join(r.dir, "b", shard), "rb").read():
            fail(f"{shard}: save_final dtype bf16 differs from the f32 file rounded to bf16")
    l_h5 = eval_loss_with(r, "bf16_h5", "hdf5 final16.h5")
    l_st = eval_loss_with(r, "bf16_st", "safetensors b")
    if l_h5 != l_st:
        fail(f"init hdf5 final16.h5: eval loss {l_h5}, init safetensors of its conversion: {l_st}")
    print(f"ok: save_final dtype bf16 = the f32 state rounded; init hdf5 reloads it (eval loss {l_h5})")


def scenario_errors(r, args):
    final = train_final(r)
    st = os.path.join(r.dir, "st")
    convert(args, "h5-to-safetensors", final, st, "--shard-size", "20KB")
    index_path = os.path.join(st, "model.safetensors.index.json")
    index = json.load(open(index_path))
    deck = r.deck("reload.in", "")

    def expect(what, *needles):
        p = r.run(2, deck, expect_ok=False, run="x", init="safetensors st", max_steps=4)
        ct.expect_error(p, *needles)
        print(f"ok: {what} is refused naming {needles}")

    # A weight_map entry naming a file that is not there.
    broken = dict(index, weight_map=dict(index["weight_map"], **{"model.norm.weight": "model-gone.safetensors"}))
    json.dump(broken, open(index_path, "w"))
    expect("a missing shard file", "model.safetensors.index.json", "model.norm.weight", "model-gone.safetensors")
    # An entry pointing at a shard that lacks the tensor.
    other = next(f for f in sorted(set(index["weight_map"].values()))
                 if f != index["weight_map"]["model.norm.weight"])
    broken = dict(index, weight_map=dict(index["weight_map"], **{"model.norm.weight": other}))
    json.dump(broken, open(index_path, "w"))
    expect("a tensor absent from its shard", "model.norm.weight", other, "no such tensor")
    # Not JSON.
    open(index_path, "w").write('{"weight_map": {')
    expect("a broken index", "model.safetensors.index.json", "not valid JSON")
    # The index missing altogether (and no model.safetensors).
    os.remove(index_path)
    expect("a directory without an index", "model.safetensors.index.json")

    p = convert(args, "h5-to-safetensors", final, "y", "--shard-size", "5XB", expect_ok=False)
    if p.returncode != 1 or "5XB" not in p.stdout or os.path.exists(os.path.join(r.dir, "y")):
        fail("a bad --shard-size should be an error naming it, before writing anything:\n" + p.stdout)
    p = convert(args, "safetensors-to-h5", os.path.join(r.dir, "nothing"), "z.h5", expect_ok=False)
    if p.returncode != 1 or "nothing" not in p.stdout:
        fail("a missing input should be an error naming it:\n" + p.stdout)
    print("ok: ftrain-convert refuses a bad size and a missing input")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--convert", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--h5dump", default=shutil.which("h5dump"))
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix=f"ftrain_convert_{args.scenario}_")
    try:
        subprocess.run([args.prep, "synthetic", "--out", "train.tok", "--tokens", "60000", "--vocab", "128",
                        "--seed", "7", "--eval-out", "eval.tok", "--eval-tokens", "2048"],
                       cwd=workdir, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(workdir, "base.in"), "w") as f:
            f.write(ct.BASE_DECK)
        r = ct.Runner(args, workdir)
        {"roundtrip": scenario_roundtrip, "bf16": scenario_bf16, "errors": scenario_errors,
         "save_final_bf16": scenario_save_final_bf16}.get(
            args.scenario, lambda r, a: fail("unknown scenario " + args.scenario))(r, args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
