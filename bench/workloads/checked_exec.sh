#!/bin/sh
# checked_exec.sh PROGRAM [ARG...]: runs a program that is not part of the
# suite (python3, sqlite3, g++) after checking, in this very process, that
# the allocator the runner meant to test is the one loaded: the shell runs
# with the same LD_PRELOAD as the program it execs. XBENCH_EXPECT names the
# library ("libc.so": no allocator library may be loaded). Exit status 86
# on a mismatch, as the suite's own programs do.
maps=/proc/$$/maps
others='libxalloc|libjemalloc|libmimalloc|libtcmalloc|libtbbmalloc|scudo'
if [ "${XBENCH_EXPECT:-}" = "libc.so" ]; then
  if grep -qE "$others" "$maps"; then
    echo "checked_exec: expected glibc's malloc, but an allocator library is loaded" >&2
    exit 86
  fi
elif [ -n "${XBENCH_EXPECT:-}" ] && ! grep -q "$XBENCH_EXPECT" "$maps"; then
  echo "checked_exec: $XBENCH_EXPECT is not loaded" >&2
  exit 86
fi
exec "$@"
