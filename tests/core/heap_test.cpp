// Thread heaps (frontend/heap.h): a new heap is young and serves power-of-two
// classes, and grows up; the direct table points at the current slabs; the
// heap swaps a used-up current slab for a partial one; spare slabs are kept
// up to a bound and go back when their class is no longer used or their
// thread is idle; current slabs of classes no longer used leave the heap.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "backend/segment.h"
#include "core_test_util.h"
#include "frontend/heap.h"
#include "frontend/thread_registry.h"
#include "meta/page.h"
#include "meta/size_classes.h"
#include "platform/os.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::kSlice;

namespace {

// Blocks of one class for `heap`'s thread: enough for three 64 KiB slabs
// of 48-byte blocks, so that freeing them all empties the first two, which
// the heap keeps as spares (the third is the class's current slab).
std::vector<void*> fill_three_slabs() {
  std::vector<void*> blocks(3000);
  for (void*& p : blocks) p = xalloc_malloc(48);
  return blocks;
}

// The usable size of a fresh block of `size` bytes, freed at once.
size_t usable_size_of_new_block(size_t size) {
  void* p = xalloc_malloc(size);
  size_t usable = xalloc_usable_size(p);
  xalloc_free(p);
  return usable;
}

}  // namespace

// --- young heaps and the direct table -------------------------------------------
//
// (In a fresh process: a thread adopts the heap of an exited thread when
// there is one, and such a heap has grown up long ago.)

// A heap made for a new thread is young: each small size is served from the
// smallest power-of-two class that holds it, so a thread that allocates a
// little of many sizes touches a few slabs, not one per class.
TEST(Heap, NewHeapIsYoungAndServesPowerOfTwoClasses) {
  if (!xtest::rerun_in_fresh_process()) return;
  std::thread([] {
    EXPECT_EQ(xalloc::t_heap, &xalloc::g_empty_heap) << "a thread that has not allocated has a heap";
    void* first = xalloc_malloc(48);
    xalloc::Heap* heap = xalloc::t_heap;
    ASSERT_NE(heap, &xalloc::g_empty_heap) << "the first small block gave the thread no heap";
    EXPECT_TRUE(heap->young);
    EXPECT_EQ(xalloc_usable_size(first), 64u);
    const std::pair<size_t, size_t> young_sizes[] = {
        {1, 16},     {17, 32},     {48, 64},     {100, 128},   {129, 256},   {300, 512},  {600, 1024},
        {1000, 1024}, {1025, 2048}, {1500, 2048}, {2049, 4096}, {4097, 8192}, {8192, 8192}};
    for (auto [size, served] : young_sizes) EXPECT_EQ(usable_size_of_new_block(size), served) << "size " << size;
    EXPECT_TRUE(heap->young) << "a few blocks made the heap grow up";
    // Past kYoungMaxSize each class is its own.
    EXPECT_EQ(usable_size_of_new_block(9000), 9216u);
    // Zeroed and aligned blocks of those sizes may come from the
    // power-of-two slabs too: a larger block, aligned to its own size.
    void* zeroed = xalloc_calloc(1, 1500);
    ASSERT_NE(zeroed, nullptr);
    EXPECT_GE(xalloc_usable_size(zeroed), 1500u);
    const char* bytes = static_cast<const char*>(zeroed);
    EXPECT_TRUE(std::all_of(bytes, bytes + 1500, [](char c) { return c == 0; }));
    void* aligned = xalloc_aligned_alloc(512, 1536);
    ASSERT_NE(aligned, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned) % 512, 0u);
    EXPECT_GE(xalloc_usable_size(aligned), 1536u);
    EXPECT_TRUE(heap->young);
    xalloc_free(aligned);
    xalloc_free(zeroed);
    xalloc_free(first);
  }).join();
}

// A young heap's power-of-two slab above kMaxSmallSize serves the classes
// below it the same way: when it runs out the heap grows up, and each of
// those sizes has its own class again.
TEST(Heap, YoungHeapGrowsUpWhenItsMediumSlabRunsOut) {
  if (!xtest::rerun_in_fresh_process()) return;
  std::thread([] {
    std::vector<void*> blocks;
    blocks.push_back(xalloc_malloc(1500));
    xalloc::Heap* heap = xalloc::t_heap;
    ASSERT_TRUE(heap->young);
    const uint32_t capacity = xalloc::kClassInfo[xalloc::class_of(2048)].capacity;
    while (heap->young && blocks.size() <= 4u * capacity) blocks.push_back(xalloc_malloc(1100));
    EXPECT_FALSE(heap->young) << blocks.size() << " blocks of 1100 bytes and still young";
    EXPECT_EQ(blocks.size(), capacity + 1u) << "grew up before or after its first slab ran out";
    EXPECT_EQ(xalloc_usable_size(blocks.front()), 2048u);
    EXPECT_EQ(usable_size_of_new_block(1500), 1536u) << "a grown-up heap serves 1500 bytes from the 1536-byte class";
    EXPECT_EQ(usable_size_of_new_block(1100), 1152u);
    EXPECT_EQ(usable_size_of_new_block(3000), 3072u);
    for (void* p : blocks) xalloc_free(p);
  }).join();
}

// A young heap grows up when one of its power-of-two slabs runs out: from
// then on each small size has its own class again. Blocks it served before
// keep their class.
TEST(Heap, YoungHeapGrowsUpWhenOneOfItsSlabsRunsOut) {
  if (!xtest::rerun_in_fresh_process()) return;
  std::thread([] {
    std::vector<void*> blocks;
    blocks.push_back(xalloc_malloc(48));
    xalloc::Heap* heap = xalloc::t_heap;
    ASSERT_TRUE(heap->young);
    const uint32_t capacity = xalloc::kClassInfo[xalloc::class_of(64)].capacity;
    while (heap->young && blocks.size() <= 4u * capacity) blocks.push_back(xalloc_malloc(48));
    EXPECT_FALSE(heap->young) << blocks.size() << " blocks of 48 bytes and still young";
    // The first slab of 64-byte blocks held `capacity`; the block after
    // them found it used up.
    EXPECT_EQ(blocks.size(), capacity + 1u) << "grew up before or after its first slab ran out";
    EXPECT_EQ(xalloc_usable_size(blocks.front()), 64u);
    EXPECT_EQ(xalloc_usable_size(blocks.back()), 64u) << "the block that found the slab used up";
    EXPECT_EQ(usable_size_of_new_block(48), 48u) << "a grown-up heap serves 48 bytes from the 64-byte class";
    EXPECT_EQ(usable_size_of_new_block(100), 112u);
    for (void* p : blocks) xalloc_free(p);
  }).join();
}

// The fast path allocates from the slab the direct table points at: the
// class's current slab, owned by the thread's heap, whose free list's head is
// the next block.
TEST(Heap, DirectTablePointsAtTheCurrentSlab) {
  if (!xtest::rerun_in_fresh_process()) return;
  std::thread([] {
    for (size_t size : {size_t{100}, size_t{700}}) {
      SCOPED_TRACE(size);
      void* p = xalloc_malloc(size);
      xalloc::Heap* heap = xalloc::t_heap;
      const size_t usable = xalloc_usable_size(p);  // the class that served it, young or not
      const unsigned cls = xalloc::class_of(usable);
      xalloc::Page* page = xalloc::lookup_page(reinterpret_cast<uintptr_t>(p));
      ASSERT_NE(page, nullptr);
      EXPECT_EQ(page->kind(), xalloc::PageKind::kSlab);
      EXPECT_EQ(page->size_class, cls);
      EXPECT_EQ(page->owner, heap);
      EXPECT_EQ(page->state(), xalloc::SlabState::kCurrent);
      EXPECT_EQ(heap->current[cls], page);
      EXPECT_EQ(heap->direct[xalloc::granule_of(size)], page) << "the size's entry";
      EXPECT_EQ(heap->direct[xalloc::granule_of(usable)], page) << "the class's own size's entry";
      ASSERT_NE(page->free, nullptr);
      void* next = page->free;
      void* q = xalloc_malloc(size);
      EXPECT_EQ(q, next) << "the next block did not come from the head of the current slab's free list";
      xalloc_free(q);
      xalloc_free(p);
    }
  }).join();
}

// --- carving -----------------------------------------------------------------------

namespace {

// Allocates blocks of 48 bytes on the calling thread until its heap has
// grown up (a young heap populates only what each carve writes); returns
// them, for the caller to free.
std::vector<void*> grow_up_the_heap() {
  std::vector<void*> blocks;
  blocks.push_back(xalloc_malloc(48));
  while (xalloc::t_heap->young && blocks.size() < 10000) blocks.push_back(xalloc_malloc(48));
  return blocks;
}

}  // namespace

// A grown heap's fresh slab of small blocks is made resident ahead of its
// carving, in one call per step (heap_slabs.cpp: populate_ahead), by at
// most what was carved and at most four pages beyond: 80 blocks of 256
// bytes (five pages carved; eight with secure mode's four-page carves)
// leave eight pages resident, the whole slab sixteen.
TEST(Heap, FreshSlabOfAGrownHeapIsResidentAheadOfItsCarvingByAtMostWhatWasCarved) {
  if (!xtest::rerun_in_fresh_process()) return;
  std::thread([] {
    std::vector<void*> blocks = grow_up_the_heap();
    ASSERT_FALSE(xalloc::t_heap->young);
    constexpr size_t kSize = 256;
    const size_t capacity = xalloc::kClassInfo[xalloc::class_of(kSize)].capacity;
    ASSERT_EQ(capacity * kSize, kSlice) << "the test expects a one-slice slab";
    std::vector<void*> slab_blocks;
    auto resident_pages = [&] {
      uintptr_t base = reinterpret_cast<uintptr_t>(slab_blocks.front()) & ~(kSlice - 1);
      uint8_t residency[kSlice / xalloc::kOsPageSize];
      EXPECT_TRUE(xalloc::os::page_residency(reinterpret_cast<void*>(base), kSlice, residency));
      size_t pages = 0;
      for (uint8_t r : residency) pages += r & 1;
      return pages;
    };
    for (size_t i = 0; i < 80; ++i) slab_blocks.push_back(xalloc_malloc(kSize));
    uintptr_t first = reinterpret_cast<uintptr_t>(slab_blocks.front()) & ~(kSlice - 1);
    for (void* p : slab_blocks) ASSERT_EQ(reinterpret_cast<uintptr_t>(p) & ~(kSlice - 1), first) << "not one slab";
    EXPECT_EQ(resident_pages(), 8u);
    while (slab_blocks.size() < capacity) slab_blocks.push_back(xalloc_malloc(kSize));
    EXPECT_EQ(resident_pages(), kSlice / xalloc::kOsPageSize);
    for (void* p : slab_blocks) xalloc_free(p);
    for (void* p : blocks) xalloc_free(p);
  }).join();
}

// Blocks of up to two pages are populated ahead as well: a carve writes a
// header into nearly every page (a block of 4608 bytes starts in eight of
// every nine), and a program fills the rest. Five blocks of 4608 bytes
// (six pages reached) leave eight pages resident, where the headers alone
// would fault in five.
TEST(Heap, FreshSlabOfTwoPageBlocksIsResidentAheadOfItsCarving) {
  if (!xtest::rerun_in_fresh_process()) return;
  std::thread([] {
    std::vector<void*> blocks = grow_up_the_heap();
    ASSERT_FALSE(xalloc::t_heap->young);
    constexpr size_t kSize = 4608;
    ASSERT_EQ(xalloc::kClassInfo[xalloc::class_of(kSize)].size, kSize);
    std::vector<void*> slab_blocks;
    for (size_t i = 0; i < 5; ++i) slab_blocks.push_back(xalloc_malloc(kSize));
    uintptr_t base = reinterpret_cast<uintptr_t>(slab_blocks.front());
    ASSERT_EQ(base & (kSlice - 1), 0u) << "not a fresh slab";
    for (size_t i = 0; i < 5; ++i) ASSERT_EQ(reinterpret_cast<uintptr_t>(slab_blocks[i]), base + i * kSize);
    uint8_t residency[kSlice / xalloc::kOsPageSize];
    ASSERT_TRUE(xalloc::os::page_residency(reinterpret_cast<void*>(base), kSlice, residency));
    size_t pages = 0;
    for (uint8_t r : residency) pages += r & 1;
    EXPECT_EQ(pages, 8u);
    for (void* p : slab_blocks) xalloc_free(p);
    for (void* p : blocks) xalloc_free(p);
  }).join();
}

// Blocks over two pages are populated only while their thread writes them
// through: judged by the middle page of the block carved before, which is
// never populated. After a 16 KiB block written in full, the next is
// resident but for its middle page (three of four pages); after one
// tagged at both ends only, the next has just the page its header is in.
TEST(Heap, FreshBlocksOverTwoPagesArePopulatedWhileTheirThreadWritesThemThrough) {
  if (!xtest::rerun_in_fresh_process()) return;
  std::thread([] {
    std::vector<void*> blocks = grow_up_the_heap();
    ASSERT_FALSE(xalloc::t_heap->young);
    constexpr size_t kSize = 16384;
    constexpr size_t kPages = kSize / xalloc::kOsPageSize;
    ASSERT_EQ(xalloc::kClassInfo[xalloc::class_of(kSize)].size, kSize);
    auto resident_pages = [](void* block) {
      uint8_t residency[kPages];
      EXPECT_TRUE(xalloc::os::page_residency(block, kSize, residency));
      size_t pages = 0;
      for (uint8_t r : residency) pages += r & 1;
      return pages;
    };
    auto* written = static_cast<char*>(xalloc_malloc(kSize));
    ASSERT_EQ(reinterpret_cast<uintptr_t>(written) & (kSlice - 1), 0u) << "not a fresh slab";
    std::memset(written, 1, kSize);
    auto* populated = static_cast<char*>(xalloc_malloc(kSize));
    ASSERT_EQ(populated, written + kSize);
    EXPECT_EQ(resident_pages(populated), kPages - 1);
    populated[0] = populated[kSize - 1] = 2;  // its middle page stays untouched
    auto* after_tagged = static_cast<char*>(xalloc_malloc(kSize));
    ASSERT_EQ(after_tagged, populated + kSize);
    EXPECT_EQ(resident_pages(after_tagged), 1u);
    for (void* p : {static_cast<void*>(written), static_cast<void*>(populated), static_cast<void*>(after_tagged)})
      xalloc_free(p);
    for (void* p : blocks) xalloc_free(p);
  }).join();
}

// --- current slabs -----------------------------------------------------------------

TEST(Basic, RandomReplacementKeepsExactCountsAcrossSlabs) {
  // Blocks of one class replaced at random spread over several slabs, whose
  // current one runs out every few allocations and is swapped for a partial
  // one (heap_switch_slab). Every block keeps its contents, the bytes in use
  // stay exact through thousands of switches, and freeing all gives them back.
  for (size_t size : {size_t{48}, size_t{3072}}) {
    SCOPED_TRACE(size);
    const size_t live_count = size < 1024 ? 6000 : 200;  // several slabs of the class
    xalloc_stats_t before;
    xalloc_get_stats(&before);
    std::vector<std::pair<uint8_t*, uint64_t>> live(live_count);
    for (size_t i = 0; i < live_count; ++i) {
      live[i] = {static_cast<uint8_t*>(xalloc_malloc(size)), i};
      ASSERT_NE(live[i].first, nullptr);
      xtest::fill_pattern(live[i].first, size, i);
    }
    xtest::Rng rng(7);
    const size_t rounds = xtest::scaled(200000);
    for (size_t r = 0; r < rounds; ++r) {
      auto& [p, seed] = live[rng.below(live_count)];
      ASSERT_EQ(xtest::check_pattern(p, size, seed), SIZE_MAX) << "round " << r;
      xalloc_free(p);
      p = static_cast<uint8_t*>(xalloc_malloc(size));
      ASSERT_NE(p, nullptr);
      seed = live_count + r;
      xtest::fill_pattern(p, size, seed);
    }
    // In use counts whole blocks: the first ones may come from a larger
    // class while the thread's heap is young (docs/design.md).
    size_t live_bytes = 0;
    for (auto& [p, seed] : live) live_bytes += xalloc_usable_size(p);
    xalloc_stats_t during;
    xalloc_get_stats(&during);
    EXPECT_EQ(during.in_use - before.in_use, live_bytes);
    for (auto& [p, seed] : live) {
      ASSERT_EQ(xtest::check_pattern(p, size, seed), SIZE_MAX);
      xalloc_free(p);
    }
    xalloc_stats_t after;
    xalloc_get_stats(&after);
    EXPECT_EQ(after.in_use, before.in_use);
  }
}

// --- spare slabs ---------------------------------------------------------------------

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
    // Taking the slabs back earns no room while the thread has its whole bound.
    for (void*& p : blocks) p = xalloc_malloc(kSize);
    for (void* p : blocks) xalloc_free(p);
    EXPECT_EQ(heap->spares.slices.load(), 16u) << "a thread among few kept more than its bound";
    xalloc_trim(0);
    EXPECT_EQ(heap->spares.slices.load(), 0u);
  }).join();
}

// With many threads alive, each keeps its share of 32 MiB of spares (but
// four slices at least); one that takes back soon the slabs it let go
// earns room back up to 16 slices.
TEST(SpareSlabs, ManyThreadsKeepTheirShareOrWhatTheyReuse) {
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
    for (int round = 0; round < 2; ++round) {
      for (void*& p : blocks) p = xalloc_malloc(20 * 1024);
      for (void* p : blocks) xalloc_free(p);
      EXPECT_EQ(heap->spares.slices.load(), 16u) << "round " << round << ": the room taken back was not kept";
    }
    xalloc_trim(0);
    EXPECT_EQ(heap->spares.slices.load(), 0u);
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

// A class's spares go back once the class has taken no spare for a while
// (kSpareLifetime of the heap's slow paths), while the thread goes on with
// other classes; the class in use keeps its own.
TEST(SpareSlabs, SparesOfAClassNoLongerUsedGoBack) {
  std::thread([] {
    std::vector<void*> blocks = fill_three_slabs();
    xalloc::Heap* heap = xalloc::t_heap;
    for (void* p : blocks) xalloc_free(p);
    const unsigned unused = xalloc::class_of(48);
    const unsigned in_use = xalloc::class_of(256);
    ASSERT_NE(heap->spares.slab[unused], nullptr) << "no emptied slab of 48-byte blocks was kept";
    ASSERT_NE(heap->spares.classes.load() & (uint64_t{1} << unused), 0u);
    const uint32_t start = heap->slow_calls;
    std::vector<void*> others(1000);  // four slabs of 256-byte blocks
    while (heap->slow_calls - start < 1024) {
      for (void*& p : others) p = xalloc_malloc(256);
      for (void* p : others) xalloc_free(p);
    }
    EXPECT_EQ(heap->spares.slab[unused], nullptr) << "spares of a class unused for 1024 slow paths stayed";
    EXPECT_EQ(heap->spares.classes.load() & (uint64_t{1} << unused), 0u);
    EXPECT_NE(heap->spares.slab[in_use], nullptr) << "the class in use lost its spares";
    xalloc_trim(0);
  }).join();
}
