// The span allocator's invariants, validated in debug builds
// (span_allocator.h).
#include "backend/span_allocator.h"

#include "support/debug.h"

namespace xalloc {

void SpanAllocator::check_invariants() {
  for (Segment* segment = segments_; segment != nullptr; segment = segment->next) {
    XALLOC_CHECK(segment->kind == SegmentKind::kNormal);
    XALLOC_CHECK(segment_map_entry(segment->base()) == kMapSegmentHead);
    [[maybe_unused]] size_t used = kHeaderSlices;
    [[maybe_unused]] size_t range_used[kRangesPerSegment] = {kHeaderSlices};
    size_t i = kHeaderSlices;
    while (i < kSlicesPerSegment) {
      Page* span = segment->page_of_slice[i];
      XALLOC_CHECK(span == &segment->pages[i]);
      XALLOC_CHECK(span->slice_count >= 1 && i + span->slice_count <= kSlicesPerSegment);
      XALLOC_CHECK(segment->page_of_slice[i + span->slice_count - 1] == span);
      bool free = is_free_kind(span->kind());
      for (size_t j = i; j < i + span->slice_count; ++j) {
        [[maybe_unused]] Page* entry = segment->page_of_slice[j];
        if (!free) {
          XALLOC_CHECK(entry == span);
        } else {
          // The slice map's invariant (span_allocator.h); a span being
          // purged keeps the entries it had in the bins.
          XALLOC_CHECK(entry >= span);
          XALLOC_CHECK(entry <= &segment->pages[j]);
          XALLOC_CHECK(entry == span || entry->kind() == PageKind::kFree);
          if (j > i && j + 1 < i + span->slice_count) XALLOC_CHECK(entry >= segment->page_of_slice[j - 1]);
        }
      }
      if (!free) used += span->slice_count;
      for (size_t j = i; j < i + span->slice_count && !free; ++j) ++range_used[huge_ranges::range_of(j)];
      // Free neighbours are merged (but for spans being purged, which merge
      // when they come back).
      if (span->kind() == PageKind::kFree && i + span->slice_count < kSlicesPerSegment)
        XALLOC_CHECK(segment->page_of_slice[i + span->slice_count]->kind() != PageKind::kFree);
      i += span->slice_count;
    }
    XALLOC_CHECK(used == segment->used_slices);
    for (size_t r = 0; r < kRangesPerSegment; ++r) XALLOC_CHECK(range_used[r] == segment->range_used[r]);
  }
  for (size_t b = 0; b < kBins; ++b) {
    XALLOC_CHECK((bins_[b] != nullptr) == (((nonempty_bins_ >> b) & 1) != 0));
    for (Page* span = bins_[b]; span != nullptr; span = span->next) {
      XALLOC_CHECK(span->kind() == PageKind::kFree);
      XALLOC_CHECK(bin_of(span->slice_count) == b);
      if (span->next != nullptr) XALLOC_CHECK(span->next->prev == span);
    }
  }
  for (Page* span = purging_; span != nullptr; span = span->next) {
    XALLOC_CHECK(span->kind() == PageKind::kPurging);
    if (span->next != nullptr) XALLOC_CHECK(span->next->prev == span);
  }
}

}  // namespace xalloc
