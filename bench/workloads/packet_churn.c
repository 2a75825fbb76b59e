/*
 * packet_churn: network packet processing on one thread.
 *
 * Models (seed 004, AethAlloc's packet_churn) a packet loop: every packet
 * gets a 64-byte descriptor and a buffer, is filled and checksummed, and
 * stays in flight until a 64 KiB window of newer packets has arrived, then
 * both blocks are freed. Buffer sizes follow the classic IMIX mix of 64,
 * 576 and 1500-byte frames (7:4:1), rounded up to buffer sizes
 * 64 / 576 / 1536 (the seed's "64-byte packets / MTU 1536-byte buffers").
 * Seed parameters: 50,000 iterations after 10,000 warm-up; the suite uses
 * more iterations so the run is long enough to time.
 *
 * usage: packet_churn [iterations=50000] [warmup=10000] [seed=1]
 * prints: packets, time_s, packets_per_s, and the per-packet latency
 *         (allocation, fill, checksum and retiring the oldest packet)
 *         p50_ns p90_ns p99_ns p99_9_ns p99_99_ns max_ns mean_ns.
 */
#include "xbench.h"

#define WINDOW_BYTES (64u * 1024u)
#define RING_SLOTS 4096u /* > 64 KiB / 64 B, so the byte window always binds */

typedef struct packet {
  uint64_t seq;
  uint32_t len;
  uint32_t checksum;
  unsigned char *data;
  unsigned char pad[40]; /* a 64-byte descriptor, like an skb head */
} packet;

static uint32_t imix_len(xb_rng *rng) {
  uint64_t r = xb_below(rng, 12);
  if (r < 7) return 64;
  if (r < 11) return 576;
  return 1536;
}

static uint32_t checksum(const unsigned char *p, uint32_t n) {
  uint32_t sum = 0;
  for (uint32_t i = 0; i < n; i += 16) sum = sum * 31u + p[i];
  return sum;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[iterations=50000] [warmup=10000] [seed=1]");
  xb_init();
  uint64_t iterations = xb_arg_u64(argc, argv, 1, 50000);
  uint64_t warmup = xb_arg_u64(argc, argv, 2, 10000);
  xb_rng rng = xb_rng_make(xb_arg_u64(argc, argv, 3, 1));

  packet **ring = (packet **)calloc(RING_SLOTS, sizeof *ring);
  xb_hist *hist = (xb_hist *)calloc(1, sizeof *hist);
  if (ring == NULL || hist == NULL) xb_fail("out of memory");
  uint64_t head = 0, tail = 0, in_flight = 0;
  uint64_t sum = 0;
  uint64_t overhead = xb_tick_overhead();

  xb_tick_cal cal0 = xb_tick_mark();
  uint64_t t0 = 0;
  for (uint64_t i = 0; i < warmup + iterations; i++) {
    if (i == warmup) t0 = xb_now_ns();
    uint64_t start = xb_ticks();

    packet *pk = (packet *)xb_xmalloc(sizeof *pk);
    pk->seq = i;
    pk->len = imix_len(&rng);
    pk->data = (unsigned char *)xb_xmalloc(pk->len);
    memset(pk->data, (int)(i & 0xff), 64); /* header */
    pk->data[pk->len - 1] = (unsigned char)i;
    pk->checksum = checksum(pk->data, pk->len);
    ring[head++ % RING_SLOTS] = pk;
    in_flight += pk->len;

    while (in_flight > WINDOW_BYTES) {
      packet *old = ring[tail++ % RING_SLOTS];
      if (old->data[0] != (unsigned char)(old->seq & 0xff) ||
          old->data[old->len - 1] != (unsigned char)old->seq)
        xb_fail("packet %llu was corrupted", (unsigned long long)old->seq);
      sum += old->checksum;
      in_flight -= old->len;
      free(old->data);
      free(old);
    }

    uint64_t end = xb_ticks();
    if (i >= warmup) xb_hist_add(hist, end - start);
  }
  double secs = xb_seconds_since(t0);
  double ns_per_tick = xb_ns_per_tick(cal0, xb_tick_mark());

  while (tail != head) {
    packet *old = ring[tail++ % RING_SLOTS];
    free(old->data);
    free(old);
  }
  xb_escape(&sum);
  printf("packets=%llu\n", (unsigned long long)iterations);
  printf("time_s=%.6f\n", secs);
  printf("packets_per_s=%.0f\n", (double)iterations / secs);
  printf("timer_overhead_ns=%.1f\n", (double)overhead * ns_per_tick);
  xb_hist_print("", hist, ns_per_tick);
  free(hist);
  free(ring);
  return 0;
}
