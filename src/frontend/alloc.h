// The allocation and free fast paths, inlined into every entry point.
//
// malloc of up to 1 KiB: read the thread heap, index its direct table by
// 16-byte granule, pop the slab's free list. free: check the segment map,
// mask to the segment, one load for the slab descriptor; if this thread
// owns it, validate the pointer (a block start, not already free) and push.
// Everything else is out of line.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/config.h"
#include "frontend/heap.h"
#include "frontend/quarantine.h"
#include "frontend/refill.h"
#include "meta/page.h"
#include "support/report.h"
#include "backend/segment.h"
#include "meta/size_classes.h"
#include "meta/slab.h"
#include "platform/shared_count.h"

namespace xalloc {

// Out-of-line paths (alloc.cpp). They set errno to ENOMEM on failure.
// They are noexcept, as is every call the inline paths make (the core is
// built without exceptions): operator delete, built with them, may then
// jump to them where it would set up a frame to call them from.
void* alloc_generic(size_t size, Heap* heap) noexcept;
void free_generic(void* ptr, Caller caller) noexcept;
// Every free of a block in a segment that the inline path does not finish
// (`heap` is the calling thread's): another thread's slab block (staged
// for its owner, remote_free.h, whose drain quarantines it in secure
// mode), a large or huge block, or misuse (reported).
void free_not_local(void* ptr, Page* page, Caller caller, Heap* heap) noexcept;

// What alloc() does above kMaxSmallSize. (In secure mode every block ends
// in a canary: the request grows by its size, checked for overflow only
// here, out of the fast path.)
XALLOC_INLINE void* alloc_beyond_small(size_t size, Heap* heap) {
  if (secure::kEnabled && __builtin_add_overflow(size, secure::kCanaryBytes, &size)) size = SIZE_MAX;
  return alloc_generic(size, heap);
}

// alloc() with its two ways out of line named by the caller: `refill(heap,
// class, size)` when the class's list is empty, `beyond(size, heap)` above
// kMaxSmallSize. For entry points with a slow path of their own (operator
// new): a call on their fast path would make them save the size across it.
template <typename Refill, typename Beyond>
XALLOC_INLINE void* alloc_or(size_t size, Refill refill, Beyond beyond) {
  shared_count::malloc_done();
  Heap* heap = t_heap;
  if (XALLOC_LIKELY(size <= kMaxSmallSize - secure::kCanaryBytes)) {
    size_t granule = granule_of(size + secure::kCanaryBytes);
    Page* page = __atomic_load_n(&heap->direct[granule], __ATOMIC_RELAXED);
    FreeBlock* block = page->free;
    if (XALLOC_LIKELY(block != nullptr)) return slab_pop(page, block);
    return refill(heap, kGranuleClass[granule], size);
  }
  return beyond(size, heap);
}

XALLOC_INLINE void* alloc(size_t size) {
  return alloc_or(
      size, [](Heap* heap, unsigned cls, size_t bytes) { return heap_alloc_slow(heap, cls, true, bytes); },
      alloc_beyond_small);
}

XALLOC_INLINE void free(void* ptr, Caller caller) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  uintptr_t map_index = segment_map_index(address);
  if (XALLOC_LIKELY(segment_map_entry_at(map_index) == kMapSegmentHead)) {
    Page* page = page_at_index(map_index, address);
    Heap* heap = t_heap;
    auto* block = static_cast<FreeBlock*>(ptr);
    if (XALLOC_UNLIKELY(page->owner != heap)) return free_not_local(ptr, page, caller, heap);
    if (XALLOC_LIKELY(slab_check_and_mark(page, block, page->carved_limit))) {
      return heap_free_owned(heap, page, block);
    }
    return free_not_local(ptr, page, caller, heap);
  }
  free_generic(ptr, caller);
}

// Aligned blocks that need more than alloc() gives (alloc.cpp).
void* alloc_aligned_generic(size_t size, size_t alignment) noexcept;

// An aligned small block: the smallest class whose size is a multiple of
// the alignment (aligned_class_of), popped from what serves that class -
// its current slab, or the profiler's window or borrowed blocks, all blocks
// of the class. While allocations are watched, and when the list is empty,
// the class serves g_empty_page or nothing, and the generic path does the
// rest (C++ types aligned to a cache line come here at every `new`).
XALLOC_INLINE void* alloc_aligned(size_t size, size_t alignment) {
  if (XALLOC_LIKELY(alignment > kMinAlignment && alignment <= kMaxSmallSize &&
                    size <= kMaxSmallSize - secure::kCanaryBytes)) {
    Heap* heap = t_heap;
    Page* page = heap->serving[aligned_class_of(size + secure::kCanaryBytes, alignment)];
    FreeBlock* block = page->free;
    if (XALLOC_LIKELY(block != nullptr)) {
      shared_count::malloc_done();
      return slab_pop(page, block);
    }
  }
  return alloc_aligned_generic(size, alignment);
}

// The rest of the API (alloc.cpp).
void* alloc_zeroed(size_t size);
void* realloc(void* ptr, size_t size, Caller caller);
size_t usable_size(const void* ptr, Caller caller);
bool owns(const void* ptr);
size_t trim();

}  // namespace xalloc
