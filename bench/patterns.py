#!/usr/bin/env python3
"""Times the allocation patterns of bench/patterns/patterns.c under each
contender (LD_PRELOAD) and prints a table of medians.

Each pattern is a small loop where some allocator was found far behind the
others: a buffer asked for at two lengths in turn, a large block through the
shared span allocator, calloc of a big table of which few pages are touched,
aligned small blocks, realloc one byte at a time, buffers handed from one
thread to another, a pool of threads that each use a buffer (or small blocks)
once and idle, threads that use every size once and then a few. The suite's workloads (run.py) have none of these.

  python3 bench/patterns.py [--rounds 5] [--alloc xalloc,glibc,mimalloc]
                            [--only handoff,realloc-byte] [--build-dir build]
                            [--bin-dir build/bench/bin] [--base-lib PATH]

--base-lib adds a column for another build of libxalloc.so (an older commit),
for a before/after. Rounds alternate the contenders' order. The time is the
loop's own (time_s), not the process's; every run checks its blocks' contents.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATTERNS = ["two-lengths", "span-1mib", "calloc-sparse", "calloc-full", "memalign-64", "realloc-byte", "handoff",
            "idle-pool", "idle-small", "size-shift"]


def run_once(bin_dir: str, pattern: str, preload: str, report: str) -> tuple[float, int, int | None]:
    """The loop's time, the run's peak RSS in KiB and, where the pattern
    reports it, its RSS at the end (rss_later_kb). Started through
    xbench_launch, whose child's peak RSS does not include this script's
    (ru_maxrss survives exec: see common/launch.c)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["XBENCH_LAUNCH_PRELOAD"] = preload
    launch = os.path.join(bin_dir, "xbench_launch")
    p = subprocess.run([launch, report, os.path.join(bin_dir, "patterns"), pattern], env=env, capture_output=True,
                       text=True)
    with open(report) as f:
        usage = dict(line.strip().split("=", 1) for line in f if "=" in line)
    if p.returncode != 0 or usage.get("exit") != "0":
        raise RuntimeError(f"{pattern} under {preload or 'glibc'}: {usage} {p.stderr.strip()}")
    values = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    later = int(values["rss_later_kb"]) if "rss_later_kb" in values else None
    return float(values["time_s"]), int(usage["maxrss_kb"]), later


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--alloc", default="xalloc,glibc,mimalloc,jemalloc,tcmalloc")
    ap.add_argument("--only", help="comma-separated patterns: " + ",".join(PATTERNS))
    ap.add_argument("--build-dir", default=os.path.join(REPO_DIR, "build"))
    ap.add_argument("--bin-dir", help="where the patterns program is (default: BUILD_DIR/bench/bin)")
    ap.add_argument("--base-lib", help="another libxalloc.so, shown as the column 'base'")
    args = ap.parse_args()

    bin_dir = args.bin_dir or os.path.join(args.build_dir, "bench", "bin")
    if not os.path.exists(os.path.join(bin_dir, "patterns")) or not os.path.exists(os.path.join(bin_dir, "xbench_launch")):
        print(f"patterns or xbench_launch not found in {bin_dir}: build the bench targets first", file=sys.stderr)
        return 1
    libraries = {c.name: suite.resolve(c) for c in suite.contenders(args.build_dir)}
    names = [n for n in args.alloc.split(",") if libraries.get(n) is not None]
    preload = {n: libraries[n] for n in names}
    if args.base_lib:
        names.insert(0, "base")
        preload["base"] = os.path.abspath(args.base_lib)
    patterns = args.only.split(",") if args.only else PATTERNS

    times: dict[tuple[str, str], list[float]] = {}
    rss: dict[tuple[str, str], list[int]] = {}
    later: dict[tuple[str, str], list[int]] = {}
    report = os.path.join(tempfile.mkdtemp(prefix="xbench-patterns-"), "usage")
    for r in range(args.rounds):
        for pattern in patterns:
            for n in (names if r % 2 == 0 else names[::-1]):
                seconds, peak, at_end = run_once(bin_dir, pattern, preload[n], report)
                times.setdefault((pattern, n), []).append(seconds)
                rss.setdefault((pattern, n), []).append(peak)
                if at_end is not None:
                    later.setdefault((pattern, n), []).append(at_end)
    shutil.rmtree(os.path.dirname(report), ignore_errors=True)
    print(f"medians of {args.rounds} rounds: loop time in seconds / peak RSS in MiB\n")
    print("| pattern | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for pattern in patterns:
        cells = [f"{statistics.median(times[(pattern, n)]):.3f} / {statistics.median(rss[(pattern, n)]) / 1024:.1f}"
                 for n in names]
        print(f"| {pattern} | " + " | ".join(cells) + " |", flush=True)
        if all((pattern, n) in later for n in names):
            cells = [f"{statistics.median(later[(pattern, n)]) / 1024:.1f}" for n in names]
            print(f"| {pattern}: RSS at the end (MiB) | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
