/* Memory-return probes (docs/memory.md), linked with libxalloc.so and run by
 * features_test.cpp. Each prints key=value lines (RSS in KiB, from
 * /proc/self/statm) that the test checks; the thresholds live in the test.
 *
 *   memory_probe gigabyte   4 threads allocate 1 GiB in all, in blocks of 16 B
 *                           to 64 KiB (log-uniform), touch every byte, free
 *                           their own blocks; then RSS right after, its
 *                           lowest within 1 s, and after malloc_trim(0)
 *   memory_probe idle       a thread allocates and frees ~40 MB, then the
 *                           process sleeps: RSS every 20 ms for 1.5 s
 *   memory_probe churn N    N threads, 8 at a time, each allocating and freeing
 *                           blocks (and freeing one block of its predecessor):
 *                           RSS after the first 100 threads and after all N,
 *                           once the purge delay has passed, and after
 *                           malloc_trim(0)
 *   memory_probe reuse      20 rounds of: allocate twelve 1 MiB blocks, write
 *                           them, free them, sleep 60 ms, allocate and free
 *                           one more; the page faults of each round
 *   memory_probe shrink     the rounds of `reuse` (so the dirty budget grows),
 *                           the statistics on stderr, then 48 MiB in 256 KiB
 *                           blocks written and freed, and RSS after 1 s idle
 *   memory_probe stalled    a thread allocates 64 K blocks of 64 B and blocks on
 *                           a condition variable; the main thread frees them all
 *                           (they wait in the stalled thread's inbox) and,
 *                           50 ms later, allocates as many: how many of those it got at
 *                           addresses of the freed ones (XALLOC_BORROW); then
 *                           the stalled thread wakes, allocates and frees
 *   memory_probe young      one block of each small class's size: the page
 *                           faults, and the usable size of malloc(33) while
 *                           the heap is young and once it has grown up
 *   memory_probe fork N     with N more threads alive (at most 16), each with
 *                           its heap, 64 forks of a child that exits at
 *                           once: the parent's page faults per fork, x100
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xalloc/xalloc.h>

static size_t rss_kib(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == NULL) return 0;
  unsigned long size = 0, resident = 0;
  int n = fscanf(f, "%lu %lu", &size, &resident);
  fclose(f);
  return n == 2 ? resident * (size_t)sysconf(_SC_PAGESIZE) / 1024 : 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static uint64_t next_random(uint64_t* state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Log-uniform in [16, 65536]: as many blocks of 16-32 bytes as of 32-64 KiB. */
static size_t mixed_size(uint64_t* state) {
  uint64_t r = next_random(state);
  unsigned shift = 4 + (unsigned)(r % 12); /* 16 .. 32 KiB */
  size_t base = (size_t)1 << shift;
  return base + (size_t)((r >> 8) % base);
}

/* --- gigabyte --------------------------------------------------------------- */

enum { kThreads = 4 };
#define GIGABYTE_PER_THREAD ((size_t)256 << 20)

static pthread_barrier_t g_allocated;

static void* gigabyte_thread(void* arg) {
  uint64_t state = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
  size_t capacity = 1 << 16, count = 0, total = 0;
  void** blocks = malloc(capacity * sizeof(void*));
  while (total < GIGABYTE_PER_THREAD) {
    if (count == capacity) {
      capacity *= 2;
      blocks = realloc(blocks, capacity * sizeof(void*));
    }
    size_t size = mixed_size(&state);
    char* p = malloc(size);
    if (p == NULL) {
      printf("malloc(%zu) failed\n", size);
      exit(1);
    }
    memset(p, (int)(count & 0xff), size);
    blocks[count++] = p;
    total += size;
  }
  pthread_barrier_wait(&g_allocated);
  for (size_t i = 0; i < count; ++i) free(blocks[i]);
  free(blocks);
  return NULL;
}

static int gigabyte(void) {
  size_t before = rss_kib();
  pthread_barrier_init(&g_allocated, NULL, kThreads + 1);
  pthread_t threads[kThreads];
  for (int i = 0; i < kThreads; ++i) pthread_create(&threads[i], NULL, gigabyte_thread, (void*)(uintptr_t)i);
  pthread_barrier_wait(&g_allocated);
  size_t peak = rss_kib();
  for (int i = 0; i < kThreads; ++i) pthread_join(threads[i], NULL);
  size_t after = rss_kib();
  double t0 = now_ms();
  size_t lowest = after;
  double lowest_at = 0;
  while (now_ms() - t0 < 1000) {
    sleep_ms(10);
    size_t rss = rss_kib();
    if (rss < lowest) {
      lowest = rss;
      lowest_at = now_ms() - t0;
    }
  }
  malloc_trim(0);
  size_t trimmed = rss_kib();
  printf("before_kib=%zu\nallocated_kib=%zu\nafter_free_kib=%zu\nlowest_1s_kib=%zu\nlowest_at_ms=%.0f\ntrimmed_kib=%zu\n",
         before, peak, after, lowest, lowest_at, trimmed);
  return 0;
}

/* --- idle --------------------------------------------------------------------- */

#define IDLE_BYTES ((size_t)40 << 20)

static void* idle_thread(void* arg) {
  (void)arg;
  uint64_t state = 12345;
  enum { kMax = 1 << 16 };
  static void* blocks[kMax];
  size_t count = 0, total = 0;
  while (total < IDLE_BYTES && count < kMax) {
    size_t size = 1024 + mixed_size(&state) * 2; /* 1 KiB .. 129 KiB: slabs and large blocks */
    char* p = malloc(size);
    memset(p, 1, size);
    blocks[count++] = p;
    total += size;
  }
  printf("allocated_kib=%zu\n", rss_kib());
  for (size_t i = 0; i < count; ++i) free(blocks[i]);
  return NULL;
}

static int idle(void) {
  void* keep = malloc(100); /* the main thread has a heap too */
  printf("before_kib=%zu\n", rss_kib());
  pthread_t thread;
  pthread_create(&thread, NULL, idle_thread, NULL);
  pthread_join(thread, NULL);
  double t0 = now_ms();
  printf("after_free_kib=%zu\n", rss_kib());
  /* Sleep without allocating: only a background purge can give memory back. */
  size_t at_1s = 0;
  while (now_ms() - t0 < 1500) {
    sleep_ms(20);
    double t = now_ms() - t0;
    size_t rss = rss_kib();
    printf("t_ms=%.0f rss_kib=%zu\n", t, rss);
    if (t <= 1000) at_1s = rss;
  }
  printf("at_1s_kib=%zu\n", at_1s);
  free(keep);
  return 0;
}

/* --- churn -------------------------------------------------------------------- */

static _Atomic(void*) g_handoff;

static void* churn_thread(void* arg) {
  uint64_t state = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  enum { kBlocks = 64 };
  void* blocks[kBlocks];
  for (int i = 0; i < kBlocks; ++i) {
    size_t size = (i % 16 == 15) ? 70000 : mixed_size(&state) % 4096 + 16;
    blocks[i] = malloc(size);
    memset(blocks[i], i, size);
  }
  for (int i = 0; i < kBlocks; i += 2) free(blocks[i]);
  for (int i = 1; i < kBlocks - 1; i += 2) free(blocks[i]);
  /* Leave the last block to the next thread: a free from another thread,
   * often after its owner exited. */
  void* previous = atomic_exchange(&g_handoff, blocks[kBlocks - 1]);
  free(previous);
  return NULL;
}

static void run_threads(size_t from, size_t to) {
  enum { kBatch = 8 };
  for (size_t i = from; i < to; i += kBatch) {
    pthread_t threads[kBatch];
    size_t n = to - i < kBatch ? to - i : kBatch;
    for (size_t k = 0; k < n; ++k) {
      if (pthread_create(&threads[k], NULL, churn_thread, (void*)(uintptr_t)(i + k)) != 0) {
        printf("pthread_create failed\n");
        exit(1);
      }
    }
    for (size_t k = 0; k < n; ++k) pthread_join(threads[k], NULL);
  }
}

/* RSS once memory freed a moment ago has had its purge delay (500 ms by
 * default) and an allocator slow path (a large block) has run. */
static size_t settled_rss_kib(void) {
  sleep_ms(700);
  free(malloc(256 << 10));
  return rss_kib();
}

static int churn(size_t n) {
  void* keep = malloc(100);
  run_threads(0, 100);
  size_t after_100 = settled_rss_kib();
  malloc_trim(0);
  size_t after_100_trimmed = rss_kib();
  double t0 = now_ms();
  run_threads(100, n);
  double took = now_ms() - t0;
  size_t after_all = settled_rss_kib();
  malloc_trim(0);
  size_t after_all_trimmed = rss_kib();
  printf("after_100_kib=%zu\nafter_all_kib=%zu\nafter_100_trimmed_kib=%zu\nafter_all_trimmed_kib=%zu\n"
         "threads=%zu\nms=%.0f\n",
         after_100, after_all, after_100_trimmed, after_all_trimmed, n, took);
  free(atomic_exchange(&g_handoff, NULL));
  free(keep);
  return 0;
}

/* --- reuse -------------------------------------------------------------------- */

static long minor_faults(void) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

static int reuse_rounds(int print) {
  enum { kRounds = 20, kBlocks = 12, kBlockBytes = 1 << 20 };
  void* blocks[kBlocks];
  for (int round = 0; round < kRounds; ++round) {
    long before = minor_faults();
    for (int i = 0; i < kBlocks; ++i) {
      blocks[i] = malloc(kBlockBytes);
      if (blocks[i] == NULL) return 1;
      memset(blocks[i], round, kBlockBytes);
    }
    for (int i = 0; i < kBlocks; ++i) free(blocks[i]);
    if (print) printf("round=%d faults=%ld\n", round, minor_faults() - before);
    sleep_ms(60);
    free(malloc(kBlockBytes)); /* the allocator's periodic work runs on such calls */
  }
  return 0;
}

static int reuse(void) { return reuse_rounds(1); }

/* --- taken_again ---------------------------------------------------------------- */

/* Rounds of `count` blocks of about `mib` MiB written, freed and at once
 * allocated again, a page larger each round, as a program that needs big
 * buffers per request or per file does; page faults per round. */
static int taken_again(size_t mib, int count) {
  enum { kRounds = 12, kMaxBlocks = 16 };
  if (count > kMaxBlocks) return 1;
  void* blocks[kMaxBlocks];
  for (int round = 0; round < kRounds; ++round) {
    long before = minor_faults();
    for (int i = 0; i < count; ++i) {
      size_t bytes = (mib << 20) + (size_t)(i + round) * 4096;
      blocks[i] = malloc(bytes);
      if (blocks[i] == NULL) return 1;
      memset(blocks[i], round, bytes);
    }
    for (int i = 0; i < count; ++i) free(blocks[i]);
    printf("round=%d faults=%ld\n", round, minor_faults() - before);
  }
  return 0;
}

/* --- shrink --------------------------------------------------------------------- */

static int shrink(void) {
  enum { kBlocks = 192, kBlockBytes = 256 << 10 };
  if (reuse_rounds(0) != 0) return 1;
  xalloc_stats_print(); /* the test reads the budget's boost from it */
  void* blocks[kBlocks];
  for (int i = 0; i < kBlocks; ++i) {
    blocks[i] = malloc(kBlockBytes);
    if (blocks[i] == NULL) return 1;
    memset(blocks[i], i, kBlockBytes);
  }
  printf("allocated_kib=%zu\n", rss_kib());
  for (int i = 0; i < kBlocks; ++i) free(blocks[i]);
  /* Sleep without allocating, as a program does once its work is done. */
  sleep_ms(1000);
  printf("at_1s_kib=%zu\n", rss_kib());
  return 0;
}

/* --- young ---------------------------------------------------------------------- */

static int young(void) {
  static const size_t kSizes[] = {16,  32,  48,  64,  80,  96,  112, 128, 160, 192,
                                  224, 256, 320, 384, 448, 512, 640, 768, 896, 1024};
  enum { kCount = sizeof kSizes / sizeof kSizes[0], kGrowUpBlocks = 5000 };
  free(malloc(16)); /* the heap, its segment and its first slab */
  long before = minor_faults();
  void* blocks[kCount];
  for (int i = 0; i < kCount; ++i) blocks[i] = malloc(kSizes[i]);
  printf("faults=%ld\n", minor_faults() - before);
  void* young_block = malloc(33);
  printf("young_usable_33=%zu\n", malloc_usable_size(young_block));
  /* More 16-byte blocks than a slab holds: the heap grows up. */
  static void* many[kGrowUpBlocks];
  for (int i = 0; i < kGrowUpBlocks; ++i) many[i] = malloc(16);
  void* grown_block = malloc(33);
  printf("grown_usable_33=%zu\n", malloc_usable_size(grown_block));
  free(grown_block);
  for (int i = 0; i < kGrowUpBlocks; ++i) free(many[i]);
  free(young_block);
  for (int i = 0; i < kCount; ++i) free(blocks[i]);
  return 0;
}

/* --- fork ----------------------------------------------------------------------- */

enum { kMaxForkThreads = 16, kForks = 64 };
static pthread_barrier_t g_fork_barrier;

static void* fork_bystander(void* arg) {
  free(malloc(100)); /* its heap */
  pthread_barrier_wait(&g_fork_barrier);
  pthread_barrier_wait(&g_fork_barrier); /* alive until the forks are done */
  return arg;
}

static int fork_faults(unsigned n) {
  pthread_t threads[kMaxForkThreads];
  if (n > kMaxForkThreads) return 2;
  pthread_barrier_init(&g_fork_barrier, NULL, n + 1);
  for (unsigned i = 0; i < n; ++i)
    if (pthread_create(&threads[i], NULL, fork_bystander, NULL) != 0) return 1;
  pthread_barrier_wait(&g_fork_barrier);
  free(malloc(100));
  long before = minor_faults();
  for (int i = 0; i < kForks; ++i) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) _exit(0);
    waitpid(pid, NULL, 0);
  }
  printf("fork_faults_x100=%ld\n", (minor_faults() - before) * 100 / kForks);
  pthread_barrier_wait(&g_fork_barrier);
  for (unsigned i = 0; i < n; ++i) pthread_join(threads[i], NULL);
  return 0;
}

enum { kStalledBlocks = 64 * 1024 };
static void* g_stalled_blocks[kStalledBlocks];
static pthread_mutex_t g_stalled_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_stalled_cond = PTHREAD_COND_INITIALIZER;
static int g_stalled_phase;  /* 1: blocks allocated, 2: wake up */

static void stalled_wait_for(int phase) {
  pthread_mutex_lock(&g_stalled_lock);
  while (g_stalled_phase < phase) pthread_cond_wait(&g_stalled_cond, &g_stalled_lock);
  pthread_mutex_unlock(&g_stalled_lock);
}

static void stalled_enter(int phase) {
  pthread_mutex_lock(&g_stalled_lock);
  g_stalled_phase = phase;
  pthread_cond_broadcast(&g_stalled_cond);
  pthread_mutex_unlock(&g_stalled_lock);
}

static void* stalled_owner(void* arg) {
  (void)arg;
  for (size_t i = 0; i < kStalledBlocks; ++i) {
    g_stalled_blocks[i] = malloc(64);
    memset(g_stalled_blocks[i], 0x5a, 64);
  }
  stalled_enter(1);
  stalled_wait_for(2);
  /* Awake again: its heap must serve and take back blocks as before. */
  for (int round = 0; round < 4; ++round) {
    for (size_t i = 0; i < kStalledBlocks / 4; ++i) g_stalled_blocks[i] = malloc(64);
    for (size_t i = 0; i < kStalledBlocks / 4; ++i) free(g_stalled_blocks[i]);
  }
  return NULL;
}

static int compare_pointers(const void* a, const void* b) {
  uintptr_t x = *(const uintptr_t*)a, y = *(const uintptr_t*)b;
  return x < y ? -1 : x > y;
}

static int stalled(void) {
  pthread_t owner;
  if (pthread_create(&owner, NULL, stalled_owner, NULL) != 0) return 1;
  stalled_wait_for(1);
  static void* freed[kStalledBlocks];
  memcpy(freed, g_stalled_blocks, sizeof freed);
  qsort(freed, kStalledBlocks, sizeof freed[0], compare_pointers);
  for (size_t i = 0; i < kStalledBlocks; ++i) free(g_stalled_blocks[i]);
  /* Longer than a thread that others preempt waits for its core: the
     owner is stalled, not just off the CPU (kStalledMillis). */
  sleep_ms(50);
  static void* mine[kStalledBlocks];
  size_t reused = 0;
  for (size_t i = 0; i < kStalledBlocks; ++i) {
    mine[i] = malloc(64);
    if (mine[i] == NULL) return 1;
    memset(mine[i], 0xa5, 64);
    if (bsearch(&mine[i], freed, kStalledBlocks, sizeof freed[0], compare_pointers) != NULL) ++reused;
  }
  stalled_enter(2);
  pthread_join(owner, NULL);
  for (size_t i = 0; i < kStalledBlocks; ++i) {
    for (size_t b = 0; b < 64; ++b)
      if (((unsigned char*)mine[i])[b] != 0xa5) {
        printf("corrupted=%zu\n", i);
        return 1;
      }
    free(mine[i]);
  }
  printf("blocks=%d\nreused=%zu\n", kStalledBlocks, reused);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "gigabyte") == 0) return gigabyte();
  if (strcmp(mode, "idle") == 0) return idle();
  if (strcmp(mode, "churn") == 0 && argc == 3) return churn(strtoul(argv[2], NULL, 10));
  if (strcmp(mode, "reuse") == 0) return reuse();
  if (strcmp(mode, "taken_again") == 0 && argc == 4) return taken_again(strtoul(argv[2], NULL, 10), atoi(argv[3]));
  if (strcmp(mode, "shrink") == 0) return shrink();
  if (strcmp(mode, "young") == 0) return young();
  if (strcmp(mode, "stalled") == 0) return stalled();
  if (strcmp(mode, "fork") == 0 && argc == 3) return fork_faults((unsigned)strtoul(argv[2], NULL, 10));
  fprintf(stderr, "usage: %s gigabyte | idle | churn N | reuse | shrink | young | stalled | fork N\n", argv[0]);
  return 2;
}
