// The counting build (-DXALLOC_COUNT_SHARED=ON): how often threads write
// memory that other threads write too, the cost that per-thread heaps are
// there to avoid.
//
// Two kinds of event are counted. A lock acquisition counts when that lock
// has been taken by more than one heap (its first owner is kept in the
// lock, lock.h). An atomic read-modify-write counts when its cache line
// has been written, by the read-modify-writes counted here, by more than
// one heap: a table keeps each line's first writer and whether another
// followed it. A thread without a heap (before its first allocation, the
// background purger) counts as a writer of its own. Both are "ever": a
// lock or line stays shared once it is.
//
// Counters are per thread, written by their thread alone, and summed on
// read; the events' sites name the shared structure. In other builds the
// calls below compile to nothing (kEnabled is false and the out-of-line
// functions are left out), and locks keep no owner.
#pragma once

#include <cstdint>

namespace xalloc::shared_count {

#if defined(XALLOC_COUNT_SHARED)
constexpr bool kEnabled = true;
#else
constexpr bool kEnabled = false;
#endif

// Every counted place, locks first. The table of names (shared_count.cpp)
// follows this order.
enum class Site : uint8_t {
  kSlabPoolLock,
  kSpanLock,
  kHugeCacheLock,
  kRegistryLock,
  kOrphanLock,
  kProfilerLock,
  kPeakAccountLock,
  kTestLock,  // locks of tests
  // Read-modify-writes from here on.
  kStatsSlabInUse,
  kStatsClassSlabs,
  kStatsPeaks,
  kStatsLargeInUse,
  kStatsMappings,  // mapped, committed, purged, segments, heaps
  kPoolBytes,
  kPoolClassesHeld,
  kPoolNextLook,
  kInboxPush,
  kInboxBytes,
  kInboxTake,
  kDrainRequest,
  kBorrow,
  kKeptSpans,
  kSegmentMapBits,
  kTestAtomic,  // atomics of tests
  kCount
};
constexpr unsigned kSites = static_cast<unsigned>(Site::kCount);
constexpr Site kFirstAtomicSite = Site::kStatsSlabInUse;

const char* site_name(Site site);

// The events since counting (re)started (restart, start_after).
struct Totals {
  uint64_t lock_events;
  uint64_t atomic_events;
  uint64_t mallocs;
  // Read-modify-writes on lines the table had no room to follow (not in
  // atomic_events): 0 unless a program touches tens of thousands of lines.
  uint64_t untracked;
  uint64_t by_site[kSites];
};

// A lock's owners so far, kept in the lock and written only under it.
struct LockOwners {
  uint32_t first = 0;  // thread number (1 up) of its first owner
  bool shared = false;
};

// Counting build only (shared_count.cpp); call them through the inline
// functions below.
void note_acquired(Site site, LockOwners& owners);
void note_atomic(Site site, const void* address);
void note_malloc();
void set_heap(const void* heap);
Totals read();
void restart();
void restart_after_ms(uint64_t ms);

// Under the lock just acquired.
inline void acquired([[maybe_unused]] Site site, [[maybe_unused]] LockOwners& owners) {
  if constexpr (kEnabled) note_acquired(site, owners);
}
// Before or after a read-modify-write of `address`.
inline void atomic_rmw([[maybe_unused]] Site site, [[maybe_unused]] const void* address) {
  if constexpr (kEnabled) note_atomic(site, address);
}
// Once for every block handed out by malloc, calloc, new and the aligned
// allocators.
inline void malloc_done() {
  if constexpr (kEnabled) note_malloc();
}
// The calling thread writes as `heap` from now on (null: as itself).
inline void writes_as([[maybe_unused]] const void* heap) {
  if constexpr (kEnabled) set_heap(heap);
}
// Counting starts afresh `ms` after now (steady state: the warm-up left
// out). The thread that finds the time passed, on its way through
// malloc, restarts the count.
inline void start_after([[maybe_unused]] uint64_t ms) {
  if constexpr (kEnabled) restart_after_ms(ms);
}

}  // namespace xalloc::shared_count
