/*
 * A C program linked with -lxalloc (built by e2e.sh the way a user would):
 * its malloc family must be xalloc's, from the first allocation on.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc/xalloc.h"

static int failures;

static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "c program: FAILED: %s\n", what);
    failures++;
  }
}

/* The address goes through an integer: the compiler must not reason about
 * the (possibly uninitialised) memory behind it. */
static int owned_address(uintptr_t address) {
  __asm__ volatile("" : "+r"(address));
  return xalloc_owns((const void*)address);
}
#define owned(p) owned_address((uintptr_t)(p))

static void* worker(void* arg) {
  char** out = arg;
  *out = malloc(1000);
  memset(*out, 'w', 1000);
  return NULL;
}

int main(void) {
  char* p = malloc(100);
  check(owned((p)), "malloc is xalloc's");
  strcpy(p, "hello");
  p = realloc(p, 1 << 20);
  check(owned((p)) && strcmp(p, "hello") == 0, "realloc keeps contents");
  free(p);
  unsigned char* z = calloc(1000, 1000);
  int zero = 1;
  for (size_t i = 0; i < 1000000; i += 777) zero &= z[i] == 0;
  check(zero && owned((z)), "calloc");
  free(z);
  void* a = NULL;
  check(posix_memalign(&a, 4096, 10) == 0 && ((unsigned long)a & 4095) == 0 && owned((a)),
        "posix_memalign");
  free(a);
  char* s = strdup("duplicated by libc");
  check(owned((s)), "strdup inside libc");
  free(s);
  char* from_thread = NULL;
  pthread_t t;
  pthread_create(&t, NULL, worker, &from_thread);
  pthread_join(t, NULL);
  check(from_thread != NULL && owned((from_thread)) && from_thread[999] == 'w', "malloc in a thread");
  free(from_thread);
  struct mallinfo2 mi = mallinfo2();
  check(mi.hblkhd > 0, "mallinfo2 reports xalloc's mappings");
  if (failures) return 1;
  printf("c program: ok\n");
  return 0;
}
