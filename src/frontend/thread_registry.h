// The registry of thread heaps: a heap per thread, created or adopted at
// its first allocation; orphans of exited threads, adopted by new ones; the
// heap shared by threads past their heap's teardown. Process start-up,
// thread exit and fork() are in process.cpp.
#pragma once

#include <atomic>
#include <cstddef>

#include "frontend/heap.h"

namespace xalloc {

// The memory of a heap: the heap, then its outbox's stage and links; heaps
// lie one after the other in chunks mapped for them (thread_registry.cpp),
// each on a page of its own (a heap is under a page: one page to make
// resident at its start, unless secure mode's quarantine makes it more).
constexpr size_t kHeapStructBytes = round_up(sizeof(Heap), 64);
constexpr size_t kStageBytes = kStageSlots * sizeof(StagedBlock);
constexpr size_t kHeapBytes =
    round_up(kHeapStructBytes + kStageBytes + sizeof(OutboxLinks), kOsPageSize);

// Runs once, on the first allocation of the process (of any size): reads
// the options, creates the thread-exit key, registers the fork handlers
// (process.cpp).
void process_init();
extern std::atomic<bool> g_process_ready;
inline void ensure_process_init() {
  if (__builtin_expect(!g_process_ready.load(std::memory_order_acquire), 0)) process_init();
}

// At start-up: `teardown` runs at each thread's exit with its heap.
void registry_init(void (*teardown)(void*));

// Heaps owned by live threads (adopted and not yet torn down); written
// under the registry lock.
extern std::atomic<uint32_t> g_live_heaps;
inline uint32_t live_heap_count() { return g_live_heaps.load(std::memory_order_relaxed); }
// A heap's share of what all live heaps together may cache: `per_heap`
// while few threads live, else `all_heaps` divided among them, and never
// less than `floor` - a thousand threads do not cache a thousand times
// `per_heap`.
inline uint32_t per_heap_share(uint32_t per_heap, uint32_t all_heaps, uint32_t floor = 0) {
  uint32_t live = live_heap_count();
  if (live <= all_heaps / per_heap) return per_heap;
  uint32_t share = all_heaps / live;
  return share > floor ? share : floor;
}

// The calling thread's heap, created or adopted now if it has none. Null
// when the OS has no memory for a heap, and for a thread whose heap is
// already torn down (see with_late_heap).
Heap* thread_heap_acquire();
// The calling thread's heap, acquired now if it has none yet (a thread
// whose first block is a large or huge one); g_empty_heap if none is to
// be had.
Heap* thread_heap_or_acquire();

// True once the calling thread's pthread key destructor has run: the
// thread is exiting, and gets no heap of its own again.
bool thread_heap_torn_down();

// The exiting thread's heap becomes an orphan: `final_drain` runs on it
// under its orphan lock once senders may see it orphaned.
void orphan_heap(Heap* heap, void (*final_drain)(Heap*));

// Threads past their heap's teardown (other libraries' key destructors run
// after xalloc's, possibly in glibc's last round) share one heap, an
// orphan from the start: runs fn(that heap, cls) under the registry lock
// and its orphan lock, creating it first when `create` (null when there is
// none, or no memory for it).
void* with_late_heap(void* (*fn)(Heap*, unsigned), unsigned cls, bool create);

// Calls fn(orphan) for every orphan, under the registry lock (malloc_trim).
void for_each_orphan(void (*fn)(Heap*));

// Calls fn(heap) for every heap ever created (racy reads of their counters).
template <typename Fn>
void for_each_heap(Fn fn);
Heap* registry_first();

// fork(): the registry's lock and every heap's orphan lock are held across
// it; in the child only the forking thread's heap stays in use.
void registry_lock_for_fork();
void registry_unlock_after_fork_parent();
void registry_reset_after_fork_child();

}  // namespace xalloc

template <typename Fn>
void xalloc::for_each_heap(Fn fn) {
  for (Heap* h = registry_first(); h != nullptr; h = h->next_in_registry) fn(h);
}
