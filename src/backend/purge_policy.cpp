#include "backend/purge_policy.h"

#include "support/options.h"

namespace xalloc {

XALLOC_STARTUP_DATA std::atomic<unsigned> g_budget_boost{0};
XALLOC_FORK_DATA std::atomic<bool> g_purge_clock{false};

namespace {
// How far a burst of frees may go beyond the budget before it is given
// back at once (burst_threshold_bytes); and how far memory in use may fall
// from its recent peak, in how many spans freed with none taken in
// between, before the boost is over (PurgePolicy::release_shrinks).
constexpr size_t kBurstSlack = size_t{16} << 20;
constexpr size_t kShrinkingSpans = 16;
// While shrinking, free memory beyond the allowance is purged in batches
// of about this much: a system call per span freed would slow the frees
// down, and in batches coalesced spans go back together.
constexpr size_t kShrinkingSlack = size_t{4} << 20;
}  // namespace

size_t PurgePolicy::budget_for(size_t in_use, unsigned boost) {
  constexpr size_t kMinimum = size_t{4} << 20;
  size_t share = in_use / 100 * g_options.dirty_percent;
  return (share > kMinimum ? share : kMinimum) << boost;
}

size_t dirty_budget_bytes() {
  size_t in_use = stats::in_use_bytes();
  return PurgePolicy::budget_for(in_use, g_budget_boost.load(std::memory_order_relaxed));
}

unsigned dirty_budget_boost() { return g_budget_boost.load(std::memory_order_relaxed); }

size_t burst_threshold_bytes(size_t budget) {
  return budget * 2 > budget + kBurstSlack ? budget * 2 : budget + kBurstSlack;
}

size_t PurgePolicy::budget_bytes() const {
  size_t in_use = in_use_bytes_();
  return budget_for(in_use, boost());
}

// Free memory beyond the budget may stay resident for the whole delay when
// it is what the program freed since its recent peak and may well take
// again: a program whose statements, requests or passes each build up
// memory and drop it takes it back in the next one, often a few hundred
// milliseconds later, and would fault all of it in again. The allowance
// adds to the budget what was freed since the peak of memory in use over
// the last delay, up to what is still live, less the free blocks already
// resident inside slabs, which the program's next allocations fill first.
// So a heap that dropped most of its live data (a phase ended for good),
// or whose slabs are left sparse (90% of a fragmented heap freed: memory in
// use, counted by slabs, falls little, but the slabs hold more free space
// than was dropped), has no allowance, and its free memory goes back at
// once or after a tenth of the delay. The allowance does not raise the
// peak: memory in use plus memory held stays at most the recent peak plus
// the budget, held memory is taken before fresh memory (the span
// allocator's take_fitting), and as the program grows back the allowance
// shrinks. Memory older than the delay is purged whatever the allowance.
//
// While a clock runs (dirty_allowance_bytes), everything freed since the
// recent peak may stay, live data or not: a batch that is built, freed
// whole and built again has nothing live between two rounds, and the clock
// still returns what the program does not take back once the peak is a
// delay old. Without a clock that would be memory no call may come back
// for, so the allowance is what is likely taken again, as above.
size_t PurgePolicy::held_for_reuse(size_t in_use, size_t peak) const {
  size_t live = live_bytes_ < in_use ? live_bytes_ : in_use;
  size_t slab_free = in_use - live;
  size_t dropped = peak - in_use;
  size_t held = dropped < live ? dropped : live;
  return held > slab_free ? held - slab_free : 0;
}

// Only free memory beyond the budget needs the live bytes, whose count
// walks every span: once a review period, or sooner when memory in use
// moved by a sixteenth since the last walk (in a burst of frees, live data
// falls far faster than memory in use, which counts a slab until it
// empties), so the walks of one burst cost a few times one walk of its
// peak.
bool PurgePolicy::live_count_due(uint64_t now_ms, size_t in_use) const {
  size_t moved = in_use > live_counted_in_use_ ? in_use - live_counted_in_use_ : live_counted_in_use_ - in_use;
  return now_ms >= next_live_count_ms_ || moved > live_counted_in_use_ / 16;
}

void PurgePolicy::note_live_count(size_t live, size_t in_use, uint64_t now_ms) {
  live_bytes_ = live;
  live_counted_in_use_ = in_use;
  next_live_count_ms_ = now_ms + g_options.purge_delay_ms / 10;
}

// The most memory in use over the last delay, now included.
size_t PurgePolicy::recent_peak_in_use() const {
  size_t peak = in_use_bytes_();
  for (size_t p : in_use_peaks_) peak = p > peak ? p : peak;
  return peak;
}

void PurgePolicy::note_release(size_t in_use) {
  if (in_use > in_use_peaks_[peak_period_]) in_use_peaks_[peak_period_] = in_use;
  ++freed_since_take_spans_;
}

// The boost keeps memory for a program that takes back what it frees. One
// whose memory in use falls this far, span after span with none taken, is
// shrinking - a phase or the whole job is over, and it may well go idle
// now, with no call left to run the delayed purge - so the budget is its
// own size again and what it frees from now on beyond the allowance goes
// back at once, in batches. (A program that churns takes memory between
// its frees, or keeps its memory in use level while empty slabs pass
// through the slab pool, even when each of its frees is a block of many
// MiB.)
bool PurgePolicy::release_shrinks(uint64_t now_ms, size_t in_use) {
  if (freed_since_take_spans_ < kShrinkingSpans) return false;
  size_t recent_peak = recent_peak_in_use();
  if (recent_peak <= in_use + kBurstSlack || shrink_is_a_cycle(now_ms, recent_peak)) return false;
  end_boost();
  return true;
}

// A burst of frees far beyond the allowance (a phase of the program ended)
// is given back at once: no later allocation may come to trigger the
// delayed purge. While a clock runs, one will: the burst waits its tenth
// of the delay like any excess, and a program that builds its batch again
// at once (one thread builds, others consume and free) keeps its pages.
bool PurgePolicy::is_burst(size_t dirty_free_slices, size_t allowance_bytes, bool shrinking) const {
  if (clock_runs()) return false;
  size_t cap_bytes = shrinking ? allowance_bytes + kShrinkingSlack : burst_threshold_bytes(allowance_bytes);
  return dirty_free_slices > cap_bytes >> kSliceShift;
}

void PurgePolicy::note_take(size_t slices) {
  freed_since_take_spans_ = 0;
  in_shrink_episode_ = false;
  taken_since_shrink_ += slices << kSliceShift;
}

// A program that drops its memory and builds it up again within the delay,
// over and over (a batch of big buffers per request or per item, freed
// together), is churning, not shrinking: it will take the memory back, and
// purged, every page of it would be faulted in again at every turn. The
// first free that looks like shrinking decides for the whole run of frees
// up to the next take (an episode): a cycle when, since the decision
// before, within the delay, the program took back at least half of the
// peak it then fell from. The first episode is a shrink. A run of frees
// that comes within the delay of a decision, with less than that taken
// back since, is the same shrink or cycle resumed: threads that exit one
// by one while others still work (a pool of workers made anew for every
// batch) interleave a few takes with their frees, and judged against those
// few takes alone, every turn of such a cycle would pass for a shrink and
// be purged. A cycle keeps its boost and the burst rule (twice the budget
// and allowance), so memory it holds at the end of its last turn is
// bounded and goes back at the next call or with the background purger.
bool PurgePolicy::shrink_is_a_cycle(uint64_t now_ms, size_t recent_peak) {
  if (in_shrink_episode_) return episode_is_cycle_;
  in_shrink_episode_ = true;
  bool within_delay = last_shrink_ms_ != 0 && now_ms < last_shrink_ms_ + g_options.purge_delay_ms;
  bool took_back = taken_since_shrink_ * 2 >= last_shrink_peak_;
  if (within_delay && !took_back) return episode_is_cycle_;
  episode_is_cycle_ = within_delay && took_back;
  last_shrink_ms_ = now_ms;
  last_shrink_peak_ = recent_peak;
  taken_since_shrink_ = 0;
  return episode_is_cycle_;
}

void PurgePolicy::note_dirty_free(size_t dirty_free_slices) {
  if (dirty_free_slices > peak_dirty_free_slices_) peak_dirty_free_slices_ = dirty_free_slices;
}

uint32_t PurgePolicy::note_budget_purge(size_t slices) {
  budget_purged_slices_ += slices;
  return budget_epoch_;
}

// Untouched slices taken while memory purged for the budget in this period
// waits unused cost the same page faults as taking that memory, and count
// too, up to what was purged: a program that frees 32 MiB over two
// segments and allocates it again may be given the untouched rest of one
// segment before the purged slices of the other.
void PurgePolicy::note_reuse(size_t reused, size_t clean) {
  size_t unclaimed = budget_purged_slices_ > budget_reused_slices_ ? budget_purged_slices_ - budget_reused_slices_ : 0;
  size_t standing_in = clean < unclaimed ? clean : unclaimed;
  if (standing_in > reused) reused = standing_in;
  if (reused == 0) return;
  budget_reused_slices_ += reused;
  boost_if_purged_memory_comes_back();
}

// As for spans (segment_take_budget_purged): purged in this review period
// or the one before.
void PurgePolicy::note_reuse_of_epoch(uint32_t epoch, size_t slices) {
  if (epoch + 1 < budget_epoch_) return;
  budget_reused_slices_ += slices;
  boost_if_purged_memory_comes_back();
}

// A shrinking program's budget is its base size again (release_shrinks).
void PurgePolicy::end_boost() {
  set_boost(0);
  calm_periods_ = 0;
}

// Whether at least half of the memory purged for the budget in this review
// period (and at least 1 MiB) has been taken again.
bool PurgePolicy::purged_memory_comes_back() const {
  constexpr size_t kMinimumEvidence = (size_t{1} << 20) >> kSliceShift;
  return budget_reused_slices_ >= kMinimumEvidence && budget_reused_slices_ * 2 >= budget_purged_slices_;
}

// The boost starts as soon as the evidence is in, not at the end of the
// review period: a program that frees and takes back memory every few
// milliseconds would otherwise fault all of it in again a dozen times
// first.
void PurgePolicy::boost_if_purged_memory_comes_back() {
  if (!purged_memory_comes_back()) return;
  set_boost(kMaxBoost);
  calm_periods_ = 0;
}

// The budget holds free memory for a tenth of the purge delay and is a
// share of the memory in use, which suits most programs; but one that
// frees and takes back more than that share within the delay - a buffer
// that grows by realloc, large blocks replaced one by one - would have its
// memory purged and faulted in again over and over (a page fault for every
// page it reuses). So every review period (a tenth of the delay) looks at
// what happened to the memory purged for the budget: when at least half of
// it was taken again (and at least 1 MiB), the budget becomes sixteen
// times its size; once free memory has stayed within the budget one step
// smaller for a whole delay, it halves. (Not after one calm period: a
// program that churns in cycles longer than that would have its budget
// back at x1 before each cycle's memory is taken again.) It only ever
// holds memory for part of the delay: the delay itself still purges
// everything older.
void PurgePolicy::review(uint64_t now_ms, size_t dirty_free_slices) {
  if (now_ms < next_budget_review_ms_) return;
  peak_period_ = (peak_period_ + 1) % kPeakPeriods;
  in_use_peaks_[peak_period_] = in_use_bytes_();
  uint64_t period = g_options.purge_delay_ms / 10;
  next_budget_review_ms_ = now_ms + (period > 10 ? period : 10);
  unsigned boost = boost_->load(std::memory_order_relaxed);
  size_t budget = budget_bytes() >> kSliceShift;
  if (purged_memory_comes_back()) {
    boost = kMaxBoost;
    calm_periods_ = 0;
  } else if (boost > 0 && peak_dirty_free_slices_ <= budget / 2) {
    if (++calm_periods_ == kCalmPeriodsPerStep) {
      --boost;
      calm_periods_ = 0;
    }
  } else {
    calm_periods_ = 0;
  }
  set_boost(boost);
  budget_purged_slices_ = 0;
  budget_reused_slices_ = 0;
  peak_dirty_free_slices_ = dirty_free_slices;
  ++budget_epoch_;
}

}  // namespace xalloc
