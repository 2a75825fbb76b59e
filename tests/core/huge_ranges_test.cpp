// Huge pages where the heap is dense (backend/huge_ranges.h,
// XALLOC_HUGE_PAGES=auto): the decisions one by one, the span allocator's
// placement (densest range first), and what the kernel does with a big
// dense heap and a small one, read back from /proc/self/smaps.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/huge_ranges.h"
#include "backend/segment.h"
#include "backend/span_allocator.h"
#include "meta/page.h"
#include "core_test_util.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::kMiB;
namespace hr = xalloc::huge_ranges;

namespace {

// --- the decisions ---------------------------------------------------------------

TEST(HugeRanges, TakePromotesAFreshOrDenseRangeOnly) {
  using P = hr::Promotion;
  EXPECT_EQ(hr::promotion_for_take(false, 1, true), P::kBeforeTouch);
  EXPECT_EQ(hr::promotion_for_take(false, 1, false), P::kNone);
  EXPECT_EQ(hr::promotion_for_take(false, hr::kDenseSlices - 1, false), P::kNone);
  EXPECT_EQ(hr::promotion_for_take(false, hr::kDenseSlices, false), P::kCollapse);
  EXPECT_EQ(hr::promotion_for_take(false, xalloc::kRangeSlices, true), P::kCollapse);
  EXPECT_EQ(hr::promotion_for_take(true, xalloc::kRangeSlices, false), P::kNone);
  EXPECT_EQ(hr::promotion_for_take(true, 1, true), P::kNone);
}

TEST(HugeRanges, NotActiveForASmallHeap) {
  EXPECT_FALSE(hr::active(0));
  EXPECT_FALSE(hr::active(hr::kHeapThreshold - 1));
}

// Below the heap threshold only a thread that holds many slabs opens
// ranges on huge pages (whether it does depends on the kernel too).
TEST(HugeRanges, OnlyAThreadWithManySlabsOpensHugeRangesInASmallerHeap) {
  EXPECT_FALSE(hr::opens_huge(0, false));
  EXPECT_FALSE(hr::opens_huge(hr::kHeapThreshold - 1, false));
  EXPECT_EQ(hr::opens_huge(hr::kHeapThreshold, false), hr::active(hr::kHeapThreshold));
  EXPECT_EQ(hr::opens_huge(0, true), hr::active(hr::kHeapThreshold));
}

TEST(HugeRanges, RangesOfASpan) {
  EXPECT_EQ(hr::ranges_of(3, 1), 1u);
  EXPECT_EQ(hr::ranges_of(31, 2), 3u);
  EXPECT_EQ(hr::ranges_of(32, 32), 2u);
  EXPECT_EQ(hr::ranges_of(3, xalloc::kPayloadSlices), 0xffffu);
}

// A free span's ends in huge ranges still three quarters in use are not
// purged for the delay; anything else is, and demotes the huge ranges it
// overlaps.
TEST(HugeRanges, TrimKeptSparesDenseHugeRangesOnly) {
  xalloc::Segment* segment = xalloc::segment_create();
  ASSERT_NE(segment, nullptr);
  segment->range_used[1] = hr::kKeepSlices;
  segment->range_used[2] = hr::kKeepSlices - 1;
  segment->range_used[3] = xalloc::kRangeSlices;
  segment->huge_ranges = 0b1110;
  auto trimmed = [&](size_t first, size_t end) {
    hr::trim_kept(segment, &first, &end);
    return std::make_pair(first, end);
  };
  EXPECT_EQ(trimmed(40, 70), std::make_pair(size_t{64}, size_t{70}));   // range 1 kept, 2 sparse
  EXPECT_EQ(trimmed(70, 100), std::make_pair(size_t{70}, size_t{96}));  // range 3 kept
  EXPECT_EQ(trimmed(40, 44), std::make_pair(size_t{64}, size_t{44}));   // all of it kept: nothing
  segment->huge_ranges = 0;
  EXPECT_EQ(trimmed(40, 70), std::make_pair(size_t{40}, size_t{70}));  // not huge: all of it
  segment->huge_ranges = 0b1110;
  hr::demote(segment, 70, 100);
  EXPECT_EQ(segment->huge_ranges, 0b0010);
  segment->range_used[1] = segment->range_used[2] = segment->range_used[3] = 0;
  xalloc::segment_destroy(segment);
}

// --- placement ---------------------------------------------------------------------

xalloc::Page* take(xalloc::SpanAllocator& spans, size_t slices) {
  bool is_zero = false;
  xalloc::Page* span = spans.allocate(slices, xalloc::PageKind::kLarge, &is_zero);
  EXPECT_NE(span, nullptr);
  return span;
}

// Holes of one slice: the most recently freed two in a range less than
// half in use, the other in a range full but for it. The take fills the
// full range's hole, so the sparser range can empty and go back whole.
TEST(HugeRanges, PlacementFillsTheDensestRangeFirst) {
  static xalloc::SpanAllocator spans;
  std::vector<xalloc::Page*> slices;
  // Slices 3..95: ranges 0, 1 and 2 in use.
  for (size_t i = 3; i < 3 * xalloc::kRangeSlices; ++i) slices.push_back(take(spans, 1));
  xalloc::Segment* segment = xalloc::segment_of(reinterpret_cast<uintptr_t>(slices[0]));
  auto at = [&](size_t index) { return &segment->pages[index]; };
  ASSERT_EQ(slices[0], at(3));
  ASSERT_EQ(slices.back(), at(95));
  spans.release(at(40));  // range 1: 31 of 32 in use
  for (size_t i = 64; i < 80; ++i) spans.release(at(i));  // range 2: 16 slices, one span of another bin
  for (size_t i : {82, 86}) spans.release(at(i));          // and two holes, freed later: 14 in use
  EXPECT_EQ(segment->range_used[1], 31);
  EXPECT_EQ(segment->range_used[2], 14);
  EXPECT_EQ(take(spans, 1), at(40));
  EXPECT_EQ(segment->range_used[1], 32);
  for (size_t i = 3; i < 3 * xalloc::kRangeSlices; ++i) {
    if ((i < 64 || i >= 80) && i != 82 && i != 86) spans.release(at(i));
  }
  spans.purge(true);
}

// --- what the kernel does -----------------------------------------------------------

std::string thp_setting() {
  FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return "never";
  char buf[128] = {};
  bool got = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!got) return "never";
  const char* open = std::strchr(buf, '[');
  const char* close = open != nullptr ? std::strchr(open, ']') : nullptr;
  return close != nullptr ? std::string(open + 1, close) : "never";
}

struct Coverage {
  size_t resident = 0;
  size_t huge = 0;
};

// Rss and AnonHugePages of the mappings of /proc/self/smaps that start in
// the 32 MiB granules `granules` (the heap's segments).
Coverage coverage_of(const std::set<uintptr_t>& granules) {
  Coverage c;
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return c;
  char line[512];
  bool counted = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long start = 0, end = 0;
    size_t kb = 0;
    if (std::sscanf(line, "%lx-%lx ", &start, &end) == 2 && std::strncmp(line, "VmFlags", 7) != 0) {
      counted = granules.count(start >> xalloc::kSegmentShift) != 0;
    } else if (counted && std::sscanf(line, "Rss: %zu kB", &kb) == 1) {
      c.resident += kb << 10;
    } else if (counted && std::sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) {
      c.huge += kb << 10;
    }
  }
  std::fclose(f);
  return c;
}

// Allocates `bytes` in 64-byte blocks, written; returns the granules they
// lie in (freed by free_blocks).
std::vector<void*> g_blocks;
std::set<uintptr_t> allocate_blocks(size_t bytes) {
  std::set<uintptr_t> granules;
  for (size_t done = 0; done < bytes; done += 64) {
    void* p = xalloc_malloc(64);
    if (p == nullptr) break;
    std::memset(p, 1, 64);
    g_blocks.push_back(p);
    granules.insert(reinterpret_cast<uintptr_t>(p) >> xalloc::kSegmentShift);
  }
  return granules;
}

void free_blocks() {
  for (void* p : g_blocks) xalloc_free(p);
  g_blocks.clear();
}

// The body run in a fresh process: 0 when the coverage is as expected;
// `min_percent` of the heap's resident memory on huge pages.
int coverage_body(size_t bytes, size_t min_percent, size_t max_percent, bool disable_thp) {
  if (disable_thp && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) return 10;
  g_blocks.reserve(bytes / 64);
  std::set<uintptr_t> granules = allocate_blocks(bytes);
  if (g_blocks.size() != bytes / 64) return 11;
  Coverage c = coverage_of(granules);
  size_t percent = c.resident != 0 ? c.huge * 100 / c.resident : 0;
  // With a purger's clock, ranges made dense before the heap passed the
  // threshold are collapsed by the purger once dense for a purge delay.
  for (int wait = 0; wait < 40 && percent < min_percent; ++wait) {
    usleep(100 * 1000);
    c = coverage_of(granules);
    percent = c.resident != 0 ? c.huge * 100 / c.resident : 0;
  }
  xalloc_stats_t s;
  xalloc_get_stats(&s);
  std::fprintf(stderr, "heap %zu MiB: resident %zu KiB, on huge pages %zu KiB (%zu%%); stats: %zu KiB of %zu KiB, "
               "%zu faults avoided\n", bytes >> 20, c.resident >> 10, c.huge >> 10, percent, s.on_huge_pages >> 10,
               s.resident >> 10, s.faults_avoided);
  if (percent < min_percent || percent > max_percent) return 1;
  // The statistics read the same mappings (and a few more: other segments).
  if (s.on_huge_pages < c.huge || s.resident < c.resident) return 2;
  if (max_percent == 0 && s.faults_avoided != 0) return 3;
  free_blocks();
  return 0;
}

TEST(HugeRanges, BigDenseHeapIsOnHugePages) {
  std::string thp = thp_setting();
  if (thp == "never") GTEST_SKIP() << "transparent huge pages are off (never): nothing to check";
  // (Auto does nothing under commit on demand, which the test command turns on for a whole stage.)
  auto r = xtest::fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", "0"}},
                                 [] { return coverage_body(128 * kMiB, 80, 100, false); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "THP " << thp << ": " << r.describe();
  std::printf("THP %s: %s", thp.c_str(), r.err.c_str());
}

// The same without the purger's thread: the take that makes a range dense
// collapses it at once.
TEST(HugeRanges, BigDenseHeapIsOnHugePagesWithoutThePurger) {
  std::string thp = thp_setting();
  if (thp == "never") GTEST_SKIP() << "transparent huge pages are off (never): nothing to check";
  auto r = xtest::fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", "0"}, {"XALLOC_BACKGROUND_PURGE", "0"}},
                                 [] { return coverage_body(128 * kMiB, 80, 100, false); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "THP " << thp << ": " << r.describe();
  std::printf("THP %s: %s", thp.c_str(), r.err.c_str());
}

// A heap below the threshold that one thread grew past kThreadSlabThreshold:
// the ranges it opened after that are on huge pages (48 MiB: the first 16,
// the rest of the range open then, and each segment's first range, whose
// header was touched first, are not).
TEST(HugeRanges, OneThreadsMidSizedHeapOpensItsLaterRangesOnHugePages) {
  std::string thp = thp_setting();
  if (thp == "never") GTEST_SKIP() << "transparent huge pages are off (never): nothing to check";
  static_assert(48 * kMiB < hr::kHeapThreshold && 48 * kMiB > 2 * hr::kThreadSlabThreshold);
  auto r = xtest::fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", "0"}},
                                 [] { return coverage_body(48 * kMiB, 40, 100, false); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "THP " << thp << ": " << r.describe();
  std::printf("THP %s: %s", thp.c_str(), r.err.c_str());
}

// As many bytes over eight threads that hold 6 MiB each: no huge page.
TEST(HugeRanges, ThreadsOfAFewMiBEachOpenNoHugeRangeInASmallerHeap) {
  auto r = xtest::fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", "0"}}, [] {
    constexpr size_t kThreads = 8;
    static_assert(6 * kMiB < hr::kThreadSlabThreshold && kThreads * 6 * kMiB < hr::kHeapThreshold);
    std::vector<std::vector<void*>> blocks(kThreads);
    std::set<uintptr_t> granules;
    std::vector<std::thread> threads;
    for (size_t t = 0; t < kThreads; ++t) {
      threads.emplace_back([&blocks, t] {
        for (size_t done = 0; done < 6 * kMiB; done += 64) {
          void* p = xalloc_malloc(64);
          std::memset(p, 1, 64);
          blocks[t].push_back(p);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const std::vector<void*>& list : blocks)
      for (void* p : list) granules.insert(reinterpret_cast<uintptr_t>(p) >> xalloc::kSegmentShift);
    Coverage c = coverage_of(granules);
    std::fprintf(stderr, "8 threads of 6 MiB: resident %zu KiB, on huge pages %zu KiB\n", c.resident >> 10,
                 c.huge >> 10);
    return c.huge == 0 ? 0 : 1;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

TEST(HugeRanges, SmallHeapGetsNoHugePage) {
  auto r = xtest::fresh_with_env({}, [] { return coverage_body(4 * kMiB, 0, 0, false); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

TEST(HugeRanges, BigHeapWorksWithHugePagesDisabledForTheProcess) {
  auto r = xtest::fresh_with_env({}, [] { return coverage_body(128 * kMiB, 0, 0, true); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

TEST(HugeRanges, NeverOptionKeepsEveryRangeOnSmallPages) {
  auto r = xtest::fresh_with_env({{"XALLOC_HUGE_PAGES", "0"}}, [] { return coverage_body(128 * kMiB, 0, 0, false); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

// --- huge blocks -----------------------------------------------------------------

// Writes `bytes` of a new huge block: all of them, or a byte every 256 KiB.
void* written_huge_block(size_t bytes, bool dense) {
  auto* p = static_cast<char*>(xalloc_malloc(bytes));
  if (p == nullptr) return nullptr;
  if (dense) std::memset(p, 1, bytes);
  else
    for (size_t at = 0; at < bytes; at += 256 << 10) p[at] = 1;
  return p;
}

// A fresh huge block written in full after one written in full was freed
// is on huge pages; after one written sparsely was freed it is not (each
// block a size the cached mapping before it cannot take).
int huge_block_body() {
  xalloc_free(written_huge_block(24 * kMiB, false));
  void* after_sparse = written_huge_block(48 * kMiB, true);
  if (after_sparse == nullptr) return 10;
  Coverage sparse = coverage_of({reinterpret_cast<uintptr_t>(after_sparse) >> xalloc::kSegmentShift});
  xalloc_free(after_sparse);  // written in full
  xalloc_stats_t before;
  xalloc_get_stats(&before);
  void* after_dense = written_huge_block(72 * kMiB, true);
  if (after_dense == nullptr) return 11;
  Coverage dense = coverage_of({reinterpret_cast<uintptr_t>(after_dense) >> xalloc::kSegmentShift});
  xalloc_stats_t after;
  xalloc_get_stats(&after);
  xalloc_free(after_dense);
  // Its mapping's 2 MiB ranges, advised before their first touch, are
  // counted as the slab ranges are: 511 faults each.
  if (after.faults_avoided - before.faults_avoided < 72 / 2 * hr::kFaultsAvoidedPerRange) return 3;
  std::fprintf(stderr, "after a sparse block: %zu of %zu KiB on huge pages; after a dense one: %zu of %zu KiB\n",
               sparse.huge >> 10, sparse.resident >> 10, dense.huge >> 10, dense.resident >> 10);
  if (sparse.huge != 0) return 1;
  if (dense.huge * 10 < dense.resident * 9) return 2;
  return 0;
}

// A block is judged when the next huge block is asked for, not only once it
// is freed: a program that fills each buffer before it asks for the next
// has the second on huge pages while the first is still live, whether the
// first is huge or large; one that wrote the first sparsely has not.
int live_block_body(size_t first_bytes, bool first_dense, bool expect_huge) {
  void* first = written_huge_block(first_bytes, first_dense);
  void* second = written_huge_block(40 * kMiB, true);
  if (first == nullptr || second == nullptr) return 10;
  Coverage c = coverage_of({reinterpret_cast<uintptr_t>(second) >> xalloc::kSegmentShift});
  xalloc_free(second);
  xalloc_free(first);
  std::fprintf(stderr, "second block: %zu of %zu KiB on huge pages\n", c.huge >> 10, c.resident >> 10);
  if (expect_huge) return c.huge * 10 >= c.resident * 9 ? 0 : 1;
  return c.huge == 0 ? 0 : 2;
}

void expect_live_block_verdict(size_t first_bytes, bool first_dense, bool expect_huge) {
  std::string thp = thp_setting();
  if (thp != "madvise") GTEST_SKIP() << "THP " << thp << ": huge pages are the kernel's choice or none";
  auto r = xtest::fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", "0"}}, [=] {
    return live_block_body(first_bytes, first_dense, expect_huge);
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  std::printf("%s", r.err.c_str());
}

TEST(HugeRanges, HugeBlockAfterALiveHugeOneWrittenInFullGetsHugePages) {
  expect_live_block_verdict(24 * kMiB, true, true);
}

TEST(HugeRanges, HugeBlockAfterALiveLargeOneWrittenInFullGetsHugePages) {
  expect_live_block_verdict(12 * kMiB, true, true);
}

TEST(HugeRanges, HugeBlockAfterALiveSparseOneStaysOnSmallPages) {
  expect_live_block_verdict(24 * kMiB, false, false);
}

TEST(HugeRanges, HugeBlocksGetHugePagesAfterADenselyWrittenOne) {
  std::string thp = thp_setting();
  if (thp != "madvise") GTEST_SKIP() << "THP " << thp << ": huge pages are the kernel's choice or none";
  auto r = xtest::fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", "0"}}, [] { return huge_block_body(); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  std::printf("%s", r.err.c_str());
}

// A large block written in full and grown by realloc into a huge block
// is judged as it grows: the huge block it moves to is on huge pages,
// with no huge block freed before.
TEST(HugeRanges, LargeBlockGrownIntoAHugeOneMovesOntoHugePages) {
  std::string thp = thp_setting();
  if (thp != "madvise") GTEST_SKIP() << "THP " << thp << ": huge pages are the kernel's choice or none";
  auto r = xtest::fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", "0"}}, [] {
    void* large = written_huge_block(12 * kMiB, true);
    auto* grown = static_cast<char*>(xalloc_realloc(large, 40 * kMiB));
    if (grown == nullptr) return 10;
    std::memset(grown + 12 * kMiB, 2, 28 * kMiB);
    Coverage c = coverage_of({reinterpret_cast<uintptr_t>(grown) >> xalloc::kSegmentShift});
    xalloc_free(grown);
    std::fprintf(stderr, "grown block: %zu of %zu KiB on huge pages\n", c.huge >> 10, c.resident >> 10);
    return c.huge * 10 >= c.resident * 9 ? 0 : 1;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  std::printf("%s", r.err.c_str());
}

TEST(HugeRanges, HugeBlocksStayOnSmallPagesWithTheNeverOption) {
  std::string thp = thp_setting();
  if (thp != "madvise") GTEST_SKIP() << "THP " << thp << ": huge pages are the kernel's choice or none";
  auto r = xtest::fresh_with_env({{"XALLOC_HUGE_PAGES", "0"}, {"XALLOC_COMMIT_ON_DEMAND", "0"}}, [] {
    xalloc_free(written_huge_block(24 * kMiB, true));
    void* p = written_huge_block(48 * kMiB, true);
    Coverage c = coverage_of({reinterpret_cast<uintptr_t>(p) >> xalloc::kSegmentShift});
    xalloc_free(p);
    return c.huge == 0 ? 0 : 1;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

}  // namespace
