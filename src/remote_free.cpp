#include "remote_free.h"

#include "heap.h"

namespace xalloc {

namespace {

void send_slot(Outbox& outbox, size_t slot) {
  if (outbox.head[slot] != nullptr)
    inbox_push(outbox.dest[slot], outbox.head[slot], outbox.tail[slot], outbox.slot_bytes[slot]);
  outbox.head[slot] = outbox.tail[slot] = nullptr;
  outbox.slot_bytes[slot] = 0;
}

// Points every small size of `dest` at the empty slab: its next small
// allocation takes the slow path, which drains and repairs the table.
void request_drain(Heap* dest) {
  if (dest->drain_requested.exchange(1, std::memory_order_acq_rel) != 0) return;
  for (Page*& slot : dest->direct) __atomic_store_n(&slot, &g_empty_page, __ATOMIC_RELAXED);
}

}  // namespace

void inbox_push(Heap* dest, FreeBlock* head, FreeBlock* tail, size_t bytes) {
  FreeBlock* old = dest->inbox.load(std::memory_order_relaxed);
  do {
    set_remote_next(tail, old);
    // Release: the owner's exchange (acquire) must see the links written above.
  } while (!dest->inbox.compare_exchange_weak(old, head, std::memory_order_release, std::memory_order_relaxed));
  size_t pending = dest->inbox_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (pending >= kDrainRequestBytes && pending - bytes < kDrainRequestBytes) request_drain(dest);
}

void outbox_switch_slot(Outbox& outbox, size_t slot, Heap* dest) {
  send_slot(outbox, slot);
  outbox.dest[slot] = dest;
}

void outbox_flush(Outbox& outbox) {
  for (size_t slot = 0; slot < kOutboxSlots; ++slot) send_slot(outbox, slot);
  outbox.bytes = 0;
}

}  // namespace xalloc
