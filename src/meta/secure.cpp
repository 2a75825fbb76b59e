#include "meta/secure.h"

#include "platform/os.h"

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

}  // namespace xalloc
