#!/usr/bin/env python3
"""The homework check: one strategy against train_single on a tiny model, check by check.
usage: check.py --strategy S --ranks N [--args "FLAGS"] [--build DIR] [--reference DIR] [--mpirun "CMD"]
                [--work DIR] [--json FILE]
  S: a strategy of build/plan --strategies (ddp, zero1, zero2, zero3, fsdp); FLAGS: extra trainer flags
     (--prefetch 2 --precision bf16 ...)
  --build      where the trainers under test are (default build)
  --reference  where the train_single and build/plan to hold them to are (default: --build's): the build of an
               unchanged tree holds a changed one to the project's own numbers
  --mpirun     the launcher (default: $MPIRUN, else mpirun)
  --work       where the runs' logs go, kept (default: BUILD/check/STRATEGY_nN, replaced by the next check)
  --json       also write the checks as JSON (the lab grader reads them)
Trains d2 (byte vocab) for 3 steps with S at N ranks and with its reference, train_single --as-ranks N (the same
rows per rank, averaged as S averages them), then checks: the runs finish (each within SHARDLAB_CHECK_TIMEOUT
seconds, default 120; a run that hangs is stopped with its ranks); every step's loss is the reference's and its
gradient norm within the rounding of the norm's own sums; the final model is the reference's, bit for bit; each rank's memory per
category equals what build/plan predicts; each rank's collectives in the last step equal build/plan
--traffic's; with a strategy that prefetches (--prefetch) on, collectives travel while the rank computes. A failed
check says where it differs and what that usually means. Exit status 0 only when every check passes."""
import array
import functools
import json
import math
import os
import re
import shlex
import struct
import shutil
import subprocess
import sys

CATEGORIES = ["params", "params_gathered", "grads", "grads_gathered", "optim", "activations", "comm_buffers", "ema"]
# The trainer flags --args may hold, and their values (None: a switch). A strategy's own flags (the registry's
# `flags`) go to the strategies that take them; the others to every trainer, train_single too.
FLAGS = {"--prefetch": "count", "--reshard-after-forward": ("0", "1"), "--shard-group": "group",
         "--grad-accum": "positive", "--accum-mode": ("sync-each", "no-sync"), "--precision": ("fp32", "bf16"),
         "--reduce-dtype": ("fp32", "bf16"), "--recompute": None, "--dropout": "fraction", "--ema": "fraction",
         "--unit-blocks": "positive", "--wrap-min-params": "positive", "--shard-min-numel": "count",
         "--secondary-shard-group": "node"}  # ZeRO++'s hpZ: bit for bit the same run (its quantizers are not)
# A strategy flag and train_single's flag that says the same to the reference (single/single.c): hybrid groups,
# whole small tensors.
REFERENCE_TWINS = {"--shard-group": "--as-groups", "--shard-min-numel": "--as-whole-below"}
# What the planner is not told: dropout moves no bytes and holds none; the EMA's bytes are memory, not traffic.
FRACTION_MOST = {"--dropout": 0.99, "--ema": 0.999999}  # the trainers' bounds (run/options.c)
NOT_PLANNED = {"--dropout": ("--tsv", "--traffic"), "--ema": ("--traffic",)}
# What a wrong final model most often means, per strategy (a strategy without a line: GENERIC_HINT).
GENERIC_HINT = ("is every gradient averaged (not summed) where the strategy reduces it, every collective waited for "
                "before its buffer is read, and every updated piece brought back before the next forward?")
HINTS = {
    "ddp": "are the buckets all-reduced as an average (COMM_AVG), and every one waited for before the step?",
    "zero1": "does each range's owner receive its range's averaged gradient (a reduce to the owner), and does "
             "the all-gather after the step bring every updated range back to every rank?",
    "zero2": "does each range's owner receive its range's averaged gradient (a reduce to the owner, every piece "
             "of every bucket), and does the all-gather after the step bring every updated range back?",
    "zero3": "is each tensor broadcast from its owner before a unit reads it, and its gradient reduced (averaged) "
             "to its owner after the unit's backward?",
    "fsdp": "is the reduce-scatter averaged, does its copy-out add rank r's block into rank r's slice, and does "
            "the all-gather's copy-out put slice r at rows r*k of the full tensor?",
}
TEXT = "/usr/share/common-licenses"
MODEL = ["--config", "d2", "--vocab", "256", "--seq", "16"]
STEPS = 3


def fail(msg):
    print(f"check: {msg}", file=sys.stderr)
    sys.exit(2)


def is_whole(text):
    """ASCII digits alone (str.isdigit also takes '²' and '١', which int() refuses)."""
    return re.fullmatch(r"[0-9]+", text) is not None


def parse_args(argv):
    if "--help" in argv or "-h" in argv:
        print(__doc__.split("\n", 1)[1])
        sys.exit(0)
    opts = {"strategy": None, "ranks": None, "args": "", "build": "build", "reference": None,
            "mpirun": os.environ.get("MPIRUN") or "mpirun", "work": None, "json": None}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if not flag.startswith("--") or flag[2:] not in opts:
            fail(f"unknown argument '{flag}' (check.py --help)")
        if i + 1 >= len(argv):
            fail(f"{flag} needs a value")
        if flag in argv[:i:2]:  # which of two would count is a guess, as for the trainers
            fail(f"{flag} given twice")
        opts[flag[2:]] = argv[i + 1]
        i += 2
    if not is_whole(opts["ranks"] or "") or not 1 <= int(opts["ranks"]) <= 16:
        fail(f"--ranks: give a number of ranks from 1 to 16 (got {opts['ranks']})")
    opts["ranks"] = int(opts["ranks"])
    opts["reference"] = opts["reference"] or opts["build"]
    strategies = registry(opts["reference"])
    if opts["strategy"] not in strategies:
        fail(f"--strategy: give one of {', '.join(strategies)} (got {opts['strategy']})")
    return opts


@functools.lru_cache(maxsize=None)
def registry(build):
    """The strategies as BUILD/plan --strategies lists them (run/registry.h), in order: name -> title, trainer,
    preset (the trainer's flags that make it), reference (train_single's flags that make its reference), shards
    (the model states it divides by N), placement (replicated, flat_ranges, whole_tensors, row_slices: where they
    live), flags (its trainer's own)."""
    plan = os.path.join(build, "plan")
    if not os.path.isfile(plan):
        fail(f"{plan} is not there (make builds it): it lists the strategies")
    r = subprocess.run([plan, "--strategies"], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        fail(f"{plan} --strategies failed: {r.stderr.strip()[-300:]}")
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 8:
            fail(f"{plan} --strategies printed {line[:80]!r}, not a line of the strategies' table: is {build} a "
                 "build of this tree?")
        name, title, trainer, preset, reference, shards, placement, flags = fields
        out[name] = {"title": title, "trainer": trainer, "preset": preset.split(), "reference": reference.split(),
                     "shards": shards.split(), "placement": placement, "flags": flags.split()}
    return out


def default_build():
    """The build a test or tool names in $BUILD (make test sets it), else build."""
    return os.environ.get("BUILD") or "build"


def flag_value(flags, name, default):
    return flags[flags.index(name) + 1] if name in flags and flags.index(name) + 1 < len(flags) else default


def is_fraction(text, most):
    """The trainers' test of a float flag (util/cli.c): finite, in [0, most], and not a number that single
    precision would make 0 (1e-400, 1e-46)."""
    try:
        value = float(text)
    except ValueError:
        return False
    as_float = struct.unpack("f", struct.pack("f", value))[0] if abs(value) < 3.4e38 else float("inf")
    written_zero = not any(digit in "123456789" for digit in text.lower().split("e")[0])
    return math.isfinite(value) and 0 <= value <= most and (written_zero or as_float != 0)


def plan_flags(flags, mode):
    """The flags build/plan takes in `mode` (--tsv, --traffic): those it plans, with their values."""
    out, i = [], 0
    while i < len(flags):
        width = 1 if FLAGS[flags[i]] is None else 2
        if mode not in NOT_PLANNED.get(flags[i], ()):
            out += flags[i:i + width]
        i += width
    return out


def split_args(text, strategy, n, build=None):
    """--args checked before anything runs: (the strategy's flags, train_single's), strategy-only flags to the
    strategy alone. A flag the check does not pass on, a strategy that does not take it, or a bad value stops."""
    strategies = registry(build or default_build())
    own = {flag for entry in strategies.values() for flag in entry["flags"]}  # some strategy's own
    try:
        flags = shlex.split(text)
    except ValueError as e:
        fail(f"--args {text!r}: {e}")
    mine, single, i = [], [], 0
    group = flag_value(flags, "--shard-group", str(n))  # hpZ's and qgZ's nodes are of the ranks that shard
    sharding = int(group) if is_whole(group) and 0 < int(group) <= n and n % int(group) == 0 else n
    while i < len(flags):
        flag = flags[i]
        if flag not in FLAGS:
            fail(f"--args: {flag} is not a flag the check passes on (it takes {', '.join(FLAGS)}; the model, batch "
                 "and steps are the check's own)")
        values = FLAGS[flag]
        takers = [name for name, entry in strategies.items() if flag in entry["flags"]]
        if flag in own and strategy not in takers:
            fail(f"--args: {flag}: {strategy} does not take it ({' and '.join(takers)} do)")
        pair = [flag]
        if values is not None:
            value = flags[i + 1] if i + 1 < len(flags) else None
            if values == "fraction":
                good = value is not None and is_fraction(value, FRACTION_MOST[flag])
            else:
                good = value is not None and (value in values if isinstance(values, tuple) else is_whole(value) and (
                    values == "count" or int(value) >= 1) and (values != "group" or n % int(value) == 0) and (
                    values != "node" or (int(value) > 0 and sharding % int(value) == 0 and int(value) < sharding)))
            if not good:
                want = "|".join(values) if isinstance(values, tuple) else \
                    {"count": "a whole number >= 0", "positive": "a whole number >= 1",
                     "fraction": f"a number in [0, {FRACTION_MOST.get(flag)}] that single precision keeps (0 for none)",
                     "group": f"a number of ranks that divides --ranks {n}",
                     "node": f"a number of ranks that divides the {sharding} ranks that shard (--ranks {n}"
                             f"{f', --shard-group {sharding}' if sharding < n else ''}), fewer than them"}[values]
                fail(f"--args: {flag} {value if value is not None else '(no value)'}: give {want}")
            pair.append(value)
        if flag in mine:
            fail(f"--args: {flag} given twice")
        mine += pair
        if flag not in own:
            single += pair
        i += len(pair)
    if "--accum-mode" in mine and int(flag_value(mine, "--grad-accum", "1")) <= 1:
        fail("--args: --accum-mode says when the micro-batches' gradients are reduced; give --grad-accum K above 1 "
             "with it (one micro-batch: the trainers refuse it)")
    return mine, single


def reference_flags(strategy, n, flags, build=None):
    """train_single's flags that make it the reference of `strategy` at `n` ranks with the trainer flags `flags`,
    bit for bit: the ranks' rows as micro-batches of their own, averaged where and when the strategy averages them
    (single/single.c). The registry says how the strategy averages (its `reference`: --accum-mode no-sync for
    whole gradients reduced once; nothing with one micro-batch); an --accum-mode
    it does not fix is the run's; hybrid groups and whole small tensors have their twins (REFERENCE_TWINS)."""
    out = ["--as-ranks", str(n), *registry(build or default_build())[strategy]["reference"]]
    if int(flag_value(flags, "--grad-accum", "1")) <= 1 and "--accum-mode" in out:  # one micro-batch: no mode
        at = out.index("--accum-mode")
        del out[at:at + 2]
    if "--accum-mode" not in out and "--accum-mode" in flags:
        out += ["--accum-mode", flag_value(flags, "--accum-mode", "sync-each")]
    group = int(flag_value(flags, "--shard-group", "0"))
    if 0 < group < n:
        out += [REFERENCE_TWINS["--shard-group"], str(group)]
    if int(flag_value(flags, "--shard-min-numel", "0")) > 0:
        out += [REFERENCE_TWINS["--shard-min-numel"], flag_value(flags, "--shard-min-numel", "0")]
    return out


def run_seconds():
    """SHARDLAB_CHECK_TIMEOUT: the seconds after which a run has hung, a whole number from 1 to 86400 (default 120)."""
    text = os.environ.get("SHARDLAB_CHECK_TIMEOUT", "120")
    if not (is_whole(text) and 1 <= int(text) <= 86400):
        fail(f"SHARDLAB_CHECK_TIMEOUT is {text!r}: give the seconds a run may take, a whole number from 1 to 86400")
    return int(text)


RUN_SECONDS = run_seconds()  # a run that takes longer has hung


def kill_session(sid):
    """SIGKILL to every process of session `sid` (the ranks mpirun started in it, in whatever process group)."""
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.getsid(int(pid)) == sid:
                os.kill(int(pid), 9)
        except (ProcessLookupError, PermissionError):
            pass


def hung(seconds):
    return f"\ncheck: stopped after {seconds} s: the run never finished (a wait that nothing completes, or ranks " \
           "that call different collectives?)\n"


def run(cmd, log_path, seconds=RUN_SECONDS):
    """Runs cmd in a session of its own; past `seconds` every process of it (mpirun and its ranks) is killed and
    the result has returncode None."""
    # under make test: a trainer's run in a job started once (unless SHARDLAB_TEST_SERVE=0)
    if os.environ.get("SHARDLAB_SERVE_DIR") and os.environ.get("SHARDLAB_TEST_SERVE") != "0":
        served = run_served(cmd, log_path, seconds)
        if served:
            return served
    # errors="replace": a student's debug print in another encoding is shown, never a traceback
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=seconds)
        code = p.returncode
    except subprocess.TimeoutExpired:
        p.terminate()  # mpirun ends its ranks on SIGTERM; whatever is left of the session goes after
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        kill_session(p.pid)
        out, err = p.communicate()
        code, err = None, err + hung(seconds)
    with open(log_path, "w") as f:
        f.write(" ".join(shlex.quote(c) for c in cmd) + "\n" + out + err)
    return subprocess.CompletedProcess(cmd, code, out, err)


def run_served(cmd, log_path, seconds):
    """run's result, a trainer's run sent to a job started once (tests/serve.py), as make test's parts do; None
    for a command that runs no trainer."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from serve import run_captured, trainer_at
    if trainer_at(cmd) is None:
        return None
    try:
        r = run_captured(cmd, timeout=seconds)
    except subprocess.TimeoutExpired:  # the job and every process of it are killed
        r = subprocess.CompletedProcess(cmd, None, "", hung(seconds))
    with open(log_path, "w") as f:
        f.write(" ".join(shlex.quote(c) for c in cmd) + "\n" + r.stdout + r.stderr)
    return r


def read_log(path):
    lines = [json.loads(line) for line in open(path)]
    return [entry for entry in lines if "step" in entry], next(entry for entry in lines if entry.get("summary"))


def read_params(path):
    a = array.array("f")
    a.frombytes(open(path, "rb").read()[1024:])
    return a


class Checks:
    def __init__(self):
        self.results = []

    def add(self, name, ok, message):
        self.results.append({"check": name, "ok": bool(ok), "message": message})
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {message}", flush=True)


def layout(reference, ranks):
    """[(name, begin, end)] in llm.c's flat order, and {strategy: [(rank, begin, end)]} of who keeps what."""
    out = subprocess.run([f"{reference}/plan", "--config", "d2", "--vocab", "256", "--ranks", str(ranks), "--layout"],
                         capture_output=True, text=True, errors="replace", check=True).stdout
    tensors, holds = [], {}
    for f in (line.split("\t") for line in out.splitlines()):
        if f[0] == "tensor":
            tensors.append((f[1], int(f[2]), int(f[3])))
        elif f[0] == "hold":
            holds.setdefault(f[1], []).append((int(f[2]), int(f[3]), int(f[4])))
    return tensors, holds


def where_models_differ(got, want, tolerance, tensors, holds, strategy):
    """'h0.qkvw rows 384..767 (kept by rank 1)...' for the first tensor whose values differ, or None."""
    for name, begin, end in tensors:
        bad = [i for i in range(begin, end) if abs(got[i] - want[i]) > tolerance]
        if not bad:
            continue
        C, base = next(e - b for n, b, e in tensors if n == "lnfw"), name.split(".")[-1]
        rows = {"qkvw": 3 * C, "qkvb": 3 * C, "fcw": 4 * C, "fcb": 4 * C}.get(base, C)
        cols = C if base in ("wte", "wpe") else (end - begin) // rows  # wte (Vp, C), wpe (maxT, C)
        first, last = (bad[0] - begin) // cols, (bad[-1] - begin) // cols
        keepers = sorted({r for r, b, e in holds.get(strategy, []) if b <= bad[-1] and e > bad[0]})
        worst = max(abs(got[i] - want[i]) for i in bad)
        return (f"{name} rows {first}..{last} differ from train_single's ({len(bad)} values, largest difference "
                f"{worst:.2e}; rank{'s' if len(keepers) > 1 else ''} {', '.join(map(str, keepers)) or '?'} "
                f"keep{'' if len(keepers) > 1 else 's'} them under {strategy})")
    return None


def main():
    o = parse_args(sys.argv[1:])
    strategy, n = o["strategy"], o["ranks"]
    mine, single_flags = split_args(o["args"], strategy, n, o["reference"])
    entry = registry(o["reference"])[strategy]
    extra = mine
    accum = int(flag_value(extra, "--grad-accum", "1"))
    # Bit for bit (docs/testing.md): the reference is train_single --as-ranks N, and on one machine every
    # reduction sums in rank order. Without that path (SHARDLAB_COMM_REDUCE=mpi, the inline engine) the sums
    # run in MPI's order, and a rounding-level difference can become an lr-sized AdamW step: the bounds below.
    exact = os.environ.get("SHARDLAB_COMM_REDUCE") != "mpi" and os.environ.get("SHARDLAB_COMM_ENGINE") != "inline"
    # (an AdamW step moves a parameter by about lr at most in the first steps, |m/sqrt(v)| <= 1.004 for three:
    # two runs 6.4 lr a step apart is a margin of 3)
    loss_tol, param_tol = (0, 0) if exact else (1e-5, 6.4 * 1e-4 * STEPS)
    build = o["build"]
    try:
        mpirun = shlex.split(o["mpirun"])
    except ValueError as e:  # an unbalanced quote
        fail(f"--mpirun {o['mpirun']!r}: {e}")
    trainer_name = entry["trainer"]
    for path, flag in ((f"{o['reference']}/train_single", "--reference"), (f"{build}/{trainer_name}", "--build"),
                       (f"{build}/prepare", "--build"), (f"{o['reference']}/plan", "--reference")):
        if not os.path.isfile(path):
            fail(f"{flag}: {path} is not there (make builds it)")
    if not mpirun or not shutil.which(mpirun[0]):
        fail(f"--mpirun: {o['mpirun']!r} is not a command here")
    if o["json"]:
        try:
            open(o["json"], "w").close()
        except OSError as e:
            fail(f"--json {o['json']}: cannot write: {e.strerror}")
    work = o["work"] or os.path.join(o["build"], "check", f"{strategy}_n{n}")
    if os.path.lexists(work) and not os.path.isdir(work):
        fail(f"--work {work}: not a directory" + (" (a link to nothing)" if os.path.islink(work) else ""))
    try:
        os.makedirs(work, exist_ok=True)
    except OSError as e:
        fail(f"--work {work}: cannot make it: {e.strerror}")
    data = os.path.join(work, "data")
    if not os.path.exists(os.path.join(data, "train.bin")):
        corpus = os.path.join(work, "corpus.txt")
        with open(corpus, "wb") as f:
            for name in sorted(os.listdir(TEXT)) if os.path.isdir(TEXT) else []:
                f.write(open(os.path.join(TEXT, name), "rb").read())
        r = run([f"{build}/prepare", "--text", corpus, "--tokenizer", "byte", "--out", data], f"{work}/prepare.txt")
        if r.returncode != 0:
            fail(f"{build}/prepare failed: {r.stderr.strip()[-300:]}")
    batch = 4 * n * accum
    # --grad-clip far above any norm: nothing is clipped, but every step logs the gradient's global norm, which
    # AdamW alone would hide (its update does not change when every gradient is scaled, say summed, not averaged)
    common = [*MODEL, "--data", data, "--batch", str(batch), "--steps", str(STEPS), "--lr", "1e-4",
              "--weight-decay", "0.1", "--grad-clip", "1e9", "--quiet"]
    checks = Checks()
    print(f"check: {strategy} at N = {n} {' '.join(extra)} against train_single "
          f"{' '.join(reference_flags(strategy, n, mine, o['reference']))}: d2, batch {batch} x 16, "
          f"{STEPS} steps (logs in {work})", flush=True)
    ref_log, ref_model = f"{work}/single.jsonl", f"{work}/single.bin"
    # under the same launcher as the strategy, so that a run at N = 1 has the same threads, and the same sums
    # the trainer flags train_single takes too, but --accum-mode, which reference_flags gives as the strategy heeds it
    reference = reference_flags(strategy, n, mine, o["reference"])
    at = single_flags.index("--accum-mode") if "--accum-mode" in single_flags else -1
    single_flags = single_flags[:at] + single_flags[at + 2:] if at >= 0 else single_flags
    r = run([*mpirun, "-np", "1", f"{o['reference']}/train_single", *common, *single_flags, *reference,
             "--log", ref_log, "--out-model", ref_model], f"{work}/single.txt")
    if r.returncode != 0:
        said = [line for line in r.stderr.splitlines() if line.startswith("shardlab:")]  # its own words, not mpirun's
        fail(f"train_single failed (the reference; see {work}/single.txt): "
             f"{said[0] if said else r.stderr.strip()[-300:]}")
    trainer = [f"{build}/{trainer_name}", *entry["preset"]]
    log, model, trace = f"{work}/{strategy}.jsonl", f"{work}/{strategy}.bin", f"{work}/{strategy}.trace"
    r = run([*mpirun, "-np", str(n), *trainer, *common, *mine, "--log", log, "--out-model", model, "--trace", trace],
            f"{work}/{strategy}.txt")
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip() and not line.startswith("---")]
    said = [line for line in lines if line.startswith("shardlab:")] or lines
    checks.add("runs", r.returncode == 0, "the trainer finished its steps" if r.returncode == 0 else
               f"the trainer did not finish in {RUN_SECONDS} s and was stopped, every rank with it: a wait that "
               f"nothing completes, or ranks calling different collectives? (all of it in {work}/{strategy}.txt)"
               if r.returncode is None else
               f"the trainer stopped with status {r.returncode}: {said[-1] if said else ''} (all of it in "
               f"{work}/{strategy}.txt)")
    if r.returncode != 0:
        return finish(checks, o)
    steps, summary = read_log(log)
    ref_steps, _ = read_log(ref_log)
    diffs = [abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(steps, ref_steps)]
    first_bad = next((k for k, d in enumerate(diffs) if d > loss_tol), None)
    checks.add("losses", len(steps) == len(ref_steps) and first_bad is None,
               ("every step's loss is train_single's, bit for bit" if exact else
                f"every step's loss within {loss_tol:g} of train_single's (worst relative difference "
                f"{max(diffs, default=0):.1e})") if first_bad is None else
               f"step {steps[first_bad]['step']}'s loss is {steps[first_bad]['loss']:.17g}, train_single's "
               f"{ref_steps[first_bad]['loss']:.17g}: " + ("the forward already differs (are the gathered parameters "
                                                         "whole and in place before each unit runs?)" if first_bad == 0
                                                         else "step 1 agreed, so the gradients or the update differ"))
    # The norm adds each rank's squares in double, in an order that follows who keeps what: any order of n
    # positive terms is within (n-1) 2^-53 of the exact sum, two orders within 2n 2^-53 (n = the parameters).
    # What moves the norm (a sum, a lost gradient) shows far outside; one element a bit off is the model check's.
    norms = [(a["grad_norm"], b["grad_norm"]) for a, b in zip(steps, ref_steps)]
    P = len(read_params(ref_model))
    norm_tol = 2 * P * 2.0 ** -53 if exact else max(loss_tol, 1e-5)
    off = next((k for k, (a, b) in enumerate(norms) if abs(a - b) > norm_tol * abs(b)), None)
    checks.add("gradient", off is None, f"every step's gradient norm within {norm_tol:.1e} of train_single's (the "
               "averaged gradient, from the shards; the norm's own sums run in another order)" if off is None else
               f"step {steps[off]['step']}'s gradient norm is {norms[off][0]:.6g}, train_single's {norms[off][1]:.6g}"
               f" ({norms[off][0] / norms[off][1]:.3g} times): " + (
                   "the forward already differs (the losses' check), so the gradient is of other weights: look at "
                   "the gather first, whole tensors from the right ranks (a broadcast's root is the tensor's owner)"
                   if first_bad == 0 and off == 0 else
                   f"{n} times is a sum where an average belongs (COMM_AVG)" if abs(norms[off][0] / norms[off][1] - n)
                   < 0.01 * n else "a gradient lost or overwritten where it should add: wte is read twice (the "
                   "embedding, unit 0, and the head): its two gradients add up in one full buffer, reduced once, "
                   "after unit 0"
                   if norms[off][0] < norms[off][1] else
                   "a gradient reduced from the wrong ranks, rows or units, or not waited for"))
    got, want = read_params(model), read_params(ref_model)
    tensors, holds = layout(o["reference"], n)
    where = where_models_differ(got, want, param_tol, tensors, holds, strategy) if len(got) == len(want) else \
        f"the model has {len(got)} values, train_single's {len(want)}"
    checks.add("model", where is None, (f"after {STEPS} steps every parameter is train_single's, bit for bit" if exact
               else f"after {STEPS} steps every parameter within {param_tol:g} of train_single's") if where is None else
               f"after {STEPS} steps {where}: {HINTS.get(strategy, GENERIC_HINT)} (This is the first tensor in llm.c's order that "
               "differs; after a step a wrong gradient anywhere moves the others too, so it may be a consequence: "
               "where the gradient or traffic check fails too, start there.)")
    plan_args = [*MODEL, "--ranks", str(n), "--batch", str(batch)]
    plan = subprocess.run([f"{o['reference']}/plan", *plan_args, *plan_flags(mine, "--tsv"), "--tsv"], capture_output=True,
                          text=True, errors="replace")
    if plan.returncode != 0:
        fail(f"{o['reference']}/plan: {plan.stderr.strip()}")
    planned = {}
    for line in plan.stdout.splitlines():
        f = line.split("\t")
        first, _, last = f[1].partition("-") if len(f) > 1 else ("", "", "")
        if len(f) < 2 + len(CATEGORIES) + 2 or not all(is_whole(x) for x in (first, last or first, *f[2:])):
            fail(f"{o['reference']}/plan --tsv printed {line[:80]!r}, not a row of the planner's table: is "
                 "--reference a build of this tree?")
        for rank in range(int(first), int(last or first) + 1):
            planned[(f[0], rank)] = [int(x) for x in f[2:]]
    wrong = []
    for rank in summary["ranks"]:
        want_mem = planned.get((strategy, rank["rank"]), planned.get((strategy, 0)))
        for k, cat in enumerate(CATEGORIES):
            if rank["mem"][cat]["peak"] != want_mem[k]:
                way = "above" if rank["mem"][cat]["peak"] > want_mem[k] else "below"
                wrong.append(f"rank {rank['rank']} {cat} peaked {way} the planner's: {rank['mem'][cat]['peak']:,} "
                             f"bytes, the planner says {want_mem[k]:,}")
    higher = any("peaked above" in w for w in wrong)
    lower = any("peaked below" in w for w in wrong)
    checks.add("memory", not wrong, "every rank's peak per category is the planner's" if not wrong else
               "; ".join(wrong[:3]) + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "") + ": " +
               ("above: a buffer allocated where the planned step allocates none, or kept longer" if higher else "") +
               ("; " if higher and lower else "") +
               ("below: a buffer the planned step holds at that moment was never allocated or freed early (a gather "
                "or prefetch that never starts, a copy skipped)" if lower else "") +
               f" (build/plan ... --timeline {strategy} shows the planned step event by event)")
    traffic = subprocess.run([f"{o['reference']}/plan", *plan_args, *plan_flags(mine, "--traffic"), "--grad-clip", "1e9",
                              "--traffic"], capture_output=True, text=True, errors="replace")
    if traffic.returncode != 0:
        fail(f"{o['reference']}/plan --traffic: {traffic.stderr.strip()}")
    expected = {}
    for f in (line.split("\t") for line in traffic.stdout.splitlines() if not line.startswith("#")):
        if f[0] == strategy:
            expected[(int(f[1]), f[2])] = [int(x) for x in f[3:7]]
    wrong = []
    for rank in summary["ranks"]:
        for op, c in rank["comm_last_step"].items():
            got_op = [c["calls"], c["elements"], c["bytes_sent"], c["bytes_recv"]]
            want_op = expected.get((rank["rank"], op), [0, 0, 0, 0])
            if op != "barrier" and got_op != want_op:
                wrong.append(f"rank {rank['rank']} {op}: {got_op[0]} calls of {got_op[1]:,} elements in all, "
                             f"{got_op[2]:,} bytes sent; the planner: {want_op[0]} calls, {want_op[1]:,} elements, "
                             f"{want_op[2]:,} bytes")
    checks.add("traffic", not wrong, "every rank's collectives in the last step are the planner's (calls, "
               "elements, bytes)" if not wrong else "; ".join(wrong[:2]) +
               (f" (and {len(wrong) - 2} more)" if len(wrong) > 2 else "") +
               ": which collective, how many elements and how often are the strategy's own (docs/communication.md)")
    prefetch = int(flag_value(extra, "--prefetch", "1"))
    if "--prefetch" in entry["flags"] and prefetch > 0 and n > 1:
        spans = [line.rstrip("\n").split("\t") for line in open(trace + ".tsv") if not line.startswith("#")]
        compute = {}
        for rk, st, cat, name, a, b in spans:
            if cat == "compute":
                compute.setdefault(rk, []).append((float(a), float(b)))
        under = sum(1 for rk, st, cat, name, a, b in spans if cat == "collective" and any(
            min(float(b), d) - max(float(a), c) > 0 for c, d in compute.get(rk, [])))
        checks.add("overlap", under > 0, f"{under} collectives travelled while a rank computed (--trace)"
                   if under else "no collective was in flight while a rank computed: with --prefetch the next "
                   "unit's gather must start before this unit's compute, and be waited for only when it is needed")
    return finish(checks, o)


def finish(checks, o):
    failed = [c for c in checks.results if not c["ok"]]
    print(f"check: {len(checks.results) - len(failed)} of {len(checks.results)} checks pass", flush=True)
    if o["json"]:
        with open(o["json"], "w") as f:
            json.dump(checks.results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
