/*
 * buffer_reuse: big buffers filled, freed and asked for again at once.
 *
 * A program that reads a file, decodes a frame or builds a response into a
 * buffer of tens of MiB, one item after another, frees each item's buffers
 * and asks for buffers of about the same sizes for the next item. An
 * allocator that gives such memory back to the OS at the free has every
 * page of it faulted in again in the next round. Each round allocates three
 * buffers of about 6, 20 and 40 MiB (a few pages more or less from round to
 * round), fills each one in full (as a decoder fills its output), checks a
 * byte of each and frees them.
 *
 * usage: buffer_reuse [rounds=40] [seed=1]
 * prints: rounds, time_s, ms_per_round.
 */
#include "xbench.h"

#include <string.h>

#define MIB ((size_t)1 << 20)
#define PAGE ((size_t)4096)
#define BUFFERS 3u

static const size_t kBaseBytes[BUFFERS] = {6 * MIB, 20 * MIB, 40 * MIB};

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[rounds=40] [seed=1]");
  xb_init();
  uint64_t rounds = xb_arg_u64(argc, argv, 1, 40);
  xb_rng rng = xb_rng_make(xb_arg_u64(argc, argv, 2, 1));

  uint64_t t0 = xb_now_ns();
  for (uint64_t r = 0; r < rounds; r++) {
    unsigned char *buffer[BUFFERS];
    size_t size[BUFFERS];
    for (unsigned b = 0; b < BUFFERS; b++) {
      size[b] = kBaseBytes[b] + (size_t)xb_range(&rng, 0, 64) * PAGE;
      buffer[b] = (unsigned char *)xb_xmalloc(size[b]);
      memset(buffer[b], (int)(r + b), size[b]);
    }
    for (unsigned b = 0; b < BUFFERS; b++) {
      if (buffer[b][size[b] / 2] != (unsigned char)(r + b)) xb_fail("buffer %u of round %llu was corrupted", b,
                                                                  (unsigned long long)r);
      free(buffer[b]);
    }
  }
  double secs = xb_seconds_since(t0);

  printf("rounds=%llu\n", (unsigned long long)rounds);
  printf("time_s=%.6f\n", secs);
  printf("ms_per_round=%.3f\n", secs * 1e3 / (double)rounds);
  return 0;
}
