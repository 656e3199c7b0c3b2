#!/usr/bin/env python3
"""Ranks that disagree: two ranks started with different values of one flag (every
flag that --help lists), or with the same paths naming different files, must stop
at once with one line naming what differs and each rank's value, never hang or
train. Usage: test_agree.py BUILD_DIR "MPIRUN ..." """
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

from testlib import Checks

BUILD, MPIRUN = os.path.abspath(sys.argv[1]), shlex.split(sys.argv[2])
TRAINER = f"{BUILD}/train_fsdp"  # every shared flag and FSDP's; the ddp trainer's --zero-stage has its own case
tmp = tempfile.mkdtemp(prefix="shardlab_agree_")
CHECKS = Checks("agree")
check = CHECKS.check


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def make_model(path, seed):
    sh(f"{BUILD}/init_model", "--layers", "2", "--heads", "2", "--channels", "32", "--vocab", "256",
       "--max-seq", "64", "--seed", str(seed), "--out", path)


def make_data(path, text):
    with open(f"{tmp}/text.txt", "w") as f:
        f.write(text * 200)
    sh(f"{BUILD}/prepare", "--text", f"{tmp}/text.txt", "--tokenizer", "byte", "--out", path)


make_model(f"{tmp}/a.bin", 1)
make_model(f"{tmp}/b.bin", 2)
make_data(f"{tmp}/data_a", "the ranks of a job train one model. ")
make_data(f"{tmp}/data_b", "every rank reads its rows of a batch. ")
for name in ("ck_a", "ck_b"):  # two checkpoints of different steps
    steps = "1" if name == "ck_a" else "2"
    sh(f"{BUILD}/train_single", "--model", f"{tmp}/a.bin", "--data", f"{tmp}/data_a", "--batch", "4", "--seq", "16",
       "--steps", steps, "--ckpt-dir", f"{tmp}/{name}", "--quiet")

BASE = {"--model": f"{tmp}/a.bin", "--data": f"{tmp}/data_a", "--batch": "4", "--seq": "16", "--steps": "2"}
PRESET = {"--model": None, "--config": "d2", "--vocab": "256"}
CKPT = {"--ckpt-dir": f"{tmp}/ck_new"}
# shards without build/prepare's record of their tokenizer: any --vocab that holds their ids trains
os.makedirs(f"{tmp}/data_bare")
shutil.copy(f"{tmp}/data_a/train.bin", f"{tmp}/data_bare/train.bin")
BARE = {**PRESET, "--data": f"{tmp}/data_bare"}
# flag: (rank 0's changes to BASE, rank 1's); None removes a flag, True gives a switch
CASES = {
    "--config": (PRESET, {**PRESET, "--config": "d4"}),
    "--model": ({}, {"--model": f"{tmp}/b.bin"}),
    "--vocab": (BARE, {**BARE, "--vocab": "300"}),
    "--data": ({}, {"--data": f"{tmp}/data_b"}),
    "--batch": ({}, {"--batch": "8"}),
    "--seq": ({}, {"--seq": "32"}),
    "--steps": ({}, {"--steps": "3"}),
    "--lr": ({}, {"--lr": "0.001"}),
    "--weight-decay": ({}, {"--weight-decay": "0.1"}),
    "--seed": ({}, {"--seed": "7"}),
    "--log": ({"--log": f"{tmp}/a.jsonl"}, {"--log": f"{tmp}/b.jsonl"}),
    "--eval-every": ({}, {"--eval-every": "1"}),
    "--eval-batches": ({"--eval-every": "1"}, {"--eval-every": "1", "--eval-batches": "2"}),
    "--out-model": ({"--out-model": f"{tmp}/out_a.bin"}, {"--out-model": f"{tmp}/out_b.bin"}),
    "--trace": ({"--trace": f"{tmp}/trace_a"}, {"--trace": f"{tmp}/trace_b"}),
    "--timeline-step": ({"--trace": f"{tmp}/trace_tl"}, {"--trace": f"{tmp}/trace_tl", "--timeline-step": "1"}),
    "--reshard-after-forward": ({}, {"--reshard-after-forward": "0"}),
    "--prefetch": ({}, {"--prefetch": "2"}),
    "--shard-group": ({}, {"--shard-group": "1"}),
    "--quiet": ({}, {"--quiet": True}),
    "--save-every": (CKPT, {**CKPT, "--save-every": "1"}),
    "--ckpt-dir": (CKPT, {"--ckpt-dir": f"{tmp}/ck_other"}),
    "--save-full": (CKPT, {**CKPT, "--save-full": True}),
    "--keep": (CKPT, {**CKPT, "--keep": "3"}),
    "--resume": ({"--resume": f"{tmp}/ck_a"}, {"--resume": f"{tmp}/ck_b"}),
    "--test-nan-at": ({}, {"--test-nan-at": "1"}),
    "--grad-clip": ({}, {"--grad-clip": "1.0"}),
    "--lr-schedule": ({}, {"--lr-schedule": "cosine"}),
    "--warmup": ({}, {"--warmup": "1"}),
    "--min-lr": ({"--lr-schedule": "cosine"}, {"--lr-schedule": "cosine", "--min-lr": "1e-5"}),
    "--recompute": ({}, {"--recompute": True}),
    "--fused-classifier": ({}, {"--fused-classifier": True}),
    "--data-order": ({}, {"--data-order": "llmc"}),
    "--grad-accum": ({}, {"--grad-accum": "2"}),
    "--accum-mode": ({"--grad-accum": "2"}, {"--grad-accum": "2", "--accum-mode": "no-sync"}),
    "--precision": ({"--reduce-dtype": "fp32"}, {"--precision": "bf16", "--reduce-dtype": "fp32"}),
    "--reduce-dtype": ({"--precision": "bf16"}, {"--precision": "bf16", "--reduce-dtype": "fp32"}),
    "--dropout": ({}, {"--dropout": "0.1"}),
    "--ema": ({}, {"--ema": "0.9"}),
    "--eval-ema": ({"--ema": "0.9", "--eval-every": "1"}, {"--ema": "0.9", "--eval-every": "1", "--eval-ema": True}),
    "--out-model-ema": ({"--ema": "0.9", "--out-model-ema": f"{tmp}/ema_a.bin"},
                        {"--ema": "0.9", "--out-model-ema": f"{tmp}/ema_b.bin"}),
    "--offload-optimizer": ({}, {"--offload-optimizer": True}),
    "--shard-min-numel": ({}, {"--shard-min-numel": "1000"}),
    "--quantize-weights": ({}, {"--quantize-weights": "int8"}),
    "--quantize-grads": ({"--quantize-grads": "int8"}, {"--quantize-grads": "int4"}),
    "--quantize-block": ({"--quantize-weights": "int8"}, {"--quantize-weights": "int8", "--quantize-block": "64"}),
    "--secondary-shard-group": ({}, {"--secondary-shard-group": "1"}),
    "--quantize-grads-node": ({"--quantize-grads": "int8"}, {"--quantize-grads": "int8", "--quantize-grads-node": "2"}),
    "--unit-blocks": ({}, {"--unit-blocks": "2"}),
    "--wrap-min-params": ({}, {"--wrap-min-params": "1000"}),
}


def args(changes):
    merged = {**BASE, **changes}
    out = []
    for flag, value in merged.items():
        if value is True:
            out.append(flag)
        elif value is not None:
            out += [flag, value]
    return out


def job(*contexts):
    """mpirun with one app context per (ranks, workdir, args)."""
    cmd = list(MPIRUN)
    for k, (ranks, wdir, a) in enumerate(contexts):
        cmd += ([":"] if k else []) + ["-np", str(ranks), "-wdir", wdir, TRAINER, *a]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None


def stops_with(r, pattern, what):
    if r is None:
        check(False, f"{what}: hung")
        return
    lines = [line for line in r.stderr.splitlines() if "ranks disagree" in line]
    ok = r.returncode != 0 and len(lines) == 1 and re.search(pattern, lines[0])
    check(ok, f"{what}: {lines[0] if lines else r.stderr.strip()[-300:]!r}")


# every flag of --help has a case, so a new option cannot go unchecked
usage = subprocess.run([TRAINER, "--help"], capture_output=True, text=True)
# (--serve DIR, alone, starts a job that takes runs: not a run's flag, nothing for ranks to disagree on)
flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", usage.stdout + usage.stderr)) - {"--help", "--serve"}
check(len(flags) >= 20, f"--help lists the flags ({len(flags)} found)")
usage = subprocess.run([f"{BUILD}/train_ddp", "--help"], capture_output=True, text=True)
ddp_flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", usage.stdout + usage.stderr)) - {"--help", "--serve"}
check(ddp_flags - flags == {"--zero-stage"}, f"train_ddp's own flags: {sorted(ddp_flags - flags)}")
for flag in sorted(flags - CASES.keys()):
    check(False, f"{flag}: no disagreement case here (add one, and compare it in run/agree.c)")

for flag, (mine, theirs) in CASES.items():
    r = job((1, tmp, args(mine)), (1, tmp, args(theirs)))
    stops_with(r, f"ranks disagree on {flag}: rank 0 has .+, rank 1 has ", f"{flag} differs")
    # nothing was trained or written
    check(not os.path.exists(f"{tmp}/ck_new") and not os.path.exists(f"{tmp}/out_a.bin"),
          f"{flag} differs: no checkpoint or model written")

# the exact values, and a rank other than 1
r = job((3, tmp, args({})), (1, tmp, args({"--steps": "6"})))
stops_with(r, r"^shardlab: ranks disagree on --steps: rank 0 has 2, rank 3 has 6$", "one rank of four differs")
r = job((1, tmp, args({})), (3, tmp, args({"--lr": "0.5"})))
stops_with(r, r"--lr: rank 0 has \(not given\), rank 1 has 0.5, rank 2 has 0.5, rank 3 has 0.5$", "three ranks of four differ")
# a flag one rank leaves out is named so, whatever its default's number
r = job((1, tmp, args({"--quantize-weights": "int8", "--quantize-block": "256"})),
        (1, tmp, args({"--quantize-weights": "int8"})))
stops_with(r, r"ranks disagree on --quantize-block: rank 0 has 256, rank 1 has \(not given\)$", "a flag left out")
r = subprocess.run([*MPIRUN, "-np", "1", TRAINER, *args({})] + [":", "-np", "1", f"{BUILD}/train_zero3", *args({})],
                   capture_output=True, text=True, timeout=60)
stops_with(r, "ranks disagree on the trainer: rank 0 has 'fsdp', rank 1 has 'zero3'", "two trainers")
# ranks whose products run on different engines would round differently: named, as a flag is
r = subprocess.run([*MPIRUN, "-np", "1", "env", "SHARDLAB_PRODUCTS=onednn", TRAINER, *args({})] +
                   [":", "-np", "1", "env", "SHARDLAB_PRODUCTS=openblas", TRAINER, *args({})],
                   capture_output=True, text=True, timeout=60)
stops_with(r, "ranks disagree on the products' engine: rank 0 has 'oneDNN .*', rank 1 has 'OpenBLAS .*'",
           "two products' engines")
ddp = [f"{BUILD}/train_ddp", *args({})]
r = subprocess.run([*MPIRUN, "-np", "1", *ddp, "--zero-stage", "1", ":", "-np", "1", *ddp, "--zero-stage", "2"],
                   capture_output=True, text=True, timeout=60)
stops_with(r, r"ranks disagree on --zero-stage: rank 0 has 1, rank 1 has 2", "--zero-stage differs")

# values that %g prints alike show their difference; a flag left to its default
# agrees with the same value given
r = job((1, tmp, args({"--grad-clip": "1"})), (1, tmp, args({"--grad-clip": "1.0000001"})))
stops_with(r, r"--grad-clip: rank 0 has 1, rank 1 has 1.0000001$", "--grad-clip values that differ past %g's digits")
r = job((1, tmp, args({})), (1, tmp, args({"--reduce-dtype": "fp32"})))
check(r is not None and r.returncode == 0,
      "--reduce-dtype fp32 on one rank, left to its default (fp32) on the other: the ranks agree and train")

# the same paths, other files: each rank runs in its own directory
for name in ("wd_a", "wd_b"):
    os.makedirs(f"{tmp}/{name}")
    shutil.copytree(f"{tmp}/data_a", f"{tmp}/{name}/data")
    shutil.copy(f"{tmp}/a.bin", f"{tmp}/{name}/model.bin")
    shutil.copytree(f"{tmp}/ck_a", f"{tmp}/{name}/ck")
relative = {"--model": "model.bin", "--data": "data"}
r = job((1, f"{tmp}/wd_a", args(relative)), (1, f"{tmp}/wd_b", args(relative)))
check(r is not None and r.returncode == 0, "the same files under the same relative paths: the ranks agree and train")
shutil.copy(f"{tmp}/b.bin", f"{tmp}/wd_b/model.bin")
r = job((1, f"{tmp}/wd_a", args(relative)), (1, f"{tmp}/wd_b", args(relative)))
stops_with(r, r"the contents of --model: rank 0 has 143872 bytes \(digest \w+\), rank 1 has", "another model file")
shutil.copy(f"{tmp}/a.bin", f"{tmp}/wd_b/model.bin")
shutil.copy(f"{tmp}/data_b/train.bin", f"{tmp}/wd_b/data/train.bin")
r = job((1, f"{tmp}/wd_a", args(relative)), (1, f"{tmp}/wd_b", args(relative)))
stops_with(r, r"the contents of --data's train.bin: rank 0 has \d+ tokens", "another train.bin")
shutil.copy(f"{tmp}/data_a/train.bin", f"{tmp}/wd_b/data/train.bin")
shutil.copy(f"{tmp}/data_b/val.bin", f"{tmp}/wd_b/data/val.bin")
evaluating = {**relative, "--eval-every": "1"}
r = job((1, f"{tmp}/wd_a", args(evaluating)), (1, f"{tmp}/wd_b", args(evaluating)))
stops_with(r, r"the contents of --data's val.bin", "another val.bin")
shutil.copy(f"{tmp}/data_a/val.bin", f"{tmp}/wd_b/data/val.bin")
shutil.rmtree(f"{tmp}/wd_b/ck")
shutil.copytree(f"{tmp}/ck_b", f"{tmp}/wd_b/ck")
resuming = {**relative, "--resume": "ck", "--steps": "3"}
r = job((1, f"{tmp}/wd_a", args(resuming)), (1, f"{tmp}/wd_b", args(resuming)))
stops_with(r, r"the checkpoint --resume names: rank 0 has step_00000001 \(digest \w+\), rank 1 has step_00000002",
           "another checkpoint")

shutil.rmtree(tmp)
CHECKS.finish()
