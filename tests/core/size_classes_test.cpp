// Size classes: the constexpr tables of src/size_classes.h, and what the
// allocator really hands out for every request size up to 64 KiB.
#include <gtest/gtest.h>

#include <bit>
#include <vector>

#include "base/config.h"
#include "meta/size_classes.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using namespace xalloc;

namespace {

// The smallest class that holds `size` bytes, by linear search: the reference
// class_of must agree with.
unsigned reference_class(size_t size) {
  if (size == 0) size = 1;
  for (unsigned c = 0; c < kNumClasses; ++c) {
    if (class_size_of(c) >= size) return c;
  }
  return kNumClasses;
}

}  // namespace

TEST(SizeClasses, FineClassesAre16ByteStepsUpTo128) {
  for (unsigned c = 0; c < kFineClasses; ++c) EXPECT_EQ(class_size_of(c), (c + 1) * 16u) << "class " << c;
  EXPECT_EQ(class_size_of(kFineClasses - 1), 128u);
}

TEST(SizeClasses, FourClassesPerPowerOfTwoAndOneForAHeaderUpTo64KiB) {
  // Above 128: between 2^k (exclusive) and 2^(k+1) (inclusive), four
  // classes evenly spaced by 2^(k-2); from 1 KiB to 16 KiB also one at
  // 2^k + 2^(k-3), for a power of two plus a small header.
  unsigned total = 8;
  for (unsigned k = 7; k < 16; ++k) {
    size_t lo = size_t{1} << k, hi = size_t{1} << (k + 1);
    std::vector<size_t> expected;
    if (k >= 10 && k < 14) expected.push_back(lo + lo / 8);
    for (size_t i = 1; i <= 4; ++i) expected.push_back(lo + i * (lo / 4));
    std::vector<size_t> in_range;
    for (unsigned c = 0; c < kNumClasses; ++c) {
      if (class_size_of(c) > lo && class_size_of(c) <= hi) in_range.push_back(class_size_of(c));
    }
    EXPECT_EQ(in_range, expected) << "classes in (" << lo << ", " << hi << "]";
    total += static_cast<unsigned>(expected.size());
  }
  EXPECT_EQ(class_size_of(kNumClasses - 1), 64u * 1024);
  EXPECT_EQ(kNumClasses, total);
  // A page and a header: 4096 + 8 bytes get 4608, not 5120.
  EXPECT_EQ(class_size_of(class_of(4104)), 4608u);
}

TEST(SizeClasses, SizesStrictlyIncreaseAndAreMultiplesOf16) {
  for (unsigned c = 0; c < kNumClasses; ++c) {
    EXPECT_EQ(class_size_of(c) % 16, 0u) << "class " << c;
    if (c > 0) {
      EXPECT_GT(class_size_of(c), class_size_of(c - 1)) << "class " << c;
    }
  }
}

TEST(SizeClasses, ClassOfIsTheSmallestFittingClassAndMonotonic) {
  unsigned previous = 0;
  for (size_t size = 1; size <= kMaxSlabSize; ++size) {
    unsigned c = class_of(size);
    ASSERT_EQ(c, class_of_computed(size)) << "size " << size;
    ASSERT_LT(c, kNumClasses) << "size " << size;
    ASSERT_EQ(c, reference_class(size)) << "size " << size;
    ASSERT_GE(class_size_of(c), size) << "size " << size;
    if (c > 0) {
      ASSERT_LT(class_size_of(c - 1), size) << "size " << size << " fits a smaller class";
    }
    ASSERT_GE(c, previous) << "class_of not monotonic at " << size;
    previous = c;
  }
  EXPECT_EQ(class_of(0), 0u);
}

TEST(SizeClasses, WasteBounds) {
  for (size_t size = 1; size <= kMaxSlabSize; ++size) {
    size_t block = class_size_of(class_of(size));
    size_t waste = block - size;
    if (size <= 128) {
      ASSERT_LT(waste, 16u) << "size " << size;
    } else {
      // Below 20% of the block (2^k + 1 bytes get 2^k + 2^(k-2)).
      ASSERT_LT(waste * 5, block) << "size " << size << " gets " << block;
    }
  }
}

TEST(SizeClasses, GranuleTableMatchesClassOf) {
  for (size_t g = 0; g < kDirectSlots; ++g) {
    size_t size = g * 16;
    EXPECT_EQ(kGranuleClass[g], class_of(size)) << "granule " << g;
    // Every size that maps to this granule fits the granule's class.
    if (g > 0) {
      EXPECT_GE(class_size_of(kGranuleClass[g]), size);
    }
  }
  for (size_t size = 0; size <= kMaxSmallSize; ++size)
    ASSERT_EQ(kGranuleClass[granule_of(size)], class_of(size)) << "size " << size;
}

TEST(SizeClasses, ClassInfoTable) {
  for (unsigned c = 0; c < kNumClasses; ++c) {
    const ClassInfo& info = kClassInfo[c];
    EXPECT_EQ(info.size, class_size_of(c));
    // Up to 8 KiB one slice; above, the fewest slices that hold four
    // blocks and leave at most an eighth of the slab unused.
    EXPECT_GE(info.capacity, info.size <= 8192 ? 8u : 4u) << "class " << c;
    if (info.size <= 8192) {
      EXPECT_EQ(info.slices, 1u) << "class " << c;
    }
    size_t slab = size_t{info.slices} * kSliceSize;
    EXPECT_LE(size_t{info.capacity} * info.size, slab);
    // The tail no block fits in is smaller than a block, and at most an
    // eighth of the slab.
    EXPECT_LT(slab - size_t{info.capacity} * info.size, size_t{info.size});
    EXPECT_LE((slab - size_t{info.capacity} * info.size) * 8, slab) << "class " << c;
    if (info.slices > 1) {
      size_t shorter = slab - kSliceSize;
      size_t fits = shorter / info.size;
      EXPECT_TRUE(fits < 4 || (shorter - fits * info.size) * 8 > shorter) << "class " << c << ": a shorter slab would do";
    }
    // div_magic: offset is a multiple of the size exactly when offset*magic < magic.
    for (uint64_t off : {uint64_t{0}, uint64_t{info.size}, uint64_t{info.size} * 3, uint64_t{info.size} * info.capacity})
      EXPECT_LT(off * info.div_magic, info.div_magic) << "class " << c << " offset " << off;
    for (uint64_t off : {uint64_t{1}, uint64_t{8}, uint64_t{info.size} - 1, uint64_t{info.size} + 8})
      EXPECT_GE(off * info.div_magic, info.div_magic) << "class " << c << " offset " << off;
    // ...and, against carved * div_magic, a start among the first `carved`
    // blocks: one comparison (is_carved_block_start).
    for (uint64_t carved : {uint64_t{0}, uint64_t{1}, uint64_t{info.capacity} / 2, uint64_t{info.capacity}}) {
      uint64_t limit = carved * info.size * info.div_magic;
      for (uint64_t off = 0; off < slab; off += (off % info.size == 0 ? 8 : info.size - off % info.size)) {
        bool carved_start = off % info.size == 0 && off / info.size < carved;
        EXPECT_EQ(off * info.div_magic < limit, carved_start) << "class " << c << " carved " << carved << " offset " << off;
      }
    }
  }
}

TEST(SizeClasses, AlignedClassOfGivesAnAlignedFittingClass) {
  for (size_t alignment = 1; alignment <= kMaxSlabAlignment; alignment <<= 1) {
    for (size_t size = 1; size <= kMaxSlabSize; size += (size < 512 ? 1 : 61)) {
      unsigned c = aligned_class_of(size, alignment);
      ASSERT_LT(c, kNumClasses) << "size " << size << " alignment " << alignment;
      size_t block = class_size_of(c);
      ASSERT_GE(block, size);
      ASSERT_EQ(block % alignment, 0u) << "size " << size << " alignment " << alignment;
      // And it is the smallest such class.
      for (unsigned d = 0; d < c; ++d) {
        ASSERT_FALSE(class_size_of(d) >= size && class_size_of(d) % alignment == 0)
            << "class " << d << " would do for size " << size << " alignment " << alignment;
      }
    }
  }
}

namespace {

// Makes sure the calling thread's heap has grown up (src/heap.h): more
// 16-byte blocks than a slab of them holds.
void grow_up_heap() {
  std::vector<void*> blocks;
  for (size_t i = 0; i <= kSliceSize / 16; ++i) blocks.push_back(xalloc_malloc(16));
  for (void* p : blocks) xalloc_free(p);
}

}  // namespace

TEST(SizeClasses, AllocatorUsesTheClassSizeAsUsableSize) {
  // For every request up to 64 KiB the block's usable size is its class
  // size, once the heap has grown up.
  grow_up_heap();
  std::vector<void*> keep;
  for (size_t size = 1; size <= kMaxSlabSize; size += (size < 4096 ? 1 : 7)) {
    void* p = xalloc_malloc(size);
    ASSERT_NE(p, nullptr) << "size " << size;
    ASSERT_EQ(xalloc_usable_size(p), class_size_of(class_of(size))) << "size " << size;
    ASSERT_TRUE(xtest::is_aligned(p, 16)) << "size " << size;
    // Blocks are aligned to the largest power of two dividing their class.
    size_t block = class_size_of(class_of(size));
    size_t natural = block & (~block + 1);
    ASSERT_TRUE(xtest::is_aligned(p, natural)) << "size " << size << " block " << block;
    static_cast<uint8_t*>(p)[size - 1] = 1;
    if (size % 97 == 0) keep.push_back(p);
    else xalloc_free(p);
  }
  for (void* p : keep) xalloc_free(p);
}

TEST(SizeClasses, UsableSizeOfMalloc0) {
  void* p = xalloc_malloc(0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(xalloc_usable_size(p), 16u);
  xalloc_free(p);
}
