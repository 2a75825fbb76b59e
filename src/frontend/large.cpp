#include "frontend/large.h"

#include <cerrno>

#include "diag/heap_profiler.h"
#include "frontend/block_memory.h"
#include "frontend/heap.h"
#include "frontend/heap_upkeep.h"
#include "frontend/huge.h"
#include "frontend/kept_spans.h"
#include "frontend/thread_registry.h"
#include "support/counters.h"
#include "support/fail.h"
#include "support/emergency_heap.h"
#include "backend/span_allocator.h"

namespace xalloc {

namespace {

// Slices of a large block of `usable` bytes (whole pages): secure mode
// adds its guard page.
size_t large_slices(size_t usable) { return (usable + secure::kGuardBytes + kSliceSize - 1) >> kSliceShift; }

void set_large(Page* span, size_t usable, bool is_zero) {
  span->owner = nullptr;
  span->sampled = 0;
  span->large_usable = usable;
  span->is_zero = is_zero ? 1 : 0;
  stats::add(stats::g_global.large_in_use, usable);
  stats::note_in_use();
}

// A span of `slices` slices from the span allocator for a block of
// `usable` bytes. With an alignment past a slice, `extra` of them are
// slack: the slices before the aligned address and after the block go
// back. Null if there is no memory.
Page* allocate_large_span(size_t slices, size_t usable, size_t alignment, size_t extra, bool* is_zero) {
  Page* span = g_spans.allocate(slices, PageKind::kLarge, is_zero);
  if (span == nullptr || extra == 0) return span;
  uintptr_t aligned = round_up(span->start, alignment);
  size_t skip = (aligned - span->start) >> kSliceShift;
  if (skip != 0) span = g_spans.trim_front(span, skip);
  g_spans.shrink(span, large_slices(usable));
  return span;
}

}  // namespace

void* large_alloc(size_t size, size_t alignment, bool zero) {
  if (XALLOC_UNLIKELY(emergency::active())) return emergency::alloc(size, alignment);
  ensure_process_init();
  size_t usable = size == 0 ? kOsPageSize : round_up(size, kOsPageSize);
  size_t extra = alignment > kSliceSize ? alignment - kSliceSize : 0;
  size_t slices = large_slices(usable + extra);
  if (slices > kPayloadSlices) return huge_alloc(size, alignment, zero);
  // A thread's first large block gives it a heap: the home its blocks'
  // spans come back to when other threads free them (return_span_home).
  Heap* heap = thread_heap_or_acquire();
  judge_last_big_block(heap);
  if (extra == 0) {
    Page* span = take_kept_span(heap, slices, usable);
    if (span != nullptr) {
      span->large_home = heap;
      void* block = reinterpret_cast<void*>(span->start);
      if (zero) zero_reused(block, size);
      return block;
    }
  }
  bool is_zero = false;
  Page* span = allocate_large_span(slices, usable, alignment, extra, &is_zero);
  if (span == nullptr) return fail_enomem();
  set_large(span, usable, is_zero);
  span->large_home = heap;
  large_guard_at(span, usable);
  void* block = reinterpret_cast<void*>(span->start);
  hand_out_big_block(heap, span->start, usable, is_zero, zero);
  if (zero && !is_zero) zero_reused(block, size);
  return block;
}

void* large_alloc_sampled(Heap* heap, size_t size, size_t alignment) {
  // A one-slice span is aligned to its slice.
  size_t usable = size == 0 ? kOsPageSize : round_up(size, kOsPageSize);
  Page* span = large_slices(usable) == 1 && alignment <= kSliceSize ? take_kept_span(heap, 1, usable) : nullptr;
  if (span == nullptr) return large_alloc(size, alignment, false);
  span->large_home = heap;
  return reinterpret_cast<void*>(span->start);
}

void large_free(Page* page) {
  if (XALLOC_UNLIKELY(page->sampled)) prof::forget(page);
  forget_big_block(t_heap, page->start);
  if (page->large_home != t_heap && return_span_home(page)) return;
  if (keep_span(page)) {
    // A thread that only takes and keeps spans still does the periodic
    // work (purging what it and others freed), as its slow paths would.
    heap_tick(t_heap);
    return;
  }
  stats::sub(stats::g_global.large_in_use, page->large_usable);
  large_release(page);
}

bool large_resize_in_place(Page* page, size_t size) {
  if (size <= kMaxSlabSize || size > kMaxLargeSize) return false;
  size_t usable = round_up(size, kOsPageSize);
  size_t slices = large_slices(usable);
  if (slices > page->slice_count && !g_spans.try_grow(page, slices)) return false;
  size_t old_usable = page->large_usable;
  // Secure mode: the guard page moves to the new end (taken down before a
  // shrink may give its slice back).
  bool guard_moves = usable != old_usable;
  if (guard_moves) large_unguard(page);
  // Shrinking: keep the span unless half of it would be idle.
  if (slices * 2 <= page->slice_count) g_spans.shrink(page, slices);
  if (guard_moves) large_guard_at(page, usable);
  // (A shared counter: no atomic update for a realloc within the page.)
  if (usable > old_usable) stats::add(stats::g_global.large_in_use, usable - old_usable);
  if (usable < old_usable) stats::sub(stats::g_global.large_in_use, old_usable - usable);
  page->large_usable = usable;
  if (XALLOC_UNLIKELY(page->sampled)) prof::resized(page, size);
  return true;
}

}  // namespace xalloc
