// The heap profiler's stack walker (xalloc::frame_walk, src/diag/
// frame_walker.cpp) against the unwinders it could use instead: libgcc's
// _Unwind_Backtrace and libunwind, both through unw_backtrace and stepping
// frame by frame, with its global and its per-thread cache.
//
// The profiler walks from inside a call chain, many times, from several
// threads; so does this program. Each worker thread builds a chain of D
// distinct non-inlined functions (some addressing their frame through rbp,
// some through rsp, as -O2 code without -fno-omit-frame-pointer does) and,
// at the bottom, walks the whole stack with one method N times in a row.
// Every walk is warm: the rules or caches a method keeps were filled by a
// warm-up run of the same method first. The time per walk is the loop's
// time over N, for 1 and 2 threads walking at once (the mean of the
// threads' times), the median of --reps rounds; within a round the methods
// run in turn, each round starting one method further along. It is given
// twice: as the walking thread's CPU time, which other processes on a busy
// machine hardly change, and as wall time, which also counts the waits for
// a lock held by the other thread. A last table gives the first walk in a
// new thread, where per-thread caches are empty.
//
// Before timing, each method's trace is checked against frame_walk's: from
// the walk's call site in the timing loop outwards, the return addresses
// must be the same. They differ only in the frames before it (the wrapper
// each method is called through, and for some the unwinder's own).
//
// libgcc's functions are looked up in libgcc_s.so.1 itself: libunwind.so.8
// also defines _Unwind_Backtrace and _Unwind_GetIP, and being linked in
// before libgcc_s its definitions would be the ones the program calls.
//
//   unwind_bench [--reps R] [--walks N] [--depths 10,30] [--threads 1,2]
//                [--target-ms MS] [--cold K] [--only METHOD] [--keep-policy]
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <libunwind.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "frame_walker.h"

#define NOINLINE __attribute__((noinline))

namespace {

constexpr int kMaxFrames = 128;
constexpr int kMaxDepth = 30;

// --- the methods ----------------------------------------------------------------

using WalkFn = int (*)(void** frames, int max);

// Where the wrapper of the walk was called from (in timed_loop): the first
// frame all methods must agree on.
thread_local void* t_anchor;
thread_local bool t_own_complete;

// Keeps the compiler from turning a call into a jump (the wrapper's frame
// must be there for every method alike).
inline void keep(int value) { __asm__ volatile("" : : "r"(value) : "memory"); }

NOINLINE int walk_own(void** frames, int max) {
  t_anchor = __builtin_return_address(0);
  xalloc::FrameWalk walk = xalloc::frame_walk(frames, max);
  t_own_complete = walk.complete;
  keep(walk.depth);
  return walk.depth;
}

using GccBacktraceFn = _Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void*);
using GccGetIpFn = _Unwind_Ptr (*)(_Unwind_Context*);
GccBacktraceFn g_gcc_backtrace;
GccGetIpFn g_gcc_get_ip;

struct GccTrace {
  void** frames;
  int max;
  int depth;
};

_Unwind_Reason_Code gcc_frame(_Unwind_Context* context, void* arg) {
  auto* trace = static_cast<GccTrace*>(arg);
  if (trace->depth >= trace->max) return _URC_END_OF_STACK;
  _Unwind_Ptr ip = g_gcc_get_ip(context);
  if (ip == 0) return _URC_END_OF_STACK;
  trace->frames[trace->depth++] = reinterpret_cast<void*>(ip);
  return _URC_NO_REASON;
}

NOINLINE int walk_libgcc(void** frames, int max) {
  t_anchor = __builtin_return_address(0);
  GccTrace trace{frames, max, 0};
  g_gcc_backtrace(gcc_frame, &trace);
  keep(trace.depth);
  return trace.depth;
}

NOINLINE int walk_unw_backtrace(void** frames, int max) {
  t_anchor = __builtin_return_address(0);
  int depth = unw_backtrace(frames, max);
  keep(depth);
  return depth;
}

// As xalloc's stack_trace.cpp steps: the caller's return address first.
NOINLINE int walk_unw_step(void** frames, int max) {
  t_anchor = __builtin_return_address(0);
  unw_context_t context;
  unw_cursor_t cursor;
  int depth = 0;
  if (unw_getcontext(&context) == 0 && unw_init_local(&cursor, &context) == 0) {
    while (depth < max && unw_step(&cursor) > 0) {
      unw_word_t ip = 0;
      if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
      frames[depth++] = reinterpret_cast<void*>(ip);
    }
  }
  keep(depth);
  return depth;
}

struct Method {
  const char* name;
  WalkFn walk;
  int policy;  // the libunwind caching policy set before it runs; -1: none
};

const Method kMethods[] = {
    {"xalloc frame_walk", walk_own, -1},
    {"libgcc _Unwind_Backtrace", walk_libgcc, -1},
    {"libunwind unw_backtrace, per-thread cache", walk_unw_backtrace, UNW_CACHE_PER_THREAD},
    {"libunwind unw_step loop, per-thread cache", walk_unw_step, UNW_CACHE_PER_THREAD},
    {"libunwind unw_backtrace, global cache", walk_unw_backtrace, UNW_CACHE_GLOBAL},
    {"libunwind unw_step loop, global cache", walk_unw_step, UNW_CACHE_GLOBAL},
};
constexpr int kMethodCount = sizeof(kMethods) / sizeof(kMethods[0]);

// --keep-policy: never set one, for a libunwind built with
// --enable-per-thread-cache, whose default is the per-thread cache:
// unw_set_caching_policy turns UNW_CACHE_PER_THREAD into UNW_CACHE_GLOBAL
// in every build (libunwind 1.6-1.8 test a HAVE___THREAD that nothing
// defines).
bool g_keep_policy = false;

const char* method_name(int m) {
  if (g_keep_policy && m == 2) return "libunwind unw_backtrace, library's default cache";
  if (g_keep_policy && m == 3) return "libunwind unw_step loop, library's default cache";
  return kMethods[m].name;
}

void set_policy(const Method& m) {
  if (m.policy < 0 || g_keep_policy) return;
  if (unw_set_caching_policy(unw_local_addr_space, static_cast<unw_caching_policy_t>(m.policy)) != 0) {
    fprintf(stderr, "unwind_bench: unw_set_caching_policy(%d) failed\n", m.policy);
    exit(1);
  }
}

// --- the worker threads -----------------------------------------------------------

enum class Command { kCheck, kTime, kCold, kStop };

struct Worker {
  // Set by main before the start barrier.
  Command command;
  int method;
  long walks;
  int salt;
  // Results: ns per walk, the thread's CPU time and wall time.
  double cpu_ns;
  double wall_ns;
  double frames_per_walk;
  int depth[kMethodCount];
  int anchor_at[kMethodCount];  // index of t_anchor in the trace; -1: absent
  bool own_complete;
  void* traces[kMethodCount][kMaxFrames];
};

pthread_barrier_t g_start;
pthread_barrier_t g_done;

double now_ns(clockid_t clock = CLOCK_MONOTONIC) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// The one call site of every walk.
NOINLINE long timed_loop(WalkFn walk, void** frames, long walks) {
  long frames_walked = 0;
  for (long i = 0; i < walks; ++i) frames_walked += walk(frames, kMaxFrames);
  return frames_walked;
}

void check_walks(Worker* w) {
  void* frames[kMaxFrames];
  for (int m = 0; m < kMethodCount; ++m) {
    set_policy(kMethods[m]);  // only one thread checks at a time
    timed_loop(kMethods[m].walk, frames, 1);
    int depth = static_cast<int>(timed_loop(kMethods[m].walk, frames, 1));
    if (m == 0) w->own_complete = t_own_complete;
    w->depth[m] = depth;
    w->anchor_at[m] = -1;
    for (int i = 0; i < depth; ++i) {
      w->traces[m][i] = frames[i];
      if (w->anchor_at[m] < 0 && frames[i] == t_anchor) w->anchor_at[m] = i;
    }
  }
}

NOINLINE int bottom(Worker* w) {
  void* frames[kMaxFrames];
  if (w->command == Command::kCold) {  // one walk in this new thread
    double start = now_ns();
    long got = timed_loop(kMethods[w->method].walk, frames, 1);
    w->wall_ns = now_ns() - start;
    w->frames_per_walk = static_cast<double>(got);
    return 0;
  }
  for (;;) {
    pthread_barrier_wait(&g_start);
    if (w->command == Command::kStop) break;
    if (w->command == Command::kCheck) {
      check_walks(w);
    } else {
      WalkFn walk = kMethods[w->method].walk;
      timed_loop(walk, frames, std::max(200L, w->walks / 10));  // warm-up
      double start_cpu = now_ns(CLOCK_THREAD_CPUTIME_ID);
      double start = now_ns();
      long got = timed_loop(walk, frames, w->walks);
      double end = now_ns();
      w->cpu_ns = (now_ns(CLOCK_THREAD_CPUTIME_ID) - start_cpu) / static_cast<double>(w->walks);
      w->wall_ns = (end - start) / static_cast<double>(w->walks);
      w->frames_per_walk = static_cast<double>(got) / static_cast<double>(w->walks);
    }
    pthread_barrier_wait(&g_done);
  }
  return 0;
}

// The call chain: level<N> calls level<N-1>, level<0> calls bottom. Three
// shapes of frame in turn: rbp-based (alloca), rsp-based with a local
// array, and one that saves nothing but its alignment.
template <int N>
NOINLINE int level(Worker* w);

template <>
NOINLINE int level<0>(Worker* w) {
  int r = bottom(w);
  keep(r);
  return r;
}

template <int N>
NOINLINE int level(Worker* w) {
  int r;
  if constexpr (N % 3 == 0) {
    auto* p = static_cast<volatile char*>(__builtin_alloca(16 + (w->salt & 48)));
    p[0] = static_cast<char>(N);
    r = level<N - 1>(w);
    keep(r);
    r += p[0];
  } else if constexpr (N % 3 == 1) {
    volatile char buffer[64];
    buffer[N] = static_cast<char>(N);
    r = level<N - 1>(w);
    keep(r);
    r += buffer[N];
  } else {
    r = level<N - 1>(w);
    keep(r);
    r += N;
  }
  return r;
}

using LevelFn = int (*)(Worker*);
template <size_t... I>
constexpr auto make_levels(std::index_sequence<I...>) {
  return std::array<LevelFn, sizeof...(I)>{&level<static_cast<int>(I)>...};
}
const auto kLevels = make_levels(std::make_index_sequence<kMaxDepth>());

struct ThreadArg {
  Worker* worker;
  int depth;
};

void* thread_main(void* arg) {
  auto* a = static_cast<ThreadArg*>(arg);
  int r = kLevels[static_cast<size_t>(a->depth - 1)](a->worker);
  keep(r);
  return nullptr;
}

class Workers {
 public:
  Workers(int threads, int depth) : workers_(static_cast<size_t>(threads)), args_(static_cast<size_t>(threads)) {
    pthread_barrier_init(&g_start, nullptr, static_cast<unsigned>(threads + 1));
    pthread_barrier_init(&g_done, nullptr, static_cast<unsigned>(threads + 1));
    for (int i = 0; i < threads; ++i) {
      workers_[i].salt = i;
      args_[i] = ThreadArg{&workers_[i], depth};
      pthread_t thread;
      if (pthread_create(&thread, nullptr, thread_main, &args_[i]) != 0) {
        perror("pthread_create");
        exit(1);
      }
      threads_.push_back(thread);
    }
  }
  ~Workers() {
    for (auto& w : workers_) w.command = Command::kStop;
    pthread_barrier_wait(&g_start);
    for (pthread_t t : threads_) pthread_join(t, nullptr);
    pthread_barrier_destroy(&g_start);
    pthread_barrier_destroy(&g_done);
  }

  // Runs one command on every worker at once.
  void run(Command command, int method, long walks) {
    for (auto& w : workers_) {
      w.command = command;
      w.method = method;
      w.walks = walks;
    }
    pthread_barrier_wait(&g_start);
    pthread_barrier_wait(&g_done);
  }

  // Only with one worker: a check changes libunwind's caching policy.
  void check() { run(Command::kCheck, 0, 0); }

  std::vector<Worker>& workers() { return workers_; }

 private:
  std::vector<Worker> workers_;
  std::vector<ThreadArg> args_;
  std::vector<pthread_t> threads_;
};

// --- main ------------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Spread {
  double median, low, high;
};

Spread spread(const std::vector<double>& v) {
  return Spread{median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

constexpr int kCpu = 0;
constexpr int kWall = 1;

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p;) {
    out.push_back(atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

const char* object_of(const void* address) {
  Dl_info info;
  return dladdr(address, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "?";
}

void load_libgcc() {
  void* lib = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    fprintf(stderr, "unwind_bench: %s\n", dlerror());
    exit(1);
  }
  g_gcc_backtrace = reinterpret_cast<GccBacktraceFn>(dlsym(lib, "_Unwind_Backtrace"));
  g_gcc_get_ip = reinterpret_cast<GccGetIpFn>(dlsym(lib, "_Unwind_GetIP"));
  if (g_gcc_backtrace == nullptr || g_gcc_get_ip == nullptr ||
      strstr(object_of(reinterpret_cast<void*>(g_gcc_backtrace)), "libgcc_s") == nullptr ||
      strstr(object_of(reinterpret_cast<void*>(g_gcc_get_ip)), "libgcc_s") == nullptr) {
    fprintf(stderr, "unwind_bench: _Unwind_Backtrace not found in libgcc_s.so.1\n");
    exit(1);
  }
}

void print_environment() {
  char model[512] = "?";
  if (FILE* f = fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (fgets(line, sizeof(line), f)) {
      if (strncmp(line, "model name", 10) == 0) {
        const char* colon = strchr(line, ':');
        snprintf(model, sizeof(model), "%s", colon ? colon + 2 : line);
        model[strcspn(model, "\n")] = '\0';
        break;
      }
    }
    fclose(f);
  }
  char load[128] = "?";
  if (FILE* f = fopen("/proc/loadavg", "r")) {
    if (fgets(load, sizeof(load), f)) load[strcspn(load, "\n")] = '\0';
    fclose(f);
  }
  printf("cpu: %s, %ld online; load average: %s\n", model, sysconf(_SC_NPROCESSORS_ONLN), load);
  printf("compiler: gcc %s; glibc %s\n", __VERSION__, gnu_get_libc_version());
  printf("libgcc: %s\nlibunwind: %s\n", object_of(reinterpret_cast<void*>(g_gcc_backtrace)),
         object_of(reinterpret_cast<void*>(&unw_backtrace)));
}

// Every method's trace from the call site in timed_loop outwards must be
// frame_walk's. True if all agree.
bool report_check(const Worker& w, int depth) {
  printf("\ncheck, chain of %d functions: frames walked (before the call site + from it outwards)\n", depth);
  bool ok = w.own_complete && w.anchor_at[0] >= 0;
  int own_from = w.anchor_at[0];
  int own_len = w.depth[0] - own_from;
  for (int m = 0; m < kMethodCount; ++m) {
    int at = w.anchor_at[m];
    const char* verdict = "same as frame_walk";
    if (at < 0) {
      verdict = "CALL SITE NOT FOUND";
      ok = false;
    } else if (w.depth[m] - at != own_len ||
               !std::equal(w.traces[m] + at, w.traces[m] + w.depth[m], w.traces[0] + own_from)) {
      verdict = "DIFFERENT";
      ok = false;
    }
    printf("  %-48s %3d (%d + %d)  %s%s\n", method_name(m), w.depth[m], at, at < 0 ? 0 : w.depth[m] - at, verdict,
           m == 0 && !w.own_complete ? " (incomplete)" : "");
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  long max_walks = 200000;
  double target_ms = 150;
  int cold_threads = 21;
  int only = -1;
  std::vector<int> depths{10, 30};
  std::vector<int> thread_counts{1, 2};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--keep-policy") {
      g_keep_policy = true;
      continue;
    }
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value == nullptr && arg != "--help") {
      fprintf(stderr, "unwind_bench: %s needs a value\n", arg.c_str());
      return 2;
    }
    if (arg == "--reps") reps = atoi(value);
    else if (arg == "--walks") max_walks = atol(value);
    else if (arg == "--target-ms") target_ms = atof(value);
    else if (arg == "--cold") cold_threads = atoi(value);
    else if (arg == "--depths") depths = parse_list(value);
    else if (arg == "--threads") thread_counts = parse_list(value);
    else if (arg == "--only") only = atoi(value);
    else {
      printf("usage: unwind_bench [--reps R] [--walks N] [--depths 10,30] [--threads 1,2] [--target-ms MS]\n"
             "                    [--cold K] [--only METHOD] [--keep-policy]\nmethods:\n");
      for (int m = 0; m < kMethodCount; ++m) printf("  %d  %s\n", m, kMethods[m].name);
      return arg == "--help" ? 0 : 2;
    }
    ++i;
  }
  for (int d : depths) {
    if (d < 1 || d > kMaxDepth) {
      fprintf(stderr, "unwind_bench: depth %d outside 1-%d\n", d, kMaxDepth);
      return 2;
    }
  }
  load_libgcc();
  print_environment();

  std::vector<int> methods;
  for (int m = 0; m < kMethodCount; ++m)
    if ((only < 0 || m == only) && !(g_keep_policy && kMethods[m].policy == UNW_CACHE_GLOBAL)) methods.push_back(m);

  // results[clock][d][t][m]: ns per walk; frames[d][m]: frames per walk.
  size_t nd = depths.size(), nt = thread_counts.size();
  using Table = std::vector<std::vector<std::vector<Spread>>>;
  Table results[2];
  for (Table& table : results)
    table.assign(nd, std::vector<std::vector<Spread>>(nt, std::vector<Spread>(kMethodCount)));
  std::vector<std::vector<double>> frames(nd, std::vector<double>(kMethodCount));
  std::vector<std::vector<long>> walks(nd, std::vector<long>(kMethodCount, max_walks));
  bool all_same = true;

  for (size_t di = 0; di < nd; ++di) {
    int depth = depths[di];
    {
      Workers one(1, depth);
      one.check();
      all_same = report_check(one.workers()[0], depth) && all_same;
      // As many walks as take about target_ms, at most max_walks.
      for (int m : methods) {
        set_policy(kMethods[m]);
        one.run(Command::kTime, m, 1000);
        double ns = one.workers()[0].wall_ns;
        walks[di][m] = std::clamp(static_cast<long>(target_ms * 1e6 / ns), std::min(1000L, max_walks), max_walks);
      }
    }
    for (size_t ti = 0; ti < nt; ++ti) {
      Workers pool(thread_counts[ti], depth);
      std::vector<std::vector<double>> cpu(kMethodCount), wall(kMethodCount);
      for (int r = 0; r < reps; ++r) {
        for (size_t k = 0; k < methods.size(); ++k) {
          int m = methods[(k + static_cast<size_t>(r)) % methods.size()];
          set_policy(kMethods[m]);
          pool.run(Command::kTime, m, walks[di][m]);
          double cpu_sum = 0, wall_sum = 0;
          for (auto& w : pool.workers()) {
            cpu_sum += w.cpu_ns;
            wall_sum += w.wall_ns;
          }
          cpu[m].push_back(cpu_sum / static_cast<double>(pool.workers().size()));
          wall[m].push_back(wall_sum / static_cast<double>(pool.workers().size()));
          frames[di][m] = pool.workers()[0].frames_per_walk;
        }
      }
      for (int m : methods) {
        results[kCpu][di][ti][m] = spread(cpu[m]);
        results[kWall][di][ti][m] = spread(wall[m]);
      }
    }
  }

  for (int clock : {kCpu, kWall}) {
    printf("\nns per walk, %s, median of %d rounds\n\n",
           clock == kCpu ? "the walking thread's CPU time" : "wall time", reps);
    printf("| method |");
    for (int d : depths)
      for (int t : thread_counts) printf(" depth %d, %d thread%s |", d, t, t > 1 ? "s" : "");
    printf("\n|---|");
    for (size_t i = 0; i < nd * nt; ++i) printf("---:|");
    printf("\n");
    for (int m : methods) {
      printf("| %s |", method_name(m));
      for (size_t di = 0; di < nd; ++di)
        for (size_t ti = 0; ti < nt; ++ti) printf(" %.0f |", results[clock][di][ti][m].median);
      printf("\n");
    }
    printf("\nmin-max of the rounds; frames and walks per round\n\n");
    for (int m : methods) {
      printf("  %-48s", method_name(m));
      for (size_t di = 0; di < nd; ++di) {
        printf("  depth %d: %.0f frames, %ld walks;", depths[di], frames[di][m], walks[di][m]);
        for (size_t ti = 0; ti < nt; ++ti)
          printf(" %dT %.0f-%.0f", thread_counts[ti], results[clock][di][ti][m].low, results[clock][di][ti][m].high);
      }
      printf("\n");
    }
    if (only < 0) {
      printf("\neach method's time over frame_walk's\n\n");
      for (int m : methods) {
        if (m == 0) continue;
        printf("  %-48s", method_name(m));
        for (size_t di = 0; di < nd; ++di)
          for (size_t ti = 0; ti < nt; ++ti)
            printf("  d%d/%dT %.2fx", depths[di], thread_counts[ti],
                   results[clock][di][ti][m].median / results[clock][di][ti][0].median);
        printf("\n");
      }
    }
  }

  // Stepping takes two system calls a frame under the global cache's lock,
  // none with a per-thread cache: the same time means the same cache.
  if (only < 0 && !g_keep_policy) {
    bool same = true;
    for (size_t di = 0; di < nd; ++di)
      for (size_t ti = 0; ti < nt; ++ti)
        same = same && results[kCpu][di][ti][3].median > 0.67 * results[kCpu][di][ti][5].median;
    if (same)
      printf("\nnote: stepping took as long after UNW_CACHE_PER_THREAD as with the global cache: this libunwind\n"
             "ran both with its global cache (it turns UNW_CACHE_PER_THREAD into UNW_CACHE_GLOBAL); a build with\n"
             "--enable-per-thread-cache has the per-thread cache as its default: measure it with --keep-policy\n");
  }

  if (cold_threads > 0) {
    printf("\nfirst walk in a new thread, us, median of %d threads (the global caches warm)\n\n", cold_threads);
    for (int m : methods) {
      printf("  %-48s", method_name(m));
      for (int depth : depths) {
        std::vector<double> samples;
        set_policy(kMethods[m]);
        for (int i = 0; i < cold_threads; ++i) {
          Worker w{};
          w.command = Command::kCold;
          w.method = m;
          ThreadArg arg{&w, depth};
          pthread_t thread;
          if (pthread_create(&thread, nullptr, thread_main, &arg) != 0) return 1;
          pthread_join(thread, nullptr);
          samples.push_back(w.wall_ns / 1000);
        }
        printf("  depth %d: %.1f", depth, median(samples));
      }
      printf("\n");
    }
  }
  if (!all_same) {
    printf("\nunwind_bench: the methods' traces differ (above)\n");
    return 1;
  }
  return 0;
}
