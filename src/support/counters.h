// Process-wide counters, kept on slow paths only: the statistics
// (api/stats.cpp) read them, the purge budgets (backend/) steer by them.
//
// Counters that a single thread writes (per heap) use relaxed load+store
// rather than read-modify-write, which costs the same as a plain add on
// x86-64 and lets other threads read them without a data race.
#pragma once

#include <atomic>
#include <cstddef>

namespace xalloc::stats {

struct Global {
  std::atomic<size_t> mapped{0};         // bytes of segments and huge mappings
  std::atomic<size_t> committed{0};      // bytes possibly resident (dirty slices, live huge blocks)
  std::atomic<size_t> purged{0};         // bytes given back with madvise, ever
  std::atomic<size_t> segments{0};       // mappings currently held
  // Bytes in live large and huge blocks, and in the last blocks of the
  // spans heaps keep (frontend/heap.h: at most kKeptSliceBudget slices a
  // heap), which xalloc_get_stats takes off; the purge budgets count them
  // as in use.
  std::atomic<size_t> large_in_use{0};
  std::atomic<size_t> slab_in_use{0};    // bytes of slabs owned by heaps
  std::atomic<size_t> heaps{0};          // thread heaps created
  std::atomic<size_t> peak_in_use{0};
  // 4 KiB page faults avoided by ranges advised onto huge pages before
  // their first touch (backend/huge_ranges.h), where the kernel allows.
  std::atomic<size_t> faults_avoided{0};    // slab and large bytes at their most (slab granularity)
  std::atomic<size_t> slabs[64] = {};    // per class, now and at most
  std::atomic<size_t> peak_slabs[64] = {};
};

extern Global g_global;

// Slow-path bookkeeping of the peaks.
void note_slab_created(unsigned cls);
void note_in_use();
// Memory in use: slab spans and large and huge blocks.
inline size_t in_use_bytes() {
  return g_global.slab_in_use.load(std::memory_order_relaxed) + g_global.large_in_use.load(std::memory_order_relaxed);
}

inline void add(std::atomic<size_t>& counter, size_t value) { counter.fetch_add(value, std::memory_order_relaxed); }
inline void sub(std::atomic<size_t>& counter, size_t value) { counter.fetch_sub(value, std::memory_order_relaxed); }

}  // namespace xalloc::stats
