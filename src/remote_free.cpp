#include "remote_free.h"

#include "heap.h"
#include "thread_registry.h"

namespace xalloc {

namespace {

void send_slot(Outbox& outbox, size_t slot) {
  for (size_t lane = 0; lane < kLanes; ++lane) {
    if (outbox.head[slot][lane] == nullptr) continue;
    // The slot's bytes count once, with its first lane.
    inbox_push(outbox.dest[slot], lane, outbox.head[slot][lane], outbox.tail[slot][lane], outbox.slot_bytes[slot]);
    outbox.slot_bytes[slot] = 0;
    outbox.head[slot][lane] = outbox.tail[slot][lane] = nullptr;
  }
  outbox.blocks += outbox.slot_blocks[slot];
  outbox.slot_blocks[slot] = 0;
}

// Points every small size of `dest` at the empty slab: its next small
// allocation takes the slow path, which drains and repairs the table.
void request_drain(Heap* dest) {
  if (dest->drain_requested.exchange(1, std::memory_order_acq_rel) != 0) return;
  for (Page*& slot : dest->direct) __atomic_store_n(&slot, &g_empty_page, __ATOMIC_RELAXED);
}

}  // namespace

void inbox_push(Heap* dest, size_t lane, FreeBlock* head, FreeBlock* tail, size_t bytes) {
  std::atomic<FreeBlock*>& inbox = dest->inbox[lane];
  FreeBlock* old = inbox.load(std::memory_order_relaxed);
  do {
    set_remote_next(tail, old);
    // Release: the owner's exchange must see the links written above.
    // Acquire: see the orphaned state of a heap whose final drain came first.
  } while (!inbox.compare_exchange_weak(old, head, std::memory_order_acq_rel, std::memory_order_relaxed));
  // An exited thread's heap drains nothing itself: the sender does.
  if (dest->state.load(std::memory_order_relaxed) == HeapState::kOrphan) return orphan_collect(dest);
  if (bytes == 0) return;
  size_t pending = dest->inbox_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (pending >= kDrainRequestBytes && pending - bytes < kDrainRequestBytes) request_drain(dest);
}

void outbox_add_switching(Outbox& outbox, Heap* dest, FreeBlock* block, size_t block_size, size_t limit) {
  size_t slot = outbox_slot_of(dest);
  send_slot(outbox, slot);
  outbox.dest[slot] = dest;
  outbox_link(outbox, slot, block, block_size);
  if (outbox.bytes >= limit) outbox_flush(outbox);
}

void outbox_flush(Outbox& outbox) {
  for (size_t slot = 0; slot < kOutboxSlots; ++slot) send_slot(outbox, slot);
  outbox.bytes = 0;
}

}  // namespace xalloc
