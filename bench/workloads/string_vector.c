/*
 * string_vector: a vector of tens of millions of small heap strings.
 *
 * Models seed 001 (a Rust program: `for i in 0..100_000_000 { let mut s =
 * String::new(); itoa::fmt(&mut s, i); v.push(s); }`, timed under the
 * system allocator, tcmalloc and mimalloc). Written in C so that every
 * string is a heap allocation exactly as Rust's String makes it (C++'s
 * std::string would keep these digits inline, allocating nothing):
 * a string is {ptr, capacity, length}; formatting i into an empty String
 * reserves max(8, digits) bytes (Rust's minimum non-zero capacity for
 * bytes is 8). The vector of strings grows like Rust's Vec: capacity
 * doubles (starting at 4), by realloc. Then the vector is dropped: every
 * string freed in order, then the vector.
 *
 * usage: string_vector [count=100000000]
 * prints: strings, build_s, drop_s, time_s (build + drop), bytes_requested.
 */
#include "xbench.h"

typedef struct rstring {
  char *ptr;
  size_t cap;
  size_t len;
} rstring;

/* Decimal digits of v into buf (no terminator); returns the length. */
static size_t format_u64(char *buf, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  return n;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[count=100000000]");
  xb_init();
  uint64_t count = xb_arg_u64(argc, argv, 1, 100000000);

  rstring *vec = NULL;
  size_t len = 0, cap = 0;
  uint64_t requested = 0;

  uint64_t t0 = xb_now_ns();
  for (uint64_t i = 0; i < count; i++) {
    char digits[20];
    size_t n = format_u64(digits, i);
    rstring s;
    s.cap = n < 8 ? 8 : n;
    s.ptr = (char *)xb_xmalloc(s.cap);
    memcpy(s.ptr, digits, n);
    s.len = n;
    requested += s.cap;
    if (len == cap) {
      size_t new_cap = cap == 0 ? 4 : cap * 2;
      rstring *grown = (rstring *)realloc(vec, new_cap * sizeof *vec);
      if (grown == NULL) xb_fail("realloc of the vector to %zu entries failed", new_cap);
      vec = grown;
      cap = new_cap;
    }
    vec[len++] = s;
  }
  double build = xb_seconds_since(t0);

  /* Spot-check a few strings before dropping everything. */
  for (uint64_t k = 0; k < 16 && count > 0; k++) {
    uint64_t i = k * (count - 1) / 15;
    char digits[20];
    size_t n = format_u64(digits, i);
    if (vec[i].len != n || memcmp(vec[i].ptr, digits, n) != 0) xb_fail("string %llu was corrupted", (unsigned long long)i);
  }

  uint64_t t1 = xb_now_ns();
  for (size_t i = 0; i < len; i++) free(vec[i].ptr);
  free(vec);
  double drop = xb_seconds_since(t1);

  printf("strings=%llu\n", (unsigned long long)count);
  printf("build_s=%.6f\n", build);
  printf("drop_s=%.6f\n", drop);
  printf("time_s=%.6f\n", build + drop);
  printf("bytes_requested=%llu\n", (unsigned long long)requested);
  return 0;
}
