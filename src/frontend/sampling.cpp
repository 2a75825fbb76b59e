#include "frontend/sampling.h"

#include "backend/segment.h"
#include "diag/stack_trace.h"
#include "frontend/huge.h"
#include "frontend/large.h"

namespace xalloc::prof {

void* sample_due(Heap* heap, size_t size, size_t alignment) {
  if (t_in_sampler) return nullptr;  // the next allocation outside the sampler is sampled
  heap->sample_countdown = sample_interval();
  return sample(heap, size, alignment);
}

void* sample(Heap* heap, size_t size, size_t alignment) {
  if (!profiling() || t_in_sampler) return nullptr;
  // Allocations made while sampling (by the unwinder) are not sampled.
  t_in_sampler = true;
  void* frames[kMaxFrames];
  int depth = stack_trace_capture(frames, kMaxFrames, 0);
  // A span of its own, where the sampled mark lives; above the large
  // threshold the block is huge, as it would be unsampled (a span of most of
  // a segment would be purged at once when freed).
  void* block = size <= kMaxLargeSize ? large_alloc_sampled(heap, size, alignment) : huge_alloc(size, alignment, false);
  if (block != nullptr) record(lookup_page(reinterpret_cast<uintptr_t>(block)), size, frames, depth);
  t_in_sampler = false;
  return block;
}

}  // namespace xalloc::prof
