// The span allocator's slice map (span_allocator.h) through sequences of
// takes, frees and purges that threads can only reach by chance: a span
// allocator of the test's own, stepped one stage at a time.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "meta/page.h"
#include "backend/segment.h"
#include "backend/span_allocator.h"
#include "test_util.h"

namespace xalloc {

struct SpanAllocatorTestPeer {
  // Runs `meanwhile` while the free span `span` is out of the bins, its
  // pages being given back, as another thread's purge would have it (a span
  // with nothing resident is not purged: then false, and only `meanwhile`).
  template <typename Fn>
  static bool purge_around(SpanAllocator& spans, Page* span, Fn meanwhile) {
    SpanAllocator::PurgeBatch batch;
    {
      LockGuard guard(spans.lock_);
      spans.detach_for_purge_locked(span, batch);
    }
    meanwhile();
    bool purged = batch.count == 1;
    spans.finish_purge(batch, 0);
    return purged;
  }

  static Segment* segments(SpanAllocator& spans) { return spans.segments_; }
};

}  // namespace xalloc

namespace {

using xalloc::Page;
using xalloc::PageKind;
using xalloc::Segment;

Page* take(xalloc::SpanAllocator& spans, size_t slices) {
  bool is_zero = false;
  Page* span = spans.allocate(slices, PageKind::kLarge, &is_zero);
  EXPECT_NE(span, nullptr);
  return span;
}

Segment* segment_of(const Page* span) { return xalloc::segment_of(reinterpret_cast<uintptr_t>(span)); }

// What a lookup of slice `index` of `segment` finds.
const Page* lookup(const Segment* segment, size_t index) { return segment->page_of_slice[index]; }

// Regression (tests/KNOWN_BUGS.md #21): a free slice could map to a span in use after a purge outside the lock.
// A purged span that comes back merges with the span freed after it in the
// meantime; its last slice's entry, which pointed back to its head, is then
// an inner one. When a later take reuses that head, a lookup there must not
// find the span in use (a free of a stale pointer into the free part would
// otherwise free the live block).
TEST(SpanAllocator, PurgedSpanMergedWithItsSuccessorKeepsLookupsOfFreeSlicesFree) {
  static xalloc::SpanAllocator spans;
  Page* x = take(spans, 10);
  Page* y = take(spans, 10);
  Page* z = take(spans, 10);
  Page* guard = take(spans, 1);  // keeps the free span after z apart
  Segment* segment = segment_of(x);
  size_t head = segment->slice_index(x);
  ASSERT_EQ(segment->slice_index(y), head + 10);
  ASSERT_EQ(segment->slice_index(z), head + 20);

  // Free y, then x: one free span [head, head+20) whose entries point to x
  // for the first ten slices, to y for the next nine, and to x at the end.
  spans.release(y);
  spans.release(x);
  ASSERT_EQ(lookup(segment, head + 19), &segment->pages[head]);

  bool purged = xalloc::SpanAllocatorTestPeer::purge_around(spans, &segment->pages[head], [&] {
    spans.release(z);  // cannot merge with a span being purged
  });
  ASSERT_TRUE(purged);
  EXPECT_EQ(segment->pages[head].kind(), PageKind::kFree);
  EXPECT_EQ(segment->pages[head].slice_count, 30u);

  Page* reused = take(spans, 5);
  ASSERT_EQ(reused, &segment->pages[head]);
  for (size_t i = head + 5; i < head + 30; ++i) {
    const Page* found = lookup(segment, i);
    EXPECT_EQ(found->kind(), PageKind::kFree) << "slice " << i - head;
    EXPECT_NE(found, reused) << "slice " << i - head;
  }

  spans.release(reused);
  spans.release(guard);
  spans.purge(true);
}

// A model of a span allocator's users: the spans they hold, and every way
// they take, grow, cut and give back spans, with purges in the middle of
// it all (nested, as several threads purging at once). After every step,
// every promise of the slice map is checked, in every build.
class SpanModel {
 public:
  explicit SpanModel(uint64_t seed) : rng_(seed) {}
  ~SpanModel() {
    for (Page* span : live_) spans_.release(span);
    spans_.purge(true);
  }

  void step(unsigned depth = 0) {
    // Takes outnumber frees until the model holds about a hundred spans
    // (a few segments), then frees do.
    size_t takes = live_.size() < 100 ? 35 : 20;
    size_t r = rng_.below(100);
    if (r < takes || live_.empty()) take_one();
    else if (r < 55) release_one();
    else if (r < 65) grow_one();
    else if (r < 75) shrink_one();
    else if (r < 85) trim_one();
    else if (depth < 3) purge_one(depth);
  }

  // The slice map (span_allocator.h): a span in use maps every slice to its
  // head; a lookup anywhere in a free span finds a free descriptor at or
  // after the span's head and at or before the slice; and the spans in use
  // are exactly those the model holds.
  void check() {
    size_t used = 0;
    for (Segment* segment = xalloc::SpanAllocatorTestPeer::segments(spans_); segment != nullptr;
         segment = segment->next) {
      for (size_t i = xalloc::kHeaderSlices; i < xalloc::kSlicesPerSegment;) {
        const Page* span = lookup(segment, i);
        size_t count = span->slice_count;
        if (span != &segment->pages[i] || count == 0 || i + count > xalloc::kSlicesPerSegment) {
          ADD_FAILURE() << "slice " << i << " heads no span";
          return;
        }
        bool free = xalloc::is_free_kind(span->kind());
        for (size_t j = i; j < i + count; ++j) {
          const Page* entry = lookup(segment, j);
          bool sound = free ? entry >= span && entry <= &segment->pages[j] && xalloc::is_free_kind(entry->kind())
                            : entry == span;
          if (!sound) {
            ADD_FAILURE() << (free ? "free" : "used") << " span at " << i << ": slice " << j << " maps to "
                          << entry - segment->pages;
            return;
          }
        }
        if (!free) ++used;
        i += count;
      }
    }
    EXPECT_EQ(used, live_.size());
    for (const Page* span : live_) EXPECT_EQ(span->kind(), PageKind::kLarge);
  }


 private:
  size_t random_length() {
    size_t r = rng_.below(100);
    if (r < 70) return 1 + rng_.below(8);
    if (r < 95) return 1 + rng_.below(64);
    return 1 + rng_.below(xalloc::kPayloadSlices);
  }

  size_t pick() { return rng_.below(live_.size()); }

  void forget(size_t index) {
    live_[index] = live_.back();
    live_.pop_back();
  }

  void take_one() {
    if (Page* span = take(spans_, random_length())) live_.push_back(span);
  }

  void release_one() {
    size_t index = pick();
    spans_.release(live_[index]);
    forget(index);
  }

  void grow_one() {
    Page* span = live_[pick()];
    size_t slices = span->slice_count + 1 + rng_.below(16);
    if (slices <= xalloc::kPayloadSlices) spans_.try_grow(span, slices);
  }

  void shrink_one() {
    Page* span = live_[pick()];
    if (span->slice_count > 1) spans_.shrink(span, 1 + rng_.below(span->slice_count - 1));
  }

  void trim_one() {
    size_t index = pick();
    Page* span = live_[index];
    if (span->slice_count > 1) live_[index] = spans_.trim_front(span, 1 + rng_.below(span->slice_count - 1));
  }

  // Purges a free span (the first one with something resident after a
  // random slice of a random segment) while other steps run.
  void purge_one(unsigned depth) {
    Page* free_span = some_resident_free_span();
    if (free_span == nullptr) return;
    xalloc::SpanAllocatorTestPeer::purge_around(spans_, free_span, [&] {
      for (size_t n = rng_.below(6); n > 0; --n) {
        step(depth + 1);
        check();
        if (::testing::Test::HasFailure()) return;
      }
    });
  }

  Page* some_resident_free_span() {
    std::vector<Segment*> segments;
    for (Segment* s = xalloc::SpanAllocatorTestPeer::segments(spans_); s != nullptr; s = s->next) segments.push_back(s);
    if (segments.empty()) return nullptr;
    Segment* segment = segments[rng_.below(segments.size())];
    size_t from = xalloc::kHeaderSlices + rng_.below(xalloc::kPayloadSlices);
    for (size_t i = xalloc::kHeaderSlices; i < xalloc::kSlicesPerSegment;) {
      Page* span = &segment->pages[i];
      if (i >= from && span->kind() == PageKind::kFree &&
          xalloc::segment_dirty_count(segment, i, span->slice_count) != 0)
        return span;
      i += span->slice_count;
    }
    return nullptr;
  }

  xalloc::SpanAllocator spans_;
  xtest::Rng rng_;
  std::vector<Page*> live_;
};

// Regression (tests/KNOWN_BUGS.md #21), by random steps: the slice map's invariant after every one.
TEST(SpanAllocator, SliceMapHoldsThroughRandomTakesFreesAndNestedPurges) {
  const size_t kSteps = xtest::scaled(20000, 2);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SpanModel model(seed);
    for (size_t i = 0; i < kSteps; ++i) {
      model.step();
      model.check();
      if (HasFailure()) {
        ADD_FAILURE() << "seed " << seed << ", step " << i;
        return;
      }
    }
  }
}

}  // namespace
