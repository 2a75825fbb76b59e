// Size classes: the block sizes slabs are carved into.
//
// Classes 0..7 are 16..128 bytes in 16-byte steps; above that, four classes
// per power of two (160, 192, 224, 256, 320, ...) up to 64 KiB. Internal
// waste is below 16 bytes up to 128 bytes and below 20% above (a request of
// 2^k + 1 bytes gets 2^k + 2^(k-2)). Every class size is a multiple of 16,
// and a block is aligned to the largest power of two that divides its class
// size, which is how aligned requests are served from slabs.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "config.h"

namespace xalloc {

constexpr unsigned kFineClasses = 8;                 // 16..128
constexpr unsigned kClassesPerDoubling = 4;
constexpr unsigned kFirstCoarseShift = 7;            // coarse classes start above 128
constexpr unsigned kNumClasses = kFineClasses + (std::bit_width(kMaxSlabSize) - 1 - kFirstCoarseShift) * 4;  // 44

constexpr size_t class_size_of(unsigned cls) {
  if (cls < kFineClasses) return (cls + 1) * 16;
  unsigned group = (cls - kFineClasses) / kClassesPerDoubling;
  unsigned index = (cls - kFineClasses) % kClassesPerDoubling;
  size_t base = size_t{1} << (kFirstCoarseShift + group);
  return base + (index + 1) * (base / kClassesPerDoubling);
}

// Class of a request of `size` bytes (1 <= size <= kMaxSlabSize; 0 is
// served as 1). Branch-light: used on the fast path for sizes above 1 KiB.
constexpr unsigned class_of(size_t size) {
  if (size <= 128) return size == 0 ? 0 : static_cast<unsigned>((size - 1) >> 4);
  unsigned e = static_cast<unsigned>(std::bit_width(size - 1)) - 1;  // 2^e < size <= 2^(e+1)
  unsigned shift = e - 2;
  unsigned index = static_cast<unsigned>(((size - 1) >> shift) & 3);
  return kFineClasses + (e - kFirstCoarseShift) * kClassesPerDoubling + index;
}

// Sizes up to kMaxSmallSize are looked up by 16-byte granule.
constexpr size_t kDirectSlots = kMaxSmallSize / 16 + 1;
constexpr size_t granule_of(size_t size) { return (size + 15) >> 4; }

struct ClassInfo {
  uint32_t size;
  uint16_t slices;    // slab length in slices
  uint16_t capacity;  // blocks per slab
  uint64_t div_magic; // (offset * div_magic) <= div_magic - 1  <=>  offset % size == 0
};

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
                   ~uint64_t{0} / size + 1};
}

constexpr auto kClassInfo = [] {
  std::array<ClassInfo, kNumClasses> table{};
  for (unsigned c = 0; c < kNumClasses; ++c) table[c] = make_class_info(c);
  return table;
}();

// The block sizes alone, for a lookup scaled by 4 (remote_free.h).
constexpr auto kClassSize = [] {
  std::array<uint32_t, kNumClasses> table{};
  for (unsigned c = 0; c < kNumClasses; ++c) table[c] = kClassInfo[c].size;
  return table;
}();

constexpr auto kGranuleClass = [] {
  std::array<uint8_t, kDirectSlots> table{};
  for (size_t g = 0; g < kDirectSlots; ++g) table[g] = static_cast<uint8_t>(class_of(g * 16));
  return table;
}();

// Classes of sizes above kMaxSmallSize by 128-byte step: every class
// boundary above 1 KiB is a multiple of 256, so a step never straddles one.
constexpr size_t kMediumStep = 128;
constexpr auto kMediumClass = [] {
  std::array<uint8_t, kMaxSlabSize / kMediumStep> table{};
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<uint8_t>(class_of((i + 1) * kMediumStep));
  return table;
}();

// class_of for kMaxSmallSize < size <= kMaxSlabSize.
constexpr unsigned medium_class_of(size_t size) { return kMediumClass[(size - 1) / kMediumStep]; }

// The smallest class whose blocks are all aligned to `alignment` (a power of
// two, at most kMaxSlabAlignment) and hold `size` bytes; kNumClasses if none.
unsigned aligned_class_of(size_t size, size_t alignment);

static_assert(class_size_of(kNumClasses - 1) == kMaxSlabSize);
static_assert(class_of(kMaxSlabSize) == kNumClasses - 1);
// class_of never decreases with the size, so a step whose first and last
// sizes agree with the table agrees throughout (the steps start right after
// kMaxSmallSize, on the table's own boundaries).
static_assert(kMaxSmallSize % kMediumStep == 0);
static_assert([] {
  for (size_t first = kMaxSmallSize + 1; first <= kMaxSlabSize; first += kMediumStep) {
    size_t last = first + kMediumStep - 1;
    if (medium_class_of(first) != class_of(first) || medium_class_of(last) != class_of(last)) return false;
  }
  return true;
}());
static_assert(class_of(129) == kFineClasses && class_size_of(kFineClasses) == 160);
static_assert(kClassInfo[kNumClasses - 1].capacity >= 4);

}  // namespace xalloc
