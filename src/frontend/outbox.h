// The sending side of cross-thread frees (remote_free.h): a thread stages
// the blocks it frees for other heaps in its outbox and sends them to
// their owners' inboxes in batches.
#pragma once

#include <cstddef>

#include "frontend/remote_free.h"
#include "meta/size_classes.h"

namespace xalloc {

// Pushes the list from `head` to `last` (last_run) onto lane `lane` of
// `dest`'s inbox; `bytes` counts towards the owner's pending total.
void inbox_push(Heap* dest, size_t lane, FreeBlock* head, uintptr_t last, size_t bytes);

// Sends `block` alone to `dest` at once: for a thread that is exiting and
// has no outbox any more.
void send_one(Heap* dest, FreeBlock* block, size_t bytes);


// Sends every staged block to its owner.
void outbox_flush(Outbox& outbox);

// outbox_add when the stage is full (or is g_empty_heap's).
void outbox_add_full(Outbox& outbox, Heap* dest, FreeBlock* block, unsigned cls);

inline bool outbox_pending(const Outbox& outbox) { return outbox.stage_next != outbox.stage; }

// Stages `block` (marked free, of class `cls`, of a slab that `dest`
// owns); sends everything once XALLOC_REMOTE_BATCH bytes are staged.
// (Every call is a tail call: the function needs no stack frame.)
inline void outbox_add(Outbox& outbox, Heap* dest, FreeBlock* block, unsigned cls) {
  StagedBlock* slot = outbox.stage_next;
  if (__builtin_expect(slot == outbox.stage_end, 0)) return outbox_add_full(outbox, dest, block, cls);
  *slot = {block, reinterpret_cast<uintptr_t>(dest) | cls};
  outbox.stage_next = slot + 1;
  size_t size = kClassSize[cls];
  if (__builtin_expect(size >= outbox.budget, 0)) return outbox_flush(outbox);
  outbox.budget -= size;
}

}  // namespace xalloc
