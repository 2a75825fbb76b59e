/*
 * rptest: rpmalloc's benchmark - random sizes, scattered frees and a
 * steady rate of cross-thread frees.
 *
 * Written from the published description of rpmalloc-benchmark
 * (`benchmark <threads> <mode> <distribution> <cross-thread rate> <loops>
 * <blocks> <ops> <min size> <max size>`; mimalloc-bench runs
 * `rptest N 0 1 2 500 1000 100 8 16000`). Every thread keeps an array of
 * `blocks` blocks. Each loop it frees `ops` blocks scattered over the
 * array, then allocates `ops` blocks into scattered slots (freeing whatever
 * was there), and every `cross_rate` loops it also allocates `ops` blocks
 * and hands them to the next thread, which frees them at the start of its
 * next loop. Sizes lie in [min, max]: mode 0 random, 1 fixed at min;
 * distribution 0 even, 1 linear falloff (density decreasing to zero at
 * max), 2 exponential falloff (mean at 1/8 of the range).
 *
 * usage: rptest [threads=2] [mode=0] [distribution=1] [cross_rate=2]
 *               [loops=500] [blocks=1000] [ops=100] [min=8] [max=16000] [seed=1]
 * prints: memory_ops (allocations + frees), time_s, memory_ops_per_s.
 */
#include "xbench.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

typedef struct handoff {
  struct handoff *next;
  size_t count;
  void *blocks[];
} handoff;

typedef struct config {
  unsigned threads;
  uint64_t mode, distribution, cross_rate, loops, blocks, ops, min, max, seed;
} config;

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  const config *cfg;
  unsigned id;
  struct worker *next_thread;
  _Atomic(handoff *) inbox;
  uint64_t memory_ops;
  pthread_barrier_t *barrier;
} worker;

static size_t pick_size(const config *c, xb_rng *rng) {
  if (c->mode == 1) return c->min;
  double u = xb_unit(rng), x;
  switch (c->distribution) {
    case 1: x = 1.0 - sqrt(1.0 - u); break;           /* linear falloff */
    case 2: x = -log(1.0 - u) / 8.0; break;            /* exponential falloff */
    default: x = u; break;                             /* even */
  }
  if (x > 1.0) x = 1.0;
  return (size_t)((double)c->min + x * (double)(c->max - c->min));
}

static uint64_t drain(worker *w) {
  handoff *h = atomic_exchange(&w->inbox, NULL);
  uint64_t freed = 0;
  while (h != NULL) {
    handoff *next = h->next;
    for (size_t i = 0; i < h->count; i++) free(h->blocks[i]);
    freed += h->count + 1;
    free(h);
    h = next;
  }
  return freed;
}

/* Frees the block in slot i, if any, after checking it. */
static int release(void **slot, uint32_t *size, size_t i) {
  if (slot[i] == NULL) return 0;
  xb_check_tag(slot[i], size[i], (uint8_t)i);
  free(slot[i]);
  slot[i] = NULL;
  return 1;
}

static void *run(void *arg) {
  worker *w = (worker *)arg;
  const config *c = w->cfg;
  xb_rng rng = xb_rng_make(c->seed * 1000 + w->id);
  void **slot = (void **)calloc(c->blocks, sizeof *slot);
  uint32_t *size = (uint32_t *)calloc(c->blocks, sizeof *size);
  if (slot == NULL || size == NULL) xb_fail("out of memory");
  uint64_t ops = 0;
  for (size_t i = 0; i < c->blocks; i++) {
    size[i] = (uint32_t)pick_size(c, &rng);
    slot[i] = xb_xmalloc(size[i]);
    xb_tag(slot[i], size[i], (uint8_t)i);
    ops++;
  }
  pthread_barrier_wait(w->barrier);
  for (uint64_t loop = 0; loop < c->loops; loop++) {
    ops += drain(w);
    for (uint64_t k = 0; k < c->ops; k++) ops += (uint64_t)release(slot, size, (size_t)xb_below(&rng, c->blocks));
    for (uint64_t k = 0; k < c->ops; k++) {
      size_t i = (size_t)xb_below(&rng, c->blocks);
      ops += (uint64_t)release(slot, size, i);
      size[i] = (uint32_t)pick_size(c, &rng);
      slot[i] = xb_xmalloc(size[i]);
      xb_tag(slot[i], size[i], (uint8_t)i);
      ops++;
    }
    if (c->cross_rate != 0 && loop % c->cross_rate == 0 && c->threads > 1) {
      handoff *h = (handoff *)xb_xmalloc(sizeof(handoff) + c->ops * sizeof(void *));
      h->count = c->ops;
      for (uint64_t k = 0; k < c->ops; k++) h->blocks[k] = xb_xmalloc(pick_size(c, &rng));
      ops += c->ops + 1;
      h->next = atomic_load(&w->next_thread->inbox);
      while (!atomic_compare_exchange_weak(&w->next_thread->inbox, &h->next, h)) {
      }
    }
  }
  pthread_barrier_wait(w->barrier); /* nobody hands us anything after this */
  ops += drain(w);
  for (size_t i = 0; i < c->blocks; i++) ops += (uint64_t)release(slot, size, i);
  free(size);
  free(slot);
  w->memory_ops = ops;
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv,
                 "[threads=2] [mode=0] [distribution=1] [cross_rate=2] [loops=500] [blocks=1000] [ops=100] "
                 "[min=8] [max=16000] [seed=1]");
  xb_init();
  config c;
  c.threads = (unsigned)xb_arg_u64(argc, argv, 1, 2);
  c.mode = xb_arg_u64(argc, argv, 2, 0);
  c.distribution = xb_arg_u64(argc, argv, 3, 1);
  c.cross_rate = xb_arg_u64(argc, argv, 4, 2);
  c.loops = xb_arg_u64(argc, argv, 5, 500);
  c.blocks = xb_arg_u64(argc, argv, 6, 1000);
  c.ops = xb_arg_u64(argc, argv, 7, 100);
  c.min = xb_arg_u64(argc, argv, 8, 8);
  c.max = xb_arg_u64(argc, argv, 9, 16000);
  c.seed = xb_arg_u64(argc, argv, 10, 1);
  if (c.threads == 0 || c.blocks == 0 || c.min == 0 || c.max < c.min || c.max > UINT32_MAX) return XB_EXIT_USAGE;

  worker *w = (worker *)xb_xcalloc_lines(c.threads, sizeof *w);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, c.threads);
  for (unsigned t = 0; t < c.threads; t++) {
    w[t].cfg = &c;
    w[t].id = t;
    w[t].next_thread = &w[(t + 1) % c.threads];
    atomic_init(&w[t].inbox, NULL);
    w[t].barrier = &barrier;
  }
  uint64_t t0 = xb_now_ns();
  for (unsigned t = 0; t < c.threads; t++)
    if (pthread_create(&w[t].thread, NULL, run, &w[t]) != 0) xb_fail("pthread_create failed");
  uint64_t memory_ops = 0;
  for (unsigned t = 0; t < c.threads; t++) {
    pthread_join(w[t].thread, NULL);
    memory_ops += w[t].memory_ops;
  }
  double secs = xb_seconds_since(t0);

  printf("memory_ops=%llu\n", (unsigned long long)memory_ops);
  printf("time_s=%.6f\n", secs);
  printf("memory_ops_per_s=%.0f\n", (double)memory_ops / secs);
  pthread_barrier_destroy(&barrier);
  free(w);
  return 0;
}
