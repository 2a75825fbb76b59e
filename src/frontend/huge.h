// Huge blocks (above kMaxLargeSize): each gets a mapping of its own, laid
// out as a segment so that free() finds it the same way as any other
// block. realloc moves one with mremap instead of copying, and freed ones
// go to the huge cache (huge_cache.h) for reuse.
#pragma once

#include <cstddef>

#include "backend/segment.h"

namespace xalloc {

// `alignment` is 0 or a power of two; `zero` asks for zeroed memory (which
// costs nothing when the memory is fresh from the OS).
void* huge_alloc(size_t size, size_t alignment, bool zero);
void huge_free(Segment* segment);

// Resizes the huge block `ptr` of `segment` to `size` bytes (at most
// kMaxRequest) without copying it: within its mapping, or by remapping its
// pages. Returns the block, moved or not; null if it must be copied (a
// block no longer huge, or the kernel refused), the block left as it was.
void* huge_resize(Segment* segment, void* ptr, size_t size);

}  // namespace xalloc
