// Large and huge blocks.
//
// Large blocks (above kMaxSlabSize, up to kMaxLargeSize) are spans of
// slices taken straight from the span allocator; their size is kept to the
// OS page, and realloc grows them in place when the slices after them are
// free. Huge blocks (above kMaxLargeSize) get a mapping of their own, laid
// out as a segment so free() finds them the same way; realloc moves them
// with mremap instead of copying (realloc copies the others), and freed ones
// are cached for reuse.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meta/page.h"
#include "support/report.h"
#include "backend/segment.h"

namespace xalloc {

// `alignment` is 0 or a power of two; `zero` asks for zeroed memory (which
// costs nothing when the memory is fresh from the OS).
void* large_alloc(size_t size, size_t alignment, bool zero);
void large_free(Page* page);
// Resizes the large block of `page` to `size` bytes in place; false if it
// cannot (a size that is not large, or the slices after it are taken), the
// block left as it was for realloc to move.
bool large_resize_in_place(Page* page, size_t size);

struct Heap;
// The block of a sampled allocation (heap_profiler.h): a large block of its
// own, from `heap`'s kept spans when one fits.
void* large_alloc_sampled(Heap* heap, size_t size, size_t alignment);
// Gives the spans of freed large blocks that `heap` keeps (large.cpp), and
// those other threads handed back to it, to the span allocator.
void kept_spans_release(Heap* heap);
// Gives the spans other threads handed back to `heap` to the span
// allocator (its thread exits: thread_heap_teardown).
void returned_spans_release(Heap* heap);
// Gives the span allocator the spans that heaps' returned stacks have held
// since the previous pass, and the kept spans and spare slabs of heaps that
// have not used them since: at most one pass a purge delay (not more often
// than every kReclaimPassMinMs). With `force`, every heap's at once
// (malloc_trim, out of memory). A thread that went idle does not sit on
// them for good.
constexpr uint64_t kReclaimPassMinMs = 10;
void reclaim_idle_kept_memory(bool force, uint64_t now_ms);
void reclaim_reset_after_fork_child();

void* huge_alloc(size_t size, size_t alignment, bool zero);
void huge_free(Segment* segment);
// Resizes the huge block `ptr` of `segment` to `size` bytes (at most
// kMaxRequest) without copying it: within its mapping, or by remapping its
// pages. Returns the block, moved or not; null if it must be copied (a
// block no longer huge, or the kernel refused), the block left as it was.
void* huge_resize(Segment* segment, void* ptr, size_t size);

// Purges cached huge mappings past their delay (or over the budget); with
// `force`, unmaps them all. Returns the bytes given back.
size_t huge_cache_purge(bool force, uint64_t now_ms);

// The OS refused a mapping: unmaps everything xalloc keeps for reuse (cached
// huge blocks, empty segments). True if anything was released, so that the
// caller may try again.
bool release_cached_memory();
void huge_cache_maybe_purge(uint64_t now_ms);
void huge_cache_lock_for_fork();
void huge_cache_unlock_after_fork_parent();
void huge_cache_reset_after_fork_child();

}  // namespace xalloc
