#!/usr/bin/env python3
"""The peer baseline for ftrain's CUDA backend (share/bench/gpu_llama.sh):
the same Llama architecture trained in PyTorch on the same GPU.

Hugging Face LlamaForCausalLM semantics written out in plain PyTorch
(RMSNorm, rotate-half RoPE with llama3 scaling, GQA, SwiGLU, tied
embeddings), attention through F.scaled_dot_product_attention (causal,
enable_gqa), fp32 master weights with bf16 autocast (what ftrain's
`precision bf16` is), fused AdamW, optionally torch.compile and activation
checkpointing per block (torch.utils.checkpoint, as ftrain's
`activation_checkpointing on`). Random tokens: speed only.

--precision fp8 is the FP8 baseline when Transformer Engine is not at hand
(the GPU machine is offline): the seven linears of every block (ftrain's FP8
linears; embedding, norms, attention and the tied head stay bf16) run
torch._scaled_mm through a custom autograd Function with per-tensor
*current* scaling (scale = fp8_max / amax of the tensor being cast, as
torchao's Float8Linear "dynamic" tensorwise recipe): E4M3 input and weight
in the forward GEMM (fast accumulation), E5M2 output gradient for dgrad and
wgrad (TE's HYBRID formats), FP8 copies of x and w saved for backward. When
this torch or GPU cannot do FP8 GEMMs, it prints {"unavailable": reason}
and exits 0, so the caller reports the row and keeps the others.

Prints one JSON line: tokens/s, step time and MFU against --peak-tflops with
ftrain's FLOP count (llama_bench_plan.flops_per_token, the same as
LlamaModel::training_flops_per_sample: 6 x matmul parameters x tokens +
12 x layers x q_size x T^2 per sequence).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_bench_plan  # noqa: E402 (shapes and the FLOP count shared with gpu_llama.sh)

E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def fp8_unavailable_reason(device):
    """Why FP8 GEMMs cannot run here ("" when they can): checked before the model is built."""
    if not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "float8_e5m2"):
        return f"torch {torch.__version__} has no float8_e4m3fn / float8_e5m2 dtypes"
    if device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
        if cap < (8, 9):
            return f"{torch.cuda.get_device_name(device)} is sm_{cap[0]}{cap[1]}: FP8 GEMMs need sm_89 or newer"
        try:
            a = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn)
            one = torch.ones((), device=device)
            scaled_mm(a, a.t(), one, one, torch.bfloat16, True)
            torch.cuda.synchronize()
        except Exception as e:  # the row says why; the other rows still run
            return f"torch._scaled_mm failed on a 16x16 trial: {type(e).__name__}: {str(e).splitlines()[0]}"
    return ""


def scaled_mm(a, b, scale_a, scale_b, out_dtype, fast_accum):
    """a (M,K) row-major FP8 x b (K,N) column-major FP8, times the dequantisation factors scale_a *
    scale_b. On the GPU torch._scaled_mm (cuBLASLt); elsewhere (the host test) the same product on the
    decoded FP8 values, so the autograd Function's scaling and layouts can be checked without a GPU."""
    if a.is_cuda:
        r = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, use_fast_accum=fast_accum)
        return r[0] if isinstance(r, tuple) else r  # torch < 2.4 also returned amax
    return ((a.float() @ b.float()) * (scale_a * scale_b)).to(out_dtype)


def fp8_scale(t, fp8_max):
    """Current per-tensor scaling: the tensor's amax maps to the format's largest value."""
    return fp8_max / torch.clamp(t.detach().abs().amax().float(), min=1e-12)


def fp8_cast(t, scale, dtype, fp8_max):
    # Saturate first: torch's cast to float8 turns out-of-range values into NaN, not the maximum.
    return torch.clamp(t.float() * scale, -fp8_max, fp8_max).to(dtype)


class Fp8LinearFunction(torch.autograd.Function):
    """y = x w^T with E4M3 x and w (forward, fast accumulation); dx = dy w and dw = dy^T x with E5M2 dy
    (no fast accumulation), each operand with its own per-tensor scale."""

    @staticmethod
    def forward(ctx, x, w):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        sx, sw = fp8_scale(x2, E4M3_MAX), fp8_scale(w, E4M3_MAX)
        xq = fp8_cast(x2, sx, torch.float8_e4m3fn, E4M3_MAX)
        wq = fp8_cast(w, sw, torch.float8_e4m3fn, E4M3_MAX)
        y = scaled_mm(xq, wq.t(), sx.reciprocal(), sw.reciprocal(), torch.bfloat16, True)
        ctx.save_for_backward(xq, wq, sx, sw)
        ctx.x_shape, ctx.x_dtype, ctx.w_dtype = shape, x.dtype, w.dtype
        return y.reshape(*shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        xq, wq, sx, sw = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        sg = fp8_scale(dy2, E5M2_MAX)
        gq = fp8_cast(dy2, sg, torch.float8_e5m2, E5M2_MAX)
        # dgrad (M,N).(N,K): w as the column-major (N,K) operand = its transposed copy, viewed transposed
        dx = scaled_mm(gq, wq.t().contiguous().t(), sg.reciprocal(), sw.reciprocal(), torch.bfloat16, False)
        # wgrad (N,M).(M,K): dy's transposed copy, x's transposed copy viewed transposed; f32 for the master
        dw = scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), sg.reciprocal(), sx.reciprocal(),
                       torch.float32, False)
        return dx.reshape(ctx.x_shape).to(ctx.x_dtype), dw.to(ctx.w_dtype)


class Fp8Linear(nn.Linear):
    def forward(self, x):
        return Fp8LinearFunction.apply(x, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama3_inv_freq(head_dim, theta, factor=32.0, low=1.0, high=4.0, original=8192):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    wavelen = 2 * math.pi / inv
    low_wavelen, high_wavelen = original / low, original / high
    smooth = (original / wavelen - low) / (high - low)
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
    return torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        linear = Fp8Linear if a.precision == "fp8" else nn.Linear
        self.heads, self.kv, self.hd = a.heads, a.kv_heads, a.head_dim
        self.input_layernorm = RMSNorm(a.hidden, 1e-5)
        self.q_proj = linear(a.hidden, self.heads * self.hd, bias=False)
        self.k_proj = linear(a.hidden, self.kv * self.hd, bias=False)
        self.v_proj = linear(a.hidden, self.kv * self.hd, bias=False)
        self.o_proj = linear(self.heads * self.hd, a.hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(a.hidden, 1e-5)
        self.gate_proj = linear(a.hidden, a.intermediate, bias=False)
        self.up_proj = linear(a.hidden, a.intermediate, bias=False)
        self.down_proj = linear(a.intermediate, a.hidden, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.heads != self.kv)
        x = x + self.o_proj(att.transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.checkpointing = a.checkpointing == "on"
        self.embed_tokens = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, 1e-5)
        ang = torch.outer(torch.arange(a.seq, dtype=torch.float32), llama3_inv_freq(a.head_dim, a.rope_theta))
        emb = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        x = self.embed_tokens(tokens)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for layer in self.layers:
            if self.checkpointing:  # keep only the block's input; recompute the rest in backward
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        logits = F.linear(self.norm(x), self.embed_tokens.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def shape_of(a):
    return dict(vocab=a.vocab, hidden=a.hidden, intermediate=a.intermediate, layers=a.layers, heads=a.heads,
                kv_heads=a.kv_heads, head_dim=a.head_dim)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(llama_bench_plan.MODELS), default="1b",
                   help="Llama 3.2 shape (llama_bench_plan.MODELS); the options below override single fields")
    for field in ("vocab", "hidden", "intermediate", "layers", "heads", "kv-heads", "head-dim"):
        p.add_argument(f"--{field}", type=int)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--seq", type=int, default=llama_bench_plan.SEQ)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--precision", choices=("bf16", "fp8"), default="bf16")
    p.add_argument("--checkpointing", choices=("off", "on"), default="off")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="dense peak of the GPU at --precision (H100 SXM: bf16 989, fp8 1979)")
    a = p.parse_args(argv)
    for field, value in llama_bench_plan.MODELS[a.model].items():
        if field in ("vocab", "hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim") and \
                getattr(a, field) is None:
            setattr(a, field, value)
    return a


def baseline_name(a):
    name = f"torch {torch.__version__} sdpa, {'torch.compile' if a.compile else 'eager'}"
    if a.precision == "fp8":
        name += ", FP8 linears: torch._scaled_mm, per-tensor current scaling, E4M3 fwd / E5M2 grads"
    return name + (", checkpointing per block" if a.checkpointing == "on" else "")


def main():
    a = parse_args()
    if not torch.cuda.is_available():
        sys.exit("pytorch_llama_gpu.py: refusing to run: torch sees no CUDA GPU")
    dev = torch.device("cuda")
    if a.precision == "fp8":
        why = fp8_unavailable_reason(dev)
        if why:
            print(json.dumps({"framework": "pytorch", "baseline": baseline_name(a), "unavailable": why}))
            return
    torch.manual_seed(0)
    model = Llama(a).to(dev)
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    times, losses = [], []
    for step in range(a.steps):
        win = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(win[:, :-1], win[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    dt = sum(times[a.warmup:]) / len(times[a.warmup:])
    flops_per_s = llama_bench_plan.flops_per_token(shape_of(a), a.seq) * a.batch * a.seq / dt
    print(json.dumps({"framework": "pytorch", "baseline": baseline_name(a), "torch": torch.__version__,
                      "compile": a.compile, "precision": a.precision, "checkpointing": a.checkpointing,
                      "device": torch.cuda.get_device_name(), "params": sum(p.numel() for p in model.parameters()),
                      "batch": a.batch, "seq": a.seq, "tokens_per_s": a.batch * a.seq / dt, "step_time_s": dt,
                      "tflops_per_s": flops_per_s / 1e12, "mfu": flops_per_s / (a.peak_tflops * 1e12),
                      "peak_tflops": a.peak_tflops, "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
