// The heap profiler's table of stacks as its output reads it
// (heap_profiler.cpp fills the table, profile_writer.cpp writes copies of
// its counts), and the numbers both use: pprof's scaling of samples up to
// estimated bytes, and the logarithm that spaces samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace xalloc::prof {

constexpr int kMaxFrames = 32;

struct Stack {
  uint64_t hash;
  uint32_t depth;
  void* frames[kMaxFrames];
  uint64_t alloc_count, alloc_bytes;  // sampled, ever (under the profiler's lock)
  // Sampled, still live: a free subtracts without the lock, with relaxed
  // atomics; a copy may see a count and its bytes one free apart.
  uint64_t live_count, live_bytes;
};

// One stack's counts in a profile: copied from the table (or from the
// peak's snapshot of it) under the profiler's lock, so that a profile is
// one moment's, and its files are written with no lock that samples need.
struct StackCounts {
  uint64_t live_count, live_bytes, alloc_count, alloc_bytes;
};

// A profile to write: stacks [0, count) of the table, with their counts.
// The stacks themselves never change once in the table.
struct ProfileView {
  const Stack* stacks;
  const StackCounts* counts;
  size_t count;
};

// ln(x) for x > 0: exponent from the bits, mantissa by a series good to
// about 1e-7 on [1, 2) (enough to space samples).
inline double log_approx(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof(bits));
  int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52);
  double m;
  memcpy(&m, &bits, sizeof(m));  // m in [1, 2)
  double t = (m - 1) / (m + 1);  // ln(m) = 2 atanh(t), |t| < 1/3
  double t2 = t * t;
  double series = t * (2 + t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9 + t2 * 2.0 / 11)))));
  return exponent * 0.6931471805599453 + series;
}

inline double exp_approx(double x) {
  // e^x = 2^k * e^r with |r| <= ln2/2 (a multiplication by 1/ln2: no division).
  double k = static_cast<double>(static_cast<int64_t>(x * 1.4426950408889634 + (x < 0 ? -0.5 : 0.5)));
  double r = x - k * 0.6931471805599453;
  double er = 1 + r * (1 + r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720))))));
  if (k < -1000) return 0;
  uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(k) + 1023) << 52;
  double scale;
  memcpy(&scale, &bits, sizeof(scale));
  return er * scale;
}

// pprof's estimate of how many bytes a sampled (count, bytes) stands for,
// with samples every `rate` bytes on average: each sampled byte stands for
// 1 / P(a block of the average size is sampled).
inline double scale_factor(uint64_t count, uint64_t bytes, uint64_t rate) {
  if (count == 0) return 0;
  double average = static_cast<double>(bytes) / static_cast<double>(count);
  double p = 1 - exp_approx(-average / static_cast<double>(rate));
  return p > 0 ? 1 / p : 1;
}

inline double estimate_bytes(uint64_t count, uint64_t bytes, uint64_t rate) {
  return static_cast<double>(bytes) * scale_factor(count, bytes, rate);
}

}  // namespace xalloc::prof
