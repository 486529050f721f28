"""The event scheduler's vectorized fast path (``eventsim.simulate_auto``) gives the event
scheduler's results bit for bit: random command sets (gated program chains, joins, floors, carried
slots, reads on some dies, queue depths that bind and that do not) and whole engine runs of random
write and mixed streams with the fast path on and off."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import engine as engine_mod
from hbfd.media import eventsim
from hbfd.media.bench import make_stream
from hbfd.media.engine import MediaEngine
from hbfd.media.geometry import MediaGeometry
from hbfcommon.profile import load_profile


def _random_case(rng):
    dies = int(rng.integers(1, 4))
    ppd = int(rng.integers(1, 4))
    B = int(rng.integers(1, 3))
    n = int(rng.integers(1, 60))
    q = int(rng.integers(1, 8))
    die = rng.integers(0, dies, n)
    plane = die * ppd + rng.integers(0, ppd, n)
    read_dies = rng.random(dies) < 0.3
    kind = np.where(read_dies[die] & (rng.random(n) < 0.5), eventsim.READ, eventsim.PROG).astype(np.uint8)
    ready = np.sort(rng.integers(0, 3000, n)) if rng.random() < 0.7 else rng.integers(0, 3000, n)
    service = np.where(kind == eventsim.READ, 200, rng.choice([600, 800], n)).astype(np.int64)
    gate = np.full(n, -1, np.int64)
    last: dict[int, list[int]] = {}
    for i in range(n):
        if kind[i] != eventsim.READ:
            L = last.setdefault(int(plane[i]), [])
            if len(L) >= B and rng.random() < 0.9:
                gate[i] = L[-B]
            L.append(i)
    gate_x = np.where(gate >= 0, rng.integers(0, 300, n), 0)
    floor = np.where(rng.random(n) < 0.2, rng.integers(0, 3000, n), 0)
    join = np.full(n, -1, np.int64)
    if rng.random() < 0.4:                     # a few already admitted commands
        k = int(rng.integers(0, min(n, 4) + 1))
        join[:k] = np.sort(rng.integers(0, 500, k)) + 300
    carry: dict[int, list[int]] = {}
    for d in range(dies):
        if rng.random() < 0.5:
            carry[d] = rng.integers(0, 4000, int(rng.integers(1, 2 * q + 2))).tolist()
    pf = rng.integers(0, 2000, dies * ppd).astype(np.int64)
    return dict(kind=kind, ready=ready.astype(np.int64), plane=plane, die=die, service=service), dict(
        t_cmd=50, queue_depth=q, die_carry=carry, gate=gate, gate_x=gate_x.astype(np.int64),
        floor=floor.astype(np.int64), join=join, full=True), pf


@pytest.mark.parametrize("plane_pass", [True, False])
def test_simulate_auto_equals_event_scheduler(monkeypatch, plane_pass):
    """Both fast paths (the plane pass first, and the heads pass alone with it switched off) and the
    event scheduler they fall back to; each path must have scheduled many dies."""
    monkeypatch.setattr(eventsim, "_PLANE_PASS", plane_pass)
    monkeypatch.setenv("HBFD_ACCEL", "off")     # the numpy fast paths (the compiled twin: test_accel_media.py)
    rng = np.random.default_rng(7)
    paths: dict[str, int] = {}
    for _ in range(1500):
        a, kw, pf = _random_case(rng)
        pf1, pf2 = pf.copy(), pf.copy()
        ref = eventsim.simulate(*a.values(), plane_free=pf1, **kw)
        got = eventsim.simulate_auto(*a.values(), plane_free=pf2, paths=paths, **kw)
        for x, y in zip(ref, got):
            assert np.array_equal(x, y)
        assert np.array_equal(pf1, pf2)
    if plane_pass:
        assert paths["plane_pass"] > 500 and paths["heads_pass"] > 200 and paths["event"] > 1000, paths
    else:
        assert paths["plane_pass"] == 0 and paths["heads_pass"] > 500, paths


@pytest.mark.parametrize("op,wf,load,profile", [("write", 0.0, None, "nominal"), ("write", 0.0, 0.1, "nominal"),
                                                ("mixed", 0.5, None, "nominal"), ("mixed", 0.1, 0.1, "nominal"),
                                                ("mixed", 0.5, 0.5, "conservative"), ("write", 0.0, None, "ocp-sg1")])
def test_engine_fast_path_equals_event_scheduler(monkeypatch, op, wf, load, profile):
    monkeypatch.setenv("HBFD_ACCEL", "off")     # the numpy fast paths (the compiled twin: test_accel_media.py)
    g = MediaGeometry.from_profile(load_profile(profile))
    gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
    stream = make_stream(g, 6000, 4096, op, gap, seed=3, pattern="random", write_fraction=wf)

    def run():
        eng = MediaEngine(g)
        outs = []
        for k in range(0, len(stream), 1500):
            part = stream[k:k + 1500]
            eng.submit(part)
            eng.advance(int(part["arrival_ns"].max()))
            outs.append(eng.collect())
        outs.append(eng.drain())
        return np.concatenate(outs), eng.stats()["counts"]

    fast, counts = run()
    monkeypatch.setattr(eventsim, "simulate_auto", eventsim.simulate)
    assert engine_mod.eventsim.simulate_auto is eventsim.simulate
    slow, _ = run()
    assert counts["event_batches"] > 0
    assert np.array_equal(fast, slow)
