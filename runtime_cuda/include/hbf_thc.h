/*
 * hbf_thc.h — the packed thermal cache word (hbf_device.h HBF_THC_*) and its validity rule, with the
 * thermal snapshot's validity horizon (hbf_ctl.h hbf_thermal_snapshot.valid_until_gpu_ns; docs/design.md
 * §3.3 "Validity horizon"). THE definition the device helpers use (hbf_helpers.cu: hb_thermal_read packs,
 * hb_thermal_snapshot / hb_cd_thermal_word / hb_cd_snapshot_ok / __hb_inline_until decide validity);
 * tests/runtime/test_thc_horizon.py compiles THIS header as host code and checks the rule.
 *
 * The rule: a snapshot read at GPU time r with horizon U (0: none) is valid at GPU time t while
 *     t - r <= max_age   OR   t < U.
 * Encoded in the one 64-bit word (so the single-flight CAS, the replicas and their 8-byte loads stay as
 * they are, and a reader can never pair a word with another snapshot's horizon): when U reaches beyond
 * r + max_age, the word is stamped with a VIRTUAL read time v <= U - max_age (rounded down to the stamp's
 * 1024 ns unit, minus 2 units) instead of r. The validity test stays "age <= max_age" with the age SIGNED
 * (a stamp ahead of now reads as age < 0: fresh), so the word is valid while t <= v + max_age < U, and in
 * any case while t - r <= max_age (v > r). A negative age therefore means "a horizon is in force"; the last
 * max_age of a horizon behaves like an ordinary snapshot (the inline path's half-age refresh fetches the
 * next one before it expires). U = 0, U <= r + max_age, or max_age = 0: the stamp is r, as without horizons.
 *
 * Bounds: a horizon is clamped to HBF_THC_HORIZON_MAX_NS ahead of the read (shorter is always safe); only a stamp
 * at most that far ahead reads as a negative age: any other difference is the unsigned 40-bit age of the
 * pre-horizon rule (a word read 2^40 units - 68.7 s .. 2^40 units = 13 days ago reads as stamped ahead: the same
 * kind of wrap the pre-horizon rule has at 13 days).
 *
 * Host builds: plain C++ (g++); no CUDA headers needed.
 */
#ifndef HBF_THC_H
#define HBF_THC_H

#ifdef __cplusplus
#include <cstdint>
#else
#include <stdint.h>
#endif

#if defined(__CUDACC__)
#define HBF_THC_FN static __host__ __device__ __forceinline__
#else
#define HBF_THC_FN static inline
#endif

#define HBF_THC_STAMP_BITS 40u
#define HBF_THC_STAMP_MASK ((1ull << HBF_THC_STAMP_BITS) - 1ull)
#define HBF_THC_HORIZON_MAX_NS (1ull << 36)   /* ~68.7 s: the longest horizon a word carries */

/* The word: bits 0..19 q_ppm, bit 20 admission_open, bits 21..22 mode, bit 23 valid,
 * bits 24..63 (stamp_ns >> 10) & (2^40-1). */
HBF_THC_FN uint64_t hbf_thc_pack(uint32_t q, uint32_t adm, uint32_t mode, uint64_t stamp_ns) {
    return (uint64_t)(q & 0xFFFFFu) | ((uint64_t)(adm & 1u) << 20) | ((uint64_t)(mode & 3u) << 21) |
           (1ull << 23) | (((stamp_ns >> 10) & HBF_THC_STAMP_MASK) << 24);
}

/* The time to stamp a snapshot read at `now` with horizon `until` (GPU ns, 0 = none) under max_age. */
HBF_THC_FN uint64_t hbf_thc_stamp_time(uint64_t now, uint64_t until, uint64_t max_age) {
    if (until == 0ull || max_age == 0ull || until <= now) return now;
    const uint64_t u = (until - now > HBF_THC_HORIZON_MAX_NS) ? now + HBF_THC_HORIZON_MAX_NS : until;
    if (u - now <= max_age) return now;
    const uint64_t units = (u - max_age) >> 10;
    if (units < 2ull) return now;
    const uint64_t v = (units - 2ull) << 10;
    return v > now ? v : now;
}

/* Signed age of the word at `now` (ns). The 40-bit stamp difference d (in 1024 ns units, modulo 2^40) is read as
 * negative -- the word stamped ahead, a horizon in force -- only when the stamp is at most HBF_THC_HORIZON_MAX_NS
 * (+ 2 units) ahead; every other d is the unsigned age of the pre-horizon rule (so a huge thermal_max_age_ns still
 * means "never stale", as a profiling harness uses it). */
HBF_THC_FN int64_t hbf_thc_sage(uint64_t w, uint64_t now) {
    const uint64_t d = ((now >> 10) - (w >> 24)) & HBF_THC_STAMP_MASK;
    const uint64_t ahead = (HBF_THC_STAMP_MASK + 1ull - d) & HBF_THC_STAMP_MASK;   /* units the stamp is ahead */
    if (d != 0ull && ahead <= (HBF_THC_HORIZON_MAX_NS >> 10) + 2ull) return -(int64_t)(ahead << 10);
    return (int64_t)(d << 10);
}

/* The age the validity tests compare with max_age: a horizon stamp is age 0 (valid). */
HBF_THC_FN uint64_t hbf_thc_age(uint64_t w, uint64_t now) {
    const int64_t s = hbf_thc_sage(w, now);
    return s < 0 ? 0ull : (uint64_t)s;
}

/* The rule itself (valid bit aside): the snapshot may be used at `now`. */
HBF_THC_FN int hbf_thc_fresh(uint64_t w, uint64_t now, uint64_t max_age) {
    return hbf_thc_age(w, now) <= max_age;
}

#endif /* HBF_THC_H */
