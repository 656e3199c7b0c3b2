#!/usr/bin/env python3
"""ZeRO++ on FSDP and ZeRO-3 under mpirun (docs/zeropp.md), on test_strategies' model (C = 38: no size divisible by 3 or 4).

qwZ, --quantize-weights int8 [--quantize-block B]:
  - at N = 1..4, with the default block and B = 16, every rank's all-gathers carry exactly the int8 wire of its
    slices (n + 4 ceil(n/B) bytes a tensor's slice of n, padded to 4), the reduce-scatters plain FSDP's bytes,
    and the state kept is plain FSDP's (4 + 4 + 8 bytes a padded element): full precision;
  - the wire is a function of the parameters alone: --prefetch 0, 1, 2, --reshard-after-forward 0 and
    --offload-optimizer give bit for bit the same run; a run differs from plain FSDP's (the quantization happened);
  - it composes with hybrid groups, bf16, accumulation, whole small tensors, clipping, units and the EMA;
  - the model written out is never quantized (0 steps: the initial model, bit for bit), and a resume is exact;
  - over 200 steps of d4, its loss stays closer to train_single's than another initialisation seed's does.
qgZ, --quantize-grads int8|int4:
  - at N = 1..4, every rank's reduce is an all-to-all of exactly the wire of its blocks (per destination rank, a
    tensor's slice in n + 4 ceil(n/B) bytes for int8, ceil(n/2) + 4 ceil(n/B) for int4, padded to 4) and no
    reduce-scatter is left; build/plan --traffic counts the same bytes;
  - --prefetch 0, 1, 2 give bit for bit the same run; it composes with hybrid groups, bf16, accumulation, whole
    small tensors, clipping, and with qwZ and hpZ together; a resume is exact;
  - over 200 steps of d4, int8 and int4 stay closer to train_single's loss than another seed does.
qgZ in two hops, --quantize-grads-node H:
  - at N = 4 and 6, every rank's reduce is an all-to-all among its node's H ranks of every block's wire, then one
    among the N/H ranks of its place of N/H wires; build/plan --traffic counts the same bytes, and --time puts a
    third of d4's gradient bytes across two machines of two where one hop's all-to-all spans both;
  - --prefetch 0, 1, 2 bitwise; with blocks of one number (exact to 2u a number) the first step's gradient norm is
    plain FSDP's to 1e-4, in one hop and in two (a sum averaged over anything but N would be off by a factor);
  - it composes with qwZ and hpZ and with no-sync accumulation; over 200 steps of d4 at N = 4, int4 in nodes of 2
    stays closer to train_single's loss than another seed does; H not dividing N, H = 1 and H = N are refused.
hpZ, --secondary-shard-group H (FSDP and ZeRO-3):
  - bit for bit plain FSDP's run (losses and model) at N = 2..4 with each H < N that divides N, with prefetch,
    hybrid groups, bf16, accumulation and whole small tensors; with qwZ, bit for bit qwZ's run; H = N refused;
  - the backward's all-gathers stay within the node: H ranks' rows, (H-1)/H of the unit's padded bytes, the
    forward's as plain FSDP's, on every rank;
  - on ZeRO-3, bit for bit plain ZeRO-3's run (with qwZ, qwZ's) at N = 2..4, with prefetch, bf16 and accumulation;
    each tensor's backward broadcast among the node's H ranks from the rank of its owner's place, on every rank,
    and build/plan --traffic's bytes the run's.
qgZ on ZeRO-3 (each reduce a gather of wires at the owner):
  - at N = 1..4 and in two hops at N = 4 and 6, every rank's gathers to the byte, the planner's the run's; prefetch
    bitwise; with blocks of one number the first step is plain ZeRO-3's (norm to 1e-4, the model); it composes with
    qwZ and hpZ, bf16, accumulation, clipping and offload, and a resume with all three is exact; over 200 steps of
    d4, int4 at N = 2 stays closer to train_single's loss than another seed does.
Usage: test_zeropp.py BUILD_DIR "MPIRUN ..." """
import os
import random
import re
import shlex
import shutil
import subprocess
import sys

from testlib import Checks, read_log, run, run_captured, write_learnable_shard

sys.argv = sys.argv[:3]  # test_strategies' model and formulas, read with its arguments
import test_strategies as ts  # noqa: E402

BUILD, MPIRUN = sys.argv[1], shlex.split(sys.argv[2])
CHECKS = Checks("zeropp")
check = CHECKS.check
DEFAULT_BLOCK = 256


def wire_bytes(count, block, bits=8):
    """quantize.h: a run of `count` numbers, the scales and then the codes, padded to 4 bytes."""
    codes = count if bits == 8 else -(-count // 2)
    return 4 * -(-count // block) + -(-codes // 4) * 4


def unit_wire(unit, n, block, bits=8):
    return sum(wire_bytes(ts.pad(i, n) // n, block, bits) for i in unit)


def fsdp(n, *flags):
    return [*MPIRUN, "-np", str(n), f"{BUILD}/train_fsdp", *flags]


def trained(tag, command, tmp):
    """Runs a trainer with --log and --out-model: (steps, summary, final parameters), or None."""
    log, out = os.path.join(tmp, "run.jsonl"), os.path.join(tmp, "run.bin")
    rc = run([*command, "--log", log, "--out-model", out])
    check(rc == 0, f"{tag}: runs")
    if rc != 0:
        return None
    steps, summary = read_log(log)
    return steps, summary, ts.read_params(out)


def losses(result):
    return [x["loss"] for x in result[0]]


def check_wire(tag, summary, n, block):
    """Every rank: the last step's all-gathers (two a unit: forward and backward) in int8 wire bytes, the
    reduce-scatters (one a unit) in fp32 as plain FSDP's, and the resident state of plain FSDP."""
    padded = sum(ts.pad(i, n) for i in range(len(ts.T))) // n
    for rank in summary["ranks"]:
        want = {"all_gather": [0, 0, 0, 0], "reduce_scatter": [0, 0, 0, 0]}
        for u in range(len(ts.UNITS)):
            for op, count, size in (("all_gather", unit_wire(ts.gathered_by(u, +1), n, block) * n, 1),
                                    ("all_gather", unit_wire(ts.gathered_by(u, -1), n, block) * n, 1),
                                    ("reduce_scatter", sum(ts.pad(i, n) for i in ts.at_home(u)), 4)):
                if count == 0:
                    continue
                sent, recv = ts.ring(op, count, rank["rank"], n, size=size)
                c = want[op]
                c[0] += 1; c[1] += count; c[2] += sent; c[3] += recv
        got = {op: [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
               for op, c in rank["comm_last_step"].items() if c["calls"]}
        check(got == want, f"{tag} rank {rank['rank']}: calls/elements/sent/recv {got} == {want}")
        for cat, size in (("params", 4), ("grads", 4), ("optim", 8)):
            current = rank["mem"][cat]["current"]
            check(current == size * padded, f"{tag} rank {rank['rank']}: {cat} {current} == {size * padded} (full precision)")


def check_planned(tag, summary, n, common, flags, strategy="fsdp"):
    """build/plan --traffic runs the strategy's own code on the simulated network: its bytes are the run's."""
    model = common[common.index("--model") + 1]
    r = subprocess.run([f"{BUILD}/plan", "--model", model, "--ranks", str(n), "--batch", str(ts.BATCH), "--seq",
                        str(ts.SEQ), "--traffic", *flags], capture_output=True, text=True, timeout=120)
    planned = {(int(f[1]), f[2]): [int(x) for x in f[3:7]] for f in (line.split("\t") for line in r.stdout.splitlines())
               if f[0] == strategy}
    measured = {(rank["rank"], op): [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
                for rank in summary["ranks"] for op, c in rank["comm_last_step"].items() if c["calls"]}
    check(r.returncode == 0 and planned == measured, f"{tag}: plan --traffic {planned} == the run's {measured}")


def check_qwz(tmp, common, plain):
    for n in (1, 2, 3, 4):
        for block in (None, 16):
            flags = ["--quantize-weights", "int8"] + (["--quantize-block", str(block)] if block else [])
            tag = f"fsdp N={n} {' '.join(flags)}"
            result = trained(tag, fsdp(n, *common, *flags), tmp)
            if result is None:
                continue
            check_wire(tag, result[1], n, block or DEFAULT_BLOCK)
            if n == 3:
                check_planned(tag, result[1], n, common, flags)
            check(losses(result)[-1] < losses(result)[0] - 0.3, f"{tag}: learns ({losses(result)[0]:.4f} -> "
                  f"{losses(result)[-1]:.4f})")
            if n == 2 and block is None:
                check(losses(result) != losses(plain) and result[2] != plain[2],
                      f"{tag}: not plain FSDP's run (the weights did travel quantized)")
                base = result
    for flags in (["--prefetch", "0"], ["--prefetch", "2"], ["--reshard-after-forward", "0"],
                  ["--offload-optimizer"]):
        tag = f"fsdp N=2 --quantize-weights int8 {' '.join(flags)}"
        result = trained(tag, fsdp(2, *common, "--quantize-weights", "int8", *flags), tmp)
        if result is not None:
            check(losses(result) == losses(base) and result[2] == base[2],
                  f"{tag}: bitwise the run with the defaults (the wire depends on the parameters alone)")


def check_qgz_wire(tag, summary, n, bits, block):
    """Every rank: the last step's reduces, one all-to-all a unit of int8 wires, and plain FSDP's all-gathers."""
    for rank in summary["ranks"]:
        want = {"all_gather": [0, 0, 0, 0], "all_to_all": [0, 0, 0, 0]}
        for u in range(len(ts.UNITS)):
            count = lambda d: sum(ts.pad(i, n) for i in ts.gathered_by(u, d))
            for op, elements, size in (("all_gather", count(+1), 4), ("all_gather", count(-1), 4),
                                       ("all_to_all", unit_wire(ts.at_home(u), n, block, bits) * n, 1)):
                if elements == 0:
                    continue
                sent, recv = ts.ring("all_gather" if op == "all_gather" else "reduce_scatter", elements, rank["rank"],
                                     n, size=size)
                c = want[op]
                c[0] += 1; c[1] += elements; c[2] += sent; c[3] += recv
        got = {op: [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
               for op, c in rank["comm_last_step"].items() if c["calls"]}
        check(got == want, f"{tag} rank {rank['rank']}: calls/elements/sent/recv {got} == {want}")


def check_qgz(tmp, common, ref):
    base = {}
    for bits in (8, 4):
        for n in (1, 2, 3, 4):
            flags = ["--quantize-grads", f"int{bits}"] + (["--quantize-block", "16"] if n == 3 else [])
            tag = f"fsdp N={n} {' '.join(flags)}"
            result = trained(tag, fsdp(n, *common, *flags), tmp)
            if result is None:
                continue
            check_qgz_wire(tag, result[1], n, bits, 16 if n == 3 else DEFAULT_BLOCK)
            if n == 3:
                check_planned(tag, result[1], n, common, flags)
            last, want = losses(result)[-1], losses(ref)[-1]
            check(abs(last - want) < 0.05 * want, f"{tag}: last loss {last:.4f} near train_single's {want:.4f}")
            if n == 2:
                base[bits] = result
    for flags in (["--prefetch", "0"], ["--prefetch", "2"]):
        tag = f"fsdp N=2 --quantize-grads int4 {' '.join(flags)}"
        result = trained(tag, fsdp(2, *common, "--quantize-grads", "int4", *flags), tmp)
        if result is not None and 4 in base:
            check(losses(result) == losses(base[4]) and result[2] == base[4][2],
                  f"{tag}: bitwise the run with the defaults (each part summed in rank order where it lands)")
    check_composes(tmp, common, ref, ["--quantize-grads", "int8"],
                   [(4, ["--quantize-weights", "int8", "--secondary-shard-group", "2"])])


def check_qgz_hops_wire(tag, summary, n, h, bits, block):
    """Every rank: a unit's reduce in two all-to-alls, among its node's H ranks (every rank's block, quantized) and
    then among the N/H ranks of its place in every node (N/H sums, quantized again); plain FSDP's all-gathers."""
    m = n // h
    for rank in summary["ranks"]:
        want = {"all_gather": [0, 0, 0, 0], "all_to_all": [0, 0, 0, 0]}
        for u in range(len(ts.UNITS)):
            count, wire = lambda d: sum(ts.pad(i, n) for i in ts.gathered_by(u, d)), unit_wire(ts.at_home(u), n, block, bits)
            for op, elements, size, ranks in (("all_gather", count(+1), 4, n), ("all_gather", count(-1), 4, n),
                                              ("all_to_all", wire * n, 1, h), ("all_to_all", wire * m, 1, m)):
                if elements == 0:
                    continue
                sent, recv = ts.ring("all_gather" if op == "all_gather" else "reduce_scatter", elements, 0, ranks,
                                     size=size)
                c = want[op]
                c[0] += 1; c[1] += elements; c[2] += sent; c[3] += recv
        got = {op: [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
               for op, c in rank["comm_last_step"].items() if c["calls"]}
        check(got == want, f"{tag} rank {rank['rank']}: calls/elements/sent/recv {got} == {want}")


def grad_norms(result):
    return [rank["last_grad_norm"] for rank in result[1]["ranks"]]


def check_exact_blocks(tmp, common, name, trainer):
    """With blocks of one number (a block's scale is its number over Q, its code Q, and x' = Q·scale: |x' - x| <=
    2u|x|), qgZ's first step, int8 in one hop and in two and int4 in one at N = 4, has the gradient norm of the
    strategy's plain run to 1e-4 (a gradient averaged over anything but N would be off by a factor) and moves the
    model as it does (a largest code past what int4 holds would flip the sign of every positive number)."""
    one = list(common)
    one[one.index("--steps") + 1] = "1"
    norm_flags = ["--grad-clip", "1e30"]  # computes the norm, clips nothing
    plain = trained(f"{name} N=4 --steps 1 (norm)", trainer(4, *one, *norm_flags), tmp)
    for bits, hops in (("int8", []), ("int8", ["--quantize-grads-node", "2"]), ("int4", [])):
        flags = ["--quantize-grads", bits, "--quantize-block", "1", *hops]
        tag = f"{name} N=4 {' '.join(flags)} --steps 1"
        result = trained(tag, trainer(4, *one, *norm_flags, *flags), tmp)
        if result is None or plain is None:
            continue
        got, want = grad_norms(result)[0], grad_norms(plain)[0]
        check(abs(got - want) <= 1e-4 * want, f"{tag}: gradient norm {got:.9g} is plain {name}'s {want:.9g} to 1e-4")
        # Adam's first step moves each parameter by lr times its gradient's sign (weight decay aside, the same in
        # both): a gradient to within 2u of the plain run's keeps every sign but those of gradients within rounding
        # of 0, where a part sent to the wrong rank would flip about half of them
        moved = sum(abs(a - b) > 1e-3 / 2 for a, b in zip(result[2], plain[2]))
        check(moved <= len(plain[2]) // 100, f"{tag}: {moved} of {len(plain[2])} parameters moved otherwise than "
              f"plain {name}'s (at most 1%: gradients within rounding of 0)")


def check_qgz_hops(tmp, common, ref):
    """qgZ in two hops at N = 4 (nodes of 2) and N = 6 (nodes of 2 and of 3): the wire to the byte, the planner's
    bytes, prefetch bitwise; with blocks of one number (a block's scale is its number over Q, its code Q, and
    x' = Q·scale: |x' - x| <= 2u|x|), the first step's gradient norm is plain FSDP's to rounding: a gradient
    averaged over N in two hops instead of one (or over H, or N/H) would be off by a factor."""
    base = None
    for n, h, bits in ((4, 2, 8), (4, 2, 4), (6, 2, 8), (6, 3, 4)):
        flags = ["--quantize-grads", f"int{bits}", "--quantize-grads-node", str(h)]
        tag = f"fsdp N={n} {' '.join(flags)}"
        result = trained(tag, fsdp(n, *common, *flags), tmp)
        if result is None:
            continue
        check_qgz_hops_wire(tag, result[1], n, h, bits, DEFAULT_BLOCK)
        # no replica groups (--shard-group): nothing moves between them, the second hop included
        across = [(r["rank"], op) for r in result[1]["ranks"] for op, c in r["comm_across_last_step"].items()
                  if c["calls"] or c["bytes_sent"] or c["bytes_recv"]]
        check(not across, f"{tag}: no traffic counted across replica groups without --shard-group ({across[:4]})")
        if n == 6:
            check_planned(tag, result[1], n, common, flags)
        last, want = losses(result)[-1], losses(ref)[-1]
        check(abs(last - want) < 0.05 * want, f"{tag}: last loss {last:.4f} near train_single's {want:.4f}")
        if (n, bits) == (4, 8):
            base = result
    for flags in (["--prefetch", "0"], ["--prefetch", "2"]):
        tag = f"fsdp N=4 --quantize-grads int8 --quantize-grads-node 2 {' '.join(flags)}"
        result = trained(tag, fsdp(4, *common, "--quantize-grads", "int8", "--quantize-grads-node", "2", *flags), tmp)
        if result is not None and base is not None:
            check(losses(result) == losses(base) and result[2] == base[2],
                  f"{tag}: bitwise the run with the defaults (every sum in a fixed order)")
    check_exact_blocks(tmp, common, "FSDP", fsdp)
    check_composes(tmp, common, ref, ["--quantize-grads", "int4", "--quantize-grads-node", "2"],
                   [(4, ["--quantize-weights", "int8", "--secondary-shard-group", "2"]),
                    (6, ["--grad-accum", "2", "--accum-mode", "no-sync"])], only_more=True)


def zero3(n, *flags):
    return [*MPIRUN, "-np", str(n), f"{BUILD}/train_zero3", *flags]


def check_zero3_wire(tag, summary, n, block):
    """Every rank: each tensor broadcast from its owner twice a pass as int8 wire bytes (n + 4 ceil(n/B), padded
    to 4: the whole tensor, one run), the gradients' reduces in fp32 as plain ZeRO-3's."""
    owner = ts.zero3_owners(n)
    for rank in summary["ranks"]:
        want = {"broadcast": [0, 0, 0, 0], "reduce": [0, 0, 0, 0]}
        for u in range(len(ts.UNITS)):
            for i in ts.UNITS[u]:
                for op, count, size in ((("broadcast", wire_bytes(ts.numel[i], block), 1),) * (
                                            (i in ts.gathered_by(u, +1)) + (i in ts.gathered_by(u, -1)))
                                        + ((("reduce", ts.numel[i], 4),) if i in ts.at_home(u) else ())):
                    sent, recv = ts.ring(op, count, rank["rank"], n, root=owner[i], size=size)
                    c = want[op]
                    c[0] += 1; c[1] += count; c[2] += sent; c[3] += recv
        got = {op: [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
               for op, c in rank["comm_last_step"].items() if c["calls"]}
        check(got == want, f"{tag} rank {rank['rank']}: calls/elements/sent/recv {got} == {want}")


def check_qwz_zero3(tmp, common, ref, model):
    """qwZ on ZeRO-3's broadcasts: the wire to the byte at N = 1..4 and the planner's bytes, every rank (the owner
    too) computing with the dequantized copy, so the run learns and is not plain ZeRO-3's; prefetch bitwise; the
    model written out unquantized."""
    plain = trained("zero3 N=2", zero3(2, *common), tmp)
    base = None
    for n in (1, 2, 3, 4):
        flags = ["--quantize-weights", "int8"]
        tag = f"zero3 N={n} {' '.join(flags)}"
        result = trained(tag, zero3(n, *common, *flags), tmp)
        if result is None:
            continue
        check_zero3_wire(tag, result[1], n, DEFAULT_BLOCK)
        last, want = losses(result)[-1], losses(ref)[-1]
        check(abs(last - want) < 0.05 * want, f"{tag}: last loss {last:.4f} near train_single's {want:.4f}")
        if n == 2:
            base = result
            check(plain is not None and losses(result) != losses(plain),
                  f"{tag}: not plain ZeRO-3's run (the weights did travel quantized)")
        if n == 3:
            check_planned(tag, result[1], 3, common, flags, "zero3")
    for flags in (["--prefetch", "0"], ["--prefetch", "2"]):
        tag = f"zero3 N=2 --quantize-weights int8 {' '.join(flags)}"
        result = trained(tag, zero3(2, *common, "--quantize-weights", "int8", *flags), tmp)
        if result is not None and base is not None:
            check(losses(result) == losses(base) and result[2] == base[2], f"{tag}: bitwise the run with the defaults")
    out = os.path.join(tmp, "zero3_steps0.bin")
    zero = list(common)
    zero[zero.index("--steps") + 1] = "0"
    ok = run(zero3(2, *zero, "--quantize-weights", "int8", "--out-model", out)) == 0
    check(ok and ts.read_params(out) == ts.read_params(model),
          "zero3 N=2 --quantize-weights int8 --steps 0 --out-model: the initial model bit for bit (written unquantized)")


# Features a quantized run composes with: (ranks, flags).
COMPOSED = [(4, ["--shard-group", "2"]), (2, ["--precision", "bf16"]),
            (3, ["--grad-accum", "2", "--accum-mode", "no-sync"]), (3, ["--grad-accum", "2"]),
            (3, ["--shard-min-numel", "200"]), (2, ["--grad-clip", "0.5"])]


def check_composes(tmp, common, ref, quantized, more, only_more=False):
    """Each feature with a quantizer's flags: runs, ends near train_single's loss (the d4 check holds the loss to a
    derived bound; this one catches a feature the quantizer breaks)."""
    for n, flags in ([] if only_more else COMPOSED) + more:
        tag = f"fsdp N={n} {' '.join(quantized)} {' '.join(flags)}"
        result = trained(tag, fsdp(n, *common, *quantized, *flags), tmp)
        if result is None:
            continue
        last, want = losses(result)[-1], losses(ref)[-1]
        check(abs(last - want) < 0.05 * want, f"{tag}: last loss {last:.4f} near train_single's {want:.4f}")


def check_hpz_traffic(tag, summary, n, m, plain):
    """Every rank: a unit's forward all-gather among all N, its backward's among the node's H (m here)."""
    for rank in summary["ranks"]:
        want = [0, 0, 0, 0]
        for u in range(len(ts.UNITS)):
            for ranks, direction in ((n, +1), (m, -1)):
                count = sum(ts.pad(i, n) for i in ts.gathered_by(u, direction))
                if count == 0:
                    continue
                sent, recv = ts.ring("all_gather", count, rank["rank"] % ranks, ranks)
                want = [want[0] + 1, want[1] + count, want[2] + sent, want[3] + recv]
        c = rank["comm_last_step"]["all_gather"]
        got = [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
        check(got == want, f"{tag} rank {rank['rank']}: all-gathers {got} == {want} (the backward's within the node)")


def check_hpz_bitwise(tmp, common, strategy, trainer, runs, traffic):
    """Each (N, H, flags) of `runs` with --secondary-shard-group H: bit for bit the losses and model of the run
    without it; traffic(tag, summary, N, H, the plain run's summary) checks the bytes of those without other flags,
    whose summaries it returns by (N, H)."""
    plain, summaries = {}, {}
    for n, m, flags in runs:
        key = (n, tuple(flags))
        if key not in plain:
            plain[key] = trained(f"{strategy} N={n} {' '.join(flags)}", trainer(n, *common, *flags), tmp)
        tag = f"{strategy} N={n} --secondary-shard-group {m} {' '.join(flags)}"
        result = trained(tag, trainer(n, *common, "--secondary-shard-group", str(m), *flags), tmp)
        if result is None or plain[key] is None:
            continue
        check(losses(result) == losses(plain[key]) and result[2] == plain[key][2],
              f"{tag}: bitwise the losses and model of the run without it")
        if not flags:
            traffic(tag, result[1], n, m, plain[key][1])
            summaries[(n, m)] = result[1]
    return summaries


def check_hpz(tmp, common):
    runs = [(n, m, []) for n in (2, 3, 4) for m in range(1, n) if n % m == 0]  # a node of all N is refused
    runs += [(4, 2, ["--prefetch", "2"]), (4, 2, ["--prefetch", "0"]), (4, 1, ["--shard-group", "2"]),
             (2, 1, ["--precision", "bf16"]), (2, 1, ["--grad-accum", "2"]),
             (2, 1, ["--grad-accum", "2", "--accum-mode", "no-sync"]), (3, 1, ["--shard-min-numel", "200"]),
             (4, 2, ["--quantize-weights", "int8"]), (4, 2, ["--eval-every", "1"])]
    check_hpz_bitwise(tmp, common, "fsdp", fsdp, runs, check_hpz_traffic)


def forward_gathered_bytes(rank):
    """A rank's params_gathered bytes allocated in the last step's forward, by unit (its memory timeline)."""
    got = {}
    for phase, unit, category, moved, _ in rank["timeline"]["events"]:
        if category == "params_gathered" and moved > 0 and phase in ("gather fwd", "release fwd"):
            got[unit] = got.get(unit, 0) + moved
    return got


def check_hpz_zero3_traffic(tag, summary, n, m, plain):
    """Every rank: each tensor's forward broadcast from its owner among all N, its backward's among the node's H (m
    here) from the rank of the owner's place, owner % H; the reduces as plain ZeRO-3's. And what the forward keeps:
    beyond plain ZeRO-3's gathers, unit u keeps whole each tensor its forward frees (not the head's) whose owner
    is at my place of another node, owner % H = r % H and owner != r (an owner keeps no copy of its own)."""
    owner = ts.zero3_owners(n)
    last = len(ts.UNITS) - 1
    for rank, plain_rank in zip(summary["ranks"], plain["ranks"]):
        r = rank["rank"]
        hpz, without = forward_gathered_bytes(rank), forward_gathered_bytes(plain_rank)
        kept = [hpz.get(u, 0) - without.get(u, 0) for u in range(last + 1)]
        want = [4 * sum(ts.numel[i] for i in ts.UNITS[u] if ts.last_unit(i) == u and u != last
                        and owner[i] % m == r % m and owner[i] != r) for u in range(last + 1)]
        check(kept == want, f"{tag} rank {r}: the forward keeps {kept} bytes a unit for its node, want {want}")
    for rank in summary["ranks"]:
        r = rank["rank"]
        want = {"broadcast": [0, 0, 0, 0], "reduce": [0, 0, 0, 0]}
        for u in range(len(ts.UNITS)):
            for i in ts.UNITS[u]:
                for op, ranks, me, root, now in (("broadcast", n, r, owner[i], i in ts.gathered_by(u, +1)),
                                                 ("broadcast", m, r % m, owner[i] % m, i in ts.gathered_by(u, -1)),
                                                 ("reduce", n, r, owner[i], i in ts.at_home(u))):
                    if not now:
                        continue
                    sent, recv = ts.ring(op, ts.numel[i], me, ranks, root=root)
                    c = want[op]
                    c[0] += 1; c[1] += ts.numel[i]; c[2] += sent; c[3] += recv
        got = {op: [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
               for op, c in rank["comm_last_step"].items() if c["calls"]}
        check(got == want, f"{tag} rank {r}: calls/elements/sent/recv {got} == {want} (the backward's in the node)")


def check_hpz_zero3(tmp, common):
    """hpZ on ZeRO-3: each tensor kept whole after its forward by the rank of its owner's place in every other node,
    and broadcast from there in the backward: bit for bit plain ZeRO-3's run (and with qwZ, qwZ's), the backward's
    bytes inside the node, the planner's the run's."""
    runs = [(n, m, []) for n in (2, 3, 4) for m in range(1, n) if n % m == 0]
    runs += [(4, 2, ["--prefetch", "2"]), (4, 2, ["--prefetch", "0"]), (2, 1, ["--precision", "bf16"]),
             (3, 1, ["--grad-accum", "2"]), (3, 1, ["--grad-accum", "2", "--accum-mode", "no-sync"]),
             (4, 2, ["--quantize-weights", "int8"]), (2, 1, ["--quantize-weights", "int8", "--prefetch", "0"]),
             (2, 1, ["--eval-every", "1"])]
    traffic = check_hpz_bitwise(tmp, common, "zero3", zero3, runs, check_hpz_zero3_traffic)
    if (4, 2) in traffic:
        check_planned("zero3 N=4 --secondary-shard-group 2", traffic[(4, 2)], 4, common, ["--secondary-shard-group", "2"],
                      "zero3")
    r = run_captured(zero3(2, *common, "--secondary-shard-group", "2"), timeout=120)
    says = "makes one node of all 2 ranks"
    check(r.returncode != 0 and r.stderr.count(says) == 1, f"zero3 --secondary-shard-group 2 at N=2: refused once, "
          f"saying '{says}' ({r.stderr.strip()[:160]})")


def check_qgz_zero3_wire(tag, summary, n, h, bits, block):
    """Every rank: each gradient gathered, quantized, at its owner (one wire a rank: the whole tensor, one run), or in
    two hops (h < n) first at the node's rank of the owner's place among the node's h ranks, then, from the ranks of
    that place, at the owner among the n/h nodes; the broadcasts as plain ZeRO-3's."""
    owner = ts.zero3_owners(n)
    for rank in summary["ranks"]:
        r = rank["rank"]
        want = {"broadcast": [0, 0, 0, 0], "gather": [0, 0, 0, 0]}
        for u in range(len(ts.UNITS)):
            for i in ts.UNITS[u]:
                wire, o = wire_bytes(ts.numel[i], block, bits), owner[i]
                for _ in range((i in ts.gathered_by(u, +1)) + (i in ts.gathered_by(u, -1))):
                    sent, recv = ts.ring("broadcast", ts.numel[i], r, n, root=o)
                    c = want["broadcast"]
                    c[0] += 1; c[1] += ts.numel[i]; c[2] += sent; c[3] += recv
                if i not in ts.at_home(u):
                    continue  # the head's wte: its gradient gathered after unit 0
                hops = [(n, r, o)] if h == n else [(h, r % h, o % h)]
                if h < n and r % h == o % h:
                    hops.append((n // h, r // h, o // h))
                for ranks, me, root in hops:
                    c = want["gather"]
                    c[0] += 1; c[1] += wire * ranks
                    c[2] += 0 if me == root or ranks == 1 else wire
                    c[3] += (ranks - 1) * wire if me == root else 0
        got = {op: [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
               for op, c in rank["comm_last_step"].items() if c["calls"]}
        check(got == want, f"{tag} rank {r}: calls/elements/sent/recv {got} == {want}")


def check_qgz_zero3(tmp, common, ref):
    """qgZ on ZeRO-3's reduces to the owner: the wire to the byte at N = 1..4 and in two hops at N = 4 and 6, the
    planner's bytes; prefetch bitwise; near train_single's loss; with blocks of one number the first step's gradient
    norm and model are plain ZeRO-3's (an average over anything but N, or a part summed at the wrong owner, is not);
    it composes with qwZ and hpZ, bf16 and accumulation."""
    base = {}
    for n, h, bits, block in ((1, 1, 8, None), (2, 2, 8, None), (3, 3, 4, 16), (4, 4, 8, None), (4, 2, 8, None),
                              (4, 2, 4, None), (6, 2, 8, None), (6, 3, 4, None)):
        flags = ["--quantize-grads", f"int{bits}"] + (["--quantize-block", str(block)] if block else [])
        flags += ["--quantize-grads-node", str(h)] if h < n else []
        tag = f"zero3 N={n} {' '.join(flags)}"
        result = trained(tag, zero3(n, *common, *flags), tmp)
        if result is None:
            continue
        check_qgz_zero3_wire(tag, result[1], n, h, bits, block or DEFAULT_BLOCK)
        last, want = losses(result)[-1], losses(ref)[-1]
        check(abs(last - want) < 0.05 * want, f"{tag}: last loss {last:.4f} near train_single's {want:.4f}")
        if n in (3, 6) and bits == 4:
            check_planned(tag, result[1], n, common, flags, "zero3")
        base[(n, h, bits)] = result
    for key, more in (((2, 2, 8), ["--prefetch", "0"]), ((4, 2, 8), ["--prefetch", "2"]),
                      ((4, 2, 8), ["--prefetch", "0"])):
        n, h, bits = key
        flags = ["--quantize-grads", f"int{bits}"] + (["--quantize-grads-node", str(h)] if h < n else [])
        tag = f"zero3 N={n} {' '.join(flags)} {' '.join(more)}"
        result = trained(tag, zero3(n, *common, *flags, *more), tmp)
        if result is not None and key in base:
            check(losses(result) == losses(base[key]) and result[2] == base[key][2],
                  f"{tag}: bitwise the run with the defaults (every sum in a fixed order)")
    check_exact_blocks(tmp, common, "ZeRO-3", zero3)
    for n, flags in ((4, ["--quantize-weights", "int8", "--secondary-shard-group", "2", "--quantize-grads-node", "2"]),
                     (2, ["--precision", "bf16"]), (2, ["--precision", "bf16", "--reduce-dtype", "fp32"]),
                     (3, ["--grad-accum", "2", "--accum-mode", "no-sync"]),
                     (3, ["--grad-accum", "2"]), (2, ["--grad-clip", "0.5"]), (2, ["--offload-optimizer"])):
        tag = f"zero3 N={n} --quantize-grads int4 {' '.join(flags)}"
        result = trained(tag, zero3(n, *common, "--quantize-grads", "int4", *flags), tmp)
        if result is not None:
            last, want = losses(result)[-1], losses(ref)[-1]
            check(abs(last - want) < 0.05 * want, f"{tag}: last loss {last:.4f} near train_single's {want:.4f}")
    for flags, says in ((["--quantize-grads", "int8", "--quantize-grads-node", "2"], "makes one node of all 2 ranks"),
                        (["--quantize-block", "64"], "neither of which is given")):
        r = run_captured(zero3(2, *common, *flags), timeout=120)
        check(r.returncode != 0 and r.stderr.count(says) == 1,
              f"zero3 {' '.join(flags)}: refused once, saying '{says}' ({r.stderr.strip()[:160]})")


def check_full_precision_out(tmp, model, common):
    """--steps 0: the model written is the initial one, bit for bit (gather_full_model never quantizes)."""
    out = os.path.join(tmp, "zero_steps.bin")
    steps0 = [a for a in common if a != "--quiet"]
    steps0[steps0.index("--steps") + 1] = "0"
    check(run(fsdp(3, *steps0, "--quantize-weights", "int8", "--quiet", "--out-model", out)) == 0,
          "fsdp N=3 --quantize-weights int8 --steps 0: runs")
    if os.path.exists(out):
        check(ts.read_params(out) == ts.read_params(model), "fsdp N=3 --quantize-weights int8 --steps 0: writes the "
              "initial model bit for bit (the model written out is never quantized)")


def check_resume(tmp, common, flags, name="fsdp", trainer=fsdp):
    ck, whole, part = os.path.join(tmp, "ck"), os.path.join(tmp, "whole.jsonl"), os.path.join(tmp, "part.jsonl")
    shutil.rmtree(ck, ignore_errors=True)
    for log in (whole, part):  # a resumed run appends to its log
        if os.path.exists(log):
            os.remove(log)
    ten = [a for a in common]
    ten[ten.index("--steps") + 1] = "10"
    ok = run(trainer(2, *common, *flags, "--log", whole)) == 0
    ok &= run(trainer(2, *ten, *flags, "--ckpt-dir", ck)) == 0
    ok &= run(trainer(2, *common, *flags, "--resume", ck, "--log", part)) == 0
    if ok:
        a, b = read_log(whole)[0], read_log(part)[0]
        ok = [x["loss"] for x in a[10:]] == [x["loss"] for x in b if x["step"] > 10]
    check(ok, f"{name} N=2 {' '.join(flags)}: 10 + resumed 10 steps equal 20 steps (bitwise)")


def check_refusals(tmp, common):
    for flags, says in ((["--quantize-grads", "int2"], "int8 or int4"),
                        (["--secondary-shard-group", "3"], "--secondary-shard-group 3 does not divide the 2 ranks"),
                        (["--secondary-shard-group", "2", "--shard-group", "1"],
                         "does not divide the 1 ranks that shard the model (a --shard-group)"),
                        (["--secondary-shard-group", "2"], "makes one node of all 2 ranks"),
                        (["--secondary-shard-group", "1", "--reshard-after-forward", "0"], "it would do nothing"),
                        (["--quantize-weights", "int4"], "int8 only"),
                        (["--quantize-grads-node", "2"], "--quantize-grads-node sets the nodes of --quantize-grads"),
                        (["--quantize-grads", "int8", "--quantize-grads-node", "3"],
                         "--quantize-grads-node 3 does not divide the 2 ranks"),
                        (["--quantize-grads", "int8", "--quantize-grads-node", "2"],
                         "--quantize-grads-node 2 makes one node of all 2 ranks"),
                        (["--quantize-grads", "int8", "--quantize-grads-node", "1"],
                         "--quantize-grads-node 1 makes a node of each rank"),
                        (["--quantize-block", "64"], "neither of which is given"),
                        (["--quantize-weights", "int8", "--quantize-block", "0"], "--quantize-block"),
                        # every tensor kept whole: no slice to quantize, gather in a node or group
                        (["--shard-min-numel", "1000000000", "--quantize-weights", "int8"],
                         "keeps every tensor whole (the largest has"),
                        (["--shard-min-numel", "1000000000", "--quantize-grads", "int4"], "--quantize-grads changes how"),
                        (["--shard-min-numel", "1000000000", "--secondary-shard-group", "1"],
                         "--secondary-shard-group changes how slices travel, and there are none"),
                        (["--shard-min-numel", "1000000000", "--shard-group", "1"], "--shard-group changes how")):
        r = run_captured(fsdp(2, *common, *flags), timeout=120)
        check(r.returncode != 0 and says in r.stderr and r.stderr.count(says) == 1,
              f"fsdp {' '.join(flags)}: refused once, saying '{says}' ({r.stderr.strip()[:160]})")


def docs_rows(cells, count, what):
    """docs/zeropp.md's table whose rows are a flag set (`...` or (FSDP)) then `cells`: (its flags, its cells)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    rows = re.findall(r"^\| (\(FSDP\)|`[^`]+`) \| " + cells + r" \|$", open(os.path.join(root, "docs", "zeropp.md")).read(),
                      re.M)
    check(len(rows) == count, f"docs/zeropp.md's {what} table has its {count} rows ({len(rows)})")
    return [([] if name == "(FSDP)" else name.strip("`").split(), numbers) for name, *numbers in rows]


def plan_lines(*args):
    return [line.split("\t") for line in subprocess.run([f"{BUILD}/plan", *args], capture_output=True,
                                                        text=True).stdout.splitlines()]


def check_docs_table():
    """docs/zeropp.md's d4 table: each row's numbers are build/plan's for its flags."""
    for flags, numbers in docs_rows(r"([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+)", 8, "d4"):
        base = ["--config", "d4", "--ranks", "4", *flags]
        sent = {f[2]: int(f[5]) for f in plan_lines(*base, "--traffic") if f[0] == "fsdp" and f[1] == "0"}
        held = [[int(f[3]), int(f[8])] for f in plan_lines(*base, "--tsv") if f[0] == "fsdp"]
        got = [sent.get("all_gather"), sent.get("reduce_scatter", sent.get("all_to_all")), *(held[0] if held else [])]
        want = [int(x.replace(",", "")) for x in numbers]
        check(got == want, f"docs/zeropp.md, d4 {' '.join(flags)}: {want} == build/plan's {got}")


def check_docs_what_if():
    """docs/zeropp.md's 384-rank table: each row's tokens/s and exposed milliseconds are build/plan --time's."""
    for flags, numbers in docs_rows(r"([\d,]+) \(([\d.]+)\) \| ([\d,]+) \(([\d.]+)\)", 7, "384-rank"):
        got = []
        for across in ("1e-5,25", "1e-5,3.125"):
            row = [f for f in plan_lines("--config", "d12", "--ranks", "384", "--batch", "6144", "--seq", "1024",
                                         "--precision", "bf16", "--time", "--tokens-per-s", "146656",
                                         "--ranks-per-node", "16", "--across", across, "--tsv", *flags)
                   if f[0] == "fsdp" and f[1] == "384"]
            got += [f"{float(row[0][7]):,.0f}", f"{1000 * float(row[0][5]):.1f}"] if row else [None, None]
        check(got == numbers, f"docs/zeropp.md, 384 ranks {' '.join(flags)}: {numbers} == build/plan --time's {got}")


def check_docs_paper():
    """docs/zeropp.md's paper setting: each row's two predicted speed-ups of ZeRO++ over FSDP (18B, 384 ranks in
    machines of 16) are build/plan --time's, for the network rates the page gives."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "zeropp.md")).read()
    rows = re.findall(r"^\| ([12])K \| (400|100) Gb/s \| [\d.]+× \| ([\d.]+)× (?:\([\d.]+ GB/s\) )?\| ([\d.]+)× ", text, re.M)
    check(len(rows) == 4, f"docs/zeropp.md's paper table has its 4 rows ({len(rows)})")
    zeropp = ["--quantize-weights", "int8", "--secondary-shard-group", "16", "--quantize-grads", "int4",
              "--quantize-grads-node", "16"]
    for k, network, *said in rows:
        got = []
        for across in (("3.125", "50") if network == "400" else ("0.78125", "12.5")):
            steps = []
            for flags in ([], zeropp):
                row = [f for f in plan_lines("--dims", "40,32,6144", "--ranks", "384", "--batch", str(384 * 2 * int(k)),
                                             "--seq", "512", "--precision", "bf16", "--time", "--tokens-per-s", "373",
                                             "--ranks-per-node", "16", "--within", "5e-6,150", "--across",
                                             f"1e-5,{across}", "--tsv", *flags) if f[:2] == ["fsdp", "384"]]
                steps.append(float(row[0][6]) if row else None)
            got.append(f"{steps[0] / steps[1]:.2f}" if None not in steps else None)
        check(got == said, f"docs/zeropp.md, the paper's setting, {k}K tokens on {network} Gb/s: {said} == "
              f"build/plan --time's {got}")


def check_docs_zero3():
    """docs/zeropp.md's ZeRO++ on ZeRO-3, d4 at N = 4: qwZ's broadcast bytes and peaks, hpZ's secondary copies and
    bytes across machines, qgZ's gradient bytes and communication buffers, each build/plan's."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "zeropp.md")).read()
    got = []
    for flags in ([], ["--quantize-weights", "int8"]):
        base = ["--config", "d4", "--ranks", "4", *flags]
        sent = [int(f[5]) for f in plan_lines(*base, "--traffic") if f[:3] == ["zero3", "0", "broadcast"]]
        held = [[int(f[3]), int(f[8])] for f in plan_lines(*base, "--tsv") if f[:2] == ["zero3", "0"]]
        got.append((sent[0] if sent else None, *(held[0] if held else [None, None])))
    want = [(69445632, 6318080, 0), (17632680, 57829376, 14147380)]
    said = all(f"{x:,}" in text for x in (17632680, 69445632, 6318080, 57829376, 14147380))
    check(got == want and said, f"docs/zeropp.md, qwZ on ZeRO-3: {want} == build/plan's {got}, and the page says so")
    # hpZ: rank 2's params_gathered peak, and rank 0's bytes among both machines of two
    got = []
    for flags in ([], ["--secondary-shard-group", "2"]):
        base = ["--config", "d4", "--ranks", "4", *flags]
        held = [int(f[3]) for f in plan_lines(*base, "--tsv") if f[:2] == ["zero3", "2"]]
        across = [int(f[10]) for f in plan_lines(*base, "--time", "--tokens-per-s", "1", "--ranks-per-node", "2",
                                                 "--tsv") if f[:2] == ["zero3", "4"]]
        got.append((held[0] if held else None, across[0] if across else None))
    want = [(56505344, 83132416), (56505344, 74166272)]
    said = all(f"{x:,}" in text for pair in want for x in pair)
    check(got == want and said, f"docs/zeropp.md, hpZ on ZeRO-3: {want} == build/plan's {got}, and the page says so")
    # qgZ: rank 0's gradient bytes sent, then the comm_buffers peaks of ranks 0, 1 and 2, in one hop (int8, int4)
    # and in two (rank 2, at the owner's place in the other node, sums too)
    got = []
    for flags in ([], ["--quantize-grads", "int8"], ["--quantize-grads", "int4"],
                  ["--quantize-grads", "int8", "--quantize-grads-node", "2"]):
        base = ["--config", "d4", "--ranks", "4", *flags]
        sent = [int(f[5]) for f in plan_lines(*base, "--traffic") if f[:2] == ["zero3", "0"] and f[2] != "broadcast"]
        peaks = {f[1]: int(f[8]) for f in plan_lines(*base, "--tsv") if f[0] == "zero3"}
        got.append((sent[0] if sent else None, peaks.get("0"), peaks.get("1"), peaks.get("2")))
    want = [(13686784, 0, 0, 0), (3475160, 276716340, 77234996, 75170772), (1764312, 243995828, 69352628, 67545428),
            (3475160, 253870980, 78940492, 203680644)]
    said = all(f"{x:,}" in text for x in (13686784, 3475160, 1764312, 276716340, 77234996, 75170772, 203680644))
    check(got == want and said, f"docs/zeropp.md, qgZ on ZeRO-3: {want} == build/plan's {got}, and the page says so")


def check_planned_across_machines():
    """build/plan --time --tsv's last two fields, rank 0's bytes sent in the step and those among ranks of more than
    one machine: d4 at N = 4 on machines of 2 with hpZ's nodes of 2, every byte but the backward's gathers (inside
    the node) crosses: the forward's gathers 3/4 pad(P) 4 = 48,898,560, the backward's 1/2 (pad(P) - pad(P_h)) 4 =
    6,842,368, inside, the reduce-scatters 48,898,560; at N = 2 (one machine) none."""
    out = subprocess.run([f"{BUILD}/plan", "--config", "d4", "--ranks", "4", "--time", "--tokens-per-s", "1",
                          "--ranks-per-node", "2", "--tsv", "--secondary-shard-group", "2"], capture_output=True,
                         text=True).stdout
    rows = {int(f[1]): (int(f[9]), int(f[10])) for f in (l.split("\t") for l in out.splitlines()) if f[0] == "fsdp"}
    check(rows.get(4) == (48898560 + 6842368 + 48898560, 48898560 + 48898560) and rows.get(2, (0, 1))[1] == 0,
          f"plan --time --tsv: bytes sent and across machines by rank 0 {rows}")
    # qgZ int8's 12,415,896 bytes: in one hop an all-to-all among both machines, in two a third of them across; the
    # all-gathers, 3/4 (2 pad(P) - pad(P_h)) 4 = 59,162,112, among both
    for hops, across in (([], 12415896), (["--quantize-grads-node", "2"], 12415896 // 3)):
        out = subprocess.run([f"{BUILD}/plan", "--config", "d4", "--ranks", "4", "--time", "--tokens-per-s", "1",
                              "--ranks-per-node", "2", "--tsv", "--quantize-grads", "int8", *hops], capture_output=True,
                             text=True).stdout
        rows = {int(f[1]): (int(f[9]), int(f[10])) for f in (l.split("\t") for l in out.splitlines()) if f[0] == "fsdp"}
        check(rows.get(4) == (59162112 + 12415896, 59162112 + across),
              f"plan --time --tsv --quantize-grads int8 {' '.join(hops)}: sent and across machines {rows.get(4)} == "
              f"{(59162112 + 12415896, 59162112 + across)}")


def check_d4(tmp):
    """200 steps of d4 (vocab 256, B = 4, T = 64): the mean loss of the last 50 steps of each quantized run (qwZ on
    FSDP and on ZeRO-3, qgZ int8 and int4 at N = 2, qgZ int4 in two hops at N = 4) differs from train_single's by
    less than train_single's own differs under another initialisation seed; so does train_single --precision bf16
    (bf16 products, working copies and gradients against fp32: docs/precision.md)."""
    data = os.path.join(tmp, "d4data")
    os.makedirs(data)
    rng = random.Random(7)
    for name, count in (("train.bin", 100000), ("val.bin", 4000)):
        write_learnable_shard(os.path.join(data, name), count, 256, rng)
    common = ["--config", "d4", "--vocab", "256", "--data", data, "--batch", "4", "--seq", "64", "--steps", "200",
              "--lr", "1e-3", "--quiet"]
    means = {}
    for name, command in (("single", [*MPIRUN, "-np", "1", f"{BUILD}/train_single", *common]),
                          ("single --seed 2", [*MPIRUN, "-np", "1", f"{BUILD}/train_single", *common, "--seed", "2"]),
                          ("single --precision bf16",
                           [*MPIRUN, "-np", "1", f"{BUILD}/train_single", *common, "--precision", "bf16"]),
                          ("fsdp N=2 --quantize-weights int8", fsdp(2, *common, "--quantize-weights", "int8")),
                          ("fsdp N=2 --quantize-grads int8", fsdp(2, *common, "--quantize-grads", "int8")),
                          ("fsdp N=2 --quantize-grads int4", fsdp(2, *common, "--quantize-grads", "int4")),
                          ("zero3 N=2 --quantize-weights int8", zero3(2, *common, "--quantize-weights", "int8")),
                          ("zero3 N=2 --quantize-grads int4", zero3(2, *common, "--quantize-grads", "int4")),
                          ("fsdp N=4 --quantize-grads int4 --quantize-grads-node 2",
                           fsdp(4, *common, "--quantize-grads", "int4", "--quantize-grads-node", "2"))):
        log = os.path.join(tmp, "d4.jsonl")
        if run([*command, "--log", log]) != 0:
            check(False, f"d4 {name}: runs")
            return
        steps = [x["loss"] for x in read_log(log)[0]]
        means[name] = sum(steps[-50:]) / 50
    seed = abs(means["single --seed 2"] - means["single"])
    print("d4, 200 steps, mean loss of the last 50: " + ", ".join(f"{k} {v:.5f}" for k, v in means.items()))
    for name, mean in means.items():
        if name.startswith(("fsdp", "zero3", "single --precision")):
            moved = abs(mean - means["single"])
            check(moved < seed, f"d4 200 steps: {name} moves the loss by {moved:.5f}, less than another seed does "
                  f"({seed:.5f})")


def main():
    tmp = CHECKS.scratch("shardlab_zeropp_")
    model = os.path.join(tmp, "model.bin")
    assert run([f"{BUILD}/init_model", "--layers", str(ts.L), "--heads", str(ts.NH), "--channels", str(ts.C),
                "--vocab", str(ts.V), "--max-seq", str(ts.MAXT), "--out", model]) == 0
    rng = random.Random(5)
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    for name, count in (("train.bin", 20000), ("val.bin", 2000)):
        write_learnable_shard(os.path.join(data, name), count, ts.V, rng)
    common = ["--model", model, "--data", data, "--batch", str(ts.BATCH), "--seq", str(ts.SEQ),
              "--steps", str(ts.STEPS), "--lr", "1e-3", "--weight-decay", "0.1", "--quiet"]
    ref = trained("train_single", [*MPIRUN, "-np", "1", f"{BUILD}/train_single", *common], tmp)
    plain = trained("fsdp N=2", fsdp(2, *common), tmp)
    if ref is None or plain is None:
        CHECKS.finish()
    check_qwz(tmp, common, plain)
    check_composes(tmp, common, ref, ["--quantize-weights", "int8"], [(2, ["--unit-blocks", "2"]), (2, ["--ema", "0.9"])])
    check_qgz(tmp, common, ref)
    check_qgz_hops(tmp, common, ref)
    check_qwz_zero3(tmp, common, ref, model)
    check_hpz(tmp, common)
    check_hpz_zero3(tmp, common)
    check_qgz_zero3(tmp, common, ref)
    check_full_precision_out(tmp, model, common)
    check_resume(tmp, common, ["--quantize-weights", "int8", "--quantize-block", "16"])
    check_resume(tmp, common, ["--quantize-grads", "int4", "--secondary-shard-group", "1"])
    check_resume(tmp, common, ["--quantize-grads", "int4", "--secondary-shard-group", "1", "--quantize-weights", "int8"],
                 "zero3", zero3)
    check_refusals(tmp, common)
    check_docs_table()
    check_docs_what_if()
    check_docs_zero3()
    check_docs_paper()
    check_planned_across_machines()
    check_d4(tmp)
    CHECKS.finish()


if __name__ == "__main__":
    main()
