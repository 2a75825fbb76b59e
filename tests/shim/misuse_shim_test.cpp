// Misuse reports through the exported names: each names the entry point
// the program called.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <new>

#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::hex_ptr;

namespace {

::testing::AssertionResult aborted_with_line(const xtest::ChildResult& r, const std::string& line) {
  if (!(r.signaled() && r.signal() == SIGABRT))
    return ::testing::AssertionFailure() << "expected death by SIGABRT; child " << r.describe();
  if (!xtest::has_line(r.err, line))
    return ::testing::AssertionFailure() << "expected the line\n  " << line << "\nin stderr:\n" << r.err;
  return ::testing::AssertionSuccess();
}

void* opaque(void* p) {
  static void* volatile sink;
  sink = p;
  return sink;
}

// "(N-byte class)" as a report names the class of `block`: a young heap
// (src/heap.h) may serve a size from a larger class than its own.
std::string class_label(void* block) {
  char label[48];
  std::snprintf(label, sizeof label, "(%zu-byte class)", malloc_usable_size(block));
  return label;
}

}  // namespace

TEST(ShimMisuse, DoubleFree) {
  void* keep = std::malloc(48);
  void* p = std::malloc(48);
  auto r = xtest::run_in_child([p] {
    std::free(p);
    std::free(opaque(p));
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) + " in free()"));
  std::free(p);
  std::free(keep);
}

TEST(ShimMisuse, InteriorPointer) {
  void* keep = std::malloc(48);
  auto* p = static_cast<char*>(std::malloc(48));
  void* inner = p + 16;
  auto r = xtest::run_in_child([inner] {
    std::free(opaque(inner));
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(
      r, "xalloc: invalid free (not the start of a block) of " + hex_ptr(inner) + " " + class_label(p) + " in free()"));
  std::free(p);
  std::free(keep);
}

TEST(ShimMisuse, StackPointer) {
  int local = 0;
  void* addr = &local;  // the child's stack is a copy: same address
  auto r = xtest::run_in_child([addr] {
    std::free(opaque(addr));
    return 0;
  });
  EXPECT_TRUE(
      aborted_with_line(r, "xalloc: invalid free (pointer not allocated by xalloc) of " + hex_ptr(addr) + " in free()"));
}

TEST(ShimMisuse, DoubleDelete) {
  void* keep = ::operator new(48);
  void* p = ::operator new(48);
  auto r = xtest::run_in_child([p] {
    ::operator delete(p);
    ::operator delete(opaque(p));
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(
      r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) + " in operator delete()"));
  ::operator delete(p);
  ::operator delete(keep);
}

TEST(ShimMisuse, DoubleSizedDelete) {
  void* keep = ::operator new(48);
  void* p = ::operator new(48);
  auto r = xtest::run_in_child([p] {
    ::operator delete(p, 48);
    ::operator delete(opaque(p), 48);
    return 0;
  });
  EXPECT_TRUE(
      aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) +
                               " in operator delete(sized)"));
  ::operator delete(p);
  ::operator delete(keep);
}
