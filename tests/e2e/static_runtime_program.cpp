// A C++ program linked with libxalloc.a and a static C++ runtime
// (-static-libstdc++), built by e2e.sh. It uses nothing of the standard
// library beyond operator new, so the archive member of libstdc++.a that
// holds std::__throw_bad_alloc is not linked in: a failing operator new
// must still throw std::bad_alloc, and the nothrow form return null.
#include <cstddef>
#include <cstdio>
#include <new>

static std::size_t opaque(std::size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}

int main() {
  const std::size_t impossible = opaque(std::size_t{1} << 62);
  int caught = 0;
  try {
    char* p = new char[impossible];
    std::printf("new char[2^62] returned %p\n", static_cast<void*>(p));
  } catch (const std::bad_alloc&) {
    ++caught;
  }
  try {
    void* p = ::operator new(impossible, std::align_val_t{64});
    std::printf("aligned operator new(2^62) returned %p\n", p);
  } catch (const std::bad_alloc& e) {
    caught += e.what() != nullptr;
  }
  void* q = ::operator new(impossible, std::nothrow);
  bool ok = caught == 2 && q == nullptr;
  std::printf("static runtime program: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
