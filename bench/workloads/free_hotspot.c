/*
 * free_hotspot (fh): one thread allocates, many threads free at once.
 *
 * Models smalloc's "free hotspot" test (seed 002: "one thread makes a bunch
 * of allocations and hands them out to N different threads, and then we
 * measure how fast those N threads can deallocate all of the allocations
 * they were given"; published with N = 10, 20, 40, 100 and 100,000
 * allocations). The main thread allocates every block (sizes 8-128 bytes
 * from a seeded generator) and deals them round-robin, so neighbouring
 * blocks - the same slab or page - go to different threads and all threads
 * free into the same few slabs at the same moment. The frees are all
 * remote frees (the allocating thread stays alive, idle, meanwhile).
 *
 * usage: free_hotspot [threads=10] [allocations=100000] [seed=1]
 * prints: allocations, alloc_s (the single-threaded allocation phase),
 *         free_s (first freeing thread started to last one done),
 *         ns_per_free (free_s / allocations, the seed's "ns/i"),
 *         frees_per_s.
 */
#include "xbench.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  void **blocks; /* this thread's share */
  uint64_t count;
  uint64_t first; /* index of its first block, to check the contents */
  unsigned stride;
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
  /* Check the blocks before the clock starts, and touch them, so the timed
   * loop measures the frees, not the first read of the block. */
  for (uint64_t i = 0; i < w->count; i++)
    if (*(uint64_t *)w->blocks[i] != w->first + i * w->stride) xb_fail("block was corrupted");
  pthread_barrier_wait(w->start);
  atomic_min(w->first_start_ns, xb_now_ns());
  for (uint64_t i = 0; i < w->count; i++) free(w->blocks[i]);
  atomic_max(w->last_done_ns, xb_now_ns());
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=10] [allocations=100000] [seed=1]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 10);
  uint64_t total = xb_arg_u64(argc, argv, 2, 100000);
  xb_rng rng = xb_rng_make(xb_arg_u64(argc, argv, 3, 1));
  if (threads == 0 || total < threads) return XB_EXIT_USAGE;

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  uint64_t per = total / threads;
  total = per * threads;
  for (unsigned t = 0; t < threads; t++) {
    w[t].blocks = (void **)xb_xmalloc(per * sizeof(void *));
    w[t].count = per;
    w[t].first = t;
    w[t].stride = threads;
  }

  uint64_t a0 = xb_now_ns();
  for (uint64_t i = 0; i < total; i++) {
    size_t n = (size_t)xb_range(&rng, 8, 128);
    uint64_t *p = (uint64_t *)xb_xmalloc(n);
    p[0] = i;
    w[i % threads].blocks[i / threads] = p;
  }
  double alloc_secs = xb_seconds_since(a0);

  _Atomic uint64_t first_start = UINT64_MAX, last_done = 0;
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads);
  for (unsigned t = 0; t < threads; t++) {
    w[t].start = &start;
    w[t].first_start_ns = &first_start;
    w[t].last_done_ns = &last_done;
    if (pthread_create(&w[t].thread, NULL, run, &w[t]) != 0) xb_fail("pthread_create failed");
  }
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double free_secs = (double)(atomic_load(&last_done) - atomic_load(&first_start)) * 1e-9;

  printf("allocations=%llu\n", (unsigned long long)total);
  printf("alloc_s=%.6f\n", alloc_secs);
  printf("free_s=%.6f\n", free_secs);
  printf("ns_per_free=%.2f\n", free_secs * 1e9 / (double)total);
  printf("frees_per_s=%.0f\n", (double)total / free_secs);
  for (unsigned t = 0; t < threads; t++) free(w[t].blocks);
  pthread_barrier_destroy(&start);
  free(w);
  return 0;
}
