#include "diag/stack_trace.h"

#include <dlfcn.h>
#include <execinfo.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <atomic>
#include <cstring>

#include "base/config.h"
#include "diag/frame_walker.h"
#include "platform/os.h"
#include "support/report.h"
#include "diag/symbolize.h"

namespace xalloc {

namespace {

// libunwind's entry points; the names are those the UNW_LOCAL_ONLY macros
// of <libunwind.h> expand to.
struct Unwind {
  int (*getcontext)(unw_context_t*);
  int (*init_local)(unw_cursor_t*, unw_context_t*);
  int (*step)(unw_cursor_t*);
  int (*get_reg)(unw_cursor_t*, unw_regnum_t, unw_word_t*);
  int (*get_proc_name)(unw_cursor_t*, char*, size_t, unw_word_t*);
  int (*backtrace)(void**, int);
};

Unwind g_unwind;
std::atomic<int> g_state{0};  // 0 not tried, 1 loaded, -1 unavailable

template <typename Fn>
bool resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

// Frames of xalloc itself: named as its by libunwind, or found so by
// is_xalloc_code (its shared object, or its names in the executable).
bool is_internal_frame(const void* ip, const char* name) {
  return (name != nullptr && is_xalloc_name(name)) || is_xalloc_code(ip);
}

}  // namespace

bool stack_trace_load() {
  int state = g_state.load(std::memory_order_acquire);
  if (state != 0) return state > 0;
  // Not in a statically linked program (dladdr knows no object there):
  // dlopen would bring libunwind its own copy of libc, which does not know
  // the program's unwind tables - its traces stop after a frame or two.
  // RTLD_LOCAL: libunwind also defines backtrace(), which must not replace
  // glibc's for the program.
  void* lib = is_static_program() ? nullptr : dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  bool ok = lib != nullptr && resolve(lib, "_Ux86_64_getcontext", &g_unwind.getcontext) &&
            resolve(lib, "_ULx86_64_init_local", &g_unwind.init_local) &&
            resolve(lib, "_ULx86_64_step", &g_unwind.step) && resolve(lib, "_ULx86_64_get_reg", &g_unwind.get_reg) &&
            resolve(lib, "_ULx86_64_get_proc_name", &g_unwind.get_proc_name) &&
            resolve(lib, "unw_backtrace", &g_unwind.backtrace);
  g_state.store(ok ? 1 : -1, std::memory_order_release);
  return ok;
}

namespace {

// For the stacks frame_walk cannot follow (a frame without call-frame
// information, a signal frame), libunwind, in one of two ways.
// unw_backtrace takes a warm trace fastest (0.1-0.5 us), but its first call
// in a thread builds a per-thread cache: a 256 KiB mapping it fills (100 us,
// or 700 us where page faults are slow), unmapped again at thread exit.
// Stepping frame by frame needs no per-thread set-up, but each step blocks
// and unblocks signals around libunwind's cache lock (two system calls a
// frame): 1.6 us a trace, or 10-19 us where system calls are slow. Either
// way the cache pays for itself after some 64 traces, so a thread steps for
// its first traces and then moves to unw_backtrace: a program of many short
// threads that each allocate a little never builds one.
constexpr unsigned kStepTracesPerThread = 64;
__thread unsigned t_traces_taken;

// The return addresses of the caller's frames, the caller's own first (as
// unw_backtrace gives them).
__attribute__((noinline)) int step_trace(void** frames, int want) {
  unw_context_t context;
  unw_cursor_t cursor;
  if (g_unwind.getcontext(&context) != 0 || g_unwind.init_local(&cursor, &context) != 0) return 0;
  int got = 0;
  while (got < want && g_unwind.step(&cursor) > 0) {
    unw_word_t ip = 0;
    if (g_unwind.get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
    frames[got++] = reinterpret_cast<void*>(ip);
  }
  return got;
}

// Threads inside libunwind, and a fork waiting for them to leave
// (stack_trace_hold_for_fork). A walker counts itself in, then checks that
// no fork is pending; the fork sets its flag, then waits for the count to
// reach zero: with both sequentially consistent, one of them sees the other.
XALLOC_FORK_DATA std::atomic<uint32_t> g_walkers{0};
XALLOC_FORK_DATA std::atomic<bool> g_fork_pending{false};

class WalkGuard {
 public:
  WalkGuard() {
    for (;;) {
      while (g_fork_pending.load(std::memory_order_acquire)) os::yield_cpu();
      g_walkers.fetch_add(1, std::memory_order_seq_cst);
      if (!g_fork_pending.load(std::memory_order_seq_cst)) return;
      g_walkers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
  ~WalkGuard() { g_walkers.fetch_sub(1, std::memory_order_release); }
  WalkGuard(const WalkGuard&) = delete;
  WalkGuard& operator=(const WalkGuard&) = delete;
};

// Through libunwind (loaded), for the stacks frame_walk cannot follow.
__attribute__((noinline)) int libunwind_trace(void** frames, int want) {
  bool stepping = t_traces_taken < kStepTracesPerThread;
  if (stepping) ++t_traces_taken;
  WalkGuard walking;
  return stepping ? step_trace(frames, want) : g_unwind.backtrace(frames, want);
}

}  // namespace

void stack_trace_hold_for_fork() {
  g_fork_pending.store(true, std::memory_order_seq_cst);
  while (g_walkers.load(std::memory_order_seq_cst) != 0) os::yield_cpu();
}

void stack_trace_release_after_fork() { g_fork_pending.store(false, std::memory_order_release); }

namespace {

// Set once the program's constructors start running. In a statically
// linked program libc's own start-up allocates (_dl_find_object_init)
// before _dl_find_object, which frame_walk calls, is ready: a sample taken
// there crashed. Samples before this have no stack.
XALLOC_STARTUP_DATA std::atomic<bool> g_constructors_started{false};
__attribute__((constructor)) void note_constructors_started() {
  g_constructors_started.store(true, std::memory_order_release);
}

}  // namespace

int stack_trace_capture(void** out, int max, int skip) {
  if (!g_constructors_started.load(std::memory_order_acquire)) return 0;
  constexpr int kMaxWalk = 128;
  void* frames[kMaxWalk];
  int want = max + skip + 1 < kMaxWalk ? max + skip + 1 : kMaxWalk - 1;
  FrameWalk walk = frame_walk(frames, want);
  int got = walk.depth;
  int first = skip + 1;  // this function's own frame
  // Never loads libunwind here: a sampled allocation may come from inside
  // dlopen, or from a thread racing one (the loader's lock).
  if (!walk.complete && g_state.load(std::memory_order_acquire) > 0) {
    got = libunwind_trace(frames, want + 1);
    ++first;  // libunwind's trace starts in libunwind_trace
  }
  int n = 0;
  for (int i = first; i < got && n < max; ++i) out[n++] = frames[i];
  return n;
}

namespace {

// glibc's backtrace(), where libunwind is missing or finds no frame, and
// in a statically linked program (stack_trace_load), where backtrace()
// uses the unwinder linked into the program. Frames are named from the files'
// symbol tables. xalloc's own come first: every frame up to the last one
// named as xalloc's among the first few (a part split off a function may
// have no symbol of its own).
void print_glibc_backtrace() {
  constexpr int kMaxFrames = 64;
  constexpr int kInternalDepth = 8;
  void* frames[kMaxFrames];
  char names[kMaxFrames][192];
  int got = backtrace(frames, kMaxFrames);
  int first = 0;
  for (int i = 0; i < got; ++i) {
    symbolize(frames[i], names[i], sizeof(names[i]));
    if (i < kInternalDepth && is_xalloc_name(names[i])) first = i + 1;
  }
  for (int i = first; i < got; ++i) {
    report::detail("    #%u %p in %s", static_cast<unsigned>(i - first), frames[i], names[i]);
  }
  if (first >= got) report::message("(no stack trace: libunwind.so.8 is not installed, and backtrace() found none)");
}

}  // namespace

void stack_trace_print() {
  if (!stack_trace_load()) return print_glibc_backtrace();
  WalkGuard walking;
  unw_context_t context;
  unw_cursor_t cursor;
  if (g_unwind.getcontext(&context) != 0 || g_unwind.init_local(&cursor, &context) != 0) {
    return print_glibc_backtrace();
  }
  bool skipping = true;
  int shown = 0;
  for (int depth = 0; depth < 64 && g_unwind.step(&cursor) > 0; ++depth) {
    unw_word_t ip = 0;
    unw_word_t offset = 0;
    char name[256];
    g_unwind.get_reg(&cursor, UNW_REG_IP, &ip);
    if (ip == 0) break;
    bool named = g_unwind.get_proc_name(&cursor, name, sizeof(name), &offset) == 0;
    auto* address = reinterpret_cast<void*>(ip);
    if (skipping && is_internal_frame(address, named ? name : nullptr)) continue;
    skipping = false;
    Dl_info info;
    const char* object = dladdr(address, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "?";
    const char* base = strrchr(object, '/');
    if (named) {
      report::detail("    #%u %p in %s+%x (%s)", static_cast<unsigned>(shown), address, name,
                      static_cast<uint64_t>(offset), base != nullptr ? base + 1 : object);
    } else {
      report::detail("    #%u %p (%s)", static_cast<unsigned>(shown), address, base != nullptr ? base + 1 : object);
    }
    ++shown;
  }
  if (shown == 0) print_glibc_backtrace();
}

}  // namespace xalloc
