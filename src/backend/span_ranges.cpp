// The span allocator's part in XALLOC_HUGE_PAGES=auto (huge_ranges.h):
// which ranges a take opens or makes dense, their promotion, and the
// collapses that wait for the purger.
#include "backend/span_allocator.h"

#include "platform/os.h"
#include "support/counters.h"
#include "support/options.h"

namespace xalloc {

namespace {

// Keeps the deferred collapses for which keep(start, since_ms) holds, in
// their order.
template <typename Deferred, typename Keep>
void retain_deferred(Deferred& deferred, Keep keep) {
  size_t kept = 0;
  for (size_t i = 0; i < deferred.count; ++i) {
    if (!keep(deferred.start[i], deferred.since_ms[i])) continue;
    deferred.start[kept] = deferred.start[i];
    deferred.since_ms[kept++] = deferred.since_ms[i];
  }
  deferred.count = kept;
}

}  // namespace

uint32_t SpanAllocator::fresh_ranges_locked(const Segment* segment, size_t first, size_t count) const {
  uint32_t fresh = 0;
  for (uint32_t ranges = huge_ranges::ranges_of(first, count); ranges != 0; ranges &= ranges - 1) {
    size_t range = static_cast<size_t>(__builtin_ctz(ranges));
    if (segment->range_used[range] == 0 && segment_range_is_clean(segment, range * kRangeSlices, kRangeSlices))
      fresh |= 1u << range;
  }
  return fresh;
}

void SpanAllocator::note_ranges_taken_locked(Segment* segment, size_t first, size_t count, bool judge,
                                             bool collapse, uint32_t fresh, Page* rest,
                                             huge_ranges::Collapses& collapses) {
  huge_ranges::note_taken(segment, first, count);
  if (!judge) {
    // The heap is small (or auto is off, or a large block was taken):
    // sweep again once a slab is taken from a big heap.
    huge_swept_ = false;
    return;
  }
  if (!collapse) huge_swept_ = false;
  else if (!huge_swept_) sweep_dense_ranges_locked(collapses);
  bool opened = false;
  for (uint32_t ranges = huge_ranges::ranges_of(first, count); ranges != 0; ranges &= ranges - 1) {
    size_t range = static_cast<size_t>(__builtin_ctz(ranges));
    auto how = huge_ranges::promotion_for_take(huge_ranges::is_huge(segment, range), segment->range_used[range],
                                               (fresh >> range) & 1);
    if (how == huge_ranges::Promotion::kNone) continue;
    if (how == huge_ranges::Promotion::kCollapse && (!collapse || !huge_ranges::mostly_resident(segment, range)))
      continue;
    promote_locked(segment, range, how, collapses);
    opened |= how == huge_ranges::Promotion::kBeforeTouch;
  }
  // The rest of an opened range is resident from the first touch on, and
  // now free: its age starts now (a fresh segment's free span dates from
  // its creation, and the purge would split the new page at once).
  if (opened && rest != nullptr) rest->freed_at = os::monotonic_ms();
}

void SpanAllocator::promote_locked(Segment* segment, size_t range, huge_ranges::Promotion how,
                                   huge_ranges::Collapses& collapses) {
  huge_ranges::promote(segment, range);
  // A huge page makes the whole range resident: its free slices count as
  // such, and are purged (the page split) as any resident free memory.
  dirty_free_slices_ += segment_mark_dirty(segment, range * kRangeSlices, kRangeSlices);
  if (how == huge_ranges::Promotion::kCollapse) collapses.add(segment->slice_address(range * kRangeSlices));
  else stats::add(stats::g_global.faults_avoided, huge_ranges::kFaultsAvoidedPerRange);
}

void SpanAllocator::sweep_dense_ranges_locked(huge_ranges::Collapses& collapses) {
  for (Segment* segment = segments_; segment != nullptr; segment = segment->next) {
    for (size_t range = 0; range < kRangesPerSegment; ++range) {
      if (huge_ranges::is_huge(segment, range) || segment->range_used[range] < huge_ranges::kDenseSlices) continue;
      if (collapses.full()) return;  // the next take goes on
      if (!huge_ranges::mostly_resident(segment, range)) continue;
      promote_locked(segment, range, huge_ranges::Promotion::kCollapse, collapses);
    }
  }
  huge_swept_ = true;
}

void SpanAllocator::defer_collapses(const huge_ranges::Collapses& collapses) {
  uint64_t now = os::monotonic_ms();
  LockGuard guard(lock_);
  for (size_t i = 0; i < collapses.count && deferred_.count < DeferredCollapses::kMax; ++i) {
    deferred_.start[deferred_.count] = collapses.start[i];
    deferred_.since_ms[deferred_.count++] = now;
  }
}

void SpanAllocator::drop_deferred_collapses_locked(const Segment* segment) {
  retain_deferred(deferred_, [segment](uintptr_t start, uint64_t) { return segment_of(start) != segment; });
}

void SpanAllocator::collapse_deferred(uint64_t now_ms) {
  huge_ranges::Collapses due;
  {
    LockGuard guard(lock_);
    retain_deferred(deferred_, [&](uintptr_t start, uint64_t since_ms) {
      if (now_ms - since_ms < g_options.purge_delay_ms || due.full()) return true;
      // Purged in part since (demoted), or no longer mostly in use: it
      // stays on small pages.
      Segment* segment = segment_of(start);
      if (huge_ranges::keeps_page(segment, huge_ranges::range_of((start - segment->base()) >> kSliceShift)))
        due.add(start);
      return false;
    });
  }
  due.run();
}

}  // namespace xalloc
