// calloc returns zeroed memory, also when it reuses blocks that were
// dirtied and freed (small, large and huge).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {

// Allocates `count` blocks of `size`, dirties them, frees them, then callocs
// the same number again and checks every byte. Returns how many of the
// calloc'd blocks reused an address (for the record: reuse is what makes
// the test meaningful).
size_t dirty_free_calloc(size_t size, size_t count) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < count; ++i) {
    void* p = xalloc_malloc(size);
    EXPECT_NE(p, nullptr);
    if (p == nullptr) return 0;
    std::memset(p, 0xA5, xalloc_usable_size(p));
    blocks.push_back(p);
  }
  for (void* p : blocks) xalloc_free(p);
  size_t reused = 0;
  std::vector<void*> zeroed;
  for (size_t i = 0; i < count; ++i) {
    void* p = (i % 2 == 0) ? xalloc_calloc(1, size) : xalloc_calloc(size, 1);
    EXPECT_NE(p, nullptr);
    if (p == nullptr) break;
    for (void* old : blocks) reused += old == p;
    EXPECT_TRUE(xtest::all_zero(p, size)) << "calloc(" << size << ") returned dirty memory at " << p;
    zeroed.push_back(p);
  }
  for (void* p : zeroed) xalloc_free(p);
  return reused;
}

}  // namespace

TEST(Calloc, SmallBlocksAreZeroedOnReuse) {
  for (size_t size = 1; size <= 1024; size += (size < 160 ? 1 : 37)) {
    size_t reused = dirty_free_calloc(size, 64);
    EXPECT_GT(reused, 0u) << "size " << size << ": nothing was reused, the test proves nothing";
  }
  for (size_t size : {size_t{1500}, size_t{4096}, size_t{10000}, size_t{40000}, size_t{65536}}) {
    EXPECT_GT(dirty_free_calloc(size, 16), 0u) << size;
  }
}

TEST(Calloc, LargeBlocksAreZeroedOnReuse) {
  for (size_t size : {size_t{65537}, size_t{100000}, size_t{1} << 20, size_t{5000000}, size_t{16} << 20}) {
    EXPECT_GT(dirty_free_calloc(size, 4), 0u) << size;
  }
}

TEST(Calloc, HugeBlocksAreZeroedOnReuse) {
  for (size_t size : {(size_t{16} << 20) + 1, size_t{20} << 20, size_t{48} << 20}) {
    EXPECT_GT(dirty_free_calloc(size, 2), 0u) << size;
  }
}

// A reused block of 8 MiB or more is zeroed page group by page group: the
// mostly resident parts are written, the rest given back (read as zero),
// so a big zeroed table of which a program touched a few pages does not
// become resident whole. (Without huge pages: on a mapping that dense
// blocks before it had advised, the program's own sparse writes would
// fault in 2 MiB each before calloc is called.)
TEST(Calloc, ReusedBigBlockIsZeroedWithoutFaultingInWhatWasNotResident) {
  if (!xtest::rerun_in_fresh_process_with({{"XALLOC_HUGE_PAGES", "0"}})) return;
  for (size_t size : {size_t{12} << 20, size_t{48} << 20}) {
    constexpr size_t kPage = 4096;
    auto* p = static_cast<unsigned char*>(xalloc_malloc(size));
    ASSERT_NE(p, nullptr);
    // The first quarter dirty throughout, the rest one byte per 256 KiB
    // (the program gives the pages back itself, whatever the block held).
    std::memset(p, 0xA5, size);
    ASSERT_EQ(madvise(p + size / 4, size - size / 4, MADV_DONTNEED), 0);
    for (size_t at = size / 4; at < size; at += 256 * 1024) p[at + 100] = 0xA5;
    xalloc_free(p);
    // (Freed memory beyond the dirty budget may have been given back
    // already; a cached huge block keeps its pages.)
    size_t resident_when_freed = xtest::resident_pages(p, size);
    auto* z = static_cast<unsigned char*>(xalloc_calloc(1, size));
    ASSERT_EQ(z, p) << "the block was not reused: the test proves nothing";
    size_t resident = xtest::resident_pages(z, size);
    EXPECT_TRUE(xtest::all_zero(z, size)) << "calloc(" << size << ") returned dirty memory";
    if (resident_when_freed >= size / 4 / kPage) {
      EXPECT_GE(resident, size / 4 / kPage) << "the dirty quarter should have been written, not given back";
    }
    EXPECT_LT(resident, size / 2 / kPage) << "calloc made the sparse part resident: " << resident << " pages";
    xalloc_free(z);
  }
  xalloc_trim(0);
}

TEST(Calloc, ReuseAfterRealloc) {
  // Memory dirtied through realloc (grown in place or moved) comes back zeroed.
  for (int round = 0; round < 3; ++round) {
    void* p = xalloc_malloc(70000);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0xCC, 70000);
    p = xalloc_realloc(p, 900000);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0xCD, 900000);
    p = xalloc_realloc(p, 200000);
    ASSERT_NE(p, nullptr);
    xalloc_free(p);
    void* z = xalloc_calloc(900000, 1);
    ASSERT_NE(z, nullptr);
    EXPECT_TRUE(xtest::all_zero(z, 900000));
    xalloc_free(z);
  }
}

TEST(Calloc, ArrayForms) {
  auto* a = static_cast<uint64_t*>(xalloc_calloc(1000, sizeof(uint64_t)));
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a[i], 0u);
  xalloc_free(a);
  void* z = xalloc_calloc(0, 100);
  ASSERT_NE(z, nullptr);  // like malloc(0): a unique pointer
  xalloc_free(z);
  z = xalloc_calloc(100, 0);
  ASSERT_NE(z, nullptr);
  xalloc_free(z);
}

TEST(Calloc, MixedWithMallocInSameClass) {
  // Interleave malloc (dirtied) and calloc of the same class many times.
  std::vector<void*> dirty;
  for (int i = 0; i < 2000; ++i) {
    if (i % 3 == 2 && !dirty.empty()) {
      xalloc_free(dirty.back());
      dirty.pop_back();
      void* z = xalloc_calloc(1, 200);
      ASSERT_NE(z, nullptr);
      ASSERT_TRUE(xtest::all_zero(z, 200)) << "iteration " << i;
      std::memset(z, 0x77, 200);
      dirty.push_back(z);
    } else {
      void* p = xalloc_malloc(200);
      ASSERT_NE(p, nullptr);
      std::memset(p, 0x66, 200);
      dirty.push_back(p);
    }
  }
  for (void* p : dirty) xalloc_free(p);
}

// Regression (tests/KNOWN_BUGS.md #15): calloc returned a block drained back from another thread dirty.
// calloc above 1 KiB clears only the free-list words of a block it carves
// from a slab whose memory came zero from the OS. When other threads have
// sent the slab's blocks back (enough bytes to ask the owner for a drain),
// the allocation's slow path drains them onto that very slab and hands one
// out: it is dirty and must be cleared whole.
TEST(Calloc, BlocksDrainedBackFromAnotherThreadAreClearedWhole) {
  constexpr size_t kSize = 5000;  // 12 blocks per slab, carved one at a time
  constexpr int kBlocks = 64;     // 320 KiB sent back: past the drain request threshold
  std::vector<void*> blocks;
  std::atomic<int> stage{0};
  bool all_zero = true;
  std::thread owner([&] {
    for (int i = 0; i < kBlocks; ++i) blocks.push_back(xalloc_calloc(1, kSize));
    stage.store(1);
    while (stage.load() != 2) std::this_thread::yield();
    // The next allocation of this thread: nothing else may take the slow
    // path first and answer the drain request.
    auto* p = static_cast<unsigned char*>(xalloc_calloc(1, kSize));
    for (size_t i = 0; i < kSize; ++i) all_zero = all_zero && p[i] == 0;
    xalloc_free(p);
  });
  while (stage.load() != 1) std::this_thread::yield();
  for (void* p : blocks) {
    EXPECT_NE(p, nullptr);
    if (p != nullptr) std::memset(p, 0xAB, kSize);
  }
  for (void* p : blocks) xalloc_free(p);
  xalloc_trim(0);  // sends what this thread still buffers for the owner
  stage.store(2);
  owner.join();
  EXPECT_TRUE(all_zero);
}
