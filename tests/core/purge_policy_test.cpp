// The purge policy's decisions (purge_policy.h) on synthetic demand: a
// policy of the test's own, with the memory in use, the boost and the clock
// given by the test.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/purge_policy.h"
#include "support/options.h"

namespace {

using xalloc::PurgePolicy;

constexpr size_t kMiB = size_t{1} << 20;

constexpr size_t slices(size_t bytes) { return bytes >> xalloc::kSliceShift; }

size_t g_in_use = 0;  // the memory in use the policy under test reads
size_t test_in_use() { return g_in_use; }

class PurgePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override { g_in_use = 100 * kMiB; }

  static uint64_t review_period() {
    uint64_t period = xalloc::g_options.purge_delay_ms / 10;
    return period > 10 ? period : 10;
  }
  static size_t base_budget() { return PurgePolicy::budget_for(g_in_use, 0); }

  // Moves the clock on by a review period and closes it, with
  // `dirty_free_slices` free slices resident.
  void next_period(size_t dirty_free_slices = 0) {
    now_ += review_period();
    policy_.review(now_, dirty_free_slices);
  }
  // `purged` bytes purged for the budget, `taken_back` of them taken again.
  void purge_and_take_back(size_t purged, size_t taken_back) {
    policy_.note_budget_purge(slices(purged));
    policy_.note_take(slices(taken_back));
    policy_.note_reuse(slices(taken_back), 0);
  }
  void boost_fully() {
    purge_and_take_back(8 * kMiB, 8 * kMiB);
    ASSERT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
  }
  // Frees `spans` spans of `span_bytes` each, none taken in between, the
  // memory in use falling from the counter's value; whether the last one
  // was judged a shrink.
  bool free_spans(size_t spans, size_t span_bytes) {
    bool shrinks = false;
    for (size_t i = 0; i < spans; ++i) {
      policy_.note_release(g_in_use);
      g_in_use -= span_bytes;
      shrinks = policy_.release_shrinks(now_, g_in_use);
    }
    return shrinks;
  }
  size_t allowance(size_t dirty_free_slices, size_t live) {
    return policy_.dirty_allowance_bytes(now_, dirty_free_slices, [&] {
      ++live_counts_;
      return live;
    });
  }

  std::atomic<unsigned> boost_{0};
  std::atomic<bool> clock_{false};
  PurgePolicy policy_{{test_in_use, &boost_, &clock_}};
  uint64_t now_ = 1000;
  int live_counts_ = 0;
};

TEST_F(PurgePolicyTest, SteadyHeapKeepsBaseBudget) {
  // 12% of 100 MiB, the default share.
  EXPECT_EQ(policy_.budget_bytes(), 100 * kMiB / 100 * xalloc::g_options.dirty_percent);
  for (int period = 0; period < 50; ++period) {
    policy_.note_release(g_in_use);
    policy_.note_take(4);
    policy_.note_dirty_free(slices(base_budget()));
    // Purged for the budget, never taken back.
    policy_.note_budget_purge(slices(2 * kMiB));
    next_period(slices(base_budget() / 2));
  }
  EXPECT_EQ(policy_.boost(), 0u);
  EXPECT_EQ(policy_.budget_bytes(), base_budget());
  EXPECT_EQ(boost_.load(), 0u);
}

TEST_F(PurgePolicyTest, BudgetHasAFloorOf4MiB) {
  g_in_use = 1 * kMiB;
  EXPECT_EQ(policy_.budget_bytes(), 4 * kMiB);
}

TEST_F(PurgePolicyTest, PurgedMemoryTakenBackRaisesBoost) {
  purge_and_take_back(8 * kMiB, 4 * kMiB);  // half of it: at once, not at the review
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
  EXPECT_EQ(policy_.budget_bytes(), base_budget() << PurgePolicy::kMaxBoost);
  next_period();
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
}

TEST_F(PurgePolicyTest, LittleTakenBackLeavesBudget) {
  purge_and_take_back(8 * kMiB, 4 * kMiB - xalloc::kSliceSize);  // less than half
  EXPECT_EQ(policy_.boost(), 0u);
  next_period();
  purge_and_take_back(kMiB / 2, kMiB / 2);  // all of it, but under 1 MiB
  next_period();
  EXPECT_EQ(policy_.boost(), 0u);
}

TEST_F(PurgePolicyTest, UntouchedSlicesStandInOnlyForPurgedMemory) {
  policy_.note_reuse(0, slices(64 * kMiB));  // nothing was purged for the budget
  EXPECT_EQ(policy_.boost(), 0u);
  policy_.note_budget_purge(slices(8 * kMiB));
  policy_.note_reuse(0, slices(4 * kMiB));
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
}

TEST_F(PurgePolicyTest, CalmPeriodsStepBoostDown) {
  boost_fully();
  next_period();  // the period the evidence came in
  for (unsigned step = PurgePolicy::kMaxBoost; step > 0; --step) {
    for (unsigned calm = 1; calm < PurgePolicy::kCalmPeriodsPerStep; ++calm) {
      next_period();
      ASSERT_EQ(policy_.boost(), step) << "after " << calm << " calm periods";
    }
    next_period();
    EXPECT_EQ(policy_.boost(), step - 1);
  }
  EXPECT_EQ(policy_.budget_bytes(), base_budget());
}

TEST_F(PurgePolicyTest, BusyPeriodRestartsTheCalm) {
  boost_fully();
  next_period();
  for (unsigned calm = 1; calm < PurgePolicy::kCalmPeriodsPerStep; ++calm) next_period();
  // Free memory beyond the budget one step smaller: not calm.
  policy_.note_dirty_free(slices(policy_.budget_bytes() / 2) + 1);
  next_period();
  for (unsigned calm = 1; calm < PurgePolicy::kCalmPeriodsPerStep; ++calm) next_period();
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
  next_period();
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost - 1);
}

TEST_F(PurgePolicyTest, NoReviewBeforeThePeriodEnds) {
  boost_fully();
  next_period();
  for (unsigned calm = 1; calm < PurgePolicy::kCalmPeriodsPerStep; ++calm) next_period();
  policy_.review(now_ + review_period() - 1, 0);  // too early: no calm period counted
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
  next_period();
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost - 1);
}

TEST_F(PurgePolicyTest, BurstBeyondTwiceTheBudget) {
  EXPECT_EQ(xalloc::burst_threshold_bytes(4 * kMiB), 20 * kMiB);  // the budget and 16 MiB more
  EXPECT_EQ(xalloc::burst_threshold_bytes(64 * kMiB), 128 * kMiB);
  EXPECT_FALSE(policy_.is_burst(slices(128 * kMiB), 64 * kMiB, false));
  EXPECT_TRUE(policy_.is_burst(slices(128 * kMiB) + 1, 64 * kMiB, false));
  EXPECT_FALSE(policy_.is_burst(slices(20 * kMiB), 4 * kMiB, false));
  EXPECT_TRUE(policy_.is_burst(slices(20 * kMiB) + 1, 4 * kMiB, false));
  // Shrinking: beyond the allowance and 4 MiB.
  EXPECT_FALSE(policy_.is_burst(slices(68 * kMiB), 64 * kMiB, true));
  EXPECT_TRUE(policy_.is_burst(slices(68 * kMiB) + 1, 64 * kMiB, true));
}

TEST_F(PurgePolicyTest, NoBurstWhileAClockRuns) {
  clock_ = true;
  EXPECT_FALSE(policy_.is_burst(slices(1024 * kMiB), 4 * kMiB, false));
  EXPECT_FALSE(policy_.is_burst(slices(1024 * kMiB), 4 * kMiB, true));
}

TEST_F(PurgePolicyTest, WithAClockTheAllowanceIsEverythingFreedSinceTheRecentPeak) {
  // A batch built and freed whole: nothing is live, yet the batch is built
  // again, so all of it may wait for the delay; the peak's age purges it.
  clock_ = true;
  policy_.note_release(100 * kMiB);
  g_in_use = 2 * kMiB;
  size_t dirty = slices(98 * kMiB);
  EXPECT_EQ(allowance(dirty, 0), PurgePolicy::budget_for(2 * kMiB, 0) + 98 * kMiB);
  EXPECT_EQ(live_counts_, 0);  // no walk of the spans needed
  for (size_t period = 0; period < 10; ++period) next_period(dirty);
  EXPECT_EQ(allowance(dirty, 0), PurgePolicy::budget_for(2 * kMiB, 0));
}

TEST_F(PurgePolicyTest, AllowanceIncludesWhatWasFreedSinceRecentPeak) {
  policy_.note_release(100 * kMiB);
  g_in_use = 60 * kMiB;
  size_t budget = base_budget();
  // 40 MiB dropped, 50 MiB live: 10 MiB free inside slabs is filled first.
  EXPECT_EQ(allowance(slices(budget) + 1, 50 * kMiB), budget + 30 * kMiB);
  EXPECT_EQ(live_counts_, 1);
}

TEST_F(PurgePolicyTest, AllowanceIsTheBudgetWithoutADrop) {
  size_t budget = base_budget();
  EXPECT_EQ(allowance(slices(budget), 10 * kMiB), budget);  // within the budget
  EXPECT_EQ(allowance(slices(budget) + 1, 10 * kMiB), budget);  // at its peak
  EXPECT_EQ(live_counts_, 0);
  // Most of the live data dropped: the slabs hold more free space than fell.
  policy_.note_release(100 * kMiB);
  g_in_use = 60 * kMiB;
  EXPECT_EQ(allowance(slices(base_budget()) + 1, 10 * kMiB), base_budget());
}

TEST_F(PurgePolicyTest, LiveBytesCountedOncePerPeriodOrWhenInUseMoves) {
  policy_.note_release(100 * kMiB);
  g_in_use = 64 * kMiB;
  size_t dirty = slices(100 * kMiB);
  allowance(dirty, 60 * kMiB);
  EXPECT_EQ(allowance(dirty, 40 * kMiB), base_budget() + 36 * kMiB - 4 * kMiB);  // the count before
  EXPECT_EQ(live_counts_, 1);
  g_in_use = 60 * kMiB;  // moved by a sixteenth: not more
  allowance(dirty, 40 * kMiB);
  EXPECT_EQ(live_counts_, 1);
  g_in_use = 60 * kMiB - 1;
  allowance(dirty, 40 * kMiB);
  EXPECT_EQ(live_counts_, 2);
  now_ += review_period();
  allowance(dirty, 40 * kMiB);
  EXPECT_EQ(live_counts_, 3);
}

TEST_F(PurgePolicyTest, RecentPeakLastsAWholeDelay) {
  policy_.note_release(100 * kMiB);
  g_in_use = 60 * kMiB;
  // Nine review periods after the peak's: still within the delay.
  for (int period = 0; period < 9; ++period) next_period();
  size_t dirty = slices(100 * kMiB);
  EXPECT_GT(allowance(dirty, 60 * kMiB), base_budget());
  next_period();
  EXPECT_EQ(allowance(dirty, 60 * kMiB), base_budget());
}

TEST_F(PurgePolicyTest, ShrinkEndsBoost) {
  boost_fully();
  EXPECT_FALSE(free_spans(15, 2 * kMiB));  // 30 MiB below the peak, but 15 spans
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
  EXPECT_TRUE(free_spans(1, 2 * kMiB));
  EXPECT_EQ(policy_.boost(), 0u);
}

TEST_F(PurgePolicyTest, SmallFallIsNoShrink) {
  boost_fully();
  EXPECT_FALSE(free_spans(32, kMiB / 2));  // 16 MiB below the peak: not beyond it
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
}

TEST_F(PurgePolicyTest, TakingBackHalfThePeakWithinTheDelayIsACycle) {
  boost_fully();
  EXPECT_TRUE(free_spans(20, 2 * kMiB));  // the first episode: a shrink
  boost_fully();
  now_ += xalloc::g_options.purge_delay_ms / 2;
  policy_.note_take(slices(42 * kMiB));  // with the 8 MiB before, half the peak it fell from
  g_in_use += 40 * kMiB;
  EXPECT_FALSE(free_spans(20, 2 * kMiB));
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
  // The same cycle resumed after a few takes.
  policy_.note_take(1);
  EXPECT_FALSE(free_spans(20, kMiB));
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
}

TEST_F(PurgePolicyTest, TakingBackLessThanHalfIsTheShrinkResumed) {
  boost_fully();
  EXPECT_TRUE(free_spans(20, 2 * kMiB));
  boost_fully();
  policy_.note_take(slices(41 * kMiB));  // with the 8 MiB before, less than half of the 100 MiB peak
  g_in_use += 40 * kMiB;
  EXPECT_TRUE(free_spans(20, 2 * kMiB));
  EXPECT_EQ(policy_.boost(), 0u);
}

TEST_F(PurgePolicyTest, HugeReuseCountsInItsPeriodAndTheNext) {
  uint32_t epoch = policy_.note_budget_purge(slices(8 * kMiB));
  next_period();
  next_period();
  policy_.note_reuse_of_epoch(epoch, slices(8 * kMiB));  // two periods on: too late
  EXPECT_EQ(policy_.boost(), 0u);
  epoch = policy_.note_budget_purge(slices(8 * kMiB));
  EXPECT_EQ(epoch, policy_.epoch());
  next_period();
  policy_.note_reuse_of_epoch(epoch, slices(8 * kMiB));
  EXPECT_EQ(policy_.boost(), PurgePolicy::kMaxBoost);
}

}  // namespace
