#include "diag/heap_profiler.h"

#include <atomic>
#include <cstring>

#include "diag/profile_writer.h"
#include "diag/stack_trace.h"
#include "meta/secure.h"
#include "platform/lock.h"
#include "platform/os.h"
#include "support/options.h"
#include "support/report.h"

namespace xalloc::prof {

XALLOC_STARTUP_DATA Flags g_flags;

namespace {

constexpr size_t kMaxStacks = size_t{1} << 14;
constexpr size_t kStackIndexSlots = kMaxStacks * 2;
// A sampled block whose stack found no room in the table.
constexpr uint64_t kNoStack = UINT64_MAX;

// Which pages of a hash table have been written. The tables are probed at
// random, and a probe reads before it writes: a read of a page never
// touched maps the shared zero page, and the write after it must replace
// that mapping, flushing the TLB of every CPU the process runs on (an
// interrupt to each). A slot on a page never written is empty: it is not
// read, and its first write is an ordinary fault.
template <typename Slot, size_t kSlots>
class WrittenPages {
 public:
  static_assert(kOsPageSize % sizeof(Slot) == 0);
  bool written(size_t slot) const { return (bits_[page(slot) / 64] >> (page(slot) % 64)) & 1; }
  void mark(size_t slot) { bits_[page(slot) / 64] |= uint64_t{1} << (page(slot) % 64); }

 private:
  static size_t page(size_t slot) { return slot * sizeof(Slot) / kOsPageSize; }
  uint64_t bits_[(kSlots * sizeof(Slot) / kOsPageSize + 63) / 64] = {};
};

// The table of stacks, its counts, the peak's snapshot and the totals
// that ask for profiles. A sample takes it; a free does not.
XALLOC_FORK_DATA Mutex g_lock{shared_count::Site::kProfilerLock};
Stack* g_stacks = nullptr;
size_t g_stack_count = 0;
uint32_t* g_stack_index = nullptr;  // hash slot -> stack index + 1
WrittenPages<uint32_t, kStackIndexSlots> g_stack_index_pages;
size_t g_dropped = 0;

// Estimated bytes of the sampled blocks still live (each sample counted
// as pprof scales a stack of blocks of its size): a sample adds, its free
// subtracts, without the lock.
std::atomic<int64_t> g_live_estimate{0};

// The table's live counts when the estimate was at its highest, to within
// 1/32 of it: a new copy each time the estimate passes the last copy's by
// more than that, so copies are few (logarithmic in the growth). Under
// g_lock; mapped at start when peak profiles are on.
struct PeakCounts {
  uint64_t count, bytes;
};
struct Peak {
  PeakCounts* counts = nullptr;
  size_t stacks = 0;
  int64_t total = 0;    // the estimate it was taken at
  bool taken = false;   // by this process (a fork child starts afresh)
  int64_t dump_at = 0;  // a copy at least this high asks for a profile
};
Peak g_peak;

// XALLOC_PROF_INTERVAL: the bytes allocated, estimated from the samples
// as the live bytes are (sample_estimate): a small block's sample stands
// for XALLOC_PROF_RATE bytes, the spacing of samples, and a block of many
// times that for its size, as a block is sampled once however many
// sampling points it covers. Under g_lock.
uint64_t g_sampled_bytes = 0;
uint64_t g_next_interval_dump = 0;

// One profile written at a time (it numbers them in order, and the
// symbolizer's cache is not shared); taken before g_lock, which a profile
// holds only while it copies the counts.
XALLOC_FORK_DATA Mutex g_dump_lock{shared_count::Site::kProfilerLock};
StackCounts* g_dump_counts = nullptr;  // the copy being written (kMaxStacks)
uint64_t g_next_seq = 0;
int64_t g_written_max = 0;  // the highest estimate of a numbered profile written
// Set when the exit's profiles begin: the writer thread's come before
// them or not at all, so that the exit's profile is the last.
std::atomic<bool> g_exiting{false};

// Profiles asked of the writer thread, a bit each, in a futex word.
enum : uint32_t { kSignalDump = 1, kPeakDump = 2, kIntervalDump = 4 };
std::atomic<uint32_t> g_requests{0};
bool g_writer_running = false;
constexpr size_t kWriterStack = 256 * 1024;  // profile_writer.cpp's buffers, the symbolizer, dladdr

const volatile uint32_t* request_word() { return reinterpret_cast<const volatile uint32_t*>(&g_requests); }

// An atomic or and a futex wake, two system calls' worth of work at most
// and no lock: async-signal-safe.
void request(uint32_t bits) {
  g_requests.fetch_or(bits, std::memory_order_release);
  os::futex_wake_one(request_word());
}

void on_dump_signal(int) { request(kSignalDump); }

// --- numbers ---------------------------------------------------------------

int64_t next_interval() {
  double u = static_cast<double>((secure::next_random() >> 11) + 1) * (1.0 / 9007199254740992.0);
  double bytes = -log_approx(u) * static_cast<double>(g_options.prof_rate);
  return bytes < 1 ? 1 : static_cast<int64_t>(bytes);
}

// XALLOC_PROF_RATE and its inverse, set at start (for sample_estimate).
double g_rate = 0;
double g_inverse_rate = 0;

// What one sample of `size` bytes stands for, as pprof scales a stack of
// such blocks (estimate_bytes): size / (1 - e^-x), x = size / rate; the
// same for its free, which subtracts it. Most samples are of blocks far
// smaller than the rate, where the series rate * (1 + x/2 + x^2/12) is
// within 1e-4 of it (its next term is -x^4/720) and costs no division
// (a sampled free computes it too).
int64_t sample_estimate(size_t size) {
  auto bytes = static_cast<double>(size);
  double x = bytes * g_inverse_rate;
  if (size == 0) return 0;
  if (x < 0.5) return static_cast<int64_t>(g_rate + bytes * (0.5 + x * (1.0 / 12)));
  double p = 1 - exp_approx(-x);
  return static_cast<int64_t>(p > 0 ? bytes / p : bytes);
}

// --- tables ----------------------------------------------------------------

uint64_t hash_frames(void* const* frames, int depth) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < depth; ++i) h = secure::mix(h ^ reinterpret_cast<uintptr_t>(frames[i]));
  return h;
}

// Under g_lock.
uint32_t intern_stack(void* const* frames, int depth) {
  uint64_t h = hash_frames(frames, depth);
  for (size_t probe = 0; probe < kStackIndexSlots; ++probe) {
    size_t index = (h + probe) & (kStackIndexSlots - 1);
    uint32_t& slot = g_stack_index[index];
    if (!g_stack_index_pages.written(index) || slot == 0) {
      if (g_stack_count == kMaxStacks) return UINT32_MAX;
      g_stack_index_pages.mark(index);
      Stack& s = g_stacks[g_stack_count];
      s.hash = h;
      s.depth = static_cast<uint32_t>(depth);
      memcpy(s.frames, frames, sizeof(void*) * static_cast<size_t>(depth));
      slot = static_cast<uint32_t>(++g_stack_count);
      return slot - 1;
    }
    Stack& s = g_stacks[slot - 1];
    if (s.hash == h && s.depth == static_cast<uint32_t>(depth) &&
        memcmp(s.frames, frames, sizeof(void*) * static_cast<size_t>(depth)) == 0)
      return slot - 1;
  }
  return UINT32_MAX;
}

uint64_t load_relaxed(const uint64_t& counter) { return __atomic_load_n(&counter, __ATOMIC_RELAXED); }

// Under g_lock: copies the live counts, the new peak. A profile of it is
// due when it is XALLOC_PROF_PEAK above the last one asked for.
uint32_t take_peak(int64_t live) {
  for (size_t i = 0; i < g_stack_count; ++i)
    g_peak.counts[i] = {load_relaxed(g_stacks[i].live_count), load_relaxed(g_stacks[i].live_bytes)};
  g_peak.stacks = g_stack_count;
  g_peak.total = live;
  g_peak.taken = true;
  if (live < g_peak.dump_at) return 0;
  g_peak.dump_at = live + static_cast<int64_t>(g_options.prof_peak);
  return kPeakDump;
}

// Under g_lock: counts a sample standing for `estimate` bytes towards
// XALLOC_PROF_INTERVAL.
uint32_t count_for_interval(int64_t estimate) {
  if (g_options.prof_interval == 0) return 0;
  g_sampled_bytes += static_cast<uint64_t>(estimate);
  if (g_sampled_bytes < g_next_interval_dump) return 0;
  g_next_interval_dump = (g_sampled_bytes / g_options.prof_interval + 1) * g_options.prof_interval;
  return kIntervalDump;
}

}  // namespace

__thread bool t_in_sampler = false;

// The sample's record is its block's descriptor (page.h): its stack and
// size, so that a free finds them without a lookup or a lock.
void record(Page* page, size_t size, void* const* frames, int depth) {
  page->sampled = 1;
  page->sample_bytes = size;
  page->sample_stack = kNoStack;
  int64_t estimate = sample_estimate(size);
  uint32_t requests = 0;
  {
    LockGuard guard(g_lock);
    requests = count_for_interval(estimate);
    uint32_t stack = intern_stack(frames, depth);
    if (stack == UINT32_MAX) {
      ++g_dropped;
    } else {
      page->sample_stack = stack;
      Stack& st = g_stacks[stack];
      st.alloc_count++;
      st.alloc_bytes += size;
      __atomic_fetch_add(&st.live_count, 1, __ATOMIC_RELAXED);
      __atomic_fetch_add(&st.live_bytes, size, __ATOMIC_RELAXED);
      int64_t live = g_live_estimate.fetch_add(estimate, std::memory_order_relaxed) + estimate;
      if (g_peak.counts != nullptr && live > g_peak.total + g_peak.total / 32) requests |= take_peak(live);
    }
  }
  // The writer takes g_lock to copy: woken after it is free.
  if (requests != 0) request(requests);
}

namespace {

// --- profiles --------------------------------------------------------------

// Under g_lock: the view of a profile of what is live now (or of the
// peak's snapshot), in g_dump_counts; returns its estimated total.
int64_t copy_counts(bool peak, ProfileView* view) {
  size_t count = peak ? g_peak.stacks : g_stack_count;
  for (size_t i = 0; i < count; ++i) {
    const Stack& s = g_stacks[i];
    StackCounts& c = g_dump_counts[i];
    c.live_count = peak ? g_peak.counts[i].count : load_relaxed(s.live_count);
    c.live_bytes = peak ? g_peak.counts[i].bytes : load_relaxed(s.live_bytes);
    c.alloc_count = s.alloc_count;
    c.alloc_bytes = s.alloc_bytes;
  }
  *view = {g_stacks, g_dump_counts, count};
  return peak ? g_peak.total : g_live_estimate.load(std::memory_order_relaxed);
}

// Writes a profile: to `<prefix>.heap` and `.collapsed`, or with prefix
// null to the next numbered pair. `peak`: of the peak's snapshot.
// `writer`: for the writer thread, which gives way to the exit's profiles.
bool write_dump(const char* prefix, bool peak, bool writer = false) {
  LockGuard dump_guard(g_dump_lock);
  if (writer && g_exiting.load(std::memory_order_relaxed)) return false;
  bool was_in_sampler = t_in_sampler;
  t_in_sampler = true;  // what symbolising allocates is not sampled
  ProfileView view;
  int64_t total;
  {
    LockGuard guard(g_lock);
    total = copy_counts(peak, &view);
  }
  char stem[512];
  if (prefix == nullptr) {
    const report::Arg args[] = {g_options.prof_prefix, os::process_id(), g_next_seq++};
    report::format(stem, sizeof(stem), "%s.%u.%u", args, 3);
  } else {
    const report::Arg args[] = {prefix};
    report::format(stem, sizeof(stem), "%s", args, 1);
  }
  bool written = write_profile(stem, view);
  if (written && prefix == nullptr && total > g_written_max) g_written_max = total;
  if (written && g_options.verbose) {
    report::Redirect to(report::lasting_stderr());
    report::message("heap profile%s written to %s.heap and %s.collapsed", peak ? " of the peak" : "", stem, stem);
  }
  t_in_sampler = was_in_sampler;
  return written;
}

// The writer thread: sleeps on the request word, writes what is asked.
void* writer_main(void*) {
  t_in_sampler = true;
  for (;;) {
    uint32_t requests = g_requests.exchange(0, std::memory_order_acquire);
    if (requests == 0) {
      os::futex_wait(request_word(), 0);
      continue;
    }
    if ((requests & kPeakDump) != 0) write_dump(nullptr, true, true);
    if ((requests & (kSignalDump | kIntervalDump)) != 0) write_dump(nullptr, false, true);
  }
  return nullptr;
}

// Only when a profile may be asked for while the program runs.
void start_writer() {
  bool wanted = g_options.prof_signal != 0 ||
                (g_options.prof && (g_options.prof_peak != 0 || g_options.prof_interval != 0));
  if (!wanted) return;
  g_writer_running = os::start_thread(writer_main, "xalloc-prof", kWriterStack);
  if (!g_writer_running)
    report::warning("heap profiler: no writer thread: profiles are written only at exit and by xalloc_prof_dump()");
}

}  // namespace

void init_flags() {
  bool sampling = g_options.prof || g_options.leaks;
  g_flags.watch_allocations.store(sampling || g_options.stats, std::memory_order_relaxed);
  // The secure build's free lists are keyed by slab, which a window's
  // list would break; statistics count every allocation anyway.
  g_flags.windowed.store(sampling && !g_options.stats && !secure::kEnabled, std::memory_order_relaxed);
}

void start() {
  if ((!g_options.prof && !g_options.leaks) || profiling()) return;
  t_in_sampler = true;  // what loading the unwinder allocates is not sampled
  g_stacks = static_cast<Stack*>(os::map(kMaxStacks * sizeof(Stack)));
  g_stack_index = static_cast<uint32_t*>(os::map(kStackIndexSlots * sizeof(uint32_t)));
  g_dump_counts = static_cast<StackCounts*>(os::map(kMaxStacks * sizeof(StackCounts)));
  if (g_stacks == nullptr || g_stack_index == nullptr || g_dump_counts == nullptr) {
    report::warning("heap profiler disabled: no memory for its tables");
    t_in_sampler = false;
    return;
  }
  // Only touched as stacks are added (virtual memory until then).
  if (g_options.prof && g_options.prof_peak != 0)
    g_peak.counts = static_cast<PeakCounts*>(os::map(kMaxStacks * sizeof(PeakCounts)));
  g_rate = static_cast<double>(g_options.prof_rate);
  g_inverse_rate = 1 / g_rate;
  g_peak.dump_at = static_cast<int64_t>(g_options.prof_peak);
  g_next_interval_dump = g_options.prof_interval;
  // libunwind follows the stacks xalloc's own walker cannot (stack_trace.h):
  // loaded now, never from inside a sampled allocation (dlopen takes the
  // loader's lock). Without it those stacks end where the walker stopped.
  stack_trace_load();
  start_writer();
  if (g_options.prof_signal != 0) os::on_signal(static_cast<int>(g_options.prof_signal), on_dump_signal);
  g_flags.profiling.store(true, std::memory_order_relaxed);
  t_in_sampler = false;
}

// From the options, not from profiling(): the thread that starts xalloc
// gets its heap while the profiler is still starting.
int64_t sample_interval() { return g_options.prof || g_options.leaks ? next_interval() : INT64_MAX; }

void forget(const Page* page) {
  if (page->sample_stack == kNoStack) return;
  Stack& st = g_stacks[page->sample_stack];
  __atomic_fetch_sub(&st.live_count, 1, __ATOMIC_RELAXED);
  __atomic_fetch_sub(&st.live_bytes, page->sample_bytes, __ATOMIC_RELAXED);
  g_live_estimate.fetch_sub(sample_estimate(page->sample_bytes), std::memory_order_relaxed);
}

void resized(Page* page, size_t size) {
  if (page->sample_stack != kNoStack) {
    __atomic_fetch_add(&g_stacks[page->sample_stack].live_bytes, size - page->sample_bytes, __ATOMIC_RELAXED);
    g_live_estimate.fetch_add(sample_estimate(size) - sample_estimate(page->sample_bytes), std::memory_order_relaxed);
  }
  page->sample_bytes = size;
}

bool dump(const char* prefix) { return profiling() && write_dump(prefix, false); }

void lock_for_fork() {
  g_dump_lock.lock();
  g_lock.lock();
}

void unlock_after_fork_parent() {
  g_lock.unlock();
  g_dump_lock.unlock();
}

void reset_after_fork_child() {
  g_lock.reset_after_fork();
  g_dump_lock.reset_after_fork();
  if (!profiling()) return;  // the profiler starts with the process or never
  // The child's profiles are its own (its pid): numbered from 0, and its
  // peak is measured from what it has now, not from its parent's.
  g_next_seq = 0;
  g_written_max = 0;
  g_requests.store(0, std::memory_order_relaxed);
  int64_t live = g_live_estimate.load(std::memory_order_relaxed);
  g_peak.taken = false;
  g_peak.total = live;
  g_peak.dump_at = live + static_cast<int64_t>(g_options.prof_peak);
  // The writer thread is not in the child.
  if (g_writer_running) start_writer();
}

void at_exit_profiles() {
  if (!profiling() || !g_options.prof) return;
  g_exiting.store(true, std::memory_order_relaxed);
  int64_t live = g_live_estimate.load(std::memory_order_relaxed);
  // The peak, unless a profile as high was written, or what is live now
  // (the exit profile) is as high to within the snapshot's step.
  bool peak_first;
  {
    LockGuard dump_guard(g_dump_lock);
    LockGuard guard(g_lock);
    peak_first = g_peak.taken && g_peak.total > g_written_max && g_peak.total > live + live / 32;
  }
  if (peak_first) write_dump(nullptr, true);
  if (g_options.prof_exit == 2 || (g_options.prof_exit == 1 && live > 0)) write_dump(nullptr, false);
}

void at_exit_leaks() {
  if (!profiling()) return;
  if (g_options.leaks) {
    bool was_in_sampler = t_in_sampler;
    t_in_sampler = true;
    LockGuard dump_guard(g_dump_lock);
    ProfileView view;
    {
      LockGuard guard(g_lock);
      copy_counts(false, &view);
    }
    print_leaks(view);
    t_in_sampler = was_in_sampler;
  }
  if (g_dropped != 0) report::warning("heap profiler: %u samples dropped (tables full)", g_dropped);
}

}  // namespace xalloc::prof
