#!/usr/bin/env python3
"""Thread scaling: the suite's workloads that take their thread count from
the machine, at several thread counts, and one report of how each
contender's time changes with them.

usage: bench/scaling.py [--threads 1,4,8,16] [--quick | --full] [--reps K]
                        [--alloc NAME,...] [--only WORKLOAD,...]
                        [--timeout SECONDS] [--out DIR] [--build-dir DIR]
                        [--bin-dir DIR]
       bench/scaling.py --report DIR

For each N in --threads (default: 1, 2, 4, ... up to the CPU count), runs
bench/run.py --threads N over the workloads whose arguments say {n} or
{n2} (larson, xmalloc-test, mstress, rptest, glibc-thread, alloc-testN,
sh6bench, ...; --only picks others), without the microbenchmarks, the
fast-path counts and the RSS timelines. Each N's run goes to DIR/nN/ as
bench/run.py writes it (runs.csv as it goes, summary.csv at its end).

Then, and with --report DIR on its own for the runs already in DIR (a
run cut short leaves its runs.csv, whose medians are used), it writes
DIR/scaling.csv (medians per thread count, workload and contender) and
DIR/scaling.md:
  * per N, the geometric mean of each contender's time relative to
    xalloc's, over the workloads every contender completed at that N;
  * per workload and N, xalloc's time over the best other contender's;
  * per workload, each contender's time at N over its time at the
    smallest N. Whether that should stay at 1.00 (the work per thread
    is fixed: larson, xmalloc-test, glibc-thread, alloc-testN, sh6bench,
    ...) or fall as 1/N (a fixed total shared out: cache-scratch,
    cache-thrash) is the workload's: its program's opening comment says.

A per-run --timeout keeps one contender that stalls on one workload from
eating the time of the rest (gperftools' tcmalloc ran xmalloc-test for
more than a minute at 8 and 16 threads). Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
import suite  # noqa: E402

DEFAULT_ALLOC = "xalloc,glibc,mimalloc,jemalloc,tcmalloc"


def scaled_workloads() -> list[str]:
    """The workloads whose thread count comes from --threads."""
    return [w.name for w in suite.WORKLOADS
            if any("{n}" in a or "{n2}" in a for a in w.quick + w.full)]


def default_threads() -> list[int]:
    ncpu = os.cpu_count() or 2
    counts, n = [], 1
    while n < ncpu:
        counts.append(n)
        n *= 2
    return counts + [ncpu]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown processor"


def run_one(args: argparse.Namespace, n: int, workloads: str) -> int:
    cmd = [sys.executable, os.path.join(BENCH_DIR, "run.py"), "--full" if args.full else "--quick",
           "--threads", str(n), "--no-micro", "--no-fastpath", "--no-timeline",
           "--alloc", args.alloc, "--only", workloads, "--out", os.path.join(args.out, f"n{n}")]
    for flag, value in (("--reps", args.reps), ("--timeout", args.timeout), ("--build-dir", args.build_dir),
                        ("--bin-dir", args.bin_dir)):
        if value is not None:
            cmd += [flag, str(value)]
    print(f"== {n} thread(s): {' '.join(cmd)}", flush=True)
    return subprocess.call(cmd)


# --- the report -----------------------------------------------------------------


def load_medians(out: str) -> dict[tuple[int, str, str], dict]:
    """(threads, workload, contender) -> {"time": median s or None, "rss": KiB, "status": ...}
    from each DIR/nN/runs.csv."""
    cells: dict[tuple[int, str, str], dict] = {}
    for entry in sorted(os.listdir(out)):
        path = os.path.join(out, entry, "runs.csv")
        if not (entry.startswith("n") and entry[1:].isdigit() and os.path.isfile(path)):
            continue
        n = int(entry[1:])
        runs: dict[tuple[str, str], list[dict]] = {}
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                runs.setdefault((row["workload"], row["contender"]), []).append(row)
        for (workload, contender), rows in runs.items():
            ok = [r for r in rows if r["status"] == "ok"]
            cells[(n, workload, contender)] = {
                "time": statistics.median(float(r["time_s"]) for r in ok) if ok else None,
                "rss": statistics.median(float(r["maxrss_kb"]) for r in ok) if ok else None,
                "runs_ok": len(ok),
                "runs": len(rows),
                "status": "ok" if ok else rows[0]["status"],
            }
    return cells


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def write_report(out: str) -> str:
    cells = load_medians(out)
    if not cells:
        raise SystemExit(f"no runs found under {out}/n*/runs.csv")
    counts = sorted({n for n, _, _ in cells})
    workloads = [w.name for w in suite.WORKLOADS if any(k[1] == w.name for k in cells)]
    contenders = list(dict.fromkeys(c for _, _, c in cells))
    others = [c for c in contenders if c != "xalloc"]

    def time(n: int, w: str, c: str) -> float | None:
        cell = cells.get((n, w, c))
        return cell["time"] if cell else None

    with open(os.path.join(out, "scaling.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["threads", "workload", "contender", "status", "runs_ok", "runs", "time_median_s",
                         "rss_median_kb"])
        for n in counts:
            for w in workloads:
                for c in contenders:
                    cell = cells.get((n, w, c))
                    if cell:
                        writer.writerow([n, w, c, cell["status"], cell["runs_ok"], cell["runs"],
                                         cell["time"] if cell["time"] is not None else "",
                                         cell["rss"] if cell["rss"] is not None else ""])

    machine_file = os.path.join(out, "machine.txt")
    machine = open(machine_file).read().strip() if os.path.isfile(machine_file) else "machine not recorded"
    lines = ["# Thread scaling", "", f"Machine: {machine}.", "",
             "Medians of each thread count's runs (`n<N>/runs.csv`); times in seconds.", "",
             "## Geometric mean of time relative to xalloc (above 1: slower than xalloc)", "",
             "| threads | " + " | ".join(others) + " | workloads |",
             "|---:|" + "---:|" * len(others) + "---|"]
    for n in counts:
        complete = [w for w in workloads if all(time(n, w, c) for c in contenders)]
        if not complete or "xalloc" not in contenders:
            continue
        means = [geomean([time(n, w, c) / time(n, w, "xalloc") for w in complete]) for c in others]
        missing = [w for w in workloads if any(k[0] == n and k[1] == w for k in cells) and w not in complete]
        note = f"{len(complete)}" + (f" (not {', '.join(missing)})" if missing else "")
        lines.append(f"| {n} | " + " | ".join(f"{m:.2f}" for m in means) + f" | {note} |")

    lines += ["", "## xalloc's time over the best other contender's", "",
              "| workload | " + " | ".join(f"N={n}" for n in counts) + " |",
              "|---|" + "---:|" * len(counts)]
    for w in workloads:
        row = []
        for n in counts:
            mine = time(n, w, "xalloc")
            rivals = [(time(n, w, c), c) for c in others if time(n, w, c)]
            row.append(f"{mine / min(rivals)[0]:.2f} {min(rivals)[1]}" if mine and rivals else "-")
        lines.append(f"| {w} | " + " | ".join(row) + " |")

    base = counts[0]
    lines += ["", f"## Time at N threads over time at {base}", "",
              "| workload | contender | " + " | ".join(str(n) for n in counts) + " |",
              "|---|---|" + "---:|" * len(counts)]
    def growth(n: int, w: str, c: str) -> str:
        cell = cells.get((n, w, c))
        if cell is None:
            return "-"
        if cell["time"] is None:
            return cell["status"]  # timeout, crash, ...
        first = time(base, w, c)
        return f"{cell['time'] / first:.2f}" if first else "-"

    for w in workloads:
        if sum(1 for n in counts if any((n, w, c) in cells for c in contenders)) < 2:
            continue  # run at one thread count only
        for c in contenders:
            lines.append(f"| {w} | {c} | " + " | ".join(growth(n, w, c) for n in counts) + " |")
    report = "\n".join(lines) + "\n"
    with open(os.path.join(out, "scaling.md"), "w") as f:
        f.write(report)
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", help="comma-separated thread counts (default: 1, 2, 4, ... up to the CPU count)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes (default)")
    size.add_argument("--full", action="store_true", help="bigger sizes")
    ap.add_argument("--reps", type=int, default=3, help="runs per workload and contender at each N (default 3)")
    ap.add_argument("--alloc", default=DEFAULT_ALLOC, help=f"contenders (default {DEFAULT_ALLOC})")
    ap.add_argument("--only", help="workloads (default: those that take their thread count from --threads)")
    ap.add_argument("--timeout", type=float, help="per-run timeout in seconds (bench/run.py's default otherwise)")
    ap.add_argument("--out", help="output directory (default bench/results/scaling-<pid>)")
    ap.add_argument("--build-dir", help="where libxalloc.so is (bench/run.py's default otherwise)")
    ap.add_argument("--bin-dir", help="where the bench programs are")
    ap.add_argument("--report", metavar="DIR", help="only write the report of the runs in DIR")
    args = ap.parse_args()

    if args.report:
        print(write_report(args.report), end="")
        return 0
    try:
        counts = [int(n) for n in args.threads.split(",")] if args.threads else default_threads()
    except ValueError:
        ap.error("--threads takes comma-separated numbers")
    if not counts or min(counts) < 1:
        ap.error("--threads takes positive numbers")
    args.out = args.out or os.path.join(BENCH_DIR, "results", f"scaling-{os.getpid()}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "machine.txt"), "w") as f:
        f.write(f"{os.cpu_count()} CPUs, {cpu_model()}, Linux {os.uname().release}\n")
    workloads = args.only or ",".join(scaled_workloads())
    failed = [n for n in counts if run_one(args, n, workloads) != 0]
    print(write_report(args.out), end="")
    print(f"report: {os.path.join(args.out, 'scaling.md')}")
    if failed:
        print(f"bench/run.py failed at {', '.join(map(str, failed))} thread(s)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
