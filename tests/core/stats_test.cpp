// xalloc_get_stats and xalloc_stats_print describe the heap.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core_test_util.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::kMiB;
using xtest::stats;

TEST(Stats, CountersFollowAllocations) {
  void* small = xalloc_malloc(10);  // gives this thread its heap
  xalloc_stats_t before = stats();
  void* big = xalloc_malloc(5 * kMiB);
  ASSERT_NE(big, nullptr);
  xalloc_stats_t with_big = stats();
  EXPECT_GE(with_big.large_in_use, before.large_in_use + 5 * kMiB);
  EXPECT_GE(with_big.in_use, before.in_use + 5 * kMiB);
  EXPECT_GE(with_big.committed, with_big.in_use);
  EXPECT_GE(with_big.mapped, with_big.committed);
  EXPECT_GE(with_big.segments, 1u);
  EXPECT_GE(with_big.threads, 1u);
  xalloc_free(big);
  xalloc_stats_t after = stats();
  EXPECT_EQ(after.large_in_use, before.large_in_use);
  EXPECT_EQ(after.in_use, before.in_use);

  void* huge = xalloc_malloc(40 * kMiB);
  xalloc_stats_t with_huge = stats();
  EXPECT_GE(with_huge.large_in_use, before.large_in_use + 40 * kMiB);
  EXPECT_GE(with_huge.mapped, 40 * kMiB);
  xalloc_free(huge);
  EXPECT_EQ(stats().large_in_use, before.large_in_use);
  xalloc_free(small);
}

// Regression test (tests/KNOWN_BUGS.md #5): in_use used to count whole slabs
// owned by thread heaps, not live blocks.
TEST(Stats, InUseCountsLiveBlocksRoundedToTheirClass) {
  // xalloc.h: in_use is "bytes in live blocks (rounded to their class)".
  void* warm = xalloc_malloc(5000);  // the class's first slab
  xalloc_stats_t before = stats();
  void* p = xalloc_malloc(5000);
  xalloc_stats_t with_block = stats();
  EXPECT_EQ(with_block.in_use - before.in_use, xalloc_usable_size(p))
      << "one 5000-byte block (class " << xalloc_usable_size(p) << ") changed in_use by "
      << static_cast<long long>(with_block.in_use - before.in_use);
  xalloc_free(p);
  xalloc_free(warm);
  xalloc_stats_t after = stats();
  EXPECT_LE(after.in_use, before.in_use) << "in_use did not go down when the blocks were freed";
}

TEST(Stats, SegmentsAndMappedAgree) {
  std::vector<void*> blocks;
  for (int i = 0; i < 40; ++i) blocks.push_back(xalloc_malloc(2 * kMiB));
  xalloc_stats_t s = stats();
  EXPECT_GE(s.mapped, s.segments * 32 * kMiB / 2);
  EXPECT_GE(s.mapped, 80 * kMiB);
  EXPECT_GE(s.segments, 3u);
  for (void* p : blocks) xalloc_free(p);
}

TEST(Stats, PrintWritesTwoLines) {
  auto r = xtest::run_in_child([] {
    void* p = xalloc_malloc(100);
    xalloc_stats_print();
    xalloc_free(p);
    return 0;
  });
  ASSERT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: stats: mapped ")) << r.err;
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: stats: ")) << r.err;
  bool segments_line = false;
  for (const std::string& l : xtest::split_lines(r.err)) {
    unsigned long segments = 0, heaps = 0, remote = 0;
    if (std::sscanf(l.c_str(), "xalloc: stats: %lu segments, %lu thread heaps, %lu remote frees", &segments, &heaps,
                    &remote) == 3) {
      segments_line = true;
      EXPECT_GE(segments, 1u);
      EXPECT_GE(heaps, 1u);
    }
  }
  EXPECT_TRUE(segments_line) << r.err;
}

namespace {

xalloc_account_t account() {
  xalloc_account_t a;
  xalloc_get_account(&a);
  return a;
}

// Free blocks in used slabs, and empty slabs (a slab whose last blocks
// were freed moves from the first to the second).
size_t free_in_slabs(const xalloc_account_t& a) {
  return a.slab_free + a.empty_current + a.empty_spares + a.empty_pooled;
}

}  // namespace

// Blocks written and kept count as live (block sizes: requests are not
// counted here), and those freed among them as free space of used slabs.
TEST(Stats, AccountSplitsLiveAndFreeBlocksOfUsedSlabs) {
  auto r = xtest::run_in_child([] {
    constexpr size_t kBlocks = 20000;
    static void* blocks[kBlocks];
    xalloc_free(xalloc_malloc(40));  // the heap, and the class's first slab
    xalloc_account_t before = account();
    for (void*& b : blocks) {
      b = xalloc_malloc(40);
      std::memset(b, 1, 40);
    }
    // (A young heap serves the first ones from the 64-byte class: heap.h.)
    size_t all = 0, freed = 0;
    for (size_t i = 0; i < kBlocks; ++i) {
      all += xalloc_usable_size(blocks[i]);
      if (i % 2 == 0) freed += xalloc_usable_size(blocks[i]);
    }
    xalloc_account_t full = account();
    for (size_t i = 0; i < kBlocks; i += 2) xalloc_free(blocks[i]);
    xalloc_account_t half = account();
    size_t slack = 64 << 10;  // a slab's untouched tail, other allocations
    bool ok = full.requested_known == 0 && full.rounding == before.rounding &&
              full.live >= before.live + all && full.live <= before.live + all + slack &&
              half.live + freed == full.live &&
              free_in_slabs(half) + 8192 >= free_in_slabs(full) + freed &&
              free_in_slabs(half) <= free_in_slabs(full) + freed + 8192 && half.slab_free + 8192 >= freed &&
              full.resident >= full.live &&
              full.metadata > 0 && full.committed >= full.live + full.slab_free;
    std::fprintf(stderr, "usable %zu, freed %zu; live %zu -> %zu -> %zu; free in slabs %zu -> %zu -> %zu; "
                 "rounding %zu; metadata %zu\n", all, freed, before.live, full.live, half.live, free_in_slabs(before),
                 free_in_slabs(full), free_in_slabs(half), full.rounding, full.metadata);
    for (size_t i = 1; i < kBlocks; i += 2) xalloc_free(blocks[i]);
    return ok ? 0 : 1;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

// Without XALLOC_STATS no account is taken at the peak.
TEST(Stats, NoPeakAccountWithoutStatistics) {
  EXPECT_EQ(stats().peak_account.resident, 0u);
}
