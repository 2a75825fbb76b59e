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
#include "secure.h"

namespace xalloc {

struct Heap;

constexpr size_t kOutboxSlots = 16;

// Each destination gets its blocks on this many lists ("lanes"), filled in
// turn. The owner walks them side by side when it drains: a linked list
// costs a cache miss per block, one after the other, and independent lists
// let those misses overlap.
constexpr size_t kLanes = 4;

// Lists of blocks on their way to their owner run through the blocks'
// `next` words (encoded with the process secret in secure mode).
inline FreeBlock* remote_next(const FreeBlock* block) {
  return reinterpret_cast<FreeBlock*>(reinterpret_cast<uintptr_t>(block->next) ^
                                      (secure::kEnabled ? secure::g_link_secret : 0));
}
inline void set_remote_next(FreeBlock* block, FreeBlock* next) {
  block->next = reinterpret_cast<FreeBlock*>(reinterpret_cast<uintptr_t>(next) ^
                                             (secure::kEnabled ? secure::g_link_secret : 0));
}

// The lists of a slot, one per lane, run head to tail.
struct Outbox {
  Heap* dest[kOutboxSlots];
  FreeBlock* head[kOutboxSlots][kLanes];
  FreeBlock* tail[kOutboxSlots][kLanes];
  size_t slot_bytes[kOutboxSlots];
  size_t slot_blocks[kOutboxSlots];  // queued since the slot was last sent
  size_t bytes;   // buffered in all slots
  size_t blocks;  // ever sent (statistics)
};

// Pushes the list head..tail onto lane `lane` of `dest`'s inbox; `bytes`
// counts towards the owner's pending total.
void inbox_push(Heap* dest, size_t lane, FreeBlock* head, FreeBlock* tail, size_t bytes);

// Pending inbox bytes past which a sender asks the owner to drain.
constexpr size_t kDrainRequestBytes = 256 * 1024;

// Sends every slot's list to its destination.
void outbox_flush(Outbox& outbox);

inline size_t outbox_slot_of(const Heap* dest) {
  // Heaps are at least 64-byte aligned; mix the bits above that.
  uint64_t h = (reinterpret_cast<uintptr_t>(dest) >> 6) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h >> 60) & (kOutboxSlots - 1);
}

// Links `block` onto `slot`, which serves its destination.
inline void outbox_link(Outbox& outbox, size_t slot, FreeBlock* block, size_t block_size) {
  size_t lane = outbox.slot_blocks[slot]++ & (kLanes - 1);
  FreeBlock* head = outbox.head[slot][lane];
  set_remote_next(block, head);
  outbox.head[slot][lane] = block;
  if (head == nullptr) outbox.tail[slot][lane] = block;
  outbox.slot_bytes[slot] += block_size;
  outbox.bytes += block_size;
}

// outbox_add for a destination its slot does not serve yet.
void outbox_add_switching(Outbox& outbox, Heap* dest, FreeBlock* block, size_t block_size, size_t limit);

// Queues `block` (of `block_size` bytes) for `dest`; sends everything once
// `limit` bytes are waiting. (Every call is a tail call: the function
// needs no stack frame.)
inline void outbox_add(Outbox& outbox, Heap* dest, FreeBlock* block, size_t block_size, size_t limit) {
  size_t slot = outbox_slot_of(dest);
  if (__builtin_expect(outbox.dest[slot] != dest, 0)) return outbox_add_switching(outbox, dest, block, block_size, limit);
  outbox_link(outbox, slot, block, block_size);
  if (__builtin_expect(outbox.bytes >= limit, 0)) outbox_flush(outbox);
}

}  // namespace xalloc
