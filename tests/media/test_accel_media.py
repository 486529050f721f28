"""The media engine's compiled twins (hbfd/accel.py, numba; hbfd/media/kernels.py) give the numpy definitions'
outputs bit for bit:

* ``eventsim._simulate_loop`` (the event scheduler: die queue depth, read priority, write backpressure gates,
  joins, floors, carried slots) against ``eventsim.simulate`` on random command sets, small and large;
* ``_lookup_events`` (page-buffer lookup) and ``_chan_fcfs`` (channel FCFS), through the engine runs;
* ``_fifo_loop`` / ``_fifo_carry`` (the read die stage) against ``fifo_exact``'s numpy form over several
  batches (ends, plane state, carried releases, the ``qd_bound_*`` counts), queue depth binding and not;
* ``_read_pass`` (a whole batch of media reads in one compiled pass: expansion, lookup, die stage, buffer
  state, channel with the deferred transfers it takes) through engine runs of read streams: bursts and light
  load, multi-page unaligned requests, hot pages, queue depth binding, random batch cuts;
* whole engine runs (reads, writes, mixed; profiles incl. ocp-sg1/2/3; batches cut at random sizes; the die
  queue depth binding (profile) and unbounded) with ``HBFD_ACCEL=off`` and ``on``: every completion field and
  the whole ``stats()`` equal;
* a twin whose outputs are changed (ends one ns later, buffer hits made misses, a count or a deferred
  transfer's ready time off by one) is seen (the comparison can fail).

The golden digests run under both settings too (test_engine_golden.py, conftest.accel_mode)."""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

from hbfcommon.profile import MAX_DIE_QUEUE_SLOTS, load_profile
from hbfd import accel
from hbfd.media import diestage, eventsim, lindley
from hbfd.media import engine as engine_mod
from hbfd.media import ftl as ftl_mod
from hbfd.media.bench import make_stream
from hbfd.media.diestage import DieCarry, fifo_exact
from hbfd.media.engine import MediaEngine
from hbfd.media.geometry import MediaGeometry

from test_eventsim_fast import _random_case

pytest.importorskip("numba")


def _big_case(rng):
    """More dies, planes and commands than _random_case: long program chains, the queue depth binding."""
    dies = int(rng.integers(2, 9))
    ppd = int(rng.integers(1, 5))
    n = int(rng.integers(100, 600))
    q = int(rng.choice([1, 2, 4, 8, 32]))
    die = rng.integers(0, dies, n)
    plane = die * ppd + rng.integers(0, ppd, n)
    kind = np.where(rng.random(n) < rng.random(), eventsim.READ,
                    rng.choice([eventsim.PROG, eventsim.COPYBACK, eventsim.ERASE], n, p=[0.8, 0.1, 0.1]))
    kind = kind.astype(np.uint8)
    ready = np.sort(rng.integers(0, 20_000, n))
    service = np.where(kind == eventsim.READ, 200, rng.choice([600, 800, 3000], n)).astype(np.int64)
    gate = np.full(n, -1, np.int64)
    last: dict[int, list[int]] = {}
    for i in range(n):
        if kind[i] != eventsim.READ:
            L = last.setdefault(int(plane[i]), [])
            if len(L) >= 2 and rng.random() < 0.8:
                gate[i] = L[-2]
            L.append(i)
    gate_x = np.where(gate >= 0, rng.integers(0, 300, n), 0).astype(np.int64)
    floor = np.where(rng.random(n) < 0.1, rng.integers(0, 20_000, n), 0).astype(np.int64)
    join = np.full(n, -1, np.int64)
    carry = {d: rng.integers(0, 5000, int(rng.integers(0, q + 1))).tolist() for d in range(dies)}
    pf = rng.integers(0, 3000, dies * ppd).astype(np.int64)
    return dict(kind=kind, ready=ready.astype(np.int64), plane=plane, die=die, service=service), dict(
        t_cmd=int(rng.choice([0, 3, 50])), queue_depth=q, die_carry=carry, gate=gate, gate_x=gate_x,
        floor=floor, join=join, full=True), pf


def test_simulate_twin_equals_event_scheduler():
    rng = np.random.default_rng(21)
    for k in range(650):
        a, kw, pf = _random_case(rng) if k < 600 else _big_case(rng)
        pf1, pf2 = pf.copy(), pf.copy()
        ref = eventsim.simulate(*a.values(), plane_free=pf1, **kw)
        got = eventsim.simulate_compiled(*a.values(), plane_free=pf2, **kw)
        for x, y in zip(ref, got):
            assert np.array_equal(x, y), k
        assert np.array_equal(pf1, pf2), k
    # without gates, floors and joins (the plain form)
    a, kw, pf = _big_case(rng)
    for key in ("gate", "gate_x", "floor", "join"):
        kw.pop(key)
    pf1, pf2 = pf.copy(), pf.copy()
    for x, y in zip(eventsim.simulate(*a.values(), plane_free=pf1, **kw),
                    eventsim.simulate_compiled(*a.values(), plane_free=pf2, **kw)):
        assert np.array_equal(x, y)
    assert np.array_equal(pf1, pf2)


_NO_LAZY = (eventsim._BIG, eventsim._NO_SKIP)      # (_simulate_split without the round-15 skip)


def _loop_args(a, kw, pf):
    """``simulate_compiled``'s arguments to its loops (``_simulate_loop`` / ``_simulate_split``)."""
    n = len(a["kind"])
    neg = np.full(n, -1, np.int64)
    z = np.zeros(n, np.int64)
    cd, ct = eventsim._carry_arrays(kw["die_carry"])
    g = kw.get("gate")
    fl = kw.get("floor")
    j = kw.get("join")
    return (np.asarray(a["kind"], np.int64), np.asarray(a["ready"], np.int64), np.asarray(a["plane"], np.int64),
            np.asarray(a["die"], np.int64), np.asarray(a["service"], np.int64), int(kw["t_cmd"]),
            int(kw["queue_depth"]), pf, cd, ct, neg if g is None else np.asarray(g, np.int64),
            z if kw.get("gate_x") is None else np.asarray(kw["gate_x"], np.int64),
            z if fl is None else np.asarray(fl, np.int64), fl is not None, neg if j is None else np.asarray(j, np.int64))


def test_simulate_split_per_die_equals_the_loop_on_all_dies():
    """``_simulate_split`` (one die at a time) gives ``_simulate_loop``'s five results on all dies at once and the
    same plane free times, on random cases with several dies (gates, floors, joins, carried releases, the queue
    depth binding); a gate across dies or a plane on two dies: it declines and changes nothing (then
    ``simulate_compiled`` runs the loop on all, equal to ``simulate``); a split that dropped a die's carried
    releases is seen (the cases exercise them)."""
    rng = np.random.default_rng(29)
    nsplit = 0
    seen = 0
    for k in range(400):
        a, kw, pf = _random_case(rng) if k < 300 else _big_case(rng)
        args = _loop_args(a, kw, pf.copy())
        pf1, pf2 = pf.copy(), pf.copy()
        ref = eventsim._simulate_loop(*args[:7], pf1, *args[8:])
        got = eventsim._simulate_split(*args[:7], pf2, *args[8:], *_NO_LAZY)
        assert got[5], k
        nsplit += len(np.unique(args[3])) > 1
        for x, y in zip(ref, got[:5]):
            assert np.array_equal(x, y), k
        assert np.array_equal(pf1, pf2), k
        if len(args[8]):                           # without the carried releases: differs somewhere
            pf3 = pf.copy()
            bad = eventsim._simulate_split(*args[:7], pf3, args[8][:0], args[9][:0], *args[10:], *_NO_LAZY)
            seen += any(not np.array_equal(x, y) for x, y in zip(ref[:4], bad[:4])) or not np.array_equal(pf1, pf3)
    assert nsplit > 100 and seen > 20
    # a gate across dies: declined, pf unchanged; simulate_compiled then equals simulate
    for k in range(40):
        a, kw, pf = _big_case(rng)
        die = a["die"]
        prog = np.flatnonzero((a["kind"] != eventsim.READ))
        i = prog[-1]
        other = np.flatnonzero(die[:i] != die[i])
        if not len(other):
            continue
        kw["gate"] = kw["gate"].copy()
        kw["gate"][i] = other[-1]
        args = _loop_args(a, kw, pf.copy())
        pf2 = pf.copy()
        got = eventsim._simulate_split(*args[:7], pf2, *args[8:], *_NO_LAZY)
        assert not got[5] and np.array_equal(pf2, pf)
        pf1, pf3 = pf.copy(), pf.copy()
        for x, y in zip(eventsim.simulate(*a.values(), plane_free=pf1, **kw),
                        eventsim.simulate_compiled(*a.values(), plane_free=pf3, **kw)):
            assert np.array_equal(x, y)
        assert np.array_equal(pf1, pf3)
    # a plane on two dies: declined
    a, kw, pf = _big_case(rng)
    a["die"] = a["die"].copy()
    i = int(np.flatnonzero(a["plane"] == a["plane"][-1])[0])
    assert i < len(a["plane"]) - 1
    a["die"][i] = a["die"][i] + 1
    args = _loop_args(a, kw, pf.copy())
    assert not eventsim._simulate_split(*args[:7], pf.copy(), *args[8:], *_NO_LAZY)[5]


def test_merge_runs_is_a_stable_sort_of_the_stream():
    """The scheduler's arrival stream sort (a natural merge of ascending runs) equals a stable argsort, compiled
    and as Python, for streams of 1 to many runs with ties across runs (the x's say which of equal times came
    first)."""
    rng = np.random.default_rng(9)
    for case in range(200):
        n = int(rng.integers(0, 80))
        runs = int(rng.integers(1, 7))
        cuts = np.sort(rng.integers(0, n + 1, runs - 1)) if n else np.zeros(0, np.int64)
        t = np.concatenate([np.sort(p) for p in np.split(rng.integers(0, 20, n), cuts)]).astype(np.int64)
        x = np.arange(n, dtype=np.int64)
        o = np.argsort(t, kind="stable")
        for fn in (eventsim._merge_runs, eventsim._merge_runs.py_func):
            tt, xx = np.append(t, -1), np.append(x, -1)       # a sentinel past n stays put
            fn(tt, xx, n)
            assert tt[:n].tolist() == t[o].tolist() and xx[:n].tolist() == x[o].tolist(), case
            assert tt[n] == -1 and xx[n] == -1


def test_simulate_twin_gate_that_never_runs():
    one = np.zeros(2, np.int64)
    args = (np.array([1, 1], np.uint8), one, one, one, np.array([5, 5], np.int64))
    kw = dict(t_cmd=0, queue_depth=2, die_carry={}, gate=np.array([1, 0]), gate_x=one)
    for f in (eventsim.simulate, eventsim.simulate_compiled):
        with pytest.raises(ValueError, match="never runs"):
            f(*args, plane_free=np.zeros(1, np.int64), **kw)


def _fifo_run(mode, monkeypatch, batches, *, t_cmd, Q, nplanes, ndies, svc):
    monkeypatch.setenv("HBFD_ACCEL", mode)
    pf = np.zeros(nplanes, np.int64)
    carry = DieCarry(ndies, Q)
    stats = {"qd_bound_batches": 0, "qd_bound_dies": 0}
    outs = []
    for r, die, plane, horizon in batches:
        E = fifo_exact(r, die, plane, svc, t_cmd=t_cmd, queue_depth=Q, nplanes=nplanes, ndies=ndies,
                       plane_free=pf, carry=carry, horizon=horizon, stats=stats)
        o = np.lexsort((carry.t, carry.die))
        outs.append((E.copy(), pf.copy(), carry.die[o].copy(), carry.t[o].copy()))
    return outs, stats


def test_fifo_twin_equals_numpy(monkeypatch):
    """Batches of reads in arrival order carried across batches; queue depths 1..40, bursts (the depth
    binds, saturated dies) and spread arrivals (it does not)."""
    rng = np.random.default_rng(5)
    seen = {"bound": 0, "free": 0}
    for k in range(120):
        ndies = int(rng.integers(1, 9))
        ppd = int(rng.integers(1, 5))
        Q = int(rng.choice([1, 2, 3, 8, 40, 400]))
        svc = int(rng.choice([30, 2000]))
        t_cmd = int(rng.choice([0, 3, 50]))
        t = 0
        batches = []
        for _ in range(int(rng.integers(1, 6))):
            n = int(rng.integers(1, 400))
            gap = int(rng.choice([0, 1, svc // max(1, ndies * ppd), 5 * svc]))
            r = t + np.cumsum(rng.integers(0, gap + 1, n)) if gap else np.full(n, t, np.int64)
            r = r.astype(np.int64)
            die = rng.integers(0, ndies, n)
            plane = die * ppd + rng.integers(0, ppd, n)
            t = int(r[-1])
            batches.append((r, die, plane, t))
        kw = dict(t_cmd=t_cmd, Q=Q, nplanes=ndies * ppd, ndies=ndies, svc=svc)
        ref, s_ref = _fifo_run("off", monkeypatch, batches, **kw)
        got, s_got = _fifo_run("on", monkeypatch, batches, **kw)
        for x, y in zip(ref, got):
            for a, b in zip(x, y):
                assert np.array_equal(a, b), k
        assert s_ref == s_got, k
        seen["bound" if s_ref["qd_bound_dies"] else "free"] += 1
    assert seen["bound"] > 30 and seen["free"] > 20, seen


def _geometry(name, qd):
    g = MediaGeometry.from_profile(load_profile(name))
    if qd == "unbounded":
        g = dataclasses.replace(g, queue_depth=MAX_DIE_QUEUE_SLOTS // g.dies)
    elif qd == "small":
        g = dataclasses.replace(g, queue_depth=2)
    return g


def _engine_run(g, stream, sizes, adv, every_counter=False):
    """Completions of each collect and the stats (``stats_off_on``'s, or with ``every_counter`` all of them: a
    changed twin that only makes a path decline is seen in its path counters)."""
    eng = MediaEngine(g)
    outs = []
    pos = 0
    for k, b in enumerate(sizes):
        part = stream[pos:pos + b]
        pos += b
        eng.submit(part)
        if adv[k]:
            eng.advance(int(part["arrival_ns"].max()))
        outs.append(eng.collect())
        if k % 4 == 3:
            outs.append(eng.collect())            # a quiet scan
    outs.append(eng.drain())
    return outs, eng.stats() if every_counter else stats_off_on(eng)


# the path counters of the event scheduler's runs: with the twins on, round 15's split leaves a burst die's commands
# behind its reads unscheduled where none of them can be decided yet, and a later run schedules them again (more
# runs of the scheduler, nothing else changes), so the twins-off and -on runs compare the stats without them
RERUN_COUNTERS = ("event_batches", "event_dies")


def stats_off_on(eng) -> dict:
    """``eng.stats()`` less ``RERUN_COUNTERS``: what the twins-off and -on runs must agree on."""
    st = eng.stats()
    st["counts"] = {k: v for k, v in st["counts"].items() if k not in RERUN_COUNTERS}
    return st


CASES = [("nominal", "read", 0.0, None, "profile"), ("nominal", "read", 0.0, 0.5, "small"),
         ("nominal", "write", 0.0, None, "profile"), ("nominal", "mixed", 0.5, None, "profile"),
         ("nominal", "mixed", 0.1, 0.1, "profile"), ("nominal", "mixed", 0.5, 1.0, "unbounded"),
         ("ocp-sg1", "read", 0.0, None, "profile"), ("ocp-sg1", "mixed", 0.3, 0.9, "profile"),
         ("ocp-sg2", "mixed", 0.5, None, "small"), ("ocp-sg2", "write", 0.0, 0.5, "profile"),
         ("ocp-sg3", "read", 0.0, 1.0, "profile"), ("ocp-sg3", "mixed", 0.2, None, "unbounded"),
         ("conservative", "mixed", 0.5, 0.5, "profile"), ("nominal", "read-hot", 0.0, 0.5, "profile"),
         ("ocp-sg2", "mixed-hot", 0.3, 0.5, "profile"), ("ocp-sg1", "mixed-hot", 0.5, None, "small")]


@pytest.mark.parametrize("prof,op,wf,load,qd", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_engine_off_equals_on(monkeypatch, prof, op, wf, load, qd):
    g = _geometry(prof, qd)
    gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
    rng = np.random.default_rng(zlib.crc32(f"{prof}{op}{wf}{load}{qd}".encode()))
    hot = op.endswith("-hot")           # a few hundred pages, 512 B: buffer hits, coalescing, invalidations
    op = op.removesuffix("-hot")
    stream = make_stream(g, 5000, 512 if hot else int(rng.choice([512, 4096])), op, gap,
                         seed=int(rng.integers(100)), write_fraction=wf)
    if hot:
        stream["media_address"] = (rng.integers(0, 300, 5000) * 4096 + rng.integers(0, 8, 5000) * 512).astype(np.uint64)
    sizes, tot = [], 0
    while tot < len(stream):
        sizes.append(int(rng.choice([1, 7, 48, 300, 1500, 4000])))
        tot += sizes[-1]
    adv = rng.random(len(sizes)) < 0.7
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref, st_ref = _engine_run(g, stream, sizes, adv)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    got, st_got = _engine_run(g, stream, sizes, adv)
    assert len(ref) == len(got)
    for x, y in zip(ref, got):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert st_ref == st_got
    if hot:
        assert st_ref["counts"]["buffer_hits"] + st_ref["counts"]["coalesced_reads"] > 100


READ_CASES = [("nominal", "profile", None, "page"), ("nominal", "profile", 0.1, "page"),
              ("nominal", "small", 0.5, "span"), ("nominal", "unbounded", 0.9, "span-hot"),
              ("ocp-sg1", "profile", None, "page"), ("ocp-sg1", "profile", 0.9, "hot"),
              ("ocp-sg2", "unbounded", None, "span"), ("ocp-sg3", "profile", 0.3, "page"),
              ("conservative", "small", 1.0, "hot"), ("aggressive", "profile", 2.0, "span")]


@pytest.mark.parametrize("prof,qd,load,pattern", READ_CASES, ids=["-".join(map(str, c)) for c in READ_CASES])
def test_read_pass_off_equals_on(monkeypatch, prof, qd, load, pattern):
    """Read streams (the whole-batch compiled pass ``_read_pass`` serves their batches of more than 48) with
    ``HBFD_ACCEL=off`` and ``on``: every completion and the whole ``stats()`` equal; the pass ran with the
    channel decided in it, transfers deferred, earlier batches' transfers taken, multi-page requests."""
    g = _geometry(prof, qd)
    n = 12000
    gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
    rng = np.random.default_rng(zlib.crc32(f"{prof}{qd}{load}{pattern}".encode()))
    stream = make_stream(g, n, 4096, "read", gap, seed=int(rng.integers(100)))
    stream["op"] = np.where(rng.random(n) < 0.3, 3, 0)                 # cp.async reads too
    if pattern.startswith("span"):     # any size up to 3 pages at any byte: pages partly read, several per request
        nb = rng.integers(1, 3 * 4096, n)
        lim = 400 * 4096 if pattern.endswith("hot") else g.capacity_bytes
        stream["bytes"] = nb
        stream["media_address"] = rng.integers(0, lim - nb)
    elif pattern == "hot":
        stream["bytes"] = 512
        stream["media_address"] = (rng.integers(0, 300, n) * 4096 + rng.integers(0, 8, n) * 512).astype(np.uint64)
    sizes, tot = [], 0
    while tot < n:
        sizes.append(int(rng.choice([1, 49, 300, 1500, 4000])))
        tot += sizes[-1]
    adv = rng.random(len(sizes)) < 0.6
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref, st_ref = _engine_run(g, stream, sizes, adv)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    seen = {"calls": 0, "decided": 0, "deferred": 0, "taken": 0, "multi": 0, "hits": 0}
    orig = engine_mod._read_pass

    def spy(*a):
        out = orig(*a)
        seen["calls"] += 1
        seen["decided"] += len(out[2]) > 0
        seen["deferred"] += len(out[3]) > 0
        seen["taken"] += len(a[20]) > 0
        seen["multi"] += int(out[9][0]) > len(a[0])
        seen["hits"] += int(out[9][2] + out[9][3]) > 0
        return out
    monkeypatch.setattr(engine_mod, "_read_pass", spy)
    got, st_got = _engine_run(g, stream, sizes, adv)
    assert len(ref) == len(got)
    for x, y in zip(ref, got):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert st_ref == st_got
    assert seen["calls"] >= 5, seen
    if pattern != "hot":              # (a hot stream's hits are ready by the latest arrival + t_cmd)
        assert seen["deferred"], seen
    if load is not None and load < 1:
        assert seen["decided"] and seen["taken"], seen
    if pattern.startswith("span"):
        assert seen["multi"], seen
    if "hot" in pattern:
        assert seen["hits"], seen


def _later(out, f):
    out[f][:] += 1                      # every end one ns later
    return out


def _all_miss(out):
    out[0][:] = True                    # every read a miss (no buffer hit)
    return out


def _bump(out, i, k=None, by=1):
    out = list(out)
    v = out[i].copy()
    if k is None:
        v += by
    else:
        v[k] += by
    out[i] = v
    return tuple(out)


@pytest.mark.parametrize("mod,name,perturb,op,nbytes,pattern", [
    # (the engine's runs of the scheduler go through the fused call, which holds _simulate_split compiled in: wt/fuse14)
    (engine_mod, "_event_run", lambda o: _later(o, 2), "mixed", 4096, "random"),
    (diestage, "_fifo_loop", lambda o: _later(o, 0), "mixed", 4096, "random"),
    (engine_mod, "_chan_fcfs", lambda o: (o[0] + 1, o[1]), "read", 4096, "random"),
    (engine_mod, "_chan_fcfs_packed", lambda o: (o[0] + 1, o[1]), "read", 4096, "burst6k"),
    (engine_mod, "_lookup_events", _all_miss, "mixed", 512, "hot"),
    (engine_mod, "_read_pass", lambda o: _bump(o, 0), "read", 4096, "light"),          # completions
    (engine_mod, "_read_pass", lambda o: _bump(o, 9, 2), "read", 512, "hot"),          # a count (buffer hits)
    (engine_mod, "_read_pass", lambda o: _bump(o, 4), "read", 4096, "random"),         # deferred ready times
    (engine_mod, "_read_pass", lambda o: _bump(o, 1), "read", 4096, "light"),          # taken deferred ends
    (engine_mod, "_read_pass", lambda o: _bump(o, 11, by=50_000), "read", 4096, "random")],   # carried
    ids=["event-run", "fifo", "chan", "chan-packed", "lookup", "pass-done", "pass-count", "pass-deferred", "pass-old",
         "pass-carry"])
def test_a_twin_that_differs_is_seen(monkeypatch, mod, name, perturb, op, nbytes, pattern):
    """The engine comparison (completions and stats) fails when a twin's outputs are changed."""
    g = _geometry("nominal", "profile")
    monkeypatch.setenv("HBFD_ACCEL", "on")
    sizes, adv = [1000, 1000, 1000], [True] * 3
    gap = round(1e9 / (0.05 * g.aggregate_bytes_per_s / 4096)) if pattern == "light" else 0
    stream = make_stream(g, 3000, nbytes, op, gap, seed=1, write_fraction=0.5)
    if pattern == "light":
        sizes, adv = [300] * 10, [k % 3 == 0 for k in range(10)]
    if pattern == "burst6k":          # the quiet scan decides 6000 transfers at once (packed-key order)
        stream = make_stream(g, 6000, nbytes, op, 0, seed=1)
        sizes, adv = [2000] * 3, [True] * 3
    if pattern == "hot":                # 64 pages: buffer hits
        stream["media_address"] = (np.arange(3000) % 64 * 4096).astype(np.uint64)
    ref = _engine_run(g, stream, sizes, adv)
    orig = getattr(mod, name)
    calls = []

    def changed(*a):
        calls.append(1)
        return perturb(orig(*a))
    monkeypatch.setattr(mod, name, changed)
    got = _engine_run(g, stream, sizes, adv)
    assert calls
    assert ref[1] != got[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], got[0]))


def test_auto_without_numba_runs_the_numpy_definitions(monkeypatch):
    """HBFD_ACCEL=auto where numba does not import (the H200 machine): no twin is called, same results."""
    from hbfd.media import hist
    g = _geometry("nominal", "profile")
    stream = make_stream(g, 2000, 4096, "mixed", 0, seed=2, write_fraction=0.3)
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref = _engine_run(g, stream, [700, 700, 600], [True] * 3)
    monkeypatch.setenv("HBFD_ACCEL", "auto")
    monkeypatch.setattr(accel, "_numba", lambda: (None, "numba not importable: ImportError: test"))
    for mod, name in ((eventsim, "_simulate_loop"), (eventsim, "_simulate_split"), (diestage, "_fifo_loop"), (diestage, "_fifo_carry"),
                      (engine_mod, "_chan_fcfs"), (engine_mod, "_lookup_events"), (engine_mod, "_read_pass"),
                      (engine_mod, "_read_front"), (engine_mod, "_chan_fcfs_packed"), (hist, "_bin_into"),
                      (lindley, "_packed_build"), (lindley, "_packed_sort"), (eventsim, "_chains_loop"),
                      (eventsim, "_qd_loop"),
                      (engine_mod, "_latest_q"), (engine_mod, "_pending_fields"), (engine_mod, "_pid_map"),
                      (engine_mod, "_tail_scan"), (diestage, "_carry_keep"), (engine_mod, "_ring_loop"),
                      (engine_mod, "_extreme_at"), (engine_mod, "_ends_get"), (ftl_mod, "_l2p_swap"),
                      (ftl_mod, "_dup_planes"), (engine_mod, "_gated_split"),
                      (engine_mod, "_parts_update"), (engine_mod, "_pending_take"), (engine_mod, "_ngate_scan"),
                      (engine_mod, "_ngate_bases"), (diestage, "_decided_put"),
                      (engine_mod, "_min_where"), (eventsim, "_plane_order"), (lindley, "_packed_build_into"),
                      (engine_mod, "_event_decide"), (engine_mod, "_read_ready"), (engine_mod, "_buf_rows"),
                      (engine_mod, "_event_inputs"), (engine_mod, "_split_items"),
                      (engine_mod, "_event_merge"), (engine_mod, "_mixed_front"), (engine_mod, "_mixed_req"),
                      (engine_mod, "_split_waiting"), (ftl_mod, "_program_bulk"),
                      (ftl_mod, "_program_place"), (engine_mod, "_event_run")):
        monkeypatch.setattr(mod, name, None)      # calling a twin would raise a TypeError
    got = _engine_run(g, stream, [700, 700, 600], [True] * 3)
    assert ref[1] == got[1] and all(np.array_equal(x, y) for x, y in zip(ref[0], got[0]))


def test_warm_twins_compiles_every_twin_before_serving(monkeypatch, caplog):
    """make_engine warms the twins (hbfd.media.warm_twins): its scratch run must reach them all, so the
    daemon never compiles while serving (a cold compile takes ~20 s; the heartbeat's stale limit is 1 s)."""
    pytest.importorskip("numba")
    from hbfd.media.geometry import MediaGeometry
    from hbfcommon.profile import as_profile
    E = engine_mod
    monkeypatch.setenv("HBFD_ACCEL", "on")
    from hbfd.media import kernels as K
    from hbfd.media import hist
    twins = (eventsim._simulate_loop, eventsim._simulate_split, K._fifo_loop, K._fifo_carry, K._lookup_events, K._chan_fcfs,
             K._chan_fcfs_packed, K._read_front, K._read_pass, hist._bin_into, K._packed_build, K._packed_sort,
             eventsim._chains_loop, eventsim._qd_loop, K._latest_q, K._pending_fields, K._pid_map, K._tail_scan,
             K._carry_keep, K._ring_loop, K._extreme_at, K._ends_get, K._l2p_swap, K._dup_planes,
             K._gated_split, K._parts_update, K._pending_take, K._ngate_scan, K._ngate_bases, K._decided_put,
             K._min_where, eventsim._plane_order, K._packed_build_into, K._event_decide, K._read_ready, K._buf_rows,
             K._event_inputs, K._split_items, K._event_merge, K._mixed_front, K._mixed_req,
             K._split_waiting, K._program_bulk, K._program_place, K._event_run)
    caplog.set_level("DEBUG", logger="hbfd.accel")
    for name in ("nominal", "ocp-sg2"):
        E.warm_twins(MediaGeometry.from_profile(as_profile(name)))
    assert [t.__name__ for t in twins if not t.is_compiled()] == []
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    monkeypatch.setenv("HBFD_ACCEL", "off")
    assert accel.warm("x", lambda: None, twins) == 0.0


def test_histogram_binning_twin_equals_numpy(monkeypatch):
    """``hist._bin_into`` (compiled) bins as ``LogHistogram._index`` + bincount: counts, max, total, every
    quantile, on values across the whole range (negative, the exact small ones, powers of two and their
    neighbours, up to 2^62); a twin off by one bin is seen."""
    from hbfd.media import hist
    rng = np.random.default_rng(3)
    p2 = 1 << np.arange(0, 62, dtype=np.int64)
    v = np.concatenate([rng.integers(-5, 200, 3000), rng.integers(0, 1 << 40, 3000), p2, p2 - 1, p2 + 1,
                        np.array([0, 63, 64, 65, (1 << 62) - 1], np.int64)]).astype(np.int64)
    out = {}
    for mode in ("off", "on"):
        monkeypatch.setenv("HBFD_ACCEL", mode)
        h = hist.LogHistogram()
        for part in np.array_split(v, 7):
            h.add(part)
        out[mode] = (h.counts.copy(), h.max, h.total, h.summary())
    assert np.array_equal(out["off"][0], out["on"][0]) and out["off"][1:] == out["on"][1:]
    orig = hist._bin_into

    def off_by_one(x, counts):
        c = np.zeros_like(counts)
        r = orig(x, c)
        counts += np.roll(c, 1)
        return r
    monkeypatch.setattr(hist, "_bin_into", off_by_one)
    h = hist.LogHistogram()
    h.add(v)
    assert not np.array_equal(h.counts, out["off"][0])


def test_read_front_falls_back_on_anything_unusual(monkeypatch):
    """Batches of reads with unsupported ops, requests outside the media, zero bytes, stores, arrivals out of
    order (``_read_front`` says no: the numpy path converts, checks and decides) give with ``HBFD_ACCEL=on``
    what they give with ``off``; an arrival at 2^62 is the same MediaError; the front ran on the clean ones."""
    from hbfd.media.geometry import MediaError
    g = _geometry("nominal", "profile")
    rng = np.random.default_rng(9)
    n = 3000
    stream = make_stream(g, n, 4096, "read", 40, seed=4)
    k = rng.choice(n, 40, replace=False)
    stream["op"][k[:8]] = 7                                          # unsupported
    stream["media_address"][k[8:16]] = g.capacity_bytes - 100         # past the end
    stream["bytes"][k[16:24]] = 0
    stream["op"][k[24:32]] = 1                                       # stores (the write path)
    stream["arrival_ns"][k[32:]] -= 5000                             # out of order
    sizes, adv = [200] * 15, [True, False, True] * 5
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref, st_ref = _engine_run(g, stream, sizes, adv)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    seen = []
    orig = engine_mod._read_front

    def spy(*a):
        out = orig(*a)
        seen.append(out[4] == 2)
        return out
    monkeypatch.setattr(engine_mod, "_read_front", spy)
    got, st_got = _engine_run(g, stream, sizes, adv)
    assert st_ref == st_got and all(np.array_equal(x, y) for x, y in zip(ref, got))
    assert True in seen and False in seen, seen
    assert st_ref["counts"]["io_error"] == 16 and st_ref["counts"]["unsupported"] == 8
    late = make_stream(g, 100, 4096, "read", 10)
    late["arrival_ns"][50] = 1 << 62
    for mode in ("off", "on"):
        monkeypatch.setenv("HBFD_ACCEL", mode)
        with pytest.raises(MediaError, match="beyond 2"):
            MediaEngine(g).submit(late)



@accel.jit
def _t_inner(x):
    return x * 3


@accel.jit
def _t_outer(a):
    s = 0
    for i in range(a.shape[0]):
        s += _t_inner(a[i])
    return s


def test_a_twin_calling_twins_of_another_file_is_keyed_on_that_file(monkeypatch):
    """``accel.jit`` binds a twin's callees to their compiled forms (numba could not type the lazy wrapper); a
    callee of another file is allowed and that file's contents join the caller's cache key (numba's cache of the
    caller is keyed on the caller's file alone: tests/test_accel.py checks a changed callee file is compiled
    again). Same-file callees add nothing; the engine's fused scheduler call (``kernels._event_run``) is keyed on
    eventsim.py."""
    from hbfd.media import eventsim as E, kernels as K
    monkeypatch.setenv("HBFD_ACCEL", "on")
    assert _t_outer(np.arange(4)) == 18 and _t_outer.is_compiled()
    assert accel._foreign_sources(_t_outer.py_func) == ()
    ns = {"np": np, "_fifo_carry": K._fifo_carry, "_t_inner": _t_inner}
    exec("def uses_other(x):\n    return _t_inner(x)\n", ns)
    ns["uses_other"].__code__ = ns["uses_other"].__code__.replace(co_filename=K.__file__)
    # (not compiled here: numba's cache would place a function of an exec'd namespace under kernels.py's cache
    # and could not import it back; tests/test_accel.py compiles a real cross-file pair in fresh processes)
    assert [p for p, _ in accel._foreign_sources(ns["uses_other"])] == [__file__]
    assert [p for p, _ in accel._foreign_sources(K._event_run.py_func)] == [E.__file__]


def test_concat_records_equals_numpy_concatenate():
    """``engine._concat_records`` (collect's concatenation of completion arrays, as bytes) gives what
    ``np.concatenate`` gives, empty parts and a strided part included."""
    from hbfd.contracts import COMPLETION_BATCH_DTYPE as D
    rng = np.random.default_rng(1)
    parts = []
    for n in (5, 0, 4096, 1, 0, 37):
        p = np.zeros(n, D)
        p["id"] = rng.integers(0, 1 << 63, n, dtype=np.uint64)
        p["modeled_ns"] = rng.integers(0, 1 << 40, n, dtype=np.uint64)
        p["status"] = rng.integers(0, 4, n)
        parts.append(p)
    parts.append(parts[2][::3])
    got = engine_mod._concat_records(parts)
    ref = np.concatenate(parts)
    assert got.dtype == ref.dtype and np.array_equal(got, ref) and got.tobytes() == ref.tobytes()


def test_packed_key_build_twin_equals_numpy(monkeypatch):
    """``lindley.packed_keys`` with the compiled key build (2048 keys or more) gives numpy's sorted keys and
    (bits, sbits, lo): random majors and minors (negative, equal, spans up to 2^40, majors of several dtypes and
    a strided view), around the twin's threshold; a build with the index bits reversed is seen, in the keys and
    in the engine's completions (a read burst decided at once orders its transfers by them)."""
    rng = np.random.default_rng(11)
    cases = []
    for n in (lindley._PACKED_TWIN_MIN - 1, lindley._PACKED_TWIN_MIN, 5000, 70_000):
        for nm, span, lo in ((32, 10**8, 0), (1, 1, 0), (128, 10**3, -(10**6)), (7, 1 << 40, -(1 << 39))):
            cases.append((rng.integers(0, nm, n), nm, rng.integers(lo, lo + span, n)))
    cases.append((rng.integers(0, 16, 2 * 9000).astype(np.int16)[::2], 16, rng.integers(0, 500, 9000)))
    cases.append((rng.integers(0, 16, 9000).astype(np.uint8), 16, -rng.integers(0, 10**9, 9000)))
    for major, nm, minor in cases:
        monkeypatch.setenv("HBFD_ACCEL", "off")
        ref = lindley.packed_keys(major, nm, minor)
        monkeypatch.setenv("HBFD_ACCEL", "on")
        got = lindley.packed_keys(major, nm, minor)
        assert got[1:] == ref[1:] and got[0].dtype == np.int64 and np.array_equal(got[0], ref[0])
    assert lindley._packed_build.is_compiled()
    major, nm, minor = cases[4]                    # (2048 keys, 32 majors)
    ref = lindley.packed_keys(major, nm, minor)[0]
    orig = lindley._packed_build

    def reversed_index(ma, mi, lo, sbits, bits):
        k = orig(ma, mi, lo, sbits, bits)
        idx = k & ((1 << bits) - 1)
        return (k ^ idx) | (len(k) - 1 - idx)
    g = _geometry("nominal", "profile")
    stream = make_stream(g, 8000, 4096, "read", 0, seed=4)
    base = _engine_run(g, stream, [8000], [False])
    monkeypatch.setattr(lindley, "_packed_build", reversed_index)
    assert not np.array_equal(lindley.packed_keys(major, nm, minor)[0], ref)
    bad = _engine_run(g, stream, [8000], [False])
    assert not all(np.array_equal(x, y) for x, y in zip(base[0], bad[0]))


@pytest.mark.parametrize("mode", ["off", "on"])
def test_quiet_scan_completes_chunk_by_chunk_as_concatenated(monkeypatch, mode):
    """``MediaEngine._complete_every_last`` and round 5's ``_commit_all_chunks`` (a burst's final decision, request
    chunks and, for the latter, deferred chunks not concatenated; both decide by ``_every_last`` and complete
    by ``_complete_all_pending``) give the completions and stats of ``_complete_parts``'s concatenated form: read
    bursts cut into batches, of one-page requests (the forms run) and of 3-page ones (they decline: requests
    with two pages deferred). A form that drops a chunk's last request is seen."""
    monkeypatch.setenv("HBFD_ACCEL", mode)
    g = _geometry("nominal", "profile")
    orig = MediaEngine._every_last
    orig_all = MediaEngine._complete_all_pending
    for nbytes, sizes, runs in ((4096, [3000, 2500, 4000, 1500], True), (3 * 4096, [900, 700, 1400], False)):
        stream = make_stream(g, sum(sizes), nbytes, "read", 0, seed=7)
        ran = []

        def spy(self, parts):
            r = orig(self, parts)
            ran.append(r)
            return r
        monkeypatch.setattr(MediaEngine, "_every_last", spy)
        got = _engine_run(g, stream, sizes, [False] * len(sizes))
        monkeypatch.setattr(MediaEngine, "_every_last", lambda self, parts: False)
        ref = _engine_run(g, stream, sizes, [False] * len(sizes))
        assert (True in ran) == runs and (runs or False in ran)   # (3 pages: some requests have 2 left)
        assert ref[1] == got[1] and all(np.array_equal(x, y) for x, y in zip(ref[0], got[0]))
    monkeypatch.setattr(MediaEngine, "_every_last", orig)

    def drops_last(self, done):
        orig_all(self, done)
        self._pending[-1] = self._pending[-1][:-1]
    stream = make_stream(g, 6000, 4096, "read", 0, seed=7)
    ref = _engine_run(g, stream, [3000, 3000], [False, False])
    monkeypatch.setattr(MediaEngine, "_complete_all_pending", drops_last)
    bad = _engine_run(g, stream, [3000, 3000], [False, False])
    assert sum(map(len, bad[0])) == sum(map(len, ref[0])) - 1


def test_packed_sort_twin_equals_np_sort(monkeypatch):
    """``kernels._packed_sort`` (``lindley.packed_keys``'s sort with the twins on: a stable radix sort of the bits
    above the index) gives ``np.sort``'s array: upper parts of 0 to 52 bits (no digit, one, several, a digit every
    key shares, digits of unequal use), many equal upper parts, 1 to 70k keys; the keys in the engine's read-burst
    quiet scan. A sort off by one swap is seen in the engine's completions."""
    pytest.importorskip("numba")
    from hbfd.media import kernels as K
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(5)
    seen = 0
    for n in (1, 2, 3, 100, 2048, 5000, 70_000):
        bits = max(1, (n - 1).bit_length())
        for hb in (0, 1, 5, 11, 12, 21, 22, 23, 34, 52):
            if hb + bits > 62:
                continue
            for hi in (1 << hb, 3, 1 << max(0, hb - 11)):        # the whole span, few distinct, low digits only
                up = rng.integers(0, max(1, min(hi, 1 << hb)), n)
                if hb and n > 2:
                    up[rng.integers(0, n)] = (1 << hb) - 1          # the top bit set somewhere
                key = (up.astype(np.int64) << bits) | np.arange(n, dtype=np.int64)
                ref = np.sort(key)
                got = K._packed_sort(key.copy(), bits)
                assert got.dtype == np.int64 and np.array_equal(got, ref), (n, hb, hi)
                seen += 1
    assert seen > 150
    g = _geometry("nominal", "profile")
    stream = make_stream(g, 8000, 4096, "read", 0, seed=4)
    base = _engine_run(g, stream, [8000], [False])
    orig = lindley._packed_sort

    def one_swap(key, bits):
        k = orig(key, bits).copy()
        k[[10, 11]] = k[[11, 10]]
        return k
    monkeypatch.setattr(lindley, "_packed_sort", one_swap)
    bad = _engine_run(g, stream, [8000], [False])
    assert not all(np.array_equal(x, y) for x, y in zip(base[0], bad[0]))


def test_rank_order_equals_lexsort_and_a_change_is_seen(monkeypatch):
    """``lindley.rank_order`` (round 5: the channel items' order by (data ready, seq) when they are out of seq
    order, with the twins on) is ``np.lexsort((seq, rd))``: ascending runs of seqs, random seqs, repeated seqs
    (ties by index), equal and spread ready times, 1-60k items, negative times, other integer dtypes; None where
    the keys cannot fit (spans near 2^62). An engine run of a write stream at 10 % load (channel items out of seq
    order) gives the same completions and stats off and on, and an order by seq alone is seen in it."""
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(12)
    n_cases = 0
    for n in (1, 2, 3, 511, 512, 7000, 60_000):
        for kind in ("runs", "random", "ties", "flat"):
            if kind == "runs":
                seq = np.concatenate([np.sort(rng.choice(10**7, n // 3 + 1, replace=False)) for _ in range(3)])[:n]
            elif kind == "random":
                seq = rng.permutation(n) * 2 + 1
            else:
                seq = rng.integers(0, 4, n)
            rd = rng.integers(-(10**6), 10**9, n) if kind != "flat" else rng.integers(0, 3, n)
            for s_, r_ in ((seq, rd), (seq.astype(np.int32), rd.astype(np.int64))):
                got = lindley.rank_order(r_, s_)
                assert got is not None and np.array_equal(got, np.lexsort((s_, r_))), (n, kind)
                n_cases += 1
    assert n_cases == 56
    assert lindley.rank_order(np.array([0, 1 << 61, 5], np.int64), np.array([3, 2, 1])) is None
    orig = engine_mod.rank_order
    used = []

    def counted(rd, seq):
        used.append(len(rd))
        return orig(rd, seq)
    monkeypatch.setattr(engine_mod, "rank_order", counted)
    g = _geometry("nominal", "profile")
    gap = round(1e9 / (0.1 * g.aggregate_bytes_per_s / 4096))
    stream = make_stream(g, 20_000, 4096, "write", gap, seed=2)
    sizes, adv = [5000] * 4, [True] * 4
    monkeypatch.setenv("HBFD_ACCEL", "off")
    ref = _engine_run(g, stream, sizes, adv)
    monkeypatch.setenv("HBFD_ACCEL", "on")
    got = _engine_run(g, stream, sizes, adv)
    assert used and ref[1] == got[1] and all(np.array_equal(x, y) for x, y in zip(ref[0], got[0]))

    def by_seq_only(rd, seq):                     # FCFS by creation, not data ready
        return np.argsort(seq, kind="stable")
    monkeypatch.setattr(engine_mod, "rank_order", by_seq_only)
    bad = _engine_run(g, stream, sizes, adv)
    assert got[1] != bad[1] or any(not np.array_equal(x, y) for x, y in zip(got[0], bad[0]))


def test_packed_keys_parts_equal_the_keys_of_the_concatenation(monkeypatch):
    """``lindley.packed_keys_parts`` (round 7: the final quiet scan builds the keys from the deferred chunks in place,
    ``kernels._packed_build_into``) gives ``packed_keys`` of the concatenated pieces, keys and (bits, sbits, lo),
    twins on and off: one piece, many, empty pieces, pieces of several dtypes, below and above the twin's size, keys
    that do not fit (None); pieces built in reverse are seen in a read burst's completions."""
    rng = np.random.default_rng(12)
    for sizes in ((3000,), (100, 0, 2500, 7), (4096,) * 12, (500, 600), (0, 0)):
        for nm, lo, span in ((16, 0, 10**8), (128, -(10**6), 10**3), (3, 0, 1)):
            ma = [rng.integers(0, nm, s).astype(rng.choice([np.int64, np.int16])) for s in sizes]
            mi = [rng.integers(lo, lo + span, s) for s in sizes]
            ref = lindley.packed_keys(np.concatenate(ma).astype(np.int64) if len(ma) else ma, nm, np.concatenate(mi))
            for mode in ("off", "on"):
                monkeypatch.setenv("HBFD_ACCEL", mode)
                got = lindley.packed_keys_parts(ma, nm, mi)
                assert got[1:] == ref[1:] and np.array_equal(got[0], ref[0]), (sizes, nm, mode)
    assert lindley.packed_keys_parts([np.zeros(5, np.int64)], 1 << 40, [np.arange(5) << 30]) is None
    assert lindley._packed_build_into.is_compiled()
    g = _geometry("ocp-sg1", "profile")
    stream = make_stream(g, 30_000, 4096, "read", 0, seed=3)
    sizes = [4096] * 7 + [30_000 - 7 * 4096]
    ref = _engine_run(g, stream, sizes, [True] * len(sizes))
    orig = lindley._packed_build_into
    calls = []

    monkeypatch.setattr(lindley, "_packed_build_into", lambda a, off, ma, mi, lo, sb, b: (   # each piece reversed
        calls.append(off), orig(a, off, ma[::-1].copy(), mi[::-1].copy(), lo, sb, b)))
    bad = _engine_run(g, stream, sizes, [True] * len(sizes))
    assert calls
    assert ref[1] != bad[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], bad[0]))
