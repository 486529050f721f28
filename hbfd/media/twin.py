"""CPU twin of the device fast model (media semantics v2): the device's arithmetic in numpy.

``DeviceModelTwin(geometry).run(arrival, address, bytes, op)`` returns each request's completion time
(integer ns) as the device fast model (``runtime_cuda/src/hbf_helpers.cu``, ``hb_fast_model``) computes
it. ``tests/media/twin_ref.py`` is the same algorithm one request at a time (the literal reference the
CUDA code follows); the twin equals it exactly (``tests/media/test_twin_agreement.py``).

The algorithm (semantics v2, device flavour). Requests are taken in arrival order (ties: input order);
a request is split into page transactions (its pages, in address order) and completes with the last.
For a page transaction: ``xbytes = 64 x (distinct 64 B sectors touched)``, ``xfer = ceil(xbytes x 1e9
/ channel_bytes_per_s)``; thermal ``q`` (ppm, clipped to [1, 1e6]) scales tR and xfer each:
``scaled(x) = ceil(x x 1e6 / q)`` (t_cmd and tPROG are not scaled).

* read (load, cp.async, an atomic's first half), at the page's plane: the plane's ``page_buffers_per_plane``
  buffers are LRU by use over the plane's page accesses (reads and writes) in arrival order. A read
  whose page is in a valid buffer is a hit: ``data_ready = max(a + t_cmd, buffer ready)`` (a buffered
  page, or one still being sensed: it waits for that sense). Otherwise a miss senses, with priority
  over programs (non-preemptive): with ``cmd = a + t_cmd``, ``S`` the plane's latest sense end and ``P``
  the end of its queued programs, ``start = max(cmd, S)`` if ``P <= max(cmd, S)``; else the read goes
  before the queued programs: ``start = S`` if ``S >= cmd`` (after the reads ahead of it), else the end of
  the program running at cmd, ``P - floor((P - cmd) / tPROG) x tPROG`` (the queued programs end at
  ``P - k tPROG``), and ``P += tR`` (they wait for it). ``sense_end = S = start + tR``; the page takes the MRU buffer
  (ready = sense_end; its own stale buffer if it has one, else the LRU one) and ``data_ready =
  sense_end``. Channel (the device's ``hb_reserve``): a slot reserved in arrival order at the no-wait
  ready time ``nw`` (a miss: ``a + t_cmd + tR``; a hit: ``min(data_ready, a + t_cmd + tR)``: a hit waiting
  for a sense that a busy plane delayed holds the channel no later than its own sense would),
  ``slot = max(nw, chan_free)``, ``chan_free = slot + xfer``; the transfer at ``max(slot, data_ready)``,
  its end = the transaction's completion. No slot depends on a plane's backlog.
* write (store; an atomic's second half at its read's completion ``t``): a store's data-in needs a free
  page buffer of its plane: the B buffers hold the running and queued programs' data, so it is ready at
  ``r = max(a + t_cmd, P - (B - 1) tPROG)`` (backpressure: stores never outrun what the planes program).
  Its slot is reserved in the senses' frame at its no-wait time, ``slot = max(a + t_cmd + tR, chan_free)``,
  ``chan_free = slot + xfer``, its data-in at ``max(slot - tR, r)``, and its end is the ack (completion): a
  store does not wait behind the slots of senses still in flight, and a store waiting for a page buffer does
  not hold the channel for the reads behind it (its slot does not move with ``r``); its bytes still take
  channel slots. An atomic's data-in
  has its slot after its read's (+ t_cmd) and runs at ``max(slot, t + t_cmd)``;
  ``P = max(P, S, ack) + ceil(tPROG x xbytes / 4096)`` (amortized program, after the queued programs and
  senses; later reads go before it unless it is running). The buffer holding the page (if any) is emptied and refilled first by the plane's
  next sense (docs/design.md §3.9; the device and the engine do the same).
  So in a batch without writes, with P buffers, a read hits iff its page is among the P most recently
  accessed distinct pages of its plane; batches with writes step the planes' buffer logic (a Python loop
  over the accesses; the timing stays vectorized).

Vectorized (no Python loop per request): hit/miss depends only on the page sequence (P <= 2: the page
equals the previous access's or, at the start of a run of equal pages, the page of the run before
the previous run); the source of a hit is the latest miss of its page (a forward fill per (plane,
page)); the senses of a plane without programs, and chan_free over transactions, are Lindley recursions
(``lindley.segmented_fcfs``); planes with programs are stepped one event at a time (``_plane_events``).
Atomics couple the two stages (an atomic's write follows its read, which waits for the plane; a program
waits for its data-in): where a channel carries writes, the two stages are
iterated from a lower bound of the acks to their fixed point, which is the exact sequential result
(both stages are monotone and every value depends only on earlier transactions). Only a channel
and its own planes interact, so only channels whose acks still change are recomputed.

``channel_order="calendar"`` (an option; the default "arrival" is the above, the device's build): the channel is a
per-channel slot calendar taken first-fit at each transaction's data-ready time (stores at their buffer-free
time, no senses' frame), defined in ``hbfd/media/chancal.py``; the timing is then one compiled pass in arrival
order (``chancal._calendar_pass``) after the vectorized buffer logic. Measured against the engine (docs/RESULTS.md
"Issue 14: the channel calendar (CPU, 2026-12-06)"): no overlap, the same agreement.

State carried across ``run`` calls (sense_free, prog_free, chan_free, the buffers): feeding a time-ordered stream
in batches gives the one-batch result.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hbfcommon.abi import HBF_OP_ATOMIC, HBF_OP_CPASYNC, HBF_OP_LOAD, HBF_OP_STORE
from hbfcommon.errors import ConfigError

from . import chancal
from .geometry import PAGE_BYTES, SECTOR_BYTES, MediaError, MediaGeometry
from .lindley import segment_ends, segment_starts, segmented_fcfs

__all__ = ["DeviceModelTwin", "thermal_scale"]

Q_FULL = 1_000_000
_R, _W = 0, 1           # access kinds
_MAX_TIME = 1 << 62


def thermal_scale(x: np.ndarray, q_ppm: np.ndarray | int) -> np.ndarray:
    """ceil(x * 1e6 / q) with q clipped to [1, 1e6] (``hbf_thermal_scale``)."""
    q = np.clip(np.asarray(q_ppm, np.int64), 1, Q_FULL)
    return -(-np.asarray(x, np.int64) * Q_FULL // q)


def _read_start(cmd, sense_free, prog_free, t_prog):
    """Vectorized sense start with read priority (see ``DeviceModelTwin._plane_events``): (start, displaced)."""
    base = np.maximum(cmd, sense_free)
    disp = prog_free > base
    if t_prog:
        running = prog_free - (prog_free - cmd) // t_prog * t_prog
    else:
        running = prog_free
    start = np.where(disp, np.where(sense_free >= cmd, sense_free, running), base)
    return start, disp


class DeviceModelTwin:
    """The device fast model on the CPU (see module doc). ``counts`` accumulates statistics."""

    max_fixed_point_iterations = 8     # then the stepped solver (exact too) for the channels still moving

    def __init__(self, geometry: MediaGeometry, *, trace: bool = False, channel_order: str = "arrival",
                 ring_words: int = chancal.RING_WORDS, quantum_ns: int = chancal.QUANTUM_NS) -> None:
        g = self.g = geometry
        if channel_order not in chancal.CHANNEL_ORDERS:
            raise ConfigError(f"device-model twin: channel_order {channel_order!r}: must be one of "
                              f"{', '.join(chancal.CHANNEL_ORDERS)}", field="channel_order", value=channel_order)
        ring_words = int(ring_words)
        if ring_words < 2 or ring_words & (ring_words - 1):
            raise ConfigError(f"device-model twin: ring_words {ring_words}: must be a power of two >= 2",
                              field="ring_words", value=ring_words)
        # the channel order (docs/design.md §3.9): "arrival", slots reserved in arrival order at the no-wait
        # time (the device model's); "calendar", each channel's quanta taken first-fit at data ready
        # (hbfd/media/chancal.py; twin only: no device build)
        self.channel_order = channel_order
        self.ring_words = ring_words
        quantum_ns = int(quantum_ns)
        if quantum_ns < 1:
            raise ConfigError(f"device-model twin: quantum_ns {quantum_ns}: must be >= 1", field="quantum_ns",
                              value=quantum_ns)
        self.quantum_ns = quantum_ns
        self.rings = chancal.new_rings(g.channels, ring_words) if channel_order == "calendar" else None
        # trace (analysis): every channel transfer as (channel, start, end) arrays per batch
        self.transfers: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = [] if trace else None
        self.P = g.page_buffers_per_plane
        if self.P > 2:
            raise ConfigError(f"device-model twin: page_buffers_per_plane = {self.P}: the vectorized twin "
                              "models 1 or 2 page buffers per plane", field="page_buffers_per_plane",
                              value=self.P)
        self.sense_free = np.zeros(g.planes, np.int64)    # per plane: its latest sense end
        self.prog_free = np.zeros(g.planes, np.int64)     # per plane: the end of its queued programs
        self.chan_free = np.zeros(g.channels, np.int64)
        # buffers per plane, slot 0 = MRU: page (-1 empty), ready (a store empties its page's buffer, so a
        # buffer that holds a page holds valid data)
        self.buf_page = np.full((g.planes, self.P), -1, np.int64)
        self.buf_ready = np.zeros((g.planes, self.P), np.int64)
        self.counts = {k: 0 for k in ("requests", "transactions", "senses", "hits", "coalesced", "writes",
                                      "fixed_point_iterations", "max_iterations", "stepped_channels")}

    # ------------------------------------------------------------------ input
    def run_batch(self, batch: np.ndarray, q_ppm: Any = Q_FULL) -> np.ndarray:
        """``run`` for a ``REQUEST_BATCH_DTYPE`` array (ids ignored): completion times, input order."""
        return self.run(batch["arrival_ns"], batch["media_address"], batch["bytes"], batch["op"], q_ppm)

    def run(self, arrival, address, nbytes, op, q_ppm: Any = Q_FULL) -> np.ndarray:
        """Completion time (int64 ns) of every request, in input order. ``q_ppm``: one value or one
        per request."""
        a = np.asarray(arrival).astype(np.int64).ravel()
        ad = np.asarray(address).astype(np.int64).ravel()
        nb = np.asarray(nbytes).astype(np.int64).ravel()
        o = np.asarray(op).astype(np.int64).ravel()
        n = len(a)
        if not len(ad) == len(nb) == len(o) == n:
            raise MediaError("device-model twin: arrival, address, bytes and op differ in length",
                             lengths=[n, len(ad), len(nb), len(o)])
        q = np.asarray(q_ppm).astype(np.int64).ravel()
        if len(q) not in (1, n):
            raise MediaError("device-model twin: q_ppm must be one value or one per request", length=len(q))
        if n == 0:
            return np.zeros(0, np.int64)
        self._validate(a, ad, nb, o)
        q = np.broadcast_to(q, (n,))
        order = np.argsort(a, kind="stable")
        done = np.empty(n, np.int64)
        done[order] = self._serve(a[order], ad[order], nb[order], o[order], q[order])
        self.counts["requests"] += n
        return done

    def _validate(self, a, ad, nb, o) -> None:
        g = self.g
        checks = (("arrival", (a < 0) | (a >= _MAX_TIME), "must be in [0, 2^62)"),
                  ("bytes", nb < 1, "must be >= 1"),
                  ("address", (ad < 0) | (ad + nb > g.capacity_bytes),
                   f"[address, address + bytes) must lie in the media's {g.capacity_bytes} B"),
                  ("op", ~np.isin(o, (HBF_OP_LOAD, HBF_OP_STORE, HBF_OP_ATOMIC, HBF_OP_CPASYNC)),
                   "must be 0 load, 1 store, 2 atomic or 3 cp.async"))
        for name, bad, msg in checks:
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise MediaError(f"device-model twin: request {i}: {name} {msg}", field=name, index=i,
                                 arrival=int(a[i]), address=int(ad[i]), bytes=int(nb[i]), op=int(o[i]))

    # ------------------------------------------------------------------ model
    def _where(self, lpn):
        g = self.g
        C, D, B = g.channels, g.dies_per_channel, g.planes_per_die
        ch = lpn % C
        return ch, (ch * D + (lpn // C) % D) * B + (lpn // (C * D)) % B

    def _serve(self, a, ad, nb, op, q) -> np.ndarray:
        g = self.g
        n = len(a)
        # ---- page transactions, in (arrival, input, page) order
        first = ad // PAGE_BYTES
        npg = (ad + nb - 1) // PAGE_BYTES - first + 1
        if int(npg.max()) == 1:
            req = np.arange(n, dtype=np.int64)
            lpn = first
        else:
            req = np.repeat(np.arange(n, dtype=np.int64), npg)
            lpn = first[req] + (np.arange(len(req), dtype=np.int64) - np.repeat(np.cumsum(npg) - npg, npg))
        base = lpn * PAGE_BYTES
        lo = np.maximum(ad[req], base) - base
        hi = np.minimum(ad[req] + nb[req], base + PAGE_BYTES) - base
        xbytes = SECTOR_BYTES * ((hi + SECTOR_BYTES - 1) // SECTOR_BYTES - lo // SECTOR_BYTES)
        T = len(req)
        ch, plane = self._where(lpn)
        ta, top, tq = a[req], op[req], q[req]
        xfer = thermal_scale(-(-xbytes * 1_000_000_000 // g.channel_bytes_per_s), tq)
        t_read = thermal_scale(np.full(T, g.t_read_ns, np.int64), tq)
        prog = -(-g.t_prog_ns * xbytes // PAGE_BYTES)
        has_r = top != HBF_OP_STORE
        has_w = (top == HBF_OP_STORE) | (top == HBF_OP_ATOMIC)
        is_atomic = top == HBF_OP_ATOMIC

        # ---- plane accesses: a read then a write (atomic), in transaction order; the carried buffers
        # of the touched planes go first as virtual reads (LRU first)
        cnt = has_r.astype(np.int64) + has_w
        if bool((cnt == 1).all()):
            acc_tx = np.arange(T, dtype=np.int64)
            kind = np.where(has_w, _W, _R)
        else:
            acc_tx = np.repeat(np.arange(T, dtype=np.int64), cnt)
            second = np.zeros(len(acc_tx), bool)
            second[1:] = acc_tx[1:] == acc_tx[:-1]
            kind = np.where(has_w[acc_tx] & (~has_r[acc_tx] | second), _W, _R)
        upl = np.unique(plane)
        vb = self.buf_page[upl] >= 0
        vslot = np.nonzero(vb[:, ::-1])            # per plane: LRU slot first
        v_pl = upl[vslot[0]]
        v_sl = self.P - 1 - vslot[1]
        nv = len(v_pl)
        pl_all = np.concatenate([v_pl, plane[acc_tx]])
        pg_all = np.concatenate([self.buf_page[v_pl, v_sl], lpn[acc_tx]])
        kind_all = np.concatenate([np.full(nv, _R, kind.dtype), kind])
        op_ = np.argsort(pl_all, kind="stable")    # plane order; within a plane, access order
        spl, spg, skind = pl_all[op_], pg_all[op_], kind_all[op_]
        virt = op_ < nv
        M = len(op_)
        # runs of equal page per plane
        brk = np.ones(M, bool)
        brk[1:] = (spl[1:] != spl[:-1]) | (spg[1:] != spg[:-1])
        rst = np.flatnonzero(brk)
        rid = np.cumsum(brk) - 1
        rlast = segment_ends(rst, M)
        cand = np.zeros(M, bool)
        inrun = ~brk
        cand[1:] = inrun[1:] & (skind[:-1] == _R)           # same run: the previous access was a read
        if self.P >= 2:                                     # run start: the run before the previous one
            r = rid[rst]
            r2 = np.maximum(r - 2, 0)
            ok = (r >= 2) & (spl[rst[r2]] == spl[rst]) & (spg[rst[r2]] == spg[rst]) & (skind[rlast[r2]] == _R)
            cand[rst] = ok
        real_r = (skind == _R) & ~virt
        stepped = None
        if bool(((skind == _W) & ~virt).any()):
            # a write removes its page's buffer (it becomes empty, refilled first): the last-two-runs form
            # does not hold, so the planes' accesses are stepped (logic only; the timing stays vectorized)
            cand, stepped = self._buffers_stepped(spl, spg, skind)
        hit = cand & real_r
        miss = real_r & ~hit
        # source of every read (the latest miss of its page on its plane, or a carried valid buffer)
        src_flag = miss | (virt & (skind == _R))
        span = int(spg.max()) + 1
        if span * self.g.planes < _MAX_TIME:
            key = spl * span + spg
            o2 = np.argsort(key, kind="stable")
            g2 = segment_starts(key[o2])
        else:
            o2 = np.lexsort((spg, spl))
            brk2 = np.ones(M, bool)
            brk2[1:] = (spl[o2][1:] != spl[o2][:-1]) | (spg[o2][1:] != spg[o2][:-1])
            g2 = np.flatnonzero(brk2)
        gid = np.zeros(M, np.int64)
        gid[g2[1:]] = 1
        np.cumsum(gid, out=gid)
        ff = np.maximum.accumulate(np.where(src_flag[o2], np.arange(M, dtype=np.int64), -1))
        src = np.full(M, -1, np.int64)
        okf = ff >= g2[gid]
        src[o2[okf]] = o2[ff[okf]]
        if bool((src[hit] < 0).any()):
            raise MediaError("internal: device-model twin: a buffer hit without its sense")
        # sorted access -> transaction
        acc_s = np.where(virt, -1, acc_tx[np.maximum(op_ - nv, 0)])
        vready = np.zeros(M, np.int64)
        vi = np.flatnonzero(virt)
        vready[vi] = self.buf_ready[v_pl[op_[vi]], v_sl[op_[vi]]]

        if self.channel_order == "calendar":
            d_tx, sense_end_acc = self._timing_calendar(ta, ch, plane, top, t_read, xfer, prog, acc_s, real_r, miss,
                                                        src, vready, virt)
        else:
            # ---- plane events (misses, programs) in plane order; channel jobs in transaction order
            ev = np.flatnonzero(miss | ((skind == _W) & ~virt))
            ev_tx = acc_s[ev]
            ev_w = skind[ev] == _W
            ev_pl = spl[ev]
            ev_serv = np.where(ev_w, prog[ev_tx], t_read[ev_tx])
            ev_rdy0 = ta[ev_tx] + g.t_cmd_ns
            rd = np.flatnonzero(real_r)                          # real reads (sorted-access index)
            rd_tx = acc_s[rd]
            oc = np.argsort(ch, kind="stable")
            ch_s = ch[oc]
            serv_tx = np.where(is_atomic, 2 * xfer + g.t_cmd_ns, xfer)   # an atomic: read, t_cmd, data-in
            serv = serv_tx[oc]
            # the acks' lower bound: data-in of an idle channel (atomic: after its read's idle transfer)
            ack = np.where(is_atomic, ta + 2 * (g.t_cmd_ns + xfer), ta + g.t_cmd_ns + xfer)
            st_only = top == HBF_OP_STORE
            st_shift = np.where(st_only, t_read, 0)              # a store's slot: tR ahead of its data-in
            # a store's data-in needs a free page buffer of its plane: the B buffers hold the running and queued
            # programs' data, which end at P - k tPROG: one is free from P - (B - 1) tPROG
            buf_hold = (self.P - 1) * g.t_prog_ns
            st_ev = np.flatnonzero(ev_w & st_only[ev_tx])
            ev_first = np.ones(len(ev), bool)
            ev_first[1:] = ev_pl[1:] != ev_pl[:-1]
            ev_ack_idx = np.flatnonzero(ev_w)
            sense_end_acc = np.zeros(M, np.int64)
            iters = 0
            active_ch = None                                     # None: all channels
            d_tx = np.zeros(T, np.int64)
            slot_tx = np.zeros(T, np.int64)                      # channel slot ends (what the channel carries)
            pe_last = np.zeros(len(ev), np.int64)
            ev_sf = np.zeros(len(ev), np.int64)                  # the plane's sense / program tails after each event
            ev_pf = np.zeros(len(ev), np.int64)
            while True:
                iters += 1
                ev_rdy = ev_rdy0.copy()
                ev_rdy[ev_ack_idx] = ack[ev_tx[ev_ack_idx]]
                if active_ch is None:
                    pe_last, ev_sf, ev_pf = self._plane_events(ev_rdy, ev_serv, ev_pl, ev_w)
                else:       # only the channels whose acks changed (a channel and its planes interact alone)
                    i_ev = np.flatnonzero(np.isin(ch[ev_tx], active_ch))
                    pe_last[i_ev], ev_sf[i_ev], ev_pf[i_ev] = self._plane_events(ev_rdy[i_ev], ev_serv[i_ev],
                                                                                 ev_pl[i_ev], ev_w[i_ev])
                sense_end_acc[ev] = pe_last
                # read data-ready: a miss at its sense end, a hit at max(a + t_cmd, its source's ready)
                src_ready = np.where(virt, vready, sense_end_acc)
                rready = np.where(hit[rd], np.maximum(ta[rd_tx] + g.t_cmd_ns, src_ready[src[rd]]), sense_end_acc[rd])
                jready = ta + g.t_cmd_ns                         # stores: data-in from arrival + t_cmd, once a
                if len(st_ev):                                   # page buffer of the plane is free (backpressure)
                    pb = np.where(ev_first[st_ev], self.prog_free[ev_pl[st_ev]], ev_pf[np.maximum(st_ev - 1, 0)])
                    jready[ev_tx[st_ev]] = np.maximum(jready[ev_tx[st_ev]], pb - buf_hold)
                jready[rd_tx] = rready
                # the channel slot is reserved in arrival order at the no-wait ready time (a sense: a + t_cmd + tR;
                # a hit: its buffer's ready, at most that; a store: in the senses' frame, a + t_cmd + tR, whatever
                # its page buffer wait, its data-in at max(slot - tR, buffer free)); the transfer at max(slot, data ready)
                nowait = ta + g.t_cmd_ns + st_shift
                nw_sense = ta[rd_tx] + g.t_cmd_ns + t_read[rd_tx]
                nowait[rd_tx] = np.where(miss[rd], nw_sense, np.minimum(rready, nw_sense))
                if active_ch is None:
                    slot_tx[oc] = segmented_fcfs(nowait[oc], serv, ch_s, self.chan_free)
                else:
                    ij = np.flatnonzero(np.isin(ch_s, active_ch))
                    slot_tx[oc[ij]] = segmented_fcfs(nowait[oc[ij]], serv[ij], ch_s[ij], self.chan_free)
                d_tx = np.maximum(slot_tx - serv_tx - st_shift, jready) + serv_tx
                if not has_w.any():
                    break
                new_ack = np.where(has_w, d_tx, ack)
                changed = new_ack != ack
                if not changed.any():
                    break
                active_ch = np.unique(ch[changed])
                ack = new_ack
                if iters == self.max_fixed_point_iterations:
                    # a long chain (writes far beyond what the planes sustain): the exact acks of the
                    # channels still moving, one transaction per channel per step; the next pass is exact
                    r_acc = np.full(T, -1, np.int64)
                    r_acc[rd_tx] = rd
                    ack = self._stepped_acks(active_ch, oc, ch_s, ta, plane, t_read, serv_tx, prog, has_w, r_acc,
                                             hit, miss, src, vready, ack, st_shift, buf_hold)
                    self.counts["stepped_channels"] += len(active_ch)
            self.counts["fixed_point_iterations"] += iters
            self.counts["max_iterations"] = max(self.counts["max_iterations"], iters)

            # ---- carried state
            if len(ev):
                est = segment_starts(ev_pl)
                eend = segment_ends(est, len(ev))
                self.sense_free[ev_pl[eend]] = ev_sf[eend]
                self.prog_free[ev_pl[eend]] = ev_pf[eend]
            cst = segment_starts(ch_s)
            cend = segment_ends(cst, T)
            self.chan_free[ch_s[cend]] = slot_tx[oc[cend]]
        src_ready = np.where(virt, vready, sense_end_acc)
        last_ready = np.where(skind == _R, src_ready[np.maximum(src, 0)], 0)  # ready of a valid access's buffer
        ps = segment_starts(spl)
        rs_pl = spl[rst]
        last_run = np.searchsorted(rst, segment_ends(ps, M), "right") - 1    # last run of each plane
        pls = spl[ps]
        if stepped is not None:
            self.buf_page[pls] = -1
            self.buf_ready[pls] = 0
            for pl, lst in stepped.items():
                for slot, (page, j) in enumerate(lst):
                    self.buf_page[pl, slot] = page
                    self.buf_ready[pl, slot] = last_ready[j]
        else:                                   # no writes: the last P runs of each plane, MRU first
            for slot in range(self.P):
                rr = last_run - slot
                okr = (rr >= 0)
                okr[okr] &= rs_pl[rr[okr]] == pls[okr]
                j = rlast[np.maximum(rr, 0)]
                self.buf_page[pls, slot] = np.where(okr, spg[j], -1)
                self.buf_ready[pls, slot] = np.where(okr, last_ready[j], 0)

        # ---- counts, completions
        c = self.counts
        c["transactions"] += T
        c["senses"] += int(miss.sum())
        c["hits"] += int(hit.sum())
        hi_ = np.flatnonzero(hit)
        c["coalesced"] += int((src_ready[src[hi_]] > ta[acc_s[hi_]] + g.t_cmd_ns).sum())
        c["writes"] += int(has_w.sum())
        if self.transfers is not None and self.channel_order == "arrival":
            self.transfers.append((ch.copy(), d_tx - serv_tx, d_tx.copy()))
        if T == n:
            return np.maximum(d_tx, a)
        return np.maximum(np.maximum.reduceat(d_tx, segment_starts(req)), a)

    def _timing_calendar(self, ta, ch, plane, top, t_read, xfer, prog, acc_s, real_r, miss, src, vready, virt):
        """The timing with the channel calendar (``chancal._calendar_pass``: the planes and the claims, one
        transaction at a time): (completion per transaction, sense end / carried ready per sorted access)."""
        g = self.g
        T = len(ta)
        rd = np.flatnonzero(real_r)
        rd_tx = acc_s[rd]
        r_acc = np.full(T, -1, np.int64)
        r_acc[rd_tx] = rd
        miss_tx = np.zeros(T, np.uint8)
        miss_tx[rd_tx] = miss[rd]
        src_tx = np.full(T, -1, np.int64)
        src_tx[rd_tx] = src[rd]
        kind = np.where(top == HBF_OP_STORE, 1, np.where(top == HBF_OP_ATOMIC, 2, 0)).astype(np.int64)
        ready_acc = np.where(virt, vready, 0).astype(np.int64)
        done = np.empty(T, np.int64)
        xs1 = np.empty(T, np.int64)
        xs2 = np.empty(T, np.int64)
        tags, busy, cnt = self.rings
        chancal.calendar_pass(ta, ch.astype(np.int64), plane.astype(np.int64), kind, t_read, xfer, prog, miss_tx,
                              r_acc, src_tx, ready_acc, self.sense_free, self.prog_free, tags, busy, cnt,
                              int(g.t_cmd_ns), int(g.t_prog_ns), int((self.P - 1) * g.t_prog_ns), self.quantum_ns,
                              self.ring_words, done, xs1, xs2)
        self.counts["fixed_point_iterations"] += 1
        self.counts["max_iterations"] = max(self.counts["max_iterations"], 1)
        if self.transfers is not None:                 # every claim: (channel, start, end)
            two = xs2 >= 0
            self.transfers.append((np.concatenate([ch, ch[two]]), np.concatenate([xs1, xs2[two]]),
                                   np.concatenate([xs1 + xfer, xs2[two] + xfer[two]])))
        return done, ready_acc

    def _plane_events(self, rdy, serv, pl, w):
        """Senses and programs of planes (events grouped by plane, access order within; ``rdy``: a + t_cmd
        for a sense, the ack for a program) from the carried tails: (end of each event, the plane's sense
        tail and program tail after it). Reads have priority (``_read_start``). A plane with no program in
        the batch whose carried programs end by its first sense's command is plain FCFS (Lindley); the
        others are stepped one event at a time."""
        n = len(rdy)
        end = np.empty(n, np.int64)
        sf_after = np.empty(n, np.int64)
        pf_after = np.empty(n, np.int64)
        if n == 0:
            return end, sf_after, pf_after
        st = segment_starts(pl)
        lens = np.diff(np.append(st, n))
        seg_w = np.add.reduceat(w.astype(np.int64), st) > 0
        simple = np.repeat(~seg_w & (self.prog_free[pl[st]] <= rdy[st]), lens)
        if simple.any():
            i = np.flatnonzero(simple)
            end[i] = segmented_fcfs(rdy[i], serv[i], pl[i], np.maximum(self.sense_free, self.prog_free))
            sf_after[i] = end[i]
            pf_after[i] = self.prog_free[pl[i]]
        i = np.flatnonzero(~simple)
        if len(i):
            T = self.g.t_prog_ns
            e_l, s_l, p_l = [], [], []
            cur = -1
            S = P = 0
            for pl_, r, sv, wr in zip(pl[i].tolist(), rdy[i].tolist(), serv[i].tolist(), w[i].tolist()):
                if pl_ != cur:
                    cur, S, P = pl_, int(self.sense_free[pl_]), int(self.prog_free[pl_])
                if wr:                                   # a program: after the queued programs and senses
                    P = max(P, S, r) + sv
                    e_l.append(P)
                else:                                    # a sense (r = a + t_cmd)
                    base = r if r > S else S
                    if P > base:                         # programs queued past its command: it goes first
                        start = S if S >= r else (P - (P - r) // T * T if T else P)
                        P += sv
                    else:
                        start = base
                    S = start + sv
                    e_l.append(S)
                s_l.append(S)
                p_l.append(P)
            end[i] = e_l
            sf_after[i] = s_l
            pf_after[i] = p_l
        return end, sf_after, pf_after

    def _buffers_stepped(self, spl, spg, skind):
        """The plane buffers, stepped in plane order (accesses of a plane in their order, the carried buffers
        first as reads): a read finds a buffer of its page (a hit; it becomes MRU) or takes the MRU buffer
        (a sense; the LRU one is replaced, an empty one first); a write empties its page's buffer. Returns
        (hit candidates, {plane: [[page, last read access], ...] MRU first})."""
        M = len(spl)
        hit = np.zeros(M, bool)
        fin: dict[int, list] = {}
        P = self.P
        cur, lst = -1, None
        for j, (pl, pg, kd) in enumerate(zip(spl.tolist(), spg.tolist(), skind.tolist())):
            if pl != cur:
                cur, lst = pl, fin.setdefault(pl, [])
            k = next((i for i, e in enumerate(lst) if e[0] == pg), -1)
            if kd == _R:
                if k >= 0:
                    e = lst.pop(k)
                    e[1] = j
                    hit[j] = True
                    lst.insert(0, e)
                else:
                    lst.insert(0, [pg, j])
                    del lst[P:]
            elif k >= 0:
                lst.pop(k)
        return hit, fin

    def _stepped_acks(self, chans, oc, ch_s, ta, plane, t_read, serv_tx, prog, has_w, r_acc, hit, miss, src,
                      vready, ack, st_shift, buf_hold) -> np.ndarray:
        """The write acks of ``chans``, exact: the k-th transaction of every such channel at step k
        (vectorized across channels; a plane belongs to one channel, so no two in a step share one)."""
        t_cmd = self.g.t_cmd_ns
        sel = np.flatnonzero(np.isin(ch_s, chans))
        cs = ch_s[sel]
        st = segment_starts(cs)
        lens = np.diff(np.append(st, len(sel)))
        byl = np.argsort(-lens, kind="stable")              # longest first: the active ones are a prefix
        st, lens = st[byl], lens[byl]
        kk = np.arange(int(lens[0]))
        valid = kk[None, :] < lens[:, None]
        mat = oc[sel][np.where(valid, st[:, None] + kk[None, :], 0)]
        sf = self.sense_free.copy()
        pf = self.prog_free.copy()
        t_prog = self.g.t_prog_ns
        cf = self.chan_free.copy()
        ready_acc = vready.copy()                           # buffer ready by access: carried, then senses
        tx_miss = np.zeros(len(ta), bool)
        tx_hit = np.zeros(len(ta), bool)
        has = r_acc >= 0
        tx_miss[has] = miss[r_acc[has]]
        tx_hit[has] = hit[r_acc[has]]
        tx_src = np.where(has, src[np.maximum(r_acc, 0)], -1)
        out = ack.copy()
        na = len(lens)
        chan_of = cs[st]
        for k in range(len(kk)):
            while lens[na - 1] <= k:
                na -= 1
            tx = mat[:na, k]
            p = plane[tx]
            c = chan_of[:na]
            rdy = ta[tx] + t_cmd
            m = tx_miss[tx]
            if m.any():
                pm, trm = p[m], t_read[tx[m]]
                start, disp = _read_start(rdy[m], sf[pm], pf[pm], t_prog)
                pf[pm] += np.where(disp, trm, 0)
                se = start + trm
                sf[pm] = se
                ready_acc[r_acc[tx[m]]] = se
                rdy[m] = se
            sh = st_shift[tx]
            sto = sh > 0                                        # stores: data-in once a page buffer is free
            if sto.any():
                rdy[sto] = np.maximum(rdy[sto], pf[p[sto]] - buf_hold)
            nw = ta[tx] + t_cmd + sh                            # the no-wait ready (slot reservation; a store
            #                                                     waiting for a buffer does not hold the channel)
            if m.any():
                nw[m] += t_read[tx[m]]
            h = tx_hit[tx]
            if h.any():
                rdy[h] = np.maximum(rdy[h], ready_acc[tx_src[tx[h]]])
                nw[h] = np.minimum(rdy[h], nw[h] + t_read[tx[h]])
            slot = np.maximum(nw, cf[c])
            cf[c] = slot + serv_tx[tx]
            d = np.maximum(slot - sh, rdy) + serv_tx[tx]
            w = has_w[tx]
            if w.any():
                pw = p[w]
                pf[pw] = np.maximum(np.maximum(pf[pw], sf[pw]), d[w]) + prog[tx[w]]
                out[tx[w]] = d[w]
        return out
