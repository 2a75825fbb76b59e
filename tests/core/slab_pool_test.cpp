// The slab pool (backend/slab_pool.h): empty slabs shared by all heaps,
// their free lists intact, up to a bound, emptied by trim.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <iterator>
#include <thread>
#include <vector>

#include "backend/slab_pool.h"
#include "core_test_util.h"
#include "meta/page.h"
#include "meta/size_classes.h"
#include "meta/slab.h"
#include "platform/os.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::fresh_with_env;
using xtest::kMiB;
using xtest::stats;

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

// Each look (every half purge delay) gives back the slabs of a class that
// stayed pooled through the whole interval, the fewest it held, oldest
// first, and keeps the ones taken and put back meanwhile. The test drives
// release_idle with times of its own, in a process of its own (the time of
// the next look is process-wide).
TEST(Options, SlabPoolGivesBackWhatAnIntervalDidNotUse) {
  auto r = fresh_with_env({{"XALLOC_PURGE_DELAY_MS", "1000"}}, [] {
    namespace pool = xalloc::slab_pool;
    std::thread([] {
      std::vector<void*> blocks;
      for (int i = 0; i < 16000; ++i) blocks.push_back(xalloc_malloc(512));
      for (void* p : blocks) xalloc_free(p);
    }).join();
    unsigned cls = xalloc::class_of(512);
    auto count_pooled = [cls] {
      std::vector<xalloc::Page*> slabs;
      while (xalloc::Page* page = pool::take(cls)) slabs.push_back(page);
      for (auto it = slabs.rbegin(); it != slabs.rend(); ++it) pool::put(*it);  // same order back
      return slabs.size();
    };
    size_t before = count_pooled();  // its takes leave the class's low-water mark at 0
    if (before < 3) return 2;        // too few pooled for the test to mean anything
    uint64_t t = xalloc::os::monotonic_ms() + 10000;  // past any look the thread scheduled
    pool::release_idle(t);  // gives back nothing, and starts an interval
    // The pool's lowest during this interval: `before` minus the two taken.
    xalloc::Page* first = pool::take(cls);
    xalloc::Page* second = pool::take(cls);
    pool::put(second);
    pool::put(first);
    pool::release_idle(t + 500);
    if (pool::take(cls) != first || pool::take(cls) != second) return 3;  // the two used ones stay
    if (pool::take(cls) != nullptr) return 4;                             // the idle ones went back
    pool::put(second);
    pool::put(first);
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0)
      << "exit 2: too few pooled; 3: a slab used in the interval went back; 4: an idle one stayed; " << r.describe();
}
