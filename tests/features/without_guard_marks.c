/* Runs a program as on a kernel without lightweight guard pages (before
 * Linux 6.13, Debian 12's 6.1 among them): a seccomp filter makes
 * madvise(MADV_GUARD_INSTALL) fail with EINVAL, so that the secure build's
 * fallback, mprotect(PROT_NONE), is tested on any kernel.
 *
 *   without_guard_marks PROGRAM [ARGS...]
 *
 * Exits 77 when the filter cannot be installed (the caller skips). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { kMadvGuardInstall = 102 };

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kMadvGuardInstall, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {sizeof filter / sizeof filter[0], filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    perror("without_guard_marks: seccomp");
    return 77;
  }
  execvp(argv[1], argv + 1);
  perror("without_guard_marks: exec");
  return 127;
}
