// Messages to stderr and fatal error reports, formatted without allocating.
//
// The heap may be corrupt when something is reported, so nothing here calls
// malloc or stdio: messages are formatted into a stack buffer and written
// with one system call. Format directives: %s (string), %u (unsigned
// decimal), %d (signed decimal), %x (hex), %p (pointer), with an optional
// field width ("%8u", "%-12s").
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace xalloc {

// The public entry point a report names ("in free()").
enum class Caller : uint8_t {
  kFree, kRealloc, kFreeSized, kFreeAlignedSized, kUsableSize, kDelete, kDeleteSized, kDeleteAligned,
};

const char* caller_name(Caller caller);

namespace report {

struct Arg {
  enum class Kind : uint8_t { kString, kUnsigned, kSigned, kPointer } kind;
  union {
    const char* s;
    uint64_t u;
    int64_t i;
    const void* p;
  };
  Arg(const char* v) : kind(Kind::kString), s(v) {}  // NOLINT(google-explicit-constructor)
  Arg(const void* v) : kind(Kind::kPointer), p(v) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_integral_v<T> && std::is_unsigned_v<T>, int> = 0>
  Arg(T v) : kind(Kind::kUnsigned), u(v) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_integral_v<T> && std::is_signed_v<T>, int> = 0>
  Arg(T v) : kind(Kind::kSigned), i(v) {}  // NOLINT
};

// Formats into buf (always NUL-terminated); returns the length.
size_t format(char* buf, size_t size, const char* fmt, const Arg* args, size_t nargs);

// To this thread's redirection (below) if it has one, else to stderr.
void emit(const char* prefix, const char* fmt, const Arg* args, size_t nargs);
// Always to descriptor 2: warnings and misuse reports.
void emit_stderr(const char* prefix, const char* fmt, const Arg* args, size_t nargs);
[[noreturn]] void emit_fatal(const char* fmt, const Arg* args, size_t nargs);

// Output printed at exit (statistics, the leak report, the profiler's
// lines) must reach the user even if the program closed its stderr first,
// as every coreutils program does: keep_stderr() takes a duplicate of
// descriptor 2 at start-up (numbered high, closed on exec), and
// lasting_stderr() is that duplicate while it still refers to the file
// descriptor 2 referred to then (a program may close every descriptor it
// does not know, and open another file under the same number), else 2.
void keep_stderr();
int lasting_stderr();

// While one lives, the lines this thread prints with message() and
// detail() go to `fd` (warnings and misuse reports stay on stderr).
class Redirect {
 public:
  explicit Redirect(int fd);
  ~Redirect();
  Redirect(const Redirect&) = delete;
  Redirect& operator=(const Redirect&) = delete;

 private:
  int previous_;
};

template <typename... Args>
void message(const char* fmt, Args... args) {
  const Arg list[] = {Arg(args)..., Arg("")};
  emit("xalloc: ", fmt, list, sizeof...(Args));
}

// A continuation line (no "xalloc:" prefix), e.g. a frame of a stack trace.
template <typename... Args>
void detail(const char* fmt, Args... args) {
  const Arg list[] = {Arg(args)..., Arg("")};
  emit("", fmt, list, sizeof...(Args));
}

template <typename... Args>
void warning(const char* fmt, Args... args) {
  const Arg list[] = {Arg(args)..., Arg("")};
  emit_stderr("xalloc: warning: ", fmt, list, sizeof...(Args));
}

// One line naming the problem, then the stack, then abort().
template <typename... Args>
[[noreturn]] void fatal(const char* fmt, Args... args) {
  const Arg list[] = {Arg(args)..., Arg("")};
  emit_fatal(fmt, list, sizeof...(Args));
}

}  // namespace report

// Heap misuse detected at `ptr`; `block_size` is its size class (0 if none).
[[noreturn]] void report_misuse(const char* problem, const void* ptr, size_t block_size, Caller caller);
// The same for a block that is a span of its own: `what` names it ("large
// block", "huge block"), `bytes` its size (0 if unknown).
[[noreturn]] void report_span_misuse(const char* problem, const void* ptr, const char* what, size_t bytes,
                                     Caller caller);

}  // namespace xalloc
