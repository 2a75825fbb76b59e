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

#include "config.h"
#include "heap.h"
#include "page.h"
#include "report.h"
#include "segment.h"
#include "size_classes.h"

#define XALLOC_INLINE inline __attribute__((always_inline))
#define XALLOC_NOINLINE __attribute__((noinline))
#define XALLOC_LIKELY(x) __builtin_expect(!!(x), 1)
#define XALLOC_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace xalloc {

// Misuse checks on the fast path (double and invalid frees) can be compiled
// out to measure what they cost: cmake -DXALLOC_MISUSE_CHECKS=OFF.
#if !defined(XALLOC_MISUSE_CHECKS)
#define XALLOC_MISUSE_CHECKS 1
#endif

// A free block's second word holds this marker; allocation clears it. A
// block freed while it still holds its marker is already free: a double
// free. The marker is the address of the slab's descriptor, which is in a
// register on the free path anyway and which no program has reason to
// store in its own data.
XALLOC_INLINE uintptr_t free_marker(const Page* page) { return reinterpret_cast<uintptr_t>(page); }

// True when `address` is the start of a block of `page` (a slab):
// divisibility by the class size without a division.
XALLOC_INLINE bool is_block_start(const Page* page, uintptr_t address) {
  return (address - page->start) * page->div_magic < page->div_magic;
}

// The slab is its class's current one, so nothing is counted (page.h).
XALLOC_INLINE void* slab_pop(Page* page, FreeBlock* block) {
  page->free = block->next;
  if (XALLOC_MISUSE_CHECKS) block->marker = 0;
  return block;
}

// Pushes a block freed by the slab's owner; false if it is not a block
// start or already free (the caller reports it).
XALLOC_INLINE bool slab_push_checked(Page* page, FreeBlock* block) {
  if (XALLOC_MISUSE_CHECKS) {
    uintptr_t marker = free_marker(page);
    if (XALLOC_UNLIKELY(!is_block_start(page, reinterpret_cast<uintptr_t>(block)) || block->marker == marker))
      return false;
    block->marker = marker;
  }
  block->next = page->free;
  page->free = block;
  return true;
}

// Out-of-line paths (alloc.cpp). They set errno to ENOMEM on failure.
void* alloc_generic(Heap* heap, size_t size);
void free_generic(void* ptr, Caller caller);
// A block of an xalloc span the calling thread does not own as a slab
// (another thread's slab, a large or huge block), or one that failed the
// fast path's checks.
void free_not_local(Page* page, void* ptr, Caller caller);

XALLOC_INLINE void* alloc(size_t size) {
  Heap* heap = t_heap;
  if (XALLOC_LIKELY(size <= kMaxSmallSize)) {
    size_t granule = granule_of(size);
    Page* page = heap->direct[granule];
    FreeBlock* block = page->free;
    if (XALLOC_LIKELY(block != nullptr)) return slab_pop(page, block);
    return heap_alloc_slow(heap, kGranuleClass[granule]);
  }
  return alloc_generic(heap, size);
}

XALLOC_INLINE void free(void* ptr, Caller caller) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  if (XALLOC_LIKELY(segment_map_entry(address) == kMapSegmentHead)) {
    Page* page = page_of(segment_of(address), address);
    Heap* heap = t_heap;
    if (XALLOC_LIKELY(page->owner == heap) && XALLOC_LIKELY(slab_push_checked(page, static_cast<FreeBlock*>(ptr)))) {
      if (XALLOC_UNLIKELY(--page->needed == 0)) heap_on_needed_zero(heap, page);
      return;
    }
    return free_not_local(page, ptr, caller);
  }
  free_generic(ptr, caller);
}

// The rest of the API (alloc.cpp).
void* alloc_zeroed(size_t size);
void* alloc_aligned(size_t size, size_t alignment);
void* realloc(void* ptr, size_t size, Caller caller);
size_t usable_size(const void* ptr, Caller caller);
bool owns(const void* ptr);
size_t trim();

}  // namespace xalloc
