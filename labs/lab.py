#!/usr/bin/env python3
"""The labs: write a strategy's communication yourself, graded by labs/check.py.
usage: lab.py list
       lab.py start LAB                 a working copy of the lab's strategy file with the lab's functions
                                        emptied, in labs/work/LAB/ (kept out of git)
       lab.py grade LAB [--file PATH]   builds the trainers with your file (default: the working copy) and
                                        grades it: points per check, and what each failed one means
       lab.py selftest                  every lab: its skeleton builds and fails; the project's own file
                                        gets every point
  common flags: --build DIR (the project's build, default build; its plan is the reference)
                --mpirun "CMD" (default: $MPIRUN, else mpirun)
The labs are described in labs/labs.json, their assignments in labs/*.md. A skeleton is made from the
real strategy file by emptying the named functions, so the strategies stay the single source."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import check  # labs/check.py: the homework check, and the registry of strategies

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LABS = json.load(open(os.path.join(HERE, "labs.json")))
NOT_SOURCES = {"tests", "labs", "docs", "runs"}  # folders of the root the trainers are not built from


def sources():
    """What the trainers are built from: the Makefile and every folder of the root that holds C or CUDA sources."""
    folders = [name for name in sorted(os.listdir(ROOT)) if os.path.isdir(os.path.join(ROOT, name))
               and name not in NOT_SOURCES and not name.startswith((".", "build"))
               and any(f.endswith((".c", ".h", ".cu")) for f in os.listdir(os.path.join(ROOT, name)))]
    return ["Makefile", *folders]


def fail(msg):
    print(f"lab: {msg}", file=sys.stderr)
    sys.exit(2)


def function_span(lines, name):
    """(first, last) line indexes of the definition of static function `name`: its signature line at column 0
    through the closing brace at column 0 (or the same line for a one-line function)."""
    pattern = re.compile(rf"^static [^(]*\b{re.escape(name)}\(")
    for i, line in enumerate(lines):
        if pattern.match(line) and not line.rstrip().endswith(";"):
            if line.rstrip().endswith("}"):
                return i, i
            for j in range(i + 1, len(lines)):
                if lines[j].startswith("}"):
                    return i, j
    return None


def function_text(source, name):
    """The whole definition of static function `name` in `source`, or None."""
    lines = source.split("\n")
    span = function_span(lines, name)
    return "\n".join(lines[span[0]:span[1] + 1]) if span else None


def later_answers(source, lab_name):
    """{function: TODO} of the later labs' functions that `source` holds word for word as their lab's answer: a
    handout must not give a later lab away, so they are emptied too, with what this lab needs of them instead."""
    names = list(LABS)
    out = {}
    for later in names[names.index(lab_name) + 1:]:
        info = LABS[later]
        answer_file = open(os.path.join(ROOT, info["file"])).read()
        for name in info["functions"]:
            text = function_text(source, name)
            if text is not None and text == function_text(answer_file, name):
                out[name] = info.get("earlier", {}).get(name, info["functions"][name])
    return out


def skeleton(source, lab_name, lab):
    """The strategy file with each of the lab's functions emptied to a TODO that stops the run (and the later labs'
    answers it holds: later_answers)."""
    lines = source.split("\n")
    for name, todo in {**lab["functions"], **later_answers(source, lab_name)}.items():
        span = function_span(lines, name)
        if span is None:
            fail(f"labs.json: {lab['file']} has no function {name}: the lab and the strategy have drifted apart")
        first, last = span
        signature = lines[first][:lines[first].index("{")].rstrip() if "{" in lines[first] else lines[first]
        params = re.findall(r"(\w+)\s*(?:,|\))", signature[signature.index("(") + 1:] + ")")
        body = [f"{signature} {{", f"    // TODO(lab {lab_name}): {todo}"]
        if params and params != ["void"]:
            body.append("    " + ", ".join(f"(void){p}" for p in params) + ";")
        body.append(f'    fatal("lab {lab_name}: {name} is not written yet (labs/{lab["page"]})");')
        body.append("}")
        lines[first:last + 1] = body
    return "\n".join(lines)


def work_file(lab_name, lab):
    return os.path.join(HERE, "work", lab_name, os.path.basename(lab["file"]))


def start(lab_name, lab):
    path = work_file(lab_name, lab)
    if os.path.exists(path):  # started before: nothing to do, and nothing went wrong
        print(f"lab {lab_name}: {os.path.relpath(path, ROOT)} exists: your work is kept (remove it to start over); "
              f"grade it with: make lab-grade LAB={lab_name}")
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(skeleton(open(os.path.join(ROOT, lab["file"])).read(), lab_name, lab))
    source = open(os.path.join(ROOT, lab["file"])).read()
    print(f"lab {lab_name}: write {', '.join([*lab['functions'], *later_answers(source, lab_name)])} in "
          f"{os.path.relpath(path, ROOT)} "
          f"(labs/{lab['page']}), then: make lab-grade LAB={lab_name}")


def build_with(lab_name, lab, student_file, build, trees=None):
    """The trainers built from the project's sources with `student_file` in place of the lab's file, reusing
    the project's objects so that only that file compiles, in a tree under `trees` (default BUILD/lab). Returns
    the build directory."""
    tree = os.path.join(trees or os.path.join(ROOT, build, "lab"), lab_name)
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    for name in sources():
        src = os.path.join(ROOT, name)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(tree, name))
    shutil.copytree(os.path.join(ROOT, build, "obj"), os.path.join(tree, "build", "obj"))
    shutil.copyfile(student_file, os.path.join(tree, lab["file"]))  # a new time stamp: it alone recompiles
    trainer = check.registry(os.path.join(ROOT, build))[lab["strategy"]]["trainer"]
    r = subprocess.run(["make", "-C", tree, "GPU=0", "BUILD=build", "build/train_single", f"build/{trainer}",
                        "build/prepare"], capture_output=True, text=True, errors="replace")
    # the compiler names the copy in the tree (ddp/ddp.c:40): name the student's file instead
    errors = [line.replace(os.path.join(tree, lab["file"]), os.path.relpath(student_file, ROOT))
              .replace(lab["file"] + ":", os.path.relpath(student_file, ROOT) + ":")
              for line in (r.stdout + r.stderr).splitlines() if "error" in line]
    return os.path.join(tree, "build"), r.returncode == 0, errors


def grade(lab_name, lab, student_file, build, mpirun, quiet=False, trees=None):
    """Builds and checks; returns (points, max points, {check: passed?} of every run)."""
    say = (lambda *a: None) if quiet else print
    total = sum(points for run in lab["runs"] for points in run_points(lab, run).values())
    lab_build, built, errors = build_with(lab_name, lab, student_file, build, trees)
    if not built:
        say(f"lab {lab_name}: your file does not compile:\n  " + "\n  ".join(errors[:8]))
        say(f"lab {lab_name}: 0 of {total} points")
        return 0, total, {}
    got, outcome = 0, {}
    for run in lab["runs"]:
        tag = f"{run['strategy']} N={run['ranks']} {run.get('args', '')}".strip()
        out = os.path.join(lab_build, f"check_{run['strategy']}{run['ranks']}.json")
        cmd = [sys.executable, os.path.join(HERE, "check.py"), "--strategy", run["strategy"], "--ranks",
               str(run["ranks"]), "--args", run.get("args", ""), "--build", lab_build,
               "--reference", os.path.join(ROOT, build), "--mpirun", mpirun, "--json", out,
               "--work", os.path.join(lab_build, "work_" + re.sub(r"\W+", "_", tag))]
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")  # check.py times each run out and ends its ranks
        if not os.path.exists(out) or os.path.getsize(out) == 0:
            say(f"lab {lab_name}: the check could not run ({tag}): {r.stderr.strip()[-300:]}")
            continue
        results = {c["check"]: c for c in json.load(open(out))}
        say(f"== {tag}")
        for check, points in run_points(lab, run).items():
            c = results.get(check)
            ok = bool(c and c["ok"])
            outcome[f"{tag}: {check}"] = ok
            got += points if ok else 0
            message = c["message"] if c else "not reached (an earlier check failed)"
            say(f"  {points if ok else 0}/{points}  {'PASS' if ok else 'FAIL'}  {check}: {message}")
    say(f"lab {lab_name}: {got} of {total} points")
    return got, total, outcome


def run_points(lab, run):
    """The checks of one run and their points (overlap only where the run prefetches)."""
    points = dict(lab["points"])
    if not run.get("overlap"):
        points.pop("overlap", None)
    return points


def selftest(build, mpirun):
    ok = True
    os.makedirs(os.path.join(ROOT, build, "lab"), exist_ok=True)
    trees = tempfile.mkdtemp(prefix="selftest_", dir=os.path.join(ROOT, build, "lab"))  # its own: two may run at once
    for lab_name, lab in LABS.items():
        skeleton_path = os.path.join(trees, f"{lab_name}_skeleton_{os.path.basename(lab['file'])}")
        with open(skeleton_path, "w") as f:
            f.write(skeleton(open(os.path.join(ROOT, lab["file"])).read(), lab_name, lab))
        handout = open(skeleton_path).read()
        given = [f"{later}'s {name}" for later in list(LABS)[list(LABS).index(lab_name) + 1:]
                 for name in LABS[later]["functions"]
                 if function_text(handout, name) is not None and
                 function_text(handout, name) == function_text(open(os.path.join(ROOT, LABS[later]["file"])).read(), name)]
        print(f"{'FAIL' if given else 'ok  '} lab {lab_name}: the handout holds no later lab's answer"
              + (f" ({', '.join(given)})" if given else ""))
        ok &= not given
        got, total, outcome = grade(lab_name, lab, skeleton_path, build, mpirun, quiet=True, trees=trees)
        empty_ok = outcome and got < total and not any(v for k, v in outcome.items() if k.endswith(": runs"))
        print(f"{'ok  ' if empty_ok else 'FAIL'} lab {lab_name}: the skeleton builds and fails its runs: "
              f"{got} of {total} points")
        real = os.path.join(trees, f"{lab_name}_real_{os.path.basename(lab['file'])}")
        shutil.copyfile(os.path.join(ROOT, lab["file"]), real)
        got_real, total_real, outcome_real = grade(lab_name, lab, real, build, mpirun, quiet=True, trees=trees)
        full = got_real == total_real and total_real > 0
        print(f"{'ok  ' if full else 'FAIL'} lab {lab_name}: the project's own {lab['file']} gets "
              f"{got_real} of {total_real} points"
              + ("" if full else ": " + ", ".join(k for k, v in outcome_real.items() if not v)))
        ok &= bool(empty_ok) and full
    shutil.rmtree(trees, ignore_errors=True)
    return 0 if ok else 1


def main(argv):
    if "--help" in argv or "-h" in argv:
        print(__doc__.split("\n", 1)[1])
        return 0
    if not argv:
        fail("give a command: list, start, grade or selftest (lab.py --help)")
    command, rest = argv[0], argv[1:]
    opts = {"build": "build", "mpirun": os.environ.get("MPIRUN") or "mpirun", "file": None}
    positional, i = [], 0
    while i < len(rest):
        if rest[i].startswith("--"):
            if rest[i][2:] not in opts:
                fail(f"unknown flag '{rest[i]}' (lab.py --help)")
            if i + 1 >= len(rest):
                fail(f"{rest[i]} needs a value")
            opts[rest[i][2:]] = rest[i + 1]
            i += 2
        else:
            positional.append(rest[i])
            i += 1
    given = [flag for flag in ("file", "build", "mpirun") if opts[flag] != {"build": "build", "file": None}.get(
        flag, os.environ.get("MPIRUN") or "mpirun")]
    takes = {"list": (), "start": (), "selftest": ("build", "mpirun"), "grade": ("file", "build", "mpirun")}
    if command in takes:
        for flag in given:
            if flag not in takes[command]:
                fail(f"{command}: --{flag} does nothing here")
        if command in ("list", "selftest") and positional:
            fail(f"{command}: takes no lab ('{positional[0]}')")
        if len(positional) > 1:
            fail(f"{command}: one lab at a time (given: {' '.join(positional)})")
    if command in ("grade", "selftest"):
        for path in (os.path.join(ROOT, opts["build"], "obj"), os.path.join(ROOT, opts["build"], "plan")):
            if not os.path.exists(path):
                fail(f"--build {opts['build']}: {os.path.relpath(path, ROOT)} is not there (make builds it)")
    if command == "list":
        for name, lab in LABS.items():
            print(f"{name:10} labs/{lab['page']:14} {lab['title']}")
        return 0
    if command == "selftest":
        return selftest(opts["build"], opts["mpirun"])
    if command not in ("start", "grade"):
        fail(f"unknown command '{command}': give list, start, grade or selftest (lab.py --help)")
    if len(positional) != 1 or positional[0] not in LABS:
        fail(f"{command}: give one of the labs: {', '.join(LABS)} (LAB=name with make)")
    lab_name = positional[0]
    lab = LABS[lab_name]
    if command == "start":
        start(lab_name, lab)
        return 0
    if opts["file"] is not None:
        student = os.path.abspath(opts["file"])
        if not os.path.isfile(student):
            fail(f"--file {opts['file']!r}: not a file")
    else:
        student = work_file(lab_name, lab)
        if not os.path.isfile(student):
            fail(f"{os.path.relpath(student, ROOT)}: not there (make lab-start LAB={lab_name} makes it)")
    got, total, _ = grade(lab_name, lab, student, opts["build"], opts["mpirun"])
    return 0 if got == total else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
