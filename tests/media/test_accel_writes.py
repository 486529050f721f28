"""The write path's compiled twins and buffers (issue 14 item 5, round 3) give the numpy definitions' results
bit for bit, and a changed twin is seen:

* ``kernels._latest_q`` (``engine._latest_per_die``) and ``kernels._carry_keep`` (``DieCarry.put``'s cut)
  against numpy on random release sets (ties, negative times, one die, many);
* ``eventsim._plane_pass`` (its queue-depth check ``_qd_loop`` and the program chains ``_chains_loop``) and
  ``MediaEngine._tail_plane`` (the pending-set scan ``_tail_scan``, ``_pid_map``) called off and on, side by
  side, with the inputs the engine gives them on write and mixed streams: every output and in-place array equal;
* ``_ring_push`` (``kernels._ring_loop``), ``_max_at`` (``kernels._extreme_at``) and ``_Ends.get``
  (``kernels._ends_get``) against numpy;
* ``engine._Bufs`` (the pending set's growable buffers): an array handed out never changes while live;
* ``engine._Ends``: its window stays proportional to the ids in use (it doubled at every rebase: 24 GiB
  asked for after ~290k write requests at 10 % load on nominal);
* whole engine runs of write streams off vs on are in test_accel_media.py; here, a twin whose outputs are
  changed is seen in them.
"""
from __future__ import annotations

import copy
import os

import numpy as np
import pytest

from hbfd.media import diestage, eventsim
from hbfd.media import engine as engine_mod
from hbfd.media.bench import make_stream
from hbfd.media.diestage import DieCarry

from test_accel_media import _engine_run, _geometry

pytest.importorskip("numba")


def _release_sets(rng):
    for n in (1, 5, 255, 256, 257, 1000, 20_000):
        for dies, span, lo in ((1, 10, 0), (7, 10**6, -(10**5)), (128, 50, 0), (128, 10**12, 0)):
            yield rng.integers(0, dies, n).astype(np.int64), rng.integers(lo, lo + span, n).astype(np.int64), dies


def test_latest_per_die_twin_equals_numpy(monkeypatch):
    rng = np.random.default_rng(5)
    for cd, ct, dies in _release_sets(rng):
        for q in (1, 2, 32):
            monkeypatch.setenv("HBFD_ACCEL", "off")
            ref = engine_mod._latest_per_die(cd, ct, dies, q)
            monkeypatch.setenv("HBFD_ACCEL", "on")
            got = engine_mod._latest_per_die(cd, ct, dies, q)
            for a, b in zip(ref, got):
                assert a.dtype == b.dtype and np.array_equal(a, b)
    assert engine_mod._latest_q.is_compiled()


def test_carry_cut_twin_equals_numpy(monkeypatch):
    rng = np.random.default_rng(6)
    for cd, ct, dies in _release_sets(rng):
        for q in (1, 4, 32):
            for horizon in (-(1 << 40), int(np.median(ct))):
                out = []
                for mode in ("off", "on"):
                    monkeypatch.setenv("HBFD_ACCEL", mode)
                    c = DieCarry(dies, q)
                    c.put(cd[: len(cd) // 3], ct[: len(ct) // 3], horizon)
                    c.put(cd[len(cd) // 3:], ct[len(ct) // 3:], horizon)
                    out.append((c.die, c.t))
                for a, b in zip(*out):
                    assert a.dtype == b.dtype and np.array_equal(a, b)
    assert diestage._carry_keep.is_compiled()


def test_ring_push_and_extreme_at_twins_equal_numpy(monkeypatch):
    """``_ring_push`` (twin ``_ring_loop``) and ``_max_at`` (twin ``_extreme_at``, max and min) off vs on, on random
    batches around the twins' thresholds: the same gates, ids, rings and results."""
    rng = np.random.default_rng(12)
    for B in (1, 2, 3):
        rings = {m: np.full((40, B), -1, np.int64) for m in ("off", "on")}
        pid = 0
        for _ in range(60):
            n = int(rng.choice([0, 1, 63, 64, 65, 500, 3000]))
            plane = rng.integers(0, 40, n).astype(rng.choice([np.int64, np.int32, np.int16]))
            fill = rng.random(n) < rng.random()
            out = {}
            for m in ("off", "on"):
                monkeypatch.setenv("HBFD_ACCEL", m)
                out[m] = engine_mod._ring_push(rings[m], plane, fill, pid)
            pid += int(fill.sum())
            assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(out["off"], out["on"]))
            assert np.array_equal(rings["off"], rings["on"])
    for n in (0, 255, 256, 257, 10_000):
        for larger in (True, False):
            base = rng.integers(-(1 << 40), 1 << 40, 50)
            idx = rng.integers(0, 50, n)
            val = rng.integers(-(1 << 41), 1 << 41, n)
            res = {}
            for m in ("off", "on"):
                monkeypatch.setenv("HBFD_ACCEL", m)
                res[m] = base.copy()
                engine_mod._max_at(res[m], idx, val, larger)
            assert np.array_equal(res["off"], res["on"])


def test_ends_get_twin_equals_numpy(monkeypatch):
    """``_Ends.get`` (twin ``_ends_get``) off vs on: ids in the window, below it among the old ones kept and not,
    above it, negative; around the twin's threshold."""
    rng = np.random.default_rng(14)
    e = engine_mod._Ends()
    top = 0
    for step in range(60):
        ids = np.arange(top, top + int(rng.integers(1, 3000)), dtype=np.int64)
        e.set(ids, rng.integers(0, 1 << 40, len(ids)))
        top = int(ids[-1]) + 1
        if step % 7 == 6:
            base = max(0, top - int(rng.integers(100, 5000)))
            e.rebase(base, rng.integers(0, max(base, 1), 50))
        for n in (255, 256, 4000):
            q = rng.integers(-5, top + 100, n)
            if len(e.old_id):
                q[: n // 4] = rng.choice(e.old_id, n // 4)
            out = {}
            for m in ("off", "on"):
                monkeypatch.setenv("HBFD_ACCEL", m)
                out[m] = e.get(q)
            assert out["off"].dtype == out["on"].dtype and np.array_equal(out["off"], out["on"])
    assert len(e.old_id) and engine_mod._ends_get.is_compiled()


def test_bucket_sort_sorts():
    """``eventsim._bucket_sort`` (the queue-depth check's per-die sort) equals ``np.sort``: sizes around its
    insertion-sort cut, ties, clusters, values outside [lo, hi] (the releases outside a die's admissions)."""
    rng = np.random.default_rng(13)
    f = eventsim._bucket_sort.accel_dispatcher()
    for n in (0, 1, 2, 31, 32, 33, 100, 1000, 5000):
        for kind in ("uniform", "ties", "cluster", "outside"):
            x = rng.integers(0, 10**9, n)
            if kind == "ties":
                x = rng.integers(0, 5, n)
            elif kind == "cluster":
                x = np.where(rng.random(n) < 0.9, rng.integers(0, 100, n), rng.integers(0, 10**12, n))
            lo, hi = (int(x.min()), int(x.max())) if n else (0, 0)
            if kind == "outside" and n:
                lo, hi = int(np.percentile(x, 20)), int(np.percentile(x, 70))
            y = x.astype(np.int64)
            f(y, lo, hi, max(1, n // 2), np.empty(n + 2, np.int64), np.empty(max(n, 1), np.int64))
            assert np.array_equal(y, np.sort(x))


def _snap(x):
    return copy.deepcopy(x)


def _same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


STREAMS = [("nominal", "write", 0.0, None, "profile"), ("nominal", "write", 0.0, 0.1, "profile"),
           ("nominal", "mixed", 0.5, None, "profile"), ("ocp-sg2", "write", 0.0, 0.5, "profile"),
           ("conservative", "mixed", 0.8, 0.3, "small"), ("nominal", "write", 0.0, None, "small")]


def _stream(prof, op, wf, load, qd, n=12_000, seed=3):
    g = _geometry(prof, qd)
    gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
    s = make_stream(g, n, 4096, op, gap, seed=seed, write_fraction=wf)
    rng = np.random.default_rng(seed)
    sizes, tot = [], 0
    while tot < n:
        sizes.append(int(rng.choice([300, 1500, 2500, 4000])))
        tot += sizes[-1]
    return g, s, sizes, list(rng.random(len(sizes)) < 0.8)


def _runs_equal_off_and_on(monkeypatch, streams, n=20_000) -> None:
    """Engine runs of each ``_stream`` spec with the twins off and on give the same completions and stats."""
    for args in streams:
        g, stream, sizes, adv = _stream(*args, n=n)
        monkeypatch.setenv("HBFD_ACCEL", "off")
        ref = _engine_run(g, stream, sizes, adv)
        monkeypatch.setenv("HBFD_ACCEL", "on")
        got = _engine_run(g, stream, sizes, adv)
        assert ref[1] == got[1] and all(np.array_equal(x, y) for x, y in zip(ref[0], got[0])), args


@pytest.mark.parametrize("prof,op,wf,load,qd", STREAMS, ids=["-".join(map(str, c)) for c in STREAMS])
def test_write_path_twins_side_by_side(monkeypatch, prof, op, wf, load, qd):
    """Each call of ``_plane_pass`` and ``_tail_plane`` in an engine run with the twins on is made again with
    them off on copies of its inputs (and the engine's counters put back): the same outputs and in-place
    arrays. The runs reach the twins (their sizes over the thresholds) and the queue-depth check marks dies."""
    g, stream, sizes, adv = _stream(prof, op, wf, load, qd)
    seen = {"pass": 0, "tail": 0, "qd_bad": 0, "tail_kept": 0}
    pp = eventsim._plane_pass

    def plane_pass(*a, **kw):
        mode = os.environ["HBFD_ACCEL"]        # (off inside _tail_plane's reference call below)
        a0, kw0 = _snap(a), _snap(kw)
        monkeypatch.setenv("HBFD_ACCEL", "off")
        pp(*a0, **kw0)
        monkeypatch.setenv("HBFD_ACCEL", "on")
        pp(*a, **kw)
        monkeypatch.setenv("HBFD_ACCEL", mode)
        assert _same(a0, a) and _same(kw0, kw)
        seen["pass"] += 1
        seen["qd_bad"] += int(a[14].sum())
    tp = engine_mod.MediaEngine._tail_plane

    def tail_plane(self, P, N, nd):
        ctr = (self._tail_kept, self._tail_redone)
        monkeypatch.setenv("HBFD_ACCEL", "off")
        ref = tp(self, _snap(P), _snap(N), nd.copy())
        gref = _snap(self._tail_gates_found) if ref is not None else None
        ctr_ref = (self._tail_kept, self._tail_redone)
        self._tail_kept, self._tail_redone = ctr
        monkeypatch.setenv("HBFD_ACCEL", "on")
        got = tp(self, P, N, nd)
        assert _same(ref, got)
        if ref is not None:
            assert _same(gref, self._tail_gates_found)
            assert ctr_ref == (self._tail_kept, self._tail_redone)
            seen["tail_kept"] += ctr_ref[0] - ctr[0]
        seen["tail"] += 1
        return got
    monkeypatch.setattr(eventsim, "_plane_pass", plane_pass)
    monkeypatch.setattr(engine_mod.MediaEngine, "_tail_plane", tail_plane)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    _engine_run(g, stream, sizes, adv)
    assert seen["pass"] and seen["tail"] and seen["tail_kept"] > (1000 if op == "write" else 100), seen
    if qd == "small":
        assert seen["qd_bad"], seen


def test_bufs_never_change_a_live_array():
    """Random appends and rewrites of ``_Bufs``: the pending set a batch starts from, and every array handed
    out in the batch, keep their contents to the end of the batch; appends equal ``np.concatenate``."""
    rng = np.random.default_rng(9)
    b = engine_mod._Bufs()
    pq = {"x": np.arange(10, dtype=np.int64)}
    for _ in range(300):
        b.begin(pq)
        live = [(pq["x"], pq["x"].copy())]
        cur = pq["x"]
        for _ in range(int(rng.integers(1, 4))):
            op = rng.integers(3)
            if op == 0:
                new = rng.integers(0, 100, int(rng.integers(0, 50)))
                ref = np.concatenate([cur, new])
                cur = b.cat("x", cur, new)
                assert np.array_equal(cur, ref)
            elif op == 1:
                o = b.out("x", int(rng.integers(1, 80)), np.int64, cur)
                o[:] = rng.integers(0, 100, len(o))
                cur = o
            else:
                cur = cur[rng.random(len(cur)) < 0.7].copy() if len(cur) else cur
            live.append((cur, cur.copy()))
            for a, c in live:
                assert np.array_equal(a, c)
        pq = {"x": cur}


def test_ends_window_stays_bounded():
    """``_Ends``: ids set in order, the window rebased past the old ones (as _prune_ends does): its length stays
    within a few times the ids in use (before: doubled at each rebase)."""
    e = engine_mod._Ends()
    top = 0
    for k in range(200):
        ids = np.arange(top, top + 3000, dtype=np.int64)
        e.set(ids, ids * 7)
        top += 3000
        base = max(0, top - 20_000)
        e.rebase(base, np.array([base - 1, base - 5], np.int64) if base > 5 else np.zeros(0, np.int64))
        assert len(e) <= 4 * (top - base) + 1024, (k, len(e))
        q = np.array([top - 1, base, top, base - 1], np.int64)
        assert e.get(q).tolist() == [(top - 1) * 7, base * 7, -1, (base - 1) * 7 if base > 5 else -1]


def _shift(i, by):
    def f(o):
        out = list(o)
        out[i] = out[i] + by
        return tuple(out)
    return f


@pytest.mark.parametrize("mod,name,how", [
    (engine_mod, "_pending_fields", "base"),
    (engine_mod, "_pending_take", "take"),
    (engine_mod, "_tail_scan", "pf"),
    (engine_mod, "_ngate_scan", "ngate"),
    (engine_mod, "_ngate_bases", "nbase"),
    (eventsim, "_chains_loop", "end"),
    (eventsim, "_qd_loop", "skip"),
    (diestage, "_carry_keep", "t"),
    (engine_mod, "_pid_map", "map"),
    (engine_mod, "_mixed_req", "ring"),
    (engine_mod, "_extreme_at", "at"),
    (engine_mod, "_ends_get", "ends")],
    ids=["fields", "take", "scan", "ngate", "nbase", "chains", "qd", "carry", "pidmap", "ring", "at", "ends"])
def test_a_changed_write_twin_is_seen(monkeypatch, mod, name, how):
    """The engine comparison (completions and stats) fails when a write-path twin's outputs are changed."""
    if how == "take":                          # (pending fields matter where commands are scheduled again)
        g, stream, sizes, adv = _stream("nominal", "mixed", 0.5, 0.5, "profile")
    elif how == "nbase":                       # (every pending command kept: a write stream under load)
        g, stream, sizes, adv = _stream("nominal", "write", 0.0, 0.1, "profile")
    elif how in ("base", "t"):                 # (_pending_fields alone: where nothing is decided, a burst;
        # DieCarry.put's cut: the event path of mixed batches, _behind_pending's goes through _decided_put)
        g, stream, sizes, adv = _stream("nominal", "mixed", 0.5, None, "profile")
    else:
        g, stream, sizes, adv = _stream("nominal", "write", 0.0, None, "small" if how == "skip" else "profile")
    monkeypatch.setenv("HBFD_ACCEL", "on")
    if how == "t":                             # (DieCarry.put's own call: the steps one by one, not the fused
        monkeypatch.setattr(engine_mod, "_event_run_ok", lambda *a: False)   # call, which holds the cut compiled in)
    ref = _engine_run(g, stream, sizes, adv, every_counter=True)
    orig = getattr(mod, name)
    calls = []

    def changed(*a):
        calls.append(1)
        if how == "base":                      # pending commands ready 1 us later
            r = orig(*a)
            a[12][:] += 1000
            return r
        if how == "take":                      # pending commands ready 1 us later (_pending_take's ``ob``)
            r = orig(*a)
            a[27][:] += 1000
            return r
        if how == "pf":                        # planes free 5 us earlier after the kept commands
            r = orig(*a)
            a[10][:] -= 5000
            return r
        if how == "end":
            r = orig(*a)
            a[13][a[0]] += 1
            return r
        if how == "skip":                      # the queue depth never checked
            return None
        if how == "t":
            return _shift(1, 1)(orig(*a))
        if how == "ngate":                     # new commands' arrival bases 1 us later (their T and Tp)
            return _shift(7, 1000)(orig(*a))
        if how == "nbase":                     # new commands' bases 1 us later
            return _shift(1, 1000)(orig(*a))
        if how == "ring":                      # no store gated (no write backpressure; round 12: the stores of a
            r = list(orig(*a))                 # mixed batch go through the ring in _mixed_front)
            if r[0]:
                r[7] = np.full_like(r[7], -1)
                r[11] = np.full_like(r[11], -1)
            return tuple(r)
        if how == "ends":                      # decided programs' ends 1 us later
            r = orig(*a)
            r[r >= 0] += 1000
            return r
        if how == "at":                        # maxima one ns later
            orig(*a)
            if a[3]:
                a[0][np.unique(a[1])] += 1
            return None
        lo, m = orig(*a)                       # ids one off: gates found on the wrong command
        return lo + 1, m
    monkeypatch.setattr(mod, name, changed)
    got = _engine_run(g, stream, sizes, adv, every_counter=True)
    assert calls
    assert ref[1] != got[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], got[0]))


def _plain_heap_push(hv, hn, d, v, q):
    """``kernels._heap_push`` as it was before round 5 (the plain sift down): the reference its Floyd form must
    equal, array for array."""
    m = hn[d]
    if m < q:
        j = m
        while j > 0:
            p = (j - 1) >> 1
            if hv[d, p] <= v:
                break
            hv[d, j] = hv[d, p]
            j = p
        hv[d, j] = v
        hn[d] = m + 1
    elif v > hv[d, 0]:
        j = 0
        while True:
            c = 2 * j + 1
            if c >= q:
                break
            if c + 1 < q and hv[d, c + 1] < hv[d, c]:
                c += 1
            if hv[d, c] >= v:
                break
            hv[d, j] = hv[d, c]
            j = c
        hv[d, j] = v


def test_heap_push_floyd_form_equals_plain_sift_down():
    """``kernels._heap_push`` (round 5: Floyd's replace, children up to a leaf then the value up) leaves the same
    heap array as the plain sift down after every push: heap sizes 1-513 (odd and even: a last node with one
    child), values few and many (ties with children, with the root), rising, falling, random; compiled and its
    Python form. A push that breaks a tie the other way is seen."""
    from hbfd.media import kernels as K
    rng = np.random.default_rng(21)
    checked = 0
    for q in (1, 2, 3, 4, 7, 8, 64, 511, 512, 513):
        for kind in ("few", "many", "rising", "falling"):
            n = 4 * q + 50
            if kind == "few":
                vals = rng.integers(0, 4, n)
            elif kind == "many":
                vals = rng.integers(-(10**9), 10**9, n)
            elif kind == "rising":
                vals = np.arange(n) + rng.integers(0, 3 * q + 1, n)
            else:
                vals = -np.arange(n) + rng.integers(0, 5, n)
            for fn in ((K._heap_push, K._heap_push.py_func) if q in (7, 512) else (K._heap_push,)):
                ref = np.zeros((2, q), np.int64)
                got = np.zeros((2, q), np.int64)
                rn = np.zeros(2, np.int64)
                gn = np.zeros(2, np.int64)
                for v in vals.tolist():
                    _plain_heap_push(ref, rn, 1, v, q)
                    fn(got, gn, 1, v, q)
                    assert np.array_equal(ref, got) and np.array_equal(rn, gn), (q, kind)
                    checked += 1
    assert checked > 20_000

    def other_tie(hv, hn, d, v, q):           # ties between children go right: a different (valid) heap
        m = hn[d]
        if m < q or v <= hv[d, 0]:
            return _plain_heap_push(hv, hn, d, v, q)
        j = 0
        while 2 * j + 1 < q:
            c = 2 * j + 1
            if c + 1 < q and hv[d, c + 1] <= hv[d, c]:
                c += 1
            if hv[d, c] >= v:
                break
            hv[d, j] = hv[d, c]
            j = c
        hv[d, j] = v
    a = np.zeros((1, 7), np.int64)
    b = np.zeros((1, 7), np.int64)
    na = np.zeros(1, np.int64)
    nb = np.zeros(1, np.int64)
    diff = False
    for v in rng.integers(0, 3, 200).tolist():
        K._heap_push(a, na, 0, v, 7)
        other_tie(b, nb, 0, v, 7)
        diff |= not np.array_equal(a, b)
    assert diff


def test_gated_split_twin_equals_masks_and_a_change_is_seen(monkeypatch):
    """``kernels._gated_split`` (round 5: ``_release_gated``'s split of a chunk of waiting stores in one pass) gives
    the masked copies' rows (released: rd = max(rd, gate end), q0 = that rd; waiting: every field as it was), on
    random chunks (none, some, all released; 0-20k rows); engine runs of write streams at 10 % load and of a
    mixed stream give the same completions and stats with the twins off and on, and reach the twin; a split that
    forgets the gate's end is seen."""
    from hbfd.media import kernels as K
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(8)
    for n in (0, 1, 255, 256, 3000, 20_000):
        for p in (0.0, 0.3, 1.0):
            f = [rng.integers(-(10**9), 10**12, n) for _ in range(7)]
            e = rng.integers(0, 10**12, n)
            ok = rng.random(n) < p
            sv, kv = K._gated_split(ok, e, *f)
            ref_s = [a[ok] for a in f[:6]]
            ref_s[1] = np.maximum(ref_s[1], e[ok])
            ref_s[5] = ref_s[1].copy()
            assert all(x.dtype == np.int64 and np.array_equal(x, y) for x, y in zip(sv, ref_s))
            assert all(np.array_equal(x, a[~ok]) for x, a in zip(kv, f))
            assert sv[1] is not sv[5] and not np.shares_memory(sv[1], sv[5])
    calls = []
    orig = engine_mod._gated_split

    def counted(*a):
        calls.append(len(a[0]))
        return orig(*a)
    monkeypatch.setattr(engine_mod, "_gated_split", counted)
    _runs_equal_off_and_on(monkeypatch, (("nominal", "write", 0.0, 0.1, "profile"),
                                          ("nominal", "write", 0.0, 0.3, "profile"), ("ocp-sg2", "mixed", 0.5, 0.5, "profile")))
    assert calls and max(calls) >= 1000

    def no_max(ok, e, *f):                   # released stores ready at their arrival + t_cmd, not the gate's end
        sv, kv = orig(ok, e, *f)
        r = f[1][ok]
        return (sv[0], r, sv[2], sv[3], sv[4], r.copy()), kv
    g, stream, sizes, adv = _stream("nominal", "write", 0.0, 0.1, "profile", n=20_000)
    ref = _engine_run(g, stream, sizes, adv)
    monkeypatch.setattr(engine_mod, "_gated_split", no_max)
    bad = _engine_run(g, stream, sizes, adv)
    assert ref[1] != bad[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], bad[0]))


def test_parts_update_twin_equals_the_numpy_form(monkeypatch):
    """``kernels._parts_update`` (round 5: ``_complete_parts``'s general case in one pass) leaves the completions,
    the latest completion and the pending requests of the numpy form: pending sets of 256-20k requests with 1-3
    pages left, serials dense (its table) or sparse (its binary search), pages of some or all of them, in order or
    shuffled, an unknown serial (the internal error, nothing changed), two pages of one request; a twin that
    forgets the pages' done times is seen in an engine run."""
    from hbfd.media.engine import MediaEngine
    rng = np.random.default_rng(4)

    def make(m, dense):
        e = MediaEngine.__new__(MediaEngine)
        e._pending, e.last_completion = [], 5
        ser = np.sort(rng.choice((2 if dense else 10) * m + 3, m, replace=False)).astype(np.int64) + 1000
        e._pr_chunks = [{"serial": ser, "id": rng.integers(0, 1 << 40, m).astype(np.uint64),
                         "arrival": rng.integers(0, 10**6, m), "done": rng.integers(10**6, 2 * 10**6, m),
                         "rem": rng.integers(1, 4, m)}]
        return e

    def state(e):
        return ([o.tobytes() for o in e._pending], e.last_completion,
                [{k: v.tobytes() for k, v in c.items()} for c in e._pr_chunks])
    runs = {2: 0, 1: 0, 0: 0}
    for m in (256, 1000, 20_000):
        for case in ("some", "all-last", "shuffled", "unknown", "twice"):
            for rep in range(4):
                rs = rng.integers(0, 1 << 30)
                r1 = np.random.default_rng(rs)
                base = make(m, rep % 2 == 0)
                ser = base._pr_chunks[0]["serial"]
                if case == "all-last":
                    base._pr_chunks[0]["rem"][:] = 1
                    pick = np.sort(r1.choice(m, m - 1, replace=False))
                else:
                    pick = np.sort(r1.choice(m, r1.integers(1, m // 2), replace=False))
                serial = ser[pick].copy()
                if case == "unknown":
                    serial[len(serial) // 2] += 1 if serial[len(serial) // 2] + 1 not in set(ser.tolist()) else 0
                if case == "twice":
                    serial = np.sort(np.concatenate([serial, serial[:3]]))
                if case in ("shuffled", "all-last") and rep > 1:
                    serial = r1.permutation(serial)
                done = r1.integers(0, 3 * 10**6, len(serial))
                a, b = copy.deepcopy(base), copy.deepcopy(base)
                res = []
                for e, mode in ((a, "off"), (b, "on")):
                    monkeypatch.setenv("HBFD_ACCEL", mode)
                    try:
                        e._complete_parts(serial, done)
                        res.append(None)
                    except Exception as x:          # noqa: BLE001  (the same error both ways)
                        res.append(type(x).__name__)
                assert res[0] == res[1] and state(a) == state(b), (m, case)
                if case == "unknown" and res[0] is not None:
                    runs[0] += 1
                elif case == "twice":
                    runs[1] += 1
                else:
                    runs[2] += 1
    assert runs[0] and runs[1] and runs[2]
    orig = engine_mod._parts_update
    calls = []

    def no_done(ps, pid, pa, pd, pr, serial, done):
        calls.append(1)
        return orig(ps, pid, pa, pd, pr, serial, np.zeros_like(done))
    g, stream, sizes, adv = _stream("nominal", "write", 0.0, 0.1, "profile", n=20_000)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    ref = _engine_run(g, stream, sizes, adv)
    monkeypatch.setattr(engine_mod, "_parts_update", no_done)
    bad = _engine_run(g, stream, sizes, adv)
    assert calls and (ref[1] != bad[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], bad[0])))


def test_pending_take_twin_equals_take_and_fields_also_in_place(monkeypatch):
    """``kernels._pending_take`` (round 7: ``_decide_cmds``'s gathers and ``_pending_fields`` in one pass) gives the
    ``np.take`` of the nine gathered fields and ``_pending_fields``'s five, into fresh arrays and in place (the
    outputs the inputs' prefixes, as ``_decide_cmds`` compacts the pending set it owns), compiled and in its Python
    form; random runs with gates before and after, decided or not, floors and admissions around ``dec_h``."""
    from hbfd.media import kernels as K
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(11)
    for n in (1, 7, 300, 5000):
        for p in (0.02, 0.3, 0.9):
            f = {k: rng.integers(0, 10**6, n).astype(np.int64) for k in
                 ("plane", "die", "svc", "pid", "start", "end", "adm", "rdy", "base", "gx", "gate", "floor", "join")}
            f["kind"] = rng.integers(0, 4, n).astype(np.uint8)
            gi = np.where(rng.random(n) < 0.5, rng.integers(0, n, n), -1).astype(np.int64)
            dec = rng.random(n) < p
            und = np.flatnonzero(~dec)
            dec_h, t_cmd = 500_000, 300
            gk = ("kind", "plane", "die", "svc", "pid", "start", "end", "adm", "rdy")
            ref = [np.take(f[k], und) for k in gk]
            fo = [np.empty(len(und), np.int64) for _ in range(5)]
            K._pending_fields.py_func(und, -1, f["base"], f["gx"], f["gate"], f["floor"], gi, dec, ref[7], ref[8],
                                      dec_h, t_cmd, *fo)
            ref += fo
            args = [f[k] for k in gk[:5]] + [f[k] for k in gk[5:]] + [f["base"], f["gx"], f["gate"], f["floor"]]
            for form in (K._pending_take, K._pending_take.py_func):
                outs = [np.empty(len(und), f[k].dtype) for k in gk] + [np.empty(len(und), np.int64) for _ in range(5)]
                form(und, *args, gi, dec, dec_h, t_cmd, *outs)
                assert all(np.array_equal(a, b) for a, b in zip(outs, ref)), (n, p)
                ip = {k: v.copy() for k, v in f.items()}
                ia = [ip[k] for k in gk] + [ip["base"], ip["gx"], ip["gate"], ip["floor"]]
                io = [ip[k][:len(und)] for k in gk] + [ip[k][:len(und)] for k in ("base", "gx", "gate", "join", "floor")]
                form(und, *ia, gi, dec, dec_h, t_cmd, *io)
                assert all(np.array_equal(a, b) for a, b in zip(io, ref)), (n, p, "in place")


def test_pending_set_compacted_in_place_gives_the_same_results(monkeypatch):
    """``_decide_cmds`` compacts the pending set in place (round 7: the batch's own buffers, ``_Bufs.keep_prefix``)
    where every die of it is handled behind the pending commands: engine runs of write streams at 10 % and 30 %
    load and a mixed one give the same completions and stats with the twins off and on, and compact in place;
    a compaction that reads rows it has rewritten is seen."""
    calls = []
    orig = engine_mod._Bufs.keep_prefix

    def counted(self, key, a, n):
        calls.append(n)
        return orig(self, key, a, n)
    monkeypatch.setattr(engine_mod._Bufs, "keep_prefix", counted)
    _runs_equal_off_and_on(monkeypatch, (("nominal", "write", 0.0, 0.1, "profile"),
                                          ("nominal", "write", 0.0, 0.3, "profile"), ("nominal", "mixed", 0.5, 0.5, "profile")))
    assert calls and max(calls) >= 1000
    g, stream, sizes, adv = _stream("nominal", "write", 0.0, 0.1, "profile", n=20_000)
    ref = _engine_run(g, stream, sizes, adv)
    orig_t = engine_mod._pending_take
    twice = []

    def compacted_twice(*a):                   # an in-place pass that reads rows already rewritten
        orig_t(*a)
        if np.shares_memory(a[1], a[18]):
            twice.append(1)
            orig_t(*a)
    monkeypatch.setattr(engine_mod, "_pending_take", compacted_twice)
    try:
        bad = _engine_run(g, stream, sizes, adv)
    except (IndexError, KeyError, ValueError):     # (seen: the broken pending set fails loudly)
        assert twice
        return
    assert twice
    assert ref[1] != bad[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], bad[0]))


def test_ngate_twins_equal_the_lookups_and_gate_bases(monkeypatch):
    """``kernels._ngate_scan`` and ``_ngate_bases`` (round 7: ``_tail_plane``'s look-ups of the new commands' gates
    and ``_gate_bases_found``) against the numpy form (``_Ends.get``, ``_PidIndex.pos``, ``_apply_gates``) on random
    sets: gates decided (in the window and among the old ids), pending (kept or not, on the same die or another),
    in the batch (same die or not), found nowhere (the KeyError's id); an engine run off vs on reaches both."""
    from hbfd.media import kernels as K
    E = engine_mod
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(5)
    big = np.int64(1) << 62
    seen = {"cross": 0, "key": 0, "ok": 0}
    for trial in range(300):
        npn, nn = int(rng.integers(1, 400)), int(rng.integers(1, 300))
        dies = 1 if trial % 2 else int(rng.integers(1, 5))
        ends = E._Ends()
        ends.set(np.arange(100, 200), rng.integers(0, 10**6, 100))
        if trial % 3 == 0:
            ends.rebase(150, np.array([110, 120, 130], np.int64))
        ppid = (1000 + rng.permutation(npn)).astype(np.int64)
        ppid[rng.random(npn) < 0.2] = -1
        npid = (3000 + rng.permutation(nn)).astype(np.int64)
        npid[rng.random(nn) < 0.3] = -1
        pdie = rng.integers(0, dies, npn).astype(np.int64)
        ndie = rng.integers(0, dies, nn).astype(np.int64)
        pend = rng.integers(0, 10**6, npn).astype(np.int64)
        padm = rng.integers(0, 10**6, npn).astype(np.int64)
        pplane = rng.integers(0, 8, npn).astype(np.int64)
        Tp = rng.integers(0, 10**6 if trial % 4 else 2 * 10**6, 8).astype(np.int64)
        nbase = rng.integers(0, 10**6, nn).astype(np.int64)
        pool = np.concatenate([np.arange(100, 200), ppid[ppid >= 0], npid[npid >= 0],
                               [5000, 5001] if trial % 5 == 0 else []]).astype(np.int64)
        gate = np.where(rng.random(nn) < 0.6, rng.choice(pool, nn), -1).astype(np.int64)
        plo, pmap = K._pid_map(ppid)
        nlo, nmap = K._pid_map(npid)
        if not len(pmap):
            continue
        st, gm, gq, e, ip, inn, giN, nb = K._ngate_scan(gate, ndie, nbase, ends.a, ends.base, ends.old_id,
                                                        ends.old_end, plo, pmap, pdie, pend, nlo, nmap, npn)
        # the numpy form (engine._tail_plane before round 7)
        pix, nix = E._PidIndex(ppid), E._PidIndex(npid)
        gm0 = np.flatnonzero(gate >= 0)
        gq0 = gate[gm0]
        monkeypatch.setenv("HBFD_ACCEL", "off")
        e0 = ends.get(gq0)
        monkeypatch.setenv("HBFD_ACCEL", "on")
        ip0, inn0 = pix.pos(gq0), nix.pos(gq0)
        inp = (e0 < 0) & (ip0 >= 0)
        h = (e0 < 0) & (inn0 >= 0)
        cross = (pdie[ip0[inp]] != ndie[gm0[inp]]).any() or (ndie[inn0[h]] != ndie[gm0[h]]).any()
        assert bool(st) == bool(cross), trial
        if cross:
            seen["cross"] += 1
            continue
        assert np.array_equal(gm, gm0) and np.array_equal(gq, gq0) and np.array_equal(e, e0)
        assert np.array_equal(ip, ip0) and np.array_equal(inn, inn0)
        giN0 = np.full(nn, -1, np.int64)
        giN0[gm0] = np.where(ip0 >= 0, ip0, np.where(inn0 >= 0, inn0 + npn, -1))
        nb0 = nbase.copy()
        ee = np.where(inp, pend[np.maximum(ip0, 0)], e0)
        nb0[gm0] = np.maximum(nb0[gm0], np.where(ee < 0, big, ee))
        assert np.array_equal(giN, giN0) and np.array_equal(nb, nb0)
        kept = E._KeptAt(padm, Tp, pplane)
        try:
            base0, gidx0 = E._gate_bases_found({"base": nbase}, gm0, (gq0, e0.copy(), ip0, inn0), kept, pend)
        except KeyError as ex:
            bk, _, _ = K._ngate_bases(nbase, gm, e, ip, inn, padm, Tp, pplane, pend)
            assert bk >= 0 and int(gq[bk]) == ex.args[0]
            seen["key"] += 1
            continue
        bk, base, gidx = K._ngate_bases(nbase, gm, e, ip, inn, padm, Tp, pplane, pend)
        assert bk == -1 and np.array_equal(base, base0) and np.array_equal(gidx, gidx0)
        seen["ok"] += 1
    assert min(seen.values()) >= 10, seen
    calls = {"scan": 0, "bases": 0}
    o1, o2 = E._ngate_scan, E._ngate_bases

    def c1(*a):
        calls["scan"] += 1
        return o1(*a)

    def c2(*a):
        calls["bases"] += 1
        return o2(*a)
    monkeypatch.setattr(E, "_ngate_scan", c1)
    monkeypatch.setattr(E, "_ngate_bases", c2)
    g, stream, sizes, adv = _stream("nominal", "write", 0.0, 0.1, "profile", n=20_000)
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref = _engine_run(g, stream, sizes, adv)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    got = _engine_run(g, stream, sizes, adv)
    assert ref[1] == got[1] and all(np.array_equal(x, y) for x, y in zip(ref[0], got[0]))
    assert calls["scan"] and calls["bases"], calls


def test_decided_put_twin_equals_max_at_and_put(monkeypatch):
    """``kernels._decided_put`` (round 7: ``_behind_pending``'s decided commands into the planes' free times and the
    carried releases in one pass, ``DieCarry.put_decided``) leaves the same ``plane_free`` and carried (die, time)
    arrays, in order, as ``np.maximum.at`` and ``DieCarry.put`` on the masked arrays: nothing after the horizon,
    no cut, the cut by ``_carry_keep`` and by the numpy form (fewer releases than its cut-off); off it declines.
    An engine run with a twin that drops the last release is seen."""
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(21)
    paths = set()
    for trial in range(400):
        dies, q = int(rng.integers(1, 9)), int(rng.integers(1, 40))
        n = int(rng.integers(0, 600))
        planes = 4 * dies
        plane = rng.integers(0, planes, n).astype(np.int64)
        die = plane // 4
        t = rng.integers(0, 10**6, n).astype(np.int64)
        m = rng.random(n) < rng.random()
        no = int(rng.integers(0, dies * q + 1))
        od = rng.integers(0, dies, no).astype(np.int64)
        ot = rng.integers(0, 10**6, no).astype(np.int64)
        horizon = int(rng.choice([-1, 300_000, 2 * 10**6]))
        ref, got = DieCarry(dies, q), DieCarry(dies, q)
        ref.die, ref.t, got.die, got.t = od.copy(), ot.copy(), od.copy(), ot.copy()
        pf_ref = rng.integers(0, 10**6, planes).astype(np.int64)
        pf_got = pf_ref.copy()
        np.maximum.at(pf_ref, plane[m], t[m])
        ref.put(die[m], t[m], horizon)
        assert got.put_decided(pf_got, plane, die, t, m, horizon)
        assert np.array_equal(pf_ref, pf_got)
        assert ref.die.dtype == got.die.dtype and np.array_equal(ref.die, got.die) and np.array_equal(ref.t, got.t)
        k = int((t[m] > horizon).sum())
        tot = no + k
        cnt = np.bincount(np.concatenate([od, die[m][t[m] > horizon]]), minlength=dies) if tot else np.zeros(1)
        paths.add("none" if not k else ("cut-twin" if cnt.max() > q and tot >= 256 else
                                        ("cut-numpy" if cnt.max() > q else "add")))
    assert paths == {"none", "add", "cut-twin", "cut-numpy"}, paths
    monkeypatch.setenv("HBFD_ACCEL", "off")
    assert not DieCarry(2, 4).put_decided(np.zeros(8, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64),
                                          np.ones(1, np.int64), np.ones(1, bool), 0)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    g, stream, sizes, adv = _stream("nominal", "write", 0.0, 0.1, "profile", n=20_000)
    ref = _engine_run(g, stream, sizes, adv)
    orig = diestage._decided_put
    calls = []

    def dropped(*a):                           # the last release added is lost
        calls.append(1)
        st, d, tt = orig(*a)
        return (st, d[:-1], tt[:-1]) if st == 1 and len(d) > len(a[5]) else (st, d, tt)
    monkeypatch.setattr(diestage, "_decided_put", dropped)
    bad = _engine_run(g, stream, sizes, adv)
    assert calls
    assert ref[1] != bad[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], bad[0]))


def test_min_where_twin_equals_the_masked_min(monkeypatch):
    """``kernels._min_where`` (round 7: ``_keep_h``'s earliest floor of the commands not joined, ``_prune_ends``'s
    oldest pending program id) equals the masked ``min`` (and says where there is none), compiled and in its Python
    form; an engine run reaches it from both callers with the same results off and on. (A minimum off by one
    is not seen in these runs' results: the horizon and the waiting stores' gates bound both callers there.)"""
    from hbfd.media import kernels as K
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(4)
    for n in (0, 1, 5, 300, 4000):
        for p in (0.0, 0.01, 0.5, 1.0):
            a = rng.integers(-(10**9), 10**12, n).astype(np.int64)
            key = np.where(rng.random(n) < p, -1, rng.integers(0, 10**6, n)).astype(np.int64)
            for neg in (True, False):
                m = key < 0 if neg else key >= 0
                for f in (K._min_where, K._min_where.py_func):
                    found, mn = f(a, key, neg)
                    assert bool(found) == bool(m.any())
                    if m.any():
                        assert int(mn) == int(a[m].min())
    calls = []
    orig = engine_mod._min_where

    def counted(a, key, neg):
        calls.append(neg)
        return orig(a, key, neg)
    monkeypatch.setattr(engine_mod, "_min_where", counted)
    g, stream, sizes, adv = _stream("nominal", "write", 0.0, 0.1, "profile", n=60_000)   # (ends pruned)
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref = _engine_run(g, stream, sizes, adv)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    got = _engine_run(g, stream, sizes, adv)
    assert ref[1] == got[1] and all(np.array_equal(x, y) for x, y in zip(ref[0], got[0]))
    assert True in calls and False in calls



def test_plane_order_twin_equals_the_argsorts(monkeypatch):
    """``eventsim._plane_order`` (round 7: ``_plane_pass``'s orders by one counting sort) gives the stable argsorts of
    the reads and of the other commands by plane, the planes present and the left / right ``searchsorted`` of each
    in both orders, compiled and in its Python form: no reads, only reads, mixed, one plane, planes skipped; a
    twin that orders the programs unstably is seen in an engine run."""
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(9)
    for n in (1, 2, 64, 500, 5000):
        for pr in (0.0, 0.3, 1.0):
            for npl in (1, 7, 300):
                N = n + 50
                plane = rng.integers(0, npl, N).astype(np.int64)
                kind = np.where(rng.random(N) < pr, eventsim.READ, eventsim.PROG).astype(np.uint8)
                fi = np.sort(rng.choice(N, n, replace=False)).astype(np.int64)
                isr = kind[fi] == eventsim.READ
                ri, oi = fi[isr], fi[~isr]
                ro = ri[np.argsort(plane[ri], kind="stable")]
                oo = oi[np.argsort(plane[oi], kind="stable")]
                up = np.flatnonzero(np.bincount(plane[fi]))
                ref = (ro, oo, up, np.searchsorted(plane[ro], up), np.searchsorted(plane[ro], up, "right"),
                       np.searchsorted(plane[oo], up), np.searchsorted(plane[oo], up, "right"))
                for f in (eventsim._plane_order, eventsim._plane_order.py_func):
                    got = f(fi, kind, plane, eventsim.READ)
                    assert all(np.array_equal(a, b) for a, b in zip(got, ref)), (n, pr, npl)
    g, stream, sizes, adv = _stream("nominal", "write", 0.0, 0.1, "profile", n=20_000)
    ref = _engine_run(g, stream, sizes, adv, every_counter=True)
    orig = eventsim._plane_order
    calls = []

    def unstable(fi, kind, plane, read):       # each plane's programs in reverse order
        calls.append(1)
        ro, oo, up, rp, re_, op, oe = orig(fi, kind, plane, read)
        oo = oo.copy()
        for a, b in zip(op, oe):
            oo[a:b] = oo[a:b][::-1]
        return ro, oo, up, rp, re_, op, oe
    monkeypatch.setattr(eventsim, "_plane_order", unstable)
    bad = _engine_run(g, stream, sizes, adv, every_counter=True)
    assert calls
    assert ref[1] != bad[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], bad[0]))
