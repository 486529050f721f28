"""GPU tests (marked gpu; skipped cleanly without a device): the session end to end on the card."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import runtime_cuda
from hbfcommon import ctl as C

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cubin(gpu, nvcc, tmp_path_factory):
    from runtime_cuda import linker
    return linker.build_microbench(tmp_path_factory.mktemp("mb"))["cubin"]


def test_instrumented_kernel_is_bit_identical_and_counted(gpu, cubin, hbfd_daemon):
    from runtime_cuda import cudrv
    with runtime_cuda.attach(socket=hbfd_daemon[0]) as s:
        assert s.ctl_dev != 0 and s.state_dptr != 0
        mod = cudrv.module_load_data(open(cubin, "rb").read())
        b = s.bind_module(mod, artifact={"kernels": [{"name": n, "admitted": True} for n in
                                                     ("stream_instr", "probe_instr", "sem_instr", "rate_instr")]})
        assert b.instrumented
        n = 1 << 20
        raw = cudrv.mem_alloc(2 * n)                       # hbfd takes page-aligned ranges only
        src = (raw + 4095) & ~4095
        dst, tier = cudrv.mem_alloc(512 * 32), cudrv.mem_alloc(512 * 8)
        data = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
        d = cudrv.drv()
        s.register_timing_range(src, n)
        outs = []
        for name in ("sem_plain", "sem_instr"):
            cudrv.check(d.cuMemcpyHtoD(src, data.ctypes.data, n), "htod")
            f = cudrv.module_function(mod, name)
            s.note_function(f, b, name)
            s.launch(f, (4,), (128,), [ctypes.c_int32(2), ctypes.c_uint64(src), ctypes.c_uint64(dst),
                                       ctypes.c_uint64(tier), ctypes.c_int64(65536), ctypes.c_int32(16)],
                     kernel=name, binding=b) if name == "sem_instr" else \
                cudrv.launch(f, (4,), (128,), [ctypes.c_int32(2), ctypes.c_uint64(src), ctypes.c_uint64(dst),
                                               ctypes.c_uint64(tier), ctypes.c_int64(65536), ctypes.c_int32(16)])
            s.synchronize()
            o = np.empty(512 * 32, np.uint8)
            cudrv.check(d.cuMemcpyDtoH(o.ctypes.data, dst, o.nbytes), "dtoh")
            outs.append(o)
        assert np.array_equal(outs[0], outs[1])
        c = s.counters()
        assert c["totals"]["ops"]["load"]["requests"] == 16       # one per warp (512 B per warp, one page)
        assert c["totals"]["status"].get("READY", 0) == 16         # reference path through hbfd
        assert s.ctl.ctl.counters.device[C.HBF_OP_LOAD].requests == 16


def test_a_range_freed_while_registered_is_raised_at_synchronize(gpu, hbfd_daemon):
    """The real driver's answer (cuMemGetAddressRange) for a cuMemAlloc'd buffer freed without unregister."""
    from hbfcommon.errors import ErrorCode, RangeError
    from runtime_cuda import cudrv
    with runtime_cuda.attach(socket=hbfd_daemon[0]) as s:
        keep, gone = cudrv.mem_alloc(1 << 20), cudrv.mem_alloc(1 << 20)
        rk = s.register_timing_range(keep, 1 << 20)
        rg = s.register_timing_range(gone, 1 << 20)
        s.synchronize()                                   # both live
        cudrv.mem_free(gone)
        with pytest.raises(RangeError) as ei:
            s.synchronize()
        assert ei.value.code == ErrorCode.RANGE_STALE and hex(gone) in str(ei.value)
        assert [e["range_id"] for e in s.counters()["stale_ranges"]] == [int(rg.range_id)]
        s.synchronize()                                   # raised once
        s.unregister(rg)
        s.unregister(rk)
        cudrv.mem_free(keep)
