#include "frontend/inbox.h"

#include "backend/segment.h"
#include "frontend/quarantine.h"
#include "support/debug.h"
#include "support/options.h"

namespace xalloc {

std::atomic<Heap*> g_stalled[kStalledSlots];
static_assert(kStalledSlots == 8, "stalled_slot takes the top 3 bits of a hash");

namespace {

size_t stalled_slot(const Heap* heap) {
  return static_cast<size_t>(((reinterpret_cast<uintptr_t>(heap) >> 6) * 0x9E3779B97F4A7C15ull) >> 61);
}

template <bool kForReuse>
XALLOC_INLINE void return_block(Heap* heap, FreeBlock* block) {
  auto address = reinterpret_cast<uintptr_t>(block);
  Page* page = page_of(segment_of(address), address);
  XALLOC_CHECK(page->owner == heap);
  if (XALLOC_UNLIKELY(!freed_block_canary_intact(page, block))) report_overwritten_canary(page, block);
  if (kForReuse) return heap_free_owned(heap, page, block);
  slab_free_block(heap, page, block);
}

template <bool kForReuse>
void drain_inbox(Heap* heap, bool every_lane) {
  heap->inbox_bytes.store(0, std::memory_order_relaxed);
  FreeBlock* taken[kLanes];
  if (inbox_take(heap, taken, every_lane) == 0) return;
  // The lanes that hold blocks, side by side: their next blocks are loaded
  // independently, so their cache misses overlap.
  FreeBlock* lists[kLanes];
  size_t active = 0;
  for (FreeBlock* list : taken)
    if (list != nullptr) lists[active++] = list;
  while (active != 0) {
    for (size_t i = 0; i < active;) {
      FreeBlock* block = lists[i];
      FreeBlock* next = remote_next(block);
      return_block<kForReuse>(heap, block);
      if (next != nullptr) lists[i++] = next;
      else lists[i] = lists[--active];
    }
  }
}

}  // namespace

void heap_drain_inbox(Heap* heap) { drain_inbox<false>(heap, false); }

void heap_drain_inbox_final(Heap* heap) { drain_inbox<false>(heap, true); }

void heap_drain_inbox_for_reuse(Heap* heap) { drain_inbox<true>(heap, false); }

// (Only with the option on: the slots are shared by every thread.)
void note_stalled(Heap* heap) {
  if (g_options.borrow) g_stalled[stalled_slot(heap)].store(heap, std::memory_order_relaxed);
}

void orphan_collect(Heap* heap) {
  // Orphans are drained, and adopted, only under their orphan lock, so a
  // heap seen orphaned here is touched by nobody else meanwhile.
  LockGuard guard(heap->orphan_lock);
  if (heap->state.load(std::memory_order_relaxed) == HeapState::kOrphan) heap_drain_inbox(heap);
}

}  // namespace xalloc
