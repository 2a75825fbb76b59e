/*
 * xalloc side by side with the system allocator: xalloc::xalloc-api
 * (libxalloc-api.a) gives the prefixed xalloc_* functions and leaves malloc
 * alone. Exits 1 unless xalloc_malloc's blocks are xalloc's and malloc's
 * are not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xalloc/xalloc.h>

int main(void) {
  int failures = 0;
  char* mine = xalloc_malloc(100);
  char* system = malloc(100);
  if (mine != NULL) memset(mine, 1, 100);
  if (system != NULL) memset(system, 2, 100);
  if (mine == NULL || xalloc_owns(mine) != 1) {
    fprintf(stderr, "prefixed_api: xalloc_malloc(100) (%p) is not xalloc's\n", (void*)mine);
    failures++;
  }
  if (system == NULL || xalloc_owns(system) != 0) {
    fprintf(stderr, "prefixed_api: malloc(100) (%p) should be the C library's\n", (void*)system);
    failures++;
  }
  size_t usable = xalloc_usable_size(mine);
  xalloc_free(mine);
  free(system);
  if (failures != 0) return 1;
  printf("prefixed_api: ok: xalloc_malloc(100) is xalloc's (%zu usable bytes), malloc stays the C library's\n", usable);
  return 0;
}
