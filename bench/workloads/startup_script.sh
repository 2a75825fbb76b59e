#!/bin/sh
# startup_script.sh: 27 small processes (and the shell), the kind a build or a shell script
# starts by the thousand, so that the cost of loading and starting an
# allocator in every process adds up where a user sees it. Run it under an
# allocator with LD_PRELOAD set for the shell, as BENCHMARK.md does:
#
#   hyperfine -N -w 20 -r 300 'sh bench/workloads/startup_script.sh' \
#     'env LD_PRELOAD=build/libxalloc.so sh bench/workloads/startup_script.sh'
#
# Every command is an external program (no shell builtins); output goes to
# /dev/null. Exit status 0.
set -e
dir=$(/bin/mktemp -d)
/bin/echo "b a c" > "$dir/in"
/usr/bin/printf '3\n1\n2\n1\n' > "$dir/nums"
{
  /bin/true
  /bin/cat "$dir/in"
  /bin/ls "$dir"
  /usr/bin/basename "$dir/in"
  /usr/bin/dirname "$dir/in"
  /bin/date +%s
  /usr/bin/wc -l "$dir/nums"
  /usr/bin/sort -n "$dir/nums"
  /usr/bin/sort "$dir/nums" | /usr/bin/uniq
  /usr/bin/head -n 1 "$dir/nums"
  /usr/bin/tail -n 1 "$dir/nums"
  /usr/bin/cut -d' ' -f2 "$dir/in"
  /usr/bin/tr a-z A-Z < "$dir/in"
  /bin/sed 's/a/x/' "$dir/in"
  /bin/grep -c 1 "$dir/nums"
  /usr/bin/awk '{ s += $1 } END { print s }' "$dir/nums"
  /usr/bin/expr 6 \* 7
  /usr/bin/env true
  /usr/bin/id -u
  /bin/uname -s
  /usr/bin/seq 3
  /usr/bin/stat -c %s "$dir/in"
} > /dev/null
/bin/rm -r "$dir"
