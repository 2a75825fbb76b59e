// Every form of C++ operator new and delete in a program linked with
// libxalloc.so: plain, array, nothrow, sized delete, std::align_val_t and
// their combinations; std::bad_alloc; the new_handler protocol.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {
// xalloc_owns through a laundered pointer (see xtest::launder_ptr).
__attribute__((always_inline)) inline int owned(const void* p) { return xalloc_owns(xtest::launder_ptr(p)); }
}  // namespace

using xtest::is_aligned;

namespace {

// The size is hidden from the optimiser, so that no new-expression or call
// is folded away or checked at compile time.
size_t opaque(size_t n) {
  static volatile size_t sink;
  sink = n;
  return sink;
}

// Frees a block that should never have been allocated (the expression
// around it was expected to throw).
__attribute__((noinline)) void discard(void* p) { ::operator delete(xtest::launder_ptr(p)); }

// Deletes p with `release` and checks the block went back to xalloc (the
// next malloc of its class returns it).
void expect_released(void* p, size_t size, const std::function<void(void*)>& release, const char* what) {
  ASSERT_NE(p, nullptr) << what;
  ASSERT_EQ(owned(p), 1) << what << " did not allocate from xalloc";
  release(p);
  void* again = std::malloc(size);
  EXPECT_EQ(again, p) << what << ": the delete did not return the block to xalloc";
  std::free(again);
}

struct alignas(256) Aligned256 {
  char bytes[300];
};

struct alignas(4096) Page {
  char bytes[100];
};

struct WithDestructor {
  static int destroyed;
  std::string s = std::string(50, 'q');
  ~WithDestructor() { ++destroyed; }
};
int WithDestructor::destroyed = 0;

}  // namespace

TEST(CxxNew, PlainAndArrayForms) {
  const size_t n = opaque(40);
  expect_released(::operator new(n), n, [](void* p) { ::operator delete(p); }, "new/delete");
  expect_released(::operator new[](n), n, [](void* p) { ::operator delete[](p); }, "new[]/delete[]");
  expect_released(::operator new(n), n, [n](void* p) { ::operator delete(p, n); }, "new/sized delete");
  expect_released(::operator new[](n), n, [n](void* p) { ::operator delete[](p, n); }, "new[]/sized delete[]");
}

TEST(CxxNew, NothrowForms) {
  const size_t n = opaque(40);
  expect_released(::operator new(n, std::nothrow), n, [](void* p) { ::operator delete(p, std::nothrow); },
                  "nothrow new/delete");
  expect_released(::operator new[](n, std::nothrow), n, [](void* p) { ::operator delete[](p, std::nothrow); },
                  "nothrow new[]/delete[]");
}

TEST(CxxNew, AlignedForms) {
  const size_t n = opaque(40);
  for (size_t a : {size_t{32}, size_t{64}, size_t{256}, size_t{4096}, size_t{65536}, size_t{2} << 20}) {
    auto al = std::align_val_t(a);
    void* p = ::operator new(n, al);
    EXPECT_TRUE(is_aligned(p, a)) << a;
    EXPECT_EQ(owned(p), 1);
    ::operator delete(p, al);
    p = ::operator new[](n, al);
    EXPECT_TRUE(is_aligned(p, a)) << a;
    EXPECT_EQ(owned(p), 1);
    ::operator delete[](p, al);
    p = ::operator new(n, al, std::nothrow);
    EXPECT_TRUE(is_aligned(p, a)) << a;
    EXPECT_EQ(owned(p), 1);
    ::operator delete(p, al, std::nothrow);
    p = ::operator new[](n, al, std::nothrow);
    EXPECT_TRUE(is_aligned(p, a)) << a;
    EXPECT_EQ(owned(p), 1);
    ::operator delete[](p, al, std::nothrow);
    p = ::operator new(n, al);
    ::operator delete(p, n, al);
    p = ::operator new[](n, al);
    ::operator delete[](p, n, al);
  }
  // Each aligned delete returns the block to xalloc. Alignment 16 keeps the
  // block in its plain size class, so reuse is visible through malloc.
  auto al = std::align_val_t(16);
  expect_released(::operator new(n, al), n, [al](void* p) { ::operator delete(p, al); }, "aligned delete");
  expect_released(::operator new[](n, al), n, [al](void* p) { ::operator delete[](p, al); }, "aligned delete[]");
  expect_released(::operator new(n, al), n, [n, al](void* p) { ::operator delete(p, n, al); },
                  "sized aligned delete");
  expect_released(::operator new[](n, al), n, [n, al](void* p) { ::operator delete[](p, n, al); },
                  "sized aligned delete[]");
  expect_released(::operator new(n, al, std::nothrow), n, [al](void* p) { ::operator delete(p, al, std::nothrow); },
                  "nothrow aligned delete");
  expect_released(::operator new[](n, al, std::nothrow), n,
                  [al](void* p) { ::operator delete[](p, al, std::nothrow); }, "nothrow aligned delete[]");
}

TEST(CxxNew, NewExpressionsOfOverAlignedTypes) {
  auto* a = new Aligned256;
  EXPECT_TRUE(is_aligned(a, 256));
  EXPECT_EQ(owned(a), 1);
  delete a;
  auto* arr = new Aligned256[7];
  EXPECT_TRUE(is_aligned(arr, 256));
  EXPECT_EQ(owned(arr), 1);
  delete[] arr;
  auto* page = new Page;
  EXPECT_TRUE(is_aligned(page, 4096));
  delete page;
  auto* nothrow_page = new (std::nothrow) Page[3];
  ASSERT_NE(nothrow_page, nullptr);
  EXPECT_TRUE(is_aligned(nothrow_page, 4096));
  delete[] nothrow_page;
  std::vector<Aligned256> v(100);
  EXPECT_TRUE(is_aligned(v.data(), 256));
  EXPECT_EQ(owned(v.data()), 1);
}

TEST(CxxNew, ArraysOfObjectsWithDestructors) {
  WithDestructor::destroyed = 0;
  auto* arr = new WithDestructor[opaque(25)];
  EXPECT_EQ(owned(arr), 1);
  EXPECT_EQ(owned(arr[3].s.data()), 1);
  delete[] arr;
  EXPECT_EQ(WithDestructor::destroyed, 25);
  auto sp = std::make_shared<WithDestructor>();
  EXPECT_EQ(owned(sp.get()), 1);
  std::map<int, std::string> m;
  for (int i = 0; i < 1000; ++i) m[i] = std::string(static_cast<size_t>(i % 100) + 20, 'a');
  EXPECT_EQ(owned(m[500].data()), 1);
}

TEST(CxxNew, ImpossibleSizeThrowsBadAlloc) {
  EXPECT_THROW(discard(::operator new(opaque(SIZE_MAX))), std::bad_alloc);
  EXPECT_THROW(discard(::operator new[](opaque(SIZE_MAX / 2))), std::bad_alloc);
  EXPECT_THROW(discard(::operator new(opaque(SIZE_MAX), std::align_val_t(64))), std::bad_alloc);
  EXPECT_THROW(discard(::operator new[](opaque(size_t{1} << 60), std::align_val_t(4096))), std::bad_alloc);
  // Through a new-expression too.
  EXPECT_THROW(
      {
        auto* p = new char[opaque(SIZE_MAX - 64)];
        delete[] xtest::launder_ptr(p);
      },
      std::bad_alloc);
}

TEST(CxxNew, NothrowReturnsNull) {
  EXPECT_EQ(::operator new(opaque(SIZE_MAX), std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](opaque(SIZE_MAX), std::nothrow), nullptr);
  EXPECT_EQ(::operator new(opaque(SIZE_MAX), std::align_val_t(64), std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](opaque(SIZE_MAX), std::align_val_t(64), std::nothrow), nullptr);
  char* p = xtest::launder_ptr(new (std::nothrow) char[opaque(SIZE_MAX - 64)]);
  EXPECT_EQ(p, nullptr);
}

namespace {

int g_handler_calls = 0;

void handler_gives_up_after_three() {
  if (++g_handler_calls == 3) std::set_new_handler(nullptr);
}

void handler_throws() {
  ++g_handler_calls;
  throw std::bad_alloc();
}

class NewHandler : public ::testing::Test {
 protected:
  void SetUp() override { g_handler_calls = 0; }
  void TearDown() override { std::set_new_handler(nullptr); }
};

}  // namespace

TEST_F(NewHandler, CalledUntilItUninstallsItself) {
  std::set_new_handler(handler_gives_up_after_three);
  EXPECT_THROW(discard(::operator new(opaque(SIZE_MAX))), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 3);
  g_handler_calls = 0;
  std::set_new_handler(handler_gives_up_after_three);
  EXPECT_THROW(discard(::operator new[](opaque(SIZE_MAX), std::align_val_t(128))), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 3) << "aligned new[]";
}

TEST_F(NewHandler, HandlerThatThrows) {
  std::set_new_handler(handler_throws);
  EXPECT_THROW(discard(::operator new(opaque(SIZE_MAX))), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 1);
  // nothrow new runs the handler too, and turns its exception into nullptr.
  EXPECT_EQ(::operator new(opaque(SIZE_MAX), std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 2);
  EXPECT_EQ(::operator new(opaque(SIZE_MAX), std::align_val_t(64), std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 3);
}

TEST_F(NewHandler, NotCalledWhenMemoryIsAvailable) {
  std::set_new_handler(handler_throws);
  void* p = ::operator new(opaque(1000));
  ::operator delete(xtest::launder_ptr(p));
  p = ::operator new(opaque(size_t{40} << 20));
  ::operator delete(xtest::launder_ptr(p));
  EXPECT_EQ(g_handler_calls, 0);
}

namespace {

constexpr size_t kMiB = size_t{1} << 20;
std::vector<void*>* g_reserve = nullptr;

void handler_frees_reserve() {
  ++g_handler_calls;
  if (g_reserve->empty()) {
    std::set_new_handler(nullptr);  // nothing left: the next failure throws
    return;
  }
  for (void* p : *g_reserve) ::operator delete(p);
  g_reserve->clear();
}

}  // namespace

TEST_F(NewHandler, FreesAReserveThenAllocationSucceeds) {
  auto r = xtest::run_in_child(
      [] {
        std::vector<void*> reserve, blocks;
        reserve.reserve(64);
        blocks.reserve(4096);
        g_reserve = &reserve;
        for (int i = 0; i < 32; ++i) reserve.push_back(::operator new(kMiB));  // 32 MiB set aside
        size_t vm = xtest::vm_size_bytes();
        struct rlimit lim = {vm + 256 * kMiB, vm + 256 * kMiB};
        if (setrlimit(RLIMIT_AS, &lim) != 0) return 2;
        std::set_new_handler(handler_frees_reserve);
        size_t after_first_call = 0;
        try {
          while (blocks.size() < blocks.capacity()) {
            blocks.push_back(::operator new(kMiB));
            if (g_handler_calls == 1) ++after_first_call;
          }
          return 3;  // never ran out
        } catch (const std::bad_alloc&) {
        }
        std::fprintf(stderr, "handler calls %d, allocations after the first call %zu, total %zu MiB\n",
                     g_handler_calls, after_first_call, blocks.size());
        if (g_handler_calls != 2) return 4;
        if (after_first_call < 16) return 5;  // the reserve's memory was not reused
        for (void* p : blocks) ::operator delete(p);
        return 0;
      },
      120);
  std::printf("%s", r.err.c_str());  // the child's summary line
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}
