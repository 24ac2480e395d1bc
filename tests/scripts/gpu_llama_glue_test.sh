#!/usr/bin/env bash
# The bash glue of share/bench/gpu_llama.sh run to its end without a GPU:
#   gpu_llama_glue_test.sh BUILD_DIR WORK_DIR
# A stand-in nvidia-smi (first on PATH, answering only the queries the
# script makes) gets it past require_gpu; CUDA_VISIBLE_DEVICES="" and a
# python without torch make every row fail for a stated reason, so no number
# is produced, on a GPU machine too. What must hold: the script prints
# machine, commit, device, its command and the memory arithmetic, writes a
# deck per row (the one llama_bench_plan.py writes), survives every failure
# under `set -euo pipefail`, prints the summary with each row's reason and
# NOT JUDGED targets, and exits 1 (rows crashed). Exit 77 = skipped (this
# build has no libftrain_cuda.so, so require_gpu would refuse anyway).
set -uo pipefail
build=$1 work=$2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[[ -f "$build/libftrain_cuda.so" ]] || { echo "SKIP: $build has no libftrain_cuda.so"; exit 77; }
rm -rf "$work" && mkdir -p "$work/bin" "$work/nopython"
cat > "$work/bin/nvidia-smi" <<'EOF'
#!/bin/sh
# Stand-in for gpu_llama_glue_test.sh: names a device so the glue runs; nothing is measured.
case "$*" in
  -L) echo "GPU 0: stand-in (glue test)";;
  *driver_version*) echo "stand-in (glue test), none, 0 MiB";;
  *) echo "stand-in (glue test)";;
esac
EOF
chmod +x "$work/bin/nvidia-smi"
# A "python" for the PyTorch rows that cannot import torch (its module path emptied), even where one is installed.
printf '#!/bin/sh\nexec python3 -c "import sys; sys.path[:] = []; import torch" "$@"\n' > "$work/nopython/python"
chmod +x "$work/nopython/python"
out=$(PATH="$work/bin:$PATH" CUDA_VISIBLE_DEVICES="" FTRAIN_BUILD_DIR="$build" BENCH_WORK="$work/bench" \
      FTRAIN_BENCH_PYTHON="$work/nopython/python" BENCH_MODELS=1b BENCH_PRECISIONS=fp8 \
      bash "$root/share/bench/gpu_llama.sh" 5 2>&1)
rc=$?
fail() { echo "$out"; echo "FAIL: $1"; exit 1; }
[[ $rc -eq 1 ]] || fail "exit $rc, want 1 (every row crashed)"
for want in "machine:" "commit:" "device:  stand-in (glue test)" \
    "command: FTRAIN_PEAK_TFLOPS=989 FTRAIN_PEAK_TFLOPS_FP8=1978 BENCH_MODELS='1b' BENCH_PRECISIONS='fp8' BENCH_PYTORCH_MODES='eager compiled' bash share/bench/gpu_llama.sh 5" \
    "total (paper estimate)" "== Summary ==" \
    "llama3.2-1b  fp8       ftrain" "llama3.2-1b  fp8       pytorch eager" "llama3.2-1b  fp8       pytorch compiled" \
    "fp8 ftrain/PyTorch-compiled tokens/s: not measured (FAILED: " "NOT JUDGED" "3 row(s) FAILED to run: exit 1"; do
  grep -qF -- "$want" <<<"$out" || fail "missing: $want"
done
grep -q "pytorch compiled .*FAILED: .*No module named 'torch'" <<<"$out" || fail "the PyTorch row does not say why"
corpus=$(ls "$work"/bench/corpus_*.tok 2>/dev/null | head -1)
[[ -n "$corpus" ]] || fail "no corpus written"
python3 "$root/share/bench/llama_bench_plan.py" deck 1b fp8 "$corpus" \
  "$work/bench/llama1b_fp8_cuda" 5 1978 2 off > "$work/want.in"
cmp -s "$work/want.in" "$work/bench/llama1b_fp8_cuda.in" || { diff "$work/want.in" "$work/bench/llama1b_fp8_cuda.in"; fail "the deck differs from llama_bench_plan.py's"; }
echo "gpu_llama.sh glue: ran to the summary, every row failed with its reason, exit 1"
