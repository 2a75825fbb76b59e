// The secrets and hashes of meta/secure.h that every build uses (the free
// markers' secret) or that the secure build builds on (mix, canaries, the
// per-thread random generator). The secure build's hardening itself is
// tested through libxalloc-secure.so by the feature tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "meta/page.h"
#include "meta/secure.h"
#include "meta/slab.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

namespace secure = xalloc::secure;

namespace {

// The values the secrets hold before start-up sets them.
constexpr secure::Secrets kBuiltIn = {0x2545F4914F6CDD1Dull, 0x9E3779B97F4A7C15ull, 0xD1B54A32D192ED03ull};

}  // namespace

// mix is a fixed bijection-like hash: the same input gives the same output,
// neighbouring inputs spread apart, and no input of a run collides.
TEST(Secure, MixSpreadsNeighbouringValues) {
  EXPECT_EQ(secure::mix(12345), secure::mix(12345));
  std::set<uintptr_t> seen;
  for (uintptr_t v = 1; v <= 100000; ++v) {
    uintptr_t m = secure::mix(v);
    ASSERT_NE(m, v) << "mix left " << v << " as it was";
    ASSERT_TRUE(seen.insert(m).second) << "mix(" << v << ") collides with an earlier value";
  }
  // One input bit flips about half of the output's bits.
  for (uintptr_t v : {uintptr_t{1}, uintptr_t{0x1000}, uintptr_t{0x7f0012345670}}) {
    int flipped = __builtin_popcountll(secure::mix(v) ^ secure::mix(v ^ 1));
    EXPECT_GE(flipped, 16) << "mix(" << v << ") and its neighbour differ in " << flipped << " bits";
  }
}

// A block's canary is its address keyed with the canary secret: different
// for every block, and telling nothing beyond what one canary does.
TEST(Secure, CanaryIsTheBlockAddressKeyedWithTheSecret) {
  void* a = xalloc_malloc(64);
  void* b = xalloc_malloc(64);
  EXPECT_EQ(secure::canary_of(a), secure::g_secrets.canary ^ reinterpret_cast<uintptr_t>(a));
  EXPECT_NE(secure::canary_of(a), secure::canary_of(b));
  EXPECT_NE(secure::canary_of(a), reinterpret_cast<uintptr_t>(a)) << "the canary secret is zero";
  xalloc_free(a);
  xalloc_free(b);
}

// Start-up replaces the built-in secrets with random ones; the canary and
// marker secrets are odd, so neither a canary nor a free marker of a
// 16-byte aligned block is ever 0 or the block's own address.
TEST(Secure, SecretsAreRandomAndMarkersNeverZero) {
  xalloc_free(xalloc_malloc(16));  // start-up has run
  EXPECT_NE(secure::g_secrets.canary, kBuiltIn.canary);
  EXPECT_NE(secure::g_secrets.link, kBuiltIn.link);
  EXPECT_NE(secure::g_secrets.marker, kBuiltIn.marker);
  EXPECT_NE(secure::g_secrets.canary, secure::g_secrets.marker) << "one secret for two uses";
  EXPECT_EQ(secure::g_secrets.marker & 1, 1u);
  EXPECT_EQ(secure::g_secrets.canary & 1, 1u);
  std::vector<void*> blocks;
  for (size_t size : {size_t{16}, size_t{48}, size_t{1000}, size_t{5000}}) {
    for (int i = 0; i < 100; ++i) blocks.push_back(xalloc_malloc(size));
  }
  for (void* p : blocks) {
    auto* block = static_cast<xalloc::FreeBlock*>(p);
    uintptr_t marker = xalloc::free_marker(block);
    ASSERT_NE(marker, 0u);
    ASSERT_NE(marker, reinterpret_cast<uintptr_t>(p));
    ASSERT_NE(secure::canary_of(p), 0u);
  }
  for (void* p : blocks) xalloc_free(p);
}

// Each process draws its own secrets.
TEST(Secure, EachProcessHasItsOwnSecrets) {
  if (xtest::in_fresh_process()) {
    xalloc_free(xalloc_malloc(16));
    std::fprintf(stderr, "secrets %lx %lx\n", static_cast<unsigned long>(secure::g_secrets.marker),
                 static_cast<unsigned long>(secure::g_secrets.canary));
    xtest::finish_fresh_process(0);
  }
  auto r = xtest::run_test_in_fresh_process(xtest::current_test_name());
  ASSERT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  unsigned long marker = 0, canary = 0;
  bool found = false;
  for (const std::string& line : xtest::split_lines(r.err))
    found |= std::sscanf(line.c_str(), "secrets %lx %lx", &marker, &canary) == 2;
  ASSERT_TRUE(found) << r.err;
  EXPECT_NE(marker, secure::g_secrets.marker) << "a second process drew the same marker secret";
  EXPECT_NE(canary, secure::g_secrets.canary);
}

// The random generator of the secure build's allocation order: a sequence
// of its own in every thread, never 0, not repeating soon.
TEST(Secure, NextRandomDiffersPerThreadAndNeverIsZero) {
  auto draw = [] {
    std::vector<uint64_t> values(1000);
    for (uint64_t& v : values) v = secure::next_random();
    return values;
  };
  std::vector<uint64_t> first, second;
  std::thread([&] { first = draw(); }).join();
  std::thread([&] { second = draw(); }).join();
  std::set<uint64_t> distinct(first.begin(), first.end());
  EXPECT_EQ(distinct.size(), first.size()) << "a thread's random sequence repeats within 1000 values";
  EXPECT_EQ(distinct.count(0), 0u);
  EXPECT_NE(first[0], second[0]) << "two threads start their random sequences alike";
  size_t shared = 0;
  for (uint64_t v : second) shared += distinct.count(v);
  EXPECT_EQ(shared, 0u) << "two threads' sequences overlap";
}
