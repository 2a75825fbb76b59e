/* rss_of [NAME=VALUE...] -- PROGRAM [ARGS...]
 *
 * Runs PROGRAM with the given variables added to its environment and
 * prints its peak RSS ("maxrss_kib N", from wait4) and how it ended.
 *
 * What /usr/bin/time -f %M does, without depending on it. The peak RSS the
 * kernel reports for a process includes what it had before its exec: the
 * pages of the process it was forked from. Forked from a big test program,
 * /bin/true would "use" as much as that program, so the test starts this
 * small launcher, which forks the measured program itself. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  int first = 1;
  while (first < argc && strcmp(argv[first], "--") != 0) ++first;
  if (first + 1 >= argc) {
    fprintf(stderr, "usage: %s [NAME=VALUE...] -- PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 2;
  }
  if (pid == 0) {
    for (int i = 1; i < first; ++i) putenv(argv[i]);
    execvp(argv[first + 1], argv + first + 1);
    perror("exec");
    _exit(127);
  }
  int status = 0;
  struct rusage usage;
  if (wait4(pid, &status, 0, &usage) < 0) {
    perror("wait4");
    return 2;
  }
  printf("maxrss_kib %ld\n", usage.ru_maxrss);
  if (WIFEXITED(status)) {
    printf("exit %d\n", WEXITSTATUS(status));
  } else {
    printf("signal %d\n", WTERMSIG(status));
  }
  return 0;
}
