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
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fastpath_ir  # noqa: E402
import suite  # noqa: E402
from launcher import run_program  # noqa: E402
from report import ReportWriter  # noqa: E402
from run_results import (OK, Cell, classify, fmt_hms, fmt_mib, fmt_time, geomean,  # noqa: E402,F401
                     parse_metrics)

REPO_DIR = os.path.dirname(suite.BENCH_DIR)
MICRO = "microbench"
# Environment variables that tune an allocator: recorded in the report, so a
# result obtained with non-default settings says so.
TUNING_ENV = re.compile(r"^(MALLOC_|MIMALLOC_|JE_MALLOC_CONF|TCMALLOC_|SCUDO_|GLIBC_TUNABLES|XALLOC_|TBB_)")
KV_LINE = re.compile(r"^([a-z][a-z0-9_]*)=(.*)$")
TIMELINE_INTERVAL_S = 0.02
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
TERM = "set terminal pngcairo size {w},{h} font 'sans,10'"  # gnuplot's, for every chart


# --------------------------------------------------------------------------
# The suite runner
# --------------------------------------------------------------------------

class Runner(ReportWriter):
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
