/*
 * tail_latency: the latency distribution of single malloc and free calls.
 *
 * Models seed 004 (AethAlloc's tail_latency: 4 threads x 50,000
 * iterations, P50 ... P99.99 and max per operation). Each thread keeps 1000
 * live blocks; an iteration frees a random one and allocates a replacement
 * (size uniform in [16, 1024], first and last byte written); the free and
 * the malloc are each timed with the CPU's time-stamp counter (RDTSCP), so
 * the numbers are per allocator call, not per loop. Rare slow calls (a
 * page fault, an mmap, a lock hand-off) make the tail.
 *
 * usage: tail_latency [threads=4] [iterations_per_thread=50000] [seed=1]
 * prints: ops, time_s, timer_overhead_ns (floor under every figure, not
 *         subtracted), p50_ns p90_ns p99_ns p99_9_ns p99_99_ns max_ns
 *         mean_ns over all calls, and the same with malloc_ / free_ prefix.
 */
#include "xbench.h"

#include <pthread.h>

#define SLOTS 1000u
#define MIN_SIZE 16u
#define MAX_SIZE 1024u

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  uint64_t iterations;
  uint64_t seed;
  pthread_barrier_t *start;
  xb_hist *malloc_hist;
  xb_hist *free_hist;
} worker;

static void *run(void *arg) {
  worker *w = (worker *)arg;
  xb_rng rng = xb_rng_make(w->seed);
  void *slot[SLOTS];
  uint32_t size[SLOTS];
  for (unsigned i = 0; i < SLOTS; i++) {
    size[i] = (uint32_t)xb_range(&rng, MIN_SIZE, MAX_SIZE);
    slot[i] = xb_xmalloc(size[i]);
    xb_tag(slot[i], size[i], (uint8_t)i);
  }
  pthread_barrier_wait(w->start);
  for (uint64_t n = 0; n < w->iterations; n++) {
    unsigned i = (unsigned)xb_below(&rng, SLOTS);
    uint32_t new_size = (uint32_t)xb_range(&rng, MIN_SIZE, MAX_SIZE);
    xb_check_tag(slot[i], size[i], (uint8_t)i);

    uint64_t a = xb_ticks();
    free(slot[i]);
    uint64_t b = xb_ticks();
    void *p = malloc(new_size);
    uint64_t c = xb_ticks();

    if (p == NULL) xb_fail("malloc(%u) returned NULL", new_size);
    slot[i] = p;
    size[i] = new_size;
    xb_tag(p, new_size, (uint8_t)i);
    xb_hist_add(w->free_hist, b - a);
    xb_hist_add(w->malloc_hist, c - b);
  }
  for (unsigned i = 0; i < SLOTS; i++) free(slot[i]);
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=4] [iterations_per_thread=50000] [seed=1]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 4);
  uint64_t iterations = xb_arg_u64(argc, argv, 2, 50000);
  uint64_t seed = xb_arg_u64(argc, argv, 3, 1);
  if (threads == 0) return XB_EXIT_USAGE;

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads + 1);
  for (unsigned t = 0; t < threads; t++) {
    w[t].iterations = iterations;
    w[t].seed = seed * 1000 + t;
    w[t].start = &start;
    w[t].malloc_hist = (xb_hist *)calloc(1, sizeof(xb_hist));
    w[t].free_hist = (xb_hist *)calloc(1, sizeof(xb_hist));
    if (w[t].malloc_hist == NULL || w[t].free_hist == NULL) xb_fail("out of memory");
  }
  uint64_t overhead = xb_tick_overhead();
  for (unsigned t = 0; t < threads; t++) pthread_create(&w[t].thread, NULL, run, &w[t]);
  pthread_barrier_wait(&start);
  xb_tick_cal cal0 = xb_tick_mark();
  uint64_t t0 = xb_now_ns();
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double secs = xb_seconds_since(t0);
  double ns_per_tick = xb_ns_per_tick(cal0, xb_tick_mark());

  xb_hist *all = (xb_hist *)calloc(1, sizeof *all);
  xb_hist *mallocs = (xb_hist *)calloc(1, sizeof *mallocs);
  xb_hist *frees = (xb_hist *)calloc(1, sizeof *frees);
  if (all == NULL || mallocs == NULL || frees == NULL) xb_fail("out of memory");
  for (unsigned t = 0; t < threads; t++) {
    xb_hist_merge(mallocs, w[t].malloc_hist);
    xb_hist_merge(frees, w[t].free_hist);
    free(w[t].malloc_hist);
    free(w[t].free_hist);
  }
  xb_hist_merge(all, mallocs);
  xb_hist_merge(all, frees);

  printf("ops=%llu\n", (unsigned long long)all->count);
  printf("time_s=%.6f\n", secs);
  printf("timer_overhead_ns=%.1f\n", (double)overhead * ns_per_tick);
  xb_hist_print("", all, ns_per_tick);
  xb_hist_print("malloc_", mallocs, ns_per_tick);
  xb_hist_print("free_", frees, ns_per_tick);
  free(all);
  free(mallocs);
  free(frees);
  pthread_barrier_destroy(&start);
  free(w);
  return 0;
}
