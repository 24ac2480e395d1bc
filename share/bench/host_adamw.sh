#!/usr/bin/env bash
# The host AdamW's speed, what a CPU-side optimizer step (ZeRO-Offload,
# `fsdp ... offload optimizer`) would run per rank (share/doc/performance.md,
# "Host AdamW"): bench_host_adamw on a 64M-element flat shard, then the time
# one update of a 70B model's shard implies for 8 and 16 ranks.
#   bash share/bench/host_adamw.sh [elements] [--torch PYTHON]
# --torch: PyTorch's CPU AdamW on the same shard in the same run, and the
# ratio (host_adamw_torch.py; a Python with torch, e.g. the interop venv's).
torch_python=""
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --torch) torch_python="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- "${args[@]+"${args[@]}"}"
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"
elements=${1:-67108864}
out=$("$BUILD/tests/bench/bench_host_adamw" "$elements" 5)
echo "command: $BUILD/tests/bench/bench_host_adamw $elements 5"
echo "$out"
rate=$(sed -n 's/.*, \([0-9.e+]*\) elements\/s, .*/\1/p' <<<"$out")
for ranks in 8 16; do
  awk -v r="$rate" -v n="$ranks" 'BEGIN { e = 68976648192 / n;
    printf "llama2-70b on %d ranks: %.3g elements per rank, one update %.1f s at this rate\n", n, e, e / r }'
done
if [[ -n "$torch_python" ]]; then
  torch_out=$("$torch_python" "$(dirname "${BASH_SOURCE[0]}")/host_adamw_torch.py" "$elements" 5)
  echo "$torch_out"
  while read -r line; do
    t=$(sed -n 's/.*, \([0-9.e+]*\) elements\/s$/\1/p' <<<"$line")
    name=$(sed -n 's/.*AdamW (\([a-z-]*\)).*/\1/p' <<<"$line")
    awk -v a="$rate" -v t="$t" -v n="$name" 'BEGIN { printf "ftrain / torch AdamW (%s): %.2fx\n", n, a / t }'
  done <<<"$torch_out"
fi
