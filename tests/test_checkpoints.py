#!/usr/bin/env python3
"""Checkpoints under mpirun: exact resume, resharding across strategies and rank
counts, and faults (a rank killed mid-save, corrupted or missing files, a NaN loss,
SIGTERM). Usage: test_checkpoints.py BUILD_DIR DATA_DIR "MPIRUN ..." """
import array
import glob
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys

from testlib import Checks, run_captured
import time
import zlib

BUILD, DATA, MPIRUN = sys.argv[1], sys.argv[2], shlex.split(sys.argv[3])
COMMON = ["--config", "d2", "--vocab", "256", "--data", DATA, "--batch", "12", "--seq", "16", "--quiet"]


CHECKS = Checks("checkpoints")
check = CHECKS.check
tmp = CHECKS.scratch("shardlab_ckpt_")


def launch(strategy, n):
    if strategy == "single":
        return [f"{BUILD}/train_single"]
    if strategy in ("zero1", "zero2"):  # the ddp trainer's ZeRO stages
        return [*MPIRUN, "-np", str(n), f"{BUILD}/train_ddp", "--zero-stage", strategy[-1]]
    return [*MPIRUN, "-np", str(n), f"{BUILD}/train_{strategy}"]


def train(strategy, n, *args, env=None, timeout=300):
    r = run_captured(launch(strategy, n) + COMMON + list(args), timeout=timeout, env=dict(os.environ, **(env or {})))
    return r


def fails_with(r, pattern, what):
    check(r.returncode != 0 and pattern in r.stderr, f"{what}: {pattern!r} in {r.stderr.strip()[:200]!r}")

def losses(path):
    return {o["step"]: o["loss"] for o in map(json.loads, open(path)) if "step" in o}


RUNS = [("single", 1)] + [(s, n) for s in ("ddp", "zero3", "fsdp") for n in (1, 2, 3, 4) if not (s == "ddp" and n == 1)] \
    + [("zero1", 3), ("zero2", 4), ("zero2", 1)]
QUICK = os.environ.get("SHARDLAB_TEST_QUICK") == "1"  # make gpu-check: exact resume alone, a run of each kind
if QUICK:
    RUNS = [("single", 1), ("ddp", 2), ("zero3", 2), ("fsdp", 2)]

# ---- the uninterrupted reference ----
ref_log = f"{tmp}/ref.jsonl"
check(train("single", 1, "--steps", "20", "--log", ref_log).returncode == 0, "reference run")
ref = losses(ref_log)
# Both builds are deterministic (the GPU's embedding backward sums in a fixed
# order, cuBLAS repeats itself on one GPU), so a resumed run must match bit for bit.

# ---- exact resume: 10 steps, save, resume for 10 more == 20 steps ----
def resume_is_exact(tag, strategy, n, steps, *flags):
    """`steps` steps, against steps/2 saved into {tmp}/ck_TAG and resumed for the rest: the same losses, bitwise."""
    whole, part, ck = f"{tmp}/{tag}_whole.jsonl", f"{tmp}/{tag}_part.jsonl", f"{tmp}/ck_{tag}"
    ok = train(strategy, n, "--steps", str(steps), *flags, "--log", whole).returncode == 0
    ok &= train(strategy, n, "--steps", str(steps // 2), *flags, "--ckpt-dir", ck, "--log", part).returncode == 0
    ok &= train(strategy, n, "--steps", str(steps), *flags, "--resume", ck, "--log", part).returncode == 0
    return ok and losses(part) == losses(whole) and len(losses(part)) == steps

for strategy, n in RUNS:
    check(resume_is_exact(f"{strategy}{n}", strategy, n, 20), f"{strategy} N={n}: 10 + resumed 10 steps equal 20 steps (bitwise)")
if QUICK:
    CHECKS.finish()

# ---- resuming a checkpoint at or past --steps ----
done_log = f"{tmp}/done.jsonl"
r = train("single", 1, "--steps", "10", "--resume", f"{tmp}/ck_single1", "--log", done_log)
check(r.returncode == 0 and "nothing left to train" in r.stdout and not losses(done_log),
      f"resuming step 10 with --steps 10: says nothing is left to train, trains nothing ({r.stdout.strip()!r})")
r = train("ddp", 2, "--steps", "6", "--resume", f"{tmp}/ck_single1")
check(r.returncode != 0 and "the checkpoint is at step 10, past --steps 6" in r.stderr,
      f"resuming step 10 with --steps 6 is an error: {r.stderr.strip()[:200]!r}")
tl_log = f"{tmp}/timeline_refused.jsonl"
r = train("fsdp", 2, "--steps", "20", "--resume", f"{tmp}/ck_single1", "--timeline-step", "10", "--log", tl_log)
check(r.returncode != 0 and "--timeline-step 10: the run resumes after it, at step 11" in r.stderr
      and not (os.path.exists(tl_log) and os.path.getsize(tl_log)),
      f"--timeline-step before the resumed run's first step is an error, and the log stays empty: "
      f"{r.stderr.strip()[:200]!r}")

# ---- reshard: each checkpoint above continues in another strategy at another N ----
def resume_matches(src, strategy, n, first_step=11):
    log = f"{tmp}/reshard_{os.path.basename(src)}_{strategy}{n}.jsonl"
    r = train(strategy, n, "--steps", "20", "--resume", src, "--log", log)
    if r.returncode != 0:
        print(r.stderr[-500:])
        return False
    got = losses(log)
    return sorted(got) == list(range(first_step, 21)) and all(abs(got[s] - ref[s]) <= 1e-5 * abs(ref[s]) for s in got)

for k, (strategy, n) in enumerate(RUNS):
    to_strategy, to_n = RUNS[(k + 5) % len(RUNS)]
    check(resume_matches(f"{tmp}/ck_{strategy}{n}", to_strategy, to_n),
          f"reshard {strategy} N={n} -> {to_strategy} N={to_n}: losses match the uninterrupted run")
# a chain: FSDP at 4 -> ZeRO-3 at 3 -> DDP at 1
chain = f"{tmp}/chain"
ok = train("fsdp", 4, "--steps", "7", "--ckpt-dir", chain).returncode == 0
ok &= train("zero3", 3, "--steps", "14", "--resume", chain, "--ckpt-dir", chain).returncode == 0
check(ok and resume_matches(chain, "ddp", 2, 15) and resume_matches(chain, "single", 1, 15),
      "chain FSDP@4 -> ZeRO-3@3 -> DDP@2 and single: losses match")

# ZeRO's flat ranges cut rows (even single rows, at these sizes) between ranks:
# ZeRO-1 at 3 -> FSDP at 2 -> ZeRO-2 at 4
chain = f"{tmp}/chain_zero"
ok = train("zero1", 3, "--steps", "7", "--ckpt-dir", chain).returncode == 0
manifest = open(f"{chain}/step_00000007/manifest.txt").read() if ok else ""
check("strategy zero1" in manifest, "a ZeRO-1 checkpoint's manifest names zero1")
ok &= train("fsdp", 2, "--steps", "14", "--resume", chain, "--ckpt-dir", chain).returncode == 0
check(ok and resume_matches(chain, "zero2", 4, 15), "chain ZeRO-1@3 -> FSDP@2 -> ZeRO-2@4: losses match")

# ---- full layout: llm.c model.bin + optimizer.bin, gathered on rank 0 ----
full = f"{tmp}/full"
check(train("fsdp", 3, "--steps", "10", "--ckpt-dir", full, "--save-full").returncode == 0, "FSDP@3 --save-full")
step_dir = f"{full}/step_00000010"
check(sorted(os.listdir(step_dir)) == ["manifest.txt", "model.bin", "optimizer.bin"], "full layout: model.bin, optimizer.bin, manifest")
check(resume_matches(full, "zero3", 2), "full checkpoint resumes into ZeRO-3@2 with matching losses")
full_zero = f"{tmp}/full_zero2"
check(train("zero2", 3, "--steps", "10", "--ckpt-dir", full_zero, "--save-full").returncode == 0, "ZeRO-2@3 --save-full")
check(resume_matches(full_zero, "zero1", 2), "ZeRO-2's full checkpoint resumes into ZeRO-1@2 with matching losses")
r = run_captured([f"{BUILD}/train_single", *COMMON[4:], "--model", f"{step_dir}/model.bin", "--steps", "1"])
check(r.returncode == 0, "the full checkpoint's model.bin is an llm.c checkpoint (train_single --model reads it)")
# the full files' headers are checked against the manifest on resume: the rows are read by offset, but llm.c
# reads the header (a copy with one header field changed, the file's size and rows' checksums unchanged)
for name, field, value in (("model.bin", 3, 1000), ("optimizer.bin", 2, 12345)):
    forged = f"{tmp}/forged_{name}"
    shutil.copytree(step_dir, forged)
    with open(f"{forged}/{name}", "r+b") as f:
        f.seek(4 * field)
        f.write(struct.pack("<i", value))
    fails_with(train("fsdp", 2, "--steps", "11", "--resume", forged), f"{forged}/{name}: its header is not the one",
               f"a full checkpoint whose {name} header was changed")

# ---- hybrid sharding: the first group writes the slices, every group reads them ----
hybrid = f"{tmp}/hybrid"
ok = train("fsdp", 4, "--steps", "10", "--shard-group", "2", "--ckpt-dir", hybrid).returncode == 0
check(ok and resume_matches(hybrid, "zero3", 3), "FSDP@4 in groups of 2 -> ZeRO-3@3: losses match")
written = sorted(os.path.basename(p) for p in glob.glob(f"{hybrid}/step_*/rank_*.bin"))
check(written == ["rank_00000.bin", "rank_00001.bin"] * (len(written) // 2) and written,
      f"FSDP@4 in groups of 2: the first group's ranks write the shards, the second's none: {sorted(set(written))}")
hybrid_full = f"{tmp}/hybrid_full"  # gathered by a sum: a second group writing too would double every value
ok = train("fsdp", 4, "--steps", "10", "--shard-group", "2", "--ckpt-dir", hybrid_full, "--save-full").returncode == 0
check(ok and resume_matches(hybrid_full, "zero2", 2), "FSDP@4 in groups of 2, --save-full -> ZeRO-2@2: losses match")
hybrid_log = f"{tmp}/hybrid_resumed.jsonl"
r = train("fsdp", 4, "--steps", "20", "--shard-group", "2", "--resume", f"{tmp}/ck_single1", "--log", hybrid_log)
got = losses(hybrid_log) if r.returncode == 0 else {}
check(sorted(got) == list(range(11, 21)) and all(abs(got[s] - ref[s]) <= 1e-5 * abs(ref[s]) for s in got),
      "single -> FSDP@4 in groups of 2: losses match")

# ---- --ema: checkpoints carry the EMA weights, resume them bit for bit, reshard them any -> any ----
def params(path):
    a = array.array("f")
    a.frombytes(open(path, "rb").read()[1024:])
    return a

EMA = ["--ema", "0.9"]
ema_ref, weights_ref = f"{tmp}/ema_ref.bin", f"{tmp}/ema_ref_weights.bin"
check(train("single", 1, "--steps", "20", *EMA, "--out-model-ema", ema_ref, "--out-model", weights_ref).returncode == 0,
      "EMA reference run")
for strategy, n in (("single", 1), ("ddp", 2), ("zero1", 3), ("zero2", 2), ("zero3", 3), ("fsdp", 4)):
    tag = f"ema_{strategy}{n}"
    whole, part, ck = f"{tmp}/{tag}_whole.bin", f"{tmp}/{tag}_part.bin", f"{tmp}/ck_{tag}"
    ok = train(strategy, n, "--steps", "20", *EMA, "--out-model-ema", whole).returncode == 0
    ok &= train(strategy, n, "--steps", "10", *EMA, "--ckpt-dir", ck).returncode == 0
    ok &= train(strategy, n, "--steps", "20", *EMA, "--resume", ck, "--out-model-ema", part).returncode == 0
    check(ok and open(whole, "rb").read() == open(part, "rb").read(),
          f"{strategy} N={n} --ema: the EMA of 10 + resumed 10 steps is that of 20 steps, bit for bit")
def ema_matches(src, strategy, n, *flags):
    """Resumed in another strategy at another N, the EMA is the uninterrupted run's as nearly as the weights
    are (another strategy sums in another order: a few 1e-5 after 20 steps of d2)."""
    out, weights = f"{tmp}/ema_reshard.bin", f"{tmp}/ema_reshard_weights.bin"
    r = train(strategy, n, "--steps", "20", *EMA, "--resume", src, "--out-model-ema", out, "--out-model", weights, *flags)
    if r.returncode != 0:
        return False
    ema_diff = max(abs(a - b) for a, b in zip(params(out), params(ema_ref)))
    weights_diff = max(abs(a - b) for a, b in zip(params(weights), params(weights_ref)))
    print(f"{src} -> {strategy}@{n}: EMA {ema_diff:.1e}, weights {weights_diff:.1e}")
    return ema_diff <= max(weights_diff, 1e-6)
check(ema_matches(f"{tmp}/ck_ema_fsdp4", "zero1", 3) and ema_matches(f"{tmp}/ck_ema_zero13", "zero3", 2)
      and ema_matches(f"{tmp}/ck_ema_zero22", "ddp", 3) and ema_matches(f"{tmp}/ck_ema_ddp2", "fsdp", 3, "--shard-group", "1"),
      "--ema resharded FSDP@4 -> ZeRO-1@3, ZeRO-1@3 -> ZeRO-3@2, ZeRO-2@2 -> DDP@3, DDP@2 -> hybrid FSDP@3: the "
      "uninterrupted EMA, as nearly as the weights")
ema_full = f"{tmp}/ema_full"
ok = train("zero2", 3, "--steps", "10", *EMA, "--ckpt-dir", ema_full, "--save-full").returncode == 0
check(ok and sorted(os.listdir(f"{ema_full}/step_00000010")) == ["ema.bin", "manifest.txt", "model.bin", "optimizer.bin"]
      and "\nema 0.9\n" in open(f"{ema_full}/step_00000010/manifest.txt").read(),
      "--ema --save-full: ema.bin beside model.bin and optimizer.bin, and the manifest gives the decay")
check(ema_matches(ema_full, "fsdp", 2), "--ema's full checkpoint resumes into FSDP@2: the uninterrupted EMA")
r = run_captured([f"{BUILD}/train_single", *COMMON[4:], "--model", f"{ema_full}/step_00000010/ema.bin", "--steps", "1"])
check(r.returncode == 0, "ema.bin is an llm.c model file (train_single --model reads it)")
r = train("fsdp", 2, "--steps", "20", *EMA, "--resume", f"{tmp}/ck_fsdp2")
check(r.returncode != 0 and "the checkpoint has no EMA weights (it was saved without --ema)" in r.stderr,
      f"--ema resuming a checkpoint without EMA weights is refused: {r.stderr.strip()[:160]!r}")
r = train("fsdp", 2, "--steps", "20", "--ema", "0.5", "--resume", f"{tmp}/ck_ema_fsdp4")
check(r.returncode != 0 and "the checkpoint's EMA has decay 0.9, this run asks for --ema 0.5" in r.stderr,
      f"--ema with another decay than the checkpoint's is refused: {r.stderr.strip()[:160]!r}")
plain_log = f"{tmp}/ema_dropped.jsonl"
r = train("zero3", 2, "--steps", "20", "--resume", f"{tmp}/ck_ema_fsdp4", "--log", plain_log)
got = losses(plain_log) if r.returncode == 0 else {}
check(sorted(got) == list(range(11, 21)) and all(abs(got[s] - ref[s]) <= 1e-5 * abs(ref[s]) for s in got)
      and "the checkpoint's EMA weights (--ema 0.9) are left unread" in r.stderr,
      "a checkpoint with EMA weights resumes without --ema, saying they are left unread: losses match")

# ---- --dropout: the masks are a function of the seed, the step and the row: nothing to save ----
DROP = ["--dropout", "0.1"]
for strategy, n in (("zero2", 3), ("fsdp", 2)):
    check(resume_is_exact(f"drop_{strategy}{n}", strategy, n, 12, *DROP),
          f"{strategy} N={n} --dropout 0.1: 6 + resumed 6 steps equal 12 steps (bitwise)")
r = train("fsdp", 2, "--steps", "12", *DROP, "--seed", "5", "--resume", f"{tmp}/ck_drop_fsdp2")
check(r.returncode != 0 and "the checkpoint was trained with --seed 1337, this run gives 5" in r.stderr,
      f"--dropout resuming with another --seed is refused: {r.stderr.strip()[:160]!r}")

# ---- FSDP's whole small tensors (--shard-min-numel): every rank keeps them, rank 0 writes them ----
WHOLE = ["--shard-min-numel", "1000"]
check(resume_is_exact("whole", "fsdp", 3, 12, *WHOLE),
      "fsdp N=3 --shard-min-numel 1000: 6 + resumed 6 steps equal 12 steps (bitwise)")
check(resume_matches(f"{tmp}/ck_whole", "zero2", 2, 7), "fsdp N=3 with whole small tensors -> ZeRO-2@2: losses match")
whole_in = f"{tmp}/whole_resumed.jsonl"
r = train("fsdp", 4, "--steps", "20", *WHOLE, "--shard-group", "2", "--resume", f"{tmp}/ck_zero13", "--log", whole_in)
got = losses(whole_in) if r.returncode == 0 else {}
check(sorted(got) == list(range(11, 21)) and all(abs(got[s] - ref[s]) <= 1e-5 * abs(ref[s]) for s in got),
      "ZeRO-1@3 -> FSDP@4 in groups of 2 with whole small tensors: losses match")

# ---- --offload-optimizer: the state a checkpoint writes and reads is the host's ----
OFF = ["--offload-optimizer"]
for strategy, n, flags in (("single", 1, []), ("zero1", 3, []), ("fsdp", 2, []), ("zero2", 2, ["--precision", "bf16"]),
                           ("zero3", 3, ["--precision", "bf16"])):
    check(resume_is_exact(f"off_{strategy}{n}{len(flags)}", strategy, n, 12, *flags, *OFF),
          f"{strategy} N={n} {' '.join(flags)} --offload-optimizer: 6 + resumed 6 steps equal 12 steps (bitwise)")
# where the state lived does not reach the file: offloaded -> on the device and back, bit for bit
for flags in ([], ["--precision", "bf16"]):
    whole, part, ck = f"{tmp}/off_cross{len(flags)}.jsonl", f"{tmp}/off_cross_part{len(flags)}.jsonl", \
        f"{tmp}/ck_off_cross{len(flags)}"
    ok = train("zero1", 2, "--steps", "12", *flags, "--log", whole).returncode == 0
    ok &= train("zero1", 2, "--steps", "4", *flags, *OFF, "--ckpt-dir", ck, "--log", part).returncode == 0
    ok &= train("zero1", 2, "--steps", "8", *flags, "--resume", ck, "--ckpt-dir", ck, "--log", part).returncode == 0
    ok &= train("zero1", 2, "--steps", "12", *flags, *OFF, "--resume", ck, "--log", part).returncode == 0
    check(ok and losses(part) == losses(whole) and len(losses(part)) == 12,
          f"zero1 N=2 {' '.join(flags)}: 4 steps offloaded, 4 on the device, 4 offloaded equal 12 steps (bitwise)")
check(resume_matches(f"{tmp}/ck_off_zero130", "fsdp", 4, 7), "offloaded ZeRO-1@3 -> FSDP@4 on the device: losses match")
off_in = f"{tmp}/off_resumed.jsonl"
r = train("zero2", 3, "--steps", "20", *OFF, "--resume", f"{tmp}/ck_fsdp2", "--log", off_in)
got = losses(off_in) if r.returncode == 0 else {}
check(sorted(got) == list(range(11, 21)) and all(abs(got[s] - ref[s]) <= 1e-5 * abs(ref[s]) for s in got),
      "FSDP@2 -> ZeRO-2@3 offloaded: losses match")

# ---- bf16: checkpoints keep the fp32 master; a load rounds it into the working copy ----
BF16 = ["--precision", "bf16"]
for strategy, n in (("single", 1), ("ddp", 2), ("zero1", 3), ("zero2", 2), ("zero3", 3), ("fsdp", 4)):
    check(resume_is_exact(f"bf16_{strategy}{n}", strategy, n, 12, *BF16),
          f"{strategy} N={n} --precision bf16: 6 + resumed 6 steps equal 12 steps (bitwise)")
# resharding with fp32 gradients: the losses of the uninterrupted single-rank bf16 run (docs/precision.md: 1e-4)
BF16_FP32 = [*BF16, "--reduce-dtype", "fp32"]
bf_ref = f"{tmp}/bf16_ref.jsonl"
ok = train("single", 1, "--steps", "12", *BF16_FP32, "--log", bf_ref).returncode == 0
ok &= train("fsdp", 4, "--steps", "6", *BF16_FP32, "--ckpt-dir", f"{tmp}/bf16_reshard").returncode == 0
bf_log = f"{tmp}/bf16_reshard.jsonl"
ok &= train("zero2", 3, "--steps", "12", *BF16_FP32, "--resume", f"{tmp}/bf16_reshard", "--log", bf_log).returncode == 0
got, want = (losses(bf_log), losses(bf_ref)) if ok else ({}, {})
check(ok and sorted(got) == list(range(7, 13)) and all(abs(got[s] - want[s]) <= 1e-4 * want[s] for s in got),
      "bf16 FSDP@4 -> ZeRO-2@3: losses match the uninterrupted single-rank bf16 run")
# --save-full writes the master (fp32 values, most not bf16's), --out-model the working copy (all bf16 values)
bf_full, bf_out = f"{tmp}/bf16_full", f"{tmp}/bf16_out.bin"
ok = train("zero1", 2, "--steps", "4", *BF16, "--ckpt-dir", bf_full, "--save-full", "--out-model", bf_out).returncode == 0
def low_bits_set(path):
    a = array.array("I")
    a.frombytes(open(path, "rb").read()[1024:])
    return sum(1 for x in a if x & 0xFFFF)
if ok:
    saved, out = low_bits_set(f"{bf_full}/step_00000004/model.bin"), low_bits_set(bf_out)
    check(saved > 0 and out == 0, f"bf16 --save-full keeps the fp32 master ({saved} values below bf16's precision), "
                                  f"--out-model the bf16 working copy ({out})")
else:
    check(False, "bf16 ZeRO-1@2 --save-full --out-model runs")
r = train("fsdp", 3, "--steps", "8", *BF16, "--resume", bf_full, "--log", f"{tmp}/bf16_full.jsonl")
check(r.returncode == 0 and sorted(losses(f"{tmp}/bf16_full.jsonl")) == [5, 6, 7, 8],
      "the bf16 full checkpoint resumes into FSDP@3")

# the manifest records the run's precision; a resume in the other is refused both ways, nothing written
check("precision bf16\n" in open(f"{bf_full}/step_00000004/manifest.txt").read(), "a bf16 manifest says precision bf16")
r = train("fsdp", 3, "--steps", "8", "--resume", bf_full, "--ckpt-dir", bf_full)
fails_with(r, "the checkpoint was saved by a --precision bf16 run, this run asks for --precision fp32: give "
              "--precision bf16 to continue it", "a bf16 checkpoint resumed in fp32")
check(sorted(os.listdir(bf_full)) == ["latest", "step_00000004"], "the refused resume wrote nothing")
fp32_ck = f"{tmp}/ck_precision_fp32"
ok = train("single", 1, "--steps", "2", "--save-every", "2", "--ckpt-dir", fp32_ck).returncode == 0
check(ok and "precision fp32\n" in open(f"{fp32_ck}/step_00000002/manifest.txt").read(), "an fp32 manifest says so")
fails_with(train("single", 1, "--steps", "4", *BF16, "--resume", fp32_ck), "saved by a --precision fp32 run, this "
           "run asks for --precision bf16", "an fp32 checkpoint resumed in bf16")

# ---- --keep: the most recently written checkpoints stay, whatever their steps ----
keep = f"{tmp}/keep"
def names(d):
    return sorted(x for x in os.listdir(d) if x != "latest")
ok = train("single", 1, "--steps", "6", "--save-every", "2", "--keep", "3", "--ckpt-dir", keep).returncode == 0
check(ok and names(keep) == ["step_00000002", "step_00000004", "step_00000006"], f"--keep 3 keeps 3: {names(keep)}")
# a branch from step 2 saves step 3: kept, and every later save of the run it branched from too (pruning never
# removes a step past the branch's last); the resumed step_2 takes the second of --keep 2's places
before = {p: open(p, "rb").read() for p in glob.glob(f"{keep}/step_0000000[46]/*")}
ok = train("single", 1, "--steps", "3", "--resume", f"{keep}/step_00000002", "--ckpt-dir", keep, "--save-every", "1",
           "--keep", "2").returncode == 0
check(ok and names(keep) == ["step_00000002", "step_00000003", "step_00000004", "step_00000006"] and
      open(f"{keep}/latest").read() == "step_00000003\n",
      f"a branch keeps what it wrote and the later saves of the run it branched from: {names(keep)}")
check(before == {p: open(p, "rb").read() for p in before}, "the run it branched from: its later saves as they were")
# a branch that would save a step the run it branched from has saved is refused before it starts, both named
r = train("single", 1, "--steps", "4", "--resume", f"{keep}/step_00000002", "--ckpt-dir", keep, "--save-every", "1",
          "--lr", "1e-2")
fails_with(r, f"--resume {keep}/step_00000002 --ckpt-dir {keep}: this run branches from step 2, and {keep} holds "
              "later checkpoints of the run it branches from (2 of them, step_00000003 to step_00000004)",
           "a branch that would replace a later save")
check(before == {p: open(p, "rb").read() for p in before} and names(keep)[-1] == "step_00000006",
      "the refused branch changed nothing")
ok = train("single", 1, "--steps", "4", "--resume", f"{keep}/step_00000003", "--ckpt-dir", keep, "--save-every", "1",
           "--keep", "1").returncode != 0
check(ok, "a branch from step 3 would save step 4, which the first run saved: refused")
shutil.rmtree(f"{keep}/step_00000004"), shutil.rmtree(f"{keep}/step_00000006")
ok = train("single", 1, "--steps", "4", "--resume", f"{keep}/step_00000003", "--ckpt-dir", keep, "--save-every", "1",
           "--keep", "1").returncode == 0
check(ok and names(keep) == ["step_00000004"], f"--keep 1 keeps the checkpoint just written: {names(keep)}")
check(train("single", 1, "--steps", "5", "--resume", keep).returncode == 0, "and latest resumes")
# a --ckpt-dir inside another run's checkpoint would be deleted with it by that run's pruning: refused, by any path
nested = f"{keep}/step_00000004/mine"
os.symlink(f"{keep}/step_00000004", f"{tmp}/link_to_step")  # the link's own name is no checkpoint's
for spelling in (nested, f"{keep}/../{os.path.basename(keep)}/step_00000004/mine", f"{keep}/step_00000004",
                 f"{tmp}/link_to_step", f"{tmp}/link_to_step/mine"):
    fails_with(train("single", 1, "--steps", "2", "--ckpt-dir", spelling), f"--ckpt-dir {spelling}: it is",
               f"--ckpt-dir {spelling}: inside a checkpoint")
check(not os.path.exists(nested) and sorted(os.listdir(f"{keep}/step_00000004")) == ["manifest.txt", "rank_00000.bin"],
      "the refused --ckpt-dirs were not made, nothing was written into the checkpoint")

# ---- faults ----
def copy_ckpt(src, name):
    dst = f"{tmp}/{name}"
    subprocess.run(["cp", "-r", src, dst], check=True)
    return dst

base = f"{tmp}/ck_fsdp3"
bad = copy_ckpt(base, "flip")
shard = glob.glob(f"{bad}/step_*/rank_00001.bin")[0]
with open(shard, "r+b") as f:
    f.seek(1000); b = f.read(1); f.seek(1000); f.write(bytes([b[0] ^ 0x40]))
fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad), "rank_00001.bin: checksum mismatch", "a flipped byte")
bad = copy_ckpt(base, "cut")
shard = glob.glob(f"{bad}/step_*/rank_00002.bin")[0]
os.truncate(shard, 5000)
fails_with(train("ddp", 2, "--steps", "12", "--resume", bad), "rank_00002.bin: truncated", "a truncated shard")
bad = copy_ckpt(base, "gone")
os.remove(glob.glob(f"{bad}/step_*/rank_00000.bin")[0])
fails_with(train("zero3", 2, "--steps", "12", "--resume", bad), "rank_00000.bin: missing", "a deleted shard")
bad = copy_ckpt(base, "manifest")
manifest = glob.glob(f"{bad}/step_*/manifest.txt")[0]
text = open(manifest).read().replace("data_position", "data_pusition")
open(manifest, "w").write(text)
fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad), "manifest.txt: checksum mismatch", "an edited manifest")
r = run_captured(launch("single", 1) + ["--config", "d4", "--vocab", "256", "--data", DATA, "--batch", "12", "--seq", "16",
                                        "--steps", "12", "--resume", base, "--quiet"])
fails_with(r, "checkpoint is for L=2", "a checkpoint of another model")
fails_with(r, "resume it with --config d2 --vocab 256", "a checkpoint of another model: the flags that make its model")
fails_with(train("single", 1, "--steps", "12", "--resume", f"{tmp}/nothing"), "no checkpoint here", "no checkpoint")
loop = f"{tmp}/latest_loop"
os.makedirs(loop)
os.symlink("latest", f"{loop}/latest")
fails_with(train("single", 1, "--steps", "12", "--resume", loop), "latest: cannot read: Too many levels of symbolic links",
           "a latest that links to itself")
# a shard that is a directory or a FIFO is named as such, not as a truncated file (a FIFO is never waited on)
for kind in ("directory", "FIFO"):
    bad = copy_ckpt(base, f"shard_{kind}")
    shard = glob.glob(f"{bad}/step_*/rank_00001.bin")[0]
    os.remove(shard)
    os.mkdir(shard) if kind == "directory" else os.mkfifo(shard)
    fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad, timeout=120), f"rank_00001.bin: not a regular file (a {kind})",
               f"a shard that is a {kind}")

# no output may be a file of the checkpoint the run resumes from, or of --ckpt-dir's checkpoints, by its path
# or through a link: the resumed checkpoint would be cut or overwritten
full = f"{tmp}/ck_outputs_full"
check(train("fsdp", 2, "--steps", "2", "--ckpt-dir", full, "--save-every", "2", "--save-full").returncode == 0,
      "a full checkpoint to resume")
full_step = glob.glob(f"{full}/step_*")[0]
sharded = copy_ckpt(base, "outputs_sharded")
sharded_step = sorted(glob.glob(f"{sharded}/step_*"))[-1]
links = f"{tmp}/outputs_links"
os.makedirs(links)
os.symlink(f"{sharded_step}/rank_00000.bin", f"{links}/tr.tsv")
os.symlink(f"{sharded}/latest", f"{links}/latest.jsonl")
os.symlink(f"{sharded}/step_00000099", f"{links}/ahead.jsonl")  # dangling: a name the run's saves would make
os.symlink(f"{sharded_step}/stray.bin", f"{links}/into.bin")  # dangling, into the checkpoint resumed from
os.link(f"{sharded_step}/rank_00000.bin", f"{links}/trh.tsv")  # hard links: no link to refuse, the same files
os.link(f"{sharded}/latest", f"{links}/latest_hard.jsonl")
for flags, says, what in (
        (["--resume", full_step, "--out-model", f"{full_step}/model.bin"], "it is inside the checkpoint --resume",
         "--out-model over the full checkpoint resumed from"),
        (["--resume", sharded, "--out-model", f"{sharded_step}/rank_00000.bin"], "it is inside the checkpoint --resume",
         "--out-model over a shard of the checkpoint resumed from"),
        (["--resume", sharded, "--log", f"{sharded_step}/manifest.txt"], "it is inside the checkpoint --resume",
         "--log into the manifest of the checkpoint resumed from"),
        (["--resume", sharded, "--ckpt-dir", sharded, "--trace", f"{links}/tr"], "tr.tsv: a symbolic link (to ",
         "--trace through a link to a shard of --ckpt-dir"),
        (["--resume", sharded, "--ckpt-dir", sharded, "--log", f"{links}/latest.jsonl"],
         "latest.jsonl: a symbolic link (to ", "--log through a link to --ckpt-dir's latest"),
        (["--resume", sharded, "--ckpt-dir", sharded, "--trace", f"{links}/trh"], "rank_00000.bin, a file of",
         "--trace a hard link of a shard of --ckpt-dir"),
        (["--resume", sharded, "--ckpt-dir", sharded, "--log", f"{links}/latest_hard.jsonl"], "latest, a file of",
         "--log a hard link of --ckpt-dir's latest"),
        (["--resume", sharded, "--ckpt-dir", sharded, "--log", f"{links}/ahead.jsonl"],
         "ahead.jsonl: a symbolic link (to ", "--log through a dangling link to a checkpoint a save will write"),
        (["--resume", sharded, "--out-model", f"{links}/into.bin"], "into.bin: a symbolic link (to ",
         "--out-model through a dangling link into the resumed checkpoint"),
        (["--resume", sharded, "--ckpt-dir", sharded_step], f"it is {os.path.realpath(sharded_step)}, a checkpoint (it holds a manifest)",
         "a --ckpt-dir that is the checkpoint resumed from")):
    before = {p: open(p, "rb").read() for p in glob.glob(f"{full}/*/*") + glob.glob(f"{sharded}/*/*") +
              [f"{sharded}/latest"]}
    fails_with(train("fsdp", 3 if "--ckpt-dir" in flags or sharded in flags else 2, "--steps", "12", *flags), says, what)
    after = {p: open(p, "rb").read() for p in glob.glob(f"{full}/*/*") + glob.glob(f"{sharded}/*/*") +
             [f"{sharded}/latest"]}
    check(before == after, f"{what}: every checkpoint file as it was, and no other")

# every number a manifest gives is checked, naming the manifest and what is wrong
# (each edit below keeps the manifest's own CRC valid)
def rewrite_manifest(src, name, edit):
    dst = copy_ckpt(src, name)
    path = glob.glob(f"{dst}/step_*/manifest.txt")[0]
    body = open(path).read().rsplit("end ", 1)[0]
    body = edit(body)
    open(path, "w").write(body + f"end {zlib.crc32(body.encode())}\n")
    return dst

def edit_line(prefix, change):
    """An edit of the first line that starts with `prefix`: change(fields) -> fields."""
    def edit(body):
        lines = body.split("\n")
        i = next(k for k, line in enumerate(lines) if line.startswith(prefix))
        lines[i] = " ".join(change(lines[i].split(" ")))
        return "\n".join(lines)
    return edit

def set_field(k, value):
    return lambda fields: fields[:k] + [str(value)] + fields[k + 1:]

# a checkpoint at the last step a run reaches: no --steps could continue it, and none is asked for
bad = rewrite_manifest(base, "step_cap", edit_line("step ", set_field(1, 2**30)))
fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad), f"the checkpoint is at step {2**30}, the last a run reaches",
           "a checkpoint at the last step")
# the loader's position near 2^64: read past the shard (heap overflow) before it was checked
bad = rewrite_manifest(base, "position", edit_line("data_position", set_field(1, 2**64 - 5)))
fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad), f"manifest.txt: data_position {2**64 - 5} is past the end",
           "a data_position past the shard")
bad = rewrite_manifest(base, "tensor", edit_line("piece ", set_field(1, 9999)))
fails_with(train("fsdp", 2, "--steps", "12", "--resume", bad), "piece 0 names tensor 9999; the model has",
           "a piece of a tensor the model lacks")
bad = rewrite_manifest(base, "rows", edit_line("piece ", set_field(3, 100000)))
fails_with(train("zero3", 3, "--steps", "12", "--resume", bad), "piece 0: rows 0..99999 of wte, which has rows 0..",
           "a piece past its tensor's last row")
bad = rewrite_manifest(base, "offset", edit_line("piece ", set_field(5, 2**63)))
fails_with(train("single", 1, "--steps", "12", "--resume", bad), "lie past the end of rank_00000.bin",
           "a piece's bytes past the end of its file")
bad = rewrite_manifest(base, "adam", edit_line("piece ", lambda f: f[:-1] + ["99"]))
fails_with(train("single", 1, "--steps", "12", "--resume", bad), "piece 0: AdamW step 99 of wte is past the checkpoint's step 10",
           "an AdamW step past the checkpoint's")
# a piece's part pointed at another part's bytes (its CRC copied with it): the weights would load as the moments
bad = rewrite_manifest(base, "shared", edit_line("piece ", lambda f: f[:7] + f[4:7] + f[10:]))
fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad), "piece 0's parameters and piece 0's AdamW m share bytes",
           "two parts of a piece on the same bytes")
# a field's error names the field and its form
bad = rewrite_manifest(base, "ema_tiny", lambda body: body.replace("\npieces ", "\nema 1e-50\npieces ", 1))
fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad), "malformed 'ema' line: 'ema DECAY', once and before the "
           "pieces, DECAY in (0, 1) as a float", "an EMA decay that is 0 as a float")
for name, fields in (("config_zeros", "config 0 0 0 0 0 0"), ("config_heads", "config 64 256 2 0 128 256"),
                     ("config_vocab", "config 64 16777216 2 2 128 16777216")):
    bad = rewrite_manifest(base, name, edit_line("config ", lambda f, fields=fields: fields.split(" ")))
    fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad), "malformed 'config' line: 'config MAX_SEQ_LEN VOCAB",
               f"a manifest's {fields!r}: a model init_model would not make")
bad = rewrite_manifest(base, "world", edit_line("world_size", set_field(1, 0)))
fails_with(train("fsdp", 3, "--steps", "12", "--resume", bad), "malformed 'world_size' line: 'world_size N'",
           "a world_size of 0")
bad = rewrite_manifest(ema_full, "no_ema_line", lambda body: body.replace("\nema 0.9\n", "\n", 1))
fails_with(train("fsdp", 2, "--steps", "12", "--resume", bad, *EMA), "with an EMA a fourth, and an 'ema' line before the "
           "pieces", "an EMA checkpoint whose 'ema' line is gone")
# one piece listed twice in place of another: the row count adds up, the rows do not
def repeat_a_piece(body):
    lines = body.split("\n")
    pieces = [k for k, line in enumerate(lines) if line.startswith("piece ")]
    lines[pieces[1]] = lines[pieces[0]]
    return "\n".join(lines)
bad = rewrite_manifest(base, "repeat", repeat_a_piece)
r = train("fsdp", 3, "--steps", "12", "--resume", bad)
check(r.returncode != 0 and "are in more than one piece" in r.stderr and r.stderr.count("shardlab:") == 1,
      f"a repeated piece hiding a missing one, said once: {r.stderr.strip()[:200]!r}")

# a `latest` that is a FIFO is refused, not waited on
bad = copy_ckpt(base, "fifo")
os.remove(f"{bad}/latest")
os.mkfifo(f"{bad}/latest")
try:
    r = train("fsdp", 2, "--steps", "12", "--resume", bad, timeout=60)
    fails_with(r, "latest: not a regular file (a FIFO)", "a FIFO as latest")
except subprocess.TimeoutExpired:
    check(False, "a FIFO as latest: the resume hung")

# another run's --ckpt-dir is refused when resuming from elsewhere, and left as it was
theirs, mine = f"{tmp}/theirs", f"{tmp}/mine"
ok = train("single", 1, "--steps", "6", "--save-every", "1", "--keep", "3", "--ckpt-dir", theirs).returncode == 0
ok &= train("single", 1, "--steps", "3", "--ckpt-dir", mine).returncode == 0
before = {f: open(f, "rb").read() for f in glob.glob(f"{theirs}/**/*", recursive=True) if os.path.isfile(f)}
r = train("single", 1, "--steps", "8", "--resume", mine, "--ckpt-dir", theirs, "--save-every", "1")
fails_with(r, f"--ckpt-dir {theirs} already holds another run's checkpoints", "resuming one run into another's --ckpt-dir")
after = {f: open(f, "rb").read() for f in glob.glob(f"{theirs}/**/*", recursive=True) if os.path.isfile(f)}
check(ok and before == after and open(f"{theirs}/latest").read() == "step_00000006\n",
      "the other run's checkpoints are untouched, latest included")

# one run at a time in a --ckpt-dir: a second, even one resuming it, is refused while
# the first runs; the lock goes with the first run however it ends
locked = f"{tmp}/locked"
def start_long_run(strategy, n):
    p = subprocess.Popen(launch(strategy, n) + COMMON + ["--steps", "100000", "--save-every", "1", "--ckpt-dir", locked],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(f"{locked}/latest"):
        time.sleep(0.05)
    return p
p = start_long_run("ddp", 2)
r = train("single", 1, "--steps", "100000", "--resume", locked, "--ckpt-dir", locked)
lock_pid = [x for x in subprocess.run(["pgrep", "-f", f"train_ddp.*{locked}"], capture_output=True, text=True).stdout.split()
            if int(x) != p.pid]
fails_with(r, f"--ckpt-dir {locked} is in use by another run, pid ", "a second run in a --ckpt-dir in use")
check(any(f"pid {x}\n" in r.stderr for x in lock_pid), f"the refusal names the running rank's pid {lock_pid}")
r2 = train("ddp", 2, "--steps", "100000", "--ckpt-dir", locked)
check(r2.returncode != 0 and r2.stderr.count("shardlab:") == 1 and "is in use by another run" in r2.stderr,
      f"a fresh run into it is refused, said once by its two ranks: {r2.stderr.strip()[:200]!r}")
# the lock comes first: a second run's ranks never read the checkpoints the first is saving (they could find
# different ones and disagree), however the saves fall
for attempt in range(4):
    r3 = train("fsdp", 2, "--steps", "100000", "--resume", locked, "--ckpt-dir", locked)
    check(r3.returncode != 0 and "is in use by another run" in r3.stderr and "disagree" not in r3.stderr,
          f"a second resumed run while the first saves, try {attempt + 1}: {r3.stderr.strip()[:200]!r}")
for x in lock_pid:
    os.kill(int(x), signal.SIGKILL)  # no clean exit: the kernel drops the lock
p.wait(timeout=60)
step = int(open(f"{locked}/latest").read().strip().split("_")[1])
check(train("single", 1, "--steps", str(step + 1), "--resume", locked, "--ckpt-dir", locked).returncode == 0,
      "after the run holding it was killed, the --ckpt-dir resumes into itself")

# a NaN loss stops training and keeps the last good checkpoint
nan = f"{tmp}/nan"
r = train("ddp", 2, "--steps", "10", "--save-every", "3", "--ckpt-dir", nan, "--test-nan-at", "5")
fails_with(r, f"step 5: loss is nan; stopping without saving (the last good checkpoint is {nan}/step_00000003)\n",
           "a NaN loss")
check(r.stderr.count("shardlab:") == 1, f"the NaN is reported once, not by each rank: {r.stderr.strip()[:300]!r}")
r = train("ddp", 2, "--steps", "10", "--save-every", "3", "--ckpt-dir", f"{tmp}/nan_first", "--test-nan-at", "1")
fails_with(r, "step 1: loss is nan; stopping without saving (no checkpoint was saved before it)\n",
           "a NaN loss before any save")
check(open(f"{nan}/latest").read().strip() == "step_00000003", "after a NaN, latest is still step 3")
check(train("ddp", 2, "--steps", "6", "--resume", nan).returncode == 0, "the checkpoint before the NaN resumes")

# SIGKILL of one rank while a save is in progress: the previous checkpoint survives
killed = f"{tmp}/killed"
p = subprocess.Popen(launch("fsdp", 3) + COMMON + ["--steps", "10", "--save-every", "4", "--ckpt-dir", killed],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, SHARDLAB_TEST_SAVE_PAUSE_S="2"))
deadline = time.time() + 120
while time.time() < deadline and not os.path.isdir(f"{killed}/step_00000008.tmp"):
    time.sleep(0.05)
time.sleep(0.3)  # every rank is now inside the save, before writing its shard
pids = subprocess.run(["pgrep", "-f", f"train_fsdp.*{killed}"], capture_output=True, text=True).stdout.split()
pids = [x for x in pids if int(x) != p.pid]
if pids:
    os.kill(int(pids[-1]), signal.SIGKILL)
try:
    p.wait(timeout=60)
    ended = True
except subprocess.TimeoutExpired:
    p.kill()
    ended = False
check(ended and p.returncode != 0, "killing a rank mid-save ends the whole job, with an error")
check(open(f"{killed}/latest").read().strip() == "step_00000004", "after the kill, latest is still step 4")
log = f"{tmp}/after_kill.jsonl"
r = train("fsdp", 3, "--steps", "10", "--resume", killed, "--log", log)
check(r.returncode == 0 and losses(log) == {s: v for s, v in losses(f"{tmp}/fsdp3_whole.jsonl").items() if 5 <= s <= 10},
      "the previous checkpoint resumes exactly after the kill")

# SIGTERM to one rank: every rank finishes the step, saves and exits cleanly
term = f"{tmp}/term"
p = subprocess.Popen(launch("zero3", 2) + COMMON + ["--steps", "100000", "--ckpt-dir", term, "--log", f"{tmp}/term.jsonl"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
while time.time() < deadline and (not os.path.exists(f"{tmp}/term.jsonl") or '"step"' not in open(f"{tmp}/term.jsonl").read()):
    time.sleep(0.05)
pids = [x for x in subprocess.run(["pgrep", "-f", f"train_zero3.*{term}"], capture_output=True, text=True).stdout.split()
        if int(x) != p.pid]
# No thread takes a stop signal while it runs: a handler's frame on a thread inside
# oneDNN's JIT gemm (its stack pointer on the heap) corrupts the heap. One thread of
# each rank waits for them (sigwaitinfo, which lifts them from its mask while it
# waits: run/stop_signals.c), named so; every other thread blocks them.
stop_mask = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGUSR1 - 1))
unblocked, waiters = [], {}
for pid in pids:
    for task in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            blocked = int(next(line for line in open(task) if line.startswith("SigBlk:")).split()[1], 16)
            name = open(task.replace("/status", "/comm")).read().strip()
        except (OSError, StopIteration):
            continue  # a thread that ended meanwhile
        if name == "stop-signals":
            waiters[pid] = waiters.get(pid, 0) + 1
        elif blocked & stop_mask != stop_mask:
            unblocked.append(task)
check(pids and not unblocked and all(waiters.get(pid) == 1 for pid in pids),
      f"every thread of every rank blocks SIGINT, SIGTERM and SIGUSR1 but its one waiting thread ({unblocked}, {waiters})")
if pids:
    os.kill(int(pids[-1]), signal.SIGTERM)
try:
    out, err = p.communicate(timeout=60)
except subprocess.TimeoutExpired:
    p.kill()
    out, err = "", "hung"
check(p.returncode == 0 and "stopped by a signal" in out, f"SIGTERM: clean stop ({p.returncode}, {err.strip()[:200]!r})")
term_log = [json.loads(line) for line in open(f"{tmp}/term.jsonl")]
term_summary = term_log[-1]
check(term_summary.get("stopped_by_signal") is True and term_summary["last_step"] == term_log[-2]["step"] and
      os.path.exists(f"{term}/step_{term_summary['last_step']:08d}/manifest.txt"),
      "a stopped run's summary says so, and its last step is logged and saved")
check(re.search(r"shardlab: (rank \d: )?SIGTERM taken: stopping after this step, then saving", err) is not None,
      f"the rank the signal went to says it took it ({err[-300:]!r})")
saved_step = int(open(f"{term}/latest").read().strip().split("_")[1]) if os.path.exists(f"{term}/latest") else -1
check(saved_step > 0 and train("zero3", 2, "--steps", str(saved_step + 1), "--resume", term).returncode == 0,
      "SIGTERM's checkpoint is complete")


# A signal is said at once, and a second one too (a step, or a large model's setup, may take minutes): one
# process, SIGINT and SIGTERM once it has said what it trains; it stops after the step in progress, saved
sig = f"{tmp}/sig_twice"
p = subprocess.Popen([f"{BUILD}/train_single"] + [a for a in COMMON if a != "--quiet"] +
                     ["--steps", "100000", "--ckpt-dir", sig], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
first = p.stdout.readline()  # the setup's line, flushed before the first step
p.send_signal(signal.SIGINT)  # two kinds: two of one kind may arrive as one (a pending signal is not queued)
p.send_signal(signal.SIGTERM)
try:
    out, err = p.communicate(timeout=120)
except subprocess.TimeoutExpired:
    p.kill()
    out, err = "", "hung"
stopped = re.search(r"stopped by a signal after step (\d+) of", out)
check(p.returncode == 0 and re.search(r"shardlab: SIG(INT|TERM) taken: stopping after this step", err)
      and re.search(r"shardlab: SIG(INT|TERM): already stopping after this step", err) and stopped is not None
      and os.path.exists(f"{sig}/step_{int(stopped[1]):08d}/manifest.txt"),
      f"SIGINT and SIGTERM: both said at once, the run stopped and saved ({p.returncode}, {first!r}, {err[-300:]!r})")

# A save that runs out of space fails naming the file, and the previous checkpoint
# stays complete and resumable: a 16 MB tmpfs, in a mount namespace of the test's
# own, holds two checkpoints of this model (6.7 MB each) but not a third.
script = f"""
D=$1
mount -t tmpfs -o size=16m tmpfs "$D" || exit 90
train() {{ "{BUILD}/train_single" {" ".join(COMMON)} "$@"; }}
train --steps 2 --ckpt-dir "$D/ck" --save-every 1 || exit 91
train --steps 4 --resume "$D/ck" --ckpt-dir "$D/ck" --save-every 1 && exit 92
echo "latest: $(cat "$D/ck/latest")"
train --steps 3 --resume "$D/ck" > /dev/null || exit 93
echo resumed
dd if=/dev/zero of="$D/fill" bs=1M count=64 2>/dev/null
train --steps 1 --out-model "$D/out.bin" && exit 94
[ -e "$D/out.bin.tmp" ] || [ -e "$D/out.bin" ] || echo "out-model: nothing left"
train --steps 1 --trace "$D/tr" && exit 95
echo traced
"""
small_disk = f"{tmp}/small_disk"
os.makedirs(small_disk)
r = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", small_disk], capture_output=True, text=True,
                   timeout=300)
check(r.returncode == 0 and "ck/step_00000003.tmp/rank_00000.bin: write failed: No space left on device" in r.stderr,
      f"a save that runs out of space fails naming the file ({r.returncode}: {r.stderr.strip()[-200:]!r})")
check("latest: step_00000002" in r.stdout and "resumed" in r.stdout,
      "after the failed save, latest is still step 2 and resumes")
check("out-model: nothing left" in r.stdout and "out.bin.tmp: write failed: No space left on device" in r.stderr,
      f"--out-model on a full disk fails naming PATH.tmp, and leaves neither it nor PATH ({r.stderr.strip()[-300:]!r})")
check("traced" in r.stdout and "--trace " in r.stderr and "/tr.tsv: cannot write: No space left on device" in r.stderr,
      f"--trace on a full disk fails naming the file it could not write ({r.stderr.strip()[-300:]!r})")

# A signal to mpirun itself: Open MPI's mpirun forwards SIGUSR1 to the ranks at
# once and waits for them. SIGTERM it takes as an abort: after
# odls_base_sigkill_timeout seconds it sends the ranks SIGTERM, as long again
# later SIGKILL, and the job's status is non-zero.
def signal_mpirun(sig, name, mpirun_options=()):
    ckpt, log = f"{tmp}/{name}", f"{tmp}/{name}.jsonl"
    p = subprocess.Popen([*MPIRUN, *mpirun_options, "-np", "2", f"{BUILD}/train_fsdp", *COMMON, "--steps", "100000",
                          "--ckpt-dir", ckpt, "--log", log], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not os.path.exists(log) or '"step"' not in open(log).read()):
        time.sleep(0.05)
    p.send_signal(sig)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = "", "hung"
    resumed = False
    if os.path.exists(f"{ckpt}/latest"):
        saved_step = int(open(f"{ckpt}/latest").read().strip()[len("step_"):])
        resumed = train("fsdp", 2, "--steps", str(saved_step + 1), "--resume", ckpt).returncode == 0
    return p.returncode, out, err, resumed


status, out, err, resumed = signal_mpirun(signal.SIGUSR1, "usr1")
check(status == 0 and "stopped by a signal" in out and resumed,
      f"SIGUSR1 to mpirun: the ranks save and the job exits 0 ({status}, {err.strip()[-200:]!r})")
status, out, err, resumed = signal_mpirun(signal.SIGTERM, "term_mpirun", ["--mca", "odls_base_sigkill_timeout", "5"])
check(status != 0 and "stopped by a signal" in out and resumed,
      f"SIGTERM to mpirun: the ranks save, the job exits non-zero ({status}, {err.strip()[-200:]!r})")

CHECKS.finish()
