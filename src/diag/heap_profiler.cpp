#include "diag/heap_profiler.h"

#include <atomic>
#include <cstring>

#include "support/options.h"
#include "platform/lock.h"
#include "platform/os.h"
#include "support/report.h"
#include "meta/secure.h"
#include "backend/segment.h"
#include "diag/stack_trace.h"
#include "diag/symbolize.h"

namespace xalloc::prof {

XALLOC_STARTUP_DATA Flags g_flags;

namespace {

constexpr size_t kMaxStacks = size_t{1} << 14;
constexpr size_t kStackIndexSlots = kMaxStacks * 2;
// A sampled block whose stack found no room in the table.
constexpr uint64_t kNoStack = UINT64_MAX;

struct Stack {
  uint64_t hash;
  uint32_t depth;
  void* frames[kMaxFrames];
  uint64_t alloc_count, alloc_bytes;  // sampled, ever (under g_lock)
  // Sampled, still live: a free subtracts without the lock, with relaxed
  // atomics; a dump may see a count and its bytes one free apart.
  uint64_t live_count, live_bytes;
};

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

Mutex g_lock;
Stack* g_stacks = nullptr;
size_t g_stack_count = 0;
uint32_t* g_stack_index = nullptr;  // hash slot -> stack index + 1
WrittenPages<uint32_t, kStackIndexSlots> g_stack_index_pages;
size_t g_dropped = 0;
std::atomic<int> g_dump_requested{0};

// --- numbers ---------------------------------------------------------------

// ln(x) for x > 0: exponent from the bits, mantissa by a series good to
// about 1e-7 on [1, 2) (enough to space samples).
double log_approx(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof(bits));
  int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52);
  double m;
  memcpy(&m, &bits, sizeof(m));  // m in [1, 2)
  double t = (m - 1) / (m + 1);  // ln(m) = 2 atanh(t), |t| < 1/3
  double t2 = t * t;
  double series = t * (2 + t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9 + t2 * 2.0 / 11)))));
  return exponent * 0.6931471805599453 + series;
}

double exp_approx(double x) {
  // e^x = 2^k * e^r with |r| <= ln2/2.
  double k = static_cast<double>(static_cast<int64_t>(x / 0.6931471805599453 + (x < 0 ? -0.5 : 0.5)));
  double r = x - k * 0.6931471805599453;
  double er = 1 + r * (1 + r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720))))));
  if (k < -1000) return 0;
  uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(k) + 1023) << 52;
  double scale;
  memcpy(&scale, &bits, sizeof(scale));
  return er * scale;
}

int64_t next_interval() {
  double u = static_cast<double>((secure::next_random() >> 11) + 1) * (1.0 / 9007199254740992.0);
  double bytes = -log_approx(u) * static_cast<double>(g_options.prof_rate);
  return bytes < 1 ? 1 : static_cast<int64_t>(bytes);
}

// pprof's estimate of how many bytes a sampled (count, bytes) stands for.
double scale_factor(uint64_t count, uint64_t bytes) {
  if (count == 0) return 0;
  double average = static_cast<double>(bytes) / static_cast<double>(count);
  double p = 1 - exp_approx(-average / static_cast<double>(g_options.prof_rate));
  return p > 0 ? 1 / p : 1;
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

// The estimated live bytes of a stack (pprof's scaling of its samples).
double live_estimate(const Stack& s) {
  uint64_t count = load_relaxed(s.live_count), bytes = load_relaxed(s.live_bytes);
  return static_cast<double>(bytes) * scale_factor(count, bytes);
}

}  // namespace

__thread bool t_in_sampler = false;

// The sample's record is its block's descriptor (page.h): its stack and
// size, so that a free finds them without a lookup or a lock.
void record(Page* page, size_t size, void* const* frames, int depth) {
  page->sampled = 1;
  page->sample_bytes = size;
  page->sample_stack = kNoStack;
  LockGuard guard(g_lock);
  uint32_t stack = intern_stack(frames, depth);
  if (stack == UINT32_MAX) {
    ++g_dropped;
    return;
  }
  page->sample_stack = stack;
  Stack& st = g_stacks[stack];
  st.alloc_count++;
  st.alloc_bytes += size;
  __atomic_fetch_add(&st.live_count, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&st.live_bytes, size, __ATOMIC_RELAXED);
}

namespace {

void on_dump_signal(int) { g_dump_requested.store(1, std::memory_order_relaxed); }

// --- output ----------------------------------------------------------------

class FileWriter {
 public:
  explicit FileWriter(const char* path) : fd_(os::open_write_new(path)) {}
  ~FileWriter() {
    flush();
    if (fd_ >= 0) os::close(fd_);
  }
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  bool ok() const { return fd_ >= 0; }
  template <typename... Args>
  void print(const char* fmt, Args... args) {
    const report::Arg list[] = {report::Arg(args)..., report::Arg("")};
    char line[1024];
    size_t n = report::format(line, sizeof(line), fmt, list, sizeof...(Args));
    put(line, n);
  }
  void put(const char* data, size_t n) {
    if (len_ + n > sizeof(buf_)) flush();
    if (n > sizeof(buf_)) {
      raw_write(data, n);
      return;
    }
    memcpy(buf_ + len_, data, n);
    len_ += n;
  }
  void flush() {
    raw_write(buf_, len_);
    len_ = 0;
  }

 private:
  void raw_write(const char* data, size_t n) {
    if (fd_ >= 0) os::write_all(fd_, data, n);
  }
  int fd_;
  char buf_[16384];
  size_t len_ = 0;
};

// Leading frames that are xalloc's own (malloc, the slow path, the sampler).
int first_user_frame(const Stack& s) {
  int first = 0;
  while (first < static_cast<int>(s.depth) - 1 && is_xalloc_code(s.frames[first])) ++first;
  return first;
}

void make_path(char* out, size_t size, const char* prefix, const char* suffix) {
  char pid_prefix[256];
  if (prefix == nullptr) {
    const report::Arg args[] = {g_options.prof_prefix, static_cast<int64_t>(getpid())};
    report::format(pid_prefix, sizeof(pid_prefix), "%s.%d", args, 2);
    prefix = pid_prefix;
  }
  const report::Arg args[] = {prefix, suffix};
  report::format(out, size, "%s%s", args, 2);
}

void write_pprof(const char* path) {
  FileWriter out(path);
  if (!out.ok()) return;
  uint64_t live_count = 0, live_bytes = 0, alloc_count = 0, alloc_bytes = 0;
  for (size_t i = 0; i < g_stack_count; ++i) {
    live_count += load_relaxed(g_stacks[i].live_count);
    live_bytes += load_relaxed(g_stacks[i].live_bytes);
    alloc_count += g_stacks[i].alloc_count;
    alloc_bytes += g_stacks[i].alloc_bytes;
  }
  out.print("heap profile: %u: %u [%u: %u] @ heap_v2/%u\n", live_count, live_bytes, alloc_count, alloc_bytes,
            g_options.prof_rate);
  for (size_t i = 0; i < g_stack_count; ++i) {
    const Stack& s = g_stacks[i];
    out.print("%u: %u [%u: %u] @", load_relaxed(s.live_count), load_relaxed(s.live_bytes), s.alloc_count,
              s.alloc_bytes);
    for (int f = first_user_frame(s); f < static_cast<int>(s.depth); ++f) out.print(" %p", s.frames[f]);
    out.put("\n", 1);
  }
  // pprof maps addresses to binaries with this section.
  out.put("\nMAPPED_LIBRARIES:\n", 19);
  int maps = os::open_read("/proc/self/maps");
  if (maps >= 0) {
    char chunk[4096];
    long n;
    while ((n = os::read(maps, chunk, sizeof(chunk))) > 0) out.put(chunk, static_cast<size_t>(n));
    os::close(maps);
  }
}

void write_collapsed(const char* path) {
  FileWriter out(path);
  if (!out.ok()) return;
  char name[512];
  for (size_t i = 0; i < g_stack_count; ++i) {
    const Stack& s = g_stacks[i];
    if (load_relaxed(s.live_count) == 0) continue;
    int first = first_user_frame(s);
    // Flame graphs list the outermost frame first.
    for (int f = static_cast<int>(s.depth) - 1; f >= first; --f) {
      symbolize(s.frames[f], name, sizeof(name));
      out.put(name, strlen(name));
      if (f != first) out.put(";", 1);
    }
    out.print(" %u\n", static_cast<uint64_t>(live_estimate(s)));
  }
}

void print_leaks() {
  constexpr int kTop = 10;
  size_t order[kTop];
  double estimate[kTop];
  int shown = 0;
  // Top sites by estimated live bytes (selection: few sites are shown).
  for (size_t i = 0; i < g_stack_count; ++i) {
    const Stack& s = g_stacks[i];
    if (load_relaxed(s.live_count) == 0) continue;
    double bytes = live_estimate(s);
    int pos = shown < kTop ? shown++ : kTop - 1;
    if (pos == kTop - 1 && shown == kTop && estimate[pos] >= bytes) continue;
    while (pos > 0 && estimate[pos - 1] < bytes) {
      order[pos] = order[pos - 1];
      estimate[pos] = estimate[pos - 1];
      --pos;
    }
    order[pos] = i;
    estimate[pos] = bytes;
  }
  if (shown == 0) {
    report::message("leaks: no sampled memory is live at exit");
    return;
  }
  report::message("leaks: top allocation sites of memory live at exit (estimated from samples every %u bytes):",
                  g_options.prof_rate);
  char name[512];
  for (int k = 0; k < shown; ++k) {
    const Stack& s = g_stacks[order[k]];
    report::message("leaks: %u bytes (%u sampled blocks) allocated at:", static_cast<uint64_t>(estimate[k]),
                    load_relaxed(s.live_count));
    int first = first_user_frame(s);
    for (int f = first; f < static_cast<int>(s.depth) && f < first + 8; ++f)
      report::detail("    #%u %s", static_cast<unsigned>(f - first), symbolize(s.frames[f], name, sizeof(name)));
  }
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
  if (g_stacks == nullptr || g_stack_index == nullptr) {
    report::warning("heap profiler disabled: no memory for its tables");
    t_in_sampler = false;
    return;
  }
  // libunwind follows the stacks xalloc's own walker cannot (stack_trace.h):
  // loaded now, never from inside a sampled allocation (dlopen takes the
  // loader's lock). Without it those stacks end where the walker stopped.
  stack_trace_load();
  if (g_options.prof_signal != 0) {
    os::on_signal(static_cast<int>(g_options.prof_signal), on_dump_signal);
  }
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
}

void resized(Page* page, size_t size) {
  if (page->sample_stack != kNoStack)
    __atomic_fetch_add(&g_stacks[page->sample_stack].live_bytes, size - page->sample_bytes, __ATOMIC_RELAXED);
  page->sample_bytes = size;
}

bool dump(const char* prefix) {
  if (!profiling()) return false;
  char heap_path[512];
  char collapsed_path[512];
  make_path(heap_path, sizeof(heap_path), prefix, ".heap");
  make_path(collapsed_path, sizeof(collapsed_path), prefix, ".collapsed");
  t_in_sampler = true;
  {
    LockGuard guard(g_lock);
    write_pprof(heap_path);
    write_collapsed(collapsed_path);
  }
  t_in_sampler = false;
  if (g_options.verbose) report::message("heap profile written to %s and %s", heap_path, collapsed_path);
  return true;
}

void poll_signal() {
  if (g_dump_requested.load(std::memory_order_relaxed) != 0 && g_dump_requested.exchange(0) != 0) dump(nullptr);
}

void lock_for_fork() { g_lock.lock(); }
void unlock_after_fork_parent() { g_lock.unlock(); }
void reset_after_fork_child() { g_lock.reset_after_fork(); }

void at_exit() {
  if (!profiling()) return;
  if (g_options.prof) dump(nullptr);
  if (g_options.leaks) {
    t_in_sampler = true;
    LockGuard guard(g_lock);
    print_leaks();
    t_in_sampler = false;
  }
  if (g_dropped != 0) report::warning("heap profiler: %u samples dropped (tables full)", g_dropped);
}

}  // namespace xalloc::prof
