// Feature tests: the secure build (docs/security.md). Each runs a small program
// (tests/features/*.c) in a child process, under LD_PRELOAD of a library or
// linked with libxalloc.so, with the XALLOC_* options it needs, and checks
// its output, exit status and resource use. This program itself runs on
// the C library's malloc.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "feature_util.h"
#include "test_util.h"

namespace {

using namespace xfeature;

Outcome secure_probe(const char* mode, const char* library = XTEST_LIBXALLOC_SECURE) {
  return run_program({XTEST_SECURE_PROBE, mode}, {preload(library)}, 30);
}

std::string block_address(const Outcome& r) {
  std::string line = line_starting(r.out, "block ");
  return line.empty() ? "?" : line.substr(6);
}

void expect_overflow_report_at_free(const Outcome& r, const std::string& block_class) {
  ASSERT_EQ(r.signal(), SIGABRT) << r.describe();
  std::string expected = "xalloc: heap overflow (canary at the end of the block overwritten) detected at free of " +
                         block_address(r) + " (" + block_class + " class) in free()";
  EXPECT_EQ(line_starting(r.err, "xalloc: "), expected) << r.describe();
  EXPECT_EQ(r.out.find("survived"), std::string::npos);
}

TEST(Secure, OverflowPastTheEndOfA40ByteBlockIsReportedAtFree) {
  expect_overflow_report_at_free(secure_probe("overflow"), "48-byte");
}

// A block freed by another thread has its canary checked when its owner
// takes it back.
TEST(Secure, OverflowOfABlockFreedByAnotherThreadIsReportedBeforeItsReuse) {
  Outcome r = secure_probe("overflow-remote");
  ASSERT_EQ(r.signal(), SIGABRT) << r.describe();
  std::string expected = "xalloc: heap overflow (canary at the end of the block overwritten) of " + block_address(r) +
                         " (48-byte class), found after the block was freed, before its reuse";
  EXPECT_EQ(line_starting(r.err, "xalloc: "), expected) << r.describe();
  EXPECT_EQ(r.out.find("survived"), std::string::npos);
}

// The 16-byte class keeps its canary in the free marker's word.
TEST(Secure, OverflowPastTheEndOfAn8ByteBlockIsReportedAtFree) {
  expect_overflow_report_at_free(secure_probe("overflow-small"), "16-byte");
}

// Canaries are written when a slab is carved, not at each malloc: a write
// into a free block's canary is still there when the block is handed out
// again, and its next free reports it.
TEST(Secure, CanaryOverwrittenWhileTheBlockWasFreeIsReportedAtItsNextFree) {
  expect_overflow_report_at_free(secure_probe("tail-after-free"), "48-byte");
}

TEST(Secure, UsableSizeExcludesTheCanary) {
  // malloc_usable_size(malloc(40)) is at least 40, and writing 8 bytes at
  // the usable size is an overflow: the canary is past the usable bytes.
  Outcome r = secure_probe("at-usable");
  std::string usable_line = line_starting(r.out, "usable ");
  ASSERT_FALSE(usable_line.empty()) << r.describe();
  size_t usable = std::strtoul(usable_line.c_str() + 7, nullptr, 10);
  EXPECT_GE(usable, 40u);
  ASSERT_EQ(r.signal(), SIGABRT) << "8 bytes written at the usable size went unnoticed\n" << r.describe();
  std::string report = line_starting(r.err, "xalloc: heap overflow");
  ASSERT_FALSE(report.empty()) << r.describe();
  // "... (48-byte class) ...": the usable size leaves the class's last 8 bytes to the canary.
  size_t open = report.rfind(" (");
  ASSERT_NE(open, std::string::npos) << report;
  size_t class_size = std::strtoul(report.c_str() + open + 2, nullptr, 10);
  EXPECT_LE(usable + 8, class_size) << report;
  // And the whole usable size is usable: filling it is no overflow.
  Outcome fill = secure_probe("usable");
  EXPECT_TRUE(fill.exited_ok()) << fill.describe();
  EXPECT_NE(fill.out.find("usable ok"), std::string::npos) << fill.describe();
}

TEST(Secure, DoubleFreeIsReported) {
  Outcome r = secure_probe("double-free");
  ASSERT_EQ(r.signal(), SIGABRT) << r.describe();
  std::string expected = "xalloc: double free of " + block_address(r);
  EXPECT_EQ(line_starting(r.err, "xalloc: ").rfind(expected, 0), 0u) << r.describe();
}

TEST(Secure, LargeBlockIsFollowedByAGuardPage) {
  // malloc(100000): usable size 102400 (whole pages); one byte past its
  // last page faults at once.
  Outcome r = secure_probe("guard");
  EXPECT_EQ(r.signal(), SIGSEGV) << r.describe();
  EXPECT_EQ(r.out.find("survived"), std::string::npos) << r.describe();
  // The same write is no fault in the default build: the test writes where
  // it means to, just past the block.
  Outcome plain = secure_probe("guard", XTEST_LIBXALLOC);
  EXPECT_TRUE(plain.exited_ok()) << plain.describe();
}

// A large or huge block resized in place (or moved) is followed by a guard
// page at its new end; growing in place takes down the old one. With
// `launcher`, the probe runs under it.
namespace {
void check_reallocated_blocks_are_guarded(const char* launcher) {
  struct Case {
    const char* from;
    const char* to;
    const char* how;  // what the probe prints: this realloc is served in place
  };
  for (const Case& c : {Case{"100000", "300000", "in place"},      // large, grown into the free slices after it
                        Case{"300000", "200000", "in place"},      // large, shrunk
                        Case{"20000000", "40000000", nullptr},     // huge, grown (mremap, or moved)
                        Case{"40000000", "17000000", "in place"},  // huge, shrunk
                        Case{"100000", "20000000", "moved"}}) {    // large to huge
    std::vector<std::string> argv = {XTEST_SECURE_PROBE, "realloc-guard", c.from, c.to};
    if (launcher != nullptr) argv.insert(argv.begin(), launcher);
    Outcome r = run_program(argv, {preload(XTEST_LIBXALLOC_SECURE)}, 30);
    std::string what = std::string(c.from) + " -> " + c.to + ": ";
    if (c.how != nullptr) {
      EXPECT_NE(r.out.find(c.how), std::string::npos) << what << r.describe();
    }
    EXPECT_EQ(r.out.find("contents lost"), std::string::npos) << what << r.describe();
    EXPECT_EQ(r.signal(), SIGSEGV) << what << r.describe();
    EXPECT_EQ(r.out.find("survived"), std::string::npos) << what << r.describe();
  }
}

// The span of a freed large block, kept by its thread or handed back to it
// by the thread that freed it, serves the thread's next block of about its
// size, with the guard page where that block ends: the same size (the
// guard stays), a smaller and a larger one of as many slices (it moves).
// With `launcher`, the probe runs under it.
void check_kept_large_blocks_are_guarded(const char* launcher) {
  struct Case {
    const char* first;
    const char* second;
    const char* remote;
  };
  for (const Case& c : {Case{"100000", "100000", ""}, Case{"100000", "90000", ""}, Case{"90000", "100000", ""},
                        Case{"300000", "290000", "remote"}}) {
    std::vector<std::string> argv = {XTEST_SECURE_PROBE, "large-reuse", c.first, c.second, c.remote};
    if (launcher != nullptr) argv.insert(argv.begin(), launcher);
    Outcome r = run_program(argv, {preload(XTEST_LIBXALLOC_SECURE)}, 30);
    std::string what = std::string(c.first) + " then " + c.second + " " + c.remote + ": ";
    EXPECT_NE(r.out.find("same span"), std::string::npos) << what << r.describe();
    EXPECT_NE(r.out.find("filled"), std::string::npos) << what << r.describe();
    EXPECT_EQ(r.signal(), SIGSEGV) << what << r.describe();
    EXPECT_EQ(r.out.find("survived"), std::string::npos) << what << r.describe();
  }
}
}  // namespace

// A mapping cached by a free serves a smaller block (22 MiB after 24) and
// a slightly larger one (20 MiB and 256 KiB after 20 MiB: within the
// mapping's rounding), each followed by a guard page at its own end. With
// `launcher`, the probe runs under it.
namespace {
void check_cached_huge_blocks_are_guarded(const char* launcher) {
  struct Case {
    const char* first_kib;
    const char* second_kib;
  };
  for (const Case& c : {Case{"24576", "22528"}, Case{"20480", "20736"}}) {
    std::vector<std::string> argv = {XTEST_SECURE_PROBE, "huge-reuse", c.first_kib, c.second_kib};
    if (launcher != nullptr) argv.insert(argv.begin(), launcher);
    Outcome r = run_program(argv, {preload(XTEST_LIBXALLOC_SECURE)}, 30);
    std::string what = std::string(c.first_kib) + " KiB, then " + c.second_kib + " KiB: ";
    EXPECT_NE(r.out.find("cached mapping"), std::string::npos) << what << r.describe();
    EXPECT_NE(r.out.find("filled"), std::string::npos) << what << r.describe();
    EXPECT_EQ(r.signal(), SIGSEGV) << what << r.describe();
    EXPECT_EQ(r.out.find("survived"), std::string::npos) << what << r.describe();
  }
}
}  // namespace

TEST(Secure, ReallocatedBlockIsFollowedByAGuardPage) { check_reallocated_blocks_are_guarded(nullptr); }

TEST(Secure, KeptLargeSpanIsGuardedAtEachBlocksEnd) { check_kept_large_blocks_are_guarded(nullptr); }

// With every allocation sampled by the heap profiler, each block gets a
// span of its own, and a freed one-slice span is kept for the next sample
// that fits it - with its guard page: 62,000 bytes (16 pages and the
// guard) do not, and take another span.
TEST(Secure, SampledBlockTakesAKeptSpanOnlyWithRoomForItsGuard) {
  const std::vector<std::string> sampled = {preload(XTEST_LIBXALLOC_SECURE), "XALLOC_PROF=1", "XALLOC_PROF_RATE=1",
                                            "XALLOC_PROF_PREFIX=/dev/null/none"};
  Outcome fits = run_program({XTEST_SECURE_PROBE, "large-reuse", "50000", "61000"}, sampled, 30);
  EXPECT_NE(fits.out.find("same span"), std::string::npos) << fits.describe();
  EXPECT_NE(fits.out.find("filled"), std::string::npos) << fits.describe();
  EXPECT_EQ(fits.signal(), SIGSEGV) << fits.describe();
  Outcome too_long = run_program({XTEST_SECURE_PROBE, "large-reuse", "61000", "62000"}, sampled, 30);
  EXPECT_NE(too_long.out.find("another span"), std::string::npos) << too_long.describe();
  EXPECT_NE(too_long.out.find("filled"), std::string::npos) << too_long.describe();
  EXPECT_EQ(too_long.signal(), SIGSEGV) << too_long.describe();
}

// The same guards where the kernel has no lightweight ones (made with
// mprotect instead): a large block's, a cached huge block's, and those of
// blocks resized by realloc.
TEST(Secure, GuardPagesWithoutLightweightGuards) {
  Outcome probe = run_program({XTEST_WITHOUT_GUARD_MARKS, "/bin/true"}, {}, 30);
  if (probe.exited_with(77)) GTEST_SKIP() << "no seccomp filter here: " << probe.describe();
  for (const char* mode : {"guard", "huge-after-free"}) {
    Outcome r = run_program({XTEST_WITHOUT_GUARD_MARKS, XTEST_SECURE_PROBE, mode}, {preload(XTEST_LIBXALLOC_SECURE)}, 30);
    EXPECT_EQ(r.signal(), SIGSEGV) << mode << ": " << r.describe();
    EXPECT_EQ(r.out.find("survived"), std::string::npos) << mode << ": " << r.describe();
  }
  check_reallocated_blocks_are_guarded(XTEST_WITHOUT_GUARD_MARKS);
  check_cached_huge_blocks_are_guarded(XTEST_WITHOUT_GUARD_MARKS);
  check_kept_large_blocks_are_guarded(XTEST_WITHOUT_GUARD_MARKS);
}

// Freed huge blocks are cached for reuse and made inaccessible when their
// pages are given back: at once for a burst beyond the dirty budget, else
// after the purge delay. A block taken from the cache is writable to its
// usable size and followed by a guard page.
TEST(Secure, CachedHugeBlockIsGuardedAndSealed) {
  check_cached_huge_blocks_are_guarded(nullptr);
  Outcome after_free = secure_probe("huge-after-free");
  EXPECT_EQ(after_free.signal(), SIGSEGV) << after_free.describe();
  EXPECT_EQ(after_free.out.find("survived"), std::string::npos) << after_free.describe();
  const std::vector<std::string> decay = {preload(XTEST_LIBXALLOC_SECURE), "XALLOC_PURGE_DELAY_MS=100",
                                          "XALLOC_BACKGROUND_PURGE=1"};
  Outcome after_delay = run_program({XTEST_SECURE_PROBE, "huge-after-delay"}, decay, 30);
  EXPECT_EQ(after_delay.signal(), SIGSEGV) << after_delay.describe();
  EXPECT_EQ(after_delay.out.find("survived"), std::string::npos) << after_delay.describe();
  // A mapping opened for an aligned block (its front left sealed) and
  // cached again unpurged is opened in full for an unaligned one.
  Outcome realigned = run_program({XTEST_SECURE_PROBE, "huge-realign"}, decay, 30);
  EXPECT_TRUE(realigned.exited_ok()) << realigned.describe();
  EXPECT_NE(realigned.out.find("cached mapping"), std::string::npos) << realigned.describe();
  EXPECT_NE(realigned.out.find("survived"), std::string::npos) << realigned.describe();
  // The default build caches the block too, and keeps it accessible.
  Outcome plain = secure_probe("huge-after-free", XTEST_LIBXALLOC);
  EXPECT_TRUE(plain.exited_ok()) << plain.describe();
}

TEST(Secure, CarveOrderIsRandomised) {
  Outcome r = secure_probe("order");
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  std::string line = line_starting(r.out, "ascending pairs ");
  ASSERT_FALSE(line.empty()) << r.describe();
  int ascending = std::atoi(line.c_str() + 16);
  EXPECT_LT(ascending, 199) << "200 consecutive malloc(56) results in increasing address order";
  // Each next block is the head of one of four runs, picked at random: a
  // step repeats when one run is picked three times in a row, or when the
  // batch's last run is all that is left (a stride through each page-sized
  // batch: nearly every step).
  std::string steps = line_starting(r.out, "repeated steps ");
  ASSERT_FALSE(steps.empty()) << r.describe();
  EXPECT_LT(std::atoi(steps.c_str() + 15), 66) << r.out;
}

TEST(Secure, FreedBlockIsNotReusedAtOnce) {
  Outcome r = secure_probe("reuse");
  EXPECT_TRUE(r.exited_ok()) << r.describe();
}

// A freed block waits in the quarantine for at least XALLOC_QUARANTINE
// (default 128; 0: none) later frees, and comes back at the first malloc
// after the one after them if its slot was the last of its half (heap.h);
// from any slot, before three times that many.
TEST(Secure, QuarantineDelaysReuseByItsDepth) {
  for (const auto& [setting, depth] : {std::pair<std::string, int>{"", 128},
                                       {"XALLOC_QUARANTINE=256", 256},
                                       {"XALLOC_QUARANTINE=16", 16},
                                       {"XALLOC_QUARANTINE=0", 0}}) {
    std::vector<std::string> env = {preload(XTEST_LIBXALLOC_SECURE)};
    if (!setting.empty()) env.push_back(setting);
    Outcome r = run_program({XTEST_SECURE_PROBE, "delay"}, env, 60);
    ASSERT_TRUE(r.exited_ok()) << setting << ": " << r.describe();
    std::string line = line_starting(r.out, "reused after ");
    ASSERT_FALSE(line.empty()) << setting << ": " << r.describe();
    int fewest = 0, most = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "reused after %d to %d frees", &fewest, &most), 2) << line;
    EXPECT_EQ(fewest, depth == 0 ? 0 : depth + 1) << setting << ": " << line;
    EXPECT_LT(most, depth == 0 ? 1 : 3 * depth) << setting << ": " << line;
  }
}

TEST(Secure, PythonWorkloadRuns) {
  const char* python = "/usr/bin/python3";
  if (!file_exists(python)) GTEST_SKIP() << "no " << python;
  const char* script = R"(
import json
d = {str(i): {"v": [i, i * 2, str(i) * 3], "f": i / 7} for i in range(100000)}
s = json.dumps(d, sort_keys=True)
e = json.loads(s)
assert e == d
for k in list(e)[::2]:
    del e[k]
e.update({"x" + str(i): bytearray(i % 300) for i in range(50000)})
words = sorted(set(s.split(",")))
print("ok", len(s), len(e), len(words))
)";
  Outcome r = run_program({python, "-c", script}, {preload(XTEST_LIBXALLOC_SECURE)}, 60);
  EXPECT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_EQ(r.err.find("xalloc:"), std::string::npos) << r.describe();
  // The same results as on the C library's malloc.
  Outcome plain = run_program({python, "-c", script}, {}, 60);
  ASSERT_TRUE(plain.exited_ok()) << plain.describe();
  EXPECT_EQ(r.out, plain.out);
  EXPECT_EQ(r.out.rfind("ok ", 0), 0u) << r.out;
}

}  // namespace
