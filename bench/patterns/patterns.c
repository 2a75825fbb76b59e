/*
 * patterns: small loops of allocation patterns that the suite's workloads
 * do not have, each one a case where some allocator was found far behind
 * the others (bench/patterns.py runs them under every contender).
 *
 *   two-lengths    a buffer asked for at 512 KiB and 512 KiB + 16 bytes in
 *                  turn, written at both ends, freed (300,000 pairs)
 *   span-1mib      the same at 1 MiB + 1 byte (300,000 pairs)
 *   calloc-sparse  calloc of 64 MiB, two pages written, freed (60 rounds)
 *   calloc-full    calloc of 64 MiB, every page written, freed (30 rounds)
 *   memalign-64    posix_memalign(64, 48..160) 256 at a time, then their
 *                  frees (20,000 rounds: a C++ type aligned to a cache line)
 *   realloc-byte   a buffer grown by realloc one byte at a time to 200,000
 *                  bytes (20 times)
 *   handoff        one thread fills 100,000-byte buffers and hands them
 *                  through a queue of 8 to another, which checks and frees
 *                  them (200,000 buffers)
 *   idle-pool      64 threads take turns to fill and free a 1 MiB and a
 *                  256 KiB buffer, then stay idle (a thread pool): the
 *                  peak RSS is what idle threads hold on to, since each
 *                  turn could reuse the last one's memory; then the main
 *                  thread keeps allocating small blocks for 1.2 s while
 *                  the pool idles, and rss_later_kb is the RSS at the end
 *                  (time_s: the turns)
 *   idle-small     64 threads each fill and free 4,000 small blocks
 *                  (16-952 bytes), then stay idle, while the main thread
 *                  builds and churns 20,000 blocks of 16-3,016 bytes for
 *                  2 s: rss_later_kb is what the process holds at the
 *                  end, the idle threads' freed memory included unless
 *                  the main thread reuses it (time_s: the threads' work)
 *   size-shift     8 threads each fill and free 4,000 blocks of 16 B-16 KiB
 *                  (a start-up or a burst that uses every size), then go
 *                  on with batches of 4,000 48-byte blocks for 2 s:
 *                  rss_later_kb is what the process holds at the end
 *                  (time_s: the whole run)
 *
 * usage: patterns <name>
 * prints: time_s (the loop), peak_rss_kb; idle-pool, idle-small and
 *         size-shift also rss_later_kb.
 */
#include "xbench.h"

#include <pthread.h>
#include <stdatomic.h>

static void two_lengths(size_t base, uint64_t pairs) {
  for (uint64_t i = 0; i < pairs; i++) {
    size_t size = base + (i & 1) * 16;
    unsigned char *p = (unsigned char *)malloc(size);
    if (p == NULL) xb_fail("malloc(%zu) returned NULL", size);
    p[0] = (unsigned char)i;
    p[size - 1] = (unsigned char)i;
    xb_escape(p);
    free(p);
  }
}

static void calloc_loop(int rounds, int every_page) {
  const size_t size = (size_t)64 << 20;
  for (int r = 0; r < rounds; r++) {
    unsigned char *p = (unsigned char *)calloc(1, size);
    if (p == NULL) xb_fail("calloc of 64 MiB returned NULL");
    size_t step = every_page ? 4096 : size / 2 - 4096;
    for (size_t at = 100; at < size; at += step) {
      if (p[at] != 0) xb_fail("calloc returned a block that is not zero at %zu", at);
      p[at] = 1;
    }
    free(p);
  }
}

static void memalign_64(void) {
  void *blocks[256];
  for (int r = 0; r < 20000; r++) {
    for (int i = 0; i < 256; i++) {
      if (posix_memalign(&blocks[i], 64, 48 + (size_t)(i & 7) * 16) != 0) xb_fail("posix_memalign failed");
      if (((uintptr_t)blocks[i] & 63) != 0) xb_fail("posix_memalign returned a misaligned block");
      *(volatile char *)blocks[i] = 1;
    }
    for (int i = 0; i < 256; i++) free(blocks[i]);
  }
}

static void realloc_byte(void) {
  for (int r = 0; r < 20; r++) {
    unsigned char *s = NULL;
    for (size_t n = 1; n < 200000; n++) {
      s = (unsigned char *)realloc(s, n);
      if (s == NULL) xb_fail("realloc(%zu) returned NULL", n);
      s[n - 1] = (unsigned char)n;
    }
    for (size_t n = 1; n < 200000; n += 4099)
      if (s[n - 1] != (unsigned char)n) xb_fail("realloc lost the contents at %zu", n);
    free(s);
  }
}

/* handoff: a single-producer, single-consumer ring of QUEUE slots. */
enum { QUEUE = 8, BUFFER = 100000, BUFFERS = 200000 };
static void *_Atomic g_ring[QUEUE];
static _Atomic uint64_t g_head, g_tail;

static void *produce(void *arg) {
  (void)arg;
  for (uint64_t i = 0; i < BUFFERS; i++) {
    unsigned spins = 0;
    while (atomic_load_explicit(&g_head, memory_order_relaxed) - atomic_load_explicit(&g_tail, memory_order_acquire) >= QUEUE)
      xb_pause(&spins);
    unsigned char *p = (unsigned char *)malloc(BUFFER);
    if (p == NULL) xb_fail("malloc(%d) returned NULL", BUFFER);
    p[0] = p[BUFFER - 1] = (unsigned char)i;
    atomic_store_explicit(&g_ring[i % QUEUE], p, memory_order_relaxed);
    atomic_store_explicit(&g_head, i + 1, memory_order_release);
  }
  return NULL;
}

static void *consume(void *arg) {
  (void)arg;
  for (uint64_t i = 0; i < BUFFERS; i++) {
    unsigned spins = 0;
    while (atomic_load_explicit(&g_head, memory_order_acquire) <= i) xb_pause(&spins);
    unsigned char *p = atomic_load_explicit(&g_ring[i % QUEUE], memory_order_relaxed);
    if (p[0] != (unsigned char)i || p[BUFFER - 1] != (unsigned char)i) xb_fail("buffer %llu was corrupted", (unsigned long long)i);
    free(p);
    atomic_store_explicit(&g_tail, i + 1, memory_order_release);
  }
  return NULL;
}

static void handoff(void) {
  pthread_t producer, consumer;
  if (pthread_create(&producer, NULL, produce, NULL) != 0 || pthread_create(&consumer, NULL, consume, NULL) != 0)
    xb_fail("pthread_create failed");
  pthread_join(producer, NULL);
  pthread_join(consumer, NULL);
}

/* idle-pool: threads that each use a buffer once, one after another, and
 * stay alive. */
enum { POOL = 64 };
static _Atomic unsigned g_turn;

static void fill_and_free(size_t size, unsigned seed) {
  unsigned char *p = (unsigned char *)malloc(size);
  if (p == NULL) xb_fail("malloc(%zu) returned NULL", size);
  memset(p, (int)seed, size);
  if (p[size / 2] != (unsigned char)seed) xb_fail("buffer was corrupted");
  free(p);
}

static _Atomic int g_pool_done;

static void *pool_worker(void *arg) {
  unsigned me = (unsigned)(uintptr_t)arg;
  unsigned spins = 0;
  while (atomic_load_explicit(&g_turn, memory_order_acquire) != me) xb_pause(&spins);
  fill_and_free((size_t)1 << 20, me);
  fill_and_free((size_t)256 << 10, me + 1);
  atomic_store_explicit(&g_turn, me + 1, memory_order_release);
  while (!atomic_load_explicit(&g_pool_done, memory_order_acquire)) xb_sleep_ms(5);
  return NULL;
}

/* Starts POOL threads running `worker` (its argument: the thread's index)
 * and waits until `counter` reaches POOL. */
static void pool_start(pthread_t *threads, void *(*worker)(void *), _Atomic unsigned *counter) {
  for (unsigned i = 0; i < POOL; i++)
    if (pthread_create(&threads[i], NULL, worker, (void *)(uintptr_t)i) != 0) xb_fail("pthread_create failed");
  unsigned spins = 0;
  while (atomic_load_explicit(counter, memory_order_acquire) != POOL) xb_pause(&spins);
}

static void pool_end(pthread_t *threads) {
  atomic_store_explicit(&g_pool_done, 1, memory_order_release);
  for (unsigned i = 0; i < POOL; i++) pthread_join(threads[i], NULL);
}

/* Returns the seconds the turns took. */
static double idle_pool(void) {
  pthread_t threads[POOL];
  uint64_t start = xb_now_ns();
  pool_start(threads, pool_worker, &g_turn);
  double turns = xb_seconds_since(start);
  /* The main thread goes on working while the pool idles: 4000 small blocks
   * at a time, more than a slab holds, so that its allocations reach the
   * allocator's slow paths now and then, as a working thread's do. */
  uint64_t idle_start = xb_now_ns();
  static void *small[4000];
  while (xb_seconds_since(idle_start) < 1.2) {
    for (int i = 0; i < 4000; i++) {
      small[i] = malloc(48);
      if (small[i] == NULL) xb_fail("malloc(48) returned NULL");
      xb_escape(small[i]);
    }
    for (int i = 0; i < 4000; i++) free(small[i]);
    xb_sleep_ms(5);
  }
  printf("rss_later_kb=%ld\n", xb_rss_kb());
  pool_end(threads);
  return turns;
}

/* 4,000 blocks of `lo`..`hi` bytes (uniform), written, then freed. */
static void use_blocks_once(uint64_t seed, size_t lo, size_t hi) {
  xb_rng rng = xb_rng_make(seed);
  static _Thread_local void *blocks[4000];
  for (int i = 0; i < 4000; i++) {
    size_t size = (size_t)xb_range(&rng, lo, hi);
    blocks[i] = malloc(size);
    if (blocks[i] == NULL) xb_fail("malloc(%zu) returned NULL", size);
    memset(blocks[i], i & 0xff, size);
  }
  for (int i = 0; i < 4000; i++) free(blocks[i]);
}

/* idle-small: threads that each use small blocks once and stay alive. */
static _Atomic unsigned g_small_done_threads;

static void *small_worker(void *arg) {
  use_blocks_once((uint64_t)(uintptr_t)arg + 1, 16, 952);
  atomic_fetch_add_explicit(&g_small_done_threads, 1, memory_order_release);
  while (!atomic_load_explicit(&g_pool_done, memory_order_acquire)) xb_sleep_ms(5);
  return NULL;
}

/* Returns the seconds the threads took to use and free their blocks. */
static double idle_small(void) {
  pthread_t threads[POOL];
  uint64_t start = xb_now_ns();
  pool_start(threads, small_worker, &g_small_done_threads);
  double work = xb_seconds_since(start);
  /* The main thread's working set: 20,000 blocks replaced at random. */
  enum { SLOTS = 20000 };
  static void *slot[SLOTS];
  xb_rng rng = xb_rng_make(99);
  uint64_t idle_start = xb_now_ns();
  for (uint64_t n = 0; (n & 1023) != 0 || xb_seconds_since(idle_start) < 2.0; n++) {
    size_t i = (size_t)xb_below(&rng, SLOTS);
    free(slot[i]);
    size_t size = (size_t)xb_range(&rng, 16, 3016);
    slot[i] = malloc(size);
    if (slot[i] == NULL) xb_fail("malloc(%zu) returned NULL", size);
    memset(slot[i], (int)n, size);
    if ((n & 1023) == 0) xb_sleep_ms(1);
  }
  printf("rss_later_kb=%ld\n", xb_rss_kb());
  for (size_t i = 0; i < SLOTS; i++) free(slot[i]);
  pool_end(threads);
  return work;
}

/* size-shift: threads that use every size once, then a few. */
enum { SHIFT_THREADS = 8 };
static _Atomic unsigned g_shift_done_threads;

static void *shift_worker(void *arg) {
  use_blocks_once((uint64_t)(uintptr_t)arg + 1, 16, 16384);
  static _Thread_local void *blocks[4000];
  uint64_t start = xb_now_ns();
  while (xb_seconds_since(start) < 2.0) {
    for (int i = 0; i < 4000; i++) {
      blocks[i] = malloc(48);
      if (blocks[i] == NULL) xb_fail("malloc(48) returned NULL");
      memset(blocks[i], i & 0xff, 48);
    }
    for (int i = 0; i < 4000; i++) free(blocks[i]);
    xb_sleep_ms(5);
  }
  atomic_fetch_add_explicit(&g_shift_done_threads, 1, memory_order_release);
  while (!atomic_load_explicit(&g_pool_done, memory_order_acquire)) xb_sleep_ms(5);
  return NULL;
}

static void size_shift(void) {
  pthread_t threads[SHIFT_THREADS];
  for (unsigned i = 0; i < SHIFT_THREADS; i++)
    if (pthread_create(&threads[i], NULL, shift_worker, (void *)(uintptr_t)i) != 0) xb_fail("pthread_create failed");
  unsigned spins = 0;
  while (atomic_load_explicit(&g_shift_done_threads, memory_order_acquire) != SHIFT_THREADS) xb_pause(&spins);
  printf("rss_later_kb=%ld\n", xb_rss_kb());
  atomic_store_explicit(&g_pool_done, 1, memory_order_release);
  for (unsigned i = 0; i < SHIFT_THREADS; i++) pthread_join(threads[i], NULL);
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "<two-lengths|span-1mib|calloc-sparse|calloc-full|memalign-64|realloc-byte|handoff|idle-pool|idle-small|size-shift>");
  xb_init();
  if (argc != 2) return XB_EXIT_USAGE;
  const char *name = argv[1];
  uint64_t start = xb_now_ns();
  double loop_seconds = -1;  /* a pattern that times its own loop sets it */
  if (strcmp(name, "two-lengths") == 0) two_lengths((size_t)512 << 10, 300000);
  else if (strcmp(name, "span-1mib") == 0) two_lengths(((size_t)1 << 20) + 1, 300000);
  else if (strcmp(name, "calloc-sparse") == 0) calloc_loop(60, 0);
  else if (strcmp(name, "calloc-full") == 0) calloc_loop(30, 1);
  else if (strcmp(name, "memalign-64") == 0) memalign_64();
  else if (strcmp(name, "realloc-byte") == 0) realloc_byte();
  else if (strcmp(name, "handoff") == 0) handoff();
  else if (strcmp(name, "idle-pool") == 0) loop_seconds = idle_pool();
  else if (strcmp(name, "idle-small") == 0) loop_seconds = idle_small();
  else if (strcmp(name, "size-shift") == 0) size_shift();
  else {
    fprintf(stderr, "patterns: unknown pattern \"%s\"\n", name);
    return XB_EXIT_USAGE;
  }
  printf("time_s=%.6f\n", loop_seconds >= 0 ? loop_seconds : xb_seconds_since(start));
  printf("peak_rss_kb=%ld\n", xb_peak_rss_kb());
  return 0;
}
