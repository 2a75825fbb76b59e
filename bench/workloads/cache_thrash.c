/*
 * cache_thrash: active false sharing (Hoard's cache-thrash, Berger et al.,
 * "Hoard: A Scalable Memory Allocator for Multithreaded Applications",
 * ASPLOS 2000).
 *
 * Every thread repeatedly allocates a tiny object, writes to it many times
 * and frees it. An allocator that carves objects for different threads out
 * of the same cache line makes the threads' writes ping-pong that line
 * between cores; one that gives each thread its own memory does not.
 * Parameters follow mimalloc-bench's `cache-thrash T 1000 1 2000000 N`
 * (T = 1 or N threads, 1000 iterations, 1-byte objects, 2,000,000 writes
 * per object). The iterations are divided among the threads, so the total
 * work is the same for every thread count.
 *
 * usage: cache_thrash [threads=2] [iterations=1000] [object_size=1]
 *                     [repetitions=2000000]
 * prints: writes, time_s.
 */
#include "xbench.h"

#include <pthread.h>

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  uint64_t iterations, repetitions;
  size_t size;
  pthread_barrier_t *start;
} worker;

static void *run(void *arg) {
  worker *w = (worker *)arg;
  pthread_barrier_wait(w->start);
  for (uint64_t i = 0; i < w->iterations; i++) {
    volatile char *obj = (volatile char *)xb_xmalloc(w->size);
    for (uint64_t r = 0; r < w->repetitions; r++)
      for (size_t k = 0; k < w->size; k++) obj[k] = (char)(obj[k] + 1);
    free((void *)obj);
  }
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=2] [iterations=1000] [object_size=1] [repetitions=2000000]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 2);
  uint64_t iterations = xb_arg_u64(argc, argv, 2, 1000);
  size_t size = (size_t)xb_arg_u64(argc, argv, 3, 1);
  uint64_t repetitions = xb_arg_u64(argc, argv, 4, 2000000);
  if (threads == 0 || size == 0) return XB_EXIT_USAGE;

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads + 1);
  for (unsigned t = 0; t < threads; t++) {
    w[t].iterations = iterations / threads;
    w[t].repetitions = repetitions;
    w[t].size = size;
    w[t].start = &start;
    pthread_create(&w[t].thread, NULL, run, &w[t]);
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = xb_now_ns();
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double secs = xb_seconds_since(t0);

  printf("writes=%.0f\n", (double)(iterations / threads) * threads * (double)repetitions * (double)size);
  printf("time_s=%.6f\n", secs);
  pthread_barrier_destroy(&start);
  free(w);
  return 0;
}
