"""Shared bits of the Python test drivers: counting checks, their scratch directories and the
closing line, running a command (a trainer's, in a job started once: Served), reading a trainer's JSON-lines
log."""
import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile


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


# ---- start once, run many (run/serve.h) ----
# A trainer's run costs about 0.5 s of start-up on 2 cores (mpirun, MPI_Init, the libraries, the product
# kernels) and a tiny model's 20 steps about 0.2 s: a driver's runs go to jobs started once, one per launcher
# (the command up to the trainer, mpirun -np N included) and environment, kept while the driver runs. Each run
# is the command line it would have been, with its own stdout and stderr; one that stops on a fatal error ends
# its job, with the status and output the command would have had, and the next run starts a fresh job.
# SHARDLAB_TEST_SERVE=0 starts every run on its own, as a user would.
TRAINER = re.compile(r"(^|/)train_(single|ddp|zero3|fsdp)$")
SERVED_MAX = 6  # jobs kept at once (each holds its ranks' processes); the least recently used is ended first


class Served:
    def __init__(self, launcher, env):
        self.dir = tempfile.mkdtemp(prefix="shardlab_serve_")
        self.path = os.path.join(self.dir, "s")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(64)
        ranks = int(launcher[launcher.index("-np") + 1]) if "-np" in launcher else 1
        self.output = open(os.path.join(self.dir, "job.out"), "w+")
        self.job = subprocess.Popen([*launcher, "--serve", self.path], stdout=self.output, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.ranks = {}
        listener.settimeout(1)
        try:
            while len(self.ranks) < ranks and self.job.poll() is None:
                try:
                    conn, _ = listener.accept()
                except socket.timeout:
                    continue
                conn.settimeout(600)
                f = conn.makefile("rb")
                self.ranks[int(f.readline())] = (conn, f)
        finally:
            listener.close()

    def alive(self):
        return self.job.poll() is None and self.ranks

    def request(self, cmd, argv0, args, timeout):
        """One run: its CompletedProcess, as subprocess.run(capture_output=True, text=True) would give it."""
        out, err = os.path.join(self.dir, "stdout"), os.path.join(self.dir, "stderr")
        for path in (out, err):
            open(path, "w").close()
        payload = b"".join(os.fsencode(x) + b"\0" for x in (out, err, argv0, *args))
        said = self.output.tell()
        statuses = []
        try:
            for conn, _ in self.ranks.values():
                conn.sendall(b"%d\n" % len(payload) + payload)
            for conn, f in self.ranks.values():
                conn.settimeout(timeout)
                line = f.readline()
                if not line:
                    break
                statuses.append(int(line))
        except (socket.timeout, TimeoutError):
            self.end(kill=True)
            raise subprocess.TimeoutExpired(cmd, timeout)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if len(statuses) < len(self.ranks):  # a fatal error ended the job: its status is the run's
            try:
                code = self.job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.end(kill=True)
                raise subprocess.TimeoutExpired(cmd, timeout)
            self.output.flush()
            self.output.seek(said)
            r = subprocess.CompletedProcess(cmd, code or 1, read_text(out), read_text(err) + self.output.read())
            self.end()
            return r
        return subprocess.CompletedProcess(cmd, max(statuses), read_text(out), read_text(err))

    def end(self, kill=False):
        for conn, f in self.ranks.values():
            try:
                if not kill:
                    conn.sendall(b"0\n")
                f.close()
                conn.close()
            except OSError:
                pass
        self.ranks = {}
        try:
            if kill:
                raise subprocess.TimeoutExpired(self.job.args, 0)
            self.job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.job.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.job.wait()
        self.output.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


SERVED = {}  # (launcher, cwd, environment) -> Served, the most recently used last


def run_captured(cmd, timeout=1800, env=None):
    """Runs cmd (in the environment env, else this process's) and returns its CompletedProcess, stdout and
    stderr captured as text: subprocess.run's; a trainer's run in the job started once for its launcher."""
    at = next((i for i, x in enumerate(cmd) if TRAINER.search(str(x))), None)
    if at is None or os.environ.get("SHARDLAB_TEST_SERVE") == "0":
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    environment = hashlib.sha1(repr(sorted((env or os.environ).items())).encode()).hexdigest()
    key = (tuple(map(str, cmd[:at + 1])), os.getcwd(), environment)
    job = SERVED.pop(key, None)
    if job is None or not job.alive():
        if len(SERVED) >= SERVED_MAX:
            SERVED.pop(next(iter(SERVED))).end()
        job = Served(list(map(str, cmd[:at + 1])), env)
        if not job.alive():  # it did not start: the command on its own says why
            job.end(kill=True)
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    SERVED[key] = job
    r = job.request(cmd, str(cmd[at]), list(map(str, cmd[at + 1:])), timeout)
    if not job.alive():
        SERVED.pop(key, None)
    return r


@atexit.register
def end_served_jobs():
    while SERVED:
        SERVED.popitem()[1].end()


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
