#include "frontend/inbox.h"

#include "backend/segment.h"
#include "frontend/quarantine.h"
#include "platform/os.h"
#include "support/debug.h"
#include "support/options.h"

namespace xalloc {

std::atomic<Heap*> g_stalled[kStalledSlots];
static_assert(kStalledSlots == 8, "stalled_slot takes the top 3 bits of a hash");

namespace {

size_t stalled_slot(const Heap* heap) {
  return static_cast<size_t>(((reinterpret_cast<uintptr_t>(heap) >> 6) * 0x9E3779B97F4A7C15ull) >> 61);
}

// A drain's first kWarmBytes of runs are walked block by block, each
// block's link written again: they come back to the heap's cache, as a
// block by block return would bring them, where the heap will soon
// allocate them (a producer whose consumer frees what it made: the blocks
// of each run popped cold, one cache miss after the other, took 2x the
// time). Past that, what is walked now would leave the cache before it is
// allocated, and the runs go back unread.
constexpr size_t kWarmBytes = kDrainRequestBytes;

void warm_run(FreeBlock* head, size_t count) {
  FreeBlock* block = head;
  for (size_t i = 1; i < count; ++i) {
    FreeBlock* next = block->next;
    __atomic_store_n(&block->next, next, __ATOMIC_RELAXED);  // the line for writing, as a push takes it
    block = next;
  }
}

// Returns the run or the block at `block` (remote_free.h) to its slab, and
// gives the next one on the list. `warm`: bytes the drain may still walk.
template <bool kForReuse>
XALLOC_INLINE FreeBlock* return_run(Heap* heap, FreeBlock* block, size_t& warm) {
  auto address = reinterpret_cast<uintptr_t>(block);
  Page* page = page_of(segment_of(address), address);
  XALLOC_CHECK(page->owner == heap);
  if (carries_run(page->block_size())) {
    FreeBlock* tail = run_tail(block);
    size_t count = run_count(block);
    // A run that does not end in its own slab, or is longer than the slab,
    // was overwritten on its way (a write after free).
    if (XALLOC_UNLIKELY(reinterpret_cast<uintptr_t>(tail) < page->start ||
                        !is_carved_block_start(page, reinterpret_cast<uintptr_t>(tail), page->carved_limit) ||
                        count - 1 >= page->capacity()))
      report_written_after_free(page, block);
    FreeBlock* next = run_next(block);
    size_t bytes = count * page->block_size();
    if (bytes <= warm) {
      warm -= bytes;
      warm_run(block, count);
    }
    slab_free_run(heap, page, block, tail, static_cast<uint32_t>(count));
    return next;
  }
  FreeBlock* next = remote_next(block);
  if (XALLOC_UNLIKELY(!freed_block_canary_intact(page, block))) report_overwritten_canary(page, block);
  if (kForReuse) heap_free_owned(heap, page, block);
  else slab_free_block(heap, page, block);
  return next;
}

template <bool kForReuse>
void drain_inbox(Heap* heap, bool every_lane) {
  heap->inbox_bytes.store(0, std::memory_order_relaxed);
  FreeBlock* taken[kLanes];
  if (inbox_take(heap, taken, every_lane) == 0) return;
  // The lanes that hold blocks, side by side: their next runs are loaded
  // independently, so their cache misses overlap.
  FreeBlock* lists[kLanes];
  size_t active = 0;
  for (FreeBlock* list : taken)
    if (list != nullptr) lists[active++] = list;
  size_t warm = kWarmBytes;
  while (active != 0) {
    for (size_t i = 0; i < active;) {
      FreeBlock* next = return_run<kForReuse>(heap, lists[i], warm);
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
  if (!g_options.borrow) return;
  heap->stalled_since.store(os::monotonic_ms(), std::memory_order_relaxed);
  g_stalled[stalled_slot(heap)].store(heap, std::memory_order_relaxed);
}

void orphan_collect(Heap* heap) {
  // Orphans are drained, and adopted, only under their orphan lock, so a
  // heap seen orphaned here is touched by nobody else meanwhile.
  LockGuard guard(heap->orphan_lock);
  if (heap->state.load(std::memory_order_relaxed) == HeapState::kOrphan) heap_drain_inbox(heap);
}

}  // namespace xalloc
