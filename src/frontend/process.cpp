// Process start-up, thread exit and fork(): where every subsystem is tied
// together (process_init is declared in thread_registry.h, which every
// layer-mate that needs the process started includes).
#include <atomic>

#include "backend/segment.h"
#include "backend/slab_pool.h"
#include "backend/span_allocator.h"
#include "diag/heap_profiler.h"
#include "diag/stack_trace.h"
#include "frontend/heap_slabs.h"
#include "frontend/heap_upkeep.h"
#include "frontend/inbox.h"
#include "frontend/huge_cache.h"
#include "frontend/kept_spans.h"
#include "frontend/purger.h"
#include "frontend/memory_account.h"
#include "frontend/thread_registry.h"
#include "meta/secure.h"
#include "platform/os.h"
#include "platform/shared_count.h"
#include "support/emergency_heap.h"
#include "support/hooks.h"
#include "support/options.h"
#include "support/report.h"

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

// pthread key destructor: the thread is exiting.
void thread_heap_teardown(void* arg) {
  auto* heap = static_cast<Heap*>(arg);
  heap_collect(heap);
  orphan_heap(heap, [](Heap* orphan) {
    // Blocks sent while this thread was collecting, by threads that still
    // saw it active. Any sender whose push comes after this drain's
    // exchange synchronizes with it (acq_rel on both sides), so it sees
    // kOrphan and drains itself (inbox_push).
    heap_drain_inbox_final(orphan);
    returned_spans_release(orphan);  // the same for spans of large blocks
    slab_counts_publish(orphan);     // its thread's last count (t_heap is no longer the heap)
  });
}

// fork(): hold every lock across it so the child sees consistent state.
// The profiler's lock comes first: a profile dump holds it while it
// allocates; stack walks run outside it.
void fork_prepare() {
  prof::lock_for_fork();
  stack_trace_hold_for_fork();
  registry_lock_for_fork();
  huge_cache_lock_for_fork();
  slab_pool::lock_for_fork();
  g_spans.lock_for_fork();
}

void fork_parent() {
  g_spans.unlock_after_fork_parent();
  slab_pool::unlock_after_fork_parent();
  huge_cache_unlock_after_fork_parent();
  registry_unlock_after_fork_parent();
  stack_trace_release_after_fork();
  prof::unlock_after_fork_parent();
}

void fork_child() {
  g_spans.reset_after_fork_child();
  slab_pool::reset_after_fork_child();
  huge_cache_reset_after_fork_child();
  reclaim_reset_after_fork_child();
  registry_reset_after_fork_child();
  stack_trace_release_after_fork();
  prof::reset_after_fork_child();
  purger_after_fork_child();
}

}  // namespace

XALLOC_STARTUP_DATA std::atomic<bool> g_process_ready{false};

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
#if defined(XALLOC_COUNT_SHARED)
  shared_count::start_after(g_options.count_shared_after_ms);
#endif
  // What is printed at exit must outlive a program's closing its stderr.
  if (g_options.stats || g_options.leaks || g_options.prof) report::keep_stderr();
  // The account at peak (support/counters.h): a walk per thirty-second of growth.
  if (g_options.stats) g_hooks.take_account = take_memory_account;
  segment_map_init();
  emergency::init(g_options.commit_on_demand);
  secure::init_secret();
  prof::init_flags();
  registry_init(thread_heap_teardown);
  // Registered before anyone may take the allocator's locks, so no fork can
  // copy a held lock into a child without the handlers that reset it.
  if (!g_fork_handlers_registered) {
    os::at_fork(fork_prepare, fork_parent, fork_child);
    g_fork_handlers_registered = true;
  }
  prof::start();
  if (g_options.background_purge == Switch::kOn) purger_start();
  t_initializing = false;
  g_init.store(kInitDone, std::memory_order_release);
  g_process_ready.store(true, std::memory_order_release);
}

}  // namespace xalloc
