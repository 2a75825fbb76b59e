"""The xalloc benchmark suite: workloads and contenders (used by run.py).

Every workload is one program from bench/workloads/ (or the Ruby script)
with two argument lists: `quick` (a run of the whole suite finishes in
minutes) and `full` (bigger sizes; the seeds' and the field's published
parameters where they fit this class of machine). `{n}` in an argument is
replaced by the number of CPUs, `{n2}` by twice that. Workloads flagged
`timeline` also get their resident memory sampled while they run (run.py
draws it as an RSS-over-time chart).

Standard library only.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Workload:
    name: str
    program: str                  # binary in the bench bin dir, "ruby", or "exec" (args are a command)
    quick: tuple[str, ...]
    full: tuple[str, ...]
    origin: str                   # which seed / published benchmark it models
    what: str                     # one line for the report
    time_key: str | None = None   # stdout key used as "time" instead of wall time
    metrics: tuple[str, ...] = ()  # stdout keys shown in the report
    env: dict[str, str] = field(default_factory=dict)
    output: str = "kv"            # "kv" (key=value lines) or "ruby" ("rss_kb,duration")
    timeline: bool = False        # sample its RSS while it runs, for the RSS-over-time chart


def _w(*args, **kwargs) -> Workload:
    return Workload(*args, **kwargs)


RUBY_SCRIPT = os.path.join(BENCH_DIR, "workloads", "stress_mem.rb")

WORKLOADS: list[Workload] = [
    # --- seed 004: AethAlloc's benches ---------------------------------------
    _w("packet-churn", "packet_churn", ("5m", "10k"), ("20m", "10k"), "seed 004",
       "64 B descriptors + IMIX buffers, 64 KiB in flight, one thread",
       metrics=("packets_per_s", "p50_ns", "p99_ns", "p99_9_ns", "timer_overhead_ns")),
    _w("multithread-churn", "multithread_churn", ("8", "1m"), ("8", "5m"), "seed 004",
       "8 threads replacing random blocks of 16 B-4 KiB, thread-local",
       metrics=("ops_per_s", "ns_per_op")),
    _w("tail-latency", "tail_latency", ("4", "1m"), ("4", "5m"), "seed 004",
       "per-call latency of malloc and free, 4 threads",
       metrics=("p50_ns", "p90_ns", "p99_ns", "p99_9_ns", "p99_99_ns", "max_ns", "timer_overhead_ns")),
    _w("fragmentation", "fragmentation", ("10000", "500k"), ("10000", "2m"), "seed 004",
       "mixed 16 B-100 KiB churn, then 90% freed; time = churn phase",
       time_key="time_s",
       metrics=("rss_end_kb", "rss_per_live", "rss_after_free_kb", "live_after_free_kb")),
    _w("producer-consumer", "producer_consumer", ("4", "1m", "64"), ("4", "5m", "64"), "seed 004",
       "4 producers hand 64 B blocks one by one to 4 consumers that free them",
       metrics=("blocks_per_s",), timeline=True),
    # --- seed 002: smalloc's aww and free hotspot ------------------------------
    _w("aww-128", "aww", ("128", "10000"), ("128", "20000"), "seed 002",
       "128 threads allocate 8-256 B, write and free, as fast as they can",
       metrics=("ns_per_iter",)),
    _w("fh-10", "free_hotspot", ("10", "1m"), ("10", "4m"), "seed 002",
       "one thread allocates, 10 threads free at once; time = the frees",
       time_key="free_s", metrics=("ns_per_free",)),
    _w("fh-20", "free_hotspot", ("20", "1m"), ("20", "4m"), "seed 002",
       "one thread allocates, 20 threads free at once; time = the frees",
       time_key="free_s", metrics=("ns_per_free",)),
    _w("fh-40", "free_hotspot", ("40", "1m"), ("40", "4m"), "seed 002",
       "one thread allocates, 40 threads free at once; time = the frees",
       time_key="free_s", metrics=("ns_per_free",)),
    _w("fh-100", "free_hotspot", ("100", "1m"), ("100", "4m"), "seed 002",
       "one thread allocates, 100 threads free at once; time = the frees",
       time_key="free_s", metrics=("ns_per_free",)),
    # --- seed 001: vector of small heap strings ---------------------------------
    _w("string-vector", "string_vector", ("10m",), ("100m",), "seed 001",
       "vector of N heap strings formatted from integers (Rust String layout), then dropped",
       metrics=("build_s", "drop_s")),
    # --- seed 003: Ruby string stress ----------------------------------------------
    _w("rbstress-ruby-1", "ruby", ("0.2",), ("1.0",), "seed 003",
       "ruby stress_mem.rb, STRESS_THREADS=1 (Debian's ruby)",
       env={"STRESS_THREADS": "1"}, output="ruby", metrics=("rss_kb", "duration_s")),
    _w("rbstress-ruby-8", "ruby", ("0.2",), ("1.0",), "seed 003",
       "ruby stress_mem.rb, STRESS_THREADS=8 (Debian's ruby)",
       env={"STRESS_THREADS": "8"}, output="ruby", metrics=("rss_kb", "duration_s")),
    _w("rbstress-1", "rbstress", ("1", "500"), ("1", "1000"), "seed 003",
       "stress_mem.rb's allocation pattern in C++, 1 thread",
       metrics=("rss_kb", "duration_s")),
    _w("rbstress-8", "rbstress", ("8", "500"), ("8", "1000"), "seed 003",
       "stress_mem.rb's allocation pattern in C++, 8 parallel threads",
       metrics=("rss_kb", "duration_s")),
    # --- seed 000: real-world load ---------------------------------------------------
    _w("realworld-n4", "realworld", ("4", "12000"), ("4", "50000"), "seed 000",
       "4 workers parse/transform/drop JSON-like records (executor-style tasks)",
       metrics=("process_s", "records_per_s")),
    _w("realworld-n8", "realworld", ("8", "12000"), ("8", "50000"), "seed 000",
       "8 workers, twice the data of n4",
       metrics=("process_s", "records_per_s")),
    # --- the field's standard workloads (mimalloc-bench and friends) -------------------
    _w("larson", "larson", ("{n}", "8", "1000", "5000", "100", "4141", "40"),
       ("{n}", "8", "1000", "5000", "100", "4141", "200"), "mimalloc-bench larsonN",
       "server simulation; each thread's blocks are freed by its successor thread",
       metrics=("ops_per_s",)),
    _w("cache-scratch", "cache_scratch", ("{n}", "1000", "1", "200000"), ("{n}", "1000", "1", "2000000"),
       "mimalloc-bench cache-scratchN (Hoard)", "passive false sharing: reusing a block freed by another thread",
       metrics=()),
    _w("cache-thrash", "cache_thrash", ("{n}", "1000", "1", "200000"), ("{n}", "1000", "1", "2000000"),
       "mimalloc-bench cache-thrashN (Hoard)", "active false sharing: tiny blocks of different threads",
       metrics=()),
    _w("xmalloc-test", "xmalloc_test", ("{n}", "2000", "64"), ("{n}", "10000", "64"),
       "mimalloc-bench xmalloc-testN", "N threads only allocate, N only free (batches of 4096)",
       metrics=("frees_per_s",)),
    _w("mstress", "mstress", ("{n}", "25", "25"), ("{n}", "50", "50"), "mimalloc-bench mstressN",
       "threads recreated every phase, objects migrate through a shared array",
       metrics=("steps_per_s",)),
    _w("rptest", "rptest", ("{n}", "0", "1", "2", "5000", "1000", "100", "8", "16000"),
       ("{n}", "0", "1", "2", "20000", "1000", "100", "8", "16000"), "mimalloc-bench rptestN",
       "random sizes 8-16000, scattered frees, cross-thread frees",
       metrics=("memory_ops_per_s",)),
    _w("glibc-simple", "glibc_simple", ("100000",), ("1000000",), "mimalloc-bench glibc-simple",
       "batches of 25-1600 equal blocks on one thread (3 scenarios)",
       metrics=("ns_per_pair", "main_ns", "thread_ns", "main_mt_ns")),
    _w("glibc-thread", "glibc_thread", ("{n}", "2m"), ("{n}", "10m"), "mimalloc-bench glibc-thread",
       "N threads replace random blocks of a 1024-block working set, 4-32768 B (P ~ 1/size)",
       metrics=("ns_per_iteration",)),
    _w("alloc-test1", "alloc_test", ("1", "10m"), ("1", "50m"), "mimalloc-bench alloc-test1",
       "Pareto sizes <= 1 KiB, hot/cold slots, 1 thread",
       metrics=("ns_per_iteration",)),
    _w("alloc-testN", "alloc_test", ("{n}", "5m"), ("{n}", "25m"), "mimalloc-bench alloc-testN",
       "Pareto sizes <= 1 KiB, hot/cold slots, N threads",
       metrics=("ns_per_iteration",)),
    _w("malloc-large", "malloc_large", ("2000",), ("10000",), "mimalloc-bench malloc-large",
       "blocks of 5-25 MiB, at most 20 alive",
       metrics=("ns_per_allocation",)),
    _w("buffer-reuse", "buffer_reuse", ("40",), ("150",), "suite",
       "buffers of 6, 20 and 40 MiB filled, freed and asked for again, round after round",
       metrics=("ms_per_round",)),
    _w("sh6bench", "shbench", ("6", "{n2}", "50", "10000"), ("6", "{n2}", "200", "10000"),
       "mimalloc-bench sh6benchN", "SmartHeap sh6: LIFO and reverse-order frees, 2N threads",
       metrics=("ns_per_object",)),
    _w("sh8bench", "shbench", ("8", "{n2}", "50", "10000"), ("8", "{n2}", "200", "10000"),
       "mimalloc-bench sh8benchN", "sh6 with the kept objects freed by the next thread",
       metrics=("ns_per_object",)),
    # --- real programs (issue: real programs under LD_PRELOAD) -----------------
    _w("python", "exec", ("/usr/bin/python3", "{bench}/workloads/py_workload.py", "0.25"),
       ("/usr/bin/python3", "{bench}/workloads/py_workload.py", "1.0"), "suite",
       "Debian's python3: dicts, lists, strings, JSON round trips, sorting",
       metrics=("time_s",)),
    _w("sqlite3", "exec", ("{bench}/workloads/sqlite_workload.sh", "100000"),
       ("{bench}/workloads/sqlite_workload.sh", "400000"), "suite",
       "Debian's sqlite3: bulk insert into an in-memory database, indexes, group by, join, vacuum"),
    _w("gxx-compile", "exec", ("g++", "-std=c++20", "-O2", "-I{bench}/common", "-c",
                               "{bench}/workloads/realworld.cpp", "-o", "/dev/null"),
       ("g++", "-std=c++20", "-O2", "-I{bench}/common", "-c", "{bench}/workloads/realworld.cpp", "-o", "/dev/null"),
       "suite", "g++ -O2 compiling a 450-line C++ file (the compiler runs on the allocator)"),
    _w("realloc-growth", "realloc_growth", ("10m",), ("50m",), "suite",
       "64 buffers grown by exact-fit and 1.5x realloc, up to 4 MiB",
       metrics=("ns_per_append", "reallocs")),
    _w("batch-round-trip", "batch_round_trip", ("10", "1m", "8"), ("10", "2m", "16"), "suite",
       "one thread builds 1M (full: 2M) blocks of 16-528 B, 10 threads free them, round after round",
       metrics=("alloc_s", "free_s", "faults_per_peak_page")),
    _w("free-1g", "free_1g", ("4", "256"), ("4", "1024"), "suite",
       "4 threads allocate 1 GiB (quick: 256 MiB) of 16 B-512 KiB blocks, then free it, half remotely; "
       "time = allocate + free",
       time_key="time_s",
       metrics=("rss_peak_mb", "rss_after_free_mb", "rss_after_1s_mb", "rss_after_trim_mb"), timeline=True),
]

# Workloads whose ratio is reported as the seed-000 degradation figure:
# time(n8) / time(n4) / (size(n8) / size(n4)), from these keys.
DEGRADATION = ("realworld-n4", "realworld-n8", "process_s", "bytes")


@dataclass(frozen=True)
class Contender:
    name: str
    patterns: tuple[str, ...]     # globs for the library to preload; () = no preload
    expect: str                   # substring of the object that must define malloc
    package: str = ""             # Debian package, for the report
    env: tuple[tuple[str, str], ...] = ()  # extra environment of its runs
    optional: bool = False        # only when named with --alloc (xalloc variants)
    when_built: bool = False      # in the default set only when its library exists (peers built from source)


def contenders(build_dir: str) -> list[Contender]:
    lib = "/usr/lib/x86_64-linux-gnu"
    build = os.path.abspath(build_dir)
    return [
        Contender("xalloc", (f"{build}/libxalloc.so", f"{build}/libxalloc.so.*"), "libxalloc"),
        Contender("glibc", (), "libc.so", "libc6"),
        Contender("mimalloc", (f"{lib}/libmimalloc.so.2", f"{lib}/libmimalloc.so.*"), "libmimalloc",
                  "libmimalloc2.0"),
        Contender("jemalloc", (f"{lib}/libjemalloc.so.2", f"{lib}/libjemalloc.so.*"), "libjemalloc",
                  "libjemalloc2"),
        Contender("tcmalloc", (f"{lib}/libtcmalloc_minimal.so.4", f"{lib}/libtcmalloc_minimal.so.*"),
                  "libtcmalloc_minimal", "libtcmalloc-minimal4"),
        Contender("tbb", (f"{lib}/libtbbmalloc_proxy.so.2", f"{lib}/libtbbmalloc_proxy.so.*"),
                  "libtbbmalloc_proxy", "libtbbmalloc2"),
        Contender("scudo", ("/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.scudo_standalone-x86_64.so",),
                  "scudo_standalone", "libclang-rt-14-dev"),
        # Peers Debian does not package, built from source at fixed tags by
        # bench/build_peers.sh into <build>-peers/lib: in the default set
        # once built, left out (not "missing") otherwise.
        Contender("mimalloc3", (f"{build}-peers/lib/libmimalloc3.so",), "libmimalloc3", "mimalloc v3.4.3, from source",
                  when_built=True),
        Contender("snmalloc", (f"{build}-peers/lib/libsnmalloc.so",), "libsnmalloc", "snmalloc 0.7.5, from source",
                  when_built=True),
        Contender("rpmalloc", (f"{build}-peers/lib/librpmalloc.so",), "librpmalloc", "rpmalloc 2.0.1, from source",
                  when_built=True),
        # xalloc's own variants, to measure what a feature costs (--alloc names them):
        # the secure build, statistics and the heap profiler on, and a build of
        # the fast path without misuse checks (cmake -DXALLOC_MISUSE_CHECKS=OFF
        # into <build>-nochecks).
        Contender("xalloc-secure", (f"{build}/libxalloc-secure.so", f"{build}/libxalloc-secure.so.*"),
                  "libxalloc-secure", optional=True),
        Contender("xalloc-stats", (f"{build}/libxalloc.so",), "libxalloc", env=(("XALLOC_STATS", "1"),),
                  optional=True),
        Contender("xalloc-prof", (f"{build}/libxalloc.so",), "libxalloc",
                  env=(("XALLOC_PROF", "1"), ("XALLOC_PROF_PREFIX", "/tmp/xbench-prof")), optional=True),
        Contender("xalloc-nochecks", (f"{build}-nochecks/libxalloc.so",), "libxalloc", optional=True),
        # A build of an earlier commit into <build>-base, to time a change
        # against the code before it in the same run.
        Contender("xalloc-base", (f"{build}-base/libxalloc.so",), "libxalloc", optional=True),
        # The same with the heap profiler on: what a change to the profiler costs.
        Contender("xalloc-base-prof", (f"{build}-base/libxalloc.so",), "libxalloc",
                  env=(("XALLOC_PROF", "1"), ("XALLOC_PROF_PREFIX", "/tmp/xbench-prof")), optional=True),
        # Without borrowing from stalled threads' inboxes (XALLOC_BORROW=0).
        Contender("xalloc-noborrow", (f"{build}/libxalloc.so",), "libxalloc", env=(("XALLOC_BORROW", "0"),),
                  optional=True),
        # An empty library preloaded (bench/common/empty.c; malloc stays
        # glibc's): the loader's cost of any preload, startup.py's baseline.
        Contender("empty", (f"{build}/bench/bin/libempty.so",), "libc.so", optional=True),
        # glibc held to two arenas: the lean glibc setting the Ruby seed quotes.
        Contender("glibc-arena2", (), "libc.so", "libc6", env=(("MALLOC_ARENA_MAX", "2"),), optional=True),
    ]


def select(build_dir: str, alloc: str | None) -> list[Contender]:
    """The contenders `--alloc` names: known names (see contenders()), and
    NAME=PATH for any other allocator, preloaded from PATH (a library
    built from source, say), whose file name up to ".so" must be the object
    that defines malloc in its runs. Without names, every contender that is
    not optional, and the peers built from source that are built. Exits
    with a message on an unknown name."""
    known = contenders(build_dir)
    specs = [a for a in (alloc or "").split(",") if a]
    if not specs:
        return [c for c in known if not c.optional and (not c.when_built or resolve(c) is not None)]
    names = {s for s in specs if "=" not in s}
    unknown = names - {c.name for c in known}
    if unknown:
        raise SystemExit(f"unknown contender(s): {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(c.name for c in known)}, or NAME=/path/to/lib.so")
    chosen = [c for c in known if c.name in names]
    for spec in specs:
        if "=" in spec:
            name, path = spec.split("=", 1)
            path = os.path.abspath(path)
            chosen.append(Contender(name, (path,), os.path.basename(path).split(".so")[0], f"from {path}"))
    return chosen


def resolve(c: Contender) -> str | None:
    """The library to preload for `c`: the first pattern that matches an
    existing file (the highest version when a glob matches several).
    "" for no preload (glibc); None when it is missing."""
    if not c.patterns:
        return ""
    for pattern in c.patterns:
        hits = sorted((p for p in glob.glob(pattern) if os.path.isfile(p)), key=_version_key, reverse=True)
        if hits:
            return hits[0]
    return None


def _version_key(path: str) -> list:
    """Sorts llvm-9 before llvm-14: digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", path)]


def expand(args: tuple[str, ...], ncpu: int) -> list[str]:
    return [a.replace("{n2}", str(2 * ncpu)).replace("{n}", str(ncpu)).replace("{bench}", BENCH_DIR)
            for a in args]
