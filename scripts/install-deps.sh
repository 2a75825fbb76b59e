#!/usr/bin/env bash
# Installs the Debian 12 packages xalloc needs to build, test and benchmark.
# Only packages that are missing are installed; safe to run repeatedly.
# Usage: scripts/install-deps.sh [build|test|bench|all]   (default: all)
set -euo pipefail

what=${1:-all}

build_pkgs=(build-essential cmake g++ libgtest-dev libgmock-dev googletest
            libbenchmark-dev libunwind-dev pkg-config)
test_pkgs=(valgrind python3 perl sqlite3 git ruby clang llvm libclang-rt-14-dev google-perftools
           libtsan2 libasan8 libubsan1 file binutils)
bench_pkgs=(python3 gnuplot-nox ruby time libjemalloc2 libmimalloc2.0
            libtcmalloc-minimal4 libtbbmalloc2 libclang-rt-14-dev valgrind
            git ninja-build clang)   # the last three: bench/build_peers.sh

case "$what" in
  build) pkgs=("${build_pkgs[@]}") ;;
  test)  pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  bench) pkgs=("${build_pkgs[@]}" "${bench_pkgs[@]}") ;;
  all)   pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test|bench|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages and not root; run as root or install: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
