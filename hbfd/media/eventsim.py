"""Exact event-by-event die/plane scheduler with read priority (semantics v2).

Used where the vectorized FIFO form (``diestage``) does not apply: dies whose batch holds both
read senses and array operations of another kind (program, copyback, erase), because reads have
priority at the die and at the plane (non-preemptive), which is not FIFO. Channels are not part
of it: in semantics v2 no array command uses the channel (a store's data crosses the channel with
the store; a program works on data already in the die), so channels stay FCFS and are scheduled
by the engine's Lindley stage afterwards.

Semantics (the same as the vectorized form wherever both apply, and as ``tests/media/refsim.py``):

* A die admits at most ``queue_depth`` outstanding commands; a command is outstanding from its
  admission until its array operation ends (a read's sense end: the page then waits in its page
  buffer for the channel). Waiting commands are admitted reads first, each class FIFO by
  (ready, seq). A slot freed at time t is usable by a command arriving at t.
* An admitted command joins its plane's queue at admission + t_cmd; the plane serves reads first,
  within a class by (plane-ready time, seq), and is busy for the command's service time
  (tR for a read, tPROG or tR + tPROG for a program, tR + tPROG for a copyback, tBERS for an erase).
* All events at one instant are applied before any decision at that instant.
"""
from __future__ import annotations

import heapq
import numpy as np

from hbfd import accel

READ, PROG, COPYBACK, ERASE = 0, 1, 2, 3
KIND_NAMES = ("read", "program", "copyback", "erase")

_EV_RELEASE, _EV_ARRIVE, _EV_PLANE_ENQ, _EV_PLANE_FREE, _EV_END = 0, 1, 2, 3, 4
_BIG = 1 << 62
_NO_SKIP = np.zeros(0, np.bool_)       # (_simulate_split: no die skipped, round 15)
_E0 = np.zeros(0, np.int64)


def _small(x, n):
    """Ids as int16 when they fit (a stable argsort is then a radix sort)."""
    return x.astype(np.int16) if n < (1 << 15) else x
_PLANE_PASS = True          # (tests switch it off to exercise the heads pass)
_QD_TWIN_MIN = 64           # _plane_pass's queue-depth check by its twin from this many commands on


def simulate(kind: np.ndarray, ready: np.ndarray, plane: np.ndarray, die: np.ndarray, service: np.ndarray, *,
             t_cmd: int, queue_depth: int, plane_free: np.ndarray, die_carry,
             gate: np.ndarray | None = None, gate_x: np.ndarray | None = None, floor: np.ndarray | None = None,
             join: np.ndarray | None = None, full: bool = False):
    """Schedule commands (seq = index: FIFO ties at the die and the plane go by it). Updates
    ``plane_free`` in place.

    ``die_carry[d]``: release times of commands still outstanding from earlier batches (a dict, or a
    pair of arrays (die, time)).
    Write backpressure (optional, per command): ``gate[i] >= 0`` names an earlier command whose end
    gates this one: its ready time is ``max(ready[i], end[gate[i]]) + gate_x[i]`` (a program whose
    data-in waits for a free page buffer); ``floor[i]``: the command reaches its die no earlier than
    this (its die-queue key stays its ready time); ``join[i] >= 0``: already admitted (it holds a die
    slot) and joins its plane at ``join[i]``.
    Returns (start, end) (int64: start of the array operation, its end = slot release), with
    ``full``: (start, end, admission, ready) (the admission time and the effective ready time).
    """
    n = len(kind)
    kind_l = kind.tolist()
    rdy = ready.tolist()
    plane_l = plane.tolist()
    die_l = die.tolist()
    svc_l = service.tolist()
    start = [0] * n
    end = [0] * n
    adm = [0] * n
    heap: list[tuple[int, int, int]] = []
    push = heapq.heappush
    pop = heapq.heappop
    outstanding: dict[int, int] = {}
    if isinstance(die_carry, tuple):
        die_carry = _carry_dict(*_carry_arrays(die_carry))
    for d, times in die_carry.items():
        outstanding[d] = len(times)
        for c in times:
            push(heap, (c, _EV_RELEASE, d))
    deps: dict[int, list[int]] = {}
    gl = gate.tolist() if gate is not None else None
    gx = gate_x.tolist() if gate_x is not None else None
    fl = floor.tolist() if floor is not None else None
    jl = join.tolist() if join is not None else None
    for i in range(n):
        if jl is not None and jl[i] >= 0:              # admitted in an earlier batch
            d = die_l[i]
            outstanding[d] = outstanding.get(d, 0) + 1
            adm[i] = jl[i] - t_cmd
            push(heap, (jl[i], _EV_PLANE_ENQ, i))
        elif gl is not None and gl[i] >= 0:            # waits for its gate's end
            deps.setdefault(gl[i], []).append(i)
        else:
            t = rdy[i]
            if fl is not None and fl[i] > t:
                t = fl[i]
            push(heap, (t, _EV_ARRIVE, i))
    die_rq: dict[int, list] = {}
    die_oq: dict[int, list] = {}
    plane_q: dict[int, list] = {}
    pf = plane_free.tolist()
    busy: set[int] = set()
    tdies: set[int] = set()
    tplanes: set[int] = set()
    while heap:
        t = heap[0][0]
        while True:
            while heap and heap[0][0] == t:
                _, ev, x = pop(heap)
                if ev == _EV_RELEASE:
                    outstanding[x] -= 1
                    tdies.add(x)
                elif ev == _EV_ARRIVE:
                    d = die_l[x]
                    push((die_rq if kind_l[x] == READ else die_oq).setdefault(d, []), (rdy[x], x))
                    tdies.add(d)
                elif ev == _EV_PLANE_ENQ:
                    p = plane_l[x]
                    push(plane_q.setdefault(p, []), (0 if kind_l[x] == READ else 1, t, x))
                    tplanes.add(p)
                elif ev == _EV_END:                        # a command's end: its plane free, its die slot released
                    d = die_l[x]
                    outstanding[d] -= 1
                    tdies.add(d)
                    p = plane_l[x]
                    busy.discard(p)
                    tplanes.add(p)
                else:
                    busy.discard(x)
                    tplanes.add(x)
            for d in tdies:                                # admissions: reads first, (ready, seq)
                rq = die_rq.get(d)
                oq = die_oq.get(d)
                o = outstanding.get(d, 0)
                while o < queue_depth and (rq or oq):
                    x = pop(rq)[1] if rq else pop(oq)[1]
                    o += 1
                    adm[x] = t
                    push(heap, (t + t_cmd, _EV_PLANE_ENQ, x))
                outstanding[d] = o
            tdies.clear()
            if heap and heap[0][0] == t:
                continue
            for p in tplanes:                              # plane grants
                q = plane_q.get(p)
                if not q or p in busy:
                    continue
                if pf[p] > t:                              # carried busy time: wake up then
                    push(heap, (pf[p], _EV_PLANE_FREE, p))
                    busy.add(p)
                    continue
                _, _, x = pop(q)
                busy.add(p)
                start[x] = t
                e = t + svc_l[x]
                end[x] = e
                pf[p] = e
                push(heap, (e, _EV_END, x))
                dl = deps.pop(x, None)
                if dl:
                    for y in dl:                           # gated commands: ready once x has ended
                        r = (rdy[y] if rdy[y] > e else e) + gx[y]
                        rdy[y] = r
                        if fl is not None and fl[y] > r:
                            r = fl[y]
                        push(heap, (r, _EV_ARRIVE, y))
            tplanes.clear()
            if heap and heap[0][0] == t:
                continue
            break
    if deps:
        raise ValueError("eventsim: a gate names a command that never runs")
    plane_free[:] = pf
    if full:
        return (np.asarray(start, np.int64), np.asarray(end, np.int64), np.asarray(adm, np.int64),
                np.asarray(rdy, np.int64))
    return np.asarray(start, np.int64), np.asarray(end, np.int64)


def simulate_auto(kind: np.ndarray, ready: np.ndarray, plane: np.ndarray, die: np.ndarray, service: np.ndarray, *,
                  t_cmd: int, queue_depth: int, plane_free: np.ndarray, die_carry,
                  gate: np.ndarray | None = None, gate_x: np.ndarray | None = None,
                  floor: np.ndarray | None = None, join: np.ndarray | None = None, full: bool = False,
                  paths: dict[str, int] | None = None, lazy_lim: int | None = None,
                  skipped: np.ndarray | None = None):
    """``simulate`` with exact vectorized fast paths (same arguments, same results bit for bit).

    1. ``_plane_pass`` (dies with or without reads): every command admitted at its arrival, the planes
       independent non-preemptive priority queues (reads first), one grant per plane per step, all
       planes at once; kept for the dies where the queue depth never binds in that schedule and each
       plane's reads and programs arrive in seq order (then it is the event scheduler's schedule).
    2. ``_heads_pass`` (dies without reads that failed 1): one command per die per step, all dies at
       once, in the die queue's order (the smallest (ready, seq) among the first unscheduled commands
       of the die's planes; a gated command's ready time max(ready, E_gate) + gate_x is known then,
       its gate coming earlier on its plane), admitted at max(arrival, the die's Q-th largest slot
       release so far, carried ones included), its plane FCFS in that order; joins (admitted earlier)
       first. Checked per die: die-queue keys (ready, seq) increasing and arrivals non-decreasing in
       the order used, plane arrivals (time, seq) increasing per plane, joins first on their planes.
    3. the event scheduler for the rest, one die at a time (``_simulate_die``: the same events with the
       die's state as plain variables; a gate across dies: ``simulate`` on all of it; a gate not on an
       earlier program of the same plane: its die).
    ``paths`` (optional): dies per path are added to it (``plane_pass``, ``heads_pass``, ``event``).
    ``lazy_lim``, ``skipped``: for ``simulate_compiled`` only (the twins on; round 15's skip of what cannot be decided
    yet, see ``_simulate_split``); the numpy paths schedule everything and leave ``skipped`` as it is.
    Equality: tests/media/test_eventsim_fast.py."""
    n = len(kind)
    if n and accel.enabled():
        return simulate_compiled(kind, ready, plane, die, service, t_cmd=t_cmd, queue_depth=queue_depth,
                                 plane_free=plane_free, die_carry=die_carry, gate=gate, gate_x=gate_x, floor=floor,
                                 join=join, full=full, lazy_lim=lazy_lim, skipped=skipped)
    if n == 0 or gate is None or gate_x is None:
        return simulate(kind, ready, plane, die, service, t_cmd=t_cmd, queue_depth=queue_depth,
                        plane_free=plane_free, die_carry=die_carry, gate=gate, gate_x=gate_x, floor=floor,
                        join=join, full=full)
    kind = np.asarray(kind)
    die = np.asarray(die, np.int64)
    plane = np.asarray(plane, np.int64)
    ready = np.asarray(ready, np.int64)
    service = np.asarray(service, np.int64)
    gate = np.asarray(gate, np.int64)
    gate_x = np.asarray(gate_x, np.int64)
    fl = np.zeros(n, np.int64) if floor is None else np.asarray(floor, np.int64)
    jn = np.full(n, -1, np.int64) if join is None else np.asarray(join, np.int64)
    cd, ct = _carry_arrays(die_carry)
    nd = int(die.max()) + 1
    if len(cd):
        nd = max(nd, int(cd.max()) + 1)
    rdie = np.zeros(nd, bool)
    rdie[die[kind == READ]] = True
    hasg = (gate >= 0) & (jn < 0)
    if (die[gate[hasg]] != die[hasg]).any():       # a gate across dies: no per-die split
        return simulate(kind, ready, plane, die, service, t_cmd=t_cmd, queue_depth=queue_depth,
                        plane_free=plane_free, die_carry=_carry_dict(cd, ct), gate=gate, gate_x=gate_x,
                        floor=floor, join=join, full=full)
    bad = np.zeros(nd, bool)
    start = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    adm = np.zeros(n, np.int64)
    rdy = ready.copy()
    pf = plane_free.copy()
    # gates: an earlier program of the same plane
    g = np.flatnonzero(hasg)
    if len(g):
        late = g[(gate[g] >= g) | (plane[gate[g]] != plane[g]) | (kind[gate[g]] == READ) | (kind[g] == READ)]
        if len(late):
            bad[die[late]] = True
    late_bad = bad.copy()
    fi = np.flatnonzero(~bad[die])
    if len(fi) and _PLANE_PASS:
        _plane_pass(fi, kind, ready, die, plane, service, gate, gate_x, hasg, fl, jn, t_cmd, queue_depth, (cd, ct),
                    bad, pf0=plane_free, pf=pf, start=start, end=end, adm=adm, rdy=rdy)
    elif len(fi):
        bad[:] = True
    # dies the plane pass could not schedule: without reads the heads pass, else the event scheduler
    hd = bad & ~late_bad & ~rdie
    hi = np.flatnonzero(hd[die])
    if len(hi):
        hbad = np.zeros(nd, bool)
        _heads_pass(hi, ready, die, plane, service, gate, gate_x, hasg, fl, jn, t_cmd,
                    _slot_rows((cd, ct), nd, queue_depth), hbad, pf0=plane_free, pf=pf, start=start, end=end,
                    adm=adm, rdy=rdy)
        bad = (bad & ~hd) | hbad
    sm = bad[die]
    if paths is not None:
        has = np.zeros(nd, bool)
        has[die] = True
        paths["plane_pass"] = paths.get("plane_pass", 0) + int((has & ~bad & ~hd).sum())
        paths["heads_pass"] = paths.get("heads_pass", 0) + int((has & hd & ~bad).sum())
        paths["event"] = paths.get("event", 0) + int((has & bad).sum())
    good = ~sm
    if good.any():
        gp = plane[good]
        plane_free[gp] = pf[gp]
    si = np.flatnonzero(sm)
    if len(si):
        # the event scheduler one die at a time (dies share nothing here: no gate crosses dies), so its
        # heaps hold one die's events
        si = si[np.argsort(_small(die[si], nd), kind="stable")]
        ds = die[si]
        cuts = np.flatnonzero(np.r_[True, ds[1:] != ds[:-1]])
        ends_ = np.append(cuts[1:], len(si))
        remap = np.full(n, -1, np.int64)
        km = bad[cd] if len(cd) else np.zeros(0, bool)
        cdd, ctd = cd[km], ct[km]
        kl, rl, pl_, sl = kind[si].tolist(), ready[si].tolist(), plane[si].tolist(), service[si].tolist()
        remap[si] = np.arange(len(si)) - np.repeat(cuts, ends_ - cuts)
        gs = gate[si]
        gl = np.where(gs >= 0, remap[np.maximum(gs, 0)], -1).tolist()
        gxl = gate_x[si].tolist()
        fll = fl[si].tolist() if floor is not None else None
        jll = jn[si].tolist() if join is not None else None
        pfa = plane_free
        st_l: list[int] = []
        en_l: list[int] = []
        ad_l: list[int] = []
        rd_l: list[int] = []
        for a, b in zip(cuts.tolist(), ends_.tolist()):
            d = int(ds[a])
            cm = cdd == d
            rel = ctd[cm].tolist() if cm.any() else []
            pls = set(pl_[a:b])
            pf = {p: int(pfa[p]) for p in pls}
            r_ = rl[a:b]
            s2, e2, a2 = _simulate_die(kl[a:b], r_, pl_[a:b], sl[a:b], gl[a:b], gxl[a:b],
                                       None if fll is None else fll[a:b], None if jll is None else jll[a:b],
                                       t_cmd, queue_depth, pf, rel)
            for p, v in pf.items():
                pfa[p] = v
            st_l += s2
            en_l += e2
            ad_l += a2
            rd_l += r_
        start[si] = st_l
        end[si] = en_l
        adm[si] = ad_l
        rdy[si] = rd_l
    if full:
        return start, end, adm, rdy
    return start, end


def _simulate_die(kind_l, rdy, plane_l, svc_l, gl, gx, fl, jl, t_cmd: int, Q: int, pf: dict[int, int],
                  releases: list[int]):
    """``simulate`` of one die's commands (lists; ``gl`` gates as indices into them, or None; ``pf``: plane ->
    free time, updated; ``releases``: the die's carried slot releases). The same events and decisions with the
    die's state as plain variables. Returns (start, end, admission) lists; ``rdy`` is updated in place."""
    n = len(kind_l)
    start = [0] * n
    end = [0] * n
    adm = [0] * n
    heap: list[tuple[int, int, int]] = []
    push = heapq.heappush
    pop = heapq.heappop
    out = len(releases)
    for c in releases:
        push(heap, (c, _EV_RELEASE, 0))
    deps: dict[int, list[int]] = {}
    for i in range(n):
        if jl is not None and jl[i] >= 0:              # admitted in an earlier batch
            out += 1
            adm[i] = jl[i] - t_cmd
            push(heap, (jl[i], _EV_PLANE_ENQ, i))
        elif gl is not None and gl[i] >= 0:            # waits for its gate's end
            deps.setdefault(gl[i], []).append(i)
        else:
            t = rdy[i]
            if fl is not None and fl[i] > t:
                t = fl[i]
            push(heap, (t, _EV_ARRIVE, i))
    rq: list[tuple[int, int]] = []
    oq: list[tuple[int, int]] = []
    plane_q: dict[int, list] = {}
    busy: set[int] = set()
    tplanes: set[int] = set()
    tdie = False
    while heap:
        t = heap[0][0]
        while True:
            while heap and heap[0][0] == t:
                _, ev, x = pop(heap)
                if ev == _EV_END:                          # a command's end: its plane free, its slot released
                    out -= 1
                    tdie = True
                    p = plane_l[x]
                    busy.discard(p)
                    tplanes.add(p)
                elif ev == _EV_PLANE_ENQ:
                    p = plane_l[x]
                    push(plane_q.setdefault(p, []), (0 if kind_l[x] == READ else 1, t, x))
                    tplanes.add(p)
                elif ev == _EV_ARRIVE:
                    push(rq if kind_l[x] == READ else oq, (rdy[x], x))
                    tdie = True
                elif ev == _EV_RELEASE:
                    out -= 1
                    tdie = True
                else:
                    busy.discard(x)
                    tplanes.add(x)
            if tdie:                                       # admissions: reads first, (ready, seq)
                while out < Q and (rq or oq):
                    x = pop(rq)[1] if rq else pop(oq)[1]
                    out += 1
                    adm[x] = t
                    push(heap, (t + t_cmd, _EV_PLANE_ENQ, x))
                tdie = False
            if heap and heap[0][0] == t:
                continue
            for p in tplanes:                              # plane grants
                q = plane_q.get(p)
                if not q or p in busy:
                    continue
                if pf[p] > t:                              # carried busy time: wake up then
                    push(heap, (pf[p], _EV_PLANE_FREE, p))
                    busy.add(p)
                    continue
                _, _, x = pop(q)
                busy.add(p)
                start[x] = t
                e = t + svc_l[x]
                end[x] = e
                pf[p] = e
                push(heap, (e, _EV_END, x))
                dl = deps.pop(x, None)
                if dl:
                    for y in dl:                           # gated commands: ready once x has ended
                        r = (rdy[y] if rdy[y] > e else e) + gx[y]
                        rdy[y] = r
                        if fl is not None and fl[y] > r:
                            r = fl[y]
                        push(heap, (r, _EV_ARRIVE, y))
            tplanes.clear()
            if heap and heap[0][0] == t:
                continue
            break
    if deps:
        raise ValueError("eventsim: a gate names a command that never runs")
    return start, end, adm


def _carry_arrays(die_carry) -> tuple[np.ndarray, np.ndarray]:
    """Carried slot releases as (die, time) arrays, from a dict {die: [times]} or such a pair."""
    if isinstance(die_carry, tuple):
        return np.asarray(die_carry[0], np.int64), np.asarray(die_carry[1], np.int64)
    if not die_carry:
        return _E0, _E0
    return (np.asarray([d for d, ts in die_carry.items() for _ in ts], np.int64),
            np.asarray([t for ts in die_carry.values() for t in ts], np.int64))


def _carry_dict(cd: np.ndarray, ct: np.ndarray) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d, t in zip(cd.tolist(), ct.tolist()):
        out.setdefault(d, []).append(t)
    return out


def _slot_rows(die_carry, nd: int, Q: int) -> np.ndarray:
    """Per die the Q largest carried releases, rows sorted (-inf: a free slot)."""
    S = np.full((nd, Q), -_BIG, np.int64)
    cd_a, ct_a = _carry_arrays(die_carry)
    if len(cd_a):
        oc = np.lexsort((ct_a, cd_a))
        cd_a, ct_a = cd_a[oc], ct_a[oc]
        cst = np.flatnonzero(np.r_[True, cd_a[1:] != cd_a[:-1]])
        clen = np.diff(np.append(cst, len(cd_a)))
        col = Q - np.repeat(cst + clen, clen) + np.arange(len(cd_a))
        k = col >= 0
        S[cd_a[k], col[k]] = ct_a[k]
    return S


def _heads_pass(fi, ready, die, plane, service, gate, gate_x, hasg, fl, jn, t_cmd, S, bad, *, pf0, pf, start, end,
                adm, rdy):
    """Schedule the commands ``fi`` (dies without reads; gates earlier on the same plane) in the die
    queue's order: each die admits next the command with the smallest (ready, seq) among its
    planes' first unscheduled commands (a command later on a plane has a gate not admitted yet,
    so a ready time after the admission now), at A = max(arrival, the die's Q-th largest release so
    far); planes FCFS in that order. Joins (admitted earlier) go first. Then checks, per die, that
    this order is the event scheduler's (die-queue keys (ready, seq) increasing and arrivals
    non-decreasing in it, plane arrivals (time, seq) increasing per plane, joins first on their
    planes); marks the dies where not in ``bad``."""
    n = len(fi)
    o = fi[np.lexsort((fi, plane[fi], die[fi]))]
    dp, pp = die[o], plane[o]
    gst = np.flatnonzero(np.r_[True, (dp[1:] != dp[:-1]) | (pp[1:] != pp[:-1])])
    gen = np.append(gst[1:], n)
    gd = dp[gst]
    dst = np.flatnonzero(np.r_[True, gd[1:] != gd[:-1]])
    dcnt = np.diff(np.append(dst, len(gst)))
    col = np.arange(len(gst)) - np.repeat(dst, dcnt)
    row = np.repeat(np.arange(len(dst)), dcnt)
    udies = gd[dst]
    nr, nc = len(dst), int(dcnt.max())
    BIG = _BIG
    ptr = np.full((nr, nc), 0, np.int64)
    pend = np.full((nr, nc), 0, np.int64)
    ptr[row, col] = gst
    pend[row, col] = gen
    isj_all = jn >= 0
    # joins first on their planes
    jo = isj_all[o]
    same = np.r_[False, (dp[1:] == dp[:-1]) & (pp[1:] == pp[:-1])]
    b = np.flatnonzero(same[1:] & ~jo[:-1] & jo[1:])
    if len(b):
        bad[dp[b + 1]] = True

    def key_of(c):
        hg = hasg[c]
        r = ready[c]
        if hg.any():
            r = np.where(hg, np.maximum(r, end[np.where(hg, gate[c], c)]) + gate_x[c], r)
        rdy[c] = r
        return np.where(isj_all[c], -BIG, r)

    K = np.full((nr, nc), BIG, np.int64)
    C = np.full((nr, nc), BIG, np.int64)
    h = o[gst]
    K[row, col] = key_of(h)
    C[row, col] = h
    pl_all = plane[o]
    pf[pl_all] = pf0[pl_all]
    Sd_all = S[udies]
    step = np.empty(len(ready), np.int64)
    act = np.arange(nr)
    enq = np.zeros(len(ready), np.int64)
    tarr = np.zeros(len(ready), np.int64)
    k = 0
    anyj = bool(isj_all[fi].any())
    rem = np.bincount(row, weights=gen - gst, minlength=nr).astype(np.int64)
    while len(act):
        full = len(act) == nr
        Ka = K if full else K[act]
        Ca = C if full else C[act]
        mk = Ka.min(axis=1)
        j = np.argmin(np.where(Ka == mk[:, None], Ca, BIG), axis=1)
        c = Ca[np.arange(len(act)), j]
        step[c] = k
        k += 1
        r = rdy[c]
        ta = np.maximum(r, fl[c])
        Sd = Sd_all if full else Sd_all[act]
        if anyj:
            jc = jn[c]
            isj = jc >= 0
            a = np.where(isj, jc - t_cmd, np.maximum(ta, Sd[:, 0]))
            q = np.where(isj, jc, a + t_cmd)
            tarr[c] = np.where(isj, -BIG, ta)
        else:
            a = np.maximum(ta, Sd[:, 0])
            q = a + t_cmd
            tarr[c] = ta
        pc = plane[c]
        s = np.maximum(q, pf[pc])
        e = s + service[c]
        pf[pc] = e
        start[c] = s
        end[c] = e
        adm[c] = a
        enq[c] = q
        np.maximum(Sd[:, 0], e, out=Sd[:, 0])
        Sd.sort(axis=1)
        if not full:
            Sd_all[act] = Sd
        # advance the chosen plane's head
        p = ptr[act, j] + 1
        ptr[act, j] = p
        more = p < pend[act, j]
        if more.all():
            nx = o[p]
            K[act, j] = key_of(nx)
            C[act, j] = nx
        else:
            nk = np.full(len(act), BIG, np.int64)
            ncmd = np.full(len(act), BIG, np.int64)
            if more.any():
                nx = o[p[more]]
                nk[more] = key_of(nx)
                ncmd[more] = nx
            K[act, j] = nk
            C[act, j] = ncmd
        ra = rem[act] - 1
        rem[act] = ra
        alive = ra > 0
        if not alive.all():
            act = act[alive]
    # the order used is the event scheduler's
    o2 = fi[np.lexsort((step[fi], die[fi]))]
    d2 = die[o2]
    if len(o2) > 1:
        same = d2[1:] == d2[:-1]
        j2 = isj_all[o2]
        rk = np.where(j2, -BIG, rdy[o2])
        so = o2[1:] > o2[:-1]
        badq = (rk[1:] < rk[:-1]) | ((rk[1:] == rk[:-1]) & ~so & ~j2[1:]) | (tarr[o2[1:]] < tarr[o2[:-1]])
        b = np.flatnonzero(same & badq)
        if len(b):
            bad[d2[b + 1]] = True
        op = o2[np.argsort(plane[o2], kind="stable")]
        p2 = plane[op]
        e1, e0 = enq[op[1:]], enq[op[:-1]]
        b = np.flatnonzero((p2[1:] == p2[:-1]) & ((e1 < e0) | ((e1 == e0) & (op[1:] < op[:-1]))))
        if len(b):
            bad[die[op[b + 1]]] = True


def _plane_pass(fi, kind, ready, die, plane, service, gate, gate_x, hasg, fl, jn, t_cmd, Q, die_carry, bad, *,
                pf0, pf, start, end, adm, rdy, extra=None):
    """Schedule the commands ``fi`` (whole dies; gates earlier on the same plane) as if every die
    admitted each command at its arrival (its queue depth never binding): then the planes are
    independent non-preemptive priority queues (reads first, each class by (plane arrival, seq)),
    computed one grant per plane per step, all planes at once: the plane's next grant at t = max(free,
    the earlier of its head read's and head program's arrival) goes to the read if it has arrived by t.
    A program's arrival is known when it is the head (its gate, earlier on its plane, ended). Afterwards
    each die is checked: the queue depth never binds (at every admission, at most Q outstanding:
    carried, joined and admitted ones not ended yet; releases at an instant before its admissions),
    and each plane's reads and programs arrive in seq order (so the heads are the event scheduler's
    choices). Marks the dies where a check fails in ``bad`` (their results here are discarded).
    ``extra``: (die, admission, end) of other commands of these dies, not scheduled here (their schedule
    stands): they count in the queue-depth check as outstanding from their admission to their end, and
    their admissions are checked too."""
    BIG = _BIG
    if accel.enabled() and len(fi) >= _QD_TWIN_MIN and fi.dtype == np.int64 and plane.dtype == np.int64:
        # the orders below by one counting sort (kernels: _plane_order)
        ro, oo, up, rptr, rend, optr, oend = _plane_order(fi, kind, plane, READ)
    else:
        isr = kind[fi] == READ
        ri = fi[isr]
        oi = fi[~isr]
        npl = int(plane[fi].max()) + 1
        ro = ri[np.argsort(_small(plane[ri], npl), kind="stable")]
        oo = oi[np.argsort(_small(plane[oi], npl), kind="stable")]
        up = np.flatnonzero(np.bincount(plane[fi], minlength=npl))
        rpl = plane[ro]
        opl = plane[oo]
        rptr = np.searchsorted(rpl, up)
        rend = np.searchsorted(rpl, up, "right")
        optr = np.searchsorted(opl, up)
        oend = np.searchsorted(opl, up, "right")
    nu = len(up)
    rpl = plane[ro]
    opl = plane[oo]
    f = pf0[up].copy()
    enq = np.zeros(len(ready), np.int64)
    if not len(ro):
        _plane_chains(oo, opl, up, optr, oend, ready, service, gate, gate_x, hasg, fl, jn, t_cmd, f,
                      start=start, end=end, adm=adm, rdy=rdy, enq=enq)
        act = _E0
    else:
        # sentinels: one past the end of each order (masked where used; only the loop below uses them)
        ro_x = np.append(ro, 0)
        oo_x = np.append(oo, 0)
        qr_all = np.append(np.where(jn[ro] >= 0, jn[ro], np.maximum(ready[ro], fl[ro]) + t_cmd), BIG)
        act = np.arange(nu)
        rem = (rend - rptr) + (oend - optr)
        act = act[rem > 0]
    while len(act):
        rp = rptr[act]
        op = optr[act]
        hr = rp < rend[act]
        ho = op < oend[act]
        qr = np.where(hr, qr_all[rp], BIG)
        c = oo_x[op]
        r = ready[c]
        g = hasg[c] & ho
        if g.any():
            r = np.where(g, np.maximum(r, end[np.where(g, gate[c], c)]) + gate_x[c], r)
        j = jn[c]
        ta = np.maximum(r, fl[c])
        qo = np.where(ho, np.where(j >= 0, j, ta + t_cmd), BIG)
        fa = f[act]
        t = np.maximum(fa, np.minimum(qr, qo))
        pr = qr <= t
        x = np.where(pr, ro_x[rp], c)
        e = t + service[x]
        start[x] = t
        end[x] = e
        f[act] = e
        po = ~pr
        if po.any():
            co = c[po]
            rdy[co] = r[po]
            jo = j[po]
            adm[co] = np.where(jo >= 0, jo - t_cmd, ta[po])
            enq[co] = qo[po]
            optr[act[po]] = op[po] + 1
        if pr.any():
            cr = x[pr]
            rdy[cr] = ready[cr]
            q = qr[pr]
            adm[cr] = q - t_cmd
            enq[cr] = q
            rptr[act[pr]] = rp[pr] + 1
        alive = (rptr[act] < rend[act]) | (optr[act] < oend[act])
        if not alive.all():
            act = act[alive]
    pf[up] = f
    # checks: arrivals in seq order on each plane, per class
    for o_, pl_ in ((ro, rpl), (oo, opl)):
        if len(o_) > 1:
            b = np.flatnonzero((pl_[1:] == pl_[:-1]) & (enq[o_[1:]] < enq[o_[:-1]]))
            if len(b):
                bad[die[o_[b + 1]]] = True
    # the queue depth never binds
    isj = jn[fi] >= 0
    na = fi[~isj]
    cd, ct = _carry_arrays(die_carry)
    init = np.bincount(die[fi[isj]], minlength=len(bad))[:len(bad)]
    if len(cd):
        init = init + np.bincount(cd, minlength=len(bad))[:len(bad)]
    if accel.enabled() and len(fi) >= _QD_TWIN_MIN:
        xd, xa, xe = (_E0, _E0, _E0) if extra is None else extra
        if _qd_twin(na, fi, die, adm, end, xd, xa, xe, cd, ct, init, Q, bad):
            return
    ta_, te_ = adm[na], end[fi]
    dna, dfi = die[na], die[fi]
    if extra is not None and len(extra[0]):
        dna = np.concatenate([dna, extra[0]])
        dfi = np.concatenate([dfi, extra[0]])
        ta_ = np.concatenate([ta_, extra[1]])
        te_ = np.concatenate([te_, extra[2]])
    lo = min(int(ta_.min()) if len(ta_) else 0, int(te_.min()))
    hi = max(int(ta_.max()) if len(ta_) else 0, int(te_.max()))
    span = hi - lo + 2
    if span * (len(bad) + 1) < (1 << 62):
        # per die, sorted keys die * span + time (earlier carried releases at the die's start): at an
        # admission at t, outstanding = admissions at <= t less releases at <= t (releases first)
        ka = np.sort(dna * span + (ta_ - lo) + 1)
        ke = np.concatenate([dfi * span + (te_ - lo) + 1, cd * span + np.clip(ct - lo + 1, 0, span - 1)])
        ke.sort()
        dd = ka // span
        d0 = np.arange(len(bad) + 1, dtype=np.int64) * span
        run = (np.searchsorted(ka, ka, "right") - np.searchsorted(ka, d0)[dd]
               - np.searchsorted(ke, ka, "right") + np.searchsorted(ke, d0)[dd] + init[dd])
        over = run > Q
    else:
        ev_d = np.concatenate([dna, dfi, cd])
        ev_t = np.concatenate([ta_, te_, ct])
        ev_k = np.concatenate([np.ones(len(dna), np.int64), np.zeros(len(dfi) + len(cd), np.int64)])
        o = np.lexsort((ev_k, ev_t, ev_d))
        dd = ev_d[o]
        delta = np.where(ev_k[o] == 1, 1, -1)
        cs = np.cumsum(delta)
        first = np.flatnonzero(np.r_[True, dd[1:] != dd[:-1]])
        base = np.repeat(cs[first] - delta[first], np.diff(np.append(first, len(dd))))
        run = init[dd] + cs - base
        over = (ev_k[o] == 1) & (run > Q)
    if over.any():
        bad[dd[over]] = True


def _qd_twin(na, fi, die, adm, end, xd, xa, xe, cd, ct, init, Q, bad) -> bool:
    """``_plane_pass``'s queue-depth check (its packed-key form) by the compiled ``_qd_loop``; False where
    the keys would not fit (the caller's numpy form then)."""
    if not all(a.dtype == np.int64 for a in (na, fi, die, adm, end, xd, xa, xe, cd, ct)):
        return False
    lo = int(end[fi].min())
    hi = int(end[fi].max())
    for a in (adm[na], xa):
        if len(a):
            lo, hi = min(lo, int(a.min())), max(hi, int(a.max()))
    if not len(na) and not len(xa):
        lo, hi = min(lo, 0), max(hi, 0)
    if len(xe):
        lo, hi = min(lo, int(xe.min())), max(hi, int(xe.max()))
    span = hi - lo + 2
    if span * (len(bad) + 1) >= (1 << 62):
        return False
    _qd_loop(na, fi, die, adm, end, xd, xa, xe, cd, ct, lo, span, np.ascontiguousarray(init, np.int64), Q, bad)
    return True


@accel.jit
def _plane_order(fi, kind, plane, read):
    """``_plane_pass``'s orders, loop form (compiled by numba), by one counting sort over the planes: the reads
    and the other commands of ``fi`` each in a stable order by plane (``ro``, ``oo``: the stable argsorts), the
    planes present (``up``, sorted), and where each one's reads and others start and end in those orders (the
    left and right ``searchsorted`` of ``up``)."""
    n = fi.shape[0]
    npl = 0
    for k in range(n):
        if plane[fi[k]] + 1 > npl:
            npl = plane[fi[k]] + 1
    cr = np.zeros(npl + 1, np.int64)
    co = np.zeros(npl + 1, np.int64)
    nr = 0
    for k in range(n):
        i = fi[k]
        if kind[i] == read:
            cr[plane[i] + 1] += 1
            nr += 1
        else:
            co[plane[i] + 1] += 1
    nu = 0
    for p in range(npl):
        if cr[p + 1] + co[p + 1] > 0:
            nu += 1
        cr[p + 1] += cr[p]
        co[p + 1] += co[p]
    up = np.empty(nu, np.int64)
    rptr = np.empty(nu, np.int64)
    rend = np.empty(nu, np.int64)
    optr = np.empty(nu, np.int64)
    oend = np.empty(nu, np.int64)
    u = 0
    for p in range(npl):
        if cr[p + 1] > cr[p] or co[p + 1] > co[p]:
            up[u] = p
            rptr[u] = cr[p]
            rend[u] = cr[p + 1]
            optr[u] = co[p]
            oend[u] = co[p + 1]
            u += 1
    ro = np.empty(nr, np.int64)
    oo = np.empty(n - nr, np.int64)
    for k in range(n):
        i = fi[k]
        p = plane[i]
        if kind[i] == read:
            ro[cr[p]] = i
            cr[p] += 1
        else:
            oo[co[p]] = i
            co[p] += 1
    return ro, oo, up, rptr, rend, optr, oend


@accel.jit
def _qd_loop(na, fi, die, adm, end, xd, xa, xe, cd, ct, lo, span, init, Q, bad):
    """``_plane_pass``'s queue-depth check, loop form (compiled by numba): per die, the admissions and the
    releases (ends; carried releases clipped to [0, span - 1] as the packed keys clip them) as offsets from
    ``lo`` (+ 1), each sorted, then one sweep: at an admission at v, outstanding = init + admissions at <= v
    - releases at <= v; a die where it exceeds ``Q`` is marked in ``bad``."""
    nd = bad.shape[0]
    ca = np.zeros(nd + 1, np.int64)
    ce = np.zeros(nd + 1, np.int64)
    for i in range(na.shape[0]):
        ca[die[na[i]] + 1] += 1
    for i in range(xd.shape[0]):
        ca[xd[i] + 1] += 1
    for i in range(fi.shape[0]):
        ce[die[fi[i]] + 1] += 1
    for i in range(xd.shape[0]):
        ce[xd[i] + 1] += 1
    for i in range(cd.shape[0]):
        ce[cd[i] + 1] += 1
    for d in range(nd):
        ca[d + 1] += ca[d]
        ce[d + 1] += ce[d]
    A = np.empty(ca[nd], np.int64)
    E = np.empty(ce[nd], np.int64)
    pa = ca[:nd].copy()
    pe = ce[:nd].copy()
    for i in range(na.shape[0]):
        d = die[na[i]]
        A[pa[d]] = adm[na[i]] - lo + 1
        pa[d] += 1
    for i in range(xd.shape[0]):
        d = xd[i]
        A[pa[d]] = xa[i] - lo + 1
        pa[d] += 1
        E[pe[d]] = xe[i] - lo + 1
        pe[d] += 1
    for i in range(fi.shape[0]):
        d = die[fi[i]]
        E[pe[d]] = end[fi[i]] - lo + 1
        pe[d] += 1
    for i in range(cd.shape[0]):
        d = cd[i]
        v = ct[i] - lo + 1
        E[pe[d]] = 0 if v < 0 else (span - 1 if v > span - 1 else v)
        pe[d] += 1
    mx = 1
    for d in range(nd):
        mx = max(mx, ca[d + 1] - ca[d], ce[d + 1] - ce[d])
    cnt = np.empty(mx + 2, np.int64)
    tmp = np.empty(mx, np.int64)
    for d in range(nd):
        a0, a1 = ca[d], ca[d + 1]
        if a1 == a0:
            continue
        As = A[a0:a1]
        lo = As[0]
        hi = As[0]
        for i in range(a1 - a0):
            if As[i] < lo:
                lo = As[i]
            if As[i] > hi:
                hi = As[i]
        nb = max(1, (a1 - a0) // 2)
        _bucket_sort(As, lo, hi, nb, cnt, tmp)
        Es = E[ce[d]:ce[d + 1]]
        _bucket_sort(Es, lo, hi, nb, cnt, tmp)
        ne = Es.shape[0]
        j = 0
        k = 0
        m = a1 - a0
        while k < m:
            v = As[k]
            while k + 1 < m and As[k + 1] == v:
                k += 1
            while j < ne and Es[j] <= v:
                j += 1
            if init[d] + (k + 1) - j > Q:
                bad[d] = True
                break
            k += 1


@accel.jit
def _bucket_sort(x, lo, hi, nb, cnt, tmp):
    """Sort ``x`` in place (``_qd_loop``'s per-die sort): at most ``nb`` buckets of equal width (a power of two)
    over [lo, hi] (values outside in the first and last), then each bucket by insertion (numpy's sort where one
    holds more than 32)."""
    n = x.shape[0]
    if n <= 32:
        _insertion(x, 0, n)
        return
    if hi < lo:
        hi = lo
    sh = 0                                        # buckets 2**sh wide (a shift, not a division), at most nb
    while ((hi - lo) >> sh) >= nb:
        sh += 1
    nb = ((hi - lo) >> sh) + 1
    for b in range(nb + 1):
        cnt[b] = 0
    for i in range(n):
        v = x[i]
        b = 0 if v < lo else (nb - 1 if v > hi else (v - lo) >> sh)
        cnt[b + 1] += 1
    for b in range(nb):
        cnt[b + 1] += cnt[b]
    for i in range(n):
        v = x[i]
        b = 0 if v < lo else (nb - 1 if v > hi else (v - lo) >> sh)
        tmp[cnt[b]] = v
        cnt[b] += 1
    x[:] = tmp[:n]
    s = 0
    for b in range(nb):                           # (cnt[b]: the end of bucket b now)
        e = cnt[b]
        if e - s > 32:
            x[s:e].sort()
        elif e - s > 1:
            _insertion(x, s, e)
        s = e


@accel.jit
def _insertion(x, s, e):
    """Insertion sort of ``x[s:e]`` in place."""
    for i in range(s + 1, e):
        v = x[i]
        j = i - 1
        while j >= s and x[j] > v:
            x[j + 1] = x[j]
            j -= 1
        x[j + 1] = v


def _plane_chains(oo, opl, up, ost, oend, ready, service, gate, gate_x, hasg, fl, jn, t_cmd, f, *, start, end, adm,
                  rdy, enq):
    """``_plane_pass`` where no plane has a read: each plane serves its commands in seq order (FCFS,
    checked by the caller), one column (the k-th command of every plane) per step; planes ordered by
    their number of commands (descending), so the planes still busy at step k are a prefix."""
    if accel.enabled() and len(oo):
        _chains_loop(oo, ost, oend, ready, service, gate, gate_x, hasg, fl, jn, t_cmd, f, start, end, adm, rdy, enq)
        return
    cnt = oend - ost
    po = np.argsort(-cnt, kind="stable")
    cnt_s = cnt[po]
    nu = len(po)
    m = int(cnt_s[0]) if nu else 0
    if m == 0:
        return
    col = np.arange(len(oo)) - np.repeat(ost, cnt)
    rowof = np.empty(nu, np.int64)
    rowof[po] = np.arange(nu)
    row = np.repeat(rowof, cnt)
    M = np.zeros((m, nu), np.int64)               # column-major: step k reads row k
    M[col, row] = oo
    nk = len(cnt_s) - np.searchsorted(cnt_s[::-1], np.arange(m), side="right")   # planes with more than k
    R = ready[M]
    G = (hasg[M]) & (np.arange(nu)[None, :] < nk[:, None])
    GI = gate[M]
    GX = gate_x[M]
    FL = fl[M]
    J = jn[M]
    SV = service[M]
    fs = f[po].copy()
    anyg = G.any(axis=1)
    anyj = (J >= 0).any(axis=1)
    for k in range(m):
        n = int(nk[k])
        c = M[k, :n]
        r = R[k, :n]
        if anyg[k]:
            g = G[k, :n]
            r = np.where(g, np.maximum(r, end[np.where(g, GI[k, :n], c)]) + GX[k, :n], r)
        ta = np.maximum(r, FL[k, :n])
        if anyj[k]:
            j = J[k, :n]
            q = np.where(j >= 0, j, ta + t_cmd)
            a = np.where(j >= 0, j - t_cmd, ta)
        else:
            q = ta + t_cmd
            a = ta
        s = np.maximum(q, fs[:n])
        e = s + SV[k, :n]
        fs[:n] = e
        start[c] = s
        end[c] = e
        adm[c] = a
        rdy[c] = r
        enq[c] = q
    f[po] = fs


@accel.jit
def _chains_loop(oo, ost, oend, ready, service, gate, gate_x, hasg, fl, jn, t_cmd, f, start, end, adm, rdy, enq):
    """``_plane_chains``, loop form (compiled by numba): the same steps (step k: the k-th command of every
    plane that has one, its gate's end read before any end of the step is written), without the matrices."""
    nu = ost.shape[0]
    m = 0
    for u in range(nu):
        if oend[u] - ost[u] > m:
            m = oend[u] - ost[u]
    fs = f.copy()
    ev = np.empty(nu, np.int64)
    for k in range(m):
        for u in range(nu):                       # (reads of the step)
            if ost[u] + k >= oend[u]:
                continue
            c = oo[ost[u] + k]
            r = ready[c]
            if hasg[c]:
                ge = end[gate[c]]
                r = (r if r > ge else ge) + gate_x[c]
            ta = r if r > fl[c] else fl[c]
            j = jn[c]
            if j >= 0:
                q = j
                a = j - t_cmd
            else:
                q = ta + t_cmd
                a = ta
            s = q if q > fs[u] else fs[u]
            e = s + service[c]
            fs[u] = e
            start[c] = s
            ev[u] = e
            adm[c] = a
            rdy[c] = r
            enq[c] = q
        for u in range(nu):                       # (writes of the step)
            if ost[u] + k < oend[u]:
                end[oo[ost[u] + k]] = ev[u]
    for u in range(nu):
        f[u] = fs[u]


def simulate_compiled(kind, ready, plane, die, service, *, t_cmd: int, queue_depth: int, plane_free: np.ndarray,
                      die_carry, gate=None, gate_x=None, floor=None, join=None, full: bool = False,
                      lazy_lim: int | None = None, skipped: np.ndarray | None = None):
    """``simulate`` run by its compiled twin (``_simulate_loop``, hbfd/accel.py): the same arguments and
    the same results bit for bit (tests/media/test_accel_media.py). Callers use it where
    ``accel.enabled()``. ``lazy_lim`` with ``skipped`` (bool, one entry per die, False): ``_simulate_split``'s
    round-15 skip of the commands behind a die's reads that cannot start before ``lazy_lim`` (the dies in
    ``skipped``; their commands' results are not the schedule's, see there)."""
    n = len(kind)
    kind = np.asarray(kind, np.int64)
    ready = np.asarray(ready, np.int64)
    plane = np.asarray(plane, np.int64)
    die = np.asarray(die, np.int64)
    service = np.asarray(service, np.int64)
    neg = np.full(n, -1, np.int64)
    gate = neg if gate is None else np.asarray(gate, np.int64)
    gate_x = np.zeros(n, np.int64) if gate_x is None else np.asarray(gate_x, np.int64)
    has_floor = floor is not None
    floor = np.zeros(n, np.int64) if floor is None else np.asarray(floor, np.int64)
    join = neg if join is None else np.asarray(join, np.int64)
    cd, ct = _carry_arrays(die_carry)
    pf = np.ascontiguousarray(plane_free, dtype=np.int64)
    lazy = lazy_lim is not None and skipped is not None
    start, end, adm, rdy, ok, split = _simulate_split(kind, ready, plane, die, service, int(t_cmd), int(queue_depth),
                                                      pf, cd, ct, gate, gate_x, floor, has_floor, join,
                                                      int(lazy_lim) if lazy else _BIG, skipped if lazy else _NO_SKIP)
    if not split:                                  # a gate across dies or a plane on two dies: all at once
        start, end, adm, rdy, ok = _simulate_loop(kind, ready, plane, die, service, int(t_cmd), int(queue_depth), pf,
                                                  cd, ct, gate, gate_x, floor, has_floor, join)
    if not ok:
        raise ValueError("eventsim: a gate names a command that never runs")
    if pf is not plane_free:
        plane_free[:] = pf
    if full:
        return start, end, adm, rdy
    return start, end


@accel.jit
def _simulate_split(kind, ready, plane, die, service, t_cmd, Q, pf, cd, ct, gate, gate_x, floor, has_floor, join,
                    lazy_lim, skipped):
    """``_simulate_loop`` one die at a time (compiled by numba): where every plane's commands are on one die and
    no gate (of a command not joined) crosses dies, the dies share nothing (``simulate_auto``'s event split), so
    each die's commands (in index order: the FIFO ties keep their order), its carried releases and its planes'
    free times are scheduled alone by ``_simulate_loop``, whose heaps then hold one die's events. The same
    results bit for bit (tests/media/test_accel_media.py). The inputs are read once, in index order, into
    die-ordered arrays whose slices are each die's arrays (round 8: no gathers per die). Returns
    ``_simulate_loop``'s five results and whether it split; where it did not, nothing is changed (``pf`` included) and the caller runs the loop on
    all of it.

    Round 15, where ``skipped`` has an entry per die (length 0: never): a die whose reads are all served by
    ``_read_prefix`` (its other commands none joined, none a read) and whose X + t_cmd is at least ``lazy_lim`` (the
    engine's decision limit) is not scheduled behind its reads: every other command starts at or after X + t_cmd
    (admitted at or after X) and after the start of every read of its plane (those reach it by X + t_cmd and go
    first), so the engine decides none of them in this run and schedules them again with the next. Its reads get
    their results as always; its other commands start = end = ``_BIG``, admission X (>= lazy_lim - t_cmd, the
    engine's ``_dec_h``: not admitted before it), ready time their ``ready``; ``skipped[d]`` is set. The five
    results of the other dies are the loop's."""
    n = kind.shape[0]
    npl = pf.shape[0]
    nd = 0
    for i in range(n):
        if die[i] + 1 > nd:
            nd = die[i] + 1
    start = np.empty(n, np.int64)                 # (wt/eng19: every element is written below where it splits (each
    end = np.empty(n, np.int64)                   # die's commands are scattered, or its fast reads set, once); where
    adm = np.empty(n, np.int64)                   # it does not the caller ignores them: no zero fill, no copy)
    rdy = np.empty(n, np.int64)
    pdie = np.full(npl, -1, np.int64)
    for i in range(n):
        p = plane[i]
        if pdie[p] < 0:
            pdie[p] = die[i]
        elif pdie[p] != die[i]:
            return start, end, adm, rdy, False, False
        if join[i] < 0 and gate[i] >= 0 and die[gate[i]] != die[i]:
            return start, end, adm, rdy, False, False
    # the commands by die (counting sort, index order kept) and each one's index in its die
    dofs = np.zeros(nd + 1, np.int64)
    for i in range(n):
        dofs[die[i] + 1] += 1
    for d in range(nd):
        dofs[d + 1] += dofs[d]
    fill = dofs[:nd].copy()
    order = np.empty(n, np.int64)
    loc = np.empty(n, np.int64)
    # the fields in die order, read in index order (one pass over each input; a die's slice is its arrays)
    kd = np.empty(n, kind.dtype)
    rd = np.empty(n, np.int64)
    pd = np.empty(n, np.int64)
    sd = np.empty(n, np.int64)
    gd = np.empty(n, np.int64)
    gxd = np.empty(n, np.int64)
    fd = np.empty(n, np.int64)
    jd = np.empty(n, np.int64)
    for i in range(n):
        d = die[i]
        k = fill[d]
        loc[i] = k - dofs[d]
        order[k] = i
        fill[d] = k + 1
    for k in range(n):                            # (round 14: gathered in die order, not scattered into the dies'
        i = order[k]                              # streams of 8 arrays: ~0.1-0.2 ms less a 90/10 run)
        kd[k] = kind[i]
        rd[k] = ready[i]
        pd[k] = plane[i]
        sd[k] = service[i]
        gxd[k] = gate_x[i]
        fd[k] = floor[i]
        jd[k] = join[i]
        g = gate[i]
        gd[k] = loc[g] if g >= 0 else -1
    # carried releases by die (those of dies without commands change nothing here)
    cofs = np.zeros(nd + 1, np.int64)
    for k in range(cd.shape[0]):
        if cd[k] < nd:
            cofs[cd[k] + 1] += 1
    for d in range(nd):
        cofs[d + 1] += cofs[d]
    cfill = cofs[:nd].copy()
    cts = np.empty(cofs[nd], np.int64)
    for k in range(cd.shape[0]):
        d = cd[k]
        if d < nd:
            cts[cfill[d]] = ct[k]
            cfill[d] += 1
    ploc = np.full(npl, -1, np.int64)
    ok = True
    mx = 0                                        # (the per-die arrays: one buffer each, sliced per die)
    for d in range(nd):
        if dofs[d + 1] - dofs[d] > mx:
            mx = dofs[d + 1] - dofs[d]
    pll_b = np.empty(mx, np.int64)
    dl_b = np.zeros(mx, np.int64)
    pl_l = np.empty(npl, np.int64)
    pfl_b = np.empty(npl, np.int64)
    fs_b = np.zeros(mx, np.int64)                 # (round 10: the fast reads' flags, ends, admissions, the
    fe_b = np.zeros(mx, np.int64)                 # rest's fields and carried releases)
    fa_b = np.zeros(mx, np.int64)
    rmap = np.full(mx, -1, np.int64)
    kl2 = np.empty(mx, kind.dtype)
    rl2 = np.empty(mx, np.int64)
    pll2 = np.empty(mx, np.int64)
    sl2 = np.empty(mx, np.int64)
    gl2 = np.empty(mx, np.int64)
    gxl2 = np.empty(mx, np.int64)
    fll2 = np.empty(mx, np.int64)
    jl2 = np.empty(mx, np.int64)
    ix2 = np.empty(mx, np.int64)
    mc = 0
    for d in range(nd):
        if cofs[d + 1] - cofs[d] > mc:
            mc = cofs[d + 1] - cofs[d]
    cv_b = np.empty(mc + mx, np.int64)
    pfs_b = np.empty(npl, np.int64)
    pr_b = np.empty(mx, np.int64)
    wk_b = np.empty(3 * npl + 12 * mx + 8, np.int64)
    ps_b = np.empty(mx, np.int64)
    hp_b = np.empty(Q if Q < mc + mx else mc + mx + 1, np.int64)
    cz_b = np.zeros(mc + mx, np.int64)
    sv_fs = np.empty(mx, np.int64)                # (round 12: the first _read_prefix's results, kept while
    sv_fe = np.empty(mx, np.int64)                # _plane_die is tried: restored where it declines, not computed
    sv_fa = np.empty(mx, np.int64)                # again)
    sv_pf = np.empty(npl, np.int64)
    for d in range(nd):
        a = dofs[d]
        m = dofs[d + 1] - a
        if m == 0:
            continue
        npd = 0                                   # the die's planes, numbered locally
        pll = pll_b[:m]
        nread = 0                                 # (wt/eng19: the reads counted and the fast reads' flags cleared
        r0 = 0                                    # in the same pass)
        r1 = 0
        for k in range(m):
            p = pd[a + k]
            if ploc[p] < 0:
                ploc[p] = npd
                pl_l[npd] = p
                pfl_b[npd] = pf[p]
                npd += 1
            pll[k] = ploc[p]
            fs_b[k] = 0
            if kd[a + k] == 0:
                if nread == 0:
                    r0 = rd[a + k]
                r1 = rd[a + k]
                nread += 1
        pfl = pfl_b[:npd]
        b = a + m
        kl = kd[a:b]
        rl = rd[a:b]
        dl = dl_b[:m]
        sl = sd[a:b]
        gl = gd[a:b]
        gxl = gxd[a:b]
        fll = fd[a:b]
        jl = jd[a:b]
        # round 10: the reads admitted before any other command can be are served here (``_read_prefix``),
        # the rest of the die by the event loop behind them (their releases carried, their planes' free times)
        nc0 = cofs[d + 1] - cofs[d]
        ctl = cts[cofs[d]:cofs[d + 1]]
        # (``_plane_die`` is tried only where the die's other commands and carried releases do not alone fill
        # its queue depth: else its check nearly always fails, after a whole schedule of the die.) Round 13:
        # where the die's reads come on average more than t_cmd apart (10 % load: ~20 us) and are at least 4/5 of
        # its commands (90/10), it is tried first, before the fast reads (at 90/10 10 % it kept nearly every such
        # die: they were computed for nothing); it declines with the planes' free times unchanged. Else (a
        # burst's reads, mostly all fast; 50/50, where it declines more often) after them, as before
        pd_first = nread > 0 and m - nread + nc0 <= Q and r1 - r0 > nread * t_cmd and 4 * (m - nread) <= nread
        kept = pd_first and _plane_die(kl, rl, pll, sl, gl, gxl, fll, has_floor, jl, t_cmd, Q, pfl, ctl, fe_b,
                                       fa_b, pr_b, ps_b, wk_b)
        nf = 0
        ncv = 0
        X = 0
        fs = fs_b[:m]
        if not kept:                              # (fs cleared above: _plane_die does not write it)
            for q in range(npd):
                pfs_b[q] = pfl[q]
            nf, ncv, X = _read_prefix(kl, rl, pll, sl, gl, gxl, fll, has_floor, jl, t_cmd, Q, pfl, ctl, fs, fe_b,
                                      fa_b, cv_b, hp_b)
            if not pd_first and nf < nread and m - nread + nc0 <= Q:
                # reads after the first other command: where the depth never binds, the die's planes alone
                # (``_plane_die``); else the fast reads again and the loop behind them
                if nf > 0:
                    for k in range(m):
                        sv_fs[k] = fs[k]
                        sv_fe[k] = fe_b[k]
                        sv_fa[k] = fa_b[k]
                    for q in range(npd):
                        sv_pf[q] = pfl[q]
                for q in range(npd):
                    pfl[q] = pfs_b[q]
                fs[:] = 0
                kept = _plane_die(kl, rl, pll, sl, gl, gxl, fll, has_floor, jl, t_cmd, Q, pfl, ctl, fe_b, fa_b, pr_b,
                                  ps_b, wk_b)
                if not kept and nf > 0:            # (the first call's results: _plane_die wrote only the planes'
                    for k in range(m):             # free times, the ends, admissions, ready and start times and
                        fs[k] = sv_fs[k]           # its scratch; the carried releases for the rest, cv_b, stand)
                        fe_b[k] = sv_fe[k]
                        fa_b[k] = sv_fa[k]
                    for q in range(npd):
                        pfl[q] = sv_pf[q]
        if kept:
            _scatter(order[a:a + m], start, end, adm, rdy, ps_b, fe_b, fa_b, pr_b)
            for q in range(npd):
                pf[pl_l[q]] = pfl[q]
                ploc[pl_l[q]] = -1
            continue
        if 0 < nf < m and nf == nread and d < skipped.shape[0] and X + t_cmd >= lazy_lim:
            # round 15: every read fast and none of the rest decidable in this run (see above): the rest not
            # scheduled now (whatever the fast reads' share: nothing is copied), unless one is joined
            w = 0
            for k in range(m):
                if fs[k] == 1:
                    ps_b[k] = fe_b[k] - sl[k]
                    pr_b[k] = rl[k]
                elif jl[k] >= 0:
                    w = -1
                    break
                else:
                    ps_b[k] = _BIG
                    fe_b[k] = _BIG
                    fa_b[k] = X
                    pr_b[k] = rl[k]
                    w += 1
            if w > 0:
                skipped[d] = True
                _scatter(order[a:a + m], start, end, adm, rdy, ps_b, fe_b, fa_b, pr_b)
                for q in range(npd):
                    pf[pl_l[q]] = pfl[q]
                    ploc[pl_l[q]] = -1
                continue
        if 0 < nf < m and nf * _FAST_MIN_SHARE < m:    # too few to pay for the rest's copy: the loop on all
            for q in range(npd):
                pfl[q] = pfs_b[q]
            fs[:] = 0
            nf = 0
        # round 14: a rest without reads or joins behind the fast reads (a burst's programs) by ``_heads_rest`` in
        # place, the fast reads skipped and the rest floored at X: no copy of the rest, one scatter of the die
        # (the copy and its scatters were ~1/4 of a 90/10 burst's scheduler time)
        if nf > 0:
            hd = True
            w = 0
            for k in range(m):                     # (the fast reads' start and ready; the rest's indices)
                if fs[k] == 1:
                    ps_b[k] = fe_b[k] - sl[k]
                    pr_b[k] = rl[k]
                elif kl[k] == 0 or jl[k] >= 0:
                    hd = False
                    break
                else:
                    ix2[w] = k
                    w += 1
            if hd and _heads_rest(kl, rl, pll, sl, gl, gxl, fll, has_floor, X, fs, ix2[:w], True, t_cmd, Q, pfl,
                                  cv_b[:ncv], ps_b, fe_b, fa_b, pr_b, wk_b, hp_b):
                _scatter(order[a:a + m], start, end, adm, rdy, ps_b, fe_b, fa_b, pr_b)
                for q in range(npd):
                    pf[pl_l[q]] = pfl[q]
                    ploc[pl_l[q]] = -1
                continue
        # the commands the event loop schedules: all of the die, or those after the fast reads (compacted into
        # the rest's buffers: index order kept, gates renumbered, floored at X); one call site of the loop (two
        # would make numba compile and LLVM optimize its body twice)
        if nf == 0:
            nr_ = m
            K, R, PL, S, G, GX, F, J = kl, rl, pll, sl, gl, gxl, fll, jl
            hf = has_floor
            for c in range(nc0):
                cv_b[c] = ctl[c]
            ncv = nc0
        else:
            w = 0
            for k in range(m):
                i = order[a + k]
                if fs[k] == 1:
                    start[i] = fe_b[k] - sl[k]
                    end[i] = fe_b[k]
                    adm[i] = fa_b[k]
                    rdy[i] = rl[k]
                else:
                    rmap[k] = w
                    kl2[w] = kl[k]
                    rl2[w] = rl[k]
                    pll2[w] = pll[k]
                    sl2[w] = sl[k]
                    gl2[w] = gl[k]
                    gxl2[w] = gxl[k]
                    fll2[w] = fll[k] if has_floor and fll[k] > X else X
                    jl2[w] = jl[k]
                    ix2[w] = i
                    w += 1
            nr_ = w
            for k in range(nr_):
                if gl2[k] >= 0:
                    gl2[k] = rmap[gl2[k]]
            K, R, PL, S, G, GX, F, J = (kl2[:nr_], rl2[:nr_], pll2[:nr_], sl2[:nr_], gl2[:nr_], gxl2[:nr_], fll2[:nr_],
                                        jl2[:nr_])
            hf = nr_ >= 0                          # (True as a run-time bool, the type of has_floor)
        # round 13: a die without reads or joins by the heads pass (``_heads_rest``) where its order is the event
        # scheduler's; else the loop (a rest behind fast reads was tried above)
        hd = nf == 0 and nr_ > 0
        for k in range(nr_ if hd else 0):
            if K[k] == 0 or J[k] >= 0:
                hd = False
                break
        if hd and _heads_rest(K, R, PL, S, G, GX, F, hf, -_BIG, K, K, False, t_cmd, Q, pfl, cv_b[:ncv], ps_b, fe_b,
                              fa_b, pr_b, wk_b, hp_b):
            _scatter(order[a:a + nr_] if nf == 0 else ix2[:nr_], start, end, adm, rdy, ps_b, fe_b, fa_b, pr_b)
        elif nr_ > 0:
            s, e, ad, r, okd = _simulate_loop(K, R, PL, dl_b[:nr_], S, t_cmd, Q, pfl, cz_b[:ncv], cv_b[:ncv].copy(), G,
                                              GX, F, hf, J)
            if not okd:
                ok = False
            _scatter(order[a:a + nr_] if nf == 0 else ix2[:nr_], start, end, adm, rdy, s, e, ad, r)
        for q in range(npd):
            pf[pl_l[q]] = pfl[q]
            ploc[pl_l[q]] = -1
    return start, end, adm, rdy, ok, True


@accel.jit
def _scatter(ix, start, end, adm, rdy, s, e, ad, r):
    """``start[ix[k]] = s[k]`` (and the same for end, admission, ready) for each k of ``ix``: a die's results
    into the batch's (``_simulate_split``)."""
    for k in range(ix.shape[0]):
        i = ix[k]
        start[i] = s[k]
        end[i] = e[k]
        adm[i] = ad[k]
        rdy[i] = r[k]


_FAST_MIN_SHARE = 8       # _simulate_split serves a die's fast reads apart where they are at least 1/8 of its commands


@accel.jit
def _read_prefix(kind, ready, plane, service, gate, gate_x, floor, has_floor, join, t_cmd, Q, pf, ct, fast, fend,
                 fadm, cout, hp):
    """The reads of one die (``_simulate_split``'s slices) that the die's other commands cannot affect, served
    as the reads-only die stage serves them (round 10). Reads go first at the die queue and at the plane, so
    another command (program, copyback, erase) changes nothing for a read admitted at or before X, the earliest
    time at which any of them can be admitted: X is the first time from the earliest time one of them can
    reach the die (its ready time, a gated one's ready + min(gate_x, 0)) at which no read waits in the
    reads-only schedule (a command is admitted only where no read waits); a read admitted by X reaches its
    plane by X + t_cmd, no earlier than any other command, and is served before it (reads first, non-preemptive
    only once started). Those reads are a prefix of the die's reads (admissions rise with (ready, seq)): they
    get their reads-only admission, start and end (``fast[k] = 1``, ``fend``, ``fadm``); ``pf`` is moved past
    them; ``cout[:nc]`` gets the slot releases the event loop for the rest is to carry: those after X of the
    die's carried ones and the fast reads' ends, or, where the depth can bind, of the Q latest of them (a
    command is admitted where fewer than Q releases lie after it: the others never decide anything). Every
    other command is admitted at or after X in the full schedule (the other reads arrive after X), so the
    caller floors the rest at X (a floor keeps the die-queue key and the ready time it reports) and its
    schedule is then exactly the loop's on the rest with those releases: at X the same commands wait, with
    the same keys, and the same releases lie ahead. Returns (how many, nc, X); 0 (nothing changed) where a read is gated,
    joined or floored, the reads are not in ready order, a joined command holds a slot, or a gate names a
    read."""
    m = kind.shape[0]
    nr = 0
    rmin = _BIG
    last = -_BIG
    first = _BIG
    for k in range(m):
        if kind[k] == 0:
            if nr == 0:
                first = ready[k]
            if gate[k] >= 0 or join[k] >= 0 or (has_floor and floor[k] > ready[k]) or ready[k] < last:
                return 0, 0, 0
            last = ready[k]
            nr += 1
        else:
            if join[k] >= 0:
                return 0, 0, 0
            if gate[k] >= 0:
                if kind[gate[k]] == 0:
                    return 0, 0, 0
                lo = ready[k] + (gate_x[k] if gate_x[k] < 0 else 0)
            else:
                lo = ready[k]
            if lo < rmin:
                rmin = lo
    if nr == 0 or first > rmin:
        return 0, 0, 0
    # the reads-only schedule: admission at max(ready, the Q-th latest earlier release, carried ones
    # included), the plane FCFS (``simulate``'s semantics with reads alone); a min-heap of the Q latest
    # (``hp``: room for Q where the depth can bind)
    nc = ct.shape[0]
    bind = nc + nr >= Q
    hs = 0
    if bind:
        for c in range(nc):
            hs = _qheap_add(hp, hs, Q, ct[c])
    X = rmin
    nf = 0
    for k in range(m):
        if kind[k] != 0:
            continue
        if ready[k] > X:                           # no read waits at X: the other commands may start there
            break
        A = ready[k]
        if bind and hs == Q and hp[0] > A:
            A = hp[0]
        if A > X:                                  # it waits at X: X moves to its admission
            X = A
        s = A + t_cmd
        p = plane[k]
        if pf[p] > s:
            s = pf[p]
        e = s + service[k]
        pf[p] = e
        if bind:
            hs = _qheap_add(hp, hs, Q, e)
        fast[k] = 1
        fend[k] = e
        fadm[k] = A
        nf += 1
    if nf == 0:
        return 0, 0, 0
    w = 0
    if bind:
        for c in range(hs):
            if hp[c] > X:
                cout[w] = hp[c]
                w += 1
        return nf, w, X
    for c in range(nc):
        if ct[c] > X:
            cout[w] = ct[c]
            w += 1
    for k in range(m):
        if fast[k] == 1 and fend[k] > X:
            cout[w] = fend[k]
            w += 1
    return nf, w, X


@accel.jit
def _by_plane(plane, pofs, fill, lst, sel, use_sel):
    """A die's commands by plane (counting sort, index order kept on each plane): plane q's at
    ``lst[pofs[q]:pofs[q + 1]]``; ``fill`` is scratch (npd); with ``use_sel``, only the commands ``sel`` (ascending).
    Returns the most commands on one plane."""
    npd = fill.shape[0]
    n = sel.shape[0] if use_sel else plane.shape[0]
    for q in range(npd + 1):
        pofs[q] = 0
    for z in range(n):
        k = sel[z] if use_sel else z
        pofs[plane[k] + 1] += 1
    most = 0
    for q in range(npd):
        if pofs[q + 1] > most:
            most = pofs[q + 1]
        pofs[q + 1] += pofs[q]
    for q in range(npd):
        fill[q] = pofs[q]
    for z in range(n):
        k = sel[z] if use_sel else z
        lst[fill[plane[k]]] = k
        fill[plane[k]] += 1
    return most


_PLANE_DIE_MAX = 256       # _plane_die: at most this many commands on one plane (a grant scans its plane for gated ones)


@accel.jit
def _plane_die(kind, ready, plane, service, gate, gate_x, floor, has_floor, join, t_cmd, Q, pf, ct, en, ad, rd, st, wk):
    """One die's schedule where its queue depth never binds (round 10): every command is then admitted when it
    reaches the die (its ready time, floored; a gated one at max(ready, its gate's end) + gate_x, floored; a
    joined one holds its slot already), so the die's planes are independent non-preemptive queues that serve
    reads first, each class by (plane arrival, seq), from the plane's free time: each plane is scheduled alone
    here. Kept only where it is the event loop's schedule: every gate names an earlier command of the same plane,
    every service is positive, and at each admission time t the commands outstanding -- carried releases after
    t, joined commands not ended by t, commands admitted by t (those arriving at t included) not ended by t --
    are at most Q (a slot freed at t serves an arrival at t; the order of an instant's admissions then does not
    matter). Returns True with start, end, admission, ready in ``st``, ``en``, ``ad``, ``rd`` and ``pf`` moved;
    False with ``pf`` unchanged. ``wk``: scratch (int64, at least 3 npd + 12 m + 3; no allocation here:
    a die's call is a few microseconds)."""
    m = kind.shape[0]
    npd = pf.shape[0]
    nj = 0
    for k in range(m):
        if service[k] <= 0:
            return False
        if join[k] >= 0:
            nj += 1
        elif gate[k] >= 0:
            g = gate[k]
            if g >= k or plane[g] != plane[k]:
                return False
    nc = ct.shape[0]
    o = 0
    pofs = wk[o:o + npd + 1]
    o += npd + 1
    fill = wk[o:o + npd]
    o += npd
    lst = wk[o:o + m]
    o += m
    pa = wk[o:o + m]
    o += m
    st_ = wk[o:o + m]                           # 0 waits for its gate, 1 known plane arrival, 2 scheduled
    o += m
    pfn = wk[o:o + npd]
    o += npd
    rt = wk[o:o + m]                            # per plane: a heap of reads and one of the others, by (arrival, seq)
    o += m
    ri = wk[o:o + m]
    o += m
    ot = wk[o:o + m]
    o += m
    oi = wk[o:o + m]
    o += m
    A = wk[o:o + m]
    o += m
    E = wk[o:o + m + 1]
    o += m + 1
    C = wk[o:o + m + 1]
    o += m + 1
    tmp = wk[o:o + m]
    if _by_plane(plane, pofs, fill, lst, plane, False) > _PLANE_DIE_MAX:
        return False
    for k in range(m):
        rd[k] = ready[k]
        if join[k] >= 0:
            ad[k] = join[k] - t_cmd
            pa[k] = join[k]
            st_[k] = 1
        elif gate[k] < 0:
            r = ready[k]
            if has_floor and floor[k] > r:
                r = floor[k]
            ad[k] = r
            pa[k] = r + t_cmd
            st_[k] = 1
        else:
            st_[k] = 0
    for q in range(npd):
        t = pf[q]
        left = pofs[q + 1] - pofs[q]
        rs = 0
        os_ = 0
        nw = 0                                   # (round 13: the plane's commands waiting for a gate: the
        for z in range(pofs[q], pofs[q + 1]):    # grants scan the plane for them only while there are some)
            j = lst[z]
            if st_[j] == 0:
                nw += 1
            elif st_[j] == 1:
                if kind[j] == 0:
                    rs = _hpush(rt, ri, rs, pa[j], j)
                else:
                    os_ = _hpush(ot, oi, os_, pa[j], j)
        while left > 0:
            if rs > 0 and rt[0] <= t:
                best = ri[0]
                rs = _hpop(rt, ri, rs)
            elif os_ > 0 and ot[0] <= t:
                best = oi[0]
                os_ = _hpop(ot, oi, os_)
            else:
                nxt = _BIG
                if rs > 0:
                    nxt = rt[0]
                if os_ > 0 and ot[0] < nxt:
                    nxt = ot[0]
                if nxt == _BIG:                      # a gate that never runs: the event loop says so
                    return False
                t = nxt
                continue
            st[best] = t
            e = t + service[best]
            en[best] = e
            st_[best] = 2
            left -= 1
            t = e
            for z in range(pofs[q], pofs[q + 1] if nw > 0 else pofs[q]):
                j = lst[z]
                if st_[j] == 0 and gate[j] == best:
                    nw -= 1
                    r = (ready[j] if ready[j] > e else e) + gate_x[j]
                    rd[j] = r
                    if has_floor and floor[j] > r:
                        r = floor[j]
                    ad[j] = r
                    pa[j] = r + t_cmd
                    st_[j] = 1
                    if kind[j] == 0:
                        rs = _hpush(rt, ri, rs, pa[j], j)
                    else:
                        os_ = _hpush(ot, oi, os_, pa[j], j)
        pfn[q] = t
    # the queue depth: outstanding at each admission time at most Q
    na = m - nj
    if nc + m > Q and na > 0 and _depth_bound(ad, en, join, ct, na, E[:na + 1]) > Q:
        w = 0
        for k in range(m):
            if join[k] < 0:
                A[w] = ad[k]
                w += 1
        _sort_runs(A, na, tmp)                      # (in index order a few ascending runs: about one pass)
        # E[i]: the ends and carried releases first counted at A[i] (the first admission time not before them;
        # no sort of the ends), then a sweep over the admission times. Round 13: that index by a bucket table
        # over A's span (B buckets of 2^sh ns, T[b] the first i whose A[i] lies in bucket b or later: every A
        # before T[b] is below any time of bucket b) and a scan from there, not a binary search (~4 us a die,
        # half of the scheduler's time at 10 % load); a binary search where A is short
        for i in range(na + 1):
            E[i] = 0
            C[i] = 0
        amax = A[na - 1]
        a0 = A[0]
        B = 0
        sh = 0
        if na >= 8:                                 # B: the largest power of two <= na / 2 (T in tmp, na >= B + 1)
            B = 4
            while 2 * B <= na // 2:
                B *= 2
            while ((amax - a0) >> sh) >= B:
                sh += 1
            i = 0
            for bk in range(B + 1):
                while i < na and ((A[i] - a0) >> sh) < bk:
                    i += 1
                tmp[bk] = i
        for k in range(m + nc):
            v = en[k] if k < m else ct[k - m]
            if v > amax:
                continue
            if B > 0:
                if v <= a0:
                    lo = 0
                else:
                    lo = tmp[(v - a0) >> sh]
                    while A[lo] < v:
                        lo += 1
            else:
                lo = 0
                hi = na
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if A[mid] < v:
                        lo = mid + 1
                    else:
                        hi = mid
            if k < m:
                E[lo] += 1
            else:
                C[lo] += 1
        ie = 0
        ic = 0
        ia = 0
        while ia < na:
            t = A[ia]
            while ia < na and A[ia] == t:
                ie += E[ia]
                ic += C[ia]
                ia += 1
            if (nc - ic) + ia + nj - ie > Q:
                return False
    for q in range(npd):
        pf[q] = pfn[q]
    return True


@accel.jit
def _depth_bound(ad, en, join, ct, na, D):
    """An upper bound on ``_plane_die``'s depth count (round 14): the largest, over the admission times t of a die's
    planes-alone schedule, of the carried releases after t plus the commands holding a slot at t (joined or admitted
    by t, not ended by t), from a histogram instead of the sorted admissions: the span of the admission times
    [a0, amax] in B buckets of 2^sh ns (B the largest power of two <= na); a command whose slot is held
    from a to e (a joined one from a0) counts in every bucket from a's to e's (clipped to the last), a carried
    release c > a0 in every bucket up to c's, and a command held at t or a release after t counts in t's bucket
    (a <= t < e gives bucket(a) <= bucket(t) <= bucket(e)). A difference array and one prefix pass: no sort, no
    search (at 10 % load it is at most Q on nearly every die, and the exact check is skipped there). ``D``:
    scratch of at least B + 1 (na + 1 is enough); ``na``: the commands not joined (at least 1); ``ad`` and ``en`` may
    be longer than the die (``join``'s length)."""
    m = join.shape[0]
    a0 = _BIG
    amax = -_BIG
    for k in range(m):
        if join[k] < 0:
            a = ad[k]
            if a < a0:
                a0 = a
            if a > amax:
                amax = a
    B = 1
    while 2 * B <= na:
        B *= 2
    sh = 0
    while ((amax - a0) >> sh) >= B:
        sh += 1
    for b in range(B + 1):
        D[b] = 0
    top = B - 1
    for k in range(m):
        e = en[k]
        if join[k] >= 0:
            if e <= a0:                          # ended before any admission: never counted
                continue
            D[0] += 1
        else:
            D[(ad[k] - a0) >> sh] += 1
        eb = (e - a0) >> sh
        D[(eb if eb < top else top) + 1] -= 1
    for c in range(ct.shape[0]):
        v = ct[c]
        if v > a0:
            D[0] += 1
            cb = (v - a0) >> sh
            D[(cb if cb < top else top) + 1] -= 1
    run = 0
    most = 0
    for b in range(B):
        run += D[b]
        if run > most:
            most = run
    return most


def _heads_die(kind, ready, plane, service, gate, gate_x, floor, has_floor, t_cmd, Q, pf, ct, st, en, ad, rd, wk, hq):
    """``_heads_rest`` on the whole die (no command left out, no floor beyond ``floor``). Since round 14 the engine
    calls ``_heads_rest`` itself; this form is the tests' (a plain function over the twin: no compiled code of its
    own, so the warm-up has nothing to compile for it)."""
    return _heads_rest(kind, ready, plane, service, gate, gate_x, floor, has_floor, -_BIG, kind, kind, False, t_cmd, Q,
                       pf, ct, st, en, ad, rd, wk, hq)


@accel.jit
def _heads_rest(kind, ready, plane, service, gate, gate_x, floor, has_floor, X, skip, sel, use_skip, t_cmd, Q, pf, ct, st,
                en, ad, rd, wk, hq):
    """``_heads_pass`` (the numpy form, ``simulate_auto``'s path 2) for one die without reads or joins, loop form
    (compiled by numba; round 13: the programs behind a burst's fast reads, whose queue depth binds): the die
    admits next the command with the smallest (ready, seq) among its planes' first unscheduled commands (a
    gated one's ready time max(ready, its gate's end) + gate_x, its gate earlier on its plane), at
    A = max(arrival, the Q-th largest release so far, carried ones included); its plane FCFS in that order.
    Kept only where that order is the event scheduler's (``_heads_pass``'s checks: die-queue keys (ready, seq)
    increasing and arrivals non-decreasing in it, plane arrivals non-decreasing on each plane) and, beyond
    ``_heads_pass``, every service and t_cmd positive. Returns True with start, end, admission, ready in ``st``,
    ``en``, ``ad``, ``rd`` and ``pf`` moved; False with ``pf`` unchanged. ``wk``: scratch (int64, at least
    5 npd + 3 m + 1); ``hq``: room for Q where Q < m + len(ct). Round 14: with ``use_skip``, the commands k with
    ``skip[k] != 0`` (a burst die's fast reads, already served) are left out and the others, ``sel`` (ascending),
    floored at ``X`` as well (``_simulate_split``'s rest in place of its copy: no compaction, one scatter of the die);
    the skipped ones' ``st``, ``en``, ``ad``, ``rd`` are left as they were. ``X = -_BIG``, ``use_skip`` False:
    ``_heads_die``."""
    m = kind.shape[0]
    npd = pf.shape[0]
    nc = ct.shape[0]
    if t_cmd <= 0:
        return False
    mr = sel.shape[0] if use_skip else m
    for z in range(mr):
        k = sel[z] if use_skip else z
        if kind[k] == 0 or service[k] <= 0:
            return False
        g = gate[k]
        if g >= 0 and (g >= k or plane[g] != plane[k] or (use_skip and skip[g] != 0)):
            return False
    pofs, o = _cut(wk, 0, npd + 1)
    head, o = _cut(wk, o, npd)                   # each plane's next command (in lst)
    pfn, o = _cut(wk, o, npd)
    lst, o = _cut(wk, o, m)
    tarr, o = _cut(wk, o, m)
    seq, o = _cut(wk, o, m)                      # the order used
    ht, o = _cut(wk, o, npd)                     # the planes' next commands: a heap by (ready, seq)
    hi, o = _cut(wk, o, npd)
    _by_plane(plane, pofs, head, lst, sel, use_skip)
    for q in range(npd):
        head[q] = pofs[q]
        pfn[q] = pf[q]
    bind = nc + mr > Q
    hs = 0
    if bind:
        for c in range(nc):
            hs = _qheap_add(hq, hs, Q, ct[c])
    for z in range(mr):                           # (a gated command's ready time is set once it heads its plane:
        k = sel[z] if use_skip else z             # its gate, earlier on the plane, has ended then)
        rd[k] = ready[k]
    hs2 = 0
    for q in range(npd):
        if pofs[q + 1] > pofs[q]:
            c = lst[pofs[q]]
            hs2 = _hpush(ht, hi, hs2, rd[c], c)
    for step in range(mr):
        c = hi[0]                                 # (popped below: replaced by its plane's next command, wt/eng19)
        bq = plane[c]
        head[bq] += 1
        ta = rd[c]
        if has_floor and floor[c] > ta:
            ta = floor[c]
        if X > ta:
            ta = X
        a = ta
        if bind and hs == Q and hq[0] > a:
            a = hq[0]
        e0 = a + t_cmd
        p = plane[c]
        s = pfn[p] if pfn[p] > e0 else e0
        e = s + service[c]
        pfn[p] = e
        st[c] = s
        en[c] = e
        ad[c] = a
        tarr[c] = ta
        seq[step] = c
        if bind:
            hs = _qheap_add(hq, hs, Q, e)
        if head[bq] < pofs[bq + 1]:
            x = lst[head[bq]]
            g = gate[x]
            if g >= 0:
                r = ready[x]
                if en[g] > r:
                    r = en[g]
                rd[x] = r + gate_x[x]
            _hreplace(ht, hi, hs2, rd[x], x, True)
        else:
            hs2 = _hpop(ht, hi, hs2)
    # the order used is the event scheduler's: keys (ready, seq) increasing and arrivals non-decreasing in it
    # (``_heads_pass``'s third check, plane arrivals non-decreasing on each plane, follows here: without joins the
    # admissions max(arrival, the Q-th largest release) are then non-decreasing in the order, and a plane's
    # commands go in that order)
    for step in range(1, mr):
        c = seq[step]
        b = seq[step - 1]
        if rd[c] < rd[b] or (rd[c] == rd[b] and c < b) or tarr[c] < tarr[b]:
            return False
    for q in range(npd):
        pf[q] = pfn[q]
    return True


@accel.jit
def _sort_runs(a, n, tmp):
    """``a[:n]`` sorted in place by a natural merge sort of its ascending runs (``tmp``: room for n)."""
    if n < 2:
        return
    while True:
        i = 0
        runs = 0
        while i < n:
            j = i + 1
            while j < n and a[j - 1] <= a[j]:
                j += 1
            if j >= n:
                if runs == 0:
                    return
                for k in range(i, n):
                    tmp[k] = a[k]
                runs += 1
                break
            h = j + 1
            while h < n and a[h - 1] <= a[h]:
                h += 1
            x = i
            y = j
            for k in range(i, h):
                if y >= h or (x < j and a[x] <= a[y]):
                    tmp[k] = a[x]
                    x += 1
                else:
                    tmp[k] = a[y]
                    y += 1
            runs += 1
            i = h
        for k in range(n):
            a[k] = tmp[k]
        if runs == 1:
            return


@accel.jit
def _hpush(ht, hi, hs, t, i):
    """Push (t, i) on the binary min-heap ``ht[:hs]``, ``hi[:hs]`` ordered by (t, i); returns the new size."""
    j = hs
    while j > 0:
        q = (j - 1) >> 1
        if ht[q] < t or (ht[q] == t and hi[q] < i):
            break
        ht[j] = ht[q]
        hi[j] = hi[q]
        j = q
    ht[j] = t
    hi[j] = i
    return hs + 1


@accel.jit
def _hpop(ht, hi, hs):
    """Remove the top of the heap ``_hpush`` keeps; returns the new size."""
    hs -= 1
    _hreplace(ht, hi, hs, ht[hs], hi[hs], False)     # (the last element moved down from the top)
    return hs


@accel.jit
def _hreplace(ht, hi, hs, t, i, flat):
    """``_hpop`` then ``_hpush(t, i)`` on the heap ``_hpush`` keeps, in one pass down from the top (the size ``hs``
    unchanged): the same elements, so the same tops in turn (the keys (t, i) are unique where the indices are, as the
    heads pass's are). ``_hpop`` is this with the heap's last element and one less. ``flat``: the smaller child chosen
    by arithmetic, not a branch (wt/eng19: faster where the children's order is random, as in the heads pass's plane
    heap and ``_simulate_loop``'s event heap; slower in ``_plane_die``'s small heaps, measured: ``_hpop`` keeps the
    branch)."""
    j = 0
    while True:
        c = 2 * j + 1
        if c >= hs:
            break
        if c + 1 < hs:
            if flat:                              # (the smaller child without a branch on the data)
                c += np.int64((ht[c + 1] < ht[c]) | ((ht[c + 1] == ht[c]) & (hi[c + 1] < hi[c])))
            elif ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hi[c + 1] < hi[c]):
                c += 1
        if ht[c] > t or (ht[c] == t and hi[c] > i):
            break
        ht[j] = ht[c]
        hi[j] = hi[c]
        j = c
    ht[j] = t
    hi[j] = i


@accel.jit
def _qheap_add(hp, hs, Q, v):
    """Keep the Q largest values in the min-heap ``hp[:hs]``; returns the new size."""
    if hs < Q:
        j = hs
        hs += 1
        while j > 0:
            q = (j - 1) >> 1
            if hp[q] <= v:
                break
            hp[j] = hp[q]
            j = q
        hp[j] = v
        return hs
    if v <= hp[0]:
        return hs
    j = 0
    while True:
        c = 2 * j + 1
        if c >= hs:
            break
        if c + 1 < hs:
            c += np.int64(hp[c + 1] < hp[c])     # (the smaller child without a branch on the data, wt/eng19)
        if hp[c] >= v:
            break
        hp[j] = hp[c]
        j = c
    hp[j] = v
    return hs


@accel.jit
def _merge_runs(t, x, n):
    """``t[:n]`` (with ``x[:n]`` beside it) sorted in place by a natural merge sort of its ascending runs,
    stable. ``_simulate_loop``'s arrival stream: a burst's is one run (only the check runs), a batch at low
    load two or three (the reads', the programs')."""
    nr = 1
    for k in range(1, n):
        if t[k] < t[k - 1]:
            nr += 1
    if nr == 1:
        return
    rb = np.empty(nr + 1, np.int64)                # run starts
    r = 0
    rb[0] = 0
    for k in range(1, n):
        if t[k] < t[k - 1]:
            r += 1
            rb[r] = k
    rb[nr] = n
    mt = np.empty(n, np.int64)
    mx = np.empty(n, np.int64)
    while nr > 1:                                  # merge runs pairwise into mt/mx, copied back
        w = 0
        for q in range(0, nr, 2):
            lo = rb[q]
            hi = rb[q + 2] if q + 1 < nr else rb[q + 1]
            mid = rb[q + 1] if q + 1 < nr else hi
            i = lo
            j = mid
            for k in range(lo, hi):
                if j >= hi or (i < mid and t[i] <= t[j]):
                    mt[k] = t[i]
                    mx[k] = x[i]
                    i += 1
                else:
                    mt[k] = t[j]
                    mx[k] = x[j]
                    j += 1
            rb[w] = lo
            w += 1
        rb[w] = n
        nr = w
        for k in range(n):
            t[k] = mt[k]
            x[k] = mx[k]


@accel.jit
def _cut(W, o, k):
    """``W[o:o + k]`` and ``o + k``: ``_simulate_loop``'s scratch arrays, cut one after another from its block."""
    return W[o:o + k], o + k


@accel.jit
def _simulate_loop(kind, ready, plane, die, service, t_cmd, Q, pf, cd, ct, gate, gate_x, floor, has_floor, join):
    """``simulate``'s events and decisions, loop form (compiled by numba). One event heap ordered by
    (t, event, id) as ``simulate``'s, the first arrivals of ungated commands as a stream sorted by time
    beside it and the events pushed while deciding in a few time-ordered lanes where they fit (every event
    of an instant is applied before that instant's decisions: only times order them); per die one queue ordered by (class, ready, seq) (class 0: reads, so
    reads first, then ``simulate``'s FIFO by (ready, seq) in each class) and per plane one ordered by
    (class, plane arrival, seq): binary heaps of command ids in slices of shared arrays (a die's or
    plane's slice has room for all its commands). ``pf`` (plane free times) is updated in place. Returns
    (start, end, admission, ready, whether every gated command ran)."""
    n = kind.shape[0]
    nc = cd.shape[0]
    nd = 0
    for i in range(n):
        if die[i] + 1 > nd:
            nd = die[i] + 1
    for k in range(nc):
        if cd[k] + 1 > nd:
            nd = cd[k] + 1
    npl = pf.shape[0]
    start = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    adm = np.zeros(n, np.int64)
    rdy = ready.copy()
    # (round 12: the scratch arrays below are slices of two blocks, one int64 (its first part zeroed) and one
    # bool: ~30 allocations a call were ~1 us, and _simulate_split calls this once per die of each batch)
    NL = 4
    lcap = 2 * n + npl + 1
    cap = nc + 3 * n + npl + 1
    nz = n + (nd + 1) + (npl + 1) + nd + npl + nd + (n + 1) + 2 * NL
    W = np.empty(nz + n + 2 * cap + 2 * n + n + (n + 1) + 2 * n + nd + npl + 2 * (2 * n + 2 * npl + 1) + 2 * n
                 + 2 * NL * lcap + 2 * NL, np.int64)
    W[:nz] = 0
    o = 0
    tenq, o = _cut(W, o, n)
    dofs, o = _cut(W, o, nd + 1)
    pofs, o = _cut(W, o, npl + 1)
    dqs, o = _cut(W, o, nd)
    pqs, o = _cut(W, o, npl)
    outstanding, o = _cut(W, o, nd)
    gofs, o = _cut(W, o, n + 1)
    lh, o = _cut(W, o, NL)
    ltl, o = _cut(W, o, NL)
    cls, o = _cut(W, o, n)
    ht, o = _cut(W, o, cap)
    hk, o = _cut(W, o, cap)
    dq, o = _cut(W, o, n)
    pq, o = _cut(W, o, n)
    gfill, o = _cut(W, o, n)
    glist, o = _cut(W, o, n + 1)
    sat, o = _cut(W, o, n)
    sax, o = _cut(W, o, n)
    dlist, o = _cut(W, o, nd)
    plist, o = _cut(W, o, npl)
    pt, o = _cut(W, o, 2 * n + 2 * npl + 1)
    pk, o = _cut(W, o, 2 * n + 2 * npl + 1)
    fq_t, o = _cut(W, o, n)
    fq_x, o = _cut(W, o, n)
    la_t, o = _cut(W, o, NL * lcap)
    la_k, o = _cut(W, o, NL * lcap)
    llast, o = _cut(W, o, NL)
    llast[:] = -_BIG
    lht, o = _cut(W, o, NL)                       # each lane's next event time (_BIG: empty; wt/eng19: one load a lane
    lht[:] = _BIG                                 # where the lanes are looked at, not the head's index and time)
    Bb = np.zeros(2 * npl + nd, np.bool_)
    busy = Bb[:npl]
    pmark = Bb[npl:2 * npl]
    dmark = Bb[2 * npl:]
    for i in range(n):
        cls[i] = 0 if kind[i] == 0 else 1
    # event heap: (time, event * 2^32 + id) pairs; events: 0 release of a carried slot, 1 arrival at the
    # die queue, 2 joins its plane, 3 a plane's carried busy time over, 4 end (as simulate's _EV_*)
    hs = 0
    SH = np.int64(1) << 32
    # queue slices: die d at dofs[d], plane p at pofs[p]
    for i in range(n):
        dofs[die[i] + 1] += 1
        pofs[plane[i] + 1] += 1
    for d in range(nd):
        dofs[d + 1] += dofs[d]
    for p in range(npl):
        pofs[p + 1] += pofs[p]
    # gated commands by their gate (in index order)
    ngated = 0
    for i in range(n):
        if join[i] < 0 and gate[i] >= 0:
            gofs[gate[i] + 1] += 1
            ngated += 1
    for i in range(n):
        gofs[i + 1] += gofs[i]
    gfill[:] = gofs[:n]
    # initial events: carried releases and joins into the heap; arrivals of the commands that are neither
    # gated nor joined into a stream sorted by time (the events of one instant are all applied before any
    # decision, so their order inside the instant is immaterial)
    na = 0
    for k in range(nc + n):
        if k < nc:
            outstanding[cd[k]] += 1
            t = ct[k]
            key = cd[k]                                # release (0)
        else:
            i = k - nc
            if join[i] >= 0:                           # admitted in an earlier batch
                outstanding[die[i]] += 1
                adm[i] = join[i] - t_cmd
                t = join[i]
                key = 2 * SH + i
            elif gate[i] >= 0:                         # waits for its gate's end
                glist[gfill[gate[i]]] = i
                gfill[gate[i]] += 1
                continue
            else:                                      # arrivals: a sorted stream, not the heap
                t = rdy[i]
                if has_floor and floor[i] > t:
                    t = floor[i]
                sat[na] = t
                sax[na] = i
                na += 1
                continue
        hs = _hpush(ht, hk, hs, t, key)
    # the stream in time order (round 9: its ascending runs merged, no argsort)
    _merge_runs(sat, sax, na)
    released = 0
    nds = 0
    nps = 0
    # pushes made while deciding at time t (plane arrivals, ends, gated arrivals, wake-ups), applied
    # after the decisions (none is at t unless t_cmd or a service time is 0: then as simulate, again at t)
    ap = 0
    # plane arrivals of the commands admitted here (admission time + t_cmd): in admission order, which is
    # time order (admissions happen at the current time), so a queue beside the heap, not the heap (the
    # events of an instant are all applied before its decisions: their order inside it is immaterial)
    fh = 0
    ft = 0
    # the events pushed while deciding (ends, gated arrivals, wake-ups) go to one of NL lanes, queues whose
    # times never decrease (the lane whose last time is the latest not after the event's), the heap only
    # where no lane takes one: the events of an instant are all applied before its decisions, so their
    # times alone order them (round 8; at most 2n + npl such pushes in a run: one end and one gated
    # arrival per command, one wake-up per plane's carried busy time)
    lcnt = 0
    while hs > 0 or ap < na or fh < ft or lcnt > 0:
        t = ht[0] if hs > 0 else _BIG
        if ap < na and sat[ap] < t:
            t = sat[ap]
        if fh < ft and fq_t[fh] < t:
            t = fq_t[fh]
        if lcnt > 0:
            for li in range(NL):
                if lht[li] < t:
                    t = lht[li]
        while True:
            while True:
                if ap < na and sat[ap] == t:           # the next arrival of the stream
                    key = SH + sax[ap]
                    ap += 1
                elif fh < ft and fq_t[fh] == t:        # the next plane arrival of the queue
                    key = 2 * SH + fq_x[fh]
                    fh += 1
                else:
                    la = -1                            # a lane whose next event is at t
                    if lcnt > 0:
                        for li in range(NL):
                            if lht[li] == t:
                                la = li
                                break
                    if la >= 0:
                        key = la_k[la * lcap + lh[la]]
                        lh[la] += 1
                        lht[la] = la_t[la * lcap + lh[la]] if lh[la] < ltl[la] else _BIG
                        lcnt -= 1
                    elif hs > 0 and ht[0] == t:
                        key = hk[0]
                        hs -= 1                        # (_hpop with the child chosen by arithmetic, wt/eng19)
                        _hreplace(ht, hk, hs, ht[hs], hk[hs], True)
                    else:
                        break
                ev = key >> 32
                x = key & (SH - 1)
                if ev == 0:                            # release of a carried slot
                    outstanding[x] -= 1
                    if not dmark[x]:
                        dmark[x] = True
                        dlist[nds] = x
                        nds += 1
                elif ev == 1:                          # arrival: die queue push, key (class, ready, seq)
                    d = die[x]
                    b = dofs[d]
                    j = dqs[d]
                    dqs[d] = j + 1
                    while j > 0:
                        q = (j - 1) >> 1
                        y = dq[b + q]
                        if cls[y] < cls[x] or (cls[y] == cls[x] and (rdy[y] < rdy[x] or (rdy[y] == rdy[x] and y < x))):
                            break
                        dq[b + j] = y
                        j = q
                    dq[b + j] = x
                    if not dmark[d]:
                        dmark[d] = True
                        dlist[nds] = d
                        nds += 1
                elif ev == 2:                          # joins its plane: key (class, plane arrival, seq)
                    p = plane[x]
                    tenq[x] = t
                    b = pofs[p]
                    j = pqs[p]
                    pqs[p] = j + 1
                    while j > 0:
                        q = (j - 1) >> 1
                        y = pq[b + q]
                        if cls[y] < cls[x] or (cls[y] == cls[x] and (tenq[y] < t or (tenq[y] == t and y < x))):
                            break
                        pq[b + j] = y
                        j = q
                    pq[b + j] = x
                    if not pmark[p]:
                        pmark[p] = True
                        plist[nps] = p
                        nps += 1
                elif ev == 4:                          # end: plane free, slot released
                    d = die[x]
                    outstanding[d] -= 1
                    if not dmark[d]:
                        dmark[d] = True
                        dlist[nds] = d
                        nds += 1
                    p = plane[x]
                    busy[p] = False
                    if not pmark[p]:
                        pmark[p] = True
                        plist[nps] = p
                        nps += 1
                else:                                  # a plane's carried busy time over
                    busy[x] = False
                    if not pmark[x]:
                        pmark[x] = True
                        plist[nps] = x
                        nps += 1
            npush = 0
            nadm = 0
            for k in range(nds):                       # admissions: reads first, (ready, seq)
                d = dlist[k]
                dmark[d] = False
                o = outstanding[d]
                b = dofs[d]
                while o < Q and dqs[d] > 0:
                    x = dq[b]
                    m = dqs[d] - 1
                    dqs[d] = m
                    z = dq[b + m]
                    j = 0
                    while True:
                        c = 2 * j + 1
                        if c >= m:
                            break
                        u = dq[b + c]
                        if c + 1 < m:
                            w = dq[b + c + 1]
                            if cls[w] < cls[u] or (cls[w] == cls[u] and (rdy[w] < rdy[u] or (rdy[w] == rdy[u] and w < u))):
                                c += 1
                                u = w
                        if cls[z] < cls[u] or (cls[z] == cls[u] and (rdy[z] < rdy[u] or (rdy[z] == rdy[u] and z < u))):
                            break
                        dq[b + j] = u
                        j = c
                    dq[b + j] = z
                    o += 1
                    adm[x] = t
                    fq_t[ft] = t + t_cmd
                    fq_x[ft] = x
                    ft += 1
                    nadm += 1
                outstanding[d] = o
            nds = 0
            if t_cmd == 0 and nadm > 0:                # plane arrivals at t: applied before the grants
                continue                               # the plane arrivals at t first
            for k in range(nps):                       # plane grants
                p = plist[k]
                pmark[p] = False
                if pqs[p] == 0 or busy[p]:
                    continue
                if pf[p] > t:                          # carried busy time: wake up then
                    pt[npush] = pf[p]
                    pk[npush] = 3 * SH + p
                    npush += 1
                    busy[p] = True
                    continue
                b = pofs[p]
                x = pq[b]
                m = pqs[p] - 1
                pqs[p] = m
                z = pq[b + m]
                j = 0
                while True:
                    c = 2 * j + 1
                    if c >= m:
                        break
                    u = pq[b + c]
                    if c + 1 < m:
                        w = pq[b + c + 1]
                        if cls[w] < cls[u] or (cls[w] == cls[u] and (tenq[w] < tenq[u] or (tenq[w] == tenq[u] and w < u))):
                            c += 1
                            u = w
                    if cls[z] < cls[u] or (cls[z] == cls[u] and (tenq[z] < tenq[u] or (tenq[z] == tenq[u] and z < u))):
                        break
                    pq[b + j] = u
                    j = c
                pq[b + j] = z
                busy[p] = True
                start[x] = t
                e = t + service[x]
                end[x] = e
                pf[p] = e
                pt[npush] = e
                pk[npush] = 4 * SH + x
                npush += 1
                for jj in range(gofs[x], gofs[x + 1]):  # gated commands: ready once x has ended
                    y = glist[jj]
                    r = (rdy[y] if rdy[y] > e else e) + gate_x[y]
                    rdy[y] = r
                    if has_floor and floor[y] > r:
                        r = floor[y]
                    pt[npush] = r
                    pk[npush] = SH + y
                    npush += 1
                    released += 1
            nps = 0
            again = False
            for k in range(npush):
                tt = pt[k]
                key = pk[k]
                if tt == t:
                    again = True
                bl = -1                                # the lane whose last time is the latest <= tt
                for li in range(NL):
                    if llast[li] <= tt and (bl < 0 or llast[li] > llast[bl]):
                        bl = li
                if bl >= 0:
                    la_t[bl * lcap + ltl[bl]] = tt
                    la_k[bl * lcap + ltl[bl]] = key
                    if lh[bl] == ltl[bl]:              # (the lane was empty: this is its next event)
                        lht[bl] = tt
                    ltl[bl] += 1
                    llast[bl] = tt
                    lcnt += 1
                    continue
                hs = _hpush(ht, hk, hs, tt, key)
            if again:
                continue
            break
    return start, end, adm, rdy, released == ngated
