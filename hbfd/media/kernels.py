"""The media engine's loop-form twins (hbfd/accel.py: compiled by numba, tested bit for bit against the numpy
definitions in engine.py and diestage.py, which stay the definition when ``HBFD_ACCEL=off`` or numba is
missing). They live in one file because the whole-batch read pass (``_read_pass``) is built from the others
and numba's cache of a twin is keyed on its own file; a twin calling another file's twins (``_event_run``: the
event scheduler's, eventsim.py) is cached with that file's contents in its key (hbfd/accel.py ``jit``).

* ``_lookup_events``: page-buffer lookup (``MediaEngine._lookup_loop``);
* ``_chan_fcfs``, ``_chan_fcfs_packed``: channel FCFS in a given order, or in the order of sorted packed keys
  (``MediaEngine._chan_lindley``);
* ``_fifo_loop`` and ``_fifo_carry``: the read die stage under the queue depth (``diestage.fifo_exact``) and
  the carried releases it leaves;
* ``_read_front``: a submitted batch's fields as int64 arrays and whether every request is a valid media
  read (or valid, with stores) in arrival order (``MediaEngine.submit``'s conversion and checks; else the numpy
  path decides);
* ``_mixed_req`` / ``_mixed_front``: a mixed batch's page transactions, write backpressure ring, programs' inputs,
  media reads and store items (``MediaEngine._serve`` -> ``_expand`` / ``_serve_mixed`` -> ``_mixed_front_of``);
* ``_read_pass``: a batch of media reads (no store, no write-buffer page, no pending array command) in one
  compiled pass: page expansion, placement, lookup, die stage, buffer state, data ready and, when every
  transfer can be decided now, the channel (``MediaEngine._serve`` -> ``_where`` / ``_reads`` /
  ``_channel_stage`` with the other twins on);
* ``_packed_build``: the packed (major, minor, index) keys of ``lindley.packed_keys`` before their sort (2048
  keys or more); ``_packed_sort``: their sort (a stable radix sort of the bits above the index);
* ``_event_run`` (issue 14 item 5, wt/fuse14): ``MediaEngine._array_ops``' event-scheduler run in one call: its
  inputs, the carried releases taken, the scheduler (eventsim.py's ``_simulate_split`` / ``_simulate_loop``: a
  callee of another file, which ``accel.jit`` keys the cache on), the decision and the releases put back.
"""
from __future__ import annotations

import numpy as np

from hbfd import accel

from .eventsim import _simulate_loop, _simulate_split

_BIG = 1 << 62


@accel.jit
def _lookup_events(ev_plane, ev_page, ev_read, ev_ridx, bpage, bready):
    """``MediaEngine._lookup_loop``, loop form (compiled by numba): page-buffer lookup one event at a time
    (reads and invalidations in (arrival, seq) order), each plane's buffers MRU first, its carried buffers
    numbered as pseudo accesses in order of first touch (MRU first). Returns (miss, ref, pseudo ready,
    touched planes (sorted), their buffers' pages and refs)."""
    ne = ev_plane.shape[0]
    npl, P = bpage.shape
    nr = 0
    for e in range(ne):
        if ev_read[e]:
            nr += 1
    miss = np.zeros(nr, np.bool_)
    ref = np.zeros(nr, np.int64)
    spage = np.empty((npl, P), np.int64)
    sref = np.empty((npl, P), np.int64)
    scnt = np.full(npl, -1, np.int64)          # -1: plane not touched yet
    pready = np.empty(min(ne, npl) * P, np.int64)
    npr = 0
    nu = 0
    k = 0
    for e in range(ne):
        p = ev_plane[e]
        pg = ev_page[e]
        if scnt[p] < 0:
            c = 0
            while c < P and bpage[p, c] >= 0:
                spage[p, c] = bpage[p, c]
                sref[p, c] = -1 - npr
                pready[npr] = bready[p, c]
                npr += 1
                c += 1
            scnt[p] = c
            nu += 1
        m = scnt[p]
        f = -1
        for c in range(m):
            if spage[p, c] == pg:
                f = c
                break
        if not ev_read[e]:
            if f >= 0:                            # an invalidation empties the buffer
                for c in range(f, m - 1):
                    spage[p, c] = spage[p, c + 1]
                    sref[p, c] = sref[p, c + 1]
                scnt[p] = m - 1
            continue
        if f >= 0:                                # hit: MRU
            rf = sref[p, f]
            for c in range(f, 0, -1):
                spage[p, c] = spage[p, c - 1]
                sref[p, c] = sref[p, c - 1]
            spage[p, 0] = pg
            sref[p, 0] = rf
            ref[k] = rf
        else:                                     # miss: the LRU buffer goes
            rf = ev_ridx[e]
            top = m if m < P else P - 1
            for c in range(top, 0, -1):
                spage[p, c] = spage[p, c - 1]
                sref[p, c] = sref[p, c - 1]
            spage[p, 0] = pg
            sref[p, 0] = rf
            if m < P:
                scnt[p] = m + 1
            miss[k] = True
            ref[k] = rf
        k += 1
    up = np.empty(nu, np.int64)
    s_page = np.full((nu, P), -1, np.int64)
    s_ref = np.zeros((nu, P), np.int64)
    u = 0
    for p in range(npl):
        if scnt[p] >= 0:
            up[u] = p
            for c in range(scnt[p]):
                s_page[u, c] = spage[p, c]
                s_ref[u, c] = sref[p, c]
            u += 1
    return miss, ref, pready[:npr], up, s_page, s_ref


@accel.jit
def _fifo_loop(r, die, plane, service, t_cmd, Q, ndies, pf, cd, ct):
    """The die queue depth's slot form, one command at a time (compiled by numba): per die the Q largest
    releases so far (carried ones first): for Q <= 64 a sorted window sliding along a row of 2Q (a new
    release is usually among the largest: a few moves; the window goes back to the row's start every Q
    drops), else a min-heap; command i admitted at max(r_i, their minimum when the Q are held), its plane
    FCFS. ``pf`` is updated in place. Returns (ends, dies where the depth binds, saturated dies (Q carried
    releases, all after the die's first arrival), the kept releases as (die, time))."""
    n = r.shape[0]
    nc = cd.shape[0]
    H = np.empty((ndies, 2 * Q if Q <= 64 else Q), np.int64)
    hn = np.zeros(ndies, np.int64)
    hs = np.zeros(ndies, np.int64)          # start of the sorted window (the smallest release) per die
    ring = Q <= 64                          # else a min-heap (a deep window would shift too much)
    first = np.full(ndies, _BIG, np.int64)
    for i in range(n - 1, -1, -1):
        first[die[i]] = r[i]
    cmin = np.full(ndies, _BIG, np.int64)
    cnt = np.zeros(ndies, np.int64)
    bind = np.zeros(ndies, np.bool_)
    E = np.empty(n, np.int64)
    for k in range(nc + n):
        if k < nc:
            d = cd[k]
            v = ct[k]
            cnt[d] += 1
            if v < cmin[d]:
                cmin[d] = v
        else:
            i = k - nc
            d = die[i]
            m = H[d, hs[d]] if hn[d] == Q else -_BIG
            if m > r[i]:
                bind[d] = True
            a = (r[i] if r[i] > m else m) + t_cmd
            p = plane[i]
            v = (a if a > pf[p] else pf[p]) + service
            pf[p] = v
            E[i] = v
        # v joins die d's Q largest releases (a full set drops its smallest when v is larger)
        s = hn[d]
        h0 = hs[d]
        if not ring:                             # a min-heap (H[d, 0] the smallest; hs stays 0)
            _heap_push(H, hn, d, v, Q)
            continue
        if s == Q:
            if v <= H[d, h0]:
                continue
            h0 += 1                              # the smallest goes
            s -= 1
            if h0 == Q:                          # the window [h0, h0 + s) back to the row's start
                for t in range(s):
                    H[d, t] = H[d, h0 + t]
                h0 = 0
            hs[d] = h0
        j = h0 + s
        while j > h0 and H[d, j - 1] > v:
            H[d, j] = H[d, j - 1]
            j -= 1
        H[d, j] = v
        hn[d] = s + 1
    sure = np.zeros(ndies, np.bool_)
    tot = 0
    for d in range(ndies):
        if first[d] != _BIG and cnt[d] >= Q and cmin[d] > first[d]:
            sure[d] = True
        tot += hn[d]
    kd = np.empty(tot, np.int64)
    kt = np.empty(tot, np.int64)
    k = 0
    for d in range(ndies):
        for j in range(hs[d], hs[d] + hn[d]):
            kd[k] = d
            kt[k] = H[d, j]
            k += 1
    return E, bind, sure, kd, kt


@accel.jit
def _fifo_carry(cd, ct, kd, kt, bind, sure, horizon, Q, ndies):
    """The carried releases ``fifo_exact``'s numpy form leaves for the dies ``_fifo_loop`` scheduled (``cd``/
    ``ct``: their carried releases before, ``kd``/``kt``: its heaps' releases): the dies scheduled in the
    exact form (binding or saturated) keep their Q largest releases after the horizon; the others their Q
    largest of the old carried ones (those before the horizon included) and the new ones after it (the heaps
    hold the Q largest of old and new; its releases after the horizon are the same in both). Returns the
    releases to carry as (die, time): the heaps' after the horizon (their order), then each die's kept stale
    ones, latest first."""
    nk = 0
    for j in range(kd.shape[0]):
        if kt[j] > horizon:
            nk += 1
    room = np.full(ndies, Q, np.int64)
    ns = 0
    for j in range(cd.shape[0]):
        if ct[j] <= horizon and not (bind[cd[j]] or sure[cd[j]]):
            ns += 1
    od = np.empty(nk + ns, np.int64)
    ot = np.empty(nk + ns, np.int64)
    k = 0
    for j in range(kd.shape[0]):
        if kt[j] > horizon:
            od[k] = kd[j]
            ot[k] = kt[j]
            room[kd[j]] -= 1
            k += 1
    if ns:
        sd = np.empty(ns, np.int64)
        sv = np.empty(ns, np.int64)
        m = 0
        for j in range(cd.shape[0]):
            if ct[j] <= horizon and not (bind[cd[j]] or sure[cd[j]]):
                sd[m] = cd[j]
                sv[m] = ct[j]
                m += 1
        o = np.argsort(-sv, kind="mergesort")
        cnt = np.zeros(ndies + 1, np.int64)
        for j in range(ns):
            cnt[sd[j] + 1] += 1
        for d in range(ndies):
            cnt[d + 1] += cnt[d]
        o2 = np.empty(ns, np.int64)
        for j in range(ns):                       # stable by die: (die, latest first)
            d = sd[o[j]]
            o2[cnt[d]] = o[j]
            cnt[d] += 1
        prev = -1
        rank = 0
        for j in range(ns):
            d = sd[o2[j]]
            rank = rank + 1 if d == prev else 0
            prev = d
            if rank < room[d]:
                od[k] = d
                ot[k] = sv[o2[j]]
                k += 1
    return od[:k], ot[:k]


@accel.jit
def _chan_order(rd, seq, src, lo, hi):
    """Sort the items [lo, hi) of the parallel arrays ``rd``, ``seq``, ``src`` in place by (``rd``, ``seq``)
    (one channel's FCFS order; seqs are unique): insertion sort while the items are nearly in order (a
    channel's data-ready times under light load), else merge sorts by seq then (stably) by rd."""
    moves = 0
    cap = 8 * (hi - lo) + 64
    for i in range(lo + 1, hi):
        rv = rd[i]
        sv = seq[i]
        xv = src[i]
        j = i - 1
        while j >= lo and (rd[j] > rv or (rd[j] == rv and seq[j] > sv)):
            rd[j + 1] = rd[j]
            seq[j + 1] = seq[j]
            src[j + 1] = src[j]
            j -= 1
        moves += i - 1 - j
        rd[j + 1] = rv
        seq[j + 1] = sv
        src[j + 1] = xv
        if moves > cap:
            o = np.argsort(seq[lo:hi], kind="mergesort")
            r1 = rd[lo:hi][o]
            s1 = seq[lo:hi][o]
            x1 = src[lo:hi][o]
            o2 = np.argsort(r1, kind="mergesort")
            rd[lo:hi] = r1[o2]
            seq[lo:hi] = s1[o2]
            src[lo:hi] = x1[o2]
            return


@accel.jit
def _bits(x):
    """The least k with 2**k >= ``x`` (log2 of a power of two)."""
    k = 0
    while (1 << k) < x:
        k += 1
    return k


@accel.jit
def _carry_split(cd, ct, mask):
    """``diestage.DieCarry.take``'s split, loop form (compiled by numba): the carried releases (die ``cd``, time
    ``ct``) of the dies in ``mask`` (bool per die) and the others, each in order. Returns (die, t, rest die, rest t)."""
    n = cd.shape[0]
    k = 0
    for j in range(n):
        if mask[cd[j]]:
            k += 1
    td = np.empty(k, np.int64)
    tt = np.empty(k, np.int64)
    rd = np.empty(n - k, np.int64)
    rt = np.empty(n - k, np.int64)
    u = 0
    w = 0
    for j in range(n):
        if mask[cd[j]]:
            td[u] = cd[j]
            tt[u] = ct[j]
            u += 1
        else:
            rd[w] = cd[j]
            rt[w] = ct[j]
            w += 1
    return td, tt, rd, rt


@accel.jit
def _read_pass(a, addr, nbytes, seq0, serial0, C, D, P, t_cmd, t_read, Q, ndies, xfer, bpage, bready, plane_free,
               cdie, ct, horizon, limit, o_ch, o_rd, o_x, o_seq, o_q0, chan_free, chan_busy, pshift, sshift):
    """A batch of media reads (requests sorted by arrival ``a``; serials from ``serial0``, page transactions'
    seq from ``2 * seq0``) in one pass: the page transactions (``MediaEngine._expand``, ``_where``), the
    buffer lookup (``_lookup_events``), the die stage of the misses (``_fifo_loop``, ``_fifo_carry``; carried
    releases ``cdie``/``ct``, plane state ``plane_free`` in place), data ready, the page buffers' new state
    (``bpage``/``bready`` in place) and the channel stage (``_channel_stage``): the transfers with data ready
    by ``limit`` (the latest arrival + t_cmd), with the earlier batches' deferred ones taken for it (``o_*``),
    FCFS per channel by (data ready, seq) from ``chan_free`` (``chan_busy`` in place); the others are
    deferred. Returns (done per request (a deferred page counts 0), done of the taken old items, queueing
    delays of the decided items, the deferred items (ch, rd, x, seq, serial, q0), counts [transactions,
    senses, buffer hits, coalesced reads, sectors, qd-bound batches, qd-bound dies], the new carried releases
    (die, time)). ``pshift``/``sshift``: log2 of the page and sector bytes (arguments, not the geometry module's
    globals: numba would freeze another module's globals into the cached code; shifts, not divisions)."""
    PB = 1 << pshift
    SB1 = (1 << sshift) - 1
    n = a.shape[0]
    nt = 0
    multi = False
    for i in range(n):
        k = ((addr[i] + nbytes[i] - 1) >> pshift) - (addr[i] >> pshift) + 1
        nt += k
        if k > 1:
            multi = True
    lpn = np.empty(nt, np.int64)
    x = np.empty(nt, np.int64)
    ta = np.empty(nt, np.int64)
    req = np.empty(nt if multi else 0, np.int64)
    nsec_tot = 0
    if multi:
        t = 0
        for i in range(n):
            first = addr[i] >> pshift
            last = (addr[i] + nbytes[i] - 1) >> pshift
            e = addr[i] + nbytes[i]
            for lp in range(first, last + 1):
                base = lp << pshift
                lo = (addr[i] if addr[i] > base else base) - base
                hi = (e if e < base + PB else base + PB) - base
                ns = ((hi + SB1) >> sshift) - (lo >> sshift)
                nsec_tot += ns
                lpn[t] = lp
                x[t] = xfer[ns]
                ta[t] = a[i]
                req[t] = i
                t += 1
    else:
        for i in range(n):
            lp = addr[i] >> pshift
            lo = addr[i] - (lp << pshift)
            ns = ((lo + nbytes[i] + SB1) >> sshift) - (lo >> sshift)
            nsec_tot += ns
            lpn[i] = lp
            x[i] = xfer[ns]
            ta[i] = a[i]
    ch = np.empty(nt, np.int64)
    die = np.empty(nt, np.int64)
    plane = np.empty(nt, np.int64)
    if (C & (C - 1)) == 0 and (D & (D - 1)) == 0 and (P & (P - 1)) == 0:
        cb = _bits(C)
        db = _bits(D)
        for t in range(nt):
            c = lpn[t] & (C - 1)
            d = c * D + ((lpn[t] >> cb) & (D - 1))
            ch[t] = c
            die[t] = d
            plane[t] = d * P + ((lpn[t] >> (cb + db)) & (P - 1))
    else:
        for t in range(nt):
            c = lpn[t] % C
            d = c * D + (lpn[t] // C) % D
            ch[t] = c
            die[t] = d
            plane[t] = d * P + (lpn[t] // (C * D)) % P
    evr = np.ones(nt, np.bool_)
    miss, ref, pready, up, s_page, s_ref = _lookup_events(plane, lpn, evr, np.arange(nt), bpage, bready)
    nm = 0
    for t in range(nt):
        if miss[t]:
            nm += 1
    E = np.zeros(nt, np.int64)
    qd_b = 0
    qd_d = 0
    kd_out = cdie
    kt_out = ct
    if nm:
        mi = np.empty(nm, np.int64)
        k = 0
        for t in range(nt):
            if miss[t]:
                mi[k] = t
                k += 1
        present = np.zeros(ndies, np.bool_)
        for k in range(nm):
            present[die[mi[k]]] = True
        cdp, ctp, rest_d, rest_t = _carry_split(cdie, ct, present)
        Em, bind, sure, kd, kt = _fifo_loop(ta[mi], die[mi], plane[mi], t_read, t_cmd, Q, ndies, plane_free, cdp, ctp)
        for k in range(nm):
            E[mi[k]] = Em[k]
        nsure = 0
        nbind = 0
        for d in range(ndies):
            if sure[d]:
                nsure += 1
            elif bind[d]:
                nbind += 1
        if nsure:
            qd_b += 1
            qd_d += nsure
        if nbind:
            qd_b += 1
            qd_d += nbind
        ad, at = _fifo_carry(cdp, ctp, kd, kt, bind, sure, horizon, Q, ndies)
        kd_out = np.concatenate((rest_d, ad))
        kt_out = np.concatenate((rest_t, at))
    rd = np.empty(nt, np.int64)
    q0 = np.empty(nt, np.int64)
    nh = 0
    nco = 0
    ndef = 0
    for t in range(nt):
        early = ta[t] + t_cmd
        if miss[t]:
            rd[t] = E[t]
            q0[t] = early + t_read
        else:
            r = ref[t]
            rb = E[r] if r >= 0 else pready[-1 - r]
            if rb > early:
                nco += 1
                rd[t] = rb
            else:
                nh += 1
                rd[t] = early
            q0[t] = early
        if rd[t] > limit:
            ndef += 1
    for u in range(up.shape[0]):
        p = up[u]
        for c in range(s_page.shape[1]):
            bpage[p, c] = s_page[u, c]
            if s_page[u, c] < 0:
                bready[p, c] = 0
            else:
                r = s_ref[u, c]
                bready[p, c] = E[r] if r >= 0 else pready[-1 - r]
    # channel: the old items taken (all ready by the limit) and the new ones ready by it, grouped by channel
    # (a counting sort), each channel in (data ready, seq) order, FCFS from its free time
    no = o_ch.shape[0]
    nd = no + nt - ndef
    cnt = np.zeros(C + 1, np.int64)
    for j in range(no):
        cnt[o_ch[j] + 1] += 1
    for t in range(nt):
        if rd[t] <= limit:
            cnt[ch[t] + 1] += 1
    for c in range(C):
        cnt[c + 1] += cnt[c]
    pos = cnt[:C].copy()
    crd = np.empty(nd, np.int64)
    cseq = np.empty(nd, np.int64)
    csrc = np.empty(nd, np.int64)            # < no: old item; else new transaction + no
    for j in range(no):
        k = pos[o_ch[j]]
        pos[o_ch[j]] = k + 1
        crd[k] = o_rd[j]
        cseq[k] = o_seq[j]
        csrc[k] = j
    f_ch = np.empty(ndef, np.int64)
    f_rd = np.empty(ndef, np.int64)
    f_x = np.empty(ndef, np.int64)
    f_seq = np.empty(ndef, np.int64)
    f_ser = np.empty(ndef, np.int64)
    f_q0 = np.empty(ndef, np.int64)
    f = 0
    for t in range(nt):
        if rd[t] <= limit:
            k = pos[ch[t]]
            pos[ch[t]] = k + 1
            crd[k] = rd[t]
            cseq[k] = 2 * (seq0 + t)
            csrc[k] = no + t
        else:
            f_ch[f] = ch[t]
            f_rd[f] = rd[t]
            f_x[f] = x[t]
            f_seq[f] = 2 * (seq0 + t)
            f_ser[f] = serial0 + (req[t] if multi else t)
            f_q0[f] = q0[t]
            f += 1
    done_old = np.empty(no, np.int64)
    qv = np.empty(nd, np.int64)
    dt = np.zeros(nt, np.int64)               # 0: deferred
    for c in range(C):
        lo = cnt[c]
        hi = cnt[c + 1]
        if hi == lo:
            continue
        _chan_order(crd, cseq, csrc, lo, hi)
        fr = chan_free[c]
        busy = 0
        for k in range(lo, hi):
            sk = csrc[k]
            if sk < no:
                xj = o_x[sk]
                dd = (crd[k] if crd[k] > fr else fr) + xj
                done_old[sk] = dd
                qv[k] = dd - xj - o_q0[sk]
            else:
                xj = x[sk - no]
                dd = (crd[k] if crd[k] > fr else fr) + xj
                dt[sk - no] = dd
                qv[k] = dd - xj - q0[sk - no]
            fr = dd
            busy += xj
        chan_free[c] = fr
        chan_busy[c] += busy
    done = a.copy()
    for t in range(nt):
        i = req[t] if multi else t
        if dt[t] > done[i]:
            done[i] = dt[t]
    counts = np.array([nt, nm, nh, nco, nsec_tot, qd_b, qd_d], np.int64)
    return (done, done_old, qv, f_ch, f_rd, f_x, f_seq, f_ser, f_q0, counts, kd_out, kt_out)


@accel.jit
def _chan_fcfs(order, ch, rd, x, q0, chan_free, chan_busy):
    """``MediaEngine._chan_lindley``'s transfers, loop form: items in ``order`` (per channel by data ready,
    then seq), each channel FCFS from its free time; updates ``chan_free`` and ``chan_busy``. Returns (done,
    the queueing delays done - x - q0 in ``order``). (A run of one channel's items keeps its free time in a
    register: an order grouped by channel, as the packed sort gives it, runs without a memory dependency.)"""
    n = order.shape[0]
    done = np.empty(n, np.int64)
    qv = np.empty(n, np.int64)
    prev = -1
    f = 0
    busy = 0
    for k in range(n):
        i = order[k]
        c = ch[i]
        if c != prev:
            if prev >= 0:
                chan_free[prev] = f
                chan_busy[prev] += busy
            prev = c
            f = chan_free[c]
            busy = 0
        d = (rd[i] if rd[i] > f else f) + x[i]
        f = d
        busy += x[i]
        done[i] = d
        qv[k] = d - x[i] - q0[i]
    if prev >= 0:
        chan_free[prev] = f
        chan_busy[prev] += busy
    return done, qv


@accel.jit
def _read_front(arrival, addr, nbytes, op, capacity, nops, store_op, atomic_op, max_time):
    """``MediaEngine.submit``'s conversions and checks of a batch, for the compiled paths: the request fields (any
    integer arrays, strided views of the batch included) as int64 arrays, and 2 where every request is a media read
    (load or cp.async), 1 where some are stores or atomics, every request inside the media, arrival before
    ``max_time``, in arrival order; 0 otherwise: the caller's numpy path converts and checks the batch again (and
    decides the errors); the ops as int64 where the answer is 1. (``arrival``, ``addr``: unsigned, compared as such.)"""
    n = arrival.shape[0]
    mt = np.uint64(max_time)
    a = np.empty(n, np.int64)
    ad = np.empty(n, np.int64)
    nb = np.empty(n, np.int64)
    ob = np.empty(n, np.int64)
    code = 2
    for i in range(n):                       # (the first request that fails ends it: its batch goes the numpy way)
        if np.uint64(arrival[i]) >= mt or np.uint64(addr[i]) >= mt:
            return a, ad, nb, ob, 0
        a[i] = np.int64(arrival[i])
        ad[i] = np.int64(addr[i])
        nb[i] = np.int64(nbytes[i])
        o = op[i]
        if o >= nops:
            return a, ad, nb, ob, 0
        if code == 2 and (o == store_op or o == atomic_op):
            code = 1                         # (the ops as int64 from the first store on: a batch of reads needs none)
            for j in range(i):
                ob[j] = np.int64(op[j])
        if code == 1:
            ob[i] = np.int64(o)
        if nb[i] <= 0 or ad[i] + nb[i] > capacity:
            return a, ad, nb, ob, 0
        if i and a[i] < a[i - 1]:
            return a, ad, nb, ob, 0
    return a, ad, nb, ob, code


@accel.jit
def _chan_fcfs_packed(key, bits, sbits, lo, x, q0, chan_free, chan_busy):
    """``_chan_fcfs`` in the order of ``lindley.packed_keys``'s sorted keys (channel, data ready, index),
    the channel and data ready decoded from each key by shifts (no gather of them): the same done, queueing
    delays (in that order), ``chan_free`` and ``chan_busy``."""
    n = key.shape[0]
    mask = (1 << bits) - 1
    smask = (1 << sbits) - 1
    done = np.empty(n, np.int64)
    qv = np.empty(n, np.int64)
    prev = -1
    f = 0
    busy = 0
    for k in range(n):
        kk = key[k]
        i = kk & mask
        q = kk >> bits
        c = q >> sbits
        r = (q & smask) + lo
        if c != prev:
            if prev >= 0:
                chan_free[prev] = f
                chan_busy[prev] += busy
            prev = c
            f = chan_free[c]
            busy = 0
        d = (r if r > f else f) + x[i]
        f = d
        busy += x[i]
        done[i] = d
        qv[k] = d - x[i] - q0[i]
    if prev >= 0:
        chan_free[prev] = f
        chan_busy[prev] += busy
    return done, qv


@accel.jit
def _packed_build(major, minor, lo, sbits, bits):
    """``lindley.packed_keys``'s keys ``(((major << sbits) + minor - lo) << bits) | index`` before their sort,
    loop form (compiled by numba): one pass instead of numpy's six. The caller checked that they fit in 63
    bits."""
    a = np.empty(minor.shape[0], np.int64)
    _packed_build_into(a, 0, major, minor, lo, sbits, bits)
    return a


@accel.jit
def _packed_build_into(a, off, major, minor, lo, sbits, bits):
    """``_packed_build`` of one piece of the keys into ``a[off:off + len(minor)]``, its indices from ``off`` on
    (``lindley.packed_keys_parts``: pieces never concatenated)."""
    for i in range(minor.shape[0]):
        a[off + i] = (((np.int64(major[i]) << sbits) + np.int64(minor[i]) - lo) << bits) | (off + i)


@accel.jit
def _packed_sort(key, bits):
    """``np.sort`` of ``_packed_build``'s keys (``lindley.packed_keys``), loop form: a stable LSD radix sort
    on the bits above the low ``bits`` only. Those low bits of ``key[i]`` are ``i`` (the keys are unique and
    already ascending among equal upper parts), so sorting the upper parts stably gives the sorted keys: the
    same array. Digits of at most 11 bits (the counts fit in L1); a digit every key shares is skipped; all
    digits' counts in one pass first. Returns the sorted keys (``key`` itself or a new array; ``key`` may be
    overwritten)."""
    n = key.shape[0]
    if n < 2:
        return key
    hmax = 0
    for i in range(n):
        h = key[i] >> bits
        if h > hmax:
            hmax = h
    hb = 0
    while (np.int64(1) << hb) <= hmax:
        hb += 1
    if hb == 0:
        return key
    nd = (hb + 10) // 11
    w = (hb + nd - 1) // nd
    nb = np.int64(1) << w
    m = nb - 1
    cnt = np.zeros((nd, nb), np.int64)
    for i in range(n):
        h = key[i] >> bits
        for d in range(nd):
            cnt[d, (h >> (d * w)) & m] += 1
    src = key
    dst = np.empty(n, np.int64)
    for d in range(nd):
        sh = bits + d * w
        c = cnt[d]
        full = False
        for b in range(nb):
            if c[b] == n:
                full = True
                break
        if full:
            continue
        s = 0
        for b in range(nb):
            t = c[b]
            c[b] = s
            s += t
        for i in range(n):
            k = src[i]
            b = (k >> sh) & m
            dst[c[b]] = k
            c[b] += 1
        tmp = src
        src = dst
        dst = tmp
    return src


@accel.jit
def _heap_push(hv, hn, d, v, q):
    """Keep in row ``d`` of ``hv`` (a min-heap of ``hn[d]`` entries, at most ``q``) the ``q`` largest values
    pushed (``_latest_q``'s step)."""
    m = hn[d]
    if m < q:                                      # sift up
        j = m
        while j > 0:
            p = (j - 1) >> 1
            if hv[d, p] <= v:
                break
            hv[d, j] = hv[d, p]
            j = p
        hv[d, j] = v
        hn[d] = m + 1
    elif v > hv[d, 0]:                             # replace the smallest
        # Floyd's form of the sift down: the smaller children move up to a leaf (no test against v: a new
        # value is usually among the largest, so it would sink there), then v sifts up from that leaf. The
        # same array as the plain sift down (which moves children smaller than v up and stops at one >= v):
        # children larger than v move back down, ones equal to v stay one level up with v just below them.
        j = 0
        c = 1
        while c < q:
            r = c + 1
            if r < q:
                if hv[d, r] < hv[d, c]:
                    c = r
            hv[d, j] = hv[d, c]
            j = c
            c = 2 * j + 1
        while j > 0:
            p = (j - 1) >> 1
            u = hv[d, p]
            if u <= v:
                break
            hv[d, j] = u
            j = p
        hv[d, j] = v


@accel.jit
def _heap_out(hv, hn):
    """The heaps of ``_heap_push`` as (die, value) arrays: die order, largest first."""
    dies = hn.shape[0]
    tot = 0
    for d in range(dies):
        tot += hn[d]
    od = np.empty(tot, np.int64)
    ot = np.empty(tot, np.int64)
    k = 0
    for d in range(dies):
        m = hn[d]
        if m == 0:
            continue
        s = np.sort(hv[d, :m])
        for j in range(m):
            od[k + j] = d
            ot[k + j] = s[m - 1 - j]
        k += m
    return od, ot


@accel.jit
def _latest_q(cd, ct, dies, q):
    """``engine._latest_per_die``, loop form (compiled by numba): the ``q`` latest release times ``ct`` of
    each die ``cd``, in die order, latest first (the same arrays: equal times are equal values), from one
    pass with a bounded min-heap per die instead of a sort of every release."""
    hv = np.empty((dies, q), np.int64)
    hn = np.zeros(dies, np.int64)
    for i in range(cd.shape[0] - 1, -1, -1):      # (latest last, mostly: from the end, most are rejected at once)
        _heap_push(hv, hn, cd[i], ct[i], q)
    return _heap_out(hv, hn)


@accel.jit
def _top_in_place(a, lo, hi, k):
    """``a[hi - k:hi]`` made the ``k`` largest of ``a[lo:hi]`` (in some order; the rest before them), in place, by
    quickselect (Hoare partitions around a median of three; no copy)."""
    target = hi - k
    l = lo
    r = hi - 1
    while r > l:
        m = (l + r) >> 1
        x = a[l]
        y = a[m]
        z = a[r]
        if x < y:
            p = y if y < z else (z if x < z else x)
        else:
            p = x if x < z else (z if y < z else y)
        i = l
        j = r
        while i <= j:
            while a[i] < p:
                i += 1
            while a[j] > p:
                j -= 1
            if i <= j:
                t = a[i]
                a[i] = a[j]
                a[j] = t
                i += 1
                j -= 1
        if target <= j:
            r = j
        elif target >= i:
            l = i
        else:
            break


@accel.jit
def _keep_tail(buf, a, b, w, budget):
    """``buf[b - w:b]`` made the ``w`` largest of ``buf[a:b]``, ascending, in place: the last ``w`` sorted by insertion,
    then each earlier one larger than their least put in its place (the least dropped). Cheap where the times come
    nearly ascending (a die's release times in index order: few moves). Returns -1, or, once more than ``budget``
    moves were made, the position ``p`` from which ``buf[p:b]`` holds what is left to choose from (the caller's
    quickselect over it gives the same ``w`` largest)."""
    s = b - w
    moves = 0
    for i in range(s + 1, b):
        v = buf[i]
        h = i - 1
        while h >= s and buf[h] > v:
            buf[h + 1] = buf[h]
            h -= 1
            moves += 1
        buf[h + 1] = v
        if moves > budget:
            return a                                # (buf[a:b] still the die's times, permuted)
    for i in range(a, s):
        v = buf[i]
        if v > buf[s]:
            h = s + 1
            while h < b and buf[h] < v:
                buf[h - 1] = buf[h]
                h += 1
                moves += 1
            buf[h - 1] = v
            if moves > budget:
                return i + 1                        # (buf[s:b]: the w largest of buf[a:i + 1] and the last w)
    return -1


@accel.jit
def _carry_keep(d, t, dies, q):
    """``diestage.DieCarry.put``'s cut, loop form (compiled by numba): the ``q`` largest times ``t`` of each
    die ``d``, in (die, time) order (the same arrays as its stable sort by time then die and cut: equal
    times are equal values)."""
    n = d.shape[0]
    st = np.zeros(dies + 1, np.int64)               # (round 11: each die's times gathered by a counting sort; round 12:
    for i in range(n):                              # its q largest by _keep_tail, np.partition and a sort before)
        st[d[i] + 1] += 1
    m = 0
    for k in range(dies):
        c = st[k + 1]
        m += c if c < q else q
        st[k + 1] += st[k]
    pos = st[:dies].copy()
    buf = np.empty(n, np.int64)
    for i in range(n):
        buf[pos[d[i]]] = t[i]
        pos[d[i]] += 1
    od = np.empty(m, np.int64)
    ot = np.empty(m, np.int64)
    j = 0
    for k in range(dies):
        a = st[k]
        b = st[k + 1]
        c = b - a
        if c == 0:
            continue
        w = c if c < q else q
        lo = b - w
        p = _keep_tail(buf, a, b, w, 4 * c + 2 * w)
        if p >= 0:                                  # (too many moves, the die's times far from ascending: the w
            _top_in_place(buf, p, b, w)             # largest by an in-place quickselect over what is left to look
            buf[lo:b].sort()                        # at, then sorted)
        for r in range(w):
            od[j + r] = k
            ot[j + r] = buf[lo + r]
        j += w
    return od, ot


@accel.jit
def _pid_map(pid):
    """``engine._PidIndex``'s direct map, loop form (compiled by numba): (lo, map with map[id - lo] = the
    id's index, -1 for none); an empty map where the ids are not nearly dense (or there is none)."""
    n = pid.shape[0]
    lo = np.int64(1) << 62
    hi = np.int64(-1)
    for i in range(n):
        p = pid[i]
        if p >= 0:
            if p < lo:
                lo = p
            if p > hi:
                hi = p
    if hi < 0 or hi - lo > 4 * n + 1024:
        return np.int64(0), np.empty(0, np.int64)
    m = np.full(hi - lo + 1, -1, np.int64)
    for i in range(n):
        p = pid[i]
        if p >= 0:
            m[p - lo] = i
    return lo, m


@accel.jit
def _tail_scan(pdie, pplane, padm, pend, pgate, lo, pmap, Tp, T, nd, pf, sd, st, q, giP, pjoin, prdy, pfloor):
    """``MediaEngine._tail_plane``'s passes over the pending commands ``P``, loop form (compiled by numba),
    in one scan: each one's gate position in ``P`` (``giP``: -1 none, -2 not in ``P``; status 1 where a gate
    crosses dies), kept (admitted before its plane's ``Tp``) or scheduled again (``rem``), the planes' free
    times after the kept ones (``pf``, in place), the kept ones admitted from their die's ``T`` on (``xi``),
    the carried releases of the dies ``nd`` (theirs in ``sd``/``st``, then the ends of the kept ones admitted
    before ``T``; each die's ``q`` latest, die order, latest first, when there are more than ``q``), and per
    die how many are kept and scheduled again; the die, admission and end of each of ``xi`` and per die whether
    one of them was neither joined nor admitted at its arrival (max(ready ``prdy``, ``pfloor``)). Returns
    (status, rem, xi, cd, ct, kept per die, again per die, xd, xa, xe, that per-die flag)."""
    n = pdie.shape[0]
    dies = T.shape[0]
    kc = np.zeros(dies, np.int64)
    rc = np.zeros(dies, np.int64)
    nm = pmap.shape[0]
    rem = np.empty(n, np.int64)                    # (filled in the one pass: prefixes returned)
    xi = np.empty(n, np.int64)
    ei = np.empty(n, np.int64)                     # kept, admitted before T, on a die in ``nd``: carried releases
    xd = np.empty(n, np.int64)
    xa = np.empty(n, np.int64)
    xe = np.empty(n, np.int64)
    xb = np.zeros(dies, np.bool_)
    nrem = 0
    nxi = 0
    ne = 0
    for i in range(n):
        g = pgate[i]
        if g >= 0:
            ip = -1
            if g >= lo and g - lo < nm:
                ip = pmap[g - lo]
            if ip >= 0:
                if pdie[ip] != pdie[i]:
                    e0 = np.empty(0, np.int64)
                    return 1, e0, e0, e0, e0, kc, rc, e0, e0, e0, xb
                giP[i] = ip
            else:
                giP[i] = -2
        else:
            giP[i] = -1
        d = pdie[i]
        a = padm[i]
        p = pplane[i]
        if a < Tp[p]:
            kc[d] += 1
            e = pend[i]
            if e > pf[p]:
                pf[p] = e
            if a < T[d]:
                if nd[d]:
                    ei[ne] = i
                    ne += 1
            else:
                xi[nxi] = i
                xd[nxi] = d
                xa[nxi] = a
                xe[nxi] = e
                nxi += 1
                r = prdy[i] if prdy[i] > pfloor[i] else pfloor[i]
                if pjoin[i] < 0 and a != r:
                    xb[d] = True
        else:
            rc[d] += 1
            rem[nrem] = i
            nrem += 1
    ns = 0
    for k in range(sd.shape[0]):
        if nd[sd[k]]:
            ns += 1
    tot = ns + ne
    trim = tot > q
    if trim:
        hv = np.empty((dies, q), np.int64)
        hn = np.zeros(dies, np.int64)
        cd = np.empty(0, np.int64)
        ct = np.empty(0, np.int64)
    else:
        hv = np.empty((1, 1), np.int64)
        hn = np.zeros(1, np.int64)
        cd = np.empty(tot, np.int64)
        ct = np.empty(tot, np.int64)
    c = 0
    for k in range(sd.shape[0]):
        d = sd[k]
        if nd[d]:
            if trim:
                _heap_push(hv, hn, d, st[k], q)
            else:
                cd[c] = d
                ct[c] = st[k]
                c += 1
    if trim:                                       # (latest last, mostly: pushed from the end, most are
        for k in range(ne - 1, -1, -1):            # rejected at once)
            i = ei[k]
            _heap_push(hv, hn, pdie[i], pend[i], q)
        cd, ct = _heap_out(hv, hn)
    else:
        for k in range(ne):
            i = ei[k]
            cd[c] = pdie[i]
            ct[c] = pend[i]
            c += 1
    return 0, rem[:nrem], xi[:nxi], cd, ct, kc, rc, xd[:nxi], xa[:nxi], xe[:nxi], xb


@accel.jit
def _pending_fields(rows, nall, base, gx, gate, floor, gi, dec, ca, cr, dec_h, t_cmd, ob, ox, og, oj, of):
    """``MediaEngine._decide_cmds``'s fields of the commands left pending (``rows`` of the run, in order, or
    all ``nall`` of them when ``nall`` >= 0; ``ca``/``cr`` already theirs), loop form (compiled by numba): a
    gate decided now resolved into the ready time, and the slot kept by one admitted before ``dec_h``.
    Writes base, gx, gate, join, floor into ``ob``, ``ox``, ``og``, ``oj``, ``of``."""
    n = nall if nall >= 0 else rows.shape[0]
    for k in range(n):
        i = k if nall >= 0 else rows[k]
        g = gi[i]
        res = True if g < 0 else dec[g]
        if res:
            ob[k] = cr[k]
            ox[k] = 0
            og[k] = -1
        else:
            ob[k] = base[i]
            ox[k] = gx[i]
            og[k] = gate[i]
        if res and ca[k] < dec_h:
            oj[k] = ca[k] + t_cmd
            of[k] = 0
        else:
            oj[k] = -1
            f = floor[i]
            of[k] = f if f > dec_h else dec_h


@accel.jit
def _ring_loop(R, plane, fill, pid0, gate, pid):
    """``engine._ring_push``, loop form (compiled by numba): the stores in issue order, each gated by the oldest
    of its plane's last B program ids (-1: fewer than B), a filling store issuing the next id (``pid0`` on)
    and pushing it into its plane's row. ``R`` updated in place; ``gate`` and ``pid`` written."""
    B = R.shape[1]
    nxt = pid0
    for i in range(plane.shape[0]):
        p = plane[i]
        gate[i] = R[p, 0]
        if fill[i]:
            for c in range(B - 1):
                R[p, c] = R[p, c + 1]
            R[p, B - 1] = nxt
            pid[i] = nxt
            nxt += 1
        else:
            pid[i] = -1


@accel.jit
def _extreme_at(out, idx, val, larger):
    """``np.maximum.at(out, idx, val)`` (``larger``) or ``np.minimum.at``, loop form (compiled by numba), for
    int64 values and indices in range."""
    if larger:
        for i in range(idx.shape[0]):
            j = idx[i]
            if val[i] > out[j]:
                out[j] = val[i]
    else:
        for i in range(idx.shape[0]):
            j = idx[i]
            if val[i] < out[j]:
                out[j] = val[i]


@accel.jit
def _ends_get(a, base, old_id, old_end, q):
    """``engine._Ends.get``, loop form (compiled by numba): each id's end in the window ``a`` (from ``base``),
    else among the sorted ``old_id``, else -1."""
    n = q.shape[0]
    out = np.empty(n, np.int64)
    na = a.shape[0]
    no = old_id.shape[0]
    for j in range(n):
        i = q[j] - base
        if i >= 0 and i < na:
            out[j] = a[i]
            continue
        v = -1
        if no:
            lo = 0
            hi = no
            while lo < hi:                             # (np.searchsorted, side left)
                m = (lo + hi) >> 1
                if old_id[m] < q[j]:
                    lo = m + 1
                else:
                    hi = m
            if lo > no - 1:
                lo = no - 1
            if old_id[lo] == q[j]:
                v = old_end[lo]
        out[j] = v
    return out


L2P_EMPTY = -(1 << 63)          # an empty slot of the l2p table (ftl._L2pTable); never a logical page
L2P_FIB = 0x9E3779B97F4A7C15    # its hash: (key * L2P_FIB mod 2**64) >> 33, masked to the table size


@accel.jit
def _l2p_swap(keys, vals, ls, ppn):
    """``Ftl.program_many``'s ``l2p`` update, loop form (compiled by numba), in the open-addressing table
    ``keys`` / ``vals`` of ``ftl._L2pTable`` (size a power of 2 of at most 2**31, ``L2P_EMPTY``: free slot,
    linear probing from the hash above): maps ``ls[j]`` to ``ppn[j]`` in order. Returns (each page's value
    before, -1 where it had none; how many pages were added). The table has room for every page."""
    n = ls.shape[0]
    old = np.empty(n, np.int64)
    mask = keys.shape[0] - 1
    added = 0
    for j in range(n):
        k = ls[j]
        h = np.int64((np.uint64(k) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(33)) & mask
        while True:
            kk = keys[h]
            if kk == k:
                old[j] = vals[h]
                vals[h] = ppn[j]
                break
            if kk == -9223372036854775808:
                keys[h] = k
                vals[h] = ppn[j]
                old[j] = -1
                added += 1
                break
            h = (h + 1) & mask
    return old, added


@accel.jit
def _dup_planes(lp, planes, npl):
    """``Ftl.program_many``'s duplicate check, loop form (compiled by numba): whether a page of ``lp`` occurs
    twice, and per plane (``npl`` of them) whether one of its pages does (``planes[i]``: the plane of
    ``lp[i]``), from one pass over an open-addressing set (linear probing from the l2p table's Fibonacci hash,
    at most half full; ``L2P_EMPTY`` marks a free slot) instead of a sort. ``lp``: pages >= 0."""
    n = lp.shape[0]
    cap = 16
    while cap < 2 * n:
        cap <<= 1
    keys = np.full(cap, -9223372036854775808, np.int64)
    mask = cap - 1
    dm = np.zeros(npl, np.bool_)
    anyd = False
    for i in range(n):
        k = lp[i]
        h = np.int64((np.uint64(k) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(33)) & mask
        while True:
            kk = keys[h]
            if kk == k:
                dm[planes[i]] = True
                anyd = True
                break
            if kk == -9223372036854775808:
                keys[h] = k
                break
            h = (h + 1) & mask
    return anyd, dm


@accel.jit
def _program_bulk(lp, C, D, P, npl, ppb, ob, onx, row, valid, pool, cnt_pl, opened):
    """``Ftl.program_many``'s bulk path in compiled passes (round 14; its numpy form stays the definition): each
    page's home plane, the pages by plane (counting sort, index order kept on a plane: the stable argsort's order),
    and which planes go in bulk (an open block with room for their pages, no page twice: ``_dup_planes``). Returns
    (status, planes, ls, ppn, need_up, need_cnt, nb, use): status 1, some planes have no open block and
    ``opened`` is False (``need_up`` ascending, ``need_cnt`` their page counts: ``_open_fresh``'s arguments; nothing
    changed); 0, every plane in bulk: the pages placed (``_program_place``; ``ls``, ``ppn`` the pages and their new
    ppns in plane order); 3, some planes not in bulk (without a block after ``_open_fresh``, without room, or with a
    page twice): nothing changed, ``nb`` their pages in plane order (for ``Ftl.program`` one at a time, first) and
    ``use`` the bulk planes (for ``_program_place`` after them). ``cnt_pl``: scratch of ``npl`` zeros, left
    zeroed."""
    n = lp.shape[0]
    planes = np.empty(n, np.int64)
    CD = C * D
    pow2 = (C & (C - 1)) == 0 and (D & (D - 1)) == 0 and (P & (P - 1)) == 0
    cb = _bits(C)                                   # (powers of two: shifts and masks, the pages being >= 0)
    db = _bits(D)
    pb = _bits(P)
    nneed = 0
    for i in range(n):
        x = lp[i]
        if pow2 and x >= 0:
            q = ((((x & (C - 1)) << db) | ((x >> cb) & (D - 1))) << pb) | ((x >> (cb + db)) & (P - 1))
        else:
            q = ((x % C) * D + (x // C) % D) * P + (x // CD) % P
        planes[i] = q
        if cnt_pl[q] == 0 and ob[q] < 0:
            nneed += 1
        cnt_pl[q] += 1
    e0 = np.empty(0, np.int64)
    u0 = np.empty(0, np.uint8)
    if nneed > 0 and not opened:
        need_up = np.empty(nneed, np.int64)
        need_cnt = np.empty(nneed, np.int64)
        w = 0
        for q in range(npl):
            if cnt_pl[q] > 0 and ob[q] < 0:
                need_up[w] = q
                need_cnt[w] = cnt_pl[q]
                w += 1
        for i in range(n):
            cnt_pl[planes[i]] = 0
        return 1, planes, e0, e0, need_up, need_cnt, e0, u0
    use = np.zeros(npl, np.uint8)
    anyd, dm = _dup_planes(lp, planes, npl)
    nnb = 0
    for i in range(n):
        q = planes[i]
        if ob[q] >= 0 and onx[q] + cnt_pl[q] <= ppb and not dm[q]:
            use[q] = 1
        else:
            nnb += 1
    for i in range(n):
        cnt_pl[planes[i]] = 0
    if nnb == 0:
        ls, ppn = _program_place(lp, planes, use, npl, ppb, ob, onx, row, valid, pool, cnt_pl)
        return 0, planes, ls, ppn, e0, e0, e0, u0
    # the other planes' pages in plane order (as the numpy path programs them one at a time)
    _plane_starts(planes, use, 0, npl, cnt_pl)
    nb = np.empty(nnb, np.int64)
    for i in range(n):
        q = planes[i]
        if use[q] == 0:
            nb[cnt_pl[q]] = i
            cnt_pl[q] += 1
    for i in range(n):
        cnt_pl[planes[i]] = 0
    return 3, planes, e0, e0, e0, e0, nb, use


@accel.jit
def _plane_starts(planes, use, want, npl, cnt_pl):
    """``cnt_pl[q]``: the first position of plane q's pages in plane order (ascending planes) among the pages whose
    plane has ``use[q] == want`` (``cnt_pl`` zero before); returns how many such pages."""
    for i in range(planes.shape[0]):
        q = planes[i]
        if use[q] == want:
            cnt_pl[q] += 1
    start = 0
    for q in range(npl):
        c = cnt_pl[q]
        if c > 0:
            cnt_pl[q] = start
            start += c
    return start


@accel.jit
def _program_place(lp, planes, use, npl, ppb, ob, onx, row, valid, pool, cnt_pl):
    """The placement of ``_program_bulk``'s bulk planes (``use``): their pages in plane order (ascending planes,
    index order on a plane) take their plane's open block's next pages (``onx`` moved), the block's pool row gets
    their lpns and its valid count their number. Returns (ls, ppn): those pages and their new ppns in that order.
    ``cnt_pl``: scratch of ``npl`` zeros, left zeroed."""
    n = lp.shape[0]
    start = _plane_starts(planes, use, 1, npl, cnt_pl)
    ls = np.empty(start, np.int64)
    ppn = np.empty(start, np.int64)
    for i in range(n):
        q = planes[i]
        if use[q] == 0:
            continue
        j = cnt_pl[q]
        cnt_pl[q] = j + 1
        ls[j] = lp[i]
        b = ob[q]
        pg = onx[q]
        onx[q] = pg + 1
        ppn[j] = b * ppb + pg
        pool[row[b] * ppb + pg] = lp[i]
        valid[b] += 1
    for i in range(n):
        cnt_pl[planes[i]] = 0
    return ls, ppn


@accel.jit
def _gated_split(ok, e, ch, rd, x, seq, serial, q0, gate):
    """``MediaEngine._release_gated``'s split of a chunk of waiting stores, loop form (compiled by numba): the
    released rows (``ok``) as channel items (ch, rd = max(rd, their gate's end ``e``), x, seq, serial, q0 = that
    rd) and the rows still waiting (ch, rd, x, seq, serial, q0, gate), each in chunk order: one pass instead of
    thirteen masked copies."""
    n = ok.shape[0]
    m = 0
    for i in range(n):
        if ok[i]:
            m += 1
    s_ch = np.empty(m, np.int64)
    s_rd = np.empty(m, np.int64)
    s_x = np.empty(m, np.int64)
    s_seq = np.empty(m, np.int64)
    s_ser = np.empty(m, np.int64)
    s_q0 = np.empty(m, np.int64)
    w = n - m
    k_ch = np.empty(w, np.int64)
    k_rd = np.empty(w, np.int64)
    k_x = np.empty(w, np.int64)
    k_seq = np.empty(w, np.int64)
    k_ser = np.empty(w, np.int64)
    k_q0 = np.empty(w, np.int64)
    k_gate = np.empty(w, np.int64)
    a = 0
    b = 0
    for i in range(n):
        if ok[i]:
            r = rd[i] if rd[i] > e[i] else e[i]
            s_ch[a] = ch[i]
            s_rd[a] = r
            s_x[a] = x[i]
            s_seq[a] = seq[i]
            s_ser[a] = serial[i]
            s_q0[a] = r
            a += 1
        else:
            k_ch[b] = ch[i]
            k_rd[b] = rd[i]
            k_x[b] = x[i]
            k_seq[b] = seq[i]
            k_ser[b] = serial[i]
            k_q0[b] = q0[i]
            k_gate[b] = gate[i]
            b += 1
    return (s_ch, s_rd, s_x, s_seq, s_ser, s_q0), (k_ch, k_rd, k_x, k_seq, k_ser, k_q0, k_gate)


@accel.jit
def _parts_update(pserial, pid, parr, pdone, prem, serial, done):
    """``MediaEngine._complete_parts``'s general case, loop form (compiled by numba): the pending requests
    (``pserial`` ascending, their ids, arrivals, done so far, pages left) get the deferred pages ``serial``
    (done at ``done``, any order, several pages of a request allowed). Returns (status, the finished requests'
    ids, done - arrival, the latest done, how many requests are left): status 0: a serial is not pending
    (nothing changed: the caller raises); 2: done (each request's done the latest of its pages', its pages left
    less its pages here: ``np.maximum.at`` / ``bincount`` of the numpy form), and the requests left, in order,
    moved to the front of the five arrays in place (each row is read before it can be written: no new memory to
    fault in). Each page's request by a table over the pending serials' span when that is at most 4 m + 1024
    (else a binary search)."""
    n = serial.shape[0]
    m = pserial.shape[0]
    e0 = np.empty(0, np.int64)
    u0 = np.empty(0, pid.dtype)
    idx = np.empty(n, np.int64)
    if m == 0:
        if n:
            return 0, u0, e0, np.int64(0), 0
    else:
        lo = pserial[0]
        span = pserial[m - 1] - lo + 1
        if span <= 4 * m + 1024:
            pos = np.full(span, -1, np.int32)
            for k in range(m):
                pos[pserial[k] - lo] = k
            for i in range(n):
                v = serial[i] - lo
                k = pos[v] if 0 <= v < span else -1
                if k < 0:
                    return 0, u0, e0, np.int64(0), 0
                idx[i] = k
        else:
            for i in range(n):
                s = serial[i]
                a = 0
                b = m
                while a < b:
                    c = (a + b) >> 1
                    if pserial[c] < s:
                        a = c + 1
                    else:
                        b = c
                if a == m or pserial[a] != s:
                    return 0, u0, e0, np.int64(0), 0
                idx[i] = a
    for i in range(n):
        k = idx[i]
        if done[i] > pdone[k]:
            pdone[k] = done[i]
        prem[k] -= 1
    nf = 0
    for k in range(m):
        if prem[k] == 0:
            nf += 1
    fid = np.empty(nf, pid.dtype)
    fmod = np.empty(nf, np.int64)
    mx = np.int64(-(1 << 62))
    a = 0
    b = 0
    for k in range(m):
        if prem[k] == 0:
            fid[a] = pid[k]
            fmod[a] = pdone[k] - parr[k]
            if pdone[k] > mx:
                mx = pdone[k]
            a += 1
        else:
            if nf:
                pserial[b] = pserial[k]
                pid[b] = pid[k]
                parr[b] = parr[k]
                pdone[b] = pdone[k]
                prem[b] = prem[k]
            b += 1
    return 2, fid, fmod, mx, b


@accel.jit
def _ngate_scan(gate, ndie, nbase, ea, ebase, eold_id, eold_end, plo, pmap, pdie, pend, nlo, nmap, npn):
    """``MediaEngine._tail_plane``'s look-ups of the new commands' gates, loop form (compiled by numba), in one
    pass: the commands with a gate (``gm``, in order), their gates (``gq``), the gates' decided ends (``e``:
    ``_ends_get`` on the window ``ea`` from ``ebase`` and the sorted old ids; -1: not decided), their positions
    among the pending commands (``ip``: ``pmap[id - plo]``, -1 none) and in the batch (``inn``: ``nmap[id -
    nlo]``), each command's gate position in P then N (``giN``, -1 none) and its earliest arrival base
    (``nb``: the base raised to a gate's end, the pending gate's scheduled end where undecided; 2**62 where
    gated by a new command). Returns (status: 1 where an undecided gate crosses dies, nothing else valid; gm,
    gq, e, ip, inn, giN, nb)."""
    n = gate.shape[0]
    m = 0
    for i in range(n):
        if gate[i] >= 0:
            m += 1
    gm = np.empty(m, np.int64)
    gq = np.empty(m, np.int64)
    k = 0
    for i in range(n):
        if gate[i] >= 0:
            gm[k] = i
            gq[k] = gate[i]
            k += 1
    e = _ends_get(ea, ebase, eold_id, eold_end, gq)
    ip = np.empty(m, np.int64)
    inn = np.empty(m, np.int64)
    giN = np.full(n, -1, np.int64)
    nb = nbase.copy()
    big = np.int64(1) << 62
    npm = pmap.shape[0]
    nnm = nmap.shape[0]
    for k in range(m):
        g = gq[k]
        i = gm[k]
        a = -1
        if g >= plo and g - plo < npm:
            a = pmap[g - plo]
        b = -1
        if g >= nlo and g - nlo < nnm:
            b = nmap[g - nlo]
        ip[k] = a
        inn[k] = b
        ek = e[k]
        if ek < 0 and ((a >= 0 and pdie[a] != ndie[i]) or (b >= 0 and ndie[b] != ndie[i])):
            return 1, gm, gq, e, ip, inn, giN, nb
        if a >= 0:
            giN[i] = a
        elif b >= 0:
            giN[i] = b + npn
        v = pend[a] if (ek < 0 and a >= 0) else ek
        if v < 0:
            v = big
        if v > nb[i]:
            nb[i] = v
    return 0, gm, gq, e, ip, inn, giN, nb


@accel.jit
def _ngate_bases(nbase, gm, e, ip, inn, padm, Tp, pplane, pend):
    """``engine._gate_bases_found`` from ``_ngate_scan``'s look-ups, loop form (compiled by numba): a gate's
    decided end, or the end of a pending gate kept (admitted before its plane's ``Tp``), raises the command's
    base; any other gate becomes its position in the batch (``gidx``). Returns (the first k whose gate is found
    nowhere, -1 for none; base, gidx)."""
    base = nbase.copy()
    gidx = np.full(nbase.shape[0], -1, np.int64)
    for k in range(gm.shape[0]):
        i = gm[k]
        v = e[k]
        if v < 0:
            a = ip[k]
            v = pend[a] if (a >= 0 and padm[a] < Tp[pplane[a]]) else -1
        if v >= 0:
            if v > base[i]:
                base[i] = v
        else:
            b = inn[k]
            if b < 0:
                return k, base, gidx
            gidx[i] = b
    return -1, base, gidx


@accel.jit
def _pending_take(und, kind, plane, die, svc, pid, start, end, adm, rdy, base, gx, gate, floor, gi, dec, dec_h,
                  t_cmd, okind, oplane, odie, osvc, opid, ostart, oend, oadm, ordy, ob, ox, og, oj, of):
    """``MediaEngine._decide_cmds``'s pending set where some commands are decided, loop form (compiled by numba):
    the rows ``und`` of the run's fields and schedule gathered in one pass (``np.take``), then
    ``_pending_fields`` for base, gx, gate, join, floor. Writes the ``o*`` arrays."""
    for k in range(und.shape[0]):
        i = und[k]
        okind[k] = kind[i]
        oplane[k] = plane[i]
        odie[k] = die[i]
        osvc[k] = svc[i]
        opid[k] = pid[i]
        ostart[k] = start[i]
        oend[k] = end[i]
        oadm[k] = adm[i]
        ordy[k] = rdy[i]
    _pending_fields(und, -1, base, gx, gate, floor, gi, dec, oadm, ordy, dec_h, t_cmd, ob, ox, og, oj, of)


@accel.jit
def _decided_put(pf, plane, die, t, m, od, ot, horizon, dies, q, keep_min):
    """``MediaEngine._behind_pending``'s decided commands (``m``) into the planes' free times and the carried
    slot releases, loop form (compiled by numba), in one pass: ``pf[plane] = max(pf[plane], t)`` (in place,
    ``_max_at``), and ``diestage.DieCarry.put(die[m], t[m], horizon)`` from its releases ``od``/``ot``: the
    releases after ``horizon``, in order, after the carried ones; where a die then has more than ``q``, its ``q``
    largest (``_carry_keep``, from ``keep_min`` releases on). Returns (status: 0 nothing added (the carried ones
    stand), 1 the new carried releases, 2 the concatenation, whose cut is left to the numpy form; die, time)."""
    n = m.shape[0]
    k = 0
    for i in range(n):
        if m[i]:
            p = plane[i]
            if t[i] > pf[p]:
                pf[p] = t[i]
            if t[i] > horizon:
                k += 1
    if k == 0:
        return 0, od, ot
    no = od.shape[0]
    d = np.empty(no + k, np.int64)
    tt = np.empty(no + k, np.int64)
    for j in range(no):
        d[j] = od[j]
        tt[j] = ot[j]
    j = no
    for i in range(n):
        if m[i] and t[i] > horizon:
            d[j] = die[i]
            tt[j] = t[i]
            j += 1
    if no + k > q:
        cnt = np.zeros(dies, np.int64)
        mx = 0
        for j in range(no + k):
            cnt[d[j]] += 1
            if cnt[d[j]] > mx:
                mx = cnt[d[j]]
        if mx > q:
            if no + k >= keep_min:
                d2, t2 = _carry_keep(d, tt, dies, q)
                return 1, d2, t2
            return 2, d, tt
    return 1, d, tt


@accel.jit
def _min_where(a, key, neg):
    """The smallest ``a[i]`` where ``key[i] < 0`` (``neg``) or ``key[i] >= 0`` (not ``neg``), loop form (compiled by
    numba; ``a[key < 0].min()`` without the mask and the copy). Returns (whether there is one, that minimum)."""
    found = False
    mn = np.int64(0)
    for i in range(a.shape[0]):
        if (key[i] < 0) == neg:
            if not found or a[i] < mn:
                mn = a[i]
                found = True
    return found, mn


@accel.jit
def _event_decide(kind, start, end, pl, dd, limit, read_kind, pf0, plane_free, cd_old, ct_old):
    """``MediaEngine._array_ops``' decision after the event scheduler, loop form (compiled by numba): ``dec`` (every
    read, and every command that starts before ``limit`` or before a read of its plane starts), ``plane_free`` set to
    ``pf0`` and then to the latest end of the decided commands of each plane (``np.maximum.at``), and the carried
    releases to put: ``cd_old`` then the decided commands' dies, ``ct_old`` then their ends (the numpy form's
    concatenations, in index order). Returns (dec, die, t)."""
    n = kind.shape[0]
    lrs = np.full(pf0.shape[0], -1, np.int64)      # each plane's latest read start
    for i in range(n):
        if kind[i] == read_kind and start[i] > lrs[pl[i]]:
            lrs[pl[i]] = start[i]
    dec = np.empty(n, np.bool_)
    nd = 0
    for i in range(n):
        s = start[i]
        d = kind[i] == read_kind or s < limit or s < lrs[pl[i]]
        dec[i] = d
        if d:
            nd += 1
    plane_free[:] = pf0
    no = cd_old.shape[0]
    od = np.empty(no + nd, np.int64)
    ot = np.empty(no + nd, np.int64)
    od[:no] = cd_old
    ot[:no] = ct_old
    k = no
    for i in range(n):
        if dec[i]:
            p = pl[i]
            e = end[i]
            if e > plane_free[p]:
                plane_free[p] = e
            od[k] = dd[i]
            ot[k] = e
            k += 1
    return dec, od, ot


@accel.jit
def _read_ready(ta, t_cmd, t_read, miss, ref, E, pready):
    """``MediaEngine._reads``' data ready of a batch with buffer hits, loop form (compiled by numba): a miss's data
    is ready at its sense end ``E``, a hit's at max(arrival + t_cmd, the end of the read it refers to (``ref`` >= 0:
    ``E[ref]``; < 0: the buffered page's ready time ``pready[-1 - ref]``, clipped into range; 0 where there is none));
    q0 = arrival + t_cmd (+ t_read for a miss). Returns (rd, q0, hits, coalesced hits: ready after arrival + t_cmd)."""
    n = ta.shape[0]
    rd = np.empty(n, np.int64)
    q0 = np.empty(n, np.int64)
    npr = pready.shape[0]
    nh = 0
    nco = 0
    for i in range(n):
        early = ta[i] + t_cmd
        if miss[i]:
            rd[i] = E[i]
            q0[i] = early + t_read
        else:
            r = ref[i]
            if r >= 0:
                rb = E[r]
            elif npr:
                j = -1 - r
                if j > npr - 1:
                    j = npr - 1
                rb = pready[j]
            else:
                rb = 0
            nh += 1
            if rb > early:
                nco += 1
                rd[i] = rb
            else:
                rd[i] = early
            q0[i] = early
    return rd, q0, nh, nco


@accel.jit
def _buf_rows(bpage, bready, up, sp, sr, E1, pready):
    """``MediaEngine._reads``' buffer state of a lookup's planes, loop form (compiled by numba): row ``up[u]`` of
    ``bpage`` <- ``sp[u]``, of ``bready`` <- the ready time of each buffered page (``sr`` >= 0: ``E1[sr]``, < 0:
    ``pready[-1 - sr]`` clipped into range, 0 where there is none; 0 for an empty slot, ``sp`` < 0), in place."""
    npr = pready.shape[0]
    for u in range(up.shape[0]):
        p = up[u]
        for c in range(sp.shape[1]):
            pg = sp[u, c]
            bpage[p, c] = pg
            if pg >= 0:
                r = sr[u, c]
                if r >= 0:
                    bready[p, c] = E1[r]
                elif npr:
                    j = -1 - r
                    if j < 0:
                        j = 0
                    if j > npr - 1:
                        j = npr - 1
                    bready[p, c] = pready[j]
                else:
                    bready[p, c] = 0
            else:
                bready[p, c] = 0


@accel.jit
def _event_inputs(ri, r_read, plane_read, die_read, t_read, kind_c, base, gx, gidx, plane_c, die_c, svc_c, join_c,
                  floor_c):
    """``MediaEngine._array_ops``' inputs of the event scheduler, loop form (compiled by numba): the reads ``ri``
    (kind 0 = READ, their arrival, plane, die, service ``t_read``, no gate, join or floor) then the other commands
    (ready = base + gx where ungated (``gidx`` < 0), else base with gate_x = gx; the gate index as given). Returns
    (kind, ready, plane, die, service, gate, gate_x, join, floor)."""
    nri = ri.shape[0]
    nc = kind_c.shape[0]
    n = nri + nc
    kind = np.empty(n, np.uint8)
    ready = np.empty(n, np.int64)
    pl = np.empty(n, np.int64)
    dd = np.empty(n, np.int64)
    sv = np.empty(n, np.int64)
    gate = np.empty(n, np.int64)
    gxa = np.empty(n, np.int64)
    join = np.empty(n, np.int64)
    floor = np.empty(n, np.int64)
    for k in range(nri):
        i = ri[k]
        kind[k] = 0
        ready[k] = r_read[i]
        pl[k] = plane_read[i]
        dd[k] = die_read[i]
        sv[k] = t_read
        gate[k] = -1
        gxa[k] = 0
        join[k] = -1
        floor[k] = 0
    for j in range(nc):
        k = nri + j
        kind[k] = kind_c[j]
        if gidx[j] < 0:
            ready[k] = base[j] + gx[j]
            gxa[k] = 0
        else:
            ready[k] = base[j]
            gxa[k] = gx[j]
        pl[k] = plane_c[j]
        dd[k] = die_c[j]
        sv[k] = svc_c[j]
        gate[k] = gidx[j]
        join[k] = join_c[j]
        floor[k] = floor_c[j]
    return kind, ready, pl, dd, sv, gate, gxa, join, floor


@accel.jit
def _event_run(ri, r_read, plane_read, die_read, t_read, kind_c, base_c, gx, gate_pid, pid_c, ends_a, ends_base,
               old_id, old_end, plane_c, die_c, svc_c, join_c, floor_c, t_cmd, Q, plane_free, evd, carry_d, carry_t,
               lazy_lim, skipped, limit, read_kind, put_h, dies, keep_min):
    """``MediaEngine._array_ops``' run of the event scheduler in one compiled call (wt/fuse14: the Python between
    these steps was a fixed cost of every batch): the commands' gates (``gate_pid``: a decided program's end, by
    ``_ends_get`` over the ``engine._Ends`` arrays, raises the base ``base_c``; an undecided one is the position of
    that id in ``pid_c`` (``_pid_map``, else a sorted search: the ids are unique) plus the reads' count, the gate
    index ``gidx``), the scheduler's inputs (``_event_inputs``), the carried slot
    releases of the dies in ``evd`` taken from (``carry_d``, ``carry_t``) (``DieCarry.take``), the scheduler
    (``eventsim.simulate_compiled``: ``_simulate_split`` with round 15's ``lazy_lim`` / ``skipped``, else
    ``_simulate_loop`` on all of it; ``plane_free`` in place), the decision (``_event_decide``: ``plane_free`` reset
    and raised to the decided commands' ends) and the releases put back after ``put_h`` (``DieCarry.put``, by
    ``_decided_put`` with every release marked and a scratch plane). Returns (status: 1 done; 0 a gate names a
    command that never runs (the caller raises; state then undefined, as there); -1 a gate names an id that is
    neither decided nor in ``pid_c`` (nothing changed; ``missing`` is that id), start, end, admission, ready,
    decided, gidx, the put's status (``_decided_put``'s: 2 = the concatenation, to be cut by the numpy form), carried
    die, time, missing)."""
    nri = ri.shape[0]
    nc = kind_c.shape[0]
    base = base_c.copy()
    gidx = np.full(nc, -1, np.int64)
    ng = 0
    for j in range(nc):
        if gate_pid[j] >= 0:
            ng += 1
    if ng:
        gm = np.empty(ng, np.int64)
        k = 0
        for j in range(nc):
            if gate_pid[j] >= 0:
                gm[k] = j
                k += 1
        e = _ends_get(ends_a, ends_base, old_id, old_end, gate_pid[gm])
        nu = 0
        for k in range(ng):
            if e[k] >= 0:
                j = gm[k]
                if e[k] > base[j]:
                    base[j] = e[k]
            else:
                nu += 1
        if nu:
            lo, pmap = _pid_map(pid_c)
            so = np.empty(0, np.int64)
            sp = np.empty(0, np.int64)
            if pmap.shape[0] == 0:
                so = np.argsort(pid_c, kind="mergesort")
                sp = pid_c[so]
            for k in range(ng):
                if e[k] >= 0:
                    continue
                q = gate_pid[gm[k]]
                ix = -1
                if pmap.shape[0]:
                    if q >= lo and q - lo < pmap.shape[0]:
                        ix = pmap[q - lo]
                elif sp.shape[0]:
                    i = np.searchsorted(sp, q)
                    if i > sp.shape[0] - 1:
                        i = sp.shape[0] - 1
                    if sp[i] == q:
                        ix = so[i]
                if ix < 0:
                    z = np.zeros(0, np.int64)
                    return (-1, z, z, z, z, np.zeros(0, np.bool_), gidx, 0, z, z, q)
                gidx[gm[k]] = ix + nri
    kind, ready, pl, dd, sv, gate, gxa, join, floor = _event_inputs(ri, r_read, plane_read, die_read, t_read, kind_c,
                                                                    base, gx, gidx, plane_c, die_c, svc_c, join_c,
                                                                    floor_c)
    cd, ct, rd, rt = _carry_split(carry_d, carry_t, evd)
    pf0 = plane_free.copy()
    k64 = kind.astype(np.int64)
    start, end, adm, rdy, ok, split = _simulate_split(k64, ready, pl, dd, sv, t_cmd, Q, plane_free, cd, ct, gate,
                                                      gxa, floor, True, join, lazy_lim, skipped)
    if not split:
        start, end, adm, rdy, ok = _simulate_loop(k64, ready, pl, dd, sv, t_cmd, Q, plane_free, cd, ct, gate, gxa,
                                                  floor, True, join)
    if not ok:
        return (0, start, end, adm, rdy, np.zeros(0, np.bool_), gidx, 0, rd, rt, np.int64(0))
    dec, sd, st = _event_decide(kind, start, end, pl, dd, limit, read_kind, pf0, plane_free, cd, ct)
    scratch = np.zeros(1, np.int64)
    status, od, ot = _decided_put(scratch, np.zeros(sd.shape[0], np.int64), sd, st, np.ones(sd.shape[0], np.bool_),
                                  rd, rt, put_h, dies, Q, keep_min)
    return (1, start, end, adm, rdy, dec, gidx, status, od, ot, np.int64(0))


@accel.jit
def _split_items(commit, ch, rd, x, seq, serial, q0):
    """``MediaEngine._channel_stage``'s split of a batch's channel items into those decided now (``commit``) and
    those deferred, loop form (compiled by numba): the same rows, in order, as gathering each field by
    ``np.flatnonzero(commit)`` and by ``np.flatnonzero(~commit)``. Returns (ci, di, the six fields at ci, the six
    at di)."""
    n = commit.shape[0]
    nc = 0
    for i in range(n):
        if commit[i]:
            nc += 1
    nd = n - nc
    ci = np.empty(nc, np.int64)
    di = np.empty(nd, np.int64)
    a = 0
    b = 0
    for i in range(n):
        if commit[i]:
            ci[a] = i
            a += 1
        else:
            di[b] = i
            b += 1
    cur = np.empty((6, nc), np.int64)
    dfr = np.empty((6, nd), np.int64)
    for f in range(6):
        v = ch if f == 0 else rd if f == 1 else x if f == 2 else seq if f == 3 else serial if f == 4 else q0
        for k in range(nc):
            cur[f, k] = v[ci[k]]
        for k in range(nd):
            dfr[f, k] = v[di[k]]
    return ci, di, cur, dfr


@accel.jit
def _event_merge(plane, lpn, seq, ip, ipg, iseq):
    """``MediaEngine._reads``' lookup events, loop form (compiled by numba): the reads (``plane``, ``lpn``, ``seq``)
    and the invalidations (``ip``, ``ipg``, ``iseq``) in seq order, a read before an invalidation of the same seq
    (the stable argsort of the concatenation), as (plane, page, is-read, read index or 0), by a merge where each
    part's seqs do not decrease; (False, empty arrays) where one does (the caller sorts)."""
    n = seq.shape[0]
    m = iseq.shape[0]
    for i in range(1, n):
        if seq[i] < seq[i - 1]:
            return False, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.bool_), np.empty(0, np.int64)
    for j in range(1, m):
        if iseq[j] < iseq[j - 1]:
            return False, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.bool_), np.empty(0, np.int64)
    ev_p = np.empty(n + m, np.int64)
    ev_g = np.empty(n + m, np.int64)
    ev_r = np.empty(n + m, np.bool_)
    ev_i = np.empty(n + m, np.int64)
    i = 0
    j = 0
    for k in range(n + m):
        if j >= m or (i < n and seq[i] <= iseq[j]):
            ev_p[k] = plane[i]
            ev_g[k] = lpn[i]
            ev_r[k] = True
            ev_i[k] = i
            i += 1
        else:
            ev_p[k] = ip[j]
            ev_g[k] = ipg[j]
            ev_r[k] = False
            ev_i[k] = 0
            j += 1
    return True, ev_p, ev_g, ev_r, ev_i


@accel.jit
def _mixed_front(ta, lpn, nsec, top, seq, tser, media, ptx, R, pid0, C, D, P, xfer, t_cmd, store_op, atomic_op):
    """``engine._mixed_front_of`` (``MediaEngine._serve_mixed``'s page transactions -> the FTL's program inputs, the
    media reads, the buffer invalidations and the store data-in items), loop form (compiled by numba), in two
    passes instead of ~35 numpy passes: the counts, then each transaction once: its channel, die and plane, the
    store (``top`` store or atomic) through the write backpressure ring ``R`` (in place, ``_ring_loop``'s rule: each
    gated by the oldest of its plane's last B program ids, a filling store (in ``ptx``, ascending) issuing the next
    id from ``pid0``), the media read. Returns the tuple ``_mixed_front_of`` returns."""
    n = lpn.shape[0]
    B = R.shape[1]
    ns = 0
    nr = 0
    wsec = 0
    rsec = 0
    for i in range(n):
        o = top[i]
        if o == store_op or o == atomic_op:
            ns += 1
            wsec += nsec[i]
        if o != store_op:
            rsec += nsec[i]
        if media[i]:
            nr += 1
    npx = ptx.shape[0]
    pow2 = (C & (C - 1)) == 0 and (D & (D - 1)) == 0 and (P & (P - 1)) == 0
    cb = _bits(C)                             # (powers of two: shifts and masks; an integer division costs ~40
    db = _bits(D)                             # cycles)
    pbits = _bits(P)
    si = np.empty(ns, np.int64)
    gate_st = np.empty(ns, np.int64)
    iv_p = np.empty(ns, np.int64)
    iv_g = np.empty(ns, np.int64)
    iv_s = np.empty(ns, np.int64)
    s_ch = np.empty(ns, np.int64)
    s_early = np.empty(ns, np.int64)
    s_x = np.empty(ns, np.int64)
    s_ser = np.empty(ns, np.int64)
    p_lpn = np.empty(npx, np.int64)
    p_rdy = np.empty(npx, np.int64)
    p_gx = np.empty(npx, np.int64)
    p_gate = np.empty(npx, np.int64)
    p_pid = np.empty(npx, np.int64)
    ri = np.empty(nr, np.int64)
    r_ta = np.empty(nr, np.int64)
    r_lpn = np.empty(nr, np.int64)
    r_ch = np.empty(nr, np.int64)
    r_die = np.empty(nr, np.int64)
    r_pl = np.empty(nr, np.int64)
    r_x = np.empty(nr, np.int64)
    r_seq = np.empty(nr, np.int64)
    r_ser = np.empty(nr, np.int64)
    nxt = pid0
    k = 0
    f = 0
    r = 0
    for i in range(n):
        o = top[i]
        st = o == store_op or o == atomic_op
        md = media[i]
        if not (st or md):
            continue
        x = lpn[i]
        if pow2:
            c = x & (C - 1)
            d = (c << db) | ((x >> cb) & (D - 1))
            p = (d << pbits) | ((x >> (cb + db)) & (P - 1))
        else:
            c = x % C
            d = c * D + (x // C) % D
            p = d * P + (x // (C * D)) % P
        xs = xfer[nsec[i]]
        if st:
            g = R[p, 0]
            si[k] = i
            gate_st[k] = g
            iv_p[k] = p
            iv_g[k] = x
            iv_s[k] = seq[i] + 1
            s_ch[k] = c
            s_early[k] = ta[i] + t_cmd
            s_x[k] = xs
            s_ser[k] = tser[i]
            k += 1
            if f < npx and ptx[f] == i:       # a filling store: the next id, pushed into its plane's row
                for q in range(B - 1):
                    R[p, q] = R[p, q + 1]
                R[p, B - 1] = nxt
                p_lpn[f] = x
                p_rdy[f] = ta[i] + t_cmd
                p_gx[f] = xs
                p_gate[f] = g
                p_pid[f] = nxt
                nxt += 1
                f += 1
        if md:
            ri[r] = i
            r_ta[r] = ta[i]
            r_lpn[r] = x
            r_ch[r] = c
            r_die[r] = d
            r_pl[r] = p
            r_x[r] = xs
            r_seq[r] = seq[i]
            r_ser[r] = tser[i]
            r += 1
    return (ns, wsec, rsec, f, si, gate_st, p_lpn, p_rdy, p_gx, p_gate, p_pid, ri, r_ta, r_lpn, r_ch, r_die, r_pl,
            r_x, r_seq, r_ser, iv_p, iv_g, iv_s, s_ch, s_early, s_x, s_ser)


@accel.jit
def _mixed_req(a, addr, nbytes, op, serial, seq0, R, pid0, C, D, P, xfer, t_cmd, store_op, atomic_op, pb, sb):
    """``MediaEngine._serve``'s way into ``_serve_mixed`` for a batch of requests each within one page, every store
    of a whole page (no write-buffer bookkeeping: the caller checks that the write buffer is empty), loop form
    (compiled by numba): the page transactions (``_expand``: page, sectors; seq = 2 (``seq0`` + i)), the media reads
    (every op but a store) and the programs (every store), then ``_mixed_front``. Returns (False, ...: empty
    arrays, ``R`` untouched) where a request spans pages or a store does not fill its page; else (True, the sector
    counts, ``_mixed_front``'s tuple)."""
    n = a.shape[0]
    spp = pb // sb
    ps = _bits(pb)                            # (both powers of two, geometry.py: shifts, not divisions)
    ss = _bits(sb)
    lpn = np.empty(n, np.int64)
    nsec = np.empty(n, np.int64)
    seq = np.empty(n, np.int64)
    media = np.empty(n, np.bool_)
    ptx = np.empty(n, np.int64)
    nst = 0
    for i in range(n):
        ad = addr[i]
        f = ad >> ps
        if (ad + nbytes[i] - 1) >> ps != f:
            n = -1
            break
        lo = (ad - (f << ps)) >> ss
        k = ((ad + nbytes[i] - (f << ps) + sb - 1) >> ss) - lo
        o = op[i]
        if o == store_op or o == atomic_op:
            if k != spp:
                n = -1
                break
            ptx[nst] = i
            nst += 1
        lpn[i] = f
        nsec[i] = k
        seq[i] = 2 * (seq0 + i)
        media[i] = o != store_op
    if n < 0:
        e = np.empty(0, np.int64)
        return (False, e) + _mixed_front(e, e, e, e, e, e, np.empty(0, np.bool_), e, R, pid0, C, D, P, xfer,
                                         t_cmd, store_op, atomic_op)
    return (True, nsec) + _mixed_front(a, lpn, nsec, op, seq, serial, media, ptx[:nst], R, pid0, C, D, P, xfer,
                                       t_cmd, store_op, atomic_op)


@accel.jit
def _split_waiting(cnt, serial, ids, arrival, done):
    """``engine._split_waiting_of`` (``MediaEngine.submit``'s requests of an in-order batch with pages still waiting,
    ``cnt`` > 0, as pending rows, and the others' completion rows), loop form (compiled by numba), in two passes
    instead of ten numpy passes. Returns the tuple ``_split_waiting_of`` returns."""
    n = cnt.shape[0]
    k = 0
    for i in range(n):
        if cnt[i] > 0:
            k += 1
    ps = np.empty(k, np.int64)
    pid = np.empty(k, np.uint64)
    pa = np.empty(k, np.int64)
    pd = np.empty(k, np.int64)
    pc = np.empty(k, np.int64)
    oid = np.empty(n - k, np.uint64)
    omod = np.empty(n - k, np.int64)
    j = 0
    h = 0
    for i in range(n):
        if cnt[i] > 0:
            ps[j] = serial[i]
            pid[j] = np.uint64(ids[i])
            pa[j] = arrival[i]
            pd[j] = done[i]
            pc[j] = cnt[i]
            j += 1
        else:
            oid[h] = np.uint64(ids[i])
            omod[h] = done[i] - arrival[i]
            h += 1
    return ps, pid, pa, pd, pc, oid, omod
