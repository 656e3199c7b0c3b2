#!/usr/bin/env python3
"""The training features, each held to what it means (docs/training.md):
  - --grad-clip C: every step's grad_norm, on every strategy at N = 1..4 (and with
    --grad-accum), equals
    train_single's within 1e-6 relative, every rank ends with the same norm
    bitwise, and the clipped runs follow train_single (losses and final
    parameters within 1e-5). The norm and the clip factor are checked against
    AdamW's first moment after one step, read from --save-full's optimizer.bin:
    m = (1 - beta1) * clipped gradient, so |m| / (1 - beta1) must be the logged
    norm unclipped, and C * norm / (norm + 1e-6) clipped.
  - --lr-schedule / --warmup / --min-lr: the logged lr is the formula's, and the
    optimizer uses it: one step of warmup 2 at lr 2L is bitwise one step at L,
    one step of a cosine ending at X is bitwise one step at X.
  - --recompute: bitwise the same losses and final model, for every strategy.
  - --data-order llmc: the batches a trainer reads are llm.c's shuffled order,
    re-implemented here (MT19937 from its reference init_genrand); see
    check_llmc_order.
  - --precision bf16: within 2e-2 of fp32 over 50 steps of d2; clipping and
    --recompute in bf16 (check_precision).
  - the step's time split: compute + communication wait + optimizer = the step, and a
    known wait lands in communication (check_time_split).
  - build/sample: a seed gives one text, another seed another, temperature 0 is
    greedy; ids are below V, and the text is the prompt and the ids decoded
    (GPT-2's from encoder.json, here); the context slides past maxT.
On a GPU (run_gpu_tests.sh) the trainers come from build/cuda, with CHANNELS = 36
(see test_strategies.py), and the tools that have no CUDA build (init_model,
sample, tests/loader_order) from TOOLS_DIR.
Usage: test_training.py BUILD_DIR "MPIRUN ..." [CHANNELS [TOOLS_DIR]] """
import array
import json
import math
import os
import random
import shlex
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "labs"))
from check import reference_flags  # noqa: E402
from testlib import Checks, read_log, run, with_flags, write_learnable_shard

BUILD, MPIRUN = sys.argv[1], shlex.split(sys.argv[2])
L, NH, C, V, MAXT = 2, 2, int(sys.argv[3]) if len(sys.argv) > 3 else 38, 101, 37
TOOLS = sys.argv[4] if len(sys.argv) > 4 else BUILD
BATCH, SEQ = 12, 16
CHECKS = Checks("training")
check = CHECKS.check


def read_floats(path, skip=1024):
    a = array.array("f")
    a.frombytes(open(path, "rb").read()[skip:])
    return a


def trainer(strategy, n):
    """The command for a strategy: single, ddp, zero1, zero2 (train_ddp's stages), zero3, fsdp."""
    launch = [] if strategy == "single" else [*MPIRUN, "-np", str(n)]
    if strategy in ("zero1", "zero2"):
        return [*launch, f"{BUILD}/train_ddp", "--zero-stage", strategy[-1]]
    return [*launch, f"{BUILD}/train_{strategy}"]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def check_clip_equivalence(tmp, common):
    clip = ["--grad-clip", "0.5"]
    ref_log, ref_out = os.path.join(tmp, "clip_single.jsonl"), os.path.join(tmp, "clip_single.bin")
    check(run([*trainer("single", 1), *common, *clip, "--log", ref_log, "--out-model", ref_out]) == 0,
          "train_single --grad-clip runs")
    ref, _ = read_log(ref_log)
    ref_params = read_floats(ref_out)
    clipped = sum(1 for s in ref if s["grad_norm"] > 0.5)
    check(all(s["grad_norm"] > 0 for s in ref) and clipped >= len(ref) // 2,
          f"train_single logs a grad_norm every step, and --grad-clip 0.5 clips ({clipped} of {len(ref)} steps)")
    runs = [(s, n, []) for s in ("ddp", "zero1", "zero2", "zero3", "fsdp") for n in (1, 2, 3, 4)]
    runs += [("zero2", 2, ["--grad-accum", "3"]), ("fsdp", 3, ["--grad-accum", "2", "--accum-mode", "no-sync"])]
    for strategy, n, extra in runs:
        tag = " ".join([f"{strategy} N={n} --grad-clip 0.5", *extra])
        log, out = os.path.join(tmp, f"clip_{strategy}{n}.jsonl"), os.path.join(tmp, f"clip_{strategy}{n}.bin")
        if run([*trainer(strategy, n), *common, *clip, *extra, "--log", log, "--out-model", out]) != 0:
            check(False, f"{tag}: runs")
            continue
        steps, summary = read_log(log)
        worst = max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(steps, ref))
        check(len(steps) == len(ref) and worst <= 1e-6,
              f"{tag}: grad_norm matches train_single's every step (worst relative diff {worst:.1e})")
        last = [r["last_grad_norm"] for r in summary["ranks"]]
        check(len(last) == n and all(x == steps[-1]["grad_norm"] for x in last),
              f"{tag}: every rank has the same norm, bitwise ({last})")
        worst = max(rel(a["loss"], b["loss"]) for a, b in zip(steps, ref))
        pdiff = max(abs(a - b) for a, b in zip(read_floats(out), ref_params))
        check(worst <= 1e-5 and pdiff <= 1e-5,
              f"{tag}: follows train_single (losses {worst:.1e} relative, parameters {pdiff:.1e})")
        # and bit for bit its reference, train_single --as-ranks N (docs/testing.md): the norm, summed in another
        # order, is within 2 P 2^-53; the clip factor rounded to float from it, and so the model, are the same bits
        ref_flags = reference_flags(strategy, n, extra)
        rlog, rout = os.path.join(tmp, f"clipref_{strategy}{n}.jsonl"), os.path.join(tmp, f"clipref_{strategy}{n}.bin")
        single_extra = [x for x in extra if x not in ("--accum-mode", "no-sync", "sync-each")]
        if run([*MPIRUN, "-np", "1", f"{BUILD}/train_single", *common, *clip, *single_extra, *ref_flags, "--log", rlog,
                "--out-model", rout]):  # under the launcher: a rank's threads
            check(False, f"{tag}: its reference runs")
            continue
        rsteps, _ = read_log(rlog)
        P = len(read_floats(out))
        worst = max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(steps, rsteps))
        check([x["loss"] for x in steps] == [x["loss"] for x in rsteps] and worst <= 2 * P * 2.0 ** -53
              and open(out, "rb").read() == open(rout, "rb").read(),
              f"{tag}: bitwise the losses and model of train_single {' '.join(ref_flags)}, its norms within "
              f"{worst:.1e} (2 P 2^-53 = {2 * P * 2.0 ** -53:.1e})")


def first_moment_norm(ckpt_dir):
    """|m| / (1 - beta1) after one AdamW step: the norm of the gradient the step used."""
    step_dir = os.path.join(ckpt_dir, open(os.path.join(ckpt_dir, "latest")).read().strip())
    header = struct.unpack("<3i", open(os.path.join(step_dir, "optimizer.bin"), "rb").read(12))
    m = read_floats(os.path.join(step_dir, "optimizer.bin"))[:header[2]]
    one_minus_beta1 = struct.unpack("<f", struct.pack("<f", 1 - struct.unpack("<f", struct.pack("<f", 0.9))[0]))[0]
    return math.sqrt(sum(x * x for x in m)) / one_minus_beta1


def check_clip_against_optimizer(tmp, common):
    for strategy, n in (("single", 1), ("ddp", 2), ("zero1", 3), ("zero2", 4), ("fsdp", 3)):
        norms = {}
        for clip in ("1e30", "quarter"):
            ck, log = os.path.join(tmp, f"m_{strategy}_{clip}"), os.path.join(tmp, f"m_{strategy}_{clip}.jsonl")
            value = clip if clip == "1e30" else repr(norms["1e30"][0] / 4)
            rc = run([*trainer(strategy, n), *common[:-2], "--steps", "1", "--grad-clip", value, "--log", log,
                      "--ckpt-dir", ck, "--save-full"])
            if rc != 0:
                check(False, f"{strategy} N={n} --grad-clip {value} --save-full runs")
                return
            steps, _ = read_log(log)
            norms[clip] = (steps[0]["grad_norm"], first_moment_norm(ck), float(value))
        logged, used, _ = norms["1e30"]
        check(rel(logged, used) <= 1e-6,
              f"{strategy} N={n}: the logged norm {logged:.7g} is the norm of the gradient AdamW used ({used:.7g})")
        logged, used, c = norms["quarter"]
        want = c * logged / (logged + 1e-6)
        check(rel(used, want) <= 1e-6,
              f"{strategy} N={n}: --grad-clip {c:.5g} scales that gradient to norm {used:.7g} "
              f"(C * norm / (norm + 1e-6) = {want:.7g})")


def check_schedule(tmp, common):
    lr, W, S, min_lr = 2e-3, 3, 10, 2e-4
    log = os.path.join(tmp, "cosine.jsonl")
    rc = run([*trainer("fsdp", 2), *with_flags(common[:-2], "--steps", str(S), "--lr", str(lr)), "--warmup", str(W),
              "--lr-schedule", "cosine", "--min-lr", str(min_lr), "--log", log])
    check(rc == 0, "fsdp N=2 --lr-schedule cosine runs")
    if rc == 0:
        steps, _ = read_log(log)
        want = [lr * s / W if s <= W else min_lr + (lr - min_lr) * (1 + math.cos(math.pi * (s - W) / (S - W))) / 2
                for s in range(1, S + 1)]
        worst = max(rel(a["lr"], b) for a, b in zip(steps, want))
        check(len(steps) == S and worst <= 1e-6, f"the logged lr is the cosine schedule's (worst relative diff {worst:.1e})")
    pairs = [("warmup: step 1 of 2 at lr 2e-3 is a step at 1e-3", ["--lr", "2e-3", "--warmup", "2"], ["--lr", "1e-3"]),
             ("cosine: the last step is at --min-lr", ["--lr", "5e-3", "--lr-schedule", "cosine", "--min-lr", "1e-3"],
              ["--lr", "1e-3"]),
             ("constant after warmup 0 is --lr", ["--lr", "1e-3", "--lr-schedule", "constant"], ["--lr", "1e-3"])]
    plain = os.path.join(tmp, "sched_other.bin")
    for what, flags, same in pairs:
        outs = []
        for k, f in enumerate((flags, same)):
            out = os.path.join(tmp, f"sched{k}.bin")
            check(run([*trainer("single", 1), *with_flags(common[:-2], "--steps", "1", *f), "--out-model", out]) == 0,
                  f"{what}: runs")
            outs.append(open(out, "rb").read())
        check(outs[0] == outs[1], f"{what} (bitwise the same model)")
    run([*trainer("single", 1), *with_flags(common[:-2], "--steps", "1", "--lr", "2e-3"), "--out-model", plain])
    check(open(plain, "rb").read() != outs[1], "and another lr gives another model (the comparison can fail)")


def check_recompute(tmp, common):
    for strategy, n in (("single", 1), ("ddp", 2), ("zero3", 3), ("fsdp", 4)):
        runs = {}
        for flag in ([], ["--recompute"]):
            tag = f"{strategy}{n}{''.join(flag)}"
            log, out = os.path.join(tmp, f"{tag}.jsonl"), os.path.join(tmp, f"{tag}.bin")
            if run([*trainer(strategy, n), *common, "--grad-clip", "1e30", *flag, "--log", log, "--out-model", out]):
                check(False, f"{strategy} N={n} {' '.join(flag)}: runs")
                return
            steps, summary = read_log(log)
            runs[bool(flag)] = ([(s["loss"], s["grad_norm"]) for s in steps], open(out, "rb").read(),
                                summary["ranks"][0]["mem"]["activations"]["peak"])
        plain, recomputed = runs[False], runs[True]
        check(plain[0] == recomputed[0] and plain[1] == recomputed[1],
              f"{strategy} N={n} --recompute: bitwise the same losses, gradient norms and final model")
        b, T = BATCH // n, SEQ
        saved = 4 * (L - 1) * (17 * b * T * C + 4 * b * T + b * NH * T * T)
        check(plain[2] - recomputed[2] == saved,
              f"{strategy} N={n} --recompute: activations {plain[2]} -> {recomputed[2]} bytes, "
              f"(L-1)(17bTC + 4bT + b NH T^2) floats less ({saved} bytes)")


def check_precision(tmp, data):
    """--precision bf16 on the d2 preset: 50 steps stay within 2e-2 relative of the fp32 run's losses (and are
    not the fp32 run's: the flag does something); --grad-clip's norm from bf16 ranks (fp32 gradients) is their
    reference's, train_single --as-ranks N, within 2 P 2^-53 (the norm's sum in another order), and the losses and
    model the same bits; --recompute is bitwise the plain bf16 run."""
    common = ["--config", "d2", "--vocab", str(V), "--data", data, "--batch", str(BATCH), "--seq", str(SEQ),
              "--lr", "1e-3", "--quiet"]
    curves = {}
    for precision in ("fp32", "bf16"):
        log = os.path.join(tmp, f"d2_{precision}.jsonl")
        if run([*trainer("single", 1), *common, "--steps", "50", "--precision", precision, "--log", log]):
            check(False, f"d2 --precision {precision}: runs")
            return
        curves[precision] = [s["loss"] for s in read_log(log)[0]]
    worst = max(rel(a, b) for a, b in zip(curves["bf16"], curves["fp32"]))
    check(len(curves["bf16"]) == 50 and 0 < worst <= 2e-2 and curves["bf16"][-1] < curves["bf16"][0] - 1,
          f"d2 bf16: 50 steps within 2e-2 of fp32's losses (worst {worst:.2e}), and learning")
    norms, runs = {}, {}
    clip = ["--steps", "8", "--precision", "bf16", "--reduce-dtype", "fp32", "--grad-clip", "0.5"]
    for strategy, n, extra in (("single", 1, []), ("fsdp", 3, []), ("zero2", 2, []), ("single", 1, ["--recompute"]),
                               ("ref", 3, reference_flags("fsdp", 3, clip)), ("ref", 2, reference_flags("zero2", 2, clip))):
        tag = f"ref{n}" if strategy == "ref" else f"{strategy}{n}{''.join(extra)}"
        log, out = os.path.join(tmp, f"bf16clip_{tag}.jsonl"), os.path.join(tmp, f"bf16clip_{tag}.bin")
        command = [*MPIRUN, "-np", "1", f"{BUILD}/train_single"] if strategy == "ref" else trainer(strategy, n)
        if run([*command, *common, *clip, *extra, "--log", log, "--out-model", out]):
            check(False, f"{tag} bf16 --grad-clip: runs")
            return
        steps = read_log(log)[0]
        norms[tag] = [s["grad_norm"] for s in steps]
        runs[tag] = ([s["loss"] for s in steps], open(out, "rb").read())
    # each against train_single --as-ranks N, whose products multiply the same rows: the operands round alike and
    # the gradients are the same bits; only the norm's fp64 sum runs in another order
    P = len(read_floats(os.path.join(tmp, "bf16clip_single1.bin")))
    for tag, ref in (("fsdp3", "ref3"), ("zero22", "ref2")):
        worst = max(rel(a, b) for a, b in zip(norms[tag], norms[ref]))
        check(runs[tag] == runs[ref] and worst <= 2 * P * 2.0 ** -53,
              f"{tag} bf16 --grad-clip: bitwise the losses and model of train_single --as-ranks, its norms within "
              f"{worst:.1e} (2 P 2^-53 = {2 * P * 2.0 ** -53:.1e})")
    check(runs["single1"] == runs["single1--recompute"] and norms["single1"] == norms["single1--recompute"],
          "single bf16 --recompute: bitwise the plain run")


class InitGenrand:
    """MT19937 seeded by the reference init_genrand(seed), drawing through CPython's own
    MT19937 (random.Random), whose state is set to init_genrand's. Python's
    random.Random(seed) would not do: its seed() runs init_by_array, another stream."""

    def __init__(self, seed):
        state = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & 0xFFFFFFFF)
        self.rng = random.Random()
        self.rng.setstate((3, tuple(state) + (624,), None))  # 624: twist before the first output

    def next(self):
        return self.rng.getrandbits(32)


def llmc_samples(num_samples, count):
    """The sample index of each of `count` batches of llm.c's training loader (one shard)."""
    rng, out = InitGenrand(42), []
    while len(out) < count:
        order = list(range(num_samples))
        for i in range(num_samples - 1, 0, -1):  # llm.c's random_permutation
            j = rng.next() % (i + 1)
            order[i], order[j] = order[j], order[i]
        out += order
    return out[:count]


def check_mt19937():
    check(InitGenrand(5489).next() == 3499211612, "init_genrand(5489)'s first output is std::mt19937's 3499211612")
    check(InitGenrand(42).next() != random.Random(42).getrandbits(32),
          "Python's random.Random(42) is another stream (init_by_array), not init_genrand(42)'s")


def check_llmc_order(tmp, common):
    check_mt19937()
    ntok, B, T = 1000, 4, 8
    shard = os.path.join(tmp, "positions.bin")
    with open(shard, "wb") as f:  # token i is i: a batch names where it was read
        f.write(struct.pack("<256i", 20240520, 1, ntok, *([0] * 253)) + struct.pack(f"<{ntok}H", *range(ntok)))
    n = (ntok - 1) // (B * T)
    count = 2 * n + 7  # into the third epoch
    for order in ("llmc", "sequential"):
        samples = llmc_samples(n, count) if order == "llmc" else [k % n for k in range(count)]
        for world, rank, skip in ((1, 0, 0), (2, 1, 0), (4, 3, 0), (1, 0, n + 3), (2, 0, 2 * n)):
            out = subprocess.run([f"{TOOLS}/tests/loader_order", shard, str(B), str(T), str(rank), str(world), order,
                                  str(skip), str(count - skip)], capture_output=True, text=True)
            local = B // world * T
            want = []
            for idx in samples[skip:]:
                start = idx * B * T + rank * local
                want.append(list(range(start, start + local)) + list(range(start + 1, start + local + 1)))
            got = [[int(x) for x in line.split()] for line in out.stdout.splitlines()]
            check(out.returncode == 0 and got == want,
                  f"--data-order {order}: rank {rank} of {world} reads the batches of the re-implementation "
                  f"(batches {skip}..{count - 1}, {n} samples per epoch)")
    # the trainers read through that loader: llm.c's first batch, as a shard of its own, trains the same model
    data = common[common.index("--data") + 1]
    tokens = array.array("H")
    tokens.frombytes(open(os.path.join(data, "train.bin"), "rb").read()[1024:])
    BT = BATCH * SEQ
    first = llmc_samples((len(tokens) - 1) // BT, 1)[0]
    os.makedirs(os.path.join(tmp, "first"), exist_ok=True)
    with open(os.path.join(tmp, "first", "train.bin"), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, BT + 1, *([0] * 253)) + tokens[first * BT:(first + 1) * BT + 1].tobytes())
    one = [*common[:-2], "--steps", "1"]
    a, b = os.path.join(tmp, "llmc1.bin"), os.path.join(tmp, "first1.bin")
    run([*trainer("single", 1), *one, "--data-order", "llmc", "--out-model", a])
    args = list(one)
    args[args.index("--data") + 1] = os.path.join(tmp, "first")
    run([*trainer("single", 1), *args, "--out-model", b])
    check(first != 0 and os.path.exists(a) and open(a, "rb").read() == open(b, "rb").read(),
          f"train_single --data-order llmc trains its first step on sample {first} (bitwise the same model)")
    ref = os.path.join(tmp, "llmc_single.jsonl")
    run([*trainer("single", 1), *common, "--data-order", "llmc", "--log", ref])
    ref_steps, _ = read_log(ref)
    seq = os.path.join(tmp, "seq_single.jsonl")
    run([*trainer("single", 1), *common, "--log", seq])
    check([s["loss"] for s in read_log(seq)[0]] != [s["loss"] for s in ref_steps],
          "--data-order llmc changes the losses")
    for strategy, n_ranks in (("ddp", 2), ("zero3", 3), ("fsdp", 4)):
        log = os.path.join(tmp, f"llmc_{strategy}.jsonl")
        rc = run([*trainer(strategy, n_ranks), *common, "--data-order", "llmc", "--log", log])
        worst = max(rel(x["loss"], y["loss"]) for x, y in zip(read_log(log)[0], ref_steps)) if rc == 0 else 1
        check(worst <= 1e-5, f"{strategy} N={n_ranks} --data-order llmc: losses match train_single's ({worst:.1e})")
    # resumed at step 4, the stream goes on where it was
    ck, log = os.path.join(tmp, "llmc_ck"), os.path.join(tmp, "llmc_resumed.jsonl")
    run([*trainer("single", 1), *common[:-2], "--steps", "4", "--data-order", "llmc", "--ckpt-dir", ck])
    rc = run([*trainer("fsdp", 2), *common, "--data-order", "llmc", "--resume", ck, "--log", log])
    resumed = read_log(log)[0] if rc == 0 else []
    worst = max((rel(x["loss"], y["loss"]) for x, y in zip(resumed, ref_steps[4:])), default=1)
    check(len(resumed) == len(ref_steps) - 4 and worst <= 1e-5,
          f"--data-order llmc resumed at step 4 (fsdp N=2) continues the stream ({worst:.1e})")


def gpt2_byte_decoder():
    """GPT-2's printable stand-in for each byte (bytes_to_unicode of its encoder.py), inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def sample(*args):
    r = subprocess.run([f"{TOOLS}/sample", *args], capture_output=True, timeout=120)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace")


def shown(data):
    """Sampled bytes as build/sample writes them: whole UTF-8 characters as they are, a byte that begins none
    (and a control character but a newline or tab) as \\xNN."""
    out, i = bytearray(), 0
    while i < len(data):
        lead = data[i]
        want = 1 if lead < 0x80 else 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else \
            4 if 0xF0 <= lead <= 0xF4 else 0
        if want > 1:
            try:
                out += data[i:i + want].decode("utf-8").encode()
                i += want
                continue
            except UnicodeDecodeError:
                pass
        out += bytes([lead]) if lead in (9, 10) or 0x20 <= lead < 0x7F else f"\\x{lead:02X}".encode()
        i += 1
    return bytes(out)


def check_sample(tmp):
    byte_model, gpt2_model = os.path.join(tmp, "v256.bin"), os.path.join(tmp, "v50257.bin")
    run([f"{TOOLS}/init_model", "--layers", "2", "--heads", "2", "--channels", "32", "--vocab", "256", "--max-seq", "8",
         "--out", byte_model])
    run([f"{TOOLS}/init_model", "--layers", "1", "--heads", "1", "--channels", "8", "--vocab", "50257",
         "--max-seq", "16", "--out", gpt2_model])
    base = ["--model", byte_model, "--prompt", "abc", "--tokens", "20"]  # 3 + 20 tokens: slides past maxT = 8
    outs = {}
    for key, extra in (("s1", ["--seed", "1"]), ("s1 again", ["--seed", "1"]), ("s2", ["--seed", "2"]),
                       ("greedy s1", ["--temperature", "0", "--seed", "1"]),
                       ("greedy s2", ["--temperature", "0", "--seed", "2"]), ("ids", ["--seed", "1", "--ids"])):
        rc, out, err = sample(*base, *extra)
        check(rc == 0, f"sample {' '.join(extra)} runs {err[-200:]}")
        outs[key] = out
    check(outs["s1"] == outs["s1 again"], "sample: the same seed gives the same text")
    check(outs["s1"] != outs["s2"], "sample: another seed gives another text")
    check(outs["greedy s1"] == outs["greedy s2"] and outs["greedy s1"] != outs["s1"],
          "sample --temperature 0: greedy, the same for every seed")
    ids = [int(x) for x in outs["ids"].split()]
    check(len(ids) == 20 and all(0 <= i < 256 for i in ids) and outs["s1"] == shown(b"abc" + bytes(ids)) + b"\n",
          "sample --ids: 20 ids below V, and the text is the prompt and their bytes (as UTF-8 shows them)")
    rc, out, err = sample("--model", gpt2_model, "--tokenizer", "gpt2", "--vocab", "models/gpt2_vocab",
                          "--prompt", "Hello world", "--tokens", "12", "--seed", "5", "--ids")
    ids = [int(x) for x in out.split()] if rc == 0 else []
    check(len(ids) == 12 and all(0 <= i < 50257 for i in ids), f"sample gpt2: 12 ids below 50257 {err[-200:]}")
    rc, text, err = sample("--model", gpt2_model, "--tokenizer", "gpt2", "--vocab", "models/gpt2_vocab",
                           "--prompt", "Hello world", "--tokens", "12", "--seed", "5")
    encoder = json.load(open("models/gpt2_vocab/encoder.json"))
    decoder, to_byte = {i: t for t, i in encoder.items()}, gpt2_byte_decoder()
    want = b"Hello world" + b"".join(bytes(to_byte[c] for c in decoder[i]) for i in ids) + b"\n"
    check(rc == 0 and text == want, "sample gpt2: the text is the prompt and the ids decoded by encoder.json")


def check_time_split(tmp, common):
    """Each second of a step counts once: on every rank compute_s + comm_wait_s + optim_s =
    step_s. A known wait lands where it belongs: rank 1 sleeps 0.2 s as its optimizer phase
    begins (SHARDLAB_TEST_OPTIM_DELAY_S), so rank 0 waits about that long in ZeRO-1's
    all-gather inside step(): communication, not optimizer time (counted in both before)."""
    delay, steps = 0.2, 3
    log = os.path.join(tmp, "time_split.jsonl")
    rc = run(["env", f"SHARDLAB_TEST_OPTIM_DELAY_S={delay}", *trainer("zero1", 2), *common[:-2], "--steps", str(steps),
              "--grad-clip", "1", "--log", log])
    check(rc == 0, "zero1 N=2 with a delay in rank 1's optimizer phase runs")
    if rc != 0:
        return
    _, summary = read_log(log)
    for r in summary["ranks"]:
        t = r["time"]
        parts = t["compute_s"] + t["comm_wait_s"] + t["optim_s"]
        check(abs(parts - t["step_s"]) <= 1e-5 * t["step_s"] + 3e-6 and min(t.values()) >= 0,
              f"rank {r['rank']}: compute {t['compute_s']:.4f} + comm {t['comm_wait_s']:.4f} + optim {t['optim_s']:.4f} "
              f"= step {t['step_s']:.4f} s")
    t0, t1 = summary["ranks"][0]["time"], summary["ranks"][1]["time"]
    check(t0["comm_wait_s"] >= 0.9 * delay * steps and t0["optim_s"] < 0.5 * delay * steps,
          f"rank 0's wait for rank 1 is communication ({t0['comm_wait_s']:.3f} s), not optimizer ({t0['optim_s']:.3f} s)")
    check(t1["optim_s"] >= 0.9 * delay * steps, f"rank 1's own delay is optimizer time ({t1['optim_s']:.3f} s)")


def main():
    tmp = CHECKS.scratch("shardlab_training_")
    model = os.path.join(tmp, "model.bin")
    assert run([f"{TOOLS}/init_model", "--layers", str(L), "--heads", str(NH), "--channels", str(C),
                "--vocab", str(V), "--max-seq", str(MAXT), "--out", model]) == 0
    rng = random.Random(5)
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    write_learnable_shard(os.path.join(data, "train.bin"), 20000, V, rng)
    common = ["--model", model, "--data", data, "--batch", str(BATCH), "--seq", str(SEQ), "--lr", "1e-3",
              "--quiet", "--steps", "10"]
    check_schedule(tmp, common)
    check_recompute(tmp, common)
    check_llmc_order(tmp, common)
    check_sample(tmp)
    check_clip_against_optimizer(tmp, common)
    check_clip_equivalence(tmp, common)
    check_precision(tmp, data)
    check_time_split(tmp, common)
    CHECKS.finish()


if __name__ == "__main__":
    main()
