/* Probes for the secure build (libxalloc-secure.so, docs/security.md), run
 * under LD_PRELOAD by features_test.cpp. Built with -O0: the compiler must
 * not remove the allocations and stores it could prove pointless.
 *
 *   secure_probe overflow     writes 8 bytes past malloc(40)'s end, frees: must abort
 *   secure_probe at-usable    writes 8 bytes at malloc(40) + malloc_usable_size: must abort
 *   secure_probe overflow-small  the same past malloc(8) (the 16-byte class, whose
 *                             canary shares its word with the free marker): must abort
 *   secure_probe overflow-remote  the overflow of "overflow", but another thread frees the
 *                             block; then 100000 x malloc(40), so that the owner takes the
 *                             block back: must abort
 *   secure_probe tail-after-free  frees malloc(40), writes 8 bytes at its usable size,
 *                             mallocs and frees until the block comes back, frees it: must abort
 *   secure_probe usable       fills the whole usable size of many blocks, frees: must pass
 *   secure_probe double-free  frees a block twice: must abort
 *   secure_probe guard        writes one byte just past a large block's pages: must fault
 *   secure_probe realloc-guard FROM TO   reallocs a FROM-byte block to TO bytes, checks
 *                             that the contents moved, fills the block, writes one
 *                             byte just past its pages: must fault
 *   secure_probe large-reuse FIRST SECOND [remote]  frees a large block of FIRST bytes
 *                             (from another thread with `remote`), takes one of SECOND
 *                             bytes (its span, kept or handed back), fills its usable
 *                             size (prints "filled"), writes just past its pages: must fault
 *   secure_probe huge-reuse [FIRST SECOND]  frees a block of FIRST KiB (24 MiB), takes
 *                             one of SECOND KiB (22 MiB) from the cached mapping, fills
 *                             its usable size (where the first block's guard page was, if
 *                             it is larger; prints "filled"), writes just past it: must fault
 *   secure_probe huge-realign  a cached mapping reused at a smaller offset: frees an
 *                             18 MiB block, waits a second (XALLOC_PURGE_DELAY_MS and
 *                             XALLOC_BACKGROUND_PURGE=1 seal it), takes it with 1 MiB
 *                             alignment, frees it, takes it again unaligned and fills
 *                             the block: must pass
 *   secure_probe huge-after-free  frees a 24 MiB block (a burst beyond the dirty budget:
 *                             given back at once), writes into it: must fault
 *   secure_probe huge-after-delay  frees an 18 MiB block (within the burst threshold:
 *                             kept resident for reuse), sleeps a second, writes into
 *                             it: must fault once the purge delay (XALLOC_PURGE_DELAY_MS,
 *                             with XALLOC_BACKGROUND_PURGE=1) has given it back
 *   secure_probe order        200 x malloc(56): prints how many consecutive pairs ascend,
 *                             and how many steps between addresses repeat the one before
 *   secure_probe reuse        a freed block is not handed out again by the next 100 mallocs
 *   secure_probe delay        4000 times: a random number of 64-byte mallocs and frees (so
 *                             that the next free lands anywhere in the quarantine), then
 *                             frees a block and mallocs and frees until it comes back:
 *                             prints the fewest and the most frees that took
 *
 * Before the misuse each prints "block <address>" (and flushes), so that the
 * test can match the report's address. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Hides a pointer from the compiler's analyses (no warnings about the
 * deliberate misuse, no folding of the calls). */
static void* launder(void* p) {
  __asm__ volatile("" : "+r"(p));
  return p;
}

static void say_block(uintptr_t p) {
  printf("block 0x%lx\n", (unsigned long)p);
  fflush(stdout);
}

static int overflow(int at_usable) {
  char* p = launder(malloc(40));
  size_t usable = malloc_usable_size(p);
  size_t at = at_usable ? usable : 40;
  printf("usable %zu\n", usable);
  say_block((uintptr_t)p);
  memset(p, 'a', 40);
  memset(p + at, 'X', 8); /* the overflow */
  free(p);
  printf("survived\n");
  return 0;
}

static void* free_it(void* p) {
  free(p);
  return NULL;
}

static int overflow_remote(void) {
  char* p = launder(malloc(40));
  say_block((uintptr_t)p);
  memset(p, 'a', 40);
  memset(p + 40, 'X', 8);
  pthread_t thread;
  if (pthread_create(&thread, NULL, free_it, p) != 0 || pthread_join(thread, NULL) != 0) return 2;
  for (int i = 0; i < 100000; ++i) launder(malloc(40));
  printf("survived\n");
  return 0;
}

static int overflow_small(void) {
  /* Blocks handed out before and after frees of the class: the canary is
   * written at every malloc in this class. */
  for (int i = 0; i < 1000; ++i) free(launder(malloc(8)));
  char* p = launder(malloc(8));
  say_block((uintptr_t)p);
  memset(p, 'a', 8);
  memset(p + malloc_usable_size(p), 'X', 8);
  free(p);
  printf("survived\n");
  return 0;
}

/* A write into a freed block's canary (a use after free) is found when the
 * block, handed out again, is freed. */
static int tail_after_free(void) {
  char* p = launder(malloc(40));
  size_t usable = malloc_usable_size(p);
  uintptr_t freed = (uintptr_t)p;
  say_block(freed);
  free(p);
  memset((char*)launder((void*)freed) + usable, 'X', 8);
  for (int i = 0; i < 100000; ++i) {
    char* q = launder(malloc(40));
    if ((uintptr_t)q == freed) {
      free(q);
      printf("survived\n");
      return 0;
    }
    free(q);
  }
  printf("not reused\n");
  return 1;
}

static int usable_is_usable(void) {
  /* Every size up to 4 KiB and some above: filling the whole usable size
   * must not touch the canary (the free would report an overflow). */
  for (size_t size = 1; size <= 70000; size += (size < 4096 ? 1 : 997)) {
    unsigned char* p = launder(malloc(size));
    size_t usable = malloc_usable_size(p);
    if (p == NULL || usable < size) {
      printf("malloc(%zu): usable %zu\n", size, usable);
      return 1;
    }
    memset(p, 0xA5, usable);
    free(p);
  }
  printf("usable ok\n");
  return 0;
}

static int double_free(void) {
  char* p = launder(malloc(40));
  uintptr_t address = (uintptr_t)p;
  say_block(address);
  free(p);
  free(launder((void*)address));
  printf("survived\n");
  return 0;
}

static int guard(void) {
  char* p = launder(malloc(100000));
  size_t usable = malloc_usable_size(p);
  size_t end = (usable + 4095) & ~(size_t)4095;
  printf("usable %zu, writing at offset %zu\n", usable, end);
  fflush(stdout);
  memset(p, 'a', usable); /* all of the block is writable */
  p[end] = 'X';           /* the guard page */
  printf("survived\n");
  return 0;
}

static int realloc_guard(size_t from, size_t to) {
  unsigned char* p = launder(malloc(from));
  for (size_t i = 0; i < from; ++i) p[i] = (unsigned char)(i * 7);
  unsigned char* q = launder(realloc(p, to));
  size_t kept = from < to ? from : to;
  for (size_t i = 0; i < kept; ++i)
    if (q[i] != (unsigned char)(i * 7)) {
      printf("contents lost at %zu\n", i);
      return 1;
    }
  size_t usable = malloc_usable_size(q);
  size_t end = (usable + 4095) & ~(size_t)4095;
  printf("%s, usable %zu, writing at offset %zu\n", q == p ? "in place" : "moved", usable, end);
  fflush(stdout);
  memset(q, 'a', usable); /* all of the block is writable */
  q[end] = 'X';           /* the guard page */
  printf("survived\n");
  return 0;
}

/* Says where block `p` came from (`whence`), fills its usable size (prints
 * "filled"), then writes one byte past it, into the guard page. */
static int fill_and_write_past(char* p, const char* whence) {
  size_t usable = malloc_usable_size(p);
  printf("%s, usable %zu\n", whence, usable);
  fflush(stdout);
  memset(p, 'b', usable); /* all of the block is writable */
  printf("filled\n");
  fflush(stdout);
  p[usable] = 'X'; /* the guard page */
  printf("survived\n");
  return 0;
}

static int large_reuse(size_t first_bytes, size_t second_bytes, int remote) {
  char* first = launder(malloc(first_bytes));
  memset(first, 'a', malloc_usable_size(first));
  if (remote) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, free_it, first) != 0 || pthread_join(thread, NULL) != 0) return 2;
  } else {
    free(first);
  }
  char* p = launder(malloc(second_bytes));
  return fill_and_write_past(p, p == first ? "same span" : "another span");
}

enum { kHugeMiB = 1 << 20 };

static int huge_reuse(size_t first_kib, size_t second_kib) {
  char* first = launder(malloc(first_kib << 10));
  memset(first, 'a', malloc_usable_size(first));
  free(first);
  char* p = launder(malloc(second_kib << 10));
  return fill_and_write_past(p, p == first ? "cached mapping" : "new mapping");
}

static int huge_realign(void) {
  char* first = launder(malloc(18 * kHugeMiB));
  memset(first, 'a', malloc_usable_size(first));
  uintptr_t first_segment = (uintptr_t)first >> 25;
  free(first);
  usleep(1000 * 1000);
  char* aligned = launder(aligned_alloc(kHugeMiB, 17 * kHugeMiB));
  memset(aligned, 'b', malloc_usable_size(aligned));
  free(aligned);
  char* p = launder(malloc(17 * kHugeMiB + kHugeMiB / 2));
  printf("%s mapping\n", (uintptr_t)p >> 25 == first_segment ? "cached" : "new");
  fflush(stdout);
  memset(p, 'c', malloc_usable_size(p));
  free(p);
  printf("survived\n");
  return 0;
}

/* Frees a huge block of `mib` MiB, waits `wait_ms`, writes into it. */
static int write_after_free(size_t mib, unsigned wait_ms) {
  char* p = launder(malloc(mib * kHugeMiB));
  memset(p, 'a', malloc_usable_size(p));
  uintptr_t address = (uintptr_t)p;
  free(p);
  if (wait_ms != 0) usleep(wait_ms * 1000u);
  say_block(address);
  ((char*)launder((void*)address))[mib / 2 * kHugeMiB] = 'X'; /* the use after free */
  printf("survived\n");
  return 0;
}

static int order(void) {
  enum { kBlocks = 200 };
  void* blocks[kBlocks];
  /* 56 bytes and the canary's 8 fill a 64-byte block: a page holds 64. */
  for (int i = 0; i < kBlocks; ++i) blocks[i] = malloc(56);
  int ascending = 0;
  for (int i = 1; i < kBlocks; ++i) ascending += (uintptr_t)blocks[i] > (uintptr_t)blocks[i - 1];
  printf("ascending pairs %d of %d\n", ascending, kBlocks - 1);
  /* A stride through a page-sized batch would let two addresses tell the
     next: count the blocks whose step from the one before, modulo a page,
     repeats the step before it. */
  int repeats = 0;
  for (int i = 2; i < kBlocks; ++i) {
    uintptr_t step = ((uintptr_t)blocks[i] - (uintptr_t)blocks[i - 1]) & 4095;
    repeats += step == (((uintptr_t)blocks[i - 1] - (uintptr_t)blocks[i - 2]) & 4095);
  }
  printf("repeated steps %d of %d\n", repeats, kBlocks - 2);
  for (int i = 0; i < kBlocks; ++i) free(blocks[i]);
  return 0;
}

static int reuse(void) {
  void* p = launder(malloc(64));
  uintptr_t freed = (uintptr_t)p;
  free(p);
  for (int i = 0; i < 100; ++i) {
    void* q = malloc(64);
    if ((uintptr_t)q == freed) {
      printf("freed block 0x%lx handed out again by malloc number %d\n", (unsigned long)freed, i + 1);
      return 1;
    }
  }
  printf("reuse ok\n");
  return 0;
}

/* Frees a block, then mallocs and frees until malloc hands it out again:
 * the frees in between, or -1 if it never came back. */
static int frees_until_reused(void) {
  void* p = launder(malloc(64));
  uintptr_t freed = (uintptr_t)p;
  free(p);
  for (int frees = 0; frees < 100000; ++frees) {
    void* q = launder(malloc(64));
    if ((uintptr_t)q == freed) {
      free(q);
      return frees;
    }
    free(q);
  }
  return -1;
}

static int delay(void) {
  int fewest = 1 << 30, most = -1;
  uint64_t rng = 88172645463325252ull;
  for (int trial = 0; trial < 4000; ++trial) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    for (unsigned i = 0; i < rng % 600; ++i) free(launder(malloc(64)));
    int frees = frees_until_reused();
    if (frees < 0) {
      printf("not reused after 100000 frees\n");
      return 1;
    }
    if (frees < fewest) fewest = frees;
    if (frees > most) most = frees;
  }
  printf("reused after %d to %d frees\n", fewest, most);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "overflow") == 0) return overflow(0);
  if (strcmp(mode, "at-usable") == 0) return overflow(1);
  if (strcmp(mode, "overflow-remote") == 0) return overflow_remote();
  if (strcmp(mode, "overflow-small") == 0) return overflow_small();
  if (strcmp(mode, "tail-after-free") == 0) return tail_after_free();
  if (strcmp(mode, "usable") == 0) return usable_is_usable();
  if (strcmp(mode, "double-free") == 0) return double_free();
  if (strcmp(mode, "guard") == 0) return guard();
  if (strcmp(mode, "realloc-guard") == 0 && argc == 4)
    return realloc_guard(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10));
  if (strcmp(mode, "large-reuse") == 0 && argc >= 4)
    return large_reuse(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10),
                       argc == 5 && strcmp(argv[4], "remote") == 0);
  if (strcmp(mode, "huge-reuse") == 0 && argc == 4)
    return huge_reuse(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10));
  if (strcmp(mode, "huge-reuse") == 0) return huge_reuse(24 << 10, 22 << 10);
  if (strcmp(mode, "huge-realign") == 0) return huge_realign();
  if (strcmp(mode, "huge-after-free") == 0) return write_after_free(24, 0);
  if (strcmp(mode, "huge-after-delay") == 0) return write_after_free(18, 1000);
  if (strcmp(mode, "order") == 0) return order();
  if (strcmp(mode, "reuse") == 0) return reuse();
  if (strcmp(mode, "delay") == 0) return delay();
  fprintf(stderr, "usage: %s overflow|at-usable|overflow-small|overflow-remote|tail-after-free|usable|double-free|guard|realloc-guard FROM TO|large-reuse FIRST SECOND [remote]|huge-reuse [FIRST SECOND]|huge-realign|huge-after-free|huge-after-delay|order|reuse|delay\n", argv[0]);
  return 2;
}
