"""Cross-validation of the two implementations of media semantics v2 on one request stream: the
device-model twin (``twin.DeviceModelTwin``) and the CPU media engine (``engine.MediaEngine``).

``compare(geometry, batch)`` runs both on the same ``REQUEST_BATCH_DTYPE`` stream (the engine as the
daemon feeds it: batches of ``engine_batch`` with submit / advance / collect, then a drain) and
returns delivered bandwidth (request bytes / (last completion - first arrival)), p50/p99/mean
latency, their relative differences (twin vs engine, relative to the engine) and the check of both
against what the geometry allows: the makespan is never below the busiest channel's transfer time
(the 64 B sectors of every page read, and of every full 4 KiB page stored) nor below the busiest
plane's sensing time (one tR per distinct page read). Partial stores are left out (the engine may
still hold them in its write buffer), and so are programs (a store completes when its data is in;
the engine may also defer programs behind reads). Programs are checked separately
(``program_bound_ok``): the makespan is never below the busiest plane's senses plus the programs of
its whole pages stored, less the ``page_buffers_per_plane`` programs its buffers may still hold.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from hbfcommon.abi import HBF_OP_ATOMIC, HBF_OP_STORE

from .engine import MediaEngine
from .geometry import PAGE_BYTES, SECTOR_BYTES, MediaGeometry
from .twin import DeviceModelTwin

# the goal of issue 14: twin vs engine
TOLERANCE = {"bandwidth": 0.05, "p50": 0.10, "p99": 0.10}


def run_twin(g: MediaGeometry, batch: np.ndarray, channel_order: str = "arrival",
             **twin_options: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """Completion times (input order) and the twin's counts (``channel_order``, ``twin_options``:
    ``DeviceModelTwin``'s)."""
    tw = DeviceModelTwin(g, channel_order=channel_order, **twin_options)
    return tw.run_batch(batch), dict(tw.counts)


def run_engine(g: MediaGeometry, batch: np.ndarray, engine_batch: int = 16384) -> tuple[np.ndarray, dict[str, Any]]:
    """Completion times (input order) on the media engine, fed in time order as the daemon does."""
    eng = MediaEngine(g)
    order = np.argsort(batch["arrival_ns"], kind="stable")
    b = batch[order]
    outs = []
    for k in range(0, len(b), engine_batch):
        part = b[k:k + engine_batch]
        eng.submit(part)
        eng.advance(int(part["arrival_ns"].max()))
        outs.append(eng.collect())
    outs.append(eng.drain())
    c = np.concatenate(outs)
    if len(c) != len(batch) or bool((c["status"] != 1).any()):
        raise RuntimeError(f"media engine: {len(c)} completions for {len(batch)} requests, "
                           f"{int((c['status'] != 1).sum())} not READY")
    lat = np.empty(len(batch), np.int64)
    lat[c["id"].astype(np.int64)] = c["modeled_ns"].astype(np.int64)
    by_id = np.empty(len(batch), np.int64)
    by_id[batch["id"].astype(np.int64)] = np.arange(len(batch))
    done = np.empty(len(batch), np.int64)
    done[by_id] = batch["arrival_ns"].astype(np.int64)[by_id] + lat
    st = eng.stats()["counts"]
    return done, {"page_reads": st["page_reads"], "programs": st["programs"],
                  "paths": {k: st[k] for k in ("fast_batches", "qd_bound_batches", "event_batches")}}


def lower_bounds(g: MediaGeometry, batch: np.ndarray) -> dict[str, int]:
    """Makespan lower bounds (ns) any schedule of ``batch`` on ``g`` obeys (module doc)."""
    ad = batch["media_address"].astype(np.int64)
    nb = batch["bytes"].astype(np.int64)
    op = batch["op"].astype(np.int64)
    first = ad // PAGE_BYTES
    npg = (ad + nb - 1) // PAGE_BYTES - first + 1
    req = np.repeat(np.arange(len(ad)), npg)
    lpn = first[req] + (np.arange(len(req)) - np.repeat(np.cumsum(npg) - npg, npg))
    base = lpn * PAGE_BYTES
    lo = np.maximum(ad[req], base) - base
    hi = np.minimum(ad[req] + nb[req], base + PAGE_BYTES) - base
    xb = SECTOR_BYTES * ((hi + SECTOR_BYTES - 1) // SECTOR_BYTES - lo // SECTOR_BYTES)
    top = op[req]
    C, D, B = g.channels, g.dies_per_channel, g.planes_per_die
    ch = lpn % C
    plane = (ch * D + (lpn // C) % D) * B + (lpn // (C * D)) % B
    rd = top != HBF_OP_STORE
    wr = (top == HBF_OP_STORE) | (top == HBF_OP_ATOMIC)
    full_wr = wr & (xb == PAGE_BYTES)       # the engine may hold a partial page in its write buffer
    moves = rd.astype(np.int64) + full_wr
    xfer_ns = -(-xb * 1_000_000_000 // g.channel_bytes_per_s) * moves
    chan = int(np.bincount(ch, weights=xfer_ns, minlength=C).max())
    pairs = np.unique(plane[rd] * g.logical_pages + lpn[rd])
    senses = np.bincount(pairs // g.logical_pages, minlength=g.planes) * g.t_read_ns
    # programs: every whole page stored is programmed (tPROG) on its plane; a store is acknowledged when its
    # data is in a page buffer, so at most page_buffers_per_plane programs may still be pending at the end
    progs = np.bincount(plane[full_wr], minlength=g.planes)
    pending = np.minimum(progs, g.page_buffers_per_plane)
    work = senses + (progs - pending) * g.t_prog_ns
    return {"channel_ns": chan, "plane_ns": int(senses.max()), "plane_programs_ns": int(work.max()),
            "channel_bytes": int((xb * moves).sum()), "distinct_read_pages": int(len(pairs))}


def metrics(batch: np.ndarray, done: np.ndarray) -> dict[str, float]:
    a = batch["arrival_ns"].astype(np.int64)
    lat = done - a
    span = int(done.max() - a.min())
    return {"bandwidth_bytes_per_s": float(batch["bytes"].astype(np.int64).sum()) * 1e9 / span,
            "makespan_ns": span, "p50_ns": float(np.percentile(lat, 50)), "p99_ns": float(np.percentile(lat, 99)),
            "mean_ns": float(lat.mean())}


def compare(g: MediaGeometry, batch: np.ndarray, engine_batch: int = 16384,
            clock: Callable[[], float] | None = None, channel_order: str = "arrival",
            **twin_options: Any) -> dict[str, Any]:
    """Both models on ``batch`` (module doc). ``clock`` (e.g. ``time.process_time``, from a bench):
    each model's run time is reported as ``info.cpu_s``. ``channel_order``, ``twin_options``: the twin's
    (``DeviceModelTwin``)."""
    lb = lower_bounds(g, batch)
    span_lb = max(lb["channel_ns"], lb["plane_ns"])
    out: dict[str, Any] = {"requests": len(batch), "bytes": int(batch["bytes"].astype(np.int64).sum()),
                           "lower_bounds": lb,
                           "bound_bytes_per_s": float(batch["bytes"].astype(np.int64).sum()) * 1e9 / max(1, span_lb)}
    for name, fn in (("twin", lambda g_, b_: run_twin(g_, b_, channel_order, **twin_options)), ("engine", lambda g_, b_: run_engine(g_, b_, engine_batch))):
        t0 = clock() if clock else 0.0
        done, info = fn(g, batch)
        if clock:
            info["cpu_s"] = clock() - t0
        m = metrics(batch, done)
        span = m["makespan_ns"]
        m["within_bounds"] = {
            "channel": span >= lb["channel_ns"],            # busiest channel never above its rate
            "plane": span >= lb["plane_ns"],                # busiest plane: tR per distinct page read
            "aggregate_channel": lb["channel_bytes"] * 1e9 / span <= g.aggregate_bytes_per_s,
            "aggregate_sensing": lb["distinct_read_pages"] * PAGE_BYTES * 1e9 / span <= g.array_read_bytes_per_s,
        }
        # the busiest plane's senses and programs (less those its page buffers may still hold at the end)
        m["within_program_bound"] = span >= lb["plane_programs_ns"]
        m["info"] = info
        out[name] = m
    t, e = out["twin"], out["engine"]
    out["rel_diff"] = {"bandwidth": t["bandwidth_bytes_per_s"] / e["bandwidth_bytes_per_s"] - 1.0,
                       "p50": t["p50_ns"] / e["p50_ns"] - 1.0, "p99": t["p99_ns"] / e["p99_ns"] - 1.0}
    out["agree"] = {k: abs(v) <= TOLERANCE[k] for k, v in out["rel_diff"].items()}
    out["bounds_ok"] = all(t["within_bounds"].values()) and all(e["within_bounds"].values())
    out["program_bound_ok"] = {"twin": t["within_program_bound"], "engine": e["within_program_bound"]}
    return out


def engine_has_page_buffers(g: MediaGeometry) -> bool:
    """Probe: eight 512 B reads of one page at once cost one sense on an engine with page buffers."""
    from hbfd.contracts import REQUEST_BATCH_DTYPE
    b = np.zeros(8, REQUEST_BATCH_DTYPE)
    b["id"] = np.arange(8)
    b["media_address"] = np.arange(8) * 512
    b["bytes"] = 512
    eng = MediaEngine(g)
    eng.submit(b)
    c = eng.drain()
    return int(c["modeled_ns"].max()) < g.t_cmd_ns + 2 * g.t_read_ns
