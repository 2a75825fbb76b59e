#include "platform/shared_count.h"

#if defined(XALLOC_COUNT_SHARED)

#include <atomic>
#include <cstddef>

#include "platform/os.h"

namespace xalloc::shared_count {

namespace {

constexpr const char* kSiteNames[kSites] = {
    "slab pool class lock",
    "span allocator lock",
    "huge cache lock",
    "thread registry lock",
    "heap orphan lock",
    "profiler lock",
    "peak account lock",
    "test lock",
    "stats slab_in_use",
    "stats slabs per class",
    "stats peaks",
    "stats large_in_use",
    "stats mapped/committed/segments/heaps",
    "slab pool bytes",
    "slab pool classes held",
    "slab pool next look",
    "inbox push (remote frees)",
    "inbox bytes",
    "inbox take (drain)",
    "drain request",
    "borrow",
    "kept spans returned",
    "segment map writable bits",
    "test atomic",
};

// A thread's counters. Each thread has a slot of its own, written by it
// alone with load+store; threads past the last slot share it and add
// atomically (the counts stay exact, only that slot's line is shared).
struct alignas(64) Slot {
  std::atomic<uint64_t> mallocs{0};
  std::atomic<uint64_t> untracked{0};
  std::atomic<uint64_t> by_site[kSites] = {};
};

constexpr uint32_t kSlots = 1024;
Slot g_slots[kSlots];
std::atomic<uint32_t> g_threads{0};
thread_local uint32_t t_thread = 0;  // 1 up; 0 before the thread's first event
thread_local uint32_t t_heap_writer = 0;  // the thread's heap as a writer; 0 while it has none

// Counts taken at the last restart, taken off what read() sums: a slot
// that no thread counts in.
Slot g_base;
std::atomic<uint64_t> g_restart_due_ms{0};  // 0: none pending

// The lines written by counted read-modify-writes: open addressing, one
// word each: the line number (address / 64, 41 bits) above a shared bit
// above the first writer's thread number (22 bits).
constexpr unsigned kWriterBits = 22;
constexpr uint64_t kWriterMask = (uint64_t{1} << kWriterBits) - 1;
constexpr uint64_t kSharedBit = uint64_t{1} << kWriterBits;
constexpr unsigned kLineShift = kWriterBits + 1;
constexpr unsigned kTableBits = 16;
constexpr unsigned kProbes = 64;
std::atomic<uint64_t> g_lines[size_t{1} << kTableBits];

uint32_t self() {
  if (t_thread == 0) t_thread = g_threads.fetch_add(1, std::memory_order_relaxed) + 1;
  return t_thread;
}

// Who writes, in the line table and the locks' owners: the thread's heap
// while it has one, else the thread. Heaps outlive their threads and go
// to new ones; a new thread that takes over a heap's lines is that same
// heap writing them. (Heap and thread numbers each take 21 bits: a clash
// needs millions of threads, or two of a few thousand heaps hashed alike.)
constexpr uint32_t kHeapWriter = uint32_t{1} << 21;
uint32_t writer() {
  if (t_heap_writer != 0) return t_heap_writer;
  return (self() - 1) % (kHeapWriter - 1) + 1;
}

Slot& slot_of(uint32_t thread) { return g_slots[thread < kSlots ? thread - 1 : kSlots - 1]; }

void bump(uint32_t thread, std::atomic<uint64_t>& counter) {
  if (thread < kSlots) counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  else counter.fetch_add(1, std::memory_order_relaxed);
}

void count(Site site) {
  uint32_t me = self();
  bump(me, slot_of(me).by_site[static_cast<unsigned>(site)]);
}

// Whether the line of `address` has been written by another thread than
// `me` (now included).
enum class Line { kOwn, kShared, kUntracked };
Line record_write(uintptr_t address, uint32_t me) {
  uint64_t line = address >> 6;
  uint64_t writer = me & kWriterMask;
  size_t index = (line * 0x9E3779B97F4A7C15ull) >> (64 - kTableBits);
  for (unsigned probe = 0; probe < kProbes; ++probe, index = (index + 1) & ((size_t{1} << kTableBits) - 1)) {
    std::atomic<uint64_t>& entry = g_lines[index];
    uint64_t seen = entry.load(std::memory_order_relaxed);
    if (seen == 0) {
      if (entry.compare_exchange_strong(seen, line << kLineShift | writer, std::memory_order_relaxed))
        return Line::kOwn;
      // Claimed meanwhile: look at what claimed it.
    }
    if (seen >> kLineShift != line) continue;
    if ((seen & kSharedBit) != 0) return Line::kShared;
    if ((seen & kWriterMask) == writer) return Line::kOwn;
    entry.fetch_or(kSharedBit, std::memory_order_relaxed);
    return Line::kShared;
  }
  return Line::kUntracked;
}

uint64_t get(const std::atomic<uint64_t>& counter) { return counter.load(std::memory_order_relaxed); }

Totals sum() {
  Totals totals{};
  uint32_t used = g_threads.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < used && i < kSlots; ++i) {
    const Slot& slot = g_slots[i];
    totals.mallocs += get(slot.mallocs);
    totals.untracked += get(slot.untracked);
    for (unsigned s = 0; s < kSites; ++s) totals.by_site[s] += get(slot.by_site[s]);
  }
  return totals;
}

}  // namespace

const char* site_name(Site site) { return kSiteNames[static_cast<unsigned>(site)]; }

void set_heap(const void* heap) {
  if (heap == nullptr) {
    t_heap_writer = 0;
    return;
  }
  uint64_t hash = (reinterpret_cast<uintptr_t>(heap) >> 6) * 0x9E3779B97F4A7C15ull;
  t_heap_writer = static_cast<uint32_t>(hash >> 43) % (kHeapWriter - 1) + 1 + kHeapWriter;
}

void note_acquired(Site site, LockOwners& owners) {
  uint32_t me = writer();
  if (owners.first == 0) owners.first = me;
  else if (owners.first != me) owners.shared = true;
  if (owners.shared) count(site);
}

void note_atomic(Site site, const void* address) {
  Line line = record_write(reinterpret_cast<uintptr_t>(address), writer());
  if (line == Line::kShared) count(site);
  if (line == Line::kUntracked) {
    uint32_t me = self();
    bump(me, slot_of(me).untracked);
  }
}

void note_malloc() {
  uint32_t me = self();
  std::atomic<uint64_t>& mallocs = slot_of(me).mallocs;
  bump(me, mallocs);
  // The clock only every 4096 mallocs of a thread, and only while a
  // restart is pending.
  if ((mallocs.load(std::memory_order_relaxed) & 4095) != 0) return;
  uint64_t due = g_restart_due_ms.load(std::memory_order_relaxed);
  if (due == 0 || os::monotonic_ms() < due) return;
  if (g_restart_due_ms.compare_exchange_strong(due, 0, std::memory_order_relaxed)) restart();
}

// Threads that count while these run make the figures off by their few
// events, not wrong: every counter only grows.
Totals read() {
  Totals totals = sum();
  totals.mallocs -= get(g_base.mallocs);
  totals.untracked -= get(g_base.untracked);
  for (unsigned s = 0; s < kSites; ++s) {
    totals.by_site[s] -= get(g_base.by_site[s]);
    if (s < static_cast<unsigned>(kFirstAtomicSite)) totals.lock_events += totals.by_site[s];
    else totals.atomic_events += totals.by_site[s];
  }
  return totals;
}

void restart() {
  Totals now = sum();
  g_base.mallocs.store(now.mallocs, std::memory_order_relaxed);
  g_base.untracked.store(now.untracked, std::memory_order_relaxed);
  for (unsigned s = 0; s < kSites; ++s) g_base.by_site[s].store(now.by_site[s], std::memory_order_relaxed);
}

void restart_after_ms(uint64_t ms) {
  if (ms == 0) return;
  g_restart_due_ms.store(os::monotonic_ms() + ms, std::memory_order_relaxed);
}

}  // namespace xalloc::shared_count

#endif  // XALLOC_COUNT_SHARED
