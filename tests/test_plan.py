#!/usr/bin/env python3
"""build/plan's predictions against the accounting of real runs: d2 (byte vocab) at
N = 1..4 for each strategy (ddp, zero1, zero2, zero3, fsdp), every rank. params, grads, optim and activations must be
exact; the other categories and the total peak within 5% (they come out exact today). The
allocator's reserved peak must be exact: the planner runs the trainers' own code on a dry
device, every buffer through the same cache, and the runs train two steps, so a second step that took a new block would show. FSDP
without resharding at N = 2, 3: every number exact. So is every number of ZeRO-2, ZeRO-3 and FSDP
with --prefetch 0 and 2, --grad-accum 2 and 4 in both --accum-mode values (N = 2, 3), and of every
strategy with --precision bf16 (both --reduce-dtype values; N = 1, 3) and with --ema, and of FSDP with
--shard-group. --fused-attention (the GPU's) changes the activations by exactly its formula.
Every one of these runs' memory timeline (the last step's allocations and frees, per rank)
equals build/plan --timeline's event for event, with the blocks grouped into units too (--unit-blocks,
--wrap-min-params). The --prefetch 1 peaks of docs/fsdp.md's and
docs/zero3.md's formula tables equal the planner's (d2, d4 at N = 2..4, every rank; d4 also with units of
3 + 1 blocks and of the size policy's 2 + 2). A change planted in fsdp/fsdp.c changes the
plan with it, and the plan still equals the
changed trainer. Then any N the planner accepts, up to 2^20: every rank appears once in
--tsv, and the ranks beyond the number of tensors own nothing.
Usage: test_plan.py BUILD_DIR DATA_DIR "MPIRUN ..." """
import json
import os
import re
import shlex
import subprocess
import sys

from testlib import Checks, run_captured

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "labs"))
from lab import sources as lab_sources  # noqa: E402  what the trainers are built from

BUILD, DATA, MPIRUN = sys.argv[1], sys.argv[2], shlex.split(sys.argv[3])
CATS = ["params", "params_gathered", "grads", "grads_gathered", "optim", "activations", "comm_buffers", "ema",
        "host_optim", "host_staging"]
EXACT = {"params", "grads", "optim", "activations"}


CHECKS = Checks("plan")
check = CHECKS.check


def plan_rows(args, timeout=None):
    """--tsv rows as (strategy, first rank, last rank, [bytes...]); a rank field is "r" or "first-last"."""
    out = subprocess.run([f"{BUILD}/plan", *args, "--tsv"], capture_output=True, text=True, check=True,
                         timeout=timeout).stdout
    rows = []
    for line in out.splitlines():
        f = line.split("\t")
        first, _, last = f[1].partition("-")
        rows.append((f[0], int(first), int(last or first), [int(x) for x in f[2:]]))
    return rows


def check_timeline(args, strategy, summary, tag):
    """Each rank's memory timeline of the run's last step (the summary's) equals build/plan --timeline's for that
    strategy and rank, event for event (phase, unit, category, bytes, total after), and its peak moment reaches
    the run's peak_bytes."""
    for rank in summary["ranks"]:
        out = subprocess.run([f"{BUILD}/plan", *args, "--timeline", strategy, "--rank", str(rank["rank"])],
                             capture_output=True, text=True)
        if out.returncode != 0:
            check(False, f"{tag} plan --timeline rank {rank['rank']}: {out.stderr.strip()}")
            continue
        planned = [[f[1], int(f[2]), f[3], int(f[4]), int(f[5])]
                   for f in (line.split("\t") for line in out.stdout.splitlines() if not line.startswith("#"))]
        got = rank["timeline"]["events"]
        first = next((i for i, (a, b) in enumerate(zip(got, planned)) if a != b), min(len(got), len(planned)))
        check(got == planned, f"{tag} rank {rank['rank']}: timeline of {len(got)} events, planned {len(planned)}, "
                              f"first difference at event {first}: {got[first:first + 1]} vs {planned[first:first + 1]}")
        check(rank["peak_moment"]["bytes"] == rank["peak_bytes"],
              f"{tag} rank {rank['rank']}: the step's peak moment {rank['peak_moment']['bytes']} is the run's peak "
              f"{rank['peak_bytes']}")


tmp = CHECKS.scratch("shardlab_plan_")
for n in (1, 2, 3, 4):
    batch = 12
    predicted = {}
    for strategy, first, last, numbers in plan_rows(["--config", "d2", "--vocab", "256", "--ranks", str(n),
                                                     "--batch", str(batch), "--seq", "16"]):
        for r in range(first, last + 1):
            predicted[(strategy, r)] = numbers
    for strategy in ("ddp", "zero1", "zero2", "zero3", "fsdp"):
        log = os.path.join(tmp, f"{strategy}{n}.jsonl")
        trainer = [f"{BUILD}/train_{strategy}"]
        if strategy in ("zero1", "zero2"):
            trainer = [f"{BUILD}/train_ddp", "--zero-stage", strategy[-1]]
        r = run_captured([*MPIRUN, "-np", str(n), *trainer, "--config", "d2", "--vocab", "256",
                            "--data", DATA, "--batch", str(batch), "--seq", "16", "--steps", "2", "--quiet",
                            "--log", log])
        check(r.returncode == 0, f"{strategy} N={n} runs: {r.stderr[-300:]}")
        if r.returncode != 0:
            continue
        summary = json.loads(open(log).read().splitlines()[-1])
        check_timeline(["--config", "d2", "--vocab", "256", "--ranks", str(n), "--batch", str(batch), "--seq", "16"],
                       strategy, summary, f"{strategy} N={n}")
        for rank in summary["ranks"]:
            want = predicted.get((strategy, rank["rank"]), predicted.get((strategy, 0)))
            for k, cat in enumerate(CATS):
                got = rank["mem"][cat]["peak"]
                ok = got == want[k] if cat in EXACT else abs(got - want[k]) <= 0.05 * max(want[k], 1)
                check(ok, f"{strategy} N={n} rank {rank['rank']} {cat}: measured {got}, planned {want[k]}")
            peak, reserved = want[len(CATS)], want[len(CATS) + 1]
            got = rank["peak_bytes"]
            check(abs(got - peak) <= 0.05 * peak, f"{strategy} N={n} rank {rank['rank']} peak: measured {got}, planned {peak}")
            got = rank["reserved_peak_bytes"]
            check(got == reserved and reserved >= peak,
                  f"{strategy} N={n} rank {rank['rank']} reserved peak: measured {got}, planned {reserved} (peak {peak})")

ONLY = {"--prefetch": ("zero3", "fsdp"), "--unit-blocks": ("zero3", "fsdp"), "--wrap-min-params": ("zero3", "fsdp"),
        "--shard-group": ("fsdp",), "--shard-min-numel": ("fsdp",), "--quantize-weights": ("zero3", "fsdp"),
        "--quantize-block": ("zero3", "fsdp"), "--quantize-grads": ("zero3", "fsdp"),
        "--secondary-shard-group": ("zero3", "fsdp")}  # the strategies that take these flags


def check_variant(variant, n, strategies, batch=24):
    """Every number of a two-step run of each strategy with the trainers' flags `variant` equals the plan's
    (flags a strategy does not take, such as --prefetch for ZeRO-1/2, are left out of its run)."""
    predicted = {}
    for strategy, first, last, numbers in plan_rows(["--config", "d2", "--vocab", "256", "--ranks", str(n),
                                                     "--batch", str(batch), "--seq", "16", *variant]):
        for r in range(first, last + 1):
            predicted[(strategy, r)] = numbers
    for strategy in strategies:
        pairs = [variant[i:i + 2] for i in range(0, len(variant), 2)]
        flags = [f for pair in pairs if strategy in ONLY.get(pair[0], (strategy,)) for f in pair]
        trainer = [f"{BUILD}/train_{strategy}"]
        if strategy in ("zero1", "zero2"):
            trainer = [f"{BUILD}/train_ddp", "--zero-stage", strategy[-1]]
        tag = " ".join([strategy, f"N={n}", *flags])
        log = os.path.join(tmp, "variant.jsonl")
        r = run_captured([*MPIRUN, "-np", str(n), *trainer, "--config", "d2", "--vocab", "256", "--data", DATA,
                            "--batch", str(batch), "--seq", "16", "--steps", "2", "--quiet", *flags, "--log", log])
        check(r.returncode == 0, f"{tag} runs: {r.stderr[-300:]}")
        if r.returncode != 0:
            continue
        summary = json.loads(open(log).read().splitlines()[-1])
        check_timeline(["--config", "d2", "--vocab", "256", "--ranks", str(n), "--batch", str(batch), "--seq", "16",
                        *flags], strategy, summary, tag)
        for rank in summary["ranks"]:
            want = predicted.get((strategy, rank["rank"]), predicted.get((strategy, 0)))
            got = [rank["mem"][cat]["peak"] for cat in CATS] + [rank["peak_bytes"], rank["reserved_peak_bytes"]]
            check(got == want, f"{tag} rank {rank['rank']}: measured {got}, planned {want}")


# The step's shape: --prefetch (ZeRO-3, FSDP), --grad-accum and --accum-mode change
# what is held at once. The planner replays the strategies' order for each, so every
# number, reserved included, must be a real run's.
VARIANTS = [["--prefetch", "0"], ["--prefetch", "2"], ["--grad-accum", "2"],
            ["--grad-accum", "2", "--accum-mode", "no-sync"], ["--grad-accum", "4", "--prefetch", "0"],
            ["--grad-accum", "2", "--accum-mode", "no-sync", "--prefetch", "2"]]
for variant in VARIANTS:
    for n in (2, 3):
        check_variant(variant, n, ("zero2", "zero3", "fsdp"))
# ZeRO-3's ranks that own no tensor differ by their place in hpZ's and qgZ's nodes (the whole tensors kept for
# the node, the node's sums gathered): at N = 32 (28 own a tensor of d2's), every rank as the run has it
check_variant(["--secondary-shard-group", "8", "--quantize-grads", "int8", "--quantize-grads-node", "4"], 32, ("zero3",),
              batch=32)
# --ema: each rank's moving average of what it keeps, fp32, in the `ema` category (bf16: of the fp32 master)
for variant in (["--ema", "0.9"], ["--ema", "0.9", "--precision", "bf16"]):
    for n in (1, 3):
        check_variant(variant, n, ("ddp", "zero1", "zero2", "zero3", "fsdp"))
# --offload-optimizer: the master, m and v in host memory (host_optim) and their staging (host_staging), the
# device's optim empty; timelines too, event for event
for variant in (["--offload-optimizer"], ["--offload-optimizer", "--precision", "bf16"]):
    for n in (1, 3):
        check_variant(variant, n, ("ddp", "zero1", "zero2", "zero3", "fsdp"))
check_variant(["--offload-optimizer", "--shard-group", "2"], 4, ("fsdp",))
# ZeRO-3's and FSDP's units of J blocks (d2: both blocks in one unit), and the size policy
for variant in (["--unit-blocks", "2"], ["--unit-blocks", "2", "--prefetch", "0"], ["--wrap-min-params", "300000"]):
    check_variant(variant, 3, ("zero3", "fsdp"))
# FSDP's hybrid sharding: FSDP's memory within a group of M
for n, M in ((4, 2), (4, 1)):
    check_variant(["--shard-group", str(M)], n, ("fsdp",))
# FSDP's small tensors kept whole (d2: every vector below 1000 elements), alone, with groups and with prefetch 2
for n, variant in ((3, []), (4, ["--shard-group", "2"]), (2, ["--prefetch", "2", "--grad-accum", "2"])):
    check_variant(["--shard-min-numel", "1000", *variant], n, ("fsdp",))
# ZeRO++: quantized gathers' and reduces' wire buffers beside the copy-in and copy-out ones (and qgZ's
# fp32 pieces), hpZ's secondary shards among the gathered parameters
for n, variant in ((3, []), (2, ["--prefetch", "2", "--precision", "bf16"])):
    check_variant(["--quantize-weights", "int8", "--quantize-block", "64", *variant], n, ("zero3", "fsdp"))
    check_variant(["--quantize-grads", "int4", "--quantize-block", "64", *variant], n, ("zero3", "fsdp"))
for n, variant in ((2, ["--secondary-shard-group", "1"]), (4, ["--secondary-shard-group", "2", "--prefetch", "2"]),
                   (4, ["--secondary-shard-group", "2", "--quantize-weights", "int8", "--quantize-grads", "int8"])):
    check_variant(variant, n, ("fsdp",))
# and on ZeRO-3: the whole tensors kept for the node among the gathered parameters (with qwZ, the owner's copy),
# qgZ's wires and fp32 sums where the parts are summed (in two hops, at the node's rank of the owner's place too)
for n, variant in ((2, ["--secondary-shard-group", "1"]), (4, ["--secondary-shard-group", "2", "--prefetch", "2"]),
                   (4, ["--secondary-shard-group", "2", "--quantize-weights", "int8", "--quantize-grads", "int8"]),
                   (4, ["--quantize-grads", "int4", "--quantize-grads-node", "2", "--prefetch", "0"])):
    check_variant(variant, n, ("zero3",))
# and the sharding picture shows them on every rank, whole, where the others are sliced
out = subprocess.run([f"{BUILD}/plan", "--config", "d2", "--vocab", "256", "--ranks", "3", "--layout", "--shard-min-numel",
                      "1000"], capture_output=True, text=True, check=True).stdout
spans = {}
for f in (line.split("\t") for line in out.splitlines()):
    if f[0] == "tensor":
        spans[(int(f[2]), int(f[3]))] = f[1]
held = {}
for f in (line.split("\t") for line in out.splitlines()):
    if f[0] == "hold" and f[1] == "fsdp":
        held.setdefault((int(f[3]), int(f[4])), set()).add(int(f[2]))
whole = [name for span, name in spans.items() if held.get(span) == {0, 1, 2}]
check(sorted(whole) == sorted(name for (b, e), name in spans.items() if e - b < 1000) and "wte" not in whole,
      f"plan --layout --shard-min-numel 1000: FSDP's whole tensors on every rank ({len(whole)}), the rest sliced")

# --precision bf16: every strategy, both gradient dtypes, and with prefetch and
# accumulation: bf16 working copies, fp32 masters, and the fp32 copies of each unit
# while it runs, replayed in the trainers' order.
for variant in (["--precision", "bf16"], ["--precision", "bf16", "--reduce-dtype", "fp32"],
                ["--precision", "bf16", "--grad-accum", "2", "--accum-mode", "no-sync", "--prefetch", "2"]):
    for n in (1, 3):
        check_variant(variant, n, ("ddp", "zero1", "zero2", "zero3", "fsdp"))

# FSDP without resharding keeps each unit's parameters from its forward to its
# backward (the tied wte from unit 0's forward to the head's backward): other
# buffers alive at once, so another reserved peak.
for n in (2, 3):
    args = ["--config", "d2", "--vocab", "256", "--batch", "12", "--seq", "16"]
    want = plan_rows([*args, "--ranks", str(n), "--reshard-after-forward", "0"])[-1][3]
    log = os.path.join(tmp, f"keep{n}.jsonl")
    r = run_captured([*MPIRUN, "-np", str(n), f"{BUILD}/train_fsdp", *args, "--data", DATA, "--steps", "2", "--quiet",
                        "--reshard-after-forward", "0", "--log", log])
    check(r.returncode == 0, f"fsdp N={n} --reshard-after-forward 0 runs: {r.stderr[-300:]}")
    if r.returncode == 0:
        summary = json.loads(open(log).read().splitlines()[-1])
        check_timeline([*args, "--ranks", str(n), "--reshard-after-forward", "0"], "fsdp", summary,
                       f"fsdp N={n} --reshard-after-forward 0")
        for rank in summary["ranks"]:
            got = [rank["mem"][cat]["peak"] for cat in CATS] + [rank["peak_bytes"], rank["reserved_peak_bytes"]]
            check(got == want, f"fsdp N={n} --reshard-after-forward 0 rank {rank['rank']}: measured {got}, planned {want}")

# --recompute: the planner's activations equal a real run's, and are the plain
# ones less (L-1)(17bTC + 4bT + b NH T^2) floats (d2: L = 2, C = 128, NH = 2).
for n in (1, 3):
    base = ["--config", "d2", "--vocab", "256", "--ranks", str(n), "--batch", "12", "--seq", "16"]
    plain = {s: numbers for s, first, last, numbers in plan_rows(base)}
    recomputed = {s: numbers for s, first, last, numbers in plan_rows([*base, "--recompute"])}
    b, T, C, NH = 12 // n, 16, 128, 2
    saved = 4 * (17 * b * T * C + 4 * b * T + b * NH * T * T)
    act = CATS.index("activations")
    check(plain["fsdp"][act] - recomputed["fsdp"][act] == saved,
          f"plan --recompute N={n}: activations {plain['fsdp'][act]} -> {recomputed['fsdp'][act]} (saves {saved})")
    log = os.path.join(tmp, f"recompute{n}.jsonl")
    r = run_captured([*MPIRUN, "-np", str(n), f"{BUILD}/train_fsdp", "--config", "d2", "--vocab", "256", "--data", DATA,
                        "--batch", "12", "--seq", "16", "--steps", "1", "--quiet", "--recompute", "--log", log])
    check(r.returncode == 0, f"fsdp N={n} --recompute runs: {r.stderr[-300:]}")
    if r.returncode == 0:
        summary = json.loads(open(log).read().splitlines()[-1])
        check_timeline([*base, "--recompute"], "fsdp", summary, f"fsdp N={n} --recompute")
        for rank in summary["ranks"]:
            got = rank["mem"]["activations"]["peak"]
            check(got == recomputed["fsdp"][act],
                  f"fsdp N={n} --recompute rank {rank['rank']} activations: measured {got}, planned {recomputed['fsdp'][act]}")

# The planner runs the strategy files themselves: a change planted in fsdp/fsdp.c, as a
# student would make it (keep unit 0, the embeddings, gathered from its forward to its
# backward), changes the plan with no other edit, and the plan still equals what the
# changed trainer measures.
PLANTED = "    if (s->reshard_after_forward && unit != 0) release_unit(s, unit, backward_follows ? +1 : 0);"
src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tree = os.path.join(tmp, "planted")
os.makedirs(tree, exist_ok=True)
subprocess.run(["cp", "-r", *[os.path.join(src, d) for d in lab_sources()], tree], check=True)
fsdp_c = os.path.join(tree, "fsdp", "fsdp.c")
code = open(fsdp_c).read()
stock_line = "    if (s->reshard_after_forward) release_unit(s, unit, backward_follows ? +1 : 0);"
check(code.count(stock_line) == 1, "fsdp.c has the line the planted change replaces")
open(fsdp_c, "w").write(code.replace(stock_line, PLANTED))
built = subprocess.run(["make", "-C", tree, "BUILD=build", "GPU=0", "-j2", "build/plan", "build/train_fsdp"],
                       capture_output=True, text=True)
check(built.returncode == 0, f"the planted tree builds: {built.stderr[-500:]}")
if built.returncode == 0:
    args = ["--config", "d2", "--vocab", "256", "--batch", "12", "--seq", "16"]
    stock = [r[3] for r in plan_rows([*args, "--ranks", "2"]) if r[0] == "fsdp"][0]
    out = subprocess.run([f"{tree}/build/plan", *args, "--ranks", "2", "--tsv"], capture_output=True, text=True,
                         check=True).stdout
    planted = [[int(x) for x in line.split("\t")[2:]] for line in out.splitlines() if line.startswith("fsdp\t")][0]
    check(planted != stock, f"the planted change shows in the plan: {stock} -> {planted}")
    log = os.path.join(tmp, "planted.jsonl")
    r = subprocess.run([*MPIRUN, "-np", "2", f"{tree}/build/train_fsdp", *args, "--data", DATA, "--steps", "2",
                        "--quiet", "--log", log], capture_output=True, text=True)
    check(r.returncode == 0, f"the planted fsdp runs: {r.stderr[-300:]}")
    if r.returncode == 0:
        for rank in json.loads(open(log).read().splitlines()[-1])["ranks"]:
            got = [rank["mem"][cat]["peak"] for cat in CATS] + [rank["peak_bytes"], rank["reserved_peak_bytes"]]
            check(got == planted, f"planted fsdp rank {rank['rank']}: measured {got}, planned {planted}")

# docs/fsdp.md's and docs/zero3.md's peaks with the default --prefetch 1, from their formulas (fp32; U_u the
# tensors unit u reads; FSDP pad(t) = ceil(rows/N) N cols), against the planner, every rank.
def layout_of(args):
    """{tensor: numel}, {tensor: ZeRO-3 owner} from build/plan --layout."""
    out = subprocess.run([f"{BUILD}/plan", *args, "--layout"], capture_output=True, text=True, check=True).stdout
    numel, begins, owner = {}, {}, {}
    for f in (line.split("\t") for line in out.splitlines()):
        if f[0] == "tensor":
            numel[f[1]], begins[int(f[2])] = int(f[3]) - int(f[2]), f[1]
        elif f[0] == "hold" and f[1] == "zero3":
            owner[begins[int(f[3])]] = int(f[2])
    return numel, owner


def tensor_rows(name, numel):
    """Dim 0 of a tensor of the model, from its name (C = lnfw's size)."""
    C, base = numel["lnfw"], name.split(".")[-1]
    return {"wte": numel[name] // C, "wpe": numel[name] // C, "qkvw": 3 * C, "qkvb": 3 * C, "fcw": 4 * C,
            "fcb": 4 * C}.get(base, C)


def block_groups(numel, layers, flags):
    """The blocks of each unit under --unit-blocks J or --wrap-min-params PARAMS (docs/fsdp.md): J consecutive
    blocks, or as many as it takes to hold PARAMS parameters; the last unit the rest."""
    per_block = sum(v for t, v in numel.items() if t.startswith("h0."))
    J = int(flags[1]) if flags[:1] == ["--unit-blocks"] else 1
    least = int(flags[1]) if flags[:1] == ["--wrap-min-params"] else 0
    size = -(-least // per_block) if least else J  # blocks a unit takes
    return [list(range(l, min(l + size, layers))) for l in range(0, layers, size)]


# --wrap-min-params at exactly one block's parameters: a block alone reaches it (one block a unit); one more
# parameter takes two blocks a unit
numel, _ = layout_of(["--config", "d2", "--vocab", "256", "--ranks", "2"])
block = sum(v for t, v in numel.items() if t.startswith("h0."))
for least, units in ((block, 2), (block + 1, 1), (block - 1, 2)):
    out = subprocess.run([f"{BUILD}/plan", "--config", "d2", "--vocab", "256", "--ranks", "2", "--wrap-min-params",
                          str(least)], capture_output=True, text=True)
    said = next((line for line in out.stderr.splitlines() + out.stdout.splitlines() if "unit(s) of blocks" in line), "")
    check(out.returncode == 0 and f"{units} unit(s) of blocks" in said,
          f"plan --wrap-min-params {least} (one block holds {block}): {units} unit(s) of blocks ({said.strip()[-60:]})")

# the units as a student would group them: a block each, J blocks (4 = 3 + 1), and the size policy
for config, unit_flags in ((["--config", "d2", "--vocab", "256"], []), (["--config", "d4", "--vocab", "300"], []),
                           (["--config", "d4", "--vocab", "300"], ["--unit-blocks", "3"]),
                           (["--config", "d4", "--vocab", "300"], ["--wrap-min-params", "1500000"])):
    for n in (2, 3, 4):
        numel, owner = layout_of([*config, "--ranks", str(n)])
        layers = 1 + max(int(t[1:].split(".")[0]) for t in numel if t.startswith("h"))
        units = [["wte", "wpe"]] + [[t for t in numel if t.split(".")[0] in {f"h{l}" for l in group}]
                                    for group in block_groups(numel, layers, unit_flags)] + [["lnfw", "lnfb", "wte"]]
        shape = [*config, *unit_flags, "--ranks", str(n), "--batch", str(4 * n), "--seq", "16"]
        what = " ".join([config[1], *unit_flags, f"N={n}"])
        pad = {t: -(-tensor_rows(t, numel) // n) * n * (numel[t] // tensor_rows(t, numel)) for t in numel}
        # wte stays from unit 0's forward to its backward, its gradient from the head's backward to unit 0's
        pairs = [set(units[u]) | set(units[u + 1]) | {"wte"} for u in range(len(units) - 1)]
        size = lambda tensors: sum(pad[t] for t in tensors)
        # what each unit's gather moves, forward and backward, and its reduce-scatter ([-1] and past the ends: 0)
        fwd = [size(unit) for unit in units[:-1]] + [size(units[-1]) - pad["wte"], 0]
        bwd = [size(units[0]) - pad["wte"]] + [size(unit) for unit in units[1:-1]] + [0, 0]
        home = [size(unit) for unit in units[:-1]] + [size(units[-1]) - pad["wte"], 0]
        peaks = {}
        for strategy, first, last, numbers in plan_rows(shape):
            for r in range(first, last + 1):
                peaks[(strategy, r)] = numbers
        fsdp = {"params_gathered": 4 * max(size(set(unit) | {"wte"}) for unit in units),
                "grads_gathered": 4 * max(size(pair) for pair in pairs),
                # forward: unit u's gather and the next one's; backward: unit u's reduce-scatter, unit u+1's still
                # in flight, and unit u-1's gather
                "comm_buffers": max(4 * (n + 1) * max(fwd[u] + fwd[u + 1], bwd[u - 1] + home[u] + home[u + 1]) // n
                                    for u in range(len(units)))}
        for cat, want in fsdp.items():
            got = peaks[("fsdp", 0)][CATS.index(cat)]
            check(got == want, f"fsdp.md, --prefetch 1, {what}: {cat} peak {got}, formula {want}")
        for r in range(n):
            zero3 = {"params_gathered": 4 * max(sum(numel[t] for t in pair if owner[t] != r) for pair in pairs),
                     "grads_gathered": 4 * max(sum(numel[t] for t in pair) for pair in pairs)}
            for cat, want in zero3.items():
                got = peaks[("zero3", r)][CATS.index(cat)]
                check(got == want, f"zero3.md, --prefetch 1, {what} rank {r}: {cat} peak {got}, formula {want}")

# docs/answers.md's answer 15 quotes each strategy's peak moment: they are the planner's.
answer = open(os.path.join(src, "docs", "answers.md")).read().split("**15.**", 1)[-1]
quoted = re.findall(r"^- (ZeRO-2|ZeRO-3|FSDP), rank (\d+): peak ([\d,]+) bytes at event (\d+) \(([a-z ]+), unit (\d+)\)$",
                    answer, re.M)
check(len(quoted) == 3, f"docs/answers.md answer 15 quotes three peak moments ({len(quoted)} found)")
for name, rank, peak, event, phase, unit in quoted:
    strategy = {"ZeRO-2": "zero2", "ZeRO-3": "zero3", "FSDP": "fsdp"}[name]
    out = subprocess.run([f"{BUILD}/plan", "--config", "d2", "--vocab", "256", "--ranks", "2", "--batch", "8", "--seq",
                          "64", "--timeline", strategy, "--rank", rank], capture_output=True, text=True).stdout
    last = out.splitlines()[-1] if out else ""
    want = f"# peak: {peak.replace(',', '')} bytes at event {event} ({phase}, unit {unit}):"
    check(last.startswith(want), f"docs/answers.md answer 15, {name}: '{want}' is the planner's ('{last[:80]}')")

# docs/fsdp.md's table of units (d12 on machines of 8 GPUs) and docs/answers.md's answer 16 (d4, N = 2) are the
# planner's numbers.
fsdp_md = open(os.path.join(src, "docs", "fsdp.md")).read()
table = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) \| (\d+) \((\d+)%\) \| (\d+) \((\d+)%\) \| (\d+) \((\d+)%\) \|$",
                   fsdp_md, re.M)
check(len(table) == 6, f"docs/fsdp.md's units table has six rows ({len(table)} found)")
for row in table:
    J = row[0]
    units = ["--unit-blocks", J]
    d12 = ["--config", "d12", "--seq", "1024"]
    traffic = subprocess.run([f"{BUILD}/plan", *d12, "--ranks", "8", "--batch", "128", "--traffic", *units],
                             capture_output=True, text=True, check=True).stdout
    calls = sum(int(f[3]) for f in (line.split("\t") for line in traffic.splitlines()) if f[0] == "fsdp" and f[1] == "0")
    peak = [r[3][-2] for r in plan_rows([*d12, "--ranks", "64", "--batch", "1024", *units]) if r[0] == "fsdp"][0]
    times = subprocess.run([f"{BUILD}/plan", *d12, "--ranks", "1024", "--batch", "16384", "--time", "--tokens-per-s",
                            "146656", "--tsv", *units], capture_output=True, text=True, check=True).stdout
    rate = {}
    for f in (line.split("\t") for line in times.splitlines()):
        if f[0] == "fsdp":
            rate[int(f[1])] = f"{int(float(f[7]) / int(f[1]))} ({100 * float(f[5]) / float(f[6]):.0f}%)"
    layers = 12
    want = (J, str(-(-layers // int(J)) + 2), str(calls), f"{peak / 1e9:.3f}", rate[8], rate[64], rate[1024])
    got = (row[0], row[1], row[2], row[3], f"{row[4]} ({row[5]}%)", f"{row[6]} ({row[7]}%)", f"{row[8]} ({row[9]}%)")
    check(got == want and int(row[2]) == 3 * int(row[1]) - 1,  # U gathers forward, U - 1 backward, U reduce-scatters
          f"docs/fsdp.md units table, J = {J}: {got} is the planner's {want}, 3U - 1 collectives")
# docs/answers.md prints exercise 3's planner lines for N = 1024 whole: they are today's
lines = [line for line in subprocess.run([f"{BUILD}/plan", "--prefetch", "0", "--config", "d2", "--vocab", "256",
                                          "--ranks", "1024", "--tsv"], capture_output=True, text=True,
                                         check=True).stdout.splitlines()
         if line.startswith(("fsdp\t", "zero3\t0\t", "zero3\t28-1023\t"))]
answers_md = open(os.path.join(src, "docs", "answers.md")).read()
check(len(lines) == 3 and all(f"\n{line}\n" in answers_md for line in lines),
      f"docs/answers.md prints the planner's lines for d2 at N = 1024: {lines}")
# docs/answers.md's answer 13 quotes a bf16 FSDP rank's peaks (exercise 13: d2 at N = 2, batch 8 x 64, --prefetch 0)
answer = " ".join(open(os.path.join(src, "docs", "answers.md")).read().split("**13.**", 1)[-1].split("**14.**")[0]
                  .split())
rows = {(s, first): numbers for s, first, _, numbers in
        plan_rows(["--config", "d2", "--vocab", "256", "--ranks", "2", "--batch", "8", "--seq", "64", "--prefetch", "0",
                   "--precision", "bf16"])}
fsdp = rows[("fsdp", 0)]
quotes = [f"to {fsdp[CATS.index('params')]:,} bytes each", f"to {fsdp[CATS.index('optim')]:,}",
          f"to {fsdp[CATS.index('params_gathered')]:,}", f"to {fsdp[CATS.index('activations')]:,}",
          f"to {fsdp[CATS.index('comm_buffers')]:,}", f"The peak: {fsdp[-2]:,}"]
check(fsdp[CATS.index("grads_gathered")] == fsdp[CATS.index("params_gathered")] and all(q in answer for q in quotes),
      f"docs/answers.md answer 13 quotes the planner's bf16 FSDP peaks ({quotes})")
# docs/answers.md's answer 18 quotes the planner's ema bytes for d4 at N = 2
answer = " ".join(open(os.path.join(src, "docs", "answers.md")).read().split("**18.**", 1)[-1].split())
ema = {}
for strategy, first, last, numbers in plan_rows(["--config", "d4", "--vocab", "256", "--ranks", "2", "--ema", "0.99"]):
    for r in range(first, last + 1):
        ema[(strategy, r)] = numbers[CATS.index("ema")]
quotes = [f"everything: {ema[('ddp', 0)]:,} bytes (4P)", f"range R = P/2: {ema[('zero1', 0)]:,}",
          f"also {ema[('fsdp', 0)]:,}", f"{ema[('zero3', 0)]:,} and {ema[('zero3', 1)]:,} bytes"]
check(ema[("zero1", 0)] == ema[("zero2", 0)] and all(q in answer for q in quotes),
      f"docs/answers.md answer 18 quotes the planner's ema bytes ({quotes})")
# docs/zero3.md's units of several blocks are the planner's
zero3_md = " ".join(open(os.path.join(src, "docs", "zero3.md")).read().split())
for J, peak, rate in (("1", "29.629", "46281"), ("12", "30.199", "39043")):
    d12 = ["--config", "d12", "--seq", "1024", "--unit-blocks", J]
    traffic = subprocess.run([f"{BUILD}/plan", *d12, "--ranks", "8", "--batch", "128", "--traffic"], capture_output=True,
                             text=True, check=True).stdout
    calls = sum(int(f[3]) for f in (line.split("\t") for line in traffic.splitlines()) if f[0] == "zero3" and f[1] == "0")
    got_peak = max(r[3][-2] for r in plan_rows([*d12, "--ranks", "64", "--batch", "1024"]) if r[0] == "zero3")
    times = subprocess.run([f"{BUILD}/plan", *d12, "--ranks", "1024", "--batch", "16384", "--time", "--tokens-per-s",
                            "146656", "--tsv"], capture_output=True, text=True, check=True).stdout
    got_rate = [int(float(f[7]) / 64) for f in (line.split("\t") for line in times.splitlines())
                if f[0] == "zero3" and f[1] == "64"][0]
    check(calls == 441 and f"{got_peak / 1e9:.3f}" == peak and str(got_rate) == rate and f"(441 per step" in zero3_md
          and f"{peak} GB at J = {J}" in zero3_md and f"{rate}" in zero3_md,
          f"docs/zero3.md, J = {J}: 441 collectives, peak {peak} GB, {rate} tokens/s are the planner's "
          f"({calls}, {got_peak / 1e9:.3f}, {got_rate})")
# docs/fsdp.md's table of small tensors kept whole, and its d4 run's bytes, are the planner's
rows = re.findall(r"^\| (every tensor sliced|`--shard-min-numel 10000`) \| (\d+)(?: \((\d+) all-reduces\))? \| ([\d,]+) B \| "
                  r"(\d+) / (\d+) / (\d+) \|$", fsdp_md, re.M)
check(len(rows) == 2, f"docs/fsdp.md's table of whole small tensors has two rows ({len(rows)} found)")
for name, calls, all_reduces, params, *rates in rows:
    whole = ["--shard-min-numel", "10000" if "10000" in name else "0"]
    d12 = ["--config", "d12", "--seq", "1024"]
    traffic = [line.split("\t") for line in subprocess.run(
        [f"{BUILD}/plan", *d12, "--ranks", "8", "--batch", "128", "--traffic", *whole], capture_output=True, text=True,
        check=True).stdout.splitlines() if line.startswith("fsdp\t0\t")]
    got_calls = sum(int(f[3]) for f in traffic)
    got_reduces = sum(int(f[3]) for f in traffic if f[2] == "all_reduce")
    got_params = [r[3][0] for r in plan_rows([*d12, "--ranks", "1024", "--batch", "16384", *whole]) if r[0] == "fsdp"][0]
    times = subprocess.run([f"{BUILD}/plan", *d12, "--ranks", "1024", "--batch", "16384", "--time", "--tokens-per-s",
                            "146656", "--tsv", *whole], capture_output=True, text=True, check=True).stdout
    got_rates = {int(f[1]): str(int(float(f[7]) / int(f[1]))) for f in (line.split("\t") for line in times.splitlines())
                 if f[0] == "fsdp"}
    check((int(calls), int(all_reduces or 0), int(params.replace(",", "")), rates) ==
          (got_calls, got_reduces, got_params, [got_rates[8], got_rates[64], got_rates[1024]]),
          f"docs/fsdp.md whole small tensors, {name}: the planner's numbers")
d4_run = ["--config", "d4", "--vocab", "256", "--ranks", "4", "--batch", "8", "--seq", "64"]
sliced = [r[3][0] for r in plan_rows(d4_run) if r[0] == "fsdp"][0]
kept = [r[3][0] for r in plan_rows([*d4_run, "--shard-min-numel", "1000"]) if r[0] == "fsdp"][0]
def sent(flags):
    out = subprocess.run([f"{BUILD}/plan", *d4_run, "--traffic", *flags], capture_output=True, text=True, check=True).stdout
    return {f[2]: (int(f[3]), int(f[5])) for f in (line.split("\t") for line in out.splitlines())
            if f[0] == "fsdp" and f[1] == "0"}
a, b = sent([]), sent(["--shard-min-numel", "1000"])
quote = (f"keeps {kept - sliced:,} more bytes of parameters per rank ({kept:,} against {sliced:,}), makes "
         f"{b['all_reduce'][0]} all-reduces of {b['all_reduce'][1]:,} bytes in all, and its reduce-scatters and "
         f"all-gathers send {a['reduce_scatter'][1] - b['reduce_scatter'][1]:,} and "
         f"{a['all_gather'][1] - b['all_gather'][1]:,} bytes less")
check(quote in " ".join(fsdp_md.split()), f"docs/fsdp.md's d4 run with --shard-min-numel 1000 says '{quote}'")
answer = open(os.path.join(src, "docs", "answers.md")).read().split("**16.**", 1)[-1]
d4 = ["--config", "d4", "--vocab", "256", "--ranks", "2", "--batch", "8", "--seq", "64"]
numbers = {}
for J in ("1", "2", "4"):
    row = [r[3] for r in plan_rows([*d4, "--unit-blocks", J]) if r[0] == "fsdp"][0]
    numbers[J] = {c: row[CATS.index(c)] for c in ("params_gathered", "grads_gathered")}
    numbers[J]["peak"] = row[-2]
    traffic = subprocess.run([f"{BUILD}/plan", *d4, "--traffic", "--unit-blocks", J], capture_output=True, text=True,
                             check=True).stdout
    for f in (line.split("\t") for line in traffic.splitlines()):
        if f[0] == "fsdp" and f[1] == "0":
            numbers[J][f[2]] = (int(f[3]), int(f[5]))
quotes = [f"{numbers['1']['all_gather'][0]} all-gathers and {numbers['1']['reduce_scatter'][0]}",
          f"{numbers['2']['all_gather'][0]} and {numbers['2']['reduce_scatter'][0]} at J = 2",
          f"{numbers['4']['all_gather'][0]} and {numbers['4']['reduce_scatter'][0]} at J = 4",
          f"{numbers['1']['all_gather'][1]:,} sent by all-gathers and {numbers['1']['reduce_scatter'][1]:,} by reduce",
          f"{numbers['1']['params_gathered']:,}, {numbers['2']['params_gathered']:,} and {numbers['4']['params_gathered']:,}",
          f"{numbers['1']['grads_gathered']:,} and {numbers['2']['grads_gathered']:,} at J = 1 and 2",
          f"{numbers['4']['grads_gathered']:,}\nat J = 4", f"{numbers['1']['peak']:,} to {numbers['4']['peak']:,} bytes"]
same_bytes = all(numbers[J][op][1] == numbers["1"][op][1] for J in ("2", "4") for op in ("all_gather", "reduce_scatter"))
flat = " ".join(answer.split())
for quote in quotes:
    check(" ".join(quote.split()) in flat, f"docs/answers.md answer 16 says '{quote}' (the planner's)")
check(same_bytes, "answer 16: the bytes do not change with J")

# --fused-attention (the GPU trainers'): an attention row keeps its log-sum-exp, and its backward a dot, instead of
# the (T, T) probabilities and their gradient: (L' + 1) b NH (T^2 - T) floats fewer, L' = L (1 with --recompute).
# --fused-classifier (every trainer's): no (b, T, Vp) probabilities (Vp = 256 for V = 256). Only the activations
# change, by exactly that, b = B/N rows per rank; with --time, --traffic and --layout each flag changes nothing
# those show, and is refused.
head = subprocess.run([f"{BUILD}/plan", "--config", "d2", "--vocab", "256", "--ranks", "2"], capture_output=True,
                      text=True, check=True).stdout
L, NH = (int(re.search(rf"\b{k}=(\d+)", head).group(1)) for k in ("L", "NH"))
ACT = CATS.index("activations")
b, T, Vp = 3, 40, 256
fusions = (("--fused-attention", "(L'+1) b NH (T^2 - T)", lambda layers: 4 * (layers + 1) * b * NH * (T * T - T)),
           ("--fused-classifier", "b T Vp", lambda layers: 4 * b * T * Vp))
for flag, formula, saved_bytes in fusions:
    for extra, layers in (([], L), (["--recompute"], 1)):
        shape = ["--config", "d2", "--vocab", "256", "--ranks", "2", "--batch", "6", "--seq", "40", *extra]
        plain, fused, saved = plan_rows(shape), plan_rows([*shape, flag]), saved_bytes(layers)
        check(len(plain) == len(fused) and all(p[3][ACT] - f[3][ACT] == saved for p, f in zip(plain, fused)),
              f"plan {' '.join(extra)} {flag}: activations fall by {formula} floats = {saved} B")
        check(all(p[3][:ACT] + p[3][ACT + 1:len(CATS)] == f[3][:ACT] + f[3][ACT + 1:len(CATS)]
                  for p, f in zip(plain, fused)), f"plan {' '.join(extra)} {flag}: the other categories equal")
    for mode in (["--time"], ["--traffic"], ["--layout"]):
        r = subprocess.run([f"{BUILD}/plan", "--config", "d2", "--ranks", "2", flag, *mode], capture_output=True,
                           text=True)
        check(r.returncode != 0 and flag in r.stderr,
              f"plan {mode[0]} {flag} is refused, naming the flag: {r.stderr.strip()[:120]}")

# bf16 products (the CPU's and the GPU's alike): while a unit's pass runs, its largest product's bf16 operands are
# held as activations, each part aligned to 64 elements: input, and (backward) dout; the weight is multiplied as
# kept, bf16. So a bf16 plan's
# activations peak above the fp32 plan's by the largest of them over the units, 2 bytes an element (the
# activations themselves stay fp32); the real runs above hold the same (their accounting equals the plan's).
C = int(re.search(r"\bC=(\d+)", head).group(1))
def aligned(n):
    return (n + 63) // 64 * 64
def operands(rows, c_in, c_out, backward):
    return aligned(rows * c_in) + (aligned(rows * c_out) if backward else 0)
largest = max([operands(b * T, C, Vp, 1)] +
              [operands(b * T, ci, co, 1) for ci, co in ((C, 3 * C), (C, C), (C, 4 * C), (4 * C, C))])
shape = ["--config", "d2", "--vocab", "256", "--ranks", "2", "--batch", "6", "--seq", "40"]
fp32, bf16 = plan_rows(shape), plan_rows([*shape, "--precision", "bf16"])
check(len(fp32) == len(bf16) and all(h[3][ACT] - f[3][ACT] == 2 * largest for f, h in zip(fp32, bf16)),
      f"plan --precision bf16: activations rise by the largest product's bf16 operands, {2 * largest} B")
r = subprocess.run([f"{BUILD}/plan", "--config", "d2", "--ranks", "2", "--gpu"], capture_output=True, text=True)
check(r.returncode != 0 and "--gpu" in r.stderr, f"plan --gpu is gone (the builds hold the same): {r.stderr.strip()[:120]}")

# --offload-optimizer: refused with --traffic, --layout and --ema; with --time the wait for its copies and CPU
# AdamW takes the last column, and --host-link and --cpu-adam go with it alone. DDP's whole model at N = 1 with a
# clip (every update at the step): on a link alone (an instant CPU) 2 latencies per tensor and 8 bytes per
# parameter; on a CPU alone (an instant link) 28 bytes per parameter at its rate. Without a clip, ZeRO-3's and
# FSDP's updates begin as units' shares are final (--prefetch 0: right after each unit's backward): the head's
# (lnf, 2C) hides behind block 2's backward, block 2's behind block 1's; block 1's and unit 0's wait (unit 0's
# backward, a lookup, takes no time). And --params P --offload-optimizer: the device keeps parameters and
# gradients, the host 12 bytes of state and the staging per parameter the rung's rank updates (P on DDP's, P/N
# up the ladder)
for mode in (["--traffic"], ["--layout"], ["--ema", "0.9"]):
    r = subprocess.run([f"{BUILD}/plan", "--config", "d2", "--ranks", "2", "--offload-optimizer", *mode],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "--offload-optimizer" in r.stderr,
          f"plan {mode[0]} --offload-optimizer is refused, naming the flag: {r.stderr.strip()[:120]}")
timed = ["--config", "d2", "--vocab", "256", "--ranks", "1", "--time", "--tokens-per-s", "1000", "--tsv"]
for flag in (["--host-link", "1e-5,10"], ["--cpu-adam", "20"]):
    r = subprocess.run([f"{BUILD}/plan", *timed, *flag], capture_output=True, text=True)
    check(r.returncode != 0 and flag[0] in r.stderr and "--offload-optimizer" in r.stderr,
          f"plan --time {flag[0]} without --offload-optimizer is refused: {r.stderr.strip()[:120]}")
P, tensors, C = 560640, 2 + 12 * 2 + 2, 128  # d2, V = 256: wte, wpe, a block's 12 tensors, lnf's 2


def offload_rows(*flags):
    return {f[0]: [float(x) for x in f[3:]] for f in (line.split("\t") for line in subprocess.run(
        [f"{BUILD}/plan", *timed, *flags], capture_output=True, text=True, check=True).stdout.splitlines())}


plain = offload_rows()
rows = offload_rows("--offload-optimizer", "--host-link", "2e-5,10", "--cpu-adam", "1e6", "--grad-clip", "1")
want = 2 * tensors * 2e-5 + 8 * P / 10e9
check(abs(rows["ddp"][5] - want) <= 1e-12 and plain["ddp"][5] == 0 and
      abs(rows["ddp"][3] - plain["ddp"][3] - want) <= 1e-12,
      f"plan --time --offload-optimizer, link alone: DDP's offload {rows['ddp'][5]} s is 2 latencies per tensor + "
      f"8P / beta = {want}, and the step grows by it")
rows = offload_rows("--offload-optimizer", "--host-link", "0,1e6", "--cpu-adam", "20", "--grad-clip", "1")
want = 28 * P / 20e9
check(abs(rows["ddp"][5] - want) <= 1e-8, f"plan --time --offload-optimizer, CPU alone: DDP's offload "
      f"{rows['ddp'][5]} s is 28P / rate = {want}")
rows = offload_rows("--offload-optimizer", "--host-link", "0,1e6", "--cpu-adam", "20", "--prefetch", "0")
want = 28 * (P - 2 * C - (12 * C * C + 13 * C)) / 20e9
check(all(abs(rows[k][5] - want) <= 1e-8 for k in ("zero3", "fsdp")),
      f"plan --time --offload-optimizer --prefetch 0 without a clip: ZeRO-3's and FSDP's offload "
      f"{rows['zero3'][5]}, {rows['fsdp'][5]} s are 28 bytes of unit 0's and block 1's parameters = {want}")
for precision, staging in (("fp32", 4), ("bf16", 4)):
    out = subprocess.run([f"{BUILD}/plan", "--params", "1000000000", "--ranks", "4", "--precision", precision,
                          "--offload-optimizer"], capture_output=True, text=True, check=True).stdout
    rows = {f[0]: [float(x) for x in f[1:]] for f in (line.split() for line in out.splitlines()[2:])}
    p, g = (4, 4) if precision == "fp32" else (2, 2)
    want = {"ddp": [p, g, 0, p + g, 12, staging], "zero1": [p, g, 0, p + g, 3, staging / 4],
            "zero2": [p, g / 4, 0, p + g / 4, 3, staging / 4], "zero3": [p / 4, g / 4, 0, (p + g) / 4, 3, staging / 4],
            "fsdp": [p / 4, g / 4, 0, (p + g) / 4, 3, staging / 4]}
    check(rows == want, f"plan --params 1e9 --ranks 4 --precision {precision} --offload-optimizer: {rows}")

# docs/offload.md quotes the planner's offloaded step for d12 in bf16
offload_md = " ".join(open(os.path.join(src, "docs", "offload.md")).read().split())
def d12_times(*flags):
    return {(f[0], int(f[1])): [float(x) for x in f[3:]] for f in (line.split("\t") for line in subprocess.run(
        [f"{BUILD}/plan", "--config", "d12", "--ranks", "8", "--batch", "128", "--seq", "1024", "--precision", "bf16",
         "--time", "--tokens-per-s", "150000", "--offload-optimizer", "--tsv", *flags], capture_output=True,
        text=True, check=True).stdout.splitlines())}


times, clipped, unprefetched = d12_times(), d12_times("--grad-clip", "1"), d12_times("--prefetch", "0")
P12, WTE = 124475904, 50304 * 768  # every element AdamW updates, wte's padding rows included
adam, link, latency = 28 * P12 / 55e9, 4 * P12 / 25e9, 2 * 148 * 1e-5  # --cpu-adam 55, --host-link 1e-5,25
wte_copy, wte_adam = 1e-5 + 2 * WTE / 25e9, 28 * WTE / 55e9
quoted = [f"costs {1e3 * times[('ddp', 1)][5]:.1f} ms of a {1e3 * times[('ddp', 1)][3]:.1f} ms step",
          f"{1e3 * adam:.1f} ms are the CPU's AdamW", f"over all P = {P12:,} elements",
          f"{1e3 * link:.1f} ms the link's bytes", f"{1e3 * latency:.1f} ms its latencies",
          f"the wait's other {1e3 * (times[('ddp', 1)][5] - adam):.1f} ms",
          f"FSDP at N = 1 waits {1e3 * times[('fsdp', 1)][5]:.1f} ms",
          f"({1e3 * wte_copy:.1f} ms down, {1e3 * wte_adam:.1f} ms of AdamW, {1e3 * wte_copy:.1f} ms up)",
          f"({1e3 * unprefetched[('fsdp', 1)][5]:.1f} ms with `--prefetch 0`)",
          f"{1e3 * times[('ddp', 8)][5]:.1f} ms on every DDP rank", f"{1e3 * times[('zero1', 8)][5]:.1f} ms on ZeRO-1/2's",
          f"{1e3 * times[('fsdp', 8)][5]:.1f} ms on FSDP's", f"waits {1e3 * times[('zero3', 8)][5]:.1f} ms",
          f"FSDP's rank at N = 8, {1e3 * clipped[('fsdp', 8)][5]:.1f} ms"]
mem = {}
for flags in ([], ["--offload-optimizer"]):
    row = [r for r in plan_rows(["--config", "d12", "--vocab", "256", "--ranks", "1", "--batch", "2", "--seq", "64",
                                 *flags]) if r[0] == "ddp"][0][3]
    mem[len(flags)] = row
quoted += [f"falls from {mem[0][-2]:,} to {mem[1][-2]:,} bytes", f"exactly the {mem[0][CATS.index('optim')]:,} of",
           f"the host holds {mem[1][CATS.index('host_optim')]:,}", f"and {mem[1][CATS.index('host_staging')]:,}"]
check(all(q in offload_md for q in quoted), f"docs/offload.md quotes the planner's offloaded d12 step: {quoted}")
# nothing hides DDP's: between the larger of the link's and the CPU's parts and their sum; the backward hides
# some of FSDP's
for n, ddp in ((1, times[("ddp", 1)][5]), (8, times[("ddp", 8)][5])):
    check(max(n * adam, link + latency) <= ddp <= n * adam + link + latency and times[("fsdp", n)][5] < ddp,
          f"d12 N = {n}: DDP's offload {ddp} s between max(CPU, link) and their sum, FSDP's "
          f"{times[('fsdp', n)][5]} s below it")


# d12 has 148 tensors: beyond 148 ranks, ZeRO-3's extra ranks own nothing and share a row.
# The partition is computed once and ZeRO-3's ranks that own nothing are run once, so
# even 2^20 ranks (the most the planner runs) answer in seconds (a time limit here
# only turns a hang into a failure); beyond, a clear refusal.
refused = subprocess.run([f"{BUILD}/plan", "--config", "d12", "--ranks", str((1 << 20) + 1)], capture_output=True,
                         text=True)
check(refused.returncode != 0 and "--ranks 1048577" in refused.stderr and "--params" in refused.stderr,
      f"plan --ranks 2^20 + 1 is refused, naming the flag: {refused.stderr.strip()}")
for n in (100, 148, 149, 1000, 1 << 20):
    try:
        rows = plan_rows(["--config", "d12", "--ranks", str(n)], timeout=120)
    except subprocess.TimeoutExpired:
        check(False, f"plan --ranks {n}: no answer within 120 s")
        continue
    zero3 = [(first, last, numbers) for strategy, first, last, numbers in rows if strategy == "zero3"]
    covered = [r for first, last, _ in zero3 for r in (first, last)]
    contiguous = all(a[1] + 1 == b[0] for a, b in zip(zero3, zero3[1:]))
    check(zero3 and zero3[0][0] == 0 and zero3[-1][1] == n - 1 and contiguous,
          f"plan --ranks {n}: ZeRO-3's rows cover ranks 0..{n - 1} once, in order ({len(zero3)} rows)")
    owners = [numbers for first, last, numbers in zero3 if first < 148]
    idle = [numbers for first, last, numbers in zero3 if first >= 148]
    check(all(numbers[0] > 0 for numbers in owners) and all(numbers[0] == 0 for numbers in idle)
          and len(idle) == (1 if n > 148 else 0), f"plan --ranks {n}: ranks 0..147 own tensors, the rest none")
    check(sum(numbers[0] for numbers in owners) == sum(r[3][0] for r in rows if r[0] == "ddp"),
          f"plan --ranks {n}: ZeRO-3's owned parameters add up to the whole model")
    # ZeRO-1/2: flat ranges of R = ceil(P/N); P from DDP's replica
    P = next(r[3][0] for r in rows if r[0] == "ddp") // 4
    R = -(-P // n)
    zero = {r[0]: r[3] for r in rows if r[0] in ("zero1", "zero2")}
    check(sorted(zero) == ["zero1", "zero2"] and all(z[0] == 4 * n * R and z[4] == 8 * R for z in zero.values())
          and zero["zero1"][2] == 4 * P and zero["zero2"][2] == 4 * R,
          f"plan --ranks {n}: ZeRO-1/2 keep params 4 N R, optim 8 R, grads 4 P (ZeRO-1) or 4 R (ZeRO-2)")
# Ranks that own nothing share a row only when every category is alike, not the totals alone: under qgZ
# with hpZ on pairs, d2's ranks 28..31 (of 32; d2 has 28 tensors) hold the same total and reserved bytes,
# but at two places of a pair (r % 2), in different categories: four rows, alternating.
rows = plan_rows(["--config", "d2", "--ranks", "32", "--quantize-grads", "int8", "--secondary-shard-group", "2"])
idle = [(first, last, numbers) for strategy, first, last, numbers in rows if strategy == "zero3" and first >= 28]
check([(first, last) for first, last, _ in idle] == [(r, r) for r in range(28, 32)]
      and idle[0][2][-2:] == idle[1][2][-2:] and idle[0][2] != idle[1][2]
      and idle[0][2] == idle[2][2] and idle[1][2] == idle[3][2],
      "plan d2 N = 32, qgZ and hpZ 2: ZeRO-3's ranks 28..31, equal totals in different categories, keep a row "
      f"each: {[(first, last) for first, last, _ in idle]}")
# --dims makes room for the run's sequence: above 1024 tokens wpe grows with it, 4 C bytes a position (fp32)
dims = ["--dims", "2,2,64", "--vocab", "256", "--ranks", "1", "--batch", "1"]
params = {}
for T in (1024, 2048):
    r = subprocess.run([f"{BUILD}/plan", *dims, "--seq", str(T), "--tsv"], capture_output=True, text=True)
    params[T] = int(r.stdout.split("\t")[2]) if r.returncode == 0 else -1  # ddp's params, rank 0
check(params[1024] > 0 and params[2048] - params[1024] == 1024 * 64 * 4,
      f"plan --dims 2,2,64 --seq 2048: wpe has 2048 positions ({params[2048] - params[1024]} bytes more than at "
      f"--seq 1024, want {1024 * 64 * 4})")
CHECKS.finish()
