"""Round 15 of the media engine's speed work: ``eventsim._simulate_split`` leaves a die's commands behind its reads
unscheduled where the engine cannot decide any of them in this run (every read of the die served by
``_read_prefix``, no other command a read or joined, X + t_cmd at least the decision limit), and the engine
schedules that die's pending commands again from the start with the next run (``MediaEngine._stale``).

* On burst-like and random command sets around the limit: where a die is skipped, the full schedule indeed
  starts each of its other commands at or after the limit and after every read start of its plane, and admits
  it no earlier than limit - t_cmd (so the engine's decision and the pending fields it keeps are the same); the
  skipped die's reads and every other die's results and plane free times are the full schedule's; the decision
  (``_event_decided``) is the same.
* Engine runs (mixed bursts and loads, random batch cuts, quiet scans) with the skip and without it give the same
  completions and stats (less the scheduler's run counters), and skip dies; the dies skipped never keep their
  (unscheduled) times as a schedule in the next run."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import engine as engine_mod
from hbfd.media import eventsim
from hbfd.media.bench import make_stream
from hbfd.media.engine import MediaEngine

from test_accel_media import _engine_run, _geometry

pytest.importorskip("numba")

BIG = eventsim._BIG


def _burst_case(rng):
    """Dies whose reads come first in index order at (nearly) one instant and whose programs (gated chains per
    plane, some erases) follow, ready at or after the reads; carried releases, plane free times, the queue depth
    binding or not; now and then a late read (after a program)."""
    dies = int(rng.integers(1, 6))
    ppd = int(rng.integers(1, 5))
    q = int(rng.choice([1, 2, 4, 8, 32, 512]))
    t_cmd = int(rng.choice([1, 3, 300]))
    kind, ready, plane, die, service, gate, gate_x, join = [], [], [], [], [], [], [], []
    t0 = int(rng.integers(0, 2000))
    spread = int(rng.choice([0, 0, 5, 400]))
    for d in range(dies):
        nr = int(rng.integers(0, 60))
        npg = int(rng.integers(0, 25))
        last: dict[int, list[int]] = {}
        for k in range(nr):
            kind.append(eventsim.READ)
            ready.append(t0 + (0 if spread == 0 else int(rng.integers(0, spread))))
            plane.append(d * ppd + int(rng.integers(0, ppd)))
            die.append(d)
            service.append(int(rng.choice([200, 20_000])))
            gate.append(-1)
            gate_x.append(0)
            join.append(-1)
        for k in range(npg):
            i = len(kind)
            p = d * ppd + int(rng.integers(0, ppd))
            kind.append(int(rng.choice([eventsim.PROG, eventsim.ERASE], p=[0.9, 0.1])))
            ready.append(t0 + int(rng.integers(0, 3 * spread + 2)))
            plane.append(p)
            die.append(d)
            service.append(int(rng.choice([600, 600_000])))
            L = last.setdefault(p, [])
            g = L[-2] if len(L) >= 2 and rng.random() < 0.8 else -1
            gate.append(g)
            gate_x.append(int(rng.integers(0, 300)) if g >= 0 else 0)
            join.append(-1)
            L.append(i)
    n = len(kind)
    kind = np.array(kind, np.uint8)
    ready, plane, die, service, gate, gate_x, join = (np.array(x, np.int64)
                                                      for x in (ready, plane, die, service, gate, gate_x, join))
    if n and rng.random() < 0.15:                  # a read after the programs: not every read fast there
        kind = np.append(kind, np.uint8(eventsim.READ))
        ready = np.append(ready, ready.max() + int(rng.integers(0, 10**6)))
        plane = np.append(plane, plane[0])
        die = np.append(die, die[0])
        service = np.append(service, 200)
        gate, gate_x, join = np.append(gate, -1), np.append(gate_x, 0), np.append(join, -1)
        n += 1
    floor = np.where(rng.random(n) < 0.1, t0 + rng.integers(0, 20_000, n), 0).astype(np.int64)
    carry = {d: (t0 + rng.integers(-5000, 50_000, int(rng.integers(0, q + 1)))).tolist() for d in range(dies)}
    pf = (t0 + rng.integers(-3000, 30_000, dies * ppd)).astype(np.int64)
    a = dict(kind=kind, ready=ready, plane=plane, die=die, service=service)
    kw = dict(t_cmd=t_cmd, queue_depth=q, die_carry=carry, gate=gate, gate_x=gate_x, floor=floor, join=join,
              full=True)
    return a, kw, pf


def _full_and_lazy(a, kw, pf, lim):
    pf_f, pf_l = pf.copy(), pf.copy()
    full = eventsim.simulate_compiled(*a.values(), plane_free=pf_f, **kw)
    sk = np.zeros(int(a["die"].max()) + 1 if len(a["die"]) else 0, bool)
    lazy = eventsim.simulate_compiled(*a.values(), plane_free=pf_l, **kw, lazy_lim=lim, skipped=sk)
    return full, pf_f, lazy, pf_l, sk


def test_split_skips_only_what_cannot_be_decided():
    rng = np.random.default_rng(15)
    nskip = nkept = 0
    for case in range(700):
        a, kw, pf = _burst_case(rng)
        if not len(a["kind"]):
            continue
        t_cmd = kw["t_cmd"]
        full0 = eventsim.simulate_compiled(*a.values(), plane_free=pf.copy(), **kw)
        isr = a["kind"] == eventsim.READ
        oth = ~isr
        # limits around where the other commands are admitted: below, at and above their earliest admission
        cands = [-BIG, int(a["ready"].min())]
        if oth.any():
            m = int(full0[2][oth].min()) + t_cmd
            cands += [m - 1, m, m + 1, int(np.median(full0[0][oth])), int(full0[0][oth].max()) + 1]
        for lim in cands:
            full, pf_f, lazy, pf_l, sk = _full_and_lazy(a, kw, pf, lim)
            fs, fe, fa, fr = full
            ls, le, la, lr = lazy
            dd = a["die"]
            pl = a["plane"]
            for d in range(len(sk)):
                md = dd == d
                if not sk[d]:
                    nkept += md.any()
                    for x, y in zip(full, lazy):
                        assert np.array_equal(x[md], y[md]), (case, lim, d)
                    continue
                nskip += 1
                r = md & isr
                o = md & oth
                assert r.any() and o.any(), (case, lim, d)
                for x, y in zip(full, lazy):       # the die's reads: the schedule's
                    assert np.array_equal(x[r], y[r]), (case, lim, d)
                # its other commands: not decidable now, and the engine keeps the same pending fields
                lrs = np.full(len(pf), -BIG, np.int64)
                np.maximum.at(lrs, pl[r], fs[r])
                assert (fs[o] >= lim).all() and (fs[o] >= lrs[pl[o]]).all(), (case, lim, d)
                assert (fa[o] >= lim - t_cmd).all(), (case, lim, d)
                assert (ls[o] == BIG).all() and (le[o] == BIG).all(), (case, lim, d)
                assert (la[o] >= lim - t_cmd).all() and (la[o] <= fa[o]).all(), (case, lim, d)
                ug = o & (kw["gate"] < 0)
                assert np.array_equal(lr[ug], a["ready"][ug]) and np.array_equal(fr[ug], lr[ug]), (case, lim, d)
            # planes of dies not skipped: the schedule's free times
            owned = np.zeros(len(pf), bool)
            owned[pl[~sk[dd]]] = True
            assert np.array_equal(pf_f[owned], pf_l[owned]), (case, lim)
            # the engine's decision is the same (every read, what starts before the limit or a read of its plane)
            cd0, ct0 = np.zeros(0, np.int64), np.zeros(0, np.int64)
            ka = np.asarray(a["kind"], np.uint8)
            d1 = engine_mod._event_decided(ka, fs, fe, pl, dd, lim, pf.copy(), pf_f.copy(), cd0, ct0)
            d2 = engine_mod._event_decided(ka, ls, le, pl, dd, lim, pf.copy(), pf_l.copy(), cd0, ct0)
            for x, y in zip(d1, d2):
                assert np.array_equal(x, y), (case, lim)
    assert nskip > 300 and nkept > 300, (nskip, nkept)


def _run(g, stream, sizes, adv, lazy=True):
    """The engine's run with the scheduler's steps one by one (``_event_run_ok`` false: the fused call, which gives
    the same results, tests/media/test_event_run.py, would not call the spied ``simulate_compiled``)."""
    orig_sc = eventsim.simulate_compiled
    orig_ok = engine_mod._event_run_ok
    engine_mod._event_run_ok = lambda *a: False
    seen = [0]

    def sc(*a, lazy_lim=None, skipped=None, **kw):
        if not lazy:
            return orig_sc(*a, **kw)
        r = orig_sc(*a, lazy_lim=lazy_lim, skipped=skipped, **kw)
        if skipped is not None:
            seen[0] += int(skipped.sum())
        return r
    eventsim.simulate_compiled = sc
    try:
        outs, st = _engine_run(g, stream, sizes, adv)
        return outs, st, seen[0]
    finally:
        eventsim.simulate_compiled = orig_sc
        engine_mod._event_run_ok = orig_ok


@pytest.mark.parametrize("prof,wf,load,qd", [("nominal", 0.1, None, "profile"), ("nominal", 0.5, None, "profile"),
                                              ("nominal", 0.1, 0.1, "profile"), ("ocp-sg1", 0.3, None, "profile"),
                                              ("nominal", 0.2, 1.5, "small"), ("ocp-sg2", 0.1, None, "unbounded")])
def test_engine_runs_with_and_without_the_skip(monkeypatch, prof, wf, load, qd):
    monkeypatch.setenv("HBFD_ACCEL", "on")
    g = _geometry(prof, qd)
    gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
    rng = np.random.default_rng(int(wf * 100) + (0 if load is None else 7))
    stream = make_stream(g, 12_000, 4096, "mixed", gap, seed=int(rng.integers(100)), write_fraction=wf)
    sizes, tot = [], 0
    while tot < len(stream):
        sizes.append(int(rng.choice([7, 300, 1500, 4000])))
        tot += sizes[-1]
    adv = rng.random(len(sizes)) < 0.8
    ref = _run(g, stream, sizes, adv, lazy=False)
    got = _run(g, stream, sizes, adv)
    assert ref[1] == got[1] and len(ref[0]) == len(got[0])
    assert all(np.array_equal(x, y) for x, y in zip(ref[0], got[0]))
    if load is None:
        assert got[2] > 0                          # (bursts skip dies)


def test_stale_dies_are_never_kept(monkeypatch):
    """The dies a run skipped (``MediaEngine._stale``) never reach ``_behind_pending`` in the next run (their pending
    commands carry no schedule): a burst whose last batch has reads on a few dies, then the quiet scan.
    (Keeping them is not only wrong but can run away: their unscheduled times are 2**62.)"""
    monkeypatch.setenv("HBFD_ACCEL", "on")
    g = _geometry("nominal", "profile")
    stream = make_stream(g, 12_000, 4096, "mixed", 0, seed=5, write_fraction=0.1)
    orig = MediaEngine._behind_pending
    seen = {"calls": 0, "stale": 0}

    def bp(self, P, N, keepd):
        seen["calls"] += 1
        if self._stale is not None:
            seen["stale"] += int(self._stale.sum())
            assert not (keepd & self._stale).any()
            assert not self._stale[P["die"]].any()
        return orig(self, P, N, keepd)
    monkeypatch.setattr(MediaEngine, "_behind_pending", bp)
    ref = _run(g, stream, [4000, 3990, 4000, 10], [True] * 4, lazy=False)
    got = _run(g, stream, [4000, 3990, 4000, 10], [True] * 4)
    assert got[2] > 0 and seen["calls"] > 0 and seen["stale"] > 0, seen
    assert ref[1] == got[1] and all(np.array_equal(x, y) for x, y in zip(ref[0], got[0]))
