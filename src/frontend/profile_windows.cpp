#include "frontend/profile_windows.h"

#include "backend/segment.h"
#include "frontend/heap_slabs.h"

namespace xalloc {

namespace {

constexpr uint64_t kWindowCarveBytes = 4 * kOsPageSize;

}  // namespace

// Takes the longest run of the current slab's free blocks that ends before
// the class's next sampled byte into the class's window (heap.h).
void window_open(Heap* heap, unsigned cls) {
  Page* page = heap->current[cls];
  if (page == &g_empty_page) return;
  uint64_t size = kClassInfo[cls].size;
  // A current slab's blocks are carved, and either listed or in use
  // (blocks in the inbox count as in use until drained).
  uint64_t listed = page->carved() - (page->needed - kCurrentBias);
  // Every empty window costs a trip through here: carve ahead (a few
  // batches) rather than open windows of one batch of large blocks.
  while (listed * size < kWindowCarveBytes && !page->fully_carved()) {
    uint64_t before = page->carved();
    slab_carve(page);
    listed += page->carved() - before;
  }
  if (listed == 0) return;
  FreeBlock* first = page->free;
  uint64_t taken = listed;
  int64_t countdown = heap->windows->countdown[cls];
  if (listed * size < static_cast<uint64_t>(countdown)) {
    page->free = nullptr;
  } else {
    taken = static_cast<uint64_t>(countdown - 1) / size;  // the blocks before the sampled byte
    if (taken == 0) return;
    FreeBlock* last = first;
    for (uint64_t i = 1; i < taken; ++i) last = next_free(page, last);
    page->free = next_free(page, last);
    set_next_free(page, last, nullptr);
  }
  page->needed += taken;
  heap->windows->window[cls].free = first;
}

// Counts the bytes popped from the window of `cls` since it was last
// counted towards the class's next sample.
void window_count_pops(Heap* heap, unsigned cls) {
  Page& window = heap->windows->window[cls];
  heap->windows->countdown[cls] -= static_cast<int64_t>(window.needed * kClassInfo[cls].size);
  window.needed = 0;
}

// Returns the blocks left in the heap's windows to their slabs.
void windows_close(Heap* heap) {
  if (heap->windows == nullptr) return;
  for (unsigned cls = 0; cls < kNumSmallClasses; ++cls) {
    window_count_pops(heap, cls);
    Page& window = heap->windows->window[cls];
    while (window.free != nullptr) {
      FreeBlock* block = window.free;
      window.free = next_free(&window, block);
      auto address = reinterpret_cast<uintptr_t>(block);
      slab_free_block(heap, page_of(segment_of(address), address), block);
    }
  }
}

}  // namespace xalloc
