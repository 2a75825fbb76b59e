// Calls that a lower layer makes into a higher one. A layer includes only
// the layers below it (docs/design.md), so where it must call up, the
// higher layer registers the function here at start-up
// (frontend/process.cpp, process_init); until then each hook is
// null and the caller does without it.
#pragma once

namespace xalloc {

namespace stats {
struct MemoryAccount;
}

struct Hooks {
  // diag: prints the calling thread's stack under a fatal report's line.
  void (*print_stack)() = nullptr;
  // frontend: the reporting thread leaves its heap, so that whatever the
  // report allocates comes from the emergency heap (support/emergency_heap.h).
  void (*leave_thread_heap)() = nullptr;
  // frontend: the OS refused memory; gives back every cache of free
  // memory (cached huge blocks, kept spans, pooled slabs). True if anything
  // was released, so that the caller may try again.
  bool (*release_cached_memory)() = nullptr;
  // frontend, set only with XALLOC_STATS: walks the spans and heaps for
  // where resident memory goes (support/counters.h, peak_account).
  void (*take_account)(stats::MemoryAccount* out) = nullptr;
};

extern Hooks g_hooks __attribute__((visibility("hidden")));

}  // namespace xalloc
