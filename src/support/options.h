// Run-time options, read from XALLOC_* environment variables at start-up.
// docs/options.md lists every option; options.cpp holds the table.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xalloc {

// An option that may also be left to xalloc: "auto".
enum class Switch : uint8_t { kOff, kOn, kAuto };
// "0", "1" or "auto", as the environment spells it.
const char* switch_name(Switch value);

struct Options {
  // Free memory stays resident this long before it is purged (madvise), so
  // that memory about to be reused is not faulted in again.
  uint64_t purge_delay_ms = 500;
  // Free memory left resident for reuse beyond this percentage of the
  // memory in use (and 4 MiB) is purged after a tenth of the delay.
  uint64_t dirty_percent = 12;
  // A thread that purges on its own clock (purger.h). Without it, purging
  // rides on the allocator's calls, and memory freed in a burst must go
  // back at once, as no later call may come; with it, freed memory waits
  // for its delay, and a program that frees a batch and builds it again
  // keeps its pages. Auto: started once the process has 64 MiB in use, so
  // small programs run without it.
  Switch background_purge = Switch::kAuto;
  // A thread that needs a new slab first borrows blocks that other threads
  // freed for a thread that is not running (borrow.h): less memory for
  // programs whose threads take turns, at the cost of more cross-thread
  // frees.
  bool borrow = true;
  // Fully free segments kept mapped (purged) for reuse instead of unmapped.
  uint64_t retain_segments = 1;
  // Segments are reserved inaccessible and their pages made read-write as
  // they are used, and purging makes them inaccessible again: for processes
  // whose writable mappings count against a limit as soon as they are
  // mapped (a data size limit, or a kernel that never overcommits).
  // Default: on where either holds (os::writable_mappings_are_limited).
  bool commit_on_demand = false;
  // Transparent huge pages for segments: off, never, even where the
  // kernel would by default (THP "always"); always, wherever THP is
  // enabled; or auto, for the 2 MiB ranges of a big heap that are densely
  // used, and huge blocks while they are written densely
  // (backend/huge_ranges.h).
  Switch huge_pages = Switch::kAuto;
  // Freed huge blocks (> 16 MiB) kept mapped for reuse, in bytes.
  uint64_t huge_cache_bytes = 256ull << 20;
  // A thread buffers frees of other threads' blocks up to this many bytes
  // before handing them to their owners in one atomic operation each.
  uint64_t remote_batch_bytes = 16 << 10;
  bool verbose = false;  // print the effective options at start-up
  bool stats = false;    // print statistics at exit
  // The statistics and leak report at exit go to this file (%p: the pid)
  // instead of stderr ("": stderr).
  const char* stats_file = "";
  // What free() does with a pointer xalloc never handed out: abort with a
  // report (default), or ignore it (leak) for programs known to do it.
  bool abort_on_invalid_free = true;
  // Heap profiler (heap_profiler.h).
  bool prof = false;
  uint64_t prof_rate = 512 << 10;   // mean bytes between samples
  const char* prof_prefix = "xalloc";  // files <prefix>.<pid>.<seq>.heap and .collapsed
  uint64_t prof_signal = 0;          // a signal that writes a profile
  // A profile whenever sampled live memory reaches a new peak this many
  // bytes above the last one written (0: none).
  uint64_t prof_peak = 64 << 20;
  uint64_t prof_interval = 0;  // a profile every this many bytes allocated (0: none)
  // The profile at exit: 0 none, 1 when sampled memory is live, 2 always.
  uint64_t prof_exit = 1;
  bool leaks = false;                // print the top sites of memory live at exit
  // Secure build: a freed slab block waits for at least this many later
  // frees of its heap before it can be reused (at most
  // secure::kQuarantineDepthMax; 0: none).
  uint64_t quarantine = 128;
#if defined(XALLOC_COUNT_SHARED)
  // Counting build (platform/shared_count.h): shared writes are counted
  // from this long after start-up, the warm-up left out (0: from the start).
  uint64_t count_shared_after_ms = 0;
#endif
};

extern Options g_options __attribute__((visibility("hidden")));

// Reads the environment; called once, before the first allocation is served.
void options_init();
void options_print();

}  // namespace xalloc
