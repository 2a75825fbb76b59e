// Spans of freed large blocks held for reuse, and the passes that give
// them back.
//
// A thread keeps the span of a large block it frees for its next large
// block of about that length (kept spans); a span freed by another thread
// goes back to the heap that allocated it (returned spans). Both go to the
// span allocator when their heap's thread exits, trims or stops using them
// (the reclaim pass), and all at once when the OS refuses memory
// (release_cached_memory, heap_upkeep.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "meta/page.h"

namespace xalloc {

struct Heap;

// A span of `slices` slices for a large block of `usable` bytes, from
// `heap`'s kept spans or those other threads handed back to it, set up for
// the block (its home not yet set); null if none fits.
Page* take_kept_span(Heap* heap, size_t slices, size_t usable);

// The calling thread keeps the span of a large block it frees; false if it
// may not (too long, or no active heap), the span left to the caller.
bool keep_span(Page* span);

// Hands the span of a large block freed by another thread than its
// allocating one back to that heap; false if the heap is gone or holds its
// share, the span left to the caller.
bool return_span_home(Page* span);

// Gives the spans of freed large blocks that `heap` keeps, and those other
// threads handed back to it, to the span allocator.
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


}  // namespace xalloc
