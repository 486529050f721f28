// Two groups of one warp inside one helper at once (issue 13, the 48-layer sg2 Qwen3 stall of stop 45).
//
// The stall's picture (cuda-gdb, bench/results/stop45_h100/gdb_sg2/): lanes 25-31 of a warp wait in the divergent
// form of `__shfl_sync(mask, dd, leader)` (mask 0xff000000, leader 24) inside __hb_issue's compact path, entered from
// one call site as a group of their own (the mask is the VOTE at the helper's entry), while lane 24 is past that
// shuffle with lanes 0-23 (another group of the same warp, in the same helper) at the kernel's next barrier.
//
// This program makes that situation on purpose, many times: each warp splits into two groups (lanes below a random
// split and the rest) that call one helper at once, through two functions of their own (so that no compiler can
// merge the two calls into one after the branch). In the helper each group takes its mask (__activemask()), its
// leader (lowest lane) runs a transaction alone (a global atomic, then a spin of a random length with sleeps: the
// page transaction's CAS retries) while the others wait, and the group then takes the leader's value with
// hb_from_leader (runtime_cuda/src/hbf_ptx.cuh, as the helpers do) and counts itself with __reduce_add_sync.
// Every lane checks both against what its own mask says (the leader's value encodes the leader and the mask); before
// the transaction, a per-lane loop (the lanes wait for each other after it) and a shuffle and a count (bad_pre).
//
//   warp_groups <mode> <blocks> <warps per block> <iterations> <seed> <timeout s>
//     mode 0: the leader's transaction in a branch of its own (the helpers' default shape)
//     mode 1: lockstep: every lane of the group runs the spin on the leader's broadcast clock (no lane waits)
//     mode 2: cost: the whole warp in one group, no spin, <iterations> calls timed with clock64 (cycles per call)
//     mode 3: staggered: as mode 0, but the second group waits a random 0-2.1 us (on the clock) before its call, so
//             the groups enter the helper apart and meet inside it (stop 47: in mode 0 the card reconverged the two
//             groups at the helper's entry in every call -- merged_calls = every call -- so they never ran it apart)
// Built once per variant (bench/warp_groups.py VARIANTS: -DHBF_GROUP_SYNC=0 with the leader's builds for the old
// helpers, -DHBF_GROUP_SYNC=1 -- the default since wt/grp13 -- for every collective checked per lane plus the guard).
// The guard (hb_group_seen) is counted here instead of ending the warp: `torn` lanes saw it fire, `silent` lanes got a
// wrong value or count without it firing (what must stay 0). Prints one JSON line; exit 0 if the kernel ended (errors are in the line), 3 on a hang
// (no end within the timeout: the process exits, the context with it).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <unistd.h>
#include <time.h>

#include "../../runtime_cuda/src/hbf_ptx.cuh"

struct Out {
    unsigned long long calls, bad_value, bad_count, cycles, merged;   // merged: calls whose VOTE was not the group
    unsigned long long bad_pre;                                         // the checks before the leader's transaction
    // wt/grp13: what tells the mechanism apart, and what the group guard (HBF_GROUP_GUARD) catches
    unsigned long long split;          // calls whose VOTE saw part of the caller's group only (m a strict subset of gm)
    unsigned long long count_over;     // lanes whose count exceeded popc(m): the reduction ran over another group too
    unsigned long long value_other;    // lanes that got their own leader's lane but another call's value (its mask)
    unsigned long long torn;           // lanes whose guard (hb_group_seen(m) != m) fired: the helpers end the warp
    unsigned long long silent;         // lanes with any wrong value or count whose guard did not fire
};

__device__ __forceinline__ uint32_t mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

template <int MODE>
__device__ __noinline__ void body(uint64_t spin_ns, unsigned long long* ctr, Out* o, uint32_t gm) {
    const uint32_t m = hb_group_mask();                         // __activemask(), as the helpers take it
    const uint32_t lane = hb_laneid();
    const uint32_t leader = (uint32_t)(__ffs(m) - 1);
    const uint64_t want = ((uint64_t)leader << 32) | m;
    // a per-lane loop first (the range search's shape: lanes leave it at different times, then wait for each other),
    // then a shuffle and a count with the group's mask, as the compact path's before the leader's transaction
    for (uint32_t i = 0; i < ((lane * 2654435761u) >> 30); ++i) __nanosleep(32);
    const uint32_t pre_leader = __shfl_sync(m, lane, (int)leader);
    const uint32_t pre_n = __reduce_add_sync(m, 1u);
    if (pre_leader != leader || pre_n != (uint32_t)__popc(m)) atomicAdd(&o->bad_pre, 1ull);
    uint64_t dd = 0;
    if (MODE == 0 || MODE == 3) {
        if (lane == leader) {                                   // the leader's transaction, alone
            atomicAdd(ctr, 1ull);
            const uint64_t t0 = hb_now();
            while (hb_now() - t0 < spin_ns) __nanosleep(64);
            dd = want;
        }
    } else {                                                    // lockstep: the leader's clock, every lane
        if (lane == leader) atomicAdd(ctr, 1ull);
        // the leader's spin too (wt/grp13): a group the hardware merged from both sides holds spin_a and spin_b,
        // and with its own spin each lane would leave the loop -- and its shuffle -- after a different number of
        // turns: lanes of one group at different collectives, which the PTX ISA leaves undefined (stop 47's
        // lockstep numbers, every build, came from that, not from the helpers' shape)
        const uint64_t spin = __shfl_sync(m, spin_ns, (int)leader);
        const uint64_t t0 = __shfl_sync(m, hb_now(), (int)leader);
        while (__shfl_sync(m, hb_now(), (int)leader) - t0 < spin) __nanosleep(64);
        dd = lane == leader ? want : 0ull;
    }
    const uint64_t v = hb_from_leader(m, dd, leader);
    const uint32_t n = __reduce_add_sync(m, 1u);
    const bool torn = hb_group_seen(m) != m;                    // the helpers' guard, after the last collective
    const bool bad_v = v != want, bad_n = n != (uint32_t)__popc(m);
    const bool bad_p = pre_leader != leader || pre_n != (uint32_t)__popc(m);
    if (bad_v) atomicAdd(&o->bad_value, 1ull);
    if (bad_n) atomicAdd(&o->bad_count, 1ull);
    if (n > (uint32_t)__popc(m)) atomicAdd(&o->count_over, 1ull);
    if (bad_v && (uint32_t)(v >> 32) == leader) atomicAdd(&o->value_other, 1ull);
    if (torn) atomicAdd(&o->torn, 1ull);
    if ((bad_v || bad_n || bad_p) && !torn) atomicAdd(&o->silent, 1ull);
    if (lane == leader) {
        atomicAdd(&o->calls, 1ull);
        if (m != gm) atomicAdd(&o->merged, 1ull);               // the VOTE saw other than the caller's group
        if ((m & gm) == m && m != gm) atomicAdd(&o->split, 1ull);
    }
}
template <int MODE>
__device__ __noinline__ void side_a(uint64_t spin, unsigned long long* ctr, Out* o, uint32_t gm) {
    asm volatile("// side a");
    body<MODE>(spin, ctr, o, gm);
}
template <int MODE>
__device__ __noinline__ void side_b(uint64_t spin, unsigned long long* ctr, Out* o, uint32_t gm) {
    asm volatile("// side b");
    if (MODE == 3) {                                            // arrive apart: a wait on the clock (spin_b's length)
        const uint64_t t0 = hb_now();
        while (hb_now() - t0 < spin) __nanosleep(64);
    }
    body<MODE>(spin, ctr, o, gm);
}

template <int MODE>
__global__ void groups(int iters, uint32_t seed, unsigned long long* ctr, Out* o) {
    const uint32_t lane = hb_laneid();
    const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    for (int it = 0; it < iters; ++it) {
        const uint32_t h = mix(seed ^ mix(warp * 7919u + (uint32_t)it));
        const uint32_t split = 1u + h % 31u;                    // lanes [0, split) and [split, 32)
        const uint64_t spin_a = (uint64_t)((h >> 8) & 7u) * 300u;
        const uint64_t spin_b = (uint64_t)((h >> 11) & 7u) * 300u;
        const uint32_t low = (1u << split) - 1u;                // split <= 31
        if (lane < split) side_a<MODE>(spin_a, ctr + (warp & 63u), o, low);
        else side_b<MODE>(spin_b, ctr + ((warp + 1u) & 63u), o, ~low);
    }
}

__global__ void cost(int iters, unsigned long long* ctr, Out* o) {
    long long t0 = clock64();
    for (int it = 0; it < iters; ++it) body<0>(0, ctr + ((threadIdx.x >> 5) & 63u), o, 0xffffffffu);
    long long t1 = clock64();
    if (hb_laneid() == 0) atomicAdd(&o->cycles, (unsigned long long)(t1 - t0));
}

static double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: warp_groups <mode 0|1|2> <blocks> <warps per block> <iterations> <seed> <timeout>\n");
        return 2;
    }
    const int mode = atoi(argv[1]), blocks = atoi(argv[2]), warps = atoi(argv[3]), iters = atoi(argv[4]);
    const uint32_t seed = (uint32_t)strtoul(argv[5], nullptr, 0);
    const double timeout = atof(argv[6]);
    if (mode < 0 || mode > 3 || blocks < 1 || warps < 1 || warps > 32 || iters < 1 || timeout <= 0) {
        fprintf(stderr, "warp_groups: bad arguments\n");
        return 2;
    }
    unsigned long long* ctr;
    Out* o;
    if (cudaMalloc(&ctr, 64 * sizeof(unsigned long long)) != cudaSuccess ||
        cudaMalloc(&o, sizeof(Out)) != cudaSuccess) {
        fprintf(stderr, "warp_groups: cudaMalloc failed\n");
        return 2;
    }
    cudaMemset(ctr, 0, 64 * sizeof(unsigned long long));
    cudaMemset(o, 0, sizeof(Out));
    cudaDeviceSynchronize();
    const double t0 = now_s();
    if (mode == 0) groups<0><<<blocks, warps * 32>>>(iters, seed, ctr, o);
    else if (mode == 1) groups<1><<<blocks, warps * 32>>>(iters, seed, ctr, o);
    else if (mode == 3) groups<3><<<blocks, warps * 32>>>(iters, seed, ctr, o);
    else cost<<<blocks, warps * 32>>>(iters, ctr, o);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        printf("{\"status\": \"launch_error\", \"error\": \"%s\"}\n", cudaGetErrorString(e));
        return 1;
    }
    while ((e = cudaStreamQuery(0)) == cudaErrorNotReady) {
        if (now_s() - t0 > timeout) {
            printf("{\"status\": \"hang\", \"seconds\": %.3f}\n", now_s() - t0);
            fflush(stdout);
            _exit(3);
        }
        usleep(2000);
    }
    const double wall = now_s() - t0;
    if (e != cudaSuccess) {
        printf("{\"status\": \"fault\", \"error\": \"%s\", \"seconds\": %.3f}\n", cudaGetErrorString(e), wall);
        return 1;
    }
    Out h;
    cudaMemcpy(&h, o, sizeof h, cudaMemcpyDeviceToHost);
    printf("{\"status\": \"ended\", \"seconds\": %.4f, \"calls\": %llu, \"bad_value\": %llu, \"bad_count\": %llu, "
           "\"cycles_per_call\": %.1f, \"merged_calls\": %llu, \"bad_pre\": %llu, \"split_calls\": %llu, "
           "\"count_over\": %llu, \"value_other\": %llu, \"torn\": %llu, \"silent\": %llu}\n",
           wall, h.calls, h.bad_value, h.bad_count,
           mode == 2 ? (double)h.cycles / ((double)blocks * warps * iters) : 0.0, h.merged, h.bad_pre, h.split,
           h.count_over, h.value_other, h.torn, h.silent);
    return 0;
}
