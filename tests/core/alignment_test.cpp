// Aligned allocation: posix_memalign, aligned_alloc, memalign, valloc and
// pvalloc for every power of two up to 16 MiB and sizes from tiny to huge.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::is_aligned;

namespace {

constexpr size_t kMaxTestedAlignment = size_t{16} << 20;  // 16 MiB

const size_t kSizes[] = {1, 8, 16, 48, 64, 100, 1000, 4096, 5000, 65536, 65537, 300000, size_t{2} << 20, size_t{16} << 20,
                         (size_t{16} << 20) + 1};

enum class Api { kPosixMemalign, kAlignedAlloc, kMemalign };

const char* api_name(Api api) {
  switch (api) {
    case Api::kPosixMemalign: return "posix_memalign";
    case Api::kAlignedAlloc: return "aligned_alloc";
    case Api::kMemalign: return "memalign";
  }
  return "?";
}

void* aligned(Api api, size_t alignment, size_t size) {
  switch (api) {
    case Api::kPosixMemalign: {
      void* p = reinterpret_cast<void*>(uintptr_t{0xdead});
      int rc = xalloc_posix_memalign(&p, alignment, size);
      EXPECT_EQ(rc, 0) << "posix_memalign(" << alignment << ", " << size << ")";
      return rc == 0 ? p : nullptr;
    }
    case Api::kAlignedAlloc: return xalloc_aligned_alloc(alignment, size);
    case Api::kMemalign: return xalloc_memalign(alignment, size);
  }
  return nullptr;
}

void check_block(void* p, size_t alignment, size_t size, const char* what) {
  ASSERT_NE(p, nullptr) << what << "(" << alignment << ", " << size << ")";
  ASSERT_TRUE(is_aligned(p, alignment)) << what << "(" << alignment << ", " << size << ") = " << p;
  ASSERT_EQ(xalloc_owns(p), 1);
  size_t usable = xalloc_usable_size(p);
  ASSERT_GE(usable, size) << what << "(" << alignment << ", " << size << ")";
  // Writable over all of the requested bytes.
  if (size <= 8192) {
    xtest::fill_pattern(p, size, alignment);
    ASSERT_EQ(xtest::check_pattern(p, size, alignment), SIZE_MAX);
  } else {
    xtest::touch_pages(p, size, 0xa7);
    ASSERT_TRUE(xtest::pages_hold(p, size, 0xa7));
  }
}

class AlignmentTest : public ::testing::TestWithParam<Api> {};

}  // namespace

TEST_P(AlignmentTest, EveryPowerOfTwoUpTo16MiB) {
  Api api = GetParam();
  size_t first = api == Api::kPosixMemalign ? sizeof(void*) : 1;
  for (size_t alignment = first; alignment <= kMaxTestedAlignment; alignment <<= 1) {
    for (size_t size : kSizes) {
      void* p = aligned(api, alignment, size);
      check_block(p, alignment, size, api_name(api));
      xalloc_free(p);
    }
  }
}

TEST_P(AlignmentTest, ManyLiveAlignedBlocksStayDisjoint) {
  Api api = GetParam();
  std::vector<std::pair<void*, size_t>> live;
  const size_t alignments[] = {32, 64, 128, 256, 1024, 4096, 65536, 1 << 20};
  size_t i = 0;
  for (size_t round = 0; round < 6; ++round) {
    for (size_t alignment : alignments) {
      size_t size = 1 + (i * 977) % (alignment <= 4096 ? 3000 : 70000);
      void* p = aligned(api, alignment, size);
      check_block(p, alignment, size, api_name(api));
      xtest::fill_pattern(p, size, i);
      live.emplace_back(p, i++);
    }
  }
  i = 0;
  for (auto& [p, seed] : live) {
    size_t alignment = alignments[i % 8];
    size_t size = 1 + (seed * 977) % (alignment <= 4096 ? 3000 : 70000);
    EXPECT_EQ(xtest::check_pattern(p, size, seed), SIZE_MAX) << "aligned block overwritten";
    xalloc_free(p);
    ++i;
  }
}

INSTANTIATE_TEST_SUITE_P(Apis, AlignmentTest,
                         ::testing::Values(Api::kPosixMemalign, Api::kAlignedAlloc, Api::kMemalign),
                         [](const ::testing::TestParamInfo<Api>& info) { return std::string(api_name(info.param)); });

TEST(Alignment, SmallAlignmentsWasteLittle) {
  void* p = xalloc_aligned_alloc(64, 64);
  ASSERT_NE(p, nullptr);
  EXPECT_LT(xalloc_usable_size(p), 256u);
  xalloc_free(p);
  // In general: no more than twice the larger of size and alignment.
  for (size_t alignment = 16; alignment <= 65536; alignment <<= 1) {
    for (size_t size = 1; size <= 65536; size = size * 3 + 1) {
      void* q = xalloc_aligned_alloc(alignment, size);
      ASSERT_NE(q, nullptr);
      ASSERT_TRUE(is_aligned(q, alignment));
      size_t bound = 2 * (size > alignment ? size : alignment);
      EXPECT_LE(xalloc_usable_size(q), bound) << "aligned_alloc(" << alignment << ", " << size << ")";
      xalloc_free(q);
    }
  }
}

TEST(Alignment, Valloc) {
  long page = sysconf(_SC_PAGESIZE);
  ASSERT_EQ(page, 4096);
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, size_t{4097}, size_t{70000}, size_t{20} << 20}) {
    void* p = xalloc_valloc(size);
    check_block(p, 4096, size, "valloc");
    xalloc_free(p);
  }
}

TEST(Alignment, PvallocRoundsSizeToPages) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{12289},
                      size_t{70000}, size_t{20} << 20}) {
    void* p = xalloc_pvalloc(size);
    size_t rounded = size == 0 ? 4096 : (size + 4095) & ~size_t{4095};
    check_block(p, 4096, rounded, "pvalloc");
    EXPECT_GE(xalloc_usable_size(p), rounded) << "pvalloc(" << size << ")";
    xalloc_free(p);
  }
}

TEST(Alignment, MemalignRoundsNonPowerOfTwoUp) {
  // glibc's memalign accepts any alignment and rounds it up to a power of two.
  struct Case {
    size_t requested, effective;
  } cases[] = {{3, 4}, {24, 32}, {48, 64}, {100, 128}, {1000, 1024}, {3000, 4096}, {65537, 131072},
               {(size_t{1} << 20) + 1, size_t{2} << 20}};
  for (const Case& c : cases) {
    for (size_t size : {size_t{1}, size_t{200}, size_t{70000}}) {
      void* p = xalloc_memalign(c.requested, size);
      check_block(p, c.effective, size, "memalign");
      xalloc_free(p);
    }
  }
  void* p = xalloc_memalign(0, 10);  // alignment 0 acts as 1
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(is_aligned(p, 16));
  xalloc_free(p);
}

TEST(Alignment, AlignedAllocSmallAlignmentsBelowPointerSize) {
  for (size_t alignment : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    void* p = xalloc_aligned_alloc(alignment, 10);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(is_aligned(p, 16)) << "malloc-like alignment expected";
    xalloc_free(p);
  }
}

TEST(Alignment, AlignedBlocksReallocKeepContents) {
  for (size_t alignment : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
    void* p = xalloc_aligned_alloc(alignment, 1000);
    ASSERT_NE(p, nullptr);
    xtest::fill_pattern(p, 1000, alignment);
    void* q = xalloc_realloc(p, 300000);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(xtest::check_pattern(q, 1000, alignment), SIZE_MAX);
    xalloc_free(q);
  }
}
