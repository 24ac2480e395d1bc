#!/usr/bin/env bash
# host_bf16.sh's comparison made robust to a noisy machine: the best
# configurations that host_bf16.sh found (2 ranks x 1 thread for ftrain;
# PyTorch's best thread counts on 2 cores) run interleaved, one of each per
# round, for several rounds. Each configuration's tokens/s is the median over
# the rounds, and each round's own ratios are given with their median, so a
# slow spell of the machine (this project's VMs drift by 10-20% between
# minutes) hits every configuration alike instead of one of them.
#   bash share/bench/host_bf16_rounds.sh [rounds] [steps]
# Needs Debian's python3-torch. Run host_bf16.sh first on a new machine: it
# searches all the thread layouts and gives the matmul peaks and CPU-MFU.
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
rounds=${1:-5}
steps=${2:-20}
let_openblas_pick_its_kernels
PY=/usr/bin/python3
cores=$(nproc)
(( cores >= 2 )) || { echo "needs 2 cores (2 ranks x 1 thread)"; exit 0; }
batch=8 seq=128
read -r vocab hidden inter layers heads kv <<<"8192 384 1024 6 6 6"   # host_bf16.sh's 20M model
data=$(bench_corpus "$vocab" 300000)
echo "rounds: $rounds, steps per run: $steps (tokens/s of steps 4-$steps)"

ftrain_run() {  # ftrain_run PRECISION STRATEGY ROUND -> tokens/s
  local run="$WORK/rounds_$1_$2_r$3"
  bench_llama_deck "$run.in" "$data" "$vocab $hidden $inter $layers $heads $kv" $((batch / 2)) $seq "$steps" \
    "$2" "$run" "precision $1"
  "${MPIRUN[@]}" -np 2 "$FTRAIN" "$run.in" > "$run.log" 2>&1 || { echo "ftrain failed: $run.log" >&2; tail -5 "$run.log" >&2; exit 1; }
  steady_tokens_per_s "$run/metrics.jsonl"
}
pytorch_run() {  # pytorch_run MODE INTRA_OP_THREADS BLAS_THREADS -> tokens/s
  local flag=()
  [[ $1 == bf16 ]] && flag=(--bf16-autocast)
  OMP_NUM_THREADS=$2 OPENBLAS_NUM_THREADS=$3 $PY "$FTRAIN_ROOT/share/bench/pytorch_llama_cpu.py" "${flag[@]}" \
    --data "$data" --threads "$2" --vocab "$vocab" --hidden "$hidden" --intermediate "$inter" \
    --layers "$layers" --heads "$heads" --kv-heads "$kv" --seq $seq --batch $batch --steps "$steps" |
    python3 -c "import json,sys; print(round(json.load(sys.stdin)['tokens_per_s']))"
}

configs=("ftrain_fp32 no_shard" "ftrain_fp32 shard_grad_op" "ftrain_fp32 full_shard"
         "ftrain_bf16 no_shard" "ftrain_bf16 shard_grad_op" "ftrain_bf16 full_shard"
         "pytorch_fp32 1 2" "pytorch_bf16 2 1" "pytorch_bf16 2 2")
lines=()
for round in $(seq 1 "$rounds"); do
  row="round $round:"
  for c in "${configs[@]}"; do
    read -r name a b <<<"$c"
    if [[ $name == ftrain_* ]]; then tps=$(ftrain_run "${name#ftrain_}" "$a" "$round"); else tps=$(pytorch_run "${name#pytorch_}" "$a" "$b"); fi
    lines+=("$round $name $a ${b:--} $tps")  # ftrain has no BLAS thread count: "-"
    row+=" $name/$a${b:+/$b}=$tps"
  done
  echo "$row"
done

python3 - "${lines[@]}" <<'PY'
import statistics, sys
runs = [l.split() for l in sys.argv[1:]]
by_config, by_round = {}, {}
for rnd, name, a, b, tps in runs:
    key = f"{name} {a}{'' if b == '-' else '/' + b}"
    by_config.setdefault(key, []).append(int(tps))
    best = by_round.setdefault(rnd, {})
    best[name] = max(best.get(name, 0), int(tps))
print()
print(f"{'configuration (median of rounds)':<36} {'tokens/s':>9}   {'min':>6} {'max':>6}")
for key, values in by_config.items():
    print(f"{key:<36} {statistics.median(values):>9.0f}   {min(values):>6} {max(values):>6}")
def family_best(name):
    return max(statistics.median(v) for k, v in by_config.items() if k.split()[0] == name)
f32, b16, pt32, pt16 = (family_best(n) for n in ("ftrain_fp32", "ftrain_bf16", "pytorch_fp32", "pytorch_bf16"))
per_round = lambda num, den: [r[num] / r[den] for r in by_round.values()]
def show(label, num, den, target):
    rounds = per_round(num, den)
    print(f"{label:<32} = {num_of[num] / num_of[den]:.2f}x of the medians; per round "
          f"{' '.join(f'{x:.2f}' for x in rounds)} (median {statistics.median(rounds):.2f}x){target}")
num_of = {"ftrain_fp32": f32, "ftrain_bf16": b16, "pytorch_fp32": pt32, "pytorch_bf16": pt16}
print()
show("ftrain bf16 / ftrain fp32", "ftrain_bf16", "ftrain_fp32", "   (target >= 1.5x)")
show("ftrain bf16 / PyTorch autocast", "ftrain_bf16", "pytorch_bf16", "   (target >= 1.2x)")
show("ftrain fp32 / PyTorch fp32", "ftrain_fp32", "pytorch_fp32", "")
PY
