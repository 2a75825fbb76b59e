#include "frontend/memory_account.h"

#include <cstdint>

#include "backend/segment.h"
#include "backend/span_allocator.h"
#include "diag/heap_profiler.h"
#include "frontend/heap.h"
#include "frontend/huge_cache.h"
#include "frontend/thread_registry.h"
#include "meta/slab.h"
#include "platform/os.h"
#include "support/options.h"

namespace xalloc {
namespace {

constexpr uintptr_t kPageMask = kOsPageSize - 1;

// The resident bytes of the pages that begin in [from, to): adjacent
// ranges (heaps in one chunk) share no page.
uint64_t resident_from_to(uintptr_t from, uintptr_t to) {
  uintptr_t first = (from + kPageMask) & ~kPageMask;
  uintptr_t end = (to + kPageMask) & ~kPageMask;
  return end > first ? os::resident_bytes_in(first, end - first) : 0;
}

size_t min_of(size_t a, size_t b) { return a < b ? a : b; }

// What the walk of the spans finds, before the heaps' counts refine it.
struct SpanTally {
  uint64_t live_blocks[kNumClasses] = {};  // blocks in use in slabs, by class
  size_t slab_live = 0;                    // their bytes, as far as resident
  size_t large_usable = 0;                 // usable bytes of live large blocks
};

void tally_slab(const Page* span, uint64_t resident, stats::MemoryAccount& a, SpanTally& t) {
  uint64_t in_use = min_of(slab_blocks_in_use(span), span->capacity());
  if (in_use == 0) {
    if (span->owner == nullptr) a.empty_pooled += resident;
    else if (span->state() == SlabState::kCurrent) a.empty_current += resident;
    else a.empty_spares += resident;
    return;
  }
  size_t live = min_of(in_use * span->block_size(), resident);
  t.live_blocks[span->size_class] += in_use;
  t.slab_live += live;
  a.slab_free += resident - live;
  if (span->state() == SlabState::kCurrent) a.slab_free_current += resident - live;
}

void tally_span(const Segment* segment, const Page* span, stats::MemoryAccount& a, SpanTally& t) {
  uintptr_t start = segment->slice_address(segment->slice_index(span));
  uint64_t resident = os::resident_bytes_in(start, span->span_bytes());
  switch (span->kind()) {
    case PageKind::kSlab: return tally_slab(span, resident, a, t);
    case PageKind::kLarge:
      // A span with no usable bytes is one a heap keeps, or one handed
      // back to its home heap (kept_spans.h).
      if (span->large_usable == 0) {
        a.kept_spans += resident;
      } else {
        size_t live = min_of(span->large_usable, resident);
        t.large_usable += span->large_usable;
        a.live += live;
        a.rounding += resident - live;
      }
      return;
    default: a.free_spans += resident; return;
  }
}

// Per class, the blocks in use times the class size less the mean size
// requested of the class (requests counted from the start only).
size_t estimated_rounding(const SpanTally& t) {
  uint64_t requests[kNumClasses] = {};
  uint64_t requested[kNumClasses] = {};
  for_each_heap([&](Heap* h) {
    for (unsigned c = 0; c < kNumClasses; ++c) {
      requests[c] += __atomic_load_n(&h->requests[c], __ATOMIC_RELAXED);
      requested[c] += __atomic_load_n(&h->requested_bytes[c], __ATOMIC_RELAXED);
    }
  });
  uint64_t rounding = 0;
  for (unsigned c = 0; c < kNumClasses; ++c) {
    if (requests[c] == 0 || t.live_blocks[c] == 0) continue;
    uint64_t size = kClassInfo[c].size;
    uint64_t mean = requested[c] / requests[c];
    if (mean < size) rounding += t.live_blocks[c] * (size - mean);
  }
  return rounding;
}

// Blocks that other threads freed and their owners have not drained yet
// still count as in use in their slabs: the bytes staged in outboxes and
// pushed to inboxes. And the heaps' own memory, their kept spans' counts.
void tally_heaps(stats::MemoryAccount& a, size_t* pending, size_t* kept_counted) {
  for_each_heap([&](Heap* h) {
    *pending += h->inbox_bytes.load(std::memory_order_relaxed);
    size_t budget = __atomic_load_n(&h->outbox.budget, __ATOMIC_RELAXED);
    if (budget < g_options.remote_batch_bytes) *pending += g_options.remote_batch_bytes - budget;
    *kept_counted += h->kept.counted.load(std::memory_order_relaxed);
    auto at = reinterpret_cast<uintptr_t>(h);
    a.metadata += resident_from_to(at, at + kHeapBytes);
  });
}

}  // namespace

void take_memory_account(stats::MemoryAccount* out) {
  stats::MemoryAccount a{};
  SpanTally t;
  {
    [[maybe_unused]] OwnerFieldReads estimate;
    g_spans.for_each_span(
        [&](const Segment* segment) { a.metadata += os::resident_bytes_in(segment->base(), kHeaderBytes); },
        [&](const Segment* segment, const Page* span) { tally_span(segment, span, a, t); });
    size_t pending = 0;
    size_t kept_counted = 0;
    tally_heaps(a, &pending, &kept_counted);
    a.pending_frees = min_of(pending, t.slab_live);
    size_t slab_live = t.slab_live - a.pending_frees;
    a.requested_known = prof::counting();
    size_t rounding = a.requested_known ? min_of(estimated_rounding(t), slab_live) : 0;
    a.rounding += rounding;
    a.live += slab_live - rounding;
    // Huge blocks: what large_in_use holds beyond the large spans walked
    // (taken whole as resident: their mappings are not walked).
    size_t large = stats::g_global.large_in_use.load(std::memory_order_relaxed);
    if (large > t.large_usable + kept_counted) a.live += large - t.large_usable - kept_counted;
  }
  a.free_spans += huge_cache_resident_bytes();
  auto map = reinterpret_cast<uintptr_t>(g_segment_map);
  a.metadata += os::resident_bytes_in(map & ~kPageMask, ((map + sizeof(g_segment_map) + kPageMask) & ~kPageMask) - (map & ~kPageMask));
  a.committed = stats::g_global.committed.load(std::memory_order_relaxed);
  a.resident = os::resident_bytes();
  *out = a;
}

}  // namespace xalloc
