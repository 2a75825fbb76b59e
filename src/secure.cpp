#include "secure.h"

#include "emergency_heap.h"
#include "page.h"
#include "platform/os.h"
#include "report.h"
#include "slab.h"
#include "stack_trace.h"

namespace xalloc {

namespace secure {

Secrets g_secrets = {0x2545F4914F6CDD1Dull, 0x9E3779B97F4A7C15ull, 0xD1B54A32D192ED03ull};
static_assert(sizeof(Secrets) == 64);

namespace {
__thread uint64_t t_random_state = 0;
}

void init_secret() {
  uint64_t random[3];
  os::random_fill(random, 3);
  g_secrets.canary = random[0] | 1;
  g_secrets.link = random[1];
  g_secrets.marker = random[2] | 1;  // never 0: a block's marker is not its address
}

uint64_t next_random() {
  uint64_t x = t_random_state;
  if (x == 0) x = mix(g_secrets.canary ^ os::thread_id()) | 1;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  t_random_state = x;
  return x;
}

}  // namespace secure

void report_corrupt_free_list(const Page* page, const void* block) {
  emergency::enter();
  report::message("heap corruption: the free list of the slab at %p (%u-byte class) is damaged after block %p",
                  reinterpret_cast<const void*>(page->start), page->block_size(), block);
  stack_trace_print();
  os::abort_process();
}

// Found when a block another thread freed reaches its owner: the overflow
// happened before, in code the stack printed here (the owner's) need not
// show.
void report_overwritten_canary(const Page* page, const void* block) {
  emergency::enter();
  report::message(
      "heap overflow (canary at the end of the block overwritten) of %p (%u-byte class), found after the block "
      "was freed, before its reuse",
      block, page->block_size());
  stack_trace_print();
  os::abort_process();
}

}  // namespace xalloc
