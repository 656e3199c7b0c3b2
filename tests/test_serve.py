#!/usr/bin/env python3
"""Start once, run many (run/serve.h, tests/serve.py): a run sent to a job started once is the command run on its
own, which is what lets every other part use them.
  - a run's log and model, bit for bit the same run's started alone; its status 0; its job still there after;
  - --help's stdout byte for byte alone's, and nothing on stderr;
  - a refused run: its status non-zero as alone's, its message once on stderr, and the next run trains; a fatal
    error: alone's status and message, its job ended, the next run in a fresh one; a malformed request ends the
    job, saying why;
  - the environment and the working directory pick the job: SHARDLAB_PRODUCTS=openblas and =onednn give two
    engines in the runs' summaries; a relative --log lands in each run's own directory;
  - a run past its timeout raises TimeoutExpired and its job's processes are gone;
  - ending the jobs leaves no process of theirs.
Usage: test_serve.py BUILD_DIR "MPIRUN ..." """
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import time

import serve
from testlib import Checks, read_log, write_learnable_shard

BUILD, MPIRUN = os.path.abspath(sys.argv[1]), shlex.split(sys.argv[2])  # BUILD: from other directories too
CHECKS = Checks("serve")
check = CHECKS.check


def jobs():
    """The live jobs' directories."""
    base = serve.jobs_dir()
    return sorted(os.path.join(base, d) for d in os.listdir(base) if serve.alive(os.path.join(base, d)))


def gone(pid):
    """Whether process pid has ended (a zombie, not yet reaped by its parent, has)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def with_environment(entry):
    """The processes whose environment holds `entry` ("NAME=VALUE")."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if entry.encode() in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                found.append(int(pid))
        except OSError:
            pass
    return found


def main():
    tmp = CHECKS.scratch("shardlab_serve_")
    serve.JOBS = os.path.join(tmp, "jobs")  # jobs of this test's own, whatever make test shares
    os.makedirs(serve.JOBS)
    model, data = os.path.join(tmp, "model.bin"), os.path.join(tmp, "data")
    assert subprocess.run([f"{BUILD}/init_model", "--layers", "2", "--heads", "2", "--channels", "16", "--vocab",
                           "32", "--max-seq", "16", "--out", model], capture_output=True).returncode == 0
    os.makedirs(data)
    rng = random.Random(3)
    for name, count in (("train.bin", 4000), ("val.bin", 400)):
        write_learnable_shard(os.path.join(data, name), count, 32, rng)
    common = ["--model", model, "--data", data, "--batch", "4", "--seq", "16", "--steps", "3", "--quiet"]
    ddp = [*MPIRUN, "-np", "2", f"{BUILD}/train_ddp", *common]

    outputs = {}
    for how, runner in (("alone", lambda cmd: serve.alone(cmd, 300, None)), ("served", serve.run_captured)):
        log, out = os.path.join(tmp, f"{how}.jsonl"), os.path.join(tmp, f"{how}.bin")
        r = runner([*ddp, "--log", log, "--out-model", out])
        check(r.returncode == 0, f"ddp N=2 {how}: status 0 ({r.stderr.strip()[-300:]})")
        outputs[how] = ([x["loss"] for x in read_log(log)[0]] if r.returncode == 0 else None,
                        open(out, "rb").read() if r.returncode == 0 else None)
    check(outputs["served"] == outputs["alone"] and outputs["alone"][0],
          "a served run's losses and model are bit for bit the run's started alone")
    live = jobs()
    check(len(live) == 1, f"the served run's job is still there for the next run ({len(live)} live)")

    alone, served = serve.alone([*MPIRUN, "-np", "2", f"{BUILD}/train_ddp", "--help"], 300, None), \
        serve.run_captured([*MPIRUN, "-np", "2", f"{BUILD}/train_ddp", "--help"])
    check(served.returncode == 0 and served.stdout == alone.stdout and "usage" in served.stdout
          and served.stderr == "", "--help served: alone's stdout byte for byte, status 0, nothing on stderr "
          f"({served.returncode}, {served.stderr.strip()[:200]!r})")

    said = "--no-such-flag"
    alone, served = serve.alone([*ddp, said], 300, None), serve.run_captured([*ddp, said])
    check(served.returncode != 0 and served.returncode == alone.returncode and served.stderr.count(said) >= 1
          and served.stderr.count("shardlab:") == alone.stderr.count("shardlab:") == 1,
          f"a refused run served: alone's status ({alone.returncode}) and its one message "
          f"({served.returncode}, {served.stderr.strip()[:300]!r})")
    r = serve.run_captured(ddp)
    check(r.returncode == 0, f"the run after a refused one trains ({r.stderr.strip()[-200:]})")
    # a fatal error ends the job, with the status and the message the command alone would have had
    missing = os.path.join(tmp, "missing.bin")
    fatal = [*MPIRUN, "-np", "2", f"{BUILD}/train_ddp", *common[2:], "--model", missing]
    alone, served = serve.alone(fatal, 300, None), serve.run_captured(fatal)
    check(served.returncode != 0 and served.returncode == alone.returncode
          and served.stderr.count(missing) == alone.stderr.count(missing) >= 1 and not jobs(),
          f"a fatal error served: alone's status ({alone.returncode}) and message, its job ended "
          f"({served.returncode}, {served.stderr.strip()[:300]!r}, {len(jobs())} live)")
    r = serve.run_captured(ddp)
    check(r.returncode == 0 and len(jobs()) == 1,
          f"the run after a fatal one trains, in a fresh job ({r.stderr.strip()[-200:]})")
    # a request that is not one ends the job, saying why
    job = jobs()[0] if jobs() else None
    if job:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(os.path.join(job, "rank0"))
            fields = os.fsencode(os.path.join(tmp, "o.txt")) + b"\0" + os.fsencode(os.path.join(tmp, "e.txt")) + b"\0"
            c.sendall(b"%d\n" % len(fields) + fields)  # its two files, and no argv[0]
        deadline = time.time() + 60
        while serve.alive(job) and time.time() < deadline:
            time.sleep(0.05)
        said = open(os.path.join(job, "job.out")).read()
        check(not serve.alive(job) and "names its two output files and argv[0]" in said,
              f"a request of two fields ends the job, saying why ({said.strip()[-200:]!r})")
        serve.end(job, kill=True)

    engines = {}
    for engine in ("openblas", "onednn"):
        log = os.path.join(tmp, f"engine_{engine}.jsonl")
        env = dict(os.environ, SHARDLAB_PRODUCTS=engine)
        r = serve.run_captured([*MPIRUN, "-np", "1", f"{BUILD}/train_single", *common, "--log", log], env=env)
        engines[engine] = read_log(log)[1]["products"]["engine"] if r.returncode == 0 else r.stderr.strip()[-200:]
    check(engines == {"openblas": "OpenBLAS", "onednn": "oneDNN"},
          f"the environment picks the job: SHARDLAB_PRODUCTS gives each run its engine ({engines})")

    here = os.getcwd()
    for name in ("a", "b"):
        os.makedirs(os.path.join(tmp, name))
        os.chdir(os.path.join(tmp, name))
        r = serve.run_captured([*ddp, "--log", "rel.jsonl"])
        os.chdir(here)
        check(r.returncode == 0 and os.path.exists(os.path.join(tmp, name, "rel.jsonl")),
              f"the working directory picks the job: a relative --log lands in {name}/ ({r.returncode}, "
              f"{r.stderr.strip()[-300:]!r})")

    mark = "SHARDLAB_TEST_OPTIM_DELAY_S=30"  # rank 1 sleeps 30 s in each step's optimizer
    try:
        serve.run_captured(ddp, timeout=5, env=dict(os.environ, SHARDLAB_TEST_OPTIM_DELAY_S="30"))
        check(False, "a served run past its timeout raises TimeoutExpired")
    except subprocess.TimeoutExpired:
        time.sleep(0.5)
        check(not with_environment(mark), f"a served run past its timeout: TimeoutExpired, and its job's processes "
              f"gone ({with_environment(mark)})")
    pids = []
    for job in jobs():
        pids.append(int(open(os.path.join(job, "pid")).read()))
    serve.end_all(serve.JOBS)
    time.sleep(0.2)
    check(all(gone(pid) for pid in pids) and not jobs(), f"ending the jobs leaves none of their processes ({pids})")
    CHECKS.finish()


if __name__ == "__main__":
    main()
