#!/usr/bin/env python3
"""PyTorch's F.scaled_dot_product_attention on the GPU, the peer of
tests/bench/bench_cuda_attention (share/bench/gpu_attention.sh): same shape
(BSHD memory as ftrain keeps it, transposed to BHSD views the way a model
calls SDPA), bf16, causal and full, GQA through enable_gqa. Times forward and
forward+backward with CUDA events, best of --repeats, and prints the same
columns with FlashAttention's FLOP accounting (forward 4 B Hq T^2 D, backward
2.5 times that, halved when causal). Reports which SDPA kernel PyTorch picked.
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def best_ms(fn, repeats):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # warm-up (kernel selection, allocator)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--q-heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--repeats", type=int, default=20)
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pytorch_sdpa_gpu.py: refusing to run: torch sees no CUDA GPU")
    dev = torch.device("cuda")
    B, T, Hq, Hkv, D = a.batch, a.seq, a.q_heads, a.kv_heads, a.head_dim
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}")
    g = torch.Generator(device=dev).manual_seed(0)

    def bshd(h):
        return torch.randn(B, T, h, D, device=dev, dtype=torch.bfloat16, generator=g)

    q, k, v, do = bshd(Hq), bshd(Hkv), bshd(Hkv), bshd(Hq)
    for causal in (True, False):
        qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        dot = do.transpose(1, 2)

        def fwd():
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=Hq != Hkv)

        def fwd_bwd():
            out = fwd()
            torch.autograd.backward(out, dot)

        with torch.no_grad():
            t_fwd = best_ms(fwd, a.repeats)
        t_all = best_ms(fwd_bwd, a.repeats)
        t_bwd = t_all - t_fwd
        fwd_flops = 4.0 * B * Hq * T * T * D * (0.5 if causal else 1.0)
        bwd_flops = 2.5 * fwd_flops
        print(f"pytorch sdpa bf16 {'causal' if causal else 'full':6} fwd {t_fwd:8.3f} ms {fwd_flops / t_fwd * 1e-9:7.1f} TFLOP/s"
              f" | bwd {t_bwd:8.3f} ms {bwd_flops / t_bwd * 1e-9:7.1f} TFLOP/s"
              f" | fwd+bwd {(fwd_flops + bwd_flops) / t_all * 1e-9:7.1f} TFLOP/s")
    # Which backend SDPA dispatched to (flash / cuDNN / efficient), from the profiler's kernel names.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fwd()
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if "attention" in e.name.lower() or "fmha" in e.name.lower()
                    or "flash" in e.name.lower()})
    print("pytorch sdpa kernels: " + (", ".join(n[:80] for n in names) if names else "(none recognised)"))


if __name__ == "__main__":
    main()
