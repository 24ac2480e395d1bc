#!/usr/bin/env bash
# Llama 3.2 1B at seq 4096, bf16, on one GPU: ftrain (`device cuda`,
# attention_backend auto = cuDNN fused SDPA) next to the same model in
# PyTorch on the same GPU (F.scaled_dot_product_attention; torch.compile off
# and on), in one run: tokens/s and MFU. MFU's peak is stated, not measured:
# H100 SXM dense bf16, 989 TFLOP/s (NVIDIA's datasheet, no sparsity;
# FTRAIN_PEAK_TFLOPS for another GPU); both frameworks count FLOPs the same
# way (LlamaModel::training_flops_per_sample, ~9.0 GFLOP per token here).
#   bash share/bench/gpu_llama_1b.sh [steps]      (default 12; the first 3-4 are warm-up)
# Env: BENCH_MICRO (sequences per step, default 2), FTRAIN_BENCH_PYTHON (python with CUDA torch).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/gpu_common.sh"
require_gpu "${FTRAIN_BUILD_DIR:-$here/../../build}" "gpu_llama_1b.sh"
source "$here/bench_common.sh"
steps=${1:-12}
micro=${BENCH_MICRO:-2}
seq=4096
PY="${FTRAIN_BENCH_PYTHON:-python3}"
echo "device:  $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
echo "peak:    $GPU_PEAK_TFLOPS TFLOP/s dense bf16 (H100 SXM datasheet unless FTRAIN_PEAK_TFLOPS says otherwise)"
echo "model:   Llama 3.2 1B (preset llama3.2-1b), seq $seq, $micro sequence(s) per step, bf16 autocast, AdamW"

data=$(bench_corpus 65536 $(( (steps + 1) * micro * (seq + 1) + 1 )))
run="$WORK/llama1b_cuda"
cat > "$run.in" <<DECK
device cuda
attention_backend auto
model llama preset llama3.2-1b
precision bf16
peak_tflops $GPU_PEAK_TFLOPS
seed 1
data tokens $data
batch micro $micro seq_len $seq
optimizer adamw lr 1e-4
max_steps $steps
init random std 0.02
fsdp no_shard
activation_checkpointing off
log every 1
run_dir $run
DECK
printf "%-40s %12s %8s\n" "framework" "tokens/s" "MFU"
if "${MPIRUN[@]}" -np 1 "$FTRAIN" "$run.in" > "$run.log" 2>&1; then
  read -r tps mfu <<<"$(steady_tokens_per_s "$run/metrics.jsonl" mfu)"
  attention=$(grep -m1 -o 'attention_forward ([^)]*): [^(]*' "$run.log" || echo "attention: see $run.log")
  printf "%-40s %12s %8s\n" "ftrain device cuda" "$tps" "$mfu"
  echo "  ($attention)"
else
  printf "%-40s %12s %8s\n" "ftrain device cuda" "FAILED" "-"
  tail -n 15 "$run.log" | sed 's/^/  | /'
fi
for compile in "" "--compile"; do
  name="pytorch $($PY -c 'import torch; print(torch.__version__)') sdpa${compile:+ + torch.compile}"
  if r=$("$PY" "$here/pytorch_llama_gpu.py" --batch "$micro" --seq $seq --steps "$steps" \
         --peak-tflops "$GPU_PEAK_TFLOPS" $compile 2> "$WORK/pytorch$compile.err"); then
    read -r tps mfu mem <<<"$(python3 -c "import json,sys; j=json.loads(sys.argv[1]); print(round(j['tokens_per_s']), f\"{100*j['mfu']:.1f}%\", f\"{j['peak_memory_gib']:.1f}\")" "$r")"
    printf "%-40s %12s %8s  (peak memory %s GiB)\n" "$name" "$tps" "$mfu" "$mem"
  else
    printf "%-40s %12s %8s\n" "$name" "FAILED" "-"
    tail -n 5 "$WORK/pytorch$compile.err" | sed 's/^/  | /'
  fi
done
echo "work dir: $WORK"
