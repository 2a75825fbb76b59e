#!/usr/bin/env python3
"""Times the start-up script under each contender: what preloading an
allocator costs the short processes a shell script or a build starts.

bench/workloads/startup_script.sh runs 27 small programs (cat, sort, sed,
awk, ...) from sh; each run here starts `sh startup_script.sh` with
LD_PRELOAD set for the shell, which its programs inherit, and takes the
CPU time (user + system) of the whole tree from wait4. The baseline is
`empty`, an empty library preloaded (bench/common/empty.c, linked as
libxalloc.so is): loading any preload costs the loader some work, and what
xalloc adds on top of that is its own.

  python3 bench/startup.py [--rounds 60] [--alloc glibc,empty,xalloc]
                           [--build-dir build]

Each round runs every contender once, starting one further along each
time (A B C, B C A, ...), after a first round that is not counted. Printed
per contender: the median CPU and wall time, and the median over the
rounds of its CPU time divided by that of `empty` (and of glibc) in the
same round, which a drift of the machine's speed does not bias. Standard
library only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_DIR, "bench", "workloads", "startup_script.sh")


def run_once(lib: str, env_extra: tuple[tuple[str, str], ...]) -> tuple[float, float]:
    """(CPU seconds of the whole process tree, wall seconds) of one run."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(env_extra)
    if lib:
        env["LD_PRELOAD"] = lib
    start = time.perf_counter()
    proc = subprocess.Popen(["sh", SCRIPT], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{SCRIPT} failed (status {proc.returncode}) with LD_PRELOAD={lib or '(none)'}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--alloc", default="glibc,empty,xalloc",
                    help="contenders (bench/suite.py names, or NAME=/path/lib.so)")
    ap.add_argument("--build-dir", default=os.path.join(REPO_DIR, "build"))
    args = ap.parse_args()

    contenders = suite.select(args.build_dir, args.alloc)
    libs = {c.name: suite.resolve(c) for c in contenders}
    missing = [name for name, lib in libs.items() if lib is None]
    if missing:
        raise SystemExit(f"not found: {', '.join(missing)} (build the bench: cmake --build build --target xbench)")
    names = [c.name for c in contenders]
    cpu: dict[str, list[float]] = {n: [] for n in names}
    wall: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(args.rounds + 1):
        shift = rep % len(contenders)
        for c in contenders[shift:] + contenders[:shift]:
            c_cpu, c_wall = run_once(libs[c.name], c.env)
            if rep > 0:
                cpu[c.name].append(c_cpu)
                wall[c.name].append(c_wall)

    def ratio(name: str, base: str) -> str:
        if base not in cpu:
            return "-"
        return f"{statistics.median(a / b for a, b in zip(cpu[name], cpu[base])):.3f}"

    print(f"{SCRIPT}: {args.rounds} rounds; CPU time = user + system of the process tree (wait4)")
    print(f"{'contender':<16}{'cpu ms':>10}{'wall ms':>10}{'/ empty':>10}{'/ glibc':>10}")
    for n in names:
        print(f"{n:<16}{statistics.median(cpu[n]) * 1e3:>10.2f}{statistics.median(wall[n]) * 1e3:>10.2f}"
              f"{ratio(n, 'empty'):>10}{ratio(n, 'glibc'):>10}")


if __name__ == "__main__":
    main()
