#!/usr/bin/env python3
"""Run the xalloc benchmark suite against every contender and report.

usage: bench/run.py [--quick | --full] [--only WORKLOAD,...] [--alloc NAME,...]
                    [--reps K] [--out DIR] [--build-dir DIR] [--bin-dir DIR]
                    [--threads N] [--timeout SECONDS] [--no-micro]
                    [--no-fastpath] [--fastpath] [--no-timeline] [--list]

Each workload (bench/suite.py) runs under each contender - glibc without a
preload, the others injected with LD_PRELOAD - interleaved, K rounds, each
round starting one contender further along (A B C, B C A, C A B, ...). Every run records wall, user and system time and peak RSS
(from wait4) and the key=value metrics the program prints; a run that
crashes, times out, or finds another allocator serving malloc than the one
it was meant to measure (exit status 86) is recorded as such and shown in
every table. A contender whose library is not installed (or xalloc when
build/libxalloc.so is not built yet) is reported as "missing".

Output (default bench/results/<timestamp>/): runs.csv (one row per run,
written as the suite goes), results.json (everything), summary.csv (medians
per workload and contender), report.md (tables, geometric means, charts),
*.png charts drawn with gnuplot (with their .dat/.gp sources), logs/ (stderr
of failed runs). The summary is printed at the end.

RSS over time: for the workloads flagged `timeline` in suite.py
(producer-consumer, free-1g) the runner samples the program's resident set
(/proc/<pid>/statm, the VmRSS figure) every 20 ms during the first run of
each contender, from a thread that only reads /proc. The samples go to
timeline-<workload>.dat (one block per contender: seconds since the start,
MiB) and the chart timeline-<workload>.png, embedded in that workload's
section of report.md. On by default; --no-timeline turns it off.

--quick (default): small sizes, K=2; the whole suite takes about 10 minutes on
a 2-core machine.
--full: bigger sizes (the seeds' parameters where they fit), K=5.
--fastpath: only the callgrind fast-path instruction counts.
Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import fnmatch
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastpath_ir  # noqa: E402
import suite  # noqa: E402

REPO_DIR = os.path.dirname(suite.BENCH_DIR)
EXIT_MISMATCH = 86
EXIT_SELF_CHECK = 3
OK = "ok"
MICRO = "microbench"
# Environment variables that tune an allocator: recorded in the report, so a
# result obtained with non-default settings says so.
TUNING_ENV = re.compile(r"^(MALLOC_|MIMALLOC_|JE_MALLOC_CONF|TCMALLOC_|SCUDO_|GLIBC_TUNABLES|XALLOC_|TBB_)")
KV_LINE = re.compile(r"^([a-z][a-z0-9_]*)=(.*)$")
TIMELINE_INTERVAL_S = 0.02
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
TERM = "set terminal pngcairo size {w},{h} font 'sans,10'"  # gnuplot's, for every chart


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


def parse_metrics(stdout: str, output: str) -> dict:
    metrics: dict = {}
    if output == "ruby":
        lines = [ln for ln in stdout.strip().splitlines() if "," in ln]
        if lines:
            rss, dur = lines[-1].split(",", 1)
            try:
                metrics = {"rss_kb": float(rss), "duration_s": float(dur)}
            except ValueError:
                pass
        return metrics
    for line in stdout.splitlines():
        m = KV_LINE.match(line.strip())
        if not m:
            continue
        key, value = m.groups()
        try:
            metrics[key] = float(value)
        except ValueError:
            metrics[key] = value
    return metrics


def classify(res: dict) -> str:
    if res["timed_out"]:
        return "timeout"
    code = res["exit"]
    if code is None:
        return f"error (launcher exit {res['launcher_exit']})"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"crash ({name})"
    if code == EXIT_MISMATCH:
        return "mismatch"
    if code == EXIT_SELF_CHECK:
        return "failed self-check"
    if code != 0:
        return f"error (exit {code})"
    return OK


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------

def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def fmt_time(s: float | None) -> str:
    """Seconds, three significant digits."""
    if s is None:
        return "-"
    for limit, fmt in ((100, "{:.0f}"), (10, "{:.1f}"), (1, "{:.2f}"), (0.1, "{:.3f}"), (0.01, "{:.4f}")):
        if s >= limit:
            return fmt.format(s)
    return f"{s:.2e}"


def fmt_mib(kb: float | None) -> str:
    if kb is None:
        return "-"
    mib = kb / 1024
    return f"{mib:.0f}" if mib >= 100 else f"{mib:.1f}"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


def fmt_num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    a = abs(v)
    if a >= 1e7:
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Cell:
    """All runs of one workload under one contender."""

    def __init__(self, runs: list[dict]):
        self.runs = runs
        self.ok_runs = [r for r in runs if r["status"] == OK]
        failed = [r for r in runs if r["status"] != OK]
        if not runs:
            self.status = "not run"
        elif not failed:
            self.status = OK
        elif len(failed) == len(runs):
            self.status = failed[0]["status"]
        else:
            self.status = f"{failed[0]['status']} {len(failed)}/{len(runs)}"
        self.ok = self.status == OK

    def _series(self, key: str) -> list[float]:
        vals = []
        for r in self.ok_runs:
            v = r.get(key) if key in ("time_s", "wall_s", "user_s", "sys_s", "maxrss_kb") else r["metrics"].get(key)
            if isinstance(v, (int, float)):
                vals.append(float(v))
        return vals

    def median(self, key: str) -> float | None:
        vals = self._series(key)
        return statistics.median(vals) if vals else None

    def span(self, key: str) -> tuple[float, float] | None:
        vals = self._series(key)
        return (min(vals), max(vals)) if vals else None


# --------------------------------------------------------------------------
# The suite runner
# --------------------------------------------------------------------------

class Runner:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.mode = "full" if args.full else "quick"
        self.reps = args.reps or (5 if args.full else 2)
        self.ncpu = args.threads or os.cpu_count() or 2
        self.timeout = args.timeout or (600.0 if args.full else 60.0)
        self.build_dir = os.path.abspath(args.build_dir)
        self.bin_dir = os.path.abspath(args.bin_dir or os.path.join(self.build_dir, "bench", "bin"))
        self.launcher = os.path.join(self.bin_dir, "xbench_launch")
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.out_dir = os.path.abspath(args.out or os.path.join(suite.BENCH_DIR, "results", stamp))
        self.started = time.monotonic()
        self.runs: list[dict] = []
        self.micro: dict = {}
        self.fastpath: dict | None = None
        self.timeline = not args.no_timeline
        self.timelines: dict[str, dict[str, list[tuple[float, int]]]] = {}  # workload -> contender -> samples

        try:
            self.contenders = suite.select(self.build_dir, args.alloc)
        except SystemExit as e:
            sys.exit(f"run.py: {e}")
        self.libs = {c.name: suite.resolve(c) for c in self.contenders}

        patterns = [p for p in (args.only or "").split(",") if p]
        names = [w.name for w in suite.WORKLOADS] + [MICRO]
        for p in patterns:
            if not any(fnmatch.fnmatch(n, p) for n in names):
                sys.exit(f"run.py: no workload matches '{p}'; see --list")
        self.workloads = [w for w in suite.WORKLOADS if not patterns or any(fnmatch.fnmatch(w.name, p) for p in patterns)]
        self.run_micro = not args.no_micro and (not patterns or any(fnmatch.fnmatch(MICRO, p) for p in patterns))
        self.run_fastpath = not args.no_fastpath and not patterns

    # ---- helpers -----------------------------------------------------------

    def available(self) -> list[suite.Contender]:
        return [c for c in self.contenders if self.libs[c.name] is not None]

    def in_turn(self, rep: int) -> list[suite.Contender]:
        """The contenders in the order of round `rep` (1-based): each round
        starts one place further along, so that no contender always runs
        first - the run after another workload's, which finds the page cache,
        the processor's caches and its clock in whatever state that one left."""
        ready = self.available()
        shift = (rep - 1) % len(ready) if ready else 0
        return ready[shift:] + ready[:shift]

    def env_for(self, c: suite.Contender, extra: dict[str, str]) -> dict[str, str]:
        """The run's environment; LD_PRELOAD is set by the launcher."""
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "XBENCH_EXPECT")}
        env.update(extra)
        env.update(dict(c.env))
        env["XBENCH_EXPECT"] = c.expect
        return env

    def command(self, w: suite.Workload) -> list[str] | str:
        """The command line, or why it cannot run."""
        args = suite.expand(w.full if self.mode == "full" else w.quick, self.ncpu)
        if w.program == "ruby":
            if shutil.which("ruby") is None:
                return "not installed (ruby)"
            return ["ruby", suite.RUBY_SCRIPT] + args
        if w.program == "exec":
            if shutil.which(args[0]) is None and not os.access(args[0], os.X_OK):
                return f"not installed ({os.path.basename(args[0])})"
            return [os.path.join(suite.BENCH_DIR, "workloads", "checked_exec.sh")] + args
        exe = os.path.join(self.bin_dir, w.program)
        if not os.access(exe, os.X_OK) or not os.access(self.launcher, os.X_OK):
            return "not built"
        return [exe] + args

    def progress(self, text: str, end: str = "\n") -> None:
        print(text, end=end, flush=True)

    # ---- the runs ------------------------------------------------------------

    def run(self) -> None:
        os.makedirs(os.path.join(self.out_dir, "logs"), exist_ok=True)
        self.csv_file = open(os.path.join(self.out_dir, "runs.csv"), "w", newline="")
        self.csv = csv.writer(self.csv_file)
        self.csv.writerow(["workload", "contender", "rep", "status", "time_s", "wall_s", "user_s", "sys_s",
                           "maxrss_kb", "metrics"])
        self.describe()
        try:
            if not self.args.fastpath:
                self.run_workloads()
                if self.run_micro:
                    self.run_microbench()
            if self.args.fastpath or self.run_fastpath:
                self.run_fastpath_counts()
        except KeyboardInterrupt:
            self.progress("\ninterrupted: writing the report of the runs so far")
        finally:
            self.csv_file.close()
        self.write_outputs()

    def describe(self) -> None:
        self.progress(f"xalloc bench: {self.mode} mode, {self.reps} run(s) each, {self.ncpu} CPUs, "
                      f"per-run timeout {self.timeout:.0f} s")
        self.progress(f"  programs: {self.bin_dir}")
        self.progress(f"  results:  {self.out_dir}")
        for c in self.contenders:
            lib = self.libs[c.name]
            where = "(no preload)" if lib == "" else lib if lib else "MISSING"
            self.progress(f"  {c.name:9s} {where}")

    def record(self, run: dict) -> None:
        self.runs.append(run)
        self.csv.writerow([run["workload"], run["contender"], run["rep"], run["status"],
                           run.get("time_s"), run.get("wall_s"), run.get("user_s"), run.get("sys_s"),
                           run.get("maxrss_kb"), json.dumps(run.get("metrics", {}), sort_keys=True)])
        self.csv_file.flush()

    def steps_total(self) -> int:
        n = len(self.workloads) + (1 if self.run_micro else 0)
        return n * self.reps * len(self.available())

    def run_one(self, label: str, cmd: list[str], env: dict, output: str, time_key: str | None,
                step: int, total: int, c: suite.Contender, rep: int, timeline: bool = False) -> dict:
        elapsed = fmt_hms(time.monotonic() - self.started)
        self.progress(f"[{step:4d}/{total}  {elapsed}] {label:18s} {c.name:9s} run {rep}/{self.reps} ... ", end="")
        with tempfile.TemporaryDirectory(prefix="xbench-") as tmp:
            res = run_program(cmd, self.libs[c.name] or "", env, self.timeout, tmp, self.launcher, timeline)
        status = classify(res)
        metrics = parse_metrics(res["stdout"], output)
        if res.get("minor_faults") is not None:
            metrics.setdefault("minor_faults", float(res["minor_faults"]))  # the whole process's, from wait4
        time_s = res["wall_s"]
        if status == OK and time_key:
            if isinstance(metrics.get(time_key), float):
                time_s = metrics[time_key]
            else:
                status = f"error (no {time_key} in output)"
        run = {"workload": label, "contender": c.name, "rep": rep, "status": status, "time_s": time_s,
               "wall_s": res["wall_s"], "user_s": res["user_s"], "sys_s": res["sys_s"],
               "maxrss_kb": res["maxrss_kb"], "metrics": metrics, "command": cmd,
               "preload": self.libs[c.name]}
        if status != OK:
            log = os.path.join(self.out_dir, "logs", f"{label}.{c.name}.{rep}.log")
            with open(log, "w") as f:
                f.write(f"$ {' '.join(cmd)}\nstatus: {status}\n--- stdout ---\n{res['stdout']}\n"
                        f"--- stderr ---\n{res['stderr']}")
            tail = [ln for ln in res["stderr"].strip().splitlines() if ln.strip()]
            run["detail"] = tail[-1][:300] if tail else ""
            self.progress(f"{status.upper()}  ({run['detail'] or 'no message'})")
        else:
            self.progress(f"ok  {fmt_time(time_s):>7} s  {fmt_mib(res['maxrss_kb']):>6} MiB")
            if res["timeline"]:
                self.timelines.setdefault(label, {})[c.name] = res["timeline"]
        return run

    def run_workloads(self) -> None:
        total = self.steps_total()
        step = 0
        for w in self.workloads:
            cmd = self.command(w)
            for c in self.contenders:
                if self.libs[c.name] is None:
                    self.record({"workload": w.name, "contender": c.name, "rep": 0, "status": "missing",
                                 "metrics": {}})
                elif isinstance(cmd, str):
                    self.record({"workload": w.name, "contender": c.name, "rep": 0, "status": cmd,
                                 "metrics": {}})
            if isinstance(cmd, str):
                step += self.reps * len(self.available())
                self.progress(f"{w.name}: {cmd}, skipped")
                continue
            for rep in range(1, self.reps + 1):
                for c in self.in_turn(rep):
                    step += 1
                    env = self.env_for(c, w.env)
                    timeline = self.timeline and w.timeline and rep == 1  # one run is enough for the chart
                    self.record(self.run_one(w.name, cmd, env, w.output, w.time_key, step, total, c, rep,
                                             timeline))

    def run_microbench(self) -> None:
        exe = os.path.join(self.bin_dir, "microbench")
        total = self.steps_total()
        step = len(self.workloads) * self.reps * len(self.available())
        if not os.access(exe, os.X_OK) or not os.access(self.launcher, os.X_OK):
            self.progress("microbench: not built (libbenchmark-dev missing?), skipped")
            self.micro = {"error": "not built"}
            return
        min_time = "0.2" if self.mode == "full" else "0.02"
        results: dict[str, dict[str, list[float]]] = {}
        statuses: dict[str, str] = {}
        for c in self.contenders:
            if self.libs[c.name] is None:
                statuses[c.name] = "missing"
        for rep in range(1, self.reps + 1):
            for c in self.in_turn(rep):
                step += 1
                with tempfile.TemporaryDirectory(prefix="xbench-json-") as jtmp:
                    out_json = os.path.join(jtmp, "bench.json")
                    cmd = [exe, f"--benchmark_min_time={min_time}", f"--benchmark_out={out_json}",
                           "--benchmark_out_format=json"]
                    run = self.run_one(MICRO, cmd, self.env_for(c, {}), "kv", None, step, total, c, rep)
                    if run["status"] == OK:
                        try:
                            with open(out_json) as f:
                                data = json.load(f)
                        except (OSError, ValueError) as e:
                            run["status"] = f"error (no benchmark output: {e})"
                            data = {"benchmarks": []}
                        for b in data.get("benchmarks", []):
                            if b.get("run_type", "iteration") != "iteration" or "error_occurred" in b:
                                continue
                            if b.get("items_per_second"):
                                ns = 1e9 / float(b["items_per_second"])
                            else:
                                scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
                                ns = float(b["cpu_time"]) * scale
                            results.setdefault(b["name"], {}).setdefault(c.name, []).append(ns)
                self.record(run)
                if run["status"] != OK:
                    statuses[c.name] = run["status"]
        self.micro = {"ns": results, "status": statuses, "min_time": min_time}

    def run_fastpath_counts(self) -> None:
        self.progress("fastpath: callgrind instruction counts (two loop lengths per loop)")
        allocs = [(c.name, self.libs[c.name], c.expect) for c in self.contenders]
        self.fastpath = fastpath_ir.run_all(self.bin_dir, allocs, log=self.progress)

    # --------------------------------------------------------------------------
    # Results
    # --------------------------------------------------------------------------

    def cells(self) -> dict[tuple[str, str], Cell]:
        grouped: dict[tuple[str, str], list[dict]] = {}
        for r in self.runs:
            if r["workload"] == MICRO:
                continue
            grouped.setdefault((r["workload"], r["contender"]), []).append(r)
        return {k: Cell(v) for k, v in grouped.items()}

    def reference(self, cells: dict) -> str | None:
        """xalloc when it has results; otherwise mimalloc, then glibc."""
        names = [c.name for c in self.available()]
        for cand in ("xalloc", "mimalloc", "glibc"):
            if cand in names and any(cells[k].ok for k in cells if k[1] == cand):
                return cand
        return names[0] if names else None

    def analyse(self) -> dict:
        cells = self.cells()
        avail = [c.name for c in self.available()]
        ref = self.reference(cells)
        workloads = [w for w in self.workloads if any((w.name, a) in cells for a in avail)]
        table = {}
        complete = []
        for w in workloads:
            row = {a: cells.get((w.name, a), Cell([])) for a in self.contenders_names()}
            times = {a: row[a].median("time_s") for a in avail if row[a].ok}
            rss = {a: row[a].median("maxrss_kb") for a in avail if row[a].ok}
            table[w.name] = {"cells": row, "times": times, "rss": rss,
                             "best_time": min(times.values()) if times else None,
                             "best_rss": min(rss.values()) if rss else None,
                             "time_winner": min(times, key=times.get) if times else None,
                             "rss_winner": min(rss, key=rss.get) if rss else None}
            if avail and all(row[a].ok for a in avail):
                complete.append(w.name)
        # Geometric means over the workloads every available contender completed.
        gm = {}
        for a in avail:
            t = geomean([table[n]["times"][a] for n in complete])
            m = geomean([table[n]["rss"][a] for n in complete])
            gm[a] = {"time": t, "rss": m}
        # Pairwise: against the reference, over the workloads both completed.
        pair = {}
        for a in avail:
            shared = [n for n in table if a in table[n]["times"] and ref in table[n]["times"]]
            pair[a] = {
                "n": len(shared),
                "time": geomean([table[n]["times"][a] / table[n]["times"][ref] for n in shared]) if shared else None,
                "rss": geomean([table[n]["rss"][a] / table[n]["rss"][ref] for n in shared]) if shared else None,
            }
        failures = {a: [(n, table[n]["cells"][a].status) for n in table if not table[n]["cells"][a].ok]
                    for a in self.contenders_names()}
        wins_t = {a: sum(1 for n in table if table[n]["time_winner"] == a) for a in avail}
        wins_m = {a: sum(1 for n in table if table[n]["rss_winner"] == a) for a in avail}
        return {"cells": cells, "ref": ref, "table": table, "complete": complete, "geomean": gm,
                "pairwise": pair, "failures": failures, "wins_time": wins_t, "wins_rss": wins_m,
                "available": avail}

    def contenders_names(self) -> list[str]:
        return [c.name for c in self.contenders]

    def degradation(self, table: dict) -> dict[str, float | None]:
        n4, n8, tkey, skey = suite.DEGRADATION
        if n4 not in table or n8 not in table:
            return {}
        out = {}
        for a in self.contenders_names():
            c4, c8 = table[n4]["cells"][a], table[n8]["cells"][a]
            t4, t8, s4, s8 = c4.median(tkey), c8.median(tkey), c4.median(skey), c8.median(skey)
            out[a] = (t8 / t4) / (s8 / s4) if c4.ok and c8.ok and t4 and s4 and t8 and s8 else None
        return out

    # ---- outputs -------------------------------------------------------------------

    def write_outputs(self) -> None:
        if not self.runs:  # --fastpath: only the instruction counts
            self.write_json(self.analyse())
            text = fastpath_ir.markdown(self.fastpath or {"error": "not run"})
            with open(os.path.join(self.out_dir, "report.md"), "w") as f:
                f.write(f"# xalloc fast-path instruction counts\n\n{self.env_info['date']} - "
                        f"{self.env_info['cpu']}, repository {self.env_info['git']}.\n\n{text}")
            self.progress("")
            self.progress(text)
            self.progress(f"report: {os.path.join(self.out_dir, 'report.md')}")
            return
        an = self.analyse()
        self.write_json(an)
        self.write_summary_csv(an)
        charts = self.draw_charts(an)
        report = self.report_markdown(an, charts)
        with open(os.path.join(self.out_dir, "report.md"), "w") as f:
            f.write(report)
        summary = self.summary_text(an)
        with open(os.path.join(self.out_dir, "summary.txt"), "w") as f:
            f.write(summary)
        self.progress("")
        self.progress(summary)
        self.progress(f"report: {os.path.join(self.out_dir, 'report.md')}")
        self.progress(f"total time {fmt_hms(time.monotonic() - self.started)}")

    def environment(self) -> dict:
        def cmd_out(cmd: list[str]) -> str:
            try:
                return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                return ""

        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        except OSError:
            pass
        mem = ""
        try:
            with open("/proc/meminfo") as f:
                kb = int(f.readline().split()[1])
                mem = f"{kb / 1048576:.1f} GiB"
        except (OSError, ValueError, IndexError):
            pass
        thp = ""
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
                thp = f.read().strip()
        except OSError:
            pass
        versions = {}
        for c in self.contenders:
            if c.package:
                versions[c.name] = cmd_out(["dpkg-query", "-W", "-f=${Version}", c.package])
        return {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "cpu": cpu, "cpus": os.cpu_count(), "memory": mem, "kernel": os.uname().release,
            "glibc": os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else "",
            "thp": thp, "git": cmd_out(["git", "-C", REPO_DIR, "describe", "--always", "--dirty"]) or "no commit",
            "package_versions": versions,
            "ruby": cmd_out(["ruby", "--version"]),
            "tuning_env": {k: v for k, v in os.environ.items() if TUNING_ENV.match(k)},
        }

    def write_json(self, an: dict) -> None:
        data = {
            "mode": self.mode, "reps": self.reps, "threads": self.ncpu, "timeout_s": self.timeout,
            "environment": self.environment(),
            "contenders": {c.name: {"library": self.libs[c.name], "expect": c.expect} for c in self.contenders},
            "workloads": {w.name: {"command": self.command(w), "origin": w.origin, "what": w.what,
                                   "time_key": w.time_key or "wall", "timeline": w.timeline}
                          for w in self.workloads},
            "reference": an["ref"], "complete_workloads": an["complete"],
            "geomean": an["geomean"], "pairwise_vs_reference": an["pairwise"],
            "degradation": self.degradation(an["table"]),
            "runs": self.runs, "microbench": self.micro, "fastpath": self.fastpath,
            "timelines_kib": self.timelines,
        }
        self.env_info = data["environment"]
        with open(os.path.join(self.out_dir, "results.json"), "w") as f:
            json.dump(data, f, indent=1, default=str)

    def write_summary_csv(self, an: dict) -> None:
        with open(os.path.join(self.out_dir, "summary.csv"), "w", newline="") as f:
            wr = csv.writer(f)
            wr.writerow(["workload", "contender", "status", "runs_ok", "runs", "time_median_s", "time_min_s",
                         "time_max_s", "rss_median_kb", "rss_min_kb", "rss_max_kb", "wall_median_s",
                         "user_median_s", "sys_median_s"])
            for name, row in an["table"].items():
                for a, cell in row["cells"].items():
                    ts, ms = cell.span("time_s"), cell.span("maxrss_kb")
                    wr.writerow([name, a, cell.status, len(cell.ok_runs), len(cell.runs),
                                 cell.median("time_s"), ts[0] if ts else None, ts[1] if ts else None,
                                 cell.median("maxrss_kb"), ms[0] if ms else None, ms[1] if ms else None,
                                 cell.median("wall_s"), cell.median("user_s"), cell.median("sys_s")])

    # ---- charts ------------------------------------------------------------------

    def draw_charts(self, an: dict) -> dict[str, str]:
        """Draws the charts with gnuplot; returns {chart: file name}."""
        charts = self.draw_timelines()
        if shutil.which("gnuplot") is None:
            return charts
        ref = an["ref"]
        avail = an["available"]
        # Geometric means (one bar per contender).
        for key, label, fname in (("time", "time", "geomean_time"), ("rss", "peak RSS", "geomean_rss")):
            rows = [(a, an["geomean"][a][key] / an["geomean"][ref][key])
                    for a in avail if an["geomean"][a][key] and ref and an["geomean"][ref][key]]
            if not rows:
                continue
            dat = os.path.join(self.out_dir, f"{fname}.dat")
            with open(dat, "w") as f:
                for a, r in rows:
                    f.write(f'"{a}" {r:.6f}\n')
            gp = os.path.join(self.out_dir, f"{fname}.gp")
            with open(gp, "w") as f:
                f.write("\n".join([
                    TERM.format(w=800, h=450),
                    f"set output '{fname}.png'",
                    f"set title 'Geometric mean of {label} over {len(an['complete'])} workloads, relative to {ref} (lower is better)'",
                    "set style fill solid 0.8 border -1", "set boxwidth 0.6", "set grid ytics",
                    "set yrange [0:*]", "unset key", f"set ylabel '{label} / {ref}'",
                    "set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb 'black'",
                    f"plot '{fname}.dat' using 0:2:xtic(1) with boxes lc rgb '#4477aa', "
                    "'' using 0:2:(sprintf('%.2f', $2)) with labels offset 0,0.8 notitle",
                    "",
                ]))
            if self._gnuplot(gp):
                charts[fname] = f"{fname}.png"
        # Per-workload grouped bars (ratio to the reference, log scale).
        names = [n for n in an["table"] if ref in an["table"][n]["times"]]
        for key, label, fname in (("times", "time", "workloads_time"), ("rss", "peak RSS", "workloads_rss")):
            if not names or not ref:
                continue
            dat = os.path.join(self.out_dir, f"{fname}.dat")
            with open(dat, "w") as f:
                f.write("workload " + " ".join(avail) + "\n")
                for n in names:
                    vals = an["table"][n][key]
                    base = vals[ref]
                    cells = [f"{vals[a] / base:.6f}" if a in vals and base else "NaN" for a in avail]
                    f.write(f'"{n}" ' + " ".join(cells) + "\n")
            gp = os.path.join(self.out_dir, f"{fname}.gp")
            plots = ", ".join(
                (f"'{fname}.dat' using {i + 2}:xtic(1) title '{a}'" if i == 0 else f"'' using {i + 2} title '{a}'")
                for i, a in enumerate(avail))
            with open(gp, "w") as f:
                f.write("\n".join([
                    TERM.format(w=max(900, min(2400, 8 * len(names) * (len(avail) + 1) + 200)), h=560),
                    f"set output '{fname}.png'",
                    f"set title 'Median {label} per workload relative to {ref} (log scale, lower is better)'",
                    "set style data histograms", "set style histogram clustered gap 1",
                    "set style fill solid 0.85 border -1", "set logscale y", "set grid ytics",
                    "set xtics rotate by -40 left", "set key outside right top", "set bmargin 8",
                    "set datafile missing 'NaN'", f"set ylabel '{label} / {ref}'",
                    "set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb 'black'",
                    f"plot {plots}", "",
                ]))
            if self._gnuplot(gp):
                charts[fname] = f"{fname}.png"
        return charts

    def draw_timelines(self) -> dict[str, str]:
        """Writes timeline-<workload>.dat (a block per contender: seconds,
        RSS MiB) and, with gnuplot, draws it: {"timeline-<workload>": png}."""
        charts = {}
        for name, per in self.timelines.items():
            fname = f"timeline-{name}"
            order = [a for a in self.contenders_names() if a in per]
            with open(os.path.join(self.out_dir, f"{fname}.dat"), "w") as f:
                f.write(f"# RSS of {name} over time, first run of each contender: seconds since start, MiB\n")
                for a in order:
                    f.write(f"# {a}\n" + "".join(f"{t:.3f} {kib / 1024:.1f}\n" for t, kib in per[a]) + "\n\n")
            if shutil.which("gnuplot") is None:
                continue
            plots = ", ".join(f"'{fname}.dat' index {i} using 1:2 with lines lw 2 title '{a}'"
                              for i, a in enumerate(order))
            gp = os.path.join(self.out_dir, f"{fname}.gp")
            with open(gp, "w") as f:
                f.write("\n".join([
                    TERM.format(w=900, h=500),
                    f"set output '{fname}.png'",
                    f"set title 'RSS over time: {name} ({self.mode} mode, first run of each contender, "
                    f"sampled every {TIMELINE_INTERVAL_S * 1000:.0f} ms)'",
                    "set xlabel 'seconds since start'", "set ylabel 'RSS (MiB)'", "set grid",
                    "set xrange [0:*]", "set yrange [0:*]", "set key outside right top",
                    f"plot {plots}", "",
                ]))
            if self._gnuplot(gp):
                charts[fname] = f"{fname}.png"
        return charts

    def _gnuplot(self, script: str) -> bool:
        try:
            p = subprocess.run(["gnuplot", os.path.basename(script)], cwd=self.out_dir, capture_output=True,
                               text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            self.progress(f"gnuplot failed on {script}: {e}")
            return False
        if p.returncode != 0:
            self.progress(f"gnuplot failed on {script}: {p.stderr.strip()[:300]}")
            return False
        return True

    # ---- Markdown report -----------------------------------------------------------------

    def report_markdown(self, an: dict, charts: dict[str, str]) -> str:
        env = getattr(self, "env_info", None) or self.environment()
        ref = an["ref"]
        avail = an["available"]
        names = self.contenders_names()
        L: list[str] = []
        L.append(f"# xalloc benchmark report ({self.mode} mode)")
        L.append("")
        L.append(f"{env['date']} - {env['cpu']}, {env['cpus']} CPUs, {env['memory']}, Linux {env['kernel']}, "
                 f"{env['glibc']}, THP `{env['thp']}`, repository {env['git']}.")
        L.append(f"{self.reps} run(s) per workload and contender, interleaved (each round starts one contender further along); per-run timeout "
                 f"{self.timeout:.0f} s; N = {self.ncpu} threads where a workload says N.")
        L.append("")
        L.append("| contender | preloaded library | version |")
        L.append("|---|---|---|")
        for c in self.contenders:
            lib = self.libs[c.name]
            L.append(f"| {c.name} | {'(none: glibc malloc)' if lib == '' else lib or '**missing**'} | "
                     f"{env['package_versions'].get(c.name, '') or ('-' if c.name != 'xalloc' else 'this tree')} |")
        if env["tuning_env"]:
            L.append("")
            L.append("Allocator tuning variables were set for this run: " +
                     ", ".join(f"`{k}={v}`" for k, v in sorted(env["tuning_env"].items())) + ".")
        L.append("")
        L.append("Time is the median wall time of the whole process unless the workload names another "
                 "measure (the time column says which); peak RSS is the program's maximum resident set "
                 "(wait4 in bench/common/launch.c). Ratios: to the reference contender and to the best of the row; lower is better. "
                 "A contender that crashed, timed out or ran under the wrong allocator is shown with that "
                 "status and left out of the geometric means.")
        L.append("")

        # Summary.
        L.append("## Summary")
        L.append("")
        if ref != "xalloc":
            if "xalloc" not in self.libs:
                why = "not selected"
            elif self.libs["xalloc"] is None:
                why = f"{self.build_dir}/libxalloc.so is not built"
            else:
                why = "no successful runs"
            L.append(f"**xalloc has no results in this run ({why}); ratios are relative to {ref}.**")
            L.append("")
        L.append(f"Geometric means over the {len(an['complete'])} workloads that every available contender "
                 f"completed, relative to {ref}; `pairwise` columns compare each contender with {ref} over every "
                 "workload both completed.")
        L.append("")
        L.append(f"| contender | time (geomean, / {ref}) | peak RSS (geomean, / {ref}) | time pairwise | RSS pairwise | "
                 "workloads won (time) | won (RSS) | failed |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for a in names:
            if a not in avail:
                L.append(f"| {a} | missing | missing | - | - | - | - | - |")
                continue
            g, gr = an["geomean"][a], an["geomean"].get(ref, {})
            t = g["time"] / gr["time"] if g["time"] and gr.get("time") else None
            m = g["rss"] / gr["rss"] if g["rss"] and gr.get("rss") else None
            p = an["pairwise"][a]
            L.append(f"| {a} | {fmt_ratio(t)} | {fmt_ratio(m)} | {fmt_ratio(p['time'])} ({p['n']}) | "
                     f"{fmt_ratio(p['rss'])} | {an['wins_time'][a]} | {an['wins_rss'][a]} | "
                     f"{len(an['failures'][a])} |")
        L.append("")
        for key in ("geomean_time", "geomean_rss"):
            if key in charts:
                L.append(f"![{key}]({charts[key]})")
        if charts:
            L.append("")
        excluded = [n for n in an["table"] if n not in an["complete"]]
        if excluded:
            L.append("Workloads left out of the common geometric mean (some contender did not complete them): " +
                     ", ".join(excluded) + ".")
            L.append("")
        fails = [(a, n, s) for a in names for (n, s) in an["failures"][a] if s != "missing"]
        if fails:
            L.append("### Failures")
            L.append("")
            L.append("| workload | contender | status | last line of stderr |")
            L.append("|---|---|---|---|")
            for a, n, s in fails:
                detail = next((r.get("detail", "") for r in self.runs
                               if r["workload"] == n and r["contender"] == a and r["status"] != OK), "")
                L.append(f"| {n} | {a} | {s} | {detail.replace('|', '/')} |")
            L.append("")

        L.append("### Winners per workload")
        L.append("")
        L.append("| workload | fastest | smallest peak RSS |")
        L.append("|---|---|---|")
        for n, row in an["table"].items():
            L.append(f"| {n} | {row['time_winner'] or '-'} | {row['rss_winner'] or '-'} |")
        L.append("")

        deg = self.degradation(an["table"])
        if deg:
            L.append("### Parallelism degradation (seed 000)")
            L.append("")
            L.append("time(n8) / time(n4) / (size(n8) / size(n4)) of the realworld workload, from the median "
                     "task-phase time (`process_s`) and the input size (`bytes`); near 1.00 is ideal, above 1 "
                     "means the allocator slows down with more parallel workers.")
            L.append("")
            L.append("| contender | degradation |")
            L.append("|---|---:|")
            for a in names:
                L.append(f"| {a} | {fmt_ratio(deg.get(a)) if a in avail else 'missing'} |")
            L.append("")

        for key in ("workloads_time", "workloads_rss"):
            if key in charts:
                L.append(f"![{key}]({charts[key]})")
                L.append("")

        # Per-workload tables.
        L.append("## Workloads")
        L.append("")
        for w in self.workloads:
            if w.name not in an["table"]:
                continue
            row = an["table"][w.name]
            cmd = self.command(w)
            L.append(f"### {w.name}")
            L.append("")
            L.append(f"{w.what}. Models: {w.origin}. Command: `{' '.join(os.path.basename(x) if i == 0 else x for i, x in enumerate(cmd)) if isinstance(cmd, list) else cmd}`"
                     + (f" with {', '.join(f'{k}={v}' for k, v in w.env.items())}" if w.env else "") + ".")
            L.append("")
            tname = f"time ({w.time_key})" if w.time_key else "time (wall)"
            shown = tuple(w.metrics) + ("minor_faults",)
            head = (f"| contender | status | {tname} s | min-max | / {ref} | / best | peak RSS MiB | min-max | "
                    f"/ {ref} | / best |" + "".join(f" {m} |" for m in shown))
            L.append(head)
            L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(shown))
            rt = row["times"].get(ref)
            rm = row["rss"].get(ref)
            for a in names:
                cell = row["cells"][a]
                if not cell.ok:
                    L.append(f"| {a} | **{cell.status}** |" + " - |" * (8 + len(shown)))
                    continue
                t, m = cell.median("time_s"), cell.median("maxrss_kb")
                ts, ms = cell.span("time_s"), cell.span("maxrss_kb")
                best_t = " **1.00**" if row["time_winner"] == a else f" {fmt_ratio(t / row['best_time'])}"
                best_m = " **1.00**" if row["rss_winner"] == a else f" {fmt_ratio(m / row['best_rss'])}"
                L.append(f"| {a} | ok | {fmt_time(t)} | {fmt_time(ts[0])}-{fmt_time(ts[1])} | "
                         f"{fmt_ratio(t / rt) if rt else '-'} |{best_t} | {fmt_mib(m)} | "
                         f"{fmt_mib(ms[0])}-{fmt_mib(ms[1])} | {fmt_ratio(m / rm) if rm else '-'} |{best_m} |"
                         + "".join(f" {fmt_num(cell.median(k))} |" for k in shown))
            L.append("")
            if f"timeline-{w.name}" in charts:
                L.append(f"RSS over time, sampled every {TIMELINE_INTERVAL_S * 1000:.0f} ms during the first run "
                         f"of each contender (data: `timeline-{w.name}.dat`):")
                L.append("")
                L.append(f"![RSS over time: {w.name}](timeline-{w.name}.png)")
                L.append("")

        # Microbenchmarks.
        if self.micro:
            L.append("## Microbenchmarks (Google Benchmark)")
            L.append("")
            if "error" in self.micro:
                L.append(f"Not run: {self.micro['error']}.")
            else:
                L.append(f"Median ns per operation (per item for batch benchmarks) over {self.reps} run(s), "
                         f"--benchmark_min_time={self.micro['min_time']}. Not part of the geometric means above.")
                L.append("")
                cols = [a for a in names if a in avail and self.micro["status"].get(a) is None]
                L.append("| benchmark | " + " | ".join(cols) + " |")
                L.append("|---|" + "---:|" * len(cols))
                per = {a: [] for a in cols}
                for bname, vals in self.micro["ns"].items():
                    med = {a: statistics.median(vals[a]) for a in cols if vals.get(a)}
                    best = min(med.values()) if med else None
                    cells = []
                    for a in cols:
                        v = med.get(a)
                        cells.append("-" if v is None else (f"**{v:.1f}**" if v == best else f"{v:.1f}"))
                    L.append(f"| {bname} | " + " | ".join(cells) + " |")
                    if ref in med:
                        for a in cols:
                            if a in med:
                                per[a].append(med[a] / med[ref])
                if ref in cols:
                    L.append(f"| *geomean / {ref}* | " + " | ".join(fmt_ratio(geomean(per[a])) for a in cols) + " |")
                bad = {a: s for a, s in self.micro["status"].items()}
                if bad:
                    L.append("")
                    L.append("Not measured: " + ", ".join(f"{a} ({s})" for a, s in bad.items()) + ".")
            L.append("")

        if self.fastpath is not None:
            L.append("## Fast-path instruction counts (callgrind)")
            L.append("")
            L.append(fastpath_ir.markdown(self.fastpath))
            if any(isinstance(v, str) and "crash" in v for row in self.fastpath.get("results", {}).values()
                   for v in row.values()):
                L.append("A crash here can be valgrind's, not the allocator's: scudo, for one, aborts with "
                         "\"internal map or unmap failure\" because valgrind refuses its large address-space "
                         "reservation.")
                L.append("")
        return "\n".join(L) + "\n"

    def summary_text(self, an: dict) -> str:
        ref = an["ref"]
        avail = an["available"]
        out = [f"Summary ({self.mode}, {self.reps} run(s); geometric means over {len(an['complete'])} workloads "
               f"all contenders completed, relative to {ref}; lower is better)", ""]
        out.append(f"  {'contender':10s} {'time':>7s} {'RSS':>7s}   {'time/RSS pairwise (n)':>22s}   wins t/m  failed")
        for a in self.contenders_names():
            if a not in avail:
                out.append(f"  {a:10s} {'missing':>7s}")
                continue
            g, gr = an["geomean"][a], an["geomean"].get(ref, {})
            t = g["time"] / gr["time"] if g["time"] and gr.get("time") else None
            m = g["rss"] / gr["rss"] if g["rss"] and gr.get("rss") else None
            p = an["pairwise"][a]
            pw = f"{fmt_ratio(p['time'])}/{fmt_ratio(p['rss'])} ({p['n']})"
            out.append(f"  {a:10s} {fmt_ratio(t):>7s} {fmt_ratio(m):>7s}   {pw:>22s}   "
                       f"{an['wins_time'][a]:4d}/{an['wins_rss'][a]:<4d} {len(an['failures'][a]):4d}")
        out.append("")
        out.append("  Winners per workload (fastest / smallest peak RSS):")
        for n, row in an["table"].items():
            out.append(f"    {n:20s} {row['time_winner'] or '-':10s} {row['rss_winner'] or '-'}")
        fails = [(a, n, s) for a in self.contenders_names() for (n, s) in an["failures"][a] if s != "missing"]
        if fails:
            out.append("")
            out.append("  Failures:")
            for a, n, s in fails:
                out.append(f"    {n:20s} {a:10s} {s}")
        deg = self.degradation(an["table"])
        if deg:
            out.append("")
            out.append("  Degradation time(n8)/time(n4)/(size ratio): " +
                       ", ".join(f"{a} {fmt_ratio(v)}" for a, v in deg.items() if a in avail))
        return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sizes, 2 runs each (default)")
    mode.add_argument("--full", action="store_true", help="bigger sizes, 5 runs each")
    ap.add_argument("--only", help="comma-separated workload names or globs (see --list)")
    ap.add_argument("--alloc", help="comma-separated contenders, by name or as NAME=/path/to/lib.so "
                    "(default: all that are not optional)")
    ap.add_argument("--reps", type=int, help="runs per workload and contender (K)")
    ap.add_argument("--out", help="output directory (default: bench/results/<timestamp>)")
    ap.add_argument("--build-dir", default=os.path.join(REPO_DIR, "build"), help="where libxalloc.so is")
    ap.add_argument("--bin-dir", help="where the bench programs are (default: BUILD/bench/bin)")
    ap.add_argument("--threads", type=int, help="N for the workloads that scale with the CPU count")
    ap.add_argument("--timeout", type=float, help="per-run timeout in seconds (default 60 quick, 600 full)")
    ap.add_argument("--no-micro", action="store_true", help="skip the Google Benchmark microbenchmarks")
    ap.add_argument("--no-fastpath", action="store_true", help="skip the callgrind fast-path counts")
    ap.add_argument("--fastpath", action="store_true", help="only the callgrind fast-path counts")
    ap.add_argument("--no-timeline", action="store_true",
                    help="do not sample RSS over time (the timeline-*.png charts)")
    ap.add_argument("--list", action="store_true", help="list the workloads and contenders and exit")
    args = ap.parse_args()
    if args.reps is not None and args.reps < 1:
        ap.error("--reps must be at least 1")

    if args.list:
        r = Runner(args)
        for w in suite.WORKLOADS:
            print(f"{w.name:20s} {w.origin:32s} {w.what}")
        print(f"{MICRO:20s} {'Google Benchmark':32s} fast-path microbenchmarks")
        print()
        for c in r.contenders:
            lib = r.libs[c.name]
            print(f"{c.name:10s} {'(no preload)' if lib == '' else lib or 'MISSING'}")
        return 0

    Runner(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
