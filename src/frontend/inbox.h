// A heap's inbox: the receiving side of cross-thread frees
// (remote_free.h). Other threads push lists of blocks; the owner takes
// them all with one exchange per lane and returns them to their slabs.
#pragma once

#include <atomic>
#include <cstddef>

#include "frontend/heap.h"
#include "platform/shared_count.h"

namespace xalloc {

// True when other threads have sent blocks that are not drained yet.
inline bool inbox_pending(const Heap* heap) {
  uintptr_t any = 0;  // the lanes ORed together: no branch per lane
#pragma GCC unroll 8
  for (const std::atomic<FreeBlock*>& lane : heap->inbox)
    any |= reinterpret_cast<uintptr_t>(lane.load(std::memory_order_relaxed));
  return any != 0;
}

// Takes the lanes of `heap`'s inbox into `lists`; returns how many were
// not empty. acq_rel: see the senders' links, and let a sender that pushes
// after this see whether the heap was orphaned (thread_heap_teardown):
// that takes an exchange on every lane, which the final drain asks for
// with `every_lane`. Otherwise a lane that reads empty is left alone, and
// the drain writes only the lines of lanes that hold blocks.
inline size_t inbox_take(Heap* heap, FreeBlock* (&lists)[kLanes], bool every_lane = false) {
  size_t active = 0;
  for (size_t lane = 0; lane < kLanes; ++lane) {
    std::atomic<FreeBlock*>& inbox = heap->inbox[lane];
    lists[lane] = nullptr;
    if (!every_lane && inbox.load(std::memory_order_relaxed) == nullptr) continue;
    shared_count::atomic_rmw(shared_count::Site::kInboxTake, &inbox);
    lists[lane] = inbox.exchange(nullptr, std::memory_order_acq_rel);
    if (lists[lane] != nullptr) ++active;
  }
  return active;
}

// Returns inbox blocks to their slabs.
void heap_drain_inbox(Heap* heap);
// The same with an exchange on every lane, empty or not: the drain of an
// exiting thread's heap once it is marked orphaned (thread_heap_teardown),
// after which every sender sees the mark and drains its own blocks
// (orphan_collect). Later drains of the orphan skip the empty lanes: a
// sender's push comes before its own drain.
void heap_drain_inbox_final(Heap* heap);
// The owner's drain before it allocates: in secure mode the blocks wait in
// the quarantine, as the owner's own frees do; otherwise heap_drain_inbox.
void heap_drain_inbox_for_reuse(Heap* heap);

// Heaps asked to drain, one slot each by address (a later one takes the
// slot of an earlier): hints for borrowing (borrow.h), checked before use.
// Heaps are never unmapped, so reading a stale one is safe.
constexpr size_t kStalledSlots = 8;
extern std::atomic<Heap*> g_stalled[kStalledSlots];
// The sender whose push takes `heap`'s pending bytes past kStalledBytes
// calls this (inbox_push); nothing happens unless XALLOC_BORROW is on.
void note_stalled(Heap* heap);

// Drains the inbox of `heap` if its thread has exited: called by the thread
// that just sent it blocks, so slabs of exited threads still empty out and
// return even when no thread is created to adopt them.
void orphan_collect(Heap* heap);

}  // namespace xalloc
