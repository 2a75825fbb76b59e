#!/usr/bin/env python3
"""Print the data-driven parts of BENCHMARK.md from one run of bench/run.py.

usage: bench/benchmark_md.py RESULTS_DIR [--section NAME[,NAME...]] [--list]

RESULTS_DIR is the output directory of ONE run of bench/run.py
(bench/results/<timestamp>/). It must hold summary.csv; runs.csv (or
results.json) adds the programs' own metrics - the seed-000 degradation
figure among them - and results.json the machine, the versions, the
fast-path counts and the microbenchmarks. A part whose data the directory
does not hold says so instead of a table.

Sections, in the order BENCHMARK.md has them (all of them by default, each
after a `<!-- benchmark_md: NAME -->` line; with --section, only those
named, without the marker line):

  headline   the one-paragraph standing: geometric means, wins, workloads over the limits
  run        machine, C library, mode and rounds, each contender's library and version
  summary    per contender: geometric-mean time and peak RSS relative to xalloc, wins, failures
  workloads  per workload: xalloc's median time and peak RSS, each contender's ratios to them
  seeds      the seeds' own metrics, seed 000's degradation n8/n4 included
  losses     workloads where xalloc takes more than 1.15x the best other's time
             or more than 1.2x glibc's peak RSS
  fastpath   callgrind instructions per malloc+free (when the run counted them)
  micro      the Google Benchmark microbenchmarks' geometric means (when the run has them)
  readme     the short table for README.md's "How it compares"

Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_results import fmt_time  # noqa: E402  (times as the runner prints them)

REF = "xalloc"
TIME_LIMIT = 1.15     # xalloc's time over the best other's: a loss past this
RSS_LIMIT = 1.2       # xalloc's peak RSS over glibc's: a loss past this
# Workloads whose speed (and live set) is set by how their threads happen to
# share the cores on a small machine: the "steady" figures leave them out.
TWO_SPEED = ("producer-consumer", "rptest", "mstress", "xmalloc-test", "sh8bench")
DEGRADATION = ("realworld-n4", "realworld-n8", "process_s", "bytes")  # as bench/suite.py
OK = "ok"
SECTIONS = ("headline", "run", "summary", "workloads", "seeds", "losses", "fastpath", "micro", "readme")


# --------------------------------------------------------------------------
# Formatting (times as bench/run.py prints them)
# --------------------------------------------------------------------------

def fmt_mib(kb: float | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


def fmt_sig(v: float | None) -> str:
    """Three significant digits, no exponent for the sizes seen here."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_rate(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e3:
        return f"{v / 1e3:.0f} k"
    return f"{v:.0f}"


def over(ratio: float | None, limit: float) -> bool:
    """Past the limit as the tables print it (two decimals), so that no
    ratio printed as 1.20 is called more than 1.2."""
    return ratio is not None and round(ratio, 2) > limit


def bold(text: str, on: bool) -> str:
    return f"**{text}**" if on else text


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------
# The run's data
# --------------------------------------------------------------------------

class Run:
    """One results directory: medians from summary.csv, per-run metrics
    from results.json (or runs.csv), environment from results.json."""

    def __init__(self, path: str):
        self.path = path
        summary = os.path.join(path, "summary.csv")
        jpath = os.path.join(path, "results.json")
        if not os.path.isfile(summary) and not os.path.isfile(jpath):
            sys.exit(f"benchmark_md.py: neither summary.csv nor results.json in {path} "
                     "(give the directory of one bench/run.py run)")
        self.json: dict = {}
        if os.path.isfile(jpath):
            with open(jpath) as f:
                self.json = json.load(f)

        # cells[(workload, contender)] = {"status", "time", "rss"}
        self.cells: dict[tuple[str, str], dict] = {}
        self.workloads: list[str] = []
        self.contenders: list[str] = []
        if os.path.isfile(summary):  # a --fastpath run has none
            with open(summary, newline="") as f:
                for row in csv.DictReader(f):
                    w, c = row["workload"], row["contender"]
                    if w not in self.workloads:
                        self.workloads.append(w)
                    if c not in self.contenders:
                        self.contenders.append(c)
                    self.cells[(w, c)] = {"status": row["status"], "time": number(row["time_median_s"]),
                                          "rss": number(row["rss_median_kb"])}
            if REF not in self.contenders:
                sys.exit(f"benchmark_md.py: {REF} is not in {summary}; every table here is relative to it")
        else:
            self.contenders = list(self.json.get("contenders", {}))
        # A contender whose library was not found is "missing" in every row.
        self.available = [c for c in self.contenders
                          if any(self.cells.get((w, c), {}).get("status") != "missing" for w in self.workloads)]
        if self.workloads and REF not in self.available:
            sys.exit(f"benchmark_md.py: {REF} is missing in every row of {summary} (not built?); "
                     "every table here is relative to it")

        self.runs: list[dict] | None = None
        if self.json.get("runs"):
            self.runs = self.json["runs"]
        elif os.path.isfile(os.path.join(path, "runs.csv")):
            self.runs = []
            with open(os.path.join(path, "runs.csv"), newline="") as f:
                for row in csv.DictReader(f):
                    try:
                        metrics = json.loads(row.get("metrics") or "{}")
                    except ValueError:
                        metrics = {}
                    self.runs.append({"workload": row["workload"], "contender": row["contender"],
                                      "status": row["status"], "metrics": metrics})

        self.table = {}
        for w in self.workloads:
            ok = [c for c in self.available if self.ok(w, c)]
            times = {c: self.cells[(w, c)]["time"] for c in ok}
            rss = {c: self.cells[(w, c)]["rss"] for c in ok}
            self.table[w] = {
                "times": times, "rss": rss,
                # The first of equal medians wins, in the run's contender order (as run.py).
                "time_winner": min(times, key=times.get) if times else None,
                "rss_winner": min(rss, key=rss.get) if rss else None,
            }
        self.complete = [w for w in self.workloads if all(self.ok(w, c) for c in self.available)]

    def ok(self, w: str, c: str) -> bool:
        cell = self.cells.get((w, c))
        return bool(cell) and cell["status"] == OK and cell["time"] is not None and cell["rss"] is not None

    def status(self, w: str, c: str) -> str:
        cell = self.cells.get((w, c))
        return cell["status"] if cell else "not run"

    def geomeans(self, workloads: list[str]) -> dict[str, tuple[float | None, float | None]]:
        """Each contender's geometric mean of time and peak RSS over
        `workloads`, relative to xalloc's over the same."""
        out = {}
        ref_t = geomean([self.table[w]["times"][REF] for w in workloads])
        ref_m = geomean([self.table[w]["rss"][REF] for w in workloads])
        for c in self.available:
            t = geomean([self.table[w]["times"][c] for w in workloads])
            m = geomean([self.table[w]["rss"][c] for w in workloads])
            out[c] = (t / ref_t if t and ref_t else None, m / ref_m if m and ref_m else None)
        return out

    def failures(self, c: str) -> list[tuple[str, str]]:
        return [(w, self.status(w, c)) for w in self.workloads
                if not self.ok(w, c) and self.status(w, c) != "missing"]

    def metric(self, w: str, c: str, key: str) -> float | None:
        """Median of a program's own metric over the cell's successful runs."""
        if self.runs is None or not self.ok(w, c):
            return None
        vals = [float(r["metrics"][key]) for r in self.runs
                if r.get("workload") == w and r.get("contender") == c and r.get("status") == OK
                and isinstance(r.get("metrics", {}).get(key), (int, float))]
        return statistics.median(vals) if vals else None

    def degradation(self, c: str) -> float | None:
        n4, n8, tkey, skey = DEGRADATION
        t4, t8 = self.metric(n4, c, tkey), self.metric(n8, c, tkey)
        s4, s8 = self.metric(n4, c, skey), self.metric(n8, c, skey)
        if None in (t4, t8, s4, s8) or not (t4 and s4 and s8):
            return None
        return (t8 / t4) / (s8 / s4)

    def others(self) -> list[str]:
        """The contenders xalloc is compared with: not xalloc nor a build or setting of it."""
        return [c for c in self.available if c != REF and not c.startswith(REF + "-")]

    def best_other(self, w: str) -> tuple[str | None, float | None]:
        times = {c: t for c, t in self.table[w]["times"].items() if c in self.others()}
        if not times:
            return None, None
        c = min(times, key=times.get)
        return c, times[c]

    def losses(self) -> list[dict]:
        out = []
        for w in self.workloads:
            if not self.ok(w, REF):
                continue
            who, best = self.best_other(w)
            t = self.table[w]["times"][REF] / best if best else None
            g = self.table[w]["rss"].get("glibc")
            m = self.table[w]["rss"][REF] / g if g else None
            if over(t, TIME_LIMIT) or over(m, RSS_LIMIT):
                out.append({"workload": w, "time": t, "who": who, "rss": m})
        out.sort(key=lambda x: -(x["time"] or 0))
        return out

    def by_time(self) -> list[str]:
        """Available contenders, xalloc first, then by geometric-mean time."""
        gm = self.geomeans(self.complete) if self.complete else {}
        rest = [c for c in self.available if c != REF]
        rest.sort(key=lambda c: (gm.get(c, (None, None))[0] is None, gm.get(c, (math.inf, None))[0] or math.inf))
        return [REF] + rest


# --------------------------------------------------------------------------
# The sections
# --------------------------------------------------------------------------

NO_WORKLOADS = "No workload results in this directory (no summary.csv: a --fastpath run?)."


def section_headline(run: Run) -> list[str]:
    if not run.workloads:
        return [NO_WORKLOADS]
    if not run.complete:
        return ["No workload was completed by every contender; no geometric means."]
    gm = run.geomeans(run.complete)
    order = run.by_time()
    others = [c for c in order if c != REF]
    by_rss = sorted(others, key=lambda c: gm[c][1] or math.inf)
    times = ", ".join(f"{c} {fmt_ratio(gm[c][0])}x" for c in others)
    rss = ", ".join(f"{c} {fmt_ratio(gm[c][1])}x" for c in by_rss)
    wins = sum(1 for w in run.workloads if run.table[w]["time_winner"] == REF)
    slow = [x for x in run.losses() if over(x["time"], TIME_LIMIT)]
    big = [x for x in run.losses() if over(x["rss"], RSS_LIMIT)]
    text = (f"**In one line:** over the {len(run.complete)} workloads every contender completed, the "
            f"other allocators' geometric-mean time is {times} xalloc's, and their geometric-mean peak RSS "
            f"{rss} xalloc's. xalloc is the fastest on {wins} of {len(run.workloads)} workloads")
    if slow:
        text += (f" and more than {TIME_LIMIT}x the best other's time on {len(slow)}: " +
                 ", ".join(f"{x['workload']} {fmt_ratio(x['time'])}x {x['who']}" for x in slow))
    else:
        text += f" and within {TIME_LIMIT}x the best other's time on every one"
    if "glibc" in run.available:
        if big:
            text += (f"; its peak RSS is more than {RSS_LIMIT}x glibc's on {len(big)}: " +
                     ", ".join(f"{x['workload']} {fmt_ratio(x['rss'])}x" for x in big))
        else:
            text += f"; its peak RSS is within {RSS_LIMIT}x glibc's on every one"
    return [text + "."]


def section_run(run: Run) -> list[str]:
    j = run.json
    env = j.get("environment")
    if not env:
        return [f"No results.json in {run.path}: machine and versions not recorded."]
    L = ["| | |", "|---|---|"]
    L.append(f"| date | {env.get('date', '-')}, repository at {env.get('git', '-')} |")
    L.append(f"| machine | {env.get('cpu', '-')}, {env.get('cpus', '-')} CPUs, {env.get('memory', '-')}, "
             f"Linux {env.get('kernel', '-')}, THP `{env.get('thp', '-')}` |")
    L.append(f"| C library | {env.get('glibc', '-')} |")
    if env.get("ruby"):
        L.append(f"| Ruby | {env['ruby'].split(' (')[0]} |")
    reps = j.get("reps", "-")
    L.append(f"| mode | {j.get('mode', '-')}: {reps} round{'' if reps == 1 else 's'} in rotated order, medians; "
             f"N = {j.get('threads', '-')} threads where a workload takes N; per-run timeout "
             f"{j.get('timeout_s', 0):.0f} s |")
    if env.get("tuning_env"):
        L.append("| tuning set | " + ", ".join(f"`{k}={v}`" for k, v in sorted(env["tuning_env"].items())) + " |")
    L.append("")
    L.append("| contender | library (`LD_PRELOAD`) | package version |")
    L.append("|---|---|---|")
    versions = env.get("package_versions", {})
    for c, info in j.get("contenders", {}).items():
        lib = info.get("library")
        where = "none" if lib == "" else f"`{os.path.basename(lib)}`" if lib else "**missing**"
        if c == "glibc-arena2":
            where += ", `MALLOC_ARENA_MAX=2`"
        ver = versions.get(c) or ("this tree" if c.startswith(REF) else "-")
        L.append(f"| {c} | {where} | {ver} |")
    return L


def section_summary(run: Run) -> list[str]:
    if not run.workloads:
        return [NO_WORKLOADS]
    if not run.complete:
        return ["No workload was completed by every contender; no geometric means."]
    gm = run.geomeans(run.complete)
    L = [f"Geometric means over the {len(run.complete)} workloads every contender completed, relative to "
         "xalloc (above 1: slower or bigger than xalloc); \"fastest on\" and \"smallest RSS on\" count the "
         "workloads where the contender had the lowest median.", "",
         "| contender | time | peak RSS | fastest on | smallest RSS on | failed |",
         "|---|---:|---:|---:|---:|---:|"]
    for c in run.by_time():
        t, m = gm[c]
        wt = sum(1 for w in run.workloads if run.table[w]["time_winner"] == c)
        wm = sum(1 for w in run.workloads if run.table[w]["rss_winner"] == c)
        name = bold(c, c == REF)
        L.append(f"| {name} | {bold(fmt_ratio(t), c == REF)} | {bold(fmt_ratio(m), c == REF)} | {wt} | {wm} | "
                 f"{len(run.failures(c))} |")
    for c in run.contenders:
        if c not in run.available:
            L.append(f"| {c} | missing | missing | - | - | - |")
    steady = [w for w in run.complete if w not in TWO_SPEED]
    left = [w for w in run.complete if w in TWO_SPEED]
    if left and steady:
        gs = run.geomeans(steady)
        others = [c for c in run.by_time() if c != REF]
        L.append("")
        L.append(f"Over the {len(steady)} workloads that run at one speed (leaving out {', '.join(left)}, whose "
                 "speed and live set are set by how their threads happen to share the cores): time " +
                 ", ".join(f"{c} {fmt_ratio(gs[c][0])}" for c in others) + "; peak RSS " +
                 ", ".join(f"{c} {fmt_ratio(gs[c][1])}" for c in others) + ".")
    excluded = [w for w in run.workloads if w not in run.complete]
    fails = [(c, w, s) for c in run.available for (w, s) in run.failures(c)]
    if excluded or fails:
        L.append("")
        if excluded:
            L.append("Left out of the geometric means (some contender did not complete them): " +
                     ", ".join(excluded) + ".")
        if fails:
            L.append("Failed runs: " + "; ".join(f"{w} under {c}: {s}" for c, w, s in fails) + ".")
    return L


def section_workloads(run: Run) -> list[str]:
    if not run.workloads:
        return [NO_WORKLOADS]
    cols = [c for c in run.available if c != REF]
    L = ["| workload | xalloc time s | xalloc RSS MiB | " + " | ".join(cols) + " |",
         "|---|---:|---:|" + "---:|" * len(cols)]
    for w in run.workloads:
        row = run.table[w]
        if not run.ok(w, REF):
            L.append(f"| {w} | {run.status(w, REF)} | - | " + " | ".join(
                run.status(w, c) if not run.ok(w, c) else
                f"{fmt_time(row['times'][c])} s / {fmt_mib(row['rss'][c])} MiB" for c in cols) + " |")
            continue
        xt, xm = row["times"][REF], row["rss"][REF]
        cells = [bold(fmt_time(xt), row["time_winner"] == REF), bold(fmt_mib(xm), row["rss_winner"] == REF)]
        for c in cols:
            if not run.ok(w, c):
                cells.append(run.status(w, c))
                continue
            cells.append(f"{bold(fmt_ratio(row['times'][c] / xt), row['time_winner'] == c)} / "
                         f"{bold(fmt_ratio(row['rss'][c] / xm), row['rss_winner'] == c)}")
        L.append(f"| {w} | " + " | ".join(cells) + " |")
    return L


# (seed, workload, label, measures): each measure (source, better, format) is
# a part of the cell, parts joined by " / ". source "time" / "rss" comes from
# summary.csv, any other is a key the program prints; better "low" / "high".
S = ("time", "low", fmt_time)
RSS = ("rss", "low", fmt_mib)
SEED_ROWS = [
    ("000", "realworld-n4", "realworld-n4: task phase s / peak RSS MiB", (("process_s", "low", fmt_time), RSS)),
    ("000", "realworld-n8", "realworld-n8: task phase s / peak RSS MiB", (("process_s", "low", fmt_time), RSS)),
    ("001", "string-vector", "string-vector: time s / peak RSS MiB", (S, RSS)),
    ("002", "aww-128", "aww-128: ns per iteration", (("ns_per_iter", "low", fmt_sig),)),
    ("002", "fh-10", "fh-10: ns per free", (("ns_per_free", "low", fmt_sig),)),
    ("002", "fh-20", "fh-20: ns per free", (("ns_per_free", "low", fmt_sig),)),
    ("002", "fh-40", "fh-40: ns per free", (("ns_per_free", "low", fmt_sig),)),
    ("002", "fh-100", "fh-100: ns per free", (("ns_per_free", "low", fmt_sig),)),
    ("003", "rbstress-ruby-1", "Ruby, 1 thread: duration s / peak RSS MiB", (("duration_s", "low", fmt_time), RSS)),
    ("003", "rbstress-ruby-8", "Ruby, 8 threads: duration s / peak RSS MiB", (("duration_s", "low", fmt_time), RSS)),
    ("004", "packet-churn", "packet-churn: packets per s / p99 ns",
     (("packets_per_s", "high", fmt_rate), ("p99_ns", "low", fmt_sig))),
    ("004", "multithread-churn", "multithread-churn: operations per s", (("ops_per_s", "high", fmt_rate),)),
    ("004", "tail-latency", "tail-latency: p99 / p99.99 ns", (("p99_ns", "low", fmt_sig), ("p99_99_ns", "low", fmt_sig))),
    ("004", "fragmentation", "fragmentation: peak RSS MiB / RSS MiB 1 s after 90% is freed",
     (RSS, ("rss_after_free_kb", "low", fmt_mib))),
    ("004", "producer-consumer", "producer-consumer: blocks per s", (("blocks_per_s", "high", fmt_rate),)),
    ("suite", "free-1g", "free-1g: RSS MiB after the frees / 1 s later / after `malloc_trim(0)`",
     (("rss_after_free_mb", "low", fmt_sig), ("rss_after_1s_mb", "low", fmt_sig),
      ("rss_after_trim_mb", "low", fmt_sig))),
]


def section_seeds(run: Run) -> list[str]:
    if not run.workloads:
        return [NO_WORKLOADS]
    cols = run.available
    n4, n8, tkey, skey = DEGRADATION
    rows = []
    degs = {c: run.degradation(c) for c in cols} if n4 in run.workloads and n8 in run.workloads else {}
    if any(v is not None for v in degs.values()):
        rows.append("| 000 | **degradation n8/n4** | " + " | ".join(fmt_ratio(degs[c]) for c in cols) + " |")
    for seed, w, label, measures in SEED_ROWS:
        if w not in run.workloads:
            continue
        parts = []  # per measure: {contender: value}, or None when no contender has it
        for src, better, fmt in measures:
            if src in ("time", "rss"):
                vals = {c: (run.table[w]["times"] if src == "time" else run.table[w]["rss"]).get(c) for c in cols}
            else:
                vals = {c: run.metric(w, c, src) for c in cols}
            got = [v for v in vals.values() if v is not None]
            parts.append(None if not got else (vals, (min if better == "low" else max)(got), fmt))
        if all(p is None for p in parts):
            continue
        keep = [i for i, p in enumerate(parts) if p is not None]
        names = label.split(": ", 1)
        if len(keep) < len(parts):  # only the measures this run has, named accordingly
            units = names[1].split(" / ")
            if len(units) == len(parts):
                names[1] = " / ".join(units[i] for i in keep)
        cells = []
        for c in cols:
            if not run.ok(w, c):
                cells.append(run.status(w, c))
                continue
            cell = []
            for i in keep:
                vals, best, fmt = parts[i]
                v = vals[c]
                cell.append("-" if v is None else bold(fmt(v), v == best))
            cells.append(" / ".join(cell))
        rows.append(f"| {seed} | {': '.join(names)} | " + " | ".join(cells) + " |")
    if not rows:
        return ["None of the seeds' workloads is in this run."]
    if any(v is not None for v in degs.values()):
        intro = (f"Seed 000's **degradation** is time(n8) / time(n4) / (size(n8) / size(n4)) of the realworld "
                 f"workload, from the median task-phase time (`{tkey}`) and input size (`{skey}`): 1.00 is "
                 "ideal, above 1 the allocator slows down with more parallel workers. ")
    elif n4 in run.workloads and n8 in run.workloads:
        intro = (f"Seed 000's degradation figure (n8/n4) is not in this run's recorded data: it needs the "
                 f"programs' own `{tkey}` and `{skey}`, which runs.csv and results.json keep and summary.csv "
                 "does not. ")
    else:
        intro = ""
    intro += ("Medians over the run's rounds; bold: the best of each measure (for rates the highest, for the "
              "rest the lowest).")
    L = [intro, "", "| seed | measure | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)] + rows
    if run.runs is None:
        L += ["", "(Time and peak RSS only: the programs' own measures are kept in runs.csv and results.json, "
                  "which this run's recorded data does not include.)"]
    return L


def section_losses(run: Run) -> list[str]:
    if not run.workloads:
        return [NO_WORKLOADS]
    losses = run.losses()
    has_glibc = "glibc" in run.available
    crit = f"more than {TIME_LIMIT}x the best other contender's median time" + (
        f", or more than {RSS_LIMIT}x glibc's peak RSS" if has_glibc else " (glibc not in this run: no RSS limit)")
    if not losses:
        return [f"No workload where xalloc takes {crit}."]
    L = [f"Workloads where xalloc takes {crit} (bold: past the limit):", "",
         "| workload | xalloc time / best other's | best other | xalloc peak RSS / glibc's |",
         "|---|---:|---|---:|"]
    for x in losses:
        t = bold(fmt_ratio(x["time"]), over(x["time"], TIME_LIMIT))
        m = bold(fmt_ratio(x["rss"]), over(x["rss"], RSS_LIMIT))
        L.append(f"| {x['workload']} | {t} | {x['who'] or '-'} | {m} |")
    return L


def section_fastpath(run: Run) -> list[str]:
    fp = run.json.get("fastpath")
    if not fp:
        return ["No fast-path counts in this run (bench/run.py counts them unless given --no-fastpath or "
                "--only; valgrind must be installed)."]
    if "error" in fp:
        return [f"Fast-path counts not measured: {fp['error']}."]
    loops = ("pair", "batch", "mixed")
    results = fp.get("results", {})
    best = {}
    for loop in loops:
        vals = [row[loop] for row in results.values() if isinstance(row.get(loop), (int, float))]
        best[loop] = min(vals) if vals else None
    base = fp.get("baseline")
    L = ["Instructions (callgrind Ir) per malloc+free pair, steady state (the difference of two loop lengths, "
         f"{fp['lengths'][0]:,} and {fp['lengths'][1]:,} pairs); each count includes the benchmark loop's own "
         + (f"{base:.1f} instructions." if isinstance(base, (int, float)) else "instructions."), "",
         "| contender | pair: malloc(32)+free | batch: 64 x 48 B | mixed: 64 x 16..1000 B |",
         "|---|---:|---:|---:|"]
    notes = []
    for c, row in results.items():
        cells = []
        for loop in loops:
            v = row.get(loop)
            if isinstance(v, (int, float)):
                cells.append(bold(f"{v:.1f}", v == best[loop]))
            else:
                cells.append("-")
                if v and f"{c}: {v}" not in notes:
                    notes.append(f"{c}: {v}")
        L.append(f"| {bold(c, c == REF)} | " + " | ".join(cells) + " |")
    if notes:
        L.append("")
        L.append("Not counted: " + "; ".join(f"`{n[:120]}`" for n in notes) + ".")
    return L


def section_micro(run: Run) -> list[str]:
    m = run.json.get("microbench")
    if not m or "error" in m or not m.get("ns"):
        why = m.get("error") if isinstance(m, dict) and m.get("error") else "not run (--no-micro or --only)"
        return [f"No microbenchmarks in this run: {why}."]
    cols = [c for c in run.available if c not in m.get("status", {}) and any(c in v for v in m["ns"].values())]
    per = {c: [] for c in cols}
    wins = {c: 0 for c in cols}
    for name, vals in m["ns"].items():
        med = {c: statistics.median(vals[c]) for c in cols if vals.get(c)}
        if REF not in med:
            continue
        for c, v in med.items():
            per[c].append(v / med[REF])
        wins[min(med, key=med.get)] += 1
    n = len(per.get(REF, []))
    L = [f"Google Benchmark microbenchmarks (`bench/micro/microbench.cpp`, {n} cases; each case is in the run's "
         "report.md), geometric mean of ns per operation relative to xalloc: " +
         ", ".join(f"{c} {fmt_ratio(geomean(per[c]))}" for c in cols if c != REF) +
         "; the fastest on: " + ", ".join(f"{c} {wins[c]}" for c in cols) + " cases."]
    bad = m.get("status", {})
    if bad:
        L.append("Not measured: " + ", ".join(f"{c} ({s})" for c, s in bad.items()) + ".")
    return L


def section_readme(run: Run) -> list[str]:
    if not run.workloads:
        return [NO_WORKLOADS]
    if not run.complete:
        return ["No workload was completed by every contender; no geometric means."]
    gm = run.geomeans(run.complete)
    L = ["| contender | time (geomean, / xalloc) | peak RSS (geomean, / xalloc) |", "|---|---:|---:|"]
    for c in run.by_time():
        t, m = gm[c]
        L.append(f"| {bold(c, c == REF)} | {bold(fmt_ratio(t), c == REF)} | {bold(fmt_ratio(m), c == REF)} |")
    return L


BUILDERS = {"headline": section_headline, "run": section_run, "summary": section_summary,
            "workloads": section_workloads, "seeds": section_seeds, "losses": section_losses,
            "fastpath": section_fastpath, "micro": section_micro, "readme": section_readme}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", help="the results directory of one bench/run.py run")
    ap.add_argument("--section", help="comma-separated sections to print (default: all, with marker lines)")
    ap.add_argument("--list", action="store_true", help="list the sections and exit")
    args = ap.parse_args()
    if args.list:
        print("\n".join(SECTIONS))
        return 0
    if not args.results:
        ap.error("give the results directory of one bench/run.py run")
    wanted = [s for s in (args.section or "").split(",") if s]
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s): {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    run = Run(args.results)
    out = []
    for name in wanted or SECTIONS:
        if not wanted:
            out.append(f"<!-- benchmark_md: {name} -->")
        out += BUILDERS[name](run)
        out.append("")
    sys.stdout.write("\n".join(out[:-1]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
