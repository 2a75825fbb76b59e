// Thread heaps: the thread-local caches every allocation starts in.
//
// Each thread allocates from its own heap: per size class one current slab
// whose free list serves malloc, plus a list of partially free slabs to
// move on to. A slab belongs to exactly one heap; frees from the owner push
// onto the slab's free list, frees from other threads go back to the owner
// through its inbox (remote_free.h). So the fast paths need no lock and no
// atomic read-modify-write, and memory freed anywhere is reused by the
// thread that owns it.
//
// Heaps outlive their threads: at thread exit a heap returns its empty
// slabs, keeps the ones with live blocks and becomes an orphan, which the
// next new thread adopts (thread_registry.cpp). Frees that arrive for an
// orphan's slabs land in its inbox, and the thread that sent them drains it
// at once (orphan_collect), so that those slabs still empty and return.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "meta/page.h"
#include "platform/lock.h"
#include "frontend/remote_free.h"
#include "meta/secure.h"
#include "meta/size_classes.h"
#include "meta/slab.h"

namespace xalloc {

// The classes served through the direct table.
constexpr unsigned kNumSmallClasses = class_of(kMaxSmallSize) + 1;
// A young heap (Heap::young) serves the sizes up to this from power-of-two
// classes: those of one-slice slabs.
constexpr size_t kYoungMaxSize = 8192;

// Spans of freed large blocks a heap keeps for its next large blocks
// (kept_spans.cpp): at most this many, of at most kKeptSliceBudget slices in all,
// and all live threads' heaps together at most kKeptSlicesAllHeaps (each
// its share once more than 16 threads live: kept_slice_budget).
constexpr uint32_t kKeptSpanSlots = 4;
constexpr uint32_t kKeptSliceBudget = 32;  // 2 MiB: a buffer of 1 MiB and a few bytes fits
constexpr uint32_t kKeptSlicesAllHeaps = 16 * kKeptSliceBudget;  // 32 MiB

// The last large or huge block a thread took, judged when it takes the
// next (block_memory.h).
struct BigBlock {
  uintptr_t start = 0;
  size_t pages = 0;
  bool fresh_large = false;  // a large block from memory that read as zero
};

enum class HeapState : uint32_t {
  kActive = 0,   // owned by a live thread
  kOrphan = 1,   // its thread exited; waiting for adoption
  kDead = 2,     // its thread does not exist (fork child): never reused
};


// Empty slabs a heap keeps instead of letting them go (slab_pool.h), with
// their free lists intact (at most 1 MiB in all, listed by class through
// Page::next), for the pattern that would otherwise take and return slabs
// on every round: a batch that spills past the current slab and is then
// freed. A class's spares go back after kSpareLifetime slow paths without
// one being kept or reused (heap_slabs.cpp), and those of a thread that
// has stopped using them at the reclaim pass (claimed first, as the kept
// spans are: every use is between kept_enter and kept_exit).
struct SpareSlabs {
  Page* slab[kNumClasses] = {};
  uint32_t since[kNumClasses] = {};       // slow_calls when the last one was kept
  std::atomic<uint32_t> slices{0};        // their length in all (read by the pass to decide what to claim)
  std::atomic<uint64_t> classes{0};       // bit c: slab[c] != nullptr
  std::atomic<uint32_t> changes{0};       // spares kept or taken so far (written by the heap's thread)
  uint32_t seen = 0;                      // changes at the last pass (the pass's own)
  // Room earned past the heap's share of the spares by taking back soon
  // what it let go (heap_slabs.cpp); the heap's thread's alone.
  uint32_t earned = 0;        // slices
  uint32_t let_go_at = 0;     // slow_calls when a slab last left for want of room
  bool let_go = false;        // one has
};
static_assert(kNumClasses <= 64, "SpareSlabs::classes has a bit per class");

// Spans of large blocks a heap's thread freed, kept whole for its next
// large blocks of the same length and for its samples (kept_spans.h). A
// kept span stays a large span with no usable bytes. The bytes of its last
// block stay counted in the statistics' large_in_use until the span is
// reused or released (so a block of the same size that takes it changes no
// shared counter); `counted` sums them, for xalloc_get_stats to take off.
// They are the heap's thread's, but for the pass that gives back the spans
// of a thread that stopped using them (reclaim_idle_kept_memory), which
// claims them first: the thread marks itself busy while it uses them, and
// does without them the times they are claimed (kept_enter, below). The
// counts may be read at any time.
struct KeptSpans {
  struct Span {
    Page* span;
    size_t counted;
  };
  Span spans[kKeptSpanSlots] = {};
  std::atomic<uint32_t> count{0};
  std::atomic<uint32_t> slices{0};
  std::atomic<uint32_t> busy{0};     // written by the heap's thread
  std::atomic<uint32_t> claimed{0};  // written by the pass
  std::atomic<uint32_t> changes{0};  // spans kept so far (written by the heap's thread)
  uint32_t seen = 0;                 // changes at the last pass (the pass's own)
  uint32_t since = 0;                // slow_calls when one was last kept or taken (the heap's thread's own)
  std::atomic<size_t> counted{0};
};

// Borrowed blocks by class (borrow.h): a pseudo-slab each, whose free list
// the direct and serving tables serve from while it has blocks. Its
// `needed` counts the pops since it was last empty, `count` the blocks put
// on it meanwhile.
struct BorrowedLists {
  Page list[kNumClasses];
  uint32_t count[kNumClasses];
};

// Profiling without statistics (heap_profiler.h): the direct table points
// at these windows instead of the current slabs. A window's free list is a
// run of blocks taken off its class's current slab (which counts them as in
// use) that ends before the class's next sampled byte, so the fast path
// counts nothing: the allocation that finds the window empty is either the
// sampled one or opens the next window. A window's `needed` counts its pops
// since it opened. (Out of the heap: a heap that does not profile does not
// carry, zero and fault in the 5 KiB of them.)
struct ProfileWindows {
  Page window[kNumSmallClasses];
  int64_t countdown[kNumSmallClasses];  // bytes of the class until its next sample
};

// Secure mode: freed blocks of a heap's slabs (freed by its thread, or by
// other threads and drained from the inbox) wait here before they can be
// reused, with their slabs (which cannot change: a slab counts a
// quarantined block as in use). The ring has two halves of
// XALLOC_QUARANTINE slots, [slots, mid) and [mid, 2 * mid - slots). Frees
// fill one half while the other holds the blocks of the lap before; the
// free that finds the filling half full (next == turn) first frees the
// other half's blocks for real, in one loop, and fills it next. So every
// block waits for at least XALLOC_QUARANTINE later frees, and fewer than
// twice that. With no slots, every free finds next == turn.
struct Quarantine {
  struct Slot {
    FreeBlock* block;
    Page* page;
  };
  // (The release loop reads kLookahead slots ahead: the slots past the
  // ring stay empty.)
  static constexpr size_t kLookahead = 4;
  Slot slots[2 * secure::kQuarantineDepthMax + kLookahead];
  Slot* next;
  Slot* turn;
  Slot* mid;
};

struct alignas(64) Heap {
  struct EmptyTag {};
  // A heap with no slabs: every slot points at g_empty_page.
  constexpr explicit Heap(EmptyTag);

  // Fast path: the slab to allocate from, by 16-byte granule (sizes up to
  // kMaxSmallSize) and by class. Unused entries point at g_empty_page,
  // whose free list is always empty, so there is no null check.
  // Written by other threads too, when they ask for a drain (below): read
  // and written with relaxed __atomic builtins.
  Page* direct[kDirectSlots];
  // The same by class, for the sizes above kMaxSmallSize (alloc_generic);
  // written by the owner only.
  Page* serving[kNumClasses];
  Page* current[kNumClasses];
  Page* partial[kNumClasses];  // slabs with free blocks, doubly linked through Page::next/prev
  // slow_calls at each class's last refill (heap_alloc_refill): a class that
  // has had none for a while and whose current slab is empty lets the slab
  // go (current_slabs_expire in heap_slabs.cpp).
  uint32_t class_slow_at[kNumClasses];
  // Empty slabs kept for reuse (SpareSlabs, above).
  SpareSlabs spares;
  // Slab bytes, and slabs per class, this heap adopted less those it let
  // go since it last added them to the process-wide counters
  // (stats::g_global): slab hand-over writes no shared line until they
  // reach a batch (heap_slabs.cpp). Written by the heap's thread only.
  int64_t unpublished_slab_bytes = 0;
  int32_t unpublished_slabs[kNumClasses] = {};
  // Bytes of the slabs this heap holds, as its thread counts them; other
  // threads count what they take away in slab_bytes_away (slabs_held).
  int64_t slab_bytes = 0;

  // Watched allocations (statistics, profiler: heap_profiler.h): requests
  // per class, then large and huge; bytes until the next sample.
  uint64_t requests[kNumClasses + 2];
  uint64_t requested_bytes[kNumClasses + 2];  // bytes asked for, with the requests
  int64_t sample_countdown;
  // Profiling without statistics: the windows the direct table points at
  // (ProfileWindows, above); mapped with the heap, only when profiling.
  ProfileWindows* windows;
  // Blocks borrowed from stalled heaps' inboxes (borrow.h); mapped when
  // the heap first borrows, so that heaps that never do touch none of it.
  BorrowedLists* borrowed;
  // Spans of freed large blocks kept for reuse (KeptSpans, above).
  KeptSpans kept;
  // The last large or huge block this thread took, and, bit n for large
  // blocks of bit_width(pages) == n, whether the thread writes its blocks
  // of that size in full (block_memory.h).
  BigBlock last_big;
  uint32_t large_sizes_written;
  // Bit c: the thread writes its blocks of class c in full (classes of
  // blocks over two pages: heap_slabs.cpp).
  uint64_t big_classes_written;

  Outbox outbox;
#if XALLOC_SECURE
  Quarantine quarantine;
#endif
  uint64_t thread_id;
  uint32_t slow_calls;
  // A young heap serves each size up to kYoungMaxSize from the smallest
  // power-of-two class that holds it (16, 32, 64, ..., 8192 bytes), so
  // that a process or thread that allocates little touches a few slabs - a
  // page fault each - instead of one per size class it asks for. It grows
  // up (each size its own class again) when one of those slabs runs out
  // (refill.cpp). Not in secure mode.
  bool young;
  std::atomic<HeapState> state;
  Heap* next_in_registry;  // all heaps ever created
  Heap* next_orphan;
  std::atomic<size_t> remote_frees_sent;  // outbox.blocks (sent so far), published on slow paths for statistics

  // Frees from other threads; written by them, so on its own cache line.
  alignas(64) std::atomic<FreeBlock*> inbox[kLanes];
  // Bytes pushed since the last drain. A heap drains when one of its slabs
  // runs dry, which may never happen to a thread that allocates what it
  // frees itself while others free its older blocks; past
  // kDrainRequestBytes the sender asks for a drain: it sets drain_requested
  // and points the direct table at the empty slab, so the owner's next
  // small malloc takes the slow path, which drains and restores the table.
  std::atomic<size_t> inbox_bytes;
  std::atomic<uint32_t> drain_requested;
  // When a sender last took the pending bytes past kStalledBytes
  // (monotonic ms; note_stalled): how long the owner has not answered.
  std::atomic<uint64_t> stalled_since;
  // Set by a heap that borrows from this one's inbox (borrow.h): the next
  // refills that would borrow make slabs instead, counting it down.
  std::atomic<uint32_t> borrow_pause;
  // Spans of large blocks this heap's thread allocated and other threads
  // freed, handed back for its next large blocks (kept_spans.cpp): a stack
  // linked through Page::next, and the slices on it.
  std::atomic<Page*> returned_spans;
  std::atomic<uint32_t> returned_slices;
  // The stack's head at the last reclaim pass (reclaim_idle_kept_memory in
  // kept_spans.cpp): written only by that pass.
  std::atomic<Page*> returned_seen;
  // Slab bytes other threads took from this heap (spares the reclaim pass
  // claimed, slabs of an orphan its senders emptied): negative.
  std::atomic<int64_t> slab_bytes_away;

  // Held by whoever drains the heap's inbox while it is an orphan: a
  // thread that sent it blocks (orphan_collect), trim, the exiting thread's
  // last drain; and taken by the thread that adopts it, before it makes
  // the heap active (thread_registry.cpp). A lock per heap, so that threads
  // freeing blocks of different exited threads do not queue behind one
  // another.
  Mutex orphan_lock{shared_count::Site::kOrphanLock};
};

// A staged remote free keeps its owner's class in the low bits (remote_free.h).
static_assert(alignof(Heap) > kStagedClassMask);

// Bytes of slabs `heap` holds, read by its thread.
inline int64_t slabs_held(const Heap* heap) {
  return heap->slab_bytes + heap->slab_bytes_away.load(std::memory_order_relaxed);
}

extern Page g_empty_page __attribute__((visibility("hidden")));

constexpr Heap::Heap(EmptyTag)
    : direct{}, serving{}, current{}, partial{}, class_slow_at{}, spares{}, requests{}, requested_bytes{}, sample_countdown(0), windows(nullptr),
      borrowed(nullptr), kept{}, last_big{}, large_sizes_written(0), big_classes_written(0), outbox{},
#if XALLOC_SECURE
      quarantine{},
#endif
      thread_id(0), slow_calls(0), young(false), state(HeapState::kActive),
      next_in_registry(nullptr), next_orphan(nullptr), remote_frees_sent(0), inbox{}, inbox_bytes(0),
      drain_requested(0), stalled_since(0), borrow_pause(0), returned_spans(nullptr), returned_slices(0),
      returned_seen(nullptr), slab_bytes_away(0) {
  for (Page*& slot : direct) slot = &g_empty_page;
  for (Page*& slot : serving) slot = &g_empty_page;
  for (Page*& slot : current) slot = &g_empty_page;
}

// The heap of threads that have not allocated yet (and of threads past
// their heap's teardown). Every slot points at g_empty_page.
extern Heap g_empty_heap __attribute__((visibility("hidden")));

// The calling thread's heap. Initial-exec TLS: one instruction to read.
extern __thread Heap* t_heap;

// Constructs a heap in `heap`, with `stage` (kStageSlots entries) and
// `links` (all null) as its outbox's.
void heap_init(Heap* heap, uint64_t thread_id, StagedBlock* stage, OutboxLinks* links);

// Points the direct table (small classes) and the serving table at what
// serves `cls` now: the class's borrowed list while it has blocks (borrow.h),
// else its current slab (or what the profiler and statistics need instead).
void heap_serve(Heap* heap, unsigned cls);

// The borrowed list of `cls` when it serves the class's allocations and has
// run dry: the slow path then serves the current slab again.
inline bool borrowed_list_ran_dry(const Heap* heap, unsigned cls) {
  return heap->borrowed != nullptr && heap->serving[cls] == &heap->borrowed->list[cls] &&
         heap->borrowed->list[cls].free == nullptr;
}

// The young heap's class for class `cls` (Heap::young).
unsigned young_class(unsigned cls);
// Points the tables that serve `cls` at `page` (or at what stands in for
// it: the profiler's window, g_empty_page while allocations are watched,
// the borrowed list) and makes it the class's current slab.
void heap_set_current(Heap* heap, unsigned cls, Page* page);
// Points the direct table at the current slabs again.
void direct_table_restore(Heap* heap);
// From now on each size gets its own class (Heap::young).
void heap_grow_up(Heap* heap);

// A heap's kept spans and spare slabs are its thread's, but for the pass
// that gives back those of a thread that stopped using them
// (reclaim_idle_kept_memory in kept_spans.cpp). Their thread uses them many
// times a second, the pass once per purge delay, so the thread's side of the
// exclusion has no locked instruction: it marks itself busy, then looks for
// a claim (a store, then a load, which the processor may reorder); the pass
// claims, then makes every processor running one of the process's threads
// execute a full barrier (os::process_wide_barrier), then looks at the busy
// mark. After that barrier, a thread that had marked itself busy is seen
// busy, and one that had not will see the claim: the pass takes the spans
// and spares only of a heap seen not busy, and a thread that sees them
// claimed does without them. (Release and acquire on the marks: each side
// sees the lists as the other left them.) Not for g_empty_heap, which
// every thread without a heap shares: callers check they have a heap.
XALLOC_INLINE bool kept_enter(Heap* heap) {
  heap->kept.busy.store(1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler's part of the fence
  if (XALLOC_LIKELY(heap->kept.claimed.load(std::memory_order_acquire) == 0)) return true;
  heap->kept.busy.store(0, std::memory_order_release);
  return false;
}
XALLOC_INLINE void kept_exit(Heap* heap) { heap->kept.busy.store(0, std::memory_order_release); }

}  // namespace xalloc
