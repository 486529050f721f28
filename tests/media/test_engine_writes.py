"""Write-path fast paths (issue 14 item 5, writes): each against its one-at-a-time reference on random
inputs, including the inputs its precondition check exists for."""
from __future__ import annotations

import numpy as np

from hbfd.media.engine import _PidIndex
from hbfd.media.ftl import Ftl
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
    return (dict(f.l2p), {b: list(v) for b, v in f.p2l.items()}, list(f._valid), bytes(f._state),
            dict(f._fresh), {p: list(d) for p, d in f._erased.items()}, f._ob.tolist(), f._onx.tolist(),
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
                    f._fresh[p] = f._fresh.get(p, 0) + int(t % 3)
                    ob = int(f._ob[p])
                    if ob >= 0:
                        f._state[ob] = 2            # closed
                        if not f._valid[ob]:
                            f.p2l.pop(ob, None)
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
