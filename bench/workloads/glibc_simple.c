/*
 * glibc_simple: small batches of equal-size blocks allocated and freed on
 * one thread - the allocator's fastest path.
 *
 * Written from the description of glibc's benchtests/bench-malloc-simple
 * ("Benchmark the malloc/free performance of a varying number of blocks of
 * a given size ... It tests 3 different scenarios: single-threaded using
 * main arena, multi-threaded using thread-arena, and main arena with
 * SINGLE_THREAD_P false"; batches of 25, 100, 400 and 1600 blocks; 2,000,000
 * iterations), with mimalloc-bench's addition of both free orders. For each
 * block size (16, 256, 1024, 4096 bytes), scenario and batch size n, the
 * program runs iterations / n rounds of: allocate n blocks, free them - in
 * allocation order on even rounds, in reverse order on odd rounds.
 * Scenarios: (1) on the main thread before any other thread exists, (2) on
 * a second thread, (3) on the main thread while that second thread is
 * still alive (blocked), so a process-is-single-threaded shortcut no
 * longer applies.
 *
 * usage: glibc_simple [iterations=2000000]
 * prints: pairs (malloc+free), time_s, ns_per_pair, and per scenario
 *         main_ns, thread_ns, main_mt_ns (ns per pair).
 */
#include "xbench.h"

#include <pthread.h>

static const size_t kSizes[] = {16, 256, 1024, 4096};
static const unsigned kBatches[] = {25, 100, 400, 1600};

typedef struct scenario {
  uint64_t iterations;
  uint64_t pairs;
  double secs;
} scenario;

static void run_scenario(scenario *s) {
  void **arr = (void **)xb_xmalloc(1600 * sizeof(void *));
  uint64_t t0 = xb_now_ns();
  for (size_t si = 0; si < sizeof kSizes / sizeof kSizes[0]; si++) {
    size_t size = kSizes[si];
    for (size_t bi = 0; bi < sizeof kBatches / sizeof kBatches[0]; bi++) {
      unsigned n = kBatches[bi];
      uint64_t rounds = s->iterations / n;
      for (uint64_t r = 0; r < rounds; r++) {
        for (unsigned i = 0; i < n; i++) {
          arr[i] = malloc(size);
          if (arr[i] == NULL) xb_fail("malloc(%zu) returned NULL", size);
          *(volatile char *)arr[i] = (char)i;
        }
        if (r & 1) {
          for (unsigned i = n; i-- > 0;) free(arr[i]);
        } else {
          for (unsigned i = 0; i < n; i++) free(arr[i]);
        }
      }
      s->pairs += rounds * n;
    }
  }
  s->secs = xb_seconds_since(t0);
  free(arr);
}

static void *thread_scenario(void *arg) {
  run_scenario((scenario *)arg);
  return NULL;
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_release;

static void *idle_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  while (!g_release) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[iterations=2000000]");
  xb_init();
  uint64_t iterations = xb_arg_u64(argc, argv, 1, 2000000);

  scenario main_arena = {iterations, 0, 0}, thread_arena = {iterations, 0, 0}, main_mt = {iterations, 0, 0};
  run_scenario(&main_arena);

  pthread_t t;
  if (pthread_create(&t, NULL, thread_scenario, &thread_arena) != 0) xb_fail("pthread_create failed");
  pthread_join(t, NULL);

  if (pthread_create(&t, NULL, idle_thread, NULL) != 0) xb_fail("pthread_create failed");
  run_scenario(&main_mt);
  pthread_mutex_lock(&g_mu);
  g_release = 1;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  pthread_join(t, NULL);

  uint64_t pairs = main_arena.pairs + thread_arena.pairs + main_mt.pairs;
  double secs = main_arena.secs + thread_arena.secs + main_mt.secs;
  printf("pairs=%llu\n", (unsigned long long)pairs);
  printf("time_s=%.6f\n", secs);
  printf("ns_per_pair=%.2f\n", secs * 1e9 / (double)pairs);
  printf("main_ns=%.2f\n", main_arena.secs * 1e9 / (double)main_arena.pairs);
  printf("thread_ns=%.2f\n", thread_arena.secs * 1e9 / (double)thread_arena.pairs);
  printf("main_mt_ns=%.2f\n", main_mt.secs * 1e9 / (double)main_mt.pairs);
  return 0;
}
