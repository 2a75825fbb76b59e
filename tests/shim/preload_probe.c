/*
 * A plain C program (not linked with xalloc) run under
 * LD_PRELOAD=libxalloc.so: allocations made by constructors before main,
 * by main, by libc and by a dlopen'ed library must all be xalloc's. It finds
 * xalloc_owns at run time with dlsym, so without the preload it fails.
 *
 * usage: preload_probe [library-to-dlopen]
 * Exit 0 and "preload probe: ok" on success.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* g_early;
static char* g_early_string;

__attribute__((constructor(101))) static void early(void) {
  g_early = malloc(4000);
  memset(g_early, 1, 4000);
  g_early_string = strdup("before main");
}

static int (*owns)(const void*);
static int failures;

/* The address goes through an integer: the compiler must not reason about
 * the (possibly uninitialised) memory behind it. */
static void check_address(uintptr_t address, const char* what) {
  __asm__ volatile("" : "+r"(address));
  const void* p = (const void*)address;
  if (p == NULL || owns(p) != 1) {
    fprintf(stderr, "preload probe: %s (%p) is not xalloc's\n", what, p);
    failures++;
  }
}
#define check(p, what) check_address((uintptr_t)(p), what)

static void* thread_main(void* arg) {
  (void)arg;
  void* p = malloc(123);
  check(p, "malloc in a thread");
  return p;
}

int main(int argc, char** argv) {
  owns = (int (*)(const void*))dlsym(RTLD_DEFAULT, "xalloc_owns");
  if (owns == NULL) {
    fprintf(stderr, "preload probe: xalloc_owns not found: libxalloc.so is not loaded\n");
    return 1;
  }
  check(g_early, "malloc in a constructor");
  check(g_early_string, "strdup in a constructor");
  void* p = malloc(10);
  check(p, "malloc");
  p = realloc(p, 100000);
  check(p, "realloc");
  free(p);
  void* a = NULL;
  if (posix_memalign(&a, 4096, 100) != 0) a = NULL;
  check(a, "posix_memalign");
  free(a);
  char* s = strdup("x");
  check(s, "strdup");
  free(s);
  pthread_t t;
  void* from_thread = NULL;
  pthread_create(&t, NULL, thread_main, NULL);
  pthread_join(t, &from_thread);
  free(from_thread);
  if (argc > 1) {
    for (int i = 0; i < 5; ++i) {
      void* lib = dlopen(argv[1], RTLD_NOW);
      if (lib == NULL) {
        fprintf(stderr, "preload probe: dlopen: %s\n", dlerror());
        return 1;
      }
      const void* (*state)(void) = (const void* (*)(void))dlsym(lib, "dl_state_block");
      check(state(), "allocation in a dlopen'ed library's constructor");
      dlclose(lib);
    }
  }
  free(g_early);
  free(g_early_string);
  if (failures != 0) return 1;
  printf("preload probe: ok\n");
  return 0;
}
