// Cross-thread frees.
//
// A block freed by a thread that does not own its slab is returned to the
// owning heap, never kept by the freeing thread. To make that cheap, the
// freeing thread first stages such blocks in its outbox - an array, so that
// the free itself writes nothing into the block but its free marker - and
// sends them once the outbox holds XALLOC_REMOTE_BATCH bytes or kStageSlots
// blocks (or when the thread takes a slow path, collects, or exits): it
// then links them into a few
// lists per destination heap and hands each list over with one atomic
// operation.
//
// Why stage instead of linking at once: a thread that frees blocks
// allocated elsewhere mostly misses the cache on each of them, on the
// marker check (alloc.cpp). The processor overlaps as many of those misses
// as its reorder buffer holds frees, so every instruction of the remote
// free path that can move to the send (where the blocks are in the cache
// again) lets more of them overlap.
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

#include "meta/page.h"
#include "meta/secure.h"
#include "meta/size_classes.h"

namespace xalloc {

struct Heap;

constexpr size_t kOutboxSlots = 16;  // destinations a send links lists for at once (<= 32: a mask)

// Each destination gets its blocks on this many lists ("lanes"), each
// send's runs (below) on one lane. The owner walks the lanes side by side
// when it drains: a linked list costs a cache miss per run, one after the
// other, and independent lists let those misses overlap. (A batch built by
// one thread and freed by ten, drained by its builder block by block: with
// 4 lanes the drain was 2/3 of the building's time, with 16 it builds in
// 0.7x the time; 32 gained little more.)
constexpr size_t kLanes = 16;

// Lists of blocks on their way to their owner run through the blocks'
// `next` words (encoded with the process secret in secure mode).
inline FreeBlock* remote_next(const FreeBlock* block) {
  return reinterpret_cast<FreeBlock*>(reinterpret_cast<uintptr_t>(block->next) ^
                                      (secure::kEnabled ? secure::g_secrets.link : 0));
}
inline void set_remote_next(FreeBlock* block, FreeBlock* next) {
  block->next = reinterpret_cast<FreeBlock*>(reinterpret_cast<uintptr_t>(next) ^
                                             (secure::kEnabled ? secure::g_secrets.link : 0));
}

// A list on its way is made of runs: the blocks of one slice that one send
// links, one after the other, each linked to the next through `next` as
// every block on the list is. The head of a run of blocks of 32 bytes or
// more also carries the run's tail and length, and the next run (words 2
// and 3; word 1 is the free marker, which a double free of a block on its
// way still finds), so that its owner puts the whole run on the slab's
// free list at once, reading only its head (inbox.cpp; a batch built by
// one thread and freed by ten: read block by block, the drain was 40% of
// the building's time; with runs the whole round trip takes 0.86-0.93x the
// time). Blocks of the 16-byte class, and
// every block in secure mode (whose owner checks each block's canary, and
// whose quarantine takes blocks one by one), are runs of one that carry
// nothing. Within a run the links are those of the slab's free list too:
// without the secure mode's encoding, both are the plain pointer.
struct RunHead {
  FreeBlock block;
  uintptr_t tail_and_count;  // the tail's address, the length above bit 48
  FreeBlock* next_run;       // as `next` of the tail
};
static_assert(sizeof(RunHead) == 32);
constexpr unsigned kRunCountShift = 48;
static_assert(kAddressBits <= kRunCountShift, "slab blocks lie where the segment map reaches");

inline bool carries_run(size_t block_size) { return !secure::kEnabled && block_size >= sizeof(RunHead); }

inline void set_run(FreeBlock* head, FreeBlock* tail, size_t count) {
  reinterpret_cast<RunHead*>(head)->tail_and_count = reinterpret_cast<uintptr_t>(tail) | count << kRunCountShift;
}
inline FreeBlock* run_tail(const FreeBlock* head) {
  uintptr_t word = reinterpret_cast<const RunHead*>(head)->tail_and_count;
  return reinterpret_cast<FreeBlock*>(word & ((uintptr_t{1} << kRunCountShift) - 1));
}
inline size_t run_count(const FreeBlock* head) {
  return reinterpret_cast<const RunHead*>(head)->tail_and_count >> kRunCountShift;
}
inline FreeBlock* run_next(const FreeBlock* head) { return reinterpret_cast<const RunHead*>(head)->next_run; }
inline void set_run_next(FreeBlock* head, FreeBlock* next) { reinterpret_cast<RunHead*>(head)->next_run = next; }

// The last run of a list, as a sender keeps it to join the list to what
// an inbox lane holds: the run's head with bit 0 set when it carries (the
// tail is then in the head), else its tail.
inline uintptr_t last_run(FreeBlock* head, FreeBlock* tail, bool carries) {
  return carries ? reinterpret_cast<uintptr_t>(head) | 1 : reinterpret_cast<uintptr_t>(tail);
}
inline void join_after(uintptr_t last, FreeBlock* next) {
  auto* block = reinterpret_cast<FreeBlock*>(last & ~uintptr_t{1});
  if ((last & 1) == 0) return set_remote_next(block, next);
  set_remote_next(run_tail(block), next);
  set_run_next(block, next);
}

// Blocks the outbox stages at most, whatever XALLOC_REMOTE_BATCH says.
constexpr size_t kStageSlots = 512;

// A staged block, with its owner and its size class: the class in the low
// bits of the owner's address (heaps are 64-byte aligned: heap.h).
struct StagedBlock {
  FreeBlock* block;
  uintptr_t owner_and_class;
};
constexpr uintptr_t kStagedClassMask = 63;
static_assert(kNumClasses <= kStagedClassMask + 1);

// While sending: the lists of each destination slot, one per lane, from
// the first run's head to the last run (last_run). Beside the stage, not
// in the heap, for the same reason: a new heap's constructor writes none
// of it (4 KiB). Between sends it is
// all null, as the fresh memory it starts in: a send clears what it used.
struct OutboxLinks {
  Heap* dest[kOutboxSlots];
  FreeBlock* head[kOutboxSlots][kLanes];
  uintptr_t last[kOutboxSlots][kLanes];  // last_run
  size_t slot_bytes[kOutboxSlots];
};

struct Outbox {
  // Blocks freed since the last send, marked free but not linked yet:
  // [stage, stage_next), in an array of kStageSlots next to the heap
  // (thread_registry.cpp), apart from it so that a new heap's constructor
  // need not zero it (its memory is fresh from the OS, and stays untouched
  // until the thread frees another thread's block). Until heap_init gives
  // it a stage, an outbox is full (stage_next == stage_end): g_empty_heap's
  // stages nothing.
  StagedBlock* stage = nullptr;
  StagedBlock* stage_next = nullptr;
  StagedBlock* stage_end = nullptr;
  OutboxLinks* links = nullptr;  // given with the stage
  // Bytes that may still be staged before a send: XALLOC_REMOTE_BATCH
  // after heap_init and after each send.
  size_t budget = 0;
  size_t blocks = 0;  // ever sent (statistics)
  // While sending: a bit set for each slot of `links` that holds a
  // destination.
  uint32_t used_slots = 0;
  static_assert(kOutboxSlots <= 32);
};

// Pending inbox bytes past which a sender asks the owner to drain.
constexpr size_t kDrainRequestBytes = 256 * 1024;
// A heap is stalled when it has been asked to drain and senders have sent
// it this much (since its last drain) without it draining: an owner that
// is running answers the request at its next small malloc, long before
// (frontend/borrow.h).
constexpr size_t kStalledBytes = 2 * kDrainRequestBytes;
// And it has stayed so for this long times the threads per processor
// (borrow.cpp): a thread preempted by others that share its core runs again
// within a scheduler slice (3-4 ms) for each thread ahead of it, one
// waiting for a lock or for its turn under an interpreter lock (Ruby hands
// it over every 100 ms) does not.
constexpr uint64_t kStalledMillis = 10;

}  // namespace xalloc
