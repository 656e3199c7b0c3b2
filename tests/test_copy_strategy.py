#!/usr/bin/env python3
"""A strategy is its folder and one registry line: ddp/ copied to a new folder, mine/, its names changed
(ddp -> mine, zero12 -> mine12), and one line added to run/registry.c, with no other file of the project
edited. The copy builds its own trainer (build/train_mine, from the Makefile's folders), the planner plans it
and make check grades it against train_single --as-ranks N at N = 1..4: losses and model bit for bit, memory
per category and every collective equal to build/plan's.

Usage: test_copy_strategy.py BUILD "MPIRUN"  (exit status 1 on a failure)"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "labs"))
from lab import sources  # noqa: E402  what the trainers are built from
from testlib import Checks  # noqa: E402

BUILD, MPIRUN = sys.argv[1], sys.argv[2]
c = Checks("copy a strategy")
REGISTRY_LINE = '    X("mine", "Mine", mine, "", "--accum-mode no-sync", SHARDS_NONE, PLACED_REPLICATED)            \\\n'


def renamed(text):
    """ddp/'s text with the copy's names: its folder, files, symbols, strings."""
    for old, new in (("zero12", "mine12"), ("ddp", "mine"), ("Ddp", "Mine"), ("DDP", "MINE")):
        text = re.sub(old, new, text)
    return text


with tempfile.TemporaryDirectory(prefix="shardlab_copy_") as tmp:
    tree = os.path.join(tmp, "tree")
    os.makedirs(tree)
    for name in sources():
        src = os.path.join(ROOT, name)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(tree, name))
    shutil.copytree(os.path.join(ROOT, BUILD, "obj"), os.path.join(tree, "build", "obj"))  # only the new compiles
    os.makedirs(os.path.join(tree, "mine"))
    for name in sorted(os.listdir(os.path.join(ROOT, "ddp"))):
        with open(os.path.join(tree, "mine", renamed(name)), "w") as f:
            f.write(renamed(open(os.path.join(ROOT, "ddp", name)).read()))
    registry = os.path.join(tree, "run", "registry.c")
    text = open(registry).read()
    at = text.index('    X("zero3"')  # after the rungs of ddp/, before ZeRO-3's
    open(registry, "w").write(text[:at] + REGISTRY_LINE + text[at:])

    # no other file edited: the tree is the project's but for mine/ and that line
    edited = subprocess.run(["diff", "-r", "-q", "-x", "build", "-x", "mine", ROOT, tree], capture_output=True,
                            text=True).stdout.split("\n")
    edited = [line for line in edited if line and not line.startswith("Only in " + ROOT)]
    c.check(edited == [f"Files {ROOT}/run/registry.c and {tree}/run/registry.c differ"],
            f"the copy edits run/registry.c alone beside its folder ({edited[:3]})")

    r = subprocess.run(["make", "-C", tree, "GPU=0", "BUILD=build", "-j2", "build/train_mine", "build/train_single",
                        "build/plan", "build/prepare"], capture_output=True, text=True)
    c.check(r.returncode == 0, "the copy builds, its trainer build/train_mine with it"
            + ("" if r.returncode == 0 else ": " + "; ".join(line for line in r.stderr.splitlines()
                                                             if "error" in line)[:400]))
    if r.returncode == 0:
        listed = subprocess.run([os.path.join(tree, "build", "plan"), "--strategies"], capture_output=True,
                                text=True).stdout
        c.check(re.search(r"^mine\tMine\ttrain_mine\t", listed, re.M) is not None,
                "build/plan --strategies lists it, with its trainer")
        plan = subprocess.run([os.path.join(tree, "build", "plan"), "--config", "d2", "--ranks", "4", "--tsv"],
                              capture_output=True, text=True).stdout.splitlines()
        rows = {line.split("\t")[0]: line.split("\t")[2:] for line in plan}
        c.check("mine" in rows and rows["mine"] == rows.get("ddp"),
                "the planner plans it, and a copy of DDP holds what DDP holds")
        for n in (1, 2, 3, 4):
            work = os.path.join(tmp, f"check{n}")
            r = subprocess.run([sys.executable, os.path.join(ROOT, "labs", "check.py"), "--strategy", "mine",
                                "--ranks", str(n), "--build", os.path.join(tree, "build"), "--mpirun", MPIRUN,
                                "--work", work], capture_output=True, text=True, timeout=900)
            c.check(r.returncode == 0, f"make check grades it at N = {n}: every check passes"
                    + ("" if r.returncode == 0 else f" ({(r.stdout + r.stderr).strip()[-600:]})"))
c.finish()
