#include "frontend/refill.h"

#include <cerrno>
#include <cstring>

#include "backend/slab_pool.h"
#include "frontend/borrow.h"
#include "frontend/heap_slabs.h"
#include "frontend/heap_upkeep.h"
#include "frontend/inbox.h"
#include "frontend/profile_windows.h"
#include "frontend/purger.h"
#include "frontend/sampling.h"
#include "frontend/thread_registry.h"
#include "platform/shared_count.h"
#include "support/debug.h"
#include "support/emergency_heap.h"

namespace xalloc {

namespace {

// Another thread asked for a drain (remote_free.h) and emptied the direct
// table: drain, then point the table at the current slabs again. A sender
// that asks again meanwhile (once the flag is clear) may have emptied the
// table before the restore below wrote it back: with its request lost, the
// flag would stay set and no sender would ask again, so answer it too. The
// flag is read with a read-modify-write: one that reads 0 comes before the
// next sender's exchange, which then sees the restore as done before it
// empties the table.
void answer_drain_request(Heap* heap) {
  do {
    heap->drain_requested.store(0, std::memory_order_release);
    heap_drain_inbox_for_reuse(heap);
    direct_table_restore(heap);
    shared_count::atomic_rmw(shared_count::Site::kDrainRequest, &heap->drain_requested);
  } while (heap->drain_requested.fetch_or(0, std::memory_order_acq_rel) != 0);
}

XALLOC_NOINLINE void* heap_alloc_refill(Heap* heap, unsigned cls, bool from_direct, size_t requested);

// A small allocation whose window is empty: it holds the class's sampled
// byte, or it takes a block the ordinary way and opens the next window.
XALLOC_NOINLINE void* window_alloc(Heap* heap, unsigned cls) {
  if (heap->drain_requested.load(std::memory_order_acquire) != 0) answer_drain_request(heap);
  Page& window = heap->windows->window[cls];
  if (window.free != nullptr) return slab_pop(&window, window.free);  // the table was emptied for a drain
  window_count_pops(heap, cls);
  auto size = static_cast<int64_t>(kClassInfo[cls].size);
  int64_t& countdown = heap->windows->countdown[cls];
  if (countdown <= size) {
    countdown = prof::sample_interval();
    if (void* sampled = prof::sample(heap, static_cast<size_t>(size), 0)) return sampled;
  } else {
    countdown -= size;
  }
  void* block = heap_alloc_refill(heap, cls, false, 0);
  if (block != nullptr) window_open(heap, cls);
  return block;
}

}  // namespace

void* heap_switch_slab(Heap* heap, unsigned cls) {
  Page* page = heap->current[cls];
  Page* next = heap->partial[cls];
  if (next == nullptr || next->free == nullptr || page == &g_empty_page || page->free != nullptr ||
      !page->fully_carved() || heap->young || heap->borrowed != nullptr || ((heap->slow_calls + 1) & 15) == 0 ||
      inbox_pending(heap) || heap->drain_requested.load(std::memory_order_acquire) != 0 || prof::watching() ||
      prof::windowed())
    return nullptr;
  XALLOC_CHECK(page->needed == kCurrentBias + page->capacity());
  ++heap->slow_calls;
  file_full(page);
  make_current(heap, cls, next);
  return slab_pop(next, next->free);
}

void* heap_alloc_slow(Heap* heap, unsigned cls, bool from_direct, size_t size) noexcept {
  if (void* block = heap_switch_slab(heap, cls)) return block;
  if (from_direct && heap->windows != nullptr) return window_alloc(heap, cls);
  // Counted small allocations (statistics) come here every time: count, and
  // take the block at once unless a sample is due.
  if (from_direct) {
    Page* page = heap->current[cls];
    if (XALLOC_LIKELY(page->free != nullptr) && prof::watching()) {
      int64_t left = heap->sample_countdown - static_cast<int64_t>(kClassInfo[cls].size);
      if (XALLOC_LIKELY(left > 0)) {
        prof::count(heap, cls, size);
        heap->sample_countdown = left;
        return slab_pop(page, page->free);
      }
    }
  }
  // Before the refill: the slab take that finds the heap past the
  // threshold then leaves its collapses to the purger (span_allocator.cpp).
  purger_start_if_due();
  return heap_alloc_refill(heap, cls, from_direct, size);
}

namespace {

void* heap_alloc_refill(Heap* heap, unsigned cls, bool from_direct, size_t requested) {
  if (XALLOC_UNLIKELY(heap == &g_empty_heap)) {
    // Aligned requests come here by class too: a class's blocks are aligned
    // to the largest power of two that divides its size.
    if (emergency::active()) {
      uint32_t size = kClassInfo[cls].size;
      return emergency::alloc(size, size & (~size + 1));
    }
    heap = thread_heap_acquire();
    if (heap == nullptr) {
      void* block = thread_heap_torn_down()
                          ? with_late_heap([](Heap* late, unsigned c) { return heap_alloc_slow(late, c); }, cls, true)
                          : nullptr;
      if (block == nullptr) errno = ENOMEM;
      return block;
    }
  }
  // Sizes above kMaxSmallSize come here by class from every path, and any
  // path takes a larger block of a larger alignment (size_classes.h).
  if (heap->young && (from_direct || cls >= kNumSmallClasses)) cls = young_class(cls);
  if (XALLOC_UNLIKELY(heap->drain_requested.load(std::memory_order_acquire) != 0)) answer_drain_request(heap);
  if (XALLOC_UNLIKELY(prof::watching()) && from_direct) {
    if (void* sampled = prof::watch(heap, cls, kClassInfo[cls].size, 0, requested)) return sampled;
  }
  // The class's borrowed list ran dry: serve the current slab again.
  if (borrowed_list_ran_dry(heap, cls)) heap_serve(heap, cls);
  heap->class_slow_at[cls] = heap->slow_calls;
  Page* page = heap->current[cls];
  XALLOC_DEBUG_ONLY(if (page != &g_empty_page) check_slab(heap, page));
  if (page->free != nullptr) return slab_pop(page, page->free);
  if (page != &g_empty_page && !page->fully_carved()) {
    slab_carve(page);
    return slab_pop(page, page->free);
  }
  heap_tick(heap);

  if (inbox_pending(heap)) {
    heap_drain_inbox_for_reuse(heap);
    if (page->free != nullptr) return slab_pop(page, page->free);
  }
  if (page != &g_empty_page) {
    if (heap->young) heap_grow_up(heap);
    retire_current(heap, cls, page);
  }

  page = heap->partial[cls];
  if (page == nullptr) page = spare_reuse(heap, cls);  // empty, its free list intact
  if (page == nullptr && (page = slab_pool::take(cls)) != nullptr) slab_adopt(heap, page);
  if (page == nullptr && borrow_from_stalled(heap, cls))
    return slab_pop(&heap->borrowed->list[cls], heap->borrowed->list[cls].free);
  if (page == nullptr) {
    page = slab_create(heap, cls);
    if (page == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
  }
  make_current(heap, cls, page);
  if (page->free == nullptr) slab_carve(page);
  return slab_pop(page, page->free);
}

}  // namespace

void* heap_alloc_zeroed(Heap* heap, unsigned cls, size_t size) {
  Page* page = heap->current[cls];
  uint64_t carved_before = page->carved_bytes();
  void* block = page->free != nullptr ? slab_pop(page, page->free) : heap_alloc_slow(heap, cls);
  if (block == nullptr) return nullptr;
  // A block this call carved from a slab whose memory was all zero when it
  // was taken (blocks of a page or more are carved one at a time) holds
  // nothing but the words carving wrote. Decided after the fact: the slow
  // path may drain blocks back from other threads onto this very slab and
  // hand out one of those, or move on to another slab.
  auto address = reinterpret_cast<uintptr_t>(block);
  bool fresh = page != &g_empty_page && page->is_zero && address >= page->start + carved_before &&
               address < page->start + page->carved_bytes();
  memset(block, 0, fresh ? sizeof(FreeBlock) : size);
  return block;
}

}  // namespace xalloc
