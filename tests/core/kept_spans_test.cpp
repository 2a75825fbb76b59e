// Kept spans (heap.h, large.cpp): a thread heap keeps the spans of the
// large blocks its thread frees, and gets back those other threads free, for
// its next large blocks; within a budget, and not past the purge delay once
// its thread goes idle.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/segment.h"
#include "core_test_util.h"
#include "frontend/heap.h"
#include "meta/page.h"
#include "platform/os.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::kMiB;
using xtest::kSlice;
using xtest::stats;

namespace {

// Whether the block at `p`, freed, sits in a span its heap keeps: still a
// large span (with no usable bytes), not a free span of the span allocator.
bool span_kept(void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  const xalloc::Page* span = xalloc::page_of(xalloc::segment_of(address), address);
  return span->kind() == xalloc::PageKind::kLarge && span->large_usable == 0;
}

}  // namespace

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
