#!/usr/bin/env python3
"""Turns a comparison run directory into plots (gnuplot, PNG and SVG) and a report.

    python3 examples/report.py RUN_DIR [--build build] [--strategies LIST]

RUN_DIR holds single.jsonl and <strategy>.jsonl for each strategy compared (trainer logs),
and <strategy>.trace.tsv (step timelines). Writes RUN_DIR/plots/*.png|svg, RUN_DIR/data/*.tsv,
RUN_DIR/report.md and RUN_DIR/report.html. The numbers come from the logs alone; the
memory-vs-ranks curves come from build/plan. Exits 1 with a message naming the file when a
log is missing or truncated."""
import html
import json
import math
import os
import platform
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "labs"))
from check import registry  # noqa: E402  build/plan --strategies: the ladder, in order (run/registry.h)

CATEGORIES = ["params", "params_gathered", "grads", "grads_gathered", "optim", "activations", "comm_buffers", "ema"]
HOST_CATEGORIES = ["host_optim", "host_staging"]  # after the device's in build/plan --tsv; not stacked with them
COLLECTIVES = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]
class StrategyColors(dict):
    """A colour per strategy: the ladder's own, and one from EXTRA_COLORS for a strategy the registry adds."""
    def __missing__(self, name):
        return EXTRA_COLORS[sum(map(ord, name)) % len(EXTRA_COLORS)]


COLORS = StrategyColors({"single": "#555555", "ddp": "#1f77b4", "zero1": "#8c564b", "zero2": "#e377c2",
                         "zero3": "#d62728", "fsdp": "#2ca02c"})
EXTRA_COLORS = ["#17becf", "#bcbd22", "#7f7f7f", "#9467bd"]
MB = 1e6
PALETTE = ["#1f77b4", "#aec7e8", "#d62728", "#ff9896", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]  # a colour per category
MODEL_STATE = ["params", "grads", "optim"]  # what the ZeRO stages shard, one after another
NAMES = {"single": "single"}  # a strategy's title in prose and legends: the registry's, added by main


def fail(msg):
    print(f"report: {msg}", file=sys.stderr)
    sys.exit(1)


def read_log(path):
    if not os.path.exists(path):
        fail(f"{path}: missing (did that trainer run?)")
    steps, summary = [], None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                fail(f"{path}:{n}: not valid JSON (truncated log?)")
            if obj.get("start"):
                continue
            if obj.get("summary"):
                summary = obj
            elif "step" in obj and "loss" in obj:
                steps.append(obj)
            else:
                fail(f"{path}:{n}: neither a start, a step nor a summary line")
    if summary is None:
        fail(f"{path}: truncated: no summary line at the end")
    if not steps:
        fail(f"{path}: no steps")
    return steps, summary


def read_trace(path):
    if not os.path.exists(path):
        fail(f"{path}: missing (run the trainers with --trace)")
    events = []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 6:
            fail(f"{path}: malformed line: {line.strip()!r}")
        rank, step, cat, name, start, end = parts
        events.append((int(rank), int(step), cat, name, float(start), float(end)))
    if not events:
        fail(f"{path}: empty trace")
    return events


def gnuplot_safe(path, what):
    """`path` as gnuplot will quote it ('...'): a quote or a line break would end the string early."""
    if any(c in path for c in "'\"\n\r\\"):
        fail(f"{what} {path!r}: a path with quotes, backslashes or line breaks cannot be handed to gnuplot")
    return path


def gnuplot(script, out_dir, name, width=900, height=520):
    """Runs the script twice: PNG for the report and SVG."""
    gnuplot_safe(f"{out_dir}/{name}", "output")
    for term, ext in (("pngcairo noenhanced font 'sans,10'", "png"), ("svg noenhanced font 'sans,10'", "svg")):
        full = (f"set terminal {term} size {width},{height}\nset output '{out_dir}/{name}.{ext}'\n"
                f"set datafile separator '\\t'\n{script}\n")
        r = subprocess.run(["gnuplot"], input=full, text=True, capture_output=True)
        if r.returncode != 0 or r.stderr.strip():
            fail(f"gnuplot failed on {name}: {r.stderr.strip()}")


def stacked_bars(tsv, columns, palette, title, ylabel, xlabel, out_dir, name):
    """Stacked bars, one bar per row of `tsv`, one colour per column (palette: one per column); the legend
    lists the columns top of the stack first, as the memory step's does."""
    series = ", ".join(f"'{tsv}' using {k + 2}{':xtic(1)' if k == 0 else ''} lc rgb '{palette[k]}' title '{c}'"
                       for k, c in enumerate(columns))
    stacks = [sum(float(x) for x in line.split("\t")[1:]) for line in open(tsv) if not line.startswith("#")]
    top = 1.1 * max(stacks, default=0) or 1  # headroom: the tallest bar stops below the frame
    gnuplot(f"""set title "{title}"
set ylabel "{ylabel}"
set xlabel "{xlabel}"
set yrange [0:{top}]
set style data histograms
set style histogram rowstacked
set style fill solid 0.9 border -1
set boxwidth 0.8
set key outside right top invert
set grid ytics
set xtics rotate by -45 font ',8'
plot {series}""", out_dir, name, 1000, 540)


TEMPORARY = ["params_gathered", "grads_gathered", "comm_buffers"]  # what a step allocates and frees again
PHASE_WORDS = {"setup": "step's start", "gather fwd": "gather before the forward", "forward": "forward",
               "release fwd": "release after the forward", "gather bwd": "gather before the backward",
               "backward": "backward", "reduce": "reduce after the backward",
               "finish grads": "wait for the last reduce", "optimizer": "optimizer step"}


def fullest_rank(summary):
    """The rank whose peak is highest: its step is the one shown."""
    return max(summary["ranks"], key=lambda r: r["peak_bytes"])


def unit_words(unit, blocks_of_unit):
    """'the embeddings', 'block 2', 'blocks 2-3', 'the head': unit `unit` by what it holds (the summary's
    blocks_of_unit; None: 'unit 3')."""
    if blocks_of_unit is None:
        return f"unit {unit}"
    if unit == 0:
        return "the embeddings"
    if unit == len(blocks_of_unit) - 1:
        return "the head"
    first, count = sum(blocks_of_unit[:unit]), blocks_of_unit[unit]
    return f"block {first}" if count == 1 else f"blocks {first}-{first + count - 1}"


def moment_words(timeline, event, blocks_of_unit):
    """Where a step's event `event` happened: 'at the backward of block 1'. Before a unit's backward a strategy
    gathers its parameters, or lends it gradient buffers (ZeRO-2): the event's category says which."""
    if event < 0:
        return "held from the step's start (nothing allocated in it)"
    phase, unit, category = timeline["events"][event][:3]
    words = PHASE_WORDS[phase]
    if phase in ("gather fwd", "gather bwd") and category == "grads_gathered":
        words = "gradient buffers lent before the backward"
    return f"at the {words}" + (f" of {unit_words(unit, blocks_of_unit)}" if unit >= 0 else "")


def peak_where(rank, summary):
    """'peak 47.7 MB at the backward of block 2', from the summary's peak moment."""
    m = rank["peak_moment"]
    return f"peak {m['bytes'] / MB:.1f} MB " + moment_words(rank["timeline"], m["event"], summary.get("blocks_of_unit"))


def peak_in_words(rank, summary):
    """peak_where, and what the step's temporaries held at that moment."""
    m = rank["peak_moment"]
    alive = [f"{m['held'][c] / MB:.1f} MB {c}" for c in TEMPORARY if m["held"][c] >= 0.05 * MB]  # as printed
    return peak_where(rank, summary) + (": " + ", ".join(alive) + " alive besides the resident state and the "
                                        "activations" if alive else "")


def tick_words(unit, blocks_of_unit):
    """A unit's short name on a step's x axis: 'emb', 'b2', 'b2-3', 'head' (None: the unit's index)."""
    words = unit_words(unit, blocks_of_unit)
    return {"the embeddings": "emb", "the head": "head"}.get(words, words.replace("blocks ", "b").replace("block ", "b"))


def shown_categories(timelines):
    """The device categories that hold bytes at some moment of any of the steps: the others get no colour and no
    legend entry."""
    shown = set()
    for t in timelines:
        shown |= {c for c in CATEGORIES if t["start"][c] > 0}
        shown |= {e[2] for e in t["events"] if e[2] in CATEGORIES}
    return [c for c in CATEGORIES if c in shown]


def memory_step_panel(tsv, title, timeline, peak, first, shown, blocks_of_unit):
    """One panel of a step's memory: `timeline` as the summary keeps it ({"start": {category: bytes}, "events":
    [[phase, unit, category, bytes, total], ...]}), written to `tsv` stacked (each column its category's MB added
    to those before it, for the categories `shown`), the units' parts marked on the x axis (F b2: block 2's
    forward, B head: the head's backward; a mark too close to the one before it is left out), the peak moment
    `peak` ({"event", "bytes"}) marked. A step that allocates nothing says so. Returns the panel's gnuplot
    commands."""
    held = dict(timeline["start"])

    def stacked():
        out, acc = [], 0
        for c in shown:
            acc += held[c] / MB
            out.append(acc)
        return out
    rows, ticks, last = [[0] + stacked()], [], None
    events = timeline["events"]
    spacing = max(1.0, len(events) / 28)  # at most about 28 marks across a panel
    for i, (phase, unit, cat, size, total) in enumerate(events):
        held[cat] += size
        rows.append([i + 1] + stacked())
        part = "F" if phase in ("gather fwd", "forward", "release fwd") else \
               "B" if phase in ("gather bwd", "backward", "reduce") else "opt"
        here = (part, unit if part != "opt" else -1)
        if here != last:
            if not ticks or i + 1 - ticks[-1][0] >= spacing:  # where its first event's level begins
                ticks.append((i + 1, part + (" " + tick_words(unit, blocks_of_unit) if part != "opt" else "")))
            last = here
    if not events and blocks_of_unit:  # nothing allocated: the level stays, the units' parts marked in order
        units = len(blocks_of_unit)
        ticks = [(u + 0.5, "F " + tick_words(u, blocks_of_unit)) for u in range(units)]
        ticks += [(2 * units - u - 0.5, "B " + tick_words(u, blocks_of_unit)) for u in reversed(range(units))]
        ticks.append((2 * units + 0.5, "opt"))
        rows.append([2 * units + 1] + stacked())
    rows.append([len(rows) if events else rows[-1][0] + 1] + stacked())
    # each level drawn as a step (its start and its end): one filled shape per category, no seams between events
    steps = [row for k, row in enumerate(rows) for row in ([row] + ([[rows[k + 1][0]] + row[1:]] if k + 1 < len(rows)
                                                                    else []))]
    write_tsv(tsv, ["event"] + [f"up_to_{c}" for c in shown], steps)
    xtics = ", ".join(f'"{label}" {x}' for x, label in ticks) or '"" 0'
    series = ", ".join(f"'{tsv}' using 1:{k + 2} with filledcurves x1 fs solid 0.85 noborder "
                       f"lc rgb '{PALETTE[CATEGORIES.index(c)]}' title '{c}'" for k, c in reversed(list(enumerate(shown))))
    key = "set key outside right top font ',9'" if first else "unset key"
    # a step with nothing allocated says so under its frame, where the others say how to read their x axis
    quiet = (f"set xlabel \"nothing is allocated or freed in this step: it holds its resident state throughout "
             f"(its units' parts marked in order)\" font ',9'" if not events else f"set xlabel \"{STEP_XLABEL}\" font ',9'")
    return f"""set title "{title}" font ',10'
{key}
set xtics ({xtics}) rotate by -45 font ',8'
{quiet}
set label 1 "peak" at {peak['event'] + 1 if peak['event'] >= 0 else 0}, {peak['bytes'] / MB} point pt 7 ps 1 lc rgb 'black' offset 0.5,0.5
plot {series}"""


STEP_XLABEL = "the step's allocations and frees, in order (not time); a unit's mark too close to the one before it is left out"


def memory_step_plot(panels, top, out_dir, name):
    """The panels of memory_step_panel stacked on one y axis up to `top` MB."""
    gnuplot(f"""set multiplot layout {len(panels)},1 title "Memory over one step: bytes in use by category, allocation by allocation (F b2: block 2's forward, B head: the head's backward)"
set ylabel "MB in use"
set xlabel "{STEP_XLABEL}" font ',9'
set yrange [0:{top * 1.1}]
set grid xtics ytics
set rmargin 22
set bmargin 5
set style fill solid 0.85 noborder
""" + "\n".join(panels) + "\nunset multiplot", out_dir, name, 1100, 60 + 250 * len(panels))


def plot_memory_step(logs, strategies, data, plots):
    """'Memory over one step': a panel per strategy, its fullest rank's kept step."""
    chosen = {s: fullest_rank(logs[s][1]) for s in strategies}
    for s in strategies:
        if not chosen[s].get("timeline"):
            fail(f"{s}.jsonl: the summary has no memory timeline (did the run train a step?)")
    shown = shown_categories([chosen[s]["timeline"] for s in strategies])
    panels = []
    for s in strategies:
        r = chosen[s]
        title = f"{NAMES[s]}, rank {r['rank']}, step {r['timeline']['step']}: {peak_where(r, logs[s][1])}"
        panels.append(memory_step_panel(f"{data}/memory_step_{s}.tsv", title, r["timeline"], r["peak_moment"],
                                        not panels, shown, logs[s][1].get("blocks_of_unit")))
    memory_step_plot(panels, max(r["peak_bytes"] for r in chosen.values()) / MB, plots, "memory_step")


def plan_model_args(cfg):
    """build/plan's flags for the run's model."""
    if cfg.get("preset"):
        return ["--config", cfg["preset"], "--vocab", str(cfg["vocab_size"])]
    return ["--model", cfg["model"]]


def plan_memory_args(cfg):
    """build/plan's flags for what changes the run's memory, as its trainers were given them."""
    args = ["--precision", cfg.get("precision", "fp32"), "--reduce-dtype", cfg.get("reduce_dtype", "fp32"),
            "--grad-accum", str(cfg.get("grad_accum", 1))]
    if cfg.get("grad_accum", 1) > 1:  # how its micro-batches are reduced: a flag of nothing with one
        args += ["--accum-mode", cfg.get("accum_mode", "sync-each")]
    flags = (("recompute", "--recompute"), ("fused_attention", "--fused-attention"),
             ("fused_classifier", "--fused-classifier"), ("offload_optimizer", "--offload-optimizer"))
    args += [flag for key, flag in flags if cfg.get(key)]
    return args + (["--ema", repr(cfg["ema"])] if cfg.get("ema") else [])


def plan_page_link(run, build, cfg, world, tokens_per_s):
    """The planner's page (make web, docs/web.md) with this run's model, ranks, batch, sequence and what changes
    its memory filled in, and one rank's measured tokens/s (the single-rank run's) for its time panel: its
    address, relative to the report."""
    model = plan_model_args(cfg) if cfg.get("preset") else \
        ["--dims", f"{cfg['num_layers']},{cfg['num_heads']},{cfg['channels']}", "--vocab", str(cfg["vocab_size"])]
    args = [*model, "--ranks", str(world), "--batch", str(cfg["batch"]), "--seq", str(cfg["seq"]),
            *plan_memory_args(cfg), "--tokens-per-s", str(round(tokens_per_s))]
    if not cfg.get("preset"):
        args = ["--config", "", *args]  # the page's preset cleared: its model is the --dims
    state, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            state.append(f"{args[i][2:]}={args[i + 1]}")
            i += 2
        elif args[i] == "--config":  # the empty preset
            state.append("config=")
            i += 2
        else:
            state.append(args[i][2:])
            i += 1
    return os.path.relpath(os.path.join(build, "web", "index.html"), run) + "#" + "&".join(state)


RANK_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def plot_scaling(run, build, cfg, world, logs, strategies, data, plots, speed_source):
    """build/plan --time's tokens/s for N = 1, 2, 4, ... 64 ranks, B/N of this run's rows per rank (weak
    scaling), machines of this run's ranks: compute at train_single's rate (its fastest step; shared by a
    machine's ranks on a CPU,
    one GPU each in the CUDA build), the link inside a machine fitted to compare.sh's bench_comm run, the
    default network between machines (docs/scale.md). The measured runs are the points, each its summary's
    tokens_per_s (the Speed table's figure) at its N: the runs at one rank per core where the runs were
    time-sliced (speed_source), none where there are none."""
    def rate(name):  # the fastest step's tokens/s (the first warms up): what the machine does when nothing else
        steps = [x["tokens_per_s"] for x in logs[name][0]]  # takes its cores, a calibration a busy moment cannot drag
        return max(steps[1:] if len(steps) > 1 else steps)

    rows = cfg["batch"] // world
    calib = os.path.join(run, "bench_comm.txt")
    cmd = [f"{build}/plan", *plan_model_args(cfg), "--ranks", "64", "--batch", str(64 * rows), "--seq", str(cfg["seq"]),
           "--time", "--tokens-per-s", str(rate("single")), "--ranks-per-node", str(world),
           "--precision", cfg.get("precision", "fp32"), "--tsv"]
    if logs["single"][1].get("device", "cpu") == "cpu":
        cmd += ["--cores-per-node", "1"]
    if os.path.exists(calib):
        cmd += ["--calibrate", calib]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)}: {r.stderr.strip()}")
    predicted = {}
    for line in r.stdout.splitlines():
        f = line.split("\t")
        predicted.setdefault(int(f[1]), {})[f[0]] = float(f[7])
    write_tsv(f"{data}/scaling.tsv", ["ranks"] + strategies,
              [[n] + [predicted[n][s] for s in strategies] for n in sorted(predicted)])
    at = {s: speed_source[s][1] for s in strategies} if speed_source else {}
    measured = [[1, logs["single"][1]["tokens_per_s"]] + ["NaN"] * len(strategies)]
    measured += [[n, "NaN"] + [at[s]["tokens_per_s"] if s in at and at[s]["world_size"] == n else "NaN"
                               for s in strategies] for n in sorted({a["world_size"] for a in at.values()})]
    write_tsv(f"{data}/scaling_measured.tsv", ["ranks", "single"] + strategies, measured)
    # every line and point well inside the frame (autoscale can put the extreme one on its border)
    values = [v for n in predicted for v in predicted[n].values()] + \
             [v for row in measured for v in row[1:] if v != "NaN"]
    low, high = min(v for v in values if v > 0), max(values)
    lines = ", ".join(f"'{data}/scaling.tsv' using 1:{k + 2} with lines lw 2 lc rgb '{COLORS[s]}' "
                      f"title '{s} (model)'" for k, s in enumerate(strategies))
    points = ", ".join(f"'{data}/scaling_measured.tsv' using 1:{k + 2} with points pt 7 ps 1.5 lc rgb '{COLORS[s]}' "
                       f"title '{s} measured'" for k, s in enumerate(["single"] + strategies))
    gnuplot(f"""set title "Tokens/s vs ranks: build/plan --time ({rows} rows per rank; machines of {world} ranks)"
set xlabel "ranks N"
set ylabel "tokens / s (all ranks)"
set logscale xy 2
set xrange [0.8:80]
set yrange [{low / 1.5}:{high * 1.5}]
set grid
set key outside right top box
plot {lines}, {points}""", plots, "scaling")
    return predicted


# The rungs of the ladder and ZeRO++'s, cumulatively on FSDP: (label, strategy, its flags); G ranks a machine.
def zeropp_rungs(G):
    return [("DDP", "ddp", []), ("ZeRO-1", "zero1", []), ("ZeRO-2", "zero2", []), ("ZeRO-3", "zero3", []),
            ("FSDP", "fsdp", []), ("+ qwZ", "fsdp", ["--quantize-weights", "int8"]),
            ("+ hpZ", "fsdp", ["--quantize-weights", "int8", "--secondary-shard-group", str(G)]),
            ("+ qgZ", "fsdp", ["--quantize-weights", "int8", "--secondary-shard-group", str(G),
                               "--quantize-grads", "int4", "--quantize-grads-node", str(G)])]


def plot_zeropp(build, cfg, logs, data, plots):
    """The bytes a rank sends per step to ranks on other machines, rung by rung up the ladder and then ZeRO++'s
    changes added one by one on FSDP (docs/zeropp.md), at N = 64 and 384 on machines of 8 ranks: build/plan
    --time's rank 0 (the collectives among ranks of more than one machine), this run's model and rows per rank."""
    G, rows = 8, max(1, cfg["batch"] // logs["single"][1].get("world_size", 1))
    rungs, across = zeropp_rungs(G), {}
    for flags in {tuple(f) for _, _, f in zeropp_rungs(G)}:
        cmd = [f"{build}/plan", *plan_model_args(cfg), "--ranks", "384", "--batch", str(384 * rows), "--seq",
               str(cfg["seq"]), "--precision", cfg.get("precision", "fp32"), "--time", "--tokens-per-s", "1",
               "--ranks-per-node", str(G), "--tsv", *flags]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)}: {r.stderr.strip()}")
        for line in r.stdout.splitlines():  # strategy, N, group, ..., bytes sent, of them among machines
            f = line.split("\t")
            across[(flags, f[0], int(f[1]))] = int(f[10])
    table = [[label, across[(tuple(flags), name, 64)] / MB, across[(tuple(flags), name, 384)] / MB]
             for label, name, flags in rungs]
    write_tsv(f"{data}/zeropp.tsv", ["rung", "N=64", "N=384"], table)
    gnuplot(f"""set title "Bytes each rank sends across machines per step, up the ladder and ZeRO++ (planner; machines of {G} ranks)"
set ylabel "MB sent to other machines per rank per step"
set xlabel "rung (ZeRO++'s changes added one by one on FSDP: qwZ int8 gathers, hpZ nodes of {G}, qgZ int4 reduces in two hops)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.9 border -1
set boxwidth 0.9
set yrange [0:*]
set grid ytics
set key outside right top
plot '{data}/zeropp.tsv' using 2:xtic(1) lc rgb '#1f77b4' title 'N = 64', '' using 3 lc rgb '#ff7f0e' title 'N = 384'""",
            plots, "zeropp", 1000, 520)


def plot_units(build, cfg, world, logs, strategies, data, plots):
    """The trade of the strategies that gather by unit as their units grow (--unit-blocks J = 1 .. L blocks per
    unit; docs/fsdp.md): at this run's N and rows per rank, build/plan's peak per rank (ZeRO-3: its fullest rank)
    and collective calls per step (rank 0's); and, from build/plan --time at N = 64 and 1024 (machines of this
    run's ranks, compute at train_single's median rate, the default links), each one's link time per step and
    what of it compute waits for: a collective per unit pays its latency per unit, a collective per tensor does
    not care how the tensors are grouped."""
    sharded = [s for s in strategies if "--unit-blocks" in registry(build)[s]["flags"]]
    rows_per_rank = cfg["batch"] // world
    steps = [x["tokens_per_s"] for x in logs["single"][0]]
    rate = statistics.median(steps[1:] if len(steps) > 1 else steps)

    def plan(*args):
        cmd = [f"{build}/plan", *plan_model_args(cfg), "--seq", str(cfg["seq"]), *args]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)}: {r.stderr.strip()}")
        return [line.split("\t") for line in r.stdout.splitlines() if not line.startswith("#")]

    rows, times = [], []
    for k in range(1, cfg["num_layers"] + 1):
        units = ["--unit-blocks", str(k)]
        shape = ["--ranks", str(world), "--batch", str(rows_per_rank * world), *units]
        peak, calls = {}, {}
        for f in plan(*shape, "--tsv"):
            peak[f[0]] = max(peak.get(f[0], 0), int(f[2 + len(CATEGORIES) + len(HOST_CATEGORIES)]))
        for f in plan(*shape, "--traffic"):
            if f[1] == "0":
                calls[f[0]] = calls.get(f[0], 0) + int(f[3])
        step = {}
        time = ["--ranks", "1024", "--batch", str(rows_per_rank * 1024), *units, "--time", "--tokens-per-s", str(rate),
                "--ranks-per-node", str(world), "--tsv"]
        if logs["single"][1].get("device", "cpu") == "cpu":
            time += ["--cores-per-node", "1"]
        for f in plan(*time):  # strategy, N, group, compute s, link busy s, waited s, ...
            if f[0] in sharded:
                step[(f[0], int(f[1]))] = (1e3 * float(f[4]), 1e3 * float(f[5]))
        rows.append([k] + [peak[s] / MB for s in sharded] + [calls[s] for s in sharded])
        times.append([k] + [step[(s, n)][i] for s in sharded for n in (64, 1024) for i in (0, 1)])
    write_tsv(f"{data}/units.tsv", ["blocks_per_unit"] + [f"{s}_peak_mb" for s in sharded] +
              [f"{s}_calls" for s in sharded], rows)
    write_tsv(f"{data}/units_time.tsv", ["blocks_per_unit"] + [f"{s}_{what}_ms_n{n}" for s in sharded
                                                               for n in (64, 1024) for what in ("link", "waited")], times)
    n = len(sharded)
    lines = [f"'{data}/units.tsv' using 1:{k + 2} axes x1y1 with linespoints lw 2 pt 7 lc rgb '{COLORS[s]}' "
             f"title '{s} peak MB (left)'" for k, s in enumerate(sharded)]
    lines += [f"'{data}/units.tsv' using 1:{n + k + 2} axes x1y2 with linespoints lw 2 dt 2 pt 6 lc rgb '{COLORS[s]}' "
              f"title '{s} collectives per step (right)'" for k, s in enumerate(sharded)]
    top_mb = max(r[1 + k] for r in rows for k in range(n))
    top_calls = max(r[1 + n + k] for r in rows for k in range(n))
    gnuplot(f"""set title "Blocks per unit (--unit-blocks J): peak per rank against collectives per step, N = {world} (planner)"
set xlabel "blocks per unit J"
set ylabel "peak MB per rank"
set y2label "collective calls per step (rank 0)"
set xtics 1
set yrange [0:{1.2 * top_mb}]
set y2range [0:{1.2 * top_calls}]
set ytics nomirror
set y2tics
set grid
set key outside bottom center horizontal
plot {", ".join(lines)}""", plots, "units", 900, 560)
    panels = []
    for k, s in enumerate(sharded):
        col = 2 + 4 * k  # its link and waited ms at N = 64, then at N = 1024
        top = max(r[1 + 4 * k + i] for r in times for i in range(4))
        panels.append(f"""set title "{NAMES[s]}" font ',10'
set yrange [0:{1.15 * top}]
plot '{data}/units_time.tsv' using 1:{col + 2} with linespoints lw 2 pt 7 lc rgb '{COLORS[s]}' title 'link busy, N = 1024', \\
     '' using 1:{col + 3} with linespoints lw 2 dt 2 pt 6 lc rgb '{COLORS[s]}' title 'compute waits, N = 1024', \\
     '' using 1:{col} with linespoints lw 1 pt 7 lc rgb '#888888' title 'link busy, N = 64', \\
     '' using 1:{col + 1} with linespoints lw 1 dt 2 pt 6 lc rgb '#888888' title 'compute waits, N = 64'""")
    gnuplot(f"""set multiplot layout 1,{len(sharded)} title "Blocks per unit: the link's time per step and what compute waits for (build/plan --time, machines of {world} ranks)"
set xlabel "blocks per unit J"
set ylabel "ms per step"
set xtics 1
set grid
set key below font ',8'
""" + "\n".join(panels) + "\nunset multiplot", plots, "units_time", 450 * len(sharded) + 100, 480)


def plot_sharding(build, cfg, world, logs, data, plots):
    """Which rank keeps which elements of the flat model between steps, per strategy
    (ZeRO-1/2: the range of optimizer state, and for ZeRO-2 gradients, a rank owns;
    their parameters are everywhere, as DDP's; FSDP's tensors kept whole by --shard-min-numel
    are on every rank's row): one row per rank, the model's
    elements in llm.c's order along x, tensor borders as thin lines; FSDP's padding
    rows as grey boxes after each tensor's end."""
    cmd = [f"{build}/plan", "--ranks", str(world), "--layout"] + plan_model_args(cfg)
    whole = logs["fsdp"][1].get("strategy_options", {}).get("shard_min_numel", 0) if "fsdp" in logs else 0
    if whole:  # FSDP kept its small tensors whole: on every rank's row
        cmd += ["--shard-min-numel", str(whole)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)}: {r.stderr.strip()}")
    tensors, holds, pads = [], [], []
    for line in r.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "tensor":
            tensors.append((f[1], int(f[2]), int(f[3])))
        elif f[0] == "hold":
            holds.append((f[1], int(f[2]), int(f[3]), int(f[4])))
        elif f[0] == "pad":
            pads.append((f[1], int(f[2]), int(f[3]), int(f[4])))
    strategies = [s for s in registry(build) if any(h[0] == s for h in holds)]
    row = {(s, rank): (len(strategies) - 1 - k) * (world + 1) + (world - 1 - rank)
           for k, s in enumerate(strategies) for rank in range(world)}
    scale = 1e6  # elements along x in millions
    boxes = [[(b + e) / 2 / scale, row[(s, rank)], (e - b) / 2 / scale, 0.4,
              int(RANK_COLORS[rank % len(RANK_COLORS)][1:], 16)] for s, rank, b, e in holds]
    write_tsv(f"{data}/sharding.tsv", ["x", "y", "dx", "dy", "color"], boxes)
    write_tsv(f"{data}/sharding_padding.tsv", ["x", "y", "dx", "dy"],
              [[(at + n / 2) / scale, row[(s, rank)] - 0.2, n / 2 / scale, 0.2] for s, rank, at, n in pads]
              or [[-1, -10, 0, 0]])
    borders = "\n".join(f"set arrow from {b / scale},graph 0 to {b / scale},graph 1 nohead lc rgb '#cccccc' lw 0.5"
                        for _, b, _ in tensors)
    ytics = ", ".join(f"'{s} r{rank}' {row[(s, rank)]}" for s in strategies for rank in range(world))
    total = max(e for _, _, e in tensors) / scale
    padding = " (grey: padding)" if pads else " (no padding: every tensor's rows divide by N)"
    # two lines: one would be wider than the plot (1100 px at gnuplot's title font)
    gnuplot(f"""set title "Who keeps what between steps, N = {world}{padding}\\nDDP replicas, ZeRO-1/2 flat ranges, ZeRO-3 whole tensors by owner, FSDP dim-0 slices"
set xlabel "parameter index in llm.c's order (millions; thin lines: tensor borders)"
set ylabel "strategy, rank"
set xrange [0:{total}]
set yrange [-1:{len(strategies) * (world + 1) - 1}]
set ytics ({ytics}) font ',8'
set style fill solid 0.85 noborder
unset key
{borders}
plot '{data}/sharding.tsv' using 1:2:($1-$3):($1+$3):($2-$4):($2+$4):5 with boxxyerror lc rgb variable, \
     '{data}/sharding_padding.tsv' using 1:2:($1-$3):($1+$3):($2-$4):($2+$4) with boxxyerror lc rgb '#888888'""",
            plots, "sharding", 1100, 160 + 22 * len(strategies) * (world + 1))


def write_tsv(path, header, rows):
    with open(path, "w") as f:
        f.write("# " + "\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(str(x) for x in row) + "\n")


USAGE = """usage: report.py RUN_DIR [--build DIR] [--strategies LIST]
  plots (PNG and SVG) and a report (report.md, report.html) from a make compare run
  --build DIR        where build/plan is (default build)
  --strategies LIST  the strategies compared, comma-separated (default: every one of build/plan --strategies)
  --help             print this and exit"""


def parse_strategies(text, ladder):
    names = text.split(",")
    for name in names:
        if name not in ladder:
            fail(f"--strategies: unknown strategy '{name}' (choose from {','.join(ladder)})")
    if len(set(names)) != len(names):
        fail(f"--strategies: a strategy is listed twice in '{text}'")
    return [s for s in ladder if s in names]  # ladder order


def parse_args(argv):
    """(run_dir, build_dir, strategies); --help prints the usage and exits 0, anything else unknown exits 1."""
    if "--help" in argv or "-h" in argv:
        print(USAGE)
        sys.exit(0)
    build, strategies, positional, i = "build", None, [], 0
    while i < len(argv):
        if argv[i] in ("--build", "--strategies"):
            if i + 1 >= len(argv):
                fail(f"{argv[i]} needs a value (report.py --help)")
            if argv[i] == "--build":
                build = argv[i + 1]
            else:
                strategies = argv[i + 1]
            i += 2
        elif argv[i].startswith("-"):
            fail(f"unknown flag '{argv[i]}' (report.py --help)")
        else:
            positional.append(argv[i])
            i += 1
    if len(positional) != 1:
        fail("give one RUN_DIR (report.py --help)")
    gnuplot_safe(os.path.abspath(positional[0]), "the run directory")
    ladder = registry(build)
    NAMES.update({name: entry["title"] for name, entry in ladder.items()})
    return positional[0], build, parse_strategies(strategies, list(ladder)) if strategies else list(ladder)


def main():
    run, build, strategies = parse_args(sys.argv[1:])
    runs = ["single"] + strategies
    if not os.path.isdir(run):
        fail(f"{run}: not a directory")
    logs = {s: read_log(os.path.join(run, f"{s}.jsonl")) for s in runs}
    traces = {s: read_trace(os.path.join(run, f"{s}.trace.tsv")) for s in strategies}
    data, plots = os.path.join(run, "data"), os.path.join(run, "plots")
    os.makedirs(data, exist_ok=True)
    os.makedirs(plots, exist_ok=True)
    cfg = logs["single"][1]["config"]
    world = logs[strategies[0]][1]["world_size"]
    speed_dir = os.path.join(run, "speed")  # compare.sh: one rank per core, when the runs had more ranks than cores
    speed = {s: read_log(os.path.join(speed_dir, f"{s}.jsonl")) for s in strategies} if os.path.isdir(speed_dir) else None
    # what speed is measured from: the runs themselves, or (time-sliced) compare.sh's runs at one rank per core
    speed_source = speed if time_sliced(logs[strategies[0]][1]) else {s: logs[s] for s in strategies}
    for s in runs:
        c = logs[s][1]["config"]
        for key in ("num_params", "batch", "seq", "steps", "seed"):
            if c[key] != cfg[key]:
                fail(f"{run}/{s}.jsonl: {key} = {c[key]} but single.jsonl has {cfg[key]}: not one comparison")

    # ---- loss ----
    nsteps = min(len(logs[s][0]) for s in runs)
    rows = [[logs["single"][0][i]["step"]] + [logs[s][0][i]["loss"] for s in runs] for i in range(nsteps)]
    write_tsv(f"{data}/loss.tsv", ["step"] + runs, rows)
    worst = max(abs(r[1 + k] - r[1]) / abs(r[1]) for r in rows for k in range(1, len(runs)))
    lines = ", ".join(f"'{data}/loss.tsv' using 1:{k + 2} with linespoints lw 2 pt {k + 5} ps 0.6 "
                      f"lc rgb '{COLORS[s]}' title '{s}'" for k, s in enumerate(runs))
    # train_single's validation losses, and with --eval-ema those of its EMA weights (docs/training.md)
    evals = [x for x in logs["single"][0] if x.get("val_loss") is not None]
    ema = bool(evals) and evals[0].get("val_loss_ema") is not None
    if evals:
        write_tsv(f"{data}/val_loss.tsv", ["step", "val_loss"] + (["val_loss_ema"] if ema else []),
                  [[x["step"], x["val_loss"]] + ([x["val_loss_ema"]] if ema else []) for x in evals])
        lines += f", '{data}/val_loss.tsv' using 1:2 with points pt 9 ps 1.8 lc rgb 'black' title 'single: validation'"
        if ema:
            lines += (f", '{data}/val_loss.tsv' using 1:3 with points pt 11 ps 1.8 lc rgb '#8c564b' "
                      "title 'single: validation of the EMA weights'")
    gnuplot(f"""set title "Training loss: single rank and {len(strategies)} strategies at N = {world}"
set xlabel "step"
set ylabel "loss (nats per token)"
set grid
set offsets 0, graph 0.03, 0, 0
set key outside right top
set label 1 "the {len(runs)} curves coincide: largest relative difference {worst:.1e}" at graph 0.02, graph 0.06
plot {lines}""", plots, "loss")

    # ---- memory per rank at its peak moment, stacked by category ----
    # what each category held when the rank's total peaked (its kept step's peak_moment): the bar's height is
    # the rank's peak_bytes, a total that happened (each category's own peak, stacked, would not be)
    for s in runs:
        for r in logs[s][1]["ranks"]:
            if not r.get("peak_moment") or r["peak_moment"]["bytes"] != r["peak_bytes"]:
                fail(f"{run}/{s}.jsonl: rank {r['rank']}'s kept step does not hold its peak (peak_moment "
                     f"{(r.get('peak_moment') or {}).get('bytes')} bytes, peak_bytes {r['peak_bytes']})")
    shown = shown_categories([r["timeline"] for s in runs for r in logs[s][1]["ranks"]])
    rows = []
    for s in runs:
        for r in logs[s][1]["ranks"]:
            rows.append([f"{s}-r{r['rank']}"] + [r["peak_moment"]["held"][c] / MB for c in shown])
        rows.append([""] + [0] * len(shown))
    rows.pop()
    write_tsv(f"{data}/memory.tsv", ["run"] + shown, rows)
    stacked_bars(f"{data}/memory.tsv", shown, [PALETTE[CATEGORIES.index(c)] for c in shown],
                 "Memory per rank at its peak, by category: what each held at that moment",
                 "MB (million bytes)", "run and rank", plots, "memory_by_category")
    if any(r["host_peak_bytes"] for s in runs for r in logs[s][1]["ranks"]):  # --offload-optimizer (docs/offload.md)
        rows = [[f"{s}-r{r['rank']}"] + [r["mem"][c]["peak"] / MB for c in HOST_CATEGORIES]
                for s in runs for r in logs[s][1]["ranks"]]
        write_tsv(f"{data}/host_memory.tsv", ["run"] + HOST_CATEGORIES, rows)
        stacked_bars(f"{data}/host_memory.tsv", HOST_CATEGORIES, PALETTE, "Host memory per rank (--offload-optimizer)",
                     "MB (million bytes)", "run and rank", plots, "host_memory")

    plot_memory_step(logs, strategies, data, plots)

    # ---- accounted peak vs reserved vs OS peak RSS ----
    rows = []
    for s in runs:
        for r in logs[s][1]["ranks"]:
            rows.append([f"{s}-r{r['rank']}", r["peak_bytes"] / MB, r["reserved_peak_bytes"] / MB,
                         r["rss_peak_bytes"] / MB])
    write_tsv(f"{data}/peak.tsv", ["run", "accounted_peak_mb", "reserved_peak_mb", "rss_peak_mb"], rows)
    gnuplot(f"""set title "Peak memory per rank: in use (accountant), held by the allocator (reserved), seen by the OS (RSS)"
set ylabel "MB (million bytes)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.9 border -1
set yrange [0:*]
set key outside right top
set grid ytics
set xtics rotate by -45 font ',8'
set xlabel "run and rank"
plot '{data}/peak.tsv' using 2:xtic(1) lc rgb '#1f77b4' title 'accounted peak (training buffers in use)', \\
     '' using 3 lc rgb '#2ca02c' title 'reserved peak (in use + cached for reuse)', \\
     '' using 4 lc rgb '#ff7f0e' title 'OS peak RSS (adds program, MPI, C library)'""", plots, "peak_memory", 1000, 520)

    # ---- throughput ----
    tput = {s: logs[s][1]["tokens_per_s"] for s in runs}
    write_tsv(f"{data}/throughput.tsv", ["run", "tokens_per_s", "color"],
              [[s, tput[s], int(COLORS[s][1:], 16)] for s in runs])
    sliced = time_sliced(logs[strategies[0]][1])
    gnuplot(f"""set title "Throughput: whole global batch per second (N = {world} ranks; single = 1 rank)"""
            + (f"\\n{sliced}: time-sliced, not a property of the strategies (see Speed)" if sliced else "") + f""""
set ylabel "tokens / s"
set xlabel "run"
set style fill solid 0.9 border -1
set boxwidth 0.6
set grid ytics
set key outside right top
set yrange [0:{1.25 * max(tput.values())}]
set xrange [-0.6:{len(runs) - 0.4}]
plot '{data}/throughput.tsv' using 0:2:3:xtic(1) with boxes lc rgb variable notitle, \\
     '' using 0:2:(sprintf('%.0f', $2)) with labels offset 0,0.8 notitle, \\
     {tput['single']} with lines dt 2 lw 2 lc rgb '#555555' title 'single-rank reference'""", plots, "throughput")

    # ---- communication per step per rank ----
    rows = []
    for s in strategies:
        for r in logs[s][1]["ranks"]:
            rows.append([f"{s}-r{r['rank']}"] + [r["comm_last_step"][c]["bytes_sent"] / MB for c in COLLECTIVES])
    write_tsv(f"{data}/comm.tsv", ["run"] + COLLECTIVES, rows)
    stacked_bars(f"{data}/comm.tsv", COLLECTIVES, PALETTE, "Bytes each rank sends in one training step, by collective (ring model)",
                 "MB sent per step", "strategy and rank", plots, "comm_per_step")

    # ---- step time split ----
    rows = []
    for s in runs:
        steps = logs[s][1]["config"]["steps"]
        for r in logs[s][1]["ranks"]:
            t = r["time"]
            rows.append([f"{s}-r{r['rank']}", 1e3 * t["compute_s"] / steps, 1e3 * t["comm_wait_s"] / steps,
                         1e3 * t["optim_s"] / steps])
    write_tsv(f"{data}/time.tsv", ["run", "compute_ms", "comm_wait_ms", "optim_ms"], rows)
    sliced = time_sliced(logs[strategies[0]][1])
    stacked_bars(f"{data}/time.tsv", ["compute", "communication wait", "optimizer"], ["#2ca02c", "#d62728", "#9467bd"],
                 "Where a step's time goes, per rank (mean over steps)"
                 + (f": {sliced}, time-sliced (see Speed)" if sliced else ""), "ms per step", "run and rank", plots,
                 "step_time")

    # ---- planner: memory per rank vs number of ranks ----
    rows_per_rank = cfg["batch"] // world
    model_args = plan_model_args(cfg)
    plan_rows, state_rows = [], []
    n = 1
    while n <= 1024:
        cmd = [f"{build}/plan", "--ranks", str(n), "--batch", str(rows_per_rank * n), "--seq", str(cfg["seq"]), "--tsv"]
        cmd += model_args + plan_memory_args(cfg)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)}: {r.stderr.strip()}")
        peak, state = {}, {}
        for line in r.stdout.splitlines():
            f = line.split("\t")  # strategy, ranks, CATEGORIES' and HOST_CATEGORIES' bytes, the peak, the reserved peak
            peak[f[0]] = max(peak.get(f[0], 0), int(f[2 + len(CATEGORIES) + len(HOST_CATEGORIES)]))
            state[f[0]] = max(state.get(f[0], 0), sum(int(f[2 + CATEGORIES.index(c)]) for c in MODEL_STATE))
        plan_rows.append([n] + [peak[s] / MB for s in strategies])
        state_rows.append([n] + [state[s] / MB for s in strategies])
        n *= 2
    write_tsv(f"{data}/plan.tsv", ["ranks"] + strategies, plan_rows)
    measured = [[world] + [max(r["peak_bytes"] for r in logs[s][1]["ranks"]) / MB for s in strategies]]
    write_tsv(f"{data}/measured_peak.tsv", ["ranks"] + strategies, measured)
    lines = ", ".join(f"'{data}/plan.tsv' using 1:{k + 2} with lines lw 2 lc rgb '{COLORS[s]}' title '{s} (planner)'"
                      for k, s in enumerate(strategies))
    points = ", ".join(f"'{data}/measured_peak.tsv' using 1:{k + 2} with points pt 7 ps 1.5 lc rgb '{COLORS[s]}' "
                       f"title '{s} measured'" for k, s in enumerate(strategies))
    gnuplot(f"""set title "Peak memory per rank vs number of ranks ({rows_per_rank} sequence(s) per rank; ZeRO-3: largest rank)"
set xlabel "ranks N"
set ylabel "MB per rank (million bytes)"
set logscale x 2
set xrange [1:1024]
set grid
set key outside right top
plot {lines}, {points}""", plots, "memory_vs_ranks")

    # ---- resident model state per rank vs number of ranks: the ZeRO ladder ----
    write_tsv(f"{data}/plan_model_state.tsv", ["ranks"] + strategies, state_rows)
    measured = [[world] + [max(sum(r["mem"][c]["peak"] for c in MODEL_STATE) for r in logs[s][1]["ranks"]) / MB
                           for s in strategies]]
    write_tsv(f"{data}/measured_model_state.tsv", ["ranks"] + strategies, measured)
    lines = ", ".join(f"'{data}/plan_model_state.tsv' using 1:{k + 2} with lines lw 2 lc rgb '{COLORS[s]}' "
                      f"title '{s} (planner)'" for k, s in enumerate(strategies))
    points = ", ".join(f"'{data}/measured_model_state.tsv' using 1:{k + 2} with points pt 7 ps 1.5 "
                       f"lc rgb '{COLORS[s]}' title '{s} measured'" for k, s in enumerate(strategies))
    gnuplot(f"""set title "Resident model state per rank (params + grads + AdamW) vs ranks; ZeRO-3: fullest rank"
set xlabel "ranks N"
set ylabel "MB per rank (million bytes)"
set logscale xy 2
set xrange [1:1024]
set grid
set key outside right top
plot {lines}, {points}""", plots, "model_state_vs_ranks")

    # ---- predicted throughput vs ranks (build/plan --time), with the measured points ----
    predicted = plot_scaling(run, build, cfg, world, logs, strategies, data, plots, speed_source)

    # ---- one step as a timeline per rank, every strategy on one time axis ----
    def last_step(s):
        step = max(e[1] for e in traces[s])
        return step, [e for e in traces[s] if e[1] == step]
    longest = max(max(e[5] for e in last_step(s)[1]) - min(e[4] for e in last_step(s)[1]) for s in strategies)
    for s in strategies:
        step, chosen = last_step(s)
        t0 = min(e[4] for e in chosen)
        kinds = {"forward": [], "backward": [], "comm": [], "optim": [], "collective": []}
        for rank, _, cat, name, start, end in chosen:
            kind = cat if cat in ("comm", "optim", "collective") else name.split()[0]
            if kind == "comm" and end - start < 0.02:
                continue  # hooks that did nothing
            kinds[kind].append((rank, start - t0, end - t0, name))
        for kind, evs in kinds.items():
            write_tsv(f"{data}/timeline_{s}_{kind}.tsv", ["rank", "start_ms", "end_ms", "name"],
                      [[r, a, b, nm.replace(" ", "_")] for r, a, b, nm in evs] or [[-10, 0, 0, "none"]])
        colors = {"forward": "#1f77b4", "backward": "#ff7f0e", "comm": "#d62728", "optim": "#9467bd",
                  "collective": "#7f7f7f"}
        heights = {"forward": 0.35, "backward": 0.35, "comm": 0.15, "optim": 0.35, "collective": 0.08}
        offsets = {"forward": 0.0, "backward": 0.0, "comm": -0.3, "optim": 0.0, "collective": 0.3}
        titles = {"comm": "waiting for collectives (below)", "collective": "collectives in flight (above)"}
        series = ", ".join(
            f"'{data}/timeline_{s}_{k}.tsv' using (($2+$3)/2):($1+{offsets[k]}):(($3-$2)/2):({heights[k]}) "
            f"with boxxyerror fs solid 0.85 lc rgb '{colors[k]}' title '{titles.get(k, k)}'"
            for k in kinds if kinds[k])
        gnuplot(f"""set title "{NAMES[s]}: training step {step} on each rank (the same time axis for every strategy)"
set xlabel "time since the step began (ms)"
set ylabel "rank"
set xrange [0:{1.02 * longest}]
set yrange [-0.8:{world - 0.4}]
set ytics 1
set grid xtics
set key outside right top vertical font ',9'
plot {series}""", plots, f"timeline_{s}", 1100, 200 + 80 * world)

    plot_sharding(build, cfg, world, logs, data, plots)
    plot_zeropp(build, cfg, logs, data, plots)
    if any("--unit-blocks" in registry(build)[s]["flags"] for s in strategies):
        plot_units(build, cfg, world, logs, strategies, data, plots)
    placements = {s: registry(build)[s]["placement"] for s in strategies}  # whole tensors: an unevenness to tell
    write_report(run, logs, world, cfg, worst, tput, strategies, predicted, speed_source, placements,
                 plan_page_link(run, build, cfg, world, logs["single"][1]["tokens_per_s"]))


def time_sliced(summary):
    """'N ranks on C cores' when a run had more ranks on its machine than cores, else ''."""
    cores, ranks = summary.get("cores_on_node"), summary.get("ranks_on_node")
    return f"{ranks} ranks on {cores} cores" if cores and ranks and ranks > cores else ""


def slowest_time(summary):
    """The slowest rank's time split (summary "time", docs/logs.md): what the Speed table, its sentences and the
    main table's share of waiting all read."""
    return max((r["time"] for r in summary["ranks"]), key=lambda t: t.get("step_s", 0))


def speed_rows(source, predicted):
    """Per strategy, its slowest rank's step split (ms per step) and its tokens/s, with the step-time model's
    tokens/s at the same N."""
    rows = []
    for s, (steps, summary) in source.items():
        n = max(len(steps), 1)
        t = slowest_time(summary)
        guess = predicted.get(summary["world_size"], {}).get(s, float("nan"))
        rows.append([s, summary["world_size"], f"{1e3 * t.get('step_s', 0) / n:.1f}", f"{1e3 * t['compute_s'] / n:.1f}",
                     f"{1e3 * t['comm_wait_s'] / n:.1f}", f"{1e3 * t['optim_s'] / n:.1f}",
                     f"{summary['tokens_per_s']:.0f}", f"{guess:.0f}",
                     f"{summary['tokens_per_s'] / guess:.2f}" if guess > 0 else "-"])
    return rows


def prediction_words(cells):
    """What the Speed table's measured / predicted column says, in a sentence: within 2x either way, or which runs
    are not, and why a busy machine does that."""
    ratios = {c[0]: float(c[-1]) for c in cells if c[-1] != "-"}
    off = {s: r for s, r in ratios.items() if not 0.5 <= r <= 2}
    if not ratios:
        return ""
    if not off:
        return (f" Every prediction is within 2x of its measurement (measured / predicted "
                f"{min(ratios.values()):.2f} to {max(ratios.values()):.2f}).")
    words = " Not within 2x of its prediction: " + ", ".join(f"{NAMES.get(s, s)} ({r:.2f})" for s, r in off.items()) + "."
    if any(r < 0.5 for r in off.values()):
        words += (" Below: the model takes one rank's compute rate from train_single's fastest step and holds it "
                  "fixed, while a measured tokens/s is the run's mean, whose first step (allocations, cold caches) "
                  "counts the more the fewer steps it ran, and other work on the machine, or ranks sharing cores "
                  "unevenly, slows it further.")
    if any(r > 2 for r in off.values()):
        words += (" Above: the run went faster than one rank's measured rate allows; the model takes that rate from "
                  "train_single's fastest step, so the calibration ran slower than these runs, for a cause these "
                  "runs did not measure.")
    return words + " Read the predictions for how the strategies compare, not for this machine's level."


def exposed_share(time):
    """The share of a rank's step spent waiting for communication: comm_wait_s over compute + waiting +
    optimizer, the step split so that each second counts once (docs/logs.md), as the Speed table's columns give
    it (comm waited ms / their sum)."""
    total = time["compute_s"] + time["comm_wait_s"] + time["optim_s"]
    return time["comm_wait_s"] / total if total > 0 else 0.0


# What to look at in each picture, in a sentence, for a reader of docs/README.md alone.
CAPTIONS = {
    "loss": "Every strategy trains the same model: the curves lie on the single rank's (the label gives the largest "
            "relative gap).",
    "memory_by_category": "Each bar is one rank at its peak moment, split by what held the bytes then.",
    "host_memory": "With the optimizer offloaded, the master weights and AdamW moments live here, in host memory, "
                   "not on the device.",
    "memory_step": "Each panel follows one step of one strategy allocation by allocation (left to right in order, "
                   "not time): the resident state at the bottom stays, what sits on top comes and goes with the "
                   "units; the dot is the peak. Where two units' parts follow closely, the second's mark on the "
                   "axis is left out so that the labels stay readable.",
    "peak_memory": "The bytes the strategies asked for (accounted peak), what the allocator kept to reuse "
                   "(reserved) and what the operating system saw (RSS): the gaps are the cache and the process.",
    "throughput": "Tokens per second of the whole batch; when the runs put more ranks on the cores than there are "
                  "cores, the bars measure the turn-taking, and the Speed table measures again.",
    "comm_per_step": "The bytes each rank sent in one step, by collective: DDP's one all-reduce against the "
                     "sharded strategies' gathers, broadcasts and reduces.",
    "step_time": "Where each rank's step went: computing, waiting for communication, or in the optimizer (the "
                 "three add up to the step).",
    "memory_vs_ranks": "The planner's peak per rank as N grows, with the rows per rank fixed: sharding divides "
                       "the model state by N, the activations stay; the dots are these runs.",
    "model_state_vs_ranks": "The ZeRO ladder alone (parameters, gradients, AdamW state per rank), as the planner "
                            "runs each strategy.",
    "sharding": "Which rank keeps which elements of the model between steps: the whole replica (DDP), a flat "
                "range of the optimizer state (ZeRO-1/2), whole tensors by owner (ZeRO-3), a slice of every tensor "
                "(FSDP).",
    "scaling": "The step-time model's tokens/s as N grows (the lines) against what was measured (the dots); the "
               "Speed table gives each measurement beside its prediction.",
    "zeropp": "What each rank sends to other machines in one step, as the planner runs each strategy's own code "
              "(docs/zeropp.md).",
    "units": "Grouping more blocks into a unit (--unit-blocks J): collectives per step (dashed, right axis) "
             "against the peak per rank (solid, left axis).",
    "units_time": "The link's busy time per step and what of it compute waits for, as the blocks per unit grow.",
}


def zeropp_claims(tsv):
    """What data/zeropp.tsv shows: the plain rung that sends most at each N, and FSDP's bytes with and without
    all of ZeRO++'s changes at the larger N."""
    rows = [line.rstrip("\n").split("\t") for line in open(tsv) if not line.startswith("#")]
    plain = [r for r in rows if not r[0].startswith("+")]
    most = {col: max(plain, key=lambda r: float(r[col]))[0] for col in (1, 2)}
    fsdp = next(r for r in rows if r[0] == "FSDP")
    return most, float(fsdp[2]), float(rows[-1][2])


def read_columns(path):
    """A TSV of report.py's: its header's names (the first column's too) and its rows of numbers."""
    lines = [line.rstrip("\n").split("\t") for line in open(path)]
    return lines[0][0].lstrip("# ").split("\t") + lines[0][1:], [[float(x) for x in f] for f in lines[1:] if f[0]]


def listed(words):
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def memory_claims(path):
    """memory_by_category's comparison, from data/memory.tsv (each strategy's rank 0 against DDP's): which of
    optim, grads and params each keeps less of, and its temporaries (gathered copies and collective buffers)."""
    rows = [line.rstrip("\n").split("\t") for line in open(path)]
    names = rows[0][0].lstrip("# ").split("\t") + rows[0][1:]
    rank0 = {f[0][:-3]: dict(zip(names[1:], map(float, f[1:]))) for f in rows[1:] if f[0].endswith("-r0")}
    if "ddp" not in rank0:
        return ""
    temporary = [c for c in ("params_gathered", "grads_gathered", "comm_buffers") if c in names]
    parts = []
    for s, held in rank0.items():
        if s in ("single", "ddp"):
            continue
        less = [c for c in ("optim", "grads", "params") if held.get(c, 0) < rank0["ddp"].get(c, 0)]
        temp = sum(held[c] for c in temporary)
        parts.append(f"{NAMES.get(s, s)} keeps less {listed(less) if less else 'of nothing'} and holds "
                     f"{temp:.3f} MB of temporaries")
    return ("Against DDP's rank 0, " + "; ".join(parts) + " (gathered copies and collective buffers; rank 0 "
            "each).") if parts else ""


def ranks_claims(path, state=False):
    """memory_vs_ranks' (state: model_state_vs_ranks') comparisons, from data/plan.tsv (plan_model_state.tsv):
    who sits above DDP at N = 1, where ZeRO-3 levels off, where FSDP is lowest and how far it climbs."""
    names, rows = read_columns(path)
    col = {s: k for k, s in enumerate(names)}
    out = []
    if not state and "ddp" in col:
        above = [NAMES.get(s, s) for s in names[1:] if s != "ddp" and rows[0][col[s]] > rows[0][col["ddp"]]]
        if above:
            one = len(above) == 1
            out.append(f"At N = 1, {listed(above)} sit{'s' if one else ''} above DDP: {'its' if one else 'their'} "
                       "machinery (gathered copies, collective buffers) runs with nothing to shard.")
    if "zero3" in col:
        values = [r[col["zero3"]] for r in rows]
        k = len(values) - 1
        while k > 0 and values[k - 1] == values[-1]:
            k -= 1
        if k < len(values) - 1:
            out.append(f"ZeRO-3 levels off from N = {rows[k][0]:.0f} at {values[-1]:.3f} MB: an owner keeps whole "
                       "tensors, and no rank holds less than the largest it owns.")
    if "fsdp" in col:
        values = [r[col["fsdp"]] for r in rows]
        low = min(range(len(values)), key=values.__getitem__)
        if values[-1] > values[low]:
            out.append(f"FSDP is lowest at N = {rows[low][0]:.0f} ({values[low]:.3f} MB) and climbs to "
                       f"{values[-1]:.3f} MB at N = {rows[-1][0]:.0f}: every tensor is padded to a multiple of N "
                       "rows" + ("." if state else ", and its gathered copies and buffers grow with N."))
        else:
            out.append(f"FSDP falls all the way, to {values[-1]:.3f} MB at N = {rows[-1][0]:.0f}.")
    return " ".join(out)


def units_claims(path, time_path):
    """units' and units_time's comparisons, from data/units.tsv and units_time.tsv: each strategy's collectives,
    peak, link time and waits at J = 1 and at the most blocks per unit."""
    names, rows = read_columns(path)
    first, last = rows[0], rows[-1]
    J = f"{first[0]:.0f} to {last[0]:.0f} blocks per unit"
    units, times = [], []
    for k, name in enumerate(names):
        if not name.endswith("_calls"):
            continue
        s = name[:-6]
        peak = names.index(f"{s}_peak_mb")
        units.append(f"{NAMES.get(s, s)}'s collectives per step go {first[k]:.0f} → {last[k]:.0f} and its peak "
                     f"{first[peak]:.3f} → {last[peak]:.3f} MB")
    tnames, trows = read_columns(time_path)
    for k, name in enumerate(tnames):
        if name.endswith("_link_ms_n1024"):
            s = name[:-len("_link_ms_n1024")]
            wait = tnames.index(f"{s}_waited_ms_n1024")
            times.append(f"{NAMES.get(s, s)}'s link time {trows[0][k]:.1f} → {trows[-1][k]:.1f} ms and compute's "
                         f"wait {trows[0][wait]:.1f} → {trows[-1][wait]:.1f} ms")
    return (f"From {J}, " + "; ".join(units) + ".",
            f"At N = 1024, from {J}, " + "; ".join(times) + ".")


def caption(name, run=None):
    """The sentence under a picture (a timeline's for every strategy); a comparison in it is computed from the
    data the picture draws."""
    if name.startswith("timeline_"):
        return ("One step of every rank on a shared clock: compute bars on each rank's line, the collectives it had "
                "in flight in a thin row above them, and its waits for them in a row below: a collective in flight "
                "above a compute bar was hidden behind that compute.")
    if name == "zeropp" and run and os.path.exists(os.path.join(run, "data", "zeropp.tsv")):
        most, fsdp, zeropp = zeropp_claims(os.path.join(run, "data", "zeropp.tsv"))
        at = (f"{most[1]} sends most at N = 64 and at N = 384" if most[1] == most[2] else
              f"{most[1]} sends most at N = 64, {most[2]} at N = 384")
        return (f"{CAPTIONS[name]} Up the ladder, {at}; ZeRO++'s changes take FSDP's {fsdp:.1f} MB at N = 384 to "
                f"{zeropp:.1f} MB (int8 gathers, the backward's gathers kept inside the machine, int4 gradient "
                "pieces in two hops).")
    data = os.path.join(run, "data") if run else None
    computed = ""
    if data and name == "memory_by_category" and os.path.exists(f"{data}/memory.tsv"):
        computed = memory_claims(f"{data}/memory.tsv")
    elif data and name == "memory_vs_ranks" and os.path.exists(f"{data}/plan.tsv"):
        computed = ranks_claims(f"{data}/plan.tsv")
    elif data and name == "model_state_vs_ranks" and os.path.exists(f"{data}/plan_model_state.tsv"):
        computed = ranks_claims(f"{data}/plan_model_state.tsv", state=True)
    elif data and name in ("units", "units_time") and os.path.exists(f"{data}/units.tsv"):
        computed = units_claims(f"{data}/units.tsv", f"{data}/units_time.tsv")[name == "units_time"]
    return f"{CAPTIONS[name]} {computed}".strip()


ZEROPP_RUNS = ["qwz", "hpz", "qgz", "all"]  # compare.sh ZEROPP=1: FSDP with ZeRO++'s changes (docs/zeropp.md)
ZEROPP_FLAGS = [("quantize_weights", "--quantize-weights"), ("secondary_shard_group", "--secondary-shard-group"),
                ("quantize_grads", "--quantize-grads"), ("quantize_grads_node", "--quantize-grads-node")]


def zeropp_table(run, logs):
    """compare.sh ZEROPP=1's runs beside FSDP's: (note, header, rows), or None without them. Each row: the flags,
    the last loss and how far it is from train_single's, whether the losses are FSDP's bit for bit, rank 0's bytes
    sent in the last step, the fullest rank's peak of gathered parameters and of everything, and tokens/s."""
    folder = os.path.join(run, "zeropp")
    if not os.path.isdir(folder) or "fsdp" not in logs:
        return None
    single = logs["single"][0][-1]["loss"]
    fsdp_losses = [x["loss"] for x in logs["fsdp"][0]]
    rows = []
    for name in ["fsdp"] + ZEROPP_RUNS:
        steps, summary = logs["fsdp"] if name == "fsdp" else read_log(os.path.join(folder, f"{name}.jsonl"))
        for key in ("num_params", "batch", "seq", "steps", "seed"):
            if summary["config"][key] != logs["fsdp"][1]["config"][key] or summary["strategy"] != "fsdp":
                fail(f"{folder}/{name}.jsonl: not an FSDP run of fsdp.jsonl's model and batch ({key})")
        options = summary["strategy_options"]
        flags = " ".join(f"{flag} {options[key]}" for key, flag in ZEROPP_FLAGS if options.get(key)) or "(FSDP)"
        loss = steps[-1]["loss"]
        sent = sum(c["bytes_sent"] for c in summary["ranks"][0]["comm_last_step"].values())
        rows.append([flags, f"{loss:.6f}", f"{abs(loss - single) / abs(single):.1e}",
                     "yes" if [x["loss"] for x in steps] == fsdp_losses else "no", f"{sent / MB:.3f}",
                     f"{max(r['mem']['params_gathered']['peak'] for r in summary['ranks']) / MB:.3f}",
                     f"{max(r['peak_bytes'] for r in summary['ranks']) / MB:.3f}", f"{summary['tokens_per_s']:.0f}"])
    header = ["FSDP with", "last loss", "from single's (relative)", "losses FSDP's bit for bit", "MB sent by rank 0 "
              "per step", "params_gathered peak MB", "peak MB", "tokens/s"]
    note = ("FSDP beside its runs with ZeRO++'s changes (make compare ZEROPP=1, docs/zeropp.md), each with the "
            "flags shown. qwZ and qgZ send quantized numbers, so their losses leave train_single's by the "
            "quantization's error; hpZ alone is FSDP's run bit for bit, and holds more gathered parameters (its "
            "secondary shards). On one machine every byte stays inside it: build/plan --time and the zeropp "
            "picture say what would cross between machines. Tokens/s are these runs' own, time-sliced where the "
            "ranks outnumber the cores.")
    return note, header, rows


SPREAD_STEPS = 4  # steps after the first that a speed run must time before its middle half says anything


def write_report(run, logs, world, cfg, worst, tput, strategies, predicted, speed_source, placements, page):
    runs = ["single"] + strategies
    table = []
    for s in runs:
        summ = logs[s][1]
        ranks = summ["ranks"]
        table.append({
            "run": s, "ranks": summ["world_size"], "tokens_per_s": tput[s],
            "final_loss": logs[s][0][-1]["loss"],
            "resident": max(sum(r["mem"][c]["peak"] for c in MODEL_STATE) for r in ranks) / MB,
            "peak": max(r["peak_bytes"] for r in ranks) / MB,
            "reserved": max(r["reserved_peak_bytes"] for r in ranks) / MB,
            "rss": max(r["rss_peak_bytes"] for r in ranks) / MB,
            "sent": max(sum(c["bytes_sent"] for c in r["comm_last_step"].values()) for r in ranks) / MB,
            "exposed": exposed_share(slowest_time(summ)),
        })
    row = {t["run"]: t for t in table}
    base = "ddp" if "ddp" in row else "single"  # what the others are measured against
    precision = logs["single"][1]["config"].get("precision", "fp32")
    least = min(strategies, key=lambda s: row[s]["peak"])
    least_resident = min(strategies, key=lambda s: row[s]["resident"])
    sentences = [
        f"All {len(runs)} runs train the same model: their losses agree to within {worst:.1e} (relative) at every step.",
        f"{NAMES[least]} holds the least per rank at the peak moment of its step (the peak MB column): "
        f"{row[least]['peak']:.1f} MB against {NAMES[base]}'s {row[base]['peak']:.1f} MB "
        f"({row[base]['peak'] / row[least]['peak']:.1f}x less).",
        "When each one peaks (the fullest rank's kept step; the 'Memory over one step' plot): "
        + "; ".join(f"{NAMES[s]}: {peak_in_words(fullest_rank(logs[s][1]), logs[s][1])}" for s in strategies) + ".",
        "Resident params + grads + AdamW state per rank between steps (the resident MB column, the largest rank's): "
        + ", ".join(f"{NAMES[s]} {row[s]['resident']:.1f} MB" for s in runs) + ".",
    ]
    if least_resident != least:  # the two rankings differ: what is alive at the peak explains it
        def temporaries(s):  # at the peak: everything but the resident state and the activations, which stay put
            return max(r["peak_bytes"] - sum(r["mem"][c]["current"] for c in MODEL_STATE + ["activations"])
                       for r in logs[s][1]["ranks"]) / MB
        sentences.append(f"{NAMES[least_resident]} keeps less between steps than {NAMES[least]} "
                         f"({row[least_resident]['resident']:.1f} against {row[least]['resident']:.1f} MB), yet peaks "
                         f"higher: at its peak moment {temporaries(least_resident):.1f} MB of gathered parameters, "
                         f"full gradients and collective buffers are alive at once, against {temporaries(least):.1f} MB "
                         f"for {NAMES[least]} (the memory plots show each category).")
    sliced = time_sliced(logs[strategies[0]][1])
    fp32_path = os.path.join(run, "single_fp32.jsonl")
    if precision == "bf16" and os.path.exists(fp32_path):  # compare.sh's fp32 twin of a bf16 comparison
        fp32 = read_log(fp32_path)[0]
        diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(logs["single"][0], fp32))
        sentences.append(f"In bf16 (gradients reduced in {logs['single'][1]['config']['reduce_dtype']}; "
                         f"docs/precision.md) the single-rank loss stays within {diff:.1e} (relative) of the same "
                         f"run in fp32 at every step: final {logs['single'][0][-1]['loss']:.4f} against "
                         f"{fp32[-1]['loss']:.4f}.")
        rate = {k: statistics.median([x["tokens_per_s"] for x in steps[1:] if x.get("tokens_per_s")] or [0])
                for k, steps in (("bf16", logs["single"][0]), ("fp32", fp32))}
        if rate["bf16"] > 0 and rate["fp32"] > 0:  # the same run in both precisions, their median steps
            products = logs["single"][1].get("products", {}).get("bf16_kernels", "?")
            ratio = rate["bf16"] / rate["fp32"]
            sentences.append(f"On this CPU bf16 was {'faster' if ratio > 1 else 'slower'} than fp32: the single-rank "
                             f"run's median step {rate['bf16']:.0f} tokens/s in bf16 against {rate['fp32']:.0f} in "
                             f"fp32 ({ratio:.2f}x; bf16 products: {products}).")
    if row[base]["sent"] > 0:
        sentences.append(f"The price is traffic: per step each rank sends "
                         + ", ".join(f"{row[s]['sent']:.1f} MB ({NAMES[s]}, {row[s]['sent'] / row[base]['sent']:.2f}x)"
                                     for s in strategies if s != base)
                         + f" against {row[base]['sent']:.1f} MB for {NAMES[base]}." if len(strategies) > 1 else "")
    elif all(row[s]["sent"] == 0 for s in strategies):
        sentences.append("With one rank nothing moves between ranks.")
    if sliced:
        sentences.append(f"These runs put {sliced}: the ranks take turns on the cores, so their tokens/s and "
                         "communication waits measure that time-slicing as much as the strategies, and rank nothing. "
                         + ("The Speed section measures each strategy again with one rank per core." if speed_source
                            else "Run with no more ranks than cores to measure speed."))
    exposed = {s: exposed_share(slowest_time(speed_source[s][1])) for s in strategies} if speed_source else {}
    if any(x > 0 for x in exposed.values()):
        measured = speed_source[strategies[0]][1]
        sentences.append(f"Communication a rank waited for (not hidden under compute), as a share of its step, "
                         f"with {measured['world_size']} ranks on {measured.get('cores_on_node', '?')} cores: "
                         + ", ".join(f"{NAMES[s]} {100 * exposed[s]:.0f}%" for s in strategies)
                         + " (the slowest rank's: the Speed table's comm waited ms over its step's split; "
                           "ZeRO-3 and FSDP prefetch, docs/fsdp.md).")
    def step_rates(s):  # a run's steps' tokens/s, the first (which warms up) left out, in order of size
        return sorted(x["tokens_per_s"] for x in speed_source[s][0][1:] if x.get("tokens_per_s"))

    def spread(s):  # the middle half of a run's steps' tokens/s: its own noise
        rates = step_rates(s)
        return rates[len(rates) // 4], rates[(3 * len(rates) - 1) // 4]

    def median(s):
        return statistics.median(step_rates(s))
    fewest = min((len(step_rates(s)) for s in strategies), default=0) if speed_source else 0
    if speed_source and len(strategies) > 1 and fewest < SPREAD_STEPS:
        sentences.append(f"The shortest speed run timed {fewest} step(s) after its first: too few to tell the strategies' "
                         f"speeds apart from this machine's noise (a spread needs {SPREAD_STEPS}), so none is "
                         "called the fastest.")
        strategies_speed = []
    elif speed_source and len(strategies) > 1:
        fastest = max(strategies, key=median)
        low = spread(fastest)[0]
        rivals = [s for s in strategies if s != fastest and spread(s)[1] >= low]
        if rivals:  # the steps' rates overlap: no strategy is the fastest beyond this machine's noise
            sentences.append(f"At {speed_source[fastest][1]['world_size']} ranks the strategies' step rates overlap, "
                             "within this machine's noise (the middle half of each run's steps, tokens/s): "
                             + ", ".join(f"{NAMES[s]} {spread(s)[0]:.0f}-{spread(s)[1]:.0f}" for s in strategies)
                             + ": no one of them is the fastest here.")
            strategies_speed = []
        else:
            strategies_speed = strategies
    else:
        strategies_speed = []
    if strategies_speed:
        f_summary = speed_source[fastest][1]
        tokens_per_step = f_summary["config"]["batch"] * f_summary["config"]["seq"]
        sentences.append(f"Fastest at {f_summary['world_size']} ranks on {f_summary.get('cores_on_node', '?')} cores, "
                         f"beyond the noise (its steps' middle half {spread(fastest)[0]:.0f}-{spread(fastest)[1]:.0f} "
                         f"tokens/s, above every other's): {NAMES[fastest]}, its median step "
                         f"{1e3 * tokens_per_step / median(fastest):.1f} ms, {median(fastest):.0f} tokens/s (the Speed "
                         "table's runs, their steps after the first).")
    for s in (s for s in strategies if placements[s] == "whole_tensors"):
        held = [r["mem"]["params"]["peak"] for r in logs[s][1]["ranks"]]
        imbalance = max(held) / (sum(held) / len(held)) if sum(held) else 1.0
        sentences.append(f"{NAMES[s]}'s whole-tensor ownership is uneven: its fullest rank holds "
                         f"{100 * (imbalance - 1):.0f}% more parameters than the average rank.")
    sentences = [x for x in sentences if x]
    machine = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                machine = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    machine += f", {os.cpu_count()} cores, {platform.system()} {platform.release()}"
    engine = logs["single"][1].get("products")  # the products' engine and the threads each run's ranks computed on
    if engine:
        threads = ", ".join(f"{NAMES.get(s, s)} {logs[s][1]['products']['threads']}" for s in runs
                            if logs[s][1].get("products"))
        precision = logs["single"][1]["config"].get("precision", "fp32")
        if precision == "bf16":  # what multiplied this run's bf16 operands: oneDNN's bf16 kernel, or widened to fp32
            products = f"bf16 products: {engine['bf16_kernels']} ({engine['kernels']})"
        else:
            products = f"products on {engine['engine']} ({engine['kernels']})"
        chosen = engine.get("chosen_by", "the rule for this instruction set")
        machine += (f"; {products}, chosen by {'SHARDLAB_PRODUCTS' if chosen == 'SHARDLAB_PRODUCTS' else 'the rule for ' + engine.get('isa', '?')}"
                    f" (docs/performance.md); threads a rank: {threads}")
    settings = (f"L={cfg['num_layers']} C={cfg['channels']} NH={cfg['num_heads']} V={cfg['vocab_size']} "
                f"({cfg['num_params']:,} parameters), global batch {cfg['batch']} x {cfg['seq']} tokens, "
                f"{cfg['steps']} AdamW steps at lr {cfg['lr']}, seed {cfg['seed']}, {world} ranks")
    plots = [("loss", "Loss per step"), ("memory_by_category", "Memory per rank by category"),
             ("memory_step", "Memory over one step: when each strategy peaks"),
             ("peak_memory", "Accounted peak vs reserved vs OS peak RSS"), ("throughput", "Throughput"),
             ("comm_per_step", "Communication per step"), ("step_time", "Step time split"),
             ("memory_vs_ranks", "Memory per rank vs ranks (planner)"),
             ("model_state_vs_ranks", "Resident model state per rank vs ranks: the ZeRO ladder (planner)"),
             ("sharding", "Who keeps which parameters"),
             ("scaling", "Tokens/s vs ranks: the step-time model (docs/scale.md), measured points"),
             ("zeropp", "Bytes across machines per step: the ladder and ZeRO++ (planner)")]
    if os.path.exists(os.path.join(run, "plots", "host_memory.png")):
        plots.insert(2, ("host_memory", "Host memory per rank: the optimizer offloaded"))
    if os.path.exists(os.path.join(run, "plots", "units.png")):  # strategies that gather by unit were compared
        plots += [("units", "Blocks per unit: the peak against the collectives (planner)"),
                  ("units_time", "Blocks per unit: the link's time and what compute waits for (planner)")]
    plots += [(f"timeline_{s}", f"Step timeline: {NAMES[s]}") for s in strategies]
    header = ["run", "ranks", "tokens/s (time-sliced)" if sliced else "tokens/s", "final loss", "resident MB", "peak MB", "reserved MB", "RSS MB",
              "sent MB/step", "comm waited"]
    cells = [[t["run"], t["ranks"], f"{t['tokens_per_s']:.0f}", f"{t['final_loss']:.6f}", f"{t['resident']:.2f}",
              f"{t['peak']:.2f}", f"{t['reserved']:.2f}", f"{t['rss']:.1f}", f"{t['sent']:.2f}",
              f"{100 * t['exposed']:.0f}%"] for t in table]
    speed_header = ["run", "ranks", "step ms", "compute ms", "comm waited ms", "optimizer ms", "tokens/s measured",
                    "tokens/s predicted at the same N", "measured / predicted"]
    speed_cells = speed_rows(speed_source, predicted) if speed_source else []
    speed_note = (f"Measured with {speed_cells[0][1]} ranks, no more than the machine's cores"
                  + (f" (the runs above put {sliced})" if sliced else "") + ": the slowest rank's mean step, split so "
                  "that each second counts once (docs/logs.md); tokens/s is the run's own (its summary's: the "
                  "scaling plot's points" + ("; the throughput plot's bars are the time-sliced runs' above" if sliced
                                              else " and the throughput plot's bars") + "). Predicted: build/plan "
                  "--time's model at the "
                  f"same N on machines of {world} ranks (docs/scale.md; the scaling plot), not a measurement: its "
                  "compute runs at train_single's fastest step, one rank on the cores the ranks share, so a "
                  "ratio far from 1 says how far this machine's load or the model's simplifications moved the "
                  "runs." + prediction_words(speed_cells)
                  ) if speed_cells else ""
    # compare.sh samples the reference model's continuation of a prompt (build/sample)
    sample_path, sampled = os.path.join(run, "sample.txt"), None
    final = logs["single"][0][-1]["loss"]
    sample_title = "Text sampled from the trained model (train_single's, build/sample)"
    sample_note = (f"After {cfg['steps']} steps the model's loss is {final:.2f} nats per token, against "
                   f"{math.log(cfg['vocab_size']):.2f} for guessing uniformly among its {cfg['vocab_size']} tokens: "
                   "a model this briefly trained writes mostly noise. The text shows the whole pipeline runs end to "
                   "end, not what the strategies learned (they learned the same).")
    if os.path.exists(sample_path):
        sampled = open(sample_path, encoding="utf-8", errors="replace").read().rstrip("\n")
    zeropp = zeropp_table(run, logs)
    with open(os.path.join(run, "report.md"), "w") as f:
        f.write(f"# shardlab comparison: {os.path.basename(os.path.normpath(run))}\n\n")
        f.write(f"Settings: {settings}.  \nMachine: {machine}.\n\n")
        f.write("\n".join(f"- {s}" for s in sentences) + "\n\n")
        f.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
        for c in cells:
            f.write("| " + " | ".join(str(x) for x in c) + " |\n")
        f.write("\nMemory columns are the largest rank's; MB = 10^6 bytes. Peak: training buffers in use; "
                "reserved: what the allocator held, in use + freed blocks cached for reuse (docs/memory.md). "
                "Sent bytes follow the ring model (docs/communication.md). Comm waited: the time the rank was "
                "blocked on a collective, as a share of its step (the largest rank's).\n\n")
        f.write(f"To plan this run at other sizes, ranks or options, open [the planner's page]({page}) "
                "(make web; docs/web.md): build/plan's own code in the browser, with this run's settings.\n\n")
        if speed_cells:
            f.write("## Speed\n\n" + speed_note + "\n\n| " + " | ".join(speed_header) + " |\n|"
                    + "---|" * len(speed_header) + "\n")
            for c in speed_cells:
                f.write("| " + " | ".join(str(x) for x in c) + " |\n")
            f.write("\n")
        if zeropp:
            f.write("## ZeRO++, measured\n\n" + zeropp[0] + "\n\n| " + " | ".join(zeropp[1]) + " |\n|"
                    + "---|" * len(zeropp[1]) + "\n")
            for c in zeropp[2]:
                f.write("| " + " | ".join(str(x) for x in c) + " |\n")
            f.write("\n")
        for name, title in plots:
            f.write(f"## {title}\n\n{caption(name, run)}\n\n![{title}](plots/{name}.png)\n\n")
        if sampled is not None:  # indented: a code block, whatever the text holds
            f.write(f"## {sample_title}\n\n{sample_note}\n\n" + "".join(f"    {line}\n" for line in sampled.split("\n")))
    with open(os.path.join(run, "report.html"), "w") as f:
        f.write("<!doctype html><html><head><meta charset='utf-8'><title>shardlab comparison</title>"
                "<style>body{font-family:sans-serif;max-width:1050px;margin:auto}table{border-collapse:collapse}"
                "td,th{border:1px solid #999;padding:3px 8px;text-align:right}img{max-width:100%}</style></head><body>\n")
        f.write(f"<h1>shardlab comparison: {html.escape(os.path.basename(os.path.normpath(run)))}</h1>\n")
        f.write(f"<p>Settings: {html.escape(settings)}.<br>Machine: {html.escape(machine)}.</p>\n<ul>\n")
        f.write("".join(f"<li>{html.escape(s)}</li>\n" for s in sentences) + "</ul>\n<table><tr>")
        f.write("".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>\n")
        for c in cells:
            f.write("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in c) + "</tr>\n")
        f.write("</table>\n")
        f.write(f"<p>To plan this run at other sizes, ranks or options, open <a href='{html.escape(page)}'>the "
                "planner's page</a> (make web; docs/web.md): build/plan's own code in the browser, with this run's "
                "settings.</p>\n")
        if speed_cells:
            f.write(f"<h2>Speed</h2><p>{html.escape(speed_note)}</p><table><tr>"
                    + "".join(f"<th>{html.escape(h)}</th>" for h in speed_header) + "</tr>\n")
            for c in speed_cells:
                f.write("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in c) + "</tr>\n")
            f.write("</table>\n")
        if zeropp:
            f.write(f"<h2>ZeRO++, measured</h2><p>{html.escape(zeropp[0])}</p><table><tr>"
                    + "".join(f"<th>{html.escape(h)}</th>" for h in zeropp[1]) + "</tr>\n")
            for c in zeropp[2]:
                f.write("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in c) + "</tr>\n")
            f.write("</table>\n")
        for name, title in plots:
            f.write(f"<h2>{html.escape(title)}</h2><p>{html.escape(caption(name, run))}</p>"
                    f"<img src='plots/{name}.svg' alt='{html.escape(title)}'>\n")
        if sampled is not None:
            f.write(f"<h2>{html.escape(sample_title)}</h2><p>{html.escape(sample_note)}</p>"
                    f"<pre>{html.escape(sampled)}</pre>\n")
        f.write("</body></html>\n")


if __name__ == "__main__":
    main()
