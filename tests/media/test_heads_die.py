"""Round 13 of the media engine's speed work: ``eventsim._heads_die``, the loop form of ``_heads_pass`` (the numpy
form, ``simulate_auto``'s path 2) for one die without reads or joins, serves in ``_simulate_split`` the dies (or the
rests behind a die's fast reads) that have no read: a burst's programs, whose queue depth binds. It must keep a die
exactly where ``_heads_pass`` does (given positive services and t_cmd; it declines otherwise), with its results and
plane free times bit for bit, and a die it keeps must get ``eventsim.simulate``'s schedule (the definition).

The dies: 1-400 programs (and erases, copybacks) on 1-16 planes, times on a grid with ties (some 1 ns off), ready
times in index order or shuffled (the heads' order then often not the event scheduler's: declined), chains gated
on an earlier program of the plane (gate_x 0, positive or negative), floors, carried releases and Q from 1 (the
depth binding at nearly every admission) to unbounded."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import eventsim

pytest.importorskip("numba")


def _die(rng):
    m = int(rng.choice([1, 2, 5, 30, 120, 400]))
    npd = int(rng.integers(1, 17))
    grid = int(rng.choice([1, 50, 1000]))
    kind = rng.choice([eventsim.PROG, eventsim.PROG, eventsim.ERASE, eventsim.COPYBACK], m).astype(np.int64)
    plane = rng.integers(0, npd, m).astype(np.int64)
    _, plane = np.unique(plane, return_inverse=True)
    plane = plane.astype(np.int64)
    npd = int(plane.max()) + 1
    span = int(rng.choice([1, 10, 300]))
    ready = (rng.integers(0, span, m) * grid + rng.choice([0, 0, 0, 1], m)).astype(np.int64)
    if rng.random() < 0.6:
        ready = np.sort(ready)
    service = (rng.choice([3, 30, 600], m) * grid).astype(np.int64)
    gate = np.full(m, -1, np.int64)
    gate_x = np.zeros(m, np.int64)
    for k in range(m):
        if rng.random() < 0.5:
            e = np.flatnonzero(plane[:k] == plane[k])
            if len(e):
                gate[k] = e[-1] if rng.random() < 0.8 else rng.choice(e)
                gate_x[k] = int(rng.choice([0, grid, -1]))
    floor = np.where(rng.random(m) < 0.2, ready + int(rng.choice([1, grid, 5 * grid])), 0).astype(np.int64)
    nc = int(rng.choice([0, 0, 2, 8, 40]))
    ct = (rng.integers(0, span + 3, nc) * grid + rng.choice([0, 1], nc)).astype(np.int64)
    pf = (rng.integers(0, 4, npd) * grid).astype(np.int64)
    t_cmd = int(rng.choice([1, 7, grid]))
    Q = int(rng.choice([1, 2, 4, 8, 32, 1 << 20]))
    return kind, ready, plane, service, gate, gate_x, floor, ct, pf, t_cmd, Q


def test_heads_die_is_heads_pass():
    rng = np.random.default_rng(1314)
    kept = declined = bound = 0
    for k in range(2500):
        kind, ready, plane, service, gate, gate_x, floor, ct, pf, t_cmd, Q = _die(rng)
        m, npd = len(kind), len(pf)
        hf = bool(rng.random() < 0.8)
        # the numpy form
        die = np.zeros(m, np.int64)
        hasg = gate >= 0
        jn = np.full(m, -1, np.int64)
        fl = floor if hf else np.zeros(m, np.int64)
        hbad = np.zeros(1, bool)
        pf_np = pf.copy()
        S, E, A, R = (np.zeros(m, np.int64) for _ in range(4))
        R[:] = ready
        eventsim._heads_pass(np.arange(m), ready, die, plane, service, gate, gate_x, hasg, fl, jn, t_cmd,
                             eventsim._slot_rows((np.zeros(len(ct), np.int64), ct), 1, Q), hbad, pf0=pf, pf=pf_np,
                             start=S, end=E, adm=A, rdy=R)
        # the loop form
        pfd = pf.copy()
        out = [np.zeros(m, np.int64) for _ in range(4)]          # st, en, ad, rd
        wk = np.zeros(5 * npd + 3 * m + 1, np.int64)
        hq = np.zeros(max(Q if Q < m + len(ct) else 1, 1), np.int64)
        ok = eventsim._heads_die(kind, ready, plane, service, gate, gate_x, floor, hf, t_cmd, Q, pfd, ct.copy(),
                                 *out, wk, hq)
        assert bool(ok) == (not hbad[0]), k
        if not ok:
            declined += 1
            assert np.array_equal(pfd, pf), k
            continue
        kept += 1
        bound += len(ct) + m > Q
        for x, y in zip(out + [pfd], (S, E, A, R, pf_np)):
            assert np.array_equal(x, y), k
        pf1 = pf.copy()
        ref = eventsim.simulate(kind, ready, plane, die, service, t_cmd=t_cmd, queue_depth=Q, plane_free=pf1,
                                die_carry={0: ct.tolist()} if len(ct) else {}, gate=gate, gate_x=gate_x,
                                floor=floor if hf else None, full=True)
        for x, y in zip(ref, out):
            assert np.array_equal(x, y), k
        assert np.array_equal(pf1, pfd), k
    assert kept > 800 and declined > 500 and bound > 400, (kept, declined, bound)


def test_heads_die_declines():
    """A read, a gate naming a later command or another plane, a service or t_cmd of 0: declined, nothing changed."""
    m = 4
    kind = np.full(m, eventsim.PROG, np.int64)
    ready = np.arange(m, dtype=np.int64) * 10
    plane = np.array([0, 1, 0, 1], np.int64)
    service = np.full(m, 100, np.int64)
    gate = np.full(m, -1, np.int64)
    zero = np.zeros(m, np.int64)
    pf = np.array([5, 7], np.int64)

    def call(kind=kind, gate=gate, service=service, t_cmd=3):
        pfd = pf.copy()
        ok = eventsim._heads_die(kind, ready, plane, service, gate, zero, zero, False, t_cmd, 2, pfd,
                                 np.zeros(0, np.int64), *(np.zeros(m, np.int64) for _ in range(4)),
                                 np.zeros(5 * 2 + 3 * m + 1, np.int64), np.zeros(2, np.int64))
        assert ok or np.array_equal(pfd, pf)
        return ok

    assert call()
    assert not call(kind=np.where(np.arange(m) == 2, eventsim.READ, kind))
    assert not call(gate=np.array([-1, -1, 3, -1], np.int64))       # a later command
    assert not call(gate=np.array([-1, -1, 1, -1], np.int64))       # another plane
    assert call(gate=np.array([-1, -1, 0, -1], np.int64))
    assert not call(service=np.where(np.arange(m) == 1, 0, service))
    assert not call(t_cmd=0)


def test_heads_rest_skips_and_floors():
    """Round 14: ``_heads_rest`` with ``use_skip`` (``_simulate_split``'s rest behind a burst die's fast reads, in
    place) equals ``_heads_die`` on the compacted rest (the commands not skipped, in index order, gates renumbered,
    floored at max(floor, X); ``sel`` the others' indices): the same decision, results, plane free times; the skipped
    commands' start, end, admission and ready untouched; output buffers longer than the die (as the split's)."""
    rng = np.random.default_rng(1414)
    kept = declined = 0
    for k in range(1500):
        kind, ready, plane, service, gate, gate_x, floor, ct, pf, t_cmd, Q = _die(rng)
        m, npd = len(kind), len(pf)
        hf = bool(rng.random() < 0.7)
        # reads put in among the commands (the skipped ones): the whole die's arrays
        nr = int(rng.choice([0, 1, 5, 3 * m]))
        pos = np.sort(rng.integers(0, m + 1, nr))
        ins = pos + np.arange(nr)                                   # their indices in the whole die
        M = m + nr
        rest = np.setdiff1d(np.arange(M), ins)                       # the rest's indices in the whole die

        def whole(x, at_reads):
            out = np.empty(M, np.int64)
            out[rest] = x
            out[ins] = at_reads
            return out
        K = whole(kind, eventsim.READ)
        R = whole(ready, rng.integers(0, 100, nr))
        P = whole(plane, rng.integers(0, npd, nr))
        S = whole(service, 5)
        G = whole(np.where(gate >= 0, rest[np.maximum(gate, 0)], -1), -1)
        GX = whole(gate_x, 0)
        F = whole(floor, rng.integers(0, 1000, nr))
        skip = whole(0, 1)
        X = int(rng.choice([-(1 << 62), 0, int(np.median(ready)) if m else 0, int(ready.max()) + 3 if m else 5]))
        # the compacted form
        fl = np.maximum(floor if hf else np.zeros(m, np.int64), X)
        pf_c = pf.copy()
        oc = [np.zeros(m, np.int64) for _ in range(4)]
        wk = np.zeros(5 * npd + 3 * m + 1, np.int64)
        hq = np.zeros(max(Q if Q < m + len(ct) else 1, 1), np.int64)
        okc = eventsim._heads_die(kind, ready, plane, service, gate, gate_x, fl, True, t_cmd, Q, pf_c, ct.copy(),
                                  *oc, wk, hq)
        # in place
        pf_r = pf.copy()
        sent = [np.full(M + 7, -77, np.int64) for _ in range(4)]     # (longer than the die)
        wk = np.zeros(5 * npd + 3 * M + 1, np.int64)
        hq = np.zeros(max(Q if Q < M + len(ct) else 1, 1), np.int64)
        okr = eventsim._heads_rest(K, R, P, S, G, GX, F, hf, X, skip, rest.astype(np.int64), True, t_cmd, Q, pf_r,
                                   ct.copy(), *sent, wk, hq)
        assert bool(okr) == bool(okc), k
        if not okr:
            declined += 1
            assert np.array_equal(pf_r, pf), k
            continue
        kept += 1
        assert np.array_equal(pf_r, pf_c), k
        for x, y in zip(sent, oc):
            assert np.array_equal(x[rest], y), k
        for x in sent:
            assert (x[ins] == -77).all() and (x[M:] == -77).all(), k
    assert kept > 500 and declined > 300, (kept, declined)
    # a gate naming a skipped command: declined
    K = np.array([eventsim.PROG, eventsim.READ, eventsim.PROG], np.int64)
    z = np.zeros(3, np.int64)
    ok = eventsim._heads_rest(K, z, z, np.full(3, 9, np.int64), np.array([-1, -1, 1], np.int64), z, z, False, 0,
                              np.array([0, 1, 0], np.int64), np.array([0, 2], np.int64), True, 2, 4,
                              np.zeros(1, np.int64), np.zeros(0, np.int64),
                              *(np.zeros(3, np.int64) for _ in range(4)), np.zeros(16, np.int64), np.zeros(4, np.int64))
    assert not ok
