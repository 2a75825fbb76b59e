#include "frontend/heap_upkeep.h"

#include "backend/slab_pool.h"
#include "backend/span_allocator.h"
#include "diag/heap_profiler.h"
#include "frontend/borrow.h"
#include "frontend/heap_slabs.h"
#include "frontend/inbox.h"
#include "frontend/huge_cache.h"
#include "frontend/kept_spans.h"
#include "frontend/outbox.h"
#include "frontend/profile_windows.h"
#include "frontend/quarantine.h"
#include "frontend/thread_registry.h"
#include "platform/os.h"

namespace xalloc {

namespace {

// Kept spans of large blocks (heap.h) go back after this many slow paths
// unused.
constexpr uint32_t kKeptSpanLifetime = 64;

void heap_periodic(Heap* heap) {
  if (heap->spares.classes.load(std::memory_order_relaxed) != 0) spares_expire(heap);
  // (Not while the profiler's windows stand in front of the current slabs.)
  if ((heap->slow_calls & (kCurrentLifetime - 1)) == 0 && !prof::windowed()) current_slabs_expire(heap);
  if (heap->slow_calls - heap->kept.since >= kKeptSpanLifetime) kept_spans_release(heap);
  if (outbox_pending(heap->outbox)) outbox_flush(heap->outbox);
  heap->remote_frees_sent.store(heap->outbox.blocks, std::memory_order_relaxed);
  purge_idle_memory(os::monotonic_ms());
}

}  // namespace

void purge_idle_memory(uint64_t now_ms) {
  slab_pool::release_idle(now_ms);
  reclaim_idle_kept_memory(false, now_ms);
  g_spans.maybe_purge(now_ms);
  huge_cache_maybe_purge(now_ms);
}

void heap_tick(Heap* heap) {
  if ((++heap->slow_calls & 15) == 0) heap_periodic(heap);
}

void heap_collect(Heap* heap) {
  if (secure::kEnabled) quarantine_flush(heap);
  windows_close(heap);
  borrowed_return(heap);
  outbox_flush(heap->outbox);
  heap->remote_frees_sent.store(heap->outbox.blocks, std::memory_order_relaxed);
  heap_drain_inbox(heap);
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    Page* page = heap->current[cls];
    if (page == &g_empty_page) continue;
    heap_set_current(heap, cls, &g_empty_page);
    page->needed -= kCurrentBias;
    page->set_state(SlabState::kDetached);
    settle_uncurrent(heap, page);
  }
  heap_release_spares(heap);
}

void heap_release_spares(Heap* heap) {
  if (heap->spares.classes.load(std::memory_order_relaxed) != 0 && kept_enter(heap)) {
    spares_release_all(heap);
    kept_exit(heap);
  }
  kept_spans_release(heap);
}

void orphans_collect_all() {
  for_each_orphan(orphan_collect);
  // The heap of exiting threads also gives up its current slabs, which no
  // thread exit settles. (Its outbox and quarantine are always empty, so
  // this takes no other heap's inbox, and no second hold of its lock.)
  with_late_heap(
      [](Heap* late, unsigned) -> void* {
        heap_collect(late);
        return nullptr;
      },
      0, false);
}

size_t release_caches() {
  size_t released = slab_pool::release_all();
  reclaim_idle_kept_memory(true, 0);
  released += g_spans.purge(true);
  return released + huge_cache_purge(true, 0);
}

bool release_cached_memory() {
  Heap* heap = t_heap;
  size_t released = size_t{heap->kept.slices.load(std::memory_order_relaxed)} << kSliceShift;
  kept_spans_release(heap);
  return released + release_caches() != 0;
}

}  // namespace xalloc
