"""Runs one benchmark program for bench/run.py: through bench/common/launch.c,
which reports its resource use (wait4), with its resident set sampled while
it runs when a timeline is asked for. Standard library only."""

from __future__ import annotations

import os
import signal
import threading
import time

TIMELINE_INTERVAL_S = 0.02
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024

# --------------------------------------------------------------------------
# Running one program
# --------------------------------------------------------------------------

def child_of(pid: int) -> int | None:
    """The child process of `pid` (xbench_launch has exactly one: the
    program). /proc/<pid>/task/<pid>/children where the kernel has it,
    else a scan of /proc for the parent pid."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        pass
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            return int(entry)
    return None


def rss_kib(pid: int) -> int | None:
    """Resident set of `pid` in KiB (VmRSS; 0 for a zombie); None once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_KIB
    except (OSError, ValueError, IndexError):
        return None


class RssSampler(threading.Thread):
    """Samples the RSS of the program that xbench_launch `launcher_pid`
    runs, every TIMELINE_INTERVAL_S, as (seconds since `t0`, KiB) pairs,
    until the program is gone or stop(). Its pid is the launcher's child
    from the fork on (exec keeps it). A read of /proc costs ~10 us, so the
    run does not notice the sampling."""

    def __init__(self, launcher_pid: int, t0: float):
        super().__init__(daemon=True)
        self.launcher_pid, self.t0 = launcher_pid, t0
        self.samples: list[tuple[float, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        pid = None
        while pid is None and not self.done.wait(0.001):  # polled until the fork, so the line starts near 0
            pid = child_of(self.launcher_pid)
        due = time.perf_counter()
        while pid is not None and not self.done.is_set():
            kib = rss_kib(pid)
            now = time.perf_counter()
            if kib is None:
                break
            if kib:
                self.samples.append((now - self.t0, kib))
            due = max(due + TIMELINE_INTERVAL_S, now)
            self.done.wait(due - now)

    def stop(self) -> list[tuple[float, int]]:
        self.done.set()
        self.join()
        return self.samples


def run_program(cmd: list[str], preload: str, env: dict[str, str], timeout: float, workdir: str,
                launcher: str, timeline: bool = False) -> dict:
    """Runs cmd through xbench_launch (see bench/common/launch.c) in its own
    session, stdout/stderr to files, LD_PRELOAD=preload in the program only.
    Returns wall seconds, the program's user/sys seconds and peak RSS (KiB)
    from wait4, its exit status, whether it timed out, and its output; with
    `timeline`, also its RSS over time (RssSampler) as "timeline"."""
    out_path = os.path.join(workdir, "stdout")
    err_path = os.path.join(workdir, "stderr")
    rep_path = os.path.join(workdir, "rusage")
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    env["XBENCH_LAUNCH_PRELOAD"] = preload
    argv = [launcher, rep_path] + cmd
    timed_out = threading.Event()

    start = time.perf_counter()
    pid = os.posix_spawn(launcher, argv, env, file_actions=actions, setsid=True)
    sampler = RssSampler(pid, start) if timeline else None
    if sampler:
        sampler.start()

    def kill() -> None:
        timed_out.set()
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        _, status, ru = os.wait4(pid, 0)
    except BaseException:
        kill()
        os.waitpid(pid, 0)
        raise
    finally:
        timer.cancel()
        samples = sampler.stop() if sampler else None
    wall = time.perf_counter() - start
    try:  # anything the program left behind in its session goes too
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

    res = {"wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime, "maxrss_kb": None,
           "exit": None, "timed_out": timed_out.is_set(), "launcher_exit": os.waitstatus_to_exitcode(status),
           "timeline": samples}
    try:
        with open(rep_path) as f:
            rep = dict(line.strip().split("=", 1) for line in f if "=" in line)
        res["maxrss_kb"] = int(rep["maxrss_kb"])
        res["user_s"], res["sys_s"] = float(rep["user_s"]), float(rep["sys_s"])
        res["exit"] = -int(rep["signal"]) if "signal" in rep else int(rep["exit"])
        res["minor_faults"] = int(rep["minflt"])
    except (OSError, KeyError, ValueError):
        pass  # killed by the timeout, or the launcher failed
    with open(out_path, errors="replace") as f:
        res["stdout"] = f.read()
    with open(err_path, errors="replace") as f:
        res["stderr"] = f.read()
    return res
