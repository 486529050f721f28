"""Planes with read priority, vectorized, for dies whose queue depth does not bind.

Where a die admits every command at its ready time (the caller checks that afterwards with the
sorted-release rule of ``diestage``; dies where it fails go to ``eventsim``), ``eventsim``'s schedule
reduces to one non-preemptive priority server per plane: a command joins its plane at ready + t_cmd;
when the plane is free at t it serves, among the commands that joined by t, reads first, within a
class by (join time, seq). Commands come in (ready, seq) order, so within a class the join time grows
with seq, and the command served next is always the head of the read queue or of the other queue:

    t = max(plane free, earliest join among the two heads)
    serve the read head if it joined by t, else the other head; plane free = t + service

``priority_planes`` runs this for all planes at once, one command per plane per round (rounds = the
most commands on one plane), or one plane at a time in plain Python when a few planes hold most of
the commands (then rounds would cost more than the loop). Both give ``eventsim``'s start/end exactly.
"""
from __future__ import annotations

import numpy as np

from .eventsim import READ


def priority_planes(kind, ready, plane, service, *, t_cmd: int, plane_free: np.ndarray, nplanes: int):
    """Start and end of every command (given in (ready, seq) order); updates ``plane_free``."""
    n = len(kind)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    isr = kind == READ
    cls = (~isr).astype(np.int64)
    # group by plane, then class, seq order inside (stable radix sort on a small key)
    key = plane * 2 + cls
    o = np.argsort(key.astype(np.int32) if 2 * nplanes < (1 << 31) else key, kind="stable")
    ps = plane[o]
    brk = np.empty(n, bool)
    brk[0] = True
    np.not_equal(ps[1:], ps[:-1], out=brk[1:])
    pst = np.flatnonzero(brk)                       # plane segment starts
    pcnt = np.diff(np.append(pst, n))
    up = ps[pst]
    # read part [pst, pst + nr), other part [pst + nr, pst + pcnt)
    nr = np.add.reduceat(isr[o].astype(np.int64), pst)
    q = ready[o] + t_cmd
    sv = service[o]
    start = np.empty(n, np.int64)
    rounds = int(pcnt.max())
    if rounds * 48 > n + 64:                        # few busy planes: one at a time
        _loop(q, sv, pst.tolist(), pcnt.tolist(), nr.tolist(), up.tolist(), plane_free, start)
    else:
        _rounds(q, sv, pst, pcnt, nr, up, plane_free, start)
    st = np.empty(n, np.int64)
    st[o] = start
    en = st + service
    return st, en


def _loop(q, sv, pst, pcnt, nr, up, plane_free, start):
    ql = q.tolist()
    sl = sv.tolist()
    out = [0] * len(ql)
    big = 1 << 62
    for s0, c, r, p in zip(pst, pcnt, nr, up):
        f = int(plane_free[p])
        hr, er = s0, s0 + r                         # read queue [hr, er)
        ho, eo = er, s0 + c                         # other queue [ho, eo)
        while hr < er or ho < eo:
            qr = ql[hr] if hr < er else big
            qo = ql[ho] if ho < eo else big
            m = qr if qr < qo else qo
            t = f if f > m else m
            if qr <= t:
                out[hr] = t
                f = t + sl[hr]
                hr += 1
            else:
                out[ho] = t
                f = t + sl[ho]
                ho += 1
        plane_free[p] = f
    start[:] = out


def _rounds(q, sv, pst, pcnt, nr, up, plane_free, start):
    big = np.int64(1) << 62
    hr = pst.copy()
    er = pst + nr
    ho = er.copy()
    eo = pst + pcnt
    f = plane_free[up].copy()
    act = np.arange(len(pst))
    n = len(q)
    qx = np.append(q, big)                          # index n: an empty queue's head
    while len(act):
        a_hr, a_ho = hr[act], ho[act]
        rin = a_hr < er[act]
        oin = a_ho < eo[act]
        qr = qx[np.where(rin, a_hr, n)]
        qo = qx[np.where(oin, a_ho, n)]
        t = np.maximum(f[act], np.minimum(qr, qo))
        take_r = qr <= t
        pos = np.where(take_r, a_hr, a_ho)
        start[pos] = t
        f[act] = t + sv[pos]
        hr[act] = a_hr + take_r
        ho[act] = a_ho + ~take_r
        keep = (hr[act] < er[act]) | (ho[act] < eo[act])
        if not keep.all():
            act = act[keep]
    plane_free[up] = f
