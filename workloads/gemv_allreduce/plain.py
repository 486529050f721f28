"""The un-instrumented GEMV+AllReduce (gemv_allreduce_plain.cu), made Eidola-aware by hbfcc alone.

    cubin, art = build_plain(out_dir, passes=("timing", "flags"))          # hbfcc as nvcc
    pk = PlainKernel(cubin)                                                # driver-API module
    out = run_plain(pk, g, replay, engine="virtual")                       # like GemvAllReduce.run_replay

``build_plain`` runs hbfcc's nvcc entry point (``python -m hbfcc.cli -cubin ...``) with
``HBFCC_PASSES`` set, so the flags pass, the timing pass and the eidola helper linking are exactly
what a user gets from ``HBFCC_PASSES=... hbfcc``; the artifact (``<cubin>.hbfcc.json``) records the
passes, the eidola helper's sha256 and admission. ``run_plain`` binds ``__hb_eidola_state`` of the
module to the Replay (:func:`bind_module_state`), leaves ``__hb_state`` 0 (timing
detached: no HBF ranges in this workload), and launches with the same parameter block as the
hand-instrumented kernel (gemv_allreduce.h; fused.GarParams), so both builds run on the same buffers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from hbfcommon.errors import ConfigError, ToolchainError

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "gemv_allreduce_plain.cu"
KERNEL = "gemv_allreduce_plain_kernel"
# the binding lives in eidola.replay (Replay.bind_module); re-exported for existing callers
from eidola.replay import EIDOLA_STATE_GLOBAL, bind_module_state  # noqa: E402,F401
from workloads.gemv_allreduce.fused import reduce_smem_bytes  # noqa: E402


def build_plain(out_dir: str | os.PathLike, *, passes: Sequence[str] = ("timing", "flags"), arch: str = "sm_90a",
                env: Optional[dict] = None) -> tuple[Path, dict]:
    """Compile gemv_allreduce_plain.cu with hbfcc (nvcc entry point) into a cubin. Returns the cubin
    and its admission artifact (the one module's document)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = "_".join(passes)
    cubin = out_dir / f"gemv_allreduce_plain.{tag}.cubin"
    e = dict(os.environ if env is None else env)
    e["HBFCC_PASSES"] = ",".join(passes)
    e.setdefault("HBFCC_ARTIFACT_DIR", str(out_dir / "artifacts"))
    root = str(HERE.parent.parent)
    e["PYTHONPATH"] = root + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    argv = [sys.executable, "-m", "hbfcc.cli", f"-arch={arch}", "-cubin", "-std=c++17", "-O3",
            str(SOURCE), "-o", str(cubin)]
    r = subprocess.run(argv, capture_output=True, text=True, env=e)
    if r.returncode != 0:
        raise ToolchainError("hbfcc failed building the plain GEMV+AllReduce", argv=argv,
                             returncode=r.returncode, stderr=r.stderr)
    doc = json.loads(Path(str(cubin) + ".hbfcc.json").read_text())
    mods = doc.get("modules", [doc])
    if len(mods) != 1:
        raise ConfigError("expected one rewritten module", modules=len(mods))
    return cubin, mods[0]


class PlainKernel:
    """The hbfcc-built cubin loaded through the driver API (primary context of ``device``)."""

    def __init__(self, cubin: str | os.PathLike, device: int = 0) -> None:
        from runtime_cuda import cudrv
        cudrv.init_context(device)
        self.cubin = Path(cubin)
        self.module = cudrv.module_load_data(self.cubin.read_bytes())
        self.function = cudrv.module_function(self.module, KERNEL)

    def bind(self, replay: Any) -> None:
        if not bind_module_state(self.module, replay):
            raise ConfigError("module has no __hb_eidola_state: not built with HBFCC_PASSES=...,flags",
                              cubin=str(self.cubin))

    def launch(self, params: Any, *, tiles: int, threads: int, tile_rows: int, n_gpus: int, stream: int) -> None:
        from runtime_cuda import cudrv
        smem = reduce_smem_bytes(tile_rows, n_gpus)
        if smem > 48 * 1024:
            raise ConfigError("plain kernel: dynamic shared memory over 48 KB is not set up", smem=smem)
        cudrv.launch(self.function, (tiles,), (threads,), [params], shared=smem, stream=stream)


def run_plain(pk: PlainKernel, g: Any, replay: Any, *, engine: str = "virtual", seq: int = 1) -> dict:
    """One launch of the plain kernel on ``g``'s buffers (a fused.GemvAllReduce) with
    the eidolons replaying ``replay``'s table; same protocol as GemvAllReduce.run_replay."""
    import numpy as np
    if engine == "native":
        pre = np.zeros(g.flag_bytes // 4, np.uint32)
        pre[: g.shape.tiles * g.shape.n_gpus] = seq
        g.flags.upload(pre)
    else:
        g.flags.fill(0)
    replay.reset_launch()
    pk.bind(replay)
    p = g.params(replay, seq=seq, wait="spin")
    if engine == "eidolon":
        replay.launch_eidolon(blocks=max(2, min(4, -(-int(replay.host.n_entries) // 4096))))
    s = g.shape
    pk.launch(p, tiles=s.tiles, threads=s.threads, tile_rows=s.tile_rows, n_gpus=s.n_gpus, stream=g.rt.streams[1])
    g.rt.sync()
    replay.check("gemv_allreduce_plain")
    return g.collect(replay)
