/* Statistics probes (docs/observability.md), linked with libxalloc.so (so
 * malloc is xalloc's) and run by features_test.cpp, some with XALLOC_STATS=1.
 *
 *   stats_probe requests N S   N x malloc(S), one malloc(200000) (large), all
 *                              kept; prints "class <usable size of an S-byte block>"
 *   stats_probe aligned N S A  N x aligned_alloc(A, S), all kept; prints "class
 *                              <usable size of the first>"
 *   stats_probe large-first    the first allocation is malloc(200000), kept
 *   stats_probe print          xalloc_stats_print() and malloc_stats() with
 *                              100 live blocks of 100 bytes; prints their class,
 *                              then "printed" after the statistics
 *   stats_probe mallinfo       mallinfo2().uordblks and xalloc_get_stats().in_use
 *                              follow allocations and frees; prints "mallinfo ok"
 *                              or what went wrong (exit 1)
 *   stats_probe account        N blocks of 40 bytes written, every other one
 *                              freed, then 8 MiB of 4000-byte blocks written and
 *                              freed; prints the account now and at the peak
 *                              ("now_live=...", "peak_live=...")
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc/xalloc.h"

static void* volatile g_sink;

static int requests(size_t n, size_t size) {
  void** blocks = malloc(n * sizeof(void*));
  for (size_t i = 0; i < n; ++i) blocks[i] = malloc(size);
  void* large = malloc(200000);
  printf("class %zu\n", malloc_usable_size(blocks[0]));
  g_sink = blocks;
  g_sink = large;
  return 0;
}

static int aligned(size_t n, size_t size, size_t alignment) {
  void** blocks = malloc(n * sizeof(void*));
  for (size_t i = 0; i < n; ++i) blocks[i] = aligned_alloc(alignment, size);
  printf("class %zu\n", malloc_usable_size(blocks[0]));
  g_sink = blocks;
  return 0;
}

static int large_first(void) {
  g_sink = malloc(200000);
  printf("allocated\n");
  return 0;
}

static int print(void) {
  void* blocks[100];
  for (int i = 0; i < 100; ++i) blocks[i] = malloc(100);
  printf("class %zu\n", malloc_usable_size(blocks[0]));
  fflush(stdout);
  xalloc_stats_print();
  fprintf(stderr, "-- malloc_stats:\n");
  malloc_stats();
  printf("printed\n");
  for (int i = 0; i < 100; ++i) free(blocks[i]);
  return 0;
}

#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (!(cond)) {                                          \
      printf("failed: %s: ", #cond);                        \
      printf(__VA_ARGS__);                                  \
      printf("\n");                                         \
      return 1;                                             \
    }                                                       \
  } while (0)

static size_t in_use(void) {
  xalloc_stats_t stats;
  xalloc_get_stats(&stats);
  return stats.in_use;
}

static int mallinfo_follows(void) {
  enum { kBlocks = 1000, kSize = 100 };
  static void* blocks[kBlocks];
  /* Settle: the first allocations set up the heap. */
  free(malloc(16));
  size_t before = mallinfo2().uordblks;
  size_t stats_before = in_use();
  EXPECT(before == stats_before, "uordblks %zu, xalloc_get_stats in_use %zu", before, stats_before);
  size_t usable = 0;
  for (int i = 0; i < kBlocks; ++i) {
    blocks[i] = malloc(kSize);
    usable += malloc_usable_size(blocks[i]);
  }
  size_t with_small = mallinfo2().uordblks;
  /* Live bytes, rounded to their classes (a young heap serves the first of
   * them from a larger one, src/heap.h): exactly their usable sizes. */
  EXPECT(with_small - before == usable, "uordblks grew by %zu for %d blocks of %zu usable bytes in all",
         with_small - before, kBlocks, usable);
  void* large = malloc(1 << 20);
  size_t with_large = mallinfo2().uordblks;
  EXPECT(with_large - with_small >= (1 << 20) && with_large - with_small <= (1 << 20) + 8192,
         "uordblks grew by %zu for a 1 MiB block", with_large - with_small);
  struct mallinfo2 info = mallinfo2();
  EXPECT(info.uordblks == in_use(), "uordblks %zu, in_use %zu", info.uordblks, in_use());
  EXPECT(info.arena >= info.uordblks, "arena %zu < uordblks %zu", info.arena, info.uordblks);
  EXPECT(info.fordblks == info.arena - info.uordblks, "fordblks %zu != arena %zu - uordblks %zu", info.fordblks,
         info.arena, info.uordblks);
  free(large);
  for (int i = 0; i < kBlocks; ++i) free(blocks[i]);
  size_t after = mallinfo2().uordblks;
  EXPECT(after == before, "uordblks %zu after freeing everything, %zu before", after, before);
  printf("mallinfo ok: %zu bytes in use, +%zu with %d x malloc(%d), +%zu with malloc(1 MiB)\n", before,
         with_small - before, kBlocks, kSize, with_large - with_small);
  return 0;
}

static void print_account(const char* when, const xalloc_account_t* a) {
  printf("%s_live=%zu\n%s_rounding=%zu\n%s_slab_free=%zu\n%s_empty=%zu\n%s_resident=%zu\n%s_known=%zu\n", when,
         a->live, when, a->rounding, when, a->slab_free, when, a->empty_current + a->empty_spares + a->empty_pooled,
         when, a->resident, when, a->requested_known);
}

static int account(void) {
  enum { kBlocks = 20000, kBig = 2000 };
  static void* blocks[kBlocks];
  static void* big[kBig];
  for (int i = 0; i < kBlocks; ++i) blocks[i] = memset(malloc(40), 1, 40);
  for (int i = 0; i < kBlocks; i += 2) free(blocks[i]);
  for (int i = 0; i < kBig; ++i) big[i] = memset(malloc(4000), 1, 4000);
  for (int i = 0; i < kBig; ++i) free(big[i]);
  xalloc_account_t now;
  xalloc_get_account(&now);
  xalloc_stats_t stats;
  xalloc_get_stats(&stats);
  printf("usable=%zu\n", malloc_usable_size(blocks[1]));
  print_account("now", &now);
  print_account("peak", &stats.peak_account);
  for (int i = 1; i < kBlocks; i += 2) free(blocks[i]);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "requests") == 0 && argc == 4)
    return requests(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10));
  if (strcmp(mode, "aligned") == 0 && argc == 5)
    return aligned(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10));
  if (strcmp(mode, "large-first") == 0) return large_first();
  if (strcmp(mode, "print") == 0) return print();
  if (strcmp(mode, "mallinfo") == 0) return mallinfo_follows();
  if (strcmp(mode, "account") == 0) return account();
  fprintf(stderr, "usage: %s requests N SIZE | aligned N SIZE ALIGNMENT | large-first | print | mallinfo | account\n",
          argv[0]);
  return 2;
}
