// Large blocks (above kMaxSlabSize, up to kMaxLargeSize): spans of slices
// taken straight from the span allocator, or from the spans the thread
// keeps (kept_spans.h). Their size is kept to the OS page, and realloc
// grows them in place when the slices after them are free.
#pragma once

#include <cstddef>

#include "meta/page.h"

namespace xalloc {

struct Heap;

// `alignment` is 0 or a power of two; `zero` asks for zeroed memory (which
// costs nothing when the memory is fresh from the OS). Sizes past what a
// segment holds go to huge_alloc.
void* large_alloc(size_t size, size_t alignment, bool zero);
void large_free(Page* page);

// Resizes the large block of `page` to `size` bytes in place; false if it
// cannot (a size that is not large, or the slices after it are taken), the
// block left as it was for realloc to move.
bool large_resize_in_place(Page* page, size_t size);

// The block of a sampled allocation (heap_profiler.h): a large block of its
// own, from `heap`'s kept spans when one fits.
void* large_alloc_sampled(Heap* heap, size_t size, size_t alignment);

}  // namespace xalloc
