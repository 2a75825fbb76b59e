// Process-wide counters, kept on slow paths only: the statistics
// (api/stats.cpp) read them, the purge budgets (backend/) steer by them.
//
// Counters that a single thread writes (per heap) use relaxed load+store
// rather than read-modify-write, which costs the same as a plain add on
// x86-64 and lets other threads read them without a data race.
#pragma once

#include <atomic>
#include <cstddef>

#include "platform/shared_count.h"
#include "support/options.h"

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
  std::atomic<size_t> slab_in_use{0};    // bytes of slabs owned by heaps (read it with slab_bytes())
  std::atomic<size_t> heaps{0};          // thread heaps created
  std::atomic<size_t> peak_in_use{0};    // slab and large bytes at their most (slab granularity)
  // 4 KiB page faults avoided by ranges advised onto huge pages before
  // their first touch (backend/huge_ranges.h), where the kernel allows.
  std::atomic<size_t> faults_avoided{0};
  std::atomic<size_t> slabs[64] = {};    // per class, now (as slab_in_use) and at most
  std::atomic<size_t> peak_slabs[64] = {};
};

extern Global g_global;

// Where the memory the process has resident goes (bytes): xalloc's part
// split by what it holds, from a walk of every span (its resident pages)
// and every heap (frontend/memory_account.h). What the program itself
// holds resident (its code, stacks, other mappings) is resident less the rest.
struct MemoryAccount {
  size_t resident;        // the whole process's (statm)
  size_t committed;       // g_global.committed at the walk
  // Live blocks: requested bytes where known (requested_known), else block sizes.
  size_t live;
  // Block size less requested size of live blocks: per class, the live
  // blocks times the class size less the mean size requested of it so far
  // (an estimate; with requested_known only, 0 otherwise); and the resident
  // tail of large spans past their blocks.
  size_t rounding;
  size_t slab_free;       // free blocks (and touched, uncarved space) of slabs holding live blocks
  size_t slab_free_current;  // of which in their class's current slab
  size_t empty_current;   // empty slabs that are their class's current slab
  size_t empty_spares;    // empty slabs a heap keeps as spares
  size_t empty_pooled;    // empty slabs in the slab pool
  size_t free_spans;      // free spans not purged yet, cached huge mappings
  size_t kept_spans;      // spans of freed large blocks heaps keep for their next ones
  size_t pending_frees;   // blocks freed by other threads, staged or in inboxes, not drained yet
  size_t metadata;        // segment headers, the segment map, heaps
  bool requested_known;   // requests were counted from the start (XALLOC_STATS)
};

// XALLOC_STATS: the account taken when the process's resident memory last
// rose past that of the one before by a margin (a thirty-second, at least a
// slice, 64 KiB), so within that margin of its peak as seen from the slow
// paths that take memory (note_in_use), through g_hooks.take_account. Zero
// until then.
MemoryAccount peak_account();

// Slab bytes owned by heaps. Heaps add theirs in batches
// (frontend/heap_slabs.cpp) and a heap's release may be added by another
// thread before the heap adds its adoption: slab_in_use and a class's
// count may be briefly below zero.
inline size_t slab_bytes() {
  auto bytes = static_cast<int64_t>(g_global.slab_in_use.load(std::memory_order_relaxed));
  return bytes > 0 ? static_cast<size_t>(bytes) : 0;
}

// Slabs by class (g_global.slabs, peak_slabs) are counted for the table
// that XALLOC_STATS prints, the only reader, and not in the counting build,
// whose report (printed by XALLOC_STATS) is to count what a run without it
// writes.
inline bool slabs_by_class_counted() { return g_options.stats && !shared_count::kEnabled; }

// Slow-path bookkeeping of the peaks.
void note_slabs_created(unsigned cls, size_t count);
void note_in_use();
// Memory in use: slab spans and large and huge blocks.
inline size_t in_use_bytes() {
  return slab_bytes() + g_global.large_in_use.load(std::memory_order_relaxed);
}

// The counting build's name for a counter of g_global.
inline shared_count::Site site_of(const std::atomic<size_t>& counter) {
  using shared_count::Site;
  if (&counter == &g_global.slab_in_use) return Site::kStatsSlabInUse;
  if (&counter == &g_global.large_in_use) return Site::kStatsLargeInUse;
  if (&counter >= g_global.slabs && &counter < g_global.slabs + 64) return Site::kStatsClassSlabs;
  return Site::kStatsMappings;
}

inline void add(std::atomic<size_t>& counter, size_t value) {
  shared_count::atomic_rmw(site_of(counter), &counter);
  counter.fetch_add(value, std::memory_order_relaxed);
}
inline void sub(std::atomic<size_t>& counter, size_t value) {
  shared_count::atomic_rmw(site_of(counter), &counter);
  counter.fetch_sub(value, std::memory_order_relaxed);
}

}  // namespace xalloc::stats
