"""Media engine round 12 (issue 14 item 5): the mixed batch's front in compiled passes that give the numpy
definitions' results bit for bit, and a changed twin is seen:

* ``engine._mixed_front_of`` (``kernels._mixed_front``: ``_serve_mixed``'s page transactions -> the programs' inputs,
  the media reads, the buffer invalidations and the stores' data-in items, the write backpressure ring in place) off
  vs on, on random transactions (every op, partial and full stores, media and program subsets as the write buffer
  leaves them, rings with and without ids), on power-of-two and other geometries;
* ``kernels._mixed_req`` (``_serve``'s way in: the transactions of requests within a page, every store filling one)
  against the numpy composition (``_expand``, the seqs, ``_mixed_front_of``): declined (ring untouched) where a
  request spans pages or a store does not fill its page;
* ``kernels._read_front``'s three answers (every request a read; some stores; the numpy path) and its int64 arrays;
* ``kernels._carry_keep`` (round 12: each die's q largest by ``_keep_tail``, insertion from the end, with an in-place
  quickselect where that makes too many moves) against ``DieCarry._cut`` on both ways' hard inputs (sorted, nearly
  sorted, reversed, all equal, ties at the q-th value, random);
* ``engine._split_waiting_of`` (``kernels._split_waiting``: ``submit``'s pending rows and completion rows of a batch
  some of whose requests wait) off vs on, ids taken from the batch's structured array;
* engine runs (mixed, atomics, partial stores, requests across pages, loads hitting the write buffer) off vs on: the
  same completions and stats, the compiled front reached and declined.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hbfcommon import ctl
from hbfd.media import engine as engine_mod
from hbfd.media import kernels as K
from hbfd.media.bench import make_stream
from hbfd.media.diestage import DieCarry
from hbfd.media.geometry import PAGE_BYTES, SECTOR_BYTES, SECTORS_PER_PAGE
from hbfd.media.engine import OP_ATOMIC, OP_STORE, MediaEngine

from test_accel_media import _engine_run, _geometry

pytest.importorskip("numba")


def _front_case(rng, g):
    n = int(rng.choice([0, 1, 7, 64, 65, 300, 2000]))
    pages = g.capacity_bytes // PAGE_BYTES
    ta = np.sort(rng.integers(0, 10**6, n)).astype(np.int64)
    lpn = rng.integers(0, pages, n).astype(np.int64)
    if n and rng.random() < 0.5:                   # hot pages: a few planes, rings that fill up
        lpn = rng.choice(lpn[: max(1, n // 20)], n).astype(np.int64)
    nsec = np.where(rng.random(n) < 0.6, SECTORS_PER_PAGE, rng.integers(1, SECTORS_PER_PAGE + 1, n)).astype(np.int64)
    top = rng.choice([0, OP_STORE, OP_ATOMIC, 3], n, p=[0.4, 0.35, 0.1, 0.15]).astype(np.int64)
    seq = 2 * (int(rng.integers(0, 10**6)) + np.arange(n, dtype=np.int64))
    tser = int(rng.integers(0, 10**6)) + np.arange(n, dtype=np.int64)
    is_st = (top == OP_STORE) | (top == OP_ATOMIC)
    media = top != OP_STORE
    media &= rng.random(n) < 0.9                   # (write-buffer hits need no media read)
    st = np.flatnonzero(is_st)
    ptx = np.sort(rng.choice(st, int(rng.integers(0, len(st) + 1)), replace=False)).astype(np.int64) \
        if len(st) else np.zeros(0, np.int64)
    B = g.page_buffers_per_plane
    R = np.where(rng.random((g.planes, B)) < 0.5, -1, rng.integers(0, 10**5, (g.planes, B))).astype(np.int64)
    pid0 = int(rng.integers(0, 10**6))
    return ta, lpn, nsec, top, seq, tser, media, ptx, R, pid0


def _geoms():
    g = _geometry("nominal", "profile")
    return (g, dataclasses.replace(g, channels=3, dies_per_channel=5, planes_per_die=6),
            _geometry("ocp-sg1", "profile"))


def test_mixed_front_twin_equals_numpy(monkeypatch):
    rng = np.random.default_rng(1201)
    eng = MediaEngine(_geometry("nominal", "profile"))
    xfer = eng._xfer_by_sectors
    seen = set()
    for _ in range(400):
        for g in _geoms():
            pow2 = all(x & (x - 1) == 0 for x in (g.channels, g.dies_per_channel, g.planes_per_die))
            ta, lpn, nsec, top, seq, tser, media, ptx, R, pid0 = _front_case(rng, g)
            out = {}
            for mode in ("off", "on"):
                monkeypatch.setenv("HBFD_ACCEL", mode)
                r = R.copy()
                out[mode] = (engine_mod._mixed_front_of(ta, lpn, nsec, top, seq, tser, media, ptx, r, pid0, g, xfer,
                                                        pow2), r)
            (a, ra), (b, rb) = out["off"], out["on"]
            assert np.array_equal(ra, rb)
            assert len(a) == len(b) == 27
            for x, y in zip(a, b):
                if isinstance(x, np.ndarray):
                    assert y.dtype == np.int64 and np.array_equal(x, y)
                else:
                    assert type(x) is type(y) and x == y
            seen.add((len(lpn) >= engine_mod._FRONT_TWIN_MIN, pow2, bool(len(ptx)), bool((a[5] >= 0).any())))
    assert K._mixed_front.is_compiled()
    assert {(True, True, True, True), (True, False, True, True), (False, True, True, True)} <= seen, seen


def _requests(rng, g, n):
    pages = g.capacity_bytes // PAGE_BYTES
    a = np.sort(rng.integers(0, 10**6, n)).astype(np.int64)
    addr = rng.integers(0, pages - 2, n).astype(np.int64) * PAGE_BYTES
    nb = np.full(n, PAGE_BYTES, np.int64)
    op = rng.choice([0, OP_STORE, OP_ATOMIC, 3], n, p=[0.6, 0.25, 0.05, 0.1]).astype(np.int64)
    r = rng.random()
    if r < 0.25:                                   # a load within its page, at an offset
        i = int(rng.integers(0, n))
        if op[i] not in (OP_STORE, OP_ATOMIC):
            addr[i] += SECTOR_BYTES * int(rng.integers(0, 8))
            nb[i] = SECTOR_BYTES * int(rng.integers(1, 9))
    elif r < 0.4:                                  # a request across two pages
        i = int(rng.integers(0, n))
        addr[i] += PAGE_BYTES // 2
    elif r < 0.55:                                 # a store of part of a page
        i = int(rng.integers(0, n))
        op[i] = OP_STORE
        nb[i] = PAGE_BYTES - SECTOR_BYTES
    elif r < 0.6:                                  # a store that fills its page at the last byte
        i = int(rng.integers(0, n))
        op[i] = OP_STORE
        nb[i] = PAGE_BYTES - 1
    return a, addr, nb, op


def test_mixed_req_equals_the_numpy_composition(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "off")
    rng = np.random.default_rng(1202)
    seen = set()
    for _ in range(300):
        for g in _geoms():
            pow2 = all(x & (x - 1) == 0 for x in (g.channels, g.dies_per_channel, g.planes_per_die))
            eng = MediaEngine(g)
            n = int(rng.choice([1, 5, 64, 500]))
            a, addr, nb, op, = _requests(rng, g, n)
            serial = int(rng.integers(0, 1000)) + np.arange(n, dtype=np.int64)
            seq0 = int(rng.integers(0, 10**6))
            pid0 = int(rng.integers(0, 10**6))
            R = np.where(rng.random(eng._ring.shape) < 0.5, -1, rng.integers(0, 10**5, eng._ring.shape)).astype(np.int64)
            r1 = R.copy()
            got = K._mixed_req(a, addr, nb, op, serial, seq0, r1, pid0, g.channels, g.dies_per_channel,
                               g.planes_per_die, eng._xfer_by_sectors, g.t_cmd_ns, OP_STORE, OP_ATOMIC, PAGE_BYTES,
                               SECTOR_BYTES)
            req, lpn, slo, shi = eng._expand(a, addr, nb)
            is_st = (op == OP_STORE) | (op == OP_ATOMIC)
            ok = req is None and not (is_st & (shi - slo != SECTORS_PER_PAGE)).any()
            seen.add(ok)
            assert bool(got[0]) == ok
            if not ok:
                assert np.array_equal(r1, R) and len(got[1]) == 0 and all(len(x) == 0 for x in got[6:])
                continue
            seq = 2 * (seq0 + np.arange(n, dtype=np.int64))
            r2 = R.copy()
            ref = engine_mod._mixed_front_of(a, lpn, shi - slo, op, seq, serial, op != OP_STORE,
                                             np.flatnonzero(is_st), r2, pid0, g, eng._xfer_by_sectors, pow2)
            assert np.array_equal(got[1], shi - slo)
            assert np.array_equal(r1, r2)
            assert tuple(int(x) for x in got[2:6]) == ref[:4]
            for x, y in zip(ref[4:], got[6:]):
                assert np.array_equal(x, y)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    assert seen == {True, False}


def test_read_front_answers(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "on")
    g = _geometry("nominal", "profile")
    b = make_stream(g, 500, 4096, "mixed", 10, seed=3, write_fraction=0.2)
    cap = g.capacity_bytes
    args = (cap, ctl.HBF_N_OPS, OP_STORE, OP_ATOMIC, 1 << 62)

    def front(x):
        return K._read_front(x["arrival_ns"], x["media_address"], x["bytes"], x["op"], *args)
    a, ad, nb, op, code = front(b)
    assert code == 1
    for got, k in ((a, "arrival_ns"), (ad, "media_address"), (nb, "bytes"), (op, "op")):
        assert got.dtype == np.int64 and np.array_equal(got, b[k].astype(np.int64))
    r = b.copy()
    r["op"] = ctl.HBF_OP_LOAD
    assert front(r)[4] == 2
    for bad in ("op", "bytes", "order", "addr"):
        x = b.copy()
        if bad == "op":
            x["op"][100] = ctl.HBF_N_OPS
        elif bad == "bytes":
            x["bytes"][100] = 0
        elif bad == "order":
            x["arrival_ns"][100] = x["arrival_ns"][99] - 1
        else:
            x["media_address"][100] = cap - 64
        assert front(x)[4] == 0, bad


def test_split_waiting_twin_equals_numpy(monkeypatch):
    rng = np.random.default_rng(1204)
    g = _geometry("nominal", "profile")
    for _ in range(300):
        n = int(rng.choice([1, 255, 256, 700, 3000]))
        b = make_stream(g, n, 4096, "mixed", 50, seed=int(rng.integers(1000)), write_fraction=0.3)
        b["id"] = rng.integers(0, 1 << 63, n).astype(np.uint64) * 2 + 1      # (ids above 2^63 too)
        p = rng.random()
        cnt = np.where(rng.random(n) < p, 0, rng.integers(1, 4, n)).astype(np.int64)
        serial = int(rng.integers(0, 10**6)) + np.arange(n, dtype=np.int64)
        arrival = b["arrival_ns"].astype(np.int64)
        done = arrival + rng.integers(0, 10**5, n)
        out = {}
        for mode in ("off", "on"):
            monkeypatch.setenv("HBFD_ACCEL", mode)
            out[mode] = engine_mod._split_waiting_of(cnt, serial, b["id"], arrival, done)
        for x, y in zip(out["off"], out["on"]):
            assert x.dtype == y.dtype and np.array_equal(x, y)
    assert K._split_waiting.is_compiled()


def test_carry_keep_hard_inputs(monkeypatch):
    rng = np.random.default_rng(1203)
    for q in (1, 2, 31, 32, 33, 64, 512):
        for shape in ("asc", "nearly", "desc", "equal", "ties", "two", "random"):
            for dies, per in ((1, 5000), (128, 130), (7, 3 * q + 1)):
                n = dies * per
                d = np.repeat(np.arange(dies, dtype=np.int64), per)
                if shape == "asc":
                    t = np.arange(n, dtype=np.int64)
                elif shape == "nearly":            # (a die's releases in index order: ascending, with jitter)
                    t = np.arange(n, dtype=np.int64) * 10 + rng.integers(0, 400, n)
                elif shape == "desc":
                    t = np.arange(n, 0, -1, dtype=np.int64)
                elif shape == "equal":
                    t = np.full(n, 7, np.int64)
                elif shape == "two":
                    t = rng.integers(0, 2, n).astype(np.int64)
                elif shape == "ties":              # many copies of the q-th largest value of each die
                    t = rng.integers(0, 5, n).astype(np.int64) * 100
                else:
                    t = rng.integers(0, 10**9, n).astype(np.int64)
                perm = rng.permutation(n) if rng.random() < 0.5 else np.arange(n)
                d, t = d[perm], t[perm]
                ref = DieCarry(dies, q)._cut(d, t)
                got = K._carry_keep(d, t, dies, q)
                for x, y in zip(ref, got):
                    assert np.array_equal(x, y), (q, shape, dies)


@pytest.mark.parametrize("case", ["mixed", "atomics", "partial", "spans", "wbuf", "reads-after-writes"])
def test_engine_off_equals_on_through_the_front(monkeypatch, case):
    g = _geometry("nominal", "profile")
    rng = np.random.default_rng(hash(case) % 1000)
    n = 4000
    s = make_stream(g, n, 4096, "mixed", 0 if case in ("mixed", "spans") else 200, seed=7, write_fraction=0.3)
    hot = rng.integers(0, 400, n).astype(np.uint64) * PAGE_BYTES
    s["media_address"] = np.where(rng.random(n) < 0.3, hot, s["media_address"])
    if case == "atomics":
        s["op"][rng.random(n) < 0.05] = ctl.HBF_OP_ATOMIC
    elif case == "partial":
        k = rng.random(n) < 0.01
        s["op"][k] = ctl.HBF_OP_STORE
        s["bytes"][k] = 512
    elif case == "spans":
        k = rng.random(n) < 0.01
        s["media_address"][k] += PAGE_BYTES // 2
    elif case == "wbuf":                          # partial stores filled later, loads of their pages between
        m = np.flatnonzero(rng.random(n) < 0.02)
        s["op"][m] = ctl.HBF_OP_STORE
        s["bytes"][m] = PAGE_BYTES // 2
        s["media_address"][m] = hot[m]
        m2 = m[m + 1 < n] + 1
        s["op"][m2] = ctl.HBF_OP_STORE
        s["bytes"][m2] = PAGE_BYTES // 2
        s["media_address"][m2] = hot[m2 - 1] + PAGE_BYTES // 2
    elif case == "reads-after-writes":             # batches of reads alone while programs are pending (the front's
        s["op"][:1500] = ctl.HBF_OP_STORE           # second answer, the compiled read pass not allowed)
        s["op"][1500:] = ctl.HBF_OP_LOAD
    sizes = [300, 1200, 500, 2000]
    adv = [True, False, True, True]
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref, st_ref = _engine_run(g, s, sizes, adv)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    seen = []
    orig = engine_mod._mixed_req

    def spy(*a):
        out = orig(*a)
        seen.append(bool(out[0]))
        return out
    monkeypatch.setattr(engine_mod, "_mixed_req", spy)
    got, st_got = _engine_run(g, s, sizes, adv)
    assert st_ref == st_got and all(np.array_equal(x, y) for x, y in zip(ref, got))
    assert seen and (True in seen if case in ("mixed", "atomics", "reads-after-writes") else False in seen), seen


def test_a_changed_front_is_seen(monkeypatch):
    """The engine test above fails when the compiled front readies a store's data-in 1 ns late, or has a read
    arrive 1 ns late."""
    g = _geometry("nominal", "profile")
    s = make_stream(g, 3000, 4096, "mixed", 0, seed=8, write_fraction=0.3)
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref, st_ref = _engine_run(g, s, [1500, 1500], [True, True])
    monkeypatch.setenv("HBFD_ACCEL", "on")
    orig = engine_mod._mixed_req
    for k, delta in ((26, 1), (14, 1)):           # (a store's data-in ready; a read's arrival)

        def bad(*a, k=k, delta=delta):
            out = list(orig(*a))
            if out[0] and len(out[k]):
                out[k] = out[k].copy()
                out[k][len(out[k]) // 2] += delta
            return tuple(out)
        monkeypatch.setattr(engine_mod, "_mixed_req", bad)
        got, st_got = _engine_run(g, s, [1500, 1500], [True, True])
        assert st_ref != st_got or any(not np.array_equal(x, y) for x, y in zip(ref, got)), k
