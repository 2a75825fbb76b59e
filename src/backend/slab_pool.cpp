#include "backend/slab_pool.h"

#include <array>
#include <atomic>
#include <bit>

#include "support/options.h"
#include "platform/lock.h"
#include "platform/shared_count.h"
#include "backend/span_allocator.h"

namespace xalloc::slab_pool {

namespace {

// Each class has a lock of its own, on a cache line of its own: with one
// lock for the whole pool, threads that each churn through slabs of their
// own (a batch of blocks allocated and freed, random replacement in a
// working set) queued on it once there were more than a few of them.
struct alignas(64) ClassList {
  Mutex lock{shared_count::Site::kSlabPoolLock};
  Page* head = nullptr;    // linked through Page::next, newest first
  uint32_t count = 0;
  uint32_t low_water = 0;  // the fewest listed since the current interval began
};

static_assert(kNumClasses <= 64, "one bit per class in g_classes_held");

// With the other locks that fork() holds (base/config.h): a process that
// never pools a slab touches those pages anyway, for the span allocator's
// and the registry's locks.
XALLOC_FORK_DATA ClassList g_lists[kNumClasses];
// Bit c: g_lists[c] is not empty. Changed under that class's lock, with an
// atomic read-modify-write since other classes' bits change beside it;
// read without a lock as a hint, so that a refill finds out that nothing
// fits without locking.
alignas(64) XALLOC_STARTUP_DATA std::atomic<uint64_t> g_classes_held{0};
// Bytes held, reserved before a slab is listed: never above kPoolBytes.
alignas(64) XALLOC_STARTUP_DATA std::atomic<size_t> g_bytes{0};
// When the next look for idle slabs is due; the thread that moves it on
// makes the look.
alignas(64) XALLOC_STARTUP_DATA std::atomic<uint64_t> g_next_look_ms{0};

// The classes whose slabs are `slices` long.
constexpr uint64_t classes_of_length(size_t slices) {
  uint64_t mask = 0;
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    if (kClassInfo[cls].slices == slices) mask |= uint64_t{1} << cls;
  }
  return mask;
}

constexpr size_t kLongestSlab = kClassInfo[kNumClasses - 1].slices;
constexpr auto kClassesOfLength = [] {
  std::array<uint64_t, kLongestSlab + 1> masks{};
  for (size_t n = 1; n <= kLongestSlab; ++n) masks[n] = classes_of_length(n);
  return masks;
}();

// Reserves room for `bytes`: false when the pool would hold more than
// kPoolBytes.
bool reserve_bytes(size_t bytes) {
  shared_count::atomic_rmw(shared_count::Site::kPoolBytes, &g_bytes);
  if (g_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes <= kPoolBytes) return true;
  shared_count::atomic_rmw(shared_count::Site::kPoolBytes, &g_bytes);
  g_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  return false;
}
void sub_bytes(size_t bytes) {
  shared_count::atomic_rmw(shared_count::Site::kPoolBytes, &g_bytes);
  g_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}

void set_held(unsigned cls, bool held) {
  uint64_t bit = uint64_t{1} << cls;
  shared_count::atomic_rmw(shared_count::Site::kPoolClassesHeld, &g_classes_held);
  if (held) g_classes_held.fetch_or(bit, std::memory_order_relaxed);
  else g_classes_held.fetch_and(~bit, std::memory_order_relaxed);
}

// (The _locked functions run under g_lists[cls].lock.)
Page* pop_locked(unsigned cls) {
  ClassList& list = g_lists[cls];
  Page* page = list.head;
  list.head = page->next;
  page->next = nullptr;
  if (--list.count < list.low_water) list.low_water = list.count;
  if (list.count == 0) set_held(cls, false);
  sub_bytes(page->span_bytes());
  return page;
}

// Unlinks the `n` oldest slabs of `cls` (the end of its list) onto `chain`.
void unlink_oldest_locked(unsigned cls, uint32_t n, Page*& chain) {
  ClassList& list = g_lists[cls];
  Page** link = &list.head;
  for (uint32_t kept = list.count - n; kept != 0; --kept) link = &(*link)->next;
  for (Page* page = *link; page != nullptr;) {
    Page* next = page->next;
    sub_bytes(page->span_bytes());
    page->next = chain;
    chain = page;
    page = next;
  }
  *link = nullptr;
  list.count -= n;
  if (list.count == 0) set_held(cls, false);
}

// Hands a chain of pooled slabs (through Page::next) to the span allocator;
// they have waited `idle_ms` unused here.
size_t give_back(Page* chain, uint64_t idle_ms) {
  size_t released = 0;
  while (chain != nullptr) {
    Page* page = chain;
    chain = page->next;
    page->next = nullptr;
    page->free = nullptr;
    released += page->span_bytes();
    g_spans.release(page, idle_ms);
  }
  return released;
}

// Slabs are judged over intervals of half the purge delay: a slab that
// stayed in the pool through a whole interval was not needed and goes back,
// so none waits here unused for a whole delay.
uint64_t interval_ms() { return g_options.purge_delay_ms / 2 > 0 ? g_options.purge_delay_ms / 2 : 1; }

}  // namespace

bool put(Page* page) {
  // No delay: freed memory is to go back at once.
  if (g_options.purge_delay_ms == 0) return false;
  if (!reserve_bytes(page->span_bytes())) return false;
  unsigned cls = page->size_class;
  ClassList& list = g_lists[cls];
  LockGuard guard(list.lock);
  page->next = list.head;
  list.head = page;
  if (list.count++ == 0) set_held(cls, true);
  return true;
}

Page* take(unsigned cls) {
  // Most refills find no slab of their class here: no lock for them.
  if ((g_classes_held.load(std::memory_order_relaxed) & (uint64_t{1} << cls)) == 0) return nullptr;
  ClassList& list = g_lists[cls];
  LockGuard guard(list.lock);
  return list.count != 0 ? pop_locked(cls) : nullptr;
}

Page* take_any_of_length(size_t slices) {
  if (slices > kLongestSlab) return nullptr;
  uint64_t mask = kClassesOfLength[slices];
  // A class found empty under its lock was emptied since the hint was
  // read: try the next one the hint names.
  for (uint64_t candidates = g_classes_held.load(std::memory_order_relaxed) & mask; candidates != 0;
       candidates &= candidates - 1) {
    unsigned cls = static_cast<unsigned>(std::countr_zero(candidates));
    ClassList& list = g_lists[cls];
    LockGuard guard(list.lock);
    if (list.count != 0) return pop_locked(cls);
  }
  return nullptr;
}

void release_idle(uint64_t now_ms) {
  // The time first: every heap's periodic work comes here, and g_bytes
  // changes with every slab pooled or taken, by any thread.
  uint64_t due = g_next_look_ms.load(std::memory_order_relaxed);
  if (now_ms < due || g_bytes.load(std::memory_order_relaxed) == 0) return;
  uint64_t interval = interval_ms();
  // One thread makes each look: the one that moves the time of the next on.
  shared_count::atomic_rmw(shared_count::Site::kPoolNextLook, &g_next_look_ms);
  if (!g_next_look_ms.compare_exchange_strong(due, now_ms + interval, std::memory_order_relaxed)) return;
  Page* chain = nullptr;
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    ClassList& list = g_lists[cls];
    LockGuard guard(list.lock);
    if (list.low_water != 0) unlink_oldest_locked(cls, list.low_water, chain);
    list.low_water = list.count;
  }
  give_back(chain, interval);
}

size_t release_all() {
  if (g_bytes.load(std::memory_order_relaxed) == 0) return 0;
  Page* chain = nullptr;
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    ClassList& list = g_lists[cls];
    LockGuard guard(list.lock);
    if (list.count != 0) unlink_oldest_locked(cls, list.count, chain);
    list.low_water = 0;
  }
  return give_back(chain, 0);
}

size_t bytes() { return g_bytes.load(std::memory_order_relaxed); }

void lock_for_fork() {
  for (ClassList& list : g_lists) list.lock.lock();
}
void unlock_after_fork_parent() {
  for (ClassList& list : g_lists) list.lock.unlock();
}
void reset_after_fork_child() {
  for (ClassList& list : g_lists) list.lock.reset_after_fork();
}

}  // namespace xalloc::slab_pool
