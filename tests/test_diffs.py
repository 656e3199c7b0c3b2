#!/usr/bin/env python3
"""The strategy files diff to their concept. For each pair of ddp/ddp.c, ddp/zero12.c,
zero3/zero3.c and fsdp/fsdp.c: the changed lines (diff a b | grep -c '^[<>]') stay within
their target and equal the count docs/strategies.md gives, and every function present in
both files faces itself: diff never matches a line of one function with a line of another,
and never shows a function changed on both sides in separate hunks.
Run from the repository root."""
import re
import subprocess
import sys

from testlib import Checks

# (file a, file b, the pair's name in docs/strategies.md, the most changed lines allowed). How collectives
# travel (hybrid groups, whole small tensors, ZeRO++) is the wire's (kit/wire.h), configured at init, so
# the budgets pay for the concepts.
PAIRS = [("ddp/ddp.c", "ddp/zero12.c", "DDP–ZeRO-1/2", 160),
         ("ddp/ddp.c", "zero3/zero3.c", "DDP–ZeRO-3", 160),
         ("ddp/ddp.c", "fsdp/fsdp.c", "DDP–FSDP", 190),
         ("zero3/zero3.c", "fsdp/fsdp.c", "ZeRO-3–FSDP", 160)]
# lines every function has, that say nothing about which function diff matched
TRIVIAL = {"", "}", "{", "State *s = state;"}
DEFINITION = re.compile(r"^(?:static\s+)?[A-Za-z_][\w\s*]*?\b([A-Za-z_]\w*)\s*\(")

CHECKS = Checks("diffs")
check = CHECKS.check


def owners(path):
    """The file's lines, and the function each belongs to (its comment above it included;
    every <name>_init is "init"), None between functions."""
    lines = open(path).read().split("\n")[:-1]
    owner, current = [None] * len(lines), None
    for i, line in enumerate(lines):
        m = DEFINITION.match(line)
        if m and not line.startswith(("//", "#", "typedef", " ")):
            current = "init" if m.group(1).endswith("_init") else m.group(1)
            j = i - 1
            while j >= 0 and lines[j].startswith("//") and owner[j] is None:
                owner[j] = current
                j -= 1
        owner[i] = current
        if line.startswith("}") or (m and line.rstrip().endswith("}")):
            current = None
    return lines, owner


def hunks(a, b):
    """diff's changed line count, and its hunks as ((first, last) in a, (first, last) in b), 1-based."""
    out = subprocess.run(["diff", a, b], capture_output=True, text=True).stdout
    changed = sum(1 for line in out.split("\n") if line[:1] in ("<", ">"))
    found = []
    for m in re.finditer(r"^(\d+)(?:,(\d+))?([acd])(\d+)(?:,(\d+))?$", out, re.M):
        a1, a2, op, b1, b2 = m.groups()
        a1, b1 = int(a1), int(b1)
        a2, b2 = int(a2 or a1), int(b2 or b1)
        found.append(((a1 + 1, a1) if op == "a" else (a1, a2), (b1 + 1, b1) if op == "d" else (b1, b2)))
    return changed, found


def facing(a, b):
    """The problems with how diff lines up the functions of a and b."""
    la, fa = owners(a)
    lb, fb = owners(b)
    shared = (set(fa) & set(fb)) - {None}
    _, found = hunks(a, b)
    problems = []
    i = j = 1  # walk the lines diff matched, between the hunks
    for ra, rb in found + [((len(la) + 1, len(la)), (len(lb) + 1, len(lb)))]:
        while i < ra[0] and j < rb[0]:
            x, y = fa[i - 1], fb[j - 1]
            if x != y and (x in shared or y in shared) and la[i - 1].strip() not in TRIVIAL:
                problems.append(f"{a}:{i} ({x}) is matched with {b}:{j} ({y}): {la[i - 1].strip()[:60]!r}")
            i, j = i + 1, j + 1
        i, j = ra[1] + 1, rb[1] + 1
    in_a, in_b = {}, {}  # the hunks each shared function changes in, on each side
    for h, (ra, rb) in enumerate(found):
        for side, (first, last), lines, owner in ((in_a, ra, la, fa), (in_b, rb, lb, fb)):
            for k in range(first, last + 1):
                if owner[k - 1] in shared and lines[k - 1].strip() not in TRIVIAL:
                    side.setdefault(owner[k - 1], set()).add(h)
    for name in sorted(shared):
        if name in in_a and name in in_b and not in_a[name] & in_b[name]:
            problems.append(f"{name} changes on both sides in separate hunks: diff does not put it side by side")
    return problems


doc = open("docs/strategies.md").read()
for a, b, name, target in PAIRS:
    changed, _ = hunks(a, b)
    check(changed <= target, f"diff {a} {b}: {changed} changed lines, at most {target}")
    said = re.search(re.escape(name) + r" (\d+)", doc)
    check(said is not None and int(said.group(1)) == changed,
          f"docs/strategies.md gives {name} {said.group(1) if said else '(nothing)'}; the diff has {changed}")
    problems = facing(a, b)
    check(not problems, f"diff {a} {b}: the functions face each other" + "".join("\n  " + p for p in problems))

# Each strategy file names its collectives and their reduce op, where a student can change them (a sum for an
# average is the labs' classic bug), and says nothing of how they travel outside its init.
COLLECTIVES = {"ddp/ddp.c": [r"comm_all_reduce_start\([^;]*COMM_AVG\)"],
               "ddp/zero12.c": [r"comm_reduce_start\([^;]*COMM_AVG\)", r"comm_all_gather\("],
               "zero3/zero3.c": [r"wire_broadcast_start\(", r"wire_reduce_start\([^;]*COMM_AVG\)"],
               "fsdp/fsdp.c": [r"wire_all_gather_start\(", r"wire_reduce_scatter_start\([^;]*COMM_AVG\)"]}
# (the wire's fields too: a strategy asks the wire by its functions, and reads only which ranks are the world)
OPTIONS = re.compile(r"zeropp|quantiz|secondary|qwz|qgz|QuantFormat|replicas_|shard_group|hybrid|->wire\.(?!world\b)",
                     re.IGNORECASE)
for path, names in COLLECTIVES.items():
    text = open(path).read()
    for name in names:
        check(re.search(name, text), f"{path} names its collective and its reduce op: /{name}/")
    lines, owner = owners(path)
    found = [f"{path}:{i + 1}: {line.strip()}" for i, line in enumerate(lines)
             if owner[i] not in (None, "init") and not line.lstrip().startswith("//") and OPTIONS.search(line)]
    check(not found, f"{path}: no option of the wire's outside init" + "".join("\n  " + f for f in found))
if len(sys.argv) > 1 and sys.argv[1] == "--counts":
    print(", ".join(f"{name} {hunks(a, b)[0]}" for a, b, name, _ in PAIRS))
CHECKS.finish()
