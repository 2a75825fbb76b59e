/*
 * rbstress: the allocation pattern of the Ruby string stress, in C++.
 *
 * Same pattern as stress_mem.rb (seed 003, allocator_bench): T threads
 * share 12,000,000 short-lived strings, 600,000 retained strings and chunks
 * of 200,000 strings (each count divided by T). A step either appends a
 * string of rand(100) bytes to the thread's current chunk or, with equal
 * odds while both remain, retains one until exit; when a chunk outgrows its
 * limit it is dropped (all its strings and its array freed) and replaced by
 * a chunk holding one string of rand(100,000) bytes. Unlike Ruby, the
 * threads run truly in parallel, nothing is deferred to a garbage
 * collector, and every string - even an empty one - is its own heap
 * allocation (new char[len + 1]); the chunk arrays are std::vectors.
 * Retained strings live in per-thread arrays until the end.
 *
 * usage: rbstress [threads=1] [scale=1000] [seed=1]
 *   scale is in thousandths: 1000 = the seed's counts, 250 = a quarter.
 * prints: rss_kb (resident set at the end, with the retained strings, as
 *         the seed reports), duration_s (the stress phase), strings.
 */
#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "xbench.h"

namespace {

constexpr uint64_t kMaxStringSize = 100;
constexpr uint64_t kLargeStringMax = 100000;
constexpr uint64_t kAllocations = 12000000;
constexpr uint64_t kRetained = 600000;
constexpr uint64_t kChunkLimit = 200000;

// A string that always owns a heap buffer, like a Ruby string past the
// embedded size or a Rust String.
class HeapString {
 public:
  explicit HeapString(size_t len) : data_(new char[len + 1]), len_(len) {
    std::memset(data_, ' ', len);
    data_[len] = '\0';
  }
  HeapString(HeapString &&other) noexcept : data_(std::exchange(other.data_, nullptr)), len_(other.len_) {}
  HeapString &operator=(HeapString &&other) noexcept {
    std::swap(data_, other.data_);
    std::swap(len_, other.len_);
    return *this;
  }
  HeapString(const HeapString &) = delete;
  HeapString &operator=(const HeapString &) = delete;
  ~HeapString() { delete[] data_; }

  bool intact() const { return data_[len_] == '\0' && (len_ == 0 || data_[0] == ' '); }

 private:
  char *data_;
  size_t len_;
};

struct Share {
  uint64_t allocations;
  uint64_t retains;
  uint64_t chunk_limit;
  uint64_t seed;
  std::vector<HeapString> retained;
};

void stress(Share &share) {
  xb_rng rng = xb_rng_make(share.seed);
  uint64_t allocations = share.allocations, retains = share.retains;
  std::vector<HeapString> chunk;
  while (allocations > 0 || retains > 0) {
    if (retains == 0 || (allocations > 0 && xb_unit(&rng) < 0.5)) {
      chunk.emplace_back(xb_below(&rng, kMaxStringSize));
      allocations--;
      if (chunk.size() > share.chunk_limit) {
        std::vector<HeapString> fresh;
        fresh.emplace_back(xb_below(&rng, kLargeStringMax));
        chunk.swap(fresh);  // the old chunk and its strings are freed here
      }
    } else {
      share.retained.emplace_back(xb_below(&rng, kMaxStringSize));
      retains--;
    }
  }
  if (!std::all_of(chunk.begin(), chunk.end(), [](const HeapString &s) { return s.intact(); }))
    xb_fail("a chunk string was corrupted");
}

}  // namespace

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[threads=1] [scale=1000] [seed=1]");
  xb_init();
  unsigned threads = static_cast<unsigned>(std::max<uint64_t>(1, xb_arg_u64(argc, argv, 1, 1)));
  uint64_t scale = xb_arg_u64(argc, argv, 2, 1000);
  uint64_t seed = xb_arg_u64(argc, argv, 3, 1);

  std::vector<Share> shares(threads);
  for (unsigned t = 0; t < threads; t++) {
    shares[t].allocations = kAllocations * scale / 1000 / threads;
    shares[t].retains = kRetained * scale / 1000 / threads;
    shares[t].chunk_limit = kChunkLimit * scale / 1000 / threads;
    shares[t].seed = seed + t;
  }

  uint64_t t0 = xb_now_ns();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; t++) workers.emplace_back(stress, std::ref(shares[t]));
  for (auto &w : workers) w.join();
  double secs = xb_seconds_since(t0);
  long rss = xb_rss_kb();

  uint64_t strings = 0;
  for (const Share &s : shares) {
    strings += s.allocations + s.retains;
    for (const HeapString &r : s.retained)
      if (!r.intact()) xb_fail("a retained string was corrupted");
  }
  std::printf("rss_kb=%ld\n", rss);
  std::printf("duration_s=%.6f\n", secs);
  std::printf("strings=%llu\n", static_cast<unsigned long long>(strings));
  return 0;
}
