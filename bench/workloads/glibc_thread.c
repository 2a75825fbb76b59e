/*
 * glibc_thread: threads replacing random blocks in a working set of
 * random-size blocks.
 *
 * Written from the description of glibc's benchtests/bench-malloc-thread
 * (mimalloc-bench: `glibc-thread N`; N threads, a working set of 1024
 * blocks per thread, sizes 4-32768 bytes drawn with probability
 * proportional to 1/size, i.e. most blocks small). Each iteration frees
 * the block in a random slot of the thread's working set and allocates a
 * new one there. The original runs for 2 seconds and reports iterations;
 * this one runs a fixed number of iterations per thread.
 *
 * usage: glibc_thread [threads=2] [iterations_per_thread=2000000] [seed=1]
 * prints: iterations, time_s, ns_per_iteration (wall time x threads /
 *         iterations).
 */
#include "xbench.h"

#include <math.h>
#include <pthread.h>

#define WORKING_SET 1024u
#define SIZE_TABLE 4096u
#define MIN_SIZE 4.0
#define MAX_SIZE 32768.0

static uint32_t g_sizes[SIZE_TABLE];

typedef struct worker {
  XB_OWN_LINE pthread_t thread;
  uint64_t iterations, seed;
  pthread_barrier_t *start;
} worker;

static void *run(void *arg) {
  worker *w = (worker *)arg;
  xb_rng rng = xb_rng_make(w->seed);
  void *ws[WORKING_SET];
  uint32_t size[WORKING_SET];
  memset(ws, 0, sizeof ws);
  memset(size, 0, sizeof size);
  pthread_barrier_wait(w->start);
  for (uint64_t i = 0; i < w->iterations; i++) {
    uint64_t r = xb_next(&rng);
    unsigned slot = (unsigned)(r % WORKING_SET);
    if (ws[slot] != NULL) xb_check_tag(ws[slot], size[slot], (uint8_t)slot);
    free(ws[slot]);
    size[slot] = g_sizes[(r >> 32) % SIZE_TABLE];
    ws[slot] = xb_xmalloc(size[slot]);
    xb_tag(ws[slot], size[slot], (uint8_t)slot);
  }
  for (unsigned i = 0; i < WORKING_SET; i++) free(ws[i]);
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=2] [iterations_per_thread=2000000] [seed=1]");
  xb_init();
  unsigned threads = (unsigned)xb_arg_u64(argc, argv, 1, 2);
  uint64_t iterations = xb_arg_u64(argc, argv, 2, 2000000);
  uint64_t seed = xb_arg_u64(argc, argv, 3, 1);
  if (threads == 0) return XB_EXIT_USAGE;

  /* P(size) ~ 1/size on [4, 32768]: log-uniform. */
  xb_rng rng = xb_rng_make(seed);
  for (unsigned i = 0; i < SIZE_TABLE; i++)
    g_sizes[i] = (uint32_t)(MIN_SIZE * pow(MAX_SIZE / MIN_SIZE, xb_unit(&rng)));

  worker *w = (worker *)xb_xcalloc_lines(threads, sizeof *w);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads + 1);
  for (unsigned t = 0; t < threads; t++) {
    w[t].iterations = iterations;
    w[t].seed = seed * 1000 + t + 1;
    w[t].start = &start;
    pthread_create(&w[t].thread, NULL, run, &w[t]);
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = xb_now_ns();
  for (unsigned t = 0; t < threads; t++) pthread_join(w[t].thread, NULL);
  double secs = xb_seconds_since(t0);

  double total = (double)iterations * threads;
  printf("iterations=%.0f\n", total);
  printf("time_s=%.6f\n", secs);
  printf("ns_per_iteration=%.2f\n", secs * 1e9 * threads / total);
  pthread_barrier_destroy(&start);
  free(w);
  return 0;
}
