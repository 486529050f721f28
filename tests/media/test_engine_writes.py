"""Write-path fast paths (issue 14 item 5, writes): each against its one-at-a-time reference on random
inputs, including the inputs its precondition check exists for."""
from __future__ import annotations

import numpy as np

from hbfd.media.engine import _PidIndex
from hbfd.media.ftl import Ftl
from test_engine_incremental import _run
from test_media_timing import geom


def _pid_pos_ref(pid, q):
    d = {int(x): i for i, x in enumerate(pid.tolist()) if x >= 0}
    return np.array([d.get(int(x), -1) for x in q.tolist()], np.int64)


def test_pid_index_matches_a_dict_on_dense_and_sparse_ids():
    """(queries are ids, >= 0, as the engine's gates)"""
    rng = np.random.default_rng(14)
    for t in range(400):
        n = int(rng.integers(0, 300))
        span = [n + 5, 20 * n + 5000, 1 << 40][t % 3]           # dense map, sorted fallback, huge ids
        pid = rng.choice(span, size=min(n, span), replace=False).astype(np.int64)
        pid[rng.random(len(pid)) < 0.2] = -1
        q = rng.integers(0, span + 3, size=int(rng.integers(0, 200))).astype(np.int64)
        if (pid >= 0).any() and len(q):
            q[: len(q) // 2] = rng.choice(pid[pid >= 0], size=len(q) // 2)
        ix = _PidIndex(pid)
        for qq in (q, q[: len(q) // 3], q[::-1]):                      # several queries of one index
            assert np.array_equal(ix.pos(qq), _pid_pos_ref(pid, qq)), (t, qq)


def _state(f: Ftl):
    return (dict(f.l2p), {b: f.block_lpns(b) for b in f.p2l}, list(f._valid), bytes(f._state),
            list(f._fresh), {p: list(d) for p, d in f._erased.items()}, f._ob.tolist(), f._onx.tolist(),
            f.host_programs, f.gc_copies, f.erases)


def test_program_many_opens_fresh_planes_as_program_does():
    """``program_many``'s bulk opening of planes without an open block equals ``program`` page by page,
    also where such a plane is not a never-written one (state crafted: blocks taken, ``_ob`` cleared),
    which the bulk opening must leave to the page-at-a-time form."""
    rng = np.random.default_rng(5)
    g = geom(blocks_per_plane=32, pages_per_block=16)
    for t in range(120):
        a, b = Ftl(g), Ftl(g)
        # some history: pages written one at a time (GC included)
        hist = rng.integers(0, g.logical_pages, size=int(rng.integers(0, 400)))
        for x in hist.tolist():
            a.program(x)
            b.program(x)
        if t % 2:                                   # crafted: planes written before, without an open block
            for p in rng.choice(g.planes, size=int(rng.integers(1, g.planes + 1)), replace=False).tolist():
                for f in (a, b):
                    f._fresh[p] = f._fresh[p] + int(t % 3)
                    ob = int(f._ob[p])
                    if ob >= 0:
                        f._state[ob] = 2            # closed
                        # (a block closes full: its row's pages past the written ones are not kept -1 since
                        # wt/eng19, so a crafted close of a block not full writes them, as programs would have)
                        f._pool[f._row[ob], int(f._onx[p]):] = -1
                        if not f._valid[ob]:
                            f.drop_block_map(ob)
                    f._ob[p] = -1
        lp = rng.integers(0, g.logical_pages, size=int(rng.integers(8, 120)))
        planes, ops = a.program_many(lp)
        ref_ops = {}
        for i, x in enumerate(lp.tolist()):
            _, _, o = b.program(x)
            if o:
                ref_ops[i] = o
        assert _state(a) == _state(b), t
        assert np.array_equal(planes, np.array([b.plane_of(x) for x in lp.tolist()]))
        a.check()


# ---------------------------------------------------------------- pending programs re-scheduled per plane
def _tail_geometry(name, qd):
    import dataclasses

    from hbfcommon.profile import load_profile
    from hbfd.media.geometry import MediaGeometry
    if name == "ocp-sg1/16banks":
        g = MediaGeometry.from_profile(load_profile("ocp-sg1"))
        return dataclasses.replace(g, planes_per_die=16, queue_depth=qd)
    g = MediaGeometry.from_profile(load_profile(name))
    return dataclasses.replace(g, queue_depth=qd) if qd else g


_TAIL_CASES = [  # (geometry, queue depth (0: the profile's), op, write fraction, load (None: burst), seed)
    ("nominal", 0, "write", 0.0, None, 1), ("nominal", 0, "write", 0.0, 0.1, 2), ("nominal", 0, "write", 0.0, 0.5, 3),
    ("nominal", 16, "write", 0.0, None, 4), ("nominal", 20, "write", 0.0, 0.25, 5), ("nominal", 24, "write", 0.0, 1.0, 6),
    ("nominal", 0, "mixed", 0.9, None, 7), ("nominal", 0, "mixed", 0.8, 0.2, 8), ("conservative", 0, "write", 0.0, None, 9),
    ("conservative", 10, "write", 0.0, 0.3, 10), ("ocp-sg1/16banks", 8, "write", 0.0, None, 11),
    ("ocp-sg1/16banks", 24, "write", 0.0, 0.5, 12), ("ocp-sg1/16banks", 40, "mixed", 0.9, 1.0, 13),
    ("nominal", 28, "write", 0.0, 2.0, 14), ("nominal", 32, "write", 0.0, 0.9, 15), ("conservative", 0, "mixed", 0.95, 0.7, 16),
]


def test_tail_by_plane_equals_tail_by_die(monkeypatch):
    """``MediaEngine._tail_plane`` (pending programs re-scheduled per plane, where the die's queue depth
    does not bind from its T on) gives exactly the completions of ``_tail_die`` alone (per die), on
    write-heavy streams cut into random batches, queue depths from binding everywhere to never: the
    plane path handles dies and, on others, its checks send them to ``_tail_die``."""
    from hbfd.media.bench import make_stream
    from hbfd.media.engine import MediaEngine
    handled = fallback = 0
    for gname, qd, op, wf, load, seed in _TAIL_CASES:
        g = _tail_geometry(gname, qd)
        rng = np.random.default_rng(seed)
        gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
        n = 4000
        stream = make_stream(g, n, 4096, op, gap, seed=seed, pattern="random", write_fraction=wf)
        cuts = np.unique(np.r_[0, np.sort(rng.integers(1, n, size=int(rng.integers(4, 30)))), n])
        adv = rng.random(len(cuts)) < 0.5
        tails = []
        orig = MediaEngine._tail_die

        def counting(self, P, N, _orig=orig):
            tails.append(len(N["kind"]))
            return _orig(self, P, N)
        with monkeypatch.context() as mp:
            mp.setattr(MediaEngine, "_tail_die", counting)
            ids, inc, eng = _run(g, stream, cuts, adv)
        handled += eng._tail_plane_dies
        fallback += len(tails)
        with monkeypatch.context() as mp:
            mp.setattr(MediaEngine, "_tail_plane", lambda self, P, N, nd: None)
            ids2, ref, eng2 = _run(g, stream, cuts, adv)
            assert eng2._tail_plane_dies == 0
        assert np.array_equal(ids, ids2)
        assert np.array_equal(inc, ref), (gname, qd, op, wf, load, seed)
    assert handled > 0 and fallback > 0, (handled, fallback)


def test_gate_positions_reused_from_tail_plane(monkeypatch):
    """Where ``_behind_pending`` takes the gate positions ``_tail_plane`` found (pending then new commands,
    whole), they are those of a fresh look-up of every gate among the commands' ids."""
    from hbfd.media.bench import make_stream
    from hbfd.media.engine import MediaEngine, _pid_pos
    seen = []
    orig = MediaEngine._decide_cmds

    def checking(self, C, start, end, adm, rdy, gi, dec, **kw):
        ref = np.full(len(gi), -1, np.int64)
        gm = np.flatnonzero(C["gate"] >= 0)
        if len(gm):
            ref[gm] = _pid_pos(C["pid"], C["gate"][gm])
        assert np.array_equal(np.maximum(gi, -1), ref)         # (_array_ops passes -1 - reads for none)
        seen.append(self._tail_gates is not None)
        return orig(self, C, start, end, adm, rdy, gi, dec, **kw)
    monkeypatch.setattr(MediaEngine, "_decide_cmds", checking)
    for gname, qd, op, wf, load, seed in _TAIL_CASES[:8]:
        g = _tail_geometry(gname, qd)
        rng = np.random.default_rng(seed)
        gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
        stream = make_stream(g, 3000, 4096, op, gap, seed=seed, pattern="random", write_fraction=wf)
        cuts = np.unique(np.r_[0, np.sort(rng.integers(1, 3000, size=int(rng.integers(4, 30)))), 3000])
        _run(g, stream, cuts, rng.random(len(cuts)) < 0.5)
    assert any(seen) and not all(seen)
