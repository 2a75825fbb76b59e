/*
 * xmalloc_test: pure producer/consumer - N threads only allocate, N
 * threads only free.
 *
 * Models xmalloc-test (Lever & Boreham, "malloc() Performance in a
 * Multithreaded Linux Environment", USENIX 2000; mimalloc-bench runs
 * `xmalloc-test -w N -t 5 -s 64`: N workers of each kind, 5 seconds,
 * 64-byte objects). Allocating threads fill batches of 4096 objects and
 * push them on one global queue; freeing threads pop batches and free every
 * object, so every free is a remote free and no thread ever frees what it
 * allocated. The queue holds at most 4 batches per producer (back-pressure
 * keeps memory bounded). The original runs for a fixed time and reports
 * frees per second; this one frees a fixed number of batches.
 *
 * usage: xmalloc_test [workers=2] [batches_per_producer=500] [size=64]
 * prints: frees, time_s, frees_per_s, ns_per_free (wall time / frees).
 */
#include "xbench.h"

#include <pthread.h>

#define BATCH 4096u

typedef struct queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  void ***items;
  size_t cap, head, count;
  uint64_t popped, total;
} queue;

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  queue *q;
  uint64_t batches;
  size_t size;
  unsigned id;
} worker;

static void push(queue *q, void **batch) {
  pthread_mutex_lock(&q->mu);
  while (q->count == q->cap) pthread_cond_wait(&q->not_full, &q->mu);
  q->items[(q->head + q->count++) % q->cap] = batch;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

/* NULL once every batch has been handed out. */
static void **pop(queue *q) {
  pthread_mutex_lock(&q->mu);
  while (q->count == 0 && q->popped < q->total) pthread_cond_wait(&q->not_empty, &q->mu);
  void **batch = NULL;
  if (q->count > 0) {
    batch = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    q->popped++;
    pthread_cond_signal(&q->not_full);
  }
  if (q->popped == q->total) pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
  return batch;
}

static void *produce(void *arg) {
  worker *w = (worker *)arg;
  for (uint64_t b = 0; b < w->batches; b++) {
    void **batch = (void **)xb_xmalloc(BATCH * sizeof(void *));
    for (unsigned i = 0; i < BATCH; i++) {
      batch[i] = xb_xmalloc(w->size);
      *(volatile unsigned char *)batch[i] = (unsigned char)i;
    }
    push(w->q, batch);
  }
  return NULL;
}

static void *consume(void *arg) {
  worker *w = (worker *)arg;
  void **batch;
  while ((batch = pop(w->q)) != NULL) {
    for (unsigned i = 0; i < BATCH; i++) {
      if (*(volatile unsigned char *)batch[i] != (unsigned char)i) xb_fail("object was corrupted");
      free(batch[i]);
    }
    free(batch);
  }
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[workers=2] [batches_per_producer=500] [size=64]");
  xb_init();
  unsigned workers = (unsigned)xb_arg_u64(argc, argv, 1, 2);
  uint64_t batches = xb_arg_u64(argc, argv, 2, 500);
  size_t size = (size_t)xb_arg_u64(argc, argv, 3, 64);
  if (workers == 0 || size == 0) return XB_EXIT_USAGE;

  queue q;
  memset(&q, 0, sizeof q);
  pthread_mutex_init(&q.mu, NULL);
  pthread_cond_init(&q.not_empty, NULL);
  pthread_cond_init(&q.not_full, NULL);
  q.cap = 4u * workers;
  q.items = (void ***)xb_xmalloc(q.cap * sizeof(void **));
  q.total = batches * workers;

  worker *w = (worker *)xb_xcalloc_lines(2u * workers, sizeof *w);
  uint64_t t0 = xb_now_ns();
  for (unsigned i = 0; i < 2u * workers; i++) {
    w[i].q = &q;
    w[i].batches = batches;
    w[i].size = size;
    w[i].id = i;
    pthread_create(&w[i].thread, NULL, i < workers ? produce : consume, &w[i]);
  }
  for (unsigned i = 0; i < 2u * workers; i++) pthread_join(w[i].thread, NULL);
  double secs = xb_seconds_since(t0);

  double frees = (double)q.total * BATCH;
  printf("frees=%.0f\n", frees);
  printf("time_s=%.6f\n", secs);
  printf("frees_per_s=%.0f\n", frees / secs);
  printf("ns_per_free=%.2f\n", secs * 1e9 / frees);
  free(q.items);
  free(w);
  return 0;
}
