// Huge-page coverage from /proc/self/smaps (os.h: huge_page_coverage).
#include "platform/os.h"

namespace xalloc::os {
namespace {

// Reads /proc/self/smaps line by line through a fixed buffer (no
// allocation: the statistics may be asked for from anywhere).
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // The next line without its newline, or null at the end; a line longer
  // than the buffer comes in pieces (no field the caller reads is that long).
  const char* next() {
    for (;;) {
      for (size_t i = pos_; i < len_; ++i) {
        if (buf_[i] != '\n') continue;
        buf_[i] = '\0';
        const char* line = buf_ + pos_;
        pos_ = i + 1;
        return line;
      }
      size_t rest = len_ - pos_;
      if (rest == sizeof(buf_) - 1) {  // a piece of a long line
        buf_[len_] = '\0';
        pos_ = len_;
        return buf_;
      }
      for (size_t i = 0; i < rest; ++i) buf_[i] = buf_[pos_ + i];
      pos_ = 0;
      len_ = rest;
      long n = read(fd_, buf_ + len_, sizeof(buf_) - 1 - len_);
      if (n <= 0) {
        if (len_ == 0) return nullptr;
        buf_[len_] = '\0';
        pos_ = len_ = 0;
        return buf_;
      }
      len_ += static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
  char buf_[4096];
  size_t pos_ = 0;
  size_t len_ = 0;
};

bool starts_with(const char* s, const char* prefix) {
  while (*prefix != '\0') {
    if (*s++ != *prefix++) return false;
  }
  return true;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A mapping's header line ("start-end perms ..."): its start; false for
// a field line ("Rss:   12 kB").
bool mapping_start(const char* line, uintptr_t* start) {
  uintptr_t value = 0;
  const char* p = line;
  for (; hex_digit(*p) >= 0; ++p) value = value * 16 + static_cast<uintptr_t>(hex_digit(*p));
  if (p == line || *p != '-') return false;
  *start = value;
  return true;
}

// "Name:   1234 kB" -> bytes.
uint64_t field_bytes(const char* line) {
  const char* p = line;
  while (*p != '\0' && (*p < '0' || *p > '9')) ++p;
  uint64_t kb = 0;
  for (; *p >= '0' && *p <= '9'; ++p) kb = kb * 10 + static_cast<uint64_t>(*p - '0');
  return kb << 10;
}

}  // namespace

bool huge_page_coverage(bool (*owned)(uintptr_t start), HugePageCoverage* out) {
  *out = {};
  int fd = open_read("/proc/self/smaps");
  if (fd < 0) return false;
  LineReader lines(fd);
  bool counted = false;
  for (const char* line = lines.next(); line != nullptr; line = lines.next()) {
    uintptr_t start = 0;
    if (mapping_start(line, &start)) counted = owned(start);
    else if (counted && starts_with(line, "Rss:")) out->resident += field_bytes(line);
    else if (counted && starts_with(line, "AnonHugePages:")) out->on_huge_pages += field_bytes(line);
  }
  close(fd);
  return true;
}

}  // namespace xalloc::os
