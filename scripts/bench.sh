#!/usr/bin/env bash
# Builds xalloc and runs its benchmark suite against the other allocators.
#
# usage: scripts/bench.sh [--quick|--full] [--only WORKLOAD,...] [--alloc NAME,...]
#                         [--reps K] [--out DIR] [--build-dir DIR] [--no-peers]
#                         [other bench/run.py options]
#
# 1. installs the packages the suite needs (scripts/install-deps.sh bench;
#    needs root when something is missing),
# 2. configures and builds the project in Release mode into build/ (or
#    --build-dir), which gives build/libxalloc.so and build/bench/bin/*,
# 3. unless they are built or --no-peers says not to, builds the peers
#    Debian does not package (mimalloc 3.4.3, snmalloc 0.7.5, rpmalloc
#    2.0.1) from their sources at those tags into build-peers/
#    (bench/build_peers.sh; needs access to GitHub, and a peer that fails
#    is left out of the run),
# 4. runs bench/run.py with the remaining arguments.
#
# Quick mode (the default) takes about 10 minutes on a 2-core machine; --full
# runs bigger sizes 5 times each (an hour or more). Results, the Markdown
# report and the charts go to bench/results/<timestamp>/ unless --out says
# otherwise. See bench/README.md.
#
# If the allocator itself does not build (work in progress), the benchmark
# programs are built on their own and xalloc is reported as "missing", so
# the peers' numbers are still produced.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build"
peers=1
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-peers) peers=0; shift ;;
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    --build-dir=*) build=$(realpath -m "${1#*=}"); shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exec python3 "$root/bench/run.py" --help ;;
    *) args+=("$1"); shift ;;
  esac
done

"$root/scripts/install-deps.sh" bench

jobs=$(nproc 2>/dev/null || echo 2)
bin_dir="$build/bench/bin"
lib_dir="$build"
# Only what the suite runs: the allocator (target xalloc) and the programs
# (target xbench); the test suite is not needed here.
if cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DXALLOC_BUILD_BENCH=ON &&
   cmake --build "$build" -j"$jobs" --target xalloc xbench; then
  :
else
  echo "bench.sh: building xalloc failed; building the benchmark programs on their own," >&2
  echo "bench.sh: xalloc will be reported as missing" >&2
  standalone="$build/bench-standalone"
  cmake -S "$root/bench" -B "$standalone" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$standalone" -j"$jobs"
  bin_dir="$standalone/bin"
  lib_dir="$standalone"   # holds no libxalloc.so: a stale one is never measured
fi

if [ "$peers" = 1 ] && ! ls "$lib_dir-peers"/lib/*.so >/dev/null 2>&1; then
  "$root/bench/build_peers.sh" "$lib_dir-peers" || echo "bench.sh: some peers did not build; they are left out" >&2
fi

exec python3 "$root/bench/run.py" --build-dir "$lib_dir" --bin-dir "$bin_dir" ${args[@]+"${args[@]}"}
