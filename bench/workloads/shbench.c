/*
 * shbench: MicroQuill SmartHeap-style benchmarks sh6bench and sh8bench.
 *
 * Written from the published descriptions (mimalloc-bench runs
 * `sh6bench 2N` and `sh8bench 2N`, i.e. twice as many threads as CPUs;
 * sh6bench: "LIFO frees mixed with reverse-order frees", sh8bench: the same
 * plus objects freed by other threads; sizes 1-1000 bytes).
 * Every thread runs `rounds` rounds. A round allocates `batch` objects of
 * sizes drawn from [min, max] and writes each; after every third
 * allocation the most recently kept object is freed again (LIFO frees
 * interleaved with allocation). The objects still kept at the end of the
 * round are freed half in allocation order and half in reverse order -
 * by the thread itself (variant 6), or, in variant 8, by the next thread,
 * which receives them as one batch and frees them at its next round.
 *
 * usage: shbench <6|8> [threads=4] [rounds=50] [batch=10000] [min=1] [max=1000] [seed=1]
 * prints: objects, time_s, ns_per_object (wall time x threads / objects).
 */
#include "xbench.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct handoff {
  struct handoff *next;
  size_t count;
  void *objects[];
} handoff;

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  unsigned id, variant;
  uint64_t rounds, batch, min, max, seed;
  struct worker *next_thread;
  _Atomic(handoff *) inbox;
  pthread_barrier_t *barrier;
} worker;

/* Frees objects[0..n): the first half front to back, the rest back to front. */
static void free_mixed(void **objects, size_t n) {
  size_t half = n / 2;
  for (size_t i = 0; i < half; i++) free(objects[i]);
  for (size_t i = n; i-- > half;) free(objects[i]);
}

static void drain(worker *w) {
  handoff *h = atomic_exchange(&w->inbox, NULL);
  while (h != NULL) {
    handoff *next = h->next;
    free_mixed(h->objects, h->count);
    free(h);
    h = next;
  }
}

static void *run(void *arg) {
  worker *w = (worker *)arg;
  xb_rng rng = xb_rng_make(w->seed * 1000 + w->id);
  void **kept = (void **)xb_xmalloc(w->batch * sizeof(void *));
  pthread_barrier_wait(w->barrier);
  for (uint64_t r = 0; r < w->rounds; r++) {
    if (w->variant == 8) drain(w);
    size_t top = 0;
    for (uint64_t i = 0; i < w->batch; i++) {
      size_t n = (size_t)xb_range(&rng, w->min, w->max);
      char *p = (char *)xb_xmalloc(n);
      p[0] = (char)i;
      p[n - 1] = (char)i;
      kept[top++] = p;
      if (i % 3 == 2) free(kept[--top]);
    }
    if (w->variant == 8) {
      handoff *h = (handoff *)xb_xmalloc(sizeof(handoff) + top * sizeof(void *));
      h->count = top;
      memcpy(h->objects, kept, top * sizeof(void *));
      h->next = atomic_load(&w->next_thread->inbox);
      while (!atomic_compare_exchange_weak(&w->next_thread->inbox, &h->next, h)) {
      }
    } else {
      free_mixed(kept, top);
    }
  }
  pthread_barrier_wait(w->barrier); /* every hand-off has been made */
  drain(w);
  free(kept);
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "<6|8> [threads=4] [rounds=50] [batch=10000] [min=1] [max=1000] [seed=1]");
  xb_init();
  unsigned variant = (unsigned)xb_arg_u64(argc, argv, 1, 6);
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 2, 4);
  uint64_t rounds = xb_arg_u64(argc, argv, 3, 50);
  uint64_t batch = xb_arg_u64(argc, argv, 4, 10000);
  uint64_t min = xb_arg_u64(argc, argv, 5, 1);
  uint64_t max = xb_arg_u64(argc, argv, 6, 1000);
  uint64_t seed = xb_arg_u64(argc, argv, 7, 1);
  if ((variant != 6 && variant != 8) || threads == 0 || min == 0 || max < min) {
    fprintf(stderr, "usage: %s <6|8> [threads] [rounds] [batch] [min] [max] [seed]\n", argv[0]);
    return XB_EXIT_USAGE;
  }

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, threads + 1);
  for (unsigned t = 0; t < threads; t++) {
    w[t].id = t;
    w[t].variant = variant;
    w[t].rounds = rounds;
    w[t].batch = batch;
    w[t].min = min;
    w[t].max = max;
    w[t].seed = seed;
    w[t].next_thread = &w[(t + 1) % threads];
    atomic_init(&w[t].inbox, NULL);
    w[t].barrier = &barrier;
    if (pthread_create(&w[t].thread, NULL, run, &w[t]) != 0) xb_fail("pthread_create failed");
  }
  pthread_barrier_wait(&barrier); /* start */
  uint64_t t0 = xb_now_ns();
  pthread_barrier_wait(&barrier); /* all rounds done */
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double secs = xb_seconds_since(t0);

  double objects = (double)threads * (double)rounds * (double)batch;
  printf("objects=%.0f\n", objects);
  printf("time_s=%.6f\n", secs);
  printf("ns_per_object=%.2f\n", secs * 1e9 * threads / objects);
  pthread_barrier_destroy(&barrier);
  free(w);
  return 0;
}
