// The sampling heap profiler (XALLOC_PROF=1).
//
// Allocations are sampled by bytes: after each sample the next one is due
// after a random number of bytes drawn from an exponential distribution
// with mean XALLOC_PROF_RATE (512 KiB), so every byte has the same chance
// of being sampled whatever the size of its block. A sampled block is
// served as a page-granular large block marked `sampled`, so its free is
// noticed without any lookup; its stack is recorded in a table
// of stacks, and the stack's index and the size in the block's descriptor,
// where its free finds them without a lock.
//
// Profiles of the live sampled memory (profile_writer.h) are numbered in
// the order they are written, `<prefix>.<pid>.<seq>.heap` and
// `.collapsed`, so none overwrites another and a fork child's (another
// pid) none of its parent's: on XALLOC_PROF_SIGNAL, at each new peak of
// the sampled live memory XALLOC_PROF_PEAK bytes above the last (a copy
// of the table taken at the peak), every XALLOC_PROF_INTERVAL bytes
// allocated, and at exit (the peak first, when it is higher than anything
// written and than what is live then). A thread of its own writes them
// (started only when one of these can happen), woken through a futex
// word: the signal handler only sets a bit and wakes it, so a signal's
// profile is written at once whatever the program does meanwhile.
// xalloc_prof_dump() writes `<prefix>.heap` for a prefix of its own, and
// the next numbered profile without one. XALLOC_LEAKS=1 prints the top
// allocation sites of memory still live at exit.
//
// Small blocks (the direct table's sizes) are sampled through per-class
// windows (heap.h) when the profiler runs without statistics: the fast path
// then counts nothing, and the allocation that finds its window empty is
// either the sampled one or opens the next window; such a block counts as
// its class size. Blocks of 1-64 KiB take the out-of-line path instead, as
// every allocation does with XALLOC_STATS=1 (or in the secure build), to be
// counted there and sampled by a byte countdown of requested sizes: windows
// of such blocks measured slower (their blocks, taken off the slab when the
// window opens, are colder than the one a free just returned).
//
// When neither statistics nor profiling is on, nothing here runs: the
// hooks sit on slow paths and test one global flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "diag/profile_data.h"
#include "meta/page.h"

namespace xalloc {

namespace prof {

// Set once at start-up, before any heap exists; relaxed atomics so that a
// thread racing the start-up reads a defined value. Every slow path reads
// them: a cache line of their own, as secure.h's Secrets.
struct alignas(64) Flags {
  std::atomic<bool> watch_allocations{false};
  std::atomic<bool> profiling{false};
  std::atomic<bool> windowed{false};
};
extern Flags g_flags __attribute__((visibility("hidden")));

// True when allocations are diverted from the fast paths so that each can
// be counted (XALLOC_STATS) or sampled (XALLOC_PROF).
inline bool watching() { return g_flags.watch_allocations.load(std::memory_order_relaxed); }
inline bool profiling() { return g_flags.profiling.load(std::memory_order_relaxed); }
// True when small allocations are sampled through windows and not counted.
inline bool windowed() { return g_flags.windowed.load(std::memory_order_relaxed); }
// True when every allocation is counted by class.
inline bool counting() { return watching() && !windowed(); }

// At process start-up: init_flags() after the options are read (allocates
// nothing); start() once the allocator works (loads libunwind, which
// allocates).
void init_flags();
void start();

// The calling thread is taking a sample (or writing a profile): what it
// allocates meanwhile (the unwinder, a dump) is not sampled.
extern __thread bool t_in_sampler;
// Records a sample of `size` bytes taken at `frames` in `page`, the
// descriptor of the sampled block (a large span or a huge block's first).
void record(Page* page, size_t size, void* const* frames, int depth);

// Bytes until the next sample (a random draw; INT64_MAX when nothing is
// sampled): for a new heap, and for a window's class after each sample.
int64_t sample_interval();

// The sampled block of `page` (a large span or a huge block's first
// descriptor, where its sample is recorded) is being freed.
void forget(const Page* page);

// The sampled block of `page` was resized by realloc, in place or moved
// with its descriptor's sample fields: it stays sampled, now `size` bytes.
void resized(Page* page, size_t size);

// Writes the profiles now: `<prefix>.heap` and `.collapsed`, or with
// prefix null the next numbered ones.
bool dump(const char* prefix);

// At exit: the peak's profile if it is worth writing, then the exit
// profile (XALLOC_PROF_EXIT); then the leak report (XALLOC_LEAKS), as
// message() lines.
void at_exit_profiles();
void at_exit_leaks();

// fork(): the profiler's locks are held across it, and are free in the
// child, which numbers its profiles from 0 and gets a writer thread of its
// own.
void lock_for_fork();
void unlock_after_fork_parent();
void reset_after_fork_child();

}  // namespace prof
}  // namespace xalloc
