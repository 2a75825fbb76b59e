#include "frontend/heap_slabs.h"

#include <array>
#include <bit>

#include "backend/huge_ranges.h"
#include "backend/slab_pool.h"
#include "backend/span_allocator.h"
#include "platform/os.h"
#include "platform/shared_count.h"
#include "frontend/thread_registry.h"
#include "support/counters.h"
#include "support/debug.h"

namespace xalloc {

namespace {

// Carving writes at most this many bytes of fresh blocks at a time, so a
// slab's memory is touched only as it is used. Secure mode carves one page
// per shuffle run (carve_shuffled).
constexpr size_t kShuffleRuns = 4;
constexpr size_t kCarveBytes = secure::kEnabled ? kShuffleRuns * kOsPageSize : kOsPageSize;



// Secure mode's carve: the batch is cut into kShuffleRuns runs of
// consecutive blocks, about a page each, and each next block of the list
// is the head of a run picked at random (the next non-empty run from there
// when it is empty). Every pick is a fresh random number, so the addresses
// handed out so far do not tell the next one: it is one of up to four (a
// random stride through the batch is known after two picks). Each run is
// walked forward within its own page, a stream the processor's prefetcher
// follows page by page; more runs, or runs within one page, outrun its
// streams (rbstress-1: 1.5x the default build's time with four page runs,
// 1.6-1.9x with the alternatives tried). Returns the batch's first block,
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

// A slab whose memory read as zero when it was taken has no page resident
// past what was carved before: while the heap is young (heap.h), which a
// short process stays throughout, the pages that this carve's block
// headers reach into, each a page fault on its first write, are made
// resident in one call instead (os.h); a grown heap does it ahead, in
// steps (populate_ahead).
void populate_carved(uintptr_t carved_end, uintptr_t written_end) {
  uintptr_t from = round_up(carved_end, kOsPageSize);
  if (from < written_end) os::populate(reinterpret_cast<void*>(from), written_end - from);
}

// Pages of a fresh slab made resident once its first `bytes` are carved
// (populate_ahead): the carved pages rounded up to a power of two, and past
// kPopulateStep pages to a multiple of that. (Steps of eight pages cost
// 8-thread multithread-churn 3% of its peak RSS, of four 2%.)
constexpr size_t kPopulateStep = 4;
size_t populated_pages(size_t bytes) {
  size_t pages = round_up(bytes, kOsPageSize) / kOsPageSize;
  if (pages <= 1) return pages;
  return pages <= kPopulateStep ? std::bit_ceil(pages) : round_up(pages, kPopulateStep);
}

// A grown heap's fresh slab of blocks no larger than two pages: each carve
// writes every page it reaches (a block header starts in each), or eight
// of every nine (blocks of one to two pages), whose program fills the
// pages between; so the pages just ahead are made resident in one call
// per step (pages 2-3, 4-7, 8-11, ...) instead of a page fault each: on
// this project's test machine a fault costs 13.6 us, a page populated
// 16 KiB at a time 7.6 us. (Larger blocks are left to their program: a
// header every three pages or more says little of what it writes.) What is
// resident and not carved yet is at most kPopulateStep - 1 pages, and only
// in a class's current slab: every slab before it was carved to its end.
// (The call takes the mmap lock for reading, which a fault does not: a
// step of one page is left to the fault.)
void populate_ahead(const Page* page, uintptr_t first, uintptr_t carve_end) {
  uintptr_t base = page->start & ~(kOsPageSize - 1);
  uintptr_t slab_end = page->start + size_t{page->capacity()} * page->block_size();
  uintptr_t from = base + populated_pages(first - base) * kOsPageSize;
  uintptr_t to = base + populated_pages(carve_end - base) * kOsPageSize;
  uintptr_t end = round_up(slab_end, kOsPageSize);
  if (to > end) to = end;
  if (to >= from + 2 * kOsPageSize) os::populate(reinterpret_cast<void*>(from), to - from);
}

// A grown heap's fresh slab of blocks over two pages, carved one at a
// time: a carve writes only each block's first page, and whether the
// program writes the rest is its own affair, judged per heap and class as
// large blocks are (block_memory.h). The page in the middle of each block
// (its own: the block spans three pages or more) is never populated, so
// that the block carved before tells by that page whether the program
// wrote it through (a block tagged at both ends, or with a header alone,
// does not count). While it does, each block is made resident but for
// that page, in two calls (not in secure mode, whose canaries end the
// blocks).
uintptr_t middle_page(uintptr_t block, size_t size) { return (block + size / 2) & ~(kOsPageSize - 1); }

void populate_if_written(Page* page, uintptr_t first, size_t size) {
  Heap* heap = page->owner;
  uint64_t bit = uint64_t{1} << page->size_class;
  if (first != page->start) {
    bool written = os::resident_bytes_in(middle_page(first - size, size), kOsPageSize) != 0;
    if (written) heap->big_classes_written |= bit;
    else heap->big_classes_written &= ~bit;
  }
  if ((heap->big_classes_written & bit) == 0) return;
  uintptr_t middle = middle_page(first, size);
  os::populate(reinterpret_cast<void*>(first), middle - first);
  os::populate(reinterpret_cast<void*>(middle + kOsPageSize), first + size - (middle + kOsPageSize));
}

}  // namespace

void slab_carve(Page* page) {
  size_t size = page->block_size();
  size_t count = kCarveBytes / size;
  if (count == 0) count = 1;
  uint32_t carved = page->carved_bytes();
  size_t left_bytes = size_t{page->capacity()} * size - carved;
  if (count * size > left_bytes) count = left_bytes / size;
  uintptr_t first = page->start + carved;
  if (page->is_zero && page->owner->young) populate_carved(first, first + (count - 1) * size + sizeof(FreeBlock));
  else if (page->is_zero && size <= 2 * kOsPageSize) populate_ahead(page, first, first + count * size);
  else if (page->is_zero && !secure::kEnabled && count == 1) populate_if_written(page, first, size);
  page->free = secure::kEnabled ? carve_shuffled(page, first, count, size) : carve_in_order(page, first, count, size);
  page->set_carved_bytes(carved + static_cast<uint32_t>(count * size));
}

namespace {

// Slab hand-over (a heap takes a slab from the pool and gives one back)
// is counted in the heap, and reaches the process-wide counters once a
// heap's count has moved this far: with one add per hand-over, every
// thread wrote the counters' line (sh6bench: 240,000 times in 2.5 s with
// 64 threads). The purge budgets and the peaks see slab bytes up to
// kSlabBytesBatch, and slabs of a class up to kSlabsBatch, a heap off.
constexpr int64_t kSlabBytesBatch = int64_t{256} << 10;
constexpr int32_t kSlabsBatch = 4;

void publish_bytes(int64_t bytes) {
  if (bytes > 0) {
    stats::add(stats::g_global.slab_in_use, static_cast<size_t>(bytes));
    stats::note_in_use();
  }
  if (bytes < 0) stats::sub(stats::g_global.slab_in_use, static_cast<size_t>(-bytes));
}

void publish_slabs(unsigned cls, int32_t slabs) {
  if (slabs > 0) stats::note_slabs_created(cls, static_cast<size_t>(slabs));
  if (slabs < 0) stats::sub(stats::g_global.slabs[cls], static_cast<size_t>(-slabs));
}

void count_slab(Heap* heap, Page* page, int direction) {
  unsigned cls = page->size_class;
  int64_t bytes = direction * static_cast<int64_t>(page->span_bytes());
  // Another thread's heap (the reclaim pass takes its spares, a sender
  // drains an orphan): the heap's counts are its own thread's to write.
  if (heap != t_heap) {
    publish_bytes(bytes);
    if (stats::slabs_by_class_counted()) publish_slabs(cls, direction);
    shared_count::atomic_rmw(shared_count::Site::kKeptSpans, &heap->slab_bytes_away);
    heap->slab_bytes_away.fetch_add(bytes, std::memory_order_relaxed);
    return;
  }
  heap->slab_bytes += bytes;
  bytes = heap->unpublished_slab_bytes += bytes;
  if (bytes >= kSlabBytesBatch || bytes <= -kSlabBytesBatch) {
    publish_bytes(bytes);
    heap->unpublished_slab_bytes = 0;
  }
  if (!stats::slabs_by_class_counted()) return;
  int32_t slabs = heap->unpublished_slabs[cls] += direction;
  if (slabs >= kSlabsBatch || slabs <= -kSlabsBatch) {
    publish_slabs(cls, slabs);
    heap->unpublished_slabs[cls] = 0;
  }
}

}  // namespace

void slab_counts_publish(Heap* heap) {
  publish_bytes(heap->unpublished_slab_bytes);
  heap->unpublished_slab_bytes = 0;
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    publish_slabs(cls, heap->unpublished_slabs[cls]);
    heap->unpublished_slabs[cls] = 0;
  }
}

namespace {
void spares_earn(Heap* heap, const Page* page);
}  // namespace

// A heap takes over an empty slab, from the pool (slab_pool.h) or fresh.
Page* slab_adopt(Heap* heap, Page* page) {
  if (heap == t_heap) spares_earn(heap, page);
  page->owner = heap;
  page->set_state(SlabState::kDetached);
  count_slab(heap, page, 1);
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
  bool big = slabs_held(heap) >= static_cast<int64_t>(huge_ranges::kThreadSlabThreshold);
  Page* page = g_spans.allocate(slices, PageKind::kSlab, &is_zero, big);
  if (page == nullptr) return nullptr;
  return slab_format(heap, page, cls, is_zero);
}

namespace {

// An empty slab leaves its heap: to the pool, its free list intact, or
// back to the span allocator when the pool is full.
void slab_release(Heap* heap, Page* page) {
  if (page->state() == SlabState::kPartial) partial_remove(heap, page);
  page->owner = nullptr;
  page->set_state(SlabState::kDetached);
  count_slab(heap, page, -1);
  if (slab_pool::put(page)) return;
  page->free = nullptr;
  g_spans.release(page);
}

// Spare slabs (heap.h): at most kMaxSpareSlices slices' worth per heap (1
// MiB), each for at most kSpareLifetime slow paths unused. A thread that
// replaces random blocks of a working set empties a slab of a class whose
// slabs hold 4-7 blocks every few hundred slow paths: shorter lives and
// smaller bounds send such slabs through the shared pool and its class
// lock (glibc-thread with 16 threads pools 2.8x as many slabs with four
// one-slice spares living 64 slow paths). Once more threads live than
// kSpareSlicesAllHeaps holds at that size, each keeps its share, and never
// less than kMinSpareSlices: a thousand threads do not keep a gigabyte of
// empty slabs.
constexpr uint32_t kMaxSpareSlices = 16;
constexpr uint32_t kSpareSlicesAllHeaps = 32 * kMaxSpareSlices;  // 32 MiB
constexpr uint32_t kMinSpareSlices = 4;
constexpr uint32_t kSpareLifetime = 256;

// (The spare functions run between kept_enter and kept_exit, or in the
// reclaim pass after its barrier: heap.h.)
Page* spare_take(Heap* heap, unsigned cls) {
  Page* page = heap->spares.slab[cls];
  heap->spares.slab[cls] = page->next;
  if (page->next == nullptr)
    heap->spares.classes.store(heap->spares.classes.load(std::memory_order_relaxed) & ~(uint64_t{1} << cls),
                              std::memory_order_relaxed);
  page->next = nullptr;
  heap->spares.slices.store(heap->spares.slices.load(std::memory_order_relaxed) - page->slice_count,
                           std::memory_order_relaxed);
  return page;
}

void spares_release(Heap* heap, unsigned cls) {
  while (heap->spares.slab[cls] != nullptr) slab_release(heap, spare_take(heap, cls));
}

// Spares of `cls` unused for their lifetime go, and the room they earned.
void spares_retire(Heap* heap, unsigned cls) {
  uint32_t before = heap->spares.slices.load(std::memory_order_relaxed);
  spares_release(heap, cls);
  uint32_t slices = before - heap->spares.slices.load(std::memory_order_relaxed);
  heap->spares.earned -= slices < heap->spares.earned ? slices : heap->spares.earned;
}

// A spare kept or taken: what the reclaim pass looks at to tell a heap
// that has stopped using its spares.
void note_spare_change(Heap* heap) {
  heap->spares.changes.store(heap->spares.changes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void spare_keep(Heap* heap, Page* page) {
  unsigned cls = page->size_class;
  page->set_state(SlabState::kDetached);
  page->next = heap->spares.slab[cls];
  heap->spares.slab[cls] = page;
  heap->spares.classes.store(heap->spares.classes.load(std::memory_order_relaxed) | uint64_t{1} << cls,
                            std::memory_order_relaxed);
  heap->spares.since[cls] = heap->slow_calls;
  heap->spares.slices.store(heap->spares.slices.load(std::memory_order_relaxed) + page->slice_count,
                           std::memory_order_relaxed);
  note_spare_change(heap);
}

uint32_t spare_share() { return per_heap_share(kMaxSpareSlices, kSpareSlicesAllHeaps, kMinSpareSlices); }

uint32_t spare_slice_budget(const Heap* heap) {
  uint32_t budget = spare_share() + heap->spares.earned;
  return budget < kMaxSpareSlices ? budget : kMaxSpareSlices;
}

// Where the share is what bounds a heap's spares (more threads live than
// kSpareSlicesAllHeaps holds at kMaxSpareSlices each), a heap that lets a
// slab go for want of room and needs a new one within kSpareLifetime slow
// paths earns room for it, back up to kMaxSpareSlices: the pool's 4 MiB
// cannot hold what so many threads let go, and a busy thread among many
// would take back what it needs through the pool's lock or the span
// allocator slab by slab (sh6bench with 64 threads on 2 cores: 0.82x the
// time, peak RSS 0.90x). The earned room goes with the spares that
// expire unused; a heap that stops taking slabs earns none. Room past
// kMaxSpareSlices is not earned: a heap's spares serve its own classes
// only, where the pool serves every heap and class (with up to 4 MiB a
// heap, sh6bench with 4 threads had 13% more peak RSS).
void spares_earn(Heap* heap, const Page* page) {
  if (!heap->spares.let_go || heap->slow_calls - heap->spares.let_go_at >= kSpareLifetime) return;
  if (spare_share() + heap->spares.earned < kMaxSpareSlices) heap->spares.earned += page->slice_count;
}

// A slab of `heap` whose last block came back (not its class's current
// slab, and already off the partial list): kept as its class's spare when
// there is room, so that the next refill of the class reuses it as it is.
void slab_empty(Heap* heap, Page* page) {
  if (heap->state.load(std::memory_order_relaxed) == HeapState::kActive && kept_enter(heap)) {
    bool room = heap->spares.slices.load(std::memory_order_relaxed) + page->slice_count <= spare_slice_budget(heap);
    if (room) spare_keep(heap, page);
    kept_exit(heap);
    if (room) return;
    heap->spares.let_go = true;
    heap->spares.let_go_at = heap->slow_calls;
  }
  slab_release(heap, page);
}

}  // namespace

// A spare of class `cls`, or null (none, or claimed by the reclaim pass).
Page* spare_reuse(Heap* heap, unsigned cls) {
  if (heap->spares.classes.load(std::memory_order_relaxed) == 0 || !kept_enter(heap)) return nullptr;
  Page* page = nullptr;
  if (heap->spares.slab[cls] != nullptr) {
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
    heap_set_current(heap, cls, &g_empty_page);
    page->needed = 0;
    page->set_state(SlabState::kDetached);
    slab_release(heap, page);
  }
}

void spares_expire(Heap* heap) {
  if (!kept_enter(heap)) return;
  XALLOC_DEBUG_ONLY(for (unsigned cls = 0; cls < kNumClasses; ++cls) XALLOC_CHECK(
                        (heap->spares.slab[cls] != nullptr) == ((heap->spares.classes.load() >> cls & 1) != 0)));
  for (uint64_t classes = heap->spares.classes.load(std::memory_order_relaxed); classes != 0; classes &= classes - 1) {
    auto cls = static_cast<unsigned>(__builtin_ctzll(classes));
    if (heap->slow_calls - heap->spares.since[cls] >= kSpareLifetime) spares_retire(heap, cls);
  }
  kept_exit(heap);
}

// The current slab has no block left to hand out.
void retire_current(Heap* heap, unsigned cls, Page* page) {
  XALLOC_CHECK(page->free == nullptr && page->fully_carved());
  XALLOC_CHECK(page->needed == kCurrentBias + page->capacity());
  heap_set_current(heap, cls, &g_empty_page);
  file_full(page);
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

void heap_on_needed_zero(Heap* heap, Page* page) noexcept {
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

void spares_release_all(Heap* heap) {
  for (uint64_t classes = heap->spares.classes.load(std::memory_order_relaxed); classes != 0; classes &= classes - 1)
    spares_release(heap, static_cast<unsigned>(__builtin_ctzll(classes)));
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


}  // namespace xalloc
