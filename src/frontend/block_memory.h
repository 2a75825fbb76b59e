// The memory of large and huge blocks, shared by large.cpp, kept_spans.cpp
// and huge.cpp: the guard page that follows a block in secure mode, a large
// span's way back to the span allocator, the zeroing of reused memory for
// calloc, and the population of fresh memory that realloc copies into or
// that the program is seen to write in full.
#pragma once

#include <cstddef>
#include <cstdint>

#include "frontend/heap.h"
#include "meta/page.h"
#include "meta/secure.h"
#include "platform/os.h"
#include "backend/span_allocator.h"

namespace xalloc {

// Zeroes a block for calloc whose memory held other blocks before (a kept
// span, dirty slices, a cached huge mapping), writing only the pages that
// are mostly resident (block_memory.cpp says why).
void zero_reused(void* block, size_t size);

// Before a copy writes the first `bytes` of `block` (realloc moving a
// block): when it is a large or huge block whose memory read as zero when
// it was taken (Page::is_zero: fresh or purged, so not resident), those
// pages are made resident in one call instead of a page fault each
// (os::populate). Anything else is left alone.
void populate_for_copy(void* block, size_t bytes);

// Big blocks and how the program writes them. Memory that reads as zero
// faults its pages in one at a time as the program first writes them;
// where it writes its blocks in full (a string or buffer filled, a copy),
// one call makes a block resident for about half the cost (os.h), and a
// huge block on huge pages costs a fault per 2 MiB. Both are judged from
// the blocks themselves: before a thread takes a large or huge block, it
// looks at the one it took before (mincore), unless it freed it since
// (its memory may be reused or purged by then). That block gives the
// huge-page verdict (huge_ranges::note_block), so that a program that
// fills each buffer before it asks for the next has its second on huge
// pages while both are live; and, if it was a fresh large block, its
// size's verdict for its thread (a verdict per power of two of pages: a
// thread's buffers of one size tend to be written alike, and a growing
// container's array, half written when it is judged, says nothing of the
// strings it holds). A fresh large block's tail, the last eighth of its
// pages (64 at most), is never populated, so that what is resident there is
// what the program wrote: all of it sets the size's verdict, less clears
// it. A program that writes a byte here and there in each block (a header,
// the last byte) keeps its blocks faulting page by page.
void judge_last_big_block(Heap* heap);
// After judge_last_big_block: `heap` hands out the block at `start` of
// `bytes` (whole pages), a large block from memory that read as zero when
// `fresh_large`; made resident but for its tail when it is one of a size
// the thread writes in full (unless calloc zeroes it, `zero`, which writes
// it all anyway); remembered for the next judgement.
void hand_out_big_block(Heap* heap, uintptr_t start, size_t bytes, bool fresh_large, bool zero);
// The thread of `heap` frees the block at `start`.
inline void forget_big_block(Heap* heap, uintptr_t start) {
  if (heap->last_big.start == start) heap->last_big = {};
}

// Secure mode: the guard page after a large or huge block that ends at
// `end` (its descriptor remembers how the guard was made). Inline: outside
// secure mode these compile to nothing at every call.
inline void guard_after(Page* page, uintptr_t end) {
  if (secure::kEnabled) page->guard_protected = os::guard_install(reinterpret_cast<void*>(end), secure::kGuardBytes);
}

inline void unguard_after(const Page* page, uintptr_t end) {
  if (secure::kEnabled) os::guard_remove(reinterpret_cast<void*>(end), secure::kGuardBytes, page->guard_protected);
}

// Secure mode: a large block's guard page follows its last page. A span
// kept for its thread's next block, or handed back to it, keeps the guard
// where its last block ended, so that a buffer allocated and freed in a
// loop moves no guard; it comes down when the span goes back to the span
// allocator.
inline void large_guard_at(Page* span, size_t usable) {
  if (!secure::kEnabled) return;
  guard_after(span, span->start + usable);
  span->guard_offset = static_cast<uint32_t>(usable);
}

inline void large_unguard(const Page* span) {
  if (secure::kEnabled) unguard_after(span, span->start + span->guard_offset);
}

// Gives a large span, its guard taken down, to the span allocator.
inline void large_release(Page* span) {
  large_unguard(span);
  g_spans.release(span);
}

}  // namespace xalloc
