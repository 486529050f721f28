"""The online NAND media engine served on hbfd's reference path.

``MediaEngine(geometry)`` implements the daemon's ``ServiceEngine`` and ``RefreshingEngine`` protocols
(``hbfd/contracts.py``): ``submit(batch)`` / ``advance(now_ns)`` / ``collect()`` / ``stats()`` /
``refresh(lpns, at_ns)``.

Timing (integer ns; all resources FCFS unless a read has priority):

* A request ``(arrival, media_address, bytes, op)`` is split into page transactions (4 KiB pages).
* Load / cp.async-load: for each page touched, a read command. Idle-device latency of one page:
  ``t_cmd + tR + ceil(xfer_bytes * 1e9 / channel_bytes_per_s)`` where ``xfer_bytes`` is the
  requested span rounded out to 64 B sectors (the whole page is sensed; only the asked sectors
  cross the channel). A request completes when its last page completes.
* Store: bytes are assembled in a per-logical-page write buffer (64 B sector mask). A store is
  accepted at ``arrival + t_cmd``; the store that fills the page triggers the page program and is
  acknowledged when the program's data-in has crossed the channel (the die holds the data), so a
  writer is back-pressured by the plane and the channel. A partial page is programmed (with a
  read-merge sense if it held data) ``write_flush_timeout_ns`` after its first store, by
  ``advance``. A load whose sectors are all in the write buffer is served from it at
  ``arrival + t_cmd``.
* Atomic: a read (or buffer hit) plus a store of the same bytes; completes at the later of both.
* Programs are out of place (``ftl.Ftl``); GC copybacks and erases are scheduled on the plane
  behind reads (read priority over program/erase). Queue depth: a die admits at most
  ``queue_depth`` outstanding commands.

Speed: read-only channels are scheduled with the exact vectorized Lindley form (plane stage by
arrival, channel stage by sense end), verified against the die queue depth; channels with writes,
GC or a binding queue depth go through the exact event scheduler (``eventsim``). Both share the
carried state (per-plane and per-channel next-free, per-die outstanding completions), so the
result within a batch is the exact FCFS/priority schedule. Across batches, planes and dies are
exact (FCFS by arrival); a channel transfer is decided only once no later arrival can overtake it
(its sense ends by latest arrival + t_cmd + tR), so cutting a time-ordered read stream into batches
changes nothing; the rest wait for more arrivals, an ``advance`` past them, or a ``collect`` after a
quiet scan (no submit since the previous collect), which decides them. Channels with programs or
GC are scheduled to the end of their batch (their state carried as next-free times).
"""
from __future__ import annotations

import heapq
import logging
from typing import Any

import numpy as np

from hbfcommon import ctl
from hbfd.contracts import COMPLETION_BATCH_DTYPE, REQUEST_BATCH_DTYPE  # noqa: F401 (re-exported)

from . import eventsim
from .eventsim import COPYBACK, ERASE, PROG, READ, Commands
from .ftl import Ftl
from .geometry import PAGE_BYTES, SECTOR_BYTES, SECTORS_PER_PAGE, MediaError, MediaGeometry
from .hist import LogHistogram
from .lindley import segment_ends, segment_starts, segmented_fcfs

log = logging.getLogger(__name__)

OP_LOAD, OP_STORE, OP_ATOMIC, OP_CPASYNC = 0, 1, 2, 3
_FULL_MASK = (1 << SECTORS_PER_PAGE) - 1
_MAX_TIME = 1 << 62


def _small_int(x: np.ndarray, n: int) -> np.ndarray:
    """Ids as int16 when they fit, so a stable argsort uses radix sort (O(n))."""
    return x.astype(np.int16) if n < (1 << 15) else x


class MediaEngine:
    """The NAND media model (see module doc)."""

    name = "media"

    def __init__(self, geometry: MediaGeometry, *, trace: bool = False) -> None:
        g = self.g = geometry
        # trace (tests): every busy interval as (resource kind, resource id, start, end)
        self.trace: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] | None = [] if trace else None
        self.plane_free = np.zeros(g.planes, np.int64)
        self.chan_free = np.zeros(g.channels, np.int64)
        self.carry_die = np.zeros(0, np.int64)    # outstanding commands from earlier batches
        self.carry_t = np.zeros(0, np.int64)
        self.ftl = Ftl(g)
        self.buf: dict[int, list[int]] = {}        # lpn -> [sector mask, first store time]
        self._timers: list[tuple[int, int, int]] = []   # (due, lpn, first store time)
        self._pending: list[np.ndarray] = []
        self.horizon = 0                           # latest arrival seen
        self._seq = 0                              # global page-transaction sequence (FCFS ties)
        self._serial = 0                           # global request serial
        self._dq: dict[str, np.ndarray] | None = None   # sensed reads whose transfer is not decided yet
        self._pr: dict[str, np.ndarray] | None = None   # requests waiting for deferred pages
        self._fresh: list[np.ndarray] = []         # serials deferred during the current submit
        self._since_collect = False
        # statistics
        self.chan_busy_ns = np.zeros(g.channels, np.int64)
        self.qdelay = LogHistogram()
        self.first_arrival: int | None = None
        self.last_completion = 0
        self.n = {k: 0 for k in ("requests", "served", "io_error", "unsupported", "page_reads",
                                 "buffer_hits", "stores", "programs", "flush_programs", "copybacks",
                                 "erases", "read_bytes", "write_bytes", "fast_batches",
                                 "event_batches", "event_channels", "out_of_order_arrivals",
                                 "qd_bound_batches", "qd_bound_dies", "deferred_pages", "refresh_pages")}
        self._xfer_page = g.transfer_ns(PAGE_BYTES)
        self._pow2 = all(x & (x - 1) == 0 for x in (g.channels, g.dies_per_channel, g.planes_per_die))
        self._xfer_by_sectors = np.array([g.transfer_ns(k * SECTOR_BYTES) for k in range(SECTORS_PER_PAGE + 1)],
                                         np.int64)

    # ------------------------------------------------------------------ protocol
    def submit(self, batch: np.ndarray) -> None:
        n = len(batch)
        if n == 0:
            return
        g = self.g
        self.n["requests"] += n
        amax_u = int(batch["arrival_ns"].max())
        if amax_u >= _MAX_TIME:
            raise MediaError("arrival_ns beyond 2^62", max_arrival=amax_u)
        arrival = batch["arrival_ns"].astype(np.int64)
        addr = batch["media_address"].astype(np.int64)
        nbytes = batch["bytes"].astype(np.int64)
        op = batch["op"].astype(np.int64)
        ids = batch["id"]
        unsup = op >= ctl.HBF_N_OPS
        bad = ~unsup & ((nbytes <= 0) | (addr < 0) | (addr + nbytes > g.capacity_bytes))
        status = None                          # None: every request is served (the common case)
        if unsup.any() or bad.any():
            status = np.full(n, ctl.HBF_ST_READY, np.uint8)
            status[unsup] = ctl.HBF_ST_UNSUPPORTED
            status[bad] = ctl.HBF_ST_IO_ERROR
            self.n["unsupported"] += int(unsup.sum())
            nbad = int(bad.sum())
            self.n["io_error"] += nbad
            if nbad:
                log.error("media: %d request(s) outside the media (capacity %d B), first address %#x bytes %d",
                          nbad, g.capacity_bytes, int(addr[bad][0]), int(nbytes[bad][0]))
            ok = np.flatnonzero(status == ctl.HBF_ST_READY)
        else:
            ok = None
        done = arrival.copy()
        show = None                            # None: every request completes in this call
        nok = n if ok is None else len(ok)
        if nok:
            if ok is None and (n == 1 or bool((arrival[1:] >= arrival[:-1]).all())):
                order = None                   # already in arrival order (the ring's usual case)
                a_s, ad_s, nb_s, op_s = arrival, addr, nbytes, op
            else:
                if ok is None:
                    order = np.argsort(arrival, kind="stable")
                else:
                    order = ok[np.argsort(arrival[ok], kind="stable")]
                a_s, ad_s, nb_s, op_s = arrival[order], addr[order], nbytes[order], op[order]
            amin, amax = int(a_s[0]), int(a_s[-1])
            if amin < self.horizon:
                self.n["out_of_order_arrivals"] += int((a_s < self.horizon).sum())
            self._run_timers(amin)
            if self.first_arrival is None:
                self.first_arrival = amin
            self.horizon = max(self.horizon, amax)
            serial = self._serial + np.arange(nok, dtype=np.int64)
            self._serial += nok
            self._fresh = []
            d = self._serve(a_s, ad_s, nb_s, op_s, serial)
            if order is None:
                done = d
            else:
                done[order] = d
            if self._fresh:        # requests with pages whose transfer is not decided yet
                cnt = np.bincount(np.concatenate(self._fresh) - int(serial[0]), minlength=nok)
                pm = cnt > 0
                idx = np.flatnonzero(pm) if order is None else order[pm]
                self._add_pending(serial[pm], ids[idx].astype(np.uint64), arrival[idx], d[pm], cnt[pm])
                show = np.ones(n, bool)
                show[idx] = False
                self._fresh = []
            self.last_completion = max(self.last_completion, int(d.max()))
            self._prune_carry()
        out = np.empty(n if show is None else int(show.sum()), COMPLETION_BATCH_DTYPE)
        if show is None:
            out["id"] = ids
            out["modeled_ns"] = done - arrival
            out["status"] = ctl.HBF_ST_READY if status is None else status
        else:
            out["id"] = ids[show]
            out["modeled_ns"] = (done - arrival)[show]
            out["status"] = ctl.HBF_ST_READY if status is None else status[show]
        self.n["served"] += nok
        self._pending.append(out)
        self._since_collect = True

    # ------------------------------------------------------------------ deferred transfers
    def _add_pending(self, serial, ids, arrival, done, rem) -> None:
        new = {"serial": serial, "id": ids, "arrival": arrival, "done": done.copy(), "rem": rem.astype(np.int64)}
        if self._pr is None:
            self._pr = new
        else:
            self._pr = {k: np.concatenate([self._pr[k], new[k]]) for k in new}

    def _complete_parts(self, serial, done) -> None:
        """Deferred pages of pending requests got their completion times."""
        if len(serial) == 0:
            return
        pr = self._pr
        if pr is None:
            raise MediaError("internal: deferred page of an unknown request")
        idx = np.searchsorted(pr["serial"], serial)
        if (idx >= len(pr["serial"])).any() or (pr["serial"][np.minimum(idx, len(pr["serial"]) - 1)] != serial).any():
            raise MediaError("internal: deferred page of an unknown request")
        np.maximum.at(pr["done"], idx, done)
        pr["rem"] -= np.bincount(idx, minlength=len(pr["serial"]))
        fin = pr["rem"] == 0
        if fin.any():
            out = np.empty(int(fin.sum()), COMPLETION_BATCH_DTYPE)
            out["id"] = pr["id"][fin]
            out["modeled_ns"] = (pr["done"][fin] - pr["arrival"][fin]).astype(np.uint64)
            out["status"] = ctl.HBF_ST_READY
            self._pending.append(out)
            self.last_completion = max(self.last_completion, int(pr["done"][fin].max()))
            keep = ~fin
            self._pr = {k: v[keep] for k, v in pr.items()} if keep.any() else None

    def _chan_lindley(self, ch, se, x, ready, seq) -> np.ndarray:
        """Channel stage: FCFS per channel by (sense end, seq) from the channels' next-free times."""
        g = self.g
        n = len(ch)
        if n == 0:
            return np.zeros(0, np.int64)
        lo = int(se.min())
        span = int(se.max()) - lo + 1
        smin = int(seq.min())
        rng_ = int(seq.max()) - smin + 1
        if span * g.channels * rng_ < (1 << 62):
            o = np.argsort((ch * span + (se - lo)) * rng_ + (seq - smin))   # unique keys: exact
        else:
            o = np.lexsort((seq, se, ch))
        c2 = ch[o]
        x2 = x[o]
        d2 = segmented_fcfs(se[o], x2, c2, self.chan_free)
        cst = segment_starts(c2)
        cend = segment_ends(cst, n)
        self.chan_free[c2[cend]] = d2[cend]
        if n < 64:
            np.add.at(self.chan_busy_ns, c2, x2)
        else:
            self.chan_busy_ns += np.bincount(c2, weights=x2, minlength=g.channels).astype(np.int64)
        self.qdelay.add(d2 - ready[o] - (g.t_cmd_ns + g.t_read_ns) - x2)
        if self.trace is not None:
            self.trace.append(("channel", c2, d2 - x2, d2))
        done = np.empty(n, np.int64)
        done[o] = d2
        return done

    _DQ_KEYS = ("ch", "se", "x", "ready", "seq", "serial")

    def _channel_stage(self, new: dict[str, np.ndarray]) -> np.ndarray:
        """Transfers of sensed reads. A read whose sense ends by horizon + t_cmd + tR can never
        be overtaken by a later arrival, so its transfer is decided now; later ones wait (with the
        deferred reads of earlier batches) for more arrivals, an ``advance`` past them, or a
        ``collect`` after a quiet scan. Returns completion times of ``new`` (0 = deferred)."""
        g = self.g
        dq = self._dq
        nd = 0 if dq is None else len(dq["ch"])
        allv = new if dq is None else {k: np.concatenate([dq[k], new[k]]) for k in self._DQ_KEYS}
        limit = self.horizon + g.t_cmd_ns + g.t_read_ns
        commit = allv["se"] <= limit      # a later arrival senses no earlier, and ties go by seq
        if nd == 0 and bool(commit.all()):
            return self._chan_lindley(new["ch"], new["se"], new["x"], new["ready"], new["seq"])
        ci = np.flatnonzero(commit)
        dc = self._chan_lindley(allv["ch"][ci], allv["se"][ci], allv["x"][ci], allv["ready"][ci], allv["seq"][ci])
        di = np.flatnonzero(~commit)
        self._dq = {k: v[di] for k, v in allv.items()} if len(di) else None
        out = np.zeros(len(new["ch"]), np.int64)
        isnew = ci >= nd
        out[ci[isnew] - nd] = dc[isnew]
        if nd:
            self._complete_parts(allv["serial"][ci[~isnew]], dc[~isnew])
        fresh = di[di >= nd]
        if len(fresh):
            self._fresh.append(allv["serial"][fresh])
            self.n["deferred_pages"] += len(fresh)
        return out

    def _commit_deferred(self, channels=None, before: int | None = None) -> None:
        """Decide deferred transfers now (all, those of ``channels``, or sense end < ``before``)."""
        dq = self._dq
        if dq is None:
            return
        m = np.ones(len(dq["ch"]), bool)
        if channels is not None:
            m &= np.isin(dq["ch"], channels)
        if before is not None:
            m &= dq["se"] <= before
        ci = np.flatnonzero(m)
        if len(ci) == 0:
            return
        dc = self._chan_lindley(dq["ch"][ci], dq["se"][ci], dq["x"][ci], dq["ready"][ci], dq["seq"][ci])
        serial = dq["serial"][ci]
        keep = ~m
        self._dq = {k: v[keep] for k, v in dq.items()} if keep.any() else None
        self._complete_parts(serial, dc)

    def advance(self, now_ns: int) -> None:
        """Run write-buffer flushes (and the GC they trigger) due at or before ``now_ns``."""
        self._run_timers(int(now_ns) + 1)
        self._commit_deferred(before=int(now_ns) + self.g.t_cmd_ns + self.g.t_read_ns)
        self._prune_carry()

    def collect(self) -> np.ndarray:
        """Completions decided so far. A collect with no submit since the previous one (the
        requester went quiet) decides every deferred transfer."""
        if not self._since_collect:
            self._commit_deferred()
        self._since_collect = False
        if not self._pending:
            return np.zeros(0, COMPLETION_BATCH_DTYPE)
        out = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending = []
        return out

    def drain(self) -> np.ndarray:
        """Decide everything submitted so far and return all completions (tests, benchmarks)."""
        self._commit_deferred()
        self._since_collect = False
        out = self.collect()
        return out

    def flush(self, now_ns: int) -> None:
        """Program every partial page in the write buffer at ``now_ns`` (e.g. at shutdown)."""
        for lpn in list(self.buf):
            self._timers.append((int(now_ns), lpn, self.buf[lpn][1]))
        heapq.heapify(self._timers)
        self._run_timers(int(now_ns) + 1)

    # ------------------------------------------------------------------ transactions
    def _expand(self, a, addr, nbytes, op):
        """Requests (sorted by arrival) -> page transactions in (arrival, request, page) order."""
        pb = PAGE_BYTES
        first = addr // pb
        last = (addr + nbytes - 1) // pb
        npg = last - first + 1
        if int(npg.max()) == 1:
            req = np.arange(len(a), dtype=np.int64)
            lpn = first
            slo = (addr - first * pb) // SECTOR_BYTES
            shi = (addr + nbytes - first * pb + SECTOR_BYTES - 1) // SECTOR_BYTES
            return req, lpn, slo, shi
        req = np.repeat(np.arange(len(a), dtype=np.int64), npg)
        k = np.arange(len(req), dtype=np.int64) - np.repeat(np.cumsum(npg) - npg, npg)
        lpn = first[req] + k
        base = lpn * pb
        lo = np.maximum(addr[req], base) - base
        hi = np.minimum(addr[req] + nbytes[req], base + pb) - base
        return req, lpn, lo // SECTOR_BYTES, (hi + SECTOR_BYTES - 1) // SECTOR_BYTES

    def _where(self, lpn):
        """(channel, global die, global plane) of logical pages (interleave 0)."""
        g = self.g
        C, D, P = g.channels, g.dies_per_channel, g.planes_per_die
        if self._pow2:
            cb, db = C.bit_length() - 1, D.bit_length() - 1
            ch = lpn & (C - 1)
            die = (ch << db) | ((lpn >> cb) & (D - 1))
            plane = (die << (P.bit_length() - 1)) | ((lpn >> (cb + db)) & (P - 1))
            return ch, die, plane
        ch = lpn % C
        d = (lpn // C) % D
        pl = (lpn // (C * D)) % P
        die = ch * D + d
        return ch, die, die * P + pl

    def _serve(self, a, addr, nbytes, op, serial) -> np.ndarray:
        """Schedule sorted requests; returns each request's completion time."""
        req, lpn, slo, shi = self._expand(a, addr, nbytes, op)
        top = op[req]
        ta = a[req]
        is_read = (top == OP_LOAD) | (top == OP_CPASYNC)
        done_req = a.copy()
        if bool(is_read.all()) and not self.buf:
            # pure reads, nothing buffered: every transaction is a media page read
            ch, die, plane = self._where(lpn)
            xfer = self._xfer_by_sectors[shi - slo]
            self.n["read_bytes"] += int(((shi - slo) * SECTOR_BYTES).sum())
            tdone = self._schedule_reads(ta, ch, die, plane, xfer, serial[req])
            self._reduce_max(done_req, req, tdone)
            return done_req
        return self._serve_mixed(a, req, lpn, slo, shi, top, ta, is_read, done_req, serial)

    @staticmethod
    def _reduce_max(done_req, req, tdone):
        if len(req) == len(done_req):
            np.maximum(done_req, tdone, out=done_req)
        else:
            starts = segment_starts(req)
            np.maximum(done_req, np.maximum.reduceat(tdone, starts), out=done_req)

    # ------------------------------------------------------------------ reads (fast path)
    def _schedule_reads(self, ready, ch, die, plane, xfer, serial) -> np.ndarray:
        """Media reads only, in (ready, seq) order; returns completion times (0: deferred, see
        ``_channel_stage``; ``serial``: each page's request serial).

        Die/plane stage: exact Lindley per plane; where a die's queue depth binds, that die's
        stage is recomputed exactly by ``_die_stage_exact``. Channel stage: exact Lindley by
        (sense end, seq)."""
        g = self.g
        n = len(ready)
        if n == 0:
            return np.zeros(0, np.int64)
        self.n["page_reads"] += n
        # plane stage: FCFS by (ready + t_cmd, seq) per plane (stable radix sort keeps seq order)
        o1 = np.argsort(_small_int(plane, g.planes), kind="stable")
        p1 = plane[o1]
        se1 = segmented_fcfs(ready[o1] + g.t_cmd_ns, g.t_read_ns, p1, self.plane_free)
        se = np.empty(n, np.int64)
        se[o1] = se1
        bad = self._qd_violations(ready, die, se)
        pst = segment_starts(p1)
        pend = segment_ends(pst, n)
        if bad is not None:
            sel = np.flatnonzero(np.isin(die, bad))
            keep = ~np.isin(p1[pend] // g.planes_per_die, bad)
            self.plane_free[p1[pend][keep]] = se1[pend][keep]
            se[sel] = self._die_stage_exact(ready[sel], die[sel], plane[sel])
            se1 = se[o1]
            self.n["qd_bound_batches"] += 1
            self.n["qd_bound_dies"] += len(bad)
        else:
            self.plane_free[p1[pend]] = se1[pend]
            self.n["fast_batches"] += 1
        if self.trace is not None:
            self.trace.append(("plane", plane, se - g.t_read_ns, se))
        # die slots still held after this batch's last arrival
        h = max(self.horizon, int(ready[-1]))
        keep = se > h
        self._add_carry(die[keep], se[keep])
        # channel stage (transfers decided now or deferred, see _channel_stage)
        seq = self._seq + np.arange(n, dtype=np.int64)
        self._seq += n
        return self._channel_stage({"ch": ch, "se": se, "x": xfer, "ready": ready, "seq": seq,
                                    "serial": serial})

    def _die_stage_exact(self, ready, die, plane) -> np.ndarray:
        """Sense end of reads on dies whose queue depth binds (reads in (ready, seq) order).

        Each die has ``queue_depth`` slots holding the time their last command finishes sensing;
        commands are admitted FIFO: A_i = max(a_i, A_{i-1}, earliest slot release), take that slot,
        then sense FCFS on their plane: end = max(A_i + t_cmd, plane free) + tR. (Equivalent to
        "fewer than queue_depth admitted commands still sensing or waiting for their plane".)
        Vectorized across dies: step k handles the k-th command of every die at once."""
        g = self.g
        qd, t_cmd, t_r = g.queue_depth, g.t_cmd_ns, g.t_read_ns
        n = len(ready)
        od = np.argsort(die, kind="stable")
        ds = die[od]
        st = segment_starts(ds)
        lens = np.diff(np.append(st, n))
        udies = ds[st]
        # dies by decreasing command count: the dies active at step k are a prefix
        byl = np.argsort(-lens, kind="stable")
        st, lens, udies = st[byl], lens[byl], udies[byl]
        nd, kmax = len(udies), int(lens[0])
        # slots: carried releases (the queue_depth latest per die), padded with -1 (free)
        slots = np.full((nd, qd), -1, np.int64)
        if len(self.carry_die):
            pos = np.full(g.dies, -1, np.int64)
            pos[udies] = np.arange(nd)
            m = pos[self.carry_die] >= 0
            if m.any():
                cd, ct = pos[self.carry_die[m]], self.carry_t[m]
                o = np.lexsort((-ct, cd))
                cd, ct = cd[o], ct[o]
                cst = segment_starts(cd)
                rk = np.arange(len(cd)) - np.repeat(cst, np.diff(np.append(cst, len(cd))))
                keep = rk < qd
                slots[cd[keep], rk[keep]] = ct[keep]
        # per-die command matrices (padded)
        kk = np.arange(kmax)
        valid = kk[None, :] < lens[:, None]
        src = np.where(valid, st[:, None] + kk[None, :], 0)
        A_mat = ready[od][src]
        P_mat = plane[od][src]
        E_mat = np.zeros((nd, kmax), np.int64)
        pf = self.plane_free
        last_a = np.full(nd, -1, np.int64)
        rows = np.arange(nd)
        na = nd
        for k in range(kmax):
            while na and lens[na - 1] <= k:
                na -= 1
            sl = slots[:na]
            j = sl.argmin(axis=1)
            r = rows[:na]
            a_ = np.maximum(np.maximum(A_mat[:na, k], last_a[:na]), sl[r, j])
            last_a[:na] = a_
            p = P_mat[:na, k]
            e = np.maximum(a_ + t_cmd, pf[p]) + t_r      # planes of different dies never collide
            pf[p] = e
            sl[r, j] = e
            E_mat[:na, k] = e
        out = np.empty(n, np.int64)
        out[od[src[valid]]] = E_mat[valid]
        return out

    def _qd_violations(self, a, die, rel):
        """Dies on which some admission would find >= queue_depth commands still holding a slot
        (``rel``: when each command releases its slot). None when no die binds."""
        g = self.g
        qd = g.queue_depth
        if len(die) + len(self.carry_die) <= qd:     # no die can hold more than all of them
            return None
        cnt = np.bincount(die, minlength=g.dies)
        if len(self.carry_die):
            cnt = cnt + np.bincount(self.carry_die, minlength=g.dies)
        if int(cnt.max()) <= qd:
            return None
        base = int(a.min())
        carried_total = np.zeros(g.dies, np.int64)
        if len(self.carry_die):
            carried_total = np.bincount(self.carry_die, minlength=g.dies)
        # cheap bounds first: a command still holds its slot at a_i only if it arrived after
        # a_i - H (H: the longest slot hold in the batch). Bins of width H: any such window lies
        # in two adjacent bins.
        hold = int((rel - a).max())
        nbins = (int(a.max()) - base) // hold + 2
        if nbins * g.dies < (1 << 24):
            cnt2 = np.bincount(die * nbins + (a - base) // hold, minlength=g.dies * nbins).reshape(g.dies, nbins)
            pair = cnt2[:, :-1] + cnt2[:, 1:]
            if int((pair.max(axis=1) + carried_total).max()) < qd:
                return None
        od = np.argsort(_small_int(die, g.dies), kind="stable")
        ds = die[od]
        as_ = a[od]
        span_a = int(a.max()) - base + hold + 2
        if span_a * g.dies < (1 << 62):
            keya = ds * span_a + (as_ - base)
            win = np.arange(len(ds), dtype=np.int64) - np.searchsorted(keya, keya - hold, "right")
            if int((win + carried_total[ds]).max()) < qd:
                return None
        st = segment_starts(ds)
        rank = np.arange(len(ds), dtype=np.int64) - np.repeat(st, np.diff(np.append(st, len(ds))))
        ct, cd = rel, die
        if len(self.carry_die):
            ct = np.concatenate([rel, np.maximum(self.carry_t, base)])
            cd = np.concatenate([die, self.carry_die])
        span = int(ct.max()) - base + 1
        if span * g.dies >= (1 << 62):
            return np.unique(die)            # cannot check cheaply: schedule every die exactly
        keyc = np.sort(cd * span + (ct - base))
        keya = ds * span + (as_ - base)
        ndone = np.searchsorted(keyc, keya, "right") - np.searchsorted(keyc, ds * span, "left")
        outst = rank + carried_total[ds] - ndone
        badd = np.unique(ds[outst >= qd])
        return badd if len(badd) else None

    # ------------------------------------------------------------------ carry
    def _add_carry(self, die, t):
        if len(die):
            self.carry_die = np.concatenate([self.carry_die, die])
            self.carry_t = np.concatenate([self.carry_t, t])

    def _prune_carry(self):
        if len(self.carry_t):
            keep = self.carry_t > self.horizon
            if not keep.all():
                self.carry_die = self.carry_die[keep]
                self.carry_t = self.carry_t[keep]

    def _event(self, cmds: Commands, channels) -> np.ndarray:
        """Exact event scheduling of ``cmds`` (all commands of ``channels`` in this batch)."""
        g = self.g
        if len(cmds) == 0:
            self._last_ack = np.zeros(0, np.int64)
            return np.zeros(0, np.int64)
        self.n["event_channels"] += len(channels)
        self._commit_deferred(channels)
        in_ch = np.isin(self.carry_die // g.dies_per_channel, channels)
        carry: dict[int, list[int]] = {}
        for d, t in zip(self.carry_die[in_ch].tolist(), self.carry_t[in_ch].tolist()):
            carry.setdefault(d, []).append(t)
        self.carry_die = self.carry_die[~in_ch]
        self.carry_t = self.carry_t[~in_ch]
        done, ack, admit, start = eventsim.simulate(
            cmds, t_cmd=g.t_cmd_ns, t_read=g.t_read_ns, t_prog=g.t_prog_ns, t_erase=g.t_erase_ns,
            queue_depth=g.queue_depth, plane_free=self.plane_free, chan_free=self.chan_free,
            die_carry=carry, chan_busy_acc=self.chan_busy_ns)
        h = max(self.horizon, int(cmds.ready.max()) if len(cmds) else 0)
        # carried outstanding: old carried and new completions still in the future
        old_d = np.array([d for d, ts in carry.items() for _ in ts], np.int64)
        old_t = np.array([t for ts in carry.values() for t in ts], np.int64)
        self._add_carry(old_d, old_t)
        rd = cmds.kind == READ
        rel = np.where(rd, start + g.t_read_ns, done)     # when each command frees its die slot
        sel = rel > h
        self._add_carry(cmds.die[sel], rel[sel])
        if self.trace is not None:
            k = cmds.kind
            pend = np.where(rd, start + g.t_read_ns, done)
            self.trace.append(("plane", cmds.plane, start, pend))
            xc = (k == READ) | (k == PROG)
            cend = np.where(rd, done, ack)[xc]
            self.trace.append(("channel", cmds.chan[xc], cend - cmds.xfer_ns[xc], cend))
        self.qdelay.add(done[rd] - cmds.ready[rd] - (g.t_cmd_ns + g.t_read_ns) - cmds.xfer_ns[rd])
        self._last_ack = ack
        return done

    # ------------------------------------------------------------------ writes (mixed path)
    def _serve_mixed(self, a, req, lpn, slo, shi, top, ta, is_read, done_req, serial):
        g = self.g
        t_cmd = g.t_cmd_ns
        nt = len(req)
        media = is_read.copy()           # transaction needs a media read
        media |= top == OP_ATOMIC
        special = ~is_read               # stores and atomics
        touched = set(lpn[special].tolist()) | set(self.buf)
        if touched:
            special |= np.isin(lpn, np.fromiter(touched, np.int64, len(touched)))
        comp_req: list[int] = []
        comp_t: list[int] = []
        # internal commands created in order: (ready, seq_key, kind, plane, xfer, presense, owner tx)
        icmds: list[tuple[int, int, int, int, int, bool, int]] = []
        for i in np.flatnonzero(special).tolist():
            t = int(ta[i])
            lp = int(lpn[i])
            o = int(top[i])
            lo, hi = int(slo[i]), int(shi[i])
            want = ((1 << (hi - lo)) - 1) << lo
            if o != OP_STORE:                    # load / cp.async / atomic read part
                e = self.buf.get(lp)
                if e is not None and (e[0] & want) == want:
                    media[i] = False
                    self.n["buffer_hits"] += 1
                    comp_req.append(int(req[i]))
                    comp_t.append(t + t_cmd)
                if o != OP_ATOMIC:
                    continue
            self.n["stores"] += 1
            self.n["write_bytes"] += (hi - lo) * SECTOR_BYTES
            e = self.buf.get(lp)
            if e is None:
                e = self.buf[lp] = [0, t]
                heapq.heappush(self._timers, (t + g.write_flush_timeout_ns, lp, t))
            e[0] |= want
            if e[0] == _FULL_MASK:
                del self.buf[lp]
                self._program(lp, t, SECTORS_PER_PAGE, False, icmds, owner=i)
            else:
                comp_req.append(int(req[i]))
                comp_t.append(t + t_cmd)
        if comp_req:
            np.maximum.at(done_req, np.asarray(comp_req, np.int64), np.asarray(comp_t, np.int64))
        # media reads + internal commands, in (ready, seq) order
        rsel = np.flatnonzero(media)
        self.n["read_bytes"] += int(((shi[rsel] - slo[rsel]) * SECTOR_BYTES).sum())
        rch, rdie, rpl = self._where(lpn[rsel])
        rx = self._xfer_by_sectors[shi[rsel] - slo[rsel]]
        if not icmds:
            tdone = self._schedule_reads(ta[rsel], rch, rdie, rpl, rx, serial[req[rsel]])
            np.maximum.at(done_req, req[rsel], tdone)
            return done_req
        self._schedule_all(ta[rsel], rch, rdie, rpl, rx, icmds, done_req, req[rsel], req, serial)
        return done_req

    def _program(self, lp: int, t: int, nsect: int, presense: bool, icmds: list, owner: int) -> None:
        g = self.g
        plane, _, ops = self.ftl.program(lp)
        self.n["programs"] += 1
        icmds.append((t, PROG, plane, int(self._xfer_by_sectors[nsect]), presense, owner))
        for kind, p in ops:
            if kind == "copyback":
                self.n["copybacks"] += 1
                icmds.append((t, COPYBACK, p, 0, False, -1))
            else:
                self.n["erases"] += 1
                icmds.append((t, ERASE, p, 0, False, -1))

    def _schedule_all(self, rready, rch, rdie, rpl, rx, icmds, done_req, rreq, req, serial):
        """Reads plus internal commands: event scheduler on channels with internal commands,
        Lindley on the rest."""
        g = self.g
        dpc = g.dies_per_channel * g.planes_per_die
        ik = np.array([c[1] for c in icmds], np.uint8)
        it = np.array([c[0] for c in icmds], np.int64)
        ipl = np.array([c[2] for c in icmds], np.int64)
        ix = np.array([c[3] for c in icmds], np.int64)
        ipre = np.array([c[4] for c in icmds], bool)
        iown = np.array([c[5] for c in icmds], np.int64)
        ich = ipl // dpc
        idie = ipl // g.planes_per_die
        slow = np.unique(ich)
        rs = np.isin(rch, slow)
        fast_i = np.flatnonzero(~rs)
        if len(fast_i):
            tdone = self._schedule_reads(rready[fast_i], rch[fast_i], rdie[fast_i], rpl[fast_i], rx[fast_i],
                                         serial[rreq[fast_i]])
            np.maximum.at(done_req, rreq[fast_i], tdone)
        slow_i = np.flatnonzero(rs)
        self.n["page_reads"] += len(slow_i)
        # merge reads (seq = their order) and internal commands; internal ones at equal ready time
        # come after the reads that arrived at that instant
        kind = np.concatenate([np.zeros(len(slow_i), np.uint8), ik])
        ready = np.concatenate([rready[slow_i], it])
        order = np.argsort(ready, kind="stable")
        cmds = Commands(kind=kind[order], ready=ready[order],
                        plane=np.concatenate([rpl[slow_i], ipl])[order],
                        die=np.concatenate([rdie[slow_i], idie])[order],
                        chan=np.concatenate([rch[slow_i], ich])[order],
                        xfer_ns=np.concatenate([rx[slow_i], ix])[order],
                        presense=np.concatenate([np.zeros(len(slow_i), bool), ipre])[order])
        done = self._event(cmds, slow)
        ack = self._last_ack
        self.n["event_batches"] += 1
        inv = np.empty(len(order), np.int64)
        inv[order] = np.arange(len(order))
        nr = len(slow_i)
        if nr:
            np.maximum.at(done_req, rreq[slow_i], done[inv[:nr]])
        own = iown >= 0
        if own.any():
            np.maximum.at(done_req, req[iown[own]], ack[inv[nr:]][own])
        self.last_completion = max(self.last_completion, int(done.max()))
        return int(done[inv[nr:]].max()) if len(icmds) else None

    # ------------------------------------------------------------------ background work
    def refresh(self, lpns, at_ns: int) -> int:
        """Refresh (read-reclaim / retention) of logical pages at ``at_ns``: each page is sensed and
        rewritten out of place (a program with a read-merge sense: tR, 4 KiB data-in, tPROG),
        queued behind reads like GC, with the P/E and GC it causes. For the reliability service's
        refresh plan; these are not requests and post no completion. Returns the time the last
        of them finishes."""
        lp = np.asarray(lpns, np.int64).ravel()
        if len(lp) == 0:
            return int(at_ns)
        if (lp < 0).any() or (lp >= self.g.logical_pages).any():
            raise MediaError("refresh of a page outside the media", max_page=int(lp.max()),
                             logical_pages=self.g.logical_pages)
        self._run_timers(int(at_ns))
        icmds: list = []
        for p in lp.tolist():
            self._program(int(p), int(at_ns), SECTORS_PER_PAGE, True, icmds, owner=-1)
        self.n["refresh_pages"] += len(lp)
        empty = np.zeros(0, np.int64)
        return int(self._schedule_all(empty, empty, empty, empty, empty, icmds, empty, empty, empty, empty))

    # ------------------------------------------------------------------ timers (rare events)
    def _run_timers(self, before: int) -> None:
        """Flush partial pages whose timeout is due before ``before``."""
        if not self._timers or self._timers[0][0] >= before:
            return
        icmds: list = []
        while self._timers and self._timers[0][0] < before:
            due, lp, first = heapq.heappop(self._timers)
            e = self.buf.get(lp)
            if e is None or e[1] != first:
                continue                        # that buffer entry was already programmed
            del self.buf[lp]
            nsect = bin(e[0]).count("1")
            presense = lp in self.ftl.l2p       # merge the rest of the page from its old copy
            self.n["flush_programs"] += 1
            self._program(lp, due, nsect, presense, icmds, owner=-1)
        if icmds:
            icmds.sort(key=lambda c: c[0])
            empty = np.zeros(0, np.int64)
            dummy = np.zeros(0, np.int64)
            self._schedule_all(empty, empty, empty, empty, empty, icmds, dummy, empty, empty, empty)

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict[str, Any]:
        g = self.g
        span = max(1, self.last_completion - (self.first_arrival or 0))
        util = (self.chan_busy_ns / span).tolist() if self.first_arrival is not None else [0.0] * g.channels
        pe_hist = np.bincount(self.ftl.pe) if len(self.ftl.pe) else np.zeros(1, np.int64)
        return {
            "engine": self.name,
            "geometry": g.to_dict(),
            "counts": dict(self.n),
            "window_ns": int(span) if self.first_arrival is not None else 0,
            "channel_utilization": [round(u, 6) for u in util],
            "channel_busy_ns": self.chan_busy_ns.tolist(),
            "queueing_delay_ns": self.qdelay.summary(),
            "gc": {"runs": self.ftl.gc_runs, "copybacks": self.ftl.gc_copies, "erases": self.ftl.erases},
            "pe_histogram": {str(k): int(v) for k, v in enumerate(pe_hist.tolist()) if v},
            "pe_max": int(self.ftl.pe.max()) if len(self.ftl.pe) else 0,
            "host_programs": self.ftl.host_programs,
            "write_amplification": self.ftl.write_amplification,
            # bytes programmed (host + refresh programs and GC copies, 4 KiB each) per byte stored:
            # > WAF when partial pages are flushed
            "byte_write_amplification": ((self.ftl.host_programs + self.ftl.gc_copies) * PAGE_BYTES
                                         / self.n["write_bytes"]) if self.n["write_bytes"] else None,
            "write_buffer_pages": len(self.buf),
            "undecided_transfers": 0 if self._dq is None else len(self._dq["ch"]),
            "mapped_pages": len(self.ftl.l2p),
        }
