#!/usr/bin/env python3
"""The equivalence invariant, and the memory and traffic formulas, under mpirun.

For DDP, ZeRO-1, ZeRO-2 (train_ddp --zero-stage 1|2), ZeRO-3 and FSDP at N = 1..4, on a model whose sizes are not all
divisible by N (C = 38, maxT = 37, Vp = 128, 3C = 114, 4C = 152):
  - 20 AdamW steps with weight decay give bit for bit the losses, validation losses
    (every 5 steps, the mean over all ranks' rows) and final parameters of their reference,
    build/train_single --as-ranks N with the flags that say where the strategy averages
    (labs/check.py's reference_flags; docs/testing.md), and so does every run below in fp32
    (accumulation, hybrid groups, units, dropout, whole small tensors);
  - resident params/grads/optim bytes equal their formulas exactly, and the
    peaks of params_gathered, grads_gathered and comm_buffers equal theirs;
  - the last step's traffic per collective equals its formula on every rank;
  - ZeRO-3 and FSDP with --prefetch 1, 2 (and 9, capped at L) give bitwise the losses and final
    model of --prefetch 0, the same traffic, and the peaks of a replay of the
    prefetching step (prefetch_peaks); on the --trace timeline some collectives
    overlap compute with --prefetch 1, none with --prefetch 0;
  - with --grad-accum K (K = 2, 4; both --accum-mode values where gradients are
    sharded), 6 steps give train_single's losses and parameters without
    accumulation (losses within 1e-5) and their reference's bits, the same memory and traffic formulas for K
    micro-batches, and the activations of a micro-batch: train_single's with
    --batch B/(N K);
  - FSDP's hybrid sharding, --shard-group M: train_single's losses and model,
    FSDP's memory and traffic at M within a group, and the all-reduces across
    the groups (check_hybrid);
  - with --precision bf16, the losses of train_single --precision bf16 (within
    1e-4 with fp32 gradients; the drift with bf16 gradients is printed), and the
    bf16 memory and traffic formulas (check_precision).
The flags that the equivalence alone cannot see, since every trainer could
ignore them alike, are held to what they mean:
  - --weight-decay WD: one step moves each parameter p0 by exactly -lr*WD*p0
    more than the same step without decay (AdamW's decoupled decay);
  - --seed S: every trainer's step-0 model is init_model's --seed S model, and
    another seed gives another model.
The formulas are written out here from docs/, independently of the C code.
On a GPU (run_gpu_tests.sh passes CHANNELS = 36) every tensor size is a multiple
of 4 floats: cuBLAS picks its kernels by the operands' alignment as well as their
shapes, so a tensor that is 16-byte aligned in one strategy's buffers and only
8-byte aligned in another's would be multiplied by a different kernel, with
different rounding. C = 36 keeps the sizes that N does not divide (maxT = 37,
Vp = 128 at N = 3).
Usage: test_strategies.py BUILD_DIR "MPIRUN ..." [CHANNELS] """
import array
import json
import os
import random
import shlex
import struct
import subprocess
import sys
import time

from testlib import Checks, read_log, run, run_captured, with_flags, write_learnable_shard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "labs"))
from check import reference_flags  # noqa: E402  the one place that knows how each strategy averages

BUILD, MPIRUN = sys.argv[1], shlex.split(sys.argv[2])
QUICK = os.environ.get("SHARDLAB_TEST_QUICK") == "1"  # make test-quick: one N, every strategy
L, NH, C, V, MAXT = 2, 2, int(sys.argv[3]) if len(sys.argv) > 3 else 38, 101, 37
VP = 128
BATCH, SEQ, STEPS = 12, 16, 20


CHECKS = Checks("strategies")
check = CHECKS.check


# ---- the model's tensors, in llm.c order, with their home unit ----
def tensors():
    out = [("wte", VP, C, 0), ("wpe", MAXT, C, 0)]
    kinds = [("ln1w", C, 1), ("ln1b", C, 1), ("qkvw", 3 * C, C), ("qkvb", 3 * C, 1),
             ("attprojw", C, C), ("attprojb", C, 1), ("ln2w", C, 1), ("ln2b", C, 1),
             ("fcw", 4 * C, C), ("fcb", 4 * C, 1), ("fcprojw", C, 4 * C), ("fcprojb", C, 1)]
    per_layer = {}
    for name, rows, cols in kinds:
        for l in range(L):
            per_layer[(l, name)] = (f"h{l}.{name}", rows, cols, 1 + l)
    for l in range(L):
        for name, _, _ in kinds:
            out.append(per_layer[(l, name)])
    out += [("lnfw", C, 1, L + 1), ("lnfb", C, 1, L + 1)]
    return out


T = tensors()
P = sum(r * c for _, r, c, _ in T)


def block_units(sizes):
    """The tensors each unit reads, with the blocks grouped into units of sizes[g] consecutive blocks (ZeRO-3's and
    FSDP's --unit-blocks, --wrap-min-params; one each by default): the embedding, the groups, the head (which
    reads the tied wte too)."""
    group = [g for g, k in enumerate(sizes) for _ in range(k)]  # block l's group
    return [[i for i, t in enumerate(T) if t[3] == 0]] + \
        [[i for i, t in enumerate(T) if 1 <= t[3] <= L and group[t[3] - 1] == g] for g in range(len(sizes))] + \
        [[i for i, t in enumerate(T) if t[3] == L + 1] + [0]]


UNITS = block_units([1] * L)  # ZeRO-3's and FSDP's units; check_units regroups them


def taken_as_kept(i):
    """Whether the ops take tensor i as the run keeps it (a bf16 run reads it in bf16 and adds into its bf16
    gradient itself): a block's four matrices (the products' weights), wte (the head's weight, the lookup's
    table) and wpe."""
    return T[i][0].split(".")[-1] in ("qkvw", "attprojw", "fcw", "fcprojw", "wte", "wpe")
numel = [r * c for _, r, c, _ in T]


def home_unit(i):
    """The unit whose backward finishes tensor i's gradient: the first that reads it (wte: unit 0)."""
    return min(u for u, U in enumerate(UNITS) if i in U)


def last_unit(i):
    """The last unit whose forward reads tensor i (wte: the head)."""
    return max(u for u, U in enumerate(UNITS) if i in U)


def released_after(i, u, direction):
    """kit/unit_buffers.h: a tensor gathered for unit u is freed after u's forward (+1) when no later unit reads it
    and u is not the last (whose backward comes next), after u's backward (-1) in its home unit."""
    if direction > 0:
        return last_unit(i) == u and u + 1 < len(UNITS)
    return home_unit(i) == u


def at_home(u):
    """The tensors whose gradients unit u's backward finishes, reduced after it."""
    return [i for i in UNITS[u] if home_unit(i) == u]


def gathered_by(u, direction):
    """The tensors unit u's gather moves in a training step's forward (+1) or backward (-1): those the pass does
    not hold already (released_after): the forward's head not wte, gathered at unit 0; the backward's head
    nothing, kept from its forward; unit 0 not wte, kept since."""
    if direction > 0:
        return at_home(u)
    return [] if u == len(UNITS) - 1 else [i for i in UNITS[u] if last_unit(i) == u]


def pad(i, n):
    rows, cols = T[i][1], T[i][2]
    return -(-rows // n) * n * cols


def ring(op, count, rank, n, root=0, size=4):
    """Bytes (sent, recv) of one collective of `count` elements of `size` bytes, docs/communication.md."""
    s = size * count
    if n == 1:
        return 0, 0
    if op == "all_reduce":
        return 2 * (n - 1) * s // n, 2 * (n - 1) * s // n
    if op in ("reduce_scatter", "all_gather"):
        return (n - 1) * s // n, (n - 1) * s // n
    if op == "broadcast":
        return (0 if rank == (root - 1) % n else s), (0 if rank == root else s)
    if op == "reduce":
        return (0 if rank == root else s), (0 if rank == (root + 1) % n else s)


def zero3_owners(n):
    order = sorted(range(len(T)), key=lambda i: (-numel[i], i))
    load, owner = [0] * n, [0] * len(T)
    for i in order:
        r = min(range(n), key=lambda q: (load[q], q))
        owner[i] = r
        load[r] += numel[i]
    return owner


def prefetch_peaks(strategy, n, rank, reshard, prefetch, accum, mode):
    """Peaks of params_gathered, grads_gathered and comm_buffers for ZeRO-3 and FSDP with --prefetch D >= 1,
    replaying a step as docs/fsdp.md and docs/zero3.md describe it: before unit u runs, its gather and those
    of the next D units (in the pass's direction; D at most L, so that the head and unit 0, which share wte,
    never overlap) are started, and u's is waited for; after unit u's backward the reduce of the gradients at
    home there starts and unit u+1's is waited for (unit 0's at the end of the micro-batch); what a pass is
    done with is released (released_after: the head into its backward, wte from unit 0 to unit 0). A gather allocates its buffers at its start
    (ZeRO-3: the full tensor; FSDP: send and receive buffers) and FSDP the full tensors when it is waited for;
    a reduce keeps its full gradients until it is waited for."""
    U, D = len(UNITS), min(prefetch, len(UNITS) - 2)
    owner = zero3_owners(n) if strategy == "zero3" else None
    size = (lambda i: numel[i]) if strategy == "zero3" else (lambda i: pad(i, n))
    state = ["sharded"] * len(T)
    used = {"params_gathered": 0, "grads_gathered": 0, "comm_buffers": 0}
    peaks = dict(used)
    gathers, reduces, grads = {}, {}, set()

    def add(cat, b):
        used[cat] += b
        peaks[cat] = max(peaks[cat], used[cat])

    def start(u):
        fetch = [i for i in UNITS[u] if state[i] == "sharded"]
        if not fetch:
            return
        for i in fetch:
            state[i] = "gathering"
            if strategy == "zero3" and owner[i] != rank:
                add("params_gathered", 4 * numel[i])
        buffers = 4 * sum(pad(i, n) for i in fetch) // n * (n + 1) if strategy == "fsdp" else 0
        add("comm_buffers", buffers)
        gathers[u] = (fetch, buffers)

    def finish(u):
        fetch, buffers = gathers.pop(u, ([], 0))
        for i in fetch:
            state[i] = "gathered"
            if strategy == "fsdp":
                add("params_gathered", 4 * pad(i, n))
        add("comm_buffers", -buffers)

    def gather(u, direction):
        for v in [u] + [u + direction * k for k in range(1, D + 1)]:
            if 0 <= v < U:
                start(v)
        finish(u)

    def release(u, direction):
        for i in UNITS[u]:
            if state[i] == "gathered" and released_after(i, u, direction):
                state[i] = "sharded"
                if strategy == "fsdp" or owner[i] != rank:
                    add("params_gathered", -4 * size(i))

    def start_reduce(u):
        if strategy == "fsdp":
            b = 4 * sum(pad(i, n) for i in UNITS[u] if home_unit(i) == u) // n * (n + 1)
            add("comm_buffers", b)
            reduces[u] = b
        else:
            reduces[u] = 0

    def finish_reduce(u):
        if u not in reduces:
            return
        add("comm_buffers", -reduces.pop(u))
        for i in (i for i in UNITS[u] if home_unit(i) == u):
            grads.discard(i)
            add("grads_gathered", -4 * size(i))

    for micro in range(accum):
        last = micro == accum - 1
        for u in range(U):
            gather(u, +1)
            if reshard:
                release(u, +1)
        for u in reversed(range(U)):
            gather(u, -1)
            for i in UNITS[u]:
                if i not in grads:
                    grads.add(i)
                    add("grads_gathered", 4 * size(i))
            if last or mode == "sync-each":
                start_reduce(u)
                if u + 1 < U:
                    finish_reduce(u + 1)
                if u == 0 and not last:
                    finish_reduce(0)
            release(u, -1)
    finish_reduce(0)
    return peaks


def expected(strategy, n, rank, reshard, accum=1, mode="sync-each", prefetch=0, precision="fp32", reduce=None):
    """(memory {category: (current, peak)}, traffic {op: (calls, elements, sent, recv)}) of a step of `accum`
    micro-batches. Every micro-batch's forward and backward gather again; its gradients are reduced each time
    (ZeRO-2, ZeRO-3, FSDP in sync-each), or added up and reduced once (DDP, ZeRO-1, and no-sync, which keeps
    every full-size gradient until the last micro-batch).
    --precision bf16 (docs/precision.md): parameters are pb = 2 bytes where they are kept and moved, gradients
    gb = 2 (--reduce-dtype bf16) or 4 bytes; an fp32 master (4 bytes per kept element) joins the optimizer state;
    while unit u runs, the bf16 parameters its ops read in fp32 are widened into an fp32 copy (params_gathered,
    4 F(u) bytes, F(u) the elements of the tensors it reads less those its ops take as kept: the products'
    weights and the embedding's tables, so none in unit 0) and, with bf16 gradients, its
    backward writes an fp32 copy of those gradients (grads_gathered, 4 F(u); with fp32 parameters, of all it
    reads, 4 W(u)). Checked with --prefetch 0 and one micro-batch."""
    mem, calls, gathers, reduces = {}, [], [], []  # (op, count, root): once per step, per micro-batch, per reduce
    keep_whole = accum > 1 and mode == "no-sync"
    pb = 2 if precision == "bf16" else 4
    gb = 2 if (reduce or precision) == "bf16" else 4
    master = 4 if precision == "bf16" else 0
    F = [sum(numel[i] for i in U if not (pb == 2 and taken_as_kept(i))) for U in UNITS]
    widened_params = [4 * f if pb == 2 else 0 for f in F]
    widened_grads = [4 * f if gb == 2 else 0 for f in F]
    if strategy == "ddp":
        mem = {"params": pb * P, "grads": gb * P, "optim": (8 + master) * P}
        peaks = {"params_gathered": max(widened_params), "grads_gathered": max(widened_grads), "comm_buffers": 0}
        for u in range(L + 2):
            home = sum(numel[i] for i in range(len(T)) if T[i][3] == u)
            calls.append(("all_reduce", home, 0, gb))
    elif strategy in ("zero1", "zero2"):
        # flat ranges of S = ceil(P/N) elements in llm.c's order (docs/zero12.md)
        S = -(-P // n)
        mem = {"params": pb * n * S, "grads": gb * (P if strategy == "zero1" else S), "optim": (8 + master) * S}
        grads_gathered = gb * P if strategy == "zero2" and keep_whole else max(widened_grads)
        if strategy == "zero2" and not keep_whole:
            # during unit u's backward: full-size gradients of the tensors unit u
            # reads, of unit u+1's bucket still in flight, and of wte since the head
            alive, home = set(), lambda u: {i for i in range(len(T)) if T[i][3] == u}
            for u in reversed(range(L + 2)):
                alive |= set(UNITS[u])
                grads_gathered = max(grads_gathered, gb * sum(numel[i] for i in alive) + widened_grads[u])
                alive -= home(u + 1)
        peaks = {"params_gathered": max(widened_params), "grads_gathered": grads_gathered, "comm_buffers": pb * S}
        offset = [sum(numel[:i]) for i in range(len(T))]
        for u in reversed(range(L + 2)):  # each bucket: one reduce per piece of a tensor in one range
            for i in (i for i in range(len(T)) if T[i][3] == u):
                for q in range(offset[i] // S, (offset[i] + numel[i] - 1) // S + 1):
                    piece = min(offset[i] + numel[i], (q + 1) * S) - max(offset[i], q * S)
                    (reduces if strategy == "zero2" else calls).append(("reduce", piece, q, gb))
        calls.append(("all_gather", n * S, 0, pb))
    else:  # ZeRO-3 and FSDP: a step replayed, each tensor gathered while a unit that reads it runs, and kept
        # from one pass's unit to the next while released_after says so (wte from unit 0 to unit 0)
        zero3 = strategy == "zero3"
        owner = zero3_owners(n) if zero3 else None
        held = [numel[i] if owner[i] == rank else 0 for i in range(len(T))] if zero3 else \
            [pad(i, n) // n for i in range(len(T))]
        mem = {"params": pb * sum(held), "grads": gb * sum(held), "optim": (8 + master) * sum(held)}
        full = (lambda i: numel[i]) if zero3 else (lambda i: pad(i, n))
        lent = (lambda i: 0 if owner[i] == rank else numel[i]) if zero3 else full  # a gathered copy's elements
        gathered, alive, peaks = set(), set(), {"params_gathered": 0, "grads_gathered": 0, "comm_buffers": 0}

        def gather(u, direction):
            missing = [i for i in UNITS[u] if i not in gathered]
            if missing and zero3:
                gathers.extend(("broadcast", numel[i], owner[i], pb) for i in missing)
            elif missing:
                gathers.append(("all_gather", sum(pad(i, n) for i in missing), 0, pb))
                peaks["comm_buffers"] = max(peaks["comm_buffers"], pb * (n + 1) * sum(pad(i, n) for i in missing) // n)
            gathered.update(missing)
            peaks["params_gathered"] = max(peaks["params_gathered"],
                                           pb * sum(lent(i) for i in gathered) + widened_params[u])

        for u in range(len(UNITS)):  # forward
            gather(u, +1)
            gathered -= {i for i in UNITS[u] if reshard and released_after(i, u, +1)}
        for u in reversed(range(len(UNITS))):  # backward
            gather(u, -1)
            alive |= set(UNITS[u])
            at_home = [i for i in UNITS[u] if home_unit(i) == u]
            peaks["grads_gathered"] = max(peaks["grads_gathered"], gb * sum(full(i) for i in alive) + widened_grads[u])
            if zero3:
                reduces.extend(("reduce", numel[i], owner[i], gb) for i in at_home)
            else:
                reduces.append(("reduce_scatter", sum(pad(i, n) for i in at_home), 0, gb))
                peaks["comm_buffers"] = max(peaks["comm_buffers"], gb * (n + 1) * sum(pad(i, n) for i in at_home) // n)
            alive -= set(at_home)
            gathered -= set(at_home)
        if keep_whole:
            peaks["grads_gathered"] = gb * sum(full(i) for i in range(len(T))) + max(widened_grads)
    calls += accum * gathers + (1 if keep_whole else accum) * reduces
    if prefetch > 0:  # the same collectives, started earlier: more is held at once
        peaks = prefetch_peaks(strategy, n, rank, reshard, prefetch, accum, mode)
    traffic = {}
    for op, count, root, size in calls:
        if count == 0:
            continue
        sent, recv = ring(op, count, rank, n, root, size)
        c = traffic.setdefault(op, [0, 0, 0, 0])
        c[0] += 1; c[1] += count; c[2] += sent; c[3] += recv
    return mem, peaks, traffic


def read_params(path):
    a = array.array("f")
    a.frombytes(open(path, "rb").read()[1024:])
    return a


def strategy_command(strategy, n, extra):
    """The launch and trainer for one of the five strategies (ZeRO-1/2 are train_ddp's stages)."""
    trainer = strategy
    if strategy in ("zero1", "zero2"):
        trainer, extra = "ddp", ["--zero-stage", strategy[-1], *extra]
    return [*MPIRUN, "-np", str(n), f"{BUILD}/train_{trainer}", *extra]


def run_logged(tag, command, log, out):
    """Runs a trainer with --log and --out-model: its step lines, summary and final parameters, or None."""
    rc = run([*command, "--log", log, "--out-model", out])
    check(rc == 0, f"{tag}: runs")
    if rc != 0:
        return None
    steps, summary = read_log(log)
    return steps, summary, read_params(out)


def worst_loss_diff(steps, ref_steps):
    return max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(steps, ref_steps))


# Flags a strategy takes that train_single does not (each with a value); --accum-mode reaches the reference
# through reference_flags, which knows whether the strategy heeds it.
STRATEGY_ONLY = ("--prefetch", "--reshard-after-forward", "--shard-group", "--shard-min-numel", "--unit-blocks",
                 "--wrap-min-params", "--accum-mode")
REFERENCES = {}  # train_single's command -> its (steps, summary, params): one run serves every check that asks


def reference_run(common, strategy, n, flags):
    """train_single --as-ranks N, the bitwise reference of `strategy` at `n` ranks with `flags` (reference_flags)."""
    single, i = [], 0
    while i < len(flags):
        width = 2 if flags[i] in STRATEGY_ONLY or flags[i] in ("--grad-accum", "--dropout", "--ema", "--precision",
                                                                 "--reduce-dtype", "--grad-clip", "--out-model-ema") else 1
        if flags[i] not in STRATEGY_ONLY:
            single += flags[i:i + width]
        i += width
    # under the launcher, as the strategy's ranks are: the same threads (run/threads.h), so the same sums
    command = [*MPIRUN, "-np", "1", f"{BUILD}/train_single", *common, *single, *reference_flags(strategy, n, flags)]
    if tuple(command) not in REFERENCES:
        name = f"ref{len(REFERENCES)}"
        REFERENCES[tuple(command)] = run_logged(" ".join(command[command.index("-np") + 2:]).replace(BUILD + "/", ""),
                                                command,
                                                os.path.join(TMP, f"{name}.jsonl"), os.path.join(TMP, f"{name}.bin"))
    return REFERENCES[tuple(command)]


def check_matches_reference(tag, result, common, strategy, n, flags):
    """A run's losses, validation losses and final parameters: bit for bit those of its reference, train_single
    --as-ranks N (docs/testing.md), on any CPU, BLAS kernel and thread count."""
    ref = reference_run(common, strategy, n, flags)
    if ref is None or result is None:
        return
    steps, _, params = result
    loss = lambda run: [(x["loss"], x["val_loss"]) for x in run]
    differ = sum(1 for a, b in zip(params, ref[2]) if a != b)
    worst = max((abs(a - b) for a, b in zip(params, ref[2])), default=0)
    check(loss(steps) == loss(ref[0]) and len(params) == len(ref[2]) and differ == 0,
          f"{tag}: bitwise the losses and model of train_single {' '.join(reference_flags(strategy, n, flags))}"
          + ("" if differ == 0 else f" ({differ} parameters differ, by up to {worst:.2e})")
          + ("" if loss(steps) == loss(ref[0]) else f" (losses {loss(steps)[:2]} against {loss(ref[0])[:2]})"))


def across_groups(n, S, rank, accum, mode, size=4):
    """[calls, elements, sent, recv] of hybrid FSDP's all-reduces across the N/S groups in a step (docs/fsdp.md):
    one per unit of its slices of the gradients at home there, per micro-batch in sync-each."""
    groups, across = n // S, [0, 0, 0, 0]
    for u in list(range(len(UNITS))) * (accum if mode == "sync-each" else 1):
        count = sum(pad(i, S) for i in UNITS[u] if home_unit(i) == u) // S
        sent, recv = ring("all_reduce", count, rank // S, groups, size=size)
        if groups > 1:
            across = [across[0] + 1, across[1] + count, across[2] + sent, across[3] + recv]
    return across


def check_rank_formulas(tag, summary, strategy, n, reshard, accum=1, mode="sync-each", prefetch=0, precision="fp32",
                        reduce=None, shard_group=None):
    """Every rank's memory and last-step traffic against expected(). With shard_group S (hybrid FSDP), each rank is an
    FSDP rank of S within its group, plus the all-reduces across the groups (also in comm_across_last_step)."""
    S = shard_group or n
    for rank_info in summary["ranks"]:
        r = rank_info["rank"]
        mem, peaks, traffic = expected(strategy, S, r % S, reshard, accum, mode, prefetch, precision, reduce)
        across = across_groups(n, S, r, accum, mode, 2 if (reduce or precision) == "bf16" else 4)
        got = [rank_info["comm_across_last_step"]["all_reduce"][k] for k in ("calls", "elements", "bytes_sent",
                                                                                "bytes_recv")]
        check(got == across, f"{tag} rank {r}: across the groups {got} == {across}")
        traffic["all_reduce"] = [a + b for a, b in zip(traffic.get("all_reduce", [0, 0, 0, 0]), across)]
        for cat, want in mem.items():
            got = rank_info["mem"][cat]
            check(got["current"] == want and got["peak"] == want,
                  f"{tag} rank {r}: {cat} current/peak {got['current']}/{got['peak']} == {want}")
        for cat, want in peaks.items():
            got = rank_info["mem"][cat]["peak"]
            check(got == want, f"{tag} rank {r}: {cat} peak {got} == {want}")
        last = rank_info["comm_last_step"]
        for op, counter in last.items():
            want = traffic.get(op, [0, 0, 0, 0])
            got = [counter["calls"], counter["elements"], counter["bytes_sent"], counter["bytes_recv"]]
            check(got == want, f"{tag} rank {r}: {op} calls/elements/sent/recv {got} == {want}")


def check_accumulation(tmp, model, data):
    batch = 48  # divisible by N * K for N = 1..4, K = 2, 4
    common = ["--model", model, "--data", data, "--seq", str(SEQ), "--batch", str(batch), "--steps", "6",
              "--lr", "1e-3", "--weight-decay", "0.1", "--quiet"]
    ref_log, ref_model = os.path.join(tmp, "acc_single.jsonl"), os.path.join(tmp, "acc_single.bin")
    check(run([f"{BUILD}/train_single", *common, "--log", ref_log, "--out-model", ref_model]) == 0,
          "train_single --batch 48 runs")
    ref_steps, _ = read_log(ref_log)
    ref_params = read_params(ref_model)
    activations = {}  # rows per micro-batch -> train_single's activation bytes with that batch
    for rows in sorted({batch // (n * k) for n in (1, 2, 3, 4) for k in (2, 4)}):
        log = os.path.join(tmp, f"act{rows}.jsonl")
        check(run([f"{BUILD}/train_single", *common[:6], "--batch", str(rows), "--steps", "1",
                   "--quiet", "--log", log]) == 0, f"train_single --batch {rows} runs")
        activations[rows] = read_log(log)[1]["ranks"][0]["mem"]["activations"]["peak"]
    check(activations[3] < activations[6] < activations[12], f"activations grow with the batch {activations}")
    runs = []  # (strategy, N, K, mode, prefetch, reshard)
    for strategy in ("ddp", "zero1", "zero2", "zero3", "fsdp"):
        modes = ("sync-each", "no-sync") if strategy in ("zero2", "zero3", "fsdp") else ("sync-each",)
        # N = 2 and 4 with K = 2, N = 3 with K = 4 (and N = 1, K = 4, once): each K where N divides nothing too
        shapes = ((2, 2), (3, 4), (4, 2)) + (((1, 4),) if strategy == "zero2" else ())
        runs += [(strategy, n, accum, mode, 1 if accum == 4 and strategy in ("zero3", "fsdp") else 0, 1)
                 for n, accum in shapes for mode in modes]
    # FSDP's unsharded forward-to-backward, and wider prefetch windows
    runs += [("fsdp", 3, 2, "no-sync", 2, 0), ("fsdp", 2, 4, "sync-each", 1, 0), ("zero3", 4, 4, "sync-each", 2, 1)]
    for strategy, n, accum, mode, prefetch, reshard in runs:
        flags = ["--grad-accum", str(accum), "--accum-mode", mode]
        if strategy in ("zero3", "fsdp"):
            flags += ["--prefetch", str(prefetch)]
        if not reshard:
            flags += ["--reshard-after-forward", "0"]
        tag = " ".join([strategy, f"N={n}", *flags])
        result = run_logged(tag, [*strategy_command(strategy, n, flags), *common],
                            os.path.join(tmp, "acc.jsonl"), os.path.join(tmp, "acc.bin"))
        if result is None:
            continue
        steps, summary, params = result
        worst = worst_loss_diff(steps, ref_steps)
        check(len(steps) == 6 and worst <= 1e-5,
              f"{tag}: the losses of train_single without accumulation (worst relative difference {worst:.2e})")
        check_matches_reference(tag, result, common, strategy, n, flags)
        check(summary["config"]["grad_accum"] == accum and summary["config"]["accum_mode"] == mode,
              f"{tag}: the summary names K and the mode")
        got = {r["mem"]["activations"]["peak"] for r in summary["ranks"]}
        want = activations[batch // (n * accum)]
        check(got == {want}, f"{tag}: activations {got} are a micro-batch's, {want}")
        check_rank_formulas(tag, summary, strategy, n, reshard, accum, mode, prefetch)
    for launch, bad in (([], ["--batch", "12", "--grad-accum", "5"]), ([*MPIRUN, "-np", "4"], ["--batch", "8", "--grad-accum", "4"])):
        trainer = "train_single" if not launch else "train_fsdp"
        r = run_captured([*launch, f"{BUILD}/{trainer}", *common[:6], *bad, "--steps", "1"], timeout=120)
        check(r.returncode != 0 and "do not split into" in r.stdout + r.stderr,
              f"{trainer} {' '.join(bad)}: refused, naming the flag ({(r.stdout + r.stderr).strip()[-160:]!r})")
    r = run_captured([f"{BUILD}/train_single", *common[:4], "--accum-mode", "later"])
    check(r.returncode != 0 and "--accum-mode: give sync-each or no-sync" in r.stdout + r.stderr,
          "--accum-mode later is refused")


def check_precision(tmp, common):
    """--precision bf16 for every strategy (each dtype combination at N = 2 and 3, one of them at N = 1 and at 4),
    against train_single --precision bf16 with the same --reduce-dtype. With --reduce-dtype fp32 the gradients stay fp32 from the backward through the reduce, so a
    strategy differs from the single rank only in the order of fp32 sums, as an fp32 run does; but a master
    weight one fp32 step away can round to the next bf16 value (2^-8 to 2^-7 away), which the following steps carry:
    losses within 1e-4. With bf16 gradients each rank rounds its partial gradients and the reduce rounds each
    sum, unlike the single rank: the drift is printed and held under 2e-4 (with bf16 parameters, and with fp32
    parameters and bf16 gradients too). Memory and traffic follow expected()'s formulas for the dtypes exactly;
    all-gathers and broadcasts move half the bytes of an fp32 run. And each is bit for bit its reference, train_single
    --as-ranks N in the same dtypes (the reductions round each partial sum in rank order, as the reference does)."""
    combos = (("bf16", "fp32"), ("bf16", "bf16"), ("fp32", "bf16"))  # (--precision, --reduce-dtype)
    references = {}
    for precision, reduce in combos:
        flags = ["--precision", precision, "--reduce-dtype", reduce]
        log = os.path.join(tmp, f"single_{precision}_{reduce}.jsonl")
        check(run([f"{BUILD}/train_single", *common, *flags, "--log", log]) == 0, f"train_single {' '.join(flags)} runs")
        references[(precision, reduce)] = read_log(log)[0]
    drift = {}
    for k, strategy in enumerate(("ddp", "zero1", "zero2", "zero3", "fsdp")):
        # every combination at N = 2 and 3; one at N = 4 and one at N = 1, a strategy's after another's
        for n, precision, reduce in [(n, *c) for n in (2, 3) for c in combos] + [(4, *combos[k % 3]),
                                                                                  (1, *combos[(k + 1) % 3])]:
                flags = ["--precision", precision, "--reduce-dtype", reduce]
                if strategy in ("zero3", "fsdp"):
                    flags += ["--prefetch", "0"]
                tag = f"{strategy} N={n} {' '.join(flags)}"
                result = run_logged(tag, [*strategy_command(strategy, n, flags), *common],
                                    os.path.join(tmp, "bf16.jsonl"), os.path.join(tmp, "bf16.bin"))
                if result is None:
                    continue
                steps, summary, _ = result
                worst = worst_loss_diff(steps, references[(precision, reduce)])
                if reduce == "fp32":
                    check(len(steps) == STEPS and worst <= 1e-4,
                          f"{tag}: losses match train_single's bf16 run (worst relative diff {worst:.2e})")
                else:
                    drift[(strategy, n, precision)] = worst
                    check(len(steps) == STEPS and worst <= 2e-4, f"{tag}: drift from train_single {worst:.2e} <= 2e-4")
                # and bit for bit its reference: the same roundings, at the same places, in the same order
                check_matches_reference(tag, result, common, strategy, n, flags)
                check(summary["config"]["precision"] == precision and summary["config"]["reduce_dtype"] == reduce,
                      f"{tag}: the summary names the dtypes")
                check_rank_formulas(tag, summary, strategy, n, 1, precision=precision, reduce=reduce)
    print("bf16 gradients, worst relative loss drift from train_single over", STEPS, "steps:",
          ", ".join(f"{s} N={n} ({p} parameters) {d:.1e}" for (s, n, p), d in sorted(drift.items())))
    for strategy, op in (("zero3", "broadcast"), ("fsdp", "all_gather")):
        moved = {}
        for precision in ("fp32", "bf16"):
            log = os.path.join(tmp, f"half_{strategy}_{precision}.jsonl")
            check(run([*strategy_command(strategy, 4, ["--prefetch", "0", "--precision", precision]), *common,
                       "--log", log]) == 0, f"{strategy} N=4 --precision {precision} runs")
            moved[precision] = [r["comm_last_step"][op]["bytes_sent"] for r in read_log(log)[1]["ranks"]]
        check(moved["bf16"] == [b // 2 for b in moved["fp32"]] and sum(moved["fp32"]) > 0,
              f"{strategy} N=4: a bf16 {op} sends half the bytes of an fp32 one ({moved})")
    for flag, value in (("--precision", "fp16"), ("--reduce-dtype", "half")):
        r = run_captured([f"{BUILD}/train_single", *common[:4], flag, value])
        check(r.returncode != 0 and f"{flag}: give fp32 or bf16" in r.stdout + r.stderr, f"{flag} {value} is refused")


def check_hybrid(tmp, common, ref_steps, ref_params):
    """FSDP with --shard-group M (hybrid sharding, docs/fsdp.md) at (N, M) = (4, 2), (4, 1), (4, 4), (2, 1): the
    losses and final parameters of train_single (1e-5); each rank's memory and within-group traffic are plain
    FSDP's at M ranks (its rank in its group of M), and the traffic across groups (comm_across_last_step) is one
    all-reduce per unit of the unit's reduced slices among the N/M replicas (per micro-batch in sync-each);
    M = N is plain FSDP bitwise (losses, model, bytes); M = 1 keeps DDP's params, grads and optimizer bytes.
    Also with --grad-accum 2 in both modes (N = 2, S = 1), and in bf16 (losses against train_single's bf16 run,
    1e-4; the first step's gradient norm against plain FSDP's bf16 run, which differs only in the order of the
    gradient sums).
    --grad-clip's norm counts each slice once."""
    bf16_ref, bf16_ref_model = os.path.join(tmp, "hybrid_single_bf16.jsonl"), os.path.join(tmp, "hybrid_single_bf16.bin")
    check(run([f"{BUILD}/train_single", *common, "--precision", "bf16", "--reduce-dtype", "fp32", "--log", bf16_ref,
               "--out-model", bf16_ref_model]) == 0, "train_single --precision bf16 --reduce-dtype fp32 runs")
    configs = [(n, S, prefetch, 1, "sync-each", "fp32") for n, S in ((4, 2), (4, 1), (4, 4), (2, 1)) for prefetch in (0, 1)]
    # micro-batches: the groups' all-reduce runs with every reduce-scatter; bf16 parameters: half the bytes
    configs += [(2, 1, 0, 2, "sync-each", "fp32"), (2, 1, 0, 2, "no-sync", "fp32"), (4, 2, 0, 1, "sync-each", "bf16")]
    runs = {}
    for n, S, prefetch, accum, mode, precision in configs:
        flags = ["--shard-group", str(S), "--prefetch", str(prefetch), "--grad-accum", str(accum),
                 *(["--accum-mode", mode] if accum > 1 else []), "--precision", precision, "--reduce-dtype", "fp32"]
        tag = f"fsdp N={n} {' '.join(flags)}"
        result = run_logged(tag, strategy_command("fsdp", n, [*flags, *common]), os.path.join(tmp, "hybrid.jsonl"),
                            os.path.join(tmp, "hybrid.bin"))
        if result is None:
            continue
        steps, summary, params = result
        runs[(n, S, prefetch, accum, mode, precision)] = ([x["loss"] for x in steps], params, summary)
        if precision == "fp32":
            check_matches_reference(tag, result, common, "fsdp", n, flags)
        else:
            # bf16 parameters and product operands: a master, or an activation, one fp32 rounding away can
            # round to the neighbouring bf16 value, and the following steps carry that, so the parameters drift
            # from train_single's (whose ranks' rows are one product) and from plain FSDP's (whose gradients sum
            # in another order) by bf16 steps: no count of differing parameters tells a bug from that. The first
            # step does: its parameters and operands are plain FSDP's, and its gradients, fp32 sums of the same
            # four ranks' parts in another order, differ by at most 3 roundings (2^-24 each) of their size, so
            # the norm within 1e-6; the groups' all-reduce summing instead of averaging doubles it.
            worst = worst_loss_diff(steps, read_log(bf16_ref)[0])
            diffs = [abs(a - b) for a, b in zip(params, read_params(bf16_ref_model))]
            norms = []  # a clip no norm reaches: the first step's norm is logged, nothing else changes
            for name, strategy_flags in (("hybrid", flags), ("plain", flags[flags.index("--precision"):])):
                log = os.path.join(tmp, f"bf16_norm_{name}.jsonl")
                ok = run([*strategy_command("fsdp", n, strategy_flags),
                          *with_flags(common, "--steps", "1", "--grad-clip", "1e30"), "--log", log]) == 0
                norms.append(read_log(log)[0][0]["grad_norm"] if ok else 0)
            check(len(steps) == STEPS and worst <= 1e-4 and max(diffs) <= 1e-3 and norms[1]
                  and abs(norms[0] - norms[1]) <= 1e-6 * norms[1],
                  f"{tag}: losses and parameters of train_single's bf16 run (worst loss diff {worst:.2e}, "
                  f"parameters at most {max(diffs):.2e} apart), the first step's gradient norm plain FSDP's at N={n} "
                  f"({norms[0]:.9g}, {norms[1]:.9g})")
        check_rank_formulas(tag, summary, "fsdp", n, True, accum, mode, prefetch, precision, "fp32", shard_group=S)
    plain = run_logged("fsdp N=4 (no --shard-group)", strategy_command("fsdp", 4, common), os.path.join(tmp, "plain.jsonl"),
                       os.path.join(tmp, "plain.bin"))
    if plain and (4, 4, 1, 1, "sync-each", "fp32") in runs:
        losses, params, summary = runs[(4, 4, 1, 1, "sync-each", "fp32")]
        def counts(rank_info):
            return {op: [c[k] for k in ("calls", "elements", "bytes_sent", "bytes_recv")]
                    for op, c in rank_info["comm_last_step"].items()}
        same_bytes = all(counts(a) == counts(b) for a, b in zip(summary["ranks"], plain[1]["ranks"]))
        check(losses == [x["loss"] for x in plain[0]] and list(params) == list(plain[2]) and same_bytes,
              "fsdp N=4 --shard-group 4: bitwise plain FSDP's losses and model, the same bytes")
    if (4, 1, 1, 1, "sync-each", "fp32") in runs:
        ddp_mem = expected("ddp", 4, 0, True)[0]
        got = {cat: runs[(4, 1, 1, 1, "sync-each", "fp32")][2]["ranks"][0]["mem"][cat]["peak"] for cat in ddp_mem}
        check(got == ddp_mem, f"fsdp N=4 --shard-group 1: DDP's params, grads and optimizer bytes {got} == {ddp_mem}")
    norms = {}
    for name, command in (("single", [f"{BUILD}/train_single"]),
                          ("hybrid", strategy_command("fsdp", 4, ["--shard-group", "2"]))):
        log = os.path.join(tmp, f"clip_{name}.jsonl")
        check(run([*command, *common, "--grad-clip", "0.5", "--log", log]) == 0, f"{name} --grad-clip runs")
        norms[name] = [x["grad_norm"] for x in read_log(log)[0]]
    worst = max(abs(a - b) / b for a, b in zip(norms["hybrid"], norms["single"]))
    check(worst <= 1e-5, f"fsdp N=4 --shard-group 2 --grad-clip: train_single's norms (worst {worst:.1e})")
    r = run_captured([*MPIRUN, "-np", "4", f"{BUILD}/train_fsdp", *common, "--shard-group", "3"], timeout=120)
    check(r.returncode != 0 and "--shard-group 3 does not divide the 4 ranks" in r.stdout + r.stderr,
          "--shard-group 3 at N = 4 is refused")


def check_units(tmp, common, ref_steps, ref_params):
    """ZeRO-3 and FSDP with the blocks grouped into units (--unit-blocks J, --wrap-min-params PARAMS; docs/fsdp.md):
    J = 2 = L here, and the size policy at one block's parameters + 1 (both blocks in one unit) and at 1 (a unit
    per block), at N = 2 and 3 with --prefetch 0 and 1, N = 1 and 4 with 1: train_single's losses and final model (1e-5), and the memory
    and traffic formulas of the grouped units (one gather and one reduce per unit). On a model of L = 3 blocks,
    J = 2 (units of 2 + 1 blocks), J = L and a size policy that makes 2 + 1: train_single's losses and model.
    Both flags at once are refused, and so is --unit-blocks for a strategy without units to group."""
    global UNITS
    block = 12 * C * C + 13 * C
    policies = [(["--unit-blocks", "2"], [2]), (["--wrap-min-params", str(block + 1)], [2]),
                (["--wrap-min-params", "1"], [1] * L)]
    try:
        for flags, sizes in policies:
            UNITS = block_units(sizes)
            for strategy in ("zero3", "fsdp"):
                for n, prefetch in ((1, 1), (2, 0), (2, 1), (3, 0), (3, 1), (4, 1)):
                        tag = f"{strategy} N={n} --prefetch {prefetch} {' '.join(flags)}"
                        result = run_logged(tag, strategy_command(strategy, n, [*flags, "--prefetch", str(prefetch),
                                                                                *common]),
                                            os.path.join(tmp, "units.jsonl"), os.path.join(tmp, "units.bin"))
                        if result is None:
                            continue
                        check_matches_reference(tag, result, common, strategy, n, [*flags, "--prefetch", str(prefetch)])
                        check_rank_formulas(tag, result[1], strategy, n, True, prefetch=prefetch)
    finally:
        UNITS = block_units([1] * L)
    deep = os.path.join(tmp, "model_l3.bin")
    check(run([f"{BUILD}/init_model", "--layers", "3", "--heads", str(NH), "--channels", str(C), "--vocab", str(V),
               "--max-seq", str(MAXT), "--out", deep]) == 0, "init_model --layers 3 runs")
    deep_common = ["--model", deep, *common[2:]]
    ref = run_logged("train_single L=3", [f"{BUILD}/train_single", *deep_common], os.path.join(tmp, "single_l3.jsonl"),
                     os.path.join(tmp, "single_l3.bin"))
    for flags in (["--unit-blocks", "2"], ["--unit-blocks", "3"], ["--wrap-min-params", str(block + 1)]):
        for strategy in ("zero3", "fsdp"):
            tag = f"{strategy} N=3 L=3 {' '.join(flags)}"
            result = run_logged(tag, strategy_command(strategy, 3, [*flags, *deep_common]),
                                os.path.join(tmp, "units_l3.jsonl"), os.path.join(tmp, "units_l3.bin"))
            check_matches_reference(tag, result, deep_common, strategy, 3, flags)
    r = run_captured([*MPIRUN, "-np", "2", f"{BUILD}/train_fsdp", *common, "--unit-blocks", "2", "--wrap-min-params",
                        "5"], timeout=120)
    check(r.returncode != 0 and "--unit-blocks and --wrap-min-params both set the units" in r.stdout + r.stderr,
          "--unit-blocks with --wrap-min-params is refused")
    r = run_captured([*MPIRUN, "-np", "2", f"{BUILD}/train_ddp", *common, "--unit-blocks", "2"], timeout=120)
    check(r.returncode != 0 and "unknown flag '--unit-blocks'" in r.stdout + r.stderr,
          "train_ddp refuses --unit-blocks (its buckets are the units of one block)")


def f32(x):
    """x rounded to the nearest float32, as C's float arithmetic rounds each operation."""
    return struct.unpack("f", struct.pack("f", x))[0]


def check_ema(tmp, model, common, ref_steps):
    """--ema DECAY (docs/training.md): the moving average ema = DECAY ema + (1 - DECAY) w, started at the initial
    weights. Every strategy (and train_single) at N = 3 averages every element it keeps, bit for bit by that
    formula in float32: after one step, of the initial weights w0 and its own w1 (--out-model, --out-model-ema);
    after two, of that EMA and its own w2. With --ema 0.9 --eval-ema, train_single trains the very same model as
    without (losses, validation losses bitwise) and its EMA differs from its weights; every strategy at N = 1..4
    writes train_single's EMA within the weights' own 1e-5 (the final weights differ by a few 1e-6, as sums run
    in other orders), validates it to train_single's val_loss_ema (1e-5), and keeps 4 bytes per parameter it
    keeps (half its fp32 AdamW state) in the `ema` category, none without --ema. A bf16 run averages the fp32
    master: its checkpoint keeps values finer than bf16, its --out-model-ema the EMA rounded to bf16, as
    --out-model the working copy. --eval-ema and --out-model-ema without --ema are refused."""
    decay = f32(0.9)

    def average(ema, weights):
        return [f32(f32(decay * a) + f32(f32(1 - decay) * b)) for a, b in zip(ema, weights)]

    w0 = read_params(model)
    for strategy in ("single", "ddp", "zero1", "zero2", "zero3", "fsdp"):
        launch = [f"{BUILD}/train_single"] if strategy == "single" else strategy_command(strategy, 3, [])
        outputs = {}
        for steps in (1, 2):
            short = ["--model", model, *common[2:]]
            short[short.index("--steps") + 1] = str(steps)
            w, e = os.path.join(tmp, f"ema_w{steps}.bin"), os.path.join(tmp, f"ema_e{steps}.bin")
            ok = run([*launch, *short, "--ema", "0.9", "--out-model", w, "--out-model-ema", e]) == 0
            outputs[steps] = (read_params(w), read_params(e)) if ok else ([], [1.0])
        (w1, e1), (w2, e2) = outputs[1], outputs[2]
        check(list(e1) == average(w0, w1) and list(e2) == average(e1, w2) and list(e2) != list(w2),
              f"{strategy}{'' if strategy == 'single' else ' N=3'}: the EMA of one step is 0.9 w0 + 0.1 w1, of two "
              "0.9 ema1 + 0.1 w2, bit for bit in float32")
    flags = ["--ema", "0.9", "--eval-ema"]
    ref = run_logged("train_single --ema 0.9 --eval-ema", [f"{BUILD}/train_single", *common, *flags,
                                                            "--out-model-ema", os.path.join(tmp, "single_ema_ema.bin")],
                     os.path.join(tmp, "single_ema.jsonl"), os.path.join(tmp, "single_ema.bin"))
    if ref is None:
        return
    ref_ema = read_params(os.path.join(tmp, "single_ema_ema.bin"))
    same = [(a["loss"], a["val_loss"]) for a in ref[0]] == [(b["loss"], b["val_loss"]) for b in ref_steps]
    check(same, "train_single --ema trains the same model: losses and validation losses bitwise those without")
    val = [(a["val_loss"], a["val_loss_ema"]) for a in ref[0] if a["val_loss"] is not None]
    check(len(val) == STEPS // 5 and all(a != b for a, b in val) and ref_ema != ref[2],
          f"the EMA is not the weights: its validation losses {[b for _, b in val]} against {[a for a, _ in val]}")
    for strategy in ("ddp", "zero1", "zero2", "zero3", "fsdp"):
        for n in (1, 2, 3, 4):
            tag = f"{strategy} N={n} --ema 0.9"
            out_ema = os.path.join(tmp, "strategy_ema_ema.bin")
            result = run_logged(tag, strategy_command(strategy, n, [*flags, "--out-model-ema", out_ema, *common]),
                                os.path.join(tmp, "strategy_ema.jsonl"), os.path.join(tmp, "strategy_ema.bin"))
            if result is None:
                continue
            steps, summary, _ = result
            ediff = max(abs(a - b) for a, b in zip(read_params(out_ema), ref_ema))
            vals = [(a["val_loss_ema"], b["val_loss_ema"]) for a, b in zip(steps, ref[0]) if b["val_loss_ema"] is not None]
            worst = max(abs(a - b) / abs(b) for a, b in vals)
            check(ediff <= 1e-5 and len(vals) == STEPS // 5 and worst <= 1e-5,
                  f"{tag}: train_single's EMA (max diff {ediff:.1e}) and EMA validation losses (worst {worst:.1e})")
            ref_out_ema = os.path.join(tmp, f"reference_ema_{reference_flags(strategy, n, [])[-1]}{n}.bin")
            bitwise = reference_run(common, strategy, n, [*flags, "--out-model-ema", ref_out_ema])
            if bitwise:
                check([x.get("val_loss_ema") for x in steps] == [x.get("val_loss_ema") for x in bitwise[0]]
                      and open(out_ema, "rb").read() == open(ref_out_ema, "rb").read(),
                      f"{tag}: bitwise its reference's EMA and EMA validation losses")
                check_matches_reference(tag, result, common, strategy, n, [*flags, "--out-model-ema", ref_out_ema])
            for rank in summary["ranks"]:
                kept = expected(strategy, n, rank["rank"], True)[0]["optim"] // 2
                got = rank["mem"]["ema"]
                check(got["current"] == kept and got["peak"] == kept,
                      f"{tag} rank {rank['rank']}: ema {got['current']}/{got['peak']} == 4 bytes per kept parameter {kept}")
    plain = read_log(os.path.join(tmp, "single.jsonl"))[1]
    check(all(r["mem"]["ema"]["peak"] == 0 for r in plain["ranks"]), "without --ema the ema category stays empty")
    bf16 = ["--precision", "bf16", "--reduce-dtype", "fp32", "--ema", "0.9"]
    emas = {}
    # train_single --as-ranks 3, FSDP@3's bitwise reference (the same rows in each product, the same sums)
    reference = [*MPIRUN, "-np", "1", f"{BUILD}/train_single", *reference_flags("fsdp", 3, bf16)]
    for name, command in (("single", reference), ("fsdp", strategy_command("fsdp", 3, []))):
        path, ckpt = os.path.join(tmp, f"bf16_{name}_ema.bin"), os.path.join(tmp, f"bf16_{name}_ckpt")
        log, weights = os.path.join(tmp, f"bf16_{name}.jsonl"), os.path.join(tmp, f"bf16_{name}_weights.bin")
        check(run([*command, *common, *bf16, "--eval-ema", "--out-model-ema", path, "--ckpt-dir", ckpt, "--save-full",
                   "--log", log, "--out-model", weights]) == 0, f"{name} --precision bf16 --ema runs")
        saved = os.path.join(ckpt, f"step_{STEPS:08d}", "ema.bin")
        emas[name] = (read_params(path), read_params(saved)) if os.path.exists(saved) else ([], [])
        # the bf16 working copy is rounded from the EMA for its evaluation and its file, not left the weights'
        vals = [(x["val_loss"], x["val_loss_ema"]) for x in read_log(log)[0] if x["val_loss"] is not None] \
            if os.path.exists(log) else []
        check(vals and all(a != b for a, b in vals) and open(path, "rb").read() != open(weights, "rb").read(),
              f"{name} bf16 --ema: the EMA evaluates otherwise than the weights ({vals[:1]}) and --out-model-ema "
              "is not --out-model")
    finer = lambda values: sum(1 for x in values if struct.pack("f", x)[:2] != b"\0\0")
    check(finer(emas["single"][1]) > 0 and finer(emas["fsdp"][1]) > 0 and finer(emas["fsdp"][0]) == 0
          and emas["fsdp"][0] and emas["fsdp"] == emas["single"],
          f"bf16: the checkpoint keeps the fp32 EMA ({finer(emas['fsdp'][1])} values finer than bf16), "
          "--out-model-ema it rounded; FSDP@3's both bit for bit train_single --as-ranks 3's")
    for bad, message in ((["--eval-ema"], "--eval-ema validates the EMA weights: it needs --ema DECAY"),
                         (["--out-model-ema", os.path.join(tmp, "x.bin")], "--out-model-ema writes the EMA weights")):
        r = run_captured([f"{BUILD}/train_single", *common, *bad])
        check(r.returncode != 0 and message in r.stderr, f"{' '.join(bad[:1])} without --ema is refused")


def check_dropout(tmp, model, common, ref_steps, ref_params):
    """--dropout P (docs/training.md): its masks follow each token's row in the global batch, so every strategy at
    N = 1..4 (and with --grad-accum 2 at N = 2, 3; and hybrid FSDP, N = 4 in groups of 2) trains train_single's
    model without accumulation (losses and
    final parameters within 1e-5). --dropout 0 is bitwise the run without it; --dropout 0.1 changes the losses;
    --recompute with it is bitwise the run without --recompute; with --lr 0 the validation losses are bitwise those
    without dropout (evaluation drops nothing) while the training losses are not; a different --seed gives other
    masks."""
    def single(tag, *flags):
        return run_logged(tag, [f"{BUILD}/train_single", *with_flags(common, *flags)], os.path.join(tmp, f"{tag}.jsonl"),
                          os.path.join(tmp, f"{tag}.bin"))
    zero = single("dropout0", "--dropout", "0")
    ref = single("dropout", "--dropout", "0.1")
    recomputed = single("dropout_recompute", "--dropout", "0.1", "--recompute")
    seeded = single("dropout_seed", "--dropout", "0.1", "--seed", "7")
    if None in (zero, ref, recomputed, seeded):
        return
    losses = lambda steps: [x["loss"] for x in steps]
    check(losses(zero[0]) == losses(ref_steps) and list(zero[2]) == list(ref_params),
          "--dropout 0: bitwise the run without it (losses and model)")
    check(all(a != b for a, b in zip(losses(ref[0]), losses(ref_steps))), "--dropout 0.1 changes every step's loss")
    check(losses(recomputed[0]) == losses(ref[0]) and list(recomputed[2]) == list(ref[2]),
          "--dropout 0.1 --recompute: bitwise the losses and model without --recompute (the same masks again)")
    still = ["--lr", "0"]
    frozen, frozen_drop = single("frozen", *still), single("frozen_dropout", *still, "--dropout", "0.3")
    if frozen and frozen_drop:
        val = lambda steps: [x["val_loss"] for x in steps if x["val_loss"] is not None]
        check(val(frozen_drop[0]) == val(frozen[0]) and losses(frozen_drop[0]) != losses(frozen[0]),
              "--lr 0: the validation losses drop nothing (bitwise), the training losses do")
    other_seed = run_logged("dropout, seed 7, no dropout", [f"{BUILD}/train_single", *common, "--seed", "7"],
                            os.path.join(tmp, "seed7.jsonl"), os.path.join(tmp, "seed7.bin"))
    if other_seed:  # the seed's effect on the masks alone: the same initial model, read from --model
        check(losses(seeded[0])[0] != losses(ref[0])[0] and losses(other_seed[0])[0] == losses(ref_steps)[0],
              "another --seed gives other masks (the first loss moves with --dropout only)")
    runs = [(s, n, 1, []) for s in ("ddp", "zero1", "zero2", "zero3", "fsdp") for n in (1, 2, 3, 4)] + \
           [(s, n, 2, []) for s in ("ddp", "zero1", "zero2", "zero3", "fsdp") for n in (2, 3)] + \
           [("fsdp", 4, 1, ["--shard-group", "2"])]
    for strategy, n, accum, extra in runs:
        tag = f"{strategy} N={n} --dropout 0.1 --grad-accum {accum} {' '.join(extra)}"
        result = run_logged(tag, strategy_command(strategy, n, ["--dropout", "0.1", "--grad-accum", str(accum), *extra,
                                                                *common]),
                            os.path.join(tmp, "dropout_run.jsonl"), os.path.join(tmp, "dropout_run.bin"))
        check_matches_reference(tag, result, common, strategy, n, ["--dropout", "0.1", "--grad-accum", str(accum), *extra])


def check_replicas(tmp, common, ref_steps, ref_params):
    """FSDP with --shard-min-numel NUMEL (docs/fsdp.md): tensors of fewer elements kept whole on every rank. NUMEL = 40
    keeps the C = 38 vectors whole, 200 every vector (qkvb, fcb too), 10^9 every tensor (DDP's bytes); at N = 1..4:
    train_single's losses and model (1e-5); params, grads and optim are 4, 4 and 8 bytes per element kept (whole
    tensors whole, the rest sliced as pad(t)/N); each unit with whole tensors at home adds one all-reduce of
    their gradients, and the reduce-scatters and all-gathers carry the sliced tensors alone. NUMEL = 0 is bitwise
    plain FSDP (losses, model and bytes moved). With --shard-group 2 at N = 4 and --grad-clip, train_single's
    gradient norms (each whole tensor counted once)."""
    def whole_of(numel_min):
        return {i for i in range(len(T)) if numel[i] < numel_min}

    def formulas(tag, summary, n, whole):
        for rank in summary["ranks"]:
            kept = sum(numel[i] for i in whole) + sum(pad(i, n) // n for i in range(len(T)) if i not in whole)
            for cat, size in (("params", 4), ("grads", 4), ("optim", 8)):
                got = rank["mem"][cat]
                check(got["current"] == size * kept, f"{tag} rank {rank['rank']}: {cat} {got['current']} == {size * kept}")
            calls = []
            for u, U in enumerate(UNITS):
                home = [i for i in range(len(T)) if T[i][3] == u and i in whole]
                if home:
                    calls.append(("all_reduce", sum(numel[i] for i in home)))
                for op, tensors in (("all_gather", gathered_by(u, +1)), ("all_gather", gathered_by(u, -1)),
                                    ("reduce_scatter", at_home(u))):
                    sliced = sum(pad(i, n) for i in tensors if i not in whole)
                    if sliced:
                        calls.append((op, sliced))
            want = {}
            for op, count in calls:
                sent, recv = ring(op, count, rank["rank"], n)
                c = want.setdefault(op, [0, 0, 0, 0])
                c[0] += 1; c[1] += count; c[2] += sent; c[3] += recv
            got = {op: [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
                   for op, c in rank["comm_last_step"].items() if c["calls"]}
            check(got == want, f"{tag} rank {rank['rank']}: collectives {got} == {want}")

    for numel_min in (40, 200, 10 ** 9):
        whole = whole_of(numel_min)
        for n in (1, 2, 3, 4):
            tag = f"fsdp N={n} --shard-min-numel {numel_min}"
            result = run_logged(tag, strategy_command("fsdp", n, ["--shard-min-numel", str(numel_min), *common]),
                                os.path.join(tmp, "replicas.jsonl"), os.path.join(tmp, "replicas.bin"))
            if result is None:
                continue
            check_matches_reference(tag, result, common, "fsdp", n, ["--shard-min-numel", str(numel_min)])
            formulas(tag, result[1], n, whole)
    runs = {}
    for flags in ([], ["--shard-min-numel", "0"]):
        runs[len(flags)] = run_logged(f"fsdp N=3 {' '.join(flags)}", strategy_command("fsdp", 3, [*flags, *common]),
                                      os.path.join(tmp, f"replicas{len(flags)}.jsonl"),
                                      os.path.join(tmp, f"replicas{len(flags)}.bin"))
    if runs[0] and runs[2]:
        moved = lambda s: [{op: [c[k] for k in ("calls", "elements", "bytes_sent", "bytes_recv")]
                            for op, c in r["comm_last_step"].items()} for r in s["ranks"]]
        check([x["loss"] for x in runs[0][0]] == [x["loss"] for x in runs[2][0]] and list(runs[0][2]) == list(runs[2][2])
              and moved(runs[0][1]) == moved(runs[2][1]), "--shard-min-numel 0: bitwise plain FSDP (losses, model, bytes)")
    norms = {}
    for name, command in (("single", [f"{BUILD}/train_single"]),
                          ("hybrid", strategy_command("fsdp", 4, ["--shard-group", "2", "--shard-min-numel", "200"]))):
        log = os.path.join(tmp, f"replicas_clip_{name}.jsonl")
        check(run([*command, *common, "--grad-clip", "0.5", "--log", log]) == 0, f"{name} --grad-clip runs")
        norms[name] = [x["grad_norm"] for x in read_log(log)[0]]
    worst = max(abs(a - b) / b for a, b in zip(norms["hybrid"], norms["single"]))
    check(worst <= 1e-5, f"fsdp N=4 --shard-group 2 --shard-min-numel 200 --grad-clip: train_single's norms ({worst:.1e})")


def check_trace_overlap(tmp, model, data):
    """--trace puts each collective on its own lane from start to completion: with --prefetch 1 some of them
    travel while the rank computes (a collective interval overlaps a compute interval); with --prefetch 0
    every one is waited for as soon as it starts, inside the rank's own comm spans."""
    for strategy in ("zero3", "fsdp"):
        overlaps = {}
        for prefetch in (0, 1):
            prefix = os.path.join(tmp, f"trace_{strategy}{prefetch}")
            rc = run([*strategy_command(strategy, 2, ["--prefetch", str(prefetch)]), "--model", model, "--data", data,
                      "--batch", str(BATCH), "--seq", str(SEQ), "--steps", "3", "--quiet", "--trace", prefix])
            check(rc == 0, f"{strategy} N=2 --prefetch {prefetch} --trace runs")
            if rc != 0:
                return
            events = [line.rstrip("\n").split("\t") for line in open(prefix + ".tsv") if not line.startswith("#")]
            lanes = {}
            for rank, step, category, name, start, end in events:
                lanes.setdefault((rank, category), []).append((float(start), float(end)))
            count = 0
            for (rank, category), spans in lanes.items():
                if category != "collective":
                    continue
                compute = lanes.get((rank, "compute"), [])
                count += sum(1 for a, b in spans if any(min(b, d) - max(a, c) > 0 for c, d in compute))
            overlaps[prefetch] = (count, len(lanes.get(("0", "collective"), [])))
        check(overlaps[1][0] > 0 and overlaps[0][0] == 0 and overlaps[0][1] > 0,
              f"{strategy} N=2: collectives under compute, on the trace's collective lane: --prefetch 1 "
              f"{overlaps[1][0]}, --prefetch 0 {overlaps[0][0]} of {overlaps[0][1]} on rank 0")


def check_trace_memory(tmp, model, data):
    """The kept step's memory goes into the trace as counters, one series per category: on every rank they reach
    exactly the summary's peak_bytes (the step's peak moment, whose held bytes add up to it), end at the resident
    bytes, and lie within the kept step's spans: the last step by default, --timeline-step K's otherwise. DDP's
    step allocates nothing: its lane still has the step's level, at its start and its end."""
    for strategy, keep in (("ddp", None), ("zero3", None), ("fsdp", 2)):
        prefix = os.path.join(tmp, f"memtrace_{strategy}")
        flags = ["--timeline-step", str(keep)] if keep else []
        rc = run([*strategy_command(strategy, 2, []), "--model", model, "--data", data, "--batch", str(BATCH),
                  "--seq", str(SEQ), "--steps", "3", "--quiet", "--trace", prefix, "--log", prefix + ".jsonl", *flags])
        check(rc == 0, f"{strategy} N=2 --trace {' '.join(flags)} runs")
        if rc != 0:
            continue
        summary = json.loads(open(prefix + ".jsonl").read().splitlines()[-1])
        events = json.load(open(prefix + ".json"))["traceEvents"]
        spans = [line.rstrip("\n").split("\t") for line in open(prefix + ".tsv") if not line.startswith("#")]
        step = keep or 3
        for rank in summary["ranks"]:
            r = rank["rank"]
            counters = [e for e in events if e.get("ph") == "C" and e["pid"] == r]
            totals = [sum(e["args"].values()) for e in counters]
            resident = sum(rank["mem"][cat]["current"] for cat in rank["mem"])
            moment = rank["peak_moment"]
            in_step = [(float(a), float(b)) for rk, st, cat, name, a, b in spans if int(rk) == r and int(st) == step]
            lo, hi = min(a for a, b in in_step), max(b for a, b in in_step)
            # the events' counters within the step's spans; the first and the last (the level as the recording
            # began and stopped) after the step before it and before the step after it
            before = max((float(b) for rk, st, cat, name, a, b in spans if int(rk) == r and int(st) < step), default=0)
            after = min((float(a) for rk, st, cat, name, a, b in spans if int(rk) == r and int(st) > step),
                        default=float("inf"))
            inside = all(lo - 1e-3 <= e["ts"] / 1e3 <= hi + 1e-3 for e in counters[1:-1]) and \
                all(before <= e["ts"] / 1e3 <= after for e in counters[:1] + counters[-1:])
            check(len(counters) >= 2 and max(totals) == rank["peak_bytes"] and totals[-1] == resident
                  and set(counters[0]["args"]) == set(rank["mem"]) and moment["step"] == step
                  and rank["timeline"]["step"] == step and sum(moment["held"].values()) == rank["peak_bytes"]
                  and inside,
                  f"{strategy} N=2 rank {r}: {len(counters)} memory counters of step {step} reach "
                  f"{max(totals, default=0)} (peak {rank['peak_bytes']}), end at {totals[-1] if totals else 0} "
                  f"(resident {resident}), within the step's spans: {inside}")


def check_weight_decay(tmp, model, data):
    lr, wd = 1e-2, 0.5
    outs = []
    for decay in (0, wd):
        out = os.path.join(tmp, f"wd{decay}.bin")
        rc = run([f"{BUILD}/train_single", "--model", model, "--data", data, "--batch", str(BATCH), "--seq", str(SEQ),
                  "--steps", "1", "--lr", str(lr), "--weight-decay", str(decay), "--quiet", "--out-model", out])
        check(rc == 0, f"train_single --weight-decay {decay} runs")
        if rc != 0:
            return
        outs.append(read_params(out))
    p0, plain, decayed = read_params(model), outs[0], outs[1]
    # float32 rounding of the two results: a few ulps of p0
    worst = max(abs((d - p) + lr * wd * q) / (1e-2 + abs(q)) for q, p, d in zip(p0, plain, decayed))
    moved = max(abs(d - p) for p, d in zip(plain, decayed))
    check(worst <= 4e-7 and moved >= lr * wd * 0.5,
          f"--weight-decay {wd}: one step moves each p0 by -lr*wd*p0 more (largest deviation {worst:.1e} of |p0|, "
          f"largest move {moved:.1e})")


def check_seed(tmp, data):
    shape = ["--layers", "2", "--heads", "2", "--channels", "128", "--vocab", str(V), "--max-seq", "1024"]
    inits = {}
    for seed in (7, 8):
        path = os.path.join(tmp, f"init{seed}.bin")
        check(run([f"{BUILD}/init_model", *shape, "--seed", str(seed), "--out", path]) == 0, f"init_model --seed {seed}")
        inits[seed] = open(path, "rb").read()
    check(inits[7] != inits[8], "init_model: another seed gives another model")
    trainers = [("train_single", [], []), ("train_ddp", [*MPIRUN, "-np", "2"], []),
                ("train_ddp", [*MPIRUN, "-np", "3"], ["--zero-stage", "2"]), ("train_zero3", [*MPIRUN, "-np", "3"], []),
                ("train_fsdp", [*MPIRUN, "-np", "3"], [])]
    for trainer, launch, extra in trainers:
        name = " ".join([trainer, *extra])
        out = os.path.join(tmp, f"{trainer}{len(extra)}_seed.bin")
        rc = run([*launch, f"{BUILD}/{trainer}", *extra, "--config", "d2", "--vocab", str(V), "--data", data,
                  "--batch", "6", "--seq", "16", "--steps", "0", "--seed", "8", "--quiet", "--out-model", out])
        check(rc == 0 and open(out, "rb").read() == inits[8],
              f"{name}: --seed 8 starts from init_model's --seed 8 model (d2 shape)")


def check_strategy_runs(tmp, common, runs, ref_steps, ref_params):
    """Each (strategy, N, reshard-after-forward, prefetch) run against train_single: losses,
    validation losses and final parameters within 1e-5, every rank in the summary, the memory
    and traffic formulas; ZeRO-3 and FSDP with prefetch bitwise their --prefetch 0 run."""
    outputs = {}  # (strategy, n, reshard) -> the --prefetch 0 run's log lines and final model
    for strategy, n, reshard, prefetch in runs:
        tag = f"{strategy} N={n}" + ("" if reshard else " reshard-after-forward 0") + \
              (f" --prefetch {prefetch}" if strategy in ("zero3", "fsdp") else "")
        name = f"{strategy}{n}{reshard}{prefetch}"
        log, out = os.path.join(tmp, f"{name}.jsonl"), os.path.join(tmp, f"{name}.bin")
        extra = ([] if reshard else ["--reshard-after-forward", "0"]) + \
                (["--prefetch", str(prefetch)] if strategy in ("zero3", "fsdp") else [])
        result = run_logged(tag, [*strategy_command(strategy, n, extra), *common], log, out)
        if result is None:
            continue
        steps, summary, params = result
        check(len(steps) == STEPS and sum(1 for x in steps if x["val_loss"] is not None) == STEPS // 5,
              f"{tag}: every step logged, a validation every 5")
        check_matches_reference(tag, result, common, strategy, n, extra)
        check(summary["world_size"] == n and len(summary["ranks"]) == n, f"{tag}: summary has every rank")
        start = json.loads(open(log).readline())
        check(summary["strategy"] == strategy and start.get("strategy") == strategy,
              f"{tag}: the log names the strategy {strategy} (start {start.get('strategy')}, summary {summary['strategy']})")
        check_rank_formulas(tag, summary, strategy, n, reshard, prefetch=prefetch)
        if strategy in ("zero3", "fsdp"):
            losses, model_bytes = [s["loss"] for s in steps], open(out, "rb").read()
            if prefetch == 0:
                outputs[(strategy, n, reshard)] = (losses, model_bytes)
            else:
                check(outputs.get((strategy, n, reshard)) == (losses, model_bytes),
                      f"{tag}: bitwise the losses and final model of --prefetch 0")


def runs_without_and_with(tmp, common, tag, strategy, n, flags, flag, base=None):
    """The run with `flags`, then with `flags` and `flag`: each its (steps, summary) and final model bytes; None
    (and a failed check) if one does not run. base: the (log, model) of a run without `flag` already made."""
    runs = []
    for on in (0, 1):
        name = f"{flag.strip('-')}{strategy}{n}{len(flags)}{on}"
        log, out = os.path.join(tmp, f"{name}.jsonl"), os.path.join(tmp, f"{name}.bin")
        if not on and base:
            log, out = base
        elif run([*strategy_command(strategy, n, flags + ([flag] if on else [])), *common, "--log", log,
                  "--out-model", out]) != 0:
            check(False, f"{tag} {flag}: runs")
            return None
        runs.append((read_log(log), open(out, "rb").read()))
    return runs


def check_offload(tmp, common):
    """--offload-optimizer: every strategy at N = 1..4 (fp32), at N = 3 in bf16 (bf16 gradients, and fp32
    ones), and FSDP's hybrid sharding, each against the same run without it: the losses and the final model bit
    for bit (AdamW on the host is optim.c's, the device's arithmetic). The device's optimizer category is empty,
    the device's peak lower by exactly what it held, every other device category the same, and the host holds
    the master, m and v (12 bytes per element the rank updates) and their staging (the gradients' bytes, and 2
    more in a bf16 run)."""
    def pair(tag, strategy, n, flags, base=None):
        runs = runs_without_and_with(tmp, common, tag, strategy, n, flags, "--offload-optimizer", base)
        if not runs:
            return
        ((steps, plain), model), ((off_steps, off), off_model) = runs
        check([x["loss"] for x in off_steps] == [x["loss"] for x in steps] and off_model == model,
              f"{tag} --offload-optimizer: bitwise the losses and model of the run without it")
        check(off["config"]["offload_optimizer"] == 1 and plain["config"]["offload_optimizer"] == 0,
              f"{tag}: the summary records --offload-optimizer")
        bf16 = "bf16" in flags
        grad_bytes = 2 if flags[-1:] == ["bf16"] else 4
        for a, b in zip(plain["ranks"], off["ranks"]):
            optim = a["mem"]["optim"]["peak"]
            elements = optim // (12 if bf16 else 8)  # what the rank updates: master (bf16), m, v on the device
            devices = [c for c in a["mem"] if not c.startswith("host_") and c != "optim"]
            check(b["mem"]["optim"]["peak"] == 0 and all(a["mem"][c] == b["mem"][c] for c in devices)
                  and b["peak_bytes"] == a["peak_bytes"] - optim,
                  f"{tag} rank {a['rank']}: the device drops exactly the optimizer's {optim} bytes "
                  f"(peak {a['peak_bytes']} -> {b['peak_bytes']})")
            host = (b["mem"]["host_optim"]["peak"], b["mem"]["host_staging"]["peak"])
            want = (12 * elements, (grad_bytes + (2 if bf16 else 0)) * elements)
            check(host == want and b["host_peak_bytes"] == sum(want) and a["host_peak_bytes"] == 0,
                  f"{tag} rank {a['rank']}: the host holds master, m, v and staging {want}, got {host}")
    for strategy in ("ddp", "zero1", "zero2", "zero3", "fsdp"):
        for n in (1, 2, 3, 4):
            name = f"{strategy}{n}10"  # check_strategy_runs' run (zero3, fsdp: --prefetch 0)
            base = (os.path.join(tmp, f"{name}.jsonl"), os.path.join(tmp, f"{name}.bin"))
            flags = ["--prefetch", "0"] if strategy in ("zero3", "fsdp") else []
            pair(f"{strategy} N={n}", strategy, n, flags, base if os.path.exists(base[1]) else None)
        for reduce in ("bf16", "fp32"):
            pair(f"{strategy} N=3 bf16 --reduce-dtype {reduce}", strategy, 3,
                 ["--precision", "bf16", "--reduce-dtype", reduce])
    pair("fsdp N=4 --shard-group 2", "fsdp", 4, ["--shard-group", "2"])
    # the updates that begin as units' shares are final, in the backward: behind a prefetch, in the last of
    # several micro-batches (reduced each one, or once), beside whole small tensors; and a clip's, at the step
    for tag, strategy, n, flags in (("single --grad-accum 2", "single", 1, ["--grad-accum", "2"]),
                                    ("fsdp N=3 --prefetch 1 --grad-accum 2", "fsdp", 3, ["--prefetch", "1", "--grad-accum", "2"]),
                                    ("zero2 N=2 --grad-accum 3", "zero2", 2, ["--grad-accum", "3"]),
                                    ("zero3 N=3 --prefetch 1 no-sync", "zero3", 3,
                                     ["--prefetch", "1", "--grad-accum", "2", "--accum-mode", "no-sync"]),
                                    ("fsdp N=2 --shard-min-numel 100", "fsdp", 2, ["--shard-min-numel", "100", "--prefetch", "1"]),
                                    ("zero3 N=2 --grad-clip 0.5", "zero3", 2, ["--prefetch", "1", "--grad-clip", "0.5"]),
                                    ("zero1 N=3 --grad-clip 0.5", "zero1", 3, ["--grad-clip", "0.5"])):
        pair(tag, strategy, n, flags)
    r = run_captured([f"{BUILD}/train_single", *common, "--offload-optimizer", "--ema", "0.9"])
    check(r.returncode != 0 and "--offload-optimizer with --ema" in r.stderr,
          f"--offload-optimizer with --ema is refused, naming both: {r.stderr.strip()[-200:]!r}")


def check_fused_classifier(tmp, common):
    """--fused-classifier: the losses and the final model of the run without it, bit for bit (the loss's gradient
    is the same arithmetic, done in the forward), with and without micro-batches (each one's gradient scaled by
    1/K in the forward) and in bf16; the activations lower by exactly the (B/N/K, T, Vp) probabilities, on every
    rank, and every other category unchanged."""
    for tag, strategy, n, flags in (("single", "single", 1, []), ("ddp N=2", "ddp", 2, []),
                                    ("fsdp N=3 --grad-accum 2", "fsdp", 3, ["--grad-accum", "2"]),
                                    ("zero3 N=2 bf16", "zero3", 2, ["--precision", "bf16"])):
        runs = runs_without_and_with(tmp, common, tag, strategy, n, flags, "--fused-classifier")
        if not runs:
            continue
        ((steps, plain), model), ((fsteps, fused), fmodel) = runs
        check([x["loss"] for x in fsteps] == [x["loss"] for x in steps] and fmodel == model,
              f"{tag} --fused-classifier: bitwise the losses and model of the run without it")
        check(fused["config"]["fused_classifier"] == 1 and plain["config"]["fused_classifier"] == 0,
              f"{tag}: the summary records --fused-classifier")
        k = int(flags[flags.index("--grad-accum") + 1]) if "--grad-accum" in flags else 1
        probs = BATCH // n // k * SEQ * VP * 4
        for a, b in zip(plain["ranks"], fused["ranks"]):
            others = [c for c in a["mem"] if c != "activations"]
            check(a["mem"]["activations"]["peak"] - b["mem"]["activations"]["peak"] == probs
                  and all(a["mem"][c] == b["mem"][c] for c in others),
                  f"{tag} rank {a['rank']}: the activations drop by exactly the probabilities' {probs} bytes, "
                  f"nothing else moves")


def check_reference(common, ref_steps, ref_params):
    """train_single --as-ranks 1 is train_single, bit for bit; at N > 1 it runs N ranks' rows (its summary
    says so) and learns as the whole batch does; flags that describe its reductions without it are refused."""
    one = reference_run(common, "fsdp", 1, [])
    plain = run_logged("train_single under the launcher", [*MPIRUN, "-np", "1", f"{BUILD}/train_single", *common],
                       os.path.join(TMP, "plain.jsonl"), os.path.join(TMP, "plain.bin"))
    if one and plain:
        check([x["loss"] for x in one[0]] == [x["loss"] for x in plain[0]] and list(one[2]) == list(plain[2]),
              "train_single --as-ranks 1: bitwise train_single's losses and model")
    three = reference_run(common, "fsdp", 3, [])
    if three:
        worst = worst_loss_diff(three[0], ref_steps)
        check(three[1]["strategy_options"]["as_ranks"] == 3 and worst <= 1e-4,
              f"train_single --as-ranks 3: the summary names N, the losses are the whole batch's (worst relative "
              f"difference {worst:.1e})")
    for bad, says in ((["--as-groups", "2"], "give it too"), (["--as-ranks", "4", "--as-groups", "3"], "must divide"),
                      (["--as-reduce", "use"], "unknown"),
                      (["--as-ranks", "5"], "not divisible by the number of ranks (5, --as-ranks)")):
        r = run_captured([f"{BUILD}/train_single", *common, *bad], timeout=60)
        check(r.returncode != 0 and says in r.stderr, f"train_single {' '.join(bad)} is refused: {says}")


def main():
    global TMP
    tmp = TMP = CHECKS.scratch("shardlab_strategies_")
    model = os.path.join(tmp, "model.bin")
    assert run([f"{BUILD}/init_model", "--layers", str(L), "--heads", str(NH), "--channels", str(C),
                "--vocab", str(V), "--max-seq", str(MAXT), "--out", model]) == 0
    rng = random.Random(5)
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    for name, count in (("train.bin", 20000), ("val.bin", 2000)):
        write_learnable_shard(os.path.join(data, name), count, V, rng)
    check_weight_decay(tmp, model, data)
    check_seed(tmp, data)
    common = ["--model", model, "--data", data, "--batch", str(BATCH), "--seq", str(SEQ),
              "--steps", str(STEPS), "--lr", "1e-3", "--weight-decay", "0.1", "--eval-every", "5", "--quiet"]
    ref_log, ref_model = os.path.join(tmp, "single.jsonl"), os.path.join(tmp, "single.bin")
    check(run([f"{BUILD}/train_single", *common, "--log", ref_log, "--out-model", ref_model]) == 0, "train_single runs")
    ref_steps, _ = read_log(ref_log)
    ref_params = read_params(ref_model)
    check(ref_steps[-1]["loss"] < ref_steps[0]["loss"], "the reference run learns")
    check_reference(common, ref_steps, ref_params)
    if QUICK:  # make test-quick: every strategy at N = 2 (ZeRO-3 and FSDP with --prefetch 0 and 1), FSDP at N = 3,
        # and DDP, ZeRO-3 and FSDP at N = 2 in bf16
        runs = [(s, 2, 1, 0) for s in ("ddp", "zero1", "zero2")] + [(s, 2, 1, k) for s in ("zero3", "fsdp") for k in (0, 1)]
        runs += [("fsdp", 3, 1, 0)]  # where N divides no tensor: padding, and sums of three
        check_strategy_runs(tmp, common, runs, ref_steps, ref_params)
        for strategy in ("ddp", "zero3", "fsdp"):  # bf16 products (this instruction set's kernel, or the loop)
            tag = f"{strategy} N=2 --precision bf16"
            result = run_logged(tag, [*strategy_command(strategy, 2, ["--precision", "bf16"]), *common],
                                os.path.join(tmp, "quick_bf16.jsonl"), os.path.join(tmp, "quick_bf16.bin"))
            if result:
                check_matches_reference(tag, result, common, strategy, 2, ["--precision", "bf16"])
        CHECKS.finish()
    runs = [(s, n, 1, 0) for s in ("ddp", "zero1", "zero2") for n in (1, 2, 3, 4)] + \
           [(s, n, 1, k) for s in ("zero3", "fsdp") for n in (1, 2, 3, 4) for k in (0, 1, 2)] + \
           [("fsdp", n, 0, k) for n in (2, 3, 4) for k in (0, 1)] + \
           [("zero3", 3, 1, 9), ("fsdp", 2, 1, 9), ("fsdp", 3, 0, 9)]  # D past the L = 2 blocks: capped at L
    # SHARDLAB_TEST_ONLY="check_ema check_hybrid": those checks alone (after the reference's), to try a change quickly
    only = os.environ.get("SHARDLAB_TEST_ONLY", "").split()
    for name, run_check in (("check_strategy_runs", lambda: check_strategy_runs(tmp, common, runs, ref_steps, ref_params)),
                            ("check_accumulation", lambda: check_accumulation(tmp, model, data)),
                            ("check_trace_overlap", lambda: check_trace_overlap(tmp, model, data)),
                            ("check_trace_memory", lambda: check_trace_memory(tmp, model, data)),
                            ("check_precision", lambda: check_precision(tmp, common)),
                            ("check_hybrid", lambda: check_hybrid(tmp, common, ref_steps, ref_params)),
                            ("check_units", lambda: check_units(tmp, common, ref_steps, ref_params)),
                            ("check_ema", lambda: check_ema(tmp, model, common, ref_steps)),
                            ("check_dropout", lambda: check_dropout(tmp, model, common, ref_steps, ref_params)),
                            ("check_replicas", lambda: check_replicas(tmp, common, ref_steps, ref_params)),
                            ("check_fused_classifier", lambda: check_fused_classifier(tmp, common)),
                            ("check_offload", lambda: check_offload(tmp, common))):
        if not only or name in only:
            started = time.time()
            run_check()
            print(f"strategies: {name} took {time.time() - started:.0f} s", flush=True)
    known = {"check_strategy_runs", "check_accumulation", "check_trace_overlap", "check_trace_memory", "check_precision",
             "check_hybrid", "check_units", "check_ema", "check_dropout", "check_replicas", "check_fused_classifier",
             "check_offload"}
    check(set(only) <= known, f"SHARDLAB_TEST_ONLY names checks there are ({sorted(set(only) - known)} are not)")
    CHECKS.finish()


if __name__ == "__main__":
    main()
