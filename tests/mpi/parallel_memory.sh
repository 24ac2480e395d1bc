#!/usr/bin/env bash
# What a training step adds to a rank's memory falls by about 2 with
# `parallel context 2` and with `parallel tensor 2`: np 2 at seq_len 2048,
# pure FSDP 2 (micro 1 per rank) against context 2 and tensor 2 (micro 1,
# accumulate 2: the same 2 windows per step), read from metrics.jsonl's host
# tensor fields (the host allocator's peak since the previous row minus what
# is alive at the row), steps 2 on. With a tiny model and long windows that
# is almost all activations, so each must hold 0.4-0.7 (tensor: 0.75) of
# FSDP 2's: context 2 keeps half of every window's tokens, tensor 2 half of
# the heads and intermediate columns and of the residual stream (sequence
# parallelism), and neither may keep a layer's collective buffers (gathered
# rows, partial sums, ring blocks) past their use. Every run must report
# the fields.
# Usage: parallel_memory.sh FTRAIN FTRAIN_PREP WORKDIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
ftrain=$1 prep=$2 work=$3 mpiexec=$4
shift 4
mpi_flags=("$@")
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$prep" synthetic --out train.tok --tokens 40000 --vocab 256 --seed 7 > prep.log

for setting in "fsdp2 1 1 1" "context2 1 2 2" "tensor2 2 1 2"; do
  read -r name tensor context accumulate <<<"$setting"
  cat > "$name.in" <<DECK
model llama preset tiny vocab_size 256 hidden_size 64 intermediate_size 160 &
      num_hidden_layers 2 num_attention_heads 4 num_key_value_heads 2
precision fp32
data tokens train.tok
batch micro 1 accumulate $accumulate seq_len 2048
parallel tensor $tensor context $context
optimizer adamw lr 1e-3
max_steps 3
log every 1
run_dir $name
DECK
  OPENBLAS_NUM_THREADS=1 "$mpiexec" "${mpi_flags[@]}" -np 2 "$ftrain" "$name.in" > "$name.log" 2>&1 \
    || { cat "$name.log"; echo "FAIL: the $name run failed"; exit 1; }
done

python3 - <<'PY'
import json, sys
def step_memory(name):
    rows = [json.loads(l) for l in open(f"{name}/metrics.jsonl") if '"loss"' in l][1:]
    for field in ("host_tensor_mib_per_rank", "host_tensor_peak_mib_per_rank"):
        if not rows or any(field not in r for r in rows):
            sys.exit(f"FAIL: {name}/metrics.jsonl: no {field} in its training rows after step 1")
    return max(max(p - s for p, s in zip(r["host_tensor_peak_mib_per_rank"], r["host_tensor_mib_per_rank"]))
               for r in rows)
fsdp = step_memory("fsdp2")
if not fsdp > 1.0:
    sys.exit(f"FAIL: FSDP 2's step adds {fsdp:.2f} MiB per rank: the measurement saw no activations")
failed = False
# Tensor 2's bound is looser: the rows gathered for its column-parallel
# projections (and their gradients) are the whole micro-batch's at any T.
for name, most, what in (("context2", 0.7, "half of every window's tokens"),
                         ("tensor2", 0.75, "half of the heads, intermediate columns and residual rows")):
    mine = step_memory(name)
    ratio = mine / fsdp
    print(f"step memory per rank (peak - kept, max over ranks and steps 2-3): FSDP 2 {fsdp:.2f} MiB, "
          f"{name} {mine:.2f} MiB, ratio {ratio:.3f}")
    if not 0.4 < ratio < most:
        print(f"FAIL: {name} holds {ratio:.3f} of FSDP 2's step memory per rank, not about 1/2 "
              f"(each rank should keep the activations of {what})")
        failed = True
if failed:
    sys.exit(1)
print("ok: context 2 and tensor 2 each about halve what a step adds per rank")
PY
