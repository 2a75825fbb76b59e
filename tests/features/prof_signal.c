/* Signal dumps of the heap profiler (features_dumps_test.cpp), run under
 * LD_PRELOAD=libxalloc.so with XALLOC_PROF=1 and XALLOC_PROF_SIGNAL set to
 * SIGUSR1. Built like prof_workload.c (-O1 -g -fno-builtin, frame pointers).
 *
 *   prof_signal keep <prefix>   keeps 600 blocks of 100,000 bytes (60 MB,
 *       allocated in main), raises SIGUSR1, waits (without allocating) for
 *       the dump <prefix>.<pid>.0.heap to appear, then frees every block and
 *       exits. Prints "dump_ms <ms>" (-1: none within 10 s).
 *   prof_signal busy <prefix>   warms the caches with 20,000 malloc/free
 *       pairs, raises SIGUSR1, then only does 200,000
 *       malloc/free pairs of 16 to 2015 bytes, which the thread's caches
 *       serve, looking for the dump between batches; then waits (without
 *       allocating) up to 2 s more. Prints "dump_ms <ms>", the time from the
 *       signal to the dump (-1: none), and "pairs_done_ms <ms>".
 *   prof_signal interval <prefix>   (run with XALLOC_PROF_INTERVAL=40m)
 *       5 rounds, each allocating and freeing 100 blocks of 500,000 bytes
 *       (47.7 MiB: past one more multiple of 40 MiB), then waiting
 *       (without allocating) up to 3 s for the round's profile,
 *       <prefix>.<pid>.<round>.heap. Prints "rounds_with_profile <n>".
 *   prof_signal peak <prefix>   (run with XALLOC_PROF_PEAK=40m) the same
 *       rounds, keeping their blocks: the memory in use grows by 47.7 MiB
 *       a round, a new peak 40 MiB above the last each time; each round
 *       waits for its profile. Frees everything at the end.
 *
 * A dump counts as there under its numbered name or under the one earlier
 * versions used (<prefix>.<pid>.heap), so that the programs measure when a
 * dump is written, whatever it is called. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEEP_COUNT 600
#define KEEP_SIZE 100000
#define BUSY_PAIRS 200000

static char g_numbered[1024];
static char g_plain[1024];

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* stat() allocates nothing: looking does not give the allocator a slow path. */
static int dump_exists(void) {
  struct stat st;
  return stat(g_numbered, &st) == 0 || stat(g_plain, &st) == 0;
}

#define INTERVAL_ROUNDS 5
#define INTERVAL_BLOCKS 100
#define INTERVAL_SIZE 500000

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* Waits without allocating until the dump exists or `limit_ms` have passed
 * since `start`: the time it appeared, or -1. */
static long wait_for_dump(long start, long limit_ms) {
  while (!dump_exists()) {
    if (now_ms() - start > limit_ms) return -1;
    pause_ms(1);
  }
  return now_ms() - start;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: prof_signal keep|busy|interval|peak <prefix>\n");
    return 2;
  }
  /* Unbuffered: stdio allocates no buffer, so nothing of the program's own
   * may stay live at exit. */
  setvbuf(stdout, NULL, _IONBF, 0);
  snprintf(g_numbered, sizeof g_numbered, "%s.%d.0.heap", argv[2], (int)getpid());
  snprintf(g_plain, sizeof g_plain, "%s.%d.heap", argv[2], (int)getpid());
  if (strcmp(argv[1], "keep") == 0) {
    static void* blocks[KEEP_COUNT];
    for (int i = 0; i < KEEP_COUNT; ++i) {
      blocks[i] = malloc(KEEP_SIZE);
      if (blocks[i] == NULL) return 1;
      memset(blocks[i], i, KEEP_SIZE);
    }
    long start = now_ms();
    raise(SIGUSR1);
    printf("dump_ms %ld\n", wait_for_dump(start, 10000));
    for (int i = 0; i < KEEP_COUNT; ++i) free(blocks[i]);
    return 0;
  }
  if (strcmp(argv[1], "busy") == 0) {
    unsigned seed = 12345;
    long start = 0;
    long seen = -1;
    for (int i = -BUSY_PAIRS / 10; i < BUSY_PAIRS; ++i) {
      if (i == 0) {
        start = now_ms();
        raise(SIGUSR1);
      }
      seed = seed * 1103515245u + 12345u;
      char* p = malloc(16 + (seed >> 8) % 2000);
      if (p == NULL) return 1;
      p[0] = (char)i;
      free(p);
      if (i >= 0 && seen < 0 && i % 1000 == 999 && dump_exists()) seen = now_ms() - start;
    }
    long pairs_done = now_ms() - start;
    if (seen < 0) seen = wait_for_dump(start, 2000);
    printf("dump_ms %ld\npairs_done_ms %ld\n", seen, pairs_done);
    return 0;
  }
  if (strcmp(argv[1], "interval") == 0 || strcmp(argv[1], "peak") == 0) {
    static char* kept[INTERVAL_ROUNDS * INTERVAL_BLOCKS];
    int keep = strcmp(argv[1], "peak") == 0;
    int seen = 0;
    for (int round = 0; round < INTERVAL_ROUNDS; ++round) {
      for (int i = 0; i < INTERVAL_BLOCKS; ++i) {
        char* p = malloc(INTERVAL_SIZE);
        if (p == NULL) return 1;
        p[0] = (char)i;
        if (keep) {
          kept[round * INTERVAL_BLOCKS + i] = p;
        } else {
          free(p);
        }
      }
      snprintf(g_numbered, sizeof g_numbered, "%s.%d.%d.heap", argv[2], (int)getpid(), round);
      if (wait_for_dump(now_ms(), 3000) >= 0) ++seen;
    }
    printf("rounds_with_profile %d\n", seen);
    for (int i = 0; keep && i < INTERVAL_ROUNDS * INTERVAL_BLOCKS; ++i) free(kept[i]);
    return 0;
  }
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}
