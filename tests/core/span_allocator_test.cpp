// The span allocator's slice map (span_allocator.h) through sequences of
// takes, frees and purges that threads can only reach by chance: a span
// allocator of the test's own, stepped one stage at a time.
#include <gtest/gtest.h>

#include <cstdint>

#include "page.h"
#include "segment.h"
#include "span_allocator.h"

namespace xalloc {

struct SpanAllocatorTestPeer {
  // Runs `meanwhile` while the free span `span` is out of the bins, its
  // pages being given back, as another thread's purge would have it.
  template <typename Fn>
  static void purge_around(SpanAllocator& spans, Page* span, Fn meanwhile) {
    SpanAllocator::PurgeBatch batch;
    {
      LockGuard guard(spans.lock_);
      spans.detach_for_purge_locked(span, batch);
    }
    ASSERT_EQ(batch.count, 1u);
    meanwhile();
    spans.finish_purge(batch, 0);
  }
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

  xalloc::SpanAllocatorTestPeer::purge_around(spans, &segment->pages[head], [&] {
    spans.release(z);  // cannot merge with a span being purged
  });
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

}  // namespace
