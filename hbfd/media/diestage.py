"""Exact vectorized die/plane stage for one command class (FIFO die admission, FCFS planes).

Commands of one class (all reads, or all programs/copybacks/erases) in (ready, seq) order. A die
admits at most Q = queue_depth commands that have not finished their array operation; command i
of a die is admitted at A_i, joins its plane at A_i + t_cmd, and the plane serves FCFS:

    E_i = max(A_i + t_cmd, E_prev(plane)) + s_i          (E_i: end of the array op = slot release)
    A_i = max(r_i, M_i),  M_i = the Q-th largest release among the die's earlier commands

(the slot form ``A_i = max(r_i, A_{i-1}, earliest slot release)`` says the same: the Q slots always
hold the Q largest releases so far, and A_{i-1} <= A_i because r and M are non-decreasing).

**The sorted-release form.** Every release exceeds the M of its own command (E_j >= A_j + s_j >
M_j) and M is non-decreasing, so every later release exceeds M_i: the i - Q + 1 smallest releases
of the prefix are the i - Q + 1 smallest of *all* the die's releases. Hence

    M_i = sorted(releases of the die, carried slots included)[i - Q]

with no reference to the prefix. Releases from commands not admitted yet are at least
F = max(r_c, M_c) + t_cmd + s_min (c: the first command not admitted yet), so every command j >= c
whose (j - Q)-th smallest known release is < F (or <= r_j: then A_j = r_j whatever comes) is
decided now. ``fifo_exact`` admits all such commands of all dies at once, runs the plane Lindley
recursion over them, merges their releases into the sorted per-die release array and repeats:
a step admits up to Q commands per die, and when the queue depth binds, every command whose slot
frees within one minimum service time of the current one. Dies where the unconstrained schedule
(A = r) already satisfies the rule (checked with the same sorted form) skip all this.

Carry between batches: per die, the Q largest releases later than the latest arrival (smaller
ones can no longer delay anything: later commands arrive after them).
"""
from __future__ import annotations

import numpy as np

from hbfd import accel

from .kernels import _carry_keep, _decided_put, _fifo_carry, _fifo_loop
from .lindley import packed_order, segment_ends, segment_starts, segmented_fcfs, sorted_fcfs

_BIG = 1 << 62
_KEEP_TWIN_MIN = 256     # DieCarry.put's cut by its twin (kernels._carry_keep) from this many releases on


def small_int(x: np.ndarray, n: int) -> np.ndarray:
    """Ids as int16 when they fit, so a stable argsort uses radix sort (O(n))."""
    return x.astype(np.int16) if n < (1 << 15) else x


class DieCarry:
    """Outstanding slot releases per die carried between batches (at most Q per die)."""

    def __init__(self, dies: int, queue_depth: int) -> None:
        self.dies = dies
        self.q = queue_depth
        self.die = np.zeros(0, np.int64)
        self.t = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.die)

    def take(self, dies_mask: np.ndarray | None):
        """Remove and return (die, t) of the dies in ``dies_mask`` (bool per die; None: all)."""
        if dies_mask is None:
            d, t = self.die, self.t
            self.die = np.zeros(0, np.int64)
            self.t = np.zeros(0, np.int64)
            return d, t
        if not len(self.die):
            return self.die, self.t
        m = dies_mask[self.die]
        d, t = self.die[m], self.t[m]
        if m.any():
            k = ~m
            self.die, self.t = self.die[k], self.t[k]
        return d, t

    def put(self, die: np.ndarray, t: np.ndarray, horizon: int) -> None:
        """Add releases (of dies whose carried releases were taken or are included), keep the Q
        largest per die that are later than ``horizon``."""
        k = t > horizon
        if not k.all():
            die, t = die[k], t[k]
        if not len(die):
            return
        d = np.concatenate([self.die, die]) if len(self.die) else die
        tt = np.concatenate([self.t, t]) if len(self.t) else t
        if len(d) > self.q:
            cnt = np.bincount(d, minlength=self.dies)
            if int(cnt.max()) > self.q and len(d) >= _KEEP_TWIN_MIN and d.dtype == np.int64 \
                    and tt.dtype == np.int64 and accel.enabled():
                d, tt = _carry_keep(np.ascontiguousarray(d), np.ascontiguousarray(tt), self.dies, self.q)
            elif int(cnt.max()) > self.q:
                d, tt = self._cut(d, tt)
        self.die, self.t = d, tt

    def _cut(self, d: np.ndarray, tt: np.ndarray):
        """The ``q`` largest releases of each die (numpy form), in (die, time) order."""
        o = packed_order(d, self.dies, tt)       # = np.lexsort((tt, d))
        if o is None:
            o = np.lexsort((tt, d))
        d, tt = d[o], tt[o]
        st = segment_starts(d)
        lens = np.diff(np.append(st, len(d)))
        rank_from_end = np.repeat(st + lens, lens) - np.arange(len(d))
        keep = rank_from_end <= self.q
        return d[keep], tt[keep]

    def put_decided(self, plane_free: np.ndarray, plane: np.ndarray, die: np.ndarray, t: np.ndarray,
                    m: np.ndarray, horizon: int) -> bool:
        """``np.maximum.at(plane_free, plane[m], t[m])`` and ``put(die[m], t[m], horizon)`` in one compiled pass
        (``kernels._decided_put``) where the twins run and the arrays are int64 (``plane_free`` in place); False
        (nothing done) otherwise."""
        if not (accel.enabled() and plane_free.dtype == np.int64 and plane_free.flags.c_contiguous
                and all(a.dtype == np.int64 for a in (plane, die, t, self.die, self.t)) and m.dtype == np.bool_):
            return False
        st, d, tt = _decided_put(plane_free, plane, die, t, m, self.die, self.t, horizon, self.dies, self.q,
                                 _KEEP_TWIN_MIN)
        if st == 2:                                  # (the cut below the twin's size: the numpy form)
            d, tt = self._cut(d, tt)
        if st:
            self.die, self.t = d, tt
        return True

    def prune(self, horizon: int) -> None:
        if len(self.t):
            k = self.t > horizon
            if not k.all():
                self.die, self.t = self.die[k], self.t[k]

    def as_dict(self, dies_mask: np.ndarray) -> dict[int, list[int]]:
        d, t = self.take(dies_mask)
        out: dict[int, list[int]] = {}
        for a, b in zip(d.tolist(), t.tolist()):
            out.setdefault(a, []).append(b)
        return out


def plane_lindley(start_ready, service, plane, nplanes, plane_free, order=None):
    """FCFS per plane (commands in FIFO order): ends; updates ``plane_free``. ``order``: the stable
    argsort of ``plane`` when the caller has it."""
    n = len(start_ready)
    if n == 1:
        p = int(plane[0])
        s = int(service) if np.ndim(service) == 0 else int(service[0])
        e = max(int(start_ready[0]), int(plane_free[p])) + s
        plane_free[p] = e
        return np.array([e], np.int64)
    o = np.argsort(small_int(plane, nplanes), kind="stable") if order is None else order
    p1 = plane[o]
    s1 = int(service) if np.ndim(service) == 0 else service[o]
    e1 = sorted_fcfs(start_ready[o], s1, p1, nplanes, plane_free)
    if e1 is not None:
        out = np.empty(n, np.int64)
        out[o] = e1
        return out
    e1 = segmented_fcfs(start_ready[o], s1, p1, plane_free)
    st = segment_starts(p1)
    en = segment_ends(st, n)
    plane_free[p1[en]] = e1[en]
    out = np.empty(n, np.int64)
    out[o] = e1
    return out


def fifo_exact(r, die, plane, service, *, t_cmd: int, queue_depth: int, nplanes: int, ndies: int,
               plane_free: np.ndarray, carry: DieCarry, horizon: int, stats: dict | None = None,
               plane_order: np.ndarray | None = None):
    """Array-op ends of one class of commands (in (ready, seq) order) under the die queue depth.
    Updates ``plane_free`` and ``carry``. ``plane_order``: the stable argsort of ``plane``, if known."""
    n = len(r)
    Q = queue_depth
    if n == 0:
        return np.zeros(0, np.int64)
    if np.ndim(service) == 0 and accel.enabled():
        return _fifo_compiled(r, die, plane, int(service), t_cmd=t_cmd, Q=Q, ndies=ndies, plane_free=plane_free,
                              carry=carry, horizon=horizon, stats=stats)
    scalar = np.ndim(service) == 0
    if n + len(carry) > Q and len(carry) >= Q:
        # dies whose Q slots are all held past their first command's arrival: the depth binds at
        # once (saturation), go straight to the exact form
        c0 = np.bincount(carry.die, minlength=ndies)
        full = c0 >= Q
        if full.any():
            first = np.full(ndies, _BIG, np.int64)
            first[die[::-1]] = r[::-1]                   # first arrival per die
            sure = full.copy()                           # ... and no carried release by then
            sure[carry.die[carry.t <= first[carry.die]]] = False
            if sure.any():
                sm = sure[die]
                if stats is not None:
                    stats["qd_bound_batches"] += 1
                    stats["qd_bound_dies"] += int(sure.sum())
                cd, ct = carry.take(sure)
                if sm.all():
                    return _window(r, die, plane, service, cd, ct, t_cmd=t_cmd, Q=Q, nplanes=nplanes,
                                   ndies=ndies, plane_free=plane_free, carry=carry, horizon=horizon)
                E = np.empty(n, np.int64)
                si = np.flatnonzero(sm)
                E[si] = _window(r[si], die[si], plane[si], service if scalar else service[si], cd, ct,
                                t_cmd=t_cmd, Q=Q, nplanes=nplanes, ndies=ndies, plane_free=plane_free,
                                carry=carry, horizon=horizon)
                rest = np.flatnonzero(~sm)
                if len(rest):
                    E[rest] = fifo_exact(r[rest], die[rest], plane[rest], service if scalar else service[rest],
                                         t_cmd=t_cmd, queue_depth=Q, nplanes=nplanes, ndies=ndies,
                                         plane_free=plane_free, carry=carry, horizon=horizon, stats=stats)
                return E
    # 1. unconstrained (A = r), plane state on a copy of the planes it touches
    pf0 = plane_free.copy() if (n + len(carry) > Q) else None
    E = plane_lindley(r + t_cmd, service, plane, nplanes, plane_free, plane_order)
    if pf0 is None:                           # no die can hold Q commands: the queue depth never binds
        carry.put(die, E, horizon)
        return E
    bad = _violations(r, die, E, Q, ndies, carry)
    if bad is None:
        carry.put(die, E, horizon)
        return E
    # 2. exact form on the dies where it binds; restore their planes first
    badm = np.zeros(ndies, bool)
    badm[bad] = True
    sel = badm[die]
    ps = plane[sel]
    plane_free[ps] = pf0[ps]
    good = ~sel
    if good.any():
        carry.put(die[good], E[good], horizon)
    if stats is not None:
        stats["qd_bound_batches"] += 1
        stats["qd_bound_dies"] += len(bad)
    cd, ct = carry.take(badm)
    svc = service if scalar else service[sel]
    E[sel] = _window(r[sel], die[sel], plane[sel], svc, cd, ct, t_cmd=t_cmd, Q=Q, nplanes=nplanes,
                     ndies=ndies, plane_free=plane_free, carry=carry, horizon=horizon)
    return E


def _ids(x: np.ndarray, n: int) -> np.ndarray:
    """``np.unique`` of ids in [0, n) (sorted), by a mask."""
    m = np.zeros(n, bool)
    m[x] = True
    return np.flatnonzero(m)


def _violations(r, die, E, Q, ndies, carry: DieCarry):
    """Dies where A = r violates the sorted-release rule r_j >= sorted(releases)[j - Q]."""
    cnt = np.bincount(die, minlength=ndies)
    c0 = np.bincount(carry.die, minlength=ndies) if len(carry) else np.zeros(ndies, np.int64)
    cand = (cnt + c0) > Q
    if not cand.any():
        return None
    n = len(r)
    # cheap bound: a command holds a slot at r_j only if it was ready after r_j - H (H: longest
    # hold of the batch); bins of width H, any window lies in two adjacent bins
    base = int(r[0])
    hold = max(1, int((E - r).max()))
    nbins = (int(r[-1]) - base) // hold + 2
    if nbins * ndies < (1 << 22):
        b2 = np.bincount(die * nbins + (r - base) // hold, minlength=ndies * nbins).reshape(ndies, nbins)
        pair = b2[:, :-1] + b2[:, 1:]
        cand &= (pair.max(axis=1) + c0) >= Q
        if not cand.any():
            return None
    m = cand[die]
    if not m.all():
        idx = np.flatnonzero(m)
        r, die, E = r[idx], die[idx], E[idx]
        n = len(r)
    od = np.argsort(small_int(die, ndies), kind="stable")
    ds = die[od]
    st = segment_starts(ds)
    lens = np.diff(np.append(st, n))
    rank = np.arange(n, dtype=np.int64) - np.repeat(st, lens)
    cd, ct = carry.die, carry.t
    if len(cd):
        cm = cand[cd]
        cd, ct = cd[cm], ct[cm]
    lo = min(int(r[0]), int(ct.min()) if len(ct) else int(r[0])) - 1
    hi = max(int(E.max()), int(ct.max()) if len(ct) else 0)
    span = hi - lo + 1
    allv = np.concatenate([E, ct]) if len(ct) else E
    alld = np.concatenate([die, cd]) if len(ct) else die
    if span * ndies >= (1 << 62):
        return _ids(die, ndies)               # cannot check cheaply: schedule every such die exactly
    keys = np.sort(alld * span + (allv - lo))
    dstart = np.searchsorted(keys, ds[st] * span)             # start of each die's releases
    pads = Q - c0[ds]
    j = rank - pads                                            # index among the die's actual releases
    has = j >= 0
    if not has.any():
        return None
    kv = keys[np.repeat(dstart, lens)[has] + j[has]] - ds[has] * span + lo
    viol = kv > r[od][has]
    if not viol.any():
        return None
    return _ids(ds[has][viol], ndies)


def _window(r, die, plane, service, cd, ct, *, t_cmd, Q, nplanes, ndies, plane_free, carry, horizon):
    """The sorted-release form, stepwise (module doc). ``cd``/``ct``: carried releases of these dies.

    The releases a die still needs (ranks c.., c: its first command not admitted yet) are exactly
    its Q slots: a matrix S (dies x Q, rows sorted, -inf for free slots). Candidate k of a die is
    its command c + k with M = S[d, k]; an admitted command takes the slot it waited for, so a step
    writes the new releases into the consumed slots and re-sorts the rows."""
    n = len(r)
    scalar = np.ndim(service) == 0
    od = np.argsort(small_int(die, ndies), kind="stable")
    R = r[od]
    PL = plane[od]
    SV = None if scalar else service[od]
    ds = die[od]
    st = segment_starts(ds)
    lens = np.diff(np.append(st, n))
    udies = ds[st]
    nd = len(st)
    S = np.full((nd, Q), -_BIG, np.int64)
    if len(cd):
        code = np.full(ndies, -1, np.int64)
        code[udies] = np.arange(nd)
        cc = code[cd]
        T2 = ct.reshape(nd, Q) if len(cc) == nd * Q else None
        if T2 is not None and (cc.reshape(nd, Q) == np.arange(nd)[:, None]).all() \
                and (T2[:, 1:] >= T2[:, :-1]).all():
            S[:] = T2          # Q releases of every die, in die order and sorted (a saturated die's carry)
        else:
            o = packed_order(cc, nd, ct)              # = np.lexsort((ct, cc))
            if o is None:
                o = np.lexsort((ct, cc))
            cc, tt = cc[o], ct[o]
            cst = segment_starts(cc)
            clen = np.diff(np.append(cst, len(cc)))
            # right-aligned: the largest release in column Q - 1
            col = Q - np.repeat(cst + clen, clen) + np.arange(len(cc))
            S[cc, col] = tt
    smin = int(service) if scalar else int(SV.min())
    out = np.empty(n, np.int64)
    kk = np.arange(Q, dtype=np.int64)
    # the active dies (rows of S not final yet) as compact arrays: their rows, S rows (written back to
    # S when a die has admitted all its commands), next command and end positions
    rows = np.arange(nd)
    Sa = S
    nxt = st.copy()
    end = st + lens
    mlim = Q
    while True:
        valid = kk[None, :mlim] < (end - nxt)[:, None]
        pos = nxt[:, None] + kk[None, :mlim]
        np.minimum(pos, n - 1, out=pos)          # (positions past a die's commands are never used)
        Rm = R[pos]
        Km = Sa[:, :mlim]                       # a view: admitted commands' releases go into Sa
        F = np.maximum(Rm[:, 0], Km[:, 0]) + (t_cmd + smin)
        ok = (Km < F[:, None]) | (Km <= Rm)
        ok &= valid
        pre = np.where(ok.all(axis=1), mlim, ok.argmin(axis=1))
        adm = kk[None, :mlim] < pre[:, None]
        pa = pos[adm]
        A = np.maximum(Rm, Km)[adm]
        A += t_cmd
        e = plane_lindley(A, service if scalar else SV[pa], PL[pa], nplanes, plane_free)
        out[pa] = e
        Km[adm] = e
        Sa.sort(axis=1)
        nxt += pre
        # fewer candidates when steps admit few (cheaper steps, same result)
        mlim = int(min(Q, max(8, 2 * int(pre.max()) + 4)))
        keep = nxt < end
        if not keep.all():
            if Sa is not S:
                fin = ~keep
                S[rows[fin]] = Sa[fin]
            if not keep.any():
                break
            rows, Sa, nxt, end = rows[keep], Sa[keep], nxt[keep], end[keep]
    # carry: the slots (the Q largest releases per die) later than the horizon
    dd = np.repeat(udies, Q)
    tv = S.ravel()
    carry.put(dd, tv, horizon)
    res = np.empty(n, np.int64)
    res[od] = out
    return res


def _fifo_compiled(r, die, plane, service: int, *, t_cmd, Q, ndies, plane_free, carry: DieCarry, horizon, stats):
    """``fifo_exact`` by its compiled twins (``kernels._fifo_loop``, ``_fifo_carry``): the same ends, plane
    state, carried releases and ``qd_bound_*`` counts (the saturated dies, then the other dies where the depth
    binds, as the numpy form counts them: each set that is not empty is one more bound batch). Tests:
    tests/media/test_accel_media.py."""
    present = np.zeros(ndies, bool)
    present[die] = True
    cd, ct = carry.take(present)
    pf = plane_free if plane_free.dtype == np.int64 and plane_free.flags.c_contiguous \
        else np.ascontiguousarray(plane_free, dtype=np.int64)
    E, bind, sure, kd, kt = _fifo_loop(np.asarray(r, np.int64), np.asarray(die, np.int64),
                                       np.asarray(plane, np.int64), service, t_cmd, Q, ndies, pf, cd, ct)
    if pf is not plane_free:
        plane_free[:] = pf
    if stats is not None:
        ns = int(sure.sum())
        nb = int((bind & ~sure).sum())
        if ns:
            stats["qd_bound_batches"] += 1
            stats["qd_bound_dies"] += ns
        if nb:
            stats["qd_bound_batches"] += 1
            stats["qd_bound_dies"] += nb
    # carried releases as the numpy form leaves them (kernels._fifo_carry)
    kd, kt = _fifo_carry(cd, ct, kd, kt, bind, sure, horizon, Q, ndies)
    if len(kd):
        carry.die = np.concatenate([carry.die, kd]) if len(carry.die) else kd
        carry.t = np.concatenate([carry.t, kt]) if len(carry.t) else kt
    return E
