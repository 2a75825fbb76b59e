/*
 * A CMake project that finds the installed xalloc with find_package(xalloc)
 * and links xalloc::xalloc (libxalloc.so): malloc is xalloc's. Exits 1
 * otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xalloc/xalloc.h>

int main(void) {
  void* p = malloc(16);
  if (p != NULL) memset(p, 0, 16);
  int owned = p != NULL && xalloc_owns(p) == 1;
  if (!owned) fprintf(stderr, "find_package: malloc(16) (%p) was not allocated by xalloc\n", p);
  free(p);
  if (!owned) return 1;
  printf("find_package: ok: malloc(16) is served by xalloc %s (xalloc::xalloc)\n", xalloc_version());
  return 0;
}
