"""`gpu_demo()`: what ``make demo`` runs on a GPU.

By default the LLM decode (:func:`llm_demo`): the small Qwen3-MoE config (workloads/qwen3moe) decoding 8
tokens at batch 1, natively and then with every expert weight registered as a timing range, against the
demo's hbfd; it prints the per-token split, the tokens (identical to native) and where the step trace,
the per-layer PNG and the run summary are. ``HBFD_DEMO=microbench`` (or no torch/Triton) runs the
instrumented microbenchmark instead (:func:`microbench_demo`), described below.

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


def gpu_demo(socket: str | None = None, **kw) -> dict:
    from hbfd import knobs  # noqa: PLC0415
    if knobs.demo_mode() != "microbench":
        import importlib.util  # noqa: PLC0415
        missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
        if missing:
            log.warning("no LLM demo (%s not installed): running the microbenchmark", ", ".join(missing))
        else:
            return llm_demo(socket, **kw)
    return microbench_demo(socket, **kw)


def llm_demo(socket: str | None = None, *, out: str | Path = "qwen3moe-demo", tokens: int = 8,
             echo: bool = True) -> dict:
    """the small Qwen3-MoE decode against the running hbfd at `socket`, expert weights in HBF"""
    from workloads.qwen3moe.cli import print_summary  # noqa: PLC0415
    from workloads.qwen3moe.run import RunOptions, run  # noqa: PLC0415
    res = run(RunOptions(model="small", batches=(1,), prompt_len=4, new_tokens=tokens, placement="experts",
                         out=str(out), socket=socket))
    b = res["batches"]["1"]
    s = b["summary"]
    if echo:
        print_summary(res)
        print(f"  tokens identical to the native run: {s['tokens_identical_to_native']}; "
              f"unmodeled launches: {res['unmodeled_launches']}")
        print(f"  run summary: {Path(out) / 'run.json'}; step trace (ui.perfetto.dev): {b.get('trace')}; "
              f"per-layer split: {b.get('png')}")
    return {"workload": "qwen3moe-small", "run_json": str(Path(out) / "run.json"), **s,
            "unmodeled_launches": res["unmodeled_launches"], "refused_launches": res["refused_launches"],
            "trace": b.get("trace"), "png": b.get("png")}


def microbench_demo(socket: str | None = None, *, warps: int = 512, iters: int = 20, nbytes: int = 64 << 20,
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
