/*
 * microbench: Google Benchmark microbenchmarks of the allocator fast paths.
 *
 * Calls only the standard API (malloc, free, calloc, realloc,
 * aligned_alloc, posix_memalign, new/delete), so the same binary measures
 * whichever allocator LD_PRELOAD injects. Every benchmark reports the time
 * per iteration; an iteration is one allocation and its free unless the
 * name says otherwise (batch_*: one block of a batch, items_per_second is
 * set). Allocations are kept alive across the optimiser with
 * benchmark::DoNotOptimize, and their first byte is written so a lazily
 * mapped block costs what it costs in real use.
 *
 * usage: microbench [Google Benchmark flags, e.g. --benchmark_min_time=0.05
 *                    --benchmark_format=json --benchmark_filter=...]
 * prints: malloc_lib=<object> first, then Google Benchmark's output.
 */
#include "xbench.h"

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace {

void touch(void *p) { *static_cast<volatile char *>(p) = 1; }

// malloc + free of one size, back to back (the thread cache's hit path).
void BM_malloc_free(benchmark::State &state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void *p = std::malloc(size);
    touch(p);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_malloc_free)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Arg(128)->Arg(256)->Arg(512)
    ->Arg(1024)->Arg(4096)->Arg(16384)->Arg(65536)->Arg(262144);

// A batch of N allocations of one size, then N frees in the same order:
// exercises refilling and flushing the per-thread caches.
void BM_batch_fifo(benchmark::State &state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const size_t n = static_cast<size_t>(state.range(1));
  std::vector<void *> blocks(n);
  for (auto _ : state) {
    for (size_t i = 0; i < n; i++) {
      blocks[i] = std::malloc(size);
      touch(blocks[i]);
    }
    benchmark::DoNotOptimize(blocks.data());
    for (size_t i = 0; i < n; i++) std::free(blocks[i]);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_batch_fifo)->Args({32, 100})->Args({32, 10000})->Args({256, 1000})->Args({4096, 1000});

// Same, freed in reverse order (LIFO).
void BM_batch_lifo(benchmark::State &state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const size_t n = static_cast<size_t>(state.range(1));
  std::vector<void *> blocks(n);
  for (auto _ : state) {
    for (size_t i = 0; i < n; i++) {
      blocks[i] = std::malloc(size);
      touch(blocks[i]);
    }
    benchmark::DoNotOptimize(blocks.data());
    for (size_t i = n; i-- > 0;) std::free(blocks[i]);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_batch_lifo)->Args({32, 10000});

// Mixed sizes 16..1000 from a fixed pseudo-random sequence, batch of 64.
void BM_batch_mixed(benchmark::State &state) {
  constexpr size_t kN = 64;
  size_t sizes[kN];
  xb_rng rng = xb_rng_make(42);
  for (size_t &s : sizes) s = xb_range(&rng, 16, 1000);
  void *blocks[kN];
  for (auto _ : state) {
    for (size_t i = 0; i < kN; i++) {
      blocks[i] = std::malloc(sizes[i]);
      touch(blocks[i]);
    }
    benchmark::DoNotOptimize(blocks);
    for (size_t i = 0; i < kN; i++) std::free(blocks[i]);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kN));
}
BENCHMARK(BM_batch_mixed);

void BM_calloc_free(benchmark::State &state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void *p = std::calloc(1, size);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_calloc_free)->Arg(32)->Arg(1024)->Arg(65536);

// realloc growing one block 16 -> 32 -> ... -> max, then free.
void BM_realloc_grow(benchmark::State &state) {
  const size_t max = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void *p = nullptr;
    for (size_t n = 16; n <= max; n *= 2) {
      p = std::realloc(p, n);
      touch(p);
    }
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_realloc_grow)->Arg(4096)->Arg(1 << 20);

// realloc within the same size class or bucket (+8 bytes), a common
// "append a little" case that should not copy.
void BM_realloc_small_step(benchmark::State &state) {
  void *p = std::malloc(100);
  size_t n = 100;
  for (auto _ : state) {
    n = n >= 200 ? 100 : n + 8;
    p = std::realloc(p, n);
    benchmark::DoNotOptimize(p);
  }
  std::free(p);
}
BENCHMARK(BM_realloc_small_step);

void BM_aligned_alloc(benchmark::State &state) {
  const size_t align = static_cast<size_t>(state.range(0));
  const size_t size = static_cast<size_t>(state.range(1));
  for (auto _ : state) {
    void *p = std::aligned_alloc(align, size);
    touch(p);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_aligned_alloc)->Args({16, 64})->Args({64, 64})->Args({64, 1024})->Args({4096, 4096});

void BM_posix_memalign(benchmark::State &state) {
  const size_t align = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void *p = nullptr;
    if (posix_memalign(&p, align, 256) != 0) state.SkipWithError("posix_memalign failed");
    touch(p);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_posix_memalign)->Arg(32)->Arg(256);

struct Node {
  Node *next = nullptr;
  long payload[5] = {};
};

// new/delete of a 48-byte object (sized delete under C++14 and later).
void BM_new_delete_object(benchmark::State &state) {
  for (auto _ : state) {
    Node *n = new Node;
    benchmark::DoNotOptimize(n);
    delete n;
  }
}
BENCHMARK(BM_new_delete_object);

void BM_new_delete_array(benchmark::State &state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    char *p = new char[size];
    touch(p);
    benchmark::DoNotOptimize(p);
    delete[] p;
  }
}
BENCHMARK(BM_new_delete_array)->Arg(32)->Arg(1024);

void BM_make_shared(benchmark::State &state) {
  for (auto _ : state) {
    auto p = std::make_shared<Node>();
    benchmark::DoNotOptimize(p.get());
  }
}
BENCHMARK(BM_make_shared);

// The pair path on 2 threads at once: per-thread caches must not contend.
void BM_malloc_free_threads(benchmark::State &state) {
  for (auto _ : state) {
    void *p = std::malloc(64);
    touch(p);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_malloc_free_threads)->Threads(2);

// The pair path while another thread takes and frees blocks of the given
// size over and over (256 KiB: large spans, shared by all threads; 8 KiB:
// that thread's own slabs). What the other thread writes must not share a
// cache line with what this thread's malloc and free read.
void BM_malloc_free_beside(benchmark::State &state) {
  const size_t size = static_cast<size_t>(state.range(0));
  std::atomic<bool> stop{false};
  std::thread other([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      void *p = std::malloc(size);
      touch(p);
      benchmark::DoNotOptimize(p);
      std::free(p);
    }
  });
  for (auto _ : state) {
    void *p = std::malloc(48);
    touch(p);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  stop.store(true, std::memory_order_relaxed);
  other.join();
}
BENCHMARK(BM_malloc_free_beside)->Arg(8 << 10)->Arg(256 << 10)->UseRealTime();

}  // namespace

int main(int argc, char **argv) {
  xb_init();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return XB_EXIT_USAGE;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
