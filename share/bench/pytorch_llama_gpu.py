#!/usr/bin/env python3
"""The peer baseline for ftrain's CUDA backend (share/bench/gpu_llama_1b.sh):
the same Llama architecture trained in PyTorch on the same GPU.

Hugging Face LlamaForCausalLM semantics written out in plain PyTorch
(RMSNorm, rotate-half RoPE with llama3 scaling, GQA, SwiGLU, tied
embeddings), attention through F.scaled_dot_product_attention (causal,
enable_gqa), fp32 master weights with bf16 autocast (what ftrain's
`precision bf16` is), fused AdamW, optionally torch.compile. Random tokens:
speed only. Prints one JSON line: tokens/s, step time and MFU against
--peak-tflops with ftrain's FLOP count (LlamaModel::training_flops_per_sample:
6 x matmul parameters x tokens + 12 x layers x q_size x T^2 per sequence).
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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
        self.heads, self.kv, self.hd = a.heads, a.kv_heads, a.head_dim
        self.input_layernorm = RMSNorm(a.hidden, 1e-5)
        self.q_proj = nn.Linear(a.hidden, self.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(a.hidden, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(a.hidden, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.heads * self.hd, a.hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(a.hidden, 1e-5)
        self.gate_proj = nn.Linear(a.hidden, a.intermediate, bias=False)
        self.up_proj = nn.Linear(a.hidden, a.intermediate, bias=False)
        self.down_proj = nn.Linear(a.intermediate, a.hidden, bias=False)

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
            x = layer(x, cos, sin)
        logits = F.linear(self.norm(x), self.embed_tokens.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def flops_per_sequence(a):
    q_size, kv_size = a.heads * a.head_dim, a.kv_heads * a.head_dim
    per_layer = a.hidden * (2 * q_size + 2 * kv_size) + 3 * a.hidden * a.intermediate
    matmul_params = per_layer * a.layers + a.vocab * a.hidden
    return 6.0 * matmul_params * a.seq + 12.0 * a.layers * q_size * a.seq * a.seq


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Defaults: Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json) at seq 4096.
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU (H100 SXM: 989)")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pytorch_llama_gpu.py: refusing to run: torch sees no CUDA GPU")
    torch.manual_seed(0)
    dev = torch.device("cuda")
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
    flops_per_s = flops_per_sequence(a) * a.batch / dt
    print(json.dumps({"framework": "pytorch", "torch": torch.__version__, "compile": a.compile,
                      "device": torch.cuda.get_device_name(), "params": sum(p.numel() for p in model.parameters()),
                      "batch": a.batch, "seq": a.seq, "tokens_per_s": a.batch * a.seq / dt, "step_time_s": dt,
                      "tflops_per_s": flops_per_s / 1e12, "mfu": flops_per_s / (a.peak_tflops * 1e12),
                      "peak_tflops": a.peak_tflops, "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
