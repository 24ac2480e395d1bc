#!/usr/bin/env bash
# Does sharding shard? Per-rank memory of a ~270M-parameter Llama whose
# optimizer state dominates, full_shard on 1, 2 and 4 ranks.
#   bash share/bench/fsdp_memory.sh
# State = f32 master + grad + AdamW m, v = 16 bytes/parameter/N; measured as
# resident memory after load minus before load, per rank (max over ranks).
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
data=$(bench_corpus 256 200000)
cat > "$WORK/mem.in" <<DECK
model llama preset tiny vocab_size 32000 hidden_size 1024 intermediate_size 2816 &
      num_hidden_layers 16 num_attention_heads 16 num_key_value_heads 16
data tokens \${data}
batch micro 1 seq_len 32
max_steps 2
log every 1
fsdp full_shard
run_dir \${run}
DECK
printf "%-4s %-14s %-16s %-16s %-18s %s\n" np "params" "state/rank MiB" "ideal/rank MiB" "state vs ideal" "peak RSS/rank MiB"
for np in 1 2 4; do
  out=$("${MPIRUN[@]}" -np $np "$FTRAIN" -var data "$data" -var run "$WORK/mem_np$np" "$WORK/mem.in" 2>&1)
  params=$(grep -m1 "parameters " <<<"$out" | awk '{print $2}')
  python3 - "$np" "$params" <<PY
import re, sys
np_, params = int(sys.argv[1]), int(sys.argv[2])
out = """$out"""
def per_rank(phase):
    line = next(l for l in out.splitlines() if l.startswith("memory " + phase))
    return [float(x) for x in re.findall(r"rank \d+ (\d+) MiB", line)]
before, after = per_rank("before load"), per_rank("after load")
peak = [float(x) for x in re.findall(r"peak (\d+)\)", next(l for l in out.splitlines() if l.startswith("memory at end")))]
state = max(a - b for a, b in zip(after, before))
ideal = 16 * params / np_ / 2**20
print(f"{np_:<4d} {params/1e6:<14.1f} {state:<16.0f} {ideal:<16.0f} {state/ideal:<18.3f} {max(peak):.0f}")
PY
done
