/*
 * aww: many threads allocating and writing as fast as they can.
 *
 * Models smalloc's `mt_aww-128` (seed 002: "spawns 128 threads, and each
 * thread just allocates another allocation and writes a few bytes into it
 * and then iterates on that as fast as it can"; 2000 iterations per thread
 * in the published run). As the suite's brief specifies it, each iteration
 * allocates, writes a few bytes, checks them and frees the block. All
 * threads are released together from a barrier; sizes are drawn per thread
 * from a seeded generator, 8-256 bytes; 8 bytes are written into every
 * block. With 128 threads on a few cores this measures how the allocator
 * copes with oversubscription and thread start-up, not a single fast path.
 *
 * usage: aww [threads=128] [iterations_per_thread=2000] [seed=1]
 * prints: allocations, time_s (first thread started to last thread done),
 *         ns_per_iter (time / iterations per thread, the seed's "ns/i"),
 *         allocs_per_s.
 */
#include "xbench.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  uint64_t iterations;
  uint64_t seed;
  pthread_barrier_t *start;
  _Atomic uint64_t *first_start_ns;
  _Atomic uint64_t *last_done_ns;
} worker;

static void atomic_min(_Atomic uint64_t *a, uint64_t v) {
  uint64_t seen = atomic_load(a);
  while (v < seen && !atomic_compare_exchange_weak(a, &seen, v)) {
  }
}

static void atomic_max(_Atomic uint64_t *a, uint64_t v) {
  uint64_t seen = atomic_load(a);
  while (v > seen && !atomic_compare_exchange_weak(a, &seen, v)) {
  }
}

static void *run(void *arg) {
  worker *w = (worker *)arg;
  xb_rng rng = xb_rng_make(w->seed);
  pthread_barrier_wait(w->start);
  atomic_min(w->first_start_ns, xb_now_ns());
  for (uint64_t i = 0; i < w->iterations; i++) {
    size_t n = (size_t)xb_range(&rng, 8, 256);
    uint64_t *p = (uint64_t *)malloc(n);
    if (p == NULL) xb_fail("malloc(%zu) returned NULL", n);
    ((volatile uint64_t *)p)[0] = i; /* "writes a few bytes" */
    if (((volatile uint64_t *)p)[0] != i) xb_fail("block %llu was corrupted", (unsigned long long)i);
    free(p);
  }
  atomic_max(w->last_done_ns, xb_now_ns());
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=128] [iterations_per_thread=2000] [seed=1]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 128);
  uint64_t iterations = xb_arg_u64(argc, argv, 2, 2000);
  uint64_t seed = xb_arg_u64(argc, argv, 3, 1);
  if (threads == 0 || iterations == 0) return XB_EXIT_USAGE;

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  _Atomic uint64_t first_start = UINT64_MAX, last_done = 0;
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads + 1);
  for (unsigned t = 0; t < threads; t++) {
    w[t].iterations = iterations;
    w[t].seed = seed * 1000 + t;
    w[t].start = &start;
    w[t].first_start_ns = &first_start;
    w[t].last_done_ns = &last_done;
    if (pthread_create(&w[t].thread, NULL, run, &w[t]) != 0) xb_fail("pthread_create failed");
  }
  pthread_barrier_wait(&start);
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double secs = (double)(atomic_load(&last_done) - atomic_load(&first_start)) * 1e-9;

  printf("allocations=%llu\n", (unsigned long long)(iterations * threads));
  printf("time_s=%.6f\n", secs);
  printf("ns_per_iter=%.1f\n", secs * 1e9 / (double)iterations);
  printf("allocs_per_s=%.0f\n", (double)(iterations * threads) / secs);
  pthread_barrier_destroy(&start);
  free(w);
  return 0;
}
