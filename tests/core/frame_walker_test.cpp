// The heap profiler's stack walker (src/frame_walker.h) against libunwind:
// both must find the same return addresses, frame for frame, through
// frames with and without a frame pointer, through libc's own code (a
// qsort callback) and on a thread's stack.
#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "diag/frame_walker.h"
#define UNW_LOCAL_ONLY
#include <libunwind.h>

namespace {

struct Traces {
  std::vector<void*> walked;
  bool complete = false;
  std::vector<void*> reference;
};

// Both walks start in this function, at two places: their first addresses
// differ, the rest must not. (libunwind steps frame by frame: its
// unw_backtrace keeps a per-thread cache whose destructor, at thread exit,
// runs after ThreadSanitizer has retired the thread and crashes it.)
__attribute__((noinline)) void capture(Traces* out, int max) {
  void* frames[256];
  xalloc::FrameWalk walk = xalloc::frame_walk(frames, max);
  out->walked.assign(frames, frames + walk.depth);
  out->complete = walk.complete;
  unw_context_t context;
  unw_cursor_t cursor;
  ASSERT_EQ(0, unw_getcontext(&context));
  ASSERT_EQ(0, unw_init_local(&cursor, &context));
  do {
    unw_word_t ip = 0;
    unw_get_reg(&cursor, UNW_REG_IP, &ip);
    out->reference.push_back(reinterpret_cast<void*>(ip));
  } while (static_cast<int>(out->reference.size()) < max && unw_step(&cursor) > 0);
}

void expect_same_callers(const Traces& t) {
  EXPECT_TRUE(t.complete);
  ASSERT_EQ(t.walked.size(), t.reference.size());
  ASSERT_GE(t.walked.size(), 2u);
  for (size_t i = 1; i < t.walked.size(); ++i) EXPECT_EQ(t.walked[i], t.reference[i]) << "frame " << i;
}

// A variable-length array makes the compiler address the frame through rbp
// (the CFA is rbp-based); the plain frames are rsp-based.
__attribute__((noinline)) int recurse_with_vla(int n, Traces* out, int max) {
  if (n == 0) {
    capture(out, max);
    return 0;
  }
  volatile char buffer[16 + n * 8];
  buffer[0] = static_cast<char>(n);
  return recurse_with_vla(n - 1, out, max) + buffer[0];
}

__attribute__((noinline)) int recurse_plain(int n, Traces* out, int max) {
  if (n == 0) {
    capture(out, max);
    return 0;
  }
  return recurse_plain(n - 1, out, max) + n;
}

TEST(FrameWalker, MatchesLibunwindOnTheMainStack) {
  for (int round = 0; round < 2; ++round) {  // the second from the rule cache
    Traces t;
    recurse_plain(6, &t, 64);
    expect_same_callers(t);
    Traces v;
    recurse_with_vla(6, &v, 64);
    expect_same_callers(v);
  }
}

Traces g_from_callback;
int compare_ints(const void* a, const void* b) {
  if (g_from_callback.walked.empty()) recurse_with_vla(2, &g_from_callback, 64);
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

TEST(FrameWalker, MatchesLibunwindThroughLibcCode) {
  std::vector<int> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int>((i * 7919) % 101);
  qsort(values.data(), values.size(), sizeof(int), compare_ints);
  expect_same_callers(g_from_callback);
  EXPECT_TRUE(std::is_sorted(values.begin(), values.end()));
}

TEST(FrameWalker, MatchesLibunwindOnAThreadStack) {
  Traces t;
  pthread_t thread;
  ASSERT_EQ(0, pthread_create(
                   &thread, nullptr,
                   [](void* arg) -> void* {
                     recurse_with_vla(4, static_cast<Traces*>(arg), 64);
                     return nullptr;
                   },
                   &t));
  pthread_join(thread, nullptr);
  expect_same_callers(t);
}

TEST(FrameWalker, StopsAtMaxFrames) {
  Traces t;
  recurse_plain(40, &t, 8);
  EXPECT_TRUE(t.complete);
  ASSERT_EQ(t.walked.size(), 8u);
  ASSERT_EQ(t.reference.size(), 8u);
  for (size_t i = 1; i < 8; ++i) EXPECT_EQ(t.walked[i], t.reference[i]) << "frame " << i;
}

}  // namespace
