#!/usr/bin/env bash
# The xalloc test command (what CI runs through .ci/run).
#
# On a fresh Debian 12 machine, as root, it does all the set-up itself:
#   1. scripts/install-deps.sh test, then the layer check (tools/check_layers.py)
#   2. Release build (build/) and its whole test suite (unit, shim, static, e2e),
#      then its core, feature and shim tests with XALLOC_COMMIT_ON_DEMAND=1
#   3. ThreadSanitizer build (build-tsan/, XALLOC_SANITIZE=thread) and its tests
#   4. debug-checks build (build-debug/, Debug + XALLOC_DEBUG_CHECKS, with the
#      shared-write counting of XALLOC_COUNT_SHARED) and its tests, then a few bench workloads under its libxalloc.so (skipped while
#      the bench programs do not build)
#   5. self-host: the library and its core tests built by compilers running
#      under LD_PRELOAD=build/libxalloc.so, then those tests
#   6. fuzz: a clang build (build-fuzz/) of the libFuzzer targets
#      (tests/fuzz/), each fuzzed for 30 s (10 min with XALLOC_TEST_SOAK);
#      skipped when clang is not installed
#   7. known bugs: the DISABLED_ tests (tests/KNOWN_BUGS.md), informational
# and prints a PASS/FAIL summary; the exit status is non-zero if any step failed.
#
# Options (environment):
#   XALLOC_TEST_SOAK=1     longer stress runs (tests scale their work up),
#                          bigger bench runs, plus ASan and UBSan builds
#   XALLOC_TEST_ONLY="release tsan debug selfhost fuzz"   run only these stages
#   XALLOC_TEST_SKIP_DEPS=1  do not run install-deps.sh
#   XALLOC_TEST_CC / XALLOC_TEST_CXX  compilers for the sanitizer builds
#                          (default: gcc/g++)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

jobs=2
soak=${XALLOC_TEST_SOAK:-0}
[ "$soak" = "0" ] && soak=""
only=${XALLOC_TEST_ONLY:-}
XALLOC_TEST_SKIP_DEPS_SAVED=${XALLOC_TEST_SKIP_DEPS:-}
san_cc=${XALLOC_TEST_CC:-gcc}
san_cxx=${XALLOC_TEST_CXX:-g++}
logs="$root/build-logs"
mkdir -p "$logs"

# xalloc reads every XALLOC_* environment variable and warns about unknown
# ones, which the tests treat as failures: this script's own options must not
# reach the programs under test. The tests read XTEST_SOAK.
unset XALLOC_TEST_SOAK XALLOC_TEST_ONLY XALLOC_TEST_SKIP_DEPS XALLOC_TEST_CC XALLOC_TEST_CXX
skip_deps=${XALLOC_TEST_SKIP_DEPS_SAVED:-}
if [ -n "$soak" ]; then
  export XTEST_SOAK=$soak
fi

start_all=$(date +%s)
declare -a summary=()
failed_steps=0
tests_passed=0
tests_failed=0

wanted() {
  [ -z "$only" ] && return 0
  case " $only " in *" $1 "*) return 0 ;; esac
  return 1
}

# step NAME CMD...: runs CMD, records PASS/FAIL with its duration.
step() {
  local name=$1
  shift
  local t0 t1 rc
  t0=$(date +%s)
  echo
  echo "================ $name ================"
  "$@"
  rc=$?
  t1=$(date +%s)
  if [ $rc -eq 0 ]; then
    summary+=("PASS  $name ($((t1 - t0)) s)")
  elif [ $rc -eq 77 ]; then
    summary+=("SKIP  $name ($((t1 - t0)) s)")
  else
    summary+=("FAIL  $name ($((t1 - t0)) s, exit $rc)")
    failed_steps=$((failed_steps + 1))
  fi
  return 0
}

# Records an informational line in the summary.
note() { summary+=("INFO  $*"); }

configure_and_build() {
  local dir=$1
  shift
  cmake -S "$root" -B "$dir" -DXALLOC_BUILD_TESTS=ON -DXALLOC_BUILD_BENCH=OFF "$@" >"$logs/$(basename "$dir").configure.log" 2>&1 ||
    { tail -30 "$logs/$(basename "$dir").configure.log"; return 1; }
  cmake --build "$dir" -j"$jobs" 2>&1 | tee "$logs/$(basename "$dir").build.log" | grep -E 'error|warning|Error' | head -50
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build of $dir failed; see $logs/$(basename "$dir").build.log"; tail -30 "$logs/$(basename "$dir").build.log"; return 1; }
  echo "built $dir"
}

# A build with the sanitizer compilers.
san_configure_and_build() {
  (
    export CC="$san_cc" CXX="$san_cxx"
    configure_and_build "$@"
  )
}

# run_ctest DIR [ctest args...]: runs the tests, adds their counts to the totals.
run_ctest() {
  local dir=$1
  shift
  local log="$logs/${ctest_log_name:-$(basename "$dir")}.ctest.log"
  ctest --test-dir "$dir" -j"$jobs" --output-on-failure "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line passed failed total
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  if [ -n "$line" ]; then
    failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    total=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
    passed=$((total - failed))
    tests_passed=$((tests_passed + passed))
    tests_failed=$((tests_failed + failed))
    note "${ctest_log_name:-$(basename "$dir")}: $passed passed, $failed failed"
  else
    echo "no test summary from ctest in $dir"
    return 1
  fi
  [ "$total" -gt 0 ] || { echo "ctest ran no test in $dir"; return 1; }
  return "$rc"
}

run_ctest_commit_on_demand() {
  XALLOC_COMMIT_ON_DEMAND=1 ctest_log_name=$(basename "$1")-commit-on-demand run_ctest "$1" -L "core|features|shim"
}

# --- 1. dependencies --------------------------------------------------------

install_deps() {
  if [ -n "$skip_deps" ]; then
    echo "skipped (XALLOC_TEST_SKIP_DEPS)"
    return 0
  fi
  bash "$root/scripts/install-deps.sh" test
}
step "dependencies (scripts/install-deps.sh test)" install_deps

# --- structure ----------------------------------------------------------------

# Every include in src/, shim/ and include/ runs down the layers
# (docs/design.md), no two modules include each other, no file is over 600
# lines.
step "structure: layers and includes (tools/check_layers.py)" python3 "$root/tools/check_layers.py" --stats

# --- 2. Release ---------------------------------------------------------------

if wanted release; then
  step "release: build (build/)" configure_and_build "$root/build" -DCMAKE_BUILD_TYPE=Release
  step "release: tests" run_ctest "$root/build"
  # The core, feature and shim tests again with memory committed as it is
  # used, as under a data size limit or a kernel that never overcommits.
  step "release: core, feature and shim tests, XALLOC_COMMIT_ON_DEMAND=1" run_ctest_commit_on_demand "$root/build"
fi

# --- 3. ThreadSanitizer -----------------------------------------------------

if wanted tsan; then
  step "tsan: build (build-tsan/, $san_cxx)" san_configure_and_build "$root/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXALLOC_SANITIZE=thread
  step "tsan: tests" run_ctest "$root/build-tsan"
fi

# --- 4. debug checks ----------------------------------------------------------

# A few bench workloads under the debug-checks library: every slab and list
# is validated as the workloads run. The bench programs are built
# standalone; while they do not build, the step is skipped.
bench_under_debug() {
  local lib="$root/build-debug/libxalloc.so"
  [ -f "$lib" ] || { echo "no $lib"; return 1; }
  if [ ! -f "$root/bench/CMakeLists.txt" ]; then
    echo "SKIP: no bench/ yet"
    return 77
  fi
  local bdir="$root/build-bench"
  if ! cmake -S "$root/bench" -B "$bdir" -DCMAKE_BUILD_TYPE=Release >"$logs/bench.configure.log" 2>&1; then
    echo "SKIP: bench/ does not configure yet (see $logs/bench.configure.log)"
    return 77
  fi
  local scale=1
  [ -n "$soak" ] && scale=10
  # name and small arguments (the programs' positional parameters)
  local -a runs=(
    "larson 2 8 1000 $((1000 * scale)) 10 4141 3"
    "multithread_churn 4 $((20000 * scale)) 1"
    "producer_consumer 2 $((50000 * scale)) 64"
    "fragmentation 2000 $((20000 * scale)) 102400 1"
    "free_hotspot 4 $((20000 * scale)) 1"
    "mstress 2 10 $((3 * scale)) 1"
    "malloc_large $((100 * scale)) 1"
    "xmalloc_test 2 $((50 * scale)) 64"
  )
  local ran=0 failed=0 skipped=0 entry name
  for entry in "${runs[@]}"; do
    name=${entry%% *}
    if ! cmake --build "$bdir" --target "xbench_$name" -j"$jobs" >"$logs/bench.$name.build.log" 2>&1; then
      echo "  $name: not built (skipped)"
      skipped=$((skipped + 1))
      continue
    fi
    local bin="$bdir/bin/$name"
    [ -x "$bin" ] || { echo "  $name: no binary (skipped)"; skipped=$((skipped + 1)); continue; }
    # shellcheck disable=SC2086
    timeout 120 env XBENCH_EXPECT=libxalloc LD_PRELOAD="$lib" "$bin" ${entry#* } >"$logs/bench.$name.out" 2>"$logs/bench.$name.err"
    local rc=$?
    if [ $rc -eq 0 ]; then
      echo "  $name: ok"
      ran=$((ran + 1))
    elif [ $rc -eq 2 ]; then
      echo "  $name: arguments not accepted (skipped): $(head -2 "$logs/bench.$name.err")"
      skipped=$((skipped + 1))
    else
      echo "  $name: FAILED (exit $rc): $(tail -5 "$logs/bench.$name.err")"
      failed=$((failed + 1))
    fi
  done
  note "bench under debug checks: $ran ran, $failed failed, $skipped skipped"
  [ $failed -eq 0 ] || return 1
  [ $ran -gt 0 ] || return 77
  return 0
}

if wanted debug; then
  step "debug: build (build-debug/, XALLOC_DEBUG_CHECKS, XALLOC_COUNT_SHARED)" configure_and_build "$root/build-debug" \
    -DCMAKE_BUILD_TYPE=Debug -DXALLOC_DEBUG_CHECKS=ON -DXALLOC_COUNT_SHARED=ON
  step "debug: tests" run_ctest "$root/build-debug"
  step "debug: bench workloads under the debug-checks libxalloc.so" bench_under_debug
fi

# --- 5. self-host -------------------------------------------------------------

# The project builds itself with its compilers running on xalloc: the
# library and the core tests, which it then runs (the rest would be built
# and never run).
self_host() {
  local lib="$root/build/libxalloc.so"
  [ -f "$lib" ] || { echo "no $lib (the release build failed?)"; return 1; }
  local dir="$root/build-selfhost"
  rm -rf "$dir"
  LD_PRELOAD="$lib" cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DXALLOC_BUILD_TESTS=ON \
    -DXALLOC_BUILD_BENCH=OFF >"$logs/selfhost.configure.log" 2>&1 ||
    { echo "configure under xalloc failed"; tail -30 "$logs/selfhost.configure.log"; return 1; }
  # Every process of the build prints xalloc's statistics when it exits.
  XALLOC_STATS=1 LD_PRELOAD="$lib" cmake --build "$dir" --target xalloc_core_tests -j"$jobs" \
    >"$logs/selfhost.build.log" 2>&1
  local rc=$?
  local served
  served=$(grep -cE '^xalloc: stats: [1-9][0-9]* segments' "$logs/selfhost.build.log")
  echo "processes of the build that xalloc served: $served"
  if [ $rc -ne 0 ]; then
    echo "build under xalloc failed:"
    grep -v '^xalloc: stats:' "$logs/selfhost.build.log" | tail -40
    return 1
  fi
  if grep '^xalloc: ' "$logs/selfhost.build.log" | grep -qv '^xalloc: stats:'; then
    echo "xalloc reported problems during the build:"
    grep '^xalloc: ' "$logs/selfhost.build.log" | grep -v '^xalloc: stats:' | head
    return 1
  fi
  [ "$served" -ge 10 ] || { echo "xalloc served too few processes: LD_PRELOAD not effective?"; return 1; }
  note "self-host: $served compiler/linker processes ran on xalloc"
  # What those compilers produced works.
  run_ctest "$dir" -L core
}

if wanted selfhost; then
  step "self-host: build under LD_PRELOAD=build/libxalloc.so, run its core tests" self_host
fi

# --- 6. fuzz ---------------------------------------------------------------------

# The libFuzzer targets (tests/fuzz/) need clang. Only they are built in
# build-fuzz/: the rest of the project is built and tested with gcc above.
fuzz_stage() {
  if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
    echo "SKIP: clang is not installed"
    return 77
  fi
  local dir="$root/build-fuzz"
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DXALLOC_BUILD_TESTS=ON -DXALLOC_BUILD_BENCH=OFF >"$logs/build-fuzz.configure.log" 2>&1 ||
    { tail -30 "$logs/build-fuzz.configure.log"; return 1; }
  if ! grep -q 'xalloc_fuzzers' "$dir/Makefile" 2>/dev/null && ! grep -q 'xalloc_fuzzers' "$dir/build.ninja" 2>/dev/null; then
    echo "SKIP: clang has no libFuzzer here (see $logs/build-fuzz.configure.log)"
    return 77
  fi
  cmake --build "$dir" --target xalloc_fuzzers -j"$jobs" 2>&1 | tee "$logs/build-fuzz.build.log" | grep -E 'error|warning|Error' | head -50
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build of the fuzzers failed; see $logs/build-fuzz.build.log"; return 1; }
  run_ctest "$dir" -L fuzz
}

if wanted fuzz; then
  step "fuzz: clang build (build-fuzz/), libFuzzer targets (tests/fuzz/)" fuzz_stage
fi

# --- soak: more sanitizers ------------------------------------------------------

if [ -n "$soak" ]; then
  step "asan: build (build-asan/)" san_configure_and_build "$root/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXALLOC_SANITIZE=address
  step "asan: tests" run_ctest "$root/build-asan"
  step "ubsan: build (build-ubsan/)" san_configure_and_build "$root/build-ubsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXALLOC_SANITIZE=undefined
  step "ubsan: tests" run_ctest "$root/build-ubsan"
fi

# --- 7. known bugs (informational) ------------------------------------------

known_bugs() {
  # Each DISABLED_ test of the release and the ThreadSanitizer builds runs
  # alone (some bugs show only under TSan, whose reports end the process); a
  # test counts as fixed when it passes in both.
  local dir bin name suite rc
  declare -A failing=() passing=()
  for dir in build build-tsan; do
    bin="$root/$dir/tests/xalloc_core_tests"
    [ -x "$bin" ] || continue
    while read -r name; do
      TSAN_OPTIONS="halt_on_error=1" timeout 120 "$bin" --gtest_also_run_disabled_tests --gtest_filter="$name" \
        </dev/null >>"$logs/known-bugs.$dir.log" 2>&1
      rc=$?
      if [ $rc -eq 0 ]; then passing[$name]=1; else failing[$name]=1; fi
    done < <("$bin" --gtest_list_tests --gtest_also_run_disabled_tests | awk '
      /^[^ ]/ { suite = $1; next }
      $1 ~ /^DISABLED_/ || suite ~ /^DISABLED_/ { print suite $1 }')
  done
  local still=${#failing[@]} fixed=""
  for name in "${!passing[@]}"; do
    [ -n "${failing[$name]:-}" ] || fixed="$fixed $name"
  done
  echo "known-bug tests still failing: $still (tests/KNOWN_BUGS.md): ${!failing[*]}"
  note "known allocator bugs: $still DISABLED_ tests still fail (tests/KNOWN_BUGS.md)"
  [ -z "$fixed" ] || note "known-bug tests that now PASS (enable them):$fixed"
  return 0
}
if wanted release; then
  step "known bugs (DISABLED_ tests, informational)" known_bugs
fi

# --- summary ------------------------------------------------------------------

end_all=$(date +%s)
echo
echo "================ summary ================"
for line in "${summary[@]}"; do echo "$line"; done
echo "total time: $((end_all - start_all)) s"
if [ $failed_steps -eq 0 ]; then
  echo "RESULT: PASS"
else
  echo "RESULT: FAIL ($failed_steps step(s) failed)"
fi
echo "tests: $tests_passed passed, $tests_failed failed"
[ $failed_steps -eq 0 ]
