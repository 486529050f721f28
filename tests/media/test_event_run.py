"""The fused event-scheduler call (wt/fuse14, ``kernels._event_run``): ``MediaEngine._array_ops``' gates, scheduler
inputs, carried releases taken, scheduler (eventsim.py's twins, called from kernels.py: hbfd/accel.py keys the cache
on eventsim.py), decision and releases put back in one compiled call. It must give exactly what the steps give one
by one (the engine's other branch, taken with a trace or unusual types):

* directly, on random command sets (gates on decided programs and on programs of the run, across dies now and then;
  floors, carried releases, the queue depth binding or not, reads and none, the round-15 skip): every output, the
  planes' free times, the carried releases; a gate on an unknown id raises the same KeyError and changes nothing;
* through whole engine runs (writes, mixed 10-50 %, bursts and loads, nominal / ocp-sg1 / ocp-sg2, the queue depth
  of the profile, 2 and unbounded, random batch cuts, quiet scans): every completion and the whole ``stats()``,
  path counters included, with the fused call and with the steps one by one;
* a changed fused call is seen."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import engine as E
from hbfd.media import eventsim
from hbfd.media.bench import make_stream
from hbfd.media.diestage import _KEEP_TWIN_MIN, DieCarry

from test_accel_media import _engine_run, _geometry

pytest.importorskip("numba")


def _steps(ri, r_read, plane_read, die_read, t_read, allc, ends, t_cmd, Q, pf, evd, slots, lazy, limit, put_h):
    """``_array_ops``' steps one by one (its non-fused branch, the twins on): the same outputs as ``_event_run``."""
    nri, nc = len(ri), len(allc["kind"])
    gate_pid = allc["gate"]
    base = allc["base"].copy()
    gidx = np.full(nc, -1, np.int64)
    gm = np.flatnonzero(gate_pid >= 0)
    if len(gm):
        gq = gate_pid[gm]
        e = E._end_of(ends, gq)
        kn = e >= 0
        base[gm[kn]] = np.maximum(base[gm[kn]], e[kn])
        if not kn.all():
            ix = E._pid_pos(allc["pid"], gq[~kn])
            if (ix < 0).any():
                raise KeyError(int(gq[~kn][ix < 0][0]))
            gidx[gm[~kn]] = ix + nri
    kind, ready, pl, dd, sv, gate, gxa, join, floor = E._event_inputs_of(ri, r_read, plane_read, die_read, t_read, allc,
                                                                         base, allc["gx"].copy(), gidx)
    pf0 = pf.copy()
    carry = slots.take(evd)
    skipped = np.zeros(len(evd), bool) if lazy else None
    start, end, adm, rdy = eventsim.simulate_auto(kind, ready, pl, dd, sv, t_cmd=t_cmd, queue_depth=Q, plane_free=pf,
                                                  die_carry=carry, gate=gate, gate_x=gxa, floor=floor, join=join,
                                                  full=True, **({} if skipped is None else {"lazy_lim": limit,
                                                                                              "skipped": skipped}))
    dec, sd, st = E._event_decided(kind, start, end, pl, dd, limit, pf0, pf, *carry)
    slots.put(sd, st, put_h)
    return start, end, adm, rdy, dec, gidx, skipped


def _fused(ri, r_read, plane_read, die_read, t_read, allc, ends, t_cmd, Q, pf, evd, slots, lazy, limit, put_h):
    """``_array_ops``' fused branch: ``kernels._event_run`` and what the engine does with its results."""
    skipped = np.zeros(len(evd), bool) if lazy else eventsim._NO_SKIP
    st_, start, end, adm, rdy, dec, gidx, pst, kd, kt, missing = E._event_run(
        ri, r_read, plane_read, die_read, t_read, allc["kind"], allc["base"], allc["gx"], allc["gate"], allc["pid"],
        ends.a, ends.base, ends.old_id, ends.old_end, allc["plane"], allc["die"], allc["svc"], allc["join"],
        allc["floor"], t_cmd, Q, pf, evd, slots.die, slots.t, limit if lazy else eventsim._BIG, skipped, limit,
        eventsim.READ, put_h, slots.dies, _KEEP_TWIN_MIN)
    if st_ == -1:
        raise KeyError(int(missing))
    assert st_ == 1
    if pst == 2:
        kd, kt = slots._cut(kd, kt)
    slots.die, slots.t = kd, kt
    return start, end, adm, rdy, dec, gidx, skipped if lazy else None


def _case(rng, missing=False):
    dies = int(rng.integers(1, 9))
    ppd = int(rng.integers(1, 5))
    Q = int(rng.choice([1, 2, 4, 8, 32, 512]))
    t_cmd, t_read = int(rng.choice([0, 3, 50])), int(rng.choice([200, 3000]))
    nr = int(rng.choice([0, 0, 5, 60, 400]))
    nc = int(rng.integers(1, 500))
    r_plane = rng.integers(0, dies * ppd, nr).astype(np.int64)
    r_read = np.sort(rng.integers(0, 20_000, nr)).astype(np.int64)
    ri = np.flatnonzero(rng.random(nr) < 0.8).astype(np.int64)
    plane = rng.integers(0, dies * ppd, nc).astype(np.int64)
    kind = rng.choice([eventsim.PROG, eventsim.COPYBACK, eventsim.ERASE], nc, p=[0.8, 0.1, 0.1]).astype(np.uint8)
    pid0 = int(rng.integers(0, 5000))
    pid = np.where(kind == eventsim.PROG, pid0 + np.arange(nc), -1).astype(np.int64)
    if rng.random() < 0.3:                      # sparse ids: the sorted search instead of the direct map
        pid = np.where(pid >= 0, pid * 1000, -1)
    ends = E._Ends()
    decided = np.arange(max(0, pid0 - 300), pid0, dtype=np.int64)
    if len(decided):
        ends.set(decided, rng.integers(0, 30_000, len(decided)))
    gate = np.full(nc, -1, np.int64)
    last: dict[int, list[int]] = {}
    for i in range(nc):
        if kind[i] != eventsim.PROG:
            continue
        L = last.setdefault(int(plane[i]) if rng.random() < 0.95 else int(rng.integers(0, dies * ppd)), [])
        u = rng.random()
        if u < 0.4 and len(L) >= 2:
            gate[i] = pid[L[-2]]                # a program of this run
        elif u < 0.6 and len(decided):
            gate[i] = int(rng.choice(decided))  # a decided program
        L.append(i)
    if missing:
        gate[int(rng.integers(0, nc))] = 10**9 + 7
    allc = {"kind": kind, "base": np.sort(rng.integers(0, 20_000, nc)).astype(np.int64),
            "gx": rng.integers(0, 300, nc).astype(np.int64), "gate": gate, "pid": pid, "plane": plane,
            "die": plane // ppd, "svc": np.where(kind == eventsim.ERASE, 9000, rng.choice([600, 3000], nc)).astype(np.int64),
            "join": np.full(nc, -1, np.int64),
            "floor": np.where(rng.random(nc) < 0.1, rng.integers(0, 20_000, nc), 0).astype(np.int64)}
    evd = np.zeros(dies, bool)
    evd[allc["die"]] = True
    evd[r_plane[ri] // ppd] = True
    slots = DieCarry(dies, Q)
    cd = rng.integers(0, dies, int(rng.integers(0, 3 * dies * min(Q, 8) + 1))).astype(np.int64)
    slots.put(cd, rng.integers(1, 8000, len(cd)).astype(np.int64), 0)
    pf = rng.integers(0, 3000, dies * ppd).astype(np.int64)
    lazy = len(ri) > 0 and rng.random() < 0.7
    limit = int(rng.integers(0, 25_000))
    put_h = int(rng.integers(0, limit + 1))
    return (ri, r_read, r_plane, r_plane // ppd, t_read, allc, ends, t_cmd, Q, pf, evd, slots, lazy, limit, put_h)


def _copy(args):
    a = list(args)
    s = a[11]
    c = DieCarry(s.dies, s.q)
    c.die, c.t = s.die.copy(), s.t.copy()
    a[9], a[11] = a[9].copy(), c
    return a


def test_event_run_equals_the_steps_on_random_command_sets(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(14)
    nskip = ngated = 0
    for k in range(400):
        args = _case(rng)
        a1, a2 = _copy(args), _copy(args)
        ref = _steps(*a1)
        got = _fused(*a2)
        for x, y in zip(ref, got):
            assert (x is None and y is None) or np.array_equal(x, y), k
        assert np.array_equal(a1[9], a2[9]), k                          # planes' free times
        assert np.array_equal(a1[11].die, a2[11].die) and np.array_equal(a1[11].t, a2[11].t), k   # carried
        nskip += ref[6] is not None and bool(ref[6].any())
        ngated += int((ref[5] >= 0).sum())
    assert nskip >= 5 and ngated > 1000


def test_event_run_unknown_gate_raises_and_changes_nothing(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "on")
    rng = np.random.default_rng(15)
    for _ in range(20):
        args = _case(rng, missing=True)
        a1, a2 = _copy(args), _copy(args)
        with pytest.raises(KeyError) as r1:
            _steps(*a1)
        with pytest.raises(KeyError) as r2:
            _fused(*a2)
        assert r1.value.args == r2.value.args == (10**9 + 7,)
        assert np.array_equal(a2[9], args[9]) and np.array_equal(a2[11].die, args[11].die)


STREAMS = [("nominal", "write", 0.0, None, "profile"), ("nominal", "mixed", 0.1, None, "profile"),
           ("nominal", "mixed", 0.5, None, "profile"), ("nominal", "mixed", 0.1, 0.1, "profile"),
           ("nominal", "mixed", 0.5, 0.1, "small"), ("ocp-sg1", "mixed", 0.3, 1.0, "profile"),
           ("ocp-sg2", "mixed", 0.5, None, "unbounded"), ("ocp-sg2", "write", 0.0, 0.5, "small")]


@pytest.mark.parametrize("prof,op,wf,load,qd", STREAMS, ids=["-".join(map(str, c)) for c in STREAMS])
def test_engine_fused_equals_steps(monkeypatch, prof, op, wf, load, qd):
    """Whole engine runs with the fused call and with the steps one by one (``_event_run_ok`` false): every
    completion and the whole ``stats()``, path counters included (both with the twins on)."""
    monkeypatch.setenv("HBFD_ACCEL", "on")
    g = _geometry(prof, qd)
    gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
    rng = np.random.default_rng(abs(hash((prof, op, wf, load, qd))) % (1 << 32))
    stream = make_stream(g, 12000, 4096, op, gap, seed=int(rng.integers(100)), write_fraction=wf)
    sizes, tot = [], 0
    while tot < len(stream):
        sizes.append(int(rng.choice([1, 7, 48, 300, 1500, 4000, 9000])))
        tot += sizes[-1]
    adv = rng.random(len(sizes)) < 0.7
    calls = []
    orig = E._event_run

    def counted(*a):
        calls.append(1)
        return orig(*a)
    monkeypatch.setattr(E, "_event_run", counted)
    got = _engine_run(g, stream, sizes, adv, every_counter=True)
    assert calls
    monkeypatch.setattr(E, "_event_run_ok", lambda *a: False)
    ref = _engine_run(g, stream, sizes, adv, every_counter=True)
    assert len(ref[0]) == len(got[0]) and all(x.dtype == y.dtype and np.array_equal(x, y)
                                              for x, y in zip(ref[0], got[0]))
    assert ref[1] == got[1]


def test_a_changed_fused_call_is_seen(monkeypatch):
    monkeypatch.setenv("HBFD_ACCEL", "on")
    g = _geometry("nominal", "profile")
    stream = make_stream(g, 3000, 4096, "mixed", 0, seed=1, write_fraction=0.5)
    ref = _engine_run(g, stream, [1000] * 3, [True] * 3)
    orig = E._event_run

    def changed(*a):
        o = list(orig(*a))
        o[2] = o[2] + 1                       # every end one ns later
        return tuple(o)
    monkeypatch.setattr(E, "_event_run", changed)
    got = _engine_run(g, stream, [1000] * 3, [True] * 3)
    assert ref[1] != got[1] or any(not np.array_equal(x, y) for x, y in zip(ref[0], got[0]))


def test_warm_twins_in_fresh_processes_leaves_no_twin_uncompiled():
    """A daemon's process loads the twins from numba's cache, and loading a caller compiles none of its callees: a
    twin the warm-up reaches only inside ``_event_run`` (``_carry_keep``, ``_event_inputs``, ``_event_decide``) but
    that the engine also calls from Python must be called by ``warm_twins`` directly. Two fresh processes over the same
    cache (the first may compile): neither warns that a twin was not reached."""
    import os
    import subprocess
    import sys
    code = ("from hbfd.media.engine import warm_twins; from hbfd.media.geometry import MediaGeometry; "
            "from hbfcommon.profile import load_profile; warm_twins(MediaGeometry.from_profile(load_profile('nominal')))")
    env = {**os.environ, "HBFD_ACCEL": "on"}
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr
        assert "did not reach" not in r.stderr, r.stderr
