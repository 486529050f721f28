"""Device and daemon agree on curve and fixed timing, exactly (integer ns).

The device's service-time functions (runtime_cuda/include/hbf_curve.h, the header hbf_helpers.cu
uses) are compiled here as HOST code -- with nvcc (-x cu: the __host__ __device__ build) when it is
installed, and with the host C++ compiler (the plain-C++ build) -- and evaluated over a sweep of
ops x request bytes x burst lengths (pages) x thermal q; the result must equal hbfd's models:
hbfd/media/curve.py (BurstCurve.request_ns and a fresh CurveEngine serving the same request),
hbfd/services.py FixedLatencyEngine, and the thermal scaling hbfd/thermal/controller.py applies.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from hostcc import build_probe, compiler_params

from hbfcommon import ctl as C
from hbfd.media.curve import CD8P_P50_POINTS, CD8P_PROGRAM_P50_NS, BurstCurve, CurveEngine
from hbfd.media.engine import REQUEST_BATCH_DTYPE
from hbfd.services import FixedLatencyEngine
from hbfd.thermal.controller import throttled_service_ns

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "runtime_cuda" / "include"

# Reads: curve line "npoints p0 y0 p1 y1 ... write_ns fixed_read fixed_write", then queries
# "src op bytes q"; prints "service scaled" per query (src: 0 fixed, 1 curve).
PROBE = r"""
#include <cstdio>
#include <cstring>
#include "hbf_curve.h"
int main() {
    hbf_media_params m;
    std::memset(&m, 0, sizeof m);
    unsigned n;
    if (std::scanf("%u", &n) != 1) return 2;
    m.curve_points = n;
    for (unsigned i = 0; i < n; ++i) {
        unsigned long long y;
        if (std::scanf("%u %llu", &m.curve_pages[i], &y) != 2) return 2;
        m.curve_cum_ns[i] = y;
    }
    unsigned long long w, fr, fw;
    if (std::scanf("%llu %llu %llu", &w, &fr, &fw) != 3) return 2;
    m.curve_write_ns = w; m.fixed_read_ns = fr; m.fixed_write_ns = fw;
    unsigned src, op, q;
    unsigned long long bytes;
    while (std::scanf("%u %u %llu %u", &src, &op, &bytes, &q) == 4) {
        const uint64_t s = src ? hbf_curve_service_ns(&m, op, bytes) : hbf_fixed_service_ns(&m, op);
        std::printf("%llu %llu\n", (unsigned long long)s, (unsigned long long)hbf_thermal_scale(s, q));
    }
    return 0;
}
"""

CURVES = [
    (CD8P_P50_POINTS, CD8P_PROGRAM_P50_NS),                      # the reference curve
    (tuple(p for p in CD8P_P50_POINTS if p[0] != 64), 600_000),   # a held-out fit
    (((1, 30_000), (16, 160_000), (256, 2_000_000)), 600_000),    # bench/runtime_triton.py's curve
    (((4, 7), (5, 7), (9, 1_000_003)), 0),                        # first point > 1 page, a flat segment, no write time
    (((1, 1), (2, 3)), 1),                                        # two points, tiny numbers (ceilings show)
]
FIXED = [(20_513, 600_513), (0, 0), (7, 3)]
OPS = (C.HBF_OP_LOAD, C.HBF_OP_STORE, C.HBF_OP_ATOMIC, C.HBF_OP_CPASYNC)
SUB_PAGE = (1, 4, 8, 16, 64, 128, 256, 1000, 2048, 4095)
BURST_PAGES = (1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 63, 64, 65, 255, 256, 257, 511, 512, 513, 1000, 4096)
Q_PPM = (1_000_000, 999_999, 900_000, 500_000, 333_333, 123_457, 1_000, 7, 1)


def _bytes_sweep() -> list[int]:
    out = set(SUB_PAGE)
    for n in BURST_PAGES:   # a burst of n pages: exactly n pages, and n - 1 pages plus a few bytes
        out.update((n * 4096, (n - 1) * 4096 + 1, n * 4096 - 100 if n > 1 else 3000))
    return sorted(out)


@pytest.fixture(scope="module", params=compiler_params())
def device_probe(request, tmp_path_factory):
    exe = build_probe(tmp_path_factory, request.param, "hbf_curve.h", PROBE, INCLUDE)

    def run(points, write_ns, fixed, queries) -> np.ndarray:
        head = " ".join([str(len(points))] + [f"{p} {y}" for p, y in points]
                        + [str(write_ns), str(fixed[0]), str(fixed[1])])
        body = "\n".join(f"{s} {o} {b} {q}" for s, o, b, q in queries)
        out = subprocess.run([str(exe)], input=head + "\n" + body + "\n", capture_output=True,
                             text=True, check=True).stdout
        return np.array([[int(v) for v in line.split()] for line in out.splitlines()], dtype=object)
    return run


def _one_request(engine, op: int, nbytes: int) -> int:
    b = np.zeros(1, REQUEST_BATCH_DTYPE)
    b[0] = (0, 0, 0, nbytes, op)   # page-aligned media address 0: the request starts a burst
    engine.submit(b)
    c = engine.collect()
    assert int(c["status"][0]) == C.HBF_ST_READY
    return int(c["modeled_ns"][0])


@pytest.mark.parametrize("curve_i", range(len(CURVES)))
def test_curve_source_agrees_with_hbfd(device_probe, curve_i):
    points, write_ns = CURVES[curve_i]
    curve = BurstCurve(points, write_ns)
    sweep = _bytes_sweep()
    queries = [(1, op, nb, q) for op in OPS for nb in sweep for q in Q_PPM]
    dev = device_probe(points, write_ns, FIXED[0], queries)
    assert len(dev) == len(queries)
    checked = 0
    for (_, op, nb, q), (d_s, d_scaled) in zip(queries, dev):
        want = curve.request_ns(op, nb)
        if q == Q_PPM[0]:   # the engine's own charge (a fresh engine: no burst carried in)
            assert _one_request(CurveEngine(curve), op, nb) == want, (op, nb)
        assert d_s == want, (C.OP_NAMES[op], nb, d_s, want)
        assert d_scaled == throttled_service_ns(want, q), (C.OP_NAMES[op], nb, q)
        checked += 1
    assert checked == len(OPS) * len(sweep) * len(Q_PPM)


def test_curve_semantics_per_op(device_probe):
    """What the agreement is about: a store costs write time (pro-rated per 4 KiB), an atomic
    read + write, cp.async the same as a load."""
    points, w = CD8P_P50_POINTS, CD8P_PROGRAM_P50_NS
    c = BurstCurve(points, w)
    q = [(1, op, nb, 1_000_000) for op in OPS for nb in (256, 4096, 3 * 4096)]
    dev = {(op, nb): int(r[0]) for (_, op, nb, _), r in zip(q, device_probe(points, w, FIXED[0], q))}
    for nb in (256, 4096, 3 * 4096):
        write = -(-w * nb // 4096)
        read = int(c.cum(-(-nb // 4096)))
        assert dev[(C.HBF_OP_STORE, nb)] == write
        assert dev[(C.HBF_OP_LOAD, nb)] == read == dev[(C.HBF_OP_CPASYNC, nb)]
        assert dev[(C.HBF_OP_ATOMIC, nb)] == read + write
    assert dev[(C.HBF_OP_STORE, 256)] < w      # 16 x 256 B stores cost one page program, not 16


@pytest.mark.parametrize("fixed", FIXED)
def test_fixed_source_agrees_with_hbfd(device_probe, fixed):
    points, write_ns = CURVES[0]
    eng = FixedLatencyEngine(*fixed)
    queries = [(0, op, nb, q) for op in OPS for nb in (1, 64, 4096, 5 * 4096) for q in Q_PPM]
    dev = device_probe(points, write_ns, fixed, queries)
    for (_, op, nb, q), (d_s, d_scaled) in zip(queries, dev):
        want = _one_request(eng, op, nb)
        assert d_s == want, (C.OP_NAMES[op], nb)
        assert d_scaled == throttled_service_ns(want, q)
