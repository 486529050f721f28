/*
 * hbf_curve.h — service time of the device-side FIXED and CURVE timing sources, and the thermal
 * scaling every source applies once. THE definition the device helpers use (hbf_helpers.cu,
 * hb_device_deadline / hb_fast_model / hb_ticket_deadline); hbfd's models implement the same
 * semantics (hbfd/media/curve.py BurstCurve.request_ns + CurveEngine, hbfd/services.py
 * FixedLatencyEngine, hbfd/thermal/controller.py throttled_service_ns), and
 * tests/runtime/test_curve_agreement.py compiles THIS header as host code and checks that both
 * agree exactly (integer ns) over ops x bytes x burst lengths x q.
 *
 * One request is what one warp's page group asks for (hb_group_request: the bytes its lanes touch).
 * Per operation (DESIGN §3.3: stores are posted, loads are read, an atomic is read-modify-write):
 *   load, cp.async   read:          fixed  read_ns
 *                                   curve  cum(pages): the request is a burst of
 *                                          pages = ceil(bytes / 4 KiB) pages that starts fresh
 *   store            write:         fixed  write_ns
 *                                   curve  ceil(write_ns * bytes / 4096): write_ns is the program
 *                                          time of one 4 KiB page (profile timing_model.curve.write_ns),
 *                                          pro-rated by the bytes written, never per store instruction
 *   atomic           read + write of the same bytes (both of the above, summed)
 * The curve's unit is the 4 KiB page it was measured in (hbfcommon/profile.py accepts no other
 * page_bytes). cum(n) interpolates linearly between the fitted points with cum(0) = 0, rounds up
 * (ceiling), and past the last point continues on the last segment's slope.
 * Thermal (DESIGN §3.3): s_T = ceil(s * 1e6 / q), applied exactly once to the whole service.
 *
 * Host builds: plain C++ (g++, or nvcc -x cu); no CUDA headers needed.
 */
#ifndef HBF_CURVE_H
#define HBF_CURVE_H

#include "hbf_ctl.h"

#if defined(__CUDACC__)
#define HBF_CURVE_FN static __host__ __device__ __forceinline__
#define HBF_CURVE_LOOP _Pragma("unroll 1")   /* the point loop stays a loop (code size) */
#else
#define HBF_CURVE_FN static inline
#define HBF_CURVE_LOOP
#endif

#define HBF_CURVE_PAGE_SHIFT 12u   /* the curve's page: 4 KiB */

/* ceil(s * 1e6 / q); q = 0 is read as the smallest fraction (1 ppm), q >= 1e6 is full rate. */
HBF_CURVE_FN uint64_t hbf_thermal_scale(uint64_t s, uint32_t q_ppm) {
    if (q_ppm >= 1000000u) return s;
    if (q_ppm == 0u) q_ppm = 1u;
    return (s * 1000000ull + (uint64_t)q_ppm - 1ull) / (uint64_t)q_ppm;
}

/* cum(pages): cumulative ns of a sequential burst of `pages` pages (see above). */
HBF_CURVE_FN uint64_t hbf_curve_cum_ns(const hbf_media_params* m, uint64_t pages) {
    const uint32_t n = m->curve_points < HBF_MAX_CURVE_POINTS ? m->curve_points : HBF_MAX_CURVE_POINTS;
    if (n == 0u) return 0ull;
    uint64_t x0 = 0ull, y0 = 0ull;   /* the origin knot: cum(0) = 0 */
HBF_CURVE_LOOP
    for (uint32_t i = 0; i < n; ++i) {
        const uint64_t x1 = m->curve_pages[i], y1 = m->curve_cum_ns[i];
        if (pages <= x1 || i + 1u == n) {   /* inside this segment, or past the last point */
            if (x1 <= x0) return y1;
            const uint64_t d = pages > x0 ? pages - x0 : 0ull;
            return y0 + ((y1 - y0) * d + (x1 - x0) - 1ull) / (x1 - x0);
        }
        x0 = x1;
        y0 = y1;
    }
    return y0;
}

/* Unthrottled service of one request of `bytes` under the FIXED source. */
HBF_CURVE_FN uint64_t hbf_fixed_service_ns(const hbf_media_params* m, uint32_t op) {
    if (op == HBF_OP_STORE) return m->fixed_write_ns;
    if (op == HBF_OP_ATOMIC) return m->fixed_read_ns + m->fixed_write_ns;
    return m->fixed_read_ns;   /* load, cp.async */
}

/* Unthrottled service of one request of `bytes` under the CURVE source. */
HBF_CURVE_FN uint64_t hbf_curve_service_ns(const hbf_media_params* m, uint32_t op, uint64_t bytes) {
    const uint64_t page = 1ull << HBF_CURVE_PAGE_SHIFT;
    uint64_t s = 0ull;
    if (op != HBF_OP_STORE) s = hbf_curve_cum_ns(m, (bytes + page - 1ull) >> HBF_CURVE_PAGE_SHIFT);
    if (op == HBF_OP_STORE || op == HBF_OP_ATOMIC) s += (m->curve_write_ns * bytes + page - 1ull) >> HBF_CURVE_PAGE_SHIFT;
    return s;
}

#endif /* HBF_CURVE_H */
