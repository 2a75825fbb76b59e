#!/usr/bin/env python3
"""Times real programs found on this machine under each contender (LD_PRELOAD).

The suite's own real programs (python, sqlite3, g++, ruby) are workloads of
run.py; this script covers more of the programs people preload an allocator
into - compilers, interpreters, text tools - where they are installed. It
writes the inputs it needs into a temporary directory, checks that every
contender gives the same output as glibc, and prints each program's median
wall time relative to xalloc. Programs that are not installed are skipped.

  python3 bench/real_programs.py [--rounds 7] [--alloc xalloc,glibc,mimalloc]
                                 [--only node,jq] [--build-dir build]

Rounds alternate the contenders' order (A B C, C B A, ...), so that a drift
of the machine's speed does not favour one. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JS = """
const m = new Map(); let s = 0;
for (let i = 0; i < 300000; i++) {
  m.set('k' + i, Buffer.alloc(64 + (i % 500)).fill(i & 255));
  if (i % 3 == 0) m.delete('k' + (i - 1));
}
for (const [k, v] of m) s += v[0];
const z = require('zlib');
s += z.gunzipSync(z.gzipSync(Buffer.alloc(5e6, 7))).length;
console.log(m.size, s, JSON.stringify(JSON.parse(require('fs').readFileSync('big.json'))).length);
"""

TCL = """
set d [dict create]
for {set i 0} {$i < 200000} {incr i} { dict set d k$i [string repeat x [expr {$i % 100}]] }
set n 0
dict for {k v} $d { incr n [string length $v] }
puts "[dict size $d] $n"
"""

RUST = """
use std::collections::HashMap;
use std::thread;
fn main() {
    let hs: Vec<_> = (0..4).map(|t| thread::spawn(move || {
        let mut m = HashMap::new();
        for i in 0..200000u64 { m.insert(i, format!("{}-{}", i, t)); if i % 3 == 0 { m.remove(&(i / 2)); } }
        m.len()
    })).collect();
    let s: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    println!("{}", s);
}
"""

PERL = ("my %h; for my $i (1..300000) { $h{\"k$i\"} = \"v\" x ($i % 40); "
        "delete $h{\"k\" . ($i - 5)} if $i % 2 } print scalar(keys %h), \"\\n\"")

CMAKE_PROJECT = """cmake_minimum_required(VERSION 3.13)
project(p CXX)
add_executable(p main.cpp)
"""

# name: (program that must exist, shell command run in the work directory)
PROGRAMS = {
    "clang++ -O2": ("clang++", f"clang++ -O2 -std=c++20 -c -o /dev/null -I{REPO_DIR}/src -I{REPO_DIR}/include "
                               f"{REPO_DIR}/src/heap.cpp"),
    "rustc -O": ("rustc", "rustc -O -o rsmain main.rs"),
    "node": ("node", "node t.js"),
    "jq": ("jq", "jq '[.[] | select(.id % 7 == 0) | .sub.a] | add' big.json"),
    "xmllint": ("xmllint", "xmllint --xpath 'count(//i)' big.xml"),
    "tclsh": ("tclsh", "tclsh t.tcl"),
    "perl": ("perl", "perl -e '" + PERL + "'"),
    "sort": ("sort", "sort -S 20M words.txt | md5sum"),
    "cmake configure": ("cmake", "rm -rf cmb && cmake -S cm -B cmb > /dev/null && echo configured"),
    "git log --stat": ("git", f"git -C {REPO_DIR} log --stat -n 400 | md5sum"),
}


def write_inputs(work: str) -> None:
    rng = random.Random(1)
    records = [{"id": i, "name": f"n{i}", "tags": [rng.random() for _ in range(5)], "sub": {"a": i * 2}}
               for i in range(60000)]
    with open(os.path.join(work, "big.json"), "w") as f:
        json.dump(records, f)
    with open(os.path.join(work, "big.xml"), "w") as f:
        f.write("<r>" + "".join(f'<i id="{i}"><v>{"x" * (i % 50)}</v></i>' for i in range(100000)) + "</r>")
    with open(os.path.join(work, "words.txt"), "w") as f:
        f.write("\n".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 20)))
                          for _ in range(400000)))
    for name, text in (("t.js", JS), ("t.tcl", TCL), ("main.rs", RUST)):
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    os.makedirs(os.path.join(work, "cm"), exist_ok=True)
    with open(os.path.join(work, "cm", "CMakeLists.txt"), "w") as f:
        f.write(CMAKE_PROJECT)
    with open(os.path.join(work, "cm", "main.cpp"), "w") as f:
        f.write("#include <map>\nint main() { std::map<int, int> m; m[1] = 2; return m.size() - 1; }\n")


def run_once(command: str, work: str, preload: str) -> tuple[float, str, int]:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    start = time.perf_counter()
    p = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, p.stdout, p.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--alloc", default="xalloc,glibc,mimalloc,jemalloc,tcmalloc")
    ap.add_argument("--only", help="comma-separated program names (see the table in this file)")
    ap.add_argument("--build-dir", default=os.path.join(REPO_DIR, "build"))
    args = ap.parse_args()

    libraries = {c.name: suite.resolve(c) for c in suite.contenders(args.build_dir)}
    names = [n for n in args.alloc.split(",") if libraries.get(n) is not None]
    if "xalloc" not in names:
        print("libxalloc.so not found: build first (or --build-dir)", file=sys.stderr)
        return 1
    preload = {n: libraries[n] for n in names}
    wanted = args.only.split(",") if args.only else list(PROGRAMS)
    programs = [p for p in wanted if p in PROGRAMS and shutil.which(PROGRAMS[p][0])]
    skipped = [p for p in wanted if p not in programs]
    if skipped:
        print("not installed, skipped: " + ", ".join(skipped))

    failed = False
    with tempfile.TemporaryDirectory(prefix="xbench-real-") as work:
        write_inputs(work)
        print(f"{'program':<16}" + "".join(f"{n:>18}" for n in names) + "   (median wall time, ratio to xalloc)")
        for program in programs:
            command = PROGRAMS[program][1]
            _, expected, rc = run_once(command, work, "")
            times: dict[str, list[float]] = {n: [] for n in names}
            for r in range(args.rounds):
                for n in (names if r % 2 == 0 else names[::-1]):
                    seconds, out, code = run_once(command, work, preload[n])
                    if code != rc or out != expected:
                        print(f"{program}: {n} gave other output or exit status {code}", file=sys.stderr)
                        failed = True
                    times[n].append(seconds)
            base = statistics.median(times["xalloc"])
            cells = []
            for n in names:
                m = statistics.median(times[n])
                cells.append(f"{m:8.3f}s ({m / base:4.2f}x)")
            print(f"{program:<16}" + "".join(f"{c:>18}" for c in cells), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
