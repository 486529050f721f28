// The device L2 model (runtime_cuda/src/hbf_l2.cuh: hb_l2_locate + hb_l2_access, compiled for the host) run on a
// binary stream of line accesses at full scale (bench/l2_partition.py). argv: sets ways policy dt_ns partitions
// (1: one tag store of `sets` sets, the device model as it is; P > 1: P tag stores of `sets` sets each, one per L2
// partition (docs/design.md §3.12): an access goes to its SM's partition; a miss there that is another partition's
// line ("home": a hash of the line) looks that partition up (a fabric hit: not charged) before DRAM, and the line
// is filled in the home and the near partition). stdin: uint64 records, bits 0..55 the line, bits 56..61 the SM
// partition, bit 62 a write (allocates a full line; not a read), in order; record i happens at i * dt_ns.
// stdout: "reads R read_misses M near_hits N far_hits F" (lines).
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <vector>
#define HB_L2_HOST 1
#include "hbf_l2.cuh"

static inline uint32_t home_of(uint64_t line, uint32_t parts) {
    uint64_t x = line * 0x9E3779B97F4A7C15ull;
    return (uint32_t)((x >> 40) % parts);
}

int main(int argc, char** argv) {
    if (argc != 6) { fprintf(stderr, "usage: sets ways policy dt_ns partitions\n"); return 2; }
    const uint32_t sets = (uint32_t)atoi(argv[1]), ways = (uint32_t)atoi(argv[2]), policy = (uint32_t)atoi(argv[3]);
    const uint64_t dt = (uint64_t)atoll(argv[4]);
    const uint32_t parts = (uint32_t)atoi(argv[5]);
    const uint64_t magic = hb_l2_magic(sets);
    std::vector<std::vector<uint64_t>> st(parts, std::vector<uint64_t>((size_t)sets * ways, 0));
    const uint32_t full = 3u;   // a whole 128 B line of 64 B granules (every access of these streams is whole lines)
    uint64_t buf[1 << 16], i = 0, reads = 0, misses = 0, near = 0, far = 0;
    size_t n;
    while ((n = fread(buf, 8, 1 << 16, stdin)) > 0) {
        for (size_t k = 0; k < n; ++k, ++i) {
            const uint64_t r = buf[k], line = r & ((1ull << 56) - 1);
            const uint32_t side = parts > 1 ? (uint32_t)((r >> 56) & 0x3F) % parts : 0u;
            const bool wr = (r >> 62) & 1u;
            const uint32_t now_u = (uint32_t)((i * dt) >> HBF_L2_STAMP_SHIFT) & HBF_L2_STAMP_MASK;
            uint32_t tag1, ev = 0;
            const uint32_t set = hb_l2_locate(line, sets, magic, &tag1);
            uint32_t m = hb_l2_access(st[side].data() + (size_t)set * ways, ways, tag1, full, now_u, policy, &ev);
            if (wr) {
                if (parts > 1) { uint32_t h = home_of(line, parts); if (h != side)
                    (void)hb_l2_access(st[h].data() + (size_t)set * ways, ways, tag1, full, now_u, policy, &ev); }
                continue;
            }
            ++reads;
            if (!m) { ++near; continue; }
            if (parts > 1) {
                const uint32_t h = home_of(line, parts);
                if (h != side) {
                    m = hb_l2_access(st[h].data() + (size_t)set * ways, ways, tag1, full, now_u, policy, &ev);
                    if (!m) { ++far; continue; }
                }
            }
            ++misses;
        }
    }
    printf("reads %llu read_misses %llu near_hits %llu far_hits %llu\n", (unsigned long long)reads,
           (unsigned long long)misses, (unsigned long long)near, (unsigned long long)far);
    return 0;
}
