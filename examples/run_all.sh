#!/usr/bin/env bash
# shellcheck disable=SC2317  # the ex_* functions are called through a table
# Builds and runs every example against an installed xalloc.
#
# usage: examples/run_all.sh PREFIX
#
# PREFIX is what `cmake --install build --prefix PREFIX` installed into (or
# the usr/ directory of an unpacked .deb). The examples are built in a
# scratch directory (removed at the end unless XALLOC_EXAMPLES_KEEP=1) with
# CMAKE_PREFIX_PATH and PKG_CONFIG_PATH pointing into PREFIX, and each
# program must report that xalloc serves it. Works from any directory.
#
# Environment: CC, CXX (compilers), CMAKE_GENERATOR, XALLOC_EXAMPLES_KEEP=1.
# Exit status: 0 if every example passed, 1 otherwise, 2 for a usage error.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

usage() { sed -n '3,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ $# -ne 1 ]; then
  usage >&2
  exit 2
fi
case $1 in
  -h | --help)
    usage
    exit 0
    ;;
esac
[ -d "$1" ] || { echo "run_all.sh: $1: no such directory" >&2; exit 2; }
prefix=$(cd "$1" && pwd -P)

work=$(mktemp -d "${TMPDIR:-/tmp}/xalloc-examples.XXXXXX") || exit 1
if [ "${XALLOC_EXAMPLES_KEEP:-0}" = 1 ]; then
  echo "build directory (kept): $work"
else
  trap 'rm -rf "$work"' EXIT
fi

# The examples decide themselves what is preloaded.
unset LD_PRELOAD XALLOC_LIB

failures=0
declare -a summary=()

pass() { summary+=("PASS  $1"); }
fail() {
  summary+=("FAIL  $1")
  failures=$((failures + 1))
}

# logged NAME CMD...: runs CMD with its output in $work/NAME.log; on failure
# shows the end of it.
logged() {
  local log="$work/$1.log"
  shift
  "$@" >"$log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "  command failed (exit $rc): $*"
    tail -n 25 "$log" | sed 's/^/    | /'
  fi
  return "$rc"
}

# --- what the installation holds ----------------------------------------------

echo "xalloc installed in: $prefix"
# (under lib, lib64, lib/<multiarch>: a /usr prefix is big)
find_one() { find "$prefix"/lib* -maxdepth 4 \( -type f -o -type l \) -name "$1" 2>/dev/null | LC_ALL=C sort | head -n 1; }
lib_so=$(find_one libxalloc.so.0)
pc_file=$(find_one xalloc.pc)
config_file=$(find_one xallocConfig.cmake)
header=$prefix/include/xalloc/xalloc.h
xalloc_run=$prefix/bin/xalloc-run
missing=0
for item in "libxalloc.so.0:$lib_so" "xalloc.pc:$pc_file" "xallocConfig.cmake:$config_file" \
  "include/xalloc/xalloc.h:$([ -f "$header" ] && echo "$header")" \
  "bin/xalloc-run:$([ -x "$xalloc_run" ] && echo "$xalloc_run")"; do
  if [ -z "${item#*:}" ]; then
    echo "  missing from the installation: ${item%%:*}"
    missing=1
  else
    echo "  ${item%%:*}: ${item#*:}"
  fi
done
if [ $missing -ne 0 ]; then
  echo "RESULT: FAIL (incomplete installation in $prefix)"
  exit 1
fi

pc_dir=$(dirname "$pc_file")
export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export CMAKE_PREFIX_PATH="$prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"

have_readelf=0
command -v readelf >/dev/null 2>&1 && have_readelf=1

# needs_lib BINARY yes|no: whether BINARY has libxalloc.so.0 as a DT_NEEDED.
needs_lib() {
  [ "$have_readelf" = 1 ] || return 0
  local needed=no
  readelf -d "$1" | grep -q 'NEEDED.*\[libxalloc\.so' && needed=yes
  if [ "$needed" != "$2" ]; then
    if [ "$2" = yes ]; then
      echo "  $(basename "$1") does not link libxalloc.so"
    else
      echo "  $(basename "$1") links libxalloc.so, and should not"
    fi
    return 1
  fi
}

# cmake_example NAME: configures and builds examples/NAME into $work/NAME,
# checking the CMake package came from PREFIX.
cmake_example() {
  local name=$1 dir="$work/$1"
  logged "$name.configure" cmake -S "$here/$name" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" || return 1
  local found
  found=$(sed -n 's/^xalloc_DIR:PATH=//p' "$dir/CMakeCache.txt")
  case $found in
    "$prefix"/*) ;;
    *)
      echo "  find_package(xalloc) used $found, not the package in $prefix"
      return 1
      ;;
  esac
  logged "$name.build" cmake --build "$dir" || return 1
}

# run_program NAME CMD...: runs CMD, shows its output, fails on a non-zero exit.
run_program() {
  local name=$1
  shift
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" | sed 's/^/  > /'
  if [ "$rc" -ne 0 ]; then
    echo "  $name: exit $rc"
    return 1
  fi
}

# --- ld_preload: an unchanged program under xalloc-run / LD_PRELOAD -------------

ex_ld_preload() {
  local dir="$work/ld_preload"
  mkdir -p "$dir"
  logged ld_preload.build make -C "$dir" -f "$here/ld_preload/Makefile" || return 1
  needs_lib "$dir/probe" no || return 1
  # Without xalloc the probe must notice.
  if "$dir/probe" >/dev/null 2>&1; then
    echo "  probe passed without xalloc: its check proves nothing"
    return 1
  fi
  echo "  without xalloc: probe fails, as it should"
  run_program xalloc-run "$xalloc_run" "$dir/probe" || return 1
  run_program LD_PRELOAD env LD_PRELOAD="$lib_so" "$dir/probe" || return 1
  # Options reach the program: --stats prints xalloc's statistics at exit.
  local err
  err=$("$xalloc_run" --stats -e XALLOC_PURGE_DELAY_MS=0 -- "$dir/probe" 2>&1 >/dev/null)
  if ! grep -q '^xalloc: stats:' <<<"$err"; then
    echo "  xalloc-run --stats: no statistics at exit; stderr was:"
    printf '%s\n' "$err" | sed 's/^/    | /'
    return 1
  fi
  echo "  xalloc-run --stats: statistics printed at exit"
  # A library that is not there: exit 127.
  "$xalloc_run" --lib "$work/no-such-libxalloc.so" -- "$dir/probe" >/dev/null 2>&1
  local rc=$?
  if [ "$rc" -ne 127 ]; then
    echo "  xalloc-run --lib <missing file>: exit $rc, expected 127"
    return 1
  fi
  echo "  xalloc-run --lib <missing file>: exit 127"
}

# --- link_shared: -lxalloc through pkg-config ----------------------------------

ex_link_shared() {
  local dir="$work/link_shared"
  mkdir -p "$dir"
  logged link_shared.build make -C "$dir" -f "$here/link_shared/Makefile" || return 1
  needs_lib "$dir/app" yes || return 1
  run_program app "$dir/app"
}

# --- static_override: libxalloc.a, with CMake and with pkg-config --------------

ex_static_override_cmake() {
  cmake_example static_override || return 1
  needs_lib "$work/static_override/app" no || return 1
  run_program app "$work/static_override/app"
}

ex_static_override_make() {
  local dir="$work/static_override-make"
  mkdir -p "$dir"
  logged static_override-make.build make -C "$dir" -f "$here/static_override/Makefile" || return 1
  needs_lib "$dir/app" no || return 1
  run_program app "$dir/app"
}

# --- find_package: xalloc::xalloc ----------------------------------------------

ex_find_package() {
  cmake_example find_package || return 1
  needs_lib "$work/find_package/app" yes || return 1
  run_program app "$work/find_package/app"
}

# --- prefixed_api: xalloc::xalloc-api beside the system malloc -----------------

ex_prefixed_api() {
  cmake_example prefixed_api || return 1
  needs_lib "$work/prefixed_api/app" no || return 1
  run_program app "$work/prefixed_api/app"
}

for example in \
  "ld_preload:ex_ld_preload" \
  "link_shared:ex_link_shared" \
  "static_override (CMake, xalloc::xalloc-static):ex_static_override_cmake" \
  "static_override (Makefile, pkg-config xalloc-static):ex_static_override_make" \
  "find_package:ex_find_package" \
  "prefixed_api:ex_prefixed_api"; do
  title=${example%:*}
  echo
  echo "=== $title"
  if "${example##*:}"; then pass "$title"; else fail "$title"; fi
done

echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
if [ $failures -eq 0 ]; then
  echo "RESULT: PASS (${#summary[@]} examples)"
  exit 0
fi
echo "RESULT: FAIL ($failures of ${#summary[@]} examples failed)"
exit 1
