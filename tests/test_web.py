#!/usr/bin/env python3
"""The planner in a browser (make web, docs/web.md), in headless Chromium.

One headless Chromium, driven over the DevTools protocol (a pipe: no package beyond Chromium), opens
build/web/index.html from file:// once per case, with the case's state in its address, waits for its panels and
reads what each ran and printed, and the memory table's cells:
  - every panel's output (--tsv, --timeline, --traffic, --time, --layout; --params's table) is build/plan's for the
    same flags, byte for byte, over the cases below (presets, --dims, --params 7.5e9 at 64 ranks in bf16, hpZ,
    two-hop qgZ, offload, 2^16 ranks, three refused combinations, ...); a refusal shows build/plan's message;
  - the memory table's cells are the TSV's bytes in MB with three decimals, as build/plan prints them (and its
    MB() on exact ties both ways and on a value just below one);
  - the redraw after a change of --ranks (d12 at 64 ranks, every strategy) and the 2^16-rank page are timed and
    printed (speed is measured, not asserted: docs/web.md);
  - a screenshot of the default page is a picture (many colours, not blank), kept in BUILD/web-test.
Without Chromium the test says so and passes: make deps installs it.
    python3 tests/test_web.py BUILD"""
import base64
import fcntl
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(__file__))
from testlib import Checks  # noqa: E402

BUILD = sys.argv[1]
WEB = os.path.join(BUILD, "web")
CHECKS = Checks("web")
check = CHECKS.check

CASES = [  # (name, the page's state: its address after '#')
    ("default: d12 at 64 ranks", ""),
    ("d2, one rank", "config=d2&ranks=1"),
    ("d4 at 3 ranks, ZeRO-3's timeline of rank 2", "config=d4&ranks=3&timeline=zero3&rank=2"),
    ("d6 in bf16 at 8 ranks", "config=d6&ranks=8&precision=bf16"),
    ("--dims 4,4,256 --vocab 1000", "config=&dims=4,4,256&vocab=1000&ranks=4"),
    ("--params 7.5e9 --ranks 64 --precision bf16 (ZeRO's Figure 1)", "config=&params=7.5e9&precision=bf16"),
    ("hpZ", "ranks=8&secondary-shard-group=4"),
    ("two-hop qgZ", "config=d4&ranks=8&quantize-grads=int4&quantize-grads-node=2"),
    ("qwZ", "config=d4&ranks=4&quantize-weights=int8"),
    ("offload", "config=d4&ranks=4&offload-optimizer"),
    ("offload in bf16", "config=d4&ranks=3&offload-optimizer&precision=bf16"),
    ("2^16 ranks", "ranks=65536"),
    ("2^20 ranks, past the browser's 32 bits", "ranks=1048576"),
    ("hybrid FSDP", "config=d2&ranks=4&shard-group=2"),
    ("whole small tensors", "config=d2&ranks=4&shard-min-numel=1000"),
    ("micro-batches, no-sync", "config=d4&ranks=2&grad-accum=2&accum-mode=no-sync"),
    ("recompute", "config=d4&ranks=4&recompute"),
    ("fused attention and classifier", "config=d4&ranks=4&fused-attention&fused-classifier"),
    ("EMA", "config=d4&ranks=2&ema=0.99"),
    ("units of 2 blocks, prefetch 2", "config=d4&ranks=4&unit-blocks=2&prefetch=2"),
    ("FSDP without resharding", "config=d4&ranks=4&reshard-after-forward=0"),
    ("clip, bf16 gradients", "config=d4&ranks=4&grad-clip=1.0&reduce-dtype=bf16"),
    ("a slow network, a measured rate", "ranks=128&across=1e-5,5&ranks-per-node=4&tokens-per-s=1234"),
    ("the timeline without the flags its strategy does not take", "config=d4&ranks=4&timeline=ddp&prefetch=2&shard-group=2"),
    ("an address with encoded values", "config=&dims=4%2C4%2C128&vocab=300&ranks=2"),
    ("hpZ against none (--vs)", "ranks=64&vs=secondary-shard-group%3D8"),
    ("two-hop qgZ at 128 ranks against plain at 64 (--vs)",
     "config=d4&ranks=64&vs=ranks%3D128%26quantize-grads%3Dint4%26quantize-grads-node%3D8"),
    ("refused in the browser: GPT-2 large's buffers pass 2 GiB", "config=&dims=36,20,1280&ranks=4"),
    ("refused: a batch N does not divide", "config=d2&ranks=3&batch=4"),
    ("refused: offload with EMA", "config=d2&ranks=2&offload-optimizer&ema=0.9"),
    ("refused: heads that do not divide the channels", "config=&dims=4,5,256&ranks=2"),
]

class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: commands on its
    fd 3, answers on its fd 4, each a JSON text ended by a NUL), one page in it."""

    def __init__(self, profile):
        reads, self.commands = os.pipe()
        self.answers, writes = os.pipe()
        # above 4, so that putting them at 3 and 4 in the child cannot overwrite one with the other
        to_browser, from_browser = fcntl.fcntl(reads, fcntl.F_DUPFD, 10), fcntl.fcntl(writes, fcntl.F_DUPFD, 10)
        os.close(reads)
        os.close(writes)

        def plumb():
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)
        os.makedirs(os.path.join(profile, "tmp"), exist_ok=True)  # its own temporary files too: gone with the profile
        self.process = subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                         "--remote-debugging-pipe", "--user-data-dir=" + profile],
                                        preexec_fn=plumb, pass_fds=(3, 4, to_browser, from_browser),
                                        env={**os.environ, "TMPDIR": os.path.join(profile, "tmp")},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.next_id, self.pending, self.session = 0, b"", None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=1280, height=2000, deviceScaleFactor=1, mobile=False)

    def call(self, method, **params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.pending:
                chunk = os.read(self.answers, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed its pipe during {method}")
                self.pending += chunk
            text, self.pending = self.pending.split(b"\0", 1)
            answer = json.loads(text)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page (a promise's, awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self):
        self.process.kill()
        self.process.wait()
        os.close(self.commands)
        os.close(self.answers)


# In the page: resolves when its panels are all drawn (body's data-done).
DRAWN = """new Promise((done) => { const wait = () => document.body && document.body.dataset.done === "1" ?
  done(true) : setTimeout(wait, 10); wait(); })"""
# What each panel ran and printed, the memory table's cells, which panels drew something.
COLLECT = """JSON.stringify({
  panels: [...document.querySelectorAll("pre.raw")].map((p) => ({args: JSON.parse(p.dataset.args), panel: p.parentNode.id,
    code: Number(p.dataset.code), stdout: p.textContent,
    refused: (p.parentNode.querySelector(".refused") || {}).textContent || "",
    drawn: p.parentNode.querySelectorAll("svg, table, pre:not(.raw)").length})),
  table: [...document.querySelectorAll("#memory-table tr")].map((tr) => [...tr.children].map((c) => c.textContent)),
  time: [...document.querySelectorAll("#time-table tr")].map((tr) => [...tr.children].map((c) => c.textContent)),
  network: [...document.querySelectorAll("#network-table tr")].map((tr) => [...tr.children].map((c) => c.textContent)),
  compare: [...document.querySelectorAll("#compare-table tr")].map((tr) => [...tr.children].map((c) => c.textContent)),
  changed: [...document.querySelectorAll("#compare-table td.changed")].map((c) => c.textContent),
  rate: (document.getElementById("time-rate") || {}).className || "",
  peak: (document.getElementById("timeline-peak") || {}).textContent || "",
  scroll: document.documentElement.scrollWidth, width: window.innerWidth,
  ms: Number(document.getElementById("redraw-ms").textContent)})"""
# A change of a control on a drawn page, and the redraw's milliseconds as the page timed them.
CHANGE = """new Promise((done) => { const input = document.getElementById("control%s");
  input.value = "%s"; input.dispatchEvent(new Event("change")); %s.then(() =>
  done(Number(document.getElementById("redraw-ms").textContent))); })"""


def native(args):
    """build/plan with `args`, argv[0] "plan" as the page's."""
    return subprocess.run(["plan", *args], executable=os.path.join(BUILD, "plan"), capture_output=True, text=True)


def png_colours(path):
    """The number of distinct RGB(A) pixels of an 8-bit PNG (no palette), from its IDAT rows."""
    data = open(path, "rb").read()
    at, chunks, width = 8, b"", 0
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, _, depth, colour = struct.unpack(">IIBB", body[:10])
            channels = {2: 3, 6: 4}[colour]
            assert depth == 8
        elif kind == b"IDAT":
            chunks += body
        at += 12 + length
    raw, stride, seen, previous = zlib.decompress(chunks), width * channels, set(), bytearray(width * channels)
    for row in range(len(raw) // (stride + 1)):
        kind, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for i in range(stride):  # undo the row's filter
            a = line[i - channels] if i >= channels else 0
            b, c = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1: line[i] = (line[i] + a) & 255
            elif kind == 2: line[i] = (line[i] + b) & 255
            elif kind == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        seen.update(bytes(line[i:i + channels]) for i in range(0, stride, channels * 7))
        previous = line
    return len(seen)


def main():
    if not shutil.which("chromium"):
        print("web: no chromium here (make deps installs it): the page is not tested")
        CHECKS.finish()
    out = os.path.join(BUILD, "web-test")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    size = os.path.getsize(os.path.join(WEB, "plan.wasm"))
    check(size < 2e6, f"plan.wasm is {size} bytes, under 2 MB")
    page = "file://" + os.path.abspath(os.path.join(WEB, "index.html"))
    browser = Browser(os.path.join(out, "profile"))
    try:
        for i, (name, state) in enumerate(CASES):
            browser.call("Page.navigate", url=f"{page}?case={i}#{state}")  # a new address: a fresh page
            browser.evaluate(DRAWN)
            check_case(name, state, json.loads(browser.evaluate(COLLECT)))
        # a switch in the address: 0/false/off/no turn it off, 1/true/on/yes or no value on; anything else is said
        # on the page and left at its default (off)
        browser.call("Page.navigate", url=f"{page}?switches#config=d2&ranks=2&recompute=0&offload-optimizer=false"
                                          "&fused-attention=maybe&fused-classifier=ON")
        browser.evaluate(DRAWN)
        got = json.loads(browser.evaluate(COLLECT))
        flags = {a for p in got["panels"] for a in p["args"]}
        said = browser.evaluate("(document.getElementById('address-refused') || {}).textContent || ''")
        check("--recompute" not in flags and "--offload-optimizer" not in flags and "--fused-attention" not in flags
              and "--fused-classifier" in flags and "#fused-attention=maybe: a switch is on" in said
              and "recompute" not in said,
              f"address switches: =0 and =false off, =ON on, =maybe refused on the page ({sorted(flags)}; {said!r})")
        # MB's roundings, printf's (as Python's format: the double's exact value, an exact tie to the even digit):
        # exact ties both ways (0.0625, 0.1875, 1.0625 MB), a value just below a tie (240.4775), others
        sizes = [62500, 187500, 1062500, 240477500, 2500, 1500, 999999500, 13312]
        got = json.loads(browser.evaluate(f"JSON.stringify({sizes}.map(MB))"))
        check(got == [f"{b / 1e6:.3f}" for b in sizes], f"the page's MB() rounds as build/plan's printf: {got}")
        browser.call("Page.navigate", url=page + "?changes")
        browser.evaluate(DRAWN)
        redraws = [browser.evaluate(CHANGE % ("--ranks", n, DRAWN)) for n in ("63", "65", "62", "66")]
        print("web: the page's redraw after a change of --ranks, d12 at 62 to 66 ranks, every strategy, every panel "
              "run afresh (ms, as it timed them): " + ", ".join(str(int(t)) for t in redraws))
        browser.evaluate(CHANGE % ("--ranks", "64", DRAWN))
        redraws = [browser.evaluate(CHANGE % ("--prefetch", d, DRAWN)) for d in ("2", "0", "3", "4")]
        print("web: the page's redraw after a change of --prefetch, d12 at 64 ranks, every strategy (ms): "
              + ", ".join(str(int(t)) for t in redraws))
        browser.call("Page.navigate", url=page + "?shot")
        browser.evaluate(DRAWN)
        shot = os.path.join(out, "screenshot.png")
        with open(shot, "wb") as f:
            f.write(base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"]))
        colours = png_colours(shot)
        check(colours >= 12, f"the screenshot ({shot}) is a picture: {colours} colours")
    finally:
        browser.close()
        shutil.rmtree(os.path.join(out, "profile"), ignore_errors=True)
    CHECKS.finish()


def mb(b):
    return f"{b / 1e6:.3f}"


def time_rows(tsv):
    """--time --tsv's rows at the plan's own N: (strategy, step s, bytes sent, of them spanning machines)."""
    rows = [line.split("\t") for line in tsv.strip().split("\n")]
    n = max(int(f[1]) for f in rows)
    return [(f[0], float(f[6]), int(f[9]), int(f[10])) for f in rows if int(f[1]) == n]


def fullest_peaks(tsv):
    """--tsv's largest peak of each strategy, in its order."""
    peaks = {}
    for f in (line.split("\t") for line in tsv.strip().split("\n")):
        peaks[f[0]] = max(peaks.get(f[0], 0), int(f[12]))
    return peaks


def check_case(name, state, case):
    """A case's panels against build/plan with the same flags, and its memory table against the TSV."""
    panels = case["panels"]
    check(panels, f"{name}: the page ran build/plan")
    if name.startswith("refused in the browser"):  # build/plan plans it; the page's 32-bit build says it cannot
        check(all(p["code"] != 0 and "browser's planner" in p["refused"] and "build/plan" in p["refused"]
                  for p in panels), f"{name}: every panel refused, naming build/plan ({panels[0]['refused'][:100]})")
        return
    if name.startswith("2^20 ranks"):  # FSDP's padded buffers pass 32 bits: refused at once, FSDP planned first
        said = [p["refused"] for p in panels]
        check(all(p["code"] != 0 for p in panels) and all("browser's planner" in r or "up to 4096" in r for r in said),
              f"{name}: every panel refused, the browser's limit named ({[r[:60] for r in said]})")
        print(f"web: the 2^20-rank page was refused in {int(case['ms'])} ms")
        return
    if not name.startswith("refused"):  # each panel's mode gets only the flags it takes: none refuses one of them
        given = ["--" + part.split("=")[0] for part in state.split("&") if part]
        named = [p["refused"] for p in panels if p["code"] and any(flag in p["refused"] for flag in given)]
        check(not named, f"{name}: no panel refuses a flag the page gave it ({named[:1]})")
    for p in panels:
        ref = native(p["args"])
        what = f"{name}: build/plan {' '.join(p['args'])}"
        if ref.returncode == 0:
            check(p["code"] == 0 and p["stdout"] == ref.stdout and (p["drawn"] or "--params" in p["args"]),
                  f"{what}: the page's output is build/plan's, byte for byte ({len(ref.stdout)} bytes), and drawn")
        else:
            check(p["code"] != 0 and p["refused"] == ref.stderr.strip(),
                  f"{what}: refused with build/plan's message: {p['refused'][:100]}")
    tsv = [p for p in panels if p["panel"] == "memory" and "--tsv" in p["args"] and p["code"] == 0]
    if tsv:
        rows = [line.split("\t") for line in tsv[0]["stdout"].strip().split("\n")]
        held = [k for k in range(10) if any(int(row[2 + k]) for row in rows)]
        expected = [[row[0], row[1], *[mb(int(row[2 + k])) for k in held], mb(int(row[12])), mb(int(row[13]))]
                    for row in rows]
        check(case["table"][1:] == expected,
              f"{name}: the memory table shows the TSV's bytes in MB, three decimals ({len(expected)} rows)")
    check(case["scroll"] <= case["width"], f"{name}: the page fits {case['width']} px, nothing to scroll sideways "
          f"(its width {case['scroll']} px)")
    time = [p for p in panels if p["panel"] == "time" and p["code"] == 0]
    if time:
        lines = time[0]["stdout"].strip().split("\n")
        at = next(i for i, line in enumerate(lines) if re.match(r"\s+N\s", line))
        names = ["strategy", *re.split(r"\s{2,}", lines[at].strip())]
        rows = [line.split() for line in lines[at + 1:] if len(line.split()) == len(names)]
        check(case["time"] == [names, *rows], f"{name}: the time panel's table is --time's rows ({len(rows)})")
        given = "tokens-per-s=" in state
        check(case["rate"] == ("note" if given else "placeholder"),
              f"{name}: one rank's rate said as {'given' if given else 'a placeholder'} ({case['rate']!r})")
    network = [p for p in panels if p["panel"] == "network" and p["code"] == 0]
    if network:
        rows = time_rows(network[0]["stdout"])
        want = [[s, mb(sent), mb(sent - across), mb(across), f"{100 * across / sent:.0f}%" if sent else "-"]
                for s, _, sent, across in rows]
        check(case["network"][1:] == want, f"{name}: the network panel is --time --tsv's rank 0 bytes at N, within "
              f"and spanning machines ({len(want)} rows)")
    compare = [p for p in panels if p["panel"] == "compare"]
    if "vs=" in state:
        check(len(compare) == 4 and all(p["code"] == 0 for p in compare),
              f"{name}: the comparison ran both plans' --tsv and --time --tsv ({len(compare)} runs)")
        if len(compare) == 4:
            peaks = [fullest_peaks(p["stdout"]) for p in (compare[0], compare[2])]
            times = [{s: (step, across) for s, step, _, across in time_rows(p["stdout"])} for p in (compare[1], compare[3])]
            want = [[s, mb(peaks[0][s]), mb(peaks[1][s]), mb(times[0][s][1]), mb(times[1][s][1]),
                     f"{1e3 * times[0][s][0]:.3f}", f"{1e3 * times[1][s][0]:.3f}"] for s in peaks[0]]
            changed = [b for row in want for a, b in zip(row[1::2], row[2::2]) if a != b]
            check(case["compare"][1:] == want and case["changed"] == changed and changed,
                  f"{name}: the comparison's table is the two plans' numbers, B's changes marked ({changed})")
    timeline = [p for p in panels if "--timeline" in p["args"] and p["code"] == 0]
    if timeline:
        peak = re.search(r"^# peak: (\d+) bytes( at event \d+ )?", timeline[0]["stdout"], re.M)
        check(peak and case["peak"].startswith(f"The peak: {mb(int(peak[1]))} MB{peak[2] or ''}"),
              f"{name}: the timeline's peak said in MB, at its event ({case['peak'][:80]!r})")
    if name == "2^16 ranks":
        print(f"web: the 2^16-rank page drew in {int(case['ms'])} ms")


if __name__ == "__main__":
    main()
