/*
 * fastpath_ir: the loops whose instruction counts bench/fastpath_ir.py
 * measures under `valgrind --tool=callgrind`.
 *
 * The script runs each loop twice with different iteration counts and
 * divides the difference in total instructions (Ir) by the difference in
 * malloc+free pairs, which cancels everything that does not scale with the
 * loop: process start-up, the allocator's initialisation, the first refills
 * of its caches. What is left is the steady-state cost of one malloc plus
 * one free, including the few instructions of the loop itself (measured by
 * the `baseline` loop, which calls no-op functions through the same kind of
 * indirect call).
 *
 * Loops (one malloc+free pair per iteration unit):
 *   pair      malloc(32) immediately followed by its free;
 *   batch     64 x malloc(48), then the 64 frees in allocation order;
 *   mixed     64 mallocs of sizes 16..1000 from a fixed pseudo-random
 *             sequence, then the 64 frees;
 *   baseline  the `pair` loop calling empty functions instead.
 * Allocation functions are called through volatile function pointers so
 * the compiler cannot fold or elide a malloc/free pair.
 *
 * usage: fastpath_ir <pair|batch|mixed|baseline> <pairs>
 * prints: loop, pairs, checksum.
 */
#include "xbench.h"

#define BATCH 64u

typedef void *(*alloc_fn)(size_t);
typedef void (*free_fn)(void *);

static char g_dummy[1024];
__attribute__((noinline)) static void *noop_alloc(size_t n) {
  __asm__ volatile("" : : "r"(n) : "memory");
  return g_dummy;
}
__attribute__((noinline)) static void noop_free(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "<pair|batch|mixed|baseline> <pairs>");
  xb_init();
  if (argc != 3) {
    fprintf(stderr, "usage: %s <pair|batch|mixed|baseline> <pairs>\n", argv[0]);
    return XB_EXIT_USAGE;
  }
  const char *loop = argv[1];
  uint64_t pairs = xb_arg_u64(argc, argv, 2, 0);
  int baseline = strcmp(loop, "baseline") == 0;
  alloc_fn volatile do_alloc = baseline ? noop_alloc : malloc;
  free_fn volatile do_free = baseline ? noop_free : free;
  alloc_fn a = do_alloc;
  free_fn f = do_free;

  size_t sizes[BATCH];
  xb_rng rng = xb_rng_make(12345);
  for (unsigned i = 0; i < BATCH; i++) sizes[i] = (size_t)xb_range(&rng, 16, 1000);
  void *blocks[BATCH];
  uintptr_t checksum = 0;

  if (strcmp(loop, "pair") == 0 || baseline) {
    for (uint64_t i = 0; i < pairs; i++) {
      void *p = a(32);
      checksum += (uintptr_t)p & 0xff;
      f(p);
    }
  } else if (strcmp(loop, "batch") == 0 || strcmp(loop, "mixed") == 0) {
    int mixed = loop[0] == 'm';
    for (uint64_t i = 0; i < pairs / BATCH; i++) {
      for (unsigned k = 0; k < BATCH; k++) blocks[k] = a(mixed ? sizes[k] : 48);
      checksum += (uintptr_t)blocks[i % BATCH] & 0xff;
      for (unsigned k = 0; k < BATCH; k++) f(blocks[k]);
    }
    pairs = pairs / BATCH * BATCH;
  } else {
    fprintf(stderr, "fastpath_ir: unknown loop \"%s\"\n", loop);
    return XB_EXIT_USAGE;
  }
  printf("loop=%s\n", loop);
  printf("pairs=%llu\n", (unsigned long long)pairs);
  printf("checksum=%llu\n", (unsigned long long)checksum);
  return 0;
}
