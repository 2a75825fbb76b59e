#include "frontend/thread_registry.h"

#include <atomic>

#include "support/emergency_heap.h"
#include "diag/heap_profiler.h"
#include "frontend/huge_cache.h"
#include "frontend/kept_spans.h"
#include "support/options.h"
#include "platform/lock.h"
#include "platform/os.h"
#include "diag/stack_trace.h"
#include "support/report.h"
#include "meta/secure.h"
#include "backend/slab_pool.h"
#include "backend/span_allocator.h"
#include "support/counters.h"
#include "support/hooks.h"

namespace xalloc {

namespace {

// The start-up's state, and while it runs the id of the process running it,
// in one word: a thread that finds a start-up running must tell one in its
// own process (wait) from one that a fork interrupted in the parent (start
// over), and with the id in a word of its own it could read the state of
// a start-up that has not stored its id yet, and start a second one.
constexpr uint64_t kInitNone = 0;
constexpr uint64_t kInitRunning = 1;  // | process id << 2
constexpr uint64_t kInitDone = 2;

XALLOC_STARTUP_DATA std::atomic<uint64_t> g_init{kInitNone};
__thread bool t_initializing = false;
XALLOC_STARTUP_DATA bool g_fork_handlers_registered = false;
XALLOC_STARTUP_DATA bool g_have_heap_key = false;

XALLOC_STARTUP_DATA Mutex g_registry_lock;
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

// XALLOC_BACKGROUND_PURGE: a thread that runs the purge on its own clock.
std::atomic<bool> g_purger_running{false};

void* purger_main(void*) {
  for (;;) {
    os::sleep_ms(g_options.purge_delay_ms / 10 > 5 ? g_options.purge_delay_ms / 10 : 5);
    purge_idle_memory(os::monotonic_ms());
  }
  return nullptr;
}

void start_purger() {
  if (!g_options.background_purge || g_purger_running.exchange(true)) return;
  if (!os::start_thread(purger_main, "xalloc-purge")) g_purger_running.store(false);
}

Heap* new_heap_locked() {
  // A heap, then its outbox's stage.
  constexpr size_t kHeapBytes = ((sizeof(Heap) + 63) & ~size_t{63}) + kStageSlots * sizeof(StagedBlock);
  static_assert(kHeapBytes % 64 == 0 && kHeapBytes <= kHeapChunkBytes);
  if (g_heap_chunk_left < kHeapBytes) {
    void* chunk = os::map(kHeapChunkBytes);
    if (chunk == nullptr && release_cached_memory()) chunk = os::map(kHeapChunkBytes);
    if (chunk == nullptr) return nullptr;
    g_heap_chunk = static_cast<char*>(chunk);
    g_heap_chunk_left = kHeapChunkBytes;
  }
  auto* heap = reinterpret_cast<Heap*>(g_heap_chunk);
  g_heap_chunk += kHeapBytes;
  g_heap_chunk_left -= kHeapBytes;
  heap_init(heap, 0, reinterpret_cast<StagedBlock*>(g_heap_chunk - kStageSlots * sizeof(StagedBlock)));
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

// pthread key destructor: the thread is exiting.
void thread_heap_teardown(void* arg) {
  auto* heap = static_cast<Heap*>(arg);
  heap_collect(heap);
  t_heap = &g_empty_heap;
  t_heap_torn_down = true;
  LockGuard guard(g_registry_lock);
  {
    // Senders that see the heap orphaned drain it under this lock: from
    // the store on, this drain may meet theirs.
    LockGuard orphan_guard(heap->orphan_lock);
    heap->state.store(HeapState::kOrphan, std::memory_order_relaxed);
    // Blocks sent while this thread was collecting, by threads that still
    // saw it active. Any sender whose push comes after this drain's
    // exchange synchronizes with it (acq_rel on both sides), so it sees
    // kOrphan and drains itself (inbox_push).
    heap_drain_inbox(heap);
    returned_spans_release(heap);  // the same for spans of large blocks (large.cpp)
  }
  g_live_heaps.store(g_live_heaps.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  push_orphan_locked(heap);
}

// fork(): hold every lock across it so the child sees consistent state.
// The profiler's lock comes first: a profile dump holds it while it
// allocates; stack walks run outside it.
void fork_prepare() {
  prof::lock_for_fork();
  stack_trace_hold_for_fork();
  g_registry_lock.lock();
  for_each_heap([](Heap* heap) { heap->orphan_lock.lock(); });
  huge_cache_lock_for_fork();
  slab_pool::lock_for_fork();
  g_spans.lock_for_fork();
}

void fork_parent() {
  g_spans.unlock_after_fork_parent();
  slab_pool::unlock_after_fork_parent();
  huge_cache_unlock_after_fork_parent();
  for_each_heap([](Heap* heap) { heap->orphan_lock.unlock(); });
  g_registry_lock.unlock();
  stack_trace_release_after_fork();
  prof::unlock_after_fork_parent();
}

void fork_child() {
  g_spans.reset_after_fork_child();
  slab_pool::reset_after_fork_child();
  huge_cache_reset_after_fork_child();
  reclaim_reset_after_fork_child();
  for_each_heap([](Heap* heap) { heap->orphan_lock.reset_after_fork(); });
  g_registry_lock.reset_after_fork();
  stack_trace_release_after_fork();
  prof::reset_after_fork_child();
  // The purger thread does not exist in the child: start another.
  g_purger_running.store(false);
  start_purger();
  // Only the forking thread exists in the child. Other threads' heaps may
  // have been in the middle of an operation: they are never used again.
  // Frees of their blocks are accepted into their inboxes and not reused.
  for (Heap* h = g_all_heaps.load(std::memory_order_relaxed); h != nullptr; h = h->next_in_registry) {
    if (h != t_heap && h->state.load(std::memory_order_relaxed) == HeapState::kActive)
      h->state.store(HeapState::kDead, std::memory_order_relaxed);
  }
  g_live_heaps.store(t_heap != &g_empty_heap && t_heap->state.load(std::memory_order_relaxed) == HeapState::kActive,
                     std::memory_order_relaxed);
}

}  // namespace

XALLOC_STARTUP_DATA std::atomic<bool> g_process_ready{false};
XALLOC_STARTUP_DATA std::atomic<uint32_t> g_live_heaps{0};

void process_init() {
  // The initialising thread's own allocations (glibc allocates in
  // pthread_atfork, dlopen in the profiler's start) go through.
  if (t_initializing) return;
  uint64_t running = os::process_id() << 2 | kInitRunning;
  for (;;) {
    uint64_t expected = kInitNone;
    if (g_init.compare_exchange_strong(expected, running, std::memory_order_acquire)) break;
    if (expected == kInitDone) return;
    // Another thread is initialising: wait for it (this is before main in
    // practice, so the wait is short) - unless this is the child of a fork
    // that happened meanwhile, where that thread does not exist: start over.
    if (expected != running) {
      g_init.compare_exchange_strong(expected, kInitNone, std::memory_order_relaxed);
      continue;
    }
    os::cpu_relax();
  }
  t_initializing = true;
  g_hooks.print_stack = stack_trace_print;
  g_hooks.leave_thread_heap = [] { t_heap = &g_empty_heap; };
  g_hooks.release_cached_memory = release_cached_memory;
  options_init();
  segment_map_init();
  emergency::init(g_options.commit_on_demand);
  secure::init_secret();
  prof::init_flags();
  if (!g_have_heap_key) {
    g_have_heap_key = os::thread_exit_key_create(thread_heap_teardown);
    if (!g_have_heap_key) report::warning("no pthread key: thread heaps will not be reclaimed at thread exit");
  }
  // Registered before anyone may take the allocator's locks, so no fork can
  // copy a held lock into a child without the handlers that reset it.
  if (!g_fork_handlers_registered) {
    os::at_fork(fork_prepare, fork_parent, fork_child);
    g_fork_handlers_registered = true;
  }
  prof::start();
  start_purger();
  t_initializing = false;
  g_init.store(kInitDone, std::memory_order_release);
  g_process_ready.store(true, std::memory_order_release);
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
  // glibc may allocate here (keys past its first 32); t_heap is set.
  if (g_have_heap_key) os::thread_exit_key_set(heap);
  return heap;
}

bool thread_heap_torn_down() { return t_heap_torn_down; }

void* late_alloc(unsigned cls) {
  LockGuard guard(g_registry_lock);
  if (g_late_heap == nullptr) {
    g_late_heap = new_heap_locked();
    if (g_late_heap == nullptr) return nullptr;
    g_late_heap->state.store(HeapState::kOrphan, std::memory_order_relaxed);
  }
  // Senders drain into it under its orphan lock.
  LockGuard orphan_guard(g_late_heap->orphan_lock);
  return heap_alloc_slow(g_late_heap, cls);
}

void orphan_collect(Heap* heap) {
  // Orphans are drained, and adopted, only under their orphan lock, so a
  // heap seen orphaned here is touched by nobody else meanwhile.
  LockGuard guard(heap->orphan_lock);
  if (heap->state.load(std::memory_order_relaxed) == HeapState::kOrphan) heap_drain_inbox(heap);
}

void orphans_collect_all() {
  // Drain under the lock: trimming is rare and must see every orphan.
  LockGuard guard(g_registry_lock);
  for (Heap* h = g_orphans; h != nullptr; h = h->next_orphan) orphan_collect(h);
  // The heap of exiting threads also gives up its current slabs, which no
  // thread exit settles. (Its outbox and quarantine are always empty, so
  // this takes no other heap's inbox, and no second hold of its lock.)
  if (g_late_heap != nullptr) {
    LockGuard orphan_guard(g_late_heap->orphan_lock);
    heap_collect(g_late_heap);
  }
}

Heap* registry_first() { return g_all_heaps.load(std::memory_order_acquire); }

}  // namespace xalloc
