#!/usr/bin/env bash
# Context and tensor parallelism on the host at sequence 8192: np 4, pure
# FSDP 4 against tensor 2 x FSDP 2, context 2 x FSDP 2, context 4 and
# tensor 2 x context 2, side by side in one run, on a small GQA Llama.
#   bash share/bench/context_parallel.sh [STEPS] [SEQ]
# Every setting trains the same 4 windows per step, one window per forward
# (micro 1; the data-parallel ranks times accumulate = 4), so a rank's
# activations per forward are those of seq/C tokens and of 1/T of the heads,
# as the plan counts them.
# Per setting, max over the 4 ranks (metrics.jsonl, steps 2 on):
#   state     the host allocator's tensors alive between steps: what a rank
#             keeps (sharded f32 master + grad + AdamW m, v; buffers kept)
#   step      the most tensor bytes alive at once during a step minus state:
#             what training adds per rank (activations, the gathered units
#             and their gradients in flight, the ring's blocks, workspace)
#   plan      `ftrain --check --ranks 4` of the same deck: sharded state,
#             gathered units in flight, activations per micro batch
#   tokens/s  the whole job's, of steps 2 on (step 1 warms caches and pools)
# and the step memory and tokens/s as ratios to FSDP 4.
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
steps="${1:-3}"
seq="${2:-8192}"
(( steps >= 2 )) || { echo "context_parallel.sh: STEPS must be at least 2 (step 1 is not measured)" >&2; exit 1; }
vocab=2048 hidden=128 inter=352 layers=2 heads=4 kv=2
data=$(bench_corpus "$vocab" $(( 4 * seq * (steps + 1) )))
export OPENBLAS_NUM_THREADS=1
echo "model: llama vocab $vocab hidden $hidden intermediate $inter layers $layers heads $heads kv_heads $kv, fp32," \
  "seq $seq, 4 windows per step, $steps steps; $(nproc) cores for 4 ranks"
results="$WORK/results.txt"
: > "$results"
# name tensor context accumulate (data-parallel ranks = 4 / (tensor x context))
for setting in "fsdp4 1 1 1" "tensor2xfsdp2 2 1 2" "context2xfsdp2 1 2 2" "context4 1 4 4" "tensor2xcontext2 2 2 4"; do
  read -r name t c acc <<<"$setting"
  deck="$WORK/$name.in"
  cat > "$deck" <<EOF
model llama preset tiny vocab_size $vocab hidden_size $hidden intermediate_size $inter &
      num_hidden_layers $layers num_attention_heads $heads num_key_value_heads $kv
data tokens $data
batch micro 1 accumulate $acc seq_len $seq
parallel tensor $t context $c
optimizer adamw lr 1e-3
max_steps $steps
log every 1
fsdp full_shard
precision fp32
run_dir $WORK/$name
EOF
  "$FTRAIN" --check --ranks 4 "$deck" > "$WORK/$name.check" 2>&1 || { cat "$WORK/$name.check"; exit 1; }
  "${MPIRUN[@]}" -np 4 "$FTRAIN" "$deck" > "$WORK/$name.out" 2>&1 || { cat "$WORK/$name.out"; exit 1; }
  echo "$name $WORK/$name.check $WORK/$name/metrics.jsonl" >> "$results"
  echo "ran $name ($(grep -c '"loss"' "$WORK/$name/metrics.jsonl") steps)"
done
python3 - "$results" <<'PY'
import json, re, sys
UNITS = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}
def mib(number, unit):
    return float(number) * UNITS[unit]
def plan(path):
    text = open(path).read()
    m = re.search(r"memory per rank\s+([0-9.]+) (\w+) sharded state .*?\+ ([0-9.]+) (\w+) gathered", text)
    a = re.search(r"activations\s+([0-9.]+) (\w+) per micro batch of 1", text)
    if not (m and a):
        sys.exit(f"no memory or activations line in {path}:\n{text}")
    return mib(m[1], m[2]), mib(m[3], m[4]), mib(a[1], a[2])
rows = []
for line in open(sys.argv[1]):
    name, check, metrics = line.split()
    steps = [json.loads(l) for l in open(metrics) if '"loss"' in l][1:]  # step 1: loading's peak, cold caches
    state = max(max(r["host_tensor_mib_per_rank"]) for r in steps)
    step_mem = max(max(p - s for p, s in zip(r["host_tensor_peak_mib_per_rank"], r["host_tensor_mib_per_rank"]))
                   for r in steps)
    rss = max(r["peak_rss_mib_max_rank"] for r in steps)
    tokens = steps[0]["tokens"] / steps[0]["step"]
    tps = tokens / (sum(r["step_time_s"] for r in steps) / len(steps))
    losses = " ".join(f'{r["loss"]:.5f}' for r in steps)
    rows.append((name, state, step_mem, rss, tps, *plan(check), losses))
base = rows[0]
print(f'{"setting":<17} {"state MiB":>9} {"step MiB":>9} {"x FSDP4":>7} {"plan state+gathered":>20} '
      f'{"plan act MiB":>12} {"x FSDP4":>7} {"peak RSS":>8} {"tokens/s":>8} {"x FSDP4":>7}  losses (steps 2-)')
for name, state, step_mem, rss, tps, p_state, p_gathered, p_act, losses in rows:
    print(f"{name:<17} {state:>9.1f} {step_mem:>9.1f} {step_mem / base[2]:>7.3f} "
          f"{f'{p_state:.1f} + {p_gathered:.1f}':>20} {p_act:>12.1f} {p_act / base[7]:>7.3f} {rss:>8.0f} "
          f"{tps:>8.0f} {tps / base[4]:>7.2f}  {losses}")
PY
