#!/usr/bin/env python3
"""The layout shows the design (docs/README.md's map), and stays so:

- every project include names its file from the root ("comm/comm.h");
- a folder includes only from its own layer and those below it, in the order
  LAYERS gives: dependencies point one way, so there is no circle between
  folders; and no circle between files either;
- a strategy file includes kit/kit.h and its own folder's headers, nothing else
  of the project;
- no folder holds more than MAX_SOURCES source files.

Usage: test_layout.py  (from anywhere; exit status 1 on a failure)"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from testlib import Checks  # noqa: E402

# Bottom to top: a folder may include from its own layer and those before it.
LAYERS = [["util"], ["device"], ["comm"], ["models"], ["kit"], ["strategies"], ["run"], ["plan"],
          ["examples", "tests"]]
MAX_SOURCES = 15
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def strategy_dirs():
    """The strategy folders: those whose files include kit/kit.h."""
    found = set()
    for folder in sorted(os.listdir(ROOT)):
        path = os.path.join(ROOT, folder)
        if folder == "kit" or not os.path.isdir(path):
            continue
        for name in os.listdir(path):
            if name.endswith((".c", ".h")) and '"kit/kit.h"' in open(os.path.join(path, name)).read():
                found.add(folder)
    return found


def sources():
    for folder, _dirs, names in os.walk(ROOT):
        rel = os.path.relpath(folder, ROOT)
        if rel.split(os.sep)[0].startswith("build") or rel.split(os.sep)[0] in (".git", "labs", "runs"):
            continue
        for name in names:
            if name.endswith((".c", ".h", ".cu")):
                yield os.path.normpath(os.path.join(rel, name))


def layer_of(path, strategies):
    top = path.split(os.sep)[0]
    if top in strategies:
        top = "strategies"
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    return None


def main():
    c = Checks("layout")
    strategies = strategy_dirs()
    c.check({"ddp", "zero3", "fsdp", "single"} <= strategies, f"the strategy folders are found: {sorted(strategies)}")
    files = sorted(sources())
    graph = {}
    wrong = []
    for path in files:
        includes = INCLUDE.findall(open(os.path.join(ROOT, path)).read())
        graph[path] = []
        for inc in includes:
            if not os.path.exists(os.path.join(ROOT, inc)):
                if not os.path.exists(os.path.join(ROOT, os.path.dirname(path), inc)):
                    wrong.append(f"{path}: \"{inc}\" is not there")
                else:
                    wrong.append(f"{path}: \"{inc}\" is not named from the root")
                continue
            graph[path].append(inc)
            mine, theirs = layer_of(path, strategies), layer_of(inc, strategies)
            if mine is None or theirs is None:
                wrong.append(f"{path}: \"{inc}\": a folder outside the layers")
            elif theirs > mine:
                wrong.append(f"{path} includes \"{inc}\": from a layer above its own")
            top, inc_top = path.split(os.sep)[0], inc.split(os.sep)[0]
            if top in strategies and inc_top != top and inc != "kit/kit.h":
                wrong.append(f"{path} includes \"{inc}\": a strategy includes kit/kit.h and its own folder only")
            if top in strategies and inc_top in strategies and inc_top != top:
                wrong.append(f"{path} includes \"{inc}\": another strategy's file")
    c.check(not wrong, "every include from the root, from its own layer or below" + "".join("\n  " + w for w in wrong))

    # No circle between files, a file's .c and .h taken as one (memory.c calling
    # into mem_timeline.c, which reads memory.h, is a circle), but for a folder's
    # interface, named after it (comm/comm.h): its backends include it and its
    # engine calls them. A depth-first search for a back edge.
    def module(path):
        folder, name = os.path.split(path)
        return path if name == os.path.basename(folder) + ".h" else os.path.splitext(path)[0]
    modules = {}
    for path, incs in graph.items():
        modules.setdefault(module(path), set()).update(module(i) for i in incs if module(i) != module(path))
    graph = {k: sorted(v) for k, v in modules.items()}
    state, circle = {}, []

    def visit(node, trail):
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1 and not circle:
                circle.extend(trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    c.check(not circle, "no include circle" + (": " + " -> ".join(circle) if circle else ""))

    counts = {}
    for path in files:
        if path.endswith((".c", ".cu")) and os.sep in path:
            counts[path.split(os.sep)[0]] = counts.get(path.split(os.sep)[0], 0) + 1
    crowded = {k: v for k, v in counts.items() if v > MAX_SOURCES and k not in ("tests", "examples")}
    c.check(not crowded, f"no library folder holds more than {MAX_SOURCES} source files: {crowded or counts}")
    c.finish()


if __name__ == "__main__":
    main()
