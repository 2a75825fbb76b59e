// Size classes: the block sizes slabs are carved into.
//
// Classes 0..7 are 16..128 bytes in 16-byte steps; above that, four classes
// per power of two (160, 192, 224, 256, 320, ...) up to 64 KiB, and from
// 1 KiB to 16 KiB one more just above each power of two, at 2^k + 2^(k-3)
// (1152, 2304, 4608, 9216): programs often ask for a power of two plus a
// small header (4096 + 8 bytes, a page and its bookkeeping), which would
// otherwise get a block a quarter larger (5120). Internal waste is below 16
// bytes up to 128 bytes and below 20% above. More classes in general would
// cut the waste further, but each costs every thread a partly used slab of
// its own. Every class size is a multiple of 16, and a block is aligned to
// the largest power of two that divides its class size, which is how
// aligned requests are served from slabs.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "base/config.h"

namespace xalloc {

constexpr unsigned kFineClasses = 8;        // 16..128
constexpr unsigned kFirstCoarseShift = 7;   // coarse classes start above 128
constexpr unsigned kCoarseDoublings = std::bit_width(kMaxSlabSize) - 1 - kFirstCoarseShift;  // 9
// The doublings (2^k, 2^(k+1)] with a class at 2^k + 2^(k-3).
constexpr bool has_header_class(unsigned k) { return k >= 10 && k < 14; }

constexpr unsigned classes_in_doubling(unsigned k) { return has_header_class(k) ? 5 : 4; }

constexpr unsigned first_class_of_doubling(unsigned k) {
  unsigned cls = kFineClasses;
  for (unsigned j = kFirstCoarseShift; j < k; ++j) cls += classes_in_doubling(j);
  return cls;
}

constexpr unsigned kNumClasses = first_class_of_doubling(kFirstCoarseShift + kCoarseDoublings);  // 48

constexpr size_t class_size_of(unsigned cls) {
  if (cls < kFineClasses) return (cls + 1) * 16;
  unsigned index = cls - kFineClasses;
  for (unsigned k = kFirstCoarseShift; k < kFirstCoarseShift + kCoarseDoublings; ++k) {
    size_t base = size_t{1} << k;
    if (has_header_class(k)) {
      if (index == 0) return base + base / 8;
      --index;
    }
    if (index < 4) return base + (index + 1) * (base / 4);
    index -= 4;
  }
  return 0;  // no such class
}

// The smallest class that holds `size` bytes (1 <= size <= kMaxSlabSize; 0
// is served as 1), computed: the lookup tables below are built with it.
constexpr unsigned class_of_computed(size_t size) {
  if (size <= 128) return size == 0 ? 0 : static_cast<unsigned>((size - 1) >> 4);
  unsigned e = static_cast<unsigned>(std::bit_width(size - 1)) - 1;  // 2^e < size <= 2^(e+1)
  size_t base = size_t{1} << e;
  unsigned cls = first_class_of_doubling(e);
  if (has_header_class(e)) {
    if (size <= base + base / 8) return cls;
    ++cls;
  }
  return cls + static_cast<unsigned>((size - base - 1) / (base / 4));
}

// Sizes up to kMaxSmallSize are looked up by 16-byte granule.
constexpr size_t kDirectSlots = kMaxSmallSize / 16 + 1;
constexpr size_t granule_of(size_t size) { return (size + 15) >> 4; }

struct ClassInfo {
  uint32_t size;
  uint16_t slices;    // slab length in slices
  uint16_t capacity;  // blocks per slab
  uint64_t div_magic; // div_magic_of(size): slab.h's block-start tests
};

// floor(2^64 / size) + 1. With e = size * magic - 2^64, which lies in
// [1, size], an offset k * size + r (0 <= r < size) times magic is, modulo
// 2^64, k * e when r == 0 and at least magic otherwise (for any offset
// within a slab: no product wraps), so one comparison tells a block start
// (below magic) and, against c * e, a start among the first c blocks
// (is_carved_block_start in slab.h).
constexpr uint64_t div_magic_of(size_t size) {
  uint64_t all = ~uint64_t{0};
  bool divides_2_64 = all % size == size - 1;
  return all / size + (divides_2_64 ? 1 : 0) + 1;
}

constexpr ClassInfo make_class_info(unsigned cls) {
  size_t size = class_size_of(cls);
  // Classes up to 8 KiB: one slice (at least eight blocks). Larger ones:
  // the fewest slices that hold four blocks with at most an eighth of the
  // slab left over. Few blocks per slab let a slab empty out (and leave)
  // sooner under random frees.
  size_t slices = 1;
  while (slices * kSliceSize / size < 4 ||
         (slices * kSliceSize - slices * kSliceSize / size * size) * 8 > slices * kSliceSize)
    ++slices;
  size_t capacity = slices * kSliceSize / size;
  return ClassInfo{static_cast<uint32_t>(size), static_cast<uint16_t>(slices), static_cast<uint16_t>(capacity),
                   div_magic_of(size)};
}

inline constexpr auto kClassInfo = [] {
  std::array<ClassInfo, kNumClasses> table{};
  for (unsigned c = 0; c < kNumClasses; ++c) table[c] = make_class_info(c);
  return table;
}();

// The block sizes alone, for a lookup scaled by 4 (remote_free.h).
inline constexpr auto kClassSize = [] {
  std::array<uint32_t, kNumClasses> table{};
  for (unsigned c = 0; c < kNumClasses; ++c) table[c] = kClassInfo[c].size;
  return table;
}();

inline constexpr auto kGranuleClass = [] {
  std::array<uint8_t, kDirectSlots> table{};
  for (size_t g = 0; g < kDirectSlots; ++g) table[g] = static_cast<uint8_t>(class_of_computed(g * 16));
  return table;
}();

// Classes of sizes above kMaxSmallSize by 128-byte step: every class
// boundary above 1 KiB is a multiple of 128, so a step never straddles one.
constexpr size_t kMediumStep = 128;
inline constexpr auto kMediumClass = [] {
  std::array<uint8_t, kMaxSlabSize / kMediumStep> table{};
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<uint8_t>(class_of_computed((i + 1) * kMediumStep));
  return table;
}();

// class_of for kMaxSmallSize < size <= kMaxSlabSize.
constexpr unsigned medium_class_of(size_t size) { return kMediumClass[(size - 1) / kMediumStep]; }

// The smallest class that holds `size` bytes (size <= kMaxSlabSize; 0 is
// served as 1), by table.
constexpr unsigned class_of(size_t size) {
  return size <= kMaxSmallSize ? kGranuleClass[granule_of(size)] : medium_class_of(size);
}

// By alignment shift (alignment 2^shift) and class: the smallest class at
// least as large whose size is a multiple of the alignment; kNumClasses if
// none.
constexpr unsigned kAlignmentShifts = std::bit_width(kMaxSlabAlignment);
inline constexpr auto kAlignedClass = [] {
  std::array<std::array<uint8_t, kNumClasses>, kAlignmentShifts> table{};
  for (unsigned shift = 0; shift < kAlignmentShifts; ++shift) {
    for (unsigned cls = 0; cls < kNumClasses; ++cls) {
      unsigned aligned = cls;
      while (aligned < kNumClasses && class_size_of(aligned) % (size_t{1} << shift) != 0) ++aligned;
      table[shift][cls] = static_cast<uint8_t>(aligned);
    }
  }
  return table;
}();

// The smallest class whose blocks are all aligned to `alignment` (a power of
// two, at most kMaxSlabAlignment) and hold `size` bytes (at most
// kMaxSlabSize); kNumClasses if none. Two table lookups: C++ types aligned
// to a cache line come through here on every `new`.
constexpr unsigned aligned_class_of(size_t size, size_t alignment) {
  return kAlignedClass[std::countr_zero(alignment)][class_of(size < alignment ? alignment : size)];
}

static_assert(class_size_of(kNumClasses - 1) == kMaxSlabSize);
static_assert(class_of_computed(kMaxSlabSize) == kNumClasses - 1);
// class_of_computed never decreases with the size, so a step whose first
// and last sizes agree with the table agrees throughout (the steps start
// right after kMaxSmallSize, on the table's own boundaries).
static_assert(kMaxSmallSize % kMediumStep == 0);
static_assert([] {
  for (size_t first = kMaxSmallSize + 1; first <= kMaxSlabSize; first += kMediumStep) {
    size_t last = first + kMediumStep - 1;
    if (medium_class_of(first) != class_of_computed(first) || medium_class_of(last) != class_of_computed(last))
      return false;
  }
  return true;
}());
static_assert(class_of(129) == kFineClasses && class_size_of(kFineClasses) == 160);
static_assert(kClassInfo[kNumClasses - 1].capacity >= 4);

}  // namespace xalloc
