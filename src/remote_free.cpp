#include "remote_free.h"

#include "heap.h"
#include "options.h"

namespace xalloc {

namespace {

inline size_t slot_of(const Heap* dest) {
  // Heaps are at least 64-byte aligned; mix the bits above that.
  uint64_t h = (reinterpret_cast<uintptr_t>(dest) >> 6) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h >> 60) & (kOutboxSlots - 1);
}

void send_slot(Outbox::Slot& slot) {
  if (slot.head != nullptr) inbox_push(slot.dest, slot.head, slot.tail);
  slot.head = slot.tail = nullptr;
}

}  // namespace

void inbox_push(Heap* dest, FreeBlock* head, FreeBlock* tail) {
  FreeBlock* old = dest->inbox.load(std::memory_order_relaxed);
  do {
    tail->next = old;
    // Release: the owner's exchange (acquire) must see the links written above.
  } while (!dest->inbox.compare_exchange_weak(old, head, std::memory_order_release, std::memory_order_relaxed));
}

void outbox_add(Outbox& outbox, Heap* dest, FreeBlock* block, size_t block_size) {
  Outbox::Slot& slot = outbox.slots[slot_of(dest)];
  if (slot.dest != dest) {
    send_slot(slot);
    slot.dest = dest;
  }
  block->next = slot.head;
  slot.head = block;
  if (slot.tail == nullptr) slot.tail = block;
  outbox.bytes += block_size;
  if (outbox.bytes >= g_options.remote_batch_bytes) outbox_flush(outbox);
}

void outbox_flush(Outbox& outbox) {
  for (Outbox::Slot& slot : outbox.slots) send_slot(slot);
  outbox.bytes = 0;
}

}  // namespace xalloc
