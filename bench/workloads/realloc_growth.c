/*
 * realloc_growth: buffers grown piece by piece with realloc, many at once.
 *
 * Models the two common ways programs grow strings and arrays: C code that
 * reallocs to the exact new length on every append (string building), and
 * containers that grow their capacity by 1.5x when full (vectors). 64
 * builders are active at once and appends go to a random builder, so
 * buffers sit next to each other and cannot always grow in place. An
 * append adds 1-64 bytes. Exact-fit builders stop at 16 B - 4 KiB;
 * geometric builders at 64 B - 4 KiB (90%), 4-256 KiB (9%) or
 * 256 KiB - 4 MiB (1%), which takes realloc through every size range,
 * including the ones served by mmap. A finished buffer is verified
 * against a running checksum of what was appended, freed, and the builder
 * starts over.
 *
 * usage: realloc_growth [appends=10000000] [builders=64] [seed=1]
 * prints: appends, reallocs, buffers (completed), mib_appended, time_s,
 *         ns_per_append.
 */
#include "xbench.h"

typedef struct builder {
  unsigned char *buf;
  size_t len, cap, target;
  int exact; /* 1: realloc to the exact length on every append */
  uint64_t sum; /* sum of the bytes appended so far */
} builder;

static void restart(builder *b, xb_rng *rng) {
  b->buf = NULL;
  b->len = b->cap = 0;
  b->sum = 0;
  b->exact = (int)xb_below(rng, 2);
  if (b->exact) {
    b->target = (size_t)xb_range(rng, 16, 4096);
  } else {
    uint64_t r = xb_below(rng, 100);
    b->target = r < 90 ? (size_t)xb_range(rng, 64, 4096)
              : r < 99 ? (size_t)xb_range(rng, 4096, 256 << 10)
                       : (size_t)xb_range(rng, 256 << 10, 4 << 20);
  }
}

static void finish(builder *b) {
  uint64_t sum = 0;
  for (size_t i = 0; i < b->len; i++) sum += b->buf[i];
  if (sum != b->sum) xb_fail("a %zu-byte buffer lost its contents across realloc", b->len);
  free(b->buf);
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[appends=10000000] [builders=64] [seed=1]");
  xb_init();
  uint64_t appends = xb_arg_u64(argc, argv, 1, 10000000);
  size_t nbuilders = (size_t)xb_arg_u64(argc, argv, 2, 64);
  xb_rng rng = xb_rng_make(xb_arg_u64(argc, argv, 3, 1));
  if (nbuilders == 0) return XB_EXIT_USAGE;

  builder *bs = (builder *)calloc(nbuilders, sizeof *bs);
  if (bs == NULL) xb_fail("out of memory");
  for (size_t i = 0; i < nbuilders; i++) restart(&bs[i], &rng);

  uint64_t reallocs = 0, buffers = 0, bytes = 0;
  uint64_t t0 = xb_now_ns();
  for (uint64_t n = 0; n < appends; n++) {
    builder *b = &bs[xb_below(&rng, nbuilders)];
    size_t k = (size_t)xb_range(&rng, 1, 64);
    size_t need = b->len + k;
    if (need > b->cap) {
      size_t cap = b->exact ? need : (b->cap < 16 ? 16 : b->cap + b->cap / 2);
      if (cap < need) cap = need;
      unsigned char *grown = (unsigned char *)realloc(b->buf, cap);
      if (grown == NULL) xb_fail("realloc(%zu) returned NULL", cap);
      b->buf = grown;
      b->cap = cap;
      reallocs++;
    }
    unsigned char v = (unsigned char)(n * 131u + 7u);
    memset(b->buf + b->len, v, k);
    b->len = need;
    b->sum += (uint64_t)v * k;
    bytes += k;
    if (b->len >= b->target) {
      finish(b);
      buffers++;
      restart(b, &rng);
    }
  }
  for (size_t i = 0; i < nbuilders; i++) finish(&bs[i]);
  double secs = xb_seconds_since(t0);
  free(bs);

  printf("appends=%llu\n", (unsigned long long)appends);
  printf("reallocs=%llu\n", (unsigned long long)reallocs);
  printf("buffers=%llu\n", (unsigned long long)buffers);
  printf("mib_appended=%.1f\n", (double)bytes / 1048576.0);
  printf("time_s=%.6f\n", secs);
  printf("ns_per_append=%.2f\n", secs * 1e9 / (double)appends);
  return 0;
}
