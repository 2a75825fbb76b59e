// The counting build (platform/shared_count.h, -DXALLOC_COUNT_SHARED=ON):
// its counts on small runs whose shared writes are known. In other builds
// the API says that nothing is counted.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "core_test_util.h"
#include "platform/lock.h"
#include "platform/shared_count.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

namespace sc = xalloc::shared_count;

namespace {

#if defined(XALLOC_COUNT_SHARED)

constexpr uint64_t kRounds = 1000;

uint64_t count_at(sc::Site site) { return sc::read().by_site[static_cast<unsigned>(site)]; }
uint64_t lock_count() { return count_at(sc::Site::kTestLock); }
uint64_t atomic_count() { return count_at(sc::Site::kTestAtomic); }

template <typename Fn>
void on_new_thread(Fn fn) {
  std::thread(fn).join();
}

void take(xalloc::Mutex& lock, uint64_t times) {
  for (uint64_t i = 0; i < times; ++i) {
    lock.lock();
    lock.unlock();
  }
}

// The line table remembers every line written, for the whole process: each
// test writes lines no test wrote before.
struct alignas(64) Line {
  std::atomic<uint64_t> words[8];
};
Line g_lines[256];
std::atomic<unsigned> g_next_line{0};

Line& fresh_line() {
  unsigned n = g_next_line.fetch_add(1);
  if (n >= std::size(g_lines)) {
    ADD_FAILURE() << "out of fresh lines (--gtest_repeat?)";
    n = 0;
  }
  return g_lines[n];
}

void add(std::atomic<uint64_t>& word, uint64_t times) {
  for (uint64_t i = 0; i < times; ++i) {
    sc::atomic_rmw(sc::Site::kTestAtomic, &word);
    word.fetch_add(1, std::memory_order_relaxed);
  }
}

TEST(SharedCount, LockOfOneThreadIsNotCounted) {
  xalloc::Mutex lock{sc::Site::kTestLock};
  uint64_t before = lock_count();
  on_new_thread([&] { take(lock, kRounds); });
  take(lock, 0);
  EXPECT_EQ(lock_count() - before, 0u);
}

TEST(SharedCount, LockCountsFromItsSecondThreadOn) {
  xalloc::Mutex lock{sc::Site::kTestLock};
  uint64_t before = lock_count();
  on_new_thread([&] { take(lock, kRounds); });
  EXPECT_EQ(lock_count() - before, 0u);
  on_new_thread([&] { take(lock, kRounds); });
  EXPECT_EQ(lock_count() - before, kRounds);
  // Shared once, shared for good: its first owner's acquisitions count too.
  on_new_thread([&] { take(lock, kRounds); });
  EXPECT_EQ(lock_count() - before, 2 * kRounds);
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
  EXPECT_EQ(lock_count() - before, 2 * kRounds + 1);
}

TEST(SharedCount, LockTakenByTwoThreadsAtOnce) {
  xalloc::Mutex lock{sc::Site::kTestLock};
  uint64_t before = lock_count();
  std::thread a([&] { take(lock, kRounds); });
  std::thread b([&] { take(lock, kRounds); });
  a.join();
  b.join();
  // Every acquisition after the second thread's first one counts.
  uint64_t counted = lock_count() - before;
  EXPECT_GE(counted, kRounds);
  EXPECT_LE(counted, 2 * kRounds);
}

TEST(SharedCount, AtomicsOfOneThreadEachAreNotCounted) {
  Line& mine = fresh_line();
  Line& yours = fresh_line();
  uint64_t before = atomic_count();
  on_new_thread([&] { add(mine.words[0], kRounds); });
  on_new_thread([&] { add(yours.words[0], kRounds); });
  EXPECT_EQ(atomic_count() - before, 0u);
  EXPECT_EQ(mine.words[0].load(), kRounds);
}

TEST(SharedCount, AtomicLineCountsFromItsSecondWriterOn) {
  Line& line = fresh_line();
  uint64_t before = atomic_count();
  on_new_thread([&] { add(line.words[0], kRounds); });
  EXPECT_EQ(atomic_count() - before, 0u);
  // Another word of the same line: the line is what moves between cores.
  on_new_thread([&] { add(line.words[7], kRounds); });
  EXPECT_EQ(atomic_count() - before, kRounds);
  on_new_thread([&] { add(line.words[0], 1); });
  EXPECT_EQ(atomic_count() - before, kRounds + 1);
}

// Threads that write as one heap (a heap adopted by a new thread) are one
// writer; another heap is another.
TEST(SharedCount, TheWriterIsTheHeap) {
  Line& line = fresh_line();
  // Heaps are hundreds of lines long: stand-ins on lines of their own.
  const Line& heap_a = fresh_line();
  const Line& heap_b = fresh_line();
  uint64_t before = atomic_count();
  xalloc::Mutex lock{sc::Site::kTestLock};
  uint64_t locks_before = lock_count();
  auto as = [&](const void* heap) {
    sc::writes_as(heap);
    add(line.words[0], kRounds);
    take(lock, kRounds);
  };
  on_new_thread([&] { as(&heap_a); });
  on_new_thread([&] { as(&heap_a); });
  EXPECT_EQ(atomic_count() - before, 0u);
  EXPECT_EQ(lock_count() - locks_before, 0u);
  on_new_thread([&] { as(&heap_b); });
  EXPECT_EQ(atomic_count() - before, kRounds);
  EXPECT_EQ(lock_count() - locks_before, kRounds);
}

// The allocator's own figures: every malloc counted once, and blocks freed
// by another thread than their owner's are shared writes (its inbox).
TEST(SharedCount, AllocatorRun) {
  constexpr size_t kBlocks = 20000;
  xalloc_shared_writes_t w;
  ASSERT_EQ(xalloc_shared_writes(&w), 1);
  std::vector<void*> blocks(kBlocks);
  on_new_thread([&] {
    xalloc_free(xalloc_malloc(64));  // the heap first
    xalloc_shared_writes_restart();
    for (void*& p : blocks) p = xalloc_malloc(64);
    xalloc_shared_writes(&w);
    EXPECT_EQ(w.mallocs, kBlocks);
    for (void* p : blocks) xalloc_free(p);
  });
  uint64_t pushes = count_at(sc::Site::kInboxPush) + count_at(sc::Site::kInboxTake);
  std::atomic<int> phase{0};
  std::thread owner([&] {
    for (void*& p : blocks) p = xalloc_malloc(64);
    phase.store(1);
    while (phase.load() != 2) std::this_thread::yield();
    // Takes back, on the way, what the other thread sent to its inbox.
    for (void*& p : blocks) p = xalloc_malloc(64);
    for (void* p : blocks) xalloc_free(p);
  });
  while (phase.load() != 1) std::this_thread::yield();
  on_new_thread([&] {
    for (void* p : blocks) xalloc_free(p);
  });
  phase.store(2);
  owner.join();
  EXPECT_GT(count_at(sc::Site::kInboxPush) + count_at(sc::Site::kInboxTake), pushes);
  ASSERT_EQ(xalloc_shared_writes(&w), 1);
  EXPECT_GT(w.atomic_rmws, 0u);
  EXPECT_EQ(w.mallocs, 3 * kBlocks);
}

// Blocks freed to an exited thread's heap are drained by their sender at
// once (orphan_collect), which takes the lanes that hold blocks and leaves
// the empty ones alone: at most one exchange per lane a push filled, not
// one on each of the sixteen lanes at every push.
TEST(SharedCount, OrphanDrainTakesOnlyLanesThatHoldBlocks) {
  constexpr size_t kBlocks = 2048;  // 128 KiB: several sends of the 16 KiB batch
  xalloc_free(xalloc_malloc(64));  // this thread's own heap, before the other one exits
  std::vector<void*> blocks(kBlocks);
  on_new_thread([&] {
    for (void*& p : blocks) p = xalloc_malloc(64);
  });
  uint64_t pushes = count_at(sc::Site::kInboxPush);
  uint64_t takes = count_at(sc::Site::kInboxTake);
  for (void* p : blocks) xalloc_free(p);
  xalloc_thread_collect();  // sends what is still staged
  pushes = count_at(sc::Site::kInboxPush) - pushes;
  takes = count_at(sc::Site::kInboxTake) - takes;
  EXPECT_GT(pushes, 0u) << "the blocks did not reach the exited thread's inbox";
  EXPECT_LE(takes, pushes) << pushes << " pushes";
}

TEST(SharedCount, StatsLineAndWarmUp) {
  auto r = xtest::fresh_with_env({{"XALLOC_STATS", "1"}, {"XALLOC_COUNT_SHARED_AFTER_MS", "100"}}, [] {
    xalloc_free(xalloc_malloc(16));
    for (int i = 0; i < 10000; ++i) xalloc_free(xalloc_malloc(16));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // The count restarts at this thread's next 4096th malloc.
    for (int i = 0; i < 8192; ++i) xalloc_free(xalloc_malloc(16));
    xalloc_shared_writes_t w;
    xalloc_shared_writes(&w);
    std::exit(w.mallocs > 0 && w.mallocs < 8192 ? 0 : 3);
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: stats: shared writes: ")) << r.err;
}

#else

TEST(SharedCount, NotCountedInThisBuild) {
  xalloc_shared_writes_t w;
  w.mallocs = 7;
  EXPECT_EQ(xalloc_shared_writes(&w), 0);
  EXPECT_EQ(w.mallocs, 0u);
  EXPECT_EQ(w.lock_acquisitions, 0u);
  EXPECT_EQ(w.atomic_rmws, 0u);
  EXPECT_FALSE(sc::kEnabled);
}

#endif

}  // namespace
