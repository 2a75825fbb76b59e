/*
 * xbench_launch: starts one benchmark run and reports the run's resource
 * usage as the kernel measured it.
 *
 * Why it exists: a process's peak RSS (ru_maxrss) survives exec - Linux
 * folds the memory map the process had before exec into it. A program
 * started by the Python runner would inherit the runner's own 20 MiB as a
 * floor. This small launcher forks (the child starts with a fresh peak of
 * the launcher's few hundred KiB), sets LD_PRELOAD only in the child (so
 * the launcher itself never runs on the allocator under test), execs the
 * program, waits for it with wait4 and writes its figures to a file.
 *
 * usage: XBENCH_LAUNCH_PRELOAD=<lib or empty> xbench_launch <report> <program> [args...]
 * writes to <report>: exit=<status> (or signal=<n>), maxrss_kb=, minflt=, user_s=,
 *   sys_s=; exits 0, or 125 when the program could not be started.
 */
#define _GNU_SOURCE 1

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static double seconds(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6; }

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: XBENCH_LAUNCH_PRELOAD=<lib> %s <report> <program> [args...]\n", argv[0]);
    return 125;
  }
  const char *report = argv[1];
  const char *preload = getenv("XBENCH_LAUNCH_PRELOAD");

  pid_t pid = fork();
  if (pid < 0) {
    perror("xbench_launch: fork");
    return 125;
  }
  if (pid == 0) {
    if (preload != NULL && preload[0] != '\0') setenv("LD_PRELOAD", preload, 1);
    else unsetenv("LD_PRELOAD");
    unsetenv("XBENCH_LAUNCH_PRELOAD");
    execvp(argv[2], &argv[2]);
    fprintf(stderr, "xbench_launch: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }

  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("xbench_launch: wait4");
      return 125;
    }
  }
  FILE *f = fopen(report, "w");
  if (f == NULL) {
    perror("xbench_launch: report");
    return 125;
  }
  if (WIFSIGNALED(status)) fprintf(f, "signal=%d\n", WTERMSIG(status));
  else fprintf(f, "exit=%d\n", WEXITSTATUS(status));
  fprintf(f, "maxrss_kb=%ld\nuser_s=%.6f\nsys_s=%.6f\nminflt=%ld\n", ru.ru_maxrss, seconds(ru.ru_utime),
          seconds(ru.ru_stime), ru.ru_minflt);
  fclose(f);
  return 0;
}
