"""Media engine round 11 (issue 14 item 5): the mixed batch's numpy glue around the event scheduler and the lookup
has compiled twins that give the numpy definitions' results bit for bit, and a changed twin is seen:

* ``engine._event_decided`` (``kernels._event_decide``: ``_array_ops``' decided mask, the planes' free times and
  the carried releases after the scheduler) off vs on on random command sets: reads and programs on shared planes,
  starts at, 1 ns before and after the decision limit and a read start of the plane, no read at all;
* ``engine._data_ready`` (``kernels._read_ready``) and ``engine._buffer_rows`` (``kernels._buf_rows``): data ready,
  hit counts and the page-buffer rows, off vs on, with refs to the batch's reads and to buffered pages (clipped),
  no buffered page, sources ready before, at and after arrival + t_cmd;
* ``engine._event_inputs_of`` (``kernels._event_inputs``): the scheduler's input arrays, off vs on;
* ``engine._split_rows`` (``kernels._split_items``): the channel items decided now and deferred, off vs on;
* ``engine._events_in_seq`` (``kernels._event_merge``): the lookup's reads and invalidations in seq order, off vs on;
* engine runs with hot pages (reads of pages just written and read: buffer hits, coalescing) off vs on, each twin
  reached, and with a twin changed by one ns or one decision the results differ.
"""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import engine as engine_mod
from hbfd.media.bench import make_stream
from hbfd.media.eventsim import ERASE, PROG, READ

from test_accel_media import _engine_run, _geometry

pytest.importorskip("numba")


def _decide_case(rng):
    planes = int(rng.choice([1, 3, 16, 64]))
    n = int(rng.choice([0, 1, 5, 40, 700]))
    pl = rng.integers(0, planes, n).astype(np.int64)
    dd = pl // 4
    kind = np.where(rng.random(n) < rng.random(), READ, rng.choice([PROG, ERASE], n)).astype(np.uint8)
    limit = int(rng.integers(1000, 2000))
    start = rng.integers(0, 3000, n).astype(np.int64)
    # starts exactly at the limit and next to it, and non-reads at / next to a read start of their plane
    k = rng.random(n)
    start[k < 0.15] = limit + rng.integers(-1, 2, int((k < 0.15).sum()))
    rs = {}
    for i in np.flatnonzero(kind == READ).tolist():
        rs.setdefault(int(pl[i]), []).append(int(start[i]))
    for i in np.flatnonzero((kind != READ) & (k > 0.7)).tolist():
        if int(pl[i]) in rs:
            start[i] = max(rs[int(pl[i])]) + int(rng.integers(-1, 2))
    end = start + rng.integers(1, 500, n)
    no = int(rng.integers(0, 30))
    cd_old = rng.integers(0, max(1, planes // 4), no).astype(np.int64)
    ct_old = rng.integers(0, 3000, no).astype(np.int64)
    pf0 = rng.integers(0, 2500, planes).astype(np.int64)
    return kind, start, end, pl, dd, limit, pf0, cd_old, ct_old


def test_event_decided_twin_equals_numpy(monkeypatch):
    rng = np.random.default_rng(111)
    seen = set()
    for _ in range(1500):
        kind, start, end, pl, dd, limit, pf0, cd_old, ct_old = _decide_case(rng)
        out = {}
        for mode in ("off", "on"):
            monkeypatch.setenv("HBFD_ACCEL", mode)
            pf = np.full(len(pf0), -7, np.int64)            # (set to pf0 first: its old contents never show)
            dec, sd, st = engine_mod._event_decided(kind, start, end, pl, dd, limit, pf0, pf, cd_old, ct_old)
            out[mode] = (dec, sd, st, pf)
        for a, b in zip(out["off"], out["on"]):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        dec = out["on"][0]
        nr = kind != READ
        if (nr & dec & (start >= limit)).any():
            seen.add("before a read")
        if (nr & ~dec).any():
            seen.add("kept pending")
        if len(kind) and not (kind == READ).any():
            seen.add("no read")
    assert seen == {"before a read", "kept pending", "no read"}, seen
    assert engine_mod._event_decide.is_compiled()


def _ready_case(rng):
    n = int(rng.choice([1, 2, 30, 900]))
    npr = int(rng.choice([0, 0, 1, 7]))
    miss = rng.random(n) < rng.random()
    ta = rng.integers(0, 5000, n).astype(np.int64)
    t_cmd, t_read = int(rng.integers(0, 300)), int(rng.integers(1, 5000))
    E = np.where(miss, ta + t_cmd + t_read + rng.integers(0, 2000, n), 0).astype(np.int64)
    pready = rng.integers(0, 8000, npr).astype(np.int64)
    src = rng.random(n)
    ref = np.where(src < 0.5, rng.integers(0, n, n), -1 - rng.integers(0, npr + 3, n)).astype(np.int64)
    if not npr and rng.random() < 0.5:
        ref = np.abs(ref)
        ref[ref >= n] = 0
    # sources ready at, 1 ns before and after arrival + t_cmd
    e = rng.random(n) < 0.3
    E[e] = ta[e] + t_cmd + rng.integers(-1, 2, int(e.sum()))
    ref[miss] = np.arange(n)[miss]
    return ta, t_cmd, t_read, miss, ref, E, pready


def test_data_ready_and_buffer_rows_twins_equal_numpy(monkeypatch):
    rng = np.random.default_rng(112)
    cases = {"coalesced": 0, "hit": 0, "clipped": 0, "no pready": 0}
    for _ in range(1500):
        ta, t_cmd, t_read, miss, ref, E, pready = _ready_case(rng)
        out = {}
        for mode in ("off", "on"):
            monkeypatch.setenv("HBFD_ACCEL", mode)
            out[mode] = engine_mod._data_ready(ta, t_cmd, t_read, miss, ref, E, pready)
        for a, b in zip(out["off"][:2], out["on"][:2]):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert out["off"][2:] == out["on"][2:]
        cases["coalesced"] += out["on"][3] > 0
        cases["hit"] += out["on"][2] > out["on"][3]
        cases["clipped"] += bool(len(pready) and (-1 - ref[ref < 0] >= len(pready)).any())
        cases["no pready"] += bool(not len(pready) and (ref < 0).any())
        # the buffer rows of a few planes
        P, planes = int(rng.choice([1, 2, 4])), 9
        up = np.sort(rng.choice(planes, int(rng.integers(0, planes + 1)), replace=False)).astype(np.int64)
        sp = np.where(rng.random((len(up), P)) < 0.7, rng.integers(0, 50, (len(up), P)), -1).astype(np.int64)
        sr = np.where(rng.random((len(up), P)) < 0.5, rng.integers(0, len(E), (len(up), P)),
                      -1 - rng.integers(0, len(pready) + 2, (len(up), P))).astype(np.int64)
        if not len(pready):
            sr = np.where(rng.random(sr.shape) < 0.5, sr, np.abs(sr) % len(E)).astype(np.int64)
        rows = {}
        for mode in ("off", "on"):
            monkeypatch.setenv("HBFD_ACCEL", mode)
            bp = np.full((planes, P), 3, np.int64)
            br = np.full((planes, P), 5, np.int64)
            engine_mod._buffer_rows(bp, br, up, sp, sr, E, pready)
            rows[mode] = (bp, br)
        assert all(np.array_equal(a, b) for a, b in zip(rows["off"], rows["on"]))
    assert min(cases.values()) > 20, cases
    assert engine_mod._read_ready.is_compiled() and engine_mod._buf_rows.is_compiled()


def _hot_stream(g, n, seed):
    """Mixed stream whose pages repeat (a small hot set): reads of pages just read or written hit a page buffer."""
    s = make_stream(g, n, 4096, "mixed", 0 if seed % 2 else 40, seed=seed, write_fraction=0.2)
    rng = np.random.default_rng(seed)
    s["media_address"] = (rng.integers(0, 600, n) * 4096).astype(np.uint64)
    return s


def test_engine_runs_off_equal_on_through_the_glue_twins(monkeypatch):
    """Engine runs (mixed, hot pages, burst and spaced arrivals) give the same completions and stats with the twins
    off and on, each of the six twins reached; with ``_event_decide`` deciding one command less, or ``_read_ready``
    readying a coalesced read 1 ns late, the results differ (the twins are what the runs use)."""
    g = _geometry("nominal", "profile")
    # (the scheduler's steps one by one: where the fused call kernels._event_run applies it holds _event_inputs and
    # _event_decide compiled in; it gives the same results, tests/media/test_event_run.py)
    monkeypatch.setattr(engine_mod, "_event_run_ok", lambda *a: False)
    calls = {"_event_decide": 0, "_read_ready": 0, "_buf_rows": 0, "_event_inputs": 0, "_split_items": 0,
             "_event_merge": 0}
    for name in calls:
        orig = getattr(engine_mod, name)

        def counted(*a, _o=orig, _n=name):
            calls[_n] += 1
            return _o(*a)
        monkeypatch.setattr(engine_mod, name, counted)
    runs = []
    for seed in (1, 2, 3, 4):
        stream = _hot_stream(g, 6000, seed)
        sizes = [500, 1500, 2000, 2000]
        adv = [True, seed % 2 == 0, True, False]
        monkeypatch.setenv("HBFD_ACCEL", "off")
        ref = _engine_run(g, stream, sizes, adv)
        monkeypatch.setenv("HBFD_ACCEL", "on")
        got = _engine_run(g, stream, sizes, adv)
        assert ref[1] == got[1] and all(np.array_equal(x, y) for x, y in zip(ref[0], got[0]))
        runs.append((stream, sizes, adv, ref))
    assert min(calls.values()) > 3, calls
    assert sum(r[3][1]["counts"]["buffer_hits"] for r in runs) > 100
    assert sum(r[3][1]["counts"]["coalesced_reads"] for r in runs) > 100
    from hbfd.media import kernels as K

    def one_less(*a):
        dec, sd, st = K._event_decide(*a)
        k = np.flatnonzero(dec & (a[0] != READ))
        if len(k):
            dec = dec.copy()
            dec[k[-1]] = False
        return dec, sd, st

    def late(*a):
        rd, q0, nh, nco = K._read_ready(*a)
        c = np.flatnonzero(~a[3] & (rd > a[0] + a[1]))
        if len(c):
            rd = rd.copy()
            rd[c[0]] += 1
        return rd, q0, nh, nco
    monkeypatch.setenv("HBFD_ACCEL", "on")
    for name, bad in (("_event_decide", one_less), ("_read_ready", late)):
        monkeypatch.setattr(engine_mod, name, bad)
        diff = False
        for stream, sizes, adv, ref in runs:
            got = _engine_run(g, stream, sizes, adv)
            diff |= ref[1] != got[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], got[0]))
        assert diff, name
        monkeypatch.setattr(engine_mod, name, getattr(K, name))


def test_event_inputs_twin_equals_numpy(monkeypatch):
    """``engine._event_inputs_of`` (``kernels._event_inputs``): the scheduler's nine arrays, reads first then the
    commands, gated ones (their base, their gate_x) and ungated ones (base + gx), off vs on; no read, no command."""
    rng = np.random.default_rng(113)
    for _ in range(600):
        n = int(rng.choice([0, 1, 50, 900]))
        nc = int(rng.choice([0, 1, 30, 500]))
        r_read, plane_read = rng.integers(0, 10**6, n).astype(np.int64), rng.integers(0, 2048, n).astype(np.int64)
        die_read = plane_read // 16
        ri = np.flatnonzero(rng.random(n) < rng.random())
        allc = {"kind": rng.choice([PROG, ERASE], nc).astype(np.uint8),
                "plane": rng.integers(0, 2048, nc).astype(np.int64), "svc": rng.integers(1, 10**6, nc).astype(np.int64),
                "join": np.where(rng.random(nc) < 0.2, rng.integers(0, 10**6, nc), -1).astype(np.int64),
                "floor": np.where(rng.random(nc) < 0.2, rng.integers(0, 10**6, nc), 0).astype(np.int64)}
        allc["die"] = allc["plane"] // 16
        base = rng.integers(0, 10**6, nc).astype(np.int64)
        gx = rng.integers(0, 5000, nc).astype(np.int64)
        gidx = np.where(rng.random(nc) < 0.4, rng.integers(0, max(1, len(ri) + nc), nc), -1).astype(np.int64)
        out = {}
        for mode in ("off", "on"):
            monkeypatch.setenv("HBFD_ACCEL", mode)
            out[mode] = engine_mod._event_inputs_of(ri, r_read, plane_read, die_read, 7000, allc, base, gx, gidx)
        for a, b in zip(out["off"], out["on"]):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    assert engine_mod._event_inputs.is_compiled()


def test_split_rows_twin_equals_numpy(monkeypatch):
    """``engine._split_rows`` (``kernels._split_items``): a batch's channel items split into decided and deferred
    rows, in order, off vs on: none, all, some committed; one row."""
    rng = np.random.default_rng(114)
    keys = engine_mod.MediaEngine._DQ_KEYS
    for _ in range(300):
        n = int(rng.choice([1, 7, 300, 5000]))
        new = {k: rng.integers(-5, 10**9, n).astype(np.int64) for k in keys}
        commit = rng.random(n) < rng.choice([0.0, 0.3, 1.0])
        out = {}
        for mode in ("off", "on"):
            monkeypatch.setenv("HBFD_ACCEL", mode)
            out[mode] = engine_mod._split_rows(new, commit)
        for a, b in zip(out["off"], out["on"]):
            if isinstance(a, dict):
                assert list(a) == list(b)
                assert all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)
            else:
                assert a.dtype == b.dtype and np.array_equal(a, b)
    assert engine_mod._split_items.is_compiled()


def test_events_in_seq_twin_equals_numpy(monkeypatch):
    """``engine._events_in_seq`` (``kernels._event_merge``): reads and invalidations in seq order, a read first on an
    equal seq, off vs on; parts out of order (the twin declines, the sort decides), an empty part."""
    rng = np.random.default_rng(115)
    declined = 0
    for _ in range(400):
        n, m = int(rng.choice([0, 1, 40, 3000])), int(rng.choice([1, 5, 400]))
        seq = np.sort(rng.integers(0, 3 * (n + m), n)).astype(np.int64)
        iseq = np.sort(rng.integers(0, 3 * (n + m), m)).astype(np.int64)
        if n and rng.random() < 0.3:
            iseq[: m // 2] = rng.choice(seq, m // 2)            # equal seqs: the read first
        if rng.random() < 0.15:
            (seq if n > 1 and rng.random() < 0.5 else iseq)[::-1].sort()   # descending: declined
            declined += 1
        plane, lpn = rng.integers(0, 64, n).astype(np.int64), rng.integers(0, 10**6, n).astype(np.int64)
        inval = (rng.integers(0, 64, m).astype(np.int64), rng.integers(0, 10**6, m).astype(np.int64), iseq)
        out = {}
        for mode in ("off", "on"):
            monkeypatch.setenv("HBFD_ACCEL", mode)
            out[mode] = engine_mod._events_in_seq(plane, lpn, seq, inval)
        for a, b in zip(out["off"], out["on"]):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    assert declined > 20
    assert engine_mod._event_merge.is_compiled()
