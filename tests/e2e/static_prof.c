/* A C program linked with -static-pie and libxalloc.a, run by e2e.sh with
 * the heap profiler on: its samples' stacks must reach main through
 * keep_blocks, without xalloc's own frames. (dladdr knows nothing in a
 * static program: xalloc's frames are told by name, and the names come
 * from /proc/self/exe.) */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static void* keep_blocks(void** blocks, int count) {
  for (int i = 0; i < count; ++i) blocks[i] = malloc(1000 + (size_t)i);
  return blocks[count / 2];
}

int main(void) {
  static void* blocks[4000];
  printf("kept %p\n", keep_blocks(blocks, 4000));
  return 0;
}
