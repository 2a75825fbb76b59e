#include "frontend/large.h"

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>

#include "support/emergency_heap.h"
#include "diag/heap_profiler.h"
#include "support/options.h"
#include "platform/lock.h"
#include "platform/os.h"
#include "backend/slab_pool.h"
#include "backend/span_allocator.h"
#include "support/counters.h"
#include "frontend/thread_registry.h"

namespace xalloc {

namespace {

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) & ~(to - 1); }

void* fail_enomem() {
  errno = ENOMEM;
  return nullptr;
}

// Blocks of at least this many bytes are zeroed by residency (zero_reused).
constexpr size_t kZeroByResidencyMin = 8 * 1024 * 1024;

// Zeroes a block for calloc whose memory held other blocks before (a kept
// span, dirty slices, a cached huge mapping). Writing zeros over all of it
// would make every page resident: a program that asks again and again for
// a big zeroed table and touches a few pages of it (a sparse bitmap or
// hash table) then had all 64 MiB written each time, 2.5 ms a call
// against glibc's 16 us, and resident. So each group of pages that is
// mostly resident is written; the others are given back, after which they
// read as zero (pages swapped out too, which mincore counts as not
// resident). Asking the kernel costs 36 us for 64 MiB resident, memset
// 1 ms (AMD machine); faulting a page back in costs as much as writing
// 30 resident ones, hence the majority rule.
void zero_reused(void* block, size_t size) {
  if (size < kZeroByResidencyMin) {
    memset(block, 0, size);
    return;
  }
  constexpr size_t kGroupPages = 64;
  static_assert(os::kResidencyPages % kGroupPages == 0);
  auto* start = static_cast<char*>(block);
  size_t length = round_up(size, kOsPageSize);  // a large or huge block's usable bytes are whole pages
  // Groups are handled in runs of one kind, one call each: memset writes a
  // long run with non-temporal stores, which a run cut into groups of
  // 256 KiB would not (64 MiB fully resident: 25% slower that way).
  char* run = start;
  bool run_written = true;
  auto finish_run = [&](char* end) {
    if (end == run) return;
    if (run_written) memset(run, 0, static_cast<size_t>(end - run));
    else os::purge(run, static_cast<size_t>(end - run));
    run = end;
  };
  uint8_t residency[os::kResidencyPages];
  for (size_t done = 0; done < length;) {
    size_t chunk = length - done < sizeof residency * kOsPageSize ? length - done : sizeof residency * kOsPageSize;
    char* chunk_start = start + done;
    if (!os::page_residency(chunk_start, chunk, residency)) {
      finish_run(chunk_start);
      memset(chunk_start, 0, length - done);
      return;
    }
    size_t pages = chunk / kOsPageSize;
    for (size_t first = 0; first < pages; first += kGroupPages) {
      size_t count = pages - first < kGroupPages ? pages - first : kGroupPages;
      size_t resident = 0;
      for (size_t i = first; i < first + count; ++i) resident += residency[i] & 1;
      bool write = resident * 2 > count;
      if (write != run_written) {
        finish_run(chunk_start + first * kOsPageSize);
        run_written = write;
      }
    }
    done += chunk;
  }
  finish_run(start + length);
}

// Secure mode: the guard page after a large or huge block that ends at
// `end` (its descriptor remembers how the guard was made).
void guard_after(Page* page, uintptr_t end) {
  if (secure::kEnabled) page->guard_protected = os::guard_install(reinterpret_cast<void*>(end), secure::kGuardBytes);
}

void unguard_after(const Page* page, uintptr_t end) {
  if (secure::kEnabled) os::guard_remove(reinterpret_cast<void*>(end), secure::kGuardBytes, page->guard_protected);
}

// --- large ------------------------------------------------------------------

// Secure mode: a large block's guard page follows its last page. A span
// kept for its thread's next block, or handed back to it, keeps the guard
// where its last block ended, so that a buffer allocated and freed in a
// loop moves no guard; it comes down when the span goes back to the span
// allocator.
void large_guard_at(Page* span, size_t usable) {
  if (!secure::kEnabled) return;
  guard_after(span, span->start + usable);
  span->guard_offset = static_cast<uint32_t>(usable);
}

void large_unguard(const Page* span) {
  if (secure::kEnabled) unguard_after(span, span->start + span->guard_offset);
}

void large_release(Page* span) {
  large_unguard(span);
  g_spans.release(span);
}

// Slices of a large block of `usable` bytes (whole pages): secure mode
// adds its guard page.
size_t large_slices(size_t usable) { return (usable + secure::kGuardBytes + kSliceSize - 1) >> kSliceShift; }

void set_large(Page* span, size_t usable, bool is_zero) {
  span->owner = nullptr;
  span->sampled = 0;
  span->large_usable = usable;
  span->is_zero = is_zero ? 1 : 0;
  stats::add(stats::g_global.large_in_use, usable);
  stats::note_in_use();
}

// Takes kept span `i` out of `heap`'s list, with the bytes its last block
// still counts in use.
XALLOC_INLINE Heap::KeptSpan kept_span_remove(Heap* heap, uint32_t i) {
  Heap::KeptSpan kept = heap->kept_spans[i];
  uint32_t count = heap->kept_span_count.load(std::memory_order_relaxed);
  for (uint32_t j = i + 1; j < count; ++j) heap->kept_spans[j - 1] = heap->kept_spans[j];
  heap->kept_span_count.store(count - 1, std::memory_order_relaxed);
  heap->kept_slices.store(heap->kept_slices.load(std::memory_order_relaxed) - kept.span->slice_count,
                          std::memory_order_relaxed);
  heap->kept_since = heap->slow_calls;
  heap->kept_counted.store(heap->kept_counted.load(std::memory_order_relaxed) - kept.counted,
                           std::memory_order_relaxed);
  return kept;
}

// Kept spans. Taking a span from the shared span allocator and giving it
// back costs a lock and the search and merge of free spans (89 ns a
// malloc/free pair of 256 KiB, against 3 ns for the small classes), and
// every thread that does it waits for the same lock. So the thread that
// frees a large block keeps its span, up to kept_slice_budget() slices in
// all (the oldest go back to make room), for its next large block of as many
// slices or a few fewer - a buffer allocated and freed in a loop - and for
// its heap-profiler samples, which take a slice
// each (at the default rate, hundreds of thousands a second in a program
// that allocates gigabytes). A kept span stays a large span with no usable
// bytes: a second free of its block is reported, and the span allocator
// neither merges it nor grows a neighbour into it. It goes back when the
// heap's thread exits or trims, after kKeptSpanLifetime slow paths unused
// (heap.cpp), or when the thread has kept none for a purge delay
// (reclaim_idle_kept_memory). In the secure build a kept span keeps its
// guard page (large_guard_at).

// The slices a heap may keep now: kKeptSliceBudget, or its share of
// kKeptSlicesAllHeaps when more threads live than that fits (a pool of a
// hundred threads that each freed a 1 MiB buffer once and went idle kept
// 2 MiB apiece). A heap that kept more before others were born keeps it
// until its own spans turn over.
uint32_t kept_slice_budget() {
  uint32_t live = live_heap_count();
  return live <= kKeptSlicesAllHeaps / kKeptSliceBudget ? kKeptSliceBudget : kKeptSlicesAllHeaps / live;
}

// Gives a span taken out of a heap's kept spans to the span allocator.
void kept_span_release(Heap::KeptSpan kept) {
  stats::sub(stats::g_global.large_in_use, kept.counted);
  large_release(kept.span);
}

// Gives every kept span of `heap` to the span allocator (its thread,
// between kept_enter and kept_exit, or the pass, after its barrier).
void kept_release_all(Heap* heap) {
  for (uint32_t count = heap->kept_span_count.load(std::memory_order_relaxed); count != 0;) {
    kept_span_release(heap->kept_spans[--count]);
    heap->kept_span_count.store(count, std::memory_order_relaxed);
  }
  heap->kept_slices.store(0, std::memory_order_relaxed);
  heap->kept_counted.store(0, std::memory_order_relaxed);
}

// Releases `heap`'s oldest kept spans until there is a free slot and room
// for `slices` more within `budget`.
XALLOC_NOINLINE void kept_make_room(Heap* heap, uint32_t slices, uint32_t budget) {
  while (heap->kept_span_count.load(std::memory_order_relaxed) == kKeptSpanSlots ||
         heap->kept_slices.load(std::memory_order_relaxed) + slices > budget)
    kept_span_release(kept_span_remove(heap, 0));
}

// Adds `span` to `heap`'s kept spans, the oldest making room: the span
// freed last is the likeliest to be asked for again (a buffer that
// alternates between two lengths). `counted`: the bytes its last block
// still counts in large_in_use.
void kept_span_add(Heap* heap, Page* span, size_t counted) {
  uint32_t budget = kept_slice_budget();
  uint32_t slices = span->slice_count;
  if (XALLOC_UNLIKELY(slices > budget)) return kept_span_release({span, counted});
  uint32_t count = heap->kept_span_count.load(std::memory_order_relaxed);
  uint32_t kept = heap->kept_slices.load(std::memory_order_relaxed);
  if (XALLOC_UNLIKELY(count == kKeptSpanSlots || kept + slices > budget)) {
    kept_make_room(heap, slices, budget);
    count = heap->kept_span_count.load(std::memory_order_relaxed);
    kept = heap->kept_slices.load(std::memory_order_relaxed);
  }
  span->large_usable = 0;
  span->sampled = 0;
  heap->kept_spans[count] = {span, counted};
  heap->kept_span_count.store(count + 1, std::memory_order_relaxed);
  heap->kept_slices.store(kept + slices, std::memory_order_relaxed);
  heap->kept_changes.store(heap->kept_changes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  heap->kept_since = heap->slow_calls;
  heap->kept_counted.store(heap->kept_counted.load(std::memory_order_relaxed) + counted, std::memory_order_relaxed);
}

bool keep_span(Page* span) {
  if (span->slice_count > kKeptSliceBudget) return false;
  // A thread that has not allocated yet (it frees other threads' blocks)
  // has no heap: it gets one now, or keeps nothing (exiting, or out of
  // memory).
  Heap* heap = t_heap;
  if (heap == &g_empty_heap && (heap = thread_heap_acquire()) == nullptr) return false;
  if (heap->state.load(std::memory_order_relaxed) != HeapState::kActive || !kept_enter(heap)) return false;
  kept_span_add(heap, span, span->large_usable);
  kept_exit(heap);
  // A thread that only takes and keeps spans still does the periodic work
  // (purging what it and others freed), as its slow paths would.
  heap_tick(heap);
  return true;
}

// Returned spans. A large block freed by another thread than the one that
// allocated it - a buffer a producer fills and a consumer frees - would
// stay with the consumer as a kept span it never asks for again, and the
// producer would take every buffer from the span allocator: its lock and
// its lines, shared with the consumer's releases, on both sides of every
// buffer. So the freeing thread hands the span back to the allocating
// heap, on a lock-free stack the heap empties into its kept spans when it
// next misses them. At most kept_slice_budget() slices wait on a heap; beyond
// that, and for a heap whose thread has exited, the span goes to the span
// allocator as before.
bool return_span_home(Page* span) {
  Heap* home = span->large_home;
  if (home == nullptr || home == &g_empty_heap ||
      home->state.load(std::memory_order_relaxed) != HeapState::kActive)
    return false;
  uint32_t slices = span->slice_count;
  if (home->returned_slices.fetch_add(slices, std::memory_order_relaxed) + slices > kept_slice_budget()) {
    home->returned_slices.fetch_sub(slices, std::memory_order_relaxed);
    return false;
  }
  stats::sub(stats::g_global.large_in_use, span->large_usable);
  span->large_usable = 0;  // a second free of the block is reported
  span->sampled = 0;
  Page* head = home->returned_spans.load(std::memory_order_relaxed);
  do {
    span->next = head;
  } while (!home->returned_spans.compare_exchange_weak(head, span, std::memory_order_acq_rel,
                                                        std::memory_order_relaxed));
  // The home thread may have exited since the check, its last look at the
  // stack before this push: a push after that exchange synchronizes with
  // it and sees the heap orphaned (thread_heap_teardown), and takes the
  // stack back itself.
  if (home->state.load(std::memory_order_relaxed) != HeapState::kActive) returned_spans_release(home);
  return true;
}

// Takes the spans other threads handed back to `heap` off its stack and
// passes each to fn, unlinked.
template <typename Fn>
void returned_spans_drain(Heap* heap, Fn&& fn) {
  Page* span = heap->returned_spans.exchange(nullptr, std::memory_order_acq_rel);
  uint32_t slices = 0;
  while (span != nullptr) {
    Page* next = span->next;
    span->next = nullptr;
    slices += span->slice_count;
    fn(span);
    span = next;
  }
  if (slices != 0) heap->returned_slices.fetch_sub(slices, std::memory_order_relaxed);
}

// The heap's thread missed its kept spans: the returned ones join them
// (between kept_enter and kept_exit).
void returned_spans_collect(Heap* heap) {
  returned_spans_drain(heap, [heap](Page* span) { kept_span_add(heap, span, 0); });
}

// A kept span for a block of `slices` slices: the most recently kept one
// of exactly that length, else the shortest that is at most an eighth
// longer (a buffer asked for again a little smaller - the next line, frame
// or record - reuses the span rather than taking the shared allocator's
// lock twice; 150 ns a malloc/free pair of 512 KiB against 25). Taken out
// of `heap` for a block of `usable` bytes (between kept_enter and
// kept_exit); null if there is none.
XALLOC_INLINE Page* pick_kept_span(Heap* heap, size_t slices, size_t usable) {
  uint32_t found = kKeptSpanSlots;
  size_t longest = slices + slices / 8;
  for (uint32_t i = heap->kept_span_count.load(std::memory_order_relaxed); i-- > 0;) {
    size_t length = heap->kept_spans[i].span->slice_count;
    if (length < slices || length > longest) continue;
    found = i;
    if (length == slices) break;
    longest = length - 1;  // only a shorter one is better
  }
  if (found == kKeptSpanSlots) return nullptr;
  Heap::KeptSpan kept = kept_span_remove(heap, found);
  if (secure::kEnabled && kept.span->guard_offset != usable) {
    large_unguard(kept.span);
    large_guard_at(kept.span, usable);
  }
  kept.span->large_usable = usable;
  kept.span->is_zero = 0;
  if (usable != kept.counted) {
    stats::add(stats::g_global.large_in_use, usable);
    stats::sub(stats::g_global.large_in_use, kept.counted);
    if (usable > kept.counted) stats::note_in_use();
  }
  return kept.span;
}

// pick_kept_span again once the spans others handed back have joined the
// kept ones.
XALLOC_NOINLINE Page* pick_returned_span(Heap* heap, size_t slices, size_t usable) {
  returned_spans_collect(heap);
  return pick_kept_span(heap, slices, usable);
}

// A kept span for the heap's thread (pick_kept_span), or one handed back
// by another thread. A heap that has neither (g_empty_heap among them) is
// not written to.
Page* take_kept_span(Heap* heap, size_t slices, size_t usable) {
  bool returned = heap->returned_spans.load(std::memory_order_relaxed) != nullptr;
  if ((heap->kept_span_count.load(std::memory_order_relaxed) == 0 && !returned) || !kept_enter(heap)) return nullptr;
  Page* span = pick_kept_span(heap, slices, usable);
  if (XALLOC_UNLIKELY(span == nullptr) && returned) span = pick_returned_span(heap, slices, usable);
  kept_exit(heap);
  return span;
}

// --- huge -------------------------------------------------------------------

// The block starts this far into its mapping (the header is in front of
// it), or at the first multiple of its alignment past that.
constexpr size_t kHugeHeader = kHeaderBytes;

XALLOC_STARTUP_DATA Mutex g_huge_lock;
XALLOC_STARTUP_DATA Segment* g_huge_cache = nullptr;  // most recently freed first
XALLOC_STARTUP_DATA size_t g_huge_cache_bytes = 0;
XALLOC_STARTUP_DATA size_t g_huge_cache_resident = 0;  // of which not purged
XALLOC_STARTUP_DATA uint64_t g_huge_next_purge_ms = 0;
// Bytes freed into the cache since a cached mapping was last reused: a
// burst of frees that nothing takes back (huge_free).
XALLOC_STARTUP_DATA size_t g_huge_unreused_bytes = 0;

size_t huge_offset(size_t alignment) {
  return alignment > kOsPageSize ? round_up(kHugeHeader, alignment) : kHugeHeader;  // (0: no alignment asked)
}

// The mapping for a huge block that ends `end` bytes into it. Mappings come
// in eight sizes per doubling, so that a buffer freed and asked for again
// a few pages larger (the next file, frame or request) finds its mapping in
// the cache instead of mapping and faulting in another: a program that
// fills buffers of about 20 and 40 MiB, frees them and asks again, round
// after round, left 172 MiB mapped and resident with page-sized mappings
// against 66 MiB of buffers. Only the pages the program touches become
// resident; the rest of the step is address space. (In secure mode the
// guard page follows the block's last page, wherever that is in the
// mapping: huge_setup.)
size_t huge_mapping_bytes(size_t end) {
  return round_up(end, std::bit_floor(end) / 8) + secure::kGuardBytes;
}

// A huge block of `size` bytes at `offset` in a mapping of `mapping` bytes.
// In secure mode it can use its pages, no more: the guard page follows
// them, and the pages past the guard, up to the end of the mapping, are
// left for a later block that reuses the mapping.
void huge_setup(Segment* segment, size_t mapping, size_t offset, size_t size) {
  segment->kind = SegmentKind::kHuge;
  segment->mapping_size = mapping;
  segment->huge_usable = secure::kEnabled ? round_up(size, kOsPageSize) : mapping - offset;
  segment->next = segment->prev = nullptr;
  Page* page = &segment->pages[0];
  page->set_kind(PageKind::kHuge);
  page->owner = nullptr;
  page->sampled = 0;
  page->start = segment->base() + offset;
  page->slice_count = 0;
  // Every slice of the first granule resolves to the block's descriptor, so
  // lookups never see a null entry.
  for (Page*& slot : segment->page_of_slice) slot = page;
}

// Secure mode: where a huge block's guard page is, right after its pages.
uintptr_t huge_guard_address(const Segment* segment) {
  return segment->pages[0].start + segment->huge_usable;
}

// Secure mode: moves the guard of a huge block whose usable size changes
// to `usable` within its mapping.
void huge_move_guard(Segment* segment, size_t usable) {
  Page* page = &segment->pages[0];
  unguard_after(page, huge_guard_address(segment));
  stats::sub(stats::g_global.large_in_use, segment->huge_usable);
  segment->huge_usable = usable;
  stats::add(stats::g_global.large_in_use, usable);
  guard_after(page, huge_guard_address(segment));
}

// Secure mode: once a cached huge block's pages are given back, they are
// made inaccessible too, so a use after free faults as it would on an
// unmapped block; the header slices, which the cache's links live in, stay
// readable. (Sealed only then: changing the protection of resident pages
// costs a page-table walk and a TLB flush at every free and every reuse -
// 140 us a block in malloc-large, 2.6 times its time - while purged pages
// have no entries to change.) A block taken from a sealed mapping gets back
// exactly the bytes it may use: the guard page after it, and whatever its
// offset leaves in front, stay inaccessible. With commit on demand
// (options.h) every build seals them, by decommitting, which also takes
// them off the commit charge.
void cache_purge_and_seal(Segment* segment) {
  auto* start = reinterpret_cast<void*>(segment->base() + kHugeHeader);
  size_t bytes = segment->mapping_size - kHugeHeader;
  if (g_options.commit_on_demand) {
    os::decommit(start, bytes);
    segment->huge_sealed = 1;
    return;
  }
  os::purge(start, bytes);
  // Refused (too many mappings): the block stays accessible, its pages
  // purged.
  if (secure::kEnabled) segment->huge_sealed = os::protect_none(start, bytes);
}

// Makes a cached mapping's bytes from `offset` on accessible again. Those
// in front of an aligned block stay sealed, even after the block is cached
// again unpurged: a later block at a smaller offset opens them. `opened`:
// whether any protection changed (the guard page's too, if it is made of
// protection rather than a mark).
bool cache_open(Segment* segment, size_t offset, bool* opened) {
  *opened = false;
  if (!secure::kEnabled && !g_options.commit_on_demand) return true;
  uintptr_t base = segment->base();
  size_t open_from = segment->huge_sealed ? segment->mapping_size : segment->huge_open_from;
  if (offset >= open_from) return true;
  *opened = true;
  segment->huge_sealed = 0;
  segment->huge_open_from = static_cast<uint32_t>(offset);
  return os::protect_read_write(reinterpret_cast<void*>(base + offset), open_from - offset);
}

void cache_unlink(Segment* segment) {
  if (segment->prev != nullptr) segment->prev->next = segment->next;
  else __atomic_store_n(&g_huge_cache, segment->next, __ATOMIC_RELAXED);
  if (segment->next != nullptr) segment->next->prev = segment->prev;
  segment->next = segment->prev = nullptr;
  g_huge_cache_bytes -= segment->mapping_size;
  if (!segment->huge_purged) g_huge_cache_resident -= segment->mapping_size;
}

// `for_budget`: purged to keep within the dirty budget, not because its
// delay passed. Such a mapping taken again soon after is evidence for the
// budget's feedback (span_allocator.cpp): a program that frees a 24 MiB
// buffer and takes it again in a loop faulted every page of it in again at
// every turn, 25 times the time it takes with the memory kept.
void cache_purge_locked(Segment* s, bool for_budget) {
  cache_purge_and_seal(s);
  s->huge_purged = 1;
  s->budget_purge_epoch = for_budget ? g_spans.note_huge_budget_purge(s->mapping_size) : 0;
  g_huge_cache_resident -= s->mapping_size;
  stats::sub(stats::g_global.committed, s->mapping_size);
  stats::add(stats::g_global.purged, s->mapping_size - kHugeHeader);
}

// A fresh mapping of `mapping` bytes for a huge block, aligned to the
// segment size, whose range the segment map can take; nullptr if refused.
void* map_huge(size_t mapping) {
  void* memory = os::map_aligned(mapping, kSegmentSize);
  if (memory != nullptr && !segment_map_prepare(reinterpret_cast<uintptr_t>(memory), mapping)) {
    os::unmap(memory, mapping);
    return nullptr;
  }
  return memory;
}

// A cached mapping that fits `mapping` bytes without wasting more than a
// quarter (or unmapped, evicted ones go to `evict`).
Segment* cache_take(size_t mapping) {
  LockGuard guard(g_huge_lock);
  Segment* best = nullptr;
  for (Segment* s = g_huge_cache; s != nullptr; s = s->next) {
    if (s->mapping_size >= mapping && s->mapping_size - mapping <= mapping / 4 &&
        (best == nullptr || s->mapping_size < best->mapping_size))
      best = s;
  }
  if (best != nullptr) {
    cache_unlink(best);
    g_huge_unreused_bytes = 0;
    // (Only a mapping purged for the budget has a period: cache_purge_locked.)
    if (best->budget_purge_epoch != 0) {
      g_spans.note_huge_budget_reuse(best->budget_purge_epoch, best->mapping_size);
      best->budget_purge_epoch = 0;
    }
  }
  return best;
}

void huge_unmap(Segment* segment) {
  if (!segment->huge_purged) stats::sub(stats::g_global.committed, segment->mapping_size);
  segment_destroy(segment);
}

}  // namespace

void* large_alloc(size_t size, size_t alignment, bool zero) {
  if (XALLOC_UNLIKELY(emergency::active())) return emergency::alloc(size, alignment);
  ensure_process_init();
  size_t usable = size == 0 ? kOsPageSize : round_up(size, kOsPageSize);
  size_t extra = alignment > kSliceSize ? alignment - kSliceSize : 0;
  size_t slices = large_slices(usable + extra);
  if (slices > kPayloadSlices) return huge_alloc(size, alignment, zero);
  // A thread's first large block gives it a heap, if it has none yet: the
  // home its blocks' spans come back to when other threads free them.
  Heap* heap = t_heap;
  if (XALLOC_UNLIKELY(heap == &g_empty_heap)) {
    Heap* acquired = thread_heap_acquire();
    if (acquired != nullptr) heap = acquired;
  }
  if (extra == 0) {
    Page* span = take_kept_span(heap, slices, usable);
    if (span != nullptr) {
      span->large_home = heap;
      void* block = reinterpret_cast<void*>(span->start);
      if (zero) zero_reused(block, size);
      return block;
    }
  }
  bool is_zero = false;
  Page* span = g_spans.allocate(slices, PageKind::kLarge, &is_zero);
  if (span == nullptr) return fail_enomem();
  if (extra != 0) {
    // Give back the slices before the aligned address and after the block.
    uintptr_t aligned = round_up(span->start, alignment);
    size_t skip = (aligned - span->start) >> kSliceShift;
    if (skip != 0) span = g_spans.trim_front(span, skip);
    g_spans.shrink(span, large_slices(usable));
  }
  set_large(span, usable, is_zero);
  span->large_home = heap;
  large_guard_at(span, usable);
  void* block = reinterpret_cast<void*>(span->start);
  if (zero && !is_zero) zero_reused(block, size);
  return block;
}

void* large_alloc_sampled(Heap* heap, size_t size, size_t alignment) {
  // A one-slice span is aligned to its slice.
  size_t usable = size == 0 ? kOsPageSize : round_up(size, kOsPageSize);
  Page* span = large_slices(usable) == 1 && alignment <= kSliceSize ? take_kept_span(heap, 1, usable) : nullptr;
  if (span == nullptr) return large_alloc(size, alignment, false);
  span->large_home = heap;
  return reinterpret_cast<void*>(span->start);
}

void returned_spans_release(Heap* heap) {
  returned_spans_drain(heap, [](Page* span) { large_release(span); });
}

// A thread that has gone idle - blocked, or done with large blocks - never
// collects the spans others hand back to it, nor gives back the spans it
// keeps, nor its spare slabs. So, once per purge delay, the periodic work
// of any thread (or the background purger) gives the span allocator every
// returned stack whose head has not changed since the pass before, and the
// kept spans and spare slabs of every heap that has kept or taken none
// since the pass before: memory unused for at least a whole delay. (A
// thread that only takes its kept spans may lose the rest early, and a
// head that only looks unchanged - drained and pushed again in between -
// sends its spans back early: either costs a trip to the span allocator
// and nothing else. The home and the pass both take a
// stack with one exchange; kept spans are claimed first, kept_enter.)
XALLOC_STARTUP_DATA std::atomic<uint64_t> g_reclaim_next_pass_ms{0};
XALLOC_STARTUP_DATA std::atomic<bool> g_reclaim_pass_running{false};

void reclaim_returned_spans(Heap* heap, bool force) {
  Page* head = heap->returned_spans.load(std::memory_order_relaxed);
  Page* seen = heap->returned_seen.load(std::memory_order_relaxed);
  if (head != nullptr && (force || head == seen)) {
    returned_spans_release(heap);
    head = nullptr;
  }
  if (head != seen) heap->returned_seen.store(head, std::memory_order_relaxed);
}

// Claims the kept spans and spare slabs of `heap` if it has kept or taken
// none since the pass before (any, with `force`); true if it did.
bool claim_idle_kept_memory(Heap* heap, bool force) {
  uint32_t changes = heap->kept_changes.load(std::memory_order_relaxed);
  uint32_t spare_changes = heap->spare_changes.load(std::memory_order_relaxed);
  bool idle = force || (changes == heap->kept_seen && spare_changes == heap->spare_seen);
  // (No write to a line the thread may be using unless something changed.)
  if (changes != heap->kept_seen) heap->kept_seen = changes;
  if (spare_changes != heap->spare_seen) heap->spare_seen = spare_changes;
  if (!idle || (heap->kept_span_count.load(std::memory_order_relaxed) == 0 &&
                heap->spare_slices.load(std::memory_order_relaxed) == 0))
    return false;
  heap->kept_claimed.store(1, std::memory_order_relaxed);
  return true;
}

// After the barrier: the claimed spans and spares of a heap whose thread
// is not using them go back; the claim is lifted either way.
void release_claimed_kept_memory(Heap* heap, bool barrier_done) {
  if (heap->kept_claimed.load(std::memory_order_relaxed) == 0) return;
  if (barrier_done && heap->kept_busy.load(std::memory_order_acquire) == 0) {
    kept_release_all(heap);
    spares_release_all(heap);
  }
  heap->kept_claimed.store(0, std::memory_order_release);
}

void reclaim_idle_kept_memory(bool force, uint64_t now_ms) {
  if (!force && now_ms < g_reclaim_next_pass_ms.load(std::memory_order_relaxed)) return;
  if (g_reclaim_pass_running.exchange(true, std::memory_order_acquire)) return;
  uint64_t period = g_options.purge_delay_ms > kReclaimPassMinMs ? g_options.purge_delay_ms : kReclaimPassMinMs;
  g_reclaim_next_pass_ms.store(now_ms + period, std::memory_order_relaxed);
  bool claimed = false;
  for_each_heap([force, &claimed](Heap* heap) {
    reclaim_returned_spans(heap, force);
    claimed |= claim_idle_kept_memory(heap, force);
  });
  if (claimed) {
    bool barrier_done = os::process_wide_barrier();
    for_each_heap([barrier_done](Heap* heap) { release_claimed_kept_memory(heap, barrier_done); });
  }
  g_reclaim_pass_running.store(false, std::memory_order_release);
}

// A pass another thread was running when the process forked never ends in
// the child.
void reclaim_reset_after_fork_child() {
  g_reclaim_pass_running.store(false, std::memory_order_relaxed);
  for_each_heap([](Heap* heap) { heap->kept_claimed.store(0, std::memory_order_relaxed); });
  os::process_wide_barrier_reset_after_fork_child();
}

void kept_spans_release(Heap* heap) {
  if (heap->returned_spans.load(std::memory_order_relaxed) != nullptr) returned_spans_release(heap);
  // (Not a write to g_empty_heap, which every thread without a heap shares.
  // Claimed by the reclaim pass: the pass is giving them back.)
  if (heap->kept_span_count.load(std::memory_order_relaxed) == 0 || !kept_enter(heap)) return;
  kept_release_all(heap);
  kept_exit(heap);
}

void large_free(Page* page) {
  if (XALLOC_UNLIKELY(page->sampled)) prof::forget(page);
  if (page->large_home != t_heap && return_span_home(page)) return;
  if (keep_span(page)) return;
  stats::sub(stats::g_global.large_in_use, page->large_usable);
  large_release(page);
}

bool large_resize_in_place(Page* page, size_t size) {
  if (size <= kMaxSlabSize || size > kMaxLargeSize) return false;
  size_t usable = round_up(size, kOsPageSize);
  size_t slices = large_slices(usable);
  if (slices > page->slice_count && !g_spans.try_grow(page, slices)) return false;
  size_t old_usable = page->large_usable;
  // Secure mode: the guard page moves to the new end (taken down before a
  // shrink may give its slice back).
  bool guard_moves = usable != old_usable;
  if (guard_moves) large_unguard(page);
  // Shrinking: keep the span unless half of it would be idle.
  if (slices * 2 <= page->slice_count) g_spans.shrink(page, slices);
  if (guard_moves) large_guard_at(page, usable);
  // (A shared counter: no atomic update for a realloc within the page.)
  if (usable > old_usable) stats::add(stats::g_global.large_in_use, usable - old_usable);
  if (usable < old_usable) stats::sub(stats::g_global.large_in_use, old_usable - usable);
  page->large_usable = usable;
  if (XALLOC_UNLIKELY(page->sampled)) prof::resized(page, size);
  return true;
}

void* huge_alloc(size_t size, size_t alignment, bool zero) {
  if (XALLOC_UNLIKELY(emergency::active())) return emergency::alloc(size, alignment);
  ensure_process_init();
  if (size > kMaxRequest || alignment > kSegmentSize / 2) return fail_enomem();
  size_t offset = huge_offset(alignment);
  size_t mapping = huge_mapping_bytes(offset + size);
  Segment* segment = cache_take(mapping);
  bool opened = false;
  if (segment != nullptr && !cache_open(segment, offset, &opened)) {
    huge_unmap(segment);  // the kernel refused (too many mappings): map afresh
    segment = nullptr;
  }
  bool fresh = segment == nullptr;
  if (fresh) {
    void* memory = map_huge(mapping);
    if (memory == nullptr && release_cached_memory()) memory = map_huge(mapping);
    if (memory == nullptr) return fail_enomem();
    segment = segment_at(reinterpret_cast<uintptr_t>(memory));
    segment_protect_header(segment->base());
    segment_map_set(segment->base(), mapping, true);
    stats::add(stats::g_global.mapped, mapping);
    stats::add(stats::g_global.segments, 1);
    stats::add(stats::g_global.committed, mapping);
  } else {
    mapping = segment->mapping_size;
    if (segment->huge_purged) stats::add(stats::g_global.committed, mapping);
  }
  bool is_zero = fresh || segment->huge_purged;
  segment->huge_purged = 0;
  // A cached mapping kept the guard page of its last block: moved if this
  // block ends elsewhere, made again if cache_open undid it.
  uintptr_t old_guard = fresh ? 0 : huge_guard_address(segment);
  huge_setup(segment, mapping, offset, size);
  uintptr_t guard = huge_guard_address(segment);
  bool make_guard = fresh || guard != old_guard || opened;
  if (make_guard && !fresh) unguard_after(&segment->pages[0], old_guard);
  if (make_guard) guard_after(&segment->pages[0], guard);
  stats::add(stats::g_global.large_in_use, segment->huge_usable);
  void* block = reinterpret_cast<void*>(segment->pages[0].start);
  if (zero && !is_zero) zero_reused(block, size);
  return block;
}

void huge_free(Segment* segment) {
  if (XALLOC_UNLIKELY(segment->pages[0].sampled)) prof::forget(&segment->pages[0]);
  stats::sub(stats::g_global.large_in_use, segment->huge_usable);
  Segment* evict = nullptr;
  bool cacheable = segment->mapping_size <= g_options.huge_cache_bytes;
  {
    LockGuard guard(g_huge_lock);
    if (cacheable) {
      segment->freed_at = os::monotonic_ms();
      segment->pages[0].set_kind(PageKind::kFree);  // a second free is reported
      uint64_t freed_now = segment->freed_at;
      segment->prev = nullptr;
      segment->next = g_huge_cache;
      if (g_huge_cache != nullptr) g_huge_cache->prev = segment;
      __atomic_store_n(&g_huge_cache, segment, __ATOMIC_RELAXED);
      g_huge_cache_bytes += segment->mapping_size;
      g_huge_cache_resident += segment->mapping_size;
      g_huge_unreused_bytes += segment->mapping_size;
      segment = nullptr;
      Segment* oldest = g_huge_cache;
      while (oldest->next != nullptr) oldest = oldest->next;
      // Over budget: the least recently freed mappings go.
      while (g_huge_cache_bytes > g_options.huge_cache_bytes) {
        Segment* prev = oldest->prev;
        cache_unlink(oldest);
        oldest->next = evict;
        evict = oldest;
        oldest = prev;
      }
      // A burst of frees far beyond the resident budget that nothing reuses,
      // making up most of the cache (a buffer that doubled past 16 MiB on
      // several threads at once), goes back at once, oldest first, as in
      // the span allocator; a smaller excess once it may go. A cache in
      // active use (blocks of varying sizes allocated and freed in turn)
      // keeps the delay: a purged mapping faults its pages in again when it
      // is reused.
      size_t budget = dirty_budget_bytes();
      size_t hard_cap = burst_threshold_bytes(budget);
      if (g_huge_unreused_bytes > hard_cap && g_huge_unreused_bytes * 2 > g_huge_cache_bytes &&
          g_huge_cache_resident > hard_cap) {
        for (Segment* s = oldest; s != nullptr && g_huge_cache_resident > budget; s = s->prev)
          if (!s->huge_purged) cache_purge_locked(s, true);
      }
      if (g_huge_cache_resident > budget) {
        uint64_t soon = freed_now + g_options.purge_delay_ms / 10;
        if (soon < g_huge_next_purge_ms) __atomic_store_n(&g_huge_next_purge_ms, soon, __ATOMIC_RELAXED);
      }
    }
  }
  if (segment != nullptr) huge_unmap(segment);
  while (evict != nullptr) {
    Segment* next = evict->next;
    huge_unmap(evict);
    evict = next;
  }
}

// Gives back the end of a huge block's mapping. The 32 MiB granules it
// frees are unmarked in the segment map before the pages go: once they are
// unmapped, another thread may map them and mark them as its own.
static bool shrink_mapping(uintptr_t base, size_t old_mapping, size_t mapping) {
  uintptr_t kept_end = round_up(base + mapping, kSegmentSize);
  uintptr_t old_end = base + old_mapping;
  if (kept_end < old_end) segment_map_set(kept_end, old_end - kept_end, false);
  if (os::remap_in_place(reinterpret_cast<void*>(base), old_mapping, mapping)) return true;
  segment_map_set(base, old_mapping, true);
  return false;
}

void* huge_resize(Segment* segment, void* ptr, size_t size) {
  size_t offset = static_cast<size_t>(reinterpret_cast<uintptr_t>(ptr) - segment->base());
  size_t old_mapping = segment->mapping_size;
  size_t old_usable = segment->huge_usable;
  bool sampled = segment->pages[0].sampled;
  uint64_t sample_bytes = segment->pages[0].sample_bytes, sample_stack = segment->pages[0].sample_stack;
  if (size > kMaxLargeSize) {
    size_t mapping = huge_mapping_bytes(offset + size);
    if (mapping <= old_mapping && mapping * 2 > old_mapping) {  // fits, not much idle
      if (secure::kEnabled && round_up(size, kOsPageSize) > old_usable)
        huge_move_guard(segment, round_up(size, kOsPageSize));
      if (XALLOC_UNLIKELY(sampled)) prof::resized(&segment->pages[0], size);
      return ptr;
    }
    // Secure mode: the guard page is taken down first and set up again at
    // the end of the resized mapping (or where it was, if nothing moved).
    unguard_after(&segment->pages[0], huge_guard_address(segment));
    bool resized = false;
    Segment* moved = segment;
    auto* base = reinterpret_cast<void*>(segment->base());
    if (mapping < old_mapping) {
      resized = shrink_mapping(segment->base(), old_mapping, mapping);
    } else if (!segment_map_prepare(segment->base(), mapping)) {
      // The map cannot take the grown range: copied, if memory allows.
    } else if (os::remap_in_place(base, old_mapping, mapping)) {
      resized = true;
    } else if (void* target = map_huge(mapping); target != nullptr) {
      // Move the pages to a fresh aligned reservation instead of copying.
      // Once they move, another thread may map the old range and mark it
      // as its own: unmark it first.
      segment_map_set(segment->base(), old_mapping, false);
      if (os::remap_to(base, old_mapping, mapping, target)) {
        moved = segment_at(reinterpret_cast<uintptr_t>(target));
        resized = true;
      } else {
        segment_map_set(segment->base(), old_mapping, true);
        os::unmap(target, mapping);
      }
    }
    if (resized) {
      segment_map_set(moved->base(), mapping, true);
      stats::add(stats::g_global.mapped, mapping);
      stats::sub(stats::g_global.mapped, old_mapping);
      stats::add(stats::g_global.committed, mapping);
      stats::sub(stats::g_global.committed, old_mapping);
      stats::sub(stats::g_global.large_in_use, old_usable);
      huge_setup(moved, mapping, offset, size);
      guard_after(&moved->pages[0], huge_guard_address(moved));
      stats::add(stats::g_global.large_in_use, moved->huge_usable);
      void* block = reinterpret_cast<void*>(moved->pages[0].start);
      if (XALLOC_UNLIKELY(sampled)) {
        Page& page = moved->pages[0];
        page.sampled = 1;
        page.sample_bytes = sample_bytes;
        page.sample_stack = sample_stack;
        prof::resized(&page, size);
      }
      return block;
    }
    guard_after(&segment->pages[0], huge_guard_address(segment));
  }
  return nullptr;  // copied by realloc
}

size_t huge_cache_purge(bool force, uint64_t now_ms) {
  uint64_t delay = g_options.purge_delay_ms;
  size_t purged = 0;
  Segment* unmap_list = nullptr;
  {
    LockGuard guard(g_huge_lock);
    size_t budget = dirty_budget_bytes();
    // Oldest first: past the delay they go; beyond the budget, a tenth of
    // the delay is enough (as in the span allocator).
    Segment* oldest = g_huge_cache;
    while (oldest != nullptr && oldest->next != nullptr) oldest = oldest->next;
    for (Segment* s = oldest; s != nullptr;) {
      Segment* prev = s->prev;
      if (force) {
        // Everything goes back, address space included (counted as
        // released even when its pages were purged before).
        purged += s->mapping_size;
        cache_unlink(s);
        s->next = unmap_list;
        unmap_list = s;
      } else if (!s->huge_purged && now_ms >= s->freed_at + delay) {
        cache_purge_locked(s, false);
        purged += s->mapping_size - kHugeHeader;
      } else if (!s->huge_purged && g_huge_cache_resident > budget && now_ms >= s->freed_at + delay / 10) {
        cache_purge_locked(s, true);
        purged += s->mapping_size - kHugeHeader;
      }
      s = prev;
    }
    uint64_t next = g_huge_cache_resident > budget ? delay / 10 : delay / 4;
    __atomic_store_n(&g_huge_next_purge_ms, now_ms + (next > 5 ? next : 5), __ATOMIC_RELAXED);
  }
  while (unmap_list != nullptr) {
    Segment* next = unmap_list->next;
    huge_unmap(unmap_list);
    unmap_list = next;
  }
  return purged;
}

bool release_cached_memory() {
  Heap* heap = t_heap;
  size_t released = size_t{heap->kept_slices.load(std::memory_order_relaxed)} << kSliceShift;
  kept_spans_release(heap);
  reclaim_idle_kept_memory(true, 0);
  released += slab_pool::release_all();
  released += huge_cache_purge(true, 0);
  released += g_spans.purge(true);
  return released != 0;
}

void huge_cache_maybe_purge(uint64_t now_ms) {
  if (__atomic_load_n(&g_huge_cache, __ATOMIC_RELAXED) == nullptr ||
      now_ms < __atomic_load_n(&g_huge_next_purge_ms, __ATOMIC_RELAXED))
    return;
  huge_cache_purge(false, now_ms);
}

void huge_cache_lock_for_fork() { g_huge_lock.lock(); }
void huge_cache_unlock_after_fork_parent() { g_huge_lock.unlock(); }
void huge_cache_reset_after_fork_child() { g_huge_lock.reset_after_fork(); }

}  // namespace xalloc
