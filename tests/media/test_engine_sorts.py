"""The engine's faster sorts and plane FCFS (round 3 of issue 14 item 5) equal the plain forms
bit for bit on random inputs, including inputs whose packed keys or running-maximum offsets
would overflow int64 (there the fast forms must step aside)."""
from __future__ import annotations

import numpy as np

from hbfd.media.diestage import plane_lindley
from hbfd.media.lindley import packed_order, segmented_fcfs, sorted_fcfs


def _wide(rng, n, hi):
    """Times in [0, hi), some cases spanning almost 2^62 (keys that cannot be packed)."""
    return rng.integers(0, hi, n).astype(np.int64)


def test_packed_order_equals_stable_sorts():
    rng = np.random.default_rng(1)
    packed = fell_back = 0
    for _ in range(600):
        n = int(rng.integers(1, 400))
        nmajor = int(rng.integers(1, 40))
        major = rng.integers(0, nmajor, n).astype(np.int64)
        hi = int(rng.choice([5, 1000, 1 << 20, 1 << 40, 1 << 61]))
        minor = _wide(rng, n, hi)
        ref = np.lexsort((minor, major))         # (major, minor, index)
        o = packed_order(major, nmajor, minor)
        if o is None:
            fell_back += 1
            continue
        packed += 1
        assert np.array_equal(o, ref)
    assert packed > 200 and fell_back > 50


def _plane_ref(ready, service, plane, free):
    free = free.copy()
    out = np.empty(len(ready), np.int64)
    for i, (r, p) in enumerate(zip(ready.tolist(), plane.tolist())):
        e = max(r, int(free[p])) + service
        free[p] = e
        out[i] = e
    return out, free


def test_plane_lindley_scalar_equals_fcfs():
    rng = np.random.default_rng(2)
    fast = fell_back = 0
    for _ in range(600):
        n = int(rng.integers(2, 300))
        nplanes = int(rng.integers(1, 64))
        plane = rng.integers(0, nplanes, n).astype(np.int64)
        hi = int(rng.choice([10, 100_000, 1 << 40, 1 << 60]))
        ready = np.sort(_wide(rng, n, hi)) if rng.random() < 0.5 else _wide(rng, n, hi)
        s = int(rng.choice([1, 20_000, 1 << 20]))
        free = _wide(rng, nplanes, hi)
        ref, ref_free = _plane_ref(ready, s, plane, free)
        o = np.argsort(plane, kind="stable")
        if sorted_fcfs(ready[o], s, plane[o], nplanes, free.copy()) is None:
            fell_back += 1
        else:
            fast += 1
        pf = free.copy()
        assert np.array_equal(plane_lindley(ready, s, plane, nplanes, pf), ref)
        assert np.array_equal(pf, ref_free)
    assert fast > 200 and fell_back > 50


def test_sorted_fcfs_equals_segmented_fcfs():
    """Jobs sorted by server, one service time or one per job (the channel stage's form)."""
    rng = np.random.default_rng(3)
    fast = fell_back = 0
    for _ in range(600):
        n = int(rng.integers(1, 300))
        nseg = int(rng.integers(1, 40))
        seg = np.sort(rng.integers(0, nseg, n)).astype(np.int64)
        hi = int(rng.choice([10, 100_000, 1 << 40, 1 << 60]))
        ready = _wide(rng, n, hi)
        service = int(rng.integers(1, 1 << 20)) if rng.random() < 0.5 else rng.integers(1, 1 << 20, n).astype(np.int64)
        free = _wide(rng, nseg, hi)
        ref = segmented_fcfs(ready, service, seg, free)
        ref_free = free.copy()
        for i in range(n):
            ref_free[seg[i]] = ref[i]
        f = free.copy()
        got = sorted_fcfs(ready, service, seg, nseg, f)
        if got is None:
            fell_back += 1
            assert np.array_equal(f, free)
            continue
        fast += 1
        assert np.array_equal(got, ref)
        assert np.array_equal(f, ref_free)
    assert fast > 200 and fell_back > 50


def _fifo_ref(r, die, plane, s, t_cmd, Q, pf, carry_d, carry_t, horizon):
    """The die stage in its slot form, one command at a time: admitted at max(arrival, the Q-th
    largest earlier release of its die, carried ones included)."""
    pf = pf.copy()
    rel: dict[int, list[int]] = {}
    for d, t in zip(carry_d.tolist(), carry_t.tolist()):
        rel.setdefault(d, []).append(t)
    for v in rel.values():
        v.sort()
    out = np.empty(len(r), np.int64)
    for i, (a, d, p) in enumerate(zip(r.tolist(), die.tolist(), plane.tolist())):
        R = rel.setdefault(d, [])
        A = max(a, R[-Q]) if len(R) >= Q else a
        e = max(A + t_cmd, int(pf[p])) + s
        pf[p] = e
        R.append(e)
        R.sort()
        out[i] = e
    kept = {d: sorted(x for x in v if x > horizon)[-Q:] for d, v in rel.items()}
    return out, pf, {d: v for d, v in kept.items() if v}


def test_fifo_exact_saturated_equals_slot_form():
    """The queue-depth-bound die stage, with carried slots that hold every die's Q releases (the
    saturated case: sorted in die order, as the stage leaves them, or in die order with rows
    unsorted, or shuffled, or some dies not full), against the slot form."""
    from hbfd.media.diestage import DieCarry, fifo_exact
    rng = np.random.default_rng(4)
    layouts = {"sorted": 0, "die order, rows unsorted": 0, "shuffled": 0, "partial": 0}
    for _ in range(400):
        ndies = int(rng.integers(1, 6))
        ppd = int(rng.integers(1, 5))
        Q = int(rng.integers(1, 6))
        n = int(rng.integers(1, 40))
        t_cmd, s = 30, int(rng.choice([100, 250]))
        r = np.sort(rng.integers(0, 1000, n)).astype(np.int64)
        die = rng.integers(0, ndies, n).astype(np.int64)
        plane = die * ppd + rng.integers(0, ppd, n)
        pf = rng.integers(0, 3000, ndies * ppd).astype(np.int64)
        layout = str(rng.choice(list(layouts)))
        layouts[layout] += 1
        cd = np.repeat(np.arange(ndies, dtype=np.int64), Q)
        ct = rng.integers(int(rng.choice([0, 1001])), 5000, len(cd)).astype(np.int64)
        if layout == "sorted":
            ct = np.sort(ct.reshape(ndies, Q), axis=1).ravel()
        elif layout == "die order, rows unsorted":
            pass
        elif layout == "shuffled":
            o = rng.permutation(len(cd))
            cd, ct = cd[o], ct[o]
        else:
            k = rng.random(len(cd)) < 0.7
            cd, ct = cd[k], ct[k]
        carry = DieCarry(ndies, Q)
        carry.die, carry.t = cd.copy(), ct.copy()
        horizon = int(r[-1])
        ref, ref_pf, ref_carry = _fifo_ref(r, die, plane, s, t_cmd, Q, pf, cd, ct, horizon)
        got_pf = pf.copy()
        got = fifo_exact(r, die, plane, s, t_cmd=t_cmd, queue_depth=Q, nplanes=ndies * ppd, ndies=ndies,
                         plane_free=got_pf, carry=carry, horizon=horizon)
        assert np.array_equal(got, ref)
        assert np.array_equal(got_pf, ref_pf)
        got_carry: dict[int, list[int]] = {}
        for d, t in zip(carry.die.tolist(), carry.t.tolist()):
            if t > horizon:                     # (older releases can no longer delay anything)
                got_carry.setdefault(d, []).append(t)
        assert {d: sorted(v) for d, v in got_carry.items()} == ref_carry
    assert min(layouts.values()) > 60


def test_reads_with_partial_stores_agree_with_reference():
    """Batches of reads and small stores that fill no page (no program: the reads' die stage is
    ``fifo_exact``), some reads on planes whose buffers the stores invalidate (looked up one event at
    a time) and the others in bulk: the plane order of the bulk lookup must not be reused for the
    whole batch. Against the 1 ns reference."""
    import refsim
    from hbfcommon import ctl
    from hbfd.contracts import REQUEST_BATCH_DTYPE
    from hbfd.media.engine import MediaEngine
    from hbfd.media.geometry import MediaGeometry
    g0 = dict(channels=2, dies_per_channel=2, planes_per_die=4, blocks_per_plane=64, pages_per_block=8,
              channel_bytes_per_s=512_000_000_000, t_read_ns=30, t_prog_ns=200, t_erase_ns=900,
              t_cmd_ns=3, over_provisioning=0.25, gc_start_free_fraction=0.125, gc_hard_free_fraction=0.05,
              write_flush_timeout_ns=10**8)
    rng = np.random.default_rng(5)
    for _ in range(150):
        g = MediaGeometry(**g0, queue_depth=int(rng.choice([1, 2, 4, 1000])),
                          page_buffers_per_plane=int(rng.choice([1, 2])))
        n = int(rng.integers(20, 90))
        a = np.sort(rng.integers(0, int(rng.choice([10, 300, 3000])), n))
        page = rng.integers(0, int(rng.choice([16, 64, 256])), n)
        st_ = rng.random(n) < 0.15
        off = rng.integers(0, 60, n) * 64
        nb = np.where(st_, 64, 4096)
        off = np.where(st_, off, 0)
        rows = [(int(a[i]), int(page[i] * 4096 + off[i]), int(nb[i]), int(st_[i])) for i in range(n)]
        b = np.zeros(n, REQUEST_BATCH_DTYPE)
        for i, r in enumerate(rows):
            b[i] = (i, r[0], r[1], r[2], r[3])
        e = MediaEngine(g)
        e.submit(b)
        c = e.drain()
        assert (c["status"] == ctl.HBF_ST_READY).all()
        m = dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))
        ref = refsim.simulate(rows, C=g.channels, D=g.dies_per_channel, P=g.planes_per_die, t_cmd=g.t_cmd_ns,
                              t_read=g.t_read_ns, xfer_ns=g.transfer_ns, queue_depth=g.queue_depth,
                              page_buffers=g.page_buffers_per_plane, t_prog=g.t_prog_ns,
                              flush_timeout=g.write_flush_timeout_ns)
        assert [m[i] + rows[i][0] for i in range(n)] == ref


def test_reads_meeting_pages_twice_agree_with_reference():
    """Read batches where a few planes meet a page twice (within the batch or in their carried
    buffers: the general page-buffer lookup) and the others do not (the all-miss form, whose plane
    order the die stage reuses), in several batches, against the 1 ns reference."""
    import refsim
    from hbfcommon import ctl
    from hbfd.contracts import REQUEST_BATCH_DTYPE
    from hbfd.media.engine import MediaEngine
    from hbfd.media.geometry import MediaGeometry
    g0 = dict(channels=2, dies_per_channel=2, planes_per_die=8, blocks_per_plane=64, pages_per_block=8,
              channel_bytes_per_s=512_000_000_000, t_read_ns=30, t_prog_ns=200, t_erase_ns=900,
              t_cmd_ns=3, over_provisioning=0.25, gc_start_free_fraction=0.125, gc_hard_free_fraction=0.05,
              page_buffers_per_plane=2)
    rng = np.random.default_rng(6)
    for _ in range(120):
        g = MediaGeometry(**g0, queue_depth=int(rng.choice([1, 2, 4, 1000])))
        n = int(rng.integers(60, 200))
        a = np.sort(rng.integers(0, int(rng.choice([10, 500, 5000])), n))
        page = rng.integers(0, 4096, n)
        hot = rng.random(n) < 0.03            # a few reads of recently read pages
        for i in np.flatnonzero(hot):
            if i >= 1:
                page[i] = page[i - int(rng.integers(1, min(i, 40) + 1))]
        rows = [(int(a[i]), int(page[i] * 4096), 4096, 0) for i in range(n)]
        cuts = np.sort(rng.choice(np.arange(1, n), int(rng.integers(1, 4)), replace=False))
        e = MediaEngine(g)
        out = []
        for part in np.split(np.arange(n), cuts):
            b = np.zeros(len(part), REQUEST_BATCH_DTYPE)
            for k, i in enumerate(part):
                b[k] = (i, *rows[i])
            e.submit(b)
            e.advance(int(b["arrival_ns"].max()))
            out.append(e.collect())
        out.append(e.drain())
        c = np.concatenate(out)
        assert (c["status"] == ctl.HBF_ST_READY).all() and len(c) == n
        m = dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))
        ref = refsim.simulate(rows, C=g.channels, D=g.dies_per_channel, P=g.planes_per_die, t_cmd=g.t_cmd_ns,
                              t_read=g.t_read_ns, xfer_ns=g.transfer_ns, queue_depth=g.queue_depth,
                              page_buffers=2)
        assert [m[i] + rows[i][0] for i in range(n)] == ref
