#!/usr/bin/env bash
# Llama 3 token files and `ftrain --check`: text prepared with a Llama 3-shaped
# tokenizer.json (ids up to 128255: 4-byte tokens, vocabulary 128256) passes
# --check against a model with vocab_size 128256, and a model with fewer
# outputs is refused naming the vocab_size to set. Needs no Python
# environment: the tokenizer is the committed fixture.
# Usage: llama3_tokens_check.sh FTRAIN FTRAIN_PREP TOKENIZER_JSON WORKDIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
ftrain=$1 prep=$2 tokenizer=$3 work=$4 mpiexec=$5
shift 5
rm -rf "$work" && mkdir -p "$work" && cd "$work"
for i in $(seq 1 200); do
  printf '{"text": "Document %d: it'"'"'s %d tokens of text, 日本語 and 😀 too."}\n' "$i" "$((i * 12345))"
done > corpus.jsonl
"$prep" text --out train.tok --tokenizer "$tokenizer" --jsonl corpus.jsonl | tee prep.log
grep -q "byte-level BPE" prep.log || { echo "FAIL: not the byte-level BPE"; exit 1; }
"$prep" info train.tok | tee info.log
grep -q "4-byte tokens" info.log && grep -q "vocab 128256" info.log && grep -q "eos id 128001, 200 documents" info.log \
  || { echo "FAIL: unexpected token file header"; exit 1; }
deck() {
  cat > "$2" <<DECK
model llama preset tiny vocab_size $1 hidden_size 64 intermediate_size 128 num_hidden_layers 2 num_attention_heads 4 num_key_value_heads 2 rope_theta 500000
data tokens train.tok
batch micro 2 seq_len 32
optimizer adamw lr 1e-3
max_steps 2
run_dir run
DECK
}
deck 128256 good.in
"$mpiexec" "$@" -np 1 "$ftrain" --check good.in > good.log 2>&1 || { cat good.log; echo "FAIL: --check refused a Llama 3 vocabulary"; exit 1; }
deck 32000 small.in
if "$mpiexec" "$@" -np 1 "$ftrain" --check small.in > small.log 2>&1; then
  cat small.log; echo "FAIL: --check accepted 128256 token ids for a model with 32000 outputs"; exit 1
fi
grep -q 'set `vocab_size 128256`' small.log || { cat small.log; echo "FAIL: the refusal does not name vocab_size 128256"; exit 1; }
echo PASS
