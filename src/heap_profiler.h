// The sampling heap profiler (XALLOC_PROF=1).
//
// Allocations are sampled by bytes: after each sample the next one is due
// after a random number of bytes drawn from an exponential distribution
// with mean XALLOC_PROF_RATE (512 KiB), so every byte has the same chance
// of being sampled whatever the size of its block. A sampled block is
// served as a page-granular large block marked `sampled`, so its free is
// noticed without any lookup; its stack (libunwind) and size are recorded.
//
// Profiles of the live sampled memory are written at exit (and on
// XALLOC_PROF_SIGNAL or xalloc_prof_dump()): `<prefix>.heap` in the legacy
// text format google-pprof reads (heap_v2: pprof scales the samples up to
// estimated totals), and `<prefix>.collapsed` (scaled; one line per stack,
// for flame graphs). XALLOC_LEAKS=1 prints the top allocation sites of
// memory still live at exit.
//
// When neither statistics nor profiling is on, nothing here runs: the
// hooks sit on slow paths and test one global flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace xalloc {

struct Heap;

namespace prof {

// Set once at start-up, before any heap exists; relaxed atomics so that a
// thread racing the start-up reads a defined value.
extern std::atomic<bool> g_watch_allocations_flag;
extern std::atomic<bool> g_profiling_flag;

// True when small allocations are diverted to the slow path so that each
// can be counted (XALLOC_STATS) or sampled (XALLOC_PROF).
inline bool watching() { return g_watch_allocations_flag.load(std::memory_order_relaxed); }
inline bool profiling() { return g_profiling_flag.load(std::memory_order_relaxed); }

// At process start-up: init_flags() after the options are read (allocates
// nothing); start() once the allocator works (loads libunwind, which
// allocates).
void init_flags();
void start();

// Called for every watched allocation of `size` bytes (its class size for
// small blocks). Returns a sampled block, or null when this allocation is
// not sampled (or sampling is off).
void* maybe_sample(Heap* heap, size_t size, size_t alignment);

// Counts a watched allocation of `size` bytes in class `cls` (kNumClasses
// for large, kNumClasses + 1 for huge) and samples it when due: a sampled
// block, or null to go on with the ordinary allocation.
void* watch(Heap* heap, unsigned cls, size_t size, size_t alignment);

// Bytes until the first sample of a new heap.
int64_t first_countdown();

// A sampled block is being freed.
void forget(void* block);

// A sampled block was resized in place or moved by realloc: it stays
// sampled, now `size` bytes at `new_block`.
void moved(void* old_block, void* new_block, size_t size);

// Writes the profiles now (prefix null: the configured one).
bool dump(const char* prefix);

// Runs a dump requested by the signal, if any (called from slow paths).
void poll_signal();

void at_exit();

}  // namespace prof
}  // namespace xalloc
