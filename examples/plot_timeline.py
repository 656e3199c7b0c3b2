#!/usr/bin/env python3
"""Plots steps of memory that build/plan predicts (--timeline), one panel per strategy and rank on one y axis,
as the report's "Memory over one step" does for measured runs: for any model and N, without training.
usage: plot_timeline.py OUT_DIR NAME [--build DIR] --panel STRATEGY:RANK [--panel ...] -- PLAN_FLAGS...
  writes OUT_DIR/NAME.png and .svg; PLAN_FLAGS are build/plan's model and step flags (--config d12 --ranks 64 ...)
  e.g.  python3 examples/plot_timeline.py docs/images memory_step_d12_n64 --panel zero3:0 --panel fsdp:0 -- \\
            --config d12 --ranks 64"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import (CATEGORIES, HOST_CATEGORIES, MB, NAMES, memory_step_panel, memory_step_plot,  # noqa: E402
                    moment_words, registry, shown_categories)


def fail(msg):
    print(f"plot_timeline: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_args(argv):
    """(out_dir, name, build, [(strategy, rank)], plan_flags); --help prints the usage and exits 0."""
    mine = argv[:argv.index("--")] if "--" in argv else argv
    if "--help" in mine or "-h" in mine:
        print(__doc__.split("\n", 2)[2])
        sys.exit(0)
    if "--" not in argv:
        fail("give build/plan's flags after -- (plot_timeline.py --help)")
    plan_flags = argv[argv.index("--") + 1:]
    for flag in ("--timeline", "--rank", "--tsv", "--time", "--layout", "--traffic"):
        if flag in plan_flags:
            fail(f"{flag} after --: the panels say which strategy and rank (--panel); give the model and step "
                 "flags only")
    build, panels, positional, i = "build", [], [], 0
    while i < len(mine):
        if mine[i] in ("--build", "--panel"):
            if i + 1 >= len(mine):
                fail(f"{mine[i]} needs a value")
            if mine[i] == "--build":
                build = mine[i + 1]
            else:
                panels.append(mine[i + 1])
            i += 2
        elif mine[i].startswith("-"):
            fail(f"unknown flag '{mine[i]}' (plot_timeline.py --help)")
        else:
            positional.append(mine[i])
            i += 1
    if len(positional) != 2 or not panels:
        fail("give OUT_DIR, NAME and at least one --panel (plot_timeline.py --help)")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", positional[1]):
        fail(f"NAME {positional[1]!r}: letters, digits, '_', '.' and '-' only (it names the plot's files)")
    if not os.path.isfile(os.path.join(build, "plan")):
        fail(f"--build {build}: no plan there (make builds it)")
    ladder = registry(build)  # the strategies build/plan plans, and their titles
    NAMES.update({name: entry["title"] for name, entry in ladder.items()})
    for i, panel in enumerate(panels):
        strategy, _, rank = panel.partition(":")
        if strategy not in ladder or not rank.isdigit():
            fail(f"--panel {panel}: give STRATEGY:RANK ({', '.join(ladder)})")
        panels[i] = (strategy, int(rank))
    return positional[0], positional[1], build, panels, plan_flags


def planned(build, plan_flags, strategy, rank):
    """build/plan --timeline's step as the summary keeps one, and its peak moment."""
    r = subprocess.run([f"{build}/plan", *plan_flags, "--timeline", strategy, "--rank", str(rank)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"build/plan: {r.stderr.strip()}")
    lines = r.stdout.splitlines()
    start = next((line for line in lines if line.startswith("# start:")), None)
    if start is None:
        fail(f"build/plan {' '.join(plan_flags)} printed no timeline (its flags after --: the model and the step)")
    start = start.split()[2:]
    timeline = {"start": {start[k]: int(start[k + 1]) for k in range(0, len(start), 2)}, "events": []}
    for line in lines:
        if not line.startswith("#"):
            _, phase, unit, category, size, total = line.split("\t")
            timeline["events"].append([phase, int(unit), category, int(size), int(total)])
    totals = [sum(timeline["start"].values())] + [e[4] for e in timeline["events"]]
    at = totals.index(max(totals)) - 1  # -1: held from the step's start
    return timeline, {"event": at, "bytes": max(totals)}, moment_words(timeline, at, None)


def main():
    out_dir, name, build, panels, plan_flags = parse_args(sys.argv[1:])
    steps = [(strategy, rank, *planned(build, plan_flags, strategy, rank)) for strategy, rank in panels]
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="plot_timeline_") as data:
        drawn, top = [], 0
        shown = shown_categories([timeline for _, _, timeline, _, _ in steps])
        for strategy, rank, timeline, peak, where in steps:
            title = (f"{NAMES[strategy]}, rank {rank} (build/plan {' '.join(plan_flags)}): "
                     f"peak {peak['bytes'] / MB:.1f} MB {where}")
            drawn.append(memory_step_panel(f"{data}/{strategy}{rank}.tsv", title, timeline, peak, not drawn,
                                           shown, None))
            top = max(top, peak["bytes"] / MB)
        memory_step_plot(drawn, top, out_dir, name)
    assert set(CATEGORIES + HOST_CATEGORIES) == set(timeline["start"]), "plan's categories are the report's"
    print(f"plot_timeline: {out_dir}/{name}.png and .svg")


if __name__ == "__main__":
    main()
