// The purge policy: how much free memory the span allocator keeps resident
// for reuse, and when. Free spans wait the whole purge delay before their
// pages go back to the OS (span_allocator.h); free memory beyond a budget
// proportional to the memory in use (dirty_budget_bytes), and beyond what
// was freed since a recent peak and may be taken again (the allowance),
// gets a tenth of the delay, so memory that is freed and not reused does
// not inflate the footprint; and beyond twice that (and 16 MiB more), a
// burst, it is purged at once.
//
// With a purger's clock (g_purge_clock), nothing is purged at once: what
// was freed since the recent peak may wait the whole delay, so a program
// that builds a batch, frees it and builds it again keeps its pages.
//
// The budget learns from the program: memory purged to keep within it and
// taken again soon after boosts it (sixteen times), a whole delay of calm
// steps the boost down, and a program that shrinks has it ended.
//
// The policy decides; the span allocator does (bins, purges, segments). It
// has no lock of its own: its owner calls every member under the owner's
// lock, which guards all of the policy's state. Only the boost is read
// without that lock, by anyone (dirty_budget_bytes), through an atomic
// that only the lock holder writes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/config.h"
#include "support/counters.h"

namespace xalloc {

// How much free memory may stay resident, waiting for reuse: a share
// (XALLOC_DIRTY_PERCENT) of the memory in use, and at least 4 MiB; up to
// sixteen times that while the program keeps taking back memory that was
// purged to keep within it.
size_t dirty_budget_bytes();
// log2 of that factor (statistics).
unsigned dirty_budget_boost();
// Free memory beyond this, twice the budget and at least the budget plus
// 16 MiB, is a burst (a phase of the program ended): purged as soon as it
// is released, by the span allocator and the huge cache alike.
size_t burst_threshold_bytes(size_t budget);

// The process's boost (a shift), which dirty_budget_bytes() reads: written
// by the policy of the process's span allocator, under its lock.
extern std::atomic<unsigned> g_budget_boost;

// Whether a thread purges on a clock (the frontend's purger, which sets
// this once it runs): then no free has to purge at once for fear that no
// later call comes to do it.
extern std::atomic<bool> g_purge_clock;

class PurgePolicy {
 public:
  static constexpr unsigned kMaxBoost = 4;
  // Review periods (a tenth of the delay each) of calm before the boost
  // steps down: a whole delay.
  static constexpr unsigned kCalmPeriodsPerStep = 10;

  // Where the policy reads the memory in use and publishes the boost.
  struct Inputs {
    size_t (*in_use_bytes)();
    std::atomic<unsigned>* boost;
    const std::atomic<bool>* clock;
  };
  // The process's: its counters, the boost dirty_budget_bytes() reads, and
  // its purger's clock.
  constexpr PurgePolicy() = default;
  // A test's own.
  constexpr explicit PurgePolicy(Inputs inputs)
      : in_use_bytes_(inputs.in_use_bytes), boost_(inputs.boost), clock_(inputs.clock) {}

  // The budget with `in_use` bytes in use and boost `boost`.
  static size_t budget_for(size_t in_use, unsigned boost);
  // The budget now, and its boost (dirty_budget_bytes, from these inputs).
  size_t budget_bytes() const;
  unsigned boost() const { return boost_->load(std::memory_order_relaxed); }
  // The review period: memory purged for the budget is marked with it.
  uint32_t epoch() const { return budget_epoch_; }

  // Free memory that may stay resident beyond a tenth of the delay: the
  // budget, plus what the program freed since its recent peak and may take
  // again (purge_policy.cpp). `dirty_free_slices`: free slices that may be
  // resident now; `count_live()`: bytes of live blocks, a walk of every
  // span, called only when the estimate is due (never while a clock runs).
  template <typename CountLive>
  size_t dirty_allowance_bytes(uint64_t now_ms, size_t dirty_free_slices, CountLive count_live) {
    size_t budget = budget_bytes();
    if (dirty_free_slices <= budget >> kSliceShift) return budget;
    size_t in_use = in_use_bytes_();
    size_t peak = recent_peak_in_use();
    if (peak == in_use) return budget;
    if (clock_runs()) return budget + (peak - in_use);
    if (live_count_due(now_ms, in_use)) note_live_count(count_live(), in_use, now_ms);
    return budget + held_for_reuse(in_use, peak);
  }

  // Whether a purger's clock runs (g_purge_clock).
  bool clock_runs() const { return clock_->load(std::memory_order_relaxed); }

  // A span is about to be released, with `in_use` bytes in use counting it.
  void note_release(size_t in_use);
  // After that release (`in_use`: bytes in use without it): whether the
  // program is shrinking, which ends the boost.
  bool release_shrinks(uint64_t now_ms, size_t in_use);
  // Whether `dirty_free_slices` free slices resident are a burst to give
  // back at once, given the allowance and whether the program shrinks.
  bool is_burst(size_t dirty_free_slices, size_t allowance_bytes, bool shrinking) const;

  // `slices` slices were taken from the free spans.
  void note_take(size_t slices);
  // Free slices that may be resident now, after a release (their peak in
  // each review period).
  void note_dirty_free(size_t dirty_free_slices);
  // `slices` slices purged only to keep within the budget; returns the
  // review period they count in.
  uint32_t note_budget_purge(size_t slices);
  // A take of which `reused` slices were purged for the budget shortly
  // before and `clean` were not resident.
  void note_reuse(size_t reused, size_t clean);
  // `slices` purged for the budget in review period `epoch`, taken again.
  void note_reuse_of_epoch(uint32_t epoch, size_t slices);
  // Closes the review period once it is over (`dirty_free_slices`: free
  // slices that may be resident now).
  void review(uint64_t now_ms, size_t dirty_free_slices);

 private:
  // How many review periods of peaks of memory in use make the recent
  // peak: a whole delay.
  static constexpr size_t kPeakPeriods = 10;

  size_t recent_peak_in_use() const;
  bool live_count_due(uint64_t now_ms, size_t in_use) const;
  void note_live_count(size_t live, size_t in_use, uint64_t now_ms);
  size_t held_for_reuse(size_t in_use, size_t peak) const;
  bool shrink_is_a_cycle(uint64_t now_ms, size_t recent_peak);
  bool purged_memory_comes_back() const;
  void boost_if_purged_memory_comes_back();
  void end_boost();
  void set_boost(unsigned boost) { boost_->store(boost, std::memory_order_relaxed); }

  size_t (*in_use_bytes_)() = stats::in_use_bytes;
  std::atomic<unsigned>* boost_ = &g_budget_boost;
  const std::atomic<bool>* clock_ = &g_purge_clock;
  // The budget's feedback, per review period (epoch): slices purged for the
  // budget, slices of those taken again, and the most free slices resident
  // at once.
  uint32_t budget_epoch_ = 1;
  uint64_t next_budget_review_ms_ = 0;
  size_t budget_purged_slices_ = 0;
  size_t budget_reused_slices_ = 0;
  size_t peak_dirty_free_slices_ = 0;
  unsigned calm_periods_ = 0;  // review periods in a row in which the boost could have stepped down
  size_t freed_since_take_spans_ = 0;  // spans released since one was last taken
  // Shrink episodes (shrink_is_a_cycle): whether frees are in one and what
  // it was found to be; when the last one began, the recent peak of memory
  // in use it fell from, and the bytes taken since.
  bool in_shrink_episode_ = false;
  bool episode_is_cycle_ = false;
  uint64_t last_shrink_ms_ = 0;
  size_t last_shrink_peak_ = 0;
  size_t taken_since_shrink_ = 0;
  // The most memory in use seen in each of the last kPeakPeriods review
  // periods, this one's at peak_period_; and the live bytes counted last,
  // the memory in use then, and when to count again.
  size_t in_use_peaks_[kPeakPeriods] = {};
  size_t peak_period_ = 0;
  size_t live_bytes_ = 0;
  size_t live_counted_in_use_ = 0;
  uint64_t next_live_count_ms_ = 0;
};

}  // namespace xalloc
