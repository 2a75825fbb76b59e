/*
 * xbench.h: the small helpers every xalloc benchmark program shares.
 *
 *  - xb_init():   checks that the allocator the run was meant to measure is
 *                 the one serving malloc (XBENCH_EXPECT, see below) and
 *                 prints which shared object defines malloc.
 *  - clocks, resident-set size, a seeded PRNG, argument parsing, an
 *    optimisation barrier and latency percentiles.
 *
 * Output convention: results are printed on stdout as `key=value` lines
 * (lower-case keys, plain numbers); bench/run.py parses them. Anything else
 * (diagnostics) goes to stderr.
 *
 * Exit codes: 0 success, 2 bad arguments, 3 a self-check failed (the
 * allocator returned NULL or corrupted a block), 86 the allocator serving
 * malloc is not the expected one.
 *
 * The header is C11 and C++20 compatible and header-only (static inline),
 * so every workload stays a single self-contained program. Include it
 * before any system header (it defines _GNU_SOURCE).
 */
#ifndef XBENCH_H
#define XBENCH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <dlfcn.h>
#include <sched.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  XB_EXIT_USAGE = 2,
  XB_EXIT_FAILED = 3,
  XB_EXIT_MISMATCH = 86
};

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/* Report a failed self-check and exit with XB_EXIT_FAILED. */
__attribute__((noreturn, format(printf, 1, 2)))
static inline void xb_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("xbench: FAILED: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stdout);
  exit(XB_EXIT_FAILED);
}

/* malloc that treats NULL as a benchmark failure (never silently skipped). */
static inline void *xb_xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL && n != 0) xb_fail("malloc(%zu) returned NULL", n);
  return p;
}

/* Zeroed room for `count` per-thread records of `size` bytes (a multiple of
 * the cache line: their types start with XB_OWN_LINE), on a line boundary.
 * Threads write their own record as they run; packed in a block that
 * malloc happens to place mid-line, neighbours would share a line, and the
 * time measured would depend on where one harness block landed, not on the
 * allocator's work. */
#define XB_CACHE_LINE 64
#ifdef __cplusplus
#define XB_OWN_LINE alignas(XB_CACHE_LINE)
#else
#define XB_OWN_LINE _Alignas(XB_CACHE_LINE)
#endif
static inline void *xb_xcalloc_lines(size_t count, size_t size) {
  size_t bytes = (count * size + XB_CACHE_LINE - 1) / XB_CACHE_LINE * XB_CACHE_LINE;
  void *p = aligned_alloc(XB_CACHE_LINE, bytes);
  if (p == NULL) xb_fail("aligned_alloc(%zu) returned NULL", bytes);
  memset(p, 0, bytes);
  return p;
}

/* ------------------------------------------------------------------ */
/* Which allocator serves malloc                                       */
/* ------------------------------------------------------------------ */

/* The file name of the shared object that defines the function at `fn`.
 * In a PIE program (Debian's default) the address of `malloc` taken here is
 * the one the program's own calls bind to; should it resolve inside the
 * executable (a canonical PLT entry), fall back to the dynamic linker's
 * global lookup, which gives the same binding. */
static inline const char *xb_defining_object(void *fn, const char *name) {
  Dl_info info;
  memset(&info, 0, sizeof info);
  if (fn != NULL && dladdr(fn, &info) != 0 && info.dli_fname != NULL && info.dli_fname[0] != '\0') {
    Dl_info self;
    memset(&self, 0, sizeof self);
    /* dli_fname of the main program is argv[0]-like (or ""); compare with
     * the object that holds this very function. */
    if (dladdr((void *)&xb_defining_object, &self) == 0 || self.dli_fbase != info.dli_fbase)
      return info.dli_fname;
  }
  void *global = dlsym(RTLD_DEFAULT, name);
  if (global != NULL && dladdr(global, &info) != 0 && info.dli_fname != NULL)
    return info.dli_fname;
  return "?";
}

/* Call first thing in main(). Prints `malloc_lib=<object>`. When the
 * environment variable XBENCH_EXPECT is set, the objects defining malloc,
 * free, calloc and realloc must all contain it as a substring (for glibc:
 * "libc.so"); otherwise the program exits with XB_EXIT_MISMATCH, so a
 * preload that silently failed can never be reported as a result. */
static inline void xb_init(void) {
  const char *expect = getenv("XBENCH_EXPECT");
  struct { const char *name; void *fn; } fns[] = {
    {"malloc", (void *)&malloc},
    {"free", (void *)&free},
    {"calloc", (void *)&calloc},
    {"realloc", (void *)&realloc},
  };
  const char *malloc_obj = xb_defining_object(fns[0].fn, fns[0].name);
  printf("malloc_lib=%s\n", malloc_obj);
  if (expect != NULL && expect[0] != '\0') {
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
      const char *obj = xb_defining_object(fns[i].fn, fns[i].name);
      if (strstr(obj, expect) == NULL) {
        fprintf(stderr,
                "xbench: ALLOCATOR MISMATCH: expected %s() from an object matching \"%s\", "
                "but it comes from \"%s\" (is LD_PRELOAD set correctly?)\n",
                fns[i].name, expect, obj);
        fflush(stdout);
        exit(XB_EXIT_MISMATCH);
      }
    }
  }
  fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* Clocks and memory                                                   */
/* ------------------------------------------------------------------ */

static inline uint64_t xb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double xb_seconds_since(uint64_t start_ns) {
  return (double)(xb_now_ns() - start_ns) * 1e-9;
}

/* Current resident set size in KiB (from /proc/self/statm). */
static inline long xb_rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f == NULL) return -1;
  if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Peak resident set size of this process so far, in KiB. */
static inline long xb_peak_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

static inline void xb_sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------------------------ */
/* Deterministic pseudo-random numbers (splitmix64)                    */
/* ------------------------------------------------------------------ */

typedef struct xb_rng {
  uint64_t state;
} xb_rng;

static inline xb_rng xb_rng_make(uint64_t seed) {
  xb_rng r;
  r.state = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  return r;
}

static inline uint64_t xb_next(xb_rng *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, n) (n > 0), multiply-shift reduction. */
static inline uint64_t xb_below(xb_rng *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)xb_next(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline uint64_t xb_range(xb_rng *r, uint64_t lo, uint64_t hi) {
  return lo + xb_below(r, hi - lo + 1);
}

/* Uniform in [0, 1). */
static inline double xb_unit(xb_rng *r) {
  return (double)(xb_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------ */
/* Arguments                                                           */
/* ------------------------------------------------------------------ */

/* Positional argument `index` (1-based) as an unsigned count, or `dflt`
 * when absent. Accepts decimal suffixes k, m, g (x1000, x1e6, x1e9) so
 * run.py can write "10m". Exits with XB_EXIT_USAGE on garbage. */
static inline uint64_t xb_arg_u64(int argc, char **argv, int index, uint64_t dflt) {
  if (index >= argc) return dflt;
  const char *s = argv[index];
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || v < 0) {
    fprintf(stderr, "%s: argument %d (\"%s\") is not a count\n", argv[0], index, s);
    exit(XB_EXIT_USAGE);
  }
  switch (*end) {
    case 'k': case 'K': v *= 1e3; end++; break;
    case 'm': case 'M': v *= 1e6; end++; break;
    case 'g': case 'G': v *= 1e9; end++; break;
    default: break;
  }
  if (*end != '\0') {
    fprintf(stderr, "%s: argument %d (\"%s\") is not a count\n", argv[0], index, s);
    exit(XB_EXIT_USAGE);
  }
  return (uint64_t)(v + 0.5);
}

/* "-h"/"--help" as the first argument prints `usage` and exits 0. */
static inline void xb_usage_check(int argc, char **argv, const char *usage) {
  if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    printf("usage: %s %s\n", argv[0], usage);
    exit(0);
  }
}

/* ------------------------------------------------------------------ */
/* Optimisation barrier                                                */
/* ------------------------------------------------------------------ */

/* Makes the compiler assume `p` (and the memory it points to) is used, so
 * a malloc/free pair or a write can never be optimised away. */
static inline void xb_escape(const void *p) {
  __asm__ volatile("" : : "r"(p) : "memory");
}

/* Write a recognisable tag into the first and last byte of a block, and
 * check it before the block is freed: cheap detection of an allocator that
 * hands out overlapping or corrupted memory. */
static inline void xb_tag(void *p, size_t n, uint8_t tag) {
  if (n == 0) return;
  ((volatile uint8_t *)p)[0] = tag;
  ((volatile uint8_t *)p)[n - 1] = (uint8_t)(255u - tag);
}

static inline void xb_check_tag(const void *p, size_t n, uint8_t tag) {
  if (n == 0) return;
  const volatile uint8_t *b = (const volatile uint8_t *)p;
  const uint8_t first = b[0], last = b[n - 1];
  if (first != tag || (unsigned)last + (unsigned)tag != 255u)
    xb_fail("block %p of %zu bytes was corrupted (tag %u: found %u/%u)", p, n, tag, first, last);
}

/* ------------------------------------------------------------------ */
/* Cycle counter for per-operation latency                             */
/* ------------------------------------------------------------------ */

/* Time-stamp counter read with RDTSCP (waits for earlier instructions to
 * finish), a few ns of overhead instead of clock_gettime's ~20. Converted
 * to ns with xb_ticks_per_ns(), calibrated against CLOCK_MONOTONIC over the
 * whole measurement. On non-x86 targets it falls back to the clock. */
static inline uint64_t xb_ticks(void) {
#if defined(__x86_64__)
  unsigned aux;
  return __builtin_ia32_rdtscp(&aux);
#else
  return xb_now_ns();
#endif
}

/* Pairs a tick reading with a clock reading; two of them give the rate. */
typedef struct xb_tick_cal {
  uint64_t ticks, ns;
} xb_tick_cal;

static inline xb_tick_cal xb_tick_mark(void) {
  xb_tick_cal c;
  c.ns = xb_now_ns();
  c.ticks = xb_ticks();
  return c;
}

static inline double xb_ns_per_tick(xb_tick_cal a, xb_tick_cal b) {
  if (b.ticks <= a.ticks) return 1.0;
  return (double)(b.ns - a.ns) / (double)(b.ticks - a.ticks);
}

/* Median cost of reading the tick counter twice, in ticks: the floor under
 * every latency a workload reports (printed, never subtracted). */
static inline uint64_t xb_tick_overhead(void) {
  uint64_t best[63];
  for (int i = 0; i < 63; i++) {
    uint64_t a = xb_ticks();
    uint64_t b = xb_ticks();
    best[i] = b - a;
  }
  for (int i = 1; i < 63; i++) { /* insertion sort, tiny */
    uint64_t v = best[i];
    int j = i - 1;
    while (j >= 0 && best[j] > v) { best[j + 1] = best[j]; j--; }
    best[j + 1] = v;
  }
  return best[31];
}

/* ------------------------------------------------------------------ */
/* Latency histogram (log-linear, < 0.8% bucket error, fixed memory)   */
/* ------------------------------------------------------------------ */

/* Values below 256 have a bucket each; above, every power of two is split
 * into 128 buckets. A histogram is 58 KiB whatever the sample count, so
 * recording latencies does not inflate the peak RSS being measured. */
#define XB_HIST_LINEAR 256u
#define XB_HIST_SUB 128u
#define XB_HIST_BUCKETS (XB_HIST_LINEAR + (64u - 8u) * XB_HIST_SUB)

typedef struct xb_hist {
  uint64_t count;
  uint64_t max;
  double sum;
  uint64_t bucket[XB_HIST_BUCKETS];
} xb_hist;

static inline unsigned xb_hist_index(uint64_t v) {
  if (v < XB_HIST_LINEAR) return (unsigned)v;
  unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 8 */
  unsigned m = (unsigned)(v >> (e - 7u));          /* 128..255 */
  return XB_HIST_LINEAR + (e - 8u) * XB_HIST_SUB + (m - XB_HIST_SUB);
}

/* Midpoint of a bucket. */
static inline double xb_hist_value(unsigned idx) {
  if (idx < XB_HIST_LINEAR) return (double)idx;
  unsigned e = 8u + (idx - XB_HIST_LINEAR) / XB_HIST_SUB;
  unsigned m = XB_HIST_SUB + (idx - XB_HIST_LINEAR) % XB_HIST_SUB;
  double width = (double)(1ull << (e - 7u));
  return (double)m * width + width / 2.0;
}

static inline void xb_hist_add(xb_hist *h, uint64_t v) {
  h->bucket[xb_hist_index(v)]++;
  h->count++;
  h->sum += (double)v;
  if (v > h->max) h->max = v;
}

static inline void xb_hist_merge(xb_hist *into, const xb_hist *from) {
  for (unsigned i = 0; i < XB_HIST_BUCKETS; i++) into->bucket[i] += from->bucket[i];
  into->count += from->count;
  into->sum += from->sum;
  if (from->max > into->max) into->max = from->max;
}

static inline double xb_hist_quantile(const xb_hist *h, double q) {
  if (h->count == 0) return 0;
  uint64_t rank = (uint64_t)(q * (double)(h->count - 1)) + 1, seen = 0;
  for (unsigned i = 0; i < XB_HIST_BUCKETS; i++) {
    seen += h->bucket[i];
    if (seen >= rank) {
      double v = xb_hist_value(i);
      return v > (double)h->max ? (double)h->max : v;
    }
  }
  return (double)h->max;
}

/* Prints <prefix>p50_ns, p90, p99, p99_9, p99_99, max and mean, each
 * sample multiplied by `scale` (ns per recorded unit). */
static inline void xb_hist_print(const char *prefix, const xb_hist *h, double scale) {
  static const struct { const char *name; double q; } qs[] = {
    {"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}, {"p99_9", 0.999}, {"p99_99", 0.9999},
  };
  for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
    printf("%s%s_ns=%.1f\n", prefix, qs[i].name, xb_hist_quantile(h, qs[i].q) * scale);
  printf("%smax_ns=%.1f\n", prefix, (double)h->max * scale);
  printf("%smean_ns=%.1f\n", prefix, h->count ? h->sum / (double)h->count * scale : 0.0);
}

/* ------------------------------------------------------------------ */
/* Threads                                                             */
/* ------------------------------------------------------------------ */

/* Spin-then-yield wait used where a thread waits for a peer: on machines
 * with fewer cores than threads a pure spin would starve the peer. */
static inline void xb_pause(unsigned *spins) {
  if (++*spins < 64) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  } else {
    *spins = 0;
    sched_yield();
  }
}

#ifdef __cplusplus
}
#endif

#endif /* XBENCH_H */
