"""`gpu_demo()`: the instrumented microbenchmark end to end on a GPU, with the four-way time split.

hbfd (already running, or the socket given) + the microbenchmark kernels linked with the device
helpers (workloads/microbench/hbf_microbench.cu: CUDA C++ kernels that call __hb_issue/__hb_wait
directly; an hbfcc-built module can be passed instead with `module=`) + one registered timing range.
Prints modeled / wall / service / overhead and returns them as a dict.
"""
from __future__ import annotations

import ctypes
import logging
from pathlib import Path

from hbfcommon import ctl as C

log = logging.getLogger(__name__)


def gpu_demo(socket: str | None = None, *, warps: int = 512, iters: int = 20, nbytes: int = 64 << 20,
             cubin: str | Path | None = None, echo: bool = True) -> dict:
    from runtime_cuda import attach, cudrv, linker  # noqa: PLC0415
    cub = Path(cubin) if cubin else linker.build_microbench()["cubin"]
    with attach(socket=socket) as s:
        mod = cudrv.module_load_data(Path(cub).read_bytes())
        names = ["stream_instr", "probe_instr", "sem_instr", "rate_instr"]
        b = s.bind_module(mod, artifact={"kernels": [{"name": n, "admitted": True} for n in names],
                                         "note": "hand-instrumented microbenchmark (helpers called directly)"})
        fn = cudrv.module_function(mod, "rate_instr")
        s.note_function(fn, b, "rate_instr")
        buf = cudrv.mem_alloc(nbytes)
        out = cudrv.mem_alloc(warps * 32 * 4)
        try:
            cudrv.check(cudrv.drv().cuMemsetD8(buf, 1, nbytes), "cuMemsetD8")
            r = s.register_timing_range(buf, nbytes, label="demo")
            blocks = max(1, warps // 4)
            s.launch(fn, (blocks,), (128,), [ctypes.c_uint64(buf), ctypes.c_uint64(nbytes // 4),
                                             ctypes.c_uint64(out), ctypes.c_int32(iters)], kernel="rate_instr")
            s.synchronize()
            c = s.counters()
            tot = c["totals"]
            daemon = s.ctl.ctl.counters.daemon
            split = {
                "requests": sum(tot["ops"][o]["requests"] for o in C.OP_NAMES),
                "modeled_ns": sum(tot["ops"][o]["modeled_ns"] for o in C.OP_NAMES),
                "wall_ns": tot["wait_wall_ns"],
                "service_ns": sum(int(daemon[i].service_ns) for i in range(C.HBF_N_OPS)),
                "overhead_ns": tot["wait_overhead_ns"] + sum(tot["ops"][o]["overhead_ns"] for o in C.OP_NAMES),
                "range_id": int(r.range_id), "media_offset": int(r.media_offset),
                "timing_source": int(s.state.timing_source), "status": tot["status"],
            }
            s.unregister(r)
        finally:
            cudrv.mem_free(buf)
            cudrv.mem_free(out)
    if echo:
        print(f"hbfsim demo: {split['requests']} requests over {warps} warps x {iters} iterations")
        for k in ("modeled_ns", "wall_ns", "service_ns", "overhead_ns"):
            print(f"  {k:12s} {split[k] / 1e6:12.3f} ms")
    return split


if __name__ == "__main__":
    import sys
    gpu_demo(sys.argv[1] if len(sys.argv) > 1 else None)
