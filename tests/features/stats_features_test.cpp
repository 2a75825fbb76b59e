// Feature tests: statistics (docs/observability.md). Each runs a small program
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

struct ClassRow {
  std::string requests;  // a number, or "-" when requests are not counted
  long slabs = -1, live_blocks = -1, live_kib = -1;
  std::string peak_slabs;  // a number, or "-" when slabs by class are not counted
};

// "xalloc: stats:    class     requests   slabs  live blocks     live KiB peak slabs" and its rows.
std::map<std::string, ClassRow> parse_stats_table(const std::string& err) {
  std::map<std::string, ClassRow> rows;
  for (const std::string& line : xtest::split_lines(err)) {
    if (line.rfind("xalloc: stats: ", 0) != 0) continue;
    std::istringstream in(line.substr(15));
    std::string cls;
    ClassRow row;
    if (!(in >> cls >> row.requests)) continue;
    bool is_row = cls == "large" || cls == "huge" || std::all_of(cls.begin(), cls.end(), ::isdigit);
    if (!is_row) continue;
    in >> row.slabs >> row.live_blocks >> row.live_kib >> row.peak_slabs;
    rows[cls] = row;
  }
  return rows;
}

TEST(Stats, PerClassTableCountsRequests) {
  Outcome r = run_program({XTEST_STATS_PROBE, "requests", "1000", "100"}, {"XALLOC_STATS=1"}, 30);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  std::string cls_line = line_starting(r.out, "class ");
  ASSERT_FALSE(cls_line.empty()) << r.describe();
  std::string cls = cls_line.substr(6);
  EXPECT_EQ(cls, "112") << "malloc(100)'s class";
  auto rows = parse_stats_table(r.err);
  ASSERT_TRUE(rows.count(cls)) << "no row for class " << cls << "\n" << r.err;
  EXPECT_GE(std::atol(rows[cls].requests.c_str()), 1000) << r.err;
  EXPECT_GE(rows[cls].live_blocks, 1000) << r.err;
  EXPECT_GE(rows[cls].live_kib, 1000 * 112 / 1024) << r.err;
#if defined(XALLOC_COUNT_SHARED)
  EXPECT_EQ(rows[cls].peak_slabs, "-") << r.err;
#else
  // A heap adds its slabs to the peak four at a time (docs/observability.md).
  EXPECT_GE(std::atol(rows[cls].peak_slabs.c_str()) + 3, rows[cls].slabs) << r.err;
  EXPECT_GE(rows[cls].slabs, 1) << r.err;
#endif
  ASSERT_TRUE(rows.count("large")) << "no 'large' row\n" << r.err;
  EXPECT_GE(std::atol(rows["large"].requests.c_str()), 1) << "the malloc(200000) is not counted\n" << r.err;
  EXPECT_TRUE(rows.count("huge")) << r.err;
  EXPECT_FALSE(line_starting(r.err, "xalloc: stats: mapped ").empty()) << r.err;
  EXPECT_FALSE(line_starting(r.err, "xalloc: stats: peak in use").empty()) << r.err;
}

// Aligned small blocks are popped inline from what serves their class
// (alloc.h); with statistics on, that is nothing, and each is counted.
TEST(Stats, AlignedAllocationsAreCounted) {
  Outcome r = run_program({XTEST_STATS_PROBE, "aligned", "1000", "48", "64"}, {"XALLOC_STATS=1"}, 30);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  std::string cls_line = line_starting(r.out, "class ");
  ASSERT_FALSE(cls_line.empty()) << r.describe();
  std::string cls = cls_line.substr(6);
  EXPECT_EQ(cls, "64") << "aligned_alloc(64, 48)'s class";
  auto rows = parse_stats_table(r.err);
  // Requests count by the size asked for; the blocks live in the class
  // that serves the alignment.
  ASSERT_TRUE(rows.count("48") && rows.count(cls)) << r.err;
  EXPECT_GE(std::atol(rows["48"].requests.c_str()), 1000) << r.err;
  EXPECT_GE(rows[cls].live_blocks, 1000) << r.err;
}

// Regression test (tests/KNOWN_BUGS.md #12): allocations above 1 KiB made
// before the thread's first small allocation were not counted.
TEST(Stats, AllocationsBeforeTheFirstSmallOneAreCounted) {
  Outcome r = run_program({XTEST_STATS_PROBE, "large-first"}, {"XALLOC_STATS=1"}, 30);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  auto rows = parse_stats_table(r.err);
  ASSERT_TRUE(rows.count("large")) << r.err;
  EXPECT_EQ(rows["large"].requests, "1") << "one malloc(200000)\n" << r.err;
  // stdout's buffer (4 KiB) is allocated next, still before any small block.
  if (rows.count("4096")) {
    EXPECT_EQ(rows["4096"].requests, std::to_string(rows["4096"].live_blocks)) << r.err;
  }
}

TEST(Stats, StatsPrintWorksAtAnyTime) {
  Outcome r = run_program({XTEST_STATS_PROBE, "print"}, {}, 30);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_NE(r.out.find("printed"), std::string::npos);
  // Once from xalloc_stats_print(), once from malloc_stats().
  size_t headers = 0, pos = 0;
  while ((pos = r.err.find("xalloc: stats:    class", pos)) != std::string::npos) ++headers, ++pos;
  EXPECT_EQ(headers, 2u) << r.err;
  auto rows = parse_stats_table(r.err);
  // malloc(100)'s class: 112 bytes, or 128 while the heap is young (src/heap.h).
  std::string line = line_starting(r.out, "class ");
  ASSERT_FALSE(line.empty()) << r.out;
  std::string cls = line.substr(6);
  ASSERT_TRUE(cls == "112" || cls == "128") << r.out;
  ASSERT_TRUE(rows.count(cls)) << r.err;
  EXPECT_EQ(rows[cls].live_blocks, 100) << r.err;
  // Slabs by class are counted only with XALLOC_STATS=1 from the start.
  EXPECT_EQ(rows[cls].peak_slabs, "-") << r.err;
  EXPECT_FALSE(line_starting(r.err, "xalloc: stats: mapped ").empty()) << r.err;
}

TEST(Stats, Mallinfo2FollowsLiveBytes) {
  Outcome r = run_program({XTEST_STATS_PROBE, "mallinfo"}, {}, 30);
  EXPECT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_NE(r.out.find("mallinfo ok"), std::string::npos) << r.describe();
}

// 10,000 blocks of 40 bytes live (class 48), 10,000 freed among them, and
// a peak of 8 MB more in 4000-byte blocks, freed before the account.
TEST(Stats, AccountSplitsRequestedRoundingAndFreeBlocks) {
  Outcome r = run_program({XTEST_STATS_PROBE, "account"}, {"XALLOC_STATS=1"}, 30);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  auto v = key_values(r.out);
  ASSERT_EQ(v["usable"], 48) << r.out;
  const double kSlack = 64 << 10;  // other blocks (stdio's), a slab's touched but uncarved tail
  EXPECT_EQ(v["now_known"], 1) << r.out;
  EXPECT_GE(v["now_live"], 10000 * 40) << r.out;
  EXPECT_LE(v["now_live"], 10000 * 40 + kSlack) << r.out;
  EXPECT_GE(v["now_rounding"], 10000 * 8 - 8192) << r.out;
  EXPECT_LE(v["now_rounding"], 10000 * 8 + kSlack) << r.out;
  EXPECT_GE(v["now_slab_free"], 10000 * 48) << r.out;
  EXPECT_LE(v["now_slab_free"], 10000 * 48 + kSlack) << r.out;
  EXPECT_GE(v["now_resident"], v["now_live"] + v["now_rounding"] + v["now_slab_free"] + v["now_empty"]) << r.out;
  // Taken within a thirty-second of the peak of resident memory (and 64 KiB).
  EXPECT_EQ(v["peak_known"], 1) << r.out;
  EXPECT_GE(v["peak_live"], 10000 * 40 + 2000 * 4000 - 1.0e6) << r.out;
  EXPECT_LE(v["peak_live"], 20000 * 40 + 2000 * 4000 + kSlack) << r.out;
  EXPECT_GE(v["peak_resident"], v["peak_live"]) << r.out;
}

// The report at exit has both accounts.
TEST(Stats, ExitReportHasTheAccountAtPeak) {
  Outcome r = run_program({XTEST_STATS_PROBE, "requests", "1000", "100"}, {"XALLOC_STATS=1"}, 30);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_FALSE(line_starting(r.err, "xalloc: stats: at peak: resident ").empty()) << r.err;
  EXPECT_FALSE(line_starting(r.err, "xalloc: stats: now: resident ").empty()) << r.err;
}

}  // namespace
