"""The online NAND media engine served on hbfd's reference path (media semantics v2).

``MediaEngine(geometry)`` implements the daemon's ``ServiceEngine`` and ``RefreshingEngine`` protocols
(``hbfd/contracts.py``): ``submit(batch)`` / ``advance(now_ns)`` / ``collect()`` / ``stats()`` /
``refresh(lpns, at_ns)``. The semantics (README "Timing model") are the one definition shared with the
device model; ``tests/media/refsim.py`` is the 1 ns time-stepped reference this engine equals exactly.

* A request ``(arrival, media_address, bytes, op)`` is split into page transactions (4 KiB pages);
  only the requested 64 B sectors of a page cross the channel. A request completes with its last page.
* Read (load, cp.async, the read half of an atomic): lookup in the plane's ``page_buffers_per_plane``
  decoded page buffers (LRU by use, in arrival order per plane). Hit: data ready at
  ``max(arrival + t_cmd, buffer ready)`` (a page still being sensed is waited for: coalescing); no die
  slot, no plane. Miss: die slot (queue depth) -> sense tR on the plane (FCFS, reads before programs)
  -> the LRU buffer holds the page from the sense end. A read whose sectors are all in the write
  buffer is served from it (data ready at arrival + t_cmd). Then the channel, FCFS by data-ready time.
* Store (and the write half of an atomic): invalidates any page buffer holding the page; the written
  sectors cross the channel and the store completes at the end of that data-in. Write backpressure:
  the plane's B = ``page_buffers_per_plane`` buffers hold its last B programs' data, so with m programs
  issued on the plane before the store (m >= B) its data is ready at max(arrival + t_cmd, end of the
  (m - B + 1)-th), else at arrival + t_cmd. Pages are assembled in the write buffer; a full page (or a
  partial one ``write_flush_timeout_ns`` after its first store, with a read-merge sense if it held
  data) is programmed out of place (``ftl.Ftl``): die slot -> plane busy tPROG, no channel; a host
  program reaches the die at its filling store's data ready + xfer. GC copybacks and erases queue
  behind reads like programs.

Exactness across batches: planes, dies (Q largest slot releases) and page buffers carry their
state; a channel transfer is decided only once no later arrival can overtake it (data ready <=
latest arrival + t_cmd), the rest wait for more arrivals, an ``advance`` past them, or a
``collect`` after a quiet scan. Dies with array ops other than reads (new or pending) go through
``eventsim`` (read priority is not FIFO; backpressure chains a plane's programs); every read sense is
decided (a later arrival reaches its plane later and reads go before programs), and so is every
command that starts before the latest arrival + t_cmd (``advance(now)``: now + t_cmd) or before a read
of its plane; the other commands stay pending (holding their die slot if admitted) and are
re-scheduled with the next batch's reads, and a store whose data-in waits for a pending program is
decided when that program is. Cutting a time-ordered stream into batches changes nothing.
"""
from __future__ import annotations

import bisect
import heapq
import logging
from typing import Any

import numpy as np

from hbfcommon import ctl
from hbfd.contracts import COMPLETION_BATCH_DTYPE, REQUEST_BATCH_DTYPE  # noqa: F401 (re-exported)

from hbfd import accel

from . import eventsim
from .diestage import _KEEP_TWIN_MIN, DieCarry, fifo_exact, small_int
from .eventsim import _NO_SKIP, COPYBACK, ERASE, PROG, READ
from .ftl import Ftl
from .kernels import (_buf_rows, _carry_keep, _chan_fcfs, _chan_fcfs_packed, _decided_put, _dup_planes, _ends_get,
                      _event_decide, _event_inputs, _event_merge, _event_run, _extreme_at, _fifo_carry, _fifo_loop, _gated_split,
                      _l2p_swap, _latest_q, _lookup_events, _min_where, _ngate_bases, _ngate_scan, _packed_build,
                      _packed_build_into, _packed_sort, _parts_update, _pending_fields, _pending_take, _pid_map,
                      _mixed_front, _mixed_req, _program_bulk, _program_place, _read_front, _read_pass, _read_ready,
                      _ring_loop, _split_items, _split_waiting, _tail_scan)
from .geometry import PAGE_BYTES, SECTOR_BYTES, SECTORS_PER_PAGE, MediaError, MediaGeometry
from . import hist
from .hist import LogHistogram
from .lindley import (packed_keys, packed_keys_parts, packed_order, rank_order, segment_ends, segment_starts, segmented_fcfs,
                      sorted_fcfs)

log = logging.getLogger(__name__)

OP_LOAD, OP_STORE, OP_ATOMIC, OP_CPASYNC = 0, 1, 2, 3
_FULL_MASK = (1 << SECTORS_PER_PAGE) - 1
_PAGE_SHIFT = PAGE_BYTES.bit_length() - 1        # (both powers of two: geometry.py)
_SECTOR_SHIFT = SECTOR_BYTES.bit_length() - 1
assert PAGE_BYTES == 1 << _PAGE_SHIFT and SECTOR_BYTES == 1 << _SECTOR_SHIFT
_MAX_TIME = 1 << 62
_E0 = np.zeros(0, np.int64)
_NO_ITEMS = {k: _E0 for k in ("ch", "rd", "x", "seq", "q0")}
_SMALL = 48          # a batch part of at most this many reads goes one read at a time (_reads_small)
_RANK_ORDER_MIN = 512   # _chan_lindley: items out of seq order, from this many on ordered by lindley.rank_order
_PARTS_TWIN_MIN = 256   # _complete_parts: from this many pending requests on, its general case by its twin
_MIN_TWIN_MIN = 256     # _keep_h, _prune_ends: minima over the pending set by kernels._min_where from this many on
_NGATE_TWIN_MIN = 256   # _tail_plane: from this many new commands on, their gates' look-ups by kernels._ngate_scan
_GATED_TWIN_MIN = 256   # _release_gated: a chunk of this many waiting stores or more splits by its twin
_WAIT_ALL_ROWS = True   # submit: a batch whose every request waits keeps its rows without gathers (tests: off)
_LATEST_TWIN_MIN = 256   # _latest_per_die by its twin from this many releases on
_FIELDS_TWIN_MIN = 256   # _decide_cmds's pending fields by their twin from this many on
_SCAN_TWIN_MIN = 256     # _tail_plane's passes over the pending set by their twin from this many on
_RING_TWIN_MIN = 64      # _ring_push by its twin from this many stores on
_AT_TWIN_MIN = 256       # _max_at by its twin from this many pairs on
_ENDS_TWIN_MIN = 256     # _Ends.get by its twin from this many ids on
_FRONT_TWIN_MIN = 64     # _mixed_front_of by its twin from this many page transactions on
_WAIT_TWIN_MIN = 256     # _split_waiting_of by its twin from this many requests on


def _max_at(out: np.ndarray, idx: np.ndarray, val: np.ndarray, larger: bool = True) -> None:
    """``np.maximum.at(out, idx, val)`` (``np.minimum.at`` when not ``larger``); by ``kernels._extreme_at``
    where the twins run (int64 values, from ``_AT_TWIN_MIN`` pairs on)."""
    if (len(idx) >= _AT_TWIN_MIN and out.dtype == np.int64 and out.flags.c_contiguous and out.ndim == 1
            and idx.dtype.kind in "iu" and np.asarray(val).dtype == np.int64 and accel.enabled()):
        _extreme_at(out, np.ascontiguousarray(idx, np.int64), np.ascontiguousarray(val), larger)
    elif larger:
        np.maximum.at(out, idx, val)
    else:
        np.minimum.at(out, idx, val)


def _event_decided(kind, start, end, pl, dd, limit, pf0, plane_free, cd_old, ct_old):
    """``_array_ops``' decision after the event scheduler: ``dec`` (every read, and every command that starts before
    ``limit`` or before the latest read start of its plane), ``plane_free`` set to ``pf0`` and then raised to the
    decided commands' ends, and the carried releases to put (``cd_old`` then the decided dies, ``ct_old`` then their
    ends). By ``kernels._event_decide`` where the twins run (int64 arrays). Returns (dec, die, t)."""
    if (accel.enabled() and plane_free.flags.c_contiguous and plane_free.dtype == np.int64
            and all(a.dtype == np.int64 for a in (start, end, pl, dd, pf0, cd_old, ct_old))):
        return _event_decide(kind, start, end, pl, dd, limit, READ, pf0, plane_free, cd_old, ct_old)
    isr = kind == READ
    lrs = np.full(len(plane_free), -1, np.int64)
    if isr.any():
        _max_at(lrs, pl[isr], start[isr])
    dec = isr | (start < limit) | (start < lrs[pl])
    plane_free[:] = pf0
    _max_at(plane_free, pl[dec], end[dec])
    return dec, np.concatenate([cd_old, dd[dec]]), np.concatenate([ct_old, end[dec]])


def _event_inputs_of(ri, r_read, plane_read, die_read, t_read, allc, base, gx, gidx):
    """``_array_ops``' inputs of the event scheduler: the reads ``ri`` of the batch's (arrival, plane, die) (kind READ,
    service ``t_read``, no gate, join or floor), then the commands ``allc`` (ready = ``base`` + ``gx`` where ungated,
    ``gidx`` < 0, else ``base`` with gate_x = ``gx``; gate = ``gidx``). By ``kernels._event_inputs`` where the twins
    run (int64 fields, uint8 kinds). Returns (kind, ready, plane, die, service, gate, gate_x, join, floor)."""
    cols = (r_read, plane_read, die_read, base, gx, gidx, allc["plane"], allc["die"], allc["svc"], allc["join"],
            allc["floor"])
    if accel.enabled() and allc["kind"].dtype == np.uint8 and all(a.dtype == np.int64 for a in cols):
        return _event_inputs(ri, r_read, plane_read, die_read, t_read, allc["kind"], base, gx, gidx, allc["plane"],
                             allc["die"], allc["svc"], allc["join"], allc["floor"])
    nri = len(ri)
    ungated = gidx < 0
    ready_c = np.where(ungated, base + gx, base)
    kind = np.concatenate([np.zeros(nri, np.uint8), allc["kind"]])
    ready = np.concatenate([r_read[ri], ready_c])
    pl = np.concatenate([plane_read[ri], allc["plane"]])
    dd = np.concatenate([die_read[ri], allc["die"]])
    sv = np.concatenate([np.full(nri, t_read, np.int64), allc["svc"]])
    z = np.full(nri, -1, np.int64)
    gate = np.concatenate([z, gidx])
    gxa = np.concatenate([np.zeros(nri, np.int64), np.where(ungated, 0, gx)])
    join = np.concatenate([z, allc["join"]])
    floor = np.concatenate([np.zeros(nri, np.int64), allc["floor"]])
    return kind, ready, pl, dd, sv, gate, gxa, join, floor


def _event_run_ok(allc, cols, plane_free, slots, ends) -> bool:
    """Whether ``_array_ops``' event-scheduler run may go through the fused twin ``kernels._event_run`` (wt/fuse14):
    the twins on and the types it is compiled for -- what ``_event_inputs_of``, ``simulate_compiled`` and
    ``_event_decided`` each check before their twins (uint8 kinds, int64 fields, the planes' free times int64 in
    place, the carried releases and the decided programs' ends (``ends``, an ``_Ends``) int64)."""
    return (accel.enabled() and allc["kind"].dtype == np.uint8 and plane_free.dtype == np.int64
            and plane_free.flags.c_contiguous and slots.die.dtype == np.int64 and slots.t.dtype == np.int64
            and all(a.dtype == np.int64 for a in cols + (ends.a, ends.old_id, ends.old_end))
            and all(allc[k].dtype == np.int64 for k in ("base", "gx", "gate", "pid", "plane", "die", "svc", "join",
                                                        "floor")))


def _split_rows(new: dict, commit: np.ndarray):
    """``_channel_stage``'s split of channel items ``new`` (a dict of ``MediaEngine._DQ_KEYS`` arrays) by ``commit``:
    (ci, the items at ci, di, the items at di), ci / di the rows with ``commit`` true / false, in order. By
    ``kernels._split_items`` where the twins run (int64 fields)."""
    keys = MediaEngine._DQ_KEYS
    if (accel.enabled() and len(new) == len(keys) and all(new.get(k) is not None and new[k].dtype == np.int64
                                                          for k in keys)):
        ci, di, c, d = _split_items(commit, *(new[k] for k in keys))
        return ci, dict(zip(keys, c)), di, dict(zip(keys, d))
    ci = np.flatnonzero(commit)
    di = np.flatnonzero(~commit)
    return ci, {k: v[ci] for k, v in new.items()}, di, {k: v[di] for k, v in new.items()}


def _events_in_seq(plane, lpn, seq, inval):
    """``_reads``' lookup events: the reads (plane, page, seq) and the invalidations ``inval`` (plane, page, seq) in seq
    order, stable (a read before an invalidation of its seq), as (plane, page, is-read, read index or 0). By
    ``kernels._event_merge`` (a merge of the two ascending parts) where the twins run and it applies."""
    if accel.enabled() and all(a.dtype == np.int64 for a in (plane, lpn, seq, *inval)):
        ok, ev_p, ev_g, ev_r, ev_i = _event_merge(plane, lpn, seq, *inval)
        if ok:
            return ev_p, ev_g, ev_r, ev_i
    n, m = len(seq), len(inval[0])
    ev_p = np.concatenate([plane, inval[0]])
    ev_g = np.concatenate([lpn, inval[1]])
    ev_r = np.concatenate([np.ones(n, bool), np.zeros(m, bool)])
    ev_s = np.concatenate([seq, inval[2]])
    ev_i = np.concatenate([np.arange(n, dtype=np.int64), np.zeros(m, np.int64)])
    o = np.argsort(ev_s, kind="stable")
    return ev_p[o], ev_g[o], ev_r[o], ev_i[o]


def _data_ready(ta, t_cmd, t_read, miss, ref, E, pready):
    """``_reads``' data ready of a batch's reads where some hit a page buffer: a miss's at its sense end ``E``, a hit's at
    max(arrival + t_cmd, its source's ready: ``E[ref]`` for ``ref`` >= 0, else the buffered ``pready[-1 - ref]``);
    q0 = arrival + t_cmd, + t_read for a miss. By ``kernels._read_ready`` where the twins run. Returns (rd, q0,
    hits, coalesced hits: those whose source is ready after arrival + t_cmd)."""
    if (accel.enabled() and miss.dtype == np.bool_
            and all(a.dtype == np.int64 for a in (ta, ref, E, pready))):
        return _read_ready(ta, t_cmd, t_read, miss, ref, E, pready)
    early = ta + t_cmd
    rb = np.where(ref >= 0, E[np.maximum(ref, 0)], pready[np.clip(-1 - ref, 0, len(pready) - 1)]
                  if len(pready) else 0)
    hitm = ~miss
    rd = np.where(miss, E, np.maximum(early, rb))
    nh = int(hitm.sum())
    nco = int((rb[hitm] > early[hitm]).sum())
    return rd, early + np.where(miss, t_read, 0), nh, nco


def _buffer_rows(bpage, bready, up, sp, sr, E1, pready) -> None:
    """``_reads``' page-buffer state of a lookup's planes ``up``, in place: pages ``sp``, each one's ready time from
    ``sr`` (>= 0: ``E1[sr]``, else ``pready[-1 - sr]``), 0 for an empty slot. By ``kernels._buf_rows`` where the
    twins run."""
    if (accel.enabled() and bpage.flags.c_contiguous and bready.flags.c_contiguous
            and all(a.dtype == np.int64 for a in (bpage, bready, up, sp, sr, E1, pready))):
        _buf_rows(bpage, bready, up, sp, sr, E1, pready)
        return
    rv = np.where(sr >= 0, E1[np.maximum(sr, 0)], pready[np.clip(-1 - sr, 0, len(pready) - 1)]
                  if len(pready) else 0)
    bpage[up] = sp
    bready[up] = np.where(sp >= 0, rv, 0)


def _concat_records(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate`` of completion arrays (COMPLETION_BATCH_DTYPE), as their bytes: the same array, about
    8x faster (numpy copies a packed structured dtype element by element)."""
    return np.concatenate([np.ascontiguousarray(p).view(np.uint8) for p in parts]).view(COMPLETION_BATCH_DTYPE)


def _pid_pos(pid: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Index in ``pid`` (unique ids, -1 for none) of each id in ``q`` (ids, >= 0); -1 where absent."""
    return _PidIndex(pid).pos(q)


class _PidIndex:
    """``_pid_pos`` for several queries of one ``pid`` array: its map is built once (a direct map when
    the ids are nearly dense, the usual case; else a sorted copy), on the first query that needs it."""

    def __init__(self, pid: np.ndarray) -> None:
        self.pid = pid
        self.lo = None            # direct map: pos[id - lo]
        self.pmap = None
        self.so = None            # else: argsort and sorted ids
        self.sp = None

    def _build(self) -> None:
        pid = self.pid
        v = pid >= 0
        if v.any():
            iv = np.flatnonzero(v)
            pv = pid[iv]
            lo, hi = int(pv.min()), int(pv.max())
            if hi - lo <= 4 * len(pid) + 1024:
                pos = np.full(hi - lo + 1, -1, np.int64)
                pos[pv - lo] = iv
                self.lo, self.pmap = lo, pos
                return
        self.so = np.argsort(pid, kind="stable")
        self.sp = pid[self.so]

    def pos(self, q: np.ndarray) -> np.ndarray:
        pid = self.pid
        if not len(q) or not len(pid):
            return np.full(len(q), -1, np.int64)
        if self.pmap is None and self.sp is None:
            self._build()
        if self.pmap is not None and int(q.min()) >= 0:
            lo, pos = self.lo, self.pmap
            hi = lo + len(pos) - 1
            inr = (q >= lo) & (q <= hi)
            return np.where(inr, pos[np.where(inr, q - lo, 0)], -1)
        if self.sp is None:
            self.so = np.argsort(pid, kind="stable")
            self.sp = pid[self.so]
        sp, so = self.sp, self.so
        i = np.minimum(np.searchsorted(sp, q), len(sp) - 1)
        return np.where(sp[i] == q, so[i], -1)


def _latest_per_die(cd: np.ndarray, ct: np.ndarray, dies: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``q`` latest release times ``ct`` of each die ``cd`` (die order, latest first): a die's Q latest
    releases are all that can bind a later admission. (``kernels._latest_q`` where the twins run.)"""
    if len(cd) >= _LATEST_TWIN_MIN and cd.dtype == np.int64 and ct.dtype == np.int64 and accel.enabled():
        return _latest_q(np.ascontiguousarray(cd), np.ascontiguousarray(ct), dies, q)
    o = packed_order(cd, dies, -ct)               # (die, latest first): equal keys are equal values
    if o is None:
        o = np.argsort(-ct)
        o = o[np.argsort(small_int(cd[o], dies), kind="stable")]
    cd, ct = cd[o], ct[o]
    first = np.flatnonzero(np.r_[True, cd[1:] != cd[:-1]])
    rank = np.arange(len(cd)) - np.repeat(first, np.diff(np.append(first, len(cd))))
    return cd[rank < q], ct[rank < q]


def _gate_bases(R: dict, nr: int, pe: "_Ends", pix: "_PidIndex", p_end: np.ndarray,
                kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the ``nr`` commands ``R`` to schedule again may start, from their gates: a gate on a decided
    program (``pe``) or on a kept pending one (``kept``, a mask over the pending set whose ends are
    ``p_end``, positions by ``pix``) raises the command's base to that end; a gate on a command scheduled
    with them becomes its index in ``R`` (``gidx``; -1: no gate left). A gate on none of these is a KeyError."""
    base = R["base"].copy()
    gidx = np.full(nr, -1, np.int64)
    gm = np.flatnonzero(R["gate"] >= 0)
    if len(gm):
        gq = R["gate"][gm]
        _apply_gates(base, gidx, gm, gq, _end_of(pe, gq), lambda nf: pix.pos(gq[nf]),
                     lambda m: _pid_pos(R["pid"], gq[m]), kept, p_end)
    return base, gidx


def _apply_gates(base: np.ndarray, gidx: np.ndarray, gm: np.ndarray, gq: np.ndarray, e: np.ndarray, pending_pos,
                 batch_pos, kept, p_end: np.ndarray) -> None:
    """The gate rule of ``_gate_bases`` on the commands ``gm`` (gates ``gq``, decided ends ``e``, -1: none;
    ``e`` is written): an undecided gate found among the pending commands (``pending_pos(idx)``: positions,
    -1 not found) and kept there gives its end; a gate with an end raises the base; the rest become indices in the
    batch (``batch_pos(mask)``), a gate found nowhere is a KeyError. ``base`` and ``gidx`` in place."""
    nf = np.flatnonzero(e < 0)
    if len(nf):
        ip = pending_pos(nf)
        kk = ip >= 0
        kk[kk] = kept[ip[kk]]
        e[nf] = np.where(kk, p_end[np.maximum(ip, 0)], -1)
    kn = e >= 0
    base[gm[kn]] = np.maximum(base[gm[kn]], e[kn])
    if not kn.all():
        ix = batch_pos(~kn)
        if (ix < 0).any():
            raise KeyError(int(gq[~kn][ix < 0][0]))
        gidx[gm[~kn]] = ix


class _KeptAt:
    """``_tail_plane``'s mask of kept pending commands (admitted before their plane's Tp), computed only at
    the positions asked (``_gate_bases``): ``kept[idx]``."""

    def __init__(self, adm: np.ndarray, Tp: np.ndarray, plane: np.ndarray) -> None:
        self.adm, self.Tp, self.plane = adm, Tp, plane

    def __getitem__(self, idx):
        return self.adm[idx] < self.Tp[self.plane[idx]]


def _gate_bases_found(N: dict, gm: np.ndarray, found, kept, p_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_gate_bases(N, ...)`` from look-ups already made: ``gm`` the commands of ``N`` with a gate, ``found`` =
    (their gates, the gates' decided ends (-1: none), positions among the pending commands, positions in ``N``)
    or None where ``gm`` is empty. The same base and ``gidx`` (and the same KeyError)."""
    base = N["base"].copy()
    gidx = np.full(len(base), -1, np.int64)
    if len(gm):
        gq, e, ip, inn = found
        _apply_gates(base, gidx, gm, gq, e.copy(), lambda nf: ip[nf], lambda m: inn[m], kept, p_end)
    return base, gidx


def _end_of(pe: "_Ends", q: np.ndarray) -> np.ndarray:
    """Decided program ends of the ids ``q`` (-1: not decided)."""
    return pe.get(q)


class _Ends:
    """Ends of decided programs by program id (ids are issued densely from 0): a dense window of the
    ids from ``base`` on, and the few older ones still needed (sorted arrays). -1: not decided."""

    def __init__(self) -> None:
        self.base = 0
        self.a = np.full(1024, -1, np.int64)
        self.old_id = _E0
        self.old_end = _E0
        self.version = 0                 # + 1 at each change of what ``get`` answers
        self.top = 0                     # 1 + the largest id set (the window holds -1 from there on)

    def __len__(self) -> int:
        return len(self.a)

    def get(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, np.int64)
        if len(q) >= _ENDS_TWIN_MIN and accel.enabled():
            return _ends_get(self.a, self.base, self.old_id, self.old_end, np.ascontiguousarray(q))
        i = q - self.base
        inw = (i >= 0) & (i < len(self.a))
        out = np.where(inw, self.a[np.where(inw, i, 0)], -1) if len(q) else np.zeros(0, np.int64)
        if len(self.old_id) and not inw.all():
            o = ~inw
            k = np.minimum(np.searchsorted(self.old_id, q[o]), len(self.old_id) - 1)
            out[o] = np.where(self.old_id[k] == q[o], self.old_end[k], -1)
        return out

    def set(self, ids: np.ndarray, ends: np.ndarray) -> None:
        ids = np.asarray(ids, np.int64)
        if not len(ids):
            return
        self.version += 1
        ends = np.asarray(ends, np.int64)
        lo = ids < self.base
        if lo.any():                     # (not expected: ids below the window are decided before a prune)
            oi = np.concatenate([self.old_id, ids[lo]])
            oe = np.concatenate([self.old_end, ends[lo]])
            u, k = np.unique(oi[::-1], return_index=True)
            self.old_id, self.old_end = u, oe[::-1][k]
            ids, ends = ids[~lo], ends[~lo]
            if not len(ids):
                return
        need = int(ids.max()) - self.base + 1
        self.top = max(self.top, self.base + need)
        if need > len(self.a):
            a = np.full(max(need, 2 * len(self.a)), -1, np.int64)
            a[:len(self.a)] = self.a
            self.a = a
        self.a[ids - self.base] = ends

    def rebase(self, new_base: int, keep: np.ndarray) -> None:
        """Forget the ends of ids below ``new_base`` except those of ``keep``."""
        if new_base <= self.base:
            return
        self.version += 1
        keep = np.asarray(keep, np.int64)
        keep = np.unique(keep[keep < new_base])     # (the same ids: the cut first, fewer to sort)
        e = self.get(keep)
        k = e >= 0
        self.old_id, self.old_end = keep[k], e[k]
        cut = min(new_base - self.base, len(self.a))
        rest = self.a[cut:max(cut, min(len(self.a), self.top - self.base))]   # (past top: all -1)
        self.a = np.full(max(1024, 2 * len(rest)), -1, np.int64)
        self.a[:len(rest)] = rest
        self.base = new_base


class _Bufs:
    """The pending set's arrays kept in buffers with room to grow, two per field: appending a batch's new
    commands writes past the end of the pending arrays (no copy of the pending set: ``cat``), and the fields
    a batch rewrites go to a buffer that no live array uses (``out``). Every array handed out is a prefix of
    its buffer. ``cat`` appends in place only after the longest prefix handed out (``used``), so it never
    changes an element of an array handed out; ``out`` rewrites a buffer only when neither the pending set
    the batch started from (``begin``) nor any array handed out since then is in it (the pending set is the
    only array of these buffers kept across batches)."""

    def __init__(self) -> None:
        self.b: dict[str, list] = {}          # field -> [buffer or None, buffer or None]
        self.used: dict[str, list] = {}       # length of the longest prefix handed out
        self.stamp: dict[str, list] = {}      # the batch (``gen``) each buffer was last handed out in
        self.last: dict[str, list] = {}       # the array ``cat`` last handed out of each buffer (or None)
        self.ptr: dict[str, list] = {}        # each buffer's data address (round 12: read once per buffer, not at
        self.gen = 0                          # each look-up: ``__array_interface__`` costs ~1 us)
        self.live: set[int] = set()

    def begin(self, pq) -> None:
        """A batch's array pass starts from the pending set ``pq`` (dict of arrays, or None)."""
        self.gen += 1
        self.live = set() if pq is None else {v.__array_interface__["data"][0] for v in pq.values() if len(v)}

    def _slot(self, key: str, a: np.ndarray):
        bb = self.b.get(key)
        if bb is None or a.ndim != 1 or not a.flags.c_contiguous or not len(a):
            return None
        p = a.__array_interface__["data"][0]
        pp = self.ptr[key]
        for s in (0, 1):
            x = bb[s]
            if x is not None and pp[s] == p and x.dtype == a.dtype:
                return s
        return None

    def _put(self, key: str, s: int, x: np.ndarray, n: int, appended: bool = False) -> np.ndarray:
        bb = self.b.setdefault(key, [None, None])
        if bb[s] is not x:
            bb[s] = x
            self.ptr.setdefault(key, [0, 0])[s] = x.__array_interface__["data"][0]
        self.used.setdefault(key, [0, 0])[s] = n
        self.stamp.setdefault(key, [0, 0])[s] = self.gen
        v = x[:n]
        self.last.setdefault(key, [None, None])[s] = v if appended else None
        return v

    def own(self, key: str, a: np.ndarray) -> bool:
        """``a`` is what ``cat`` handed out last from its buffer, in this batch: the only arrays that share its
        elements are older prefixes of that buffer (the pending set the batch started from, and arrays made
        from it in this batch), so once those are not used any more it may be rewritten in place."""
        s = self._slot(key, a)
        return (s is not None and self.last[key][s] is a and self.stamp[key][s] == self.gen
                and self.used[key][s] == len(a))

    def cat(self, key: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``np.concatenate([a, b])``, in place after ``a`` where ``a`` is the longest prefix of its buffer."""
        n, m = len(a), len(b)
        dt = np.result_type(a.dtype, b.dtype)
        s = self._slot(key, a)
        if s is not None and self.used[key][s] == n and len(self.b[key][s]) >= n + m and dt == a.dtype:
            x = self.b[key][s]
            x[n:n + m] = b
            return self._put(key, s, x, n + m, True)
        x = np.empty(max(4 * (n + m), 1024), dt)     # (room for a few batches: each move copies the whole set)
        x[:n] = a
        x[n:n + m] = b
        return self._put(key, 0 if s is None else s, x, n + m, True)

    def keep_prefix(self, key: str, a: np.ndarray, n: int) -> np.ndarray:
        """``a[:n]`` where ``a`` (``own``) had its first ``n`` elements rewritten in place (a compaction): ``a`` and
        the older prefixes of its buffer are not used any more, so ``cat`` may append after ``n``."""
        s = self._slot(key, a)
        return self._put(key, s, self.b[key][s], n, True)

    def out(self, key: str, n: int, dtype, avoid: np.ndarray) -> np.ndarray:
        """A length-``n`` array (content undefined) in a buffer of the field that holds no live array and
        not ``avoid``; a new buffer where none is free."""
        bb = self.b.get(key)
        sa = self._slot(key, avoid)
        for t in (0, 1):
            if t == sa:
                continue
            x = None if bb is None else bb[t]
            if x is None:
                return self._put(key, t, np.empty(max(4 * n, 1024), dtype), n)
            if self.stamp[key][t] != self.gen and self.ptr[key][t] not in self.live:
                if len(x) < 2 * n or x.dtype != dtype:     # (room for the next batch's appends: ``cat``)
                    x = np.empty(max(4 * n, 1024), dtype)
                return self._put(key, t, x, n)
        return np.empty(n, dtype)


def _ring_push(R: np.ndarray, plane: np.ndarray, fill: np.ndarray, pid0: int):
    """Write backpressure bookkeeping of a sequence of stores (in issue order): ``R`` (planes x B, in
    place) holds each plane's last B program ids, oldest first, right-aligned (-1: none). A store with
    m programs issued on its plane before it (m >= B) is gated by the (m - B + 1)-th of them (the
    oldest of the last B); a filling store (``fill``) issues the next id (``pid0`` on, in order).
    Returns (gate per store, -1: none; program id per store, -1: not filling)."""
    n = len(plane)
    B = R.shape[1]
    fill = np.asarray(fill, bool)
    if n >= _RING_TWIN_MIN and R.dtype == np.int64 and R.flags.c_contiguous and accel.enabled():
        gate = np.empty(n, np.int64)
        pid = np.empty(n, np.int64)
        _ring_loop(R, np.ascontiguousarray(plane, np.int64), np.ascontiguousarray(fill), pid0, gate, pid)
        return gate, pid
    pid = np.full(n, -1, np.int64)
    nf = int(fill.sum())
    pid[fill] = pid0 + np.arange(nf, dtype=np.int64)
    if n == 0:
        return np.zeros(0, np.int64), pid
    o = np.argsort(small_int(plane, R.shape[0]), kind="stable")    # (R: a row per plane)
    ps = plane[o]
    fs = fill[o]
    st = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    cnt = np.diff(np.append(st, n))
    cf = np.cumsum(fs) - fs                      # fills before, over the whole sorted order
    fb = cf - np.repeat(cf[st], cnt)             # fills before on the plane
    F = np.flatnonzero(fs)                       # sorted positions of the fills
    pid_s = pid[o]
    v = fb - B
    up = ps[st]
    gate_s = np.empty(n, np.int64)
    neg = v < 0
    gate_s[neg] = R[ps[neg], B + v[neg]]
    pos = ~neg
    if pos.any():
        gate_s[pos] = pid_s[F[np.repeat(cf[st], cnt)[pos] + v[pos]]]
    gate = np.empty(n, np.int64)
    gate[o] = gate_s
    if nf:
        nfp = np.add.reduceat(fs.astype(np.int64), st)
        w = np.arange(B, dtype=np.int64)
        vv = nfp[:, None] - B + w[None, :]       # per touched plane, the new row's sources
        f0 = cf[st][:, None]
        newrow = np.where(vv >= 0, pid_s[F[np.clip(f0 + vv, 0, max(nf - 1, 0))]],
                          R[up[:, None], np.clip(B + vv, 0, B - 1)])
        R[up] = newrow
    return gate, pid


def _mixed_front_of(ta, lpn, nsec, top, seq, tser, media, ptx, R, pid0, g: MediaGeometry, xfer, pow2: bool):
    """``MediaEngine._serve_mixed``'s page transactions (arrival ``ta``, page ``lpn``, sectors ``nsec``, op ``top``,
    ``seq``, serial ``tser``) -> what it schedules: ``media`` (bool) the transactions that need a media read, ``ptx``
    (ascending) the stores that fill a page (a program each); ``R`` the write backpressure ring (``_ring_push``, in
    place; new ids from ``pid0``), ``xfer`` the channel time per sector count. Returns (stores, their sectors, the
    read parts' sectors, programs issued, the stores' indices
    ``si``, their gates; the programs' page, ready (arrival + t_cmd), data-in time, gate and id; the media reads'
    indices ``ri`` and their arrival, page, channel, die, plane, data-in time, seq and serial; the stores' buffer
    invalidations (plane, page, seq + 1); their data-in items (channel, arrival + t_cmd, data-in time, serial)).
    The twin (``kernels._mixed_front``, two passes) where the twins run and the arrays are int64."""
    t_cmd = g.t_cmd_ns
    if len(lpn) >= _FRONT_TWIN_MIN and accel.enabled() and R.dtype == np.int64 and R.flags.c_contiguous and all(
            a.dtype == np.int64 for a in (ta, lpn, nsec, top, seq, tser, ptx, xfer)) and media.dtype == np.bool_:
        r = _mixed_front(*(np.ascontiguousarray(a) for a in (ta, lpn, nsec, top, seq, tser, media, ptx)), R,
                         pid0, g.channels, g.dies_per_channel, g.planes_per_die, xfer, t_cmd, OP_STORE, OP_ATOMIC)
        return (int(r[0]), int(r[1]), int(r[2]), int(r[3])) + tuple(r[4:])
    nt = len(lpn)
    is_st = (top == OP_STORE) | (top == OP_ATOMIC)
    is_rd = top != OP_STORE
    xst = xfer[nsec]
    ch, die, plane = _where_of(lpn, g, pow2)
    si = np.flatnonzero(is_st)
    fill = np.zeros(nt, bool)
    fill[ptx] = True
    pid_tx = np.full(nt, -1, np.int64)
    gate_st, pid_tx[si] = _ring_push(R, plane[si], fill[si], pid0)
    gate_tx = np.full(nt, -1, np.int64)
    gate_tx[si] = gate_st
    ri = np.flatnonzero(media)
    return (int(is_st.sum()), int(nsec[is_st].sum()), int(nsec[is_rd].sum()), len(ptx),
            si, gate_st, lpn[ptx], ta[ptx] + t_cmd, xst[ptx], gate_tx[ptx], pid_tx[ptx],
            ri, ta[ri], lpn[ri], ch[ri], die[ri], plane[ri], xst[ri], seq[ri], tser[ri],
            plane[si], lpn[si], seq[si] + 1, ch[si], ta[si] + t_cmd, xst[si], tser[si])


def _split_waiting_of(cnt, serial, ids, arrival, done):
    """``MediaEngine.submit``'s requests of an in-order batch without errors (``serial``, ``ids``, ``arrival``, ``done``
    each), ``cnt`` of whose pages wait for their transfer: those with ``cnt`` > 0 as pending rows (serial, id as
    uint64, arrival, done, count), the others' completion rows (id, modeled ns = done - arrival). The twin
    (``kernels._split_waiting``) where the twins run and the arrays are int64 (``ids`` uint64)."""
    if len(cnt) >= _WAIT_TWIN_MIN and accel.enabled() and ids.dtype == np.uint64 and all(
            a.dtype == np.int64 for a in (cnt, serial, arrival, done)):
        return _split_waiting(cnt, serial, ids, arrival, done)
    pm = cnt > 0
    idx = np.flatnonzero(pm)
    show = ~pm
    return serial[pm], ids[idx].astype(np.uint64), arrival[idx], done[pm], cnt[pm], ids[show], (done - arrival)[show]


def _where_of(lpn, g: MediaGeometry, pow2: bool):
    """(channel, global die, global plane) of logical pages (interleave 0); ``pow2``: every count a power of two
    (shifts and masks, the same numbers)."""
    C, D, P = g.channels, g.dies_per_channel, g.planes_per_die
    if pow2:
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


def _map_ref(r: np.ndarray, idx: np.ndarray, poff: int, valid: np.ndarray | None = None) -> np.ndarray:
    """Buffer refs local to a lookup part -> global: read k of the part -> idx[k]; pseudo -1-j ->
    pseudo -1-(j + poff). ``valid``: entries that hold a page (the others are ignored)."""
    out = r - poff
    pos = r >= 0
    if valid is not None:
        pos &= valid
    if pos.any():
        out[pos] = idx[r[pos]]
    return out


class MediaEngine:
    """The NAND media model (see module doc)."""

    name = "media"

    def __init__(self, geometry: MediaGeometry, *, trace: bool = False) -> None:
        g = self.g = geometry
        # trace (tests): every busy interval as (resource kind, resource id, start, end)
        self.trace: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] | None = [] if trace else None
        self.plane_free = np.zeros(g.planes, np.int64)
        self.chan_free = np.zeros(g.channels, np.int64)
        self.slots = DieCarry(g.dies, g.queue_depth)      # outstanding slot releases per die
        nb = g.page_buffers_per_plane
        self.bpage = np.full((g.planes, nb), -1, np.int64)   # page buffers, MRU first (-1: empty)
        self.bready = np.zeros((g.planes, nb), np.int64)
        self.ftl = Ftl(g)
        self.buf: dict[int, list[int]] = {}        # write buffer: lpn -> [sector mask, first store time]
        self._timers: list[tuple[int, int, int]] = []   # (due, lpn, first store time)
        self._pending: list[np.ndarray] = []
        self.horizon = 0                           # latest arrival seen
        self._seq = 0                              # global page-transaction sequence (FCFS ties)
        self._serial = 0                           # global request serial
        self._dq: list[dict[str, np.ndarray]] = []  # chunks of channel items not decided yet
        self._dq_min: list[int] = []
        self._pr_chunks: list[dict[str, np.ndarray]] = []   # requests waiting for deferred pages
        self._fresh: list[np.ndarray] = []         # serials deferred during the current submit
        self._since_collect = False
        # array commands (programs, GC, flush, refresh) not started by the decision limit of the last
        # die stage: re-scheduled with the next batch's reads (module doc, "Exactness across batches")
        self._pq: dict[str, np.ndarray] | None = None
        self._stale: np.ndarray | None = None     # dies whose pending commands have no schedule (p_*) yet (round 15)
        self._bufs = _Bufs()                       # the pending set's arrays, with room to grow
        self._dec_h = 0                            # no arrival comes before this (decisions up to it + t_cmd)
        self._pq_dec_h = 0                         # the _dec_h the pending set was last computed with
        self._adv_now = 0                          # latest advance(now)
        self._disorder = False                     # an arrival came before the latest arrival or advance
        self._tail_kept = self._tail_redone = 0    # pending commands kept / scheduled again (_reschedule_tail)
        self._tail_plane_dies = 0                  # dies whose tail _tail_plane scheduled
        self._tail_gates = None                    # (P, N) gate positions of the last _tail_plane that did all
        self._lk_order: np.ndarray | None = None   # _lookup_runs's plane order when it found only misses
        # write backpressure: per plane the ids of its last B programs (issue order), the ends of decided
        # programs, and store data-ins waiting for an undecided program's end
        self._ring = np.full((g.planes, g.page_buffers_per_plane), -1, np.int64)
        self._pid = 0
        self._pend_end = _Ends()
        self._gated: list[dict[str, np.ndarray]] = []
        self._gated_seen = -1                  # _pend_end.version when every chunk of _gated was last checked
        # statistics
        self.chan_busy_ns = np.zeros(g.channels, np.int64)
        self.qdelay = LogHistogram()
        self.first_arrival: int | None = None
        self.last_completion = 0
        self.n = {k: 0 for k in ("requests", "served", "io_error", "unsupported", "page_reads", "senses",
                                 "buffer_hits", "coalesced_reads", "write_buffer_hits", "stores", "programs",
                                 "flush_programs", "copybacks", "erases", "read_bytes", "write_bytes",
                                 "fast_batches", "event_batches", "event_dies", "out_of_order_arrivals",
                                 "qd_bound_batches", "qd_bound_dies", "deferred_pages", "refresh_pages")}
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
        ids = batch["id"]
        status = None                          # None: every request is served (the common case)
        reads = None                           # (arrival, address, bytes): every request a valid read, sorted
        valid = False                          # every request valid and in arrival order (int64 arrays made)
        if n > _SMALL and accel.enabled():
            arrival, addr, nbytes, op, code = _read_front(
                batch["arrival_ns"], batch["media_address"], batch["bytes"], batch["op"], g.capacity_bytes,
                ctl.HBF_N_OPS, OP_STORE, OP_ATOMIC, _MAX_TIME)
            if code == 2 and not self.buf and self._pq is None and self.trace is None:   # (_reads_compiled_ok)
                reads = arrival, addr, nbytes
                op = unsup = bad = None
            elif code:
                valid = True
                unsup = bad = None
                if code == 2:                  # (the front writes the ops only for a batch with a store)
                    op = batch["op"].astype(np.int64)
        if reads is None and not valid:
            amax_u = int(batch["arrival_ns"].max())
            if amax_u >= _MAX_TIME:
                raise MediaError("arrival_ns beyond 2^62", max_arrival=amax_u)
            arrival = batch["arrival_ns"].astype(np.int64)
            addr = batch["media_address"].astype(np.int64)
            nbytes = batch["bytes"].astype(np.int64)
            op = batch["op"].astype(np.int64)
            unsup = op >= ctl.HBF_N_OPS
            bad = ~unsup & ((nbytes <= 0) | (addr < 0) | (addr + nbytes > g.capacity_bytes))
        if reads is None and not valid and (unsup.any() or bad.any()):
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
            if reads is not None or valid or (ok is None and (n == 1 or bool((arrival[1:] >= arrival[:-1]).all()))):
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
            if amin < max(self.horizon, self._adv_now):
                self._disorder = True
            self._run_timers(amin)
            if self.first_arrival is None:
                self.first_arrival = amin
            self.horizon = max(self.horizon, amax)
            self._dec_h = self.horizon
            serial = self._serial + np.arange(nok, dtype=np.int64)
            self._serial += nok
            self._fresh = []
            if reads is not None:
                d = self._serve_reads_compiled(a_s, ad_s, nb_s, serial)
            else:
                d = self._serve(a_s, ad_s, nb_s, op_s, serial, valid and code == 1)
            if order is None:
                done = d
            else:
                done[order] = d
            if self._fresh:        # requests with pages whose transfer is not decided yet
                fr = self._fresh[0] if len(self._fresh) == 1 else np.concatenate(self._fresh)
                cnt = np.bincount(fr - int(serial[0]), minlength=nok)
                if _WAIT_ALL_ROWS and order is None and nok == n and len(fr) >= n and bool(cnt.all()):
                    # every request waits (a burst): the same pending rows, without the gathers
                    self._add_pending(serial, ids.astype(np.uint64), arrival, d, cnt)
                    show = False
                elif order is None and nok == n:
                    # (some requests wait: their pending rows and the others' completion rows, _split_waiting_of)
                    ps, pid, pa, pd, pc, oid, omod = _split_waiting_of(cnt, serial, ids, arrival, d)
                    self._add_pending(ps, pid, pa, pd, pc)
                    show = (oid, omod)
                else:
                    pm = cnt > 0
                    idx = np.flatnonzero(pm) if order is None else order[pm]
                    self._add_pending(serial[pm], ids[idx].astype(np.uint64), arrival[idx], d[pm], cnt[pm])
                    show = np.ones(n, bool)
                    show[idx] = False
                self._fresh = []
            self.last_completion = max(self.last_completion, int(d.max()))
            self.slots.prune(self._keep_h())
            self._prune_ends()
        if show is False:                      # nothing completes in this call
            self.n["served"] += nok
            self._since_collect = True
            return
        if type(show) is tuple:                # (the completion rows made by _split_waiting_of; no error here)
            out = np.empty(len(show[0]), COMPLETION_BATCH_DTYPE)
            out["id"], out["modeled_ns"] = show
            out["status"] = ctl.HBF_ST_READY
            self.n["served"] += nok
            self._pending.append(out)
            self._since_collect = True
            return
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
        self._pr_chunks.append({"serial": serial, "id": ids, "arrival": arrival, "done": done.copy(),
                                "rem": rem.astype(np.int64)})

    def _pr_all(self):
        ch = self._pr_chunks
        if not ch:
            return None
        if len(ch) > 1:
            self._pr_chunks = [{k: np.concatenate([c[k] for c in ch]) for k in ch[0]}]
        return self._pr_chunks[0]

    def _complete_parts(self, serial, done) -> None:
        """Deferred pages of pending requests got their completion times."""
        if len(serial) == 0:
            return
        if len(self._pr_chunks) > 1 and self._complete_every_last(serial, done):
            return
        pr = self._pr_all()
        if pr is None:
            raise MediaError("internal: deferred page of an unknown request")
        if len(serial) == len(pr["serial"]) and np.array_equal(serial, pr["serial"]):
            # one page of every pending request, in order (a quiet scan's final decision)
            np.maximum(pr["done"], done, out=pr["done"])
            pr["rem"] -= 1
        else:
            if len(pr["serial"]) >= _PARTS_TWIN_MIN and accel.enabled() and all(
                    pr[k].dtype == np.int64 for k in ("serial", "arrival", "done", "rem")) \
                    and serial.dtype == np.int64 and done.dtype == np.int64:
                # (the same completions and requests left, in one pass; pr's arrays are the pending set's own:
                # _add_pending and _pr_all made them, so the requests left move to their fronts in place)
                st, fid, fmod, mx, left = _parts_update(pr["serial"], pr["id"], pr["arrival"], pr["done"], pr["rem"],
                                                        serial, done)
                if st == 0:
                    raise MediaError("internal: deferred page of an unknown request")
                if len(fid):
                    out = np.empty(len(fid), COMPLETION_BATCH_DTYPE)
                    out["id"] = fid
                    out["modeled_ns"] = fmod.astype(np.uint64)
                    out["status"] = ctl.HBF_ST_READY
                    self._pending.append(out)
                    self.last_completion = max(self.last_completion, int(mx))
                    self._pr_chunks = [{k: v[:left] for k, v in pr.items()}] if left else []
                return
            idx = np.searchsorted(pr["serial"], serial)
            if (idx >= len(pr["serial"])).any() or (pr["serial"][np.minimum(idx, len(pr["serial"]) - 1)] != serial).any():
                raise MediaError("internal: deferred page of an unknown request")
            if len(idx) == 1 or bool((idx[1:] > idx[:-1]).all()):     # one deferred page per request
                pr["done"][idx] = np.maximum(pr["done"][idx], done)
                pr["rem"][idx] -= 1
            else:
                _max_at(pr["done"], idx, done)
                pr["rem"] -= np.bincount(idx, minlength=len(pr["serial"]))
        fin = pr["rem"] == 0
        if fin.all():
            out = np.empty(len(fin), COMPLETION_BATCH_DTYPE)
            out["id"] = pr["id"]
            out["modeled_ns"] = (pr["done"] - pr["arrival"]).astype(np.uint64)
            out["status"] = ctl.HBF_ST_READY
            self._pending.append(out)
            self.last_completion = max(self.last_completion, int(pr["done"].max()))
            self._pr_chunks = []
        elif fin.any():
            out = np.empty(int(fin.sum()), COMPLETION_BATCH_DTYPE)
            out["id"] = pr["id"][fin]
            out["modeled_ns"] = (pr["done"][fin] - pr["arrival"][fin]).astype(np.uint64)
            out["status"] = ctl.HBF_ST_READY
            self._pending.append(out)
            self.last_completion = max(self.last_completion, int(pr["done"][fin].max()))
            keep = ~fin
            self._pr_chunks = [{k: v[keep] for k, v in pr.items()}] if keep.any() else []

    def _complete_every_last(self, serial, done) -> bool:
        """``_complete_parts`` where ``serial`` is one page of every pending request, in order, and the last
        page of each (a quiet scan's final decision after a burst): the requests complete chunk by chunk of
        ``_pr_chunks``, without concatenating them (the same completions). False (nothing done) otherwise."""
        if not self._every_last([serial]):
            return False
        self._complete_all_pending(done)
        return True

    def _every_last(self, parts) -> bool:
        """Whether the serials ``parts`` (consecutive pieces, not concatenated) are one page of every pending
        request, in order, and the last page of each (``_complete_every_last``'s condition)."""
        ch = self._pr_chunks
        if sum(len(c["serial"]) for c in ch) != sum(len(p) for p in parts):
            return False
        pi, off = 0, 0                         # piece of ``parts`` and the offset in it
        for c in ch:
            m = len(c["serial"])
            want = c["serial"]
            k = 0
            while k < m:                       # c's serials against the pieces they span
                while off == len(parts[pi]):
                    pi, off = pi + 1, 0
                t = min(m - k, len(parts[pi]) - off)
                if not np.array_equal(want[k:k + t], parts[pi][off:off + t]):
                    return False
                k += t
                off += t
            if not bool((c["rem"] == 1).all()):
                return False
        return True

    def _complete_all_pending(self, done) -> None:
        """Complete every pending request, chunk by chunk, its last page done at ``done`` (in order)."""
        ch = self._pr_chunks
        out = np.empty(len(done), COMPLETION_BATCH_DTYPE)
        oid, mod = out["id"], out["modeled_ns"]
        last = self.last_completion
        pos = 0
        for c in ch:
            m = len(c["serial"])
            d = np.maximum(c["done"], done[pos:pos + m])
            oid[pos:pos + m] = c["id"]
            mod[pos:pos + m] = (d - c["arrival"]).astype(np.uint64)
            last = max(last, int(d.max()))
            pos += m
        out["status"] = ctl.HBF_ST_READY
        self._pending.append(out)
        self.last_completion = last
        self._pr_chunks = []

    _DQ_KEYS = ("ch", "rd", "x", "seq", "serial", "q0")
    _GATED_KEYS = _DQ_KEYS + ("gate",)        # a chunk of stores waiting for their gate (_serve_mixed)

    def _commit_all_chunks(self) -> bool:
        """``_commit_deferred()`` (decide every deferred transfer: a quiet scan after a burst) without
        concatenating the chunks' seq and serial: where the chunks hold 4096 items or more, their seqs rise
        across all of them (the order ``_chan_lindley`` then takes needs no seq), the twins are on, nothing is
        traced and the chunks are the last pages of every pending request, in order (``_complete_every_last``
        with the serials in pieces). The same decisions, completions and state as ``_take_deferred(None)``,
        ``_chan_lindley``, ``_complete_parts``; False (nothing done) where one of these does not hold."""
        dq = self._dq
        n = sum(len(c["rd"]) for c in dq)
        if n < 4096 or self.trace is not None or not accel.enabled() or len(self._pr_chunks) < 2:
            return False
        last = None
        for c in dq:
            sq = c["seq"]
            if len(sq) == 0:
                continue
            if not bool((sq[1:] > sq[:-1]).all()):
                return False
            if last is not None and int(sq[0]) <= last:
                return self._commit_merged()
            last = int(sq[-1])
        if not self._every_last([c["serial"] for c in dq]):
            return False
        # (the keys from the chunks in place: ch and rd never concatenated)
        pk = packed_keys_parts([c["ch"] for c in dq], self.g.channels, [c["rd"] for c in dq])
        if pk is None:                         # (keys beyond 63 bits: the general path)
            return False
        it = {k: np.concatenate([c[k] for c in dq]) for k in ("x", "q0")}
        self._dq, self._dq_min = [], []
        done, qv = _chan_fcfs_packed(pk[0], pk[1], pk[2], pk[3], it["x"], it["q0"], self.chan_free,
                                     self.chan_busy_ns)
        self.qdelay.add(qv)
        self._complete_all_pending(done)
        return True

    def _commit_merged(self) -> bool:
        """``_commit_all_chunks`` where the chunks' seqs rise in each chunk but not across them (wt/eng19: a burst's
        quiet scan, whose read chunks are followed by the store data-in chunks ``_release_gated`` let go, their seqs
        among the reads'): the items put in seq order (a stable sort of the concatenated seqs: the chunks are its
        runs) and, where their serials are then one page of every pending request, in order, and the last page of
        each (``_every_last``), decided by one sort of packed (channel, data ready, position) keys and completed
        chunk by chunk of the pending set (``_complete_all_pending``). The same order on each channel as
        ``_chan_lindley``'s (data ready, seq, position in the concatenation: the stable sort keeps that position
        among equal seqs), so the same decisions, ``chan_free``, ``chan_busy_ns`` and queueing delays (a histogram),
        and the same completions in the same order as ``_complete_parts`` (the pending set's order, every request
        done). False, nothing changed, where the serials are not that or the keys do not fit in 63 bits."""
        dq = self._dq
        o = np.argsort(np.concatenate([c["seq"] for c in dq]), kind="stable")
        serial = np.concatenate([c["serial"] for c in dq])[o]
        if not self._every_last([serial]):
            return False
        pk = packed_keys(np.concatenate([c["ch"] for c in dq])[o], self.g.channels,
                         np.concatenate([c["rd"] for c in dq])[o])
        if pk is None:                         # (keys beyond 63 bits: the general path)
            return False
        x = np.concatenate([c["x"] for c in dq])[o]
        q0 = np.concatenate([c["q0"] for c in dq])[o]
        self._dq, self._dq_min = [], []
        done, qv = _chan_fcfs_packed(pk[0], pk[1], pk[2], pk[3], x, q0, self.chan_free, self.chan_busy_ns)
        self.qdelay.add(qv)
        self._complete_all_pending(done)
        return True

    def _chan_lindley(self, it: dict[str, np.ndarray]) -> np.ndarray:
        """Channel stage: FCFS per channel by (data ready, seq) from the channels' next-free times."""
        g = self.g
        ch, rd, x, seq = it["ch"], it["rd"], it["x"], it["seq"]
        n = len(ch)
        if n == 0:
            return _E0
        if n == 1:
            c = int(ch[0])
            d = max(int(rd[0]), int(self.chan_free[c])) + int(x[0])
            self.chan_free[c] = d
            self.chan_busy_ns[c] += int(x[0])
            self.qdelay.add(np.array([d - int(x[0]) - int(it["q0"][0])], np.int64))
            if self.trace is not None:
                self.trace.append(("channel", ch.copy(), np.array([d - int(x[0])]), np.array([d])))
            return np.array([d], np.int64)
        if n <= _SMALL and self.trace is None:
            return self._chan_small(ch, rd, x, seq, it["q0"])
        if self.trace is None and accel.enabled():
            # FCFS per channel by (data ready, seq): one order for all channels, then a loop (compiled); many
            # items in seq order -> one sort of packed (channel, ready, index) keys (the same order)
            pk = None
            if bool((seq[1:] > seq[:-1]).all()):
                if n >= 4096:
                    pk = packed_keys(ch, g.channels, rd)
                o = np.argsort(rd, kind="stable") if pk is None else None
            else:
                o = rank_order(rd, seq) if n >= _RANK_ORDER_MIN else None     # (= np.lexsort((seq, rd)))
                if o is None:
                    o = np.lexsort((seq, rd))
            if pk is not None:
                done, qv = _chan_fcfs_packed(pk[0], pk[1], pk[2], pk[3], x, it["q0"], self.chan_free,
                                             self.chan_busy_ns)
            else:
                done, qv = _chan_fcfs(o, ch, rd, x, it["q0"], self.chan_free, self.chan_busy_ns)
            self.qdelay.add(qv)
            return done
        # order by (channel, ready, seq): stable sorts on seq order (timsort gains from the runs
        # that plane-ordered sense ends form), then a radix sort by channel; items in seq order with
        # ready times far from sorted (a burst's deferred transfers) -> one sort of packed
        # (channel, ready, index) keys (the same order)
        if bool((seq[1:] > seq[:-1]).all()):
            o = None
            if 8 * int(np.count_nonzero(rd[1:] < rd[:-1])) > n:
                o = packed_order(ch, g.channels, rd)
            if o is None:
                o = np.argsort(rd, kind="stable")
                o = o[np.argsort(small_int(ch[o], g.channels), kind="stable")]
        else:
            o = np.lexsort((seq, rd))
            o = o[np.argsort(small_int(ch[o], g.channels), kind="stable")]
        c2 = ch[o]
        x2 = x[o]
        d2 = sorted_fcfs(rd[o], x2, c2, g.channels, self.chan_free)      # (sets chan_free)
        if d2 is None:
            d2 = segmented_fcfs(rd[o], x2, c2, self.chan_free)
            cst = segment_starts(c2)
            cend = segment_ends(cst, n)
            self.chan_free[c2[cend]] = d2[cend]
        if n < 64:
            np.add.at(self.chan_busy_ns, c2, x2)
        else:
            self.chan_busy_ns += np.bincount(c2, weights=x2, minlength=g.channels).astype(np.int64)
        if self.trace is not None:
            self.trace.append(("channel", c2, d2 - x2, d2))
        done = np.empty(n, np.int64)
        done[o] = d2
        self.qdelay.add(done - x - it["q0"])     # (a histogram: the order of the values is immaterial)
        return done

    def _chan_small(self, ch, rd, x, seq, q0) -> np.ndarray:
        """``_chan_lindley`` of a few items in plain Python (the same order and arithmetic)."""
        chl, rdl, xl = ch.tolist(), rd.tolist(), x.tolist()
        n = len(chl)
        order = sorted(range(n), key=list(zip(chl, rdl, seq.tolist())).__getitem__)
        cf = self.chan_free
        busy = self.chan_busy_ns
        free: dict[int, int] = {}
        done = [0] * n
        for i in order:
            c = chl[i]
            f = free.get(c)
            if f is None:
                f = int(cf[c])
            r = rdl[i]
            d = (r if r > f else f) + xl[i]
            free[c] = d
            done[i] = d
        for c, f in free.items():
            cf[c] = f
        out = np.array(done, np.int64)
        np.add.at(busy, ch, x)
        self.qdelay.add(out - x - q0)
        return out

    def _channel_stage(self, new: dict[str, np.ndarray]) -> np.ndarray:
        """Transfers of the batch's channel items. An item whose data is ready by horizon + t_cmd
        can never be overtaken by a later arrival (a later arrival's data is ready no earlier; ties
        go by seq), so it is decided now; later ones wait (with the deferred items of earlier
        batches) for more arrivals, an ``advance`` past them, or a ``collect`` after a quiet scan.
        Returns completion times of ``new`` (0 = deferred)."""
        limit = self.horizon + self.g.t_cmd_ns
        rd = new["rd"]
        if not len(rd):
            return _E0
        commit = rd <= limit
        allc = bool(commit.all())
        old = self._take_deferred(limit) if self._dq else None
        if old is None and allc:
            return self._chan_lindley(new)
        if old is None and not commit.any():   # all deferred (a burst): the items as they are
            self._dq.append(new)
            self._dq_min.append(int(rd.min()))
            self._fresh.append(new["serial"])
            self.n["deferred_pages"] += len(rd)
            return np.zeros(len(rd), np.int64)
        out = np.zeros(len(rd), np.int64)
        if allc:
            ci = None
            cur = new
        else:
            ci, cur, di, chunk = _split_rows(new, commit)
            self._dq.append(chunk)
            self._dq_min.append(int(chunk["rd"].min()))
            self._fresh.append(chunk["serial"])
            self.n["deferred_pages"] += len(di)
        if old is not None:
            no = len(old["ch"])
            both = {k: np.concatenate([old[k], cur[k]]) for k in self._DQ_KEYS}
            dc = self._chan_lindley(both)
            self._complete_parts(old["serial"], dc[:no])
            dcur = dc[no:]
        else:
            dcur = self._chan_lindley(cur)
        if ci is None:
            out[:] = dcur
        else:
            out[ci] = dcur
        return out

    def _take_deferred(self, before: int | None, channels=None):
        """Remove and return the deferred items with data ready <= ``before`` (None: all)."""
        if not self._dq:
            return None
        if before is not None and before < min(self._dq_min):
            return None                        # (a burst's chunks wait for the quiet scan)
        take = []
        keep, keep_min = [], []
        for ch, mn in zip(self._dq, self._dq_min):
            if before is not None and mn > before:
                keep.append(ch)
                keep_min.append(mn)
                continue
            m = np.ones(len(ch["rd"]), bool) if before is None else ch["rd"] <= before
            if m.all():
                take.append(ch)
            else:
                take.append({k: v[m] for k, v in ch.items()})
                rest = {k: v[~m] for k, v in ch.items()}
                keep.append(rest)
                keep_min.append(int(rest["rd"].min()))
        self._dq, self._dq_min = keep, keep_min
        if not take:
            return None
        if len(take) == 1:
            return take[0]
        return {k: np.concatenate([c[k] for c in take]) for k in self._DQ_KEYS}

    def _commit_deferred(self, before: int | None = None) -> None:
        """Decide deferred transfers now (all, or data ready <= ``before``)."""
        if before is None and len(self._dq) > 1 and self._commit_all_chunks():
            return
        old = self._take_deferred(before)
        if old is None:
            return
        dc = self._chan_lindley(old)
        self._complete_parts(old["serial"], dc)

    def advance(self, now_ns: int) -> None:
        """Run write-buffer flushes (and the GC they trigger) due at or before ``now_ns``."""
        self._dec_h = max(self.horizon, int(now_ns))
        self._adv_now = max(self._adv_now, int(now_ns))
        self._run_timers(int(now_ns) + 1)
        self._settle(int(now_ns))
        self._commit_deferred(before=int(now_ns) + self.g.t_cmd_ns)
        self.slots.prune(self._keep_h())

    def collect(self) -> np.ndarray:
        """Completions decided so far. A collect with no submit since the previous one (the
        requester went quiet) decides every deferred transfer."""
        if not self._since_collect:
            self._settle(None)
            self._commit_deferred()
        self._since_collect = False
        if not self._pending:
            return np.zeros(0, COMPLETION_BATCH_DTYPE)
        out = _concat_records(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending = []
        return out

    def drain(self) -> np.ndarray:
        """Decide everything submitted so far and return all completions (tests, benchmarks)."""
        self._settle(None)
        self._commit_deferred()
        self._since_collect = False
        return self.collect()

    def flush(self, now_ns: int) -> None:
        """Program every partial page in the write buffer at ``now_ns`` (e.g. at shutdown)."""
        for lpn in list(self.buf):
            self._timers.append((int(now_ns), lpn, self.buf[lpn][1]))
        heapq.heapify(self._timers)
        self._run_timers(int(now_ns) + 1)

    # ------------------------------------------------------------------ transactions
    def _expand(self, a, addr, nbytes):
        """Requests (sorted by arrival) -> page transactions in (arrival, request, page) order."""
        pb = PAGE_BYTES
        first = addr // pb
        last = (addr + nbytes - 1) // pb
        npg = last - first + 1
        if int(npg.max()) == 1:
            req = None
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
        return _where_of(lpn, self.g, self._pow2)

    def _serve(self, a, addr, nbytes, op, serial, rw: bool = False) -> np.ndarray:
        """Schedule sorted requests; returns each request's completion time. ``rw``: the batch has a store (the
        caller's front found one; every request valid, int64 arrays)."""
        if rw and not self.buf and len(a) >= _FRONT_TWIN_MIN and accel.enabled() and self._ring.dtype == np.int64 \
                and self._xfer_by_sectors.dtype == np.int64:
            # (the transactions, the media reads, the programs and the stores' items in one compiled pass, where
            # each request is within a page and each store fills one: no write-buffer bookkeeping)
            g = self.g
            r = _mixed_req(a, addr, nbytes, op, serial, self._seq, self._ring, self._pid, g.channels,
                           g.dies_per_channel, g.planes_per_die, self._xfer_by_sectors, g.t_cmd_ns, OP_STORE,
                           OP_ATOMIC, PAGE_BYTES, SECTOR_BYTES)
            if r[0]:
                self._seq += len(a)
                done = self._serve_mixed_rest(a, None, r[1], op, None, serial, None, 0,
                                              (int(r[2]), int(r[3]), int(r[4]), int(r[5])) + tuple(r[6:]))
                return np.maximum(done, a)
        if not rw and len(a) > _SMALL and self._reads_compiled_ok() and not (
                (op == OP_STORE) | (op == OP_ATOMIC)).any():
            return self._serve_reads_compiled(a, addr, nbytes, serial)
        req, lpn, slo, shi = self._expand(a, addr, nbytes)
        nt = len(lpn)
        seq = 2 * (self._seq + np.arange(nt, dtype=np.int64))
        self._seq += nt
        if req is None:
            top, ta, tser = op, a, serial
        else:
            top, ta, tser = op[req], a[req], serial[req]
        nsec = shi - slo
        has_store = bool(((top == OP_STORE) | (top == OP_ATOMIC)).any())
        if not has_store and not self.buf:
            ch, die, plane = self._where(lpn)
            self.n["read_bytes"] += int(nsec.sum()) * SECTOR_BYTES
            rd_items = self._reads(ta, lpn, ch, die, plane, self._xfer_by_sectors[nsec], seq, tser, None, None)
            done = self._channel_stage(rd_items)
        else:
            done = self._serve_mixed(ta, lpn, slo, shi, top, seq, tser)
        if req is None:
            return np.maximum(done, a)
        out = a.copy()
        _max_at(out, req, done)
        return out

    def _reads_compiled_ok(self) -> bool:
        """Whether a batch of reads may go through the compiled read pass: the twins on, no write-buffer
        page, no pending array command, no trace."""
        return not self.buf and self._pq is None and self.trace is None and accel.enabled()

    def _serve_reads_compiled(self, a, addr, nbytes, serial) -> np.ndarray:
        """``_serve`` of a batch of media reads (no store, no write-buffer page, no pending array command)
        by the whole-batch compiled pass ``kernels._read_pass``: the same completions, state and counts as
        ``_expand`` / ``_where`` / ``_reads`` / ``_channel_stage`` give with the other twins on (the deferred
        transfers of earlier batches that the channel stage decides now are taken for the pass)."""
        g = self.g
        limit = self.horizon + g.t_cmd_ns
        old = self._take_deferred(limit) if self._dq else None
        o = _NO_ITEMS if old is None else old
        sl = self.slots
        (done, done_old, qv, f_ch, f_rd, f_x, f_seq, f_ser, f_q0, cnt, kd, kt) = _read_pass(
            a, addr, nbytes, self._seq, int(serial[0]), g.channels, g.dies_per_channel, g.planes_per_die,
            g.t_cmd_ns, g.t_read_ns, g.queue_depth, g.dies, self._xfer_by_sectors, self.bpage, self.bready,
            self.plane_free, sl.die, sl.t, self.horizon, limit, o["ch"], o["rd"], o["x"], o["seq"], o["q0"],
            self.chan_free, self.chan_busy_ns, _PAGE_SHIFT, _SECTOR_SHIFT)
        nt, nm, nh, nco, nsec, qdb, qdd = cnt.tolist()
        self._seq += nt
        sl.die, sl.t = kd, kt
        c = self.n
        c["read_bytes"] += nsec * SECTOR_BYTES
        c["page_reads"] += nt
        c["senses"] += nm
        c["buffer_hits"] += nh
        c["coalesced_reads"] += nco
        c["qd_bound_batches"] += qdb
        c["qd_bound_dies"] += qdd
        c["fast_batches"] += 1
        if len(f_ch):
            self._dq.append({"ch": f_ch, "rd": f_rd, "x": f_x, "seq": f_seq, "serial": f_ser, "q0": f_q0})
            self._dq_min.append(int(f_rd.min()))
            self._fresh.append(f_ser)
            c["deferred_pages"] += len(f_ch)
        if len(qv):
            self.qdelay.add(qv)
        if old is not None:
            self._complete_parts(old["serial"], done_old)
        return done

    # ------------------------------------------------------------------ page buffers
    def _lookup_runs(self, plane, page):
        """Page-buffer lookup of media reads on planes without invalidations (P_buf <= 2), vectorized:
        a plane's buffers after an arrival-ordered sequence are its last P_buf distinct-page runs.
        Returns (miss, ref, pseudo_ready, state) (see ``_lookup``)."""
        g = self.g
        P = g.page_buffers_per_plane
        n = len(plane)
        o = np.argsort(small_int(plane, g.planes), kind="stable")
        ps = plane[o]
        gs = page[o]
        st = segment_starts(ps)
        up = ps[st]
        nu = len(up)
        cnt = np.diff(np.append(st, n))
        bpg = self.bpage[up]
        if P == 2 and n > 2:
            # no page met twice on its plane within a window of three accesses (the carried
            # buffers included): every read is a miss, the new buffers are the last two accesses
            same1 = ps[1:] == ps[:-1]
            same2 = ps[2:] == ps[:-2]
            if not ((same1 & (gs[1:] == gs[:-1])).any() or (same2 & (gs[2:] == gs[:-2])).any()):
                g0 = gs[st]
                sec = np.minimum(st + 1, n - 1)
                has2 = np.append(same1, False)[st]
                if not ((g0 == bpg[:, 0]).any() or (g0 == bpg[:, 1]).any()
                        or (has2 & (gs[sec] == bpg[:, 0])).any()):
                    en = segment_ends(st, n)
                    s_page = np.empty((nu, 2), np.int64)
                    s_ref = np.empty((nu, 2), np.int64)
                    s_page[:, 0] = gs[en]
                    s_ref[:, 0] = o[en]
                    # LRU: the plane's previous access, or its carried MRU
                    npse = np.where(has2, 0, (bpg[:, 0] >= 0).astype(np.int64))
                    pk = np.flatnonzero(npse)
                    pready = self.bready[up[pk], 0]
                    s_page[:, 1] = np.where(has2, gs[np.maximum(en - 1, 0)], bpg[:, 0])
                    pref = np.zeros(nu, np.int64)
                    pref[pk] = -1 - np.arange(len(pk), dtype=np.int64)
                    s_ref[:, 1] = np.where(has2, o[np.maximum(en - 1, 0)], pref)
                    self._lk_order = o
                    return np.ones(n, bool), np.arange(n, dtype=np.int64), pready, (up, s_page, s_ref)
        # carried buffers of these planes become pseudo accesses (LRU first) before the batch's
        npse = (bpg >= 0).sum(axis=1)
        cum = np.cumsum(npse)
        tot = n + int(cum[-1])
        comb_plane = np.empty(tot, np.int64)
        comb_page = np.empty(tot, np.int64)
        src = np.empty(tot, np.int64)          # >= 0: read index; < 0: -1 - pseudo index
        # positions: plane u's segment begins at st[u] + cum_before(u)
        before = cum - npse
        seg0 = st + before
        bpos = np.arange(n, dtype=np.int64) + np.repeat(cum, cnt)
        comb_plane[bpos] = ps
        comb_page[bpos] = gs
        src[bpos] = o
        npt = int(cum[-1])
        pready = np.zeros(npt, np.int64)
        if npt:
            # pseudo k of plane u at seg0[u] + k: column npse[u] - 1 - k (LRU first)
            uu = np.repeat(np.arange(nu), npse)
            kk = np.arange(npt, dtype=np.int64) - np.repeat(before, npse)
            col = npse[uu] - 1 - kk
            ppos = seg0[uu] + kk
            comb_plane[ppos] = up[uu]
            comb_page[ppos] = bpg[uu, col]
            src[ppos] = -1 - np.arange(npt, dtype=np.int64)
            pready[:] = self.bready[up[uu], col]
        # runs over the combined sequence
        brk = np.empty(tot, bool)
        brk[0] = True
        np.not_equal(comb_page[1:], comb_page[:-1], out=brk[1:])
        brk[1:] |= comb_plane[1:] != comb_plane[:-1]
        rs = np.flatnonzero(brk)
        nr = len(rs)
        rpl = comb_plane[rs]
        rpg = comb_page[rs]
        hit = np.zeros(nr, bool)
        if P >= 2 and nr > 2:
            hit[2:] = (rpl[2:] == rpl[:-2]) & (rpg[2:] == rpg[:-2])
        ridx = np.arange(nr, dtype=np.int64)
        lr = np.where(hit, 0, ridx)
        if P >= 2:
            lr[0::2] = np.maximum.accumulate(lr[0::2])
            lr[1::2] = np.maximum.accumulate(lr[1::2])
        runid = np.cumsum(brk) - 1
        loader_pos = rs[lr[runid]]             # combined position of each element's loader
        lsrc = src[loader_pos]
        bmask = src >= 0
        # per read (batch element): miss iff it is its own loader
        ref = np.empty(n, np.int64)
        ref[src[bmask]] = lsrc[bmask]
        miss = ref == np.arange(n, dtype=np.int64)
        # new state: last P runs of each plane (MRU first)
        seg_end = np.append(seg0[1:], tot) - 1
        r_last = runid[seg_end]
        s_page = np.full((nu, P), -1, np.int64)
        s_ref = np.zeros((nu, P), np.int64)
        s_page[:, 0] = rpg[r_last]
        s_ref[:, 0] = src[rs[lr[r_last]]]
        if P >= 2:
            r_prev = r_last - 1
            okp = (r_prev >= 0) & (rpl[np.maximum(r_prev, 0)] == up)
            rp = np.maximum(r_prev, 0)
            s_page[:, 1] = np.where(okp, rpg[rp], -1)
            s_ref[:, 1] = np.where(okp, src[rs[lr[rp]]], 0)
        return miss, ref, pready, (up, s_page, s_ref)

    def _lookup_loop(self, ev_plane, ev_page, ev_read, nread_index):
        """Page-buffer lookup, one event at a time (planes with invalidations, or P_buf > 2).
        Events in (arrival, seq) order: reads (``ev_read``, numbered by ``nread_index``) and
        invalidations. Same outputs as ``_lookup_runs``."""
        P = self.g.page_buffers_per_plane
        if accel.enabled():
            m, r, pr, up, sp, sr = _lookup_events(np.ascontiguousarray(ev_plane, np.int64),
                                                  np.ascontiguousarray(ev_page, np.int64),
                                                  np.ascontiguousarray(ev_read, np.bool_),
                                                  np.ascontiguousarray(nread_index, np.int64), self.bpage, self.bready)
            return m, r, pr, (up, sp, sr)
        state: dict[int, list[list[int]]] = {}
        pready: list[int] = []
        miss: list[bool] = []
        ref: list[int] = []
        for p, pg, isr, ri in zip(ev_plane.tolist(), ev_page.tolist(), ev_read.tolist(), nread_index.tolist()):
            s = state.get(p)
            if s is None:
                s = state[p] = []
                for c in range(P):
                    bp = int(self.bpage[p, c])
                    if bp < 0:
                        break
                    s.append([bp, -1 - len(pready)])
                    pready.append(int(self.bready[p, c]))
            k = next((i for i, e in enumerate(s) if e[0] == pg), -1)
            if not isr:
                if k >= 0:
                    del s[k]
                continue
            if k >= 0:
                e = s.pop(k)
                s.insert(0, e)
                miss.append(False)
                ref.append(e[1])
            else:
                s.insert(0, [pg, ri])
                del s[P:]
                miss.append(True)
                ref.append(ri)
        up = np.array(sorted(state), np.int64)
        s_page = np.full((len(up), P), -1, np.int64)
        s_ref = np.zeros((len(up), P), np.int64)
        for u, p in enumerate(up.tolist()):
            for c, e in enumerate(state[p]):
                s_page[u, c] = e[0]
                s_ref[u, c] = e[1]
        return (np.array(miss, bool), np.array(ref, np.int64), np.array(pready, np.int64), (up, s_page, s_ref))

    def _reads(self, ta, lpn, ch, die, plane, x, seq, tser, inval, cmds):
        """Media reads (in (arrival, seq) order) -> channel items. ``inval``: (plane, page, seq) of
        the batch's buffer invalidations (stores) or None; ``cmds``: the batch's other array commands
        (kind, ready, plane, die, service) or None."""
        g = self.g
        n = len(ta)
        t_cmd = g.t_cmd_ns
        if 0 < n <= _SMALL and inval is None and cmds is None and self._pq is None and self.trace is None:
            return self._reads_small(ta, lpn, ch, die, plane, x, seq, tser)
        if n:
            self.n["page_reads"] += n
        loopm = None
        if g.page_buffers_per_plane > 2 or (n <= 16 and inval is None) or accel.enabled():
            loopm = np.ones(n, bool)       # (small batches, and compiled: one event at a time is cheaper)
        elif inval is not None and len(inval[0]):
            ip, ipg, _ = inval
            # invalidations that can matter: their page is read in the batch or buffered now
            rel = np.isin(ipg, lpn) | (self.bpage[ip] == ipg[:, None]).any(axis=1)
            if rel.any():
                lp_planes = np.unique(ip[rel])
                loopm = np.isin(plane, lp_planes)
                if not loopm.any() and not rel.any():
                    loopm = None
        parts = []
        self._lk_order = None          # set by _lookup_runs when it finds only misses: its plane order
        if loopm is None:
            if n:
                parts.append((None, self._lookup_runs(plane, lpn)))      # None: every read, in order
        else:
            vi = np.flatnonzero(~loopm)
            if len(vi):
                parts.append((vi, self._lookup_runs(plane[vi], lpn[vi])))
            li = np.flatnonzero(loopm)
            if len(li) == n:
                ev_p, ev_g, ev_r, ev_i = plane, lpn, np.ones(n, bool), np.arange(n, dtype=np.int64)
                if inval is not None and len(inval[0]):
                    ev_p, ev_g, ev_r, ev_i = _events_in_seq(plane, lpn, seq, inval)
                li = np.arange(n, dtype=np.int64)
                parts = [(None, self._lookup_loop(ev_p, ev_g, ev_r, ev_i))]   # (refs global already)
            else:
                im = np.isin(inval[0], lp_planes)
                ev_p = np.concatenate([plane[li], inval[0][im]])
                ev_g = np.concatenate([lpn[li], inval[1][im]])
                ev_r = np.concatenate([np.ones(len(li), bool), np.zeros(int(im.sum()), bool)])
                ev_s = np.concatenate([seq[li], inval[2][im]])
                ev_i = np.concatenate([np.arange(len(li), dtype=np.int64), np.zeros(int(im.sum()), np.int64)])
                o = np.argsort(ev_s, kind="stable")
                parts.append((li, self._lookup_loop(ev_p[o], ev_g[o], ev_r[o], ev_i[o])))
        # combine parts: refs local to each part -> global read index / global pseudo index
        miss = np.zeros(n, bool)
        ref = np.zeros(n, np.int64)
        pready_all = []
        states = []
        poff = 0
        for idx, (m, r, pr, (up, sp, sr)) in parts:
            if idx is None:                    # the only part: refs are global already
                miss, ref = m, r
                states.append((up, sp, sr))
            else:
                miss[idx] = m
                ref[idx] = _map_ref(r, idx, poff)
                states.append((up, sp, _map_ref(sr, idx, poff, sp >= 0)))
            pready_all.append(pr)
            poff += len(pr)
        pready = np.concatenate(pready_all) if len(pready_all) > 1 else (pready_all[0] if pready_all else _E0)
        # die/plane stage for the misses (and the other array commands)
        allmiss = bool(miss.all())
        lk_order = self._lk_order if len(parts) == 1 and parts[0][0] is None else None
        mi = None if allmiss else np.flatnonzero(miss)
        nm = n if allmiss else len(mi)
        self.n["senses"] += nm
        if cmds is None and self._pq is None:
            if allmiss:
                E = fifo_exact(ta, die, plane, g.t_read_ns, t_cmd=t_cmd, queue_depth=g.queue_depth,
                               nplanes=g.planes, ndies=g.dies, plane_free=self.plane_free, carry=self.slots,
                               horizon=self.horizon, stats=self.n, plane_order=lk_order) \
                    if n else np.zeros(0, np.int64)
                if self.trace is not None and n:
                    self.trace.append(("plane", plane.copy(), E - g.t_read_ns, E.copy()))
            else:
                E = np.zeros(n, np.int64)
                if nm:
                    E[mi] = fifo_exact(ta[mi], die[mi], plane[mi], g.t_read_ns, t_cmd=t_cmd,
                                       queue_depth=g.queue_depth, nplanes=g.planes, ndies=g.dies,
                                       plane_free=self.plane_free, carry=self.slots, horizon=self.horizon,
                                       stats=self.n)
                    if self.trace is not None:
                        self.trace.append(("plane", plane[mi], E[mi] - g.t_read_ns, E[mi]))
            self.n["fast_batches"] += 1
        else:
            if allmiss and ta.flags.c_contiguous and die.flags.c_contiguous and plane.flags.c_contiguous:
                E = self._array_ops(ta, die, plane, cmds)      # (every read: no gathers; it reads them only)
            else:
                E = np.zeros(n, np.int64)
                if allmiss:
                    mi = np.arange(n, dtype=np.int64)
                E[mi] = self._array_ops(ta[mi], die[mi], plane[mi], cmds)
        # data ready, buffer state
        if allmiss:
            rd = E
            q0 = ta + t_cmd + g.t_read_ns
        else:
            rd, q0, nh, nco = _data_ready(ta, t_cmd, g.t_read_ns, miss, ref, E, pready)
            self.n["coalesced_reads"] += nco
            self.n["buffer_hits"] += nh - nco
        E1 = E if n else np.zeros(1, np.int64)   # a part without reads refers to no read (sr < 0 everywhere)
        for up, sp, sr in states:
            _buffer_rows(self.bpage, self.bready, up, sp, sr, E1, pready)
        return {"ch": ch, "rd": rd, "x": x, "seq": seq, "serial": tser, "q0": q0}

    def _reads_small(self, ta, lpn, ch, die, plane, x, seq, tser):
        """``_reads`` of a few reads (no stores, no other array commands), one at a time in plain
        Python: the same lookup, die stage and buffer state (the die stage in its slot form: a
        miss is admitted at max(arrival, the Q-th largest earlier release of its die, carried ones
        included), which the sorted-release form of ``diestage`` equals)."""
        g = self.g
        n = len(ta)
        t_cmd, t_r, Q, P = g.t_cmd_ns, g.t_read_ns, g.queue_depth, g.page_buffers_per_plane
        self.n["page_reads"] += n
        bpage, bready = self.bpage, self.bready
        cd, ct = self.slots.die, self.slots.t
        state: dict[int, list[list[int]]] = {}
        rel: dict[int, list[int]] = {}
        pf: dict[int, int] = {}
        rd = [0] * n
        q0 = [0] * n
        md: list[int] = []
        me: list[int] = []
        nh = nco = 0
        for i, (a, pg, d, p) in enumerate(zip(ta.tolist(), lpn.tolist(), die.tolist(), plane.tolist())):
            sb = state.get(p)
            if sb is None:
                sb = state[p] = []
                for bp, br in zip(bpage[p].tolist(), bready[p].tolist()):
                    if bp < 0:
                        break
                    sb.append([bp, br])
            early = a + t_cmd
            for k, e in enumerate(sb):
                if e[0] == pg:
                    if k:
                        del sb[k]
                        sb.insert(0, e)
                    rb = e[1]
                    if rb > early:
                        nco += 1
                        rd[i] = rb
                    else:
                        nh += 1
                        rd[i] = early
                    q0[i] = early
                    break
            else:
                R = rel.get(d)
                if R is None:
                    R = rel[d] = sorted(ct[cd == d].tolist()) if len(cd) else []
                A = a
                if len(R) >= Q and R[-Q] > a:
                    A = R[-Q]
                f = pf.get(p)
                if f is None:
                    f = int(self.plane_free[p])
                E = (A + t_cmd if A + t_cmd > f else f) + t_r
                pf[p] = E
                bisect.insort(R, E)
                sb.insert(0, [pg, E])
                del sb[P:]
                rd[i] = E
                q0[i] = early + t_r
                md.append(d)
                me.append(E)
        for p, sb in state.items():
            row = [e[0] for e in sb] + [-1] * (P - len(sb))
            bpage[p] = row
            bready[p] = [e[1] for e in sb] + [0] * (P - len(sb))
        for p, f in pf.items():
            self.plane_free[p] = f
        if md:
            self.slots.put(np.array(md, np.int64), np.array(me, np.int64), self.horizon)
        self.n["senses"] += len(md)
        self.n["buffer_hits"] += nh
        self.n["coalesced_reads"] += nco
        self.n["fast_batches"] += 1
        return {"ch": ch, "rd": np.array(rd, np.int64), "x": x, "seq": seq, "serial": tser,
                "q0": np.array(q0, np.int64)}

    # ------------------------------------------------------------------ array commands
    _CMD_KEYS = ("kind", "base", "gx", "gate", "plane", "die", "svc", "pid", "join", "floor")

    def _array_ops(self, r_read, die_read, plane_read, cmds):
        """Read senses plus the other array commands (``cmds``: a dict of ``_CMD_KEYS`` arrays in
        creation order, or None) and the commands still pending from earlier batches: the vectorized
        FIFO form on dies with reads alone, the event scheduler (read priority, write backpressure) on
        dies with other commands. Commands that start at or after the decision limit (``_dec_h`` +
        t_cmd: a later read could still go before them) stay pending, with the schedule computed for
        them (``p_*``); the others are decided. A die with pending commands and no new read keeps the
        schedule of those admitted before its first new arrival and schedules only the rest again with
        its new commands (``_behind_pending``, ``_reschedule_tail``); where that is not shown exact, the
        die is scheduled again from the start. Returns the sense ends of the reads (and sets
        ``self._cmd_end``, the new commands' ends as scheduled now, for flush and refresh)."""
        g = self.g
        t_cmd = g.t_cmd_ns
        pq = self._pq
        self._bufs.begin(pq)
        self._consumed = False                     # (set where _behind_pending compacts the pending set in place)
        nnew = 0 if cmds is None else len(cmds["kind"])
        nr = len(r_read)
        Er = np.zeros(nr, np.int64)
        cmd_end = np.zeros(nnew, np.int64)
        limit = self._dec_h + t_cmd
        pend_out = []
        stale = None                               # (dies whose pending commands were not scheduled: round 15)
        # dies whose pending commands keep their schedule: no new read there
        keepd = None
        if pq is not None:
            keepd = np.zeros(g.dies, bool)
            keepd[pq["die"]] = True
            if nr:
                keepd[die_read] = False
            if self._stale is not None:            # (round 15: their schedule was not computed: again from the start)
                keepd &= ~self._stale
            if not keepd.any():
                keepd = None
        if keepd is not None:
            kp = keepd[pq["die"]]
            kn = keepd[cmds["die"]] if nnew else np.zeros(0, bool)
            res = self._behind_pending(pq if kp.all() else {k: v[kp] for k, v in pq.items()},
                                       {k: v[kn] for k, v in cmds.items()} if kn.any() else None, keepd)
            if res is not None:
                okd, kq, kend_new = res
                ok_n = okd[cmds["die"]] & kn if nnew else kn
                cmd_end[ok_n] = kend_new
                if kq is not None:
                    pend_out.append(kq)
                if self._consumed and kp.all():  # (pq's arrays compacted in place: every die of it was handled)
                    pq = None
                else:
                    rest_p = ~okd[pq["die"]]
                    pq = {k: v[rest_p] for k, v in pq.items()} if rest_p.any() else None
                if nnew:
                    rest_n = ~ok_n
                    cmds = {k: v[rest_n] for k, v in cmds.items()} if rest_n.any() else None
                    new_idx = np.flatnonzero(rest_n)
                else:
                    new_idx = np.zeros(0, np.int64)
            else:
                new_idx = np.arange(nnew, dtype=np.int64)
        else:
            new_idx = np.arange(nnew, dtype=np.int64)
        nn2 = 0 if cmds is None else len(cmds["kind"])
        if pq is not None and nn2:
            # (wt/fuse14: appended after the pending set in its buffers, _Bufs.cat, as _behind_pending does: no copy
            # of the pending set each batch)
            cat = self._bufs.cat
            allc = {k: cat(k, pq[k], cmds[k]) for k in self._CMD_KEYS}
        elif pq is not None:
            allc = {k: pq[k] for k in self._CMD_KEYS}
        else:
            allc = cmds if nn2 else None
        evd = np.zeros(g.dies, bool)
        if allc is not None:
            evd[allc["die"]] = True
        if keepd is not None:
            evd &= ~okd if res is not None else True
        rm = evd[die_read] if nr else np.zeros(0, bool)
        fr = np.flatnonzero(~rm)
        if len(fr):
            Er[fr] = fifo_exact(r_read[fr], die_read[fr], plane_read[fr], g.t_read_ns, t_cmd=t_cmd,
                                queue_depth=g.queue_depth, nplanes=g.planes, ndies=g.dies,
                                plane_free=self.plane_free, carry=self.slots, horizon=self.horizon, stats=self.n)
            if self.trace is not None:
                self.trace.append(("plane", plane_read[fr], Er[fr] - g.t_read_ns, Er[fr]))
        if allc is not None:
            ri = np.flatnonzero(rm)
            nri = len(ri)
            nc = len(allc["kind"])
            sl = self.slots
            pe = self._pend_end
            if self.trace is None and _event_run_ok(allc, (r_read, plane_read, die_read), self.plane_free, sl, pe):
                # (wt/fuse14: the gates, the scheduler's inputs, the carried releases taken, the scheduler, the
                # decision and the releases put back in one compiled call, kernels._event_run: the same results as
                # below)
                skipped = np.zeros(g.dies, bool) if nri else _NO_SKIP
                st_, start, end, adm, rdy, dec, gidx, pst, kd, kt, missing = _event_run(
                    ri, r_read, plane_read, die_read, g.t_read_ns, allc["kind"], allc["base"], allc["gx"],
                    allc["gate"], allc["pid"], pe.a, pe.base, pe.old_id, pe.old_end, allc["plane"], allc["die"],
                    allc["svc"], allc["join"], allc["floor"], t_cmd, g.queue_depth, self.plane_free, evd, sl.die,
                    sl.t, limit if nri else eventsim._BIG, skipped, limit, READ, min(self.horizon, self._dec_h),
                    g.dies, _KEEP_TWIN_MIN)
                if st_ == -1:
                    raise KeyError(int(missing))
                if st_ == 0:
                    raise ValueError("eventsim: a gate names a command that never runs")
                if pst == 2:
                    kd, kt = sl._cut(kd, kt)
                sl.die, sl.t = kd, kt
                if nri and skipped.any():
                    stale = skipped
            else:
                # gates: decided programs' ends are known; the others name a command of this run
                gate_pid = allc["gate"]
                base = allc["base"].copy()
                gx = allc["gx"].copy()
                gidx = np.full(nc, -1, np.int64)
                gm = np.flatnonzero(gate_pid >= 0)
                if len(gm):
                    gq = gate_pid[gm]
                    e = _end_of(self._pend_end, gq)
                    kn = e >= 0
                    base[gm[kn]] = np.maximum(base[gm[kn]], e[kn])
                    if not kn.all():
                        u = gm[~kn]
                        ix = _pid_pos(allc["pid"], gq[~kn])
                        if (ix < 0).any():
                            raise KeyError(int(gq[~kn][ix < 0][0]))
                        gidx[u] = ix + nri
                kind, ready, pl, dd, sv, gate, gxa, join, floor = _event_inputs_of(
                    ri, r_read, plane_read, die_read, g.t_read_ns, allc, base, gx, gidx)
                pf0 = self.plane_free.copy()          # (the scheduler changes only the planes of pl)
                carry = sl.take(evd)
                # round 15: with reads in the run, a die whose commands behind its reads cannot start before the
                # limit is not scheduled behind them (none of them is decided now; eventsim._simulate_split): those
                # dies' pending commands carry no schedule (``_stale``), so the next run schedules them again from
                # the start
                skipped = np.zeros(g.dies, bool) if nri and self.trace is None and accel.enabled() else None
                start, end, adm, rdy = eventsim.simulate_auto(kind, ready, pl, dd, sv, t_cmd=t_cmd,
                                                              queue_depth=g.queue_depth, plane_free=self.plane_free,
                                                              die_carry=carry, gate=gate, gate_x=gxa, floor=floor,
                                                              join=join, full=True,
                                                              **({} if skipped is None else {"lazy_lim": limit,
                                                                                             "skipped": skipped}))
                if skipped is not None and skipped.any():
                    stale = skipped
                # decided: every read (a later arrival joins its plane later, and reads go before programs) and
                # every command that starts before the limit or before a read of its plane
                cd_old, ct_old = carry
                dec, sd, st = _event_decided(kind, start, end, pl, dd, limit, pf0, self.plane_free, cd_old, ct_old)
                # (pending commands are re-admitted from _dec_h on: the releases after it are kept)
                sl.put(sd, st, min(self.horizon, self._dec_h))
                if self.trace is not None:
                    self.trace.append(("plane", pl[dec], start[dec], end[dec]))
            self.n["event_batches"] += 1
            self.n["event_dies"] += int(evd.sum())
            Er[ri] = end[:nri]
            gi = gidx - nri
            q = self._decide_cmds(allc, start[nri:], end[nri:], adm[nri:], rdy[nri:], gi, dec[nri:])
            if q is not None:
                pend_out.append(q)
            if nn2:
                cmd_end[new_idx] = end[nri:][nc - nn2:]
        self._stale = stale
        if not pend_out:
            self._pq = None
        elif len(pend_out) == 1:
            self._pq = pend_out[0]
        else:
            self._pq = {k: np.concatenate([q[k] for q in pend_out]) for k in pend_out[0]}
        self._pq_dec_h = self._dec_h
        self._cmd_end = cmd_end
        self._release_gated()
        return Er

    _P_KEYS = ("p_start", "p_end", "p_adm", "p_rdy")

    def _decide_cmds(self, C, start, end, adm, rdy, gi, dec, in_place=False):
        """Record the decided commands' program ends; return the undecided ones as pending (their
        schedule as computed now in ``p_*``; a gate that is decided now is resolved into its ready time;
        one admitted before ``_dec_h`` keeps its slot and plane-arrival time) or None. ``gi``: index
        (in ``C``) of each command's gating command in this run, -1 for none."""
        pid = C["pid"]
        dp = np.flatnonzero(dec & (pid >= 0))
        if len(dp):
            self._pend_end.set(pid[dp], end[dp])
        if not len(dec):
            return None
        t_cmd = self.g.t_cmd_ns
        if not dec.any():                      # nothing decided (a burst): every command, no copies
            und = None
            q = {k: C[k] for k in self._CMD_KEYS}
            gu = gi
            cs_, ce_, ca_, cr_ = start, end, adm, rdy
        else:
            und = np.flatnonzero(~dec)
            if not len(und):
                return None
            if len(und) >= _FIELDS_TWIN_MIN and accel.enabled() and gi.dtype == np.int64 and all(
                    C[k].dtype == np.int64 for k in ("base", "gx", "gate", "floor", "join")) \
                    and adm.dtype == np.int64 and rdy.dtype == np.int64:
                # the gathers and the fields below in one compiled pass (the same arrays, into the same buffers)
                bo = self._bufs.out
                n = len(und)
                gk = ("kind", "plane", "die", "svc", "pid")
                fk = ("base", "gx", "gate", "join", "floor")
                sch = tuple(zip(self._P_KEYS, (start, end, adm, rdy)))
                if in_place and all(self._bufs.own(k, C[k]) for k in gk + fk) and all(
                        self._bufs.own(k, a) for k, a in sch):
                    # (compacted in place: row und[k] >= k is read before row k is written; the run's arrays and
                    # the pending set they extend are not used after this, as every die of it is handled here)
                    kp_ = self._bufs.keep_prefix
                    q = {k: kp_(k, C[k], n) for k in gk}
                    cs_, ce_, ca_, cr_ = (kp_(k, a, n) for k, a in sch)
                    o = [kp_(k, C[k], n) for k in fk]
                    self._consumed = True
                else:
                    q = {k: bo(k, n, C[k].dtype, C[k]) for k in gk}
                    cs_, ce_, ca_, cr_ = (bo(k, n, a.dtype, a) for k, a in sch)
                    o = [bo(k, n, np.int64, C[k]) for k in fk]
                _pending_take(und, *(C[k] for k in gk), start, end, adm, rdy, C["base"], C["gx"], C["gate"],
                              C["floor"], gi, np.ascontiguousarray(dec, np.bool_), self._dec_h, t_cmd,
                              *(q[k] for k in gk), cs_, ce_, ca_, cr_, *o)
                q["base"], q["gx"], q["gate"], q["join"], q["floor"] = o
                q["p_start"], q["p_end"], q["p_adm"], q["p_rdy"] = cs_, ce_, ca_, cr_
                return q
            if len(und) >= _FIELDS_TWIN_MIN and accel.enabled():    # (into buffers: no new memory to fault in)
                bo = self._bufs.out
                q = {k: np.take(C[k], und, out=bo(k, len(und), C[k].dtype, C[k]), mode="clip")
                     for k in ("kind", "plane", "die", "svc", "pid")}
                cs_, ce_, ca_, cr_ = (np.take(a, und, out=bo(k, len(und), a.dtype, a), mode="clip")
                                      for k, a in zip(self._P_KEYS, (start, end, adm, rdy)))
                for k in ("base", "gx", "gate", "join", "floor"):
                    q[k] = C[k]                    # (rewritten below, from all of C)
            else:
                q = {k: C[k][und] for k in self._CMD_KEYS}
                cs_, ce_, ca_, cr_ = start[und], end[und], adm[und], rdy[und]
            gu = gi[und]
        if len(cs_) >= _FIELDS_TWIN_MIN and accel.enabled() and all(
                C[k].dtype == np.int64 for k in ("base", "gx", "gate", "floor", "join")) and gi.dtype == np.int64 \
                and ca_.dtype == np.int64 and cr_.dtype == np.int64:
            n = len(cs_)
            fk = ("base", "gx", "gate", "join", "floor")
            if und is None and in_place and all(self._bufs.own(k, C[k]) for k in fk):
                o = [C[k] for k in fk]            # (in place: each element is read before it is written)
            else:
                o = [self._bufs.out(k, n, np.int64, C[k]) for k in fk]
            _pending_fields(_E0 if und is None else und, len(dec) if und is None else -1, C["base"], C["gx"],
                            C["gate"], C["floor"], gi, np.ascontiguousarray(dec, np.bool_), ca_, cr_, self._dec_h,
                            t_cmd, *o)
            q["base"], q["gx"], q["gate"], q["join"], q["floor"] = o
            q["p_start"], q["p_end"], q["p_adm"], q["p_rdy"] = cs_, ce_, ca_, cr_
            return q
        ug = gu >= 0
        res = ~ug                              # its ready time is known now
        if ug.any():
            res[ug] = dec[gu[ug]]
        q["base"] = np.where(res, cr_, q["base"])
        q["gx"] = np.where(res, 0, q["gx"])
        q["gate"] = np.where(res, -1, q["gate"])
        was_adm = res & (ca_ < self._dec_h)     # admitted before the limit: it holds its slot
        q["join"] = np.where(was_adm, ca_ + t_cmd, -1)
        q["floor"] = np.where(was_adm, 0, np.maximum(q["floor"], self._dec_h))
        q["p_start"], q["p_end"], q["p_adm"], q["p_rdy"] = cs_, ce_, ca_, cr_
        return q

    def _behind_pending(self, P, N, keepd):
        """Dies in ``keepd`` have pending commands ``P`` (with their schedule) and no new read: the
        schedule of ``P`` stands where no new command can change it. New commands ``N`` of those dies (or
        None) are scheduled with the part of ``P`` they can change: on a plane with new commands, the
        pending commands that join the plane (admission + t_cmd) before the earliest a new one can are kept
        (FCFS: nothing new goes before them), the others are scheduled again with the new ones (planes free
        at the end of the kept commands, kept commands holding die slots until their ends, gates on kept
        programs at their ends). A die's result stands where it is the event scheduler's: (a) no pending
        command is scheduled again and every new one comes after every pending one (ready and admission no
        earlier), or (b) the die's queue depth never binds (every command admitted at its arrival, at most
        Q outstanding at each admission, carried and admitted-earlier ones included), every plane's kept
        commands join it before its re-scheduled ones, and no kept command waits for a re-scheduled one;
        then the planes of the die are independent FCFS queues and the kept prefix of each is unchanged.
        The dies where neither holds are left out (scheduled again from the start by the caller).
        Decides what starts before the limit. Returns (dies handled, their pending commands left, the ends
        of the new commands handled) or None."""
        g = self.g
        t_cmd = g.t_cmd_ns
        self._tail_gates = None                    # (set by _reschedule_tail below when it applies)
        okd = keepd.copy()
        cs, ce, ca, cr = (P[k] for k in self._P_KEYS)
        kend = _E0
        if N is not None and not self._disorder:
            # the pending commands a new one can change scheduled again with the new ones
            nd = np.zeros(g.dies, bool)
            nd[N["die"]] = True
            ok_b, (cs, ce, ca, cr), (nst, nen, nad, nrd) = self._reschedule_tail(P, N)
            okd &= ~nd | ok_b
            if not okd.any():
                return None
        elif N is not None:                        # outside the contract: as before 2026-12-05
            pf = self.plane_free.copy()
            np.maximum.at(pf, P["plane"], P["p_end"])
            nd = np.zeros(g.dies, bool)
            nd[N["die"]] = True
            sd, st = self.slots.die, self.slots.t
            m = nd[sd] if len(sd) else np.zeros(0, bool)
            carry: dict[int, list[int]] = {}
            for d, t in zip(np.concatenate([sd[m], P["die"]]).tolist(), np.concatenate([st[m], P["p_end"]]).tolist()):
                carry.setdefault(d, []).append(t)
            gx = N["gx"]
            base, gidx = _gate_bases(N, len(N["kind"]), self._pend_end, _PidIndex(P["pid"]), P["p_end"],
                                     np.ones(len(P["pid"]), bool))      # (every pending command kept here)
            ungated = gidx < 0
            start, end, adm, rdy = eventsim.simulate_auto(N["kind"], np.where(ungated, base + gx, base), N["plane"],
                                                     N["die"], N["svc"], t_cmd=t_cmd, queue_depth=g.queue_depth,
                                                     plane_free=pf, die_carry=carry, gate=gidx,
                                                     gate_x=np.where(ungated, 0, gx), full=True)
            self.n["event_batches"] += 1
            # every new command after every pending one of its die (die queue order and admission)
            big = np.int64(1) << 62
            pr = np.full(g.dies, -big)
            pa = np.full(g.dies, -big)
            np.maximum.at(pr, P["die"], P["p_rdy"])
            np.maximum.at(pa, P["die"], P["p_adm"])
            bad = (rdy < pr[N["die"]]) | (adm < pa[N["die"]])
            if bad.any():
                okd[N["die"][bad]] = False
                if not okd.any():
                    return None
            nst, nen, nad, nrd = start, end, adm, rdy
        # the handled dies: pending (their schedule) and new commands together, in creation order per die
        kp = okd[P["die"]]
        if kp.all():
            C = {k: P[k] for k in self._CMD_KEYS}
        else:
            C = {k: P[k][kp] for k in self._CMD_KEYS}
            cs, ce, ca, cr = cs[kp], ce[kp], ca[kp], cr[kp]
        if N is not None:
            kn = okd[N["die"]]
            ka = kn.all()
            cat = self._bufs.cat
            C = {k: cat(k, C[k], N[k] if ka else N[k][kn]) for k in self._CMD_KEYS}
            cs = cat("p_start", cs, nst if ka else nst[kn])
            ce = cat("p_end", ce, nen if ka else nen[kn])
            ca = cat("p_adm", ca, nad if ka else nad[kn])
            cr = cat("p_rdy", cr, nrd if ka else nrd[kn])
            kend = nen if ka else nen[kn]
        # gating commands in this set (the others are decided: their ends are in _pend_end)
        tg = self._tail_gates
        if tg is not None and kp.all() and (N is None or kn.all()) and len(tg[0]) == len(kp) \
                and len(tg[1]) == (0 if N is None else len(kn)):
            gi = self._bufs.cat("gi", tg[0], tg[1])   # (C = P then N, whole: the positions _tail_plane found)
        else:
            gi = np.full(len(ce), -1, np.int64)
            gm = np.flatnonzero(C["gate"] >= 0)
            if len(gm):
                gi[gm] = _pid_pos(C["pid"], C["gate"][gm])
        dec = cs < self._dec_h + t_cmd
        if dec.any():
            if self.trace is not None or not self.slots.put_decided(self.plane_free, C["plane"], C["die"], ce, dec,
                                                                    min(self.horizon, self._dec_h)):
                _max_at(self.plane_free, C["plane"][dec], ce[dec])
                self.slots.put(C["die"][dec], ce[dec], min(self.horizon, self._dec_h))
            if self.trace is not None:
                self.trace.append(("plane", C["plane"][dec], cs[dec], ce[dec]))
        # (C's fields may be rewritten in place when the batch's appends made them: the pending set they extend is
        # not used after this, as every die of it is handled here)
        q = self._decide_cmds(C, cs, ce, ca, cr, gi, dec, in_place=N is not None and kp.all())
        return okd, q, kend

    def _reschedule_tail(self, P, N):
        """``_tail_die`` (below), with ``_tail_plane`` first: on the dies that one handles, its result."""
        nd = np.zeros(self.g.dies, bool)
        nd[N["die"]] = True
        self._tail_gates = None
        res = self._tail_plane(P, N, nd) if eventsim._PLANE_PASS else None
        if res is None:
            return self._tail_die(P, N)
        hd, (cs, ce, ca, cr), (nst, nen, nad, nrd) = res
        rest = nd & ~hd
        self._tail_plane_dies += int((nd & hd).sum())
        if not rest.any():
            self._tail_gates = self._tail_gates_found
            return np.ones(self.g.dies, bool), (cs, ce, ca, cr), (nst, nen, nad, nrd)
        mp = rest[P["die"]]
        mn = rest[N["die"]]
        cs, ce, ca, cr = cs.copy(), ce.copy(), ca.copy(), cr.copy()     # (they may be P's own arrays)
        ok, (a, b, c, d), (e, f, g_, h) = self._tail_die({k: v[mp] for k, v in P.items()},
                                                         {k: v[mn] for k, v in N.items()})
        cs[mp], ce[mp], ca[mp], cr[mp] = a, b, c, d
        nst[mn], nen[mn], nad[mn], nrd[mn] = e, f, g_, h
        return np.where(rest, ok, True), (cs, ce, ca, cr), (nst, nen, nad, nrd)

    def _tail_plane(self, P, N, nd):
        """``_tail_die``'s problem with T per plane: on a plane, no new command arrives before Tp = the
        earliest of the plane's new commands' ready times (gates' ends as scheduled), so the pending
        commands of the plane admitted before Tp keep their plane schedule (FCFS: they join before any
        later one) and only the others are scheduled again with the new ones, by the plane pass (every
        command admitted at its arrival). The result is the event scheduler's on a die where, from the
        die's T (the earliest Tp of its planes) on, every command is admitted at its arrival with at most
        Q outstanding: checked with the kept commands admitted from T on as intervals (their admission to
        their end; those admitted before T as carried slots; the plane pass's check), kept ones admitted at
        their arrival (max(ready, floor)), none scheduled again admitted before T (before T the schedule is
        that of the pending commands alone, as in ``_tail_die``). Returns (dies handled: those with new
        commands that pass, and those without; the schedule of ``P``; that of ``N``), or None where a gate
        crosses dies (``_tail_die`` then, which leaves those dies out)."""
        g = self.g
        t_cmd = g.t_cmd_ns
        big = np.int64(1) << 62
        pe = self._pend_end
        pix = _PidIndex(P["pid"])
        nix = _PidIndex(N["pid"])
        nb = N["base"].copy()
        npn = len(P["kind"])
        # the passes over P by one compiled scan (kernels._tail_scan) where the twins run and P's ids are dense
        tw = npn >= _SCAN_TWIN_MIN and accel.enabled() and all(
            P[k].dtype == np.int64 for k in ("die", "plane", "p_adm", "p_end", "gate", "pid", "join", "p_rdy", "floor"))
        if tw:
            plo, pmap = _pid_map(P["pid"])
            tw = len(pmap) > 0
            if tw:
                pix.lo, pix.pmap = int(plo), pmap
        if not tw:
            giP = np.full(npn, -1, np.int64)      # position in P then N of each command's gate (-1: none there)
        ngates = None
        nmap = _E0
        if tw and len(N["kind"]) >= _NGATE_TWIN_MIN and all(
                N[k].dtype == np.int64 for k in ("gate", "die", "base", "pid")) and pe.a.dtype == np.int64:
            nlo, nmap = _pid_map(N["pid"])
            if not len(nmap) and (N["pid"] >= 0).any():
                nmap = None                       # (ids not dense: the look-ups below)
        else:
            nmap = None
        if nmap is not None:                      # the look-ups below in one compiled pass (kernels._ngate_scan)
            bad_n, gm, gq, e, ip, inn, giN, nb = _ngate_scan(
                N["gate"], N["die"], N["base"], pe.a, pe.base, np.ascontiguousarray(pe.old_id, np.int64),
                np.ascontiguousarray(pe.old_end, np.int64), plo, pmap, P["die"], P["p_end"], nlo, nmap, npn)
            if bad_n:
                return None
            if len(gm):
                ngates = (gq, e, ip, inn)
            giN_done = True
        else:
            giN = np.full(len(N["kind"]), -1, np.int64)
            gm = np.flatnonzero(N["gate"] >= 0)
            giN_done = False
        if len(gm) and not giN_done:
            gq = N["gate"][gm]
            e = _end_of(pe, gq)
            ip = pix.pos(gq)
            inp = (e < 0) & (ip >= 0)
            if (P["die"][ip[inp]] != N["die"][gm[inp]]).any():
                return None
            inn = nix.pos(gq)
            ngates = (gq, e.copy(), ip, inn)      # (the look-ups _gate_bases would make again, below)
            giN[gm] = np.where(ip >= 0, ip, np.where(inn >= 0, inn + npn, -1))
            h = (e < 0) & (inn >= 0)
            if (N["die"][inn[h]] != N["die"][gm[h]]).any():
                return None
            e = np.where(inp, P["p_end"][np.maximum(ip, 0)], e)
            e = np.where(e < 0, big, e)           # gated by a new command: it arrives after that one
            nb[gm] = np.maximum(nb[gm], e)
        pg = _E0 if tw else np.flatnonzero(P["gate"] >= 0)
        if len(pg):
            ip = pix.pos(P["gate"][pg])
            h = ip >= 0
            if (P["die"][ip[h]] != P["die"][pg[h]]).any():
                return None
            inn = nix.pos(P["gate"][pg])
            giP[pg] = np.where(h, ip, np.where(inn >= 0, inn + npn, -1))
        arr = np.where(nb >= big, big, nb + N["gx"])
        T = np.full(g.dies, big)
        _max_at(T, N["die"], arr, False)
        Tp = np.full(g.planes, big)
        _max_at(Tp, N["plane"], arr, False)
        pa = P["p_adm"]
        pf = self.plane_free.copy()
        sd, st = self.slots.die, self.slots.t
        if tw:
            giP = self._bufs.out("gi", npn, np.int64, _E0)
            bad_gate, rem, xi, cd, ct, kcnt, rcnt, xdx, xax, xex, xbad = _tail_scan(
                P["die"], P["plane"], pa, P["p_end"], P["gate"], plo, pmap, Tp, T, nd, pf,
                np.ascontiguousarray(sd, np.int64), np.ascontiguousarray(st, np.int64), g.queue_depth, giP,
                P["join"], P["p_rdy"], P["floor"])
            if bad_gate:
                return None
            x2 = np.flatnonzero(giP == -2)        # (gates not in P: in N, or none there)
            if len(x2):
                inn = nix.pos(P["gate"][x2])
                giP[x2] = np.where(inn >= 0, inn + npn, -1)
            keep = _KeptAt(pa, Tp, P["plane"])
        else:
            keep = pa < Tp[P["plane"]]
            early = keep & (pa < T[P["die"]])     # kept, admitted before its die's T: carried slots
            ext = keep & ~early                   # kept, admitted from T on: intervals (dies with new commands)
            rem = np.flatnonzero(~keep)
            ki = np.flatnonzero(keep)
            np.maximum.at(pf, P["plane"][ki], P["p_end"][ki])
            m = nd[sd] if len(sd) else np.zeros(0, bool)
            ei = np.flatnonzero(early & nd[P["die"]])
            cd = np.concatenate([sd[m], P["die"][ei]])
            ct = np.concatenate([st[m], P["p_end"][ei]])
            if len(cd) > g.queue_depth:           # a die's Q latest releases are all that can bind
                cd, ct = _latest_per_die(cd, ct, g.dies, g.queue_depth)
            xi = np.flatnonzero(ext)
        self._tail_gates_found = (giP, giN)
        if len(rem):
            R = {k: np.concatenate([P[k][rem], N[k]]) for k in self._CMD_KEYS}
            R["floor"][len(rem):] = 0             # (new commands reach their die at their ready time here)
        else:                                     # (R is N: its arrays, read only below, but the floor)
            R = {k: N[k] for k in self._CMD_KEYS}
            R["floor"] = np.zeros(len(N["floor"]), N["floor"].dtype)
        nr = len(R["kind"])
        k = len(rem)
        gx = R["gx"]
        if k == 0 and giN_done:                   # R is N: _gate_bases_found in one compiled pass
            bk, base, gidx = _ngate_bases(N["base"], gm, e, ip, inn, pa, Tp, P["plane"], P["p_end"])
            if bk >= 0:
                raise KeyError(int(gq[bk]))
        elif k == 0:                              # R is N: _gate_bases from the look-ups made above
            base, gidx = _gate_bases_found(N, gm, ngates, keep, P["p_end"])
        else:
            base, gidx = _gate_bases(R, nr, pe, pix, P["p_end"], keep)
        ungated = gidx < 0
        kind, die, plane = R["kind"], R["die"], R["plane"]
        ready = np.where(ungated, base + gx, base)
        gxa = np.where(ungated, 0, gx)
        jn = R["join"]
        hasg = ~ungated & (jn < 0)
        bad = np.zeros(g.dies, bool)
        gi_ = np.flatnonzero(hasg)
        if len(gi_):                              # (as simulate_auto: gates on an earlier program of the plane)
            tg = gidx[gi_]
            late = gi_[(tg >= gi_) | (plane[tg] != plane[gi_]) | (kind[tg] == READ) | (kind[gi_] == READ)]
            bad[die[late]] = True
        if (kind == READ).any():
            bad[die[kind == READ]] = True
        # (in buffers kept across batches, not fresh memory to fault in: what is handed out of them is copied or
        # dead before the next batch's array pass)
        start, end, adm, rdy = (self._bufs.out(k, nr, np.int64, _E0) for k in ("tp_start", "tp_end", "tp_adm", "tp_rdy"))
        start[:] = 0
        end[:] = 0
        adm[:] = 0
        rdy[:] = ready
        fi = np.flatnonzero(~bad[die])
        if len(fi):
            eventsim._plane_pass(fi, kind, ready, die, plane, R["svc"], gidx, gxa, hasg, R["floor"], jn, t_cmd,
                                 g.queue_depth, (cd, ct), bad, pf0=pf, pf=pf.copy(), start=start, end=end,
                                 adm=adm, rdy=rdy, extra=(xdx, xax, xex) if tw else (P["die"][xi], pa[xi], P["p_end"][xi]))
        # (defensive: implied by the queue-depth check, which the tests show necessary) kept commands admitted
        # from T on at their arrival (or joined earlier)
        if tw:
            bad |= xbad                           # (the same check, made by _tail_scan)
        else:
            xa = xi[(P["join"][xi] < 0) & (pa[xi] != np.maximum(P["p_rdy"][xi], P["floor"][xi]))]
            bad[P["die"][xa]] = True
        # (defensive, as in _tail_die) nothing scheduled again admitted before T, no new arrival before T
        td = T[die]
        bad[die[(jn < 0) & (adm < td)]] = True
        bad[N["die"][rdy[k:] < td[k:]]] = True
        if k:
            cs, ce, ca, cr = (P[kk].copy() for kk in self._P_KEYS)
            cs[rem], ce[rem], ca[rem], cr[rem] = start[:k], end[:k], adm[:k], rdy[:k]
        else:                                     # (every pending command kept: its arrays, not copies)
            cs, ce, ca, cr = (P[kk] for kk in self._P_KEYS)
        hd = ~bad
        if tw:
            self._tail_kept += int(kcnt[hd].sum())
            self._tail_redone += int(rcnt[hd].sum())
        else:
            self._tail_kept += int(hd[P["die"][ki]].sum())
            self._tail_redone += int(hd[P["die"][rem]].sum())
        return hd, (cs, ce, ca, cr), (start[k:], end[k:], adm[k:], rdy[k:])

    def _tail_die(self, P, N):
        """Pending commands ``P`` (their schedule ``p_*``, the event scheduler's for them alone) and new
        commands ``N`` of dies without new reads. On a die, no new command reaches the die queue before
        T = the earliest of its new commands' ready times with their gates' ends as scheduled (one gated
        by a new command comes after that one): a new command's gate ends before it arrives, so until the
        first new arrival the schedule is that of ``P`` alone, and that arrival is at T. So every decision
        before T stands: the pending commands admitted before T keep their schedule (their planes serve
        them before anything admitted later, FCFS), and only the others are scheduled again with the new
        ones (the kept commands holding die slots until their ends and planes busy until then; no other
        command is admitted before T either way). Returns (per die: handled, the schedule of ``P``
        (start, end, admission, ready), that of ``N``). A die is not handled where a gate crosses dies
        (its end could change on the other die) or, defensively, where the run admits a command or a new
        one arrives before its T."""
        g = self.g
        t_cmd = g.t_cmd_ns
        big = np.int64(1) << 62
        pe = self._pend_end
        ok = np.ones(g.dies, bool)
        cs, ce, ca, cr = (P[k].copy() for k in self._P_KEYS)
        # T per die: new commands' ready times, gates on decided or pending programs at their ends
        nb = N["base"].copy()
        pix = _PidIndex(P["pid"])
        gm = np.flatnonzero(N["gate"] >= 0)
        if len(gm):
            e = _end_of(pe, N["gate"][gm])
            ip = pix.pos(N["gate"][gm])
            inp = (e < 0) & (ip >= 0)
            x = gm[inp]
            ok[N["die"][x][P["die"][ip[inp]] != N["die"][x]]] = False
            e = np.where(inp, P["p_end"][np.maximum(ip, 0)], e)
            e = np.where(e < 0, big, e)           # gated by a new command: it arrives after that one
            nb[gm] = np.maximum(nb[gm], e)
        arr = np.where(nb >= big, big, nb + N["gx"])
        T = np.full(g.dies, big)
        np.minimum.at(T, N["die"], arr)
        fixed = P["p_adm"] < T[P["die"]]
        pg = np.flatnonzero(P["gate"] >= 0)
        if len(pg):
            ip = pix.pos(P["gate"][pg])
            x = pg[ip >= 0]
            w = x[P["die"][ip[ip >= 0]] != P["die"][x]]
            ok[P["die"][w]] = False
            ok[P["die"][ip[ip >= 0]][P["die"][ip[ip >= 0]] != P["die"][x]]] = False
        rem = np.flatnonzero(~fixed)
        fi = np.flatnonzero(fixed)
        R = {k: np.concatenate([P[k][rem], N[k]]) for k in self._CMD_KEYS}
        R["floor"][len(rem):] = 0                 # (new commands reach their die at their ready time here)
        nr = len(R["kind"])
        pf = self.plane_free.copy()
        np.maximum.at(pf, P["plane"][fi], P["p_end"][fi])
        nd = np.zeros(g.dies, bool)
        nd[N["die"]] = True
        sd, st = self.slots.die, self.slots.t
        m = nd[sd] if len(sd) else np.zeros(0, bool)
        cd = np.concatenate([sd[m], P["die"][fi]])
        ct = np.concatenate([st[m], P["p_end"][fi]])
        if len(cd) > g.queue_depth:               # a die's Q latest releases are all that can bind
            cd, ct = _latest_per_die(cd, ct, g.dies, g.queue_depth)
        carry = (cd, ct)
        gx = R["gx"]
        base, gidx = _gate_bases(R, nr, pe, pix, P["p_end"], fixed)
        ungated = gidx < 0
        start, end, adm, rdy = eventsim.simulate_auto(R["kind"], np.where(ungated, base + gx, base), R["plane"],
                                                 R["die"], R["svc"], t_cmd=t_cmd, queue_depth=g.queue_depth,
                                                 plane_free=pf, die_carry=carry, gate=gidx,
                                                 gate_x=np.where(ungated, 0, gx), floor=R["floor"],
                                                 join=R["join"], full=True)
        self.n["event_batches"] += 1
        k = len(rem)
        cs[rem], ce[rem], ca[rem], cr[rem] = start[:k], end[:k], adm[:k], rdy[:k]
        # (defensive) nothing admitted and no new arrival before T
        td = T[R["die"]]
        ok[R["die"][(R["join"] < 0) & (adm < td)]] = False
        ok[N["die"][rdy[k:] < td[k:]]] = False
        self._tail_kept += len(fi)
        self._tail_redone += k
        return ok, (cs, ce, ca, cr), (start[k:], end[k:], adm[k:], rdy[k:])

    def _prune_ends(self) -> None:
        """Between batches, when the window of program ends has grown: forget the ends of ids below the
        oldest id still pending or gating a waiting store, except those a later store may still be gated by
        (each plane's last B). An undecided program's end reads -1 (its gated stores are released right
        after the run that decides it)."""
        pe = self._pend_end
        if self._pid - pe.base > 4 * (self._ring.size + 1024):
            nb = self._pid
            pid = None if self._pq is None else self._pq["pid"]
            if pid is not None and len(pid) >= _MIN_TWIN_MIN and pid.dtype == np.int64 and accel.enabled():
                any_, mn = _min_where(pid, pid, False)
                if any_:
                    nb = min(nb, int(mn))
            elif pid is not None and (pid >= 0).any():
                nb = min(nb, int(pid[pid >= 0].min()))
            for ch in self._gated:
                if len(ch["gate"]):
                    nb = min(nb, int(ch["gate"].min()))
            r = self._ring[self._ring >= 0]
            pe.rebase(nb, r)

    def _release_gated(self) -> None:
        """Store data-ins whose gating program is decided now: their data is ready at max(arrival +
        t_cmd, that end); they join the undecided channel items."""
        if not self._gated:
            return
        pe = self._pend_end
        if pe.version == self._gated_seen:
            return                             # (no end changed since every waiting store was checked)
        keep = []
        for ch in self._gated:
            e = _end_of(pe, ch["gate"])
            ok = e >= 0
            anyok = bool(ok.any())
            if anyok and len(ok) >= _GATED_TWIN_MIN and tuple(ch) == self._GATED_KEYS and accel.enabled() \
                    and all(v.dtype == np.int64 for v in ch.values()):
                sv, kv = _gated_split(ok, e, *(ch[k] for k in self._GATED_KEYS))    # (the same rows, one pass)
                sel = dict(zip(self._DQ_KEYS, sv))
                self._dq.append(sel)
                self._dq_min.append(int(sel["rd"].min()))
                if len(kv[0]):
                    keep.append(dict(zip(self._GATED_KEYS, kv)))
                continue
            if anyok:
                sel = {k: ch[k][ok] for k in self._DQ_KEYS}
                sel["rd"] = np.maximum(sel["rd"], e[ok])
                sel["q0"] = sel["rd"].copy()
                self._dq.append(sel)
                self._dq_min.append(int(sel["rd"].min()))
            if not anyok:
                keep.append(ch)                # (none released: the chunk as it is, no copies)
            elif not ok.all():
                keep.append({k: v[~ok] for k, v in ch.items()})
        self._gated = keep
        self._gated_seen = pe.version

    def _keep_h(self) -> int:
        """Slot releases at or before this can delay nothing any more: the latest arrival, or the
        earliest time a pending command not admitted yet may be admitted."""
        q = self._pq
        if q is None:
            return self.horizon
        if len(q["join"]) >= _MIN_TWIN_MIN and q["join"].dtype == np.int64 and q["floor"].dtype == np.int64 \
                and accel.enabled():
            any_, mn = _min_where(q["floor"], q["join"], True)
            return min(self.horizon, int(mn)) if any_ else self.horizon
        m = q["join"] < 0
        return min(self.horizon, int(q["floor"][m].min())) if m.any() else self.horizon

    def _settle(self, horizon: int | None) -> None:
        """No arrival comes before ``horizon`` (None: none comes any more): decide the pending
        array commands that start before it + t_cmd and the store data-ins they gate."""
        if self._pq is None:
            return
        if horizon is not None and max(self.horizon, horizon) <= self._pq_dec_h:
            return              # the pending set was computed with this decision limit: nothing more to decide
        self._dec_h = _MAX_TIME - self.g.t_cmd_ns if horizon is None else max(self.horizon, horizon)
        self._array_ops(_E0, _E0, _E0, None)
        self._dec_h = self.horizon

    # ------------------------------------------------------------------ writes (mixed path)
    def _serve_mixed(self, ta, lpn, slo, shi, top, seq, tser):
        g = self.g
        t_cmd = g.t_cmd_ns
        nt = len(lpn)
        nsec = shi - slo
        is_st = (top == OP_STORE) | (top == OP_ATOMIC)
        media = top != OP_STORE               # read parts that need a media read
        full = nsec == SECTORS_PER_PAGE
        partial_lp = lpn[is_st & ~full]
        touched = set(partial_lp.tolist()) | set(self.buf)
        special = None                         # write-buffer bookkeeping one at a time (None: none)
        if touched:
            special = np.isin(lpn, np.fromiter(touched, np.int64, len(touched)))
            if not special.any():
                special = None
        prog_tx: list[int] = []                 # transactions whose store fills a page
        wb_hit = None
        if special is not None:
            media = media.copy()
            wb_hit = np.zeros(nt, bool)
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
                        wb_hit[i] = True
                    if o != OP_ATOMIC:
                        continue
                e = self.buf.get(lp)
                if e is None:
                    e = self.buf[lp] = [0, t]
                    heapq.heappush(self._timers, (t + g.write_flush_timeout_ns, lp, t))
                e[0] |= want
                if e[0] == _FULL_MASK:
                    del self.buf[lp]
                    prog_tx.append(i)
        direct = np.flatnonzero(is_st & full if special is None else is_st & full & ~special)
        if prog_tx:
            ptx = np.sort(np.concatenate([direct, np.asarray(prog_tx, np.int64)]))
        else:
            ptx = direct
        nwb = 0 if wb_hit is None else int(wb_hit.sum())
        self.n["write_buffer_hits"] += nwb
        # write backpressure: a store's data-in waits for the end of the program issued B programs
        # before its own on its plane (the plane's B page buffers hold the last B programs' data)
        (nst, wsec, rsec, npx, si, gate_st, p_lpn, p_rdy, p_gx, p_gate, p_pid, ri, r_ta, r_lpn, r_ch, r_die, r_pl,
         r_x, r_seq, r_ser, iv_p, iv_g, iv_s, s_ch, s_early, s_x, s_ser) = _mixed_front_of(
            ta, lpn, nsec, top, seq, tser, media, ptx, self._ring, self._pid, g, self._xfer_by_sectors, self._pow2)
        return self._serve_mixed_rest(ta, lpn, nsec, top, seq, tser, wb_hit, nwb, (
            nst, wsec, rsec, npx, si, gate_st, p_lpn, p_rdy, p_gx, p_gate, p_pid, ri, r_ta, r_lpn, r_ch, r_die, r_pl,
            r_x, r_seq, r_ser, iv_p, iv_g, iv_s, s_ch, s_early, s_x, s_ser))

    def _serve_mixed_rest(self, ta, lpn, nsec, top, seq, tser, wb_hit, nwb, front):
        """``_serve_mixed`` from ``_mixed_front_of``'s result (``front``) on: the programs, the media reads, the
        write-buffer hits (``wb_hit``, ``nwb`` of them; None: none), the stores' data-in and the channel stage."""
        t_cmd = self.g.t_cmd_ns
        nt = len(top)
        (nst, wsec, rsec, npx, si, gate_st, p_lpn, p_rdy, p_gx, p_gate, p_pid, ri, r_ta, r_lpn, r_ch, r_die, r_pl,
         r_x, r_seq, r_ser, iv_p, iv_g, iv_s, s_ch, s_early, s_x, s_ser) = front
        self.n["stores"] += nst
        self.n["write_bytes"] += wsec * SECTOR_BYTES
        self._pid += npx
        # programs: ready when the filling store's data is in (its data-in end when the channel is idle)
        cmds = (self._programs(p_lpn, p_rdy, np.zeros(npx, bool), gx=p_gx, gate=p_gate, pids=p_pid)
                if npx else None)
        # media reads
        self.n["read_bytes"] += rsec * SECTOR_BYTES
        inval = (iv_p, iv_g, iv_s) if len(si) else None
        items = []
        if len(ri) or cmds is not None:
            rit = self._reads(r_ta, r_lpn, r_ch, r_die, r_pl, r_x, r_seq, r_ser, inval, cmds)
            items.append((ri, rit))
        elif len(si):
            self._invalidate(iv_g)            # a batch of stores alone still empties their pages' buffers
        # write-buffer hits: data ready at arrival + t_cmd
        wi = np.flatnonzero(wb_hit) if nwb else _E0
        if len(wi):
            early = ta[wi] + t_cmd
            items.append((wi, {"ch": self._where(lpn[wi])[0], "rd": early, "x": self._xfer_by_sectors[nsec[wi]],
                               "seq": seq[wi], "serial": tser[wi], "q0": early}))
        # store data-in (at a free page buffer: the gating program's end, once it is decided)
        gated_tx = None
        if len(si):
            early = s_early
            st_it = {"ch": s_ch, "rd": early, "x": s_x, "seq": iv_s.copy(), "serial": s_ser, "q0": early}
            gm = np.flatnonzero(gate_st >= 0)
            if len(gm):
                pe = self._pend_end
                e = pe.get(gate_st[gm])
                ok = e >= 0
                rd = early.copy()
                rd[gm[ok]] = np.maximum(early[gm[ok]], e[ok])
                st_it["rd"] = rd
                st_it["q0"] = rd
                if not ok.all():              # gated by a program not decided yet: wait for it
                    w = gm[~ok]
                    chunk = {k: v[w] for k, v in st_it.items()}
                    chunk["gate"] = gate_st[w]
                    self._gated.append(chunk)
                    self._fresh.append(chunk["serial"])
                    self.n["deferred_pages"] += len(w)
                    gated_tx = si[w]
                    keep = np.ones(len(si), bool)
                    keep[w] = False
                    st_it = {k: v[keep] for k, v in st_it.items()}
                    si = si[keep]
            items.append((si, st_it))
        if len(items) == 1:
            idx, it = items[0]
        else:
            idx = np.concatenate([p[0] for p in items])
            it = {k: np.concatenate([p[1][k] for p in items]) for k in self._DQ_KEYS}
        d = self._channel_stage(it)
        # a transaction's completion: the later of its parts (0 = deferred part)
        done = np.zeros(nt, np.int64)
        _max_at(done, idx, d)
        if len(si) and (top[si] != OP_STORE).any():
            # an atomic with a deferred read part stays pending even if its store part is decided
            dz = np.zeros(nt, bool)
            dz[idx[d == 0]] = True
            done[dz] = 0
        if gated_tx is not None:
            done[gated_tx] = 0
        return done

    def _programs(self, lpns, ready, presense, *, gx=None, gate=None, pids=None):
        """FTL programs of pages (with the GC they trigger) -> array commands (a dict of ``_CMD_KEYS``
        arrays, in creation order: each program, then the GC it triggered). A program is ready at
        ``max(ready, end of program gate) + gx`` (host programs: its filling store's arrival + t_cmd,
        the gating program, its data-in time); ``pids``: the programs' ids (None: new ids, each the
        plane's latest program)."""
        g = self.g
        t_prog = g.t_prog_ns
        planes, gc = self.ftl.program_many(lpns)
        n = len(planes)
        self.n["programs"] += n
        base = np.asarray(ready, np.int64)
        gx = np.zeros(n, np.int64) if gx is None else np.asarray(gx, np.int64)
        gate = np.full(n, -1, np.int64) if gate is None else np.asarray(gate, np.int64)
        if pids is None:
            _, pids = _ring_push(self._ring, planes, np.ones(n, bool), self._pid)
            self._pid += n
        kinds = np.full(n, PROG, np.uint8)
        svc = t_prog + np.where(np.asarray(presense, bool), g.t_read_ns, 0).astype(np.int64)
        if gc:
            # GC commands follow their program, ready with it
            k_l, p_l, s_l, pos_l = [], [], [], []
            for i, ops in gc.items():
                for kind, p in ops:
                    if kind == "copyback":
                        self.n["copybacks"] += 1
                        k_l.append(COPYBACK)
                        s_l.append(g.t_read_ns + t_prog)
                    else:
                        self.n["erases"] += 1
                        k_l.append(ERASE)
                        s_l.append(g.t_erase_ns)
                    p_l.append(p)
                    pos_l.append(i)
            pi = np.asarray(pos_l, np.int64)
            pos = np.concatenate([np.arange(n, dtype=np.float64), pi + 0.5])
            co = np.argsort(pos, kind="stable")
            kinds = np.concatenate([kinds, np.asarray(k_l, np.uint8)])[co]
            base = np.concatenate([base, base[pi]])[co]
            gx = np.concatenate([gx, gx[pi]])[co]
            gate = np.concatenate([gate, gate[pi]])[co]
            planes = np.concatenate([planes, np.asarray(p_l, np.int64)])[co]
            svc = np.concatenate([svc, np.asarray(s_l, np.int64)])[co]
            pids = np.concatenate([np.asarray(pids, np.int64), np.full(len(pi), -1, np.int64)])[co]
        m = len(kinds)
        return {"kind": kinds, "base": base, "gx": gx, "gate": gate, "plane": planes,
                "die": planes // g.planes_per_die, "svc": svc, "pid": np.asarray(pids, np.int64),
                "join": np.full(m, -1, np.int64), "floor": np.zeros(m, np.int64)}

    def _schedule_cmds(self, cmds) -> int:
        """Array commands alone (flushes, refresh): returns the time the last one ends as scheduled
        now (later reads, which go first, may still delay the ones not started yet)."""
        if cmds is None or not len(cmds["kind"]):
            return 0
        self._array_ops(_E0, _E0, _E0, cmds)
        return int(self._cmd_end.max())

    # ------------------------------------------------------------------ background work
    def refresh(self, lpns, at_ns: int) -> int:
        """Refresh (read-reclaim / retention) of logical pages at ``at_ns``: each page is sensed and
        rewritten out of place inside its plane (a program with a read-merge sense: tR + tPROG, no
        channel), queued behind reads like GC, with the P/E and GC it causes. For the reliability
        service's refresh plan; these are not requests and post no completion. Returns the time the
        last of them finishes."""
        lp = np.asarray(lpns, np.int64).ravel()
        if len(lp) == 0:
            return int(at_ns)
        if (lp < 0).any() or (lp >= self.g.logical_pages).any():
            raise MediaError("refresh of a page outside the media", max_page=int(lp.max()),
                             logical_pages=self.g.logical_pages)
        self._run_timers(int(at_ns))
        self._invalidate(lp)
        cmds = self._programs(lp, np.full(len(lp), int(at_ns), np.int64), np.ones(len(lp), bool))
        self.n["refresh_pages"] += len(lp)
        return self._schedule_cmds(cmds)

    def _invalidate(self, lpns) -> None:
        """Drop rewritten pages from the page buffers (between batches)."""
        _, _, plane = self._where(lpns)
        hitm = self.bpage[plane] == lpns[:, None]
        if not hitm.any():
            return
        for p in np.unique(plane[hitm.any(axis=1)]).tolist():
            gone = set(lpns[plane == p].tolist())
            keep = [(int(a), int(b)) for a, b in zip(self.bpage[p], self.bready[p]) if a >= 0 and int(a) not in gone]
            self.bpage[p] = -1
            self.bready[p] = 0
            for c, (a, b) in enumerate(keep):
                self.bpage[p, c] = a
                self.bready[p, c] = b

    # ------------------------------------------------------------------ timers (rare events)
    def _run_timers(self, before: int) -> None:
        """Flush partial pages whose timeout is due before ``before``."""
        if not self._timers or self._timers[0][0] >= before:
            return
        lps, dues, pres = [], [], []
        while self._timers and self._timers[0][0] < before:
            due, lp, first = heapq.heappop(self._timers)
            e = self.buf.get(lp)
            if e is None or e[1] != first:
                continue                        # that buffer entry was already programmed
            del self.buf[lp]
            self.n["flush_programs"] += 1
            lps.append(lp)
            dues.append(due)
            pres.append(lp in self.ftl.l2p)     # merge the rest of the page from its old copy
        if lps:
            cmds = self._programs(np.asarray(lps, np.int64), np.asarray(dues, np.int64), np.asarray(pres, bool))
            self._schedule_cmds(cmds)

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict[str, Any]:
        g = self.g
        span = max(1, self.last_completion - (self.first_arrival or 0))
        util = (self.chan_busy_ns / span).tolist() if self.first_arrival is not None else [0.0] * g.channels
        pe = self.ftl.pe                       # (one copy of the per-block list)
        pe_hist = np.bincount(pe) if len(pe) else np.zeros(1, np.int64)
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
            "pe_max": int(pe.max()) if len(pe) else 0,
            "host_programs": self.ftl.host_programs,
            "write_amplification": self.ftl.write_amplification,
            # bytes programmed (host + refresh programs and GC copies, 4 KiB each) per byte stored:
            # > WAF when partial pages are flushed
            "byte_write_amplification": ((self.ftl.host_programs + self.ftl.gc_copies) * PAGE_BYTES
                                         / self.n["write_bytes"]) if self.n["write_bytes"] else None,
            "write_buffer_pages": len(self.buf),
            "page_buffers_per_plane": g.page_buffers_per_plane,
            "undecided_transfers": sum(len(c["rd"]) for c in self._dq),
            "mapped_pages": len(self.ftl.l2p),
        }


def warm_twins(geometry: MediaGeometry) -> float:
    """Compile (or load from numba's cache) the engine's twins before the daemon serves, by driving a
    scratch engine of ``geometry`` through read bursts, buffer hits, full-page writes and a mixed batch
    (the paths that call them, with the argument types they really get); the seconds it took, 0.0 with the
    twins off (hbfd/accel.py ``warm``). hbfd.media.make_engine calls it."""
    def run() -> None:
        e = MediaEngine(geometry)
        pages = max(1, min(geometry.capacity_bytes // PAGE_BYTES, 1 << 20))
        rng = np.random.default_rng(0)
        t = 0
        # (the last: a burst whose 5000 transfers are decided at once, by the packed-key channel order)
        for k, (n, wfrac, nb) in enumerate(((256, 0.0, 512), (256, 0.0, 512), (256, 1.0, PAGE_BYTES),
                                            (512, 0.5, PAGE_BYTES), (256, 0.1, 512), (5000, 0.0, PAGE_BYTES))):
            b = np.zeros(n, REQUEST_BATCH_DTYPE)
            b["id"] = np.arange(n) + k * 1024
            b["arrival_ns"] = t + np.arange(n, dtype=np.uint64) * (50 if k < 5 else 0)
            pg = rng.integers(0, pages, n) if k != 1 else np.repeat(rng.integers(0, pages, n // 8), 8)
            b["media_address"] = pg.astype(np.uint64) * PAGE_BYTES
            b["bytes"] = nb
            b["op"] = np.where(rng.random(n) < wfrac, ctl.HBF_OP_STORE, ctl.HBF_OP_LOAD)
            e.submit(b)
            e.collect()
            t += n * 50 + 1_000_000
        # write bursts that leave a backlog of pending programs, cut into batches (the pending-set twins), then a
        # quiet scan that decides them (the carried-release cut); the release trim of _tail_die's path
        for k in range(3):
            n = 2048
            b = np.zeros(n, REQUEST_BATCH_DTYPE)
            b["id"] = np.arange(n) + 10_000 + k * n
            b["arrival_ns"] = t + np.arange(n, dtype=np.uint64)
            b["media_address"] = rng.integers(0, pages, n).astype(np.uint64) * PAGE_BYTES
            b["bytes"] = PAGE_BYTES
            b["op"] = ctl.HBF_OP_STORE
            e.submit(b)
            e.advance(int(b["arrival_ns"].max()))
            e.collect()
            t += n
        e.collect()
        _latest_per_die(np.arange(_LATEST_TWIN_MIN, dtype=np.int64) % 2, np.arange(_LATEST_TWIN_MIN, dtype=np.int64),
                        2, 4)
        # (the stores of a mixed batch go through the ring inside _mixed_front; _programs' own ids, for GC-free
        # flushes and refreshes, through _ring_push)
        _ring_push(np.full((2, geometry.page_buffers_per_plane), -1, np.int64), np.arange(_RING_TWIN_MIN) % 2,
                   np.ones(_RING_TWIN_MIN, bool), 0)
        # two twins the runs above reach only inside other twins, where numba compiles a callee into its caller: a
        # process that loads those callers from numba's cache would compile these for their own direct calls
        # (lindley.packed_keys_parts, MediaEngine._decide_cmds) at first use, while serving
        one, none = np.zeros(1, np.int64), np.full(1, -1, np.int64)
        _packed_build_into(np.zeros(1, np.int64), 0, one, one, 0, 1, 1)
        _pending_fields(_E0, 1, one, one, none, one, none, np.zeros(1, np.bool_), one, one, 0, geometry.t_cmd_ns,
                        *(np.zeros(1, np.int64) for _ in range(5)))
        # (wt/fuse14: _event_inputs and _event_decide run inside kernels._event_run; their own direct calls, where
        # the fused call does not apply, compiled here)
        u8 = np.zeros(1, np.uint8)
        _event_inputs(_E0, _E0, _E0, _E0, 1, u8, one, one, none, one, one, one, none, one)
        _event_decide(u8, one, one, np.zeros(1, np.int64), np.zeros(1, np.int64), 0, READ, one, one.copy(), _E0, _E0)
        # (DieCarry.put's cut: the write bursts above reach it only inside _event_run; the read die stage calls it)
        _carry_keep(np.zeros(2, np.int64), np.arange(2, dtype=np.int64), 1, 1)
        # (Ftl.program_many's repeat check: inside _program_bulk where the map is the table, round 14; directly on
        # the numpy path)
        _dup_planes(np.arange(2, dtype=np.int64), np.zeros(2, np.int64), 1)
        # the event scheduler on all dies at once (a gate across dies: _simulate_split declines; the engine's
        # gates stay on their plane, so its runs above reach only the split)
        two = np.arange(2, dtype=np.int64)
        eventsim.simulate_compiled(np.full(2, eventsim.PROG, np.uint8), two, two, two, np.full(2, 100, np.int64),
                                   t_cmd=geometry.t_cmd_ns, queue_depth=geometry.queue_depth,
                                   plane_free=np.zeros(2, np.int64), die_carry={}, gate=np.array([-1, 0], np.int64),
                                   gate_x=np.zeros(2, np.int64), full=True)
        e.drain()
        e.stats()                      # (bins the queueing delays)
    return accel.warm("media engine", run, WARM_TWINS)


# every compiled twin of the media engine (warm_twins reaches each; tests check it)
WARM_TWINS = (eventsim._simulate_loop, eventsim._simulate_split, eventsim._chains_loop, eventsim._qd_loop,
              eventsim._plane_order, _packed_build_into, _fifo_loop, _fifo_carry,
              _lookup_events, _chan_fcfs, _chan_fcfs_packed, _read_front, _read_pass, hist._bin_into, _packed_build,
              _packed_sort, _latest_q, _pending_fields, _pid_map, _tail_scan, _carry_keep, _ring_loop, _extreme_at,
              _ends_get, _l2p_swap, _dup_planes, _gated_split, _parts_update, _pending_take, _ngate_scan,
              _ngate_bases, _decided_put, _min_where, _event_decide, _read_ready, _buf_rows,
              _event_inputs, _event_run, _split_items, _event_merge, _mixed_front, _mixed_req, _split_waiting,
              _program_bulk, _program_place)
