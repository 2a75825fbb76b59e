#include "frontend/borrow.h"

#include <atomic>
#include <cstdint>

#include "backend/segment.h"
#include "diag/heap_profiler.h"
#include "frontend/heap.h"
#include "frontend/inbox.h"
#include "frontend/outbox.h"
#include "frontend/thread_registry.h"
#include "platform/os.h"
#include "platform/shared_count.h"
#include "support/debug.h"
#include "support/options.h"

namespace xalloc {

namespace {

bool may_borrow(const Heap* heap) {
  return g_options.borrow && !secure::kEnabled && !prof::watching() && !prof::windowed() && !heap->young &&
         heap->state.load(std::memory_order_relaxed) == HeapState::kActive;
}

// Still stalled (borrow.h): borrowing lowers the pending bytes too.
bool is_stalled(const Heap* heap) {
  return heap->state.load(std::memory_order_relaxed) == HeapState::kActive &&
         heap->drain_requested.load(std::memory_order_relaxed) != 0 &&
         heap->inbox_bytes.load(std::memory_order_relaxed) >= kStalledBytes;
}

// How long a heap must have been stalled (remote_free.h): 32 threads on 2
// processors wait about 50 ms for their turn, and borrowing from them took
// 1.05x the time in larson and sh6bench and 1.16x in xmalloc-test.
uint64_t stalled_millis() {
  uint32_t cpus = os::cpu_count();
  uint32_t per_cpu = (live_heap_count() + cpus - 1) / cpus;
  return kStalledMillis * (per_cpu > 1 ? per_cpu : 1);
}

// Stalled for `wait` ms at `now` (a sender may have renewed the time since
// `now` was read: later than it, not yet). A time read just before a
// sender renews it (a drain, then kStalledBytes sent again) makes one
// borrow early.
bool stalled_long_enough(const Heap* heap, uint64_t now, uint64_t wait) {
  return now >= heap->stalled_since.load(std::memory_order_relaxed) + wait;
}

// Bytes on `heap`'s borrowed lists: blocks put on each minus those popped.
size_t borrowed_bytes(const Heap* heap) {
  size_t bytes = 0;
  for (unsigned cls = 0; cls < kNumClasses; ++cls)
    bytes += (heap->borrowed->count[cls] - heap->borrowed->list[cls].needed) * kClassInfo[cls].size;
  return bytes;
}

void keep(Heap* heap, unsigned cls, FreeBlock* block) {
  Page& list = heap->borrowed->list[cls];
  if (list.free == nullptr) {
    list.needed = 0;
    heap->borrowed->count[cls] = 0;
  }
  set_next_free(&list, block, list.free);
  list.free = block;
  heap->borrowed->count[cls]++;
}

// Whether the run at `block` on an inbox list carries its tail, length
// and successor (remote_free.h), by its slab's block size.
bool carries(const FreeBlock* block) {
  auto address = reinterpret_cast<uintptr_t>(block);
  return carries_run(page_of(segment_of(address), address)->block_size());
}

// The run after the one at `block` on an inbox list.
FreeBlock* next_run(const FreeBlock* block, bool carried) { return carried ? run_next(block) : remote_next(block); }

// Puts the list starting at `head` (a run's head) back on lane `lane` of
// `owner`'s inbox. Its end is not known, so it goes back only onto an
// empty lane: runs pushed meanwhile are taken off and put in front of it
// (a short walk: they arrived since the steal).
void push_back(Heap* owner, size_t lane, FreeBlock* head) {
  std::atomic<FreeBlock*>& inbox = owner->inbox[lane];
  FreeBlock* expected = nullptr;
  // Release: the owner's exchange sees the links. Acquire: see the orphaned
  // state of a heap whose final drain came first (as inbox_push).
  shared_count::atomic_rmw(shared_count::Site::kBorrow, &inbox);
  while (!inbox.compare_exchange_weak(expected, head, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    if (expected != nullptr) {
      FreeBlock* arrived = inbox.exchange(nullptr, std::memory_order_acq_rel);
      if (arrived != nullptr) {
        FreeBlock* run = arrived;
        bool carried = carries(run);
        for (FreeBlock* next; (next = next_run(run, carried)) != nullptr; carried = carries(run)) run = next;
        join_after(last_run(run, carried ? run_tail(run) : run, carried), head);
        head = arrived;
      }
      expected = nullptr;
    }
  }
  if (owner->state.load(std::memory_order_relaxed) == HeapState::kOrphan) orphan_collect(owner);
}

// Moves up to `budget` bytes of blocks (whole runs: what goes back must
// start with a run's head) from `owner`'s inbox onto `heap`'s borrowed
// lists, setting the bit of `classes` of each class that gets blocks; what
// is left goes back. Returns the bytes kept. The lanes are walked side by
// side, as the owner's drain does: every run is a cache miss, and
// independent lists let those misses overlap.
size_t borrow_inbox(Heap* heap, Heap* owner, size_t budget, uint64_t& classes) {
  FreeBlock* lists[kLanes];
  size_t active = inbox_take(owner, lists);
  size_t kept = 0;
  while (active != 0 && kept < budget) {
    for (FreeBlock*& list : lists) {
      FreeBlock* block = list;
      if (block == nullptr || kept >= budget) continue;
      auto address = reinterpret_cast<uintptr_t>(block);
      unsigned cls = page_of(segment_of(address), address)->size_class;
      bool carried = carries_run(kClassInfo[cls].size);
      list = next_run(block, carried);
      if (list == nullptr) --active;
      size_t count = carried ? run_count(block) : 1;
      for (size_t i = 0; i < count; ++i) {
        FreeBlock* next = remote_next(block);
        keep(heap, cls, block);
        block = next;
      }
      kept += count * kClassInfo[cls].size;
      classes |= uint64_t{1} << cls;
    }
  }
  for (size_t lane = 0; lane < kLanes; ++lane)
    if (lists[lane] != nullptr) push_back(owner, lane, lists[lane]);
  return kept;
}

// The owner's count of pending bytes drops by what was borrowed (never
// below zero: the owner may have drained and reset it meanwhile).
void uncount_pending(Heap* owner, size_t bytes) {
  size_t pending = owner->inbox_bytes.load(std::memory_order_relaxed);
  shared_count::atomic_rmw(shared_count::Site::kBorrow, &owner->inbox_bytes);
  while (!owner->inbox_bytes.compare_exchange_weak(pending, pending > bytes ? pending - bytes : 0,
                                                   std::memory_order_relaxed)) {
  }
}

}  // namespace

static_assert(kNumClasses <= 64, "borrow_from_stalled keeps a bit per class");

bool borrow_from_stalled(Heap* heap, unsigned cls) {
  if (!may_borrow(heap)) return false;
  if (uint32_t pause = heap->borrow_pause.load(std::memory_order_relaxed); pause != 0) {
    heap->borrow_pause.store(pause - 1, std::memory_order_relaxed);
    return false;
  }
  Heap* owner = nullptr;
  uint64_t now = 0;  // read once a candidate is still stalled
  uint64_t wait = 0;
  for (std::atomic<Heap*>& slot : g_stalled) {
    Heap* candidate = slot.load(std::memory_order_relaxed);
    if (candidate == nullptr || candidate == heap) continue;
    if (!is_stalled(candidate)) {
      shared_count::atomic_rmw(shared_count::Site::kBorrow, &slot);
      slot.compare_exchange_strong(candidate, nullptr, std::memory_order_relaxed);
      continue;
    }
    if (now == 0) {
      now = os::monotonic_ms();
      wait = stalled_millis();
    }
    if (stalled_long_enough(candidate, now, wait)) {
      owner = candidate;
      break;
    }
  }
  if (owner == nullptr) return false;
  if (heap->borrowed == nullptr) {
    // Fresh from the OS: every list empty (all zero).
    heap->borrowed = static_cast<BorrowedLists*>(os::map(sizeof(BorrowedLists)));
    if (heap->borrowed == nullptr) return false;
  }
  // Borrowed blocks of other classes that this thread has not used up are
  // sent home first: they would keep it from borrowing what it needs now.
  size_t held = borrowed_bytes(heap);
  if (held >= kBorrowBytes / 2) {
    borrowed_return(heap);
    outbox_flush(heap->outbox);
    held = 0;
  }
  uint64_t classes = 0;
  size_t kept = borrow_inbox(heap, owner, kBorrowBytes - held, classes);
  uncount_pending(owner, kept);
  owner->borrow_pause.store(kBorrowPause, std::memory_order_relaxed);
  for (; classes != 0; classes &= classes - 1) heap_serve(heap, static_cast<unsigned>(__builtin_ctzll(classes)));
  return heap->borrowed->list[cls].free != nullptr;
}

void borrowed_return(Heap* heap) {
  if (heap->borrowed == nullptr) return;
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    Page& list = heap->borrowed->list[cls];
    if (list.free == nullptr) continue;
    while (list.free != nullptr) {
      FreeBlock* block = list.free;
      list.free = next_free(&list, block);
      auto address = reinterpret_cast<uintptr_t>(block);
      Heap* owner = page_of(segment_of(address), address)->owner;
      XALLOC_CHECK(owner != heap && owner != nullptr);
      outbox_add(heap->outbox, owner, block, cls);
    }
    list.needed = 0;
    heap->borrowed->count[cls] = 0;
    heap_serve(heap, cls);
  }
}

}  // namespace xalloc
