// The slab pool: empty slabs shared by all heaps, their free lists intact.
//
// A heap keeps a few of its own empty slabs as spares (heap.h). Past
// those, an empty slab would go back to the span allocator, which
// coalesces it with its neighbours, and the next slab of its class would be
// cut out again and carved block by block, both under the span allocator's
// lock: a program that frees many slabs' worth of one class and allocates
// it again (a batch per round, a phase per request) would pay that for
// every slab. The pool keeps such slabs for the next heap that needs one:
// a slab of the same class is taken as it is, its blocks ready to hand
// out; a slab of another class of the same length is made a slab of the
// new class, so memory pooled for one class does not sit idle while
// another takes new spans.
//
// It does not hoard. It holds at most kPoolBytes (on top of the free
// memory the span allocator keeps resident for reuse, span_allocator.h).
// It is looked at every half purge delay, from every heap's periodic slow
// path and from the background purger: the slabs of a class that stayed
// in the pool through a whole interval (the fewest it held during it) go
// back to the span allocator, counted as idle for one interval (they were
// for one or two), so an unused pooled slab stays resident for at most
// about one and a half purge delays. With a purge delay of
// 0 nothing is pooled; malloc_trim empties the pool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meta/page.h"

namespace xalloc::slab_pool {

constexpr size_t kPoolBytes = size_t{4} << 20;

// Keeps `page`, an empty slab that no heap owns (owner null, every carved
// block on its free list): false when the pool is full.
bool put(Page* page);

// An empty slab of class `cls` (owner null, its free list intact), or null.
Page* take(unsigned cls);

// An empty slab of any class whose slabs are `slices` long, or null: the
// caller makes it a slab of its own class, so that memory the pool holds
// for one class is not left idle while another needs new slabs.
Page* take_any_of_length(size_t slices);

// Gives back the slabs no heap needed for a whole interval. Cheap when the
// pool is empty or was looked at less than an interval ago.
void release_idle(uint64_t now_ms);

// Gives back every slab; returns their bytes.
size_t release_all();

// Bytes held now (statistics).
size_t bytes();

// fork(): the pool's locks are held across it, and are free in the child.
void lock_for_fork();
void unlock_after_fork_parent();
void reset_after_fork_child();

}  // namespace xalloc::slab_pool
