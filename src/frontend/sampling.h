// Watched allocations (frontend's side of diag/heap_profiler.h): counting
// them by class for the statistics and taking the profiler's samples,
// whose blocks are large spans of the allocating heap.
#pragma once

#include <cstddef>
#include <cstdint>

#include "diag/heap_profiler.h"
#include "frontend/heap.h"

namespace xalloc::prof {

// Samples an allocation of `size` bytes now: the sampled block, or null
// when the profiler is off (or this thread is already taking a sample).
void* sample(Heap* heap, size_t size, size_t alignment);

// The heap's byte countdown ran out: starts the next one and samples this
// allocation (null when not sampled).
void* sample_due(Heap* heap, size_t size, size_t alignment);

// Counts a request of `requested` bytes served by class `cls` (kNumClasses
// for large, kNumClasses + 1 for huge): the statistics' mean request of a
// class, which estimates what rounding to the class costs.
inline void count(Heap* heap, unsigned cls, size_t requested) {
  heap->requests[cls]++;
  heap->requested_bytes[cls] += requested;
}

// Counts a watched allocation (count) and samples it when due, as one of
// `size` bytes: a sampled block, or null to go on with the ordinary
// allocation. Inline: with statistics on, every allocation comes here.
inline void* watch(Heap* heap, unsigned cls, size_t size, size_t alignment, size_t requested) {
  count(heap, cls, requested);
  heap->sample_countdown -= static_cast<int64_t>(size);
  if (__builtin_expect(heap->sample_countdown > 0, 1)) return nullptr;
  return sample_due(heap, size, alignment);
}

}  // namespace xalloc::prof
