#!/usr/bin/env python3
"""The training engine on a device, proven on the host (issue 18).

Usage: sim_device_test.py SCENARIO --ftrain BIN --prep BIN [--sim-device LIB] --mpirun "MPIEXEC FLAGS..."

LIB is the test-only simulated device (tests/support/sim_device_backend.cpp),
loaded with FTRAIN_CUDA_BACKEND=LIB and selected with the deck's `device cuda`:
its memory sits at non-canonical addresses, so any host read or write of
device data (a shard, a gathered buffer, a batch, a loss slot, MPI on a
device pointer) crashes the run, and its ops run the host kernels on aliases
of that memory, so its curves must equal the host's BIT FOR BIT.

Scenarios (each compares `device cuda` on the simulated device with the same
deck on `device host`, exactly: loss, lr, grad_norm, eval_loss of every step):
  llama_np1    tiny Llama, 1 rank: fp32 with sync_module_states; bf16 no_shard; fp8; LoRA in fp32 and in
               bf16 (a bf16 frozen base) (save_adapter and merge_adapter + save_final, whose files must be
               byte-identical);
               activation checkpointing + forward prefetch + backward_post +
               limit_all_gathers 1; fp8 + prefetch on asynchronous host streams
               (FTRAIN_HOST_STREAM=async) with the debug allocator.
  llama_np2    the same configurations on 2 ranks (the collectives stage
               device buffers through host memory).
  vit_np12     tiny ViT on 1 and 2 ranks (fp32, and bf16 with checkpointing).
  tensor_parallel  `parallel tensor 2` at 2 ranks (fp32, and bf16 with
               checkpointing): the vocabulary-parallel embedding and head and
               the tensor group's collectives on a device.
  checkpoint   2 ranks: a checkpoint saved at step 5 on the simulated device
               resumes on the host, and one saved on the host resumes on the
               simulated device; both continuations equal the uninterrupted
               host run bit for bit (fp32 and fp8 state).
  offload      `fsdp ... offload`, 1 rank: on the host backend offload
               optimizer and all train bit for bit as offload none and the
               header says they change nothing; on the simulated device
               offload optimizer and all against offload none (curves and
               final weights bit for bit) for every strategy, gradient
               accumulation and LoRA; the device peak falls by what --check
               plans, on pinned host memory that every offload copy uses;
               precision fp8.
  offload_np2  the same at 2 ranks in bf16, LoRA with a bf16 base,
               shard_grad_op with no_sync and accumulation, and fp8 with
               the FP8 all-gather.
  offload_np4  every strategy at 4 ranks on asynchronous host streams with
               the debug allocator.
  offload_resume  2 ranks: checkpoints across offload settings (optimizer ->
               none, none -> all; fp8 optimizer -> all) continue the run
               without offload exactly.
  gpu_offload  (either) offload optimizer and all against offload none on
               the device, every strategy at np 1, two at np 2, bf16, and
               fp8 full_shard at np 2; pinned memory used: exact
               on the simulated device, within relative 1e-3 on a GPU (AdamW
               on the CPU vs the GPU).
  gpu          (no --sim-device: the real CUDA backend; label gpu) tiny Llama
               and tiny ViT, fp32, 1 rank, `device cuda` against the same deck
               on the host within a stated tolerance (GEMM and reduction
               order differ from OpenBLAS: relative 1e-3 on loss and
               eval_loss, 1e-2 on grad_norm, over 8 steps). Exits 77 (ctest:
               skipped) with the reason when no GPU is usable.
"""
import argparse
import filecmp
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

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
LLAMA_DECK = os.path.join(HERE, "decks", "tiny.in")
LORA_DECK = os.path.join(HERE, "decks", "tiny_lora.in")
VIT_DECK = os.path.join(SOURCE, "inputs", "tiny_vit.in")



class Runner(ftrain_test.Runner):
    def __init__(self, args, workdir):
        super().__init__(args.ftrain, args.mpirun, workdir)
        self.args = args
        self.runs = 0

    def run(self, np, deck, device, name, extra="", env_vars=None, **variables):
        """ftrain on `device` (host | cuda = the simulated device) with `env_vars` added to the
        environment of every rank; returns the run directory."""
        run_dir = os.path.join(self.dir, name)
        os.makedirs(run_dir, exist_ok=True)
        # The simulated device has no NCCL: its collectives go through the
        # staged communicator, which the deck must ask for (never implicit).
        comm = "device_comm mpi\n" if device == "cuda" and self.args.sim_device else ""
        wrapper = self.write(os.path.join(name, "deck.in"), f"device {device}\n{comm}include {deck}\n{extra}")
        env = dict(env_vars or {})
        if device == "cuda" and self.args.sim_device:
            env["FTRAIN_CUDA_BACKEND"] = self.args.sim_device
        argv = self.ftrain_argv(wrapper, {"data_dir": self.dir, "run_dir": run_dir, **variables})
        p = super().run(np, argv, env=env, timeout=240, merge_output=False,
                        what=f"{name}: ftrain -np {np} device {device} {variables}")
        with open(os.path.join(self.dir, "last_stderr"), "w") as f:
            f.write(p.stderr)
        with open(os.path.join(run_dir, "stdout.txt"), "w") as f:
            f.write(p.stdout)
        self.runs += 1
        if p.returncode != 0:
            print(p.stdout[-4000:], p.stderr[-4000:])
            fail(f"{name}: ftrain -np {np} device {device} {variables} exited {p.returncode}")
        if device == "cuda" and self.args.sim_device and "comm: device buffers staged through host memory over MPI" not in p.stdout:
            fail(f"{name}: the run header does not name the staged communicator")
        if device == "cuda" and "| device: cuda [device cuda" not in p.stdout:
            print(p.stdout[:2000])
            fail(f"{name}: the run header does not say the engine ran on the (simulated) device")
        return run_dir


def metrics(run_dir):
    return ftrain_test.curve(os.path.join(run_dir, "metrics.jsonl"))


def same_curve(host_dir, device_dir, what):
    a, ea = metrics(host_dir)
    b, eb = metrics(device_dir)
    if not a or [r[0] for r in a] != [r[0] for r in b]:
        fail(f"{what}: steps differ or none logged: {[r[0] for r in a]} vs {[r[0] for r in b]}")
    for x, y in zip(a, b):
        if x != y:
            fail(f"{what}: step {x[0]} not bit-identical: host {x} vs device {y}")
    if ea != eb:
        fail(f"{what}: eval losses differ: host {ea} vs device {eb}")
    print(f"ok: {what}: {len(a)} steps and {len(ea)} evaluations bit-identical (last loss {a[-1][1]!r})")


def close_curve(host_dir, device_dir, what, rel_loss, rel_norm):
    a, ea = metrics(host_dir)
    b, eb = metrics(device_dir)
    if not a or [r[0] for r in a] != [r[0] for r in b] or [e[0] for e in ea] != [e[0] for e in eb]:
        fail(f"{what}: steps differ or none logged")
    worst = 0.0
    for x, y in zip(a, b):
        dl = abs(x[1] - y[1]) / max(abs(x[1]), 1e-12)
        dn = abs(x[3] - y[3]) / max(abs(x[3]), 1e-12)
        worst = max(worst, dl)
        if dl > rel_loss or dn > rel_norm or x[2] != y[2]:
            fail(f"{what}: step {x[0]}: host {x} vs device {y} (relative loss {dl:g} > {rel_loss:g} "
                 f"or grad_norm {dn:g} > {rel_norm:g})")
    for x, y in zip(ea, eb):
        d = abs(x[1] - y[1]) / max(abs(x[1]), 1e-12)
        if d > rel_loss:
            fail(f"{what}: eval at step {x[0]}: host {x[1]} vs device {y[1]}")
    print(f"ok: {what}: {len(a)} steps within relative {rel_loss:g} (largest {worst:g})")


def gpu_usable(r):
    """The reason no GPU is usable, or None (ftrain --check with device cuda
    decides, as a run would: without a usable GPU it plans for one and its
    header says why none is usable here)."""
    deck = os.path.join(r.dir, "probe.in")
    with open(deck, "w") as f:
        f.write(f"device cuda\ninclude {LLAMA_DECK}\n")
    p = subprocess.run([r.args.ftrain, "--check", "-var", "data_dir", r.dir, "-var", "run_dir", r.dir, deck],
                       cwd=r.dir, capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    planned_only = re.search(r"planned: (no usable CUDA GPU here \(.*?\));", out)
    if p.returncode != 0:
        print(out)
        fail("ftrain --check with device cuda failed: it plans for a GPU with or without one")
    if planned_only:
        return planned_only.group(1)
    return None


def skip_without_gpu(r):
    """Exit 77 (skipped, with the reason) where no GPU is usable."""
    why_not = gpu_usable(r)
    if why_not:
        print("SKIP: no usable GPU: " + why_not)
        sys.exit(77)


def gpu_or_sim_device_extra(r):
    """The deck lines a GPU-or-simulated-device harness adds: on a GPU (after
    skip_without_gpu) `device_comm mpi`; the simulated device adds it itself."""
    if r.args.sim_device:
        return ""
    skip_without_gpu(r)
    return "device_comm mpi\n"


def scenario_gpu(r):
    skip_without_gpu(r)
    v = dict(micro=8, max_steps=8)
    close_curve(r.run(1, LLAMA_DECK, "host", "gpu_llama_host", **v), r.run(1, LLAMA_DECK, "cuda", "gpu_llama_cuda", **v),
                "llama fp32 on the GPU vs host", 1e-3, 1e-2)
    v = dict(micro=16, max_steps=12, log_every=1)
    close_curve(r.run(1, VIT_DECK, "host", "gpu_vit_host", **v), r.run(1, VIT_DECK, "cuda", "gpu_vit_cuda", **v),
                "vit fp32 on the GPU vs host", 1e-3, 1e-2)


def scenario_gpu_fsdp(r):
    """Every FSDP strategy at np 2 on one device (issue 19) through the staged
    communicator (NCCL refuses two ranks on one GPU) against the host; then a
    rank killed with SIGKILL must end the device job within 60 s. On a GPU
    (label gpu, skipped without one); with --sim-device the same harness runs
    on the host (the simulated device adds `device_comm mpi` itself)."""
    extra = gpu_or_sim_device_extra(r)
    for strategy, fsdp_extra in (("full_shard", ""), ("shard_grad_op", ""), ("no_shard", ""),
                                 ("hybrid_shard", "shard_group_size 2")):
        v = dict(micro=4, max_steps=8, strategy=strategy, fsdp_extra=fsdp_extra, forward_prefetch="on")
        host = r.run(2, LLAMA_DECK, "host", f"fsdp_{strategy}_host", **v)
        dev = r.run(2, LLAMA_DECK, "cuda", f"fsdp_{strategy}_device", extra, **v)
        close_curve(host, dev, f"{strategy} np 2 on one device vs host", 1e-3, 1e-2)
    # Kill one rank of a device run: mpirun must end the job, never hang.
    v = dict(micro=4, max_steps=1000000)
    run_dir = os.path.join(r.dir, "killed")
    os.makedirs(run_dir, exist_ok=True)
    deck = os.path.join(run_dir, "deck.in")
    with open(deck, "w") as f:
        comm = "device_comm mpi\n"
        f.write(f"device cuda\n{comm}include {LLAMA_DECK}\n")
    env = dict(os.environ)
    cmd = r.mpirun + ["-np", "2"]
    if r.args.sim_device:
        env["FTRAIN_CUDA_BACKEND"] = r.args.sim_device
        cmd += ["-x", "FTRAIN_CUDA_BACKEND"]
    cmd += [r.args.ftrain, "-var", "data_dir", r.dir, "-var", "run_dir", run_dir, "-var", "micro", "4",
            "-var", "max_steps", "1000000", "-var", "tag", "gpu_kill_test", deck]
    log = open(os.path.join(run_dir, "out.log"), "w")
    p = subprocess.Popen(cmd, cwd=r.dir, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline and "step " not in open(os.path.join(run_dir, "out.log")).read():
        time.sleep(0.2)
    ranks = subprocess.run(["pgrep", "-f", "--", "-var tag gpu_kill_test"], capture_output=True, text=True).stdout.split()
    victims = [pid for pid in ranks if int(pid) != p.pid]
    if not victims:
        p.kill()
        fail("kill one rank: no rank process found")
    os.kill(int(victims[-1]), signal.SIGKILL)
    start = time.time()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        subprocess.run(["pkill", "-9", "-f", "--", "-var tag gpu_kill_test"])
        fail("kill one rank: the device job still ran 60 s after a rank was killed")
    if p.returncode == 0:
        fail("kill one rank: the job exited 0 after losing a rank")
    print(f"ok: kill one rank: the device job ended {time.time() - start:.1f} s after the SIGKILL (exit {p.returncode})")


def scenario_gpu_offload(r):
    """`fsdp ... offload optimizer` and `all` against offload none on a GPU (label gpu, skipped without one): every
    strategy at np 1, and full_shard and hybrid_shard at np 2 on one GPU (staged communicator), in bf16, and fp8 under
    full_shard at np 2 (the FP8 all-gather); the state in pinned memory, the offload copies from and to it. AdamW runs on
    the CPU with offload and on the GPU without it, so the curves agree within a stated tolerance (relative 1e-3 on
    loss, 1e-2 on grad_norm), not bit for bit. With --sim-device the same harness runs on the host, where they are
    exact."""
    extra = gpu_or_sim_device_extra(r)
    cases = [(1, s, "", "bf16") for s in STRATEGIES] + [(2, "full_shard", "", "bf16"),
                                                         (2, "hybrid_shard", "shard_group_size 1", "bf16"),
                                                         (2, "full_shard", "", "fp8")]
    for np, strategy, fsdp_extra, precision in cases:
        v = dict(micro=8 // np, max_steps=8, strategy=strategy, precision=precision)
        name = f"gpu_offload_np{np}_{strategy}_{precision}"
        base = r.run(np, LLAMA_DECK, "cuda", f"{name}_none", extra, fsdp_extra=fsdp_extra, **v)
        for setting in ("optimizer", "all"):
            dev = r.run(np, LLAMA_DECK, "cuda", f"{name}_{setting}", extra, fsdp_extra=f"{fsdp_extra} offload {setting}",
                        **v)
            close_curve(base, dev, f"{strategy} {precision} np {np} offload {setting} vs none on the device", 1e-3, 1e-2)
            if precision == "fp8":
                same_fp8_all_gather(base, dev, f"{strategy} fp8 np {np} offload {setting} on the device")
            held, pinned_copies, pageable_copies = pinned_use(dev)
            # One rank: every copy on a stream is an offload copy (more ranks add the staged collectives' own).
            if held <= 0 or pinned_copies <= 0 or (np == 1 and pageable_copies != 0):
                fail(f"{name} offload {setting}: {held:.0f} pinned bytes, {pinned_copies:.0f} pinned and "
                     f"{pageable_copies:.0f} pageable stream copies")


def same_file(a, b, what):
    if not filecmp.cmp(a, b, shallow=False):
        fail(f"{what}: {a} and {b} differ")
    print(f"ok: {what}: byte-identical")


def same_h5(a, b, what):
    """Every dataset and attribute equal (h5dump's full text, exact values); the files' bytes
    differ by HDF5's object timestamps."""
    h5dump = shutil.which("h5dump")
    if not h5dump:
        print(f"note: {what}: h5dump (hdf5-tools) not found, files not compared")
        return
    texts = []
    for path in (a, b):
        out = subprocess.run([h5dump, path], capture_output=True, text=True, check=True).stdout
        texts.append(out.split("\n", 1)[1])  # the first line names the file
    if texts[0] != texts[1] or "DATASET" not in texts[0]:
        fail(f"{what}: {a} and {b} differ (h5dump)")
    print(f"ok: {what}: every dataset and attribute identical (h5dump)")


def llama_configs(np):
    micro = 8 // np
    return [
        # sync_module_states: rank 0's weights scattered from a device buffer (init_from_root)
        ("fp32_sync_module_states", LLAMA_DECK, "",
         dict(micro=micro, max_steps=8, fsdp_extra="sync_module_states on", init_extra="test_perturb_by_rank 0.01")),
        # no_shard: the gradients' all-reduce over the replica group (a second staged path)
        ("bf16_no_shard", LLAMA_DECK, "", dict(micro=micro, max_steps=8, precision="bf16", strategy="no_shard")),
        ("fp8", LLAMA_DECK, "", dict(micro=micro, max_steps=8, precision="fp8", checkpointing="on")),
        ("ckpt_prefetch", LLAMA_DECK, "",
         dict(micro=micro, max_steps=8, checkpointing="on", forward_prefetch="on", backward_prefetch="backward_post",
              limit_all_gathers=1, accumulate=1)),
        ("lora", LORA_DECK, "merge_adapter on\nsave_final ${run_dir}/final.h5\n", dict(micro=micro, max_steps=8)),
        # The frozen base stored in bf16 on the device: filled from rank 0's f32 values by a cast there
        # (init_from_root), gathered without one, merged and written through host copies.
        ("lora_bf16", LORA_DECK, "merge_adapter on\nsave_final ${run_dir}/final.h5\n",
         dict(micro=micro, max_steps=8, precision="bf16", fsdp_extra="sync_module_states on")),
        # Ops on stream worker threads, the debug allocator (poison + quarantine), FP8 and prefetch:
        # a host read that races the device's queued work, or of a released block, shows here.
        ("fp8_async_debug_alloc", LLAMA_DECK, "",
         dict(micro=micro, max_steps=8, precision="fp8", checkpointing="on", forward_prefetch="on",
              env_vars={"FTRAIN_HOST_STREAM": "async", "FTRAIN_ALLOC_DEBUG": "1"})),
    ]


def same_fp8_all_gather(host, dev, what):
    """Under full_shard the device gathers FP8 weights as FP8 bytes as the host does (header `fp8 all_gather
    on`, the same bytes per step); the simulated device's fp8_linear_backward checked every transposed copy."""
    for run in (host, dev):
        if "fp8 all_gather on" not in open(os.path.join(run, "stdout.txt")).read():
            fail(f"{what}: {run}: the header does not say `fp8 all_gather on`")
    def fp8_bytes(run):
        rows = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if '"loss"' in l]
        return [r.get("all_gather_fp8_weight_bytes_per_step") for r in rows]
    h, d = fp8_bytes(host), fp8_bytes(dev)
    if not h or None in h or min(h) <= 0 or h != d:
        fail(f"{what}: FP8 all-gather bytes per step host {h[:3]} vs device {d[:3]}")
    print(f"ok: {what}: FP8 weights gathered as FP8 on the device too ({d[0]} bytes per step)")


def scenario_llama(r, np):
    for name, deck, extra, variables in llama_configs(np):
        host = r.run(np, deck, "host", f"{name}_np{np}_host", extra, **variables)
        dev = r.run(np, deck, "cuda", f"{name}_np{np}_device", extra, **variables)
        if "env_vars" in variables and "FTRAIN_HOST_STREAM=async" not in open(os.path.join(dev, "..", "last_stderr")).read():
            fail(f"{name}: the asynchronous host stream was not used")
        same_curve(host, dev, f"llama {name} np {np}")
        if name.startswith("fp8") and np > 1:
            same_fp8_all_gather(host, dev, f"llama {name} np {np}")
        if name.startswith("lora"):
            same_file(os.path.join(host, "adapter", "adapter_model.safetensors"),
                      os.path.join(dev, "adapter", "adapter_model.safetensors"), "save_adapter")
            same_h5(os.path.join(host, "final.h5"), os.path.join(dev, "final.h5"), "merge_adapter + save_final")


def scenario_tensor_parallel(r):
    """`parallel tensor 2` at np 2 on the simulated device against the host, bit for bit: the vocabulary-parallel
    embedding and head, sequence parallelism and the tensor group's collectives (the staged communicator) never
    read device memory on the host. fp32, and bf16 with activation checkpointing."""
    for name, variables in (("fp32", dict(micro=8, max_steps=8)),
                            ("bf16_checkpointing", dict(micro=8, max_steps=8, precision="bf16", checkpointing="on"))):
        host = r.run(2, LLAMA_DECK, "host", f"tensor2_{name}_host", "parallel tensor 2\n", **variables)
        dev = r.run(2, LLAMA_DECK, "cuda", f"tensor2_{name}_device", "parallel tensor 2\n", **variables)
        if "data 1 x context 1 x tensor 2" not in open(os.path.join(dev, "stdout.txt")).read():
            fail(f"tensor 2 {name}: the header does not name the grid")
        same_curve(host, dev, f"llama tensor 2 {name} np 2")


def scenario_vit(r):
    # inputs/tiny_vit.in with activation checkpointing as a variable.
    text = open(VIT_DECK).read()
    if "activation_checkpointing off" not in text:
        fail(f"{VIT_DECK} no longer says `activation_checkpointing off`: update this test")
    deck = os.path.join(r.dir, "tiny_vit.in")
    with open(deck, "w") as f:
        f.write("variable checkpointing off\n" +
                text.replace("activation_checkpointing off", "activation_checkpointing ${checkpointing}"))
    common = dict(max_steps=12, log_every=1)
    for np in (1, 2):
        for name, variables in (("fp32", {}), ("bf16_ckpt", dict(precision="bf16", checkpointing="on"))):
            v = dict(common, micro=16 // np, **variables)
            host = r.run(np, deck, "host", f"vit_{name}_np{np}_host", **v)
            dev = r.run(np, deck, "cuda", f"vit_{name}_np{np}_device", **v)
            same_curve(host, dev, f"vit {name} np {np}")


STRATEGIES = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard")


def planned_bytes(text):
    """'312.50 KiB' (human_bytes) as bytes."""
    value, unit = text.split()
    return float(value) * {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}[unit]


def device_peak_mib(run_dir):
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if "device_peak_mib_max_rank" in l]
    if not rows:
        fail(f"{run_dir}: metrics.jsonl has no device_peak_mib_max_rank")
    return max(r["device_peak_mib_max_rank"] for r in rows)


def pinned_use(run_dir):
    """(pinned host bytes, stream copies from or to pinned memory, pageable ones) of rank 0's last metrics row."""
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if "host_pinned_mib_per_rank" in l]
    if not rows:
        fail(f"{run_dir}: metrics.jsonl has no host_pinned_mib_per_rank")
    last = rows[-1]
    return (last["host_pinned_mib_per_rank"][0] * 1024 ** 2, last["pinned_stream_copies_per_rank"][0],
            last["pageable_stream_copies_per_rank"][0])


def copies_at_reduction(run_dir, what):
    """Every reduced gradient shard's copy to the host was enqueued with its unit's reduce-scatter (behind its events,
    while the backward went on), none later."""
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"loss"' in l]
    if not rows or any("offload_gradient_copies_per_step" not in r for r in rows):
        fail(f"{what}: metrics.jsonl rows without offload_gradient_copies_per_step")
    for r in rows:
        copies, early = r["offload_gradient_copies_per_step"], r["offload_copies_at_reduction_per_step"]
        if copies <= 0 or early != copies:
            fail(f"{what}: step {r['step']}: {copies} gradient shard copies per step, {early} of them enqueued with "
                 f"their reduce-scatter (all must be)")


def offload_equal(r, np, deck, name, extra="", settings=("optimizer", "all"), **variables):
    """`device cuda` (the simulated device) with each offload setting against offload none on the same device:
    every step's loss, lr, grad_norm and eval_loss, and the final weights (save_final), bit for bit."""
    extra = extra + "save_final ${run_dir}/final.h5\n"
    fsdp_extra = variables.pop("fsdp_extra", "")
    base = r.run(np, deck, "cuda", f"{name}_none", extra, fsdp_extra=fsdp_extra, **variables)
    runs = {"none": base}
    for setting in settings:
        run_dir = r.run(np, deck, "cuda", f"{name}_{setting}", extra, fsdp_extra=f"{fsdp_extra} offload {setting}",
                        **variables)
        if f", offload {setting} (f32 state" not in open(os.path.join(run_dir, "stdout.txt")).read():
            fail(f"{name} offload {setting}: the fsdp header line does not say what moved to host memory")
        same_curve(base, run_dir, f"{name}: offload {setting} against offload none on the simulated device")
        same_h5(os.path.join(base, "final.h5"), os.path.join(run_dir, "final.h5"), f"{name}: offload {setting} final weights")
        copies_at_reduction(run_dir, f"{name} offload {setting}")
        runs[setting] = run_dir
    return runs


def offload_strategies(r, np, **variables):
    for strategy in STRATEGIES:
        group = {1: 1, 2: 1, 4: 2}[np]
        extra = f"shard_group_size {group}" if strategy == "hybrid_shard" else ""
        offload_equal(r, np, LLAMA_DECK, f"offload_np{np}_{strategy}", micro=8 // np, max_steps=6, strategy=strategy,
                      fsdp_extra=extra, **variables)


def offload_memory(r):
    """The device's peak (the simulated device's own blocks) falls by what --check plans for the state: at least
    the planned drop, at most that plus the one reduced-gradient shard in flight the plan counts (the peak comes
    where no reduction is in flight)."""
    v = dict(micro=8, max_steps=5)
    peaks, planned, pinned, host_planned, state_bytes = {}, {}, {}, {}, {}
    largest = 0
    for setting in ("none", "optimizer", "all"):
        run_dir = r.run(1, LLAMA_DECK, "cuda", f"offload_memory_{setting}", fsdp_extra=f"offload {setting}", **v)
        peaks[setting] = device_peak_mib(run_dir) * 1024 ** 2
        pinned[setting] = pinned_use(run_dir)
        deck = r.write(f"offload_memory_{setting}.in", f"device cuda\ndevice_comm mpi\ninclude {LLAMA_DECK}\n")
        argv = [r.args.ftrain, "--check"] + sum(
            (["-var", k, str(x)] for k, x in dict(data_dir=r.dir, run_dir=run_dir, fsdp_extra=f"offload {setting}",
                                                 **v).items()), []) + [deck]
        p = subprocess.run(argv, cwd=r.dir, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, FTRAIN_CUDA_BACKEND=r.args.sim_device))
        state = re.search(r"^  memory per rank +([0-9.]+ [KMG]?i?B) sharded state", p.stdout, re.M)
        device_part = re.search(r"^  offload +" + setting + r" on a device backend: ([0-9.]+ [KMG]?i?B) of the state on "
                                r"the device", p.stdout, re.M)
        unit = re.search(r"largest unit ([0-9.]+)K", p.stdout)
        if p.returncode != 0 or not state or not unit or (setting != "none" and not device_part):
            fail(f"--check offload {setting}: exit {p.returncode}, no state or offload line:\n{p.stdout}{p.stderr}")
        planned[setting] = planned_bytes((device_part or state).group(1))
        state_bytes[setting] = planned_bytes(state.group(1))
        host_part = re.search(r", ([0-9.]+ [KMG]?i?B) in pinned host memory per rank", p.stdout, re.M)
        host_planned[setting] = planned_bytes(host_part.group(1)) if host_part else 0.0
        largest = float(unit.group(1)) * 1000
    for setting in ("optimizer", "all"):
        drop, plan = peaks["none"] - peaks[setting], planned["none"] - planned[setting]
        in_flight = 4 * largest  # the plan's f32 reduced-gradient shard of the largest unit
        print(f"offload {setting}: device peak {peaks[setting]:.0f} B against {peaks['none']:.0f} B without: "
              f"fell {drop:.0f} B; planned {plan:.0f} B (+ up to {in_flight:.0f} B in flight)")
        if plan <= 0 or not 0.99 * plan <= drop <= 1.01 * (plan + in_flight):
            fail(f"offload {setting}: the device peak fell {drop:.0f} bytes, the plan says {plan:.0f} bytes plus up "
                 f"to {in_flight:.0f} of a reduced gradient in flight")
    print("ok: the simulated device's peak falls by the planned state bytes with offload optimizer and all")
    # Every offloaded byte is pinned host memory (at least the f32 state, at most what the plan puts in host memory
    # plus the two landing buffers of a reduced f32 gradient shard), and every copy on a stream uses pinned memory.
    if pinned["none"][0] != 0:
        fail(f"offload none: {pinned['none'][0]:.0f} bytes of pinned host memory (expected none)")
    for setting in ("optimizer", "all"):
        held, pinned_copies, pageable_copies = pinned[setting]
        low, high = state_bytes[setting], host_planned[setting] + 2 * 4 * largest
        print(f"offload {setting}: {held:.0f} B of pinned host memory (the f32 state {low:.0f} B, the plan's host "
              f"part + two landing shards {high:.0f} B); {pinned_copies:.0f} stream copies from or to pinned memory, "
              f"{pageable_copies:.0f} pageable")
        if not 0.99 * low <= held <= 1.01 * high:
            fail(f"offload {setting}: {held:.0f} bytes of pinned host memory, expected between the state's "
                 f"{low:.0f} and {high:.0f}")
        if pinned_copies <= 0 or pageable_copies != 0:
            fail(f"offload {setting}: {pinned_copies:.0f} stream copies used pinned host memory and "
                 f"{pageable_copies:.0f} pageable memory: every offload copy must use pinned memory")
    print("ok: the offloaded state is pinned host memory and every offload copy uses it")


def offload_divergence(r):
    """lr 1e9: the run stops at the same diverged step, naming the same unit and tensor, with offload optimizer
    (the guard on the host stream) as without it, and writes no metrics row for that step."""
    text = open(LLAMA_DECK).read()
    if "optimizer adamw lr 1e-2 " not in text:
        fail(f"{LLAMA_DECK} no longer says `optimizer adamw lr 1e-2`: update this test")
    deck = r.write("tiny_lr1e9.in", text.replace("optimizer adamw lr 1e-2 ", "optimizer adamw lr 1e9 "))
    stops = {}
    for setting in ("none", "optimizer"):
        name = f"offload_diverge_{setting}"
        run_dir = os.path.join(r.dir, name)
        os.makedirs(run_dir, exist_ok=True)
        wrapper = r.write(os.path.join(name, "deck.in"), f"device cuda\ndevice_comm mpi\ninclude {deck}\n")
        argv = r.ftrain_argv(wrapper, {"data_dir": r.dir, "run_dir": run_dir, "fsdp_extra": f"offload {setting}",
                                       "max_steps": 8})
        p = ftrain_test.Runner.run(r, 1, argv, env={"FTRAIN_CUDA_BACKEND": r.args.sim_device}, timeout=240,
                                   merge_output=True, what=f"{name}: lr 1e9 on the simulated device")
        out = p.stdout + (p.stderr or "")
        m = re.search(r"ftrain: error: (step (\d+) diverged: [^\n]*first non-finite gradient[^\n]*)", out)
        if p.returncode == 0 or not m:
            fail(f"{name}: exit {p.returncode}, expected a stop at a diverged step naming the gradient:\n{out[-3000:]}")
        rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"loss"' in l]
        if any(row["step"] >= int(m.group(2)) for row in rows):
            fail(f"{name}: a metrics row for the diverged step {m.group(2)}")
        stops[setting] = m.group(1)
    if stops["none"] != stops["optimizer"]:
        fail(f"the divergence stop differs with offload:\n  none:      {stops['none']}\n"
             f"  optimizer: {stops['optimizer']}")
    print(f"ok: lr 1e9 stops the same with offload optimizer: {stops['none'][:160]}")


def scenario_offload(r):
    """1 rank: the host backend's no-op; on the simulated device every strategy, LoRA, gradient accumulation,
    the device memory the offloaded state leaves (pinned host memory), and precision fp8."""
    base = r.run(1, LLAMA_DECK, "host", "offload_none_host", max_steps=6)
    for setting in ("optimizer", "all"):
        run_dir = r.run(1, LLAMA_DECK, "host", f"offload_{setting}_host", max_steps=6,
                        fsdp_extra=f"offload {setting}")
        header = open(os.path.join(run_dir, "stdout.txt")).read()
        if f", offload {setting} (no effect on the host backend" not in header:
            fail(f"offload {setting} on the host: the fsdp header line does not say it changes nothing:\n"
                 + header[:3000])
        same_curve(base, run_dir, f"host offload {setting} against offload none")
    offload_strategies(r, 1)
    offload_equal(r, 1, LLAMA_DECK, "offload_np1_accumulate", micro=4, accumulate=2, max_steps=6)
    offload_equal(r, 1, LORA_DECK, "offload_np1_lora", micro=8, max_steps=6)
    offload_memory(r)
    offload_divergence(r)
    # precision fp8 (one rank: the linears cast their gathered weights): the same bits with offload.
    offload_equal(r, 1, LLAMA_DECK, "offload_np1_fp8", micro=8, max_steps=8, precision="fp8")


def scenario_offload_np2(r):
    """2 ranks, bf16 (the compute-dtype shard is a cast of the host master): every strategy, and LoRA with a bf16
    frozen base (offload all moves it to the host too)."""
    offload_strategies(r, 2, precision="bf16")
    offload_equal(r, 2, LORA_DECK, "offload_np2_lora_bf16", micro=4, max_steps=6, precision="bf16")
    # no_sync: the unsharded gradient accumulates on the device and is reduced (and copied) once per step.
    offload_equal(r, 2, LLAMA_DECK, "offload_np2_no_sync", micro=2, accumulate=2, max_steps=6, strategy="shard_grad_op",
                  fsdp_extra="no_sync on")
    # precision fp8 under full_shard: the FP8 all-gather casts the device's compute-dtype shard (the host master
    # rounded on the host) with each layer's current scale; the same FP8 bytes and bits as without offload.
    runs = offload_equal(r, 2, LLAMA_DECK, "offload_np2_fp8", micro=4, max_steps=8, precision="fp8")
    same_fp8_all_gather(runs["none"], runs["optimizer"], "offload optimizer fp8 np 2")
    same_fp8_all_gather(runs["none"], runs["all"], "offload all fp8 np 2")


def scenario_offload_np4(r):
    """4 ranks on asynchronous host streams with the debug allocator (a copy read before it landed, or a host
    buffer reused early, shows as NaN or different bits): every strategy."""
    offload_strategies(r, 4, env_vars={"FTRAIN_HOST_STREAM": "async", "FTRAIN_ALLOC_DEBUG": "1"})


def scenario_offload_resume(r):
    """2 ranks: a checkpoint saved with offload optimizer resumes with offload none, and one saved without offload
    resumes with offload all; both continuations equal the uninterrupted run without offload bit for bit."""
    v = dict(micro=4, max_steps=10)
    full = r.run(2, LLAMA_DECK, "cuda", "offload_resume_full", **v)
    for first, second in (("optimizer", "none"), ("none", "all")):
        ck = os.path.join(r.dir, f"ck_offload_{first}_to_{second}")
        name = f"offload_resume_{first}_to_{second}"
        r.run(2, LLAMA_DECK, "cuda", name, f"checkpoint every 5 dir {ck} stop_after 5\n",
              fsdp_extra=f"offload {first}", **v)
        part = r.run(2, LLAMA_DECK, "cuda", name, f"checkpoint every 5 dir {ck}\nresume auto\n",
                     fsdp_extra=f"offload {second}", **v)
        if not os.path.isdir(os.path.join(ck, "step_5")) or not os.path.isdir(os.path.join(ck, "step_10")):
            fail(f"{name}: expected step_5 and step_10 in {ck}: {sorted(os.listdir(ck))}")
        same_curve(full, part, f"checkpoint saved with offload {first}, resumed with offload {second}")
    # Onto another world size: the step-5 checkpoint of 2 ranks with offload optimizer, resharded onto 1 rank,
    # continues the same with offload all as with offload none.
    ck = os.path.join(r.dir, "ck_offload_optimizer_to_none")
    v1 = dict(micro=8, max_steps=10)
    resumed = {}
    for setting in ("none", "all"):
        copy = os.path.join(r.dir, f"ck_np2_to_np1_{setting}")
        os.makedirs(copy)
        shutil.copytree(os.path.join(ck, "step_5"), os.path.join(copy, "step_5"))
        resumed[setting] = r.run(1, LLAMA_DECK, "cuda", f"offload_resume_np2_to_np1_{setting}",
                                 f"checkpoint every 5 dir {copy}\nresume {copy}/step_5\n",
                                 fsdp_extra=f"offload {setting}", **v1)
    same_curve(resumed["none"], resumed["all"], "np 2 offload optimizer checkpoint resumed on np 1: offload all vs none")
    # precision fp8: the FP8 state (scales, amax history) saved with offload optimizer resumes with offload all and
    # continues as the uninterrupted fp8 run without offload.
    v8 = dict(micro=4, max_steps=10, precision="fp8")
    full8 = r.run(2, LLAMA_DECK, "cuda", "offload_resume_fp8_full", **v8)
    ck = os.path.join(r.dir, "ck_offload_fp8")
    r.run(2, LLAMA_DECK, "cuda", "offload_resume_fp8", f"checkpoint every 5 dir {ck} stop_after 5\n",
          fsdp_extra="offload optimizer", **v8)
    part = r.run(2, LLAMA_DECK, "cuda", "offload_resume_fp8", f"checkpoint every 5 dir {ck}\nresume auto\n",
                 fsdp_extra="offload all", **v8)
    if not os.path.isdir(os.path.join(ck, "step_10")):
        fail(f"offload_resume_fp8: expected step_10 in {ck}: {sorted(os.listdir(ck))}")
    same_curve(full8, part, "fp8 checkpoint saved with offload optimizer, resumed with offload all")


def scenario_checkpoint(r):
    # checkpoint dir per direction; the uninterrupted run on the host is the reference.
    for precision in ("fp32", "fp8"):
        v = dict(micro=4, max_steps=10, precision=precision)
        full = r.run(2, LLAMA_DECK, "host", f"full_{precision}", **v)
        for first, second in (("cuda", "host"), ("host", "cuda")):
            ck = os.path.join(r.dir, f"ck_{precision}_{first}_to_{second}")
            save = f"checkpoint every 5 dir {ck} stop_after 5\n"
            resume = f"checkpoint every 5 dir {ck}\nresume auto\n"
            name = f"resume_{precision}_{first}_to_{second}"
            part = r.run(2, LLAMA_DECK, first, name, save, **v)
            r.run(2, LLAMA_DECK, second, name, resume, **v)
            if not os.path.isdir(os.path.join(ck, "step_5")) or not os.path.isdir(os.path.join(ck, "step_10")):
                fail(f"{name}: expected step_5 and step_10 in {ck}: {sorted(os.listdir(ck))}")
            same_curve(full, part, f"checkpoint {precision} saved on {first}, resumed on {second}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--ftrain", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--sim-device", default=None)
    ap.add_argument("--mpirun", required=True)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix=f"ftrain_sim_{args.scenario}_")
    try:
        subprocess.run([args.prep, "synthetic", "--out", "train.tok", "--tokens", "50000", "--vocab", "64",
                        "--seed", "7", "--eval-out", "eval.tok", "--eval-tokens", "4096"],
                       cwd=workdir, check=True, stdout=subprocess.DEVNULL)
        if args.scenario not in ("gpu_fsdp", "gpu_offload") and (args.scenario == "gpu") != (args.sim_device is None):
            fail("--sim-device is needed by every scenario but gpu, which runs the real CUDA backend "
                 "(gpu_fsdp, gpu_offload: either)")
        r = Runner(args, workdir)
        if args.scenario == "llama_np1":
            scenario_llama(r, 1)
        elif args.scenario == "llama_np2":
            scenario_llama(r, 2)
        elif args.scenario == "vit_np12":
            scenario_vit(r)
        elif args.scenario == "tensor_parallel":
            scenario_tensor_parallel(r)
        elif args.scenario == "offload":
            scenario_offload(r)
        elif args.scenario == "offload_np2":
            scenario_offload_np2(r)
        elif args.scenario == "offload_np4":
            scenario_offload_np4(r)
        elif args.scenario == "offload_resume":
            scenario_offload_resume(r)
        elif args.scenario == "checkpoint":
            scenario_checkpoint(r)
        elif args.scenario == "gpu":
            scenario_gpu(r)
        elif args.scenario == "gpu_fsdp":
            scenario_gpu_fsdp(r)
        elif args.scenario == "gpu_offload":
            scenario_gpu_offload(r)
        else:
            fail("unknown scenario " + args.scenario)
        print(f"ok: {args.scenario}: {r.runs} runs")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
