#!/usr/bin/env python3
"""The network path: each strategy at N = 2 and 3 with Open MPI forced onto TCP
(`--mca btl self,tcp` over the loopback interface, ranks placed by a hostfile, as
on several machines) must give bit for bit the losses and the final model of
the shared-memory run: the transport moves bytes, it does not change the sums.
Usage: test_tcp.py BUILD_DIR DATA_DIR "MPIRUN ..." """
import json
import os
import shlex
import subprocess
import sys

from testlib import Checks

BUILD, DATA, MPIRUN = sys.argv[1], sys.argv[2], shlex.split(sys.argv[3])
CHECKS = Checks("tcp")
check = CHECKS.check
tmp = CHECKS.scratch("shardlab_tcp_")
COMMON = ["--config", "d2", "--vocab", "256", "--data", DATA, "--batch", "12", "--seq", "16", "--steps", "4",
          "--quiet"]


def with_transport(btl_args):
    """MPIRUN with its --mca btl choice replaced."""
    out, i = [], 0
    while i < len(MPIRUN):
        if MPIRUN[i] == "--mca" and i + 1 < len(MPIRUN) and MPIRUN[i + 1] == "btl":
            i += 3
            continue
        out.append(MPIRUN[i])
        i += 1
    return out[:1] + btl_args + out[1:]


hostfile = os.path.join(tmp, "hosts")
with open(hostfile, "w") as f:
    f.write("localhost slots=4\n")
SHM = with_transport(["--mca", "btl", "self,vader"])
TCP = with_transport(["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--hostfile", hostfile])


def run(launcher, strategy, n, tag):
    log, model = os.path.join(tmp, f"{tag}.jsonl"), os.path.join(tmp, f"{tag}.bin")
    r = subprocess.run([*launcher, "-np", str(n), f"{BUILD}/train_{strategy}", *COMMON, "--log", log,
                        "--out-model", model], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, None, r.stderr[-300:]
    losses = [entry["loss"] for entry in map(json.loads, open(log)) if "step" in entry]
    return losses, open(model, "rb").read(), ""


# the TCP runs do go over TCP: Open MPI says which interface its TCP transport uses
r = subprocess.run([*TCP, "--mca", "btl_base_verbose", "100", "-np", "2", f"{BUILD}/train_ddp", *COMMON],
                   capture_output=True, text=True, timeout=300)
check(r.returncode == 0 and "btl: tcp: Using interface: lo" in r.stdout + r.stderr, "the TCP runs use TCP on lo")

for strategy in ("ddp", "zero3", "fsdp"):
    for n in (2, 3):
        shm_losses, shm_model, err = run(SHM, strategy, n, f"{strategy}{n}_shm")
        check(shm_losses is not None, f"{strategy} N={n} over shared memory runs {err}")
        tcp_losses, tcp_model, err = run(TCP, strategy, n, f"{strategy}{n}_tcp")
        check(tcp_losses is not None, f"{strategy} N={n} over TCP runs {err}")
        check(tcp_losses is not None and len(tcp_losses) == 4 and tcp_losses == shm_losses,
              f"{strategy} N={n}: TCP losses equal shared memory's bit for bit")
        check(tcp_model is not None and tcp_model == shm_model, f"{strategy} N={n}: the same final model, byte for byte")
CHECKS.finish()
