#include "slab_pool.h"

#include <array>
#include <atomic>
#include <bit>

#include "options.h"
#include "platform/lock.h"
#include "span_allocator.h"

namespace xalloc::slab_pool {

namespace {

struct ClassList {
  Page* head;              // linked through Page::next; read unlocked as a hint
  uint32_t activity;       // puts and takes so far
  uint32_t activity_seen;  // `activity` when release_idle last looked
  uint64_t quiet_since_ms; // when release_idle last saw it change
};

static_assert(kNumClasses <= 64, "one bit per class in g_classes_held");

Mutex g_lock;
ClassList g_lists[kNumClasses];
uint64_t g_classes_held;  // bit c: g_lists[c] is not empty

// The classes whose slabs are `slices` long.
constexpr uint64_t classes_of_length(size_t slices) {
  uint64_t mask = 0;
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    if (kClassInfo[cls].slices == slices) mask |= uint64_t{1} << cls;
  }
  return mask;
}
std::atomic<size_t> g_bytes{0};
std::atomic<uint64_t> g_next_look_ms{0};

// Hands a chain of pooled slabs (through Page::next) to the span allocator;
// `idle`: they waited out the purge delay here.
size_t give_back(Page* chain, bool idle) {
  size_t released = 0;
  while (chain != nullptr) {
    Page* page = chain;
    chain = page->next;
    page->next = nullptr;
    page->free = nullptr;
    released += page->span_bytes();
    g_spans.release(page, idle);
  }
  return released;
}

void unlink_all_locked(ClassList& list, Page*& chain) {
  Page* page = list.head;
  while (page != nullptr) {
    Page* next = page->next;
    g_bytes.store(g_bytes.load(std::memory_order_relaxed) - page->span_bytes(), std::memory_order_relaxed);
    page->next = chain;
    chain = page;
    page = next;
  }
  __atomic_store_n(&list.head, nullptr, __ATOMIC_RELAXED);
  g_classes_held &= ~(uint64_t{1} << (&list - g_lists));
}

Page* pop_locked(unsigned cls) {
  ClassList& list = g_lists[cls];
  Page* page = list.head;
  __atomic_store_n(&list.head, page->next, __ATOMIC_RELAXED);
  if (page->next == nullptr) g_classes_held &= ~(uint64_t{1} << cls);
  page->next = nullptr;
  list.activity++;
  g_bytes.store(g_bytes.load(std::memory_order_relaxed) - page->span_bytes(), std::memory_order_relaxed);
  return page;
}

}  // namespace

bool put(Page* page) {
  size_t span = page->span_bytes();
  LockGuard guard(g_lock);
  size_t held = g_bytes.load(std::memory_order_relaxed);
  if (held + span > kPoolBytes) return false;
  ClassList& list = g_lists[page->size_class];
  page->next = list.head;
  __atomic_store_n(&list.head, page, __ATOMIC_RELAXED);
  g_classes_held |= uint64_t{1} << page->size_class;
  list.activity++;
  g_bytes.store(held + span, std::memory_order_relaxed);
  return true;
}

Page* take(unsigned cls) {
  // Most refills find no slab of their class here: no lock for them.
  if (__atomic_load_n(&g_lists[cls].head, __ATOMIC_RELAXED) == nullptr) return nullptr;
  LockGuard guard(g_lock);
  return g_lists[cls].head != nullptr ? pop_locked(cls) : nullptr;
}

Page* take_any_of_length(size_t slices) {
  if (g_bytes.load(std::memory_order_relaxed) == 0) return nullptr;
  constexpr size_t kLongestSlab = kClassInfo[kNumClasses - 1].slices;
  static constexpr auto kMasks = [] {
    std::array<uint64_t, kLongestSlab + 1> masks{};
    for (size_t n = 1; n <= kLongestSlab; ++n) masks[n] = classes_of_length(n);
    return masks;
  }();
  if (slices > kLongestSlab) return nullptr;
  LockGuard guard(g_lock);
  uint64_t candidates = g_classes_held & kMasks[slices];
  if (candidates == 0) return nullptr;
  return pop_locked(static_cast<unsigned>(std::countr_zero(candidates)));
}

void release_idle(uint64_t now_ms) {
  if (g_bytes.load(std::memory_order_relaxed) == 0 || now_ms < g_next_look_ms.load(std::memory_order_relaxed)) return;
  uint64_t delay = g_options.purge_delay_ms;
  Page* chain = nullptr;
  {
    LockGuard guard(g_lock);
    g_next_look_ms.store(now_ms + (delay / 10 > 0 ? delay / 10 : 1), std::memory_order_relaxed);
    for (ClassList& list : g_lists) {
      if (list.head == nullptr) continue;
      if (list.activity != list.activity_seen) {
        list.activity_seen = list.activity;
        list.quiet_since_ms = now_ms;
      } else if (now_ms - list.quiet_since_ms >= delay) {
        unlink_all_locked(list, chain);
      }
    }
  }
  give_back(chain, true);
}

size_t release_all() {
  if (g_bytes.load(std::memory_order_relaxed) == 0) return 0;
  Page* chain = nullptr;
  {
    LockGuard guard(g_lock);
    for (ClassList& list : g_lists) unlink_all_locked(list, chain);
  }
  return give_back(chain, false);
}

size_t bytes() { return g_bytes.load(std::memory_order_relaxed); }

void lock_for_fork() { g_lock.lock(); }
void unlock_after_fork_parent() { g_lock.unlock(); }
void reset_after_fork_child() { g_lock.reset_after_fork(); }

}  // namespace xalloc::slab_pool
