"""Replay recorded launches on ONE GPU with n−1 eidolons — the recorded kernel, unchanged.

The recording kernel (gemv_ar_record.cu, GAR_EIDOLA=1) loads its flags through runtime_cuda's Eidola
primitives, so the same binary runs here with ``replay = 1``:
  - the target's W and x are regenerated from the recording's seed (same generator, same order);
  - its inbox (both parity slots) is pre-staged with the partials the real peers pushed (the
    recorder's ``<stem>.inbox_rank<t>.npy`` snapshot): the fixed-order reduction must then produce
    the recorded output bit for bit;
  - the pushes to peers go to local sink buffers (the store traffic is still issued);
  - the peer flags come from issue 7's engines (eidola.replay.Replay): the WTT built from the
    trace is installed as engine (a) ``eidolon`` (a persistent kernel on reserved SMs stores each
    flag at t0 + wakeup − lag) or engine (b) ``virtual`` (the kernel's flag loads return the table's
    value at that instant).
Each replayed launch uses the recorded launch index (same sequence numbers, same parity slot) and
yields an ``hbfsim.eidola.observation`` comparable with the real one.

Entry point for bench/eidola_record_replay.py: :func:`replay_observations`.
"""
from __future__ import annotations

import functools
import hashlib
import logging
from typing import Any, Sequence

from workloads.gemv_allreduce.record import knobs  # noqa: F401  (no-multicast env first)

from hbfcommon.errors import ConfigError, CudaError, TraceError
from eidola.from_recording import OBSERVATION_FORMAT, OBSERVATION_VERSION
from eidola.trace import Trace
from workloads.gemv_allreduce.record.record import THREADS, WG_FIELDS, GarParamsC, rank_inputs

log = logging.getLogger(__name__)

ENGINE_NAMES = {"eidolon_kernel": "eidolon", "virtual_loads": "virtual",
                "eidolon": "eidolon", "virtual": "virtual"}
DEFAULT_LAG_NS = 500        # notes §3.4: eidolon store → consumer visibility ≈ 0.50 µs on the H200
EIDOLON_BLOCKS = 2


@functools.lru_cache(maxsize=1)
def _target_inputs_cached(seed: int, M: int, K: int, target: int):
    gen = rank_inputs(seed, M, K)
    for _ in range(target):
        next(gen)
    return next(gen)


def target_inputs(workload: dict[str, Any], target: int):
    """(W, x) of ``target`` exactly as record.py generated them (same generator, same order)."""
    return _target_inputs_cached(workload["seed"], workload["M"], workload["K_per_rank"], target)


def replay_observations(traces: Sequence[Trace], *, engine: str, recording: dict[str, Any],
                        target: int, slow_frac: float = 0.0, device: int = 0,
                        lag_ns: int = DEFAULT_LAG_NS, runtime=None) -> list[dict[str, Any]]:
    """Replay each trace (one per recorded launch) on ``device``; one observation per trace."""
    import numpy as np

    from eidola.replay import EidolaRuntime, FlagRegion, Replay
    from workloads.gemv_allreduce.record.build import build_cubin

    if engine not in ENGINE_NAMES:
        raise ConfigError("unknown replay engine", field="engine", value=engine,
                          known=sorted(ENGINE_NAMES))
    eng = ENGINE_NAMES[engine]
    wl = recording["workload"]
    n, nb, R, M = recording["n_gpus"], wl["blocks"], wl["rows_per_block"], wl["M"]
    inbox_files = (recording.get("meta") or {}).get("inbox_files")
    if not inbox_files or len(inbox_files) <= target:
        raise TraceError("recording has no inbox snapshot of the target (meta.inbox_files)",
                         field="meta.inbox_files", target=target)
    inbox = np.load(inbox_files[target])
    if inbox.shape != (2, nb, n, R):
        raise TraceError("inbox snapshot has the wrong shape", shape=list(inbox.shape),
                         want=[2, nb, n, R])
    rt = runtime or EidolaRuntime.create(device)
    if nb + (EIDOLON_BLOCKS if eng == "eidolon" else 0) > rt.sm_count:
        raise ConfigError("the target grid must leave SMs free for the eidolon kernel",
                          blocks=nb, eidolon_blocks=EIDOLON_BLOCKS, sms=rt.sm_count)
    calls = wl["warmup"] + len(recording["runs"])
    W, x = target_inputs(wl, target)
    # the recorded kernel, loaded into the eidola runtime's context (runtime_cuda's CUDA layer)
    mod = rt.load_module(build_cubin(), ("gemv_ar_record",))
    flag_bytes = max(128, -(-(nb * n * 4) // 128) * 128)
    buf = {"W": rt.array(W), "x": rt.array(x), "y": rt.alloc(M * 4),
           "inbox": rt.alloc(inbox.nbytes), "flags": rt.alloc(flag_bytes),
           "sink_inbox": rt.alloc(inbox.nbytes), "sink_flags": rt.alloc(flag_bytes),
           "wg_log": rt.alloc(calls * nb * len(WG_FIELDS) * 8), "rel": rt.alloc(calls * nb * n * 8),
           "seen": rt.alloc(calls * nb * n * 8), "polls": rt.alloc(calls * nb * n * 4),
           "ctr": rt.alloc(calls * 2 * 8), "err": rt.alloc(8)}
    del W
    stream = rt.stream()
    out = []
    try:
        for k, tr in enumerate(traces):
            if tr.header.target != target:
                raise TraceError("trace is for another target", field="target",
                                 value=tr.header.target, want=target)
            call = wl["warmup"] + int(tr.header.meta.get("recording_run", k))
            buf["inbox"].upload(inbox)
            buf["flags"].fill(0)
            buf["err"].fill(0)
            rep = Replay(rt, [FlagRegion(buf["flags"].ptr, flag_bytes, 1, "flags")],
                         timeout_ns=2_000_000_000)
            rep.register_trace(tr, {"flags": buf["flags"].ptr, "partials": buf["inbox"].ptr})
            rep.install(engine=eng, mon_mode="off", lag_ns=lag_ns if eng == "eidolon" else 0)
            rep.reset_launch()
            p = GarParamsC()
            p.W, p.x, p.y = buf["W"].ptr, buf["x"].ptr, buf["y"].ptr
            for q in range(n):
                p.inbox[q] = buf["inbox"].ptr if q == target else buf["sink_inbox"].ptr
                p.flags[q] = buf["flags"].ptr if q == target else buf["sink_flags"].ptr
            p.wg_log, p.flag_release, p.flag_seen = buf["wg_log"].ptr, buf["rel"].ptr, buf["seen"].ptr
            p.flag_polls, p.counters, p.error = buf["polls"].ptr, buf["ctr"].ptr, buf["err"].ptr
            p.M, p.K, p.rank, p.n, p.rows_per_block = M, wl["K_per_rank"], target, n, R
            p.call, p.seq_base, p.timeout_ns = call, 0, 2_000_000_000
            p.slow_ppm = int(round(slow_frac * 1e6))
            p.replay, p.st = 1, rep.dev.ptr
            if eng == "eidolon":
                rep.launch_eidolon(blocks=EIDOLON_BLOCKS)
            mod.launch("gemv_ar_record", (nb,), (THREADS,), [p], stream=stream)
            rt.sync()
            rep.check(f"replay of run {k} ({engine})")
            if int(buf["err"].download(np.uint32, 1)[0]):
                raise CudaError("replayed kernel timed out waiting for a flag the table never set",
                                run=k, engine=engine)
            out.append(_observation(buf, tr, rep, call=call, run=k, n=n, nb=nb, target=target,
                                    engine=engine, M=M, slow_frac=slow_frac))
            if k % 10 == 9:
                log.info("replayed %d/%d (%s)", k + 1, len(traces), engine)
    finally:
        if runtime is None:
            rt.close()
    return out


def _observation(buf, tr: Trace, rep, *, call: int, run: int, n: int, nb: int, target: int,
                 engine: str, M: int, slow_frac: float) -> dict[str, Any]:
    import numpy as np

    wg = buf["wg_log"].download(np.uint64, nb * len(WG_FIELDS), offset=call * nb * len(WG_FIELDS) * 8)
    wg = wg.reshape(nb, len(WG_FIELDS)).astype(np.int64)
    seen = buf["seen"].download(np.uint64, nb * n, offset=call * nb * n * 8).reshape(nb, n).astype(np.int64)
    polls = buf["polls"].download(np.uint32, nb * n, offset=call * nb * n * 4).reshape(nb, n)
    ctr = buf["ctr"].download(np.uint64, 2, offset=call * 16)
    t_start = int(wg[:, 0].min())
    seq = call + 1
    flags = [{"src": s, "buffer": "flags", "offset": 4 * (b * n + s), "seq": seq,
              "seen_ns": int(seen[b][s]) - t_start, "polls": int(polls[b][s])}
             for b in range(nb) for s in range(n) if s != target]
    wgs = [{"wg": b, "start_ns": int(wg[b][0]) - t_start, "end_ns": int(wg[b][5]) - t_start,
            "wait_ns": int(wg[b][4] - wg[b][3])} for b in range(nb)]
    y = buf["y"].download(np.float32, M)
    return {"format": OBSERVATION_FORMAT, "version": OBSERVATION_VERSION, "source": "replay",
            "engine": engine, "target": target, "n_gpus": n, "run": run,
            "kernel_ns": int(wg[:, 5].max()) - t_start,
            "output_sha256": hashlib.sha256(y.tobytes()).hexdigest(),
            "flag_reads": int(ctr[0]), "nonflag_reads": int(ctr[1]), "flags": flags,
            "workgroups": wgs,
            "meta": {"eidola_t0_minus_first_wg_ns": int(rep.host.t0) - t_start,
                     "slow_frac": slow_frac, "accounting": rep.accounting()}}
