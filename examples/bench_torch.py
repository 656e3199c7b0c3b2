#!/usr/bin/env python3
"""PyTorch reference for bench_gpu: the same GPT-2 (d12), the same batch, AdamW,
on the same GPU. Prints tokens/s of eager PyTorch with the attention written out
(fp32 with TF32 allowed, and bf16 autocast), then with SDPA's fused causal
attention in bf16 autocast, eager and under torch.compile, and the peak memory
of each. Needs torch with CUDA; with --device cpu, the eager runs on the CPU
(docs/performance.md holds them against train_single; SDPA needs torch 2).
    python3 examples/bench_torch.py [--device cuda|cpu] [--batch 16] [--seq 1024] [--steps 10] [--runs eager-fp32,...]"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, sdpa):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH, self.sdpa = NH, sdpa

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH)
            att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1), float("-inf"))
            y = att.softmax(-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, sdpa, L=12, NH=12, C=768, V=50257, Vp=50304, maxT=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH, sdpa) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.V = V

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits[..., :self.V].reshape(-1, self.V).float(), targets.reshape(-1))


def run(model, opt, idx, targets, steps, bf16, device):
    """tokens/s over `steps` steps after two warm-ups (torch.compile compiles in
    the first), and the peak memory in GB (a GPU's; the CPU's is not counted: 0)."""
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for step in range(steps + 2):
        if step == 2:
            if cuda:
                torch.cuda.synchronize()
            start = time.time()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
    return idx.numel() * steps / (time.time() - start), torch.cuda.max_memory_allocated() / 1e9 if cuda else 0


def main():
    ap = argparse.ArgumentParser(description="PyTorch's speed on bench_gpu's model and batch")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--runs", default="eager-fp32,eager-bf16,sdpa-bf16,compile-bf16",
                    help="which of eager-fp32, eager-bf16, sdpa-bf16, compile-bf16 to run (default all)")
    a = ap.parse_args()
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    idx = torch.randint(0, 50257, (a.batch, a.seq), device=a.device)
    targets = torch.randint(0, 50257, (a.batch, a.seq), device=a.device)
    runs = {"eager-fp32": ("eager, attention written out, fp32/tf32", False, False, False),
            "eager-bf16": ("eager, attention written out, bf16 autocast", False, False, True),
            "sdpa-bf16": ("eager, SDPA attention, bf16 autocast", True, False, True),
            "compile-bf16": ("torch.compile, SDPA attention, bf16 autocast", True, True, True)}
    for key in a.runs.split(","):
        if key not in runs:
            ap.error(f"--runs: unknown run '{key}'")
    for name, sdpa, compiled, bf16 in (runs[key] for key in a.runs.split(",")):
        torch.manual_seed(0)
        model = GPT(sdpa).to(a.device)
        fused = {"fused": True} if a.device == "cuda" else {}
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, **fused)
        step_model = torch.compile(model) if compiled else model
        tokens_per_s, peak = run(step_model, opt, idx, targets, a.steps, bf16, a.device)
        print(f"pytorch {torch.__version__} {a.device} ({torch.get_num_threads()} threads) d12 B={a.batch} T={a.seq} "
              f"{name}: {tokens_per_s:.0f} tokens/s, {1e3 * idx.numel() / tokens_per_s:.1f} ms a step"
              + (f", peak {peak:.2f} GB" if a.device == "cuda" else ""), flush=True)
        del model, opt, step_model
        if a.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
