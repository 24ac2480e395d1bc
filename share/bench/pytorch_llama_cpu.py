#!/usr/bin/env python3
"""The peer baseline for ftrain's CPU backend: the same Llama architecture
trained in PyTorch on the CPU (Debian's python3-torch).

Hugging Face LlamaForCausalLM semantics written out in plain PyTorch
(transformers is not packaged for Debian 12): RMSNorm, rotate-half RoPE,
GQA, SwiGLU, untied head, AdamW. Reads an ftrain token file (64-byte header,
then uint16/uint32 tokens) and uses the same window mapping as ftrain with
shuffle off. Prints tokens/s averaged after warm-up steps, as JSON.

    /usr/bin/python3 share/bench/pytorch_llama_cpu.py --data F --threads 2 --hidden 64 ...
"""
import argparse
import json
import math
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.kv, self.hd = a.heads, a.kv_heads, a.hidden // a.heads
        self.input_layernorm = RMSNorm(a.hidden, 1e-5)
        self.q_proj = nn.Linear(a.hidden, self.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(a.hidden, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(a.hidden, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.heads * self.hd, a.hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(a.hidden, 1e-5)
        self.gate_proj = nn.Linear(a.hidden, a.intermediate, bias=False)
        self.up_proj = nn.Linear(a.hidden, a.intermediate, bias=False)
        self.down_proj = nn.Linear(a.intermediate, a.hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x: the eager attention Hugging Face uses there
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
            att = torch.softmax(s, dim=-1) @ v
        x = x + self.o_proj(att.transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, 1e-5)
        self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)
        hd = a.hidden // a.heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(a.seq, dtype=torch.float32), inv)
        emb = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None])
        self.register_buffer("sin", emb.sin()[None, None])
        self.register_buffer("mask", torch.full((a.seq, a.seq), float("-inf")).triu(1))
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def read_tokens(path):
    with open(path, "rb") as f:
        header = f.read(64)
        assert header[:8] == b"FTRNTOK1", f"{path}: not an ftrain token file"
        token_bytes, = struct.unpack_from("<I", header, 12)
        n_tokens, = struct.unpack_from("<Q", header, 16)
        dtype = np.uint16 if token_bytes == 2 else np.uint32
        return np.frombuffer(f.read(n_tokens * token_bytes), dtype=dtype).astype(np.int64)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=176)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bf16-autocast", action="store_true",
                   help="forward under torch.cpu.amp.autocast(dtype=torch.bfloat16) (fp32 master weights)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    tokens = torch.from_numpy(read_tokens(a.data))
    model = Llama(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
    n_windows = (len(tokens) - 1) // a.seq
    times, losses = [], []
    for step in range(a.steps):
        idx = [(step * a.batch + k) % n_windows for k in range(a.batch)]
        win = torch.stack([tokens[i * a.seq: i * a.seq + a.seq + 1] for i in idx])
        t0 = time.perf_counter()
        with torch.cpu.amp.autocast(enabled=a.bf16_autocast, dtype=torch.bfloat16):
            loss = model(win[:, :-1], win[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    dt = sum(times[a.warmup:]) / len(times[a.warmup:])
    print(json.dumps({"torch": torch.__version__, "threads": a.threads, "bf16_autocast": a.bf16_autocast,
                      "params": sum(p.numel() for p in model.parameters()),
                      "tokens_per_s": a.batch * a.seq / dt, "step_time_s": dt, "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
