// The slabs of a heap: carving their blocks, their life cycle (current,
// partial, full, empty), spare empty slabs kept for reuse, and their
// return to the slab pool or the span allocator.
#pragma once

#include <cstdint>

#include "frontend/heap.h"
#include "meta/slab.h"
#include "support/debug.h"

namespace xalloc {

// An empty current slab of a class that has taken no slow path for this
// many of its heap's slow calls leaves the heap (current_slabs_expire).
constexpr uint32_t kCurrentLifetime = 256;
static_assert((kCurrentLifetime & (kCurrentLifetime - 1)) == 0, "heap_periodic masks slow_calls with it");

void heap_on_needed_zero(Heap* heap, Page* page) noexcept;

// Frees `block`, a checked and marked block of `page`, which `heap` owns,
// for real: back on the slab's free list, and the slab's slow path when
// that was the free it waited for. (`link_secret` as for slab_push.)
XALLOC_INLINE void slab_free_block(Heap* heap, Page* page, FreeBlock* block,
                                   uintptr_t link_secret = secure::g_secrets.link) {
  slab_push(page, block, link_secret);
  if (XALLOC_UNLIKELY(--page->needed == 0)) heap_on_needed_zero(heap, page);
}

// Frees the `count` blocks head..tail of `page`, checked, marked and
// linked as on its free list, which `heap` owns: the run a remote free
// brought (remote_free.h), on the slab's free list at once. The slab's
// slow path runs each time the run reaches the free it waited for, as
// block by block (a full slab wakes, then may empty).
XALLOC_INLINE void slab_free_run(Heap* heap, Page* page, FreeBlock* head, FreeBlock* tail, uint32_t count) {
  set_next_free(page, tail, page->free);
  page->free = head;
  while (count >= page->needed) {
    count -= page->needed;
    page->needed = 0;
    heap_on_needed_zero(heap, page);
    if (count == 0) return;
    XALLOC_CHECK(page->needed != 0);  // an empty slab has no block left to come back
  }
  page->needed -= count;
}

// The partial list of a class: slabs with free blocks, doubly linked.
inline void partial_push(Heap* heap, Page* page) {

  Page*& head = heap->partial[page->size_class];
  page->prev = nullptr;
  page->next = head;
  if (head != nullptr) head->prev = page;
  head = page;
  page->set_state(SlabState::kPartial);
}

inline void partial_remove(Heap* heap, Page* page) {

  if (page->prev != nullptr) page->prev->next = page->next;
  else heap->partial[page->size_class] = page->next;
  if (page->next != nullptr) page->next->prev = page->prev;
  page->next = page->prev = nullptr;
  page->set_state(SlabState::kDetached);
}

// A slab with every block in use sleeps until enough of them come back.
// (Inline, as make_current: the switch to another slab of a class, the
// slow path a busy class takes most, is these two and little more.)
inline void file_full(Page* page) {

  page->needed = wake_threshold(page->capacity());
  page->set_state(SlabState::kFull);
}

inline void make_current(Heap* heap, unsigned cls, Page* page) {

  if (page->state() == SlabState::kPartial) partial_remove(heap, page);
  else page->needed = 0;  // a new slab
  page->needed += kCurrentBias;
  page->set_state(SlabState::kCurrent);
  heap_set_current(heap, cls, page);
}

// Carves the next batch of `page`'s blocks onto its free list.
void slab_carve(Page* page);
// A heap takes over an empty slab, from the pool (slab_pool.h) or fresh.
Page* slab_adopt(Heap* heap, Page* page);
// Adds the slabs `heap` counted on its own to the process-wide counters:
// when the count has moved far enough, and as its thread exits.
void slab_counts_publish(Heap* heap);
// A new slab of `cls`, or null when the OS has no memory.
Page* slab_create(Heap* heap, unsigned cls);
// A spare of class `cls`, or null (none, or claimed by the reclaim pass).
Page* spare_reuse(Heap* heap, unsigned cls);
// Lets go of empty current slabs of classes unused for a while, and of
// spares past their lifetime (the heap's periodic work).
void current_slabs_expire(Heap* heap);
void spares_expire(Heap* heap);
// The current slab has no block left to hand out.
void retire_current(Heap* heap, unsigned cls, Page* page);
// Files a slab that stopped being current; `needed` holds its blocks in use.
void settle_uncurrent(Heap* heap, Page* page);
// Gives every spare slab of `heap` up (its thread, between kept_enter and
// kept_exit, or the reclaim pass, after its barrier).
void spares_release_all(Heap* heap);
#if defined(XALLOC_DEBUG_CHECKS)
// Validates a slab of `heap` (debug builds).
void check_slab(const Heap* heap, const Page* page);
#endif

}  // namespace xalloc
