#!/usr/bin/env bash
# Runs one libFuzzer target for CTest (tests/fuzz/CMakeLists.txt).
#
#   run_fuzz.sh seeds        FUZZER SEED_DIR WORK_DIR   each seed input once
#   run_fuzz.sh SECONDS      FUZZER SEED_DIR WORK_DIR   fuzz for SECONDS
#   run_fuzz.sh soak:SECONDS FUZZER SEED_DIR WORK_DIR   the same when XTEST_SOAK
#                                                       is set, else skipped (77)
#
# New inputs go to WORK_DIR/corpus (kept between runs, so later runs start
# from what earlier ones found; the seed directory is only read), crash
# reproducers to WORK_DIR/artifacts/. A failure prints the command that
# replays the reproducer.
set -uo pipefail

mode=$1 fuzzer=$2 seeds=$3 work=$4

if [[ $mode == soak:* ]]; then
  if [ -z "${XTEST_SOAK:-}" ] || [ "${XTEST_SOAK}" = "0" ]; then
    echo "skipped: long fuzzing runs only when XTEST_SOAK is set (scripts/test.sh: XALLOC_TEST_SOAK=1)"
    exit 77
  fi
  mode=${mode#soak:}
fi

mkdir -p "$work/corpus" "$work/artifacts"
# Reports of the sanitized harness (not of xalloc, which is not sanitized).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:abort_on_error=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1"

common=(-rss_limit_mb=4096 -timeout=60 -max_len=4096 -len_control=20 -artifact_prefix="$work/artifacts/" -print_final_stats=1)

if [ "$mode" = "seeds" ]; then
  # -runs=0: load (that is, run) every input of the corpus, then stop.
  "$fuzzer" "${common[@]}" -runs=0 "$seeds"
  rc=$?
else
  start=$(date +%s)
  "$fuzzer" "${common[@]}" -max_total_time="$mode" "$work/corpus" "$seeds" 2>&1 |
    grep -vE '^#[0-9]+.*(NEW|REDUCE|pulse)' # progress lines: too many for the test log
  rc=${PIPESTATUS[0]}
  echo "fuzzed for $(($(date +%s) - start)) s; corpus: $(find "$work/corpus" -type f | wc -l) inputs"
fi

if [ $rc -ne 0 ]; then
  echo "FAILED (exit $rc). Reproducers:"
  for f in "$work"/artifacts/*; do
    [ -f "$f" ] && echo "  $fuzzer $f"
  done
fi
exit $rc
