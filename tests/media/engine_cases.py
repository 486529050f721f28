"""Varied request streams for the media engine's golden-output test (tests/media/test_engine_golden.py).

Each case: a geometry, a request stream (self-contained generators, seeded: nothing here depends on
other modules' stream code) and a driving pattern (batch sizes, ``advance``/``collect`` calls, refresh,
flush). ``digest(engine_cls, case)`` runs the case and hashes everything the engine shows: every
``collect``'s completions (sorted by id within a collect: the order inside one collect is not part of
the contract), the final ``stats()`` (less the counters that only say which internal path ran) and the
end times ``refresh`` returns.

Record the golden digests (only when the engine's semantics change on purpose):

    PYTHONPATH=$PWD .venv/bin/python tests/media/engine_cases.py --record
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hbfcommon.profile import load_profile  # noqa: E402
from hbfd.contracts import REQUEST_BATCH_DTYPE  # noqa: E402
from hbfd.media.geometry import MediaGeometry  # noqa: E402

GOLDEN = Path(__file__).with_name("engine_golden.json")

# counters that name the internal path a batch took (not what the engine computes)
PATH_COUNTERS = ("fast_batches", "event_batches", "event_dies", "qd_bound_batches", "qd_bound_dies")

SMALL = dict(channels=2, dies_per_channel=2, planes_per_die=2, blocks_per_plane=16, pages_per_block=8,
             channel_bytes_per_s=512_000_000_000, t_read_ns=30, t_prog_ns=200, t_erase_ns=900,
             t_cmd_ns=3, queue_depth=4, over_provisioning=0.25, gc_start_free_fraction=0.125,
             gc_hard_free_fraction=0.05, write_flush_timeout_ns=5_000)
ODD = dict(channels=3, dies_per_channel=3, planes_per_die=5, blocks_per_plane=24, pages_per_block=16,
           channel_bytes_per_s=40_000_000_000, t_read_ns=2_000, t_prog_ns=9_000, t_erase_ns=30_000,
           t_cmd_ns=50, queue_depth=3, over_provisioning=0.2, gc_start_free_fraction=0.1,
           gc_hard_free_fraction=0.05, write_flush_timeout_ns=20_000)


def geometry(spec) -> MediaGeometry:
    if isinstance(spec, str):
        return MediaGeometry.from_profile(load_profile(spec))
    name, over = spec
    base = {"small": SMALL, "odd": ODD}[name]
    return MediaGeometry(**{**base, **over})


# ------------------------------------------------------------------------------------ streams
def _batch(arr, addr, nbytes, op):
    n = len(arr)
    b = np.zeros(n, REQUEST_BATCH_DTYPE)
    b["id"] = np.arange(n, dtype=np.uint64)
    b["arrival_ns"] = np.asarray(arr, np.int64).astype(np.uint64)
    b["media_address"] = np.asarray(addr, np.int64).astype(np.uint64)
    b["bytes"] = np.asarray(nbytes, np.int64).astype(np.uint32)
    b["op"] = np.asarray(op, np.int64).astype(np.uint8)
    return b


def _arrivals(rng, n, gap, kind, start=1_000_000):
    if gap == 0:
        return np.full(n, start, np.int64)
    if kind == "poisson":
        t = np.floor(np.cumsum(rng.exponential(gap, n))).astype(np.int64)
        return start + t - t[0]
    return start + (np.arange(n, dtype=np.int64) * gap)


def stream(g: MediaGeometry, kind: str, n: int, *, gap: float, seed: int, arrivals="det",
           nbytes=4096, write_fraction=0.0, span_pages=None, sub=False):
    """kind: random (page-aligned nbytes, or a random sub-page slot when ``sub``), seq (nbytes requests
    walking the media), hot (a small set of pages: buffer hits, coalescing, write-buffer hits),
    span (requests crossing page boundaries). ``write_fraction`` of them are stores (op 1);
    a few atomics (op 2) in ``hot``."""
    rng = np.random.default_rng(seed)
    arr = _arrivals(rng, n, gap, arrivals)
    pages = g.logical_pages if span_pages is None else min(span_pages, g.logical_pages)
    op = np.where(rng.random(n) < write_fraction, 1, 0)
    if kind == "random":
        if sub:
            k = rng.integers(1, 65, n)
            off = (rng.random(n) * (65 - k)).astype(np.int64)
            addr = rng.integers(0, pages, n) * 4096 + off * 64
            nb = k * 64
        else:
            addr = rng.integers(0, pages * 4096 // nbytes, n) * nbytes
            nb = np.full(n, nbytes)
    elif kind == "seq":
        per = pages * 4096 // nbytes
        addr = (np.arange(n) % per) * nbytes
        nb = np.full(n, nbytes)
    elif kind == "hot":
        hp = rng.integers(0, pages, max(4, g.planes // 2 + 3))
        addr = hp[rng.integers(0, len(hp), n)] * 4096 + rng.integers(0, 64, n) * 64
        nb = rng.choice([64, 128, 512, 4096 - 64], n)
        nb = np.minimum(nb, (addr // 4096 + 1) * 4096 - addr)
        op = np.where(rng.random(n) < 0.03, 2, op)
    elif kind == "span":
        addr = rng.integers(0, pages - 4, n) * 4096 + rng.integers(0, 64, n) * 64
        nb = rng.integers(1, 3 * 4096, n)
    else:
        raise ValueError(kind)
    return _batch(arr, addr, nb, op)


# ------------------------------------------------------------------------------------ cases
def cases() -> list[dict]:
    out = []

    def add(name, geo, st, drive, **kw):
        out.append({"name": name, "geometry": geo, "stream": st, "drive": drive, **kw})

    for prof in ("nominal", "ocp-sg1", "ocp-sg2", "ocp-sg3", "conservative", "aggressive"):
        g = geometry(prof)
        page_gap = 4096e9 / g.aggregate_bytes_per_s
        add(f"{prof}/read-burst", prof, dict(kind="random", n=30000, gap=0, seed=1), dict(batch=4096))
        add(f"{prof}/read-10pct", prof, dict(kind="random", n=30000, gap=round(page_gap * 10), seed=2),
            dict(batch=16384))
        add(f"{prof}/read-90pct-poisson", prof, dict(kind="random", n=30000, gap=page_gap / 0.9, seed=3,
                                                      arrivals="poisson"), dict(batch=2048))
        add(f"{prof}/seq512-over", prof, dict(kind="seq", n=20000, gap=page_gap / 8 / 1.5, seed=4, nbytes=512),
            dict(batch="random", max_batch=700, seed=5))
        add(f"{prof}/sub-random-tiny", prof, dict(kind="random", n=3000, gap=2000, seed=6, sub=True),
            dict(batch=[1, 16, 256], seed=7))
        add(f"{prof}/write-burst", prof, dict(kind="random", n=8000, gap=0, seed=8, write_fraction=1.0),
            dict(batch=4096))
        add(f"{prof}/write-10pct", prof, dict(kind="random", n=8000, gap=round(page_gap * 10), seed=9,
                                              write_fraction=1.0), dict(batch=4096))
        add(f"{prof}/mixed-50", prof, dict(kind="random", n=8000, gap=round(page_gap * 2), seed=10,
                                           write_fraction=0.5), dict(batch=4096))
        add(f"{prof}/mixed-90-10", prof, dict(kind="random", n=8000, gap=0, seed=11, write_fraction=0.1),
            dict(batch=2048))
        add(f"{prof}/hot-mixed", prof, dict(kind="hot", n=6000, gap=page_gap / 4, seed=12, write_fraction=0.2,
                                            arrivals="poisson"), dict(batch="random", max_batch=300, seed=13))
    # small geometries: queue depth binds, GC copybacks/erases, partial pages and flush timeouts
    for nm, geo in (("small", ("small", {})), ("small-pbuf3", ("small", {"page_buffers_per_plane": 3})),
                    ("small-pbuf1", ("small", {"page_buffers_per_plane": 1})), ("odd", ("odd", {}))):
        add(f"{nm}/read-burst", geo, dict(kind="random", n=3000, gap=0, seed=20), dict(batch=512))
        add(f"{nm}/read-hot", geo, dict(kind="hot", n=3000, gap=7, seed=21, arrivals="poisson"),
            dict(batch="random", max_batch=200, seed=22))
        add(f"{nm}/write-gc", geo, dict(kind="random", n=4000, gap=40, seed=23, write_fraction=1.0),
            dict(batch=256))
        add(f"{nm}/mixed-sub", geo, dict(kind="random", n=3000, gap=15, seed=24, write_fraction=0.5, sub=True),
            dict(batch="random", max_batch=100, seed=25, advance_extra=3000))
        add(f"{nm}/hot-mixed", geo, dict(kind="hot", n=3000, gap=10, seed=26, write_fraction=0.3),
            dict(batch=[1, 16, 256], seed=27))
        add(f"{nm}/span", geo, dict(kind="span", n=2000, gap=20, seed=28, write_fraction=0.2),
            dict(batch="random", max_batch=64, seed=29, refresh_every=7, flush_end=True))
        add(f"{nm}/seq-partial-writes", geo, dict(kind="seq", n=3000, gap=5, seed=30, nbytes=512,
                                                   write_fraction=0.6), dict(batch=128, flush_end=True))
    add("nominal/disorder", "nominal", dict(kind="random", n=5000, gap=300, seed=40, sub=True, write_fraction=0.1),
        dict(batch=500, shuffle=True, bad=True, seed=41))
    add("small/disorder", ("small", {}), dict(kind="hot", n=2000, gap=20, seed=42, write_fraction=0.3),
        dict(batch=100, shuffle=True, bad=True, seed=43))
    return out


def _sizes(drive, n):
    b = drive["batch"]
    rng = np.random.default_rng(drive.get("seed", 0))
    if isinstance(b, int):
        return [b] * (-(-n // b))
    if b == "random":
        out, tot = [], 0
        while tot < n:
            k = int(rng.integers(1, drive["max_batch"] + 1))
            out.append(k)
            tot += k
        return out
    out, tot, i = [], 0, 0
    while tot < n:             # a cycle through the listed sizes
        out.append(b[i % len(b)])
        tot += b[i % len(b)]
        i += 1
    return out


def run_case(engine_cls, case, g=None):
    """Run one case; returns the list of what the engine showed (arrays and dicts)."""
    g = geometry(case["geometry"]) if g is None else g
    s = stream(g, **case["stream"])
    drive = case["drive"]
    rng = np.random.default_rng(drive.get("seed", 0) + 1000)
    if drive.get("bad"):
        k = max(1, len(s) // 50)
        i = rng.choice(len(s), 2 * k, replace=False)
        s["media_address"][i[:k]] = np.uint64(g.capacity_bytes)          # outside the media
        s["op"][i[k:]] = 9                                              # unsupported op
        # arrivals jittered across batch boundaries: some arrive before the latest one already seen
        s["arrival_ns"] += rng.integers(0, 2000, len(s)).astype(np.uint64)
    e = engine_cls(g)
    shown = []
    pos = 0
    for j, k in enumerate(_sizes(drive, len(s))):
        part = s[pos:pos + k].copy()
        pos += k
        if not len(part):
            break
        if drive.get("shuffle") and len(part) > 1:
            part = part[rng.permutation(len(part))]
        e.submit(part)
        now = int(part["arrival_ns"].max()) + drive.get("advance_extra", 0)
        e.advance(now)
        shown.append(e.collect())
        if j % 3 == 2:
            shown.append(e.collect())             # a quiet scan
        re = drive.get("refresh_every")
        if re and j % re == re - 1:
            lp = rng.integers(0, g.logical_pages, 5)
            shown.append({"refresh_end": e.refresh(lp, now)})
    if drive.get("flush_end"):
        e.flush(int(s["arrival_ns"].max()) + 1)
    shown.append(e.collect())
    shown.append(e.drain())
    st = e.stats()
    st["counts"] = {k: v for k, v in st["counts"].items() if k not in PATH_COUNTERS}
    shown.append(st)
    return shown


def digest(engine_cls, case, g=None) -> dict:
    h = hashlib.sha256()
    n = 0
    tot = 0
    for x in run_case(engine_cls, case, g):
        if isinstance(x, np.ndarray):
            o = np.argsort(x["id"], kind="stable")
            for f in ("id", "modeled_ns", "status"):
                h.update(np.ascontiguousarray(x[f][o]).astype(np.int64).tobytes())
            h.update(b"|")
            n += len(x)
            tot += int(x["modeled_ns"].astype(np.int64).sum())
        else:
            h.update(json.dumps(x, sort_keys=True, default=str).encode())
    return {"sha256": h.hexdigest(), "completions": n, "modeled_ns_sum": tot}


def main(argv=None) -> int:
    import argparse
    import time
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", action="store_true", help="write tests/media/engine_golden.json")
    ap.add_argument("--engine", default="hbfd.media.engine", help="module holding MediaEngine")
    a = ap.parse_args(argv)
    import importlib
    cls = importlib.import_module(a.engine).MediaEngine
    res = {}
    for c in cases():
        t0 = time.process_time()
        res[c["name"]] = digest(cls, c)
        print(f"{c['name']:32s} {res[c['name']]['completions']:7d} {time.process_time() - t0:6.2f} s",
              file=sys.stderr, flush=True)
    if a.record:
        from hbfcommon.fsutil import atomic_write_json
        atomic_write_json(GOLDEN, res, indent=1)
    else:
        gold = json.loads(GOLDEN.read_text())
        bad = [k for k in res if gold.get(k) != res[k]]
        print("differ:", bad)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
