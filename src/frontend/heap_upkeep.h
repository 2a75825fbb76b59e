// A heap's upkeep: the periodic work of its slow paths, and handing back
// what it caches (thread exit, xalloc_thread_collect, malloc_trim).
#pragma once

#include <cstdint>

#include "frontend/heap.h"

namespace xalloc {

// Hands back everything the heap caches: sends its outbox, drains its inbox,
// returns empty slabs; slabs with live blocks stay owned.
void heap_collect(Heap* heap);
// Returns the heap's spare empty slabs and kept spans of large blocks to
// the span allocator (trim).
void heap_release_spares(Heap* heap);
// Counts a slow call of the heap (an allocation that needed more than its
// slab's free list, or a large block kept); every 16th runs the periodic
// work: expiring spares and kept spans, sending the outbox, purging memory
// past its delay.
void heap_tick(Heap* heap);
// The process-wide part of the periodic work, also the background purger's
// (process.cpp): idle pooled slabs, spans of idle threads, and
// free memory past its delay.
void purge_idle_memory(uint64_t now_ms);
// Gives back what the process caches for reuse: pooled slabs, every heap's
// kept spans and spares, free spans and cached huge blocks, purged or
// unmapped. Returns the bytes given back.
size_t release_caches();
// The OS refused a mapping: release_caches, and the calling thread's kept
// spans. True if anything was released, so that the caller may try again.
bool release_cached_memory();
// Drains every orphan's inbox, and collects the heap of exiting threads
// (malloc_trim).
void orphans_collect_all();

}  // namespace xalloc
