#!/usr/bin/env python3
"""Instructions per malloc+free pair on the fast path, for every contender.

Runs bench/fastpath/fastpath_ir.c under `valgrind --tool=callgrind` twice
per loop, with two loop lengths, and reports
    (Ir(long) - Ir(short)) / (pairs(long) - pairs(short))
so start-up, allocator initialisation and first cache refills cancel out.
The `baseline` loop (no-op functions called the same way) gives the loop's
own instructions, which the `net` columns subtract.

usage: bench/fastpath_ir.py [--build-dir build] [--bin-dir DIR]
                            [--alloc NAME,...] [--pairs SHORT,LONG]
       bench/fastpath_ir.py --check pair=N,batch=N,mixed=N --preload LIB --binary PROGRAM
The second form is the test that pins xalloc's fast path to its budget:
it measures LIB's loops (loop included) and exits 1 if any count is over
its budget, 77 (skipped) if valgrind is not installed.
Standard library only; also used by bench/run.py.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402

LOOPS = ("pair", "batch", "mixed")
DEFAULT_PAIRS = (200_000, 1_200_000)
MISMATCH = 86


def _callgrind(binary: str, loop: str, pairs: int, preload: str, expect: str, workdir: str,
               timeout: float) -> tuple[int, int] | str:
    """(Ir, pairs actually run) or a failure status string."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "XBENCH_EXPECT")}
    if preload:
        env["LD_PRELOAD"] = preload
    env["XBENCH_EXPECT"] = expect
    out = os.path.join(workdir, f"cg.{loop}.{pairs}.out")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, loop, str(pairs)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    if p.returncode == MISMATCH:
        return "mismatch"
    if p.returncode != 0:
        # valgrind reports the client's fatal signal itself and exits 128+n.
        sig = re.search(r"terminating with default action of signal (\d+) \((\w+)\)", p.stderr)
        status = f"crash ({sig.group(2)})" if sig else f"failed (exit {p.returncode})"
        message = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("==")]
        return f"{status}: {message[0][:120]}" if message else status
    m = re.search(r"Collected\s*:\s*(\d+)", p.stderr)
    n = re.search(r"^pairs=(\d+)", p.stdout, re.M)
    if not m or not n:
        return "no Ir in callgrind output"
    return int(m.group(1)), int(n.group(1))


def measure(binary: str, preload: str, expect: str, loop: str, lengths=DEFAULT_PAIRS,
            timeout: float = 300.0) -> float | str:
    """Ir per malloc+free pair of `loop` under `preload`, or a status string."""
    with tempfile.TemporaryDirectory(prefix="xbench-cg-") as tmp:
        short = _callgrind(binary, loop, lengths[0], preload, expect, tmp, timeout)
        if isinstance(short, str):
            return short
        long_ = _callgrind(binary, loop, lengths[1], preload, expect, tmp, timeout)
        if isinstance(long_, str):
            return long_
    return (long_[0] - short[0]) / (long_[1] - short[1])


def run_all(bin_dir: str, allocs: list[tuple[str, str | None, str]], lengths=DEFAULT_PAIRS,
            log=print) -> dict:
    """allocs: (name, preload path or "" or None when missing, expect).
    Returns {"baseline": float|str, "lengths": [...], "results": {name: {loop: float|str}}}."""
    binary = os.path.join(bin_dir, "fastpath_ir")
    result: dict = {"lengths": list(lengths), "results": {}}
    if shutil.which("valgrind") is None:
        result["error"] = "valgrind is not installed"
        return result
    if not os.path.isfile(binary):
        result["error"] = f"{binary} is not built"
        return result
    result["baseline"] = measure(binary, "", "", "baseline", lengths)
    log(f"fastpath: loop overhead (baseline) = {_fmt(result['baseline'])} Ir per iteration")
    for name, preload, expect in allocs:
        row = {}
        for loop in LOOPS:
            row[loop] = "missing" if preload is None else measure(binary, preload, expect, loop, lengths)
        result["results"][name] = row
        log(f"fastpath: {name:10s} " + "  ".join(f"{loop}={_fmt(row[loop]).split(': ', 1)[0]}" for loop in LOOPS))
    return result


def _fmt(v) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def markdown(result: dict) -> str:
    """The fast-path table in Markdown."""
    if "error" in result:
        return f"Fast-path instruction counts not measured: {result['error']}.\n"
    base = result.get("baseline")
    lines = [
        "Instructions (callgrind Ir) per malloc+free pair, steady state: "
        f"(Ir at {result['lengths'][1]:,} pairs - Ir at {result['lengths'][0]:,}) / difference. "
        f"`net` subtracts the loop's own instructions (baseline loop: {_fmt(base)} Ir per iteration).",
        "",
        "| contender | pair: malloc(32)+free | batch: 64 x 48 B | mixed: 64 x 16..1000 B | net pair | net batch | net mixed |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name, row in result["results"].items():
        cells = [_fmt(row[loop]).split(": ", 1)[0] for loop in LOOPS]
        nets = [(_fmt(row[loop] - base) if isinstance(row[loop], float) and isinstance(base, float) else "-")
                for loop in LOOPS]
        lines.append(f"| {name} | " + " | ".join(cells + nets) + " |")
        for message in dict.fromkeys(v.split(": ", 1)[1] for v in row.values() if isinstance(v, str) and ": " in v):
            notes.append(f"{name}: {message}")
    if notes:
        lines += ["", "Messages: " + "; ".join(f"`{n}`" for n in notes) + "."]
    return "\n".join(lines) + "\n"


SKIPPED = 77


def check_budget(binary: str, preload: str, budgets: str, lengths) -> int:
    """Measures each loop of `budgets` ("pair=60,batch=64") under `preload`."""
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: fast-path budget not checked")
        return SKIPPED
    failed = False
    for item in budgets.split(","):
        loop, limit = item.split("=")
        value = measure(binary, preload, os.path.basename(preload).split(".")[0], loop, lengths)
        if isinstance(value, str):
            print(f"{loop}: {value}")
            failed = True
            continue
        over = value > float(limit)
        failed |= over
        print(f"{loop}: {value:.1f} instructions per malloc+free (budget {limit}){'  OVER BUDGET' if over else ''}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", metavar="LOOP=MAX,...", help="check --preload's counts against these budgets")
    ap.add_argument("--preload", help="with --check: the library to measure")
    ap.add_argument("--binary", help="with --check: the fastpath_ir program")
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(suite.BENCH_DIR), "build"))
    ap.add_argument("--bin-dir", help="where the bench programs are (default: BUILD/bench/bin)")
    ap.add_argument("--alloc", help="comma-separated contenders, by name or as NAME=/path/to/lib.so")
    ap.add_argument("--pairs", default=f"{DEFAULT_PAIRS[0]},{DEFAULT_PAIRS[1]}",
                    help="the two loop lengths, in malloc+free pairs")
    args = ap.parse_args()
    bin_dir = args.bin_dir or os.path.join(args.build_dir, "bench", "bin")
    lengths = tuple(int(x) for x in args.pairs.split(","))
    if len(lengths) != 2 or lengths[0] >= lengths[1]:
        ap.error("--pairs needs SHORT,LONG with SHORT < LONG")
    if args.check:
        if not args.preload or not args.binary:
            ap.error("--check needs --preload and --binary")
        return check_budget(args.binary, args.preload, args.check, lengths)
    allocs = [(c.name, suite.resolve(c), c.expect) for c in suite.select(args.build_dir, args.alloc)]
    result = run_all(bin_dir, allocs, lengths)
    print()
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
