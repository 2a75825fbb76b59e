/*
 * malloc_large: blocks of several MiB, at most 20 alive.
 *
 * Written from the description of mimalloc-bench's malloc-large (from
 * mimalloc issue #447: 2000 iterations allocating blocks of 5-25 MiB,
 * keeping at most 20 alive). Iteration i allocates a block of a random size
 * in [5, 25] MiB into ring slot i % 20, freeing the block that was there.
 * Each block gets one byte written every 256 KiB plus its last byte - as a
 * program that fills a buffer's header fields would - so allocators that
 * reuse memory avoid some page faults, but page faulting does not swamp
 * the allocator's own cost.
 *
 * usage: malloc_large [iterations=2000] [seed=1]
 * prints: allocations, time_s, ns_per_allocation.
 */
#include "xbench.h"

#define LIVE 20u
#define MIB ((size_t)1 << 20)
#define TOUCH_STRIDE ((size_t)256 << 10)

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[iterations=2000] [seed=1]");
  xb_init();
  uint64_t iterations = xb_arg_u64(argc, argv, 1, 2000);
  xb_rng rng = xb_rng_make(xb_arg_u64(argc, argv, 2, 1));

  unsigned char *ring[LIVE] = {0};
  size_t size[LIVE] = {0};
  uint64_t t0 = xb_now_ns();
  for (uint64_t i = 0; i < iterations; i++) {
    unsigned s = (unsigned)(i % LIVE);
    if (ring[s] != NULL) {
      if (ring[s][0] != (unsigned char)s || ring[s][size[s] - 1] != (unsigned char)(s + 1))
        xb_fail("block %llu was corrupted", (unsigned long long)i);
      free(ring[s]);
    }
    size[s] = (size_t)xb_range(&rng, 5 * MIB, 25 * MIB);
    ring[s] = (unsigned char *)xb_xmalloc(size[s]);
    for (size_t off = 0; off < size[s]; off += TOUCH_STRIDE) ring[s][off] = (unsigned char)s;
    ring[s][size[s] - 1] = (unsigned char)(s + 1);
  }
  for (unsigned s = 0; s < LIVE; s++) free(ring[s]);
  double secs = xb_seconds_since(t0);

  printf("allocations=%llu\n", (unsigned long long)iterations);
  printf("time_s=%.6f\n", secs);
  printf("ns_per_allocation=%.1f\n", secs * 1e9 / (double)iterations);
  return 0;
}
