#include "support/counters.h"

#include "base/config.h"

namespace xalloc::stats {

XALLOC_STARTUP_DATA constinit Global g_global;

namespace {

void raise_peak(std::atomic<size_t>& peak, size_t now) {
  size_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen) {
    shared_count::atomic_rmw(shared_count::Site::kStatsPeaks, &peak);
    if (peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) return;
  }
}

}  // namespace

void note_slabs_created(unsigned cls, size_t count) {
  shared_count::atomic_rmw(shared_count::Site::kStatsClassSlabs, &g_global.slabs[cls]);
  auto now = static_cast<int64_t>(g_global.slabs[cls].fetch_add(count, std::memory_order_relaxed) + count);
  if (now > 0) raise_peak(g_global.peak_slabs[cls], static_cast<size_t>(now));
  note_in_use();
}

void note_in_use() { raise_peak(g_global.peak_in_use, in_use_bytes()); }

}  // namespace xalloc::stats
