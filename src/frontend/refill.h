// The allocation slow path: what a heap does when the free list that
// serves a class is empty - switch to another slab of the class, drain
// blocks sent back by other threads, carve, take a slab from the spares,
// the pool, a stalled heap or the span allocator - and the allocations of
// threads without a heap.
#pragma once

#include <cstddef>

#include "frontend/heap.h"

namespace xalloc {

// The refill most slow paths of a busy class come for, kept short: its
// current slab is used up and another of its slabs has free blocks again
// (random replacement spreads a class's live blocks over a few slabs, and
// the current one runs out every few allocations). Null when anything else
// is due - a drain to answer, blocks in the inbox, the heap's periodic work,
// a young heap, borrowed blocks, watched allocations, a slab to carve -
// which heap_alloc_slow's general path does.
void* heap_switch_slab(Heap* heap, unsigned cls);

// The slow path of the inline fast paths in alloc.h.
// `from_direct`: called by alloc() for a small size of `size` bytes
// (watched allocations are counted and sampled there).
void* heap_alloc_slow(Heap* heap, unsigned cls, bool from_direct = false, size_t size = 0) noexcept;
// A zeroed block of class `cls`: blocks carved from memory fresh from the
// OS are already zero but for the free-list words carving wrote.
void* heap_alloc_zeroed(Heap* heap, unsigned cls, size_t size);

}  // namespace xalloc
