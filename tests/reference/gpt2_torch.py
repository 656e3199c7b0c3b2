#!/usr/bin/env python3
"""An independent GPT-2 in PyTorch that writes an llm.c model file and debug state,
so build/llmc_check can compare shardlab's forward and backward against it.

    python3 tests/reference/gpt2_torch.py --out DIR --layers 2 --heads 3 --channels 48 \
        --vocab 101 --max-seq 16 --batch 2 --seq 8

Writes DIR/model.bin and DIR/state.bin. Needs torch (Debian: python3-torch)."""
import argparse
import math
import os
import struct

import torch
import torch.nn.functional as F


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(p, idx, targets, cfg):
    B, T = idx.shape
    C, NH, V = cfg["C"], cfg["NH"], cfg["V"]
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["L"]):
        h = layer_norm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layer_norm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu(h @ p["fcw"][l].T + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layer_norm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"].T  # (B, T, Vp): the head is tied to the embedding
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return logits[..., :V], loss


ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def make_params(cfg, gen):
    L, C, Vp, V, maxT = cfg["L"], cfg["C"], cfg["Vp"], cfg["V"], cfg["maxT"]

    def rnd(*shape, std=0.2):
        return torch.randn(*shape, generator=gen) * std

    wte = rnd(Vp, C)
    wte[V:] = 0.0  # padded rows
    return {
        "wte": wte, "wpe": rnd(maxT, C),
        "ln1w": 1.0 + rnd(L, C, std=0.1), "ln1b": rnd(L, C, std=0.1),
        "qkvw": rnd(L, 3 * C, C), "qkvb": rnd(L, 3 * C, std=0.1),
        "attprojw": rnd(L, C, C), "attprojb": rnd(L, C, std=0.1),
        "ln2w": 1.0 + rnd(L, C, std=0.1), "ln2b": rnd(L, C, std=0.1),
        "fcw": rnd(L, 4 * C, C), "fcb": rnd(L, 4 * C, std=0.1),
        "fcprojw": rnd(L, C, 4 * C), "fcprojb": rnd(L, C, std=0.1),
        "lnfw": 1.0 + rnd(C, std=0.1), "lnfb": rnd(C, std=0.1),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--channels", type=int, default=48)
    ap.add_argument("--vocab", type=int, default=101)
    ap.add_argument("--max-seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cfg = {"L": a.layers, "NH": a.heads, "C": a.channels, "V": a.vocab, "maxT": a.max_seq,
           "Vp": (a.vocab + 127) // 128 * 128}
    gen = torch.Generator().manual_seed(a.seed)
    p = {k: v.double().requires_grad_() for k, v in make_params(cfg, gen).items()}
    idx = torch.randint(0, cfg["V"], (a.batch, a.seq + 1), generator=gen)
    x, y = idx[:, :-1], idx[:, 1:]
    logits, loss = forward(p, x, y, cfg)  # in double, then stored as fp32
    loss.backward()
    os.makedirs(a.out, exist_ok=True)
    header = [20240326, 3, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    with open(os.path.join(a.out, "model.bin"), "wb") as f:
        f.write(struct.pack("<256i", *(header + [0] * (256 - len(header)))))
        for k in ORDER:
            f.write(p[k].detach().float().contiguous().numpy().tobytes())
    with open(os.path.join(a.out, "state.bin"), "wb") as f:
        header = [20240327, 2, a.batch, a.seq]
        f.write(struct.pack("<256i", *(header + [0] * 252)))
        f.write(x.to(torch.int32).numpy().tobytes())
        f.write(y.to(torch.int32).numpy().tobytes())
        f.write(logits.detach().float().contiguous().numpy().tobytes())
        f.write(struct.pack("<f", loss.item()))
        for k in ORDER:
            f.write(p[k].grad.float().contiguous().numpy().tobytes())
    print(f"wrote {a.out}/model.bin and state.bin: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
