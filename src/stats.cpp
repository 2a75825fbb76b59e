#include "stats.h"

#include "../include/xalloc/xalloc.h"
#include "heap.h"
#include "options.h"
#include "size_classes.h"
#include "span_allocator.h"
#include "report.h"
#include "thread_registry.h"

namespace xalloc::stats {

constinit Global g_global;

}  // namespace xalloc::stats

using xalloc::stats::g_global;

namespace xalloc::stats {

ClassUsage class_usage() {
  ClassUsage usage{};
  g_spans.for_each_used_span([&](Page* span) {
    if (span->kind() != PageKind::kSlab) return;
    unsigned cls = span->size_class;
    usage.slabs[cls] += 1;
    usage.live_blocks[cls] += slab_blocks_in_use(span);
  });
  return usage;
}

size_t slab_live_bytes() {
  ClassUsage usage = class_usage();
  size_t bytes = 0;
  for (unsigned cls = 0; cls < kNumClasses; ++cls) bytes += usage.live_blocks[cls] * kClassInfo[cls].size;
  return bytes;
}

}  // namespace xalloc::stats

extern "C" XALLOC_API void xalloc_get_stats(xalloc_stats_t* out) noexcept {
  if (out == nullptr) return;
  out->mapped = g_global.mapped.load(std::memory_order_relaxed);
  out->committed = g_global.committed.load(std::memory_order_relaxed);
  out->large_in_use = g_global.large_in_use.load(std::memory_order_relaxed);
  out->in_use = out->large_in_use + xalloc::stats::slab_live_bytes();
  out->purged = g_global.purged.load(std::memory_order_relaxed);
  out->segments = g_global.segments.load(std::memory_order_relaxed);
  out->threads = g_global.heaps.load(std::memory_order_relaxed);
  size_t remote = 0;
  xalloc::for_each_heap([&](xalloc::Heap* h) { remote += h->remote_frees_sent.load(std::memory_order_relaxed); });
  out->remote_frees = remote;
}

extern "C" XALLOC_API void xalloc_stats_print(void) noexcept {
  using namespace xalloc;
  stats::ClassUsage usage = stats::class_usage();
  report::message("stats: %s", "class      slabs   live blocks     live KiB");
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    if (usage.slabs[cls] == 0) continue;
    report::message("stats: %u%s %u %u %u", kClassInfo[cls].size, "", usage.slabs[cls], usage.live_blocks[cls],
                    (usage.live_blocks[cls] * kClassInfo[cls].size) >> 10);
  }
  xalloc_stats_t s;
  xalloc_get_stats(&s);
  xalloc::report::message("stats: mapped %u KiB, committed %u KiB, in use %u KiB (large %u KiB), purged %u KiB total",
                          s.mapped >> 10, s.committed >> 10, s.in_use >> 10, s.large_in_use >> 10, s.purged >> 10);
  xalloc::report::message("stats: %u segments, %u thread heaps, %u remote frees", s.segments, s.threads,
                          s.remote_frees);
}

// XALLOC_STATS=1: print at exit. A destructor function needs no atexit
// registration (which may allocate).
__attribute__((destructor)) static void print_stats_at_exit() {
  if (xalloc::g_options.stats) xalloc_stats_print();
}
