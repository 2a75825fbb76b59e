// The lives of thread heaps: process start-up, a heap per thread, orphans
// of exited threads, and fork().
#pragma once

#include <atomic>
#include <cstddef>

#include "frontend/heap.h"

namespace xalloc {

// Runs once, on the first allocation of the process (of any size): reads
// the options, creates the thread-exit key, registers the fork handlers.
void process_init();
extern std::atomic<bool> g_process_ready;
inline void ensure_process_init() {
  if (__builtin_expect(!g_process_ready.load(std::memory_order_acquire), 0)) process_init();
}

// Heaps owned by live threads (adopted and not yet torn down); written
// under the registry lock.
extern std::atomic<uint32_t> g_live_heaps;
inline uint32_t live_heap_count() { return g_live_heaps.load(std::memory_order_relaxed); }

// The calling thread's heap, created or adopted now if it has none. Null
// when the OS has no memory for a heap, and for a thread whose heap is
// already torn down (see late_alloc).
Heap* thread_heap_acquire();

// True once the calling thread's pthread key destructor has run: the
// thread is exiting, and gets no heap of its own again.
bool thread_heap_torn_down();

// A block of class `cls` for a thread past its heap's teardown, from a heap
// shared by all such threads (under a lock: they are rare); null when the
// OS has no memory.
void* late_alloc(unsigned cls);

// Drains the inbox of `heap` if its thread has exited: called by the thread
// that just sent it blocks, so slabs of exited threads still empty out and
// return even when no thread is created to adopt them.
void orphan_collect(Heap* heap);
// Drains every orphan's inbox (malloc_trim).
void orphans_collect_all();

// Calls fn(heap) for every heap ever created (racy reads of their counters).
template <typename Fn>
void for_each_heap(Fn fn);
Heap* registry_first();

}  // namespace xalloc

template <typename Fn>
void xalloc::for_each_heap(Fn fn) {
  for (Heap* h = registry_first(); h != nullptr; h = h->next_in_registry) fn(h);
}
