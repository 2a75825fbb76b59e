#include "frontend/heap.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>

#include "frontend/alloc.h"
#include "frontend/borrow.h"
#include "support/debug.h"
#include "support/emergency_heap.h"
#include "frontend/sampling.h"
#include "frontend/huge_cache.h"
#include "frontend/kept_spans.h"
#include "support/options.h"
#include "backend/slab_pool.h"
#include "platform/os.h"
#include "backend/span_allocator.h"
#include "support/counters.h"
#include "frontend/thread_registry.h"

namespace xalloc {

XALLOC_STARTUP_DATA constinit Page g_empty_page{};
constinit Heap g_empty_heap{Heap::EmptyTag{}};
__thread Heap* t_heap = &g_empty_heap;

namespace {

// Carving writes at most this many bytes of fresh blocks at a time, so a
// slab's memory is touched only as it is used. Secure mode carves one page
// per shuffle run (carve_shuffled).
constexpr size_t kShuffleRuns = 4;
constexpr size_t kCarveBytes = secure::kEnabled ? kShuffleRuns * kOsPageSize : kOsPageSize;

// Each class's first granule in a direct table whose granules map to
// `granule_class` (kDirectSlots for a class none maps to), for keeping
// Heap::direct in step: a class's granules follow its first.
constexpr std::array<uint8_t, kNumClasses> first_granules(const std::array<uint8_t, kDirectSlots>& granule_class) {
  std::array<uint8_t, kNumClasses> first{};
  first.fill(kDirectSlots);
  for (size_t g = kDirectSlots; g-- > 0;) first[granule_class[g]] = static_cast<uint8_t>(g);
  return first;
}
constexpr auto kFirstGranule = first_granules(kGranuleClass);

// The class a young heap serves a small class's sizes from: the smallest
// power of two that holds them.
constexpr unsigned young_class_of(unsigned cls) { return class_of_computed(std::bit_ceil(class_size_of(cls))); }
static_assert(young_class_of(class_of_computed(48)) == class_of_computed(64));
static_assert(young_class_of(class_of_computed(1024)) == class_of_computed(1024));

constexpr auto kYoungClass = [] {
  std::array<uint8_t, kNumSmallClasses> table{};
  for (unsigned c = 0; c < kNumSmallClasses; ++c) table[c] = static_cast<uint8_t>(young_class_of(c));
  return table;
}();

// The direct table of a young heap: its granules' classes, and each class's
// first granule.
constexpr auto kYoungGranuleClass = [] {
  std::array<uint8_t, kDirectSlots> table{};
  for (size_t g = 0; g < kDirectSlots; ++g) table[g] = kYoungClass[kGranuleClass[g]];
  return table;
}();
constexpr auto kYoungFirstGranule = first_granules(kYoungGranuleClass);

void set_current(Heap* heap, unsigned cls, Page* page) {
  heap->current[cls] = page;
  bool small = cls < kNumSmallClasses;
  // Sampled small allocations go through the class's window; counted ones,
  // and sampled ones of 1-64 KiB, take the slow path: the tables stay empty.
  if (small && heap->windows != nullptr) page = &heap->windows->window[cls];
  else if (prof::watching()) page = &g_empty_page;
  else if (heap->borrowed != nullptr && heap->borrowed->list[cls].free != nullptr) page = &heap->borrowed->list[cls];
  heap->serving[cls] = page;
  if (!small) return;
  const auto& granule_class = heap->young ? kYoungGranuleClass : kGranuleClass;
  const auto& first_granule = heap->young ? kYoungFirstGranule : kFirstGranule;
  for (size_t g = first_granule[cls]; g < kDirectSlots && granule_class[g] == cls; ++g)
    __atomic_store_n(&heap->direct[g], page, __ATOMIC_RELAXED);
}

// Points the direct table at the current slabs again.
void direct_table_restore(Heap* heap) {
  for (unsigned cls = 0; cls < kNumSmallClasses; ++cls) set_current(heap, cls, heap->current[cls]);
}

// From now on each small size gets its own class: the slabs of the
// power-of-two classes stay as they are, the other classes start empty.
void heap_grow_up(Heap* heap) {
  heap->young = false;
  direct_table_restore(heap);
}

void partial_push(Heap* heap, Page* page) {
  Page*& head = heap->partial[page->size_class];
  page->prev = nullptr;
  page->next = head;
  if (head != nullptr) head->prev = page;
  head = page;
  page->set_state(SlabState::kPartial);
}

void partial_remove(Heap* heap, Page* page) {
  if (page->prev != nullptr) page->prev->next = page->next;
  else heap->partial[page->size_class] = page->next;
  if (page->next != nullptr) page->next->prev = page->prev;
  page->next = page->prev = nullptr;
  page->set_state(SlabState::kDetached);
}

// Secure mode's carve: the batch is cut into kShuffleRuns runs of
// consecutive blocks, about a page each, and each next block of the list
// is the head of a run picked at random (the next non-empty run from there
// when it is empty). Every pick is a fresh random number, so the addresses
// handed out so far do not tell the next one: it is one of up to four. (A
// random stride through the batch, used before, was known after two.) Each
// run is walked forward within its own page, a stream the processor's
// prefetcher follows page by page; with eight runs, or four runs within one
// page, a program walking its blocks in allocation order outran the
// prefetcher's streams (rbstress-1, full size: 1.9x the default build's
// time with the stride, 1.5x with four page runs, 1.7x with six, 1.6x with
// four half-page runs; 1.2x unshuffled). Returns the batch's first block,
// linked in front of the slab's free list.
FreeBlock* carve_shuffled(Page* page, uintptr_t first, size_t count, size_t size) {
  unsigned runs = static_cast<unsigned>(count < kShuffleRuns ? count : kShuffleRuns);
  std::array<uintptr_t, kShuffleRuns> head{};
  std::array<uintptr_t, kShuffleRuns> end{};
  for (unsigned j = 0; j < runs; ++j) {
    head[j] = first + (count * j / runs) * size;
    end[j] = first + (count * (j + 1) / runs) * size;
  }
  uint32_t nonempty = (uint32_t{1} << runs) - 1;
  uintptr_t marker_secret = secure::g_secrets.marker;
  bool canary_in_tail = !canary_is_marker_word(page);
  FreeBlock* list = nullptr;
  FreeBlock* tail = nullptr;
  uint64_t random = 0;
  for (size_t i = 0; i < count; ++i) {
    if (i % 8 == 0) random = secure::next_random();
    unsigned pick = static_cast<unsigned>(((random & 0xff) * runs) >> 8);
    random >>= 8;
    uint32_t rotated = (nonempty >> pick) | (nonempty << (runs - pick));
    unsigned j = (pick + static_cast<unsigned>(std::countr_zero(rotated))) % runs;
    auto* block = reinterpret_cast<FreeBlock*>(head[j]);
    head[j] += size;
    if (head[j] == end[j]) nonempty &= ~(uint32_t{1} << j);
    block->marker = XALLOC_MISUSE_CHECKS ? free_marker(block, marker_secret) : 0;
    if (canary_in_tail) write_canary(page, block);
    if (tail != nullptr) set_next_free(page, tail, block);
    else list = block;
    tail = block;
  }
  set_next_free(page, tail, page->free);
  return list;
}

// The default carve: the batch linked back to front, so the list runs in
// address order. Returns its first block, linked in front of the slab's
// free list.
FreeBlock* carve_in_order(Page* page, uintptr_t first, size_t count, size_t size) {
  FreeBlock* next = page->free;
  uintptr_t marker_secret = secure::g_secrets.marker;
  for (uintptr_t address = first + (count - 1) * size;; address -= size) {
    auto* block = reinterpret_cast<FreeBlock*>(address);
    *block = FreeBlock{next, XALLOC_MISUSE_CHECKS ? free_marker(block, marker_secret) : 0};
    next = block;
    if (address == first) break;
  }
  return next;
}

void slab_carve(Page* page) {
  size_t size = page->block_size();
  size_t count = kCarveBytes / size;
  if (count == 0) count = 1;
  uint32_t carved = page->carved_bytes();
  size_t left_bytes = size_t{page->capacity()} * size - carved;
  if (count * size > left_bytes) count = left_bytes / size;
  uintptr_t first = page->start + carved;
  page->free = secure::kEnabled ? carve_shuffled(page, first, count, size) : carve_in_order(page, first, count, size);
  page->set_carved_bytes(carved + static_cast<uint32_t>(count * size));
}

// A heap takes over an empty slab, from the pool (slab_pool.h) or fresh.
Page* slab_adopt(Heap* heap, Page* page) {
  page->owner = heap;
  page->set_state(SlabState::kDetached);
  stats::add(stats::g_global.slab_in_use, page->span_bytes());
  stats::note_slab_created(page->size_class);
  return page;
}

// Makes `page`, a span `cls`'s slabs long, a fresh slab of `cls` for
// `heap`: nothing carved yet.
Page* slab_format(Heap* heap, Page* page, unsigned cls, bool is_zero) {
  page->free = nullptr;
  page->needed = 0;
  page->size_class = static_cast<uint8_t>(cls);
  page->block_bytes = kClassInfo[cls].size;
  page->is_zero = is_zero ? 1 : 0;
  page->div_magic = kClassInfo[cls].div_magic;
  page->set_carved_bytes(0);
  return slab_adopt(heap, page);
}

// A new slab of `cls`: an empty one of another class from the pool, whose
// memory would otherwise wait there unused, or a span from the span
// allocator.
Page* slab_create(Heap* heap, unsigned cls) {
  size_t slices = kClassInfo[cls].slices;
  if (Page* page = slab_pool::take_any_of_length(slices)) return slab_format(heap, page, cls, false);
  bool is_zero = false;
  Page* page = g_spans.allocate(slices, PageKind::kSlab, &is_zero);
  if (page == nullptr) return nullptr;
  return slab_format(heap, page, cls, is_zero);
}

// An empty slab leaves its heap: to the pool, its free list intact, or
// back to the span allocator when the pool is full.
void slab_release(Heap* heap, Page* page) {
  if (page->state() == SlabState::kPartial) partial_remove(heap, page);
  page->owner = nullptr;
  page->set_state(SlabState::kDetached);
  stats::sub(stats::g_global.slab_in_use, page->span_bytes());
  stats::sub(stats::g_global.slabs[page->size_class], 1);
  if (slab_pool::put(page)) return;
  page->free = nullptr;
  g_spans.release(page);
}

// Spare slabs (heap.h): at most kMaxSpareSlices slices' worth per heap (1
// MiB), each for at most kSpareLifetime slow paths unused. A thread that
// replaces random blocks of a working set empties a slab of a class whose
// slabs hold 4-7 blocks every few hundred slow paths: kept for 64, of one
// slice only and four at most, they went to the shared pool and were
// taken back from it, each under the class's lock (glibc-thread with 16
// threads: 119,600 slabs pooled, 86,000 of them spares expired; with these
// bounds 42,500). Once more threads live than kSpareSlicesAllHeaps holds
// at that size, each keeps its share, and never less than kMinSpareSlices
// (the four one-slice slabs of before): a thousand threads do not keep a
// gigabyte of empty slabs.
constexpr uint32_t kMaxSpareSlices = 16;
constexpr uint32_t kSpareSlicesAllHeaps = 32 * kMaxSpareSlices;  // 32 MiB
constexpr uint32_t kMinSpareSlices = 4;
constexpr uint32_t kSpareLifetime = 256;
// Kept spans of large blocks (heap.h) go back after this many slow paths
// unused.
constexpr uint32_t kKeptSpanLifetime = 64;
// An empty current slab of a class that has taken no slow path for this many
// of its heap's slow calls leaves the heap (current_slabs_expire).
constexpr uint32_t kCurrentLifetime = 256;
static_assert(std::has_single_bit(kCurrentLifetime), "heap_periodic masks slow_calls with it");

// (The spare functions run between kept_enter and kept_exit, or in the
// reclaim pass after its barrier: heap.h.)
Page* spare_take(Heap* heap, unsigned cls) {
  Page* page = heap->spare[cls];
  heap->spare[cls] = page->next;
  if (page->next == nullptr)
    heap->spare_classes.store(heap->spare_classes.load(std::memory_order_relaxed) & ~(uint64_t{1} << cls),
                              std::memory_order_relaxed);
  page->next = nullptr;
  heap->spare_slices.store(heap->spare_slices.load(std::memory_order_relaxed) - page->slice_count,
                           std::memory_order_relaxed);
  return page;
}

void spares_release(Heap* heap, unsigned cls) {
  while (heap->spare[cls] != nullptr) slab_release(heap, spare_take(heap, cls));
}

// A spare kept or taken: what the reclaim pass looks at to tell a heap
// that has stopped using its spares.
void note_spare_change(Heap* heap) {
  heap->spare_changes.store(heap->spare_changes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void spare_keep(Heap* heap, Page* page) {
  unsigned cls = page->size_class;
  page->set_state(SlabState::kDetached);
  page->next = heap->spare[cls];
  heap->spare[cls] = page;
  heap->spare_classes.store(heap->spare_classes.load(std::memory_order_relaxed) | uint64_t{1} << cls,
                            std::memory_order_relaxed);
  heap->spare_since[cls] = heap->slow_calls;
  heap->spare_slices.store(heap->spare_slices.load(std::memory_order_relaxed) + page->slice_count,
                           std::memory_order_relaxed);
  note_spare_change(heap);
}

uint32_t spare_slice_budget() {
  uint32_t live = live_heap_count();
  if (live <= kSpareSlicesAllHeaps / kMaxSpareSlices) return kMaxSpareSlices;
  uint32_t share = kSpareSlicesAllHeaps / live;
  return share > kMinSpareSlices ? share : kMinSpareSlices;
}

// A slab of `heap` whose last block came back (not its class's current
// slab, and already off the partial list): kept as its class's spare when
// there is room, so that the next refill of the class reuses it as it is.
void slab_empty(Heap* heap, Page* page) {
  if (heap->state.load(std::memory_order_relaxed) == HeapState::kActive && kept_enter(heap)) {
    bool room = heap->spare_slices.load(std::memory_order_relaxed) + page->slice_count <= spare_slice_budget();
    if (room) spare_keep(heap, page);
    kept_exit(heap);
    if (room) return;
  }
  slab_release(heap, page);
}

// A spare of class `cls`, or null (none, or claimed by the reclaim pass).
Page* spare_reuse(Heap* heap, unsigned cls) {
  if (heap->spare_classes.load(std::memory_order_relaxed) == 0 || !kept_enter(heap)) return nullptr;
  Page* page = nullptr;
  if (heap->spare[cls] != nullptr) {
    page = spare_take(heap, cls);
    note_spare_change(heap);
  }
  kept_exit(heap);
  return page;
}

// A class's current slab stays with its heap while the class is in use,
// even when all its blocks are free. One that is empty and whose class has
// taken no slow path for kCurrentLifetime of the heap's slow calls goes to the
// slab pool (and from there back to the OS if no thread takes it): a thread
// that used many sizes once (start-up, a burst) and went on with a few
// does not keep a slab of every size it ever used. A class still in use
// through its fast path alone gets a slab again at its next slow path.
void current_slabs_expire(Heap* heap) {
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    Page* page = heap->current[cls];
    if (page == &g_empty_page || page->needed != kCurrentBias ||
        heap->slow_calls - heap->class_slow_at[cls] < kCurrentLifetime)
      continue;
    set_current(heap, cls, &g_empty_page);
    page->needed = 0;
    page->set_state(SlabState::kDetached);
    slab_release(heap, page);
  }
}

void spares_expire(Heap* heap) {
  if (!kept_enter(heap)) return;
  XALLOC_DEBUG_ONLY(for (unsigned cls = 0; cls < kNumClasses; ++cls) XALLOC_CHECK(
                        (heap->spare[cls] != nullptr) == ((heap->spare_classes.load() >> cls & 1) != 0)));
  for (uint64_t classes = heap->spare_classes.load(std::memory_order_relaxed); classes != 0; classes &= classes - 1) {
    auto cls = static_cast<unsigned>(__builtin_ctzll(classes));
    if (heap->slow_calls - heap->spare_since[cls] >= kSpareLifetime) spares_release(heap, cls);
  }
  kept_exit(heap);
}

// A slab with every block in use sleeps until enough of them come back.
void file_full(Page* page) {
  page->needed = wake_threshold(page->capacity());
  page->set_state(SlabState::kFull);
}

// The current slab has no block left to hand out.
void retire_current(Heap* heap, unsigned cls, Page* page) {
  XALLOC_CHECK(page->free == nullptr && page->fully_carved());
  XALLOC_CHECK(page->needed == kCurrentBias + page->capacity());
  set_current(heap, cls, &g_empty_page);
  file_full(page);
}

void make_current(Heap* heap, unsigned cls, Page* page) {
  if (page->state() == SlabState::kPartial) partial_remove(heap, page);
  else page->needed = 0;  // a new slab
  page->needed += kCurrentBias;
  page->set_state(SlabState::kCurrent);
  set_current(heap, cls, page);
}

// Files a slab that stopped being current; `needed` holds its blocks in use.
void settle_uncurrent(Heap* heap, Page* page) {
  if (page->needed == 0) {
    slab_release(heap, page);
  } else if (page->free == nullptr && page->fully_carved()) {
    file_full(page);  // no free block and nothing left to carve
  } else {
    partial_push(heap, page);
  }
}

// Another thread asked for a drain (remote_free.h) and emptied the direct
// table: drain, then point the table at the current slabs again. A sender
// that asks again meanwhile (once the flag is clear) may have emptied the
// table before the restore below wrote it back: with its request lost, the
// flag would stay set and no sender would ask again, so answer it too. The
// flag is read with a read-modify-write: one that reads 0 comes before the
// next sender's exchange, which then sees the restore as done before it
// empties the table.
void answer_drain_request(Heap* heap) {
  do {
    heap->drain_requested.store(0, std::memory_order_release);
    heap_drain_inbox_for_reuse(heap);
    direct_table_restore(heap);
  } while (heap->drain_requested.fetch_or(0, std::memory_order_acq_rel) != 0);
}

void heap_periodic(Heap* heap) {
  // Not for the heap of exiting threads (late_alloc), which runs under the
  // registry lock: a dump allocates.
  if (prof::profiling() && heap->state.load(std::memory_order_relaxed) == HeapState::kActive) prof::poll_signal();
  if (heap->spare_classes.load(std::memory_order_relaxed) != 0) spares_expire(heap);
  // (Not while the profiler's windows stand in front of the current slabs.)
  if ((heap->slow_calls & (kCurrentLifetime - 1)) == 0 && !prof::windowed()) current_slabs_expire(heap);
  if (heap->slow_calls - heap->kept_since >= kKeptSpanLifetime) kept_spans_release(heap);
  if (outbox_pending(heap->outbox)) outbox_flush(heap->outbox);
  heap->remote_frees_sent.store(heap->outbox.blocks, std::memory_order_relaxed);
  purge_idle_memory(os::monotonic_ms());
}

#if defined(XALLOC_DEBUG_CHECKS)
void check_slab(const Heap* heap, const Page* page) {
  XALLOC_CHECK(page->kind() == PageKind::kSlab);
  XALLOC_CHECK(page->owner == heap);
  XALLOC_CHECK(page->carved_bytes() % page->block_size() == 0 && page->carved() <= page->capacity());
  size_t free_count = 0;
  for (FreeBlock* b = page->free; b != nullptr; b = next_free(page, b)) {
    auto a = reinterpret_cast<uintptr_t>(b);
    XALLOC_CHECK(is_carved_block_start(page, a, page->carved_limit_now()));
    XALLOC_CHECK(!XALLOC_MISUSE_CHECKS || b->marker == free_marker(b));
    XALLOC_CHECK(++free_count <= page->carved());
  }
  uint32_t used = static_cast<uint32_t>(page->carved() - free_count);
  switch (page->state()) {
    case SlabState::kCurrent: XALLOC_CHECK(page->needed >= kCurrentBias + used); break;
    case SlabState::kPartial: XALLOC_CHECK(page->needed >= used); break;  // inbox blocks count as used
    case SlabState::kFull: XALLOC_CHECK(page->needed >= 1 && page->needed <= wake_threshold(page->capacity())); break;
    default: XALLOC_CHECK(false);
  }
}
#endif

}  // namespace

void heap_serve(Heap* heap, unsigned cls) { set_current(heap, cls, heap->current[cls]); }

void heap_init(Heap* heap, uint64_t thread_id, StagedBlock* stage) {
  new (heap) Heap(Heap::EmptyTag{});
  heap->outbox.stage = heap->outbox.stage_next = stage;
  heap->outbox.stage_end = stage + kStageSlots;
  heap->outbox.budget = g_options.remote_batch_bytes;
  heap->thread_id = thread_id;
#if XALLOC_SECURE
  heap->quarantine_mid = heap->quarantine + std::min<size_t>(g_options.quarantine, secure::kQuarantineDepthMax);
  heap->quarantine_next = heap->quarantine;
  heap->quarantine_turn = heap->quarantine_mid;
#endif
  heap->sample_countdown = prof::sample_interval();
  // (Without its windows - no memory for them - the heap samples through
  // the slow path, as when statistics are on: set_current, heap_alloc_slow.)
  if (prof::windowed()) heap->windows = static_cast<ProfileWindows*>(os::map(sizeof(ProfileWindows)));
  if (heap->windows != nullptr)
    for (int64_t& countdown : heap->windows->countdown) countdown = prof::sample_interval();
  // Not in secure mode, whose canary ends the block: in a larger block a
  // short overflow would stop short of it. Nor while statistics or the
  // profiler count requests by their own class.
  heap->young = !secure::kEnabled && !prof::watching() && !prof::windowed();
}

// Everything heap_alloc_slow does beyond the watched fast case; a separate
// function so that that case needs no stack frame.
XALLOC_NOINLINE void* heap_alloc_refill(Heap* heap, unsigned cls, bool from_direct);

XALLOC_NOINLINE void* window_alloc(Heap* heap, unsigned cls);

void* heap_switch_slab(Heap* heap, unsigned cls) {
  Page* page = heap->current[cls];
  Page* next = heap->partial[cls];
  if (next == nullptr || next->free == nullptr || page == &g_empty_page || page->free != nullptr ||
      !page->fully_carved() || heap->young || heap->borrowed != nullptr || ((heap->slow_calls + 1) & 15) == 0 ||
      inbox_pending(heap) || heap->drain_requested.load(std::memory_order_acquire) != 0 || prof::watching() ||
      prof::windowed())
    return nullptr;
  XALLOC_CHECK(page->needed == kCurrentBias + page->capacity());
  ++heap->slow_calls;
  file_full(page);
  make_current(heap, cls, next);
  return slab_pop(next, next->free);
}

void* heap_alloc_slow(Heap* heap, unsigned cls, bool from_direct) {
  if (void* block = heap_switch_slab(heap, cls)) return block;
  if (from_direct && heap->windows != nullptr) return window_alloc(heap, cls);
  // Counted small allocations (statistics) come here every time: count, and
  // take the block at once unless a sample is due.
  if (from_direct) {
    Page* page = heap->current[cls];
    if (XALLOC_LIKELY(page->free != nullptr) && prof::watching()) {
      int64_t left = heap->sample_countdown - static_cast<int64_t>(kClassInfo[cls].size);
      if (XALLOC_LIKELY(left > 0)) {
        heap->requests[cls]++;
        heap->sample_countdown = left;
        return slab_pop(page, page->free);
      }
    }
  }
  return heap_alloc_refill(heap, cls, from_direct);
}

void* heap_alloc_refill(Heap* heap, unsigned cls, bool from_direct) {
  if (XALLOC_UNLIKELY(heap == &g_empty_heap)) {
    // Aligned requests come here by class too: a class's blocks are aligned
    // to the largest power of two that divides its size.
    if (emergency::active()) {
      uint32_t size = kClassInfo[cls].size;
      return emergency::alloc(size, size & (~size + 1));
    }
    heap = thread_heap_acquire();
    if (heap == nullptr) {
      void* block = thread_heap_torn_down() ? late_alloc(cls) : nullptr;
      if (block == nullptr) errno = ENOMEM;
      return block;
    }
  }
  if (from_direct && heap->young) cls = kYoungClass[cls];
  if (XALLOC_UNLIKELY(heap->drain_requested.load(std::memory_order_acquire) != 0)) answer_drain_request(heap);
  if (XALLOC_UNLIKELY(prof::watching()) && from_direct) {
    if (void* sampled = prof::watch(heap, cls, kClassInfo[cls].size, 0)) return sampled;
  }
  // The class's borrowed list ran dry: serve the current slab again.
  if (borrowed_list_ran_dry(heap, cls)) heap_serve(heap, cls);
  heap->class_slow_at[cls] = heap->slow_calls;
  Page* page = heap->current[cls];
  XALLOC_DEBUG_ONLY(if (page != &g_empty_page) check_slab(heap, page));
  if (page->free != nullptr) return slab_pop(page, page->free);
  if (page != &g_empty_page && !page->fully_carved()) {
    slab_carve(page);
    return slab_pop(page, page->free);
  }
  heap_tick(heap);

  if (inbox_pending(heap)) {
    heap_drain_inbox_for_reuse(heap);
    if (page->free != nullptr) return slab_pop(page, page->free);
  }
  if (page != &g_empty_page) {
    if (heap->young) heap_grow_up(heap);
    retire_current(heap, cls, page);
  }

  page = heap->partial[cls];
  if (page == nullptr) page = spare_reuse(heap, cls);  // empty, its free list intact
  if (page == nullptr && (page = slab_pool::take(cls)) != nullptr) slab_adopt(heap, page);
  if (page == nullptr && borrow_from_stalled(heap, cls))
    return slab_pop(&heap->borrowed->list[cls], heap->borrowed->list[cls].free);
  if (page == nullptr) {
    page = slab_create(heap, cls);
    if (page == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
  }
  make_current(heap, cls, page);
  if (page->free == nullptr) slab_carve(page);
  return slab_pop(page, page->free);
}

void* heap_alloc_zeroed(Heap* heap, unsigned cls, size_t size) {
  Page* page = heap->current[cls];
  uint64_t carved_before = page->carved_bytes();
  void* block = page->free != nullptr ? slab_pop(page, page->free) : heap_alloc_slow(heap, cls);
  if (block == nullptr) return nullptr;
  // A block this call carved from a slab whose memory was all zero when it
  // was taken (blocks of a page or more are carved one at a time) holds
  // nothing but the words carving wrote. Decided after the fact: the slow
  // path may drain blocks back from other threads onto this very slab and
  // hand out one of those, or move on to another slab.
  auto address = reinterpret_cast<uintptr_t>(block);
  bool fresh = page != &g_empty_page && page->is_zero && address >= page->start + carved_before &&
               address < page->start + page->carved_bytes();
  memset(block, 0, fresh ? sizeof(FreeBlock) : size);
  return block;
}

void heap_on_needed_zero(Heap* heap, Page* page) {
  switch (page->state()) {
    case SlabState::kPartial:
      partial_remove(heap, page);
      slab_empty(heap, page);  // every block is free
      break;
    case SlabState::kFull: {
      uint32_t in_use = page->capacity() - wake_threshold(page->capacity());
      if (in_use == 0) {
        page->set_state(SlabState::kDetached);
        slab_empty(heap, page);
      } else {
        page->needed = in_use;
        partial_push(heap, page);
      }
      break;
    }
    default:
      report::fatal("internal error: slab %p reached zero in state %u", reinterpret_cast<void*>(page->start),
                    static_cast<unsigned>(page->state()));
  }
}

namespace {

template <bool kForReuse>
XALLOC_INLINE void return_block(Heap* heap, FreeBlock* block) {
  auto address = reinterpret_cast<uintptr_t>(block);
  Page* page = page_of(segment_of(address), address);
  XALLOC_CHECK(page->owner == heap);
  if (XALLOC_UNLIKELY(!freed_block_canary_intact(page, block))) report_overwritten_canary(page, block);
  if (kForReuse) return heap_free_owned(heap, page, block);
  slab_free_block(heap, page, block);
}

template <bool kForReuse>
void drain_inbox(Heap* heap) {
  heap->inbox_bytes.store(0, std::memory_order_relaxed);
  FreeBlock* lists[kLanes];
  size_t active = inbox_take(heap, lists);
  // The lanes side by side: their next blocks are loaded independently.
  while (active != 0) {
    for (FreeBlock*& list : lists) {
      FreeBlock* block = list;
      if (block == nullptr) continue;
      list = remote_next(block);
      if (list == nullptr) --active;
      return_block<kForReuse>(heap, block);
    }
  }
}

}  // namespace

void purge_idle_memory(uint64_t now_ms) {
  slab_pool::release_idle(now_ms);
  reclaim_idle_kept_memory(false, now_ms);
  g_spans.maybe_purge(now_ms);
  huge_cache_maybe_purge(now_ms);
}

void heap_tick(Heap* heap) {
  if ((++heap->slow_calls & 15) == 0) heap_periodic(heap);
}

void heap_drain_inbox(Heap* heap) { drain_inbox<false>(heap); }
void heap_drain_inbox_for_reuse(Heap* heap) { drain_inbox<true>(heap); }

#if XALLOC_SECURE
namespace {

// Frees the blocks of the slots [from, to) for real; a slot never filled
// is empty. Their blocks were freed a lap ago and may have left the cache:
// each is fetched a few slots ahead of its link store (a prefetch of null
// does nothing).
void quarantine_release(Heap* heap, Heap::QuarantineSlot* from, Heap::QuarantineSlot* to) {
  uintptr_t link_secret = secure::g_secrets.link;
  for (Heap::QuarantineSlot* slot = from; slot != to; ++slot) {
    __builtin_prefetch(slot[Heap::kQuarantineLookahead].block, 1);
    FreeBlock* block = slot->block;
    if (block == nullptr) continue;
    Page* page = slot->page;
    XALLOC_CHECK(page->owner == heap);
    slab_free_block(heap, page, block, link_secret);
  }
}

// The end of the ring's second half.
Heap::QuarantineSlot* quarantine_end(const Heap* heap) {
  return heap->quarantine_mid + (heap->quarantine_mid - heap->quarantine);
}

}  // namespace

// The free that finds the filling half full: frees the other half's blocks
// (a lap old) and fills that half next.
void quarantine_swap_halves(Heap* heap, Page* page, FreeBlock* block) {
  Heap::QuarantineSlot* begin = heap->quarantine;
  Heap::QuarantineSlot* mid = heap->quarantine_mid;
  if (mid == begin) return slab_free_block(heap, page, block);  // no quarantine
  Heap::QuarantineSlot* end = quarantine_end(heap);
  Heap::QuarantineSlot* next = heap->quarantine_next;
  if (next == mid) {
    quarantine_release(heap, mid, end);
    heap->quarantine_turn = end;
  } else {
    quarantine_release(heap, begin, mid);
    next = begin;
    heap->quarantine_turn = mid;
  }
  *next = {block, page};
  heap->quarantine_next = next + 1;
}

void quarantine_flush(Heap* heap) {
  Heap::QuarantineSlot* begin = heap->quarantine;
  Heap::QuarantineSlot* mid = heap->quarantine_mid;
  Heap::QuarantineSlot* end = quarantine_end(heap);
  Heap::QuarantineSlot* next = heap->quarantine_next;
  // The other half, a lap old, then the filling half up to `next` (the
  // slots after it were freed a lap ago).
  bool filling_first = heap->quarantine_turn == mid;
  quarantine_release(heap, filling_first ? mid : begin, filling_first ? end : mid);
  quarantine_release(heap, filling_first ? begin : mid, next);
  for (Heap::QuarantineSlot* slot = begin; slot != end; ++slot) *slot = {nullptr, nullptr};
  heap->quarantine_next = begin;
  heap->quarantine_turn = mid;
}
#else
void quarantine_swap_halves(Heap*, Page*, FreeBlock*) {}
void quarantine_flush(Heap*) {}
#endif

namespace {

constexpr uint64_t kWindowCarveBytes = 4 * kOsPageSize;

// Takes the longest run of the current slab's free blocks that ends before
// the class's next sampled byte into the class's window (heap.h).
void window_open(Heap* heap, unsigned cls) {
  Page* page = heap->current[cls];
  if (page == &g_empty_page) return;
  uint64_t size = kClassInfo[cls].size;
  // A current slab's blocks are carved, and either listed or in use
  // (blocks in the inbox count as in use until drained).
  uint64_t listed = page->carved() - (page->needed - kCurrentBias);
  // Every empty window costs a trip through here: carve ahead (a few
  // batches) rather than open windows of one batch of large blocks.
  while (listed * size < kWindowCarveBytes && !page->fully_carved()) {
    uint64_t before = page->carved();
    slab_carve(page);
    listed += page->carved() - before;
  }
  if (listed == 0) return;
  FreeBlock* first = page->free;
  uint64_t taken = listed;
  int64_t countdown = heap->windows->countdown[cls];
  if (listed * size < static_cast<uint64_t>(countdown)) {
    page->free = nullptr;
  } else {
    taken = static_cast<uint64_t>(countdown - 1) / size;  // the blocks before the sampled byte
    if (taken == 0) return;
    FreeBlock* last = first;
    for (uint64_t i = 1; i < taken; ++i) last = next_free(page, last);
    page->free = next_free(page, last);
    set_next_free(page, last, nullptr);
  }
  page->needed += taken;
  heap->windows->window[cls].free = first;
}

// Counts the bytes popped from the window of `cls` since it was last
// counted towards the class's next sample.
void window_count_pops(Heap* heap, unsigned cls) {
  Page& window = heap->windows->window[cls];
  heap->windows->countdown[cls] -= static_cast<int64_t>(window.needed * kClassInfo[cls].size);
  window.needed = 0;
}

// Returns the blocks left in the heap's windows to their slabs.
void windows_close(Heap* heap) {
  if (heap->windows == nullptr) return;
  for (unsigned cls = 0; cls < kNumSmallClasses; ++cls) {
    window_count_pops(heap, cls);
    Page& window = heap->windows->window[cls];
    while (window.free != nullptr) {
      FreeBlock* block = window.free;
      window.free = next_free(&window, block);
      return_block<false>(heap, block);
    }
  }
}

}  // namespace

// A small allocation whose window is empty: it holds the class's sampled
// byte, or it takes a block the ordinary way and opens the next window.
void* window_alloc(Heap* heap, unsigned cls) {
  if (heap->drain_requested.load(std::memory_order_acquire) != 0) answer_drain_request(heap);
  Page& window = heap->windows->window[cls];
  if (window.free != nullptr) return slab_pop(&window, window.free);  // the table was emptied for a drain
  window_count_pops(heap, cls);
  auto size = static_cast<int64_t>(kClassInfo[cls].size);
  int64_t& countdown = heap->windows->countdown[cls];
  if (countdown <= size) {
    countdown = prof::sample_interval();
    if (void* sampled = prof::sample(heap, static_cast<size_t>(size), 0)) return sampled;
  } else {
    countdown -= size;
  }
  void* block = heap_alloc_refill(heap, cls, false);
  if (block != nullptr) window_open(heap, cls);
  return block;
}

void heap_collect(Heap* heap) {
  if (secure::kEnabled) quarantine_flush(heap);
  windows_close(heap);
  borrowed_return(heap);
  outbox_flush(heap->outbox);
  heap->remote_frees_sent.store(heap->outbox.blocks, std::memory_order_relaxed);
  heap_drain_inbox(heap);
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    Page* page = heap->current[cls];
    if (page == &g_empty_page) continue;
    set_current(heap, cls, &g_empty_page);
    page->needed -= kCurrentBias;
    page->set_state(SlabState::kDetached);
    settle_uncurrent(heap, page);
  }
  heap_release_spares(heap);
}

void spares_release_all(Heap* heap) {
  for (uint64_t classes = heap->spare_classes.load(std::memory_order_relaxed); classes != 0; classes &= classes - 1)
    spares_release(heap, static_cast<unsigned>(__builtin_ctzll(classes)));
}

void heap_release_spares(Heap* heap) {
  if (heap->spare_classes.load(std::memory_order_relaxed) != 0 && kept_enter(heap)) {
    spares_release_all(heap);
    kept_exit(heap);
  }
  kept_spans_release(heap);
}

}  // namespace xalloc
