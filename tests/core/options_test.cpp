// Run-time options (XALLOC_* environment variables, read once at start-up):
// each test re-runs itself in a fresh process with the variable set.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "core_test_util.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::fresh_with_env;
using xtest::kMiB;
using xtest::stats;

TEST(Options, UnknownOptionIsReported) {
  auto r = fresh_with_env({{"XALLOC_NO_SUCH_OPTION", "1"}}, [] {
    xalloc_free(xalloc_malloc(10));
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line(r.err, "xalloc: warning: unknown option XALLOC_NO_SUCH_OPTION=1 ignored")) << r.err;
}

TEST(Options, BadValueIsReported) {
  auto r = fresh_with_env({{"XALLOC_PURGE_DELAY_MS", "soon"}}, [] {
    xalloc_free(xalloc_malloc(10));
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line(r.err, "xalloc: warning: bad value in XALLOC_PURGE_DELAY_MS=soon ignored")) << r.err;
}

// Numbers too large for where they are used are bad values, not wrapped:
// a purge delay of 2^64-1 ms added to the clock wrapped to "purge at once".
TEST(Options, NumbersAboveTheirMaximumAreBadValues) {
  auto r = fresh_with_env({{"XALLOC_PURGE_DELAY_MS", "18446744073709551615"},
                           {"XALLOC_DIRTY_PERCENT", "1000000000000000000"},
                           {"XALLOC_VERBOSE", "1"}},
                          [] {
                            xalloc_free(xalloc_malloc(10));
                            return 0;
                          });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line(r.err, "xalloc: warning: bad value in XALLOC_PURGE_DELAY_MS=18446744073709551615 ignored"))
      << r.err;
  EXPECT_TRUE(xtest::has_line(r.err, "xalloc: warning: bad value in XALLOC_DIRTY_PERCENT=1000000000000000000 ignored"))
      << r.err;
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: option XALLOC_PURGE_DELAY_MS=500 ")) << r.err;
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: option XALLOC_DIRTY_PERCENT=12 ")) << r.err;
}

TEST(Options, VerbosePrintsTheConfiguration) {
  auto r = fresh_with_env({{"XALLOC_VERBOSE", "1"}, {"XALLOC_HUGE_CACHE", "64MiB"}}, [] {
    xalloc_free(xalloc_malloc(10));
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: option XALLOC_HUGE_CACHE=67108864 ")) << r.err;
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: option XALLOC_PURGE_DELAY_MS=")) << r.err;
}

TEST(Options, StatsAtExit) {
  auto r = fresh_with_env({{"XALLOC_STATS", "1"}}, [] {
    xalloc_free(xalloc_malloc(10));
    std::exit(0);  // destructors run: the statistics are printed
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_TRUE(xtest::has_line_starting(r.err, "xalloc: stats: mapped ")) << r.err;
}

namespace {

// Bodies shared by the tests below. `small_first`: make a small allocation
// (which initialises the allocator) before anything else.
int huge_cache_zero_body(bool small_first) {
  if (small_first) xalloc_free(xalloc_malloc(16));
  void* p = xalloc_malloc(40 * kMiB);
  if (p == nullptr) return 2;
  size_t mapped = stats().mapped;
  xalloc_free(p);
  size_t after = stats().mapped;
  std::fprintf(stderr, "mapped %zu -> %zu MiB\n", mapped >> 20, after >> 20);
  return after + 40 * kMiB <= mapped ? 0 : 3;
}

int zero_purge_delay_body(bool small_first) {
  if (small_first) xalloc_free(xalloc_malloc(16));
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) {
    void* p = xalloc_malloc(kMiB);
    xtest::touch_pages(p, kMiB, 1);
    blocks.push_back(p);
  }
  size_t committed = stats().committed;
  for (void* p : blocks) xalloc_free(p);
  // Purging happens on the allocator's slow paths, at most every 10 ms.
  usleep(50 * 1000);
  xalloc_free(xalloc_malloc(kMiB));
  size_t after = stats().committed;
  std::fprintf(stderr, "committed %zu -> %zu KiB\n", committed >> 10, after >> 10);
  return after + 48 * kMiB <= committed ? 0 : 3;
}

}  // namespace

TEST(Options, HugeCacheZeroUnmapsAtOnce) {
  auto r = fresh_with_env({{"XALLOC_HUGE_CACHE", "0"}}, [] { return huge_cache_zero_body(true); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "a freed huge block stayed mapped; " << r.describe();
}

TEST(Options, ZeroPurgeDelayReturnsMemoryWithoutTrim) {
  auto r = fresh_with_env({{"XALLOC_PURGE_DELAY_MS", "0"}}, [] { return zero_purge_delay_body(true); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

// Empty slabs pooled for reuse (src/slab_pool.h) go back once no thread
// needed them for half the purge delay, even when no thread allocates again.
TEST(Options, BackgroundPurgeEmptiesTheSlabPoolOfAnIdleProcess) {
  auto r = fresh_with_env({{"XALLOC_BACKGROUND_PURGE", "1"}, {"XALLOC_PURGE_DELAY_MS", "1000"}}, [] {
    std::thread([] {
      std::vector<void*> blocks;
      for (int i = 0; i < 40000; ++i) blocks.push_back(xalloc_malloc(200));
      for (void* p : blocks) xalloc_free(p);
    }).join();
    if (stats().pooled == 0) return 2;  // nothing was pooled: the test proves nothing
    for (int waited = 0; waited < 10000 && stats().pooled != 0; waited += 20) usleep(20 * 1000);
    return stats().pooled == 0 ? 0 : 3;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "exit 2: nothing pooled, 3: still pooled after 10 s; " << r.describe();
}

TEST(Options, ZeroPurgeDelayPoolsNothing) {
  auto r = fresh_with_env({{"XALLOC_PURGE_DELAY_MS", "0"}}, [] {
    std::vector<void*> blocks;
    for (int i = 0; i < 40000; ++i) blocks.push_back(xalloc_malloc(200));
    for (void* p : blocks) xalloc_free(p);
    return stats().pooled == 0 ? 0 : 3;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "empty slabs were pooled with no purge delay; " << r.describe();
}

// Regression test (tests/KNOWN_BUGS.md #6): the environment used to be read
// only when the first thread heap was created, so large and huge
// allocations before that ran with the default options.
TEST(Options, AppliedFromTheFirstAllocation) {
  auto r = fresh_with_env({{"XALLOC_HUGE_CACHE", "0"}}, [] { return huge_cache_zero_body(false); });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "XALLOC_HUGE_CACHE=0 ignored; " << r.describe();
}

TEST(Options, AbortOnInvalidFreeCanBeTurnedOff) {
  auto r = fresh_with_env({{"XALLOC_ABORT_ON_INVALID_FREE", "0"}}, [] {
    int local = 0;
    xalloc_free(xalloc_malloc(10));
    xalloc_free(&local);  // ignored
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_EQ(r.err, "");
}

// XALLOC_COMMIT_ON_DEMAND=1 (on by itself under a data size limit or a
// kernel that never overcommits; oom_test.cpp): writable mappings - what
// such a kernel charges - follow the memory in use, not the 32 MiB segments
// reserved, and come back down when memory is given back. Every kind of
// block is written whole after its memory was decommitted and committed
// again, and calloc'd memory reads as zero.
namespace {

bool zero_and_fill(void* p, size_t size, unsigned char fill) {
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < size; i += 4096) {
    if (b[i] != 0) return false;
  }
  std::memset(p, fill, size);
  return true;
}

int commit_on_demand_body() {
  size_t start = xtest::vm_data_bytes();
  void* first = xalloc_malloc(16);
  size_t after_first = xtest::vm_data_bytes();
  std::fprintf(stderr, "VmData %zu KiB before the first allocation, %zu after it\n", start >> 10, after_first >> 10);
  // The segment map's 4 MiB and the emergency buffer's 1 MiB of .bss
  // uncharged, the first segment's header and first MiB charged.
  if (after_first + 3 * kMiB > start) return 5;
  xalloc_free(first);
  std::vector<void*> small;
  for (size_t i = 0; i < 4 * kMiB / 1024; ++i) {
    small.push_back(xalloc_malloc(1024));
    std::memset(small.back(), 1, 1024);
  }
  size_t with_small = xtest::vm_data_bytes();
  std::fprintf(stderr, "VmData %zu KiB at start, %zu after 4 MiB of small blocks\n", start >> 10, with_small >> 10);
  if (with_small > start + 12 * kMiB) return 1;  // a whole segment's 32 MiB was charged

  std::vector<void*> large;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 64; ++i) {
      large.push_back(xalloc_calloc(1, kMiB));
      if (large.back() == nullptr || !zero_and_fill(large.back(), kMiB, 2)) return 2;
    }
    void* huge = xalloc_calloc(1, 40 * kMiB);
    if (huge == nullptr || !zero_and_fill(huge, 40 * kMiB, 3)) return 3;
    size_t full = xtest::vm_data_bytes();
    for (void* p : large) xalloc_free(p);
    large.clear();
    xalloc_free(huge);
    xalloc_trim(0);
    size_t trimmed = xtest::vm_data_bytes();
    std::fprintf(stderr, "round %d: VmData %zu KiB with 104 MiB of large and huge blocks, %zu after free and trim\n",
                 round, full >> 10, trimmed >> 10);
    if (trimmed > with_small + 8 * kMiB || full < trimmed + 100 * kMiB) return 4;
  }
  for (void* p : small) xalloc_free(p);
  return 0;
}

}  // namespace

TEST(Options, CommitOnDemandChargesWhatIsUsed) {
  auto r = fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", "1"}}, commit_on_demand_body);
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

// Segments carry the transparent huge page advice of XALLOC_HUGE_PAGES
// (default: none), also after their memory was decommitted and committed
// again. (The kernel's flags for the mapping that holds `p`: "nh" no huge
// pages, "hg" huge pages.)
namespace {

std::string mapping_flags(const void* p) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return "";
  auto address = reinterpret_cast<uintptr_t>(p);
  char line[512];
  bool inside = false;
  std::string flags;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long start = 0, end = 0;
    if (std::sscanf(line, "%lx-%lx ", &start, &end) == 2 && std::strchr(line, ' ') != nullptr &&
        std::strncmp(line, "VmFlags", 7) != 0) {
      inside = start <= address && address < end;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      flags = line + 8;
      if (!flags.empty() && flags.back() == '\n') flags.pop_back();
      break;
    }
  }
  std::fclose(f);
  return flags;
}

bool has_flag(const std::string& flags, const char* flag) {
  return (" " + flags + " ").find(std::string(" ") + flag + " ") != std::string::npos;
}

int huge_page_advice_body(const char* expected, const char* unexpected) {
  void* small = xalloc_malloc(100);
  void* large = xalloc_malloc(3 * kMiB);
  std::string flags = mapping_flags(large);
  std::fprintf(stderr, "flags of the segment: %s\n", flags.c_str());
  if (!has_flag(mapping_flags(small), expected) || !has_flag(flags, expected) || has_flag(flags, unexpected)) return 1;
  xalloc_free(large);
  xalloc_trim(0);  // purged, and with commit on demand decommitted
  large = xalloc_malloc(3 * kMiB);
  std::memset(large, 1, 3 * kMiB);
  flags = mapping_flags(large);
  std::fprintf(stderr, "after a purge: %s\n", flags.c_str());
  if (!has_flag(flags, expected) || has_flag(flags, unexpected)) return 2;
  xalloc_free(large);
  xalloc_free(small);
  return 0;
}

}  // namespace

TEST(Options, SegmentsAreKeptFromTransparentHugePagesUnlessAsked) {
  // (The fresh process runs the first fresh_with_env's body: one body for
  // every variant, which reads its variant from the environment.)
  auto body = [] {
    const char* huge = std::getenv("XALLOC_HUGE_PAGES");
    bool asked = huge != nullptr && std::strcmp(huge, "1") == 0;
    return asked ? huge_page_advice_body("hg", "nh") : huge_page_advice_body("nh", "hg");
  };
  for (const char* on_demand : {"0", "1"}) {
    for (const char* huge : {"0", "1"}) {
      auto r = fresh_with_env({{"XALLOC_COMMIT_ON_DEMAND", on_demand}, {"XALLOC_HUGE_PAGES", huge}}, body);
      EXPECT_TRUE(r.exited() && r.exit_code() == 0)
          << "XALLOC_COMMIT_ON_DEMAND=" << on_demand << " XALLOC_HUGE_PAGES=" << huge << ": " << r.describe();
    }
  }
}
