#include "meta/slab.h"

#include "support/report.h"

namespace xalloc {

uint64_t slab_blocks_in_use(const Page* page) {
  uint64_t needed = __atomic_load_n(&page->needed, __ATOMIC_RELAXED);
  switch (page->state()) {
    case SlabState::kCurrent: return needed - kCurrentBias;
    case SlabState::kPartial: return needed;
    case SlabState::kFull: return page->capacity() - (wake_threshold(page->capacity()) - needed);
    default: return 0;
  }
}

void report_corrupt_free_list(const Page* page, const void* block) {
  report::fatal("heap corruption: the free list of the slab at %p (%u-byte class) is damaged after block %p",
                reinterpret_cast<const void*>(page->start), page->block_size(), block);
}

// Found when the run of blocks another thread freed reaches its owner
// (frontend/remote_free.h): its head's tail or length no longer fit its
// slab.
void report_written_after_free(const Page* page, const void* block) {
  report::fatal("heap corruption: %p (%u-byte class) was written after another thread freed it", block,
                page->block_size());
}

// Found when a block another thread freed reaches its owner: the overflow
// happened before, in code the stack printed here (the owner's) need not
// show.
void report_overwritten_canary(const Page* page, const void* block) {
  report::fatal(
      "heap overflow (canary at the end of the block overwritten) of %p (%u-byte class), found after the block "
      "was freed, before its reuse",
      block, page->block_size());
}

}  // namespace xalloc
