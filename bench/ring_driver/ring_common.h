/* What the two native ring drivers (ring_driver.c, moe_driver.c) share: the monotonic clock and the request tag. */
#ifndef HBF_RING_COMMON_H
#define HBF_RING_COMMON_H
#include <stdint.h>
#include <time.h>

#include "hbf_ctl.h"

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* hb_req_tag (runtime_cuda/src/hbf_helpers.cu), word for word; q (the thermal word) 0: unthrottled */
static inline uint32_t req_tag(uint64_t key, const hbf_request *r, uint64_t seq) {
    const uint64_t K = 0x9E3779B97F4A7C15ull;
    const uint64_t w[7] = {r->arrival_ns, r->address, r->media_address,
                           (uint64_t)r->bytes | ((uint64_t)r->op << 32),
                           (uint64_t)r->range_id | ((uint64_t)r->kernel_slot << 32),
                           (uint64_t)r->site | ((uint64_t)r->flags << 32), 0ull};
    uint64_t h = (seq ^ key) * K;
    for (int i = 0; i < 7; ++i) h = (h ^ w[i]) * K;
    h ^= h >> 29;
    return (uint32_t)(h >> 32) | 1u;
}
#endif
