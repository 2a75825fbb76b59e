/*
 * batch_round_trip: a batch built by one thread, freed by others, built
 * again.
 *
 * What servers and pipelines do: one thread builds a batch of many small
 * objects (a request's parse tree, a frame's messages), worker threads
 * consume the batch and free its objects, and the first thread builds the
 * next batch. Every free is a remote free, and between two batches the
 * whole batch's memory is free: an allocator that returns it to the OS in
 * between faults it in again for the next batch. The program reports the
 * process's minor page faults, so the suite can set them against the peak
 * resident pages (a page faulted about once is a page kept).
 *
 * usage: batch_round_trip [workers=10] [blocks=1000000] [rounds=8] [seed=1]
 * prints: blocks, time_s, alloc_s (the building, all rounds), free_s (the
 *         workers' frees, all rounds), minor_faults, peak_rss_pages,
 *         faults_per_peak_page.
 */
#include "xbench.h"

#include <pthread.h>

typedef struct worker {
  pthread_t thread;
  void **blocks;
  size_t count;
  pthread_barrier_t *go, *done;
  unsigned rounds;
} worker;

static void *consume(void *arg) {
  worker *w = (worker *)arg;
  for (unsigned r = 0; r < w->rounds; r++) {
    pthread_barrier_wait(w->go);
    for (size_t i = 0; i < w->count; i++) {
      xb_check_tag(w->blocks[i], 2, (uint8_t)(r + 1));
      free(w->blocks[i]);
    }
    pthread_barrier_wait(w->done);
  }
  return NULL;
}

/* Sizes of 16 B to 512 B, the smaller ones more often. */
static size_t pick_size(xb_rng *rng) {
  unsigned shift = (unsigned)xb_below(rng, 6);
  return 16 + xb_below(rng, (size_t)16 << shift);
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "batch_round_trip [workers=10] [blocks=1000000] [rounds=8] [seed=1]");
  xb_init();
  unsigned workers = (unsigned)xb_arg_u64(argc, argv, 1, 10);
  size_t blocks = (size_t)xb_arg_u64(argc, argv, 2, 1000000);
  unsigned rounds = (unsigned)xb_arg_u64(argc, argv, 3, 8);
  xb_rng rng = xb_rng_make(xb_arg_u64(argc, argv, 4, 1));
  if (workers == 0 || blocks < workers || rounds == 0) xb_fail("need workers >= 1, blocks >= workers, rounds >= 1");

  void **batch = xb_xmalloc(blocks * sizeof(void *));
  worker *w = xb_xcalloc_lines(workers, sizeof(worker));
  pthread_barrier_t go, done;
  pthread_barrier_init(&go, NULL, workers + 1);
  pthread_barrier_init(&done, NULL, workers + 1);
  size_t per = blocks / workers;
  for (unsigned i = 0; i < workers; i++) {
    w[i].blocks = batch + i * per;
    w[i].count = i + 1 == workers ? blocks - i * per : per;
    w[i].go = &go;
    w[i].done = &done;
    w[i].rounds = rounds;
    if (pthread_create(&w[i].thread, NULL, consume, &w[i]) != 0) xb_fail("pthread_create");
  }

  struct rusage before;
  getrusage(RUSAGE_SELF, &before);
  double alloc_s = 0, free_s = 0;
  uint64_t start = xb_now_ns();
  for (unsigned r = 0; r < rounds; r++) {
    uint64_t t0 = xb_now_ns();
    for (size_t i = 0; i < blocks; i++) {
      size_t size = pick_size(&rng);
      batch[i] = xb_xmalloc(size);
      xb_tag(batch[i], 2, (uint8_t)(r + 1));
    }
    alloc_s += xb_seconds_since(t0);
    uint64_t t1 = xb_now_ns();
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&done);
    free_s += xb_seconds_since(t1);
  }
  double time_s = xb_seconds_since(start);
  struct rusage after;
  getrusage(RUSAGE_SELF, &after);
  for (unsigned i = 0; i < workers; i++) pthread_join(w[i].thread, NULL);

  long faults = after.ru_minflt - before.ru_minflt;
  long peak_pages = xb_peak_rss_kb() / 4;
  printf("blocks=%zu\n", blocks);
  printf("time_s=%.4f\n", time_s);
  printf("alloc_s=%.4f\n", alloc_s);
  printf("free_s=%.4f\n", free_s);
  printf("minor_faults=%ld\n", faults);
  printf("peak_rss_pages=%ld\n", peak_pages);
  printf("faults_per_peak_page=%.3f\n", peak_pages > 0 ? (double)faults / (double)peak_pages : 0.0);
  free(batch);
  return 0;
}
