// The public statistics: xalloc_get_stats, xalloc_stats_print, and the
// report at exit (XALLOC_STATS=1).
#include "xalloc/xalloc.h"

#include "api/entry_points.h"
#include "backend/segment.h"
#include "backend/slab_pool.h"
#include "backend/span_allocator.h"
#include "diag/heap_profiler.h"
#include "frontend/heap.h"
#include "frontend/memory_account.h"
#include "frontend/thread_registry.h"
#include "meta/size_classes.h"
#include "platform/os.h"
#include "platform/shared_count.h"
#include "support/counters.h"
#include "support/options.h"
#include "support/report.h"

using xalloc::stats::g_global;

namespace xalloc {
namespace {

// Per size class, from the slabs' own counts (walks every segment).
struct ClassUsage {
  size_t slabs[64];
  size_t live_blocks[64];
};

ClassUsage class_usage() {
  ClassUsage usage{};
  [[maybe_unused]] OwnerFieldReads estimate;
  g_spans.for_each_used_span([&](Page* span) {
    if (span->kind() != PageKind::kSlab) return;
    unsigned cls = span->size_class;
    usage.slabs[cls] += 1;
    usage.live_blocks[cls] += slab_blocks_in_use(span);
  });
  return usage;
}

// `value` in `buf`, or "-" where it was not kept.
const char* count_or_dash(char (&buf)[24], bool kept, uint64_t value) {
  if (!kept) return "-";
  report::Arg arg(value);
  report::format(buf, sizeof buf, "%u", &arg, 1);
  return buf;
}

xalloc_account_t public_account(const stats::MemoryAccount& a) {
  return {a.resident,     a.committed,    a.live,       a.rounding,   a.slab_free,
          a.empty_current, a.empty_spares, a.empty_pooled, a.free_spans, a.kept_spans,
          a.pending_frees, a.metadata,    a.requested_known ? size_t{1} : size_t{0}, a.slab_free_current};
}

// xalloc's part of the account.
size_t accounted(const stats::MemoryAccount& a) {
  return a.live + a.rounding + a.slab_free + a.empty_current + a.empty_spares + a.empty_pooled + a.free_spans +
         a.kept_spans + a.pending_frees + a.metadata;
}

void print_account(const char* when, const stats::MemoryAccount& a) {
  size_t ours = accounted(a);
  report::message("stats: %s: resident %u KiB, of which xalloc's %u KiB (committed %u KiB) and the program's %u KiB",
                  when, a.resident >> 10, ours >> 10, a.committed >> 10, a.resident > ours ? (a.resident - ours) >> 10 : 0);
  report::message("stats:   live %u, rounding %u%s, free in used slabs %u (current %u), empty slabs %u (current %u, "
                  "spares %u, pooled %u)",
                  a.live >> 10, a.rounding >> 10, a.requested_known ? "" : " (requests not counted)", a.slab_free >> 10,
                  a.slab_free_current >> 10,
                  (a.empty_current + a.empty_spares + a.empty_pooled) >> 10, a.empty_current >> 10, a.empty_spares >> 10,
                  a.empty_pooled >> 10);
  report::message("stats:   free spans %u, kept large spans %u, remote frees pending %u, metadata %u (KiB)",
                  a.free_spans >> 10, a.kept_spans >> 10, a.pending_frees >> 10, a.metadata >> 10);
}

#if defined(XALLOC_COUNT_SHARED)
// The counting build's line: its events per 10,000 mallocs, then the sites
// with the most, most first.
void print_shared_writes() {
  shared_count::Totals t = shared_count::read();
  uint64_t events = t.lock_events + t.atomic_events;
  uint64_t hundredths = t.mallocs != 0 ? events * 1000000 / t.mallocs : 0;
  char sites[320];
  size_t used = 0;
  bool listed[shared_count::kSites] = {};
  for (int rank = 0; rank < 6; ++rank) {
    unsigned top = shared_count::kSites;
    for (unsigned s = 0; s < shared_count::kSites; ++s) {
      if (!listed[s] && t.by_site[s] != 0 && (top == shared_count::kSites || t.by_site[s] > t.by_site[top])) top = s;
    }
    if (top == shared_count::kSites) break;
    listed[top] = true;
    const report::Arg args[] = {rank == 0 ? "" : ", ", shared_count::site_name(static_cast<shared_count::Site>(top)),
                                t.by_site[top]};
    used += report::format(sites + used, sizeof(sites) - used, "%s%s %u", args, 3);
  }
  sites[used] = '\0';
  report::message("stats: shared writes: %u lock acquisitions, %u atomic RMWs, %u mallocs: %u.%s%u per 10000 mallocs; "
                  "top: %s (%u RMWs untracked)",
                  t.lock_events, t.atomic_events, t.mallocs, hundredths / 100, hundredths % 100 < 10 ? "0" : "",
                  hundredths % 100, used != 0 ? sites : "-", t.untracked);
}
#endif

size_t slab_live_bytes() {
  ClassUsage usage = class_usage();
  size_t bytes = 0;
  for (unsigned cls = 0; cls < kNumClasses; ++cls) bytes += usage.live_blocks[cls] * kClassInfo[cls].size;
  return bytes;
}

}  // namespace
}  // namespace xalloc

// The counters alone: what mallinfo2 and malloc_info report, which some
// programs call often, without the read of /proc/self/smaps.
void xalloc::entry::get_counters(xalloc_stats_t* out) {
  *out = xalloc_stats_t{};
  xalloc::ensure_process_init();  // before any lock (trim() in alloc.cpp says why)
  out->mapped = g_global.mapped.load(std::memory_order_relaxed);
  out->committed = g_global.committed.load(std::memory_order_relaxed);
  // Heaps keep the spans of some freed large blocks still counted (heap.h).
  size_t kept = 0;
  xalloc::for_each_heap([&](xalloc::Heap* h) { kept += h->kept.counted.load(std::memory_order_relaxed); });
  out->large_in_use = g_global.large_in_use.load(std::memory_order_relaxed) - kept;
  out->in_use = out->large_in_use + xalloc::slab_live_bytes();
  out->purged = g_global.purged.load(std::memory_order_relaxed);
  out->segments = g_global.segments.load(std::memory_order_relaxed);
  out->threads = g_global.heaps.load(std::memory_order_relaxed);
  size_t remote = 0;
  xalloc::for_each_heap([&](xalloc::Heap* h) { remote += h->remote_frees_sent.load(std::memory_order_relaxed); });
  out->remote_frees = remote;
  out->pooled = xalloc::slab_pool::bytes();
  out->faults_avoided = g_global.faults_avoided.load(std::memory_order_relaxed);
  out->peak_account = xalloc::public_account(xalloc::stats::peak_account());
}

extern "C" XALLOC_API void xalloc_get_stats(xalloc_stats_t* out) noexcept {
  if (out == nullptr) return;
  xalloc::entry::get_counters(out);
  xalloc::os::HugePageCoverage coverage;
  xalloc::os::huge_page_coverage(
      [](uintptr_t start) { return xalloc::segment_map_entry(start) != xalloc::kMapUnused; }, &coverage);
  out->resident = coverage.resident;
  out->on_huge_pages = coverage.on_huge_pages;
}

extern "C" XALLOC_API void xalloc_get_account(xalloc_account_t* out) noexcept {
  if (out == nullptr) return;
  xalloc::ensure_process_init();  // before any lock (trim() in alloc.cpp says why)
  xalloc::stats::MemoryAccount account{};
  xalloc::take_memory_account(&account);
  *out = xalloc::public_account(account);
}

extern "C" XALLOC_API void xalloc_stats_print(void) noexcept {
  using namespace xalloc;
  ensure_process_init();  // before any lock (trim() in alloc.cpp says why)
  ClassUsage usage = class_usage();
  uint64_t requests[kNumClasses + 2] = {};
  for_each_heap([&](Heap* h) {
    for (unsigned c = 0; c < kNumClasses + 2; ++c) requests[c] += __atomic_load_n(&h->requests[c], __ATOMIC_RELAXED);
  });
  bool counted = prof::counting();
  report::message("stats: %8s %12s %7s %12s %12s %10s", "class", "requests", "slabs", "live blocks", "live KiB",
                  "peak slabs");
  for (unsigned cls = 0; cls < kNumClasses; ++cls) {
    size_t peak = g_global.peak_slabs[cls].load(std::memory_order_relaxed);
    if (usage.slabs[cls] == 0 && requests[cls] == 0 && peak == 0) continue;
    char requested[24];
    char peak_slabs[24];
    report::message("stats: %8u %12s %7u %12u %12u %10s", kClassInfo[cls].size,
                    count_or_dash(requested, counted, requests[cls]), usage.slabs[cls], usage.live_blocks[cls],
                    (usage.live_blocks[cls] * kClassInfo[cls].size) >> 10,
                    count_or_dash(peak_slabs, stats::slabs_by_class_counted(), peak));
  }
  if (counted) {
    report::message("stats: %8s %12u", "large", requests[kNumClasses]);
    report::message("stats: %8s %12u", "huge", requests[kNumClasses + 1]);
  } else {
    report::message("stats: (request counts need XALLOC_STATS=1 from the start)");
  }
  xalloc_stats_t s;
  xalloc_get_stats(&s);
  uint64_t resident = os::resident_bytes();
  report::message("stats: mapped %u KiB%s, committed %u KiB, resident %u KiB, in use %u KiB (large and huge %u KiB)",
                  s.mapped >> 10, g_options.commit_on_demand ? " (committed on demand)" : "", s.committed >> 10,
                  resident >> 10, s.in_use >> 10, s.large_in_use >> 10);
  report::message("stats: peak in use (slab granularity) %u KiB, purged %u KiB in all, pooled empty slabs %u KiB",
                  g_global.peak_in_use.load(std::memory_order_relaxed) >> 10, s.purged >> 10, s.pooled >> 10);
  report::message("stats: dirty budget %u KiB (x%u: purged memory is %s)", dirty_budget_bytes() >> 10,
                  1u << dirty_budget_boost(), dirty_budget_boost() != 0 ? "being taken back soon" : "not reused soon");
  report::message("stats: %u segments, %u thread heaps, %u remote frees", s.segments, s.threads, s.remote_frees);
  report::message("stats: resident in xalloc's mappings %u KiB, %u KiB of it (%u%%) on huge pages; "
                  "%u page faults avoided (XALLOC_HUGE_PAGES=%s)",
                  s.resident >> 10, s.on_huge_pages >> 10, s.resident != 0 ? s.on_huge_pages * 100 / s.resident : 0,
                  s.faults_avoided, switch_name(g_options.huge_pages));
  report::message("stats: where resident memory goes (KiB; rounding estimated from each class's mean request), "
                  "peak resident %u KiB:", os::peak_resident_bytes() >> 10);
  stats::MemoryAccount peak = stats::peak_account();
  if (peak.resident != 0) print_account("at peak", peak);
  stats::MemoryAccount now{};
  take_memory_account(&now);
  print_account("now", now);

#if defined(XALLOC_COUNT_SHARED)
  print_shared_writes();
#endif
}

extern "C" XALLOC_API int xalloc_shared_writes(xalloc_shared_writes_t* out) noexcept {
  if (out == nullptr) return 0;
  *out = {};
#if defined(XALLOC_COUNT_SHARED)
  xalloc::shared_count::Totals t = xalloc::shared_count::read();
  out->lock_acquisitions = t.lock_events;
  out->atomic_rmws = t.atomic_events;
  out->mallocs = t.mallocs;
  return 1;
#else
  return 0;
#endif
}

extern "C" XALLOC_API void xalloc_shared_writes_restart(void) noexcept {
#if defined(XALLOC_COUNT_SHARED)
  xalloc::shared_count::restart();
#endif
}

namespace xalloc {
namespace {

// Where the statistics and the leak report go at exit: XALLOC_STATS_FILE
// (created, %p replaced by the pid), or stderr as it was at start-up
// (report::lasting_stderr). Opens the file only when there is something
// to write to it, and closes it.
class ExitReport {
 public:
  explicit ExitReport(bool used) {
    if (used && *g_options.stats_file != '\0') {
      char path[512];
      size_t n = 0;
      for (const char* p = g_options.stats_file; *p != '\0' && n + 24 < sizeof(path); ++p) {
        if (p[0] == '%' && p[1] == 'p') {
          const report::Arg pid[] = {os::process_id()};
          n += report::format(path + n, sizeof(path) - n, "%u", pid, 1);
          ++p;
        } else {
          path[n++] = *p;
        }
      }
      path[n] = '\0';
      fd_ = os::open_write_new(path);
      if (fd_ >= 0) {
        owned_ = true;
        return;
      }
      report::warning("cannot write the statistics to %s: printed to stderr", path);
    }
    fd_ = report::lasting_stderr();
  }
  ~ExitReport() {
    if (owned_) os::close(fd_);
  }
  ExitReport(const ExitReport&) = delete;
  ExitReport& operator=(const ExitReport&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = 2;
  bool owned_ = false;
};

}  // namespace
}  // namespace xalloc

// XALLOC_STATS=1 and the profiler: print and write at exit. A destructor
// function needs no atexit registration (which may allocate), and runs
// after the program's atexit handlers, which may have closed its stderr.
__attribute__((destructor)) static void print_stats_at_exit() {
  using namespace xalloc;
  ExitReport out(g_options.stats || g_options.leaks);
  report::Redirect to(out.fd());
  if (g_options.stats) xalloc_stats_print();
  prof::at_exit_profiles();  // its lines go to stderr as it was (heap_profiler.cpp)
  prof::at_exit_leaks();
}

extern "C" XALLOC_API int xalloc_prof_dump(const char* prefix) noexcept {
  return xalloc::prof::dump(prefix) ? 1 : 0;
}
