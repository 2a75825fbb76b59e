/*
 * alloc_test: many small blocks with a skewed, "real-world-like" access
 * pattern, on 1 or N threads.
 *
 * Written from the description of the ithare/OLogN allocator test
 * ("Testing Memory Allocators: ptmalloc2 vs tcmalloc vs hoard vs jemalloc
 * While Trying to Simulate Real-World Loads"; mimalloc-bench's alloc-test1
 * and alloc-testN: Pareto size distribution up to 1 KiB, 100 million
 * allocations per thread; equal times for 1 and N threads mean linear
 * scaling). Each thread keeps 65536 live blocks. An iteration picks a slot
 * - 80% of the time among the first 20% of the slots (hot objects), else
 * among the rest - frees its block and allocates a new one with a Pareto
 * size (minimum 8 bytes, shape 1, capped at 1024), writing its first and
 * last byte.
 *
 * usage: alloc_test [threads=1] [iterations_per_thread=100000000] [seed=1]
 * prints: iterations, time_s, ns_per_iteration (wall time x threads /
 *         iterations).
 */
#include "xbench.h"

#include <pthread.h>

#define SLOTS 65536u
#define HOT (SLOTS / 5)
#define SIZE_TABLE 8192u

static uint16_t g_sizes[SIZE_TABLE];

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  uint64_t iterations, seed;
  pthread_barrier_t *start;
} worker;

static void *run(void *arg) {
  worker *w = (worker *)arg;
  xb_rng rng = xb_rng_make(w->seed);
  void **slot = (void **)xb_xmalloc(SLOTS * sizeof(void *));
  uint16_t *size = (uint16_t *)xb_xmalloc(SLOTS * sizeof(uint16_t));
  for (unsigned i = 0; i < SLOTS; i++) {
    size[i] = g_sizes[xb_below(&rng, SIZE_TABLE)];
    slot[i] = xb_xmalloc(size[i]);
    xb_tag(slot[i], size[i], (uint8_t)i);
  }
  pthread_barrier_wait(w->start);
  for (uint64_t n = 0; n < w->iterations; n++) {
    uint64_t r = xb_next(&rng);
    unsigned i = (r & 0xff) < 205 ? (unsigned)((r >> 8) % HOT) : HOT + (unsigned)((r >> 8) % (SLOTS - HOT));
    xb_check_tag(slot[i], size[i], (uint8_t)i);
    free(slot[i]);
    size[i] = g_sizes[(r >> 40) % SIZE_TABLE];
    slot[i] = xb_xmalloc(size[i]);
    xb_tag(slot[i], size[i], (uint8_t)i);
  }
  for (unsigned i = 0; i < SLOTS; i++) free(slot[i]);
  free(size);
  free(slot);
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=1] [iterations_per_thread=100000000] [seed=1]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 1);
  uint64_t iterations = xb_arg_u64(argc, argv, 2, 100000000);
  uint64_t seed = xb_arg_u64(argc, argv, 3, 1);
  if (threads == 0) return XB_EXIT_USAGE;

  /* Pareto(x_m = 8, alpha = 1): size = 8 / u, capped at 1 KiB. */
  xb_rng rng = xb_rng_make(seed);
  for (unsigned i = 0; i < SIZE_TABLE; i++) {
    double u = 1.0 - xb_unit(&rng); /* (0, 1] */
    double s = 8.0 / u;
    g_sizes[i] = (uint16_t)(s > 1024.0 ? 1024.0 : s);
  }

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads + 1);
  for (unsigned t = 0; t < threads; t++) {
    w[t].iterations = iterations;
    w[t].seed = seed * 1000 + t + 1;
    w[t].start = &start;
    pthread_create(&w[t].thread, NULL, run, &w[t]);
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = xb_now_ns();
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double secs = xb_seconds_since(t0);

  double total = (double)iterations * threads;
  printf("iterations=%.0f\n", total);
  printf("time_s=%.6f\n", secs);
  printf("ns_per_iteration=%.2f\n", secs * 1e9 * threads / total);
  pthread_barrier_destroy(&start);
  free(w);
  return 0;
}
