// Secure mode's quarantine: a freed slab block waits for later frees of
// its heap before it can be reused (Heap::quarantine). In the default
// build a free goes straight back to its slab.
#pragma once

#include "frontend/heap_slabs.h"

namespace xalloc {

// Secure mode: `block`, a checked and marked block of `page`, which `heap`
// owns, waits in the heap's quarantine before it is freed for real.
void quarantine_swap_halves(Heap* heap, Page* page, FreeBlock* block) noexcept;
XALLOC_INLINE void quarantine_add(Heap* heap, Page* page, FreeBlock* block) {
#if XALLOC_SECURE
  Quarantine::Slot* slot = heap->quarantine.next;
  if (XALLOC_UNLIKELY(slot == heap->quarantine.turn)) return quarantine_swap_halves(heap, page, block);
  *slot = {block, page};
  heap->quarantine.next = slot + 1;
#else
  (void)heap;
  (void)page;
  (void)block;
#endif
}
// Frees `block`, a checked and marked block of `page`, which `heap` owns:
// into the quarantine in secure mode, else back on its slab at once.
XALLOC_INLINE void heap_free_owned(Heap* heap, Page* page, FreeBlock* block) {
  if (secure::kEnabled) return quarantine_add(heap, page, block);
  slab_free_block(heap, page, block);
}

// Secure mode: really frees every block waiting in the heap's quarantine.
void quarantine_flush(Heap* heap);

}  // namespace xalloc
