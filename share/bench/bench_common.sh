# Shared by the benchmark drivers (sourced). Benchmarks are not tests: they
# print numbers for share/doc/performance.md and never pass or fail on speed.
set -euo pipefail
FTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${FTRAIN_BUILD_DIR:-$FTRAIN_ROOT/build}"
FTRAIN="$BUILD/bin/ftrain"
PREP="$BUILD/bin/ftrain-prep"
MPIRUN=(mpirun --oversubscribe)
if [[ $(id -u) -eq 0 ]]; then MPIRUN+=(--allow-run-as-root); fi
WORK="${BENCH_WORK:-$(mktemp -d /tmp/ftrain-bench.XXXXXX)}"
mkdir -p "$WORK"
[[ -x "$FTRAIN" ]] || { echo "build ftrain first (bash share/scripts/test.sh or cmake --build $BUILD)" >&2; exit 1; }
bench_corpus() {  # bench_corpus VOCAB TOKENS
  local f="$WORK/corpus_v$1_t$2.tok"
  [[ -f "$f" ]] || "$PREP" synthetic --out "$f" --tokens "$2" --vocab "$1" --seed 11 > /dev/null
  echo "$f"
}
# An inherited OPENBLAS_CORETYPE (this workplace sets Haswell) would hold
# OpenBLAS to AVX2 kernels while oneDNN (ftrain's bf16 GEMMs, PyTorch's
# linears) uses AVX-512: the CPU-vs-CPU benchmarks let OpenBLAS pick from
# the CPU, as on a user's machine.
let_openblas_pick_its_kernels() {
  if [[ -n "${OPENBLAS_CORETYPE:-}" ]]; then
    echo "note: unsetting OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (OpenBLAS picks its kernels from the CPU)"
    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
  fi
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "commit:  $(git -C "$FTRAIN_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
# bench_llama_deck FILE DATA "VOCAB HIDDEN INTER LAYERS HEADS KV" MICRO SEQ STEPS STRATEGY RUN_DIR [DECK LINE...]
# writes the benchmarks' Llama deck (extra lines such as "precision bf16" appended).
bench_llama_deck() {
  local file=$1 data=$2 arch=$3 micro=$4 seq=$5 steps=$6 strategy=$7 run=$8
  shift 8
  local vocab hidden inter layers heads kv
  read -r vocab hidden inter layers heads kv <<<"$arch"
  {
    echo "model llama preset tiny vocab_size $vocab hidden_size $hidden intermediate_size $inter &"
    echo "      num_hidden_layers $layers num_attention_heads $heads num_key_value_heads $kv"
    echo "data tokens $data"
    echo "batch micro $micro seq_len $seq"
    echo "optimizer adamw lr 1e-3"
    echo "max_steps $steps"
    echo "log every 1"
    echo "fsdp $strategy"
    echo "run_dir $run"
    local line
    for line in "$@"; do echo "$line"; done
  } > "$file"
}
# steady_tokens_per_s METRICS_JSONL [COLUMN]: mean tokens/s from step 4 on
# (first steps warm caches and pools); with COLUMN also the mean of that field.
steady_tokens_per_s() {
  python3 - "$@" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][3:]
tokens_per_step = rows[0]["tokens"] / rows[0]["step"]
out = [str(round(tokens_per_step / (sum(r["step_time_s"] for r in rows) / len(rows))))]
if len(sys.argv) > 2:
    out.append(f'{100 * sum(r[sys.argv[2]] for r in rows) / len(rows):.1f}%')
print(" ".join(out))
PY
}
