// Thread heaps (frontend/heap.h): spare slabs are kept up to a bound and go
// back when their thread is idle; current slabs of classes no longer used
// leave the heap.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

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

}  // namespace

// A slab whose last block comes back stays with its thread, free list and
// all, for the next refill of its class.
TEST(SpareSlabs, EmptiedSlabServesTheNextRefillOfItsClass) {
  std::thread([] {
    std::vector<void*> blocks = fill_three_slabs();
    xalloc::Heap* heap = xalloc::t_heap;
    for (void* p : blocks) xalloc_free(p);
    const uint32_t kept = heap->spare_slices.load();
    ASSERT_GE(kept, 1u) << "no emptied slab was kept";
    const xalloc::Page* spare = heap->spare[xalloc::class_of(48)];
    ASSERT_NE(spare, nullptr);
    const uintptr_t spare_start = spare->start;
    blocks = fill_three_slabs();
    EXPECT_LT(heap->spare_slices.load(), kept) << "the refills did not take a spare";
    bool reused = std::any_of(blocks.begin(), blocks.end(), [&](void* p) {
      auto address = reinterpret_cast<uintptr_t>(p);
      return address >= spare_start && address < spare_start + kSlice;
    });
    EXPECT_TRUE(reused) << "the spare slab was not used again";
    for (void* p : blocks) xalloc_free(p);
    ASSERT_GE(heap->spare_slices.load(), 1u);
    xalloc_trim(0);
    EXPECT_EQ(heap->spare_slices.load(), 0u) << "malloc_trim left the thread's spares";
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
    ASSERT_NE(heap->spare[cls], nullptr) << "no emptied slab of two slices was kept";
    EXPECT_EQ(heap->spare_slices.load(), 16u) << "the spares are not filled up to their bound";
    size_t listed = 0;
    for (const xalloc::Page* page = heap->spare[cls]; page != nullptr; page = page->next) listed += page->slice_count;
    EXPECT_EQ(listed, heap->spare_slices.load());
    xalloc_trim(0);
    EXPECT_EQ(heap->spare_slices.load(), 0u);
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
    EXPECT_EQ(heap->spare_slices.load(), 4u) << "a thread among many kept more than its share";
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
  const uint32_t kept = idle->spare_slices.load();
  ASSERT_GE(kept, 1u);
  // This thread's slow paths run the periodic work: 64-byte blocks, a
  // class of their own.
  auto start = std::chrono::steady_clock::now();
  std::vector<void*> churn(20000);
  while (idle->spare_slices.load() != 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    for (void*& p : churn) p = xalloc_malloc(64);
    for (void* p : churn) xalloc_free(p);
  }
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(idle->spare_slices.load(), reclaimable ? 0u : kept) << "spares after " << waited << " s";
  if (reclaimable) {
    EXPECT_EQ(idle->spare_classes.load(), 0u);
  }
  EXPECT_GE(waited, 0.45) << "spares were taken from their thread before a purge delay";
  phase.store(2);

  wait_for(3);
  ASSERT_GE(idle->spare_slices.load(), 1u) << "the thread did not keep spares again after the pass took them";
  const uint32_t kept_again = idle->spare_slices.load();
  xalloc_trim(0);
  EXPECT_EQ(idle->spare_slices.load(), reclaimable ? 0u : kept_again) << "malloc_trim and another thread's spares";
  phase.store(4);
  owner.join();
}
