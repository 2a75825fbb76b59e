// Every C allocation entry point of libxalloc.so, in a program linked with
// -lxalloc: each returns memory xalloc owns (xalloc_owns), frees go back to
// xalloc, and glibc's extras answer from xalloc's state.
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {
// xalloc_owns through a laundered pointer (see xtest::launder_ptr).
__attribute__((always_inline)) inline int owned(const void* p) { return xalloc_owns(xtest::launder_ptr(p)); }
}  // namespace

// Entry points glibc 2.36's headers do not declare (C23, obsolete, internal).
extern "C" {
void free_sized(void* ptr, size_t size);
void free_aligned_sized(void* ptr, size_t alignment, size_t size);
void cfree(void* ptr);
void* __libc_malloc(size_t size);
void __libc_free(void* ptr);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* ptr, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void* __libc_valloc(size_t size);
void* __libc_pvalloc(size_t size);
int __posix_memalign(void** out, size_t alignment, size_t size);
}

using xtest::is_aligned;

namespace {

// Frees p with `release` and checks that the block went back to xalloc: the
// next malloc of the same class returns the same address (free lists are
// last in, first out within a thread).
void expect_freed_to_xalloc(void* p, size_t size, void (*release)(void*), const char* what) {
  ASSERT_EQ(owned(p), 1) << what;
  release(p);
  void* again = malloc(size);
  EXPECT_EQ(again, p) << what << " did not return the block to xalloc";
  free(again);
}

}  // namespace

TEST(EntryPoints, MallocFamilyIsServedByXalloc) {
  void* p = malloc(100);
  EXPECT_EQ(owned(p), 1) << "malloc";
  EXPECT_TRUE(is_aligned(p, 16));
  p = realloc(p, 5000);
  EXPECT_EQ(owned(p), 1) << "realloc";
  p = reallocarray(p, 100, 1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(owned(p), 1) << "reallocarray";
  EXPECT_GE(malloc_usable_size(p), 100000u);
  EXPECT_EQ(malloc_usable_size(p), xalloc_usable_size(p));
  free(p);

  void* c = calloc(10, 10);
  EXPECT_EQ(owned(c), 1) << "calloc";
  EXPECT_TRUE(xtest::all_zero(c, 100));
  free(c);

  void* r = realloc(nullptr, 77);
  EXPECT_EQ(owned(r), 1) << "realloc(NULL)";
  errno = 0;
  EXPECT_EQ(realloc(r, 0), nullptr) << "realloc(p, 0) frees and returns NULL";
}

TEST(EntryPoints, AlignedFamilyIsServedByXalloc) {
  void* p = nullptr;
  ASSERT_EQ(posix_memalign(&p, 256, 1000), 0);
  EXPECT_EQ(owned(p), 1) << "posix_memalign";
  EXPECT_TRUE(is_aligned(p, 256));
  free(p);
  p = aligned_alloc(4096, 8192);
  EXPECT_EQ(owned(p), 1) << "aligned_alloc";
  EXPECT_TRUE(is_aligned(p, 4096));
  free(p);
  p = memalign(size_t{2} << 20, 100);
  EXPECT_EQ(owned(p), 1) << "memalign";
  EXPECT_TRUE(is_aligned(p, size_t{2} << 20));
  free(p);
  p = valloc(10);
  EXPECT_EQ(owned(p), 1) << "valloc";
  EXPECT_TRUE(is_aligned(p, 4096));
  free(p);
  p = pvalloc(10);
  EXPECT_EQ(owned(p), 1) << "pvalloc";
  EXPECT_TRUE(is_aligned(p, 4096));
  EXPECT_GE(malloc_usable_size(p), 4096u);
  free(p);
  // glibc's error rules through the exported names too.
  void* out = &p;
  EXPECT_EQ(posix_memalign(&out, 24, 10), EINVAL);
  EXPECT_EQ(out, static_cast<void*>(&p));
  errno = 0;
  EXPECT_EQ(aligned_alloc(24, 10), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(malloc(xtest::opaque_size(SIZE_MAX)), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(calloc(xtest::opaque_size(SIZE_MAX / 2), 4), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(EntryPoints, EveryFreeFormReturnsTheBlock) {
  expect_freed_to_xalloc(malloc(48), 48, [](void* p) { free(p); }, "free");
  expect_freed_to_xalloc(malloc(48), 48, [](void* p) { cfree(p); }, "cfree");
  expect_freed_to_xalloc(malloc(48), 48, [](void* p) { free_sized(p, 48); }, "free_sized");
  expect_freed_to_xalloc(aligned_alloc(16, 48), 48, [](void* p) { free_aligned_sized(p, 16, 48); },
                         "free_aligned_sized");
  expect_freed_to_xalloc(malloc(48), 48, [](void* p) { __libc_free(p); }, "__libc_free");
  void* p = realloc(malloc(48), 0);
  EXPECT_EQ(p, nullptr);
}

TEST(EntryPoints, LibcInternalNames) {
  void* p = __libc_malloc(100);
  EXPECT_EQ(owned(p), 1) << "__libc_malloc";
  p = __libc_realloc(p, 3000);
  EXPECT_EQ(owned(p), 1) << "__libc_realloc";
  __libc_free(p);
  p = __libc_calloc(3, 50);
  EXPECT_EQ(owned(p), 1) << "__libc_calloc";
  EXPECT_TRUE(xtest::all_zero(p, 150));
  __libc_free(p);
  p = __libc_memalign(1024, 100);
  EXPECT_EQ(owned(p), 1) << "__libc_memalign";
  EXPECT_TRUE(is_aligned(p, 1024));
  __libc_free(p);
  p = __libc_valloc(100);
  EXPECT_EQ(owned(p), 1) << "__libc_valloc";
  EXPECT_TRUE(is_aligned(p, 4096));
  __libc_free(p);
  p = __libc_pvalloc(100);
  EXPECT_EQ(owned(p), 1) << "__libc_pvalloc";
  EXPECT_GE(malloc_usable_size(p), 4096u);
  __libc_free(p);
  p = nullptr;
  ASSERT_EQ(__posix_memalign(&p, 512, 100), 0);
  EXPECT_EQ(owned(p), 1) << "__posix_memalign";
  EXPECT_TRUE(is_aligned(p, 512));
  free(p);
  EXPECT_EQ(malloc_usable_size(nullptr), 0u);
}

TEST(EntryPoints, AllocationsInsideLibcAreXallocs) {
  // libc calls malloc through its PLT: strdup, asprintf, getline, open_memstream...
  char* s = strdup("hello, allocator");
  EXPECT_EQ(owned(s), 1) << "strdup";
  free(s);
  char* a = nullptr;
  ASSERT_GT(asprintf(&a, "%d-%s", 42, "x"), 0);
  EXPECT_EQ(owned(a), 1) << "asprintf";
  EXPECT_STREQ(a, "42-x");
  free(a);
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  ASSERT_NE(f, nullptr);
  for (int i = 0; i < 1000; ++i) std::fprintf(f, "line %d\n", i);
  std::fclose(f);
  EXPECT_EQ(owned(buf), 1) << "open_memstream";
  EXPECT_GT(len, 7000u);
  free(buf);
  char* rp = realpath(".", nullptr);
  EXPECT_EQ(owned(rp), 1) << "realpath";
  free(rp);
}

TEST(EntryPoints, CxxLibraryAllocationsAreXallocs) {
  std::string s(1000, 'x');
  EXPECT_EQ(owned(s.data()), 1);
  std::vector<int> v(100000, 7);
  EXPECT_EQ(owned(v.data()), 1);
}

TEST(EntryPoints, Mallinfo2GrowsWithAllocations) {
  struct mallinfo2 before = mallinfo2();
  std::vector<void*> blocks;
  for (int i = 0; i < 20000; ++i) blocks.push_back(malloc(200));
  void* big = xtest::launder_ptr(malloc(8 << 20));
  struct mallinfo2 after = mallinfo2();
  EXPECT_GE(after.uordblks, before.uordblks + (8u << 20) + 20000u * 200u)
      << "uordblks " << before.uordblks << " -> " << after.uordblks;
  EXPECT_GE(after.arena, after.uordblks);
  EXPECT_GE(after.hblkhd, after.arena);
  EXPECT_GE(after.hblks, 1u);
  free(big);
  for (void* p : blocks) free(p);
  struct mallinfo2 freed = mallinfo2();
  EXPECT_LT(freed.uordblks, after.uordblks);
}

TEST(EntryPoints, MallinfoSaturatesAndAgrees) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  void* big = xtest::launder_ptr(malloc(8 << 20));
  struct mallinfo old = mallinfo();
  struct mallinfo2 wide = mallinfo2();
#pragma GCC diagnostic pop
  EXPECT_GE(old.uordblks, 8 << 20);
  EXPECT_EQ(static_cast<size_t>(old.uordblks), wide.uordblks);
  free(big);
}

TEST(EntryPoints, MallocStatsPrintsXallocStats) {
  auto r = xtest::run_in_child([] {
    void* p = malloc(100);
    malloc_stats();
    free(p);
    return 0;
  });
  ASSERT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: stats: mapped ")) << r.err;
}

TEST(EntryPoints, MallocInfoWritesXml) {
  void* p = malloc(3 << 20);
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(malloc_info(0, f), 0);
  std::fclose(f);
  std::string xml(text, len);
  free(text);
  EXPECT_NE(xml.find("<malloc version=\"xalloc-1\">"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<total type=\"in_use\" size=\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("</malloc>"), std::string::npos) << xml;
  errno = 0;
  EXPECT_EQ(malloc_info(1, stderr), -1);
  EXPECT_EQ(errno, EINVAL);
  free(p);
}

TEST(EntryPoints, MalloptAndMallocTrim) {
  EXPECT_EQ(mallopt(M_ARENA_MAX, 1), 1);
  EXPECT_EQ(mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) {
    void* p = malloc(1 << 20);
    std::memset(p, 1, 1 << 20);
    blocks.push_back(p);
  }
  xalloc_stats_t full;
  xalloc_get_stats(&full);
  for (void* p : blocks) free(p);
  EXPECT_EQ(malloc_trim(0), 1);
  xalloc_stats_t trimmed;
  xalloc_get_stats(&trimmed);
  EXPECT_LE(trimmed.committed + (48u << 20), full.committed);
}

TEST(EntryPoints, ThreadsUseXallocToo) {
  std::vector<void*> from_thread(1000);
  std::thread t([&] {
    for (auto& p : from_thread) p = malloc(64);
  });
  t.join();
  for (void* p : from_thread) {
    EXPECT_EQ(owned(p), 1);
    free(p);
  }
}
