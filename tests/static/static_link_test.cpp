// A program linked with libxalloc.a: its malloc and operator new replace
// the system ones, for this program's code and for the libraries it uses.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {
// xalloc_owns through a laundered pointer (see xtest::launder_ptr).
__attribute__((always_inline)) inline int owned(const void* p) { return xalloc_owns(xtest::launder_ptr(p)); }
}  // namespace

namespace {

std::vector<std::string>* g_before_main = new std::vector<std::string>(10, std::string(100, 'm'));

}  // namespace

TEST(StaticLink, OperatorNewIsXallocs) {
  int* i = new int(5);
  EXPECT_EQ(owned(i), 1);
  delete i;
  auto* arr = new double[1000];
  EXPECT_EQ(owned(arr), 1);
  delete[] arr;
  void* aligned = ::operator new(100, std::align_val_t(4096));
  EXPECT_EQ(owned(aligned), 1);
  EXPECT_TRUE(xtest::is_aligned(aligned, 4096));
  ::operator delete(aligned, std::align_val_t(4096));
  EXPECT_THROW(::operator delete(::operator new(xtest::opaque_size(SIZE_MAX))), std::bad_alloc);
}

TEST(StaticLink, MallocIsXallocs) {
  void* p = std::malloc(100);
  EXPECT_EQ(owned(p), 1);
  std::free(p);
  void* big = std::calloc(1, size_t{20} << 20);
  EXPECT_EQ(owned(big), 1);
  std::free(big);
}

TEST(StaticLink, LibrariesAllocateFromXalloc) {
  char* s = strdup("libc's malloc call");
  EXPECT_EQ(owned(s), 1) << "strdup inside libc did not use xalloc's malloc";
  std::free(s);
  std::string str(500, 's');
  EXPECT_EQ(owned(str.data()), 1);
  std::vector<int> v(10000);
  EXPECT_EQ(owned(v.data()), 1);
}

TEST(StaticLink, StaticInitialisationUsedXalloc) {
  EXPECT_EQ(owned(g_before_main), 1);
  EXPECT_EQ(owned((*g_before_main)[9].data()), 1);
}

TEST(StaticLink, Threads) {
  std::vector<void*> blocks(1000);
  std::thread t([&] {
    for (auto& p : blocks) p = ::operator new(64);
  });
  t.join();
  for (void* p : blocks) {
    EXPECT_EQ(owned(p), 1);
    ::operator delete(p);
  }
}
