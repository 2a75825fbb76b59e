/*
 * free_1g: how much of a large, freed heap the allocator gives back to the
 * system - at once, after an idle second, and after malloc_trim(0).
 *
 * Asked for with the RSS-over-time charts (run.py samples this program's
 * RSS while it runs). T threads (default 4) together allocate MIB MiB
 * (default 1024) in mixed blocks: sizes log-uniform in 16 B - 64 KiB, one
 * block in 50 log-uniform in 64 - 512 KiB. Every byte of every block is
 * written, so the heap is resident. Once all threads have allocated, each
 * frees the even-numbered blocks of its own list and the odd-numbered
 * blocks of the next thread's: half of the frees are remote. The threads
 * exit; the program then idles 1.2 s in 100 ms steps, reading its RSS at
 * each step (the read's fopen is a small malloc, as an idle program still
 * makes a few - some allocators only purge when called), and finally calls
 * malloc_trim(0) where the allocator or glibc provides it.
 *
 * usage: free_1g [threads=4] [mib=1024] [seed=1]
 * prints: blocks, live_mb (bytes requested), time_s (allocate + free, all
 *         threads), alloc_s, free_s, rss_start_mb, rss_peak_mb (the
 *         process's high-water mark), rss_after_free_mb (right after the
 *         last free), rss_after_1s_mb, rss_after_trim_mb, trim_lib (the
 *         object whose malloc_trim ran, or "none").
 */
#include "xbench.h"

#include <math.h>
#include <pthread.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  struct worker *next; /* whose odd-numbered blocks this thread frees */
  size_t n;
  size_t *size;
  unsigned char **block;
  pthread_barrier_t *start, *allocated;
} worker;

static size_t log_uniform(xb_rng *rng, size_t lo, size_t hi) {
  return (size_t)exp(log((double)lo) + xb_unit(rng) * (log((double)hi) - log((double)lo)));
}

static size_t pick_size(xb_rng *rng) {
  if (xb_below(rng, 50) == 0) return log_uniform(rng, 64 * KIB, 512 * KIB);
  return log_uniform(rng, 16, 64 * KIB);
}

/* Draws block sizes until they add up to `budget`; a first pass with a copy
 * of the generator counts them, so the plan is allocated before the clock
 * starts and at its exact size. */
static void plan(worker *w, uint64_t seed, size_t budget) {
  xb_rng rng = xb_rng_make(seed), count = rng;
  size_t n = 0;
  for (size_t sum = 0; sum < budget; n++) sum += pick_size(&count);
  w->n = n;
  w->size = (size_t *)calloc(n, sizeof *w->size);
  w->block = (unsigned char **)calloc(n, sizeof *w->block);
  if (w->size == NULL || w->block == NULL) xb_fail("out of memory");
  for (size_t i = 0; i < n; i++) w->size[i] = pick_size(&rng);
}

static uint8_t tag_of(size_t i) { return (uint8_t)(i * 7u + 1u); }

static void free_every_other(worker *w, size_t first) {
  for (size_t i = first; i < w->n; i += 2) {
    xb_check_tag(w->block[i], w->size[i], tag_of(i));
    free(w->block[i]);
  }
}

static void *work(void *arg) {
  worker *w = (worker *)arg;
  pthread_barrier_wait(w->start);
  for (size_t i = 0; i < w->n; i++) {
    w->block[i] = (unsigned char *)xb_xmalloc(w->size[i]);
    memset(w->block[i], 0x5a, w->size[i]);
    xb_tag(w->block[i], w->size[i], tag_of(i));
  }
  pthread_barrier_wait(w->allocated);
  free_every_other(w, 0);
  free_every_other(w->next, 1);
  return NULL;
}

static double mb(long kb) { return (double)kb / 1024.0; }

/* malloc_trim is glibc's (and xalloc's), not standard: looked up at run time
 * so the program also runs where it does not exist. */
static const char *trim(void) {
  int (*fn)(size_t) = (int (*)(size_t))dlsym(RTLD_DEFAULT, "malloc_trim");
  if (fn == NULL) return "none";
  fn(0);
  return xb_defining_object((void *)fn, "malloc_trim");
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=4] [mib=1024] [seed=1]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 4);
  size_t total = (size_t)xb_arg_u64(argc, argv, 2, 1024) * MIB;
  uint64_t seed = xb_arg_u64(argc, argv, 3, 1);
  if (threads == 0 || total == 0) return XB_EXIT_USAGE;

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  if (w == NULL) xb_fail("out of memory");
  pthread_barrier_t start, allocated;
  pthread_barrier_init(&start, NULL, threads + 1);
  pthread_barrier_init(&allocated, NULL, threads + 1);
  size_t blocks = 0, live = 0;
  for (unsigned t = 0; t < threads; t++) {
    plan(&w[t], seed * 1000 + t, total / threads);
    for (size_t i = 0; i < w[t].n; i++) live += w[t].size[i];
    blocks += w[t].n;
    w[t].next = &w[(t + 1) % threads];
    w[t].start = &start;
    w[t].allocated = &allocated;
  }
  long rss_start = xb_rss_kb();
  for (unsigned t = 0; t < threads; t++) pthread_create(&w[t].thread, NULL, work, &w[t]);
  pthread_barrier_wait(&start);
  uint64_t t0 = xb_now_ns();
  pthread_barrier_wait(&allocated);
  double alloc_s = xb_seconds_since(t0);
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double secs = xb_seconds_since(t0);
  long rss_after_free = xb_rss_kb();
  long rss_peak = xb_peak_rss_kb();

  long rss_after_1s = 0;
  for (int step = 1; step <= 12; step++) {
    xb_sleep_ms(100);
    long rss = xb_rss_kb();
    if (step == 10) rss_after_1s = rss;
  }
  const char *trim_lib = trim();
  long rss_after_trim = xb_rss_kb();

  printf("blocks=%zu\n", blocks);
  printf("live_mb=%.1f\n", (double)live / (double)MIB);
  printf("time_s=%.6f\n", secs);
  printf("alloc_s=%.6f\n", alloc_s);
  printf("free_s=%.6f\n", secs - alloc_s);
  printf("rss_start_mb=%.1f\n", mb(rss_start));
  printf("rss_peak_mb=%.1f\n", mb(rss_peak));
  printf("rss_after_free_mb=%.1f\n", mb(rss_after_free));
  printf("rss_after_1s_mb=%.1f\n", mb(rss_after_1s));
  printf("rss_after_trim_mb=%.1f\n", mb(rss_after_trim));
  printf("trim_lib=%s\n", trim_lib);
  pthread_barrier_destroy(&allocated);
  pthread_barrier_destroy(&start);
  for (unsigned t = 0; t < threads; t++) {
    free(w[t].block);
    free(w[t].size);
  }
  free(w);
  return 0;
}
