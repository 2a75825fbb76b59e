// Basic malloc/free behaviour through the prefixed API: alignment, malloc(0),
// usable sizes of small, large and huge blocks, ownership, and that live
// blocks never overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::is_aligned;

namespace {

const size_t kSizes[] = {0,      1,      8,       15,       16,        17,         24,        100,
                         128,    129,    1000,    1024,     1025,      4096,       8191,      32768,
                         65535,  65536,  65537,   100000,   1 << 20,   (1 << 20) + 1, 8 << 20, 16 << 20,
                         (16 << 20) + 1, 20 << 20, 40 << 20};

}  // namespace

TEST(Basic, MallocIs16ByteAlignedAndUsable) {
  for (size_t size : kSizes) {
    void* p = xalloc_malloc(size);
    ASSERT_NE(p, nullptr) << "size " << size;
    EXPECT_TRUE(is_aligned(p, 16)) << "size " << size << " -> " << p;
    EXPECT_GE(xalloc_usable_size(p), size == 0 ? 1 : size) << "size " << size;
    EXPECT_EQ(xalloc_owns(p), 1) << "size " << size;
    size_t usable = xalloc_usable_size(p);
    xtest::touch_pages(p, usable, 0x5a);
    EXPECT_TRUE(xtest::pages_hold(p, usable, 0x5a));
    xalloc_free(p);
  }
}

TEST(Basic, ManySmallBlocksAre16ByteAligned) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < 20000; ++i) {
    void* p = xalloc_malloc(1 + i % 300);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(is_aligned(p, 16)) << p << " size " << 1 + i % 300;
    blocks.push_back(p);
  }
  for (void* p : blocks) xalloc_free(p);
}

TEST(Basic, MallocZeroReturnsUniquePointers) {
  std::set<void*> seen;
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i) {
    void* p = xalloc_malloc(0);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(seen.insert(p).second) << "malloc(0) returned " << p << " twice";
    ASSERT_EQ(xalloc_owns(p), 1);
    blocks.push_back(p);
  }
  for (void* p : blocks) xalloc_free(p);
}

TEST(Basic, LargeAndHugeUsableSizes) {
  // Large blocks keep their size to the OS page; huge ones at least that.
  for (size_t size : {size_t{65537}, size_t{70000}, size_t{1} << 20, size_t{3000000}, size_t{16} << 20,
                      (size_t{16} << 20) + 1, size_t{33} << 20}) {
    void* p = xalloc_malloc(size);
    ASSERT_NE(p, nullptr) << size;
    size_t usable = xalloc_usable_size(p);
    EXPECT_GE(usable, size);
    // Huge mappings come in eight sizes per doubling, and a cached one up
    // to a quarter larger than the size asked for may be reused.
    size_t mapping = size + size / 8 + 2 * 65536;
    EXPECT_LE(usable, mapping + mapping / 4) << "size " << size << " wastes too much";
    EXPECT_TRUE(is_aligned(p, 4096)) << "large block " << p << " not page aligned";
    xalloc_free(p);
  }
  void* p = xalloc_malloc(70000);
  EXPECT_EQ(xalloc_usable_size(p), 73728u);  // 70000 rounded up to 4 KiB pages
  xalloc_free(p);
}

TEST(Basic, FreeNullIsANoOp) {
  xalloc_free(nullptr);
  xalloc_free_sized(nullptr, 0);
  xalloc_free_aligned_sized(nullptr, 64, 0);
  EXPECT_EQ(xalloc_usable_size(nullptr), 0u);
  EXPECT_EQ(xalloc_owns(nullptr), 0);
}

TEST(Basic, OwnsOnlyXallocMemory) {
  int on_stack = 0;
  static int in_data = 0;
  EXPECT_EQ(xalloc_owns(&on_stack), 0);
  EXPECT_EQ(xalloc_owns(&in_data), 0);
  void* system_block = std::malloc(100);  // the system allocator, not xalloc
  EXPECT_EQ(xalloc_owns(system_block), 0);
  std::free(system_block);
  // Never faults, whatever the address.
  EXPECT_EQ(xalloc_owns(reinterpret_cast<void*>(uintptr_t{0x10})), 0);
  EXPECT_EQ(xalloc_owns(reinterpret_cast<void*>(~uintptr_t{0})), 0);
  EXPECT_EQ(xalloc_owns(reinterpret_cast<void*>(uintptr_t{1} << 46)), 0);

  for (size_t size : {size_t{10}, size_t{5000}, size_t{200000}, size_t{20} << 20}) {
    auto* p = static_cast<char*>(xalloc_malloc(size));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(xalloc_owns(p), 1) << size;
    EXPECT_EQ(xalloc_owns(p + size - 1), 1) << "last byte of a " << size << "-byte block";
    xalloc_free(p);
  }
}

TEST(Basic, FreeSizedForms) {
  for (size_t size : {size_t{1}, size_t{48}, size_t{3000}, size_t{100000}, size_t{17} << 20}) {
    void* p = xalloc_malloc(size);
    ASSERT_NE(p, nullptr);
    xalloc_free_sized(p, size);
    void* q = xalloc_aligned_alloc(256, size);
    ASSERT_NE(q, nullptr);
    ASSERT_TRUE(is_aligned(q, 256));
    xalloc_free_aligned_sized(q, 256, size);
  }
}

TEST(Basic, LiveBlocksNeverOverlap) {
  // Random sizes, random free order; every live block keeps its pattern.
  xtest::Rng rng(42);
  struct Block {
    uint8_t* p;
    size_t size;
    uint64_t seed;
  };
  std::vector<Block> live;
  const size_t rounds = xtest::scaled(40000);
  for (size_t i = 0; i < rounds; ++i) {
    if (live.empty() || rng.below(100) < 55) {
      size_t size = rng.size_mix();
      auto* p = static_cast<uint8_t*>(xalloc_malloc(size));
      ASSERT_NE(p, nullptr);
      xtest::fill_pattern(p, std::min<size_t>(size, 512), i);
      if (size > 512) std::memset(p + 512, static_cast<int>(i & 0xff), size - 512);
      live.push_back({p, size, i});
    } else {
      size_t k = rng.below(live.size());
      Block b = live[k];
      ASSERT_EQ(xtest::check_pattern(b.p, std::min<size_t>(b.size, 512), b.seed), SIZE_MAX)
          << "block of " << b.size << " bytes corrupted";
      if (b.size > 512) {
        for (size_t j = 512; j < b.size; j += 61) ASSERT_EQ(b.p[j], static_cast<uint8_t>(b.seed & 0xff));
        ASSERT_EQ(b.p[b.size - 1], static_cast<uint8_t>(b.seed & 0xff));
      }
      xalloc_free(b.p);
      live[k] = live.back();
      live.pop_back();
    }
  }
  // Also check pairwise disjointness of what is left.
  std::sort(live.begin(), live.end(), [](const Block& a, const Block& b) { return a.p < b.p; });
  for (size_t i = 1; i < live.size(); ++i)
    ASSERT_LE(live[i - 1].p + live[i - 1].size, live[i].p) << "blocks overlap";
  for (const Block& b : live) xalloc_free(b.p);
}

TEST(Basic, FreedMemoryIsReused) {
  // A freed small block comes back for the next request of its class.
  void* a = xalloc_malloc(48);
  xalloc_free(a);
  void* b = xalloc_malloc(48);
  EXPECT_EQ(a, b);
  xalloc_free(b);
}

TEST(Basic, Version) {
  char expected[32];
  std::snprintf(expected, sizeof expected, "%d.%d.%d", XALLOC_VERSION_MAJOR, XALLOC_VERSION_MINOR,
                XALLOC_VERSION_PATCH);
  EXPECT_STREQ(xalloc_version(), expected);
}
