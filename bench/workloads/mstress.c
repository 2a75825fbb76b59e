/*
 * mstress: threads that come and go while objects migrate between them.
 *
 * Written from the description of mimalloc-bench's `mstress` stress test
 * (`mstress N 50 25`: N threads, scale 50, 25 iterations): power-of-two
 * object sizes with occasional large ones, objects handed between threads,
 * uneven work per thread, and all threads destroyed and re-created every
 * iteration while some objects survive them.
 *
 * Each iteration starts `threads` threads. Thread t performs
 * scale x 10000 x (t % 4 + 1) / 2 steps (uneven work), each step one of:
 *   50%  allocate an object of 2^k words (k in 0..4, 8-128 bytes; 1% of them
 *        100x larger) and keep it;
 *   30%  free one of its objects, chosen at random;
 *   20%  swap one of its objects into a random slot of a shared transfer
 *        array (1000 slots) with an atomic exchange, taking ownership of
 *        whatever was there - an object allocated by another thread, maybe
 *        of an earlier iteration.
 * A thread frees everything it still owns when it exits; the transfer array
 * outlives the threads (the survivors) and is freed at the end. Objects
 * carry their size in their first and last word, checked before every free.
 *
 * usage: mstress [threads=2] [scale=50] [iterations=25] [seed=1]
 * prints: steps, time_s, steps_per_s.
 */
#include "xbench.h"

#include <pthread.h>
#include <stdatomic.h>

#define TRANSFERS 1000u
#define COOKIE 0x5bd1e995u

static _Atomic(uintptr_t *) g_transfer[TRANSFERS];

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  uint64_t steps;
  uint64_t seed;
} worker;

static uintptr_t *alloc_object(xb_rng *rng) {
  size_t words = (size_t)1 << xb_below(rng, 5);
  if (xb_below(rng, 100) == 0) words *= 100;
  uintptr_t *p = (uintptr_t *)xb_xmalloc(words * sizeof(uintptr_t));
  p[0] = words ^ COOKIE;
  p[words - 1] = words ^ COOKIE;
  return p;
}

static void free_object(uintptr_t *p) {
  if (p == NULL) return;
  size_t words = p[0] ^ COOKIE;
  if (words == 0 || words > 1600 || p[words - 1] != (words ^ COOKIE)) xb_fail("object %p was corrupted", (void *)p);
  free(p);
}

static void *run(void *arg) {
  worker *w = (worker *)arg;
  xb_rng rng = xb_rng_make(w->seed);
  size_t cap = 64, top = 0;
  uintptr_t **owned = (uintptr_t **)xb_xmalloc(cap * sizeof *owned);
  for (uint64_t s = 0; s < w->steps; s++) {
    uint64_t r = xb_below(&rng, 100);
    if (r < 50 || top == 0) {
      if (top == cap) {
        cap *= 2;
        uintptr_t **grown = (uintptr_t **)realloc(owned, cap * sizeof *owned);
        if (grown == NULL) xb_fail("realloc failed");
        owned = grown;
      }
      owned[top++] = alloc_object(&rng);
    } else if (r < 80) {
      size_t i = (size_t)xb_below(&rng, top);
      free_object(owned[i]);
      owned[i] = owned[--top];
    } else {
      size_t i = (size_t)xb_below(&rng, top);
      size_t slot = (size_t)xb_below(&rng, TRANSFERS);
      uintptr_t *got = atomic_exchange(&g_transfer[slot], owned[i]);
      if (got != NULL) owned[i] = got;
      else owned[i] = owned[--top];
    }
  }
  for (size_t i = 0; i < top; i++) free_object(owned[i]);
  free(owned);
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=2] [scale=50] [iterations=25] [seed=1]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 2);
  uint64_t scale = xb_arg_u64(argc, argv, 2, 50);
  uint64_t iterations = xb_arg_u64(argc, argv, 3, 25);
  uint64_t seed = xb_arg_u64(argc, argv, 4, 1);
  if (threads == 0) return XB_EXIT_USAGE;

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  uint64_t steps = 0;
  uint64_t t0 = xb_now_ns();
  for (uint64_t it = 0; it < iterations; it++) {
    for (unsigned t = 0; t < threads; t++) {
      w[t].steps = scale * 10000 * (t % 4 + 1) / 2;
      w[t].seed = seed * 1000003 + it * 1000 + t;
      steps += w[t].steps;
      if (pthread_create(&w[t].thread, NULL, run, &w[t]) != 0) xb_fail("pthread_create failed");
    }
    for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  }
  for (unsigned i = 0; i < TRANSFERS; i++) free_object(atomic_exchange(&g_transfer[i], NULL));
  double secs = xb_seconds_since(t0);

  printf("steps=%llu\n", (unsigned long long)steps);
  printf("time_s=%.6f\n", secs);
  printf("steps_per_s=%.0f\n", (double)steps / secs);
  free(w);
  return 0;
}
