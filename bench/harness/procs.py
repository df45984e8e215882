"""Running one benchmark process: wall time, peak resident memory from the kernel
(wait4's ru_maxrss for exactly that child), a time limit, and a memory guard so a
reference that would exhaust a shared machine is stopped and reported instead."""
import os
import signal
import subprocess
import threading
import time


class ChildResult:
    def __init__(self, argv, rc, wall, peak_rss_mb, stdout, stderr, killed_reason=None):
        self.argv = argv
        self.rc = rc
        self.wall = wall
        self.peak_rss_mb = peak_rss_mb
        self.stdout = stdout
        self.stderr = stderr
        self.killed_reason = killed_reason

    @property
    def ok(self):
        return self.rc == 0 and self.killed_reason is None

    def why(self):
        """One line for the report saying how the process failed."""
        if self.killed_reason:
            return self.killed_reason
        lines = (self.stderr or self.stdout or "").strip().splitlines()
        # Python's last line is often advice ("Set TORCHDYNAMO_VERBOSE=1 ..."); the line
        # that names the exception says more.
        errors = [l for l in lines if "Error" in l or "error:" in l]
        last = (errors or lines or [""])[-1].strip()
        return "exit status %d%s" % (self.rc, (": " + last[:200]) if last else "")


def _rss_mb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def run(argv, env=None, cwd=None, timeout=600, mem_limit_mb=None):
    """Runs argv to completion. stdout and stderr are captured (to files, so a chatty
    child cannot block on a full pipe)."""
    import tempfile
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err,
                             start_new_session=True)
        reason = []
        done = threading.Event()

        def guard():
            # Never p.poll() here: it would reap the child before wait4 below can.
            deadline = t0 + timeout
            while not done.wait(0.25):
                if time.perf_counter() > deadline:
                    reason.append("timed out after %d s" % timeout)
                elif mem_limit_mb and _rss_mb(p.pid) > mem_limit_mb:
                    reason.append("stopped: resident memory passed %.0f MB" % mem_limit_mb)
                if reason:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    return

        watcher = threading.Thread(target=guard, daemon=True)
        watcher.start()
        # wait4 gives this child's own rusage; Popen.wait would discard it.
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        p.returncode = os.waitstatus_to_exitcode(status)
        watcher.join()
        out.seek(0)
        err.seek(0)
        return ChildResult(argv, p.returncode, wall, usage.ru_maxrss / 1024.0, out.read(),
                           err.read(), reason[0] if reason else None)
