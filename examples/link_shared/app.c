/*
 * A C program linked with -lxalloc (flags from pkg-config): its malloc and
 * free, and those the C library calls internally, are xalloc's wherever it
 * runs, without LD_PRELOAD. Exits 1 if a block did not come from xalloc.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xalloc/xalloc.h>

static int failures;

static void check(const void* p, const char* what) {
  if (p == NULL || xalloc_owns(p) != 1) {
    fprintf(stderr, "link_shared: %s (%p) was not allocated by xalloc\n", what, p);
    failures++;
  }
}

int main(void) {
  char* block = malloc(100);
  if (block != NULL) memset(block, 'x', 100);
  check(block, "malloc(100)");
  char* copy = strdup("allocated inside the C library");
  check(copy, "strdup()");
  void* aligned = NULL;
  if (posix_memalign(&aligned, 4096, 5000) != 0) aligned = NULL;
  check(aligned, "posix_memalign(4096, 5000)");
  free(aligned);
  free(copy);
  free(block);

  xalloc_stats_t stats;
  xalloc_get_stats(&stats);
  if (stats.mapped == 0) {
    fprintf(stderr, "link_shared: xalloc reports no mapped memory\n");
    failures++;
  }
  if (failures != 0) return 1;
  printf("link_shared: ok: malloc, strdup and posix_memalign are served by xalloc %s (-lxalloc), %zu KiB mapped\n",
         xalloc_version(), stats.mapped >> 10);
  return 0;
}
