// Borrowing: memory sent to a heap whose thread has stopped allocating.
//
// A block freed by another thread goes back to its owner's inbox and waits
// there until the owner drains it (remote_free.h). While the owner keeps
// allocating, that happens within a few allocations: a sender that has
// pushed kDrainRequestBytes asks for a drain, and the owner's next small
// malloc answers. An owner that is not running - waiting on a lock, blocked
// in a system call, or one of many threads that take turns under a global
// lock, as Ruby's and Python's do - answers nothing, and what the others
// free for it piles up, out of everyone's reach, while they map fresh
// memory (Ruby with 8 threads: 50-77 MiB in such inboxes).
//
// A heap that is about to take a new slab looks for a heap that left a
// drain request unanswered while senders kept sending (a "stalled" one,
// kStalledBytes), for longer than a thread waits for its turn on a
// processor (kStalledMillis for each thread per processor: a thread that
// shares its core with others only waits), and borrows from its inbox
// instead: it takes the inbox's lists with the same atomic exchange the
// owner drains with, keeps up to kBorrowBytes of their blocks on per-class
// lists of its own - pseudo-slabs that its direct and serving tables serve
// from until they run dry - and pushes the rest back. A borrowed block stays its
// owner's: its slab counts it as in use all along, and whoever frees it
// later sends it home like any other thread's block. Nothing is written
// into the owner's slabs, so the owner's lock-free fast paths are never
// raced with.
//
// A heap that holds half of kBorrowBytes unused when it would borrow again
// sends those home first, and it returns them all when it collects (thread
// exit, xalloc_thread_collect, malloc_trim): at most kBorrowBytes sit
// unused in a thread that stops. A heap that has been borrowed from makes
// its next kBorrowPause slabs itself instead of borrowing back at once, so
// that blocks do not circle between threads that take turns.
//
// What it costs: a borrowed block stays a cross-thread block at every later
// free, and those cost more than local ones. Where a thread stops for good
// with blocks that others free (larson's main thread, which made the first
// blocks and waits for the workers) they are borrowed again and again
// (docs/memory.md has the figures). XALLOC_BORROW=0 turns it off. Not in
// secure mode, whose blocks wait in their owner's quarantine, nor while
// statistics or the profiler count allocations.
#pragma once

#include <cstddef>
#include <cstdint>

#include "frontend/remote_free.h"

namespace xalloc {

struct Heap;

// Bytes of borrowed blocks a heap holds at most after a steal.
constexpr size_t kBorrowBytes = 256 * 1024;

// Refills that make a slab instead of borrowing, after a heap was
// borrowed from.
constexpr uint32_t kBorrowPause = 16;

// Borrows from a stalled heap's inbox for `heap`, which has no slab with a
// free block for `cls`. True when the class's borrowed list now has a
// block. Points the direct and serving tables of every class it took
// blocks of at that class's borrowed list.
bool borrow_from_stalled(Heap* heap, unsigned cls);

// Sends every block of `heap`'s borrowed lists back to its owner (through
// the outbox: the caller flushes it).
void borrowed_return(Heap* heap);

}  // namespace xalloc
