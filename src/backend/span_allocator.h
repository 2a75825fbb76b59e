// The span allocator: hands out runs of slices from segments and takes
// them back, coalescing neighbours. It is shared by all threads and guarded
// by one lock, which only slow paths take: a thread heap comes here once
// per slab (64 KiB or more), and large blocks come here directly.
//
// It also owns the return of memory to the OS: free spans stay resident
// for the purge delay (so memory about to be reused is not faulted in
// again), then their pages are purged; fully free segments beyond the
// retained count are unmapped. How much free memory may stay longer than a
// tenth of the delay, and when a release is a burst to give back at once,
// is its purge policy's to decide (purge_policy.h).
//
// The purge system call runs outside the lock. Under it, the spans to purge
// are marked clean and taken out of the bins (kind kPurging: no allocation
// takes them, no neighbour merges with them); the thread then gives their
// pages back with the lock released, and takes the lock again to return
// them to the bins as free, clean spans, merged with their neighbours. A
// purge of a few MiB takes tens of microseconds, longer on many cores
// (every core that runs the process takes a TLB shootdown): under the lock,
// every thread that needs a span would wait through it.
//
// Slice map. A span in use maps every slice to its descriptor (any address
// in it must find it). A free span maps only its first and last slice (what
// coalescing and iteration read): mapping a whole free span on every
// release and split would cost a store per slice of the surrounding free
// space, hundreds for one 64 KiB slab. Its other slices keep older entries,
// and every entry inside a free span [f, g), at slice i, points to a
// descriptor pages[x] with f <= x <= i whose kind is kFree; and but for the
// last slice's, the entries never decrease along the span. It holds because
// a new segment maps each slice to its own descriptor (zero, so free);
// entries only ever point at or before their slice; a descriptor absorbed
// into a free span is marked free; a span in use is mapped in full; the
// last slice's entry, the only one written to point back to its head from
// afar, is pointed at its own descriptor when a merge makes it an inner
// slice out of order (merges on either side: a purged span coming back
// merges with the span after it too); and when a span is taken from the
// front of a free span, the entries of the rest that point into the taken
// part - a prefix of the rest, as they never decrease - are pointed at the
// rest's head. So a lookup of free memory always finds a free descriptor,
// which free() reports, and never one that heads a span in use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meta/page.h"
#include "platform/lock.h"
#include "backend/huge_ranges.h"
#include "backend/purge_policy.h"
#include "backend/segment.h"

namespace xalloc {

// Every thread takes its lock and writes its state: on cache lines of its
// own, away from the data the fast paths of other threads read.
class alignas(64) SpanAllocator {
 public:
  // A span of `slices` slices (1 <= slices <= kPayloadSlices) of the
  // given kind; *is_zero tells whether all its memory reads as zero. Null
  // when the OS has no memory. A span's kind and length change only under
  // this allocator's lock, since other threads read its neighbours' kinds.
  // `big_taker`: a slab for a thread that holds many (huge_ranges::opens_huge).
  Page* allocate(size_t slices, PageKind kind, bool* is_zero, bool big_taker = false);
  // `idle_ms`: how long the span's memory has already waited unused
  // elsewhere (slab_pool.h); it counts towards the purge delay.
  void release(Page* span, uint64_t idle_ms = 0);

  // Grows `span` in place to `slices` if the slices after it are free.
  bool try_grow(Page* span, size_t slices);
  // Gives back the slices of `span` beyond `slices`.
  void shrink(Page* span, size_t slices);
  // Gives back the first `slices` slices of `span`; returns the descriptor
  // of what remains.
  Page* trim_front(Page* span, size_t slices);

  // Purges free spans whose delay has passed (all of them when `force`) and
  // unmaps surplus empty segments. Returns the bytes given back.
  size_t purge(bool force);
  // Cheap when there is nothing to do: called from slow paths.
  void maybe_purge(uint64_t now_ms);

  // The huge cache's part in the budget's feedback (frontend/huge_cache.cpp): `bytes`
  // of a cached mapping purged to keep within the budget, which returns
  // the review period to keep with the mapping; and such a mapping taken
  // again, purged in review period `epoch`.
  uint32_t note_huge_budget_purge(size_t bytes);
  void note_huge_budget_reuse(uint32_t epoch, size_t bytes);

  // fork(): the child inherits the state the lock protects; spans that
  // other threads were purging are purged and freed in the child.
  void lock_for_fork() { lock_.lock(); }
  void unlock_after_fork_parent() { lock_.unlock(); }
  void reset_after_fork_child();

  // Calls fn(span) for every span in use, under the lock (statistics).
  template <typename Fn>
  void for_each_used_span(Fn fn) {
    LockGuard guard(lock_);
    for_each_used_span_locked(fn);
  }

  // Calls on_segment(segment) for every normal segment, then on_span(span)
  // for each of its spans, free ones too (their head's descriptor), under
  // the lock (statistics: where resident memory goes).
  template <typename SegmentFn, typename SpanFn>
  void for_each_span(SegmentFn on_segment, SpanFn on_span) {
    LockGuard guard(lock_);
    for (Segment* segment = segments_; segment != nullptr; segment = segment->next) {
      on_segment(static_cast<const Segment*>(segment));
      for (size_t i = kHeaderSlices; i < kSlicesPerSegment;) {
        const Page* span = segment->page_of_slice[i];
        on_span(static_cast<const Segment*>(segment), span);
        i += span->slice_count != 0 ? span->slice_count : 1;
      }
    }
  }

  // While a purger's clock runs, the ranges that takes make dense wait
  // here a purge delay before they are collapsed (allocate()); the
  // purger's thread calls this on its ticks.
  void collapse_deferred(uint64_t now_ms);

  // Debug builds: validates every segment, span and bin.
  void check_invariants();

 private:
  // Steps through a purge one stage at a time (tests/core/span_allocator_test.cpp).
  friend struct SpanAllocatorTestPeer;

  static constexpr size_t kBins = 32;
  static size_t bin_of(size_t slices);

  // Spans chosen for a purge under the lock, purged after it is released
  // (finish_purge).
  struct PurgeBatch {
    static constexpr size_t kMaxSpans = 64;
    Page* spans[kMaxSpans];
    // The slices of each span to purge: all of it, or less its ends in
    // huge ranges that keep their page (huge_ranges.h).
    uint16_t first[kMaxSpans];
    uint16_t slices[kMaxSpans];
    size_t count = 0;
    size_t bytes = 0;  // of them that were dirty
    bool full() const { return count == kMaxSpans; }
  };

  // `collapses`: ranges the take made dense, to collapse after the lock.
  Page* allocate_locked(size_t slices, PageKind kind, bool* is_zero, bool big_taker,
                        huge_ranges::Collapses& collapses);
  // allocate(): from the free spans, or a new segment.
  Page* allocate_or_map(size_t slices, PageKind kind, bool* is_zero, bool big_taker,
                        huge_ranges::Collapses& collapses);
  Page* take_fitting(size_t slices);
  // XALLOC_HUGE_PAGES=auto (huge_ranges.h). Before a take of [first,
  // first+count): the ranges it overlaps that are wholly free and clean.
  uint32_t fresh_ranges_locked(const Segment* segment, size_t first, size_t count) const;
  // After it (`judge`: a slab, and huge_ranges::opens_huge; `collapse`:
  // huge_ranges::active too; `rest`: the free span left after the take, or
  // null): counts the slices in use and promotes the ranges the take made
  // dense (when `collapse`) or opened.
  void note_ranges_taken_locked(Segment* segment, size_t first, size_t count, bool judge, bool collapse,
                                uint32_t fresh, Page* rest, huge_ranges::Collapses& collapses);
  void promote_locked(Segment* segment, size_t range, huge_ranges::Promotion how, huge_ranges::Collapses& collapses);
  // Promotes the dense ranges of every segment (the heap just grew past
  // the threshold, with ranges made dense before it did).
  void sweep_dense_ranges_locked(huge_ranges::Collapses& collapses);
  // Which entries of a new free span's slices to set (the slice map above):
  // its ends, or its ends and the entries that point before it.
  enum class Map { kEnds, kRest };
  void insert_free(Segment* segment, size_t first, size_t count, uint64_t freed_at, Map map);
  void remove_free(Page* span);
  // `now_ms`: os::monotonic_ms() (the caller may have it already).
  void release_locked(Page* span, uint64_t now_ms, uint64_t idle_ms = 0);
  Segment* add_segment_locked(Segment* segment);
  // release() under the lock: the span released, and the purges it calls
  // for chosen into `batch`; true when a burst beyond the allowance did
  // not fit in the batch.
  bool release_and_choose_purges(Page* span, uint64_t idle_ms, PurgeBatch& batch);
  // Free memory beyond `allowance` slices, largest spans first, of spans
  // freed at or before `freed_by` (ms; kAnyAge: whenever), into `batch`;
  // true when it did not all fit.
  static constexpr uint64_t kAnyAge = ~uint64_t{0};
  bool choose_excess_purges_locked(size_t allowance, uint64_t freed_by, PurgeBatch& batch);
  // Chooses the spans to purge (all free ones when `force`) into `batch`,
  // and unmaps surplus empty segments; returns the bytes unmapped.
  size_t purge_locked(bool force, uint64_t now_ms, PurgeBatch& batch);
  // Takes `span`, a free span, out of the bins into `batch` (which has
  // room), marked clean, unless it is clean already; returns the bytes
  // that were dirty. `for_budget`: purged only to keep within the dirty
  // budget, not because its delay passed. `keep_huge`: its ends in huge
  // ranges that keep their page stay resident (huge_ranges.h).
  size_t detach_for_purge_locked(Page* span, PurgeBatch& batch, bool for_budget = false, bool keep_huge = false);
  // Without the lock: purges the batch's spans, then returns them to the
  // bins and unmaps empty segments beyond `keep_segments`. Returns the
  // bytes given back.
  size_t finish_purge(PurgeBatch& batch, size_t keep_segments);
  // Returns a purged span to the bins (and its place in the list of spans
  // being purged).
  void reinsert_purged_locked(Page* span);
  // Inserts [first, first+count) as a free span, merged with the free spans
  // on either side; `freed_at` is its age and `resident` how many of its
  // slices may be resident.
  void insert_coalesced_locked(Segment* segment, size_t first, size_t count, uint64_t freed_at, size_t resident);
  // Tells the policy about the slices of a span being taken that were
  // purged for the budget shortly before (`clean`: how many of them were
  // not resident).
  void note_reuse_locked(Segment* segment, size_t first, size_t count, size_t clean);
  // The policy's allowance (PurgePolicy::dirty_allowance_bytes) now.
  size_t dirty_allowance_bytes_locked(uint64_t now_ms);
  // Bytes of live blocks (the allowance's estimate).
  size_t live_bytes_locked() const;

  size_t unmap_empty_segments_locked(size_t keep);

  template <typename Fn>
  void for_each_used_span_locked(Fn fn) const {
    for (Segment* segment = segments_; segment != nullptr; segment = segment->next) {
      for (size_t i = kHeaderSlices; i < kSlicesPerSegment;) {
        Page* span = segment->page_of_slice[i];
        if (!is_free_kind(span->kind())) fn(span);
        i += span->slice_count != 0 ? span->slice_count : 1;
      }
    }
  }

  Mutex lock_{shared_count::Site::kSpanLock};
  Page* bins_[kBins] = {};
  Page* purging_ = nullptr;  // spans out of the bins being purged, linked through next/prev
  uint32_t nonempty_bins_ = 0;
  Segment* segments_ = nullptr;
  size_t free_segments_ = 0;       // segments whose payload is one free span
  size_t dirty_free_slices_ = 0;   // free slices that may still be resident
  bool huge_swept_ = false;        // sweep_dense_ranges_locked done since the heap was last small
  // Ranges to collapse once they have been dense for a purge delay, and
  // since when (collapse_deferred).
  struct DeferredCollapses {
    static constexpr size_t kMax = 64;
    uintptr_t start[kMax];
    uint64_t since_ms[kMax];
    size_t count;
  };
  DeferredCollapses deferred_{};
  void defer_collapses(const huge_ranges::Collapses& collapses);
  void drop_deferred_collapses_locked(const Segment* segment);
  PurgePolicy policy_;  // guarded by lock_
  // Read by every thread's periodic work (maybe_purge), written once per
  // purge: last, on a line of its own, away from the fields that every
  // span taken or freed writes (beside them, each thread's look would miss
  // whenever another had taken or freed a span since).
  alignas(64) uint64_t next_purge_ms_ = 0;
};

extern SpanAllocator g_spans;

}  // namespace xalloc
