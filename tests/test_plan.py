#!/usr/bin/env python3
"""build/plan's predictions against the accounting of real runs: d2 (byte vocab) at
N = 1..4 for each strategy, every rank. params, grads, optim and activations must be
exact; the other categories and the total peak within 5% (they come out exact today).
Usage: test_plan.py BUILD_DIR DATA_DIR "MPIRUN ..." """
import json
import os
import shlex
import subprocess
import sys
import tempfile

from testlib import Checks

BUILD, DATA, MPIRUN = sys.argv[1], sys.argv[2], shlex.split(sys.argv[3])
CATS = ["params", "params_gathered", "grads", "grads_gathered", "optim", "activations", "comm_buffers"]
EXACT = {"params", "grads", "optim", "activations"}


CHECKS = Checks("plan")
check = CHECKS.check


tmp = tempfile.mkdtemp(prefix="shardlab_plan_")
for n in (1, 2, 3, 4):
    batch = 12
    plan = subprocess.run([f"{BUILD}/plan", "--config", "d2", "--vocab", "256", "--ranks", str(n), "--batch",
                           str(batch), "--seq", "16", "--tsv"], capture_output=True, text=True, check=True).stdout
    predicted = {}
    for line in plan.splitlines():
        f = line.split("\t")
        predicted[(f[0], int(f[1]))] = [int(x) for x in f[2:]]
    for strategy in ("ddp", "zero3", "fsdp"):
        log = os.path.join(tmp, f"{strategy}{n}.jsonl")
        r = subprocess.run([*MPIRUN, "-np", str(n), f"{BUILD}/train_{strategy}", "--config", "d2", "--vocab", "256",
                            "--data", DATA, "--batch", str(batch), "--seq", "16", "--steps", "1", "--quiet",
                            "--log", log], capture_output=True, text=True)
        check(r.returncode == 0, f"{strategy} N={n} runs: {r.stderr[-300:]}")
        if r.returncode != 0:
            continue
        summary = json.loads(open(log).read().splitlines()[-1])
        for rank in summary["ranks"]:
            want = predicted.get((strategy, rank["rank"]), predicted.get((strategy, 0)))
            for k, cat in enumerate(CATS):
                got = rank["mem"][cat]["peak"]
                ok = got == want[k] if cat in EXACT else abs(got - want[k]) <= 0.05 * max(want[k], 1)
                check(ok, f"{strategy} N={n} rank {rank['rank']} {cat}: measured {got}, planned {want[k]}")
            got = rank["peak_bytes"]
            check(abs(got - want[-1]) <= 0.05 * want[-1], f"{strategy} N={n} rank {rank['rank']} peak: measured {got}, planned {want[-1]}")
CHECKS.finish()
