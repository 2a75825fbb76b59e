// Bad arguments: impossible sizes, overflowing products, invalid
// alignments. Each must fail cleanly with the errno (or return code) that
// glibc gives, and never touch the output argument on failure.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <limits>

#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {

constexpr size_t kPtrdiffMax = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max());

const size_t kImpossible[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4096, kPtrdiffMax + 1, kPtrdiffMax, size_t{1} << 62,
                              size_t{1} << 48};

}  // namespace

TEST(BadInput, MallocOfImpossibleSizes) {
  for (size_t size : kImpossible) {
    errno = 0;
    EXPECT_EQ(xalloc_malloc(size), nullptr) << size;
    EXPECT_EQ(errno, ENOMEM) << "malloc(" << size << ")";
  }
}

TEST(BadInput, CallocOverflow) {
  struct Case {
    size_t n, size;
  } cases[] = {{SIZE_MAX, 2}, {2, SIZE_MAX}, {size_t{1} << 32, size_t{1} << 32}, {SIZE_MAX / 3 + 1, 3},
               {kPtrdiffMax, 2}, {65537, size_t{1} << 48}};
  for (const Case& c : cases) {
    errno = 0;
    EXPECT_EQ(xalloc_calloc(c.n, c.size), nullptr) << c.n << " x " << c.size;
    EXPECT_EQ(errno, ENOMEM) << "calloc(" << c.n << ", " << c.size << ")";
  }
  // Not an overflow, but still impossible.
  errno = 0;
  EXPECT_EQ(xalloc_calloc(1, kPtrdiffMax + 1), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(BadInput, ReallocarrayOverflowKeepsBlock) {
  void* p = xalloc_malloc(64);
  ASSERT_NE(p, nullptr);
  xtest::fill_pattern(p, 64, 9);
  errno = 0;
  EXPECT_EQ(xalloc_reallocarray(p, SIZE_MAX / 2, 3), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(xalloc_reallocarray(p, size_t{1} << 33, size_t{1} << 31), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(xtest::check_pattern(p, 64, 9), SIZE_MAX) << "failed reallocarray damaged the block";
  errno = 0;
  EXPECT_EQ(xalloc_reallocarray(nullptr, SIZE_MAX, SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  xalloc_free(p);
}

TEST(BadInput, ReallocOfImpossibleSize) {
  for (size_t size : kImpossible) {
    errno = 0;
    EXPECT_EQ(xalloc_realloc(nullptr, size), nullptr) << size;
    EXPECT_EQ(errno, ENOMEM);
  }
}

TEST(BadInput, PosixMemalignInvalidAlignment) {
  // Not a power of two, or not a multiple of sizeof(void*): EINVAL, *out untouched.
  for (size_t alignment : {size_t{0}, size_t{1}, size_t{2}, size_t{4}, size_t{3}, size_t{12}, size_t{24},
                           size_t{48}, size_t{100}, size_t{4097}, SIZE_MAX, (size_t{1} << 20) + 8}) {
    void* out = reinterpret_cast<void*>(uintptr_t{0x1234});
    EXPECT_EQ(xalloc_posix_memalign(&out, alignment, 16), EINVAL) << "alignment " << alignment;
    EXPECT_EQ(out, reinterpret_cast<void*>(uintptr_t{0x1234})) << "*out changed on error";
  }
}

TEST(BadInput, PosixMemalignImpossibleSize) {
  for (size_t size : {SIZE_MAX, kPtrdiffMax + 1, SIZE_MAX - 64}) {
    void* out = reinterpret_cast<void*>(uintptr_t{0x1234});
    EXPECT_EQ(xalloc_posix_memalign(&out, 64, size), ENOMEM) << size;
    EXPECT_EQ(out, reinterpret_cast<void*>(uintptr_t{0x1234}));
    EXPECT_EQ(xalloc_posix_memalign(&out, 4096, size), ENOMEM) << size;
    EXPECT_EQ(xalloc_posix_memalign(&out, size_t{1} << 20, size), ENOMEM) << size;
    EXPECT_EQ(out, reinterpret_cast<void*>(uintptr_t{0x1234}));
  }
}

TEST(BadInput, AlignedAllocNonPowerOfTwo) {
  for (size_t alignment : {size_t{0}, size_t{3}, size_t{24}, size_t{100}, size_t{4095}, SIZE_MAX}) {
    errno = 0;
    EXPECT_EQ(xalloc_aligned_alloc(alignment, 64), nullptr) << "alignment " << alignment;
    EXPECT_EQ(errno, EINVAL) << "aligned_alloc(" << alignment << ", 64)";
  }
}

TEST(BadInput, AlignedAllocImpossibleSize) {
  for (size_t alignment : {size_t{16}, size_t{64}, size_t{4096}, size_t{1} << 20}) {
    errno = 0;
    EXPECT_EQ(xalloc_aligned_alloc(alignment, SIZE_MAX), nullptr);
    EXPECT_EQ(errno, ENOMEM) << alignment;
  }
}

TEST(BadInput, AlignmentAbove16MiBIsENOMEM) {
  for (size_t alignment : {size_t{32} << 20, size_t{64} << 20, size_t{1} << 30, size_t{1} << 40}) {
    void* out = reinterpret_cast<void*>(uintptr_t{0x1234});
    EXPECT_EQ(xalloc_posix_memalign(&out, alignment, 16), ENOMEM) << alignment;
    EXPECT_EQ(out, reinterpret_cast<void*>(uintptr_t{0x1234}));
    errno = 0;
    EXPECT_EQ(xalloc_aligned_alloc(alignment, 16), nullptr) << alignment;
    EXPECT_EQ(errno, ENOMEM) << "aligned_alloc(" << alignment << ", 16)";
    errno = 0;
    EXPECT_EQ(xalloc_memalign(alignment, 100), nullptr) << alignment;
    EXPECT_EQ(errno, ENOMEM);
  }
  // 16 MiB itself is supported.
  void* p = xalloc_aligned_alloc(size_t{16} << 20, 100);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(xtest::is_aligned(p, size_t{16} << 20));
  xalloc_free(p);
}

TEST(BadInput, MemalignHugeNonPowerOfTwo) {
  // Rounding up would overflow: EINVAL like glibc.
  errno = 0;
  EXPECT_EQ(xalloc_memalign((size_t{1} << 63) + 1, 16), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(BadInput, PvallocOverflow) {
  errno = 0;
  EXPECT_EQ(xalloc_pvalloc(SIZE_MAX - 100), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(xalloc_valloc(SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(BadInput, FailuresLeaveTheAllocatorUsable) {
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(xalloc_malloc(SIZE_MAX - static_cast<size_t>(i)), nullptr);
    void* p = xalloc_malloc(static_cast<size_t>(i) * 1000 + 1);
    ASSERT_NE(p, nullptr);
    xalloc_free(p);
  }
}
