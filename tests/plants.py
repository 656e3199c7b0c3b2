#!/usr/bin/env python3
"""make test-plants: every planted bug of docs/testing.md's tables (tests/plants.txt) must be caught.

Each plant is made alone in a scratch copy of the tree (build/ copied too, so that only what the plant touches
is rebuilt), then the part of make test the table names runs there and must go red. A plant whose text the
file no longer holds exactly once is reported as such: the table has drifted from the code. Prints one line a
plant and ends "N caught, M not"; exits non-zero unless every plant was caught. Run it after make test passes,
and whenever a part is cut or merged. Hours on 2 cores: PLANTS="word ..." runs the plants whose names hold
any of the words.
Usage: plants.py BUILD_DIR"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from serve import kill_session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PART_TIMEOUT = 2700  # a hang guard: three times the longest part's time under load


def read_plants(path):
    """The plants: dicts of name, file, part, old, new."""
    plants, lines, i = [], open(path).read().split("\n"), 0
    while i < len(lines):
        if not lines[i].startswith("@ "):
            i += 1
            continue
        plant = {"name": lines[i][2:].strip()}
        i += 1
        while lines[i] != "<<<":
            key, _, value = lines[i].partition(":")
            plant[key.strip()] = value.strip()
            i += 1
        end_old = lines.index("===", i)
        end_new = lines.index(">>>", end_old)
        plant["old"] = "\n".join(lines[i + 1:end_old])
        plant["new"] = "\n".join(lines[end_old + 1:end_new])
        for key in ("file", "part"):
            if key not in plant:
                sys.exit(f"tests/plants.txt: the plant '{plant['name']}' has no {key}: line")
        plants.append(plant)
        i = end_new + 1
    return plants


def copy_tree(build, into):
    """The working tree (with its uncommitted changes) and BUILD_DIR's files, times kept."""
    skip = {"build-asan", "build-tsan", "build-fuzz"}
    for entry in os.listdir(ROOT):
        if entry in skip or entry == os.path.basename(build.rstrip("/")):
            continue
        src = os.path.join(ROOT, entry)
        (shutil.copytree if os.path.isdir(src) and not os.path.islink(src) else shutil.copy2)(
            src, os.path.join(into, entry), **({"symlinks": True} if os.path.isdir(src) else {}))
    shutil.copytree(build, os.path.join(into, "build"), symlinks=True)


def plant_one(plant, build):
    tree = tempfile.mkdtemp(prefix="shardlab_plant_")
    try:
        copy_tree(build, tree)
        path = os.path.join(tree, plant["file"])
        text = open(path).read()
        count = text.count(plant["old"])
        if count != 1:
            return "drifted", f"{plant['file']} holds the plant's text {count} times, not once"
        open(path, "w").write(text.replace(plant["old"], plant["new"]))
        made = subprocess.run(["make", "-C", tree, "BUILD=build", "GPU=0", "-j2", "all"], capture_output=True,
                              text=True)
        if made.returncode != 0:
            return "caught", "the build fails: " + (made.stderr.strip().splitlines() or ["?"])[-1][:200]
        started = time.time()
        # in a session of its own: a hang, or this script stopped, takes every process of the part with it
        p = subprocess.Popen(["make", "-C", tree, "BUILD=build", "GPU=0", "test", f"SUITE={plant['part']}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=PART_TIMEOUT)
        except subprocess.TimeoutExpired:
            return "caught", f"the part ran past {PART_TIMEOUT} s (a hang guard)"
        finally:
            kill_session(p.pid)
        r = subprocess.CompletedProcess(p.args, p.returncode, out, "")
        took = time.time() - started
        last = [l for l in r.stdout.splitlines() if re.match(r"^\d+ passed, \d+ failed$", l)]
        first_fail = next((l for l in r.stdout.splitlines() if l.startswith(("FAIL", "not ok"))), "")
        if r.returncode != 0:
            return "caught", f"{plant['part']} red in {took:.0f} s ({last[-1] if last else 'status ' + str(r.returncode)}" \
                             f"): {first_fail[:160]}"
        return "missed", f"{plant['part']} passed in {took:.0f} s ({last[-1] if last else ''})"
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) == 2 else 2)
    build = os.path.abspath(sys.argv[1])
    plants = read_plants(os.path.join(ROOT, "tests", "plants.txt"))
    words = os.environ.get("PLANTS", "").split()
    chosen = [p for p in plants if not words or any(w in p["name"] for w in words)]
    if not chosen:
        sys.exit(f"PLANTS={' '.join(words)}: no plant's name holds any of those words")
    results = {"caught": 0, "missed": 0, "drifted": 0}
    for k, plant in enumerate(chosen, 1):
        print(f"[{k}/{len(chosen)}] {plant['name']} ({plant['file']}, part {plant['part']})", flush=True)
        outcome, said = plant_one(plant, build)
        results[outcome] += 1
        print(f"    {outcome}: {said}", flush=True)
    print(f"{results['caught']} caught, {results['missed'] + results['drifted']} not "
          f"({results['missed']} missed, {results['drifted']} drifted from the code)")
    sys.exit(0 if results["caught"] == len(chosen) else 1)


if __name__ == "__main__":
    main()
