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
    inbox_push(links.dest[slot], lane, links.head[slot][lane], links.last[slot][lane], links.slot_bytes[slot]);
    links.slot_bytes[slot] = 0;
    links.head[slot][lane] = nullptr;
    links.last[slot][lane] = 0;
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

uintptr_t dest_bits(StagedBlock staged) { return staged.owner_and_class & ~kStagedClassMask; }

size_t size_of(StagedBlock staged) { return kClassSize[staged.owner_and_class & kStagedClassMask]; }

// Puts the list from `head` to `last` (last_run) in front of the list of
// `lane` of `slot`.
void put_in_front(OutboxLinks& links, size_t slot, size_t lane, FreeBlock* head, uintptr_t last) {
  FreeBlock* next = links.head[slot][lane];
  if (next == nullptr) links.last[slot][lane] = last;
  else join_after(last, next);
  links.head[slot][lane] = head;
}

// The runs a send is linking (link_runs), by slice: at most one open for
// each kOpenRuns-th slice, linked in the order of the frees.
constexpr size_t kOpenRuns = 32;
struct OpenRuns {
  uintptr_t slice[kOpenRuns];  // 0: none (no block lies in slice 0)
  FreeBlock* head[kOpenRuns];
  FreeBlock* tail[kOpenRuns];
  uint32_t count[kOpenRuns];
};

// Puts the open run `k` in front of the list of `lane`.
void close_run(OutboxLinks& links, size_t slot, size_t lane, OpenRuns& runs, size_t k) {
  FreeBlock* head = runs.head[k];
  set_run(head, runs.tail[k], runs.count[k]);
  put_in_front(links, slot, lane, head, last_run(head, runs.tail[k], true));
}

// Links the staged blocks from `first` on that go to the same destination
// as the first (up to `end`) onto the lists of that destination's slot, in
// runs by slice (remote_free.h); returns where they stop. The blocks a
// thread frees one after the other are mostly neighbours, or of a few
// slabs (allocated one after the other, or together). A run is linked in
// the order its blocks were freed, and the lists put runs in front of each
// other, as the owner's drain puts them on a slab's free list: the free
// list comes out in the order of the frees. A block that carries nothing
// is a run of its own, put in front of the list at once, as the drain
// puts it in front of its slab's free list.
//
// All of them go on one lane, chosen by the first block's slice: one
// compare-and-swap per destination and send (a lane per run took larson
// with 32 threads from 15.7 to 61.6 shared writes per 10,000 mallocs), and
// a slab's blocks come back on one lane in the order they were freed
// (dealt over lanes, they came back interleaved: xmalloc-test 1.9x the time).
size_t link_runs(Outbox& outbox, const StagedBlock* staged, size_t first, size_t end) {
  uintptr_t dest = dest_bits(staged[first]);
  size_t slot = slot_for(outbox, reinterpret_cast<Heap*>(dest));
  OutboxLinks& links = *outbox.links;
  size_t lane = (reinterpret_cast<uintptr_t>(staged[first].block) >> kSliceShift) & (kLanes - 1);
  OpenRuns runs;
  for (uintptr_t& slice : runs.slice) slice = 0;
  size_t bytes = 0;
  size_t i = first;
  for (; i < end && dest_bits(staged[i]) == dest; ++i) {
    size_t size = size_of(staged[i]);
    bytes += size;
    FreeBlock* block = staged[i].block;
    uintptr_t slice = reinterpret_cast<uintptr_t>(block) >> kSliceShift;
    size_t k = slice & (kOpenRuns - 1);
    if (XALLOC_LIKELY(runs.slice[k] == slice)) {
      set_remote_next(runs.tail[k], block);
      runs.tail[k] = block;
      ++runs.count[k];
      continue;
    }
    if (!carries_run(size)) {
      put_in_front(links, slot, lane, block, last_run(block, block, false));
      continue;
    }
    if (runs.slice[k] != 0) close_run(links, slot, lane, runs, k);
    runs.slice[k] = slice;
    runs.head[k] = runs.tail[k] = block;
    runs.count[k] = 1;
  }
  for (size_t k = 0; k < kOpenRuns; ++k)
    if (runs.slice[k] != 0) close_run(links, slot, lane, runs, k);
  links.slot_bytes[slot] += bytes;
  outbox.blocks += i - first;
  return i;
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

void inbox_push(Heap* dest, size_t lane, FreeBlock* head, uintptr_t last, size_t bytes) {
  std::atomic<FreeBlock*>& inbox = dest->inbox[lane];
  FreeBlock* old = inbox.load(std::memory_order_relaxed);
  do {
    join_after(last, old);
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
  bool carries = carries_run(bytes);
  if (carries) set_run(block, block, 1);
  inbox_push(dest, 0, block, last_run(block, block, carries), bytes);
}

void outbox_add_full(Outbox& outbox, Heap* dest, FreeBlock* block, unsigned cls) {
  if (&outbox == &g_empty_heap.outbox) return send_without_heap(dest, block, cls);
  outbox_flush(outbox);
  outbox_add(outbox, dest, block, cls);
}

void outbox_flush(Outbox& outbox) {
  const StagedBlock* staged = outbox.stage;
  size_t count = static_cast<size_t>(outbox.stage_next - outbox.stage);
  for (size_t start = 0; start < count;) start = link_runs(outbox, staged, start, count);
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
