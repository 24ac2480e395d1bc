#!/usr/bin/env bash
# Tensor parallelism on the host: np 4, tensor 2 x FSDP 2 against pure FSDP
# 4 on a small Llama, the same global batch (FSDP 4 reads micro M per rank,
# tensor 2 micro 2M per data index), in one run side by side.
#   bash share/bench/tensor_parallel.sh
# Per rank: the sharded state (resident memory after load minus before
# load), the peak resident memory of training and what it adds over the
# state (gathered units, gradients in flight, activations), the plan's state
# and activation figures from the run header, and steady tokens/s.
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
arch="8192 512 1408 4 8 4"   # vocab hidden intermediate layers heads kv_heads
seq=256 micro=2 steps=8
data=$(bench_corpus 8192 400000)
printf "%-18s %-14s %-16s %-16s %-22s %-12s\n" setting "state MiB" "peak RSS MiB" "peak - state MiB" "plan state+act MiB" "tokens/s"
for setting in "fsdp4 $micro 1" "tensor2xfsdp2 $((2 * micro)) 2"; do
  read -r name m t <<<"$setting"
  bench_llama_deck "$WORK/$name.in" "$data" "$arch" "$m" "$seq" "$steps" full_shard "$WORK/$name" \
    "parallel tensor $t" "precision fp32"
  out=$("${MPIRUN[@]}" -np 4 "$FTRAIN" "$WORK/$name.in" 2>&1) || { echo "$out"; exit 1; }
  tps=$(steady_tokens_per_s "$WORK/$name/metrics.jsonl")
  python3 - "$name" "$tps" <<PY
import re, sys
name, tps = sys.argv[1], sys.argv[2]
out = """$out"""
def per_rank(phase):
    line = next(l for l in out.splitlines() if l.startswith("memory " + phase))
    return [float(x) for x in re.findall(r"rank \d+ (\d+) MiB", line)]
before, after = per_rank("before load"), per_rank("after load")
peak = [float(x) for x in re.findall(r"peak (\d+)\)", next(l for l in out.splitlines() if l.startswith("memory at end")))]
state = max(a - b for a, b in zip(after, before))
mem = re.search(r"memory per rank +([0-9.]+) MiB sharded state", out)
act = re.search(r"activations +([0-9.]+) MiB per micro batch", out)
plan = f"{mem.group(1)} + {act.group(1)}" if mem and act else "-"
print(f"{name:<18} {state:<14.0f} {max(peak):<16.0f} {max(p - a for p, a in zip(peak, after)):<16.0f} {plan:<22} {tps}")
PY
done
