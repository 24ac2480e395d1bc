#!/usr/bin/env bash
# Llama 3.2 1B and 3B at seq 4096, bf16 and fp8, on one GPU (issue 20): ftrain
# (`device cuda`, attention_backend auto = cuDNN fused SDPA, `precision fp8` =
# delayed scaling HYBRID in the blocks' linears) next to the same model in
# PyTorch on the same GPU (pytorch_llama_gpu.py: SDPA, eager and
# torch.compile), all in one run: tokens/s and MFU per row, then the issue's
# three targets with PASS / FAIL: ftrain bf16 MFU >= 55%, ftrain FP8/BF16
# tokens/s >= 1.3x, ftrain/PyTorch-compiled tokens/s >= 1.2x (per model and
# precision). Run by share/scripts/gpu-check.sh; prints machine, commit and
# command for share/doc/performance.md.
#
#   bash share/bench/gpu_llama.sh [steps]      (default 12; the first 3-4 are warm-up)
#
# Env: BENCH_MODELS ("1b 3b"), BENCH_PRECISIONS ("bf16 fp8"), BENCH_PYTORCH_MODES
# ("eager compiled"; the lease's short check runs eager only), BENCH_MICRO_1B /
# BENCH_MICRO_3B and BENCH_CKPT_1B / BENCH_CKPT_3B (on|off) to override the
# settings below, FTRAIN_BENCH_PYTHON (python with CUDA torch), FTRAIN_PEAK_TFLOPS
# (dense bf16 peak; default H100 SXM 989) and FTRAIN_PEAK_TFLOPS_FP8 (dense fp8
# peak; default 1979 on an H100, else twice the bf16 peak).
#
# MFU = tokens/s x model FLOPs per token / the precision's dense peak, the
# same count for every row (llama_bench_plan.py flops_per_token =
# LlamaModel::training_flops_per_sample / seq: 6 x matmul parameters + 12 x
# layers x q_size x seq for attention, no causal discount, recomputation not
# counted): 1B 9.03 GFLOP/token, 3B 23.50 GFLOP/token. Peaks are stated, not
# measured (NVIDIA H100 SXM datasheet, dense): bf16 989, fp8 1979 TFLOP/s.
#
# Memory, one H100 SXM 80GB (79.6 GiB), fp32 master weights + AdamW, no_shard
# (`llama_bench_plan.py memory 3b [micro ckpt]` prints it):
#   3B: 3,212,749,824 parameters x 16 B (f32 master 4 + f32 grad 4 + AdamW m 4
#       + v 4) = 51.4 GB = 47.9 GiB of state; bf16 weight copies 2 B/param =
#       6.0 GiB (PyTorch autocast keeps them for backward; ftrain gathers
#       ~1.5 GiB of units at a time); logits + loss 10 B x 128256 x 4096 =
#       4.9 GiB per sequence. Activations per sequence (bf16, per token per
#       layer: 3 x hidden + 2 x q + 2 x kv + 4 x intermediate elements =
#       104 KiB): 104 KiB x 4096 x 28 = 10.7 GiB without checkpointing; with
#       it each block keeps only its input (3072 x 2 B x 4096 x 28 = 0.7 GiB)
#       plus one block recomputed (0.4 GiB).
#       micro 1, checkpointing off: 47.9 + 6.0 + 10.7 + 4.9 = 69.5 GiB: leaves
#         10 GiB for cuBLAS/cuDNN workspaces, temporaries the estimate omits
#         (RoPE, FP8 copies, compile buffers) and fragmentation: too tight to
#         trust for a first run; micro 2 without it (85 GiB) does not fit.
#       micro 1, checkpointing on: 47.9 + 6.0 + 1.0 + 4.9 = 59.8 GiB: fits
#         with ~20 GiB to spare. CHOSEN for 3B (both frameworks checkpoint
#         every block; MFU then excludes the ~1/3 extra forward).
#   1B: 1,235,814,400 x 16 B = 18.4 GiB state + 2.3 GiB bf16 copies; micro 2
#       without checkpointing: activations 10.8 GiB + logits 9.8 GiB = 41.3 GiB
#       in all: fits. CHOSEN for 1B (as gpu_llama_1b.sh, which this replaces).
#
# The PyTorch FP8 baseline: Transformer Engine is not assumed (the GPU
# machine is offline); pytorch_llama_gpu.py --precision fp8 runs the blocks'
# linears through torch._scaled_mm with per-tensor current scaling (E4M3
# forward, E5M2 gradients) in a custom autograd Function, eager and compiled.
# When torch or the GPU cannot do FP8 GEMMs, those rows say why and the
# others still run. Without a GPU the script refuses with exit 2; a row that
# crashed makes it exit 1 after the summary; the targets' PASS / FAIL is
# printed, never turned into an exit status (a benchmark is not a test).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/gpu_common.sh"
require_gpu "${FTRAIN_BUILD_DIR:-$here/../../build}" "gpu_llama.sh"
source "$here/bench_common.sh"
steps=${1:-12}
# the means leave out 3 (ftrain) and 4 (PyTorch) warm-up steps
(( steps >= 5 )) || { echo "gpu_llama.sh: steps $steps: at least 5 (4 warm-up steps are left out of the means)" >&2; exit 2; }
models=${BENCH_MODELS:-1b 3b}
precisions=${BENCH_PRECISIONS:-bf16 fp8}
pytorch_modes=${BENCH_PYTORCH_MODES:-eager compiled}
for mode in $pytorch_modes; do
  [[ $mode == eager || $mode == compiled ]] || { echo "gpu_llama.sh: BENCH_PYTORCH_MODES: '$mode' is neither eager nor compiled" >&2; exit 2; }
done
PY="${FTRAIN_BENCH_PYTHON:-python3}"
PLAN="$here/llama_bench_plan.py"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
bf16_peak=$GPU_PEAK_TFLOPS
if [[ -n "${FTRAIN_PEAK_TFLOPS_FP8:-}" ]]; then fp8_peak=$FTRAIN_PEAK_TFLOPS_FP8
elif [[ -z "${FTRAIN_PEAK_TFLOPS:-}" && "$gpu_name" == *H100* ]]; then fp8_peak=1979
else fp8_peak=$(python3 -c "print(f'{2 * float(\"$bf16_peak\"):g}')"); fi
echo "device:  $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
echo "command: FTRAIN_PEAK_TFLOPS=$bf16_peak FTRAIN_PEAK_TFLOPS_FP8=$fp8_peak BENCH_MODELS='$models' BENCH_PRECISIONS='$precisions' BENCH_PYTORCH_MODES='$pytorch_modes' bash share/bench/gpu_llama.sh $steps"
echo "peaks:   dense bf16 $bf16_peak, fp8 $fp8_peak TFLOP/s (H100 SXM datasheet unless overridden)"
echo "torch:   $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1)"
echo "PyTorch FP8 baseline: torch._scaled_mm, per-tensor current scaling (Transformer Engine $("$PY" -c 'import transformer_engine as te; print(te.__version__, "is installed but not used: one baseline for every machine")' 2>/dev/null || echo 'not installed'))"

results="$WORK/results.jsonl"
: > "$results"
for model in $models; do
  read -r def_micro def_ckpt <<<"$(python3 "$PLAN" settings "$model")"
  upper=${model^^}
  micro_var="BENCH_MICRO_$upper" ckpt_var="BENCH_CKPT_$upper"
  micro=${!micro_var:-$def_micro} ckpt=${!ckpt_var:-$def_ckpt}
  echo "== Llama 3.2 ${upper}: micro $micro x seq 4096, activation_checkpointing $ckpt, AdamW, fp32 master weights =="
  python3 "$PLAN" memory "$model" "$micro" "$ckpt"
  data=$(bench_corpus 65536 $(( (steps + 1) * micro * 4097 + 1 )))
  for precision in $precisions; do
    peak=$bf16_peak; [[ $precision == fp8 ]] && peak=$fp8_peak
    run="$WORK/llama${model}_${precision}_cuda"
    python3 "$PLAN" deck "$model" "$precision" "$data" "$run" "$steps" "$peak" "$micro" "$ckpt" > "$run.in"
    echo "-- ftrain $model $precision: ${MPIRUN[*]} -np 1 $FTRAIN $run.in"
    if "${MPIRUN[@]}" -np 1 "$FTRAIN" "$run.in" > "$run.log" 2>&1; then
      python3 "$PLAN" ftrain-row "$model" "$precision" "$run/metrics.jsonl" "$run.log" >> "$results"
    else
      tail -n 15 "$run.log" | sed 's/^/  | /'
      python3 "$PLAN" failed-row "$model" "$precision" ftrain \
        "FAILED: $(grep -m1 'error' "$run.log" | cut -c1-160 || true) (log: $run.log)" >> "$results"
    fi
    for mode in $pytorch_modes; do
      compile=""; [[ $mode == compiled ]] && compile="--compile"
      framework="pytorch $mode"
      out="$WORK/pytorch_${model}_${precision}${compile}"
      echo "-- $framework $model $precision"
      if "$PY" "$here/pytorch_llama_gpu.py" --model "$model" --precision "$precision" --checkpointing "$ckpt" \
           --batch "$micro" --steps "$steps" --peak-tflops "$peak" $compile > "$out.json" 2> "$out.err"; then
        python3 "$PLAN" pytorch-row "$model" "$precision" "$framework" "$out.json" >> "$results"
      else
        tail -n 5 "$out.err" | sed 's/^/  | /'
        python3 "$PLAN" failed-row "$model" "$precision" "$framework" \
          "FAILED: $(tail -n 1 "$out.err" | cut -c1-160) (log: $out.err)" >> "$results"
      fi
    done
  done
done
echo "work dir: $WORK"
echo "== Summary =="
exec python3 "$PLAN" summary "$results" "$bf16_peak" "$fp8_peak"
