#!/usr/bin/env bash
# Real text end to end: JSON lines with a `content` field (seed 001's format)
# -> ftrain-prep text (byte tokenizer, eval split) -> 2-rank training whose
# loss must fall. Usage: text_to_training.sh FTRAIN FTRAIN_PREP WORKDIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
ftrain=$1 prep=$2 work=$3 mpiexec=$4
shift 4
rm -rf "$work" && mkdir -p "$work" && cd "$work"
python3 - <<'PY'
import json, random
random.seed(3)
subjects = ["the cluster", "a rank", "the optimizer", "every shard", "the scheduler"]
verbs = ["gathers", "reduces", "checkpoints", "prefetches", "shards"]
objects = ["the parameters", "its gradients", "the activations", "a flat buffer", "the weights"]
with open("corpus.jsonl", "w") as f:
    for i in range(3000):
        text = " ".join(f"{random.choice(subjects)} {random.choice(verbs)} {random.choice(objects)}."
                        for _ in range(random.randint(2, 6)))
        f.write(json.dumps({"id": i, "content": text}) + "\n")
PY
"$prep" text --out train.tok --eval-out eval.tok --eval-every 20 --tokenizer bytes --jsonl --text-field content corpus.jsonl
cat > text.in <<DECK
model llama preset tiny vocab_size 257 hidden_size 64 intermediate_size 128 num_hidden_layers 2
data tokens train.tok
eval tokens eval.tok every 40
batch micro 4 seq_len 64
optimizer adamw lr 3e-3
max_steps 40
log every 5
run_dir run
DECK
"$mpiexec" "$@" -np 2 "$ftrain" text.in > train.log 2>&1 || { cat train.log; exit 1; }
python3 - <<'PY'
import json, sys
rows = [json.loads(l) for l in open("run/metrics.jsonl")]
evals = [r["eval_loss"] for r in rows if "eval_loss" in r]
losses = [r["loss"] for r in rows if "loss" in r]
print(f"train loss {losses[0]:.3f} -> {losses[-1]:.3f}; eval loss {evals[0]:.3f} -> {evals[-1]:.3f}")
if not (evals[-1] < 0.6 * evals[0]):
    sys.exit("FAIL: the eval loss did not fall by 40% on prepared text")
print("PASS")
PY
