#include "frontend/outbox.h"

#include <bit>

#include "frontend/inbox.h"
#include "frontend/heap.h"
#include "support/options.h"
#include "frontend/thread_registry.h"
#include "platform/shared_count.h"

namespace xalloc {

namespace {

void send_slot(OutboxLinks& links, size_t slot) {
  for (size_t lane = 0; lane < kLanes; ++lane) {
    if (links.head[slot][lane] == nullptr) continue;
    // The slot's bytes count once, with its first lane.
    inbox_push(links.dest[slot], lane, links.head[slot][lane], links.tail[slot][lane], links.slot_bytes[slot]);
    links.slot_bytes[slot] = 0;
    links.head[slot][lane] = links.tail[slot][lane] = nullptr;
  }
}

// The slot that serves `dest`, after sending what it holds for another
// destination.
size_t slot_for(Outbox& outbox, Heap* dest) {
  // Heaps are at least 64-byte aligned; mix the bits above that.
  uint64_t h = (reinterpret_cast<uintptr_t>(dest) >> 6) * 0x9E3779B97F4A7C15ull;
  size_t slot = static_cast<size_t>(h >> 60) & (kOutboxSlots - 1);
  OutboxLinks& links = *outbox.links;
  if (links.dest[slot] != dest) {
    if (links.dest[slot] != nullptr) send_slot(links, slot);
    links.dest[slot] = dest;
    outbox.used_slots |= uint32_t{1} << slot;
  }
  return slot;
}

Heap* dest_of(StagedBlock staged) { return reinterpret_cast<Heap*>(staged.owner_and_class & ~kStagedClassMask); }

size_t size_of(StagedBlock staged) { return kClassSize[staged.owner_and_class & kStagedClassMask]; }

// Links `count` staged blocks of one destination, of `bytes` in all, onto
// one of the lists of `slot`, chosen by the run's first slice. A run stays
// on one list, in order: the blocks a thread frees one after the other
// are mostly neighbours (allocated one after the other), and the owner's
// drain then walks each run in address order, which the hardware
// prefetcher follows, with other runs on the other lanes. By slice, so
// that the runs of one slab go on one lane and come back to its free list
// in the order they were freed. (Blocks of a slab dealt out to several
// lanes come back interleaved, and their next owner walks its slab out of
// order, round after round: xmalloc-test on 2 cores took 1.9x the time
// dealt block by block, 2.4x with runs by their first page on 16 lanes.)
void link_run(Outbox& outbox, size_t slot, const StagedBlock* run, size_t count, size_t bytes) {
  size_t lane = (reinterpret_cast<uintptr_t>(run[0].block) >> kSliceShift) & (kLanes - 1);
  OutboxLinks& links = *outbox.links;
  FreeBlock* head = links.head[slot][lane];
  if (head == nullptr) links.tail[slot][lane] = run[0].block;
  for (size_t i = 0; i < count; ++i) {
    set_remote_next(run[i].block, head);
    head = run[i].block;
  }
  links.head[slot][lane] = head;
  links.slot_bytes[slot] += bytes;
  outbox.blocks += count;
}

// A thread without a heap of its own that frees another heap's block: it
// gets a heap now, or, when it is exiting, sends the block at once.
void send_without_heap(Heap* dest, FreeBlock* block, unsigned cls) {
  Heap* heap = thread_heap_acquire();
  if (heap != nullptr) return outbox_add(heap->outbox, dest, block, cls);
  send_one(dest, block, kClassSize[cls]);
}

// Points every small size of `dest` at the empty slab: its next small
// allocation takes the slow path, which drains and repairs the table.
void request_drain(Heap* dest) {
  shared_count::atomic_rmw(shared_count::Site::kDrainRequest, &dest->drain_requested);
  if (dest->drain_requested.exchange(1, std::memory_order_acq_rel) != 0) return;
  for (Page*& slot : dest->direct) __atomic_store_n(&slot, &g_empty_page, __ATOMIC_RELAXED);
}

}  // namespace

void inbox_push(Heap* dest, size_t lane, FreeBlock* head, FreeBlock* tail, size_t bytes) {
  std::atomic<FreeBlock*>& inbox = dest->inbox[lane];
  FreeBlock* old = inbox.load(std::memory_order_relaxed);
  do {
    set_remote_next(tail, old);
    shared_count::atomic_rmw(shared_count::Site::kInboxPush, &inbox);
    // Release: the owner's exchange must see the links written above.
    // Acquire: see the orphaned state of a heap whose final drain came first.
  } while (!inbox.compare_exchange_weak(old, head, std::memory_order_acq_rel, std::memory_order_relaxed));
  // An exited thread's heap drains nothing itself: the sender does.
  if (dest->state.load(std::memory_order_relaxed) == HeapState::kOrphan) return orphan_collect(dest);
  if (bytes == 0) return;
  shared_count::atomic_rmw(shared_count::Site::kInboxBytes, &dest->inbox_bytes);
  size_t pending = dest->inbox_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (pending >= kDrainRequestBytes && pending - bytes < kDrainRequestBytes) request_drain(dest);
  if (pending >= kStalledBytes && pending - bytes < kStalledBytes) note_stalled(dest);
}

void send_one(Heap* dest, FreeBlock* block, size_t bytes) {
  set_remote_next(block, nullptr);
  inbox_push(dest, 0, block, block, bytes);
}

void outbox_add_full(Outbox& outbox, Heap* dest, FreeBlock* block, unsigned cls) {
  if (&outbox == &g_empty_heap.outbox) return send_without_heap(dest, block, cls);
  outbox_flush(outbox);
  outbox_add(outbox, dest, block, cls);
}

void outbox_flush(Outbox& outbox) {
  const StagedBlock* staged = outbox.stage;
  size_t count = static_cast<size_t>(outbox.stage_next - outbox.stage);
  for (size_t start = 0, end; start < count; start = end) {
    Heap* dest = dest_of(staged[start]);
    size_t bytes = size_of(staged[start]);
    for (end = start + 1; end < count && dest_of(staged[end]) == dest; ++end) bytes += size_of(staged[end]);
    link_run(outbox, slot_for(outbox, dest), staged + start, end - start, bytes);
  }
  // Only the slots this flush used: a flush of a few big blocks (the byte
  // budget sends every 16 KiB) would otherwise spend most of its time
  // looking at empty ones.
  for (uint32_t used = outbox.used_slots; used != 0; used &= used - 1) {
    auto slot = static_cast<size_t>(std::countr_zero(used));
    send_slot(*outbox.links, slot);
    outbox.links->dest[slot] = nullptr;
  }
  outbox.used_slots = 0;
  outbox.stage_next = outbox.stage;
  outbox.budget = g_options.remote_batch_bytes;
}

}  // namespace xalloc
