// Cross-thread frees.
//
// A block freed by a thread that does not own its slab is returned to the
// owning heap, never kept by the freeing thread. To make that cheap, the
// freeing thread first collects such blocks in its outbox, a few lists keyed
// by destination heap, and hands each list over with a single atomic
// operation once the outbox holds kRemoteBatchBytes (or when the thread
// takes a slow path, collects, or exits).
//
// Each heap's inbox is a lock-free stack that producers push whole lists
// onto (compare-and-swap of the head) and that the owner empties with one
// atomic exchange. Because the owner never pops single nodes, the ABA
// problem of Treiber stacks cannot arise: a push that sees the same head
// twice links to a list that is still current.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "page.h"

namespace xalloc {

struct Heap;

constexpr size_t kOutboxSlots = 16;

struct Outbox {
  struct Slot {
    Heap* dest;
    FreeBlock* head;
    FreeBlock* tail;
  };
  Slot slots[kOutboxSlots];
  size_t bytes;  // buffered in all slots
};

// Pushes the list head..tail onto `dest`'s inbox.
void inbox_push(Heap* dest, FreeBlock* head, FreeBlock* tail);

// Queues `block` (of `block_size` bytes) for `dest`; flushes when the outbox is full.
void outbox_add(Outbox& outbox, Heap* dest, FreeBlock* block, size_t block_size);
void outbox_flush(Outbox& outbox);

}  // namespace xalloc
