#include "support/report.h"

#include <cstring>

#include "support/emergency_heap.h"
#include "platform/os.h"
#include "support/hooks.h"

namespace xalloc {

Hooks g_hooks;

const char* caller_name(Caller caller) {
  switch (caller) {
    case Caller::kFree: return "free()";
    case Caller::kRealloc: return "realloc()";
    case Caller::kFreeSized: return "free_sized()";
    case Caller::kFreeAlignedSized: return "free_aligned_sized()";
    case Caller::kUsableSize: return "malloc_usable_size()";
    case Caller::kDelete: return "operator delete()";
    case Caller::kDeleteSized: return "operator delete(sized)";
    case Caller::kDeleteAligned: return "operator delete(aligned)";
  }
  return "?";
}

namespace report {
namespace {

class Writer {
 public:
  Writer(char* buf, size_t size) : buf_(buf), size_(size) {}
  void put(char c) {
    if (len_ + 1 < size_) buf_[len_++] = c;
  }
  void put(const char* s) {
    while (*s) put(*s++);
  }
  void put_unsigned(uint64_t v, unsigned base) {
    char digits[24];
    size_t n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v % base];
      v /= base;
    } while (v != 0);
    while (n > 0) put(digits[--n]);
  }
  size_t finish() {
    buf_[len_ < size_ ? len_ : size_ - 1] = '\0';
    return len_;
  }

 private:
  char* buf_;
  size_t size_;
  size_t len_ = 0;
};

}  // namespace

size_t format(char* buf, size_t size, const char* fmt, const Arg* args, size_t nargs) {
  Writer w(buf, size);
  size_t next = 0;
  for (const char* f = fmt; *f; ++f) {
    if (*f != '%' || f[1] == '\0') {
      w.put(*f);
      continue;
    }
    // An optional width: right-aligned, padded with spaces ("%8u"); a '-'
    // aligns left ("%-10s").
    bool left = false;
    if (f[1] == '-') {
      left = true;
      ++f;
    }
    unsigned width = 0;
    while (f[1] >= '0' && f[1] <= '9') width = width * 10 + static_cast<unsigned>(*++f - '0');
    char directive = *++f;
    if (directive == '\0') break;
    if (directive == '%') {
      w.put('%');
      continue;
    }
    if (next >= nargs) {
      w.put("<?>");
      continue;
    }
    const Arg& a = args[next++];
    if (width != 0) {
      char field[64];
      size_t n = format(field, sizeof(field), directive == 's' ? "%s" : (directive == 'x' ? "%x" : "%u"), &a, 1);
      if (a.kind == Arg::Kind::kPointer) n = format(field, sizeof(field), "%p", &a, 1);
      if (a.kind == Arg::Kind::kSigned) n = format(field, sizeof(field), "%d", &a, 1);
      if (!left)
        for (size_t pad = n; pad < width; ++pad) w.put(' ');
      w.put(field);
      if (left)
        for (size_t pad = n; pad < width; ++pad) w.put(' ');
      continue;
    }
    switch (a.kind) {
      case Arg::Kind::kString: w.put(a.s != nullptr ? a.s : "(null)"); break;
      case Arg::Kind::kPointer:
        w.put("0x");
        w.put_unsigned(reinterpret_cast<uintptr_t>(a.p), 16);
        break;
      case Arg::Kind::kSigned:
        if (a.i < 0) {
          w.put('-');
          w.put_unsigned(static_cast<uint64_t>(-(a.i + 1)) + 1, 10);
        } else {
          w.put_unsigned(static_cast<uint64_t>(a.i), 10);
        }
        break;
      case Arg::Kind::kUnsigned:
        if (directive == 'x' || directive == 'p') w.put("0x");
        w.put_unsigned(a.u, (directive == 'x' || directive == 'p') ? 16 : 10);
        break;
    }
  }
  return w.finish();
}

namespace {

// A line of output: prefix, formatted message, newline.
size_t format_line(char* line, size_t size, const char* prefix, const char* fmt, const Arg* args, size_t nargs) {
  size_t plen = strlen(prefix);
  memcpy(line, prefix, plen);
  size_t len = plen + format(line + plen, size - plen - 1, fmt, args, nargs);
  line[len++] = '\n';
  return len;
}

// Where this thread's message() lines go (Redirect); -1: stderr.
__thread int t_redirect = -1;

// The duplicate of stderr, and the file it refers to.
int g_kept_fd = -1;
os::FileIdentity g_kept_file;

// Above the descriptors a program commonly uses, so that one opened
// later does not take the next number after it.
constexpr int kKeptFdLowest = 512;

}  // namespace

void emit(const char* prefix, const char* fmt, const Arg* args, size_t nargs) {
  char line[512];
  size_t len = format_line(line, sizeof(line), prefix, fmt, args, nargs);
  if (t_redirect >= 0) {
    os::write_all(t_redirect, line, len);
  } else {
    os::write_stderr(line, len);
  }
}

void emit_stderr(const char* prefix, const char* fmt, const Arg* args, size_t nargs) {
  char line[512];
  size_t len = format_line(line, sizeof(line), prefix, fmt, args, nargs);
  os::write_stderr(line, len);
}

void emit_fatal(const char* fmt, const Arg* args, size_t nargs) {
  // Whatever the trace needs to allocate comes from the emergency buffer.
  emergency::enter();
  t_redirect = -1;  // the report and its stack go to stderr
  emit("xalloc: ", fmt, args, nargs);
  if (g_hooks.print_stack != nullptr) g_hooks.print_stack();
  os::abort_process();
}

void keep_stderr() {
  if (g_kept_fd >= 0 || !os::file_identity(2, &g_kept_file)) return;
  int fd = os::duplicate_fd(2, kKeptFdLowest);
  if (fd < 0) fd = os::duplicate_fd(2, 3);  // the limit on descriptors is lower
  g_kept_fd = fd;
}

int lasting_stderr() {
  os::FileIdentity now;
  if (g_kept_fd >= 0 && os::file_identity(g_kept_fd, &now) && now == g_kept_file) return g_kept_fd;
  return 2;
}

Redirect::Redirect(int fd) : previous_(t_redirect) { t_redirect = fd; }
Redirect::~Redirect() { t_redirect = previous_; }

}  // namespace report

namespace {

// One line - the problem, the address, what the block is (`what`: null for
// nothing known; `bytes`: its size, 0 if unknown) and the entry point -
// then the stack, then abort.
[[noreturn]] void report_and_abort(const char* problem, const void* ptr, const char* what, size_t bytes,
                                   Caller caller) {
  if (what == nullptr) report::fatal("%s of %p in %s", problem, ptr, caller_name(caller));
  if (bytes == 0) report::fatal("%s of %p (%s) in %s", problem, ptr, what, caller_name(caller));
  report::fatal("%s of %p (%u-byte %s) in %s", problem, ptr, bytes, what, caller_name(caller));
}

}  // namespace

void report_misuse(const char* problem, const void* ptr, size_t block_size, Caller caller) {
  report_and_abort(problem, ptr, block_size != 0 ? "class" : nullptr, block_size, caller);
}

void report_span_misuse(const char* problem, const void* ptr, const char* what, size_t bytes, Caller caller) {
  report_and_abort(problem, ptr, what, bytes, caller);
}

}  // namespace xalloc
