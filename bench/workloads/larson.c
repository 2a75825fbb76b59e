/*
 * larson: Larson & Krishnan's server simulation ("Memory allocation for
 * long-running server applications", ISMM 1998).
 *
 * Each simulated server thread owns an array of `chunks` blocks. It
 * repeatedly frees a random block and allocates a replacement of a random
 * size in [min, max], writing to it. At the end of a generation the thread
 * starts a successor thread, hands it the array and exits, so blocks
 * allocated by one thread are freed by the next ("bleeding" between
 * threads, with a steady stream of thread creation and exit). The initial
 * blocks are allocated by the main thread.
 *
 * Parameters follow mimalloc-bench's `larson 5 8 1000 5000 100 4141 N`
 * (sizes 8-1000, 5000 chunks per thread, 100 rounds, seed 4141, N threads),
 * read here as: a generation is `rounds` passes of `chunks` replacements.
 * The original runs for a fixed 5 seconds and reports throughput; this one
 * runs a fixed number of generations so that time is the measure.
 *
 * usage: larson [threads=2] [min=8] [max=1000] [chunks=5000] [rounds=100]
 *               [seed=4141] [generations=10]
 * prints: ops, time_s, ops_per_s, threads_started.
 */
#include "xbench.h"

#include <pthread.h>

typedef struct lineage {
  XB_OWN_LINE void **blocks;
  uint32_t *sizes;
  size_t chunks, min, max;
  uint64_t rounds, generations_left;
  xb_rng rng;
} lineage;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static unsigned g_finished;          /* lineages whose last generation ended */
static uint64_t g_threads_started;   /* under g_mu */

static void start_generation(lineage *l);

static void *generation(void *arg) {
  lineage *l = (lineage *)arg;
  for (uint64_t r = 0; r < l->rounds; r++) {
    for (size_t c = 0; c < l->chunks; c++) {
      size_t victim = (size_t)xb_below(&l->rng, l->chunks);
      xb_check_tag(l->blocks[victim], l->sizes[victim], (uint8_t)victim);
      free(l->blocks[victim]);
      uint32_t n = (uint32_t)xb_range(&l->rng, l->min, l->max);
      l->blocks[victim] = xb_xmalloc(n);
      l->sizes[victim] = n;
      xb_tag(l->blocks[victim], n, (uint8_t)victim);
    }
  }
  if (--l->generations_left > 0) {
    start_generation(l); /* hand the blocks on; this thread exits */
  } else {
    pthread_mutex_lock(&g_mu);
    g_finished++;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
  }
  return NULL;
}

static void start_generation(lineage *l) {
  pthread_t t;
  pthread_mutex_lock(&g_mu);
  g_threads_started++;
  pthread_mutex_unlock(&g_mu);
  if (pthread_create(&t, NULL, generation, l) != 0) xb_fail("pthread_create failed");
  pthread_detach(t);
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=2] [min=8] [max=1000] [chunks=5000] [rounds=100] [seed=4141] [generations=10]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 2);
  size_t min = (size_t)xb_arg_u64(argc, argv, 2, 8);
  size_t max = (size_t)xb_arg_u64(argc, argv, 3, 1000);
  size_t chunks = (size_t)xb_arg_u64(argc, argv, 4, 5000);
  uint64_t rounds = xb_arg_u64(argc, argv, 5, 100);
  uint64_t seed = xb_arg_u64(argc, argv, 6, 4141);
  uint64_t generations = xb_arg_u64(argc, argv, 7, 10);
  if (threads == 0 || chunks == 0 || min == 0 || max < min || generations == 0) return XB_EXIT_USAGE;

  lineage *ls = (lineage *)xb_xcalloc_lines(threads, sizeof *ls);
  for (unsigned t = 0; t < threads; t++) {
    lineage *l = &ls[t];
    l->chunks = chunks;
    l->min = min;
    l->max = max;
    l->rounds = rounds;
    l->generations_left = generations;
    l->rng = xb_rng_make(seed + t);
    l->blocks = (void **)xb_xmalloc(chunks * sizeof(void *));
    l->sizes = (uint32_t *)xb_xmalloc(chunks * sizeof(uint32_t));
    for (size_t c = 0; c < chunks; c++) {
      l->sizes[c] = (uint32_t)xb_range(&l->rng, min, max);
      l->blocks[c] = xb_xmalloc(l->sizes[c]);
      xb_tag(l->blocks[c], l->sizes[c], (uint8_t)c);
    }
  }

  uint64_t t0 = xb_now_ns();
  for (unsigned t = 0; t < threads; t++) start_generation(&ls[t]);
  pthread_mutex_lock(&g_mu);
  while (g_finished < threads) pthread_cond_wait(&g_cv, &g_mu);
  uint64_t started = g_threads_started;
  pthread_mutex_unlock(&g_mu);
  double secs = xb_seconds_since(t0);

  for (unsigned t = 0; t < threads; t++) {
    for (size_t c = 0; c < chunks; c++) free(ls[t].blocks[c]);
    free(ls[t].blocks);
    free(ls[t].sizes);
  }
  free(ls);

  double ops = (double)threads * (double)generations * (double)rounds * (double)chunks;
  printf("ops=%.0f\n", ops);
  printf("time_s=%.6f\n", secs);
  printf("ops_per_s=%.0f\n", ops / secs);
  printf("threads_started=%llu\n", (unsigned long long)started);
  return 0;
}
