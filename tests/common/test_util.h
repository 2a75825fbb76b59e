// Helpers shared by the xalloc test programs: byte patterns that make
// corruption visible, alignment checks, running a piece of code in a forked
// child (for crash reports and resource limits), and scaling of iteration
// counts for slow builds (sanitizers, debug checks).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace xtest {

// Built with a sanitizer (XALLOC_SANITIZE): everything runs many times slower,
// and resource-limit tests cannot work (the sanitizer's shadow memory needs
// terabytes of address space).
#if defined(XALLOC_TEST_SANITIZED)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

#if defined(XALLOC_TEST_TSAN)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif

#if defined(XALLOC_TEST_DEBUG_CHECKS)
constexpr bool kDebugChecks = true;
#else
constexpr bool kDebugChecks = false;
#endif

// XTEST_SOAK=N multiplies the work of stress tests (scripts/test.sh sets it
// from XALLOC_TEST_SOAK; not an XALLOC_* name, which xalloc would warn about).
inline unsigned soak_factor() {
  const char* v = std::getenv("XTEST_SOAK");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return 1;
  long n = std::strtol(v, nullptr, 10);
  return n > 1 ? static_cast<unsigned>(n) : 10;
}

// Scales an iteration count: full size in optimised builds, reduced under
// sanitizers and debug checks, multiplied when soaking.
inline size_t scaled(size_t full, size_t sanitized_divisor = 8) {
  size_t n = full;
  if (kSanitized || kDebugChecks) n = full / sanitized_divisor;
  if (n == 0) n = 1;
  return n * soak_factor();
}

// Hides a pointer's origin from the optimiser, so that it neither warns about
// what it cannot know (uninitialised memory handed to a const pointer
// parameter, mismatched allocation functions) nor folds calls away.
template <typename T>
__attribute__((always_inline)) inline T* launder_ptr(T* p) {
  __asm__ volatile("" : "+r"(p));
  return p;
}

// size hidden from the optimiser (for impossible sizes that would draw
// compile-time warnings).
__attribute__((always_inline)) inline size_t opaque_size(size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}

inline bool is_aligned(const void* p, size_t alignment) {
  return (reinterpret_cast<uintptr_t>(p) & (alignment - 1)) == 0;
}

// A byte that depends on the position and a seed, so that a block copied to
// the wrong offset, or one overwritten by another block, is detected.
inline uint8_t pattern_byte(size_t offset, uint64_t seed) {
  uint64_t x = (offset + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 8) ^ (x >> 17));
}

inline void fill_pattern(void* p, size_t n, uint64_t seed, size_t from = 0) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = from; i < n; ++i) b[i] = pattern_byte(i, seed);
}

// Returns the first offset in [from, n) that does not hold the pattern, or
// SIZE_MAX if all of them do.
inline size_t check_pattern(const void* p, size_t n, uint64_t seed, size_t from = 0) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = from; i < n; ++i) {
    if (b[i] != pattern_byte(i, seed)) return i;
  }
  return SIZE_MAX;
}

// Writes a byte every page (and the last byte) of a large block: proves the
// memory is mapped and writable without touching all of it.
inline void touch_pages(void* p, size_t n, uint8_t value) {
  auto* b = static_cast<volatile uint8_t*>(p);
  if (n == 0) return;
  for (size_t i = 0; i < n; i += 4096) b[i] = value;
  b[n - 1] = value;
}

inline bool pages_hold(const void* p, size_t n, uint8_t value) {
  const auto* b = static_cast<const volatile uint8_t*>(p);
  if (n == 0) return true;
  for (size_t i = 0; i < n; i += 4096) {
    if (b[i] != value) return false;
  }
  return b[n - 1] == value;
}

inline bool all_zero(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

// Pages of [p, p + n) resident now (p page-aligned), by mincore.
inline size_t resident_pages(const void* p, size_t n) {
  std::vector<unsigned char> residency((n + 4095) / 4096);
  if (mincore(const_cast<void*>(p), n, residency.data()) != 0) return 0;
  size_t resident = 0;
  for (unsigned char page : residency) resident += page & 1;
  return resident;
}

// "0x7f..." exactly as xalloc's reports (and glibc's %p) print a pointer.
inline std::string hex_ptr(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)));
  return buf;
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

inline bool has_line(const std::string& text, const std::string& line) {
  for (const std::string& l : split_lines(text)) {
    if (l == line) return true;
  }
  return false;
}

inline bool has_line_starting(const std::string& text, const std::string& prefix) {
  for (const std::string& l : split_lines(text)) {
    if (l.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

struct ChildResult {
  int status = 0;          // as from waitpid
  std::string err;         // everything the child wrote to stderr
  bool exited() const { return WIFEXITED(status); }
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  bool signaled() const { return WIFSIGNALED(status); }
  int signal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }
  std::string describe() const {
    std::ostringstream s;
    if (exited()) s << "exited with " << exit_code();
    else if (signaled()) s << "killed by signal " << signal() << " (" << strsignal(signal()) << ")";
    else s << "status " << status;
    s << "; stderr:\n" << err;
    return s.str();
  }
};

// Runs fn in a forked child whose stderr is captured; the child exits with
// fn's return value. It is killed by SIGALRM after timeout_s seconds (a
// hang is a failure too). No core dumps.
inline ChildResult run_in_child(const std::function<int()>& fn, unsigned timeout_s = 60) {
  std::fflush(stdout);
  std::fflush(stderr);
  int fds[2];
  if (pipe(fds) != 0) {
    ChildResult r;
    r.status = -1;
    r.err = "pipe failed";
    return r;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    close(fds[1]);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    alarm(timeout_s);
    int rc = 98;
    try {
      rc = fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: exception: %s\n", e.what());
      rc = 99;
    } catch (...) {
      std::fprintf(stderr, "child: unknown exception\n");
      rc = 99;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(rc);
  }
  close(fds[1]);
  ChildResult r;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      r.err.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  while (waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

// Runs the current GoogleTest test again in a fresh process (this program
// re-executed with a filter naming the test), for tests that need the
// allocator in its initial state. In that process in_fresh_process() is
// true, and the test body calls finish_fresh_process(exit_code).
constexpr const char* kFreshEnv = "XTEST_FRESH_PROCESS";

inline bool in_fresh_process() { return std::getenv(kFreshEnv) != nullptr; }

// "Suite.Name" of the running GoogleTest test (defined in the test programs,
// which include gtest; declared here to keep this header gtest-free).
std::string current_test_name();

// Runs the current test again in a fresh process, whose allocator has not
// been set up yet, and checks how it ended: false here, true in that
// process, where the test goes on (its failed assertions are written to
// stderr there, which this process shows; defined in test_name.cpp).
bool rerun_in_fresh_process(unsigned timeout_s = 120);
// The same, with these environment variables set in the fresh process.
bool rerun_in_fresh_process_with(const std::vector<std::pair<std::string, std::string>>& env,
                                 unsigned timeout_s = 120);

[[noreturn]] inline void finish_fresh_process(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

inline ChildResult run_test_in_fresh_process(const std::string& test_name, unsigned timeout_s = 120,
                                             const std::vector<std::pair<std::string, std::string>>& env = {}) {
  return run_in_child(
      [&test_name, &env] {
        setenv(kFreshEnv, "1", 1);
        for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);  // the child's own test report is noise
        std::string filter = "--gtest_filter=" + test_name;
        execl("/proc/self/exe", "/proc/self/exe", filter.c_str(), "--gtest_also_run_disabled_tests",
              static_cast<char*>(nullptr));
        std::fprintf(stderr, "exec of /proc/self/exe failed: %s\n", std::strerror(errno));
        return 97;
      },
      timeout_s);
}

// In the parent: re-runs the current test in a fresh process with `env`
// and returns the child's result. In the child: runs `body` and exits with
// its result.
inline ChildResult fresh_with_env(const std::vector<std::pair<std::string, std::string>>& env,
                                  const std::function<int()>& body, unsigned timeout_s = 60) {
  if (in_fresh_process()) finish_fresh_process(body());
  return run_test_in_fresh_process(current_test_name(), timeout_s, env);
}

// Bytes of address space the process has mapped (VmSize).
// A "Vm...:" line of /proc/self/status, in bytes (0 if unreadable).
inline size_t vm_status_bytes(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') {
      kib = std::strtoull(line + len + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

inline size_t vm_size_bytes() { return vm_status_bytes("VmSize"); }

// Bytes of writable private mappings (VmData): what a data size limit
// counts, and a kernel that never overcommits charges.
inline size_t vm_data_bytes() { return vm_status_bytes("VmData"); }

// A small deterministic PRNG (xorshift64*), independent of the C library.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  // Mostly small sizes, some medium, a few large (> 64 KiB).
  size_t size_mix() {
    uint64_t r = next() % 1000;
    if (r < 700) return 1 + below(256);
    if (r < 950) return 1 + below(8192);
    if (r < 995) return 1 + below(64 * 1024);
    return 64 * 1024 + below(512 * 1024);
  }
};

}  // namespace xtest
