"""Shared bits of the Python test drivers: counting checks, their scratch directories and the
closing line, running a command (a trainer's in a job started once: serve.py), reading a trainer's JSON-lines
log."""
import json
import shutil
import struct
import subprocess
import sys
import tempfile

from serve import run_captured  # noqa: F401  (the drivers import it from here)


class Checks:
    def __init__(self, name):
        self.name, self.passed, self.failures, self.scratch_dirs = name, 0, [], []
        sys.excepthook = self.stopped

    def stopped(self, kind, error, trace):
        """A driver stopped by an exception still reports its checks so far. A command past its timeout (a hang
        guard, sized from the work, never a speed test) fails one check that names it."""
        if isinstance(error, subprocess.TimeoutExpired):
            command = " ".join(map(str, error.cmd)) if isinstance(error.cmd, (list, tuple)) else str(error.cmd)
            self.check(False, f"hang guard: `{command[:400]}` ran past its {error.timeout:.0f} s and was stopped")
        else:
            import traceback
            traceback.print_exception(kind, error, trace)
            self.check(False, f"the driver stopped on {kind.__name__}: {error}")
        self.finish()

    def scratch(self, prefix):
        """A new scratch directory (prefix + random, in $TMPDIR or /tmp): removed when finish() finds every check
        passed, kept and named when one failed, for its logs."""
        path = tempfile.mkdtemp(prefix=prefix)
        self.scratch_dirs.append(path)
        return path

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failures.append(what)
            print("FAIL:", what)

    def finish(self):
        for path in self.scratch_dirs:
            if self.failures:
                print(f"{self.name}: the runs' files are kept in {path}")
            else:
                shutil.rmtree(path, ignore_errors=True)
        print(f"{self.name}: {self.passed} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)


SWITCHES = {"--recompute", "--quiet", "--eval-ema", "--offload-optimizer", "--fused-classifier", "--fused-attention",
            "--save-full"}


def with_flags(args, *flags):
    """args with each of `flags` (FLAG VALUE pairs, or a switch) set: a flag args gives takes the new value in its
    place, one it does not give is added. The trainers refuse a flag given twice."""
    out, pending, i = list(args), [], 0
    while i < len(flags):
        width = 1 if flags[i] in SWITCHES else 2
        pending.append(flags[i:i + width])
        i += width
    for flag in pending:
        if flag[0] in out:
            at = out.index(flag[0])
            out[at:at + len(flag)] = flag
        else:
            out += flag
    return out


def run(cmd, timeout=1800):
    """Runs cmd; on failure prints it with the end of its output. Returns the exit status. timeout: a hang
    guard (Checks reports the command if it fires), far above any run's time under load."""
    r = run_captured(cmd, timeout)
    if r.returncode != 0:
        print(" ".join(cmd), "\n", r.stdout[-2000:], r.stderr[-2000:])
    return r.returncode


def read_log(path):
    """A trainer's log: its step lines, and its summary."""
    lines = [json.loads(l) for l in open(path)]
    return [l for l in lines if "step" in l], next(l for l in lines if l.get("summary"))


def write_learnable_shard(path, count, V, rng):
    """A token shard of `count` ids below V following a learnable rule (the next id
    is 7 * id + 3 mod V) with 20% noise, drawn from the random.Random `rng`."""
    ids = [rng.randrange(V)]
    for _ in range(count - 1):
        ids.append((ids[-1] * 7 + 3) % V if rng.random() < 0.8 else rng.randrange(V))
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
        f.write(struct.pack(f"<{count}H", *ids))
