#include "frontend/thread_registry.h"

#include <atomic>

#include "platform/lock.h"
#include "platform/os.h"
#include "platform/shared_count.h"
#include "support/counters.h"
#include "support/hooks.h"
#include "support/report.h"

namespace xalloc {

namespace {

XALLOC_FORK_DATA Mutex g_registry_lock{shared_count::Site::kRegistryLock};
XALLOC_STARTUP_DATA bool g_have_heap_key = false;
XALLOC_STARTUP_DATA std::atomic<Heap*> g_all_heaps{nullptr};  // pushed under the lock, read without it
XALLOC_STARTUP_DATA Heap* g_orphans = nullptr;

// Heaps come from pages mapped for them and are never unmapped.
constexpr size_t kHeapChunkBytes = 64 * 1024;
XALLOC_STARTUP_DATA char* g_heap_chunk = nullptr;
XALLOC_STARTUP_DATA size_t g_heap_chunk_left = 0;

// Set once this thread's heap has been torn down by its key destructor.
__thread bool t_heap_torn_down = false;

// Threads past their heap's teardown (other libraries' key destructors run
// after xalloc's, possibly in glibc's last round) allocate from this heap,
// shared by all of them under the registry lock. A heap of their own would
// never be orphaned: no destructor runs after the last round. It is an
// orphan from the start, never adopted, so frees of its blocks, from any
// thread, drain into it like into any orphan's (orphan_collect).
XALLOC_STARTUP_DATA Heap* g_late_heap = nullptr;

Heap* new_heap_locked() {
  static_assert(kHeapBytes % 64 == 0 && kHeapBytes <= kHeapChunkBytes);
  if (g_heap_chunk_left < kHeapBytes) {
    void* chunk = os::map(kHeapChunkBytes);
    if (chunk == nullptr && g_hooks.release_cached_memory != nullptr && g_hooks.release_cached_memory()) chunk = os::map(kHeapChunkBytes);
    if (chunk == nullptr) return nullptr;
    g_heap_chunk = static_cast<char*>(chunk);
    g_heap_chunk_left = kHeapChunkBytes;
  }
  auto* heap = reinterpret_cast<Heap*>(g_heap_chunk);
  // heap_init writes the heap (not its stage and links, written by remote
  // frees only): its pages resident in one call (os.h).
  os::populate(heap, sizeof(Heap));
  auto* stage = reinterpret_cast<StagedBlock*>(g_heap_chunk + kHeapStructBytes);
  auto* links = reinterpret_cast<OutboxLinks*>(g_heap_chunk + kHeapStructBytes + kStageBytes);
  g_heap_chunk += kHeapBytes;
  g_heap_chunk_left -= kHeapBytes;
  heap_init(heap, 0, stage, links);
  heap->next_in_registry = g_all_heaps.load(std::memory_order_relaxed);
  g_all_heaps.store(heap, std::memory_order_release);
  stats::add(stats::g_global.heaps, 1);
  return heap;
}

Heap* pop_orphan_locked() {
  Heap* heap = g_orphans;
  if (heap != nullptr) {
    g_orphans = heap->next_orphan;
    heap->next_orphan = nullptr;
  }
  return heap;
}

void push_orphan_locked(Heap* heap) {
  heap->next_orphan = g_orphans;
  g_orphans = heap;
}

}  // namespace

XALLOC_FORK_DATA std::atomic<uint32_t> g_live_heaps{0};

void registry_init(void (*teardown)(void*)) {
  if (g_have_heap_key) return;
  g_have_heap_key = os::thread_exit_key_create(teardown);
  if (!g_have_heap_key) report::warning("no pthread key: thread heaps will not be reclaimed at thread exit");
}

Heap* thread_heap_or_acquire() {
  if (XALLOC_LIKELY(t_heap != &g_empty_heap)) return t_heap;
  Heap* acquired = thread_heap_acquire();
  return acquired != nullptr ? acquired : &g_empty_heap;
}

Heap* thread_heap_acquire() {
  ensure_process_init();
  if (t_heap != &g_empty_heap) return t_heap;  // created by an allocation inside process_init
  if (t_heap_torn_down) return nullptr;
  Heap* heap;
  {
    LockGuard guard(g_registry_lock);
    heap = pop_orphan_locked();
    if (heap == nullptr) heap = new_heap_locked();
    if (heap == nullptr) return nullptr;
    {
      // A sender may be draining an adopted orphan: wait for that drain to
      // end, and make any later one see the heap active (and leave its
      // blocks to us).
      LockGuard orphan_guard(heap->orphan_lock);
      heap->state.store(HeapState::kActive, std::memory_order_relaxed);
    }
    g_live_heaps.store(g_live_heaps.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  heap->thread_id = os::thread_id();
  t_heap = heap;
  shared_count::writes_as(heap);
  // glibc may allocate here (keys past its first 32); t_heap is set.
  if (g_have_heap_key) os::thread_exit_key_set(heap);
  return heap;
}

bool thread_heap_torn_down() { return t_heap_torn_down; }

void* with_late_heap(void* (*fn)(Heap*, unsigned), unsigned cls, bool create) {
  LockGuard guard(g_registry_lock);
  if (g_late_heap == nullptr) {
    if (!create || (g_late_heap = new_heap_locked()) == nullptr) return nullptr;
    g_late_heap->state.store(HeapState::kOrphan, std::memory_order_relaxed);
  }
  // Senders drain into it under its orphan lock.
  LockGuard orphan_guard(g_late_heap->orphan_lock);
  return fn(g_late_heap, cls);
}

void orphan_heap(Heap* heap, void (*final_drain)(Heap*)) {
  t_heap = &g_empty_heap;
  t_heap_torn_down = true;
  LockGuard guard(g_registry_lock);
  {
    // Senders that see the heap orphaned drain it under this lock: from
    // the store on, this drain may meet theirs.
    LockGuard orphan_guard(heap->orphan_lock);
    heap->state.store(HeapState::kOrphan, std::memory_order_relaxed);
    final_drain(heap);
  }
  g_live_heaps.store(g_live_heaps.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  push_orphan_locked(heap);
  shared_count::writes_as(nullptr);
}

void for_each_orphan(void (*fn)(Heap*)) {
  // Under the lock: trimming is rare and must see every orphan.
  LockGuard guard(g_registry_lock);
  for (Heap* h = g_orphans; h != nullptr; h = h->next_orphan) fn(h);
}

Heap* registry_first() { return g_all_heaps.load(std::memory_order_acquire); }

// An active heap's orphan lock is taken only under the registry lock (held
// here, so no heap turns active or orphaned meanwhile) or by a sender's
// orphan_collect, which finds the heap active and lets go without touching
// it. So only the other heaps' locks guard work that a fork could cut in
// half, and the parent writes (copies) no active heap's page for a fork.
namespace {
bool guards_work_across_fork(const Heap* heap) {
  return heap->state.load(std::memory_order_relaxed) != HeapState::kActive;
}
}  // namespace

void registry_lock_for_fork() {
  g_registry_lock.lock();
  for_each_heap([](Heap* heap) {
    if (guards_work_across_fork(heap)) heap->orphan_lock.lock();
  });
}

void registry_unlock_after_fork_parent() {
  for_each_heap([](Heap* heap) {
    if (guards_work_across_fork(heap)) heap->orphan_lock.unlock();
  });
  g_registry_lock.unlock();
}

void registry_reset_after_fork_child() {
  for_each_heap([](Heap* heap) { heap->orphan_lock.reset_after_fork(); });
  g_registry_lock.reset_after_fork();
  // Only the forking thread exists in the child. Other threads' heaps may
  // have been in the middle of an operation: they are never used again.
  // Frees of their blocks are accepted into their inboxes and not reused.
  for_each_heap([](Heap* h) {
    if (h != t_heap && h->state.load(std::memory_order_relaxed) == HeapState::kActive)
      h->state.store(HeapState::kDead, std::memory_order_relaxed);
  });
  g_live_heaps.store(t_heap != &g_empty_heap && t_heap->state.load(std::memory_order_relaxed) == HeapState::kActive,
                     std::memory_order_relaxed);
}

}  // namespace xalloc
