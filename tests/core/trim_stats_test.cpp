// xalloc_trim gives memory back, and the statistics describe the heap.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "frontend/heap.h"
#include "platform/os.h"
#include "backend/segment.h"
#include "meta/slab.h"
#include "backend/slab_pool.h"
#include "backend/span_allocator.h"
#include "test_util.h"
#include "frontend/thread_registry.h"
#include "xalloc/xalloc.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSlice = 64 * 1024;
// A large block whose span no heap keeps (heap.h: kKeptSliceBudget): its
// free goes to the span allocator at once.
constexpr size_t kUnkeptLarge = (xalloc::kKeptSliceBudget + 1) * kSlice;

// Whether the block at `p`, freed, sits in a span its heap keeps: still a
// large span (with no usable bytes), not a free span of the span allocator.
bool span_kept(void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  const xalloc::Page* span = xalloc::page_of(xalloc::segment_of(address), address);
  return span->kind() == xalloc::PageKind::kLarge && span->large_usable == 0;
}

xalloc_stats_t stats() {
  xalloc_stats_t s;
  xalloc_get_stats(&s);
  return s;
}

// Four huge blocks of 30 MiB, every other page written (fewer on failure).
std::vector<void*> four_touched_huge_blocks() {
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) {
    void* p = xalloc_malloc(30 * kMiB);
    if (p == nullptr) break;
    xtest::touch_pages(p, 30 * kMiB, 2);
    blocks.push_back(p);
  }
  return blocks;
}

}  // namespace

TEST(Trim, ReturnsFreedLargeMemory) {
  // 160 MiB of large blocks: several segments are mapped for them alone,
  // whatever was mapped before, and become empty when they are freed.
  xalloc_stats_t before = stats();
  std::vector<void*> blocks;
  for (int i = 0; i < 320; ++i) {
    void* p = xalloc_malloc(512 * 1024);
    ASSERT_NE(p, nullptr);
    xtest::touch_pages(p, 512 * 1024, 1);
    blocks.push_back(p);
  }
  xalloc_stats_t full = stats();
  ASSERT_GE(full.segments, before.segments + 3);
  for (void* p : blocks) xalloc_free(p);
  EXPECT_EQ(xalloc_trim(0), 1);
  xalloc_stats_t trimmed = stats();
  EXPECT_LE(trimmed.committed + 150 * kMiB, full.committed)
      << "160 MiB freed, committed only " << full.committed << " -> " << trimmed.committed;
  EXPECT_LE(trimmed.mapped + 3 * 32 * kMiB, full.mapped) << "empty segments stay mapped after trim";
  EXPECT_GT(trimmed.purged, full.purged);
}

TEST(Trim, ReturnsFreedSmallMemory) {
  std::vector<void*> blocks;
  for (int i = 0; i < 60000; ++i) {
    void* p = xalloc_malloc(500 + static_cast<size_t>(i % 7) * 64);
    ASSERT_NE(p, nullptr);
    static_cast<char*>(p)[0] = 1;
    blocks.push_back(p);
  }
  xalloc_stats_t full = stats();
  for (void* p : blocks) xalloc_free(p);
  xalloc_trim(0);
  xalloc_stats_t trimmed = stats();
  // About 40 MiB were in use; at most a slab per class may stay.
  EXPECT_LE(trimmed.committed + 30 * kMiB, full.committed)
      << "committed " << full.committed << " -> " << trimmed.committed;
}

TEST(Trim, ReturnsFreedHugeMemory) {
  std::vector<void*> blocks = four_touched_huge_blocks();
  ASSERT_EQ(blocks.size(), 4u);
  xalloc_stats_t full = stats();
  for (void* p : blocks) xalloc_free(p);
  EXPECT_EQ(xalloc_trim(0), 1);
  xalloc_stats_t trimmed = stats();
  EXPECT_LE(trimmed.committed + 100 * kMiB, full.committed);
  EXPECT_LE(trimmed.mapped + 100 * kMiB, full.mapped) << "freed huge blocks stay mapped after trim";
}

// Purge tests: the purge policy keeps process-wide history (the dirty
// budget's factor, the peak of memory in use over the last delay, the last
// shrink decision), so each of them runs in a fresh process, where the
// tests before it in the same program cannot decide its outcome.

TEST(Purge, BurstOfHugeFreesGoesBackWithoutTrim) {
  if (!xtest::rerun_in_fresh_process()) return;  // see "Purge tests" above
  // 120 MiB of huge blocks freed at once is far beyond the resident budget
  // of a small heap: the huge cache keeps the mappings but purges them at
  // once, as the span allocator does for a burst of spans.
  std::vector<void*> blocks = four_touched_huge_blocks();
  ASSERT_EQ(blocks.size(), 4u);
  xalloc_stats_t full = stats();
  ASSERT_LT(full.in_use, 400 * kMiB) << "the test needs a small heap (budget 12% of it)";
  for (void* p : blocks) xalloc_free(p);
  xalloc_stats_t freed = stats();
  EXPECT_LE(freed.committed + 80 * kMiB, full.committed)
      << "committed " << full.committed << " -> " << freed.committed << " right after the frees";
}

// The dirty budget grows while memory purged to keep within it is taken
// back, and steps down only after a whole purge delay (500 ms) of calm.
TEST(Purge, BudgetGrowsUnderReuseAndShrinksOnlyAfterADelayOfCalm) {
  using Clock = std::chrono::steady_clock;
  // A large free lets the span allocator purge and review its budget: of a
  // block too big for the spans a heap keeps, which goes back to the span
  // allocator at once.
  auto nudge = [] { xalloc_free(xalloc_malloc(kUnkeptLarge)); };
  // 16 MiB of large blocks, freed (beyond the 4 MiB budget of a small
  // heap: purged after 50 ms) and taken back, a few times over.
  constexpr int kBlocks = 8;
  void* blocks[kBlocks];
  for (int round = 0; round < 6 && xalloc::dirty_budget_boost() == 0; ++round) {
    for (void*& p : blocks) {
      p = xalloc_malloc(2 * kMiB);
      ASSERT_NE(p, nullptr);
      xtest::touch_pages(p, 2 * kMiB, 1);
    }
    for (void* p : blocks) xalloc_free(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(70));
    nudge();
  }
  ASSERT_GT(xalloc::dirty_budget_boost(), 0u) << "purged memory taken back did not grow the budget";
  unsigned grown = xalloc::dirty_budget_boost();
  // Calm: nothing but the nudges. A quarter of the delay on, the budget has
  // not stepped down (unless this machine stalled the test past the delay).
  auto calm_start = Clock::now();
  while (Clock::now() - calm_start < std::chrono::milliseconds(200)) {
    nudge();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (Clock::now() - calm_start < std::chrono::milliseconds(400)) {
    EXPECT_EQ(xalloc::dirty_budget_boost(), grown) << "stepped down within a fraction of the delay";
  }
  while (xalloc::dirty_budget_boost() == grown && Clock::now() - calm_start < std::chrono::seconds(5)) {
    nudge();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LT(xalloc::dirty_budget_boost(), grown) << "still grown after 5 s of calm";
}

namespace {

// Blocks of 1 KiB filling `bytes` of slabs, every page written.
std::vector<void*> small_blocks(size_t bytes) {
  std::vector<void*> blocks(bytes / 1024);
  for (void*& p : blocks) {
    p = xalloc_malloc(1024);
    if (p != nullptr) memset(p, 1, 1024);
  }
  return blocks;
}

void free_range(std::vector<void*>& blocks, size_t from, size_t to, size_t keep_every = 0) {
  for (size_t i = from; i < to; ++i) {
    if (keep_every != 0 && i % keep_every == 0) continue;
    xalloc_free(blocks[i]);
    blocks[i] = nullptr;
  }
}

}  // namespace

// A heap that drops part of its memory and still holds its live data
// densely (between two passes of its work) keeps the dropped memory for
// the next pass - for the purge delay, not beyond.
TEST(Purge, MemoryDroppedFromAPeakStaysForTheDelay) {
  if (!xtest::rerun_in_fresh_process()) return;  // see "Purge tests" above
  std::vector<void*> blocks = small_blocks(64 * kMiB);
  ASSERT_EQ(std::count(blocks.begin(), blocks.end(), nullptr), 0);
  size_t purged_before = stats().purged;
  // 24 MiB of slabs emptied: far beyond the budget (12% of 40 MiB), and
  // less than what stays live.
  free_range(blocks, 0, blocks.size() * 3 / 8);
  auto nudge = [] { xalloc_free(xalloc_malloc(kUnkeptLarge)); };
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  nudge();
  EXPECT_LT(stats().purged - purged_before, 8 * kMiB) << "dropped memory purged within a tenth of the delay";
  auto start = std::chrono::steady_clock::now();
  while (stats().purged - purged_before < 16 * kMiB && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    nudge();
  }
  EXPECT_GE(stats().purged - purged_before, 16 * kMiB) << "dropped memory still resident 5 s later";
  free_range(blocks, 0, blocks.size());
}

// A heap whose slabs hold at least as much free space as it dropped gets
// no allowance: its next allocations fill those slabs first, so the memory
// of its emptied slabs goes back at once, as a burst beyond the budget.
TEST(Purge, SparseHeapGivesEmptiedSlabsBackAtOnce) {
  if (!xtest::rerun_in_fresh_process()) return;  // see "Purge tests" above
  std::vector<void*> blocks = small_blocks(64 * kMiB);
  ASSERT_EQ(std::count(blocks.begin(), blocks.end(), nullptr), 0);
  size_t purged_before = stats().purged;
  // The second half: every other block freed, the slabs all kept by their
  // survivors (16 MiB live, 16 MiB of free blocks); then the first half
  // whole (32 MiB dropped).
  free_range(blocks, blocks.size() / 2, blocks.size(), 2);
  free_range(blocks, 0, blocks.size() / 2);
  EXPECT_GE(stats().purged - purged_before, 16 * kMiB) << "emptied slabs of a sparse heap kept resident";
  free_range(blocks, 0, blocks.size());
}

// Free memory still resident is taken before purged memory, even from a
// longer span: the program's next allocation faults nothing in.
TEST(Purge, ResidentFreeSpanIsTakenBeforeAShorterPurgedOne) {
  if (!xtest::rerun_in_fresh_process()) return;  // see "Purge tests" above
  void* dirty = xalloc_malloc(6 * kMiB);
  void* guard1 = xalloc_malloc(2 * kMiB);
  void* purged = xalloc_malloc(3 * kMiB);
  void* guard2 = xalloc_malloc(2 * kMiB);
  ASSERT_TRUE(dirty != nullptr && guard1 != nullptr && purged != nullptr && guard2 != nullptr);
  memset(dirty, 1, 6 * kMiB);
  xalloc_free(purged);
  xalloc_trim(0);       // the 3 MiB span, and the rest of the segment, purged
  xalloc_free(dirty);   // within the budget's burst threshold: stays resident
  void* p = xalloc_malloc(kMiB + kMiB / 2);
  EXPECT_EQ(p, dirty) << "a purged span was taken while a resident one fitted";
  xalloc_free(p);
  xalloc_free(guard1);
  xalloc_free(guard2);
}

TEST(Trim, NothingToTrim) {
  xalloc_trim(0);
  EXPECT_EQ(xalloc_trim(0), 0) << "a second trim found memory to return";
}

TEST(Trim, TrimFromAnotherThreadReturnsRemoteFreedMemory) {
  // Blocks of a live thread freed by the main thread, then trimmed.
  std::vector<void*> blocks;
  std::thread t([&] {
    for (int i = 0; i < 64; ++i) blocks.push_back(xalloc_malloc(256 * 1024));
  });
  t.join();
  xalloc_stats_t full = stats();
  for (void* p : blocks) xalloc_free(p);
  xalloc_trim(0);
  EXPECT_LE(stats().committed + 12 * kMiB, full.committed);
}

TEST(Stats, CountersFollowAllocations) {
  void* small = xalloc_malloc(10);  // gives this thread its heap
  xalloc_stats_t before = stats();
  void* big = xalloc_malloc(5 * kMiB);
  ASSERT_NE(big, nullptr);
  xalloc_stats_t with_big = stats();
  EXPECT_GE(with_big.large_in_use, before.large_in_use + 5 * kMiB);
  EXPECT_GE(with_big.in_use, before.in_use + 5 * kMiB);
  EXPECT_GE(with_big.committed, with_big.in_use);
  EXPECT_GE(with_big.mapped, with_big.committed);
  EXPECT_GE(with_big.segments, 1u);
  EXPECT_GE(with_big.threads, 1u);
  xalloc_free(big);
  xalloc_stats_t after = stats();
  EXPECT_EQ(after.large_in_use, before.large_in_use);
  EXPECT_EQ(after.in_use, before.in_use);

  void* huge = xalloc_malloc(40 * kMiB);
  xalloc_stats_t with_huge = stats();
  EXPECT_GE(with_huge.large_in_use, before.large_in_use + 40 * kMiB);
  EXPECT_GE(with_huge.mapped, 40 * kMiB);
  xalloc_free(huge);
  EXPECT_EQ(stats().large_in_use, before.large_in_use);
  xalloc_free(small);
}

// A freed large block's span stays with the freeing thread's heap for its
// next large block of as many slices: no shared lock on a buffer allocated
// and freed in a loop.
TEST(KeptSpans, FreedLargeBlockServesTheNextOfItsLength) {
  void* small = xalloc_malloc(10);  // gives this thread its heap
  auto* p = static_cast<unsigned char*>(xalloc_malloc(256 * 1024));
  ASSERT_NE(p, nullptr);
  memset(p, 0xAB, 256 * 1024);
  xalloc_free(p);
  EXPECT_TRUE(span_kept(p));
  // 250,000 bytes take the same four slices.
  auto* q = static_cast<unsigned char*>(xalloc_malloc(250000));
  EXPECT_EQ(q, p) << "a freed 256 KiB span was not reused";
  EXPECT_EQ(xalloc_usable_size(q), size_t{250000 + 4096 - 250000 % 4096});
  xalloc_free(q);
  // calloc of a kept span (dirty) still zeroes it.
  auto* z = static_cast<unsigned char*>(xalloc_calloc(1, 256 * 1024));
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z, p);
  EXPECT_EQ(std::count(z, z + 256 * 1024, 0), 256 * 1024) << "calloc handed out a kept span unzeroed";
  xalloc_free(z);
  xalloc_trim(0);
  xalloc_free(small);
}

// A kept span serves a block up to an eighth shorter; not a longer block,
// nor a much shorter one.
TEST(KeptSpans, SpanServesABlockAFewSlicesShorter) {
  void* small = xalloc_malloc(10);
  xalloc_trim(0);
  void* nine = xalloc_malloc(9 * kSlice - 4096);
  ASSERT_NE(nine, nullptr);
  xalloc_free(nine);
  void* eight = xalloc_malloc(8 * kSlice);
  EXPECT_EQ(eight, nine) << "a kept span of nine slices did not serve eight";
  EXPECT_EQ(xalloc_usable_size(eight), 8 * kSlice);
  xalloc_free(eight);
  void* ten = xalloc_malloc(10 * kSlice);
  EXPECT_NE(ten, nine) << "a kept span served a longer block";
  void* four = xalloc_malloc(4 * kSlice);
  EXPECT_NE(four, nine) << "a kept span twice the length served the block";
  void* again = xalloc_malloc(9 * kSlice - 4096);
  EXPECT_EQ(again, nine);
  for (void* p : {ten, four, again}) xalloc_free(p);
  xalloc_trim(0);
  xalloc_free(small);
}

// A large block freed by another thread goes back to the heap of the thread
// that allocated it, for that thread's next large block (a buffer handed
// from a producer to a consumer).
TEST(KeptSpans, BlockFreedByAnotherThreadGoesBackToItsAllocatingThread) {
  void* small = xalloc_malloc(10);
  xalloc_trim(0);
  void* p = xalloc_malloc(256 * 1024);
  ASSERT_NE(p, nullptr);
  std::thread([p] { xalloc_free(p); }).join();
  EXPECT_TRUE(span_kept(p)) << "the span went to the span allocator";
  EXPECT_NE(xalloc::t_heap->returned_spans.load(), nullptr);
  void* q = xalloc_malloc(256 * 1024);
  EXPECT_EQ(q, p) << "the returned span did not serve this thread's next block";
  EXPECT_EQ(xalloc::t_heap->returned_spans.load(), nullptr);
  EXPECT_EQ(xalloc::t_heap->returned_slices.load(), 0u);
  std::thread([q] { xalloc_free(q); }).join();
  EXPECT_TRUE(span_kept(q));
  xalloc_trim(0);
  EXPECT_EQ(xalloc::t_heap->returned_spans.load(), nullptr) << "trim left returned spans";
  xalloc_free(small);
}

// At most kKeptSliceBudget slices wait on a heap; the rest go to the span
// allocator. A thread that has exited gets none: its heap's stack stays
// empty.
TEST(KeptSpans, ReturnedSpansAreBoundedAndNeverStrandedOnAnExitedThread) {
  void* small = xalloc_malloc(10);
  xalloc_trim(0);
  std::vector<void*> blocks;
  for (int i = 0; i < 12; ++i) blocks.push_back(xalloc_malloc(2 * kSlice));
  std::thread([&blocks] {
    for (void* p : blocks) xalloc_free(p);
  }).join();
  EXPECT_LE(xalloc::t_heap->returned_slices.load(), xalloc::kKeptSliceBudget);
  EXPECT_GT(xalloc::t_heap->returned_slices.load(), 0u);
  xalloc_trim(0);
  EXPECT_EQ(xalloc::t_heap->returned_slices.load(), 0u);

  xalloc::Heap* exited = nullptr;
  void* orphaned = nullptr;
  std::thread([&] {
    orphaned = xalloc_malloc(256 * 1024);
    exited = xalloc::t_heap;
  }).join();
  ASSERT_NE(orphaned, nullptr);
  ASSERT_NE(exited, &xalloc::g_empty_heap) << "a thread's large block gives it a heap";
  xalloc_free(orphaned);
  EXPECT_EQ(exited->returned_spans.load(), nullptr) << "a span waits on the heap of an exited thread";
  xalloc_trim(0);
  xalloc_free(small);
}

// A thread that has gone idle does not sit on spans: neither those it
// keeps from its own frees nor those other threads hand back to it.
// Another thread's periodic work gives them to the span allocator once
// they have gone unused for a whole purge delay (500 ms), and malloc_trim
// at once. (Kept spans only where the kernel has membarrier.)
TEST(KeptSpans, SpansOfAnIdleThreadAreReclaimed) {
  const bool kept_reclaimable = xalloc::os::process_wide_barrier();
  std::atomic<int> phase{0};
  std::vector<void*> blocks;
  xalloc::Heap* idle = nullptr;
  std::thread owner([&] {
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 3; ++i) blocks.push_back(xalloc_malloc(2 * kSlice));
      xalloc_free(xalloc_malloc(5 * kSlice));  // kept by this thread
      idle = xalloc::t_heap;
      phase.store(2 * round + 1);
      while (phase.load() != 2 * round + 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto hand_back = [&](int ready) {
    while (phase.load() != ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (void* p : blocks) xalloc_free(p);
    blocks.clear();
    return idle->returned_slices.load();
  };
  auto held = [&] { return idle->returned_slices.load() + (kept_reclaimable ? idle->kept.slices.load() : 0); };

  ASSERT_EQ(hand_back(1), 6u) << "the spans did not go back to their allocating thread";
  ASSERT_EQ(idle->kept.slices.load(), 5u) << "the thread did not keep the span it freed";
  // Slow paths of this thread run the periodic work: slabs of 48-byte
  // blocks filled and emptied.
  auto start = std::chrono::steady_clock::now();
  std::vector<void*> churn(20000);
  while (held() != 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    for (void*& p : churn) p = xalloc_malloc(48);
    for (void* p : churn) xalloc_free(p);
  }
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(idle->returned_slices.load(), 0u) << "handed-back spans stayed with the idle thread for " << waited << " s";
  EXPECT_EQ(idle->kept.slices.load(), kept_reclaimable ? 0u : 5u) << "kept spans after " << waited << " s";
  EXPECT_GE(waited, 0.45) << "spans were taken from their thread before a purge delay";
  phase.store(2);

  ASSERT_EQ(hand_back(3), 6u);
  ASSERT_EQ(idle->kept.slices.load(), 5u);
  xalloc_trim(0);
  EXPECT_EQ(idle->returned_slices.load(), 0u) << "malloc_trim left another thread's returned spans";
  EXPECT_EQ(idle->returned_spans.load(), nullptr);
  EXPECT_EQ(idle->kept.slices.load(), kept_reclaimable ? 0u : 5u) << "malloc_trim and another thread's kept spans";
  phase.store(4);
  owner.join();
}

// Blocks of one class for `heap`'s thread: enough for three 64 KiB slabs
// of 48-byte blocks, so that freeing them all empties the first two, which
// the heap keeps as spares (the third is the class's current slab).
std::vector<void*> fill_three_slabs() {
  std::vector<void*> blocks(3000);
  for (void*& p : blocks) p = xalloc_malloc(48);
  return blocks;
}

// A slab whose last block comes back stays with its thread, free list and
// all, for the next refill of its class.
TEST(SpareSlabs, EmptiedSlabServesTheNextRefillOfItsClass) {
  std::thread([] {
    std::vector<void*> blocks = fill_three_slabs();
    xalloc::Heap* heap = xalloc::t_heap;
    for (void* p : blocks) xalloc_free(p);
    const uint32_t kept = heap->spares.slices.load();
    ASSERT_GE(kept, 1u) << "no emptied slab was kept";
    const xalloc::Page* spare = heap->spares.slab[xalloc::class_of(48)];
    ASSERT_NE(spare, nullptr);
    const uintptr_t spare_start = spare->start;
    blocks = fill_three_slabs();
    EXPECT_LT(heap->spares.slices.load(), kept) << "the refills did not take a spare";
    bool reused = std::any_of(blocks.begin(), blocks.end(), [&](void* p) {
      auto address = reinterpret_cast<uintptr_t>(p);
      return address >= spare_start && address < spare_start + kSlice;
    });
    EXPECT_TRUE(reused) << "the spare slab was not used again";
    for (void* p : blocks) xalloc_free(p);
    ASSERT_GE(heap->spares.slices.load(), 1u);
    xalloc_trim(0);
    EXPECT_EQ(heap->spares.slices.load(), 0u) << "malloc_trim left the thread's spares";
  }).join();
}

// Slabs of any length are kept, up to 16 slices in all: a thread that
// empties many slabs at once keeps 1 MiB of them and hands the rest on.
TEST(SpareSlabs, SlabsOfSeveralSlicesAreKeptUpToTheBound) {
  std::thread([] {
    constexpr size_t kSize = 20 * 1024;  // six blocks to a slab of two slices
    const unsigned cls = xalloc::class_of(kSize);
    ASSERT_EQ(xalloc::kClassInfo[cls].slices, 2u);
    std::vector<void*> blocks(40 * 6);
    for (void*& p : blocks) p = xalloc_malloc(kSize);
    xalloc::Heap* heap = xalloc::t_heap;
    for (void* p : blocks) xalloc_free(p);
    ASSERT_NE(heap->spares.slab[cls], nullptr) << "no emptied slab of two slices was kept";
    EXPECT_EQ(heap->spares.slices.load(), 16u) << "the spares are not filled up to their bound";
    size_t listed = 0;
    for (const xalloc::Page* page = heap->spares.slab[cls]; page != nullptr; page = page->next) listed += page->slice_count;
    EXPECT_EQ(listed, heap->spares.slices.load());
    xalloc_trim(0);
    EXPECT_EQ(heap->spares.slices.load(), 0u);
  }).join();
}

// With many threads alive, each keeps its share of 32 MiB of spares (but
// four slices at least).
TEST(SpareSlabs, ManyThreadsKeepTheirShare) {
  constexpr int kOthers = 127;  // with the test's thread, 128 or more live heaps: 4 slices each
  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> others;
  for (int i = 0; i < kOthers; ++i) {
    others.emplace_back([&] {
      void* p = xalloc_malloc(16);  // a heap of its own
      ready.fetch_add(1);
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      xalloc_free(p);
    });
  }
  while (ready.load() != kOthers) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread([] {
    std::vector<void*> blocks(40 * 6);
    for (void*& p : blocks) p = xalloc_malloc(20 * 1024);
    xalloc::Heap* heap = xalloc::t_heap;
    ASSERT_GE(xalloc::live_heap_count(), 128u);
    for (void* p : blocks) xalloc_free(p);
    EXPECT_EQ(heap->spares.slices.load(), 4u) << "a thread among many kept more than its share";
  }).join();
  done.store(true);
  for (std::thread& t : others) t.join();
}

// A thread that used many sizes once and went on with a few does not keep
// a current slab of every size: an empty one of a class that has taken no
// slow path for a while leaves the heap. The class still in use keeps its.
TEST(CurrentSlabs, EmptySlabOfAClassNoLongerUsedLeavesTheHeap) {
  std::thread([] {
    std::vector<void*> once;
    for (size_t size = 16; size <= 1024; size += 16) once.push_back(xalloc_malloc(size));
    xalloc::Heap* heap = xalloc::t_heap;
    const unsigned used_once = xalloc::class_of(1000);
    const unsigned in_use = xalloc::class_of(48);
    for (void* p : once) xalloc_free(p);
    ASSERT_NE(heap->current[used_once], &xalloc::g_empty_page) << "the class used once has no current slab";
    const uint32_t start = heap->slow_calls;
    while (heap->slow_calls - start < 1024) {
      std::vector<void*> blocks = fill_three_slabs();
      for (void* p : blocks) xalloc_free(p);
    }
    EXPECT_EQ(heap->current[used_once], &xalloc::g_empty_page) << "an empty slab stayed with a class unused since";
    EXPECT_NE(heap->current[in_use], &xalloc::g_empty_page) << "the class in use lost its slab";
    void* again = xalloc_malloc(1000);  // the class gets a slab again
    EXPECT_NE(again, nullptr);
    EXPECT_NE(heap->current[used_once], &xalloc::g_empty_page);
    xalloc_free(again);
  }).join();
}

// A thread that goes idle does not sit on its spare slabs either: another
// thread's periodic work gives them up once they have gone unused for a
// whole purge delay, malloc_trim at once. (Only where the kernel has
// membarrier, as for kept spans.)
TEST(SpareSlabs, SparesOfAnIdleThreadAreReclaimed) {
  const bool reclaimable = xalloc::os::process_wide_barrier();
  std::atomic<int> phase{0};
  xalloc::Heap* idle = nullptr;
  std::thread owner([&] {
    for (int round = 0; round < 2; ++round) {
      std::vector<void*> blocks = fill_three_slabs();
      for (void* p : blocks) xalloc_free(p);
      idle = xalloc::t_heap;
      phase.store(2 * round + 1);
      while (phase.load() != 2 * round + 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto wait_for = [&](int ready) {
    while (phase.load() != ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };

  wait_for(1);
  const uint32_t kept = idle->spares.slices.load();
  ASSERT_GE(kept, 1u);
  // This thread's slow paths run the periodic work: 64-byte blocks, a
  // class of their own.
  auto start = std::chrono::steady_clock::now();
  std::vector<void*> churn(20000);
  while (idle->spares.slices.load() != 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    for (void*& p : churn) p = xalloc_malloc(64);
    for (void* p : churn) xalloc_free(p);
  }
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(idle->spares.slices.load(), reclaimable ? 0u : kept) << "spares after " << waited << " s";
  if (reclaimable) {
    EXPECT_EQ(idle->spares.classes.load(), 0u);
  }
  EXPECT_GE(waited, 0.45) << "spares were taken from their thread before a purge delay";
  phase.store(2);

  wait_for(3);
  ASSERT_GE(idle->spares.slices.load(), 1u) << "the thread did not keep spares again after the pass took them";
  const uint32_t kept_again = idle->spares.slices.load();
  xalloc_trim(0);
  EXPECT_EQ(idle->spares.slices.load(), reclaimable ? 0u : kept_again) << "malloc_trim and another thread's spares";
  phase.store(4);
  owner.join();
}

// A thread whose only blocks are large has no heap until its first large
// block: it gets a heap then (the home of its blocks' spans), and keeps the
// span it frees as any thread does.
TEST(KeptSpans, ThreadWithOnlyLargeBlocksKeepsItsSpans) {
  void* first = nullptr;
  void* second = nullptr;
  bool had_heap = true;
  bool kept = false;
  std::thread t([&] {
    had_heap = xalloc::t_heap != &xalloc::g_empty_heap;
    first = xalloc_malloc(256 * 1024);
    xalloc_free(first);
    kept = span_kept(first);
    second = xalloc_malloc(256 * 1024);
    xalloc_free(second);
  });
  t.join();
  EXPECT_FALSE(had_heap) << "the thread had a heap before its first block";
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(kept) << "a thread without a small block did not keep its freed span";
  EXPECT_EQ(second, first);
}

// Kept spans count as free in the statistics, whatever size the block that
// takes one next has; trim gives them back to the span allocator.
TEST(KeptSpans, StatisticsAndTrim) {
  void* small = xalloc_malloc(10);
  xalloc_trim(0);
  xalloc_stats_t before = stats();
  void* a = xalloc_malloc(200 * 1024);
  void* b = xalloc_malloc(100 * 1024);
  EXPECT_EQ(stats().large_in_use, before.large_in_use + 300 * 1024);
  xalloc_free(a);
  xalloc_free(b);
  xalloc_stats_t freed = stats();
  EXPECT_EQ(freed.large_in_use, before.large_in_use) << "kept spans still counted as in use";
  EXPECT_EQ(freed.in_use, before.in_use);
  void* c = xalloc_malloc(120 * 1024);  // b's two slices, 20 KiB more bytes
  EXPECT_EQ(c, b);
  EXPECT_EQ(stats().large_in_use, before.large_in_use + 120 * 1024);
  xalloc_free(c);
  EXPECT_EQ(stats().large_in_use, before.large_in_use);
  // Trim returns the kept spans (the span allocator merges them), and the
  // counters do not move.
  EXPECT_GE(xalloc_trim(0), 0);
  EXPECT_EQ(stats().large_in_use, before.large_in_use);
  void* whole = xalloc_malloc(7 * kSlice);  // seven slices: no kept span of that length
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(stats().large_in_use, before.large_in_use + 7 * kSlice);
  xalloc_free(whole);
  xalloc_trim(0);
  EXPECT_EQ(stats().large_in_use, before.large_in_use);
  xalloc_free(small);
}

// A heap keeps kKeptSliceBudget slices of spans at most: of three freed
// blocks of a little less than half of that, the third goes back to the
// span allocator.
TEST(KeptSpans, BudgetBoundsWhatAHeapKeeps) {
  constexpr size_t kSize = (xalloc::kKeptSliceBudget / 2 - 1) * kSlice;
  static_assert(xalloc::kKeptSpanSlots >= 3, "the slots, not the budget, would bound the test");
  void* small = xalloc_malloc(10);
  xalloc_trim(0);
  xalloc_stats_t before = stats();
  void* blocks[3];
  for (void*& p : blocks) {
    p = xalloc_malloc(kSize);
    ASSERT_NE(p, nullptr);
    xtest::touch_pages(p, kSize, 1);
  }
  for (void* p : blocks) xalloc_free(p);
  // The last two freed come back (newest first); the first went back to
  // make room for the third.
  EXPECT_FALSE(span_kept(blocks[0]));
  void* again[3];
  for (void*& p : again) p = xalloc_malloc(kSize);
  EXPECT_EQ(again[0], blocks[2]);
  EXPECT_EQ(again[1], blocks[1]);
  for (void* p : again) xalloc_free(p);
  xalloc_trim(0);
  EXPECT_EQ(stats().large_in_use, before.large_in_use);
  xalloc_free(small);
}

// Regression test (tests/KNOWN_BUGS.md #5): in_use used to count whole slabs
// owned by thread heaps, not live blocks.
TEST(Stats, InUseCountsLiveBlocksRoundedToTheirClass) {
  // xalloc.h: in_use is "bytes in live blocks (rounded to their class)".
  void* warm = xalloc_malloc(5000);  // the class's first slab
  xalloc_stats_t before = stats();
  void* p = xalloc_malloc(5000);
  xalloc_stats_t with_block = stats();
  EXPECT_EQ(with_block.in_use - before.in_use, xalloc_usable_size(p))
      << "one 5000-byte block (class " << xalloc_usable_size(p) << ") changed in_use by "
      << static_cast<long long>(with_block.in_use - before.in_use);
  xalloc_free(p);
  xalloc_free(warm);
  xalloc_stats_t after = stats();
  EXPECT_LE(after.in_use, before.in_use) << "in_use did not go down when the blocks were freed";
}

TEST(Stats, SegmentsAndMappedAgree) {
  std::vector<void*> blocks;
  for (int i = 0; i < 40; ++i) blocks.push_back(xalloc_malloc(2 * kMiB));
  xalloc_stats_t s = stats();
  EXPECT_GE(s.mapped, s.segments * 32 * kMiB / 2);
  EXPECT_GE(s.mapped, 80 * kMiB);
  EXPECT_GE(s.segments, 3u);
  for (void* p : blocks) xalloc_free(p);
}

TEST(Stats, PrintWritesTwoLines) {
  auto r = xtest::run_in_child([] {
    void* p = xalloc_malloc(100);
    xalloc_stats_print();
    xalloc_free(p);
    return 0;
  });
  ASSERT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: stats: mapped ")) << r.err;
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: stats: ")) << r.err;
  bool segments_line = false;
  for (const std::string& l : xtest::split_lines(r.err)) {
    unsigned long segments = 0, heaps = 0, remote = 0;
    if (std::sscanf(l.c_str(), "xalloc: stats: %lu segments, %lu thread heaps, %lu remote frees", &segments, &heaps,
                    &remote) == 3) {
      segments_line = true;
      EXPECT_GE(segments, 1u);
      EXPECT_GE(heaps, 1u);
    }
  }
  EXPECT_TRUE(segments_line) << r.err;
}

// --- the slab pool (src/slab_pool.h) -------------------------------------------

namespace {

// `bytes` of blocks of `size`, each filled with its index's low byte.
std::vector<void*> filled_blocks(size_t size, size_t bytes) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < bytes / size; ++i) {
    void* p = xalloc_malloc(size);
    if (p == nullptr) break;
    memset(p, static_cast<int>(i & 0xff), size);
    blocks.push_back(p);
  }
  return blocks;
}

bool blocks_intact(const std::vector<void*>& blocks, size_t size) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto* bytes = static_cast<unsigned char*>(blocks[i]);
    for (size_t j = 0; j < size; ++j) {
      if (bytes[j] != (i & 0xff)) return false;
    }
  }
  return true;
}

void free_all(const std::vector<void*>& blocks) {
  for (void* p : blocks) xalloc_free(p);
}

}  // namespace

TEST(SlabPool, KeepsEmptySlabsUpToItsBoundAndTrimEmptiesIt) {
  xalloc_trim(0);
  ASSERT_EQ(stats().pooled, 0u);
  std::vector<void*> blocks = filled_blocks(256, 20 * kMiB);
  ASSERT_EQ(blocks.size(), 20 * kMiB / 256);
  free_all(blocks);
  size_t pooled = stats().pooled;
  EXPECT_GT(pooled, 0u) << "20 MiB of slabs emptied and none pooled";
  EXPECT_LE(pooled, 4 * kMiB);
  xalloc_trim(0);
  EXPECT_EQ(stats().pooled, 0u) << "trim left pooled slabs";
}

TEST(SlabPool, PooledSlabsBecomeSlabsOfAnotherClass) {
  xalloc_trim(0);
  free_all(filled_blocks(256, 8 * kMiB));
  size_t pooled = stats().pooled;
  ASSERT_GE(pooled, 2 * kMiB);
  // 2 MiB of another class of one-slice slabs takes pooled slabs first.
  std::vector<void*> blocks = filled_blocks(96, 2 * kMiB);
  EXPECT_LE(stats().pooled + kMiB, pooled) << "new slabs were cut while the pool held slabs of their length";
  EXPECT_TRUE(blocks_intact(blocks, 96));
  free_all(blocks);
  xalloc_trim(0);
}

TEST(SlabPool, KeepsSlabsOfTheirClassWithTheirFreeListsIntact) {
  xalloc_trim(0);
  std::thread([] { free_all(filled_blocks(512, 8 * kMiB)); }).join();
  unsigned cls = xalloc::class_of(512);
  xalloc::Page* page = xalloc::slab_pool::take(cls);
  ASSERT_NE(page, nullptr) << "no slab of the 512-byte class pooled";
  EXPECT_EQ(page->owner, nullptr);
  EXPECT_EQ(page->size_class, cls);
  size_t listed = 0;
  for (xalloc::FreeBlock* b = page->free; b != nullptr && listed <= page->carved(); b = xalloc::next_free(page, b))
    ++listed;
  EXPECT_EQ(listed, page->carved()) << "a pooled slab must list every block it carved";
  EXPECT_GT(listed, 0u);
  EXPECT_TRUE(xalloc::slab_pool::put(page));
  xalloc_trim(0);
}

// Threads that each fill and empty slabs of several classes of one slab
// length, round after round, hand slabs to the pool and take them back
// under its per-class locks (and make pooled slabs of one class slabs of
// another) while another thread trims. A slab listed twice, or taken by
// two heaps at once, would hand one block to two threads: each thread
// fills its blocks with a pattern of its own and checks it before freeing.
TEST(SlabPool, ThreadsChurningSlabsThroughThePoolLoseNoneAndShareNone) {
  constexpr unsigned kThreads = 4;
  constexpr unsigned kRounds = 12;
  constexpr size_t kSizes[] = {96, 256, 512, 1024};  // one-slice slabs
  xalloc_trim(0);
  std::atomic<unsigned> running{kThreads};
  std::atomic<bool> intact{true};
  std::atomic<size_t> most_pooled{0};
  auto note_pooled = [&most_pooled] {
    size_t pooled = xalloc::slab_pool::bytes();
    size_t most = most_pooled.load();
    while (pooled > most && !most_pooled.compare_exchange_weak(most, pooled)) {
    }
    return pooled;
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (unsigned round = 0; round < kRounds; ++round) {
        size_t size = kSizes[(t + round) % std::size(kSizes)];
        std::vector<void*> blocks;
        for (size_t i = 0; i < 1536 * 1024 / size; ++i) {
          void* p = xalloc_malloc(size);
          if (p == nullptr) break;
          memset(p, static_cast<int>((t * 37 + i) & 0xff), size);
          blocks.push_back(p);
        }
        for (size_t i = 0; i < blocks.size(); ++i) {
          auto* bytes = static_cast<unsigned char*>(blocks[i]);
          if (bytes[0] != ((t * 37 + i) & 0xff) || bytes[size - 1] != ((t * 37 + i) & 0xff)) intact = false;
        }
        free_all(blocks);
        note_pooled();  // (the other threads may take these slabs before the loop below looks)
      }
      running.fetch_sub(1);
    });
  }
  // The pool never holds more than its limit, trims and all.
  for (unsigned look = 0; running.load() != 0; ++look) {
    EXPECT_LE(note_pooled(), xalloc::slab_pool::kPoolBytes);
    if (look % 64 == 63) xalloc_trim(0);
    std::this_thread::yield();
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_TRUE(intact) << "a block was handed to two threads at once";
  EXPECT_GT(most_pooled.load(), 0u) << "no slab went through the pool: the test tests nothing";
  xalloc_trim(0);
  EXPECT_EQ(xalloc::slab_pool::bytes(), 0u) << "trim left pooled slabs";
}

TEST(SlabPool, SlabsEmptiedByOneThreadServeAnother) {
  xalloc_trim(0);
  std::thread([] { free_all(filled_blocks(512, 8 * kMiB)); }).join();
  size_t pooled = stats().pooled;
  ASSERT_GT(pooled, 0u);
  std::thread([&] {
    std::vector<void*> blocks = filled_blocks(512, 8 * kMiB);
    EXPECT_LT(stats().pooled, pooled) << "another thread's pooled slabs of the class were not taken";
    EXPECT_TRUE(blocks_intact(blocks, 512));
    free_all(blocks);
  }).join();
  xalloc_trim(0);
}

// Many live threads share one budget: each heap keeps its share of
// kKeptSlicesAllHeaps once more than 16 threads live, so a pool of idle
// threads that each freed a few large blocks holds 32 MiB of spans at most,
// not 2 MiB apiece.
TEST(KeptSpans, ManyLiveThreadsShareOneBudget) {
  constexpr unsigned kThreads = 48;
  constexpr size_t kSize = 4 * kSlice - 4096;  // four slices
  static_assert(kThreads * 4 * 4 > xalloc::kKeptSlicesAllHeaps, "without the shared budget the test would pass");
  std::atomic<unsigned> started{0}, done{0};
  std::atomic<bool> finish{false};
  std::vector<xalloc::Heap*> heaps(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      void* first = xalloc_malloc(16);  // a heap now, counted live before anyone keeps
      started++;
      while (started.load() != kThreads) std::this_thread::yield();
      void* blocks[4];
      for (void*& p : blocks) {
        p = xalloc_malloc(kSize);
        if (p != nullptr) std::memset(p, 1, 4096);
      }
      for (void* p : blocks) xalloc_free(p);
      heaps[t] = xalloc::t_heap;
      done++;
      while (!finish.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      xalloc_free(first);
    });
  }
  while (done.load() != kThreads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  uint32_t kept = 0, most = 0;
  for (xalloc::Heap* heap : heaps) {
    kept += heap->kept.slices.load();
    most = std::max(most, heap->kept.slices.load());
  }
  finish = true;
  for (auto& t : threads) t.join();
  EXPECT_LE(kept, xalloc::kKeptSlicesAllHeaps) << "the threads' heaps kept " << kept << " slices";
  EXPECT_LE(most, xalloc::kKeptSlicesAllHeaps / kThreads);
  EXPECT_GT(kept, 0u) << "no heap kept its spans";
}

// A program that drops its memory and builds it up again round after round
// is a cycle, and keeps it, even when its frees are interleaved with a few
// takes - threads of a pool made anew for every batch exit one by one
// while the others still allocate. Judged against those few takes alone,
// each run of frees looked like a shrink, and every round was purged.
TEST(Purge, CycleWithTakesBetweenItsFreesKeepsItsMemory) {
  if (!xtest::rerun_in_fresh_process()) return;  // see "Purge tests" above
  using Clock = std::chrono::steady_clock;
  constexpr size_t kBlock = kUnkeptLarge;
  constexpr int kBlocks = static_cast<int>(128 * kMiB / kBlock);
  constexpr int kFreesPerTake = 18;  // past the 16 spans freed with none taken that look like shrinking
  size_t purged_before = 0;
  auto slowest_round = Clock::duration::zero();
  for (int round = 0; round < 5; ++round) {
    if (round == 2) purged_before = stats().purged;  // the cycle is established
    auto start = Clock::now();
    std::vector<void*> blocks;
    for (int i = 0; i < kBlocks; ++i) {
      void* p = xalloc_malloc(kBlock);
      ASSERT_NE(p, nullptr);
      xtest::touch_pages(p, kBlock, 1);
      blocks.push_back(p);
    }
    std::vector<void*> taken;
    for (int i = 0; i < kBlocks; ++i) {
      xalloc_free(blocks[i]);
      if (i % kFreesPerTake == kFreesPerTake - 1) taken.push_back(xalloc_malloc(kBlock));
    }
    for (void* p : taken) xalloc_free(p);
    slowest_round = std::max(slowest_round, Clock::now() - start);
  }
  size_t purged = stats().purged - purged_before;
  // Rounds further apart than the purge delay (500 ms) are no cycle.
  if (slowest_round > std::chrono::milliseconds(400)) GTEST_SKIP() << "a round took longer than the purge delay allows";
  EXPECT_LT(purged, 16 * kMiB) << "a cycle's memory purged at every round";
  std::printf("purged in the last three rounds of 128 MiB: %zu KiB\n", purged >> 10);
}
