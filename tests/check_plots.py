#!/usr/bin/env python3
"""The report's pictures, read as a person reads them: RUN_DIR/plots/*.svg (gnuplot's SVG) and the data under
them. For every plot and every panel of it:

- both axes are labelled: a y label (rotated text left of the panel's frame) and an x label (text under the
  frame, below its tick labels);
- every legend entry has data: its series draws something inside the frame, not only its key sample (a
  series all zero, or drawn along the frame, is a legend entry about nothing);
- no two tick labels overlap (their boxes estimated from the font size and the text's length), and no text
  runs past the picture's edges (a title cut off);

and for the stacked memory plots, from their data: memory_by_category's stack of each rank is the summary's
peak_moment held bytes, category by category, adding up to its peak_bytes; no category in their legends
holds nothing (a series hidden under the stack draws, but shows nothing); every picture and link of
report.html and report.md that points into the run is there; the captions' comparisons hold against the
data their pictures draw (each recomputed here: the ZeRO++ rungs, who sits above DDP at N = 1, where ZeRO-3
levels off and FSDP climbs, what each rung keeps less of, the units' collectives, peaks, link times and waits);
the report's one sentence on the fastest strategy holds against the steps it timed ("fastest" only where its
steps' middle half lies above every other's, "too few" below four timed steps); and no legend of
examples/report.py is placed over the data; the Speed section names every measured / predicted ratio beyond 2x.

Usage: check_plots.py RUN_DIR [PLOT ...]   (exit status 1 on a failure, naming the plot, panel and check)"""
import json
import math
import os
import re
import statistics
import sys

TEXT = re.compile(r'<g transform="translate\(([-\d.]+),([-\d.]+)\)(?: rotate\(([-\d.]+)\))?"[^>]*?'
                  r'font-size="([\d.]+)"[^>]*>\s*<text>(.*?)</text>', re.S)
FRAME = re.compile(r"d='M([\d.]+),([\d.]+) L\1,([\d.]+) L([\d.]+),\3 L\4,\2 L\1,\2 Z")
NUMBER_PAIR = re.compile(r"([-\d.]+),([-\d.]+)")
# what each label holds at most per character, as a share of the font size
CHAR_WIDTH = 0.5


def texts(svg):
    """Every text: (x, y, rotation in degrees, font size, string)."""
    return [(float(x), float(y), float(r or 0), float(size), s) for x, y, r, size, s in TEXT.findall(svg)]


def frames(svg):
    """The panels' frames, (x0, y0, x1, y1), top to bottom: gnuplot's border, a closed rectangle drawn as one path
    (the largest ones: a key's sample boxes are small)."""
    found = {(float(x0), float(y0), float(x1), float(y1)) for x0, y0, y1, x1 in FRAME.findall(svg)}
    big = [f for f in found if (f[2] - f[0]) > 150 and (f[3] - f[1]) > 60]
    return sorted(big, key=lambda f: f[1])


def box(t):
    """The corners of a text's box, estimated, in the page's coordinates (anchor at the text's start)."""
    x, y, rotation, size, s = t
    w, h = CHAR_WIDTH * size * len(s), 0.8 * size
    a = math.radians(rotation)
    corners = [(0, 0), (w, 0), (w, -h), (0, -h)]
    return [(x + cx * math.cos(a) - cy * math.sin(a), y + cx * math.sin(a) + cy * math.cos(a)) for cx, cy in corners]


def overlap(p, q):
    """Whether two convex boxes overlap (separating axes), a pixel of slack."""
    for poly in (p, q):
        for i in range(4):
            (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % 4]
            nx, ny = y2 - y1, x1 - x2
            norm = math.hypot(nx, ny) or 1
            a = [(px * nx + py * ny) / norm for px, py in p]
            b = [(qx * nx + qy * ny) / norm for qx, qy in q]
            if max(a) <= min(b) + 1 or max(b) <= min(a) + 1:
                return False
    return True


def series(svg):
    """Each plotted series: (its legend text, the points it draws)."""
    out = []
    parts = re.split(r'<g id="gnuplot_plot_\d+" ><title>[^<]*</title>', svg)[1:]
    for part in parts:
        part = part.split('<g id="gnuplot_plot_')[0]
        title = TEXT.search(part)
        drawing = re.search(r"(?:\bd|points) ?= ?'|<use ", part)
        if not title or not drawing or title.start() > drawing.start():
            continue  # no key entry (notitle; a text after the drawing is the plot's own, or a label series')
        points = []
        for d in re.findall(r"(?:d|points) ?= ?'([^']*)'", part):  # a path's vertices and its segments' middles
            for stroke in re.split(r"M", d):
                xy = [(float(x), float(y)) for x, y in NUMBER_PAIR.findall(stroke)]
                points += xy + [((a[0] + b[0]) / 2, (a[1] + b[1]) / 2) for a, b in zip(xy, xy[1:])]
        points += [(float(x), float(y)) for x, y in re.findall(r"<use [^>]*translate\(([-\d.]+),([-\d.]+)\)", part)]
        out.append((title.group(5), points))
    return out


ANCHORED = re.compile(r'<g transform="translate\(([-\d.]+),([-\d.]+)\)(?: rotate\(([-\d.]+)\))?"[^>]*?'
                      r'font-size="([\d.]+)"([^>]*)>\s*<text>(.*?)</text>', re.S)


def check_fits(name, svg, failures):
    """Every text inside the picture: its box (estimated, as the tick labels', from where its anchor puts it)
    within the picture's width and height: no title or label cut at an edge."""
    width = float(re.search(r'width="([\d.]+)"', svg).group(1))
    height = float(re.search(r'height="([\d.]+)"', svg).group(1))
    for x, y, rotation, size, rest, text in ANCHORED.findall(svg):
        x, y, size, text = float(x), float(y), float(size), re.sub(r"<[^>]+>", "", text).strip()
        if not text:
            continue
        anchor = re.search(r'text-anchor="(\w+)"', rest)
        w = CHAR_WIDTH * size * len(text)
        shift = {"middle": w / 2, "end": w}.get(anchor.group(1) if anchor else "start", 0)
        if float(rotation or 0) == 0:
            left, right, top, bottom = x - shift, x - shift + w, y - 0.8 * size, y
        else:  # a y label, turned a quarter: its length runs up the page
            left, right, top, bottom = x - 0.8 * size, x, y - w + shift, y + shift
        if left < -1 or right > width + 1 or top < -1 or bottom > height + 1:
            failures.append(f"{name}: the text '{text[:60]}' runs past the picture's edge ({left:.0f}..{right:.0f} "
                            f"of {width:.0f} wide, {top:.0f}..{bottom:.0f} of {height:.0f} high)")


def check_svg(path, failures):
    name = os.path.basename(path)
    svg = open(path).read()
    panels = frames(svg)
    if not panels:
        failures.append(f"{name}: no frame found")
        return
    check_fits(name, svg, failures)
    all_texts = [t for t in texts(svg) if t[4].strip()]
    height = float(re.search(r'height="([\d.]+)"', svg).group(1))
    for k, (x0, y0, x1, y1) in enumerate(panels):
        below = min([p[1] for p in panels if p[1] > y1 and p[0] < x1 and p[2] > x0], default=height)
        where = f"{name} panel {k + 1}"
        ylabel = [t for t in all_texts if abs(t[2]) in (90, 270) and t[0] < x0 and y0 <= t[1] <= y1]
        if not ylabel:
            failures.append(f"{where}: the y axis has no label")
        xlabel = [t for t in all_texts if t[2] == 0 and x0 <= t[0] <= x1 and y1 + 0.9 * t[3] + 12 < t[1] < below]
        if not xlabel:
            failures.append(f"{where}: the x axis has no label")
        ticks = [t for t in all_texts if (x0 - 60 <= t[0] <= x1 + 5 and y1 - 2 <= t[1] <= y1 + 40) or
                 (x0 - 80 <= t[0] <= x0 and y0 - 5 <= t[1] <= y1 + 5 and t[2] == 0)]
        boxes = [box(t) for t in ticks]
        for i in range(len(ticks)):
            for j in range(i + 1, len(ticks)):
                if overlap(boxes[i], boxes[j]):
                    failures.append(f"{where}: tick labels '{ticks[i][4]}' and '{ticks[j][4]}' overlap")
    for title, points in series(svg):
        if not title:
            continue
        inside = [(x, y) for x, y in points
                  if any(x0 + 0.5 < x < x1 - 0.5 and y0 + 0.5 < y < y1 - 0.5 for x0, y0, x1, y1 in panels)]
        if not inside:
            failures.append(f"{name}: the legend's '{title}' has no data inside the frame")


def check_memory_by_category(run, failures):
    rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(run, "data", "memory.tsv"))]
    header, rows = rows[0], [r for r in rows[1:] if r[0]]
    categories = header[1:]
    for row in rows:
        strategy, rank = row[0].rsplit("-r", 1)
        summary = json.loads(open(os.path.join(run, f"{strategy}.jsonl")).read().splitlines()[-1])
        r = next(x for x in summary["ranks"] if x["rank"] == int(rank))
        held = r["peak_moment"]["held"]
        values = [float(v) for v in row[1:]]
        wrong = [c for c, v in zip(categories, values) if abs(v - held[c] / 1e6) > 1e-9]
        if wrong or abs(sum(values) - r["peak_bytes"] / 1e6) > 1e-6:
            failures.append(f"memory_by_category: {row[0]}'s stack {sum(values):.6f} MB is not its peak moment's "
                            f"({r['peak_bytes'] / 1e6:.6f} MB; categories off: {wrong})")


def check_stacked_legends(run, failures):
    """The stacked memory plots list only categories that hold bytes somewhere: memory_by_category's columns,
    and memory_step's (each panel's column up_to_c less the one before it)."""
    data = os.path.join(run, "data")
    rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(data, "memory.tsv"))]
    for k, c in enumerate(rows[0][1:]):
        if not any(r[0] and float(r[k + 1]) > 0 for r in rows[1:]):
            failures.append(f"memory_by_category: the legend's '{c}' holds nothing in any bar")
    steps = [f for f in os.listdir(data) if f.startswith("memory_step_") and f.endswith(".tsv")]
    held = {}
    for f in steps:
        rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(data, f))]
        for k, c in enumerate(rows[0][1:]):
            below = [0.0] * (len(rows) - 1) if k == 0 else [float(r[k]) for r in rows[1:]]
            held[c] = held.get(c, False) or any(float(r[k + 1]) - b > 0 for r, b in zip(rows[1:], below))
    for c, some in held.items():
        if not some:
            failures.append(f"memory_step: the legend's '{c[len('up_to_'):]}' holds nothing in any panel")


def check_report_links(run, failures):
    """Every picture and link of report.html and report.md that points into the run or the build is there."""
    for page, pattern in (("report.html", r"(?:src|href)='([^']+)'"), ("report.md", r"\]\(([^)]+)\)")):
        text = open(os.path.join(run, page)).read()
        for target in re.findall(pattern, text):
            if "://" in target or target.startswith("#"):
                continue
            target = target.split("#")[0]  # a page's state after '#' (the planner's page): the file must be there
            if not os.path.isfile(os.path.join(run, target)):
                failures.append(f"{page}: '{target}' is not there")


def check_planner_link(run, failures):
    """The report's link to the planner's page carries the single-rank run's measured tokens/s (its summary's),
    so that the page's time panel starts from this machine's rate, not its placeholder."""
    links = re.findall(r"\]\(([^)]*index\.html#[^)]*)\)", open(os.path.join(run, "report.md")).read())
    summary = [json.loads(x) for x in open(os.path.join(run, "single.jsonl"))][-1]
    rates = [re.search(r"(?:#|&)tokens-per-s=(\d+)(?:&|$)", link) for link in links]
    if not links or not all(rates) or any(int(r[1]) != round(summary["tokens_per_s"]) for r in rates):
        failures.append(f"report: the planner's link carries tokens-per-s={round(summary['tokens_per_s'])} "
                        f"(single.jsonl's), not {[r[1] if r else None for r in rates]}")


def check_captions(run, failures):
    """A caption's comparisons hold against the data its picture draws: the zeropp caption's rung that sends most
    at each N is data/zeropp.tsv's largest plain rung there, and its FSDP bytes with and without ZeRO++ are the
    table's; the scaling caption claims no bend."""
    report = open(os.path.join(run, "report.md")).read()
    sections = dict(re.findall(r"^## (.+?)\n\n(.+?)\n\n", report, re.M | re.S))
    tsv = os.path.join(run, "data", "zeropp.tsv")
    said = next((text for title, text in sections.items() if "ZeRO++" in title or "zeropp" in text), None)
    if os.path.exists(tsv):
        rows = [line.rstrip("\n").split("\t") for line in open(tsv) if not line.startswith("#")]
        plain = [r for r in rows if not r[0].startswith("+")]
        most = [max(plain, key=lambda r: float(r[col]))[0] for col in (1, 2)]
        fsdp, last = next(float(r[2]) for r in rows if r[0] == "FSDP"), float(rows[-1][2])
        claims = re.search(r"Up the ladder, (.+?) sends most at N = 64(?:, (.+?) at N = 384| and at N = 384); "
                           r"ZeRO\+\+'s changes take FSDP's ([\d.]+) MB at N = 384 to ([\d.]+) MB", said or "")
        if not claims:
            failures.append(f"zeropp caption: no comparison computed from {tsv}: {(said or '')[:200]!r}")
        else:
            at64, at384 = claims.group(1), claims.group(2) or claims.group(1)
            if [at64, at384] != most:
                failures.append(f"zeropp caption says {at64} (N = 64) and {at384} (N = 384) send most; the data's "
                                f"largest are {most[0]} and {most[1]}")
            if abs(float(claims.group(3)) - fsdp) > 0.051 or abs(float(claims.group(4)) - last) > 0.051:
                failures.append(f"zeropp caption: FSDP {claims.group(3)} -> {claims.group(4)} MB; the data "
                                f"{fsdp:.2f} -> {last:.2f}")
    for title, text in sections.items():
        if re.search(r"\bbend", text):
            failures.append(f"'{title}': a caption tells of lines that bend, which no data of it computes")


def table(path):
    """A report TSV's column names and its rows (the first column as text)."""
    lines = [line.rstrip("\n").split("\t") for line in open(path)]
    return lines[0][0].lstrip("# ").split("\t") + lines[0][1:], [f for f in lines[1:] if f[0]]


def claim(failures, name, said, pattern, expected):
    """The numbers `pattern`'s groups catch in `said`, in order, must be `expected`, to the decimals printed; a
    sentence the data calls for must be there, and none it does not."""
    found = [x for m in re.finditer(pattern, said) for x in m.groups()]
    if len(found) != len(expected) or any(abs(float(a) - b) > 0.5 * 10 ** -len((a + ".").split(".")[1]) + 1e-9
                                          for a, b in zip(found, expected)):
        failures.append(f"{name} caption: {pattern!r} says {found}, the data {expected}")


def check_computed_captions(run, failures):
    """The comparisons computed into the captions of memory_by_category, memory_vs_ranks, model_state_vs_ranks,
    units and units_time, each recomputed here from the data its picture draws."""
    report = open(os.path.join(run, "report.md")).read()
    said = {name: text for text, name in re.findall(r"^## .+?\n\n(.+?)\n\n!\[.*?\]\(plots/(\w+)\.png\)", report,
                                                    re.M | re.S)}
    data = os.path.join(run, "data")
    if "memory_by_category" in said:
        names, rows = table(os.path.join(data, "memory.tsv"))
        rank0 = {f[0][:-3]: dict(zip(names[1:], map(float, f[1:]))) for f in rows if f[0].endswith("-r0")}
        expected, kinds = [], []
        for s, held in rank0.items():
            if s not in ("single", "ddp") and "ddp" in rank0:
                kinds.append([c for c in ("optim", "grads", "params") if held.get(c, 0) < rank0["ddp"].get(c, 0)])
                expected.append(sum(held.get(c, 0) for c in ("params_gathered", "grads_gathered", "comm_buffers")))
        claim(failures, "memory_by_category", said["memory_by_category"], r"and holds ([\d.]+) MB", expected)
        less = re.findall(r"keeps less (.+?) and holds", said["memory_by_category"])
        if [re.findall(r"optim|grads|params", x) for x in less] != kinds:
            failures.append(f"memory_by_category caption: keeps less {less}, the data {kinds}")
    for name, tsv in (("memory_vs_ranks", "plan.tsv"), ("model_state_vs_ranks", "plan_model_state.tsv")):
        if name not in said:
            continue
        names, rows = table(os.path.join(data, tsv))
        col = {s: k for k, s in enumerate(names)}
        values = {s: [float(r[k]) for r in rows] for s, k in col.items()}
        if name == "memory_vs_ranks" and "ddp" in col:
            above = [s for s in names[1:] if s != "ddp" and values[s][0] > values["ddp"][0]]
            m = re.search(r"At N = 1, (.+?) sits? above DDP", said[name])
            listed = [w.lower().replace("-", "") for w in re.split(r", | and ", m.group(1))] if m else []
            if listed != above:  # the registry's titles (ZeRO-2, FSDP) are the names, less case and hyphen
                failures.append(f"{name} caption: {listed or 'no strategy'} above DDP at N = 1; the data {above}")
        if "zero3" in col:
            v = values["zero3"]
            k = len(v) - 1
            while k > 0 and v[k - 1] == v[-1]:
                k -= 1
            claim(failures, name, said[name], r"ZeRO-3 levels off from N = (\d+) at ([\d.]+) MB",
                  [values["ranks"][k], v[-1]] if k < len(v) - 1 else [])
        if "fsdp" in col:
            v = values["fsdp"]
            low = min(range(len(v)), key=v.__getitem__)
            claim(failures, name, said[name], r"FSDP is lowest at N = (\d+) \(([\d.]+) MB\) and climbs to ([\d.]+) MB at "
                  r"N = (\d+)", [values["ranks"][low], v[low], v[-1], values["ranks"][-1]] if v[-1] > v[low] else [])
    if "units" in said or "units_time" in said:
        names, rows = table(os.path.join(data, "units.tsv"))
        first, last = [float(x) for x in rows[0]], [float(x) for x in rows[-1]]
        expected = []
        for k, c in enumerate(names):
            if c.endswith("_calls"):
                peak = names.index(c[:-6] + "_peak_mb")
                expected += [first[k], last[k], first[peak], last[peak]]
        claim(failures, "units", said.get("units", ""), r"go (\d+) → (\d+) and its peak ([\d.]+) → ([\d.]+) MB", expected)
        names, rows = table(os.path.join(data, "units_time.tsv"))
        first, last = [float(x) for x in rows[0]], [float(x) for x in rows[-1]]
        expected = []
        for k, c in enumerate(names):
            if c.endswith("_link_ms_n1024"):
                wait = names.index(c.replace("_link_", "_waited_"))
                expected += [first[k], last[k], first[wait], last[wait]]
        claim(failures, "units_time", said.get("units_time", ""),
              r"link time ([\d.]+) → ([\d.]+) ms and compute's wait ([\d.]+) → ([\d.]+) ms", expected)


def check_speed_claim(run, failures):
    """The report's one claim about speed holds against the runs it timed (run/speed/*.jsonl at one rank per core,
    or the runs themselves): 'Fastest ... beyond the noise' only where that strategy's lower quartile of step rates
    (the first step left out) lies above every other's upper quartile, with the quartiles and median it prints;
    'no one of them is the fastest' only where they overlap; 'too few' only below four timed steps."""
    report = open(os.path.join(run, "report.md")).read()
    strategies = table(os.path.join(run, "data", "plan.tsv"))[0][1:]
    sources, tokens_per_step = {}, {}
    for where in (os.path.join(run, "speed"), run):
        if all(os.path.exists(os.path.join(where, f"{s}.jsonl")) for s in strategies):
            logs = {s: [json.loads(x) for x in open(os.path.join(where, f"{s}.jsonl"))] for s in strategies}
            last = logs[strategies[0]][-1]
            if where == run and last.get("ranks_on_node", 0) > last.get("cores_on_node", 1 << 30):
                continue  # time-sliced runs: the report times none of them (its speed runs, or nothing)
            world = last.get("world_size")
            rates = {}
            tokens_per_step.setdefault(world, last["config"]["batch"] * last["config"]["seq"])
            for s in strategies:  # the first step warms up: left out, as the report does
                steps = [x["tokens_per_s"] for x in logs[s] if "step" in x and not x.get("summary")
                         and x.get("tokens_per_s")]
                rates[s] = sorted(steps[1:])
            sources.setdefault(world, rates)
    fastest = re.search(r"Fastest at (\d+) ranks.*?middle half (\d+)-(\d+) tokens/s.*?\): (.+?), its median step "
                        r"([\d.]+) ms, (\d+) tokens/s", report)
    overlap = re.search(r"At (\d+) ranks the strategies' step rates overlap", report)
    few = re.search(r"The shortest speed run timed (\d+) step\(s\) after its first: too few", report)
    if len(strategies) < 2 or not sources:
        if fastest or overlap or few:
            failures.append("report: a sentence on the fastest strategy, with no runs timed at one rank per core")
        return
    if sum(bool(x) for x in (fastest, overlap, few)) != 1:
        failures.append("report: not exactly one sentence on which strategy is the fastest")
        return
    if few:
        if not any(min(len(r) for r in rates.values()) == int(few.group(1)) < 4 for rates in sources.values()):
            failures.append(f"report: says {few.group(1)} timed steps are too few; the runs timed "
                            f"{[min(len(r) for r in rates.values()) for rates in sources.values()]}")
        return
    world = int((fastest or overlap).group(1))
    rates = sources.get(world)
    if rates is None or min(len(r) for r in rates.values()) < 4:
        failures.append(f"report: a speed claim at {world} ranks without four timed steps a run behind it")
        return
    quart = {s: (r[len(r) // 4], r[(3 * len(r) - 1) // 4]) for s, r in rates.items()}
    best = max(strategies, key=lambda s: statistics.median(rates[s]))
    apart = all(quart[s][1] < quart[best][0] for s in strategies if s != best)
    if fastest:
        low, high, median = int(fastest.group(2)), int(fastest.group(3)), int(fastest.group(6))
        step_ms = float(fastest.group(5))  # the median step's time: the same steps' measure as its tokens/s
        named = fastest.group(4).lower().replace("-", "")  # the registry's title (ZeRO-3): the name, less case and hyphen
        if not apart or named != best or (low, high) != tuple(round(x) for x in quart[best]) or \
                abs(median - statistics.median(rates[best])) > 0.5 or \
                abs(step_ms - 1e3 * tokens_per_step[world] / statistics.median(rates[best])) > 0.051:
            failures.append(f"report: '{fastest.group(0)[:120]}' against the steps' quartiles {quart}")
    elif apart:
        failures.append(f"report: says the rates overlap; {best}'s steps lie above every other's {quart}")


def check_bf16_against_fp32(run, failures):
    """A bf16 comparison with its fp32 twin (single_fp32.jsonl) says whether bf16 was faster or slower on this
    machine, with both median step rates and what multiplied the bf16 products, as the two runs logged them; the
    machine line names the bf16 products' engine as it ran."""
    twin = os.path.join(run, "single_fp32.jsonl")
    report = open(os.path.join(run, "report.md")).read()
    said = re.search(r"On this CPU bf16 was (faster|slower) than fp32: the single-rank run's median step (\d+) "
                     r"tokens/s in bf16 against (\d+) in fp32 \(([\d.]+)x; bf16 products: (.+?)\)\.", report)
    if not os.path.exists(twin):
        if said:
            failures.append("report: a bf16 against fp32 sentence without an fp32 twin")
        return
    if not said:
        failures.append("report: a bf16 comparison that does not say whether bf16 was faster than fp32 here")
        return
    logs = {}
    for name, path in (("bf16", os.path.join(run, "single.jsonl")), ("fp32", twin)):
        lines = [json.loads(x) for x in open(path)]
        logs[name] = (statistics.median([x["tokens_per_s"] for x in lines if "step" in x and not x.get("summary")
                                         and x.get("tokens_per_s")][1:]), lines[-1])
    bf16, fp32 = logs["bf16"][0], logs["fp32"][0]
    kernels = logs["bf16"][1]["products"]["bf16_kernels"]
    if (said.group(1) == "faster") != (bf16 > fp32) or abs(int(said.group(2)) - bf16) > 0.5 or \
            abs(int(said.group(3)) - fp32) > 0.5 or said.group(5) != kernels:
        failures.append(f"report: '{said.group(0)}' against the runs' medians {bf16:.1f} and {fp32:.1f}, {kernels}")
    if f"bf16 products: {kernels} (" not in report:
        failures.append(f"report: the machine line does not name the bf16 products' engine as it ran ({kernels})")


def check_prediction_words(run, failures):
    """The Speed section says which measured / predicted ratios of its table lie beyond 2x either way (or that
    none does), and names exactly those."""
    report = open(os.path.join(run, "report.md")).read()
    if "## Speed" not in report:
        return
    section = report.split("## Speed", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("|") and "---" not in line]
    ratios = [float(r[-1]) for r in rows[1:] if r[-1].strip() not in ("-", "")]
    off = [r for r in ratios if not 0.5 <= r <= 2]
    said = re.search(r"Not within 2x of its prediction: (.+?)\. ", section)
    named = [float(x) for x in re.findall(r"\((\d+\.\d+)\)", said.group(1))] if said else []
    if off and sorted(named) != sorted(off):
        failures.append(f"Speed: ratios beyond 2x {off}, the text names {named}")
    if not off and ratios and "Every prediction is within 2x" not in section:
        failures.append(f"Speed: every ratio within 2x {ratios}, which the text does not say")


def check_legends_outside(failures):
    """No legend over the data: every gnuplot key of the report is placed outside the plotted area (or below it)."""
    source = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "report.py")).read()
    for line in re.findall(r"^set key .*$", source, re.M):
        if not re.match(r"set key (outside|below)", line):
            failures.append(f"examples/report.py: '{line}' places a legend where it can cover data")


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    run = sys.argv[1]
    names = sys.argv[2:] or sorted(f[:-4] for f in os.listdir(os.path.join(run, "plots")) if f.endswith(".svg"))
    failures = []
    for name in names:
        check_svg(os.path.join(run, "plots", name + ".svg"), failures)
    check_memory_by_category(run, failures)
    check_stacked_legends(run, failures)
    check_report_links(run, failures)
    check_planner_link(run, failures)
    check_captions(run, failures)
    check_computed_captions(run, failures)
    check_speed_claim(run, failures)
    check_bf16_against_fp32(run, failures)
    check_prediction_words(run, failures)
    check_legends_outside(failures)
    for f in failures:
        print("FAIL:", f)
    print(f"check_plots: {len(names)} plots, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
