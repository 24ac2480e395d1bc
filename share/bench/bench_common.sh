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
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "commit:  $(git -C "$FTRAIN_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
