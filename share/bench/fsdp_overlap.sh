#!/usr/bin/env bash
# Is communication hidden behind compute? Step time of full_shard with
# prefetch off (backward_prefetch none, forward_prefetch off) vs on
# (backward_pre + forward_prefetch), np 2 and 4, and the share of the
# communication stream's time that compute did not wait for.
#   bash share/bench/fsdp_overlap.sh [steps]
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
steps=${1:-8}
data=$(bench_corpus 256 400000)
cat > "$WORK/overlap.in" <<DECK
model llama preset tiny vocab_size 8192 hidden_size 512 intermediate_size 1408 &
      num_hidden_layers 8 num_attention_heads 8 num_key_value_heads 8
data tokens \${data}
batch micro 2 seq_len 128
max_steps $steps
log every 1
fsdp full_shard backward_prefetch \${bp} forward_prefetch \${fp}
run_dir \${run}
DECK
printf "%-4s %-9s %-13s %-15s %-17s %s\n" np prefetch "step time s" "comm s/step" "exposed s/step" "comm hidden"
for np in 2 4; do
  for mode in off on; do
    if [[ $mode == on ]]; then bp=backward_pre; fp=on; else bp=none; fp=off; fi
    run="$WORK/overlap_np${np}_$mode"
    "${MPIRUN[@]}" -np $np "$FTRAIN" -var data "$data" -var run "$run" -var bp $bp -var fp $fp "$WORK/overlap.in" > "$run.log" 2>&1
    python3 - "$run/metrics.jsonl" "$np" "$mode" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][2:]  # skip warm-up steps
mean = lambda k: sum(r[k] for r in rows) / len(rows)
t, c, e = mean("step_time_s"), mean("comm_s_per_step"), mean("comm_exposed_s_per_step")
print(f"{sys.argv[2]:<4} {sys.argv[3]:<9} {t:<13.3f} {c:<15.3f} {e:<17.3f} {100*(1-e/c) if c > 0 else 0:.0f}%")
PY
  done
done
