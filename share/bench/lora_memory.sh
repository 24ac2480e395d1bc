#!/usr/bin/env bash
# LoRA memory: optimizer + gradient state per rank scales with the adapters,
# not the model (issue 16), and the frozen base takes the compute dtype's
# bytes (issue 36). The 271M Llama of fsdp_memory.sh, full_shard, np 1 and 2:
# full fine-tune against LoRA at several ranks/targets in fp32, then LoRA
# under precision bf16 with the base in bf16 (the default) and in f32
# (`lora base_dtype f32`, what every LoRA run stored before), same machine,
# same script run.
#   bash share/bench/lora_memory.sh          (FTRAIN_BUILD_DIR: the build, default build/)
# state/rank = resident memory after load minus before load (max over ranks):
# full fine-tune 16 bytes/parameter/N; LoRA (2 or 4) bytes/base parameter/N
# (the frozen base's shards, bf16 or f32, as the plan line says) + 16
# bytes/adapter parameter/N. peak = peak RSS of the run (2 steps: gathered
# units, the f32 gradient of one unit, activations).
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
data=$(bench_corpus 256 200000)
arch="32000 1024 2816 16 16 16"
printf "%-3s %-5s %-34s %-12s %-16s %-16s %-14s %s\n" np prec config trainable "state/rank MiB" "ideal/rank MiB" "state/ideal" "peak RSS/rank MiB"
run_one() {  # run_one NP PRECISION LABEL [LORA LINE]
  local np=$1 precision=$2 label=$3 lora=${4:-}
  local name="${np}_${precision}_${label// /_}"
  local deck="$WORK/lora_${name//,/_}.in"
  if [[ -n "$lora" ]]; then
    bench_llama_deck "$deck" "$data" "$arch" 1 32 2 full_shard "$WORK/run_${name//,/_}" "precision $precision" "$lora"
  else
    bench_llama_deck "$deck" "$data" "$arch" 1 32 2 full_shard "$WORK/run_${name//,/_}" "precision $precision"
  fi
  local out
  out=$("${MPIRUN[@]}" -np "$np" "$FTRAIN" "$deck" 2>&1)
  python3 - "$np" "$precision" "$label" <<PY
import re, sys
np_, precision, label = int(sys.argv[1]), sys.argv[2], sys.argv[3]
out = """$out"""
params = int(re.search(r"^\s+parameters\s+(\d+)", out, re.MULTILINE).group(1))  # the plan line, not the lora header
m = re.search(r"^\s+trainable\s+(\d+)", out, re.MULTILINE)
trainable = int(m.group(1)) if m else params
def per_rank(phase):
    line = next(l for l in out.splitlines() if l.startswith("memory " + phase))
    return [float(x) for x in re.findall(r"rank \d+ (\d+) MiB", line)]
before, after = per_rank("before load"), per_rank("after load")
peak = [float(x) for x in re.findall(r"peak (\d+)\)", next(l for l in out.splitlines() if l.startswith("memory at end")))]
state = max(a - b for a, b in zip(after, before))
base_bytes = 2 if re.search(r"frozen base: bf16 shards", out) else 4  # the plan's memory line
ideal = (16 * params if trainable == params else base_bytes * params + 16 * trainable) / np_ / 2**20
print(f"{np_:<3d} {precision:<5s} {label:<34s} {trainable/1e6:<12.3f} {state:<16.0f} {ideal:<16.0f} {state/ideal:<14.3f} {max(peak):.0f}")
PY
}
for np in 1 2; do
  run_one "$np" fp32 "full fine-tune"
  run_one "$np" fp32 "lora r8 q,v" "lora rank 8 alpha 16 targets q_proj,v_proj"
  run_one "$np" fp32 "lora r64 q,v" "lora rank 64 alpha 128 targets q_proj,v_proj"
  run_one "$np" fp32 "lora r8 all-linear" "lora rank 8 alpha 16 targets all-linear"
  run_one "$np" bf16 "lora r8 q,v (base bf16)" "lora rank 8 alpha 16 targets q_proj,v_proj"
  run_one "$np" bf16 "lora r8 q,v (base_dtype f32)" "lora rank 8 alpha 16 targets q_proj,v_proj base_dtype f32"
  # The storage dtype must not change training: the same loss bits.
  python3 - "$WORK/run_${np}_bf16_lora_r8_q_v_(base_bf16)/metrics.jsonl" \
    "$WORK/run_${np}_bf16_lora_r8_q_v_(base_dtype_f32)/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:])
print(f"    bf16 base vs f32 base: losses {'identical' if a == b and a else 'DIFFER'} ({a} / {b})")
PY
done
