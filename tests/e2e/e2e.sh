#!/usr/bin/env bash
# End-to-end tests: real programs running on xalloc.
#
# usage: e2e.sh CASE
#   python perl ruby sqlite git gxx clangxx
#                                     run the program under LD_PRELOAD=libxalloc.so
#                                     with XALLOC_STATS=1; its output must equal
#                                     a run without xalloc (and known values), and
#                                     the exit statistics must show xalloc served it
#   datalimit   the python and perl workloads under a data size limit
#               (ulimit -d), which turns commit on demand on by itself
#   clink       build a C program with -lxalloc and run it
#   static      build a C++ program with libxalloc.a and run it
#   staticrt    the same with the C++ runtime linked statically too: std::bad_alloc
#   staticmisuse  a C program linked with -static frees a block twice: the report
#               and a stack trace reaching main
#   staticprof  a C program linked with -static-pie under the heap profiler: its
#               samples' stacks
#   deps        libxalloc.so needs libc only and exports the whole API
#
# Environment (set by CTest, see tests/CMakeLists.txt):
#   E2E_LIB          path of libxalloc.so
#   E2E_STATIC_LIB   path of libxalloc.a
#   E2E_INCLUDE      the public include directory
#   E2E_WORK            a scratch directory
# Exit: 0 pass, 1 fail, 77 skip (a required tool is missing).
set -uo pipefail

case_name=${1:?usage: e2e.sh CASE}
here=$(cd "$(dirname "$0")" && pwd)
: "${E2E_LIB:?}" "${E2E_WORK:?}"
work="$E2E_WORK/$case_name"
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

fail() {
  echo "e2e $case_name: FAIL: $*" >&2
  exit 1
}
skip() {
  echo "e2e $case_name: SKIP: $*" >&2
  exit 77
}
need() {
  command -v "$1" >/dev/null 2>&1 || skip "$1 is not installed (scripts/install-deps.sh test installs it)"
}

# Debian's interpreters, not whatever shims a PATH may put first.
tool() {
  local name=$1
  if [ -x "/usr/bin/$name" ]; then echo "/usr/bin/$name"; else command -v "$name"; fi
}

# run_both NAME CMD...: runs CMD without xalloc (NAME.ref.out) and with it
# preloaded and XALLOC_STATS=1 (NAME.out, NAME.err); both must exit 0 and
# print the same.
run_both() {
  local name=$1
  shift
  "$@" >"$name.ref.out" 2>"$name.ref.err" || fail "reference run of '$*' failed: $(tail -5 "$name.ref.err")"
  env XALLOC_STATS=1 LD_PRELOAD="$E2E_LIB" "$@" >"$name.out" 2>"$name.err"
  local rc=$?
  [ $rc -eq 0 ] || fail "'$*' under xalloc exited with $rc: $(grep -v '^xalloc: stats:' "$name.err" | tail -20)"
  cmp -s "$name.ref.out" "$name.out" ||
    fail "'$*' printed something else under xalloc: $(diff "$name.ref.out" "$name.out" | head -20)"
  check_stats "$name.err"
}

# The statistics xalloc prints at exit show it served the program: at least
# one line "xalloc: stats: N segments, ..." with N >= 1, and no other
# xalloc message (warnings, misuse reports).
check_stats() {
  local err=$1
  local max_segments
  max_segments=$(sed -n 's/^xalloc: stats: \([0-9][0-9]*\) segments, .*/\1/p' "$err" | sort -n | tail -1)
  [ -n "$max_segments" ] || fail "no 'xalloc: stats: N segments' line: xalloc did not serve the program? stderr: $(head -c 2000 "$err")"
  [ "$max_segments" -ge 1 ] || fail "xalloc reports $max_segments segments: it served nothing"
  grep -q '^xalloc: stats: mapped [0-9]* KiB' "$err" || fail "no 'xalloc: stats: mapped' line"
  if grep '^xalloc: ' "$err" | grep -qv '^xalloc: stats: '; then
    fail "xalloc reported a problem: $(grep '^xalloc: ' "$err" | grep -v '^xalloc: stats: ' | head -5)"
  fi
  echo "xalloc served it: $(grep -c '^xalloc: stats: [0-9]* segments' "$err") process(es), up to $max_segments segment(s)"
}

expect_line() {
  local file=$1 line=$2
  grep -qxF -- "$line" "$file" || fail "expected the line '$line' in $file, got: $(head -20 "$file")"
}

case "$case_name" in
  python)
    py=$(tool python3) || skip "python3 is not installed"
    [ -n "$py" ] || skip "python3 is not installed"
    run_both py "$py" "$here/workload.py"
    grep -q '^python workload: [0-9a-f]\{64\}$' py.out || fail "unexpected output: $(cat py.out)"
    ;;

  perl)
    need perl
    run_both pl "$(tool perl)" "$here/workload.pl"
    grep -q '^perl workload: [0-9a-f]\{32\}$' pl.out || fail "unexpected output: $(cat pl.out)"
    ;;

  ruby)
    need ruby
    run_both rb "$(tool ruby)" "$here/workload.rb"
    grep -q '^ruby workload: [0-9a-f]\{64\}$' rb.out || fail "unexpected output: $(cat rb.out)"
    ;;

  datalimit)
    # 4 GiB: far more than either program uses, far less than the 32 MiB
    # segments would count if they were mapped writable from the start.
    py=$(tool python3) || skip "python3 is not installed"
    [ -n "$py" ] || skip "python3 is not installed"
    need perl
    ulimit -d 4194304 || skip "cannot set a data size limit"
    run_both py "$py" "$here/workload.py"
    run_both pl "$(tool perl)" "$here/workload.pl"
    for err in py.err pl.err; do
      grep -q '^xalloc: stats: mapped [0-9]* KiB (committed on demand)' "$err" ||
        fail "the data size limit did not turn commit on demand on ($err): $(grep '^xalloc: stats: mapped' "$err" | head -2)"
    done
    ;;

  sqlite)
    need sqlite3
    sq=$(tool sqlite3)
    run_both_sqlite() {
      rm -f ref.db xa.db ref.db-* xa.db-*
      "$sq" ref.db <"$here/workload.sql" >sql.ref.out 2>sql.ref.err || fail "reference sqlite3 failed: $(cat sql.ref.err)"
      env XALLOC_STATS=1 LD_PRELOAD="$E2E_LIB" "$sq" xa.db <"$here/workload.sql" >sql.out 2>sql.err ||
        fail "sqlite3 under xalloc failed: $(grep -v '^xalloc: stats:' sql.err | tail -20)"
      cmp -s sql.ref.out sql.out || fail "sqlite3 output differs under xalloc: $(diff sql.ref.out sql.out | head)"
      check_stats sql.err
    }
    run_both_sqlite
    expect_line sql.out "wal"
    grep -q '^200000|20000100000|' sql.out || fail "bulk insert lost rows: $(head -3 sql.out)"
    expect_line sql.out "100000|10000000000"
    expect_line sql.out "ok"
    # The database written under xalloc reads back the same without it.
    [ "$("$sq" xa.db 'SELECT count(*), sum(id) FROM t;')" = "100000|10000000000" ] || fail "database content differs"
    ;;

  git)
    need git
    g=$(tool git)
    make_repo() {
      local dir=$1
      shift
      mkdir -p "$dir" && (
        cd "$dir" || exit 1
        export GIT_AUTHOR_NAME=Tester GIT_AUTHOR_EMAIL=t@example.invalid GIT_COMMITTER_NAME=Tester \
          GIT_COMMITTER_EMAIL=t@example.invalid GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' \
          GIT_COMMITTER_DATE='2024-01-01T00:00:00Z' HOME="$work" GIT_CONFIG_NOSYSTEM=1
        "$@" "$g" init -q -b main . &&
          for i in $(seq 1 300); do
            mkdir -p "d$((i % 10))" && seq 1 $((i * 7)) | sed "s/^/file $i line /" >"d$((i % 10))/f$i.txt"
          done &&
          "$@" "$g" add -A &&
          "$@" "$g" commit -q -m "first commit" &&
          for i in $(seq 1 300 | awk 'NR % 3 == 0'); do echo "change $i" >>"d$((i % 10))/f$i.txt"; done &&
          "$@" "$g" commit -q -a -m "second commit" &&
          "$@" "$g" gc -q &&
          "$@" "$g" fsck --no-progress 2>&1 &&
          "$@" "$g" log --format='%H %s' &&
          "$@" "$g" diff --stat HEAD~1 HEAD | tail -1
      )
    }
    make_repo ref >git.ref.out 2>git.ref.err || fail "reference git run failed: $(tail git.ref.err)"
    make_repo xa env XALLOC_STATS=1 LD_PRELOAD="$E2E_LIB" >git.out 2>git.err ||
      fail "git under xalloc failed: $(grep -v '^xalloc: stats:' git.err | tail -20)"
    # Every git process prints its statistics; stdout is compared without them.
    grep -v '^xalloc: stats:' git.out >git.filtered.out
    grep '^xalloc: stats:' git.out >>git.err
    cmp -s git.ref.out git.filtered.out || fail "git output (commit ids) differs under xalloc: $(diff git.ref.out git.filtered.out | head)"
    grep -q ' second commit$' git.filtered.out || fail "no second commit: $(cat git.filtered.out)"
    check_stats git.err
    ;;

  gxx)
    need g++
    cxx=$(tool g++)
    env XALLOC_STATS=1 LD_PRELOAD="$E2E_LIB" "$cxx" -std=c++20 -O2 -Wall -Wextra -Werror \
      -o compiled "$here/compile_me.cpp" >gxx.out 2>gxx.err || fail "g++ under xalloc failed: $(grep -v '^xalloc: stats:' gxx.err | tail -30)"
    check_stats gxx.err
    # cc1plus, as and the linker all ran on xalloc.
    n=$(grep -c '^xalloc: stats: [0-9]* segments' gxx.err)
    [ "$n" -ge 3 ] || fail "expected statistics from g++, cc1plus, as and ld; got $n"
    ./compiled >run.out || fail "the compiled program failed"
    expect_line run.out "compiled program: total=499500 fib=12586269025 matches=9"
    ;;

  clangxx)
    # clang copies stale stack bytes into the padding of its APValues: with
    # free markers that xalloc's own code could leave on the stack, a build
    # of xalloc at -O0 (the debug-checks build) aborted every compile with a
    # false double free.
    need clang++
    cxx=$(tool clang++)
    env XALLOC_STATS=1 LD_PRELOAD="$E2E_LIB" "$cxx" -std=c++20 -O2 -Wall -Wextra -Werror \
      -o compiled "$here/compile_me.cpp" >clangxx.out 2>clangxx.err ||
      fail "clang++ under xalloc failed: $(grep -v '^xalloc: stats:' clangxx.err | tail -30)"
    check_stats clangxx.err
    # The compiler (its front end runs in the driver's process) and the linker.
    n=$(grep -c '^xalloc: stats: [0-9]* segments' clangxx.err)
    [ "$n" -ge 2 ] || fail "expected statistics from clang++ and ld; got $n"
    ./compiled >run.out || fail "the compiled program failed"
    expect_line run.out "compiled program: total=499500 fib=12586269025 matches=9"
    ;;

  clink)
    need cc
    : "${E2E_INCLUDE:?}"
    libdir=$(dirname "$E2E_LIB")
    cc -std=c11 -O2 -Wall -Wextra -Werror -I"$E2E_INCLUDE" -o c_program "$here/c_program.c" \
      -L"$libdir" -lxalloc -Wl,-rpath,"$libdir" -pthread || fail "cannot build a C program with -lxalloc"
    deps=$(readelf -d c_program)
    grep -q 'NEEDED.*\[libxalloc\.so' <<<"$deps" || fail "the program does not depend on libxalloc.so"
    XALLOC_STATS=1 ./c_program >c.out 2>c.err || fail "the C program failed: $(cat c.err)"
    expect_line c.out "c program: ok"
    check_stats c.err
    ;;

  static)
    need g++
    : "${E2E_INCLUDE:?}" "${E2E_STATIC_LIB:?}"
    g++ -std=c++20 -O2 -Wall -Wextra -Werror -I"$E2E_INCLUDE" -o static_program "$here/static_program.cpp" \
      "$E2E_STATIC_LIB" -pthread || fail "cannot build a C++ program with libxalloc.a"
    # (Output captured first: grep -q ending a pipe early is a SIGPIPE under pipefail.)
    deps=$(readelf -d static_program)
    if grep -q 'NEEDED.*libxalloc' <<<"$deps"; then fail "linked against the shared library"; fi
    symbols=$(nm static_program)
    grep -q ' T malloc$' <<<"$symbols" || fail "the program does not define malloc"
    XALLOC_STATS=1 ./static_program >s.out 2>s.err || fail "the static program failed: $(cat s.err)"
    expect_line s.out "static program: ok"
    check_stats s.err
    ;;

  staticrt)
    need g++
    : "${E2E_INCLUDE:?}" "${E2E_STATIC_LIB:?}"
    g++ -std=c++20 -O2 -Wall -Wextra -Werror -static-libstdc++ -static-libgcc -o static_runtime_program \
      "$here/static_runtime_program.cpp" "$E2E_STATIC_LIB" -pthread ||
      fail "cannot build a C++ program with libxalloc.a and -static-libstdc++"
    deps=$(readelf -d static_runtime_program)
    if grep -q 'NEEDED.*libstdc++' <<<"$deps"; then fail "libstdc++ was linked dynamically"; fi
    ./static_runtime_program >r.out 2>r.err || fail "the program failed: $(cat r.out r.err)"
    expect_line r.out "static runtime program: ok"
    ;;

  staticmisuse)
    need cc
    : "${E2E_STATIC_LIB:?}"
    [ -e /usr/lib/x86_64-linux-gnu/libc.a ] || skip "no static libc (libc6-dev)"
    # (ld warns that dlopen in a static program needs the shared libc at run time.)
    cc -std=c11 -O1 -Wall -Wextra -Werror -static -o static_misuse "$here/static_misuse.c" \
      -Wl,--whole-archive "$E2E_STATIC_LIB" -Wl,--no-whole-archive -pthread 2>link.err ||
      fail "cannot build a static C program with libxalloc.a: $(cat link.err)"
    ./static_misuse >m.out 2>m.err
    status=$?
    [ "$status" -eq 134 ] || fail "expected SIGABRT (exit status 134), got $status: $(cat m.err)"
    block=$(sed -n 's/^block //p' m.out)
    grep -qE "^xalloc: double free of $block \([0-9]+-byte class\) in free\(\)$" m.err ||
      fail "no double-free report for $block: $(cat m.err)"
    grep -qE '^    #[0-9]+ 0x[0-9a-f]+ in main\+0x[0-9a-f]+' m.err || fail "no stack trace reaching main: $(cat m.err)"
    if grep -q survived m.out; then fail "the program went on after the double free"; fi
    ;;

  staticprof)
    need cc
    : "${E2E_STATIC_LIB:?}"
    [ -e /usr/lib/x86_64-linux-gnu/libc.a ] || skip "no static libc (libc6-dev)"
    cc -std=c11 -O1 -Wall -Wextra -Werror -static-pie -o static_prof "$here/static_prof.c" \
      -Wl,--whole-archive "$E2E_STATIC_LIB" -Wl,--no-whole-archive -pthread 2>link.err ||
      fail "cannot build a static PIE with libxalloc.a: $(cat link.err)"
    XALLOC_PROF=1 XALLOC_PROF_RATE=64k XALLOC_PROF_PREFIX="$work/prof" ./static_prof >p.out 2>p.err ||
      fail "the program failed: $(cat p.err)"
    profile=$(ls "$work"/prof.*.collapsed 2>/dev/null | head -1)
    [ -n "$profile" ] || fail "no profile written: $(cat p.err)"
    grep -qE '(^|;)main\+0x[0-9a-f]+;keep_blocks\+0x[0-9a-f]+ [0-9]+$' "$profile" ||
      fail "no sample's stack ends in main;keep_blocks: $(head -5 "$profile")"
    if grep -q '_ZN6xalloc' "$profile"; then fail "xalloc's own frames in the stacks: $(head -5 "$profile")"; fi
    # Every allocation sampled, from libc's own start-up on (which allocates
    # before _dl_find_object is ready), with and without -pie.
    cc -std=c11 -O1 -static -o static_prof_nopie "$here/static_prof.c" \
      -Wl,--whole-archive "$E2E_STATIC_LIB" -Wl,--no-whole-archive -pthread 2>>link.err ||
      fail "cannot build a static program with libxalloc.a: $(cat link.err)"
    for program in static_prof static_prof_nopie; do
      XALLOC_PROF=1 XALLOC_PROF_RATE=1 XALLOC_PROF_PREFIX="$work/every" "./$program" >e.out 2>e.err ||
        fail "$program failed with every allocation sampled (status $?): $(cat e.err)"
    done
    ;;

  deps)
    need readelf
    need nm
    needed=$(readelf -d "$E2E_LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
    [ "$needed" = "libc.so.6 " ] || fail "libxalloc.so needs [$needed]; it must need libc.so.6 only"
    dyn=$(readelf -d "$E2E_LIB")
    grep -q 'SONAME.*libxalloc\.so\.' <<<"$dyn" || fail "no versioned SONAME"
    exported=$(nm -D --defined-only "$E2E_LIB" | awk '$2 ~ /^[TW]$/ {print $3}' | sort)
    for sym in malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc pvalloc \
      malloc_usable_size free_sized free_aligned_sized cfree __libc_malloc __libc_free __libc_calloc \
      __libc_realloc __libc_memalign malloc_trim mallinfo mallinfo2 malloc_stats malloc_info mallopt \
      _Znwm _Znam _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t _ZnwmSt11align_val_t _ZnamSt11align_val_t \
      _ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t _ZdlPv _ZdaPv \
      _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t _ZdlPvm _ZdaPvm _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t \
      _ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t _ZdlPvmSt11align_val_t \
      _ZdaPvmSt11align_val_t xalloc_malloc xalloc_free xalloc_owns xalloc_get_stats xalloc_trim xalloc_version; do
      grep -qxF "$sym" <<<"$exported" || fail "libxalloc.so does not export $sym"
    done
    # Nothing else leaks out: every export is an allocation entry point.
    strays=$(grep -vE '^(_Zn[wa]m|_Zd[la]Pv|xalloc_|__libc_|__posix_memalign$|(malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|free_sized|free_aligned_sized|cfree|malloc_trim|mallinfo|mallinfo2|malloc_stats|malloc_info|mallopt)$)' <<<"$exported" | tr '\n' ' ')
    [ -z "$strays" ] || fail "libxalloc.so exports internal symbols: $strays"
    echo "libxalloc.so needs: $needed; exports $(wc -l <<<"$exported") functions"
    ;;

  *)
    echo "e2e.sh: unknown case '$case_name'" >&2
    exit 2
    ;;
esac

echo "e2e $case_name: PASS"
