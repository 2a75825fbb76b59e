#include "frontend/kept_spans.h"

#include <atomic>

#include "frontend/block_memory.h"
#include "frontend/heap_slabs.h"
#include "frontend/huge_cache.h"
#include "frontend/thread_registry.h"
#include "support/counters.h"
#include "support/options.h"
#include "platform/os.h"
#include "platform/shared_count.h"
#include "backend/slab_pool.h"
#include "backend/span_allocator.h"

namespace xalloc {

namespace {

// Kept spans. Taking a span from the shared span allocator and giving it
// back costs a lock and the search and merge of free spans (89 ns a
// malloc/free pair of 256 KiB, against 3 ns for the small classes), and
// every thread that does it waits for the same lock. So the thread that
// frees a large block keeps its span, up to kept_slice_budget() slices in
// all (the oldest go back to make room), for its next large block of as many
// slices or a few fewer - a buffer allocated and freed in a loop - and for
// its heap-profiler samples, which take a slice each (at the default rate,
// hundreds of thousands a second in a program that allocates gigabytes).
// A kept span stays a large span with no usable
// bytes: a second free of its block is reported, and the span allocator
// neither merges it nor grows a neighbour into it. It goes back when the
// heap's thread exits or trims, after kKeptSpanLifetime slow paths unused
// (heap_upkeep.cpp), or when the thread has kept none for a purge delay
// (reclaim_idle_kept_memory). In the secure build a kept span keeps its
// guard page (large_guard_at).

// Takes kept span `i` out of `heap`'s list, with the bytes its last block
// still counts in use.
XALLOC_INLINE KeptSpans::Span kept_span_remove(Heap* heap, uint32_t i) {
  KeptSpans::Span kept = heap->kept.spans[i];
  uint32_t count = heap->kept.count.load(std::memory_order_relaxed);
  for (uint32_t j = i + 1; j < count; ++j) heap->kept.spans[j - 1] = heap->kept.spans[j];
  heap->kept.count.store(count - 1, std::memory_order_relaxed);
  heap->kept.slices.store(heap->kept.slices.load(std::memory_order_relaxed) - kept.span->slice_count,
                          std::memory_order_relaxed);
  heap->kept.since = heap->slow_calls;
  heap->kept.counted.store(heap->kept.counted.load(std::memory_order_relaxed) - kept.counted,
                           std::memory_order_relaxed);
  return kept;
}

// The slices a heap may keep now: kKeptSliceBudget, or its share of
// kKeptSlicesAllHeaps when more threads live than that fits (a pool of a
// hundred threads that each freed a 1 MiB buffer once and went idle kept
// 2 MiB apiece). A heap that kept more before others were born keeps it
// until its own spans turn over.
uint32_t kept_slice_budget() { return per_heap_share(kKeptSliceBudget, kKeptSlicesAllHeaps); }

// Gives a span taken out of a heap's kept spans to the span allocator.
void kept_span_release(KeptSpans::Span kept) {
  stats::sub(stats::g_global.large_in_use, kept.counted);
  large_release(kept.span);
}

// Gives every kept span of `heap` to the span allocator (its thread,
// between kept_enter and kept_exit, or the pass, after its barrier).
void kept_release_all(Heap* heap) {
  for (uint32_t count = heap->kept.count.load(std::memory_order_relaxed); count != 0;) {
    kept_span_release(heap->kept.spans[--count]);
    heap->kept.count.store(count, std::memory_order_relaxed);
  }
  heap->kept.slices.store(0, std::memory_order_relaxed);
  heap->kept.counted.store(0, std::memory_order_relaxed);
}

// Releases `heap`'s oldest kept spans until there is a free slot and room
// for `slices` more within `budget`.
XALLOC_NOINLINE void kept_make_room(Heap* heap, uint32_t slices, uint32_t budget) {
  while (heap->kept.count.load(std::memory_order_relaxed) == kKeptSpanSlots ||
         heap->kept.slices.load(std::memory_order_relaxed) + slices > budget)
    kept_span_release(kept_span_remove(heap, 0));
}

// Adds `span` to `heap`'s kept spans, the oldest making room: the span
// freed last is the likeliest to be asked for again (a buffer that
// alternates between two lengths). `counted`: the bytes its last block
// still counts in large_in_use.
void kept_span_add(Heap* heap, Page* span, size_t counted) {
  uint32_t budget = kept_slice_budget();
  uint32_t slices = span->slice_count;
  if (XALLOC_UNLIKELY(slices > budget)) return kept_span_release({span, counted});
  uint32_t count = heap->kept.count.load(std::memory_order_relaxed);
  uint32_t kept = heap->kept.slices.load(std::memory_order_relaxed);
  if (XALLOC_UNLIKELY(count == kKeptSpanSlots || kept + slices > budget)) {
    kept_make_room(heap, slices, budget);
    count = heap->kept.count.load(std::memory_order_relaxed);
    kept = heap->kept.slices.load(std::memory_order_relaxed);
  }
  span->large_usable = 0;
  span->sampled = 0;
  heap->kept.spans[count] = {span, counted};
  heap->kept.count.store(count + 1, std::memory_order_relaxed);
  heap->kept.slices.store(kept + slices, std::memory_order_relaxed);
  heap->kept.changes.store(heap->kept.changes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  heap->kept.since = heap->slow_calls;
  heap->kept.counted.store(heap->kept.counted.load(std::memory_order_relaxed) + counted, std::memory_order_relaxed);
}

}  // namespace

bool keep_span(Page* span) {
  if (span->slice_count > kKeptSliceBudget) return false;
  // A thread that has not allocated yet (it frees other threads' blocks)
  // has no heap: it gets one now, or keeps nothing (exiting, or out of
  // memory).
  Heap* heap = thread_heap_or_acquire();
  if (heap == &g_empty_heap) return false;
  if (heap->state.load(std::memory_order_relaxed) != HeapState::kActive || !kept_enter(heap)) return false;
  kept_span_add(heap, span, span->large_usable);
  kept_exit(heap);
  return true;
}

// Returned spans. A large block freed by another thread than the one that
// allocated it - a buffer a producer fills and a consumer frees - would
// stay with the consumer as a kept span it never asks for again, and the
// producer would take every buffer from the span allocator: its lock and
// its lines, shared with the consumer's releases, on both sides of every
// buffer. So the freeing thread hands the span back to the allocating
// heap, on a lock-free stack the heap empties into its kept spans when it
// next misses them. At most kept_slice_budget() slices wait on a heap; beyond
// that, and for a heap whose thread has exited, the span goes to the span
// allocator (large_free).
bool return_span_home(Page* span) {
  Heap* home = span->large_home;
  if (home == nullptr || home == &g_empty_heap ||
      home->state.load(std::memory_order_relaxed) != HeapState::kActive)
    return false;
  uint32_t slices = span->slice_count;
  shared_count::atomic_rmw(shared_count::Site::kKeptSpans, &home->returned_slices);
  if (home->returned_slices.fetch_add(slices, std::memory_order_relaxed) + slices > kept_slice_budget()) {
    shared_count::atomic_rmw(shared_count::Site::kKeptSpans, &home->returned_slices);
    home->returned_slices.fetch_sub(slices, std::memory_order_relaxed);
    return false;
  }
  stats::sub(stats::g_global.large_in_use, span->large_usable);
  span->large_usable = 0;  // a second free of the block is reported
  span->sampled = 0;
  Page* head = home->returned_spans.load(std::memory_order_relaxed);
  do {
    span->next = head;
    shared_count::atomic_rmw(shared_count::Site::kKeptSpans, &home->returned_spans);
  } while (!home->returned_spans.compare_exchange_weak(head, span, std::memory_order_acq_rel,
                                                        std::memory_order_relaxed));
  // The home thread may have exited since the check, its last look at the
  // stack before this push: a push after that exchange synchronizes with
  // it and sees the heap orphaned (thread_heap_teardown), and takes the
  // stack back itself.
  if (home->state.load(std::memory_order_relaxed) != HeapState::kActive) returned_spans_release(home);
  return true;
}

namespace {

// Takes the spans other threads handed back to `heap` off its stack and
// passes each to fn, unlinked.
template <typename Fn>
void returned_spans_drain(Heap* heap, Fn&& fn) {
  shared_count::atomic_rmw(shared_count::Site::kKeptSpans, &heap->returned_spans);
  Page* span = heap->returned_spans.exchange(nullptr, std::memory_order_acq_rel);
  uint32_t slices = 0;
  while (span != nullptr) {
    Page* next = span->next;
    span->next = nullptr;
    slices += span->slice_count;
    fn(span);
    span = next;
  }
  if (slices != 0) {
    shared_count::atomic_rmw(shared_count::Site::kKeptSpans, &heap->returned_slices);
    heap->returned_slices.fetch_sub(slices, std::memory_order_relaxed);
  }
}

// The heap's thread missed its kept spans: the returned ones join them
// (between kept_enter and kept_exit).
void returned_spans_collect(Heap* heap) {
  returned_spans_drain(heap, [heap](Page* span) { kept_span_add(heap, span, 0); });
}

// A kept span for a block of `slices` slices: the most recently kept one
// of exactly that length, else the shortest that is at most an eighth
// longer (a buffer asked for again a little smaller - the next line, frame
// or record - reuses the span rather than taking the shared allocator's
// lock twice; 150 ns a malloc/free pair of 512 KiB against 25). Taken out
// of `heap` for a block of `usable` bytes (between kept_enter and
// kept_exit); null if there is none.
XALLOC_INLINE Page* pick_kept_span(Heap* heap, size_t slices, size_t usable) {
  uint32_t found = kKeptSpanSlots;
  size_t longest = slices + slices / 8;
  for (uint32_t i = heap->kept.count.load(std::memory_order_relaxed); i-- > 0;) {
    size_t length = heap->kept.spans[i].span->slice_count;
    if (length < slices || length > longest) continue;
    found = i;
    if (length == slices) break;
    longest = length - 1;  // only a shorter one is better
  }
  if (found == kKeptSpanSlots) return nullptr;
  KeptSpans::Span kept = kept_span_remove(heap, found);
  if (secure::kEnabled && kept.span->guard_offset != usable) {
    large_unguard(kept.span);
    large_guard_at(kept.span, usable);
  }
  kept.span->large_usable = usable;
  kept.span->is_zero = 0;
  if (usable != kept.counted) {
    stats::add(stats::g_global.large_in_use, usable);
    stats::sub(stats::g_global.large_in_use, kept.counted);
    if (usable > kept.counted) stats::note_in_use();
  }
  return kept.span;
}

// pick_kept_span again once the spans others handed back have joined the
// kept ones.
XALLOC_NOINLINE Page* pick_returned_span(Heap* heap, size_t slices, size_t usable) {
  returned_spans_collect(heap);
  return pick_kept_span(heap, slices, usable);
}

}  // namespace

// A kept span for the heap's thread (pick_kept_span), or one handed back
// by another thread. A heap that has neither (g_empty_heap among them) is
// not written to.
Page* take_kept_span(Heap* heap, size_t slices, size_t usable) {
  bool returned = heap->returned_spans.load(std::memory_order_relaxed) != nullptr;
  if ((heap->kept.count.load(std::memory_order_relaxed) == 0 && !returned) || !kept_enter(heap)) return nullptr;
  Page* span = pick_kept_span(heap, slices, usable);
  if (XALLOC_UNLIKELY(span == nullptr) && returned) span = pick_returned_span(heap, slices, usable);
  kept_exit(heap);
  return span;
}

void returned_spans_release(Heap* heap) {
  returned_spans_drain(heap, [](Page* span) { large_release(span); });
}

void kept_spans_release(Heap* heap) {
  if (heap->returned_spans.load(std::memory_order_relaxed) != nullptr) returned_spans_release(heap);
  // (Not a write to g_empty_heap, which every thread without a heap shares.
  // Claimed by the reclaim pass: the pass is giving them back.)
  if (heap->kept.count.load(std::memory_order_relaxed) == 0 || !kept_enter(heap)) return;
  kept_release_all(heap);
  kept_exit(heap);
}

namespace {

// A thread that has gone idle - blocked, or done with large blocks - never
// collects the spans others hand back to it, nor gives back the spans it
// keeps, nor its spare slabs. So, once per purge delay, the periodic work
// of any thread (or the background purger) gives the span allocator every
// returned stack whose head has not changed since the pass before, and the
// kept spans and spare slabs of every heap that has kept or taken none
// since the pass before: memory unused for at least a whole delay. (A
// thread that only takes its kept spans may lose the rest early, and a
// head that only looks unchanged - drained and pushed again in between -
// sends its spans back early: either costs a trip to the span allocator
// and nothing else. The home and the pass both take a
// stack with one exchange; kept spans are claimed first, kept_enter.)
XALLOC_STARTUP_DATA std::atomic<uint64_t> g_reclaim_next_pass_ms{0};
XALLOC_FORK_DATA std::atomic<bool> g_reclaim_pass_running{false};

void reclaim_returned_spans(Heap* heap, bool force) {
  Page* head = heap->returned_spans.load(std::memory_order_relaxed);
  Page* seen = heap->returned_seen.load(std::memory_order_relaxed);
  if (head != nullptr && (force || head == seen)) {
    returned_spans_release(heap);
    head = nullptr;
  }
  if (head != seen) heap->returned_seen.store(head, std::memory_order_relaxed);
}

// Claims the kept spans and spare slabs of `heap` if it has kept or taken
// none since the pass before (any, with `force`); true if it did.
bool claim_idle_kept_memory(Heap* heap, bool force) {
  uint32_t changes = heap->kept.changes.load(std::memory_order_relaxed);
  uint32_t spare_changes = heap->spares.changes.load(std::memory_order_relaxed);
  bool idle = force || (changes == heap->kept.seen && spare_changes == heap->spares.seen);
  // (No write to a line the thread may be using unless something changed.)
  if (changes != heap->kept.seen) heap->kept.seen = changes;
  if (spare_changes != heap->spares.seen) heap->spares.seen = spare_changes;
  if (!idle || (heap->kept.count.load(std::memory_order_relaxed) == 0 &&
                heap->spares.slices.load(std::memory_order_relaxed) == 0))
    return false;
  heap->kept.claimed.store(1, std::memory_order_relaxed);
  return true;
}

// After the barrier: the claimed spans and spares of a heap whose thread
// is not using them go back; the claim is lifted either way.
void release_claimed_kept_memory(Heap* heap, bool barrier_done) {
  if (heap->kept.claimed.load(std::memory_order_relaxed) == 0) return;
  if (barrier_done && heap->kept.busy.load(std::memory_order_acquire) == 0) {
    kept_release_all(heap);
    spares_release_all(heap);
  }
  heap->kept.claimed.store(0, std::memory_order_release);
}

}  // namespace

void reclaim_idle_kept_memory(bool force, uint64_t now_ms) {
  if (!force && now_ms < g_reclaim_next_pass_ms.load(std::memory_order_relaxed)) return;
  if (g_reclaim_pass_running.exchange(true, std::memory_order_acquire)) return;
  uint64_t period = g_options.purge_delay_ms > kReclaimPassMinMs ? g_options.purge_delay_ms : kReclaimPassMinMs;
  g_reclaim_next_pass_ms.store(now_ms + period, std::memory_order_relaxed);
  bool claimed = false;
  for_each_heap([force, &claimed](Heap* heap) {
    reclaim_returned_spans(heap, force);
    claimed |= claim_idle_kept_memory(heap, force);
  });
  if (claimed) {
    bool barrier_done = os::process_wide_barrier();
    for_each_heap([barrier_done](Heap* heap) { release_claimed_kept_memory(heap, barrier_done); });
  }
  g_reclaim_pass_running.store(false, std::memory_order_release);
}

// A pass another thread was running when the process forked never ends in
// the child.
void reclaim_reset_after_fork_child() {
  g_reclaim_pass_running.store(false, std::memory_order_relaxed);
  for_each_heap([](Heap* heap) {
    if (heap->kept.claimed.load(std::memory_order_relaxed) != 0) heap->kept.claimed.store(0, std::memory_order_relaxed);
  });
  os::process_wide_barrier_reset_after_fork_child();
}

}  // namespace xalloc
