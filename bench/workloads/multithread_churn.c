/*
 * multithread_churn: concurrent allocation churn, every thread on its own
 * blocks.
 *
 * Models seed 004 (AethAlloc's multithread_churn: 8 threads, 800,000
 * operations in all, mixed sizes 16 B - 4 KiB). Each thread keeps 1024 live
 * blocks; an operation replaces a random one (free, then malloc of a size
 * uniform in [16, 4096], first and last byte written). No block crosses
 * threads: this measures how the thread-local paths scale.
 *
 * usage: multithread_churn [threads=8] [ops_per_thread=100000] [seed=1]
 * prints: ops, time_s, ops_per_s, ns_per_op (wall time x threads / ops).
 */
#include "xbench.h"

#include <pthread.h>

#define SLOTS 1024u
#define MIN_SIZE 16u
#define MAX_SIZE 4096u

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  uint64_t ops;
  uint64_t seed;
  pthread_barrier_t *start;
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
  for (uint64_t n = 0; n < w->ops; n++) {
    unsigned i = (unsigned)xb_below(&rng, SLOTS);
    xb_check_tag(slot[i], size[i], (uint8_t)i);
    free(slot[i]);
    size[i] = (uint32_t)xb_range(&rng, MIN_SIZE, MAX_SIZE);
    slot[i] = xb_xmalloc(size[i]);
    xb_tag(slot[i], size[i], (uint8_t)i);
  }
  for (unsigned i = 0; i < SLOTS; i++) free(slot[i]);
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=8] [ops_per_thread=100000] [seed=1]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 8);
  uint64_t ops = xb_arg_u64(argc, argv, 2, 100000);
  uint64_t seed = xb_arg_u64(argc, argv, 3, 1);
  if (threads == 0) return XB_EXIT_USAGE;

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads + 1);
  for (unsigned t = 0; t < threads; t++) {
    w[t].ops = ops;
    w[t].seed = seed * 1000 + t;
    w[t].start = &start;
    pthread_create(&w[t].thread, NULL, run, &w[t]);
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = xb_now_ns();
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double secs = xb_seconds_since(t0);

  double total = (double)ops * threads;
  printf("ops=%.0f\n", total);
  printf("time_s=%.6f\n", secs);
  printf("ops_per_s=%.0f\n", total / secs);
  printf("ns_per_op=%.1f\n", secs * 1e9 * threads / total);
  pthread_barrier_destroy(&start);
  free(w);
  return 0;
}
