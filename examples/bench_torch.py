#!/usr/bin/env python3
"""PyTorch eager reference for bench_gpu: the same GPT-2 (d12 by default), the
same batch, AdamW, on the same GPU; prints tokens/s in fp32 (TF32 allowed) and in
bf16 autocast. Needs torch with CUDA.
    python3 examples/bench_torch.py [--batch 16] [--seq 1024] [--steps 10]"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH)
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L=12, NH=12, C=768, V=50257, Vp=50304, maxT=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.V = V

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits[..., :self.V].reshape(-1, self.V).float(), targets.reshape(-1))


def run(model, opt, idx, targets, steps, bf16):
    for step in range(steps + 1):
        if step == 1:
            torch.cuda.synchronize()
            start = time.time()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return idx.numel() * steps / (time.time() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    idx = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    targets = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    print(f"pytorch {torch.__version__} eager d12 B={a.batch} T={a.seq}: "
          f"fp32/tf32 {run(model, opt, idx, targets, a.steps, False):.0f} tokens/s, "
          f"bf16 autocast {run(model, opt, idx, targets, a.steps, True):.0f} tokens/s")


if __name__ == "__main__":
    main()
