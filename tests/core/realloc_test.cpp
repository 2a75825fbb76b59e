// realloc: contents survive every class boundary, growing and shrinking,
// into large (> 64 KiB) and huge (> 16 MiB) sizes and back; the special
// cases realloc(NULL, n) and realloc(p, 0); failure leaves the block alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "frontend/block_memory.h"
#include "meta/size_classes.h"
#include "platform/os.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {

// Every class size and its neighbours, then large and huge sizes.
std::vector<size_t> growth_sizes() {
  std::vector<size_t> sizes;
  for (unsigned c = 0; c < xalloc::kNumClasses; ++c) {
    size_t s = xalloc::class_size_of(c);
    if (s > 1) sizes.push_back(s - 1);
    sizes.push_back(s);
    sizes.push_back(s + 1);
  }
  for (size_t s : {size_t{100000}, size_t{1} << 20, (size_t{1} << 20) + 12345, size_t{5} << 20, size_t{16} << 20,
                   (size_t{16} << 20) + 1, size_t{20} << 20, size_t{40} << 20, size_t{70} << 20})
    sizes.push_back(s);
  return sizes;
}

// The expected content of a block at every offset, precomputed once.
const std::vector<uint8_t>& reference_pattern() {
  static const std::vector<uint8_t> pattern = [] {
    std::vector<uint8_t> p(size_t{70} << 20);
    xtest::fill_pattern(p.data(), p.size(), 7);
    return p;
  }();
  return pattern;
}

// Offset of the first byte of [0, n) that differs from the reference, or SIZE_MAX.
size_t first_mismatch(const void* block, size_t n) {
  const auto& ref = reference_pattern();
  if (std::memcmp(block, ref.data(), n) == 0) return SIZE_MAX;
  const auto* b = static_cast<const uint8_t*>(block);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != ref[i]) return i;
  }
  return SIZE_MAX;
}

}  // namespace

TEST(Realloc, GrowThroughEveryClassIntoHugeAndShrinkBack) {
  const auto& ref = reference_pattern();
  std::vector<size_t> sizes = growth_sizes();
  void* p = xalloc_malloc(1);
  ASSERT_NE(p, nullptr);
  std::memcpy(p, ref.data(), 1);
  size_t current = 1;
  auto step = [&](size_t next) {
    void* q = xalloc_realloc(p, next);
    ASSERT_NE(q, nullptr) << "realloc " << current << " -> " << next;
    ASSERT_TRUE(xtest::is_aligned(q, 16));
    ASSERT_GE(xalloc_usable_size(q), next);
    size_t kept = std::min(current, next);
    ASSERT_EQ(first_mismatch(q, kept), SIZE_MAX) << "realloc " << current << " -> " << next << " lost data";
    if (next > current) std::memcpy(static_cast<uint8_t*>(q) + current, ref.data() + current, next - current);
    p = q;
    current = next;
  };
  for (size_t s : sizes) step(s);
  std::reverse(sizes.begin(), sizes.end());
  for (size_t s : sizes) step(s);
  step(1);
  xalloc_free(p);
}

TEST(Realloc, JumpsBetweenSmallLargeAndHuge) {
  const auto& ref = reference_pattern();
  const size_t path[] = {10,          size_t{20} << 20, 50,        size_t{2} << 20, size_t{40} << 20, 3000,
                         size_t{17} << 20, 70000,       size_t{16} << 20, 65536,   65537,   16,
                         size_t{30} << 20, size_t{18} << 20, size_t{1} << 20};
  void* p = xalloc_malloc(path[0]);
  ASSERT_NE(p, nullptr);
  std::memcpy(p, ref.data(), path[0]);
  size_t current = path[0];
  for (size_t next : path) {
    void* q = xalloc_realloc(p, next);
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(first_mismatch(q, std::min(current, next)), SIZE_MAX) << current << " -> " << next;
    if (next > current) std::memcpy(static_cast<uint8_t*>(q) + current, ref.data() + current, next - current);
    p = q;
    current = next;
  }
  xalloc_free(p);
}

TEST(Realloc, LargeBlockGrowsWhileNeighboursAreLive) {
  // Grow a large block step by step while other large blocks are allocated
  // in between: in-place growth must never run into a neighbour.
  const auto& ref = reference_pattern();
  std::vector<void*> others;
  void* p = xalloc_malloc(70000);
  ASSERT_NE(p, nullptr);
  std::memcpy(p, ref.data(), 70000);
  size_t current = 70000;
  for (int i = 0; i < 40; ++i) {
    void* other = xalloc_malloc(65536 + 4096 * static_cast<size_t>(i));
    ASSERT_NE(other, nullptr);
    std::memset(other, 0xee, 65536);
    others.push_back(other);
    size_t next = current + 50000 + static_cast<size_t>(i) * 3000;
    void* q = xalloc_realloc(p, next);
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(first_mismatch(q, current), SIZE_MAX) << "grow " << current << " -> " << next;
    std::memcpy(static_cast<uint8_t*>(q) + current, ref.data() + current, next - current);
    p = q;
    current = next;
  }
  for (void* o : others) {
    auto* b = static_cast<uint8_t*>(o);
    for (size_t j = 0; j < 65536; j += 997) ASSERT_EQ(b[j], 0xee) << "neighbour overwritten by realloc";
    xalloc_free(o);
  }
  EXPECT_EQ(first_mismatch(p, current), SIZE_MAX);
  xalloc_free(p);
}

TEST(Realloc, NullPointerActsAsMalloc) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{100000}, size_t{20} << 20}) {
    void* p = xalloc_realloc(nullptr, size);
    ASSERT_NE(p, nullptr) << size;
    EXPECT_EQ(xalloc_owns(p), 1);
    EXPECT_GE(xalloc_usable_size(p), size);
    EXPECT_TRUE(xtest::is_aligned(p, 16));
    xtest::touch_pages(p, size, 1);
    xalloc_free(p);
  }
}

TEST(Realloc, ZeroSizeFreesAndReturnsNull) {
  for (size_t size : {size_t{48}, size_t{5000}, size_t{100000}, size_t{20} << 20}) {
    void* p = xalloc_malloc(size);
    ASSERT_NE(p, nullptr);
    errno = 0;
    EXPECT_EQ(xalloc_realloc(p, 0), nullptr);
  }
  // And the block is really freed: freeing it again is reported as a double free.
  auto result = xtest::run_in_child([] {
    void* p = xalloc_malloc(48);
    void* keep = xalloc_malloc(48);  // keeps the slab alive
    if (xalloc_realloc(p, 0) != nullptr) return 3;
    xalloc_free(p);
    xalloc_free(keep);
    return 0;
  });
  EXPECT_TRUE(result.signaled() && result.signal() == SIGABRT) << result.describe();
  EXPECT_TRUE(xtest::has_line_starting(result.err, "xalloc: double free of 0x")) << result.err;
}

TEST(Realloc, FailureLeavesTheBlockIntact) {
  for (size_t size : {size_t{48}, size_t{100000}, size_t{20} << 20}) {
    void* p = xalloc_malloc(size);
    ASSERT_NE(p, nullptr);
    xtest::fill_pattern(p, 48, 3);
    for (size_t bad : {SIZE_MAX, SIZE_MAX / 2 + 1, size_t{1} << 62}) {
      errno = 0;
      EXPECT_EQ(xalloc_realloc(p, bad), nullptr) << size << " -> " << bad;
      EXPECT_EQ(errno, ENOMEM);
    }
    EXPECT_EQ(xtest::check_pattern(p, 48, 3), SIZE_MAX);
    EXPECT_GE(xalloc_usable_size(p), size);
    xalloc_free(p);
  }
}

TEST(Realloc, ShrinkInPlaceKeepsPrefix) {
  const auto& ref = reference_pattern();
  for (size_t size : {size_t{4096}, size_t{65536}, size_t{300000}, size_t{24} << 20}) {
    void* p = xalloc_malloc(size);
    ASSERT_NE(p, nullptr);
    std::memcpy(p, ref.data(), size);
    for (size_t next = size - size / 7; next > 8; next = next / 2 + 3) {
      void* q = xalloc_realloc(p, next);
      ASSERT_NE(q, nullptr);
      ASSERT_GE(xalloc_usable_size(q), next);
      ASSERT_EQ(first_mismatch(q, next), SIZE_MAX) << size << " shrunk to " << next;
      p = q;
    }
    xalloc_free(p);
  }
}

TEST(Realloc, RandomSequenceOfManyBlocks) {
  xtest::Rng rng(1234);
  struct Block {
    uint8_t* p = nullptr;
    size_t size = 0;
    uint64_t seed = 0;
  };
  std::vector<Block> blocks(64);
  const size_t rounds = xtest::scaled(20000);
  for (size_t i = 0; i < rounds; ++i) {
    Block& b = blocks[rng.below(blocks.size())];
    size_t next = rng.below(20) == 0 ? 0 : rng.size_mix();
    if (b.p != nullptr) {
      size_t check = std::min<size_t>(b.size, 256);
      ASSERT_EQ(xtest::check_pattern(b.p, check, b.seed), SIZE_MAX) << "before realloc " << b.size << " -> " << next;
      if (b.size > 256) {
        ASSERT_EQ(b.p[b.size - 1], static_cast<uint8_t>(b.seed));
      }
    }
    void* q = xalloc_realloc(b.p, next);
    if (next == 0 && b.p != nullptr) {
      ASSERT_EQ(q, nullptr);
      b = Block{};
      continue;
    }
    ASSERT_NE(q, nullptr);
    auto* nb = static_cast<uint8_t*>(q);
    if (b.p != nullptr) {
      size_t kept = std::min<size_t>(std::min(b.size, next), 256);
      ASSERT_EQ(xtest::check_pattern(nb, kept, b.seed), SIZE_MAX) << "realloc " << b.size << " -> " << next;
    }
    b.p = nb;
    b.size = next;
    b.seed = i;
    xtest::fill_pattern(nb, std::min<size_t>(next, 256), i);
    if (next > 256) nb[next - 1] = static_cast<uint8_t>(i);
  }
  for (Block& b : blocks) xalloc_free(b.p);
}

TEST(Reallocarray, MultipliesAndKeepsContents) {
  auto* p = static_cast<uint32_t*>(xalloc_reallocarray(nullptr, 10, sizeof(uint32_t)));
  ASSERT_NE(p, nullptr);
  for (uint32_t i = 0; i < 10; ++i) p[i] = i * 7;
  p = static_cast<uint32_t*>(xalloc_reallocarray(p, 100000, sizeof(uint32_t)));
  ASSERT_NE(p, nullptr);
  EXPECT_GE(xalloc_usable_size(p), 400000u);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(p[i], i * 7);
  xalloc_free(p);
}

// realloc populates the fresh pages it is about to copy into
// (block_memory.h: populate_for_copy): the first `bytes` of a large or
// huge block taken from memory that read as zero become resident, and
// nothing else - not the rest of the block, not a block whose memory was
// in use before.
namespace {

size_t resident_pages(const void* start, size_t bytes) {
  uint8_t residency[xalloc::os::kResidencyPages];
  EXPECT_TRUE(xalloc::os::page_residency(start, bytes, residency));
  size_t pages = 0;
  for (size_t i = 0; i < bytes / xalloc::kOsPageSize; ++i) pages += residency[i] & 1;
  return pages;
}

}  // namespace

TEST(Realloc, FreshMemoryACopyWillFillIsPopulatedFirst) {
  if (!xtest::rerun_in_fresh_process()) return;
  for (size_t size : {size_t{4} << 20, size_t{24} << 20}) {  // large, huge
    constexpr size_t kCopied = 1 << 20;
    void* block = xalloc_malloc(size);
    ASSERT_NE(block, nullptr);
    ASSERT_EQ(resident_pages(block, 4 * kCopied), 0u) << size << ": the test needs fresh memory";
    xalloc::populate_for_copy(block, kCopied);
    EXPECT_EQ(resident_pages(block, kCopied), kCopied / xalloc::kOsPageSize) << size;
    EXPECT_EQ(resident_pages(static_cast<char*>(block) + kCopied, 3 * kCopied), 0u) << size;
    xalloc_free(block);
  }
  // A kept span: its memory was in use, and the call leaves it alone.
  void* first = xalloc_malloc(256 << 10);
  std::memset(first, 1, 256 << 10);
  xalloc_free(first);
  void* again = xalloc_malloc(256 << 10);
  ASSERT_EQ(again, first) << "the thread's kept span did not serve the same size again";
  xalloc::os::purge(again, 256 << 10);
  xalloc::populate_for_copy(again, 256 << 10);
  EXPECT_EQ(resident_pages(again, 256 << 10), 0u) << "populated memory that was not fresh";
  xalloc_free(again);
}
