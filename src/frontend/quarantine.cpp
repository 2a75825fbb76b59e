#include "frontend/quarantine.h"

#include "support/debug.h"

namespace xalloc {

#if XALLOC_SECURE
namespace {

// Frees the blocks of the slots [from, to) for real; a slot never filled
// is empty. Their blocks were freed a lap ago and may have left the cache:
// each is fetched a few slots ahead of its link store (a prefetch of null
// does nothing).
void quarantine_release(Heap* heap, Quarantine::Slot* from, Quarantine::Slot* to) {
  uintptr_t link_secret = secure::g_secrets.link;
  for (Quarantine::Slot* slot = from; slot != to; ++slot) {
    __builtin_prefetch(slot[Quarantine::kLookahead].block, 1);
    FreeBlock* block = slot->block;
    if (block == nullptr) continue;
    Page* page = slot->page;
    XALLOC_CHECK(page->owner == heap);
    slab_free_block(heap, page, block, link_secret);
  }
}

// The end of the ring's second half.
Quarantine::Slot* quarantine_end(const Heap* heap) {
  return heap->quarantine.mid + (heap->quarantine.mid - heap->quarantine.slots);
}

}  // namespace

// The free that finds the filling half full: frees the other half's blocks
// (a lap old) and fills that half next.
void quarantine_swap_halves(Heap* heap, Page* page, FreeBlock* block) noexcept {
  Quarantine::Slot* begin = heap->quarantine.slots;
  Quarantine::Slot* mid = heap->quarantine.mid;
  if (mid == begin) return slab_free_block(heap, page, block);  // no quarantine
  Quarantine::Slot* end = quarantine_end(heap);
  Quarantine::Slot* next = heap->quarantine.next;
  if (next == mid) {
    quarantine_release(heap, mid, end);
    heap->quarantine.turn = end;
  } else {
    quarantine_release(heap, begin, mid);
    next = begin;
    heap->quarantine.turn = mid;
  }
  *next = {block, page};
  heap->quarantine.next = next + 1;
}

void quarantine_flush(Heap* heap) {
  Quarantine::Slot* begin = heap->quarantine.slots;
  Quarantine::Slot* mid = heap->quarantine.mid;
  Quarantine::Slot* end = quarantine_end(heap);
  Quarantine::Slot* next = heap->quarantine.next;
  // The other half, a lap old, then the filling half up to `next` (the
  // slots after it were freed a lap ago).
  bool filling_first = heap->quarantine.turn == mid;
  quarantine_release(heap, filling_first ? mid : begin, filling_first ? end : mid);
  quarantine_release(heap, filling_first ? begin : mid, next);
  for (Quarantine::Slot* slot = begin; slot != end; ++slot) *slot = {nullptr, nullptr};
  heap->quarantine.next = begin;
  heap->quarantine.turn = mid;
}
#else
void quarantine_swap_halves(Heap*, Page*, FreeBlock*) noexcept {}
void quarantine_flush(Heap*) {}
#endif

}  // namespace xalloc
