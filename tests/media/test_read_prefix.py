"""Round 10 of the media engine's speed work: ``eventsim._simulate_split`` serves a die's reads that no other
command can affect (those admitted by X, the first time at or after the earliest ready time of the die's other
commands at which no read waits) by ``_read_prefix`` (the reads-only die stage) and runs the event loop only on
the rest, with the fast reads' slot releases carried, the planes' free times moved past them and the rest
floored at X. It must give ``eventsim.simulate``'s results (the definition) bit for bit.

The cases put reads exactly at, just before and just after the other commands' ready times (and those plus
t_cmd), on the planes those commands use, in bursts of equal arrival times, with the queue depth binding (carried
releases, Q down to 1) and not, gated program chains, floors, joins (declined) and reads out of ready order
(declined); each kind of outcome (all reads fast, a boundary inside the die's reads, none) must occur many
times. Whole engine runs of 90/10 and 50/50 streams (hot pages: reads of pages being written, buffer hits and
coalescing across the boundary) give the same completions and ``stats()`` with the compiled twins off and on,
and reach the split."""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

from hbfcommon.profile import MAX_DIE_QUEUE_SLOTS, load_profile
from hbfd.media import engine as engine_mod
from hbfd.media import eventsim
from hbfd.media.bench import make_stream
from hbfd.media.engine import MediaEngine
from hbfd.media.geometry import MediaGeometry

from test_accel_media import stats_off_on

pytest.importorskip("numba")


def _boundary_case(rng, dies=None):
    """Reads around the other commands' ready times (at, one ns before and after, +- t_cmd), bursts of equal
    times, programs gated on earlier programs of their plane, floors, a few joins, carried releases."""
    dies = int(rng.integers(1, 4)) if dies is None else dies
    ppd = int(rng.integers(1, 4))
    t_cmd = int(rng.choice([0, 3, 50]))
    q = int(rng.choice([1, 2, 3, 4, 8, 64]))
    npg = int(rng.integers(1, 12))
    pdie = rng.integers(0, dies, npg)
    pplane = pdie * ppd + rng.integers(0, ppd, npg)
    pready = np.sort(rng.integers(0, 4000, npg))
    nr = int(rng.integers(1, 80))
    rdie = rng.integers(0, dies, nr)
    rplane = rdie * ppd + rng.integers(0, ppd, nr)
    mode = rng.random()
    if mode < 0.25:                                    # a burst: every read at one time
        rready = np.full(nr, int(rng.integers(0, 3000)))
    else:
        anchors = np.concatenate([pready, pready + t_cmd, pready - t_cmd])
        near = anchors[rng.integers(0, len(anchors), nr)] + rng.choice([-1, 0, 0, 1, 2], nr)
        far = rng.integers(0, 5000, nr)
        rready = np.sort(np.maximum(np.where(rng.random(nr) < 0.6, near, far), 0))
    kind = np.concatenate([np.zeros(nr, np.uint8),
                           rng.choice([eventsim.PROG, eventsim.COPYBACK, eventsim.ERASE], npg,
                                      p=[0.8, 0.1, 0.1]).astype(np.uint8)])
    ready = np.concatenate([rready, pready]).astype(np.int64)
    die = np.concatenate([rdie, pdie]).astype(np.int64)
    plane = np.concatenate([rplane, pplane]).astype(np.int64)
    n = nr + npg
    if rng.random() < 0.3:                             # the commands interleaved in index order by ready time
        o = np.argsort(ready, kind="stable")
        kind, ready, die, plane = kind[o], ready[o], die[o], plane[o]
    if rng.random() < 0.05:                            # reads out of ready order: the die declines
        ready = ready.copy()
        ready[kind == eventsim.READ] = rng.permutation(ready[kind == eventsim.READ])
    service = np.where(kind == eventsim.READ, int(rng.choice([150, 200])),
                       rng.choice([300, 600, 3000], n)).astype(np.int64)
    gate = np.full(n, -1, np.int64)
    last: dict[int, list[int]] = {}
    for i in range(n):
        if kind[i] != eventsim.READ:
            L = last.setdefault(int(plane[i]), [])
            if L and rng.random() < 0.7:
                gate[i] = L[-1]
            L.append(i)
    gate_x = np.where(gate >= 0, rng.integers(0, 300, n), 0).astype(np.int64)
    floor = np.where((kind != eventsim.READ) & (rng.random(n) < 0.2), rng.integers(0, 5000, n), 0).astype(np.int64)
    join = np.full(n, -1, np.int64)
    if rng.random() < 0.15:                            # an admitted program: its die declines
        k = int(rng.choice(np.flatnonzero(kind != eventsim.READ)))
        if gate[k] < 0:
            join[k] = int(rng.integers(0, 2000))
    carry: dict[int, list[int]] = {}
    for d in range(dies):
        if rng.random() < 0.6:
            carry[d] = rng.integers(0, 4000, int(rng.integers(1, 2 * q + 2))).tolist()
    pf = rng.integers(0, 2000, dies * ppd).astype(np.int64)
    return dict(kind=kind, ready=ready, plane=plane, die=die, service=service), dict(
        t_cmd=t_cmd, queue_depth=q, die_carry=carry, gate=gate, gate_x=gate_x, floor=floor, join=join,
        full=True), pf


def _fast_per_die(a, kw, pf, plane_die=False):
    """(fast reads, reads) of each die as ``_simulate_split`` hands it to ``_read_prefix``; with ``plane_die``:
    whether ``_plane_die`` keeps the die's schedule (and whether the split tries it), per die."""
    out = []
    cd, ct = eventsim._carry_arrays(kw["die_carry"])
    for d in np.unique(a["die"]):
        ix = np.flatnonzero(a["die"] == d)
        up, pl = np.unique(a["plane"][ix], return_inverse=True)
        loc = np.full(len(a["die"]), -1, np.int64)
        loc[ix] = np.arange(len(ix))
        g = kw["gate"][ix]
        gl = np.where(g >= 0, loc[np.maximum(g, 0)], -1)
        m = len(ix)
        ctl = ct[cd == d].copy()
        fs, fe, fa = np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(m, np.int64)
        cv = np.zeros(len(ctl) + m, np.int64)
        hp = np.zeros(max(kw["queue_depth"], 1), np.int64)
        if plane_die:
            bufs = [np.zeros(m, np.int64) for _ in range(4)]
            wk = np.zeros(3 * len(up) + 12 * m + 8, np.int64)
            pfd = pf[up].copy()
            ok = eventsim._plane_die(np.asarray(a["kind"][ix], np.int64), a["ready"][ix], pl.astype(np.int64),
                                     a["service"][ix], gl, kw["gate_x"][ix], kw["floor"][ix], True, kw["join"][ix],
                                     kw["t_cmd"], kw["queue_depth"], pfd, ctl.copy(), *bufs, wk)
            if not ok:
                assert np.array_equal(pfd, pf[up])
            nread = int((a["kind"][ix] == eventsim.READ).sum())
            out.append((bool(ok), m - nread + len(ctl) <= kw["queue_depth"]))
            continue
        nf, _, _ = eventsim._read_prefix(np.asarray(a["kind"][ix], np.int64), a["ready"][ix], pl.astype(np.int64),
                                         a["service"][ix], gl, kw["gate_x"][ix], kw["floor"][ix], True,
                                         kw["join"][ix], kw["t_cmd"], kw["queue_depth"], pf[up].copy(), ctl, fs, fe,
                                         fa, cv, hp)
        out.append((nf, int((a["kind"][ix] == eventsim.READ).sum())))
    return out


def test_read_prefix_split_equals_event_scheduler():
    rng = np.random.default_rng(1010)
    n_all = n_part = n_none = 0
    for k in range(3000):
        a, kw, pf = _boundary_case(rng)
        pf1, pf2 = pf.copy(), pf.copy()
        kw2 = kw
        if k % 4 == 0:                     # no floors at all (the loop's has_floor off: the rest still floored at X)
            kw2 = {key: v for key, v in kw.items() if key != "floor"}
        ref = eventsim.simulate(*a.values(), plane_free=pf1, **kw2)
        got = eventsim.simulate_compiled(*a.values(), plane_free=pf2, **kw2)
        for x, y in zip(ref, got):
            assert np.array_equal(x, y), k
        assert np.array_equal(pf1, pf2), k
        if k % 4 == 0:
            continue
        for nf, nr in _fast_per_die(a, kw, pf):
            if nr == 0:
                continue
            if nf == nr:
                n_all += 1
            elif nf:
                n_part += 1
            else:
                n_none += 1
    assert n_all > 200 and n_part > 200 and n_none > 200, (n_all, n_part, n_none)


def _low_load_case(rng):
    """Few programs among many reads spread over time, several planes per die: the queue depth mostly does not
    bind (``_plane_die`` keeps the die) but sometimes does (Q small, carried releases, program pile-ups)."""
    a, kw, pf = _boundary_case(rng)
    n = len(a["kind"])
    gap = int(rng.choice([0, 20, 100, 400]))
    a["ready"] = np.where(a["kind"] == eventsim.READ, np.arange(n) * gap, a["ready"]).astype(np.int64)
    if rng.random() < 0.5:
        o = np.argsort(a["ready"], kind="stable")
        inv = np.empty(n, np.int64)
        inv[o] = np.arange(n)
        a = {k: v[o] for k, v in a.items()}
        g = kw["gate"][o]
        kw = {**kw, "gate": np.where(g >= 0, inv[np.maximum(g, 0)], -1), "gate_x": kw["gate_x"][o],
              "floor": kw["floor"][o], "join": kw["join"][o]}
        # (a gate must name an earlier command: drop those the reordering made later)
        bad = kw["gate"] >= np.arange(n)
        kw["gate"] = np.where(bad, -1, kw["gate"])
        kw["gate_x"] = np.where(bad, 0, kw["gate_x"])
    kw["queue_depth"] = int(rng.choice([2, 4, 8, 32, 10_000]))
    if rng.random() < 0.5:           # times on a 100 ns grid, some 1 ns off it: releases at an admission time,
        q = 100                      # or 1 ns after it, with the depth exactly full
        jit = lambda x: (np.asarray(x) // q * q + rng.choice([0, 0, 1], np.shape(x))).astype(np.int64)
        a["ready"] = jit(a["ready"])
        a["service"] = rng.choice([100, 200, 300], n).astype(np.int64)
        kw["t_cmd"] = int(rng.choice([0, 100]))
        kw["gate_x"] = np.where(kw["gate"] >= 0, rng.choice([0, 100], n), 0).astype(np.int64)
        kw["floor"] = np.where(kw["floor"] > 0, jit(kw["floor"]), 0)
        kw["join"] = np.where(kw["join"] >= 0, jit(kw["join"]), -1)
        kw["die_carry"] = {d: jit(v).tolist() for d, v in kw["die_carry"].items()}
        kw["queue_depth"] = int(rng.choice([1, 2, 3, 4]))
        pf = jit(pf)
        if (np.diff(a["ready"][a["kind"] == eventsim.READ]) < 0).any():
            r = a["kind"] == eventsim.READ
            a["ready"][r] = np.sort(a["ready"][r])
    return a, kw, pf


def test_plane_die_equals_event_scheduler():
    """``_plane_die`` (a die whose queue depth never binds: its planes alone) inside ``_simulate_split``: the
    event scheduler's results bit for bit; it keeps many dies and declines many (the depth binding at some
    admission, by one command or more), with the plane free times unchanged when it declines."""
    rng = np.random.default_rng(2020)
    kept = declined = tried_kept = 0
    for k in range(3000):
        a, kw, pf = _low_load_case(rng)
        pf1, pf2 = pf.copy(), pf.copy()
        ref = eventsim.simulate(*a.values(), plane_free=pf1, **kw)
        got = eventsim.simulate_compiled(*a.values(), plane_free=pf2, **kw)
        for x, y in zip(ref, got):
            assert np.array_equal(x, y), k
        assert np.array_equal(pf1, pf2), k
        for ok, tried in _fast_per_die(a, kw, pf, plane_die=True):
            kept += ok
            declined += not ok
            tried_kept += ok and tried
    assert kept > 1000 and declined > 300 and tried_kept > 500, (kept, declined, tried_kept)


def test_read_prefix_reads_only_and_declines():
    """With no other command every read is fast and the reads-only schedule is the event scheduler's; a joined
    command, a gated read or a read out of ready order declines (0, nothing changed)."""
    rng = np.random.default_rng(5)
    for k in range(200):
        a, kw, pf = _boundary_case(rng, dies=1)
        r = np.flatnonzero(a["kind"] == eventsim.READ)
        a = {key: v[r] for key, v in a.items()}
        kw = {**kw, "gate": kw["gate"][r], "gate_x": kw["gate_x"][r], "floor": np.zeros(len(r), np.int64),
              "join": np.full(len(r), -1, np.int64)}
        if (np.diff(a["ready"]) < 0).any():
            assert _fast_per_die(a, kw, pf)[0][0] == 0
            continue
        assert _fast_per_die(a, kw, pf)[0] == (len(r), len(r))
        pf1, pf2 = pf.copy(), pf.copy()
        for x, y in zip(eventsim.simulate(*a.values(), plane_free=pf1, **kw),
                        eventsim.simulate_compiled(*a.values(), plane_free=pf2, **kw)):
            assert np.array_equal(x, y), k
        assert np.array_equal(pf1, pf2)
    a, kw, pf = _boundary_case(np.random.default_rng(3), dies=1)
    kw["join"] = kw["join"].copy()
    p = np.flatnonzero((a["kind"] != eventsim.READ) & (kw["gate"] < 0))
    kw["join"][p[0]] = 10
    pfc = pf.copy()
    assert _fast_per_die(a, kw, pfc)[0][0] == 0 and np.array_equal(pfc, pf)


def _engine_run(g, stream, b):
    eng = MediaEngine(g)
    outs = []
    for k in range(0, len(stream), b):
        part = stream[k:k + b]
        eng.submit(part)
        eng.advance(int(part["arrival_ns"].max()))
        outs.append(eng.collect())
    outs.append(eng.collect())
    outs.append(eng.drain())
    return outs, stats_off_on(eng)


CASES = [("nominal", 0.1, None, "profile", False), ("nominal", 0.1, 0.1, "profile", False),
         ("nominal", 0.1, None, "profile", True), ("nominal", 0.1, 0.5, "small", True),
         ("nominal", 0.5, None, "profile", True), ("ocp-sg1", 0.1, None, "profile", True),
         ("ocp-sg2", 0.1, 1.0, "unbounded", False), ("conservative", 0.3, 0.9, "profile", True)]


@pytest.mark.parametrize("prof,wf,load,qd,hot", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_engine_mixed_off_equals_on_through_the_split(monkeypatch, prof, wf, load, qd, hot):
    g = MediaGeometry.from_profile(load_profile(prof))
    if qd == "unbounded":
        g = dataclasses.replace(g, queue_depth=MAX_DIE_QUEUE_SLOTS // g.dies)
    elif qd == "small":
        g = dataclasses.replace(g, queue_depth=2)
    gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
    rng = np.random.default_rng(zlib.crc32(f"{prof}{wf}{load}{qd}{hot}".encode()))
    n = 6000
    stream = make_stream(g, n, 4096, "mixed", gap, seed=int(rng.integers(100)), write_fraction=wf)
    if hot:                  # a few hundred pages: reads of pages being written, buffer hits, coalescing
        stream["media_address"] = (rng.integers(0, 300, n) * 4096).astype(np.uint64)
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref, st_ref = _engine_run(g, stream, 1500)
    calls = []
    real = eventsim.simulate_compiled

    def spy(kind, ready, plane, die, service, **kw):
        pf = kw["plane_free"].copy()
        calls.append(({"kind": kind.copy(), "ready": ready.copy(), "plane": plane.copy(), "die": die.copy(),
                       "service": service.copy()}, {**{k: kw[k].copy() for k in ("gate", "gate_x", "floor", "join")},
                                                    "die_carry": tuple(np.copy(x) for x in kw["die_carry"]),
                                                    "t_cmd": kw["t_cmd"], "queue_depth": kw["queue_depth"]}, pf))
        return real(kind, ready, plane, die, service, **kw)
    monkeypatch.setattr(eventsim, "simulate_compiled", spy)
    # (the steps one by one: the fused call, kernels._event_run, gives the same (tests/media/test_event_run.py) but
    # calls the scheduler inside compiled code, where the spy cannot see it)
    monkeypatch.setattr(engine_mod, "_event_run_ok", lambda *a: False)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    got, st_got = _engine_run(g, stream, 1500)
    assert len(ref) == len(got)
    for x, y in zip(ref, got):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert st_ref == st_got
    fast = sum(nf for a, kw, pf in calls for nf, _ in _fast_per_die(a, kw, pf))
    assert calls and fast > 0, len(calls)
    if hot:
        assert st_ref["counts"]["buffer_hits"] + st_ref["counts"]["coalesced_reads"] > 100
