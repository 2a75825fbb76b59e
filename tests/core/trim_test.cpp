// xalloc_trim gives the memory of freed small, large and huge blocks back,
// its own thread's and others'.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core_test_util.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::four_touched_huge_blocks;
using xtest::kMiB;
using xtest::stats;

TEST(Trim, ReturnsFreedLargeMemory) {
  // 160 MiB of large blocks: several segments are mapped for them alone,
  // whatever was mapped before, and become empty when they are freed.
  xalloc_stats_t before = stats();
  std::vector<void*> blocks;
  for (int i = 0; i < 320; ++i) {
    void* p = xalloc_malloc(512 * 1024);
    ASSERT_NE(p, nullptr);
    xtest::touch_pages(p, 512 * 1024, 1);
    blocks.push_back(p);
  }
  xalloc_stats_t full = stats();
  ASSERT_GE(full.segments, before.segments + 3);
  for (void* p : blocks) xalloc_free(p);
  EXPECT_EQ(xalloc_trim(0), 1);
  xalloc_stats_t trimmed = stats();
  EXPECT_LE(trimmed.committed + 150 * kMiB, full.committed)
      << "160 MiB freed, committed only " << full.committed << " -> " << trimmed.committed;
  EXPECT_LE(trimmed.mapped + 3 * 32 * kMiB, full.mapped) << "empty segments stay mapped after trim";
  EXPECT_GT(trimmed.purged, full.purged);
}

TEST(Trim, ReturnsFreedSmallMemory) {
  std::vector<void*> blocks;
  for (int i = 0; i < 60000; ++i) {
    void* p = xalloc_malloc(500 + static_cast<size_t>(i % 7) * 64);
    ASSERT_NE(p, nullptr);
    static_cast<char*>(p)[0] = 1;
    blocks.push_back(p);
  }
  xalloc_stats_t full = stats();
  for (void* p : blocks) xalloc_free(p);
  xalloc_trim(0);
  xalloc_stats_t trimmed = stats();
  // About 40 MiB were in use; at most a slab per class may stay.
  EXPECT_LE(trimmed.committed + 30 * kMiB, full.committed)
      << "committed " << full.committed << " -> " << trimmed.committed;
}

TEST(Trim, ReturnsFreedHugeMemory) {
  std::vector<void*> blocks = four_touched_huge_blocks();
  ASSERT_EQ(blocks.size(), 4u);
  xalloc_stats_t full = stats();
  for (void* p : blocks) xalloc_free(p);
  EXPECT_EQ(xalloc_trim(0), 1);
  xalloc_stats_t trimmed = stats();
  EXPECT_LE(trimmed.committed + 100 * kMiB, full.committed);
  EXPECT_LE(trimmed.mapped + 100 * kMiB, full.mapped) << "freed huge blocks stay mapped after trim";
}

TEST(Trim, NothingToTrim) {
  xalloc_trim(0);
  EXPECT_EQ(xalloc_trim(0), 0) << "a second trim found memory to return";
}

TEST(Trim, TrimFromAnotherThreadReturnsRemoteFreedMemory) {
  // Blocks of a live thread freed by the main thread, then trimmed.
  std::vector<void*> blocks;
  std::thread t([&] {
    for (int i = 0; i < 64; ++i) blocks.push_back(xalloc_malloc(256 * 1024));
  });
  t.join();
  xalloc_stats_t full = stats();
  for (void* p : blocks) xalloc_free(p);
  xalloc_trim(0);
  EXPECT_LE(stats().committed + 12 * kMiB, full.committed);
}
