// Shared pieces of the xalloc fuzz targets: reading operations from the
// fuzzer's input, drawing sizes and alignments, and position-dependent byte
// patterns that make a block overwritten by another one (or copied to the
// wrong place) visible.
//
// A failed check prints what was expected and calls __builtin_trap(), which
// libFuzzer reports as a crash and saves the input that caused it.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace xfuzz {

#define XFUZZ_CHECK(cond, ...)                                                    \
  do {                                                                            \
    if (__builtin_expect(!(cond), 0)) {                                           \
      std::fprintf(stderr, "xfuzz: check failed at %s:%d: %s\n  ", __FILE__,      \
                   __LINE__, #cond);                                              \
      std::fprintf(stderr, __VA_ARGS__);                                          \
      std::fprintf(stderr, "\n");                                                 \
      __builtin_trap();                                                           \
    }                                                                             \
  } while (0)

// Consumes the input from the front; past its end every read returns 0, so
// every input is a valid (possibly short) program.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  size_t left() const { return pos_ < size_ ? size_ - pos_ : 0; }
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u24() { return static_cast<uint32_t>(u16() | (u8() << 16)); }
  uint32_t u32() { return static_cast<uint32_t>(u16() | (static_cast<uint32_t>(u16()) << 16)); }
  uint64_t u64() { return u32() | (static_cast<uint64_t>(u32()) << 32); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kPtrdiffMax = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max());
constexpr size_t kPage = 4096;

// Sizes no allocator can satisfy: NULL with errno ENOMEM.
constexpr size_t kImpossibleSizes[] = {SIZE_MAX,         SIZE_MAX - 1,      SIZE_MAX - 4095,   kPtrdiffMax + 1,
                                       kPtrdiffMax,      size_t{1} << 62,   size_t{1} << 48,   size_t{1} << 47};

// Sizes at the edges of xalloc's size classes and block kinds.
constexpr size_t kEdgeSizes[] = {0,      1,      8,      15,          16,          17,         112,
                                 128,    129,    1023,   1024,        1025,        4095,       4096,
                                 4097,   8192,   32768,  65535,       65536,       65537,      (2 * kMiB) - 1,
                                 2 * kMiB, (2 * kMiB) + 1, (16 * kMiB) - 1, 16 * kMiB, (16 * kMiB) + 1};

inline bool is_impossible(size_t size) { return size >= (size_t{1} << 46); }

// A size: mostly small, then medium and large (up to a few MiB), sometimes
// at a class edge, rarely huge (~16-24 MiB) or impossible.
inline size_t draw_size(Reader& r) {
  uint8_t sel = r.u8();
  if (sel < 128) return r.u16() % 1025;                                   // small, served by the direct table
  if (sel < 184) return r.u24() % (256 * kKiB);                           // slab classes and small large blocks
  if (sel < 236) return 64 * kKiB + r.u32() % (4 * kMiB);                 // large
  if (sel < 248) {
    size_t edge = kEdgeSizes[r.u8() % (sizeof kEdgeSizes / sizeof kEdgeSizes[0])];
    return edge;
  }
  if (sel < 252) return 16 * kMiB + r.u24() % (8 * kMiB);                 // huge
  return kImpossibleSizes[r.u8() % (sizeof kImpossibleSizes / sizeof kImpossibleSizes[0])];
}

// An alignment: mostly valid powers of two up to 2 MiB, sometimes 4-16 MiB,
// sometimes invalid (not a power of two) or above what xalloc supports.
inline size_t draw_alignment(Reader& r) {
  uint8_t sel = r.u8();
  if (sel < 200) return size_t{1} << (r.u8() % 22);  // 1 .. 2 MiB
  if (sel < 212) return size_t{1} << (22 + r.u8() % 3);  // 4, 8, 16 MiB
  if (sel < 248) {
    static constexpr size_t kBad[] = {0,    3,    12,   24,   48,   100,  4095, 4097, (size_t{1} << 20) + 8,
                                      SIZE_MAX, (size_t{1} << 63) + 1, 65535};
    return kBad[r.u8() % (sizeof kBad / sizeof kBad[0])];
  }
  static constexpr size_t kTooBig[] = {size_t{32} << 20, size_t{1} << 30, size_t{1} << 40, size_t{1} << 63};
  return kTooBig[r.u8() % (sizeof kTooBig / sizeof kTooBig[0])];
}

inline bool is_power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

inline bool aligned_to(const void* p, size_t alignment) {
  return (reinterpret_cast<uintptr_t>(p) & (alignment - 1)) == 0;
}

// The pattern: a 64-bit word per 8-byte position, from the seed and the
// offset. Blocks up to kFullLimit bytes are filled and checked entirely;
// larger ones at their first and last 4 KiB and one word every `stride`
// bytes in between (so a multi-MiB block costs microseconds, not
// milliseconds, and huge blocks are not faulted in entirely).
constexpr size_t kFullLimit = 64 * kKiB;

inline uint64_t pattern_word(uint64_t seed, size_t offset) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + offset;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

inline size_t pattern_stride(size_t n) { return n <= kMiB ? 512 : 32 * kKiB; }

// Calls fn(offset, length<=8) for every pattern position of an n-byte block.
template <typename Fn>
inline bool for_each_position(size_t n, Fn&& fn) {
  auto range = [&fn](size_t from, size_t to) {
    for (size_t off = from; off < to; off += 8) {
      if (!fn(off, to - off < 8 ? to - off : 8)) return false;
    }
    return true;
  };
  if (n <= kFullLimit) return range(0, n);
  if (!range(0, 4096)) return false;
  size_t stride = pattern_stride(n);
  for (size_t off = 4096; off + 8 <= n - 4096; off += stride) {
    if (!fn(off, 8)) return false;
  }
  return range((n - 4096) & ~size_t{7}, n);
}

inline void fill_pattern(void* p, size_t n, uint64_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  for_each_position(n, [b, seed](size_t off, size_t len) {
    uint64_t w = pattern_word(seed, off);
    std::memcpy(b + off, &w, len);
    return true;
  });
}

// First pattern position below `limit` of an n-byte block that does not
// hold the pattern, or SIZE_MAX.
inline size_t check_pattern(const void* p, size_t n, uint64_t seed, size_t limit = SIZE_MAX) {
  const auto* b = static_cast<const uint8_t*>(p);
  size_t bad = SIZE_MAX;
  for_each_position(n, [b, seed, limit, &bad](size_t off, size_t len) {
    if (off >= limit) return true;
    if (off + len > limit) len = limit - off;
    uint64_t w = pattern_word(seed, off);
    if (std::memcmp(b + off, &w, len) != 0) {
      bad = off;
      return false;
    }
    return true;
  });
  return bad;
}

// First pattern position of an n-byte block that is not zero, or SIZE_MAX.
inline size_t check_zero(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (n <= 256 * kKiB) {
    for (size_t i = 0; i < n; ++i) {
      if (b[i] != 0) return i;
    }
    return SIZE_MAX;
  }
  size_t bad = SIZE_MAX;
  for_each_position(n, [b, &bad](size_t off, size_t len) {
    static const uint8_t kZero[8] = {};
    if (std::memcmp(b + off, kZero, len) != 0) {
      bad = off;
      return false;
    }
    return true;
  });
  return bad;
}

}  // namespace xfuzz
