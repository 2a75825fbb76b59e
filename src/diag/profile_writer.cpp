#include "diag/profile_writer.h"

#include <cstring>

#include "diag/symbolize.h"
#include "platform/os.h"
#include "support/options.h"
#include "support/report.h"

namespace xalloc::prof {

namespace {

// Buffered writes to a new file, formatted without allocating. The buffer
// is on the stack of the thread writing (the profiler's writer thread
// has room for it: heap_profiler.cpp).
class FileWriter {
 public:
  explicit FileWriter(const char* path) : fd_(os::open_write_new(path)) {}
  ~FileWriter() {
    if (fd_ >= 0) os::close(fd_);
  }
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  bool ok() const { return fd_ >= 0 && !failed_; }
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
  // Writes what is buffered; true if every write so far succeeded.
  bool finish() {
    flush();
    return ok();
  }

 private:
  void flush() {
    raw_write(buf_, len_);
    len_ = 0;
  }
  void raw_write(const char* data, size_t n) {
    if (fd_ >= 0 && !failed_ && !os::write_all(fd_, data, n)) failed_ = true;
  }
  int fd_;
  bool failed_ = false;
  char buf_[16384];
  size_t len_ = 0;
};

// Leading frames that are xalloc's own (malloc, the slow path, the sampler).
int first_user_frame(const Stack& s) {
  int first = 0;
  while (first < static_cast<int>(s.depth) - 1 && is_xalloc_code(s.frames[first])) ++first;
  return first;
}

double live_estimate(const StackCounts& c) { return estimate_bytes(c.live_count, c.live_bytes, g_options.prof_rate); }

void write_pprof(FileWriter& out, const ProfileView& view) {
  StackCounts total{};
  for (size_t i = 0; i < view.count; ++i) {
    total.live_count += view.counts[i].live_count;
    total.live_bytes += view.counts[i].live_bytes;
    total.alloc_count += view.counts[i].alloc_count;
    total.alloc_bytes += view.counts[i].alloc_bytes;
  }
  out.print("heap profile: %u: %u [%u: %u] @ heap_v2/%u\n", total.live_count, total.live_bytes, total.alloc_count,
            total.alloc_bytes, g_options.prof_rate);
  for (size_t i = 0; i < view.count; ++i) {
    const Stack& s = view.stacks[i];
    const StackCounts& c = view.counts[i];
    out.print("%u: %u [%u: %u] @", c.live_count, c.live_bytes, c.alloc_count, c.alloc_bytes);
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

void write_collapsed(FileWriter& out, const ProfileView& view) {
  char name[512];
  for (size_t i = 0; i < view.count; ++i) {
    const Stack& s = view.stacks[i];
    if (view.counts[i].live_count == 0) continue;
    int first = first_user_frame(s);
    // Flame graphs list the outermost frame first.
    for (int f = static_cast<int>(s.depth) - 1; f >= first; --f) {
      symbolize(s.frames[f], name, sizeof(name));
      out.put(name, strlen(name));
      if (f != first) out.put(";", 1);
    }
    out.print(" %u\n", static_cast<uint64_t>(live_estimate(view.counts[i])));
  }
}

// <stem><suffix>, written whole under a temporary name and then renamed.
bool write_file(const char* stem, const char* suffix, void (*body)(FileWriter&, const ProfileView&),
                const ProfileView& view) {
  char path[512];
  char temporary[520];
  const report::Arg args[] = {stem, suffix};
  report::format(path, sizeof(path), "%s%s", args, 2);
  const report::Arg temp_args[] = {path};
  report::format(temporary, sizeof(temporary), "%s.tmp", temp_args, 1);
  bool written;
  {
    FileWriter out(temporary);
    if (!out.ok()) return false;
    body(out, view);
    written = out.finish();
  }
  if (written && os::rename_file(temporary, path)) return true;
  os::remove_file(temporary);
  return false;
}

}  // namespace

bool write_profile(const char* stem, const ProfileView& view) {
  bool collapsed = write_file(stem, ".collapsed", write_collapsed, view);
  return write_file(stem, ".heap", write_pprof, view) && collapsed;
}

void print_leaks(const ProfileView& view) {
  constexpr int kTop = 10;
  size_t order[kTop];
  double estimate[kTop];
  int shown = 0;
  // Top sites by estimated live bytes (selection: few sites are shown).
  for (size_t i = 0; i < view.count; ++i) {
    if (view.counts[i].live_count == 0) continue;
    double bytes = live_estimate(view.counts[i]);
    int pos;
    if (shown < kTop) {
      pos = shown++;
    } else {
      if (estimate[kTop - 1] >= bytes) continue;
      pos = kTop - 1;
    }
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
    const Stack& s = view.stacks[order[k]];
    report::message("leaks: %u bytes (%u sampled blocks) allocated at:", static_cast<uint64_t>(estimate[k]),
                    view.counts[order[k]].live_count);
    int first = first_user_frame(s);
    for (int f = first; f < static_cast<int>(s.depth) && f < first + 8; ++f)
      report::detail("    #%u %s", static_cast<unsigned>(f - first), symbolize(s.frames[f], name, sizeof(name)));
  }
}

}  // namespace xalloc::prof
