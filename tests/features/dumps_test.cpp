// Feature tests of the profiles and reports a real program leaves
// (docs/observability.md): numbered heap profiles that never overwrite one
// another, the profile of the peak, signal profiles written at once
// whatever the program does, profiles every N bytes, and statistics that
// reach the user although the program closed its stderr. Each runs a
// program in a child process (feature_util.h) under LD_PRELOAD.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "feature_util.h"
#include "test_util.h"

namespace {

using namespace xfeature;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kKeptMiB = 600 * 100000.0 / kMiB;  // prof_signal keep, python: 600 blocks of 100 kB

// The number on the program's line "<key> <n>", or -2 when it has none.
long value_of(const std::string& out, const std::string& key) {
  std::string line = line_starting(out, key + " ");
  return line.empty() ? -2 : std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
}

// google-pprof --text of a profile of `binary`.
PprofText pprof_text(const std::string& binary, const std::string& heap_file, std::string* text = nullptr) {
  Outcome r = run_program({find_pprof(), "--text", binary, heap_file}, {}, 60);
  EXPECT_TRUE(r.exited_ok()) << r.describe();
  if (text != nullptr) *text = r.out;
  return parse_pprof(r.out);
}

// The sum of a collapsed profile's bytes.
double collapsed_bytes(const std::string& path) {
  double total = 0;
  for (const std::string& line : xtest::split_lines(read_file(path))) {
    size_t space = line.rfind(' ');
    if (space != std::string::npos) total += std::strtod(line.c_str() + space + 1, nullptr);
  }
  return total;
}

std::vector<std::string> profiler_env(const std::string& prefix, std::vector<std::string> extra = {}) {
  std::vector<std::string> env = {preload(XTEST_LIBXALLOC), "XALLOC_PROF=1", "XALLOC_PROF_RATE=64k",
                                  "XALLOC_PROF_PREFIX=" + prefix};
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// --- numbered profiles, the signal's ---------------------------------------------

// The program keeps 60 MB, raises the profile signal and waits, allocating
// nothing, for the profile; then frees everything and exits. The signal's
// profile is the first of the sequence and stays as written: the exit's
// profile (asked for although nothing is live) is the next one.
TEST(Dumps, SignalProfileIsNumberedAndNotOverwrittenAtExit) {
  if (find_pprof().empty()) GTEST_SKIP() << "google-pprof is not installed (scripts/install-deps.sh test)";
  TempDir dir;
  std::string prefix = dir.path() + "/p";
  Outcome r = run_program({XTEST_PROF_SIGNAL, "keep", prefix},
                          profiler_env(prefix, {"XALLOC_PROF_SIGNAL=" + std::to_string(SIGUSR1), "XALLOC_PROF_EXIT=2"}),
                          60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_GE(value_of(r.out, "dump_ms"), 0) << "no profile while the program waited\n" << r.describe();
  ASSERT_EQ(profile_count(prefix, r.pid), 2) << r.describe();
  std::string text;
  PprofText first = pprof_text(XTEST_PROF_SIGNAL, profile_stem(prefix, r.pid, 0) + ".heap", &text);
  EXPECT_TRUE(within(first.total_mb, kKeptMiB, 0.10, "the signal's profile: Total (MB)")) << text;
  EXPECT_TRUE(within(first.cum_mb["main"], kKeptMiB, 0.10, "the signal's profile: main (MB)")) << text;
  PprofText last = pprof_text(XTEST_PROF_SIGNAL, profile_stem(prefix, r.pid, 1) + ".heap", &text);
  EXPECT_LT(last.total_mb, 1.0) << "the exit's profile, after every block was freed\n" << text;
  EXPECT_FALSE(file_exists(prefix + "." + std::to_string(r.pid) + ".heap")) << "an unnumbered profile";
}

// By default the exit writes no profile when no sampled memory is live,
// and the peak's is not written again when a profile as high was.
TEST(Dumps, NoExitProfileWhenNothingIsLive) {
  TempDir dir;
  std::string prefix = dir.path() + "/p";
  Outcome r = run_program({XTEST_PROF_SIGNAL, "keep", prefix},
                          profiler_env(prefix, {"XALLOC_PROF_SIGNAL=" + std::to_string(SIGUSR1)}), 60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_GE(value_of(r.out, "dump_ms"), 0) << r.describe();
  EXPECT_EQ(profile_count(prefix, r.pid), 1) << r.describe();
}

// After the signal the program only allocates and frees blocks its
// thread's caches serve: no allocator slow path runs, and the profile is
// written all the same, at once. (With a sample due in the loop a sampled
// block's free would take a slow path: the rate keeps any from being due.)
TEST(Dumps, SignalProfileIsWrittenWhileTheProgramOnlyHitsItsCaches) {
  TempDir dir;
  std::string prefix = dir.path() + "/p";
  std::vector<std::string> env = {preload(XTEST_LIBXALLOC), "XALLOC_PROF=1", "XALLOC_PROF_RATE=64g",
                                  "XALLOC_PROF_PREFIX=" + prefix, "XALLOC_PROF_SIGNAL=" + std::to_string(SIGUSR1)};
  Outcome r = run_program({XTEST_PROF_SIGNAL, "busy", prefix}, env, 60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  long ms = value_of(r.out, "dump_ms");
  EXPECT_GE(ms, 0) << "no profile within 2 s of the signal\n" << r.describe();
  EXPECT_LE(ms, 200) << r.describe();
  EXPECT_TRUE(file_exists(profile_stem(prefix, r.pid, 0) + ".collapsed")) << r.describe();
}

// --- the peak, and every N bytes --------------------------------------------------

// The real python3 (not a launcher script such as pyenv's), or "".
std::string python_executable() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/python3";
    start = end + 1;
    if (access(candidate.c_str(), X_OK) != 0) continue;
    Outcome r = run_program({candidate, "-c", "import sys; print(sys.executable)"}, {}, 30);
    std::string exe = r.out.substr(0, r.out.find('\n'));
    if (r.exited_ok() && !exe.empty() && access(exe.c_str(), X_OK) == 0) return exe;
  }
  return "";
}

// Python frees its objects before it exits: what is live then is nearly
// nothing, and the profile of its peak (written at exit, since the peak
// stayed under XALLOC_PROF_PEAK) is what shows the 60 MB it kept. At the
// default rate, 600 blocks of 100 kB give 104 samples on average, +-9%:
// a rate of 64 KiB (470 samples, +-2%) keeps the test off the tolerance.
TEST(Dumps, PythonLeavesTheProfileOfItsPeak) {
  if (find_pprof().empty()) GTEST_SKIP() << "google-pprof is not installed";
  std::string python = python_executable();
  if (python.empty()) GTEST_SKIP() << "no python3";
  TempDir dir;
  std::string prefix = dir.path() + "/py";
  Outcome r = run_program({python, "-c", "keep = [bytearray(100000) for _ in range(600)]"}, profiler_env(prefix), 60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  int count = profile_count(prefix, r.pid);
  ASSERT_GE(count, 1) << r.describe();
  double highest = 0;
  std::string texts;
  for (int seq = 0; seq < count; ++seq) {
    std::string text;
    highest = std::max(highest, pprof_text(python, profile_stem(prefix, r.pid, seq) + ".heap", &text).total_mb);
    texts += text.substr(0, 400) + "\n";
  }
  EXPECT_TRUE(within(highest, kKeptMiB, 0.10, "python's highest profile: Total (MB)")) << texts;
}

// The program's memory in use grows by 47.7 MiB a round, a new peak 40 MiB
// (XALLOC_PROF_PEAK) above the last each time: a profile each round, which
// it waits for, each higher than the one before. It frees everything at
// the end: a last profile of the peak may come at exit, when the copy at
// the peak grew after the last round's profile was written.
TEST(Dumps, ProfilesAtEachNewPeak) {
  TempDir dir;
  std::string prefix = dir.path() + "/p";
  Outcome r = run_program({XTEST_PROF_SIGNAL, "peak", prefix}, profiler_env(prefix, {"XALLOC_PROF_PEAK=40m"}), 60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_EQ(value_of(r.out, "rounds_with_profile"), 5) << r.describe();
  int count = profile_count(prefix, r.pid);
  EXPECT_GE(count, 5) << r.describe();
  EXPECT_LE(count, 6) << r.describe();
  double previous = 0;
  for (int seq = 0; seq < count; ++seq) {
    double bytes = collapsed_bytes(profile_stem(prefix, r.pid, seq) + ".collapsed");
    EXPECT_GE(bytes, previous) << "profile " << seq;
    if (seq == 0) {
      EXPECT_GE(bytes, 40 * kMiB) << "the first peak's profile";
    }
    previous = bytes;
  }
  EXPECT_GE(previous, 225 * kMiB) << "the highest profile (the peak, to within 1/32)";
}

// Each round of the program allocates (and frees) 47.7 MiB, which takes the
// bytes allocated past one more multiple of XALLOC_PROF_INTERVAL: a profile
// each time, which the program waits for before it goes on.
TEST(Dumps, ProfilesEveryIntervalOfAllocatedBytes) {
  TempDir dir;
  std::string prefix = dir.path() + "/p";
  Outcome r = run_program({XTEST_PROF_SIGNAL, "interval", prefix},
                          profiler_env(prefix, {"XALLOC_PROF_PEAK=0", "XALLOC_PROF_INTERVAL=40m"}), 60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_EQ(value_of(r.out, "rounds_with_profile"), 5) << r.describe();
  EXPECT_EQ(profile_count(prefix, r.pid), 5) << r.describe();
}

// --- reports that outlive the program's stderr ------------------------------------

std::string ls_path() {
  for (const char* path : {"/bin/ls", "/usr/bin/ls"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

// ls closes its stderr before it exits (gnulib's close_stdout): the
// statistics, printed later, go to the descriptor kept at start-up.
TEST(Dumps, StatisticsOutliveAClosedStderr) {
  std::string ls = ls_path();
  if (ls.empty()) GTEST_SKIP() << "no ls";
  Outcome r = run_program({ls, "/"}, {preload(XTEST_LIBXALLOC), "XALLOC_STATS=1"}, 30);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_FALSE(line_starting(r.err, "xalloc: stats:    class").empty()) << r.describe();
  EXPECT_FALSE(line_starting(r.err, "xalloc: stats: mapped ").empty()) << r.describe();
}

// XALLOC_STATS_FILE: the statistics go to that file (%p: the pid), not to
// stderr.
TEST(Dumps, StatisticsFile) {
  std::string ls = ls_path();
  if (ls.empty()) GTEST_SKIP() << "no ls";
  TempDir dir;
  Outcome r = run_program(
      {ls, "/"}, {preload(XTEST_LIBXALLOC), "XALLOC_STATS=1", "XALLOC_STATS_FILE=" + dir.path() + "/stats.%p"}, 30);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  std::string stats = read_file(dir.path() + "/stats." + std::to_string(r.pid));
  EXPECT_FALSE(line_starting(stats, "xalloc: stats: mapped ").empty()) << stats << "\n" << r.describe();
  EXPECT_EQ(r.err.find("xalloc: stats:"), std::string::npos) << r.describe();
}

// The leak report goes with the statistics; a program's own stderr keeps
// what it wrote itself.
TEST(Dumps, LeakReportGoesToTheStatisticsFile) {
  TempDir dir;
  Outcome r = run_program({XTEST_PROF_WORKLOAD}, {preload(XTEST_LIBXALLOC), "XALLOC_LEAKS=1", "XALLOC_PROF_RATE=64k",
                                                  "XALLOC_STATS_FILE=" + dir.path() + "/leaks.%p"},
                          60);
  ASSERT_TRUE(r.exited_ok()) << r.describe();
  std::string report = read_file(dir.path() + "/leaks." + std::to_string(r.pid));
  EXPECT_NE(report.find("xalloc: leaks: top allocation sites"), std::string::npos) << report << r.describe();
  EXPECT_NE(report.find("keep_small"), std::string::npos) << report;
  EXPECT_EQ(r.err.find("xalloc: leaks:"), std::string::npos) << r.describe();
}

}  // namespace
