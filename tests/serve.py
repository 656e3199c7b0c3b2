"""Start once, run many: a trainer's runs sent to jobs started once (run/serve.h), for the test drivers and, under
make test, the grader.

A tiny run's 0.7 s on 2 cores is mostly start-up (mpirun, MPI_Init, the libraries, the product kernels: about
0.5 s), paid by every run. run_captured(cmd) sends a trainer's command line to a job started once for its launcher
(the command up to the trainer, mpirun -np N and its flags included), working directory and environment; the run
is the command it would have been, with its own stdout, stderr and status. A run that stops on a fatal error ends
its job with the status and output the command alone would have had; the next run starts a fresh job. Any other
command runs as subprocess.run would run it.

Where the jobs live: SHARDLAB_SERVE_DIR (make test sets it for all its parts; `serve.py end DIR` ends them), or
else a directory of this process's own, whose jobs end when it exits. A job is used by one client at a time (a
lock); a busy job's twin starts beside it. At most SERVED_MAX jobs are kept; the least recently used idle one
ends first. SHARDLAB_TEST_SERVE=0 starts every run on its own, as a user would."""
import atexit
import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TRAINER = re.compile(r"(^|/)train_(single|ddp|zero3|fsdp)$")
SERVED_MAX = 8  # jobs kept at once (each holds its ranks' processes)
TWINS = 4  # jobs of one launcher at once (the parts that run side by side)
START_S = 300  # a hang guard on a job's start, far above its second under load
VOLATILE = {"_", "OLDPWD", "SHLVL"}  # what a shell changes from one command to the next: not the job's key


def private_dir():
    path = tempfile.mkdtemp(prefix="shardlab_jobs_")
    atexit.register(end_all, path, True)
    return path


JOBS = os.environ.get("SHARDLAB_SERVE_DIR") or None


def jobs_dir():
    global JOBS
    if JOBS is None:
        JOBS = private_dir()
    return JOBS


def ranks_of(launcher):
    return int(launcher[launcher.index("-np") + 1]) if "-np" in launcher else 1


def alive(job):
    """Whether job's processes run: its pid recorded, no status written."""
    try:
        pid = int(open(os.path.join(job, "pid")).read())
    except (OSError, ValueError):
        return False
    if os.path.exists(os.path.join(job, "status")):
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def start(job, launcher, env):
    """Starts the job in directory `job`; True once every rank listens."""
    for name in os.listdir(job):
        if name != "lock":
            os.remove(os.path.join(job, name))
    with open(os.path.join(job, "job.out"), "w") as out:
        p = subprocess.Popen(["sh", "-c", '"$@"; echo $? > "$0/status"', job, *launcher, "--serve", job],
                             stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                             env=env)
    open(os.path.join(job, "pid"), "w").write(str(p.pid))
    ranks = [os.path.join(job, f"rank{r}") for r in range(ranks_of(launcher))]
    deadline = time.time() + START_S
    while time.time() < deadline:
        if all(os.path.exists(path) for path in ranks):
            return True
        if p.poll() is not None:
            return False
        time.sleep(0.005)
    end(job, kill=True)
    return False


def status_of_ended(job):
    """The status the job ended with (its ranks have gone): mpirun's."""
    path = os.path.join(job, "status")
    deadline = time.time() + 60
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.01)
    try:
        return int(open(path).read())
    except (OSError, ValueError):
        end(job, kill=True)
        return 1


class JobGone(Exception):
    """A job's rank could not be reached before the run was sent: the run can go to a fresh job."""


def request(job, launcher, cmd, argv0, args, timeout):
    out, err = os.path.join(job, "stdout"), os.path.join(job, "stderr")
    for path in (out, err):
        open(path, "w").close()
    payload = b"".join(os.fsencode(x) + b"\0" for x in (out, err, argv0, *args))
    said = os.path.getsize(os.path.join(job, "job.out"))
    connections, statuses = [], []
    try:
        for r in range(ranks_of(launcher)):  # every rank reached before any is sent the run
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connections.append(c)
            c.settimeout(timeout)
            try:
                c.connect(os.path.join(job, f"rank{r}"))
            except OSError:
                raise JobGone
        for c in connections:
            c.sendall(b"%d\n" % len(payload) + payload)
        for c in connections:
            line = c.makefile("rb").readline()
            if not line:
                break
            statuses.append(int(line))
    except (socket.timeout, TimeoutError):
        end(job, kill=True)
        raise subprocess.TimeoutExpired(cmd, timeout)
    except OSError:  # a rank gone: the job ended
        pass
    finally:
        for c in connections:
            c.close()
    text = lambda path: open(path, "rb").read().decode(errors="replace")
    if len(statuses) < ranks_of(launcher):  # a fatal error ended the job: its status is the run's
        code = status_of_ended(job)
        with open(os.path.join(job, "job.out"), "rb") as f:
            f.seek(said)
            mpirun_said = f.read().decode(errors="replace")
        return subprocess.CompletedProcess(cmd, code or 1, text(out), text(err) + mpirun_said)
    return subprocess.CompletedProcess(cmd, max(statuses), text(out), text(err))


def kill_session(sid):
    """SIGKILL to every process of session `sid` (the job's shell, mpirun and the ranks, whatever their group)."""
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.getsid(int(pid)) == sid:
                os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def end(job, kill=False):
    """Ends the job in directory `job` (the caller holds its lock)."""
    if not kill and alive(job):
        for r in range(64):
            path = os.path.join(job, f"rank{r}")
            if not os.path.exists(path):
                break
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                    c.settimeout(10)
                    c.connect(path)
                    c.sendall(b"0\n")
            except OSError:
                kill = True
        deadline = time.time() + 30
        while alive(job) and time.time() < deadline:
            time.sleep(0.01)
    try:
        pid = int(open(os.path.join(job, "pid")).read())
        if alive(job) or kill:
            kill_session(pid)
    except (OSError, ValueError):
        pass
    for name in ("pid", "status"):
        try:
            os.remove(os.path.join(job, name))
        except OSError:
            pass


def locked(job):
    """job's lock, taken without waiting, or None if another client holds it."""
    os.makedirs(job, exist_ok=True)
    f = open(os.path.join(job, "lock"), "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return f
    except BlockingIOError:
        f.close()
        return None


def evict(base, keep):
    """Ends the least recently used idle jobs past SERVED_MAX (never `keep`)."""
    jobs = [os.path.join(base, d) for d in os.listdir(base)]
    live = sorted((os.path.getmtime(os.path.join(j, "lock")), j) for j in jobs
                  if j != keep and os.path.exists(os.path.join(j, "lock")) and alive(j))
    for _, job in live[:max(0, len(live) + 1 - SERVED_MAX)]:
        lock = locked(job)
        if lock:
            end(job)
            lock.close()


def alone(cmd, timeout, env):
    """cmd started on its own, as subprocess.run starts it."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def free_twin(base, key):
    """The directory of the first of key's jobs no other client holds, and its lock; (None, None) if all are busy."""
    for twin in range(TWINS):
        job = os.path.join(base, f"{key}.{twin}")
        lock = locked(job)
        if lock:
            return job, lock
    return None, None


def trainer_at(cmd):
    """The index of the trainer in cmd, or None if it runs none."""
    return next((i for i, x in enumerate(cmd) if TRAINER.search(str(x))), None)


def run_captured(cmd, timeout=1800, env=None):
    """Runs cmd (in the environment env, else this process's) and returns its CompletedProcess, stdout and stderr
    captured as text: subprocess.run's; a trainer's run in a job started once (above)."""
    cmd = [str(x) for x in cmd]
    at = trainer_at(cmd)
    if at is None or os.environ.get("SHARDLAB_TEST_SERVE") == "0":
        return alone(cmd, timeout, env)
    launcher, environment = cmd[:at + 1], env or dict(os.environ)
    kept = sorted((k, v) for k, v in environment.items() if k not in VOLATILE)
    key = hashlib.sha1(repr((launcher, os.getcwd(), kept)).encode()).hexdigest()[:16]
    base = jobs_dir()
    job, lock = free_twin(base, key)
    if not job:  # every twin busy: on its own
        return alone(cmd, timeout, env)
    try:
        os.utime(os.path.join(job, "lock"))
        for _ in range(2):  # a job found gone before the run was sent: once more, in a fresh one
            if not alive(job):
                evict(base, job)
                if not start(job, launcher, environment):  # it did not start: the command on its own says why
                    end(job, kill=True)
                    break
            try:
                return request(job, launcher, cmd, cmd[at], cmd[at + 1:], timeout)
            except JobGone:
                end(job, kill=True)
        return alone(cmd, timeout, env)
    finally:
        lock.close()


def end_all(base, remove=False):
    """Ends every job in base (waiting for each one's client to finish its run)."""
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        job = os.path.join(base, name)
        with open(os.path.join(job, "lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            end(job)
    if remove:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "end":
        sys.exit("usage: serve.py end DIR  (ends the jobs started in DIR, then removes it)")
    end_all(sys.argv[2], True)
