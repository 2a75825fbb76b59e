#!/bin/sh
# Builds the allocators the bench suite compares xalloc with that Debian
# does not package, from their sources at fixed tags, with their default
# options: mimalloc 3.4.3 (CMake Release), snmalloc 0.7.5 (CMake Release,
# its preload shim) and rpmalloc 2.0.1 (its configure.py and ninja).
#
# usage: bench/build_peers.sh [DEST]    (default: build-peers beside build/)
#
# The libraries land in DEST/lib as libmimalloc3.so, libsnmalloc.so and
# librpmalloc.so, where bench/suite.py finds them (contenders mimalloc3,
# snmalloc, rpmalloc); the sources stay in DEST/src, outside the
# repository's tracked files. Needs git, cmake, ninja, python3 and a C/C++
# compiler, and network access to GitHub - or set MIMALLOC_GIT, SNMALLOC_GIT,
# RPMALLOC_GIT to other clones (a local mirror). A peer that fails to build
# is reported and skipped; the suite then leaves it out.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/build-peers}
mkdir -p "$dest/src" "$dest/lib"
dest=$(cd "$dest" && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
failed=0

# fetch NAME URL TAG: a clone of URL at TAG in $dest/src/NAME.
fetch() {
  if [ -d "$dest/src/$1/.git" ]; then
    git -C "$dest/src/$1" fetch --quiet --tags origin 2>/dev/null
  else
    git -c advice.detachedHead=false clone --quiet "$2" "$dest/src/$1" || return 1
  fi
  git -C "$dest/src/$1" -c advice.detachedHead=false checkout --quiet "$3"
}

cmake_release() {
  cmake -S "$dest/src/$1" -B "$dest/src/$1/build" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$dest/src/$1/build" -j"$jobs" >/dev/null
}

build_mimalloc() {
  fetch mimalloc "${MIMALLOC_GIT:-https://github.com/microsoft/mimalloc}" v3.4.3 && cmake_release mimalloc &&
    cp -L "$dest/src/mimalloc/build/libmimalloc.so" "$dest/lib/libmimalloc3.so"
}

build_snmalloc() {
  fetch snmalloc "${SNMALLOC_GIT:-https://github.com/microsoft/snmalloc}" 0.7.5 && cmake_release snmalloc &&
    cp -L "$dest/src/snmalloc/build/libsnmallocshim.so" "$dest/lib/libsnmalloc.so"
}

# rpmalloc 2.0.1's shared library overrides malloc (ENABLE_OVERRIDE is on
# by default).
build_rpmalloc() {
  fetch rpmalloc "${RPMALLOC_GIT:-https://github.com/mjansson/rpmalloc}" 2.0.1 &&
    (cd "$dest/src/rpmalloc" && python3 configure.py >/dev/null && ninja -j"$jobs" >/dev/null) &&
    cp -L "$dest/src/rpmalloc/bin/linux/release/x86-64/librpmalloc.so" "$dest/lib/librpmalloc.so"
}

for peer in mimalloc snmalloc rpmalloc; do
  if "build_$peer"; then
    echo "$peer: $dest/lib/$(ls "$dest/lib" | grep "$peer" | head -1)"
  else
    echo "$peer: build failed, left out" >&2
    failed=1
  fi
done
exit $failed
