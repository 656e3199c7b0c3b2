#!/usr/bin/env python3
"""The labs' grader against the bugs the labs teach, on every BLAS kernel: each plant goes into a copy of the real
strategy file, the trainers are built with it once (labs/lab.py's build), and labs/check.py grades it with oneDNN's product kernels capped
at ONEDNN_MAX_CPU_ISA=SSE41 and AVX2 and uncapped (the CPU's own), with 1 to 3 threads a rank: the project's own files
for every strategy at N = 2 and 3 under each (N = 1 and 4 under the CPU's own), the sum-for-average plants under each,
the other plants under one each.
Each plant must fail the checks it breaks, with the message that names it, and pass the others; the project's own
files must pass every check under every kernel (the reference is bit for bit, so no tolerance can hide a bug or
fail correct code). A file that hangs is stopped within the grader's timeout, no process left behind.
Then lab.py grade on one plant: the exact score.
Usage: test_labs.py BUILD_DIR "MPIRUN ..." """
import os
import re
import json
import shlex
import subprocess
import sys

from testlib import Checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "labs"))
import check as grader  # noqa: E402
import lab  # noqa: E402

BUILD, MPIRUN = sys.argv[1], sys.argv[2]
CHECKS = Checks("labs")
check = CHECKS.check
KERNELS = [("SSE41", "1"), ("AVX2", "3"), ("ALL", "2")]  # ALL: no cap, the CPU's best

# (lab, what the bug is, the real text, the planted text, strategy and N to check, {check: message} that must fail)
PLANTS = [
    ("ddp", "a sum where an average belongs", "bucket, count, s->model->grad_dtype, COMM_AVG)",
     "bucket, count, s->model->grad_dtype, COMM_SUM)", "ddp", 3,
     {"gradient": r"\(3 times\): 3 times is a sum where an average belongs \(COMM_AVG\)", "model": r"differ"}),
    ("fsdp", "the all-gather's copy-out at the wrong rows", "dtype_at(s->model->params[t], r * slice, dtype)",
     "dtype_at(s->model->params[t], 0 * slice, dtype)", "fsdp", 3,
     {"losses": r"step 1's loss .*the forward already differs"}),
    ("zero3", "tensors broadcast from rank 0, not their owner", "wire_broadcast_start(&s->wire, unit, t, direction, s->owner[t]);",
     "wire_broadcast_start(&s->wire, unit, t, direction, 0);", "zero3", 3,
     {"losses": r"step 1's loss .*the forward already differs",
      "gradient": r"the forward already differs .*a broadcast's root is the tensor's owner"}),
    # the classic bug, in the files that own their collectives: the reduce's and the reduce-scatter's average
    ("zero3", "a reduce that sums where it should average", "wire_reduce_start(&s->wire, t, s->owner[t], COMM_AVG);",
     "wire_reduce_start(&s->wire, t, s->owner[t], COMM_SUM);", "zero3", 3,
     {"gradient": r"\(3 times\): 3 times is a sum where an average belongs \(COMM_AVG\)", "model": r"differ"}),
    ("fsdp", "a reduce-scatter that sums where it should average", "wire_reduce_scatter_start(&s->wire, r, unit, COMM_AVG);",
     "wire_reduce_scatter_start(&s->wire, r, unit, COMM_SUM);", "fsdp", 3,
     {"gradient": r"\(3 times\): 3 times is a sum where an average belongs \(COMM_AVG\)", "model": r"differ"}),
    ("zero12", "a piece reduced onto the first range's owner", "int owner = first_owner + (k - s->piece_start[t]);",
     "int owner = first_owner;", "zero2", 3, {"gradient": r"wrong ranks", "traffic": r"reduce"}),
]
# the head frees the tied wte's gradient with its own: the head's part is lost, named as wte's two uses
PLANTS.append(("fsdp", "a head that frees the tied wte's gradient with its own",
               "    inflight_close(r, s->mem);\n    resident_unit_final(&s->resident, unit);",
               "    inflight_close(r, s->mem);\n    if (unit == layout->num_units - 1) free_full_grads(s->model, s->mem, 0, "
               "s->comm->world);\n    resident_unit_final(&s->resident, unit);", "fsdp", 2,
               {"gradient": r"wte is read twice \(the embedding, unit 0, and the head\): its two gradients add up"}))
# the backward frees what the head read, the tied wte too: unit 0 must broadcast it again
PLANTS.append(("zero3", "a backward that frees the tied wte after the head", "    release_unit(s, unit, -1);",
               "    release_unit(s, unit, 0);", "zero3", 2, {"traffic": r"broadcast"}))
# an all-gather's buffers never closed: the next gather on them stops the run, naming the collective and the fix
PLANTS.append(("fsdp", "a gather whose buffers are never closed", "    inflight_close(g, s->mem);\n}",
               "}", "fsdp", 2, {"runs": r"the last one on them \(already waited for, not closed\) is open: wait for it "
                                       r"and close its buffers \(inflight_close\)"}))
# a prefetch that never starts: the peak of the gathered buffers is lower than planned, and said so
PLANTS.append(("prefetch", "a prefetch that never starts", "for (int k = 0; k <= ahead; k++) start_gather(s, unit",
               "for (int k = 0; k <= 0; k++) start_gather(s, unit", "fsdp", 2,
               {"memory": r"peaked below the planner's.*never allocated or freed early \(a gather or prefetch that never "
                          r"starts", "overlap": r"no collective was in flight"}))
HANG = ("ddp", "a rank that never starts its all-reduce",
        "if (count > 0) s->reduces[unit] = comm_all_reduce_start(",
        "if (count > 0 && s->comm->rank != 1) s->reduces[unit] = comm_all_reduce_start(", "ddp", 2)


def planted_build(tmp, name, lab_name, old, new):
    """The trainers built with the lab's file carrying the plant: the build directory, or None."""
    info = lab.LABS[lab_name]
    source = open(os.path.join(ROOT, info["file"])).read()
    check(source.count(old) == 1, f"{name}: the plant's text is in {info['file']} once")
    path = os.path.join(tmp, f"{name}_{os.path.basename(info['file'])}")
    with open(path, "w") as f:
        f.write(source.replace(old, new))
    build, built, errors = lab.build_with(f"test_{name}", info, path, BUILD)
    check(built, f"{name}: builds ({'; '.join(errors[:2])})")
    return build if built else None


def grade(build, strategy, n, env, work, seconds=None):
    """check.py's results {check: (ok, message)} and its output."""
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "checks.json")
    env = dict(os.environ, **env, **({"SHARDLAB_CHECK_TIMEOUT": str(seconds)} if seconds else {}))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "labs", "check.py"), "--strategy", strategy, "--ranks",
                        str(n), "--build", build, "--reference", BUILD, "--mpirun", MPIRUN, "--work", work,
                        "--json", out], capture_output=True, text=True, env=env, timeout=600)
    results = {c["check"]: (c["ok"], c["message"]) for c in json.load(open(out))} if os.path.getsize(out) else {}
    return results, r.stdout + r.stderr


def check_rows_named():
    """A model failure names the rows that differ: wte (Vp, C) and wpe (maxT, C) rows of C values each."""
    C, Vp = 128, 256
    tensors = [("wte", 0, Vp * C), ("wpe", Vp * C, Vp * C + 1024 * C), ("lnfw", Vp * C + 1024 * C, Vp * C + 1025 * C)]
    want = [0.0] * (Vp * C + 1025 * C)
    for name, first, last in (("wte", 128, 255), ("wpe", 7, 9)):
        got = list(want)
        begin = next(b for n, b, e in tensors if n == name)
        for i in range(begin + first * C, begin + (last + 1) * C):
            got[i] = 1.0
        said = grader.where_models_differ(got, want, 0, tensors, {}, "fsdp")
        check(f"{name} rows {first}..{last} differ" in said, f"a planted difference in {name} rows {first}..{last} "
              f"is reported as those rows: {said}")


def page_commands():
    """Every command the labs' pages give (in `code` or in a sh block), with its page: (page, command)."""
    out = []
    for page in sorted(os.listdir(os.path.join(ROOT, "labs"))):
        if not page.endswith(".md"):
            continue
        text = open(os.path.join(ROOT, "labs", page)).read()
        spans = re.findall(r"`([^`\n]+)`", text) + [line.split("  #")[0].strip() for block in
                                                   re.findall(r"```sh\n(.*?)```", text, re.S) for line in block.split("\n")]
        out += [(page, c) for c in spans if re.match(r"(build/plan|make (check|lab-\w+))( |$)", c)]
    return out


def check_page_commands():
    """A page cannot name a flag a tool refuses: every build/plan command the pages give runs (the template of
    labs/README.md with each lab run's N, K and flags), every make check names a strategy and --args the check
    takes, every make lab-* a lab."""
    commands = page_commands()
    check(len(commands) >= 10, f"the labs' pages give commands ({len(commands)} found)")
    for page, command in commands:
        words = shlex.split(command.replace("[the run's flags]", "FLAGS"))
        if words[0] == "build/plan":
            if "FLAGS" in words:  # the README's template: each lab run's N, K and flags
                for n, k, flags in grader_runs():
                    filled = [w.replace("4NK", str(4 * n * k)) if w != "N" else str(n) for w in words]
                    at = filled.index("FLAGS")
                    filled[at:at + 1] = flags
                    r = subprocess.run([os.path.join(BUILD, "plan"), *filled[1:]], capture_output=True, text=True)
                    check(r.returncode == 0, f"{page}: {' '.join(filled)} runs ({r.stderr.strip()[-200:]})")
            elif "--config" in words:  # a whole command, not a mention
                r = subprocess.run([os.path.join(BUILD, "plan"), *words[1:]], capture_output=True, text=True)
                check(r.returncode == 0, f"{page}: {command} runs ({r.stderr.strip()[-200:]})")
        elif words[1] == "check" and len(words) > 2:
            given = dict(w.split("=", 1) for w in words[2:])
            try:
                grader.split_args(given.get("ARGS", ""), given["STRATEGY"], int(given.get("RANKS", "4")), BUILD)
                fine = given["STRATEGY"] in grader.registry(BUILD)
            except SystemExit:
                fine = False
            check(fine, f"{page}: {command} names a strategy and flags the check takes")
        elif words[1].startswith("lab-") and len(words) > 2:
            check(words[2].split("=", 1)[1] in lab.LABS, f"{page}: {command} names a lab")


def grader_runs():
    """(N, K, flags) of every run the labs grade."""
    out = []
    for info in lab.LABS.values():
        for run in info["runs"]:
            flags = run.get("args", "").split()
            k = int(flags[flags.index("--grad-accum") + 1]) if "--grad-accum" in flags else 1
            out.append((run["ranks"], k, flags))
    return out


def main():
    check_rows_named()
    check_page_commands()
    tmp = CHECKS.scratch("shardlab_labs_")
    for kernel, threads in KERNELS:
        env = {"ONEDNN_MAX_CPU_ISA": kernel, "OMP_NUM_THREADS": threads}
        for strategy in ("ddp", "zero1", "zero2", "zero3", "fsdp"):
            for n in (1, 2, 3, 4) if kernel == "ALL" else (2, 3):  # N = 1 and 4 once: a CPU's rounding is N = 2's
                results, out = grade(BUILD, strategy, n, env, os.path.join(tmp, f"own_{kernel}_{strategy}{n}"))
                check(results and all(ok for ok, _ in results.values()),
                      f"{kernel}, {threads} thread(s): the project's own {strategy} at N = {n} passes every check"
                      + ("" if results and all(ok for ok, _ in results.values()) else ": " + out[-600:]))
    for i, (lab_name, name, old, new, strategy, n, fails) in enumerate(PLANTS):
        build = planted_build(tmp, lab_name + "_" + re.sub(r"\W+", "_", name)[:20], lab_name, old, new)
        if build is None:
            continue
        # the labs' classic bug, a sum for an average, under every instruction set; each other plant under one
        for kernel, threads in KERNELS if "COMM_SUM" in new else [KERNELS[i % len(KERNELS)]]:
            env = {"ONEDNN_MAX_CPU_ISA": kernel, "OMP_NUM_THREADS": threads}
            results, out = grade(build, strategy, n, env, os.path.join(tmp, f"{lab_name}_{kernel}"))
            for name_of_check, pattern in fails.items():
                ok, message = results.get(name_of_check, (True, "not reached"))
                check(not ok and re.search(pattern, message),
                      f"{kernel}: {name} ({strategy} N = {n}) fails '{name_of_check}' with /{pattern}/: {message}")
            if "runs" not in fails:
                check(results.get("runs", (False,))[0], f"{kernel}: {name} still runs")
    lab_name, name, old, new, strategy, n = HANG
    build = planted_build(tmp, "hang", lab_name, old, new)
    if build:
        import time
        t0 = time.time()
        results, out = grade(build, strategy, n, {}, os.path.join(tmp, "hang"), seconds=15)
        took = time.time() - t0
        ok, message = results.get("runs", (True, ""))
        check(not ok and "was stopped, every rank with it" in message and took < 60,
              f"{name}: stopped after the timeout ({took:.0f} s), 'runs' fails naming it: {message}")
        left = subprocess.run(["pgrep", "-f", os.path.join(build, "train_ddp")], capture_output=True, text=True)
        check(left.stdout.strip() == "", f"{name}: no process of the run is left ({left.stdout.split()})")
    # the whole grade of one plant: every point it loses, named
    sum_file = os.path.join(tmp, "ddp_sum.c")
    with open(sum_file, "w") as f:
        f.write(open(os.path.join(ROOT, "ddp/ddp.c")).read().replace(PLANTS[0][2], PLANTS[0][3]))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "labs", "lab.py"), "grade", "ddp", "--file", sum_file,
                        "--build", BUILD, "--mpirun", MPIRUN], capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    # (AdamW's update hardly moves when every gradient is scaled: the losses, logged to their last bit, may keep
    # every bit or move a last one; the gradient and the model show the sum at both N)
    lost_losses = out.count("0/2  FAIL  losses: step ")
    check(f"lab ddp: {10 - 2 * lost_losses} of 18 points" in out and out.count("0/2  FAIL  gradient: step 1's") == 2
          and out.count("0/2  FAIL  model: after 3 steps wte rows") == 2
          and "(2 times): 2 times is a sum where an average belongs" in out,
          "lab grade: a sum for an average scores exactly 10 of 18 less the losses' points it loses, losing the "
          "gradient and the model at both N"
          + ("" if "10 of 18" in out else ": " + out[-800:]))
    # a correct file whose debug print is not UTF-8 (one Latin-1 byte, every rank, every step) gets every point,
    # graded as a student's make check grades it: every run started on its own (no jobs started once)
    latin1 = os.path.join(tmp, "ddp_latin1.c")
    with open(latin1, "w") as f:
        f.write("#include <stdio.h>\n" + open(os.path.join(ROOT, "ddp/ddp.c")).read().replace(
            "static void finish_grads(void *state) {",
            'static void finish_grads(void *state) {\n    fputs("r\\xe9duction\\n", stdout);'))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "labs", "lab.py"), "grade", "ddp", "--file", latin1,
                        "--build", BUILD, "--mpirun", MPIRUN], capture_output=True, text=True, errors="replace",
                       timeout=900, env={k: v for k, v in os.environ.items() if k != "SHARDLAB_SERVE_DIR"})
    out = r.stdout + r.stderr
    check("lab ddp: 18 of 18 points" in out and "Traceback" not in out,
          "lab grade: a correct file that prints a Latin-1 byte scores 18 of 18" + ("" if "18 of 18" in out else
                                                                                  ": " + out[-800:]))
    # a file that does not compile is named as the student's
    broken = os.path.join(tmp, "broken.c")
    with open(broken, "w") as f:
        f.write(open(os.path.join(ROOT, "ddp/ddp.c")).read().replace("static void finish_grads(void *state) {",
                                                                     "static void finish_grads(void *state) { x;"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "labs", "lab.py"), "grade", "ddp", "--file", broken,
                        "--build", BUILD, "--mpirun", MPIRUN], capture_output=True, text=True, timeout=900)
    rel = os.path.relpath(broken, ROOT)
    check(f"{rel}:" in r.stdout and "ddp/ddp.c:" not in r.stdout.replace(rel, ""),
          f"lab grade: a compile error names the student's file ({rel}), not the tree's copy: {r.stdout[-300:]}")
    CHECKS.finish()


if __name__ == "__main__":
    main()
