#include "support/counters.h"

#include "base/config.h"
#include "platform/lock.h"
#include "platform/os.h"
#include "support/hooks.h"

namespace xalloc::stats {

XALLOC_STARTUP_DATA constinit Global g_global;

namespace {

struct PeakAccount {
  std::atomic<size_t> next_at{0};   // resident bytes that call for the next account
  std::atomic<uint32_t> taking{0};  // one thread walks at a time; the others go on
  Mutex lock{shared_count::Site::kPeakAccountLock};  // guards `account` against torn reads
  MemoryAccount account{};
};
XALLOC_STARTUP_DATA constinit PeakAccount g_peak;

void maybe_take_peak_account() {
  // Resident memory, not committed: pages of a slab are touched as it is
  // carved, after its slices were counted (a system call: statistics only).
  if (os::resident_bytes() < g_peak.next_at.load(std::memory_order_relaxed)) return;
  if (g_peak.taking.exchange(1, std::memory_order_acquire) != 0) return;
  MemoryAccount account{};
  g_hooks.take_account(&account);
  {
    LockGuard guard(g_peak.lock);
    g_peak.account = account;
  }
  size_t margin = account.resident / 32 > kSliceSize ? account.resident / 32 : kSliceSize;
  g_peak.next_at.store(account.resident + margin, std::memory_order_relaxed);
  g_peak.taking.store(0, std::memory_order_release);
}

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
}

void note_in_use() {
  raise_peak(g_global.peak_in_use, in_use_bytes());
  if (g_hooks.take_account != nullptr) maybe_take_peak_account();
}

MemoryAccount peak_account() {
  LockGuard guard(g_peak.lock);
  return g_peak.account;
}

}  // namespace xalloc::stats
