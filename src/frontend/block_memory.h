// The memory of large and huge blocks, shared by large.cpp, kept_spans.cpp
// and huge.cpp: the guard page that follows a block in secure mode, a large
// span's way back to the span allocator, the zeroing of reused memory for
// calloc, and the population of fresh memory that realloc copies into.
#pragma once

#include <cstddef>
#include <cstdint>

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
