// A shared library loaded and unloaded with dlopen/dlclose by the tests: it
// allocates in its constructors, hands out blocks that outlive it, and
// frees its own state in its destructors.
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

struct LibState {
  std::vector<std::string> names;
  std::map<int, std::vector<char>> buffers;
  void* raw = nullptr;
  LibState() {
    for (int i = 0; i < 100; ++i) names.push_back("library string number " + std::to_string(i));
    for (int i = 0; i < 20; ++i) buffers[i] = std::vector<char>(static_cast<size_t>(i) * 1000 + 1, 'b');
    raw = std::malloc(70000);  // a large block
    std::memset(raw, 7, 70000);
  }
  ~LibState() { std::free(raw); }
};

LibState* g_heap_state = nullptr;
LibState g_static_state;  // constructed when the library is loaded

__attribute__((constructor)) void lib_ctor() { g_heap_state = new LibState; }
__attribute__((destructor)) void lib_dtor() {
  delete g_heap_state;
  g_heap_state = nullptr;
}

}  // namespace

extern "C" {

// A block the caller owns and frees after dlclose.
__attribute__((visibility("default"))) char* dl_make_string(int n) {
  std::string s = g_static_state.names[static_cast<size_t>(n) % 100] + "/" + g_heap_state->names[1];
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// An object allocated with new inside the library, deleted by the caller.
__attribute__((visibility("default"))) std::vector<int>* dl_make_vector(int n) {
  return new std::vector<int>(static_cast<size_t>(n), n);
}

// A block of the library's own state, for ownership checks.
__attribute__((visibility("default"))) const void* dl_state_block() { return g_heap_state->raw; }

// Frees a block the caller allocated.
__attribute__((visibility("default"))) void dl_free(void* p) { std::free(p); }
}
