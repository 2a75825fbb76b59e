// Feature tests: the heap profiler and the leak report (docs/observability.md). Each runs a small program
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

constexpr double kSmallCount = 100000;   // keep_small: 100,000 x malloc(1000)
constexpr double kMidBytes = 16000 * 5000.0;  // keep_mid: 16,000 x malloc(5000), counted as requested
constexpr double kMediumBytes = 500 * 100000.0;  // keep_medium: 500 x malloc(100000)
constexpr double kMiB = 1024.0 * 1024.0;

// The class size prof_workload prints on a line "<key><bytes>".
double block_bytes(const std::string& out, const std::string& key) {
  std::string line = line_starting(out, key);
  return line.empty() ? 0 : std::strtod(line.c_str() + key.size(), nullptr);
}

struct Profile {
  Outcome run;
  std::string heap_file, collapsed_file;
  double small_bytes = 0;  // expected live bytes of keep_small (its blocks' class size)
};

// Runs prof_workload [mode] with the profiler on (and `extra_env`); finds
// its profile files: the exit's, the last of its numbered profiles.
Profile profile_workload(const TempDir& dir, const char* mode, const char* extra_env = nullptr) {
  Profile p;
  std::vector<std::string> argv = {XTEST_PROF_WORKLOAD};
  if (mode != nullptr) argv.push_back(mode);
  std::string prefix = dir.path() + "/p";
  std::vector<std::string> env = {preload(XTEST_LIBXALLOC), "XALLOC_PROF=1", "XALLOC_PROF_RATE=64k",
                                  "XALLOC_PROF_PREFIX=" + prefix};
  if (extra_env != nullptr) env.push_back(extra_env);
  p.run = run_program(argv, env, 60);
  std::string stem = profile_stem(prefix, p.run.pid, profile_count(prefix, p.run.pid) - 1);
  p.heap_file = stem + ".heap";
  p.collapsed_file = stem + ".collapsed";
  p.small_bytes = kSmallCount * block_bytes(p.run.out, "small_block_bytes ");
  return p;
}

// Checks the pprof text profile and the collapsed stacks of a profile of
// prof_workload.
void check_profile(const Profile& p) {
  ASSERT_TRUE(p.run.exited_ok()) << p.run.describe();
  ASSERT_GT(p.small_bytes, 0) << p.run.describe();
  ASSERT_TRUE(file_exists(p.heap_file)) << p.heap_file << "\n" << p.run.describe();
  ASSERT_TRUE(file_exists(p.collapsed_file)) << p.collapsed_file;

  std::string pprof = find_pprof();
  if (pprof.empty()) {
    ADD_FAILURE() << "google-pprof is not installed (google-perftools; scripts/install-deps.sh test)";
  } else {
    Outcome r = run_program({pprof, "--text", XTEST_PROF_WORKLOAD, p.heap_file}, {}, 60);
    ASSERT_TRUE(r.exited_ok()) << r.describe();
    PprofText t = parse_pprof(r.out);
    double small_mb = p.small_bytes / kMiB, medium_mb = kMediumBytes / kMiB, mid_mb = kMidBytes / kMiB;
    EXPECT_TRUE(within(t.total_mb, small_mb + medium_mb + mid_mb, 0.10, "pprof Total (MB)")) << r.out;
    EXPECT_TRUE(within(t.cum_mb["keep_small"], small_mb, 0.10, "keep_small (MB)")) << r.out;
    EXPECT_TRUE(within(t.cum_mb["keep_medium"], medium_mb, 0.10, "keep_medium (MB)")) << r.out;
    EXPECT_TRUE(within(t.cum_mb["keep_mid"], mid_mb, 0.10, "keep_mid (MB)")) << r.out;
    EXPECT_LT(t.cum_mb["churn"], 1.0) << "freed memory in the live profile\n" << r.out;
  }

  // Collapsed stacks: "outer;...;inner bytes", one line per stack.
  std::string collapsed = read_file(p.collapsed_file);
  double small = 0, medium = 0, mid = 0, churn = 0, total = 0;
  for (const std::string& line : xtest::split_lines(collapsed)) {
    size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    double bytes = std::strtod(line.c_str() + space + 1, nullptr);
    std::string stack = ";" + line.substr(0, space);
    total += bytes;
    if (stack.find(";keep_small+") != std::string::npos) small += bytes;
    if (stack.find(";keep_medium+") != std::string::npos) medium += bytes;
    if (stack.find(";keep_mid+") != std::string::npos) mid += bytes;
    if (stack.find(";churn+") != std::string::npos) churn += bytes;
  }
  EXPECT_TRUE(within(small, p.small_bytes, 0.10, "collapsed keep_small bytes")) << collapsed;
  EXPECT_TRUE(within(medium, kMediumBytes, 0.10, "collapsed keep_medium bytes")) << collapsed;
  EXPECT_TRUE(within(mid, kMidBytes, 0.10, "collapsed keep_mid bytes")) << collapsed;
  EXPECT_LT(churn, 1e6) << collapsed;
  EXPECT_TRUE(within(total, p.small_bytes + kMediumBytes + kMidBytes, 0.10, "collapsed total bytes")) << collapsed;
}

struct LeakSite {
  double bytes = 0;
  std::vector<std::string> frames;
};

// "xalloc: leaks: N bytes (K sampled blocks) allocated at:" and its "    #i frame" lines.
std::vector<LeakSite> parse_leaks(const std::string& err) {
  std::vector<LeakSite> sites;
  const std::string head = "xalloc: leaks: ";
  for (const std::string& line : xtest::split_lines(err)) {
    if (line.rfind(head, 0) == 0 && line.find(" bytes (") != std::string::npos) {
      sites.push_back({std::strtod(line.c_str() + head.size(), nullptr), {}});
    } else if (!sites.empty() && line.rfind("    #", 0) == 0) {
      size_t space = line.find(' ', 5);
      if (space != std::string::npos) sites.back().frames.push_back(line.substr(space + 1));
    }
  }
  return sites;
}

bool names(const LeakSite& site, const std::string& function) {
  return std::any_of(site.frames.begin(), site.frames.end(),
                     [&](const std::string& f) { return f.rfind(function + "+", 0) == 0 || f == function; });
}

void check_leaks(const char* mode) {
  std::vector<std::string> argv = {XTEST_PROF_WORKLOAD};
  if (mode != nullptr) argv.push_back(mode);
  Outcome r = run_program(argv, {preload(XTEST_LIBXALLOC), "XALLOC_LEAKS=1", "XALLOC_PROF_RATE=64k"}, 60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  std::vector<LeakSite> sites = parse_leaks(r.err);
  ASSERT_GE(sites.size(), 3u) << r.describe();
  EXPECT_TRUE(names(sites[0], "keep_small")) << "the largest site is not keep_small\n" << r.err;
  EXPECT_TRUE(names(sites[1], "keep_mid")) << "the second site is not keep_mid\n" << r.err;
  EXPECT_TRUE(names(sites[2], "keep_medium")) << "the third site is not keep_medium\n" << r.err;
  double small_bytes = kSmallCount * block_bytes(r.out, "small_block_bytes ");
  EXPECT_TRUE(within(sites[0].bytes, small_bytes, 0.10, "keep_small's estimate")) << r.err;
  EXPECT_TRUE(within(sites[1].bytes, kMidBytes, 0.10, "keep_mid's estimate")) << r.err;
  EXPECT_TRUE(within(sites[2].bytes, kMediumBytes, 0.10, "keep_medium's estimate")) << r.err;
  for (const LeakSite& site : sites) EXPECT_FALSE(names(site, "churn")) << r.err;
}

// The workload on a second thread (the main thread only starts it).
TEST(Profiler, HeapProfileAttributesLiveBytesToTheirFunctions) {
  TempDir dir;
  check_profile(profile_workload(dir, "thread"));
}

TEST(Profiler, LeakReportNamesTheKeepingFunctionsFirst) { check_leaks("thread"); }

// With statistics on, small allocations are counted one by one on the slow
// path and sampled there, instead of through windows (heap_profiler.h):
// the same profile either way.
TEST(Profiler, CountedAllocationsAreSampledAlike) {
  TempDir dir;
  Profile p = profile_workload(dir, "thread", "XALLOC_STATS=1");
  check_profile(p);
  EXPECT_NE(p.run.err.find("xalloc: stats: "), std::string::npos) << p.run.describe();
}

// The workload on the main thread, which starts xalloc. Regression test
// (tests/KNOWN_BUGS.md #11): that thread used to be never sampled, so a
// single-threaded program had an empty profile.
TEST(Profiler, MainThreadIsSampled) {
  TempDir dir;
  check_profile(profile_workload(dir, nullptr));
  check_leaks(nullptr);
}

// Regression test (tests/KNOWN_BUGS.md #12): a thread that only allocates
// blocks above 64 KiB had no heap, and its allocations were neither sampled
// nor counted.
TEST(Profiler, ThreadThatOnlyAllocatesLargeBlocksIsSampled) {
  Outcome r = run_program({XTEST_PROF_WORKLOAD, "large-thread"},
                      {preload(XTEST_LIBXALLOC), "XALLOC_LEAKS=1", "XALLOC_PROF_RATE=64k"}, 60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  std::vector<LeakSite> sites = parse_leaks(r.err);
  ASSERT_GE(sites.size(), 1u) << "no leak sites: 50 MB live in 100 KB blocks were not sampled\n" << r.describe();
  EXPECT_TRUE(names(sites[0], "keep_medium")) << r.err;
  EXPECT_TRUE(within(sites[0].bytes, kMediumBytes, 0.10, "keep_medium's estimate")) << r.err;
}

// The profiler keeps the spans of freed sampled blocks for its next samples
// (frontend/kept_spans.cpp); freeing such a block twice is still a reported double free.
TEST(Profiler, DoubleFreeOfASampledBlockIsReported) {
  Outcome r = run_program({XTEST_PROF_WORKLOAD, "double-free"},
                          {preload(XTEST_LIBXALLOC), "XALLOC_PROF=1", "XALLOC_PROF_RATE=1", "XALLOC_PROF_PREFIX=/dev/null/x"},
                          30);
  ASSERT_EQ(r.signal(), SIGABRT) << r.describe();
  std::string block = line_starting(r.out, "block ");
  ASSERT_FALSE(block.empty()) << r.describe();
  std::string expected = "xalloc: double free of " + block.substr(6);
  EXPECT_EQ(line_starting(r.err, "xalloc: ").rfind(expected, 0), 0u) << r.describe();
}

// Regression (tests/KNOWN_BUGS.md #18): the child could wait forever for the profiler's lock or libunwind's.
// fork() while another thread holds the profiler's lock (it samples every
// allocation) must not leave the child waiting for that lock forever.
TEST(Profiler, ForkWhileAnotherThreadSamplesLeavesTheChildWorking) {
  TempDir dir;
  Outcome r = run_program({XTEST_PROF_WORKLOAD, "fork"},
                          {preload(XTEST_LIBXALLOC), "XALLOC_PROF=1", "XALLOC_PROF_RATE=1",
                           "XALLOC_PROF_PREFIX=" + dir.path() + "/p"},
                          60);
  EXPECT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_NE(r.out.find("forks ok"), std::string::npos) << r.describe();
}

// Buffers grown by realloc stay sampled as they are resized in place or
// remapped, and count at their final size.
TEST(Profiler, BuffersGrownByReallocCountAtTheirFinalSize) {
  constexpr double kGrownBytes = 4.0 * 24 * kMiB;
  Outcome r = run_program({XTEST_PROF_WORKLOAD, "realloc"},
                          {preload(XTEST_LIBXALLOC), "XALLOC_LEAKS=1", "XALLOC_PROF_RATE=64k"}, 60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  std::vector<LeakSite> sites = parse_leaks(r.err);
  ASSERT_GE(sites.size(), 1u) << r.describe();
  EXPECT_TRUE(names(sites[0], "grow_buffers")) << r.err;
  EXPECT_TRUE(within(sites[0].bytes, kGrownBytes, 0.10, "grow_buffers' estimate")) << r.err;
}

}  // namespace
