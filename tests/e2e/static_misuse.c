/* A C program linked entirely statically (-static) with libxalloc.a, built
 * by e2e.sh: it frees a block twice. The report must name the double free
 * and be followed by a stack trace that reaches main (libunwind, loaded
 * into a static program with its own copy of libc, finds no frame there;
 * glibc's backtrace() does). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void* launder(void* p) {
  __asm__ volatile("" : "+r"(p));
  return p;
}

/* The address is kept as an integer: the compiler rightly warns about a
 * pointer used after free. */
__attribute__((noinline)) static void free_twice(uintptr_t address) {
  free(launder((void*)address));
  free(launder((void*)address));
}

int main(void) {
  void* p = launder(malloc(48));
  printf("block %p\n", p);
  fflush(stdout);
  free_twice((uintptr_t)p);
  printf("survived\n");
  return 0;
}
