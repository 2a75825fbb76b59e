#include "remote_free.h"

#include "heap.h"

namespace xalloc {

namespace {

void send_slot(Outbox& outbox, size_t slot) {
  if (outbox.head[slot] != nullptr) inbox_push(outbox.dest[slot], outbox.head[slot], outbox.tail[slot]);
  outbox.head[slot] = outbox.tail[slot] = nullptr;
}

}  // namespace

void inbox_push(Heap* dest, FreeBlock* head, FreeBlock* tail) {
  FreeBlock* old = dest->inbox.load(std::memory_order_relaxed);
  do {
    set_remote_next(tail, old);
    // Release: the owner's exchange (acquire) must see the links written above.
  } while (!dest->inbox.compare_exchange_weak(old, head, std::memory_order_release, std::memory_order_relaxed));
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
