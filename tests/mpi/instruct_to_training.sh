#!/usr/bin/env bash
# Instruction data end to end (issue 16): synthetic instruction JSON lines
# -> ftrain-prep instruct (byte tokenizer, loss mask) -> inputs/tiny_llama_instruct.in.
# Checks that
#  * the first step's loss is ln(257) at init: the trainer divides by the
#    trained (response) targets only; dividing by every target would give
#    about a fifth of it;
#  * np 1 and np 2 give the same loss curve (FSDP tolerance, 1e-5 relative):
#    the per-rank counts of trained targets differ, the global mean does not;
#  * the response loss falls by 40% (train and eval) over a short run;
#  * LoRA (inputs/tiny_llama_lora.in) on that run's saved model trains only
#    the adapters (trainable count, base bit-identical) and lowers the
#    response loss below the base's.
# Usage: instruct_to_training.sh FTRAIN FTRAIN_PREP SOURCE_DIR WORKDIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
ftrain=$1 prep=$2 src=$3 work=$4 mpiexec=$5
shift 5
rm -rf "$work" && mkdir -p "$work/data" && cd "$work"
python3 "$src/share/scripts/make_instruct_data.py" --format fields --out data/instruct.jsonl --examples 1200 --seed 1
"$prep" instruct --template fields --tokenizer bytes --out data/instruct_train.tok \
    --eval-out data/instruct_eval.tok --eval-every 20 data/instruct.jsonl | tee prep.log
"$prep" info data/instruct_train.tok | tee -a prep.log
grep -q "token file version 2" prep.log || { echo "FAIL: not a version 2 token file"; exit 1; }

deck="$src/inputs/tiny_llama_instruct.in"
"$mpiexec" "$@" -np 1 "$ftrain" "$deck" -var micro 16 -var max_steps 4 -var log_every 1 -var run_dir run_np1 > np1.log 2>&1 || { cat np1.log; exit 1; }
"$mpiexec" "$@" -np 2 "$ftrain" "$deck" -var max_steps 4 -var log_every 1 -var run_dir run_np2 > np2.log 2>&1 || { cat np2.log; exit 1; }
"$mpiexec" "$@" -np 2 "$ftrain" "$deck" -var max_steps 60 -var eval_every 30 -var run_dir run_long > long.log 2>&1 || { cat long.log; exit 1; }
lora="$src/inputs/tiny_llama_lora.in"
"$mpiexec" "$@" -np 2 "$ftrain" "$lora" -var base_init "hdf5 run_long/model.h5" -var max_steps 60 -var eval_every 30 \
    -var run_dir run_lora > lora.log 2>&1 || { cat lora.log; exit 1; }
grep -q "lora: frozen base bit-identical after training" lora.log || { cat lora.log; echo "FAIL: LoRA did not run"; exit 1; }
python3 - <<'PY'
import json, math, sys
def losses(run):
    rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    return [r["loss"] for r in rows if "loss" in r], [r["eval_loss"] for r in rows if "eval_loss" in r]
np1, _ = losses("run_np1")
np2, _ = losses("run_np2")
train, evals = losses("run_long")
print("np1", np1); print("np2", np2)
print(f"train loss {train[0]:.3f} -> {train[-1]:.3f}; eval loss {evals[0]:.3f} -> {evals[-1]:.3f}")
fail = []
if abs(np1[0] - math.log(257)) > 0.2:
    fail.append(f"step 1 loss {np1[0]:.4f} is not ln(257) = {math.log(257):.4f}: not a mean over trained targets")
if len(np1) != len(np2) or any(abs(a - b) > 1e-5 * abs(a) for a, b in zip(np1, np2)):
    fail.append("np 1 and np 2 loss curves differ beyond 1e-5 relative")
if not (evals[-1] < 0.6 * evals[0] and train[-1] < 0.6 * np1[0]):
    fail.append("the response loss did not fall by 40% (eval, and train from step 1)")
lora_rows = [json.loads(l) for l in open("run_lora/metrics.jsonl")]
lora_evals = [r["eval_loss"] for r in lora_rows if "eval_loss" in r]
trainable = [r["trainable_parameters"] for r in lora_rows if "trainable_parameters" in r]
print(f"lora: eval loss {lora_evals[0]:.3f} -> {lora_evals[-1]:.3f}, trainable {trainable[:1]}")
if abs(lora_evals[0] - evals[-1]) > 1e-3 * evals[-1]:
    fail.append(f"LoRA's first eval {lora_evals[0]:.4f} is not the base's last {evals[-1]:.4f}: the base was not loaded")
if not (lora_evals[-1] < 0.985 * lora_evals[0]):
    fail.append("LoRA did not lower the response loss by 1.5%")
if not trainable or trainable[0] >= 100000:
    fail.append(f"trainable parameters {trainable[:1]}: not just the adapters")
if fail:
    sys.exit("FAIL: " + "; ".join(fail))
print("PASS")
PY
