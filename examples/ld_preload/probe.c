/*
 * An ordinary C program that knows nothing of xalloc at build time: it does
 * not include xalloc.h and does not link libxalloc. Run under xalloc-run (or
 * LD_PRELOAD=libxalloc.so) its allocations are xalloc's; it finds
 * xalloc_owns at run time with dlsym to check that, and exits 1 when it is
 * not served by xalloc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int owns_fn(const void*);
typedef const char* version_fn(void);

static owns_fn* owns;
static int failures;

static void check(const void* p, const char* what) {
  if (p == NULL || owns(p) != 1) {
    fprintf(stderr, "ld_preload: %s (%p) was not allocated by xalloc\n", what, p);
    failures++;
  }
}

int main(void) {
  void* sym = dlsym(RTLD_DEFAULT, "xalloc_owns");
  if (sym == NULL) {
    fprintf(stderr, "ld_preload: xalloc is not loaded; run me with xalloc-run or LD_PRELOAD=/path/to/libxalloc.so\n");
    return 1;
  }
  memcpy(&owns, &sym, sizeof owns); /* object pointer to function pointer, portably */
  version_fn* version = NULL;
  sym = dlsym(RTLD_DEFAULT, "xalloc_version");
  if (sym != NULL) memcpy(&version, &sym, sizeof version);

  char* block = malloc(100);
  if (block != NULL) memset(block, 'x', 100);
  check(block, "malloc(100)");
  char* copy = strdup("allocated inside the C library"); /* libc's own call to malloc */
  check(copy, "strdup()");
  void* big = calloc(1, 8u << 20);
  check(big, "calloc(1, 8 MiB)");
  char* grown = block != NULL ? realloc(block, 100000) : NULL;
  check(grown, "realloc(100 -> 100000)");
  free(big);
  free(copy);
  free(grown != NULL ? grown : block);

  if (failures != 0) return 1;
  printf("ld_preload: ok: malloc, strdup, calloc and realloc are served by xalloc %s (preloaded)\n",
         version != NULL ? version() : "?");
  return 0;
}
