// The purge policy seen from the outside: what freed memory stays resident
// for reuse, what goes back to the OS without a trim, and when.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/span_allocator.h"
#include "core_test_util.h"
#include "frontend/heap.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::four_touched_huge_blocks;
using xtest::kMiB;
using xtest::kSlice;
using xtest::stats;

namespace {

// A large block whose span no heap keeps (heap.h: kKeptSliceBudget): its
// free goes to the span allocator at once.
constexpr size_t kUnkeptLarge = (xalloc::kKeptSliceBudget + 1) * kSlice;

}  // namespace

// Purge tests: the purge policy keeps process-wide history (the dirty
// budget's factor, the peak of memory in use over the last delay, the last
// shrink decision), so each of them runs in a fresh process, where the
// tests before it in the same program cannot decide its outcome. Most test
// the policy without a purger's clock (purger.h), where frees must purge
// what no later call may come back for: a process's policy until it has
// 64 MiB in use, and always under XALLOC_BACKGROUND_PURGE=0.
namespace {

bool rerun_without_clock() { return xtest::rerun_in_fresh_process_with({{"XALLOC_BACKGROUND_PURGE", "0"}}); }
// (Not under commit on demand, where auto starts no purger.)
bool rerun_with_clock() {
  return xtest::rerun_in_fresh_process_with({{"XALLOC_BACKGROUND_PURGE", "auto"}, {"XALLOC_COMMIT_ON_DEMAND", "0"}});
}

}  // namespace

TEST(Purge, BurstOfHugeFreesGoesBackWithoutTrim) {
  if (!rerun_without_clock()) return;  // see "Purge tests" above
  // 120 MiB of huge blocks freed at once is far beyond the resident budget
  // of a small heap: the huge cache keeps the mappings but purges them at
  // once, as the span allocator does for a burst of spans.
  std::vector<void*> blocks = four_touched_huge_blocks();
  ASSERT_EQ(blocks.size(), 4u);
  xalloc_stats_t full = stats();
  ASSERT_LT(full.in_use, 400 * kMiB) << "the test needs a small heap (budget 12% of it)";
  for (void* p : blocks) xalloc_free(p);
  xalloc_stats_t freed = stats();
  EXPECT_LE(freed.committed + 80 * kMiB, full.committed)
      << "committed " << full.committed << " -> " << freed.committed << " right after the frees";
}

// The dirty budget grows while memory purged to keep within it is taken
// back, and steps down only after a whole purge delay (500 ms) of calm.
TEST(Purge, BudgetGrowsUnderReuseAndShrinksOnlyAfterADelayOfCalm) {
  if (!rerun_without_clock()) return;  // see "Purge tests" above
  using Clock = std::chrono::steady_clock;
  // A large free lets the span allocator purge and review its budget: of a
  // block too big for the spans a heap keeps, which goes back to the span
  // allocator at once.
  auto nudge = [] { xalloc_free(xalloc_malloc(kUnkeptLarge)); };
  // 16 MiB of large blocks, freed (beyond the 4 MiB budget of a small
  // heap: purged after 50 ms) and taken back, a few times over.
  constexpr int kBlocks = 8;
  void* blocks[kBlocks];
  for (int round = 0; round < 6 && xalloc::dirty_budget_boost() == 0; ++round) {
    for (void*& p : blocks) {
      p = xalloc_malloc(2 * kMiB);
      ASSERT_NE(p, nullptr);
      xtest::touch_pages(p, 2 * kMiB, 1);
    }
    for (void* p : blocks) xalloc_free(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(70));
    nudge();
  }
  ASSERT_GT(xalloc::dirty_budget_boost(), 0u) << "purged memory taken back did not grow the budget";
  unsigned grown = xalloc::dirty_budget_boost();
  // Calm: nothing but the nudges. A quarter of the delay on, the budget has
  // not stepped down (unless this machine stalled the test past the delay).
  auto calm_start = Clock::now();
  while (Clock::now() - calm_start < std::chrono::milliseconds(200)) {
    nudge();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (Clock::now() - calm_start < std::chrono::milliseconds(400)) {
    EXPECT_EQ(xalloc::dirty_budget_boost(), grown) << "stepped down within a fraction of the delay";
  }
  while (xalloc::dirty_budget_boost() == grown && Clock::now() - calm_start < std::chrono::seconds(5)) {
    nudge();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LT(xalloc::dirty_budget_boost(), grown) << "still grown after 5 s of calm";
}

namespace {

// Blocks of 1 KiB filling `bytes` of slabs, every page written.
std::vector<void*> small_blocks(size_t bytes) {
  std::vector<void*> blocks(bytes / 1024);
  for (void*& p : blocks) {
    p = xalloc_malloc(1024);
    if (p != nullptr) memset(p, 1, 1024);
  }
  return blocks;
}

void free_range(std::vector<void*>& blocks, size_t from, size_t to, size_t keep_every = 0) {
  for (size_t i = from; i < to; ++i) {
    if (keep_every != 0 && i % keep_every == 0) continue;
    xalloc_free(blocks[i]);
    blocks[i] = nullptr;
  }
}

}  // namespace

// A heap that drops part of its memory and still holds its live data
// densely (between two passes of its work) keeps the dropped memory for
// the next pass - for the purge delay, not beyond.
TEST(Purge, MemoryDroppedFromAPeakStaysForTheDelay) {
  if (!rerun_without_clock()) return;  // see "Purge tests" above
  std::vector<void*> blocks = small_blocks(64 * kMiB);
  ASSERT_EQ(std::count(blocks.begin(), blocks.end(), nullptr), 0);
  size_t purged_before = stats().purged;
  // 24 MiB of slabs emptied: far beyond the budget (12% of 40 MiB), and
  // less than what stays live.
  free_range(blocks, 0, blocks.size() * 3 / 8);
  auto nudge = [] { xalloc_free(xalloc_malloc(kUnkeptLarge)); };
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  nudge();
  EXPECT_LT(stats().purged - purged_before, 8 * kMiB) << "dropped memory purged within a tenth of the delay";
  auto start = std::chrono::steady_clock::now();
  while (stats().purged - purged_before < 16 * kMiB && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    nudge();
  }
  EXPECT_GE(stats().purged - purged_before, 16 * kMiB) << "dropped memory still resident 5 s later";
  free_range(blocks, 0, blocks.size());
}

// A heap whose slabs hold at least as much free space as it dropped gets
// no allowance: its next allocations fill those slabs first, so the memory
// of its emptied slabs goes back at once, as a burst beyond the budget.
TEST(Purge, SparseHeapGivesEmptiedSlabsBackAtOnce) {
  if (!rerun_without_clock()) return;  // see "Purge tests" above
  std::vector<void*> blocks = small_blocks(64 * kMiB);
  ASSERT_EQ(std::count(blocks.begin(), blocks.end(), nullptr), 0);
  size_t purged_before = stats().purged;
  // The second half: every other block freed, the slabs all kept by their
  // survivors (16 MiB live, 16 MiB of free blocks); then the first half
  // whole (32 MiB dropped).
  free_range(blocks, blocks.size() / 2, blocks.size(), 2);
  free_range(blocks, 0, blocks.size() / 2);
  EXPECT_GE(stats().purged - purged_before, 16 * kMiB) << "emptied slabs of a sparse heap kept resident";
  free_range(blocks, 0, blocks.size());
}

// Free memory still resident is taken before purged memory, even from a
// longer span: the program's next allocation faults nothing in.
TEST(Purge, ResidentFreeSpanIsTakenBeforeAShorterPurgedOne) {
  if (!rerun_without_clock()) return;  // see "Purge tests" above
  void* dirty = xalloc_malloc(6 * kMiB);
  void* guard1 = xalloc_malloc(2 * kMiB);
  void* purged = xalloc_malloc(3 * kMiB);
  void* guard2 = xalloc_malloc(2 * kMiB);
  ASSERT_TRUE(dirty != nullptr && guard1 != nullptr && purged != nullptr && guard2 != nullptr);
  memset(dirty, 1, 6 * kMiB);
  xalloc_free(purged);
  xalloc_trim(0);       // the 3 MiB span, and the rest of the segment, purged
  xalloc_free(dirty);   // within the budget's burst threshold: stays resident
  void* p = xalloc_malloc(kMiB + kMiB / 2);
  EXPECT_EQ(p, dirty) << "a purged span was taken while a resident one fitted";
  xalloc_free(p);
  xalloc_free(guard1);
  xalloc_free(guard2);
}

// A program that drops its memory and builds it up again round after round
// is a cycle, and keeps it, even when its frees are interleaved with a few
// takes - threads of a pool made anew for every batch exit one by one
// while the others still allocate. Judged against those few takes alone,
// each run of frees looked like a shrink, and every round was purged.
TEST(Purge, CycleWithTakesBetweenItsFreesKeepsItsMemory) {
  if (!rerun_without_clock()) return;  // see "Purge tests" above
  using Clock = std::chrono::steady_clock;
  constexpr size_t kBlock = kUnkeptLarge;
  constexpr int kBlocks = static_cast<int>(128 * kMiB / kBlock);
  constexpr int kFreesPerTake = 18;  // past the 16 spans freed with none taken that look like shrinking
  size_t purged_before = 0;
  auto slowest_round = Clock::duration::zero();
  for (int round = 0; round < 5; ++round) {
    if (round == 2) purged_before = stats().purged;  // the cycle is established
    auto start = Clock::now();
    std::vector<void*> blocks;
    for (int i = 0; i < kBlocks; ++i) {
      void* p = xalloc_malloc(kBlock);
      ASSERT_NE(p, nullptr);
      xtest::touch_pages(p, kBlock, 1);
      blocks.push_back(p);
    }
    std::vector<void*> taken;
    for (int i = 0; i < kBlocks; ++i) {
      xalloc_free(blocks[i]);
      if (i % kFreesPerTake == kFreesPerTake - 1) taken.push_back(xalloc_malloc(kBlock));
    }
    for (void* p : taken) xalloc_free(p);
    slowest_round = std::max(slowest_round, Clock::now() - start);
  }
  size_t purged = stats().purged - purged_before;
  // Rounds further apart than the purge delay (500 ms) are no cycle.
  if (slowest_round > std::chrono::milliseconds(400)) GTEST_SKIP() << "a round took longer than the purge delay allows";
  EXPECT_LT(purged, 16 * kMiB) << "a cycle's memory purged at every round";
  std::printf("purged in the last three rounds of 128 MiB: %zu KiB\n", purged >> 10);
}

// With the clock: a batch built, freed whole and built again keeps its
// pages (no free purges at once, nothing being live between two rounds),
// and once the program stops taking it back the clock returns it, with no
// call to the allocator.
TEST(Purge, WithAClockABatchFreedWholeStaysForItsRebuildThenGoesBack) {
  if (!rerun_with_clock()) return;  // see "Purge tests" above
  using Clock = std::chrono::steady_clock;
  constexpr size_t kBatch = 96 * kMiB;  // past the 64 MiB in use that start the clock
  std::vector<void*> blocks = small_blocks(kBatch);
  ASSERT_EQ(std::count(blocks.begin(), blocks.end(), nullptr), 0);
  size_t purged_before = stats().purged;
  auto start = Clock::now();
  for (int round = 0; round < 3; ++round) {
    free_range(blocks, 0, blocks.size());
    blocks = small_blocks(kBatch);
    ASSERT_EQ(std::count(blocks.begin(), blocks.end(), nullptr), 0);
  }
  size_t purged_in_rounds = stats().purged - purged_before;
  bool within_delay = Clock::now() - start < std::chrono::milliseconds(400);
  free_range(blocks, 0, blocks.size());
  size_t committed_freed = stats().committed;
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  xalloc_stats_t idle = stats();
  // (Rounds slower than the delay may have their memory purged between them.)
  if (within_delay) {
    EXPECT_LT(purged_in_rounds, 8 * kMiB) << "a batch freed whole was purged before its rebuild";
  }
  EXPECT_LE(idle.committed + 64 * kMiB, committed_freed)
      << "committed " << committed_freed << " -> " << idle.committed << " after 1.2 s idle";
  std::printf("purged while rebuilt: %zu KiB; committed %zu -> %zu KiB idle\n", purged_in_rounds >> 10,
              committed_freed >> 10, idle.committed >> 10);
}
