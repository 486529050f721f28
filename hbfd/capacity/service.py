"""The host half of capacity mode: miss service, eviction with exact write-back, prefetch, and timing.

``CapacityService(geometry, n_frames, policy)`` owns a :class:`~hbfd.capacity.frames.FramePool` (the device
state, in the layout of hbf_capacity.h), one backing store per capacity range, and a
:class:`hbfd.media.MediaEngine` (the NAND media model with its FTL) that times every media operation:

* :meth:`miss` serves a demand miss as the ring request of docs/design.md §3.6 would: a frame (free, else the
  CLOCK victim; pinned frames are never taken), the victim's exact bytes written back when dirty (to the
  backing store, and as a 4 KiB store to the media model, which programs it out of place through its FTL), the
  page read from the backing store, copied into the frame, its checksum verified, the frame published (VALID,
  then the pte). Then the policy's prefetches (same steps, frames published with ``marker``). The demand read,
  the write-backs and the prefetch reads go to the media model as one batch at the miss's arrival: prefetches
  cost modeled bandwidth and time and contend with the demand. A frame is ``ready_ns`` = arrival + its modeled
  completion (+ the victim's write-back data-in, which must leave the frame first); a hit before that waits.
* :meth:`hint` is the first hit on a prefetched frame (posted by the device, never waited for).
* Every failure (backing store I/O, copy, checksum mismatch, an access the range does not permit) sets the
  service's terminal status (the first one wins) and every later request gets it: the run ends. Nothing
  written is lost: a write-back that fails leaves the victim mapped and dirty in its frame, and :meth:`close`
  writes every dirty frame back, or, when the store cannot take them, to a salvage file.

Time. Modeled time is the media model's (integer ns on the GPU clock, from the requests' arrivals); it never
mixes with the host's wall time. Per run: ``modeled_ns`` (the media waits the misses were charged),
``service_ns`` (host wall time serving misses and hints), ``wall_ns`` (what the misses cost the GPU: per miss
max(modeled, service), since a completion can arrive no earlier than it was served), ``overhead_ns`` (wall_ns -
modeled_ns: the host path's time beyond the model). Miss-service throughput is pages and bytes filled per
second of ``service_ns``.
"""
from __future__ import annotations

import io
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hbfcommon import ctl
from hbfcommon.capacity import page_checksums
from hbfcommon.errors import ConfigError, ErrorCode, HbfError
from hbfcommon.fsutil import atomic_write_bytes
from hbfcommon.status import RequestStatus
from hbfd.contracts import REQUEST_BATCH_DTYPE
from hbfd.media import MediaEngine, MediaGeometry

from .backing import BackingStore, BackingStoreError
from .frames import PAGE, CopyFailed, Eviction, FramePool
from .prefetch import NoPrefetch, PrefetchPolicy, RangeView

log = logging.getLogger(__name__)

READY = int(RequestStatus.READY)
PENDING = int(RequestStatus.PENDING)


class CapacityFailure(HbfError):
    """The capacity service ended the run: ``status`` is the terminal RequestStatus name."""

    code = ErrorCode.INTERNAL


@dataclass(frozen=True)
class CapacityRange:
    range_id: int
    pages: int
    media_offset: int          # page aligned: media address of page 0 (hbfd's range table)
    perms: int
    store: BackingStore


@dataclass(frozen=True)
class MissResult:
    status: int                # RequestStatus value; PENDING: no frame could be taken now (all pinned): ask again
    frame: int = -1
    modeled_ns: int = 0        # the media wait charged to this access (ready_ns - arrival, >= 0)
    ready_ns: int = 0


def _ns() -> int:
    return time.perf_counter_ns()


# the permission an access needs (as hb_perm_needed in the device helpers)
PERM_NEEDED = {ctl.HBF_OP_LOAD: ctl.HBF_PERM_READ, ctl.HBF_OP_CPASYNC: ctl.HBF_PERM_READ,
               ctl.HBF_OP_STORE: ctl.HBF_PERM_WRITE, ctl.HBF_OP_ATOMIC: ctl.HBF_PERM_ATOMIC}


@dataclass(frozen=True)
class CapacityOptions:
    """The service's options, validated once. ``n_frames``: the frame pool (>= 32: one warp instruction's pages
    must fit, docs/design.md §3.6; smaller pools are for tests); ``verify``: read every fill back from its frame
    and every write-back back from its store and compare checksums; ``max_prefetch``: pages per policy event;
    ``touch_resident``: a resident page a policy asks for gets its CLOCK bit."""

    n_frames: int
    verify: bool = True
    max_prefetch: int = 64
    touch_resident: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.n_frames, int) or isinstance(self.n_frames, bool) or self.n_frames < 1:
            raise ConfigError("capacity: n_frames must be an integer >= 1", field="n_frames", value=self.n_frames)
        if not isinstance(self.max_prefetch, int) or self.max_prefetch < 0:
            raise ConfigError("capacity: max_prefetch must be an integer >= 0", field="max_prefetch",
                              value=self.max_prefetch)
        for f in ("verify", "touch_resident"):
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f"capacity: {f} must be true or false", field=f, value=getattr(self, f))


class CapacityService:
    def __init__(self, geometry: MediaGeometry, n_frames: int, policy: PrefetchPolicy | None = None, *,
                 verify: bool = True, max_prefetch: int = 64, engine: MediaEngine | None = None,
                 frame_memory=None, touch_resident: bool = True, frames: np.ndarray | None = None) -> None:
        self.options = o = CapacityOptions(n_frames, verify, max_prefetch, touch_resident)
        self.geometry = geometry
        self.engine = engine if engine is not None else MediaEngine(geometry)
        self.pool = FramePool(o.n_frames, frame_memory, frames=frames)
        self.policy: PrefetchPolicy = policy if policy is not None else NoPrefetch()
        if not isinstance(self.policy, PrefetchPolicy):
            raise ConfigError("a prefetch policy needs name, on_miss, on_prefetch_hit and on_evict "
                              "(hbfd.capacity.prefetch.PrefetchPolicy)", policy=type(policy).__name__)
        self.verify, self.max_prefetch, self.touch_resident = o.verify, o.max_prefetch, o.touch_resident
        self.ranges: dict[int, CapacityRange] = {}
        self.failure: tuple[int, str] | None = None      # (status, reason): terminal, first wins
        self._ids = 0
        self._horizon = 0
        self.n = {k: 0 for k in ("misses", "coalesced_misses", "pending_misses", "hints", "demand_reads",
                                 "prefetch_reads", "prefetch_used", "prefetch_wasted", "prefetch_dropped",
                                 "writebacks", "evictions", "fills", "fill_bytes", "writeback_bytes",
                                 "modeled_ns", "service_ns", "wall_ns", "overhead_ns", "media_batches")}

    # ---------------------------------------------------------------- ranges
    def add_range(self, range_id: int, pages: int, media_offset: int, perms: int, store: BackingStore,
                  table: np.ndarray | None = None) -> CapacityRange:
        if range_id in self.ranges:
            raise ConfigError(f"capacity range {range_id} is already served", range_id=range_id)
        if pages < 1 or store.pages < pages:
            raise ConfigError(f"capacity range {range_id}: {pages} pages but its store {store.name} holds "
                              f"{store.pages}", range_id=range_id, pages=pages, store_pages=store.pages)
        if media_offset % PAGE or media_offset < 0 or media_offset + pages * PAGE > self.geometry.capacity_bytes:
            raise ConfigError(f"capacity range {range_id}: media [{media_offset:#x}, +{pages * PAGE:#x}) is not "
                              "page aligned inside the media capacity", range_id=range_id,
                              capacity_bytes=self.geometry.capacity_bytes)
        if store.read_only and perms & (ctl.HBF_PERM_WRITE | ctl.HBF_PERM_ATOMIC):
            raise ConfigError(f"capacity range {range_id}: the read-only store {store.name} backs only a "
                              "read-only range (perms READ)", range_id=range_id, perms=perms)
        r = CapacityRange(range_id, pages, media_offset, perms, store)
        self.ranges[range_id] = r
        self.pool.add_range(range_id, pages, table)
        return r

    def add_hbfd_range(self, rng: Any, store: BackingStore) -> CapacityRange:
        """Serve an hbfd range-table entry (hbfd.ranges.Range, mode capacity): its id, perms, and the whole media
        pages it owns (page 0 = the page holding its base)."""
        if rng.mode != ctl.HBF_MODE_CAPACITY:
            raise ConfigError(f"range {rng.range_id} is not a capacity range", range_id=rng.range_id)
        lo, hi = rng.media_extent
        return self.add_range(rng.range_id, (hi - lo) // PAGE, lo, rng.perms, store)

    def view(self, range_id: int) -> RangeView:
        r = self.ranges[range_id]
        return RangeView(range_id, r.pages, lambda p, _r=range_id: self.pool.lookup(_r, p) is not None)

    # ---------------------------------------------------------------- failures
    def _fail(self, status: RequestStatus, reason: str, **fields) -> MissResult:
        if self.failure is None:
            self.failure = (int(status), reason)
            log.error("capacity: terminal %s: %s %s", status.name, reason, fields or "")
        return MissResult(self.failure[0])

    def check(self) -> None:
        """Raise the terminal failure, if any (what the session raises at synchronize)."""
        if self.failure is not None:
            st, reason = self.failure
            raise CapacityFailure(f"capacity mode ended the run: {RequestStatus(st).name}: {reason}",
                                  status=RequestStatus(st).name)

    # ---------------------------------------------------------------- media
    def _media(self, reqs: list[tuple[int, int, int, int]]) -> list[int]:
        """Completion times (GPU clock) of (arrival_ns, media_address, bytes, op) requests, in one batch. An
        arrival earlier than one already submitted is raised to it (the engine's clock never goes back)."""
        if not reqs:
            return []
        arr = np.maximum(np.array([r[0] for r in reqs], np.int64), self._horizon)
        self._horizon = int(arr.max())
        b = np.zeros(len(reqs), REQUEST_BATCH_DTYPE)
        ids = np.arange(self._ids, self._ids + len(reqs), dtype=np.uint64)
        self._ids += len(reqs)
        b["id"], b["arrival_ns"] = ids, arr
        b["media_address"] = [r[1] for r in reqs]
        b["bytes"] = [r[2] for r in reqs]
        b["op"] = [r[3] for r in reqs]
        self.engine.submit(b)
        self.engine.advance(self._horizon)
        got: dict[int, tuple[int, int]] = {}
        for _ in range(2):                     # the second collect is the quiet scan: everything is decided
            out = self.engine.collect()
            got.update(zip(out["id"].tolist(), zip(out["modeled_ns"].tolist(), out["status"].tolist())))
            if len(got) >= len(reqs):
                break
        self.n["media_batches"] += 1
        done = []
        for i, a in zip(ids.tolist(), arr.tolist()):
            if i not in got or got[i][1] != READY:
                raise HbfError("the media model did not serve a capacity request", code=ErrorCode.INTERNAL, id=i,
                               status=got.get(i))
            done.append(a + got[i][0])
        return done

    # ---------------------------------------------------------------- frames
    def _take_frame(self) -> tuple[int | None, Eviction | None, MissResult | None]:
        """A free frame, else the CLOCK victim with its bytes written back. (frame, eviction, failure)."""
        f = self.pool.take_free()
        if f is not None:
            return f, None, None
        ev = self.pool.begin_eviction()
        if ev is None:
            return None, None, None            # every frame pinned or busy
        fail = self._write_back(ev)
        if fail is not None:
            return None, None, fail
        return self.pool.complete_eviction(ev), ev, None

    def _write_back(self, ev: Eviction) -> MissResult | None:
        """The evicting frame's exact bytes to its store (a dirty frame); statistics; the policy told. On a
        failure the eviction is cancelled (the frame stays mapped and dirty) and the terminal status is set."""
        r = self.ranges[ev.range_id]
        if ev.dirty:
            try:
                data = self.pool.memory.read(ev.frame)
            except (CopyFailed, OSError) as e:
                self.pool.cancel_eviction(ev)
                return self._fail(RequestStatus.COPY_ERROR, f"copy of frame {ev.frame} for its write-back failed: "
                                  f"{e}", frame=ev.frame)
            try:
                r.store.write_page(ev.page, data)
                if self.verify:
                    back = r.store.read_pages(ev.page, 1)
                    pg = np.array([ev.page], np.uint64)
                    if page_checksums(pg, back)[0] != page_checksums(pg, data[None, :])[0]:
                        self.pool.cancel_eviction(ev)
                        return self._fail(RequestStatus.CHECKSUM_ERROR, f"write-back of page {ev.page} of range "
                                          f"{ev.range_id} reads back different bytes", page=ev.page)
            except BackingStoreError as e:
                self.pool.cancel_eviction(ev)
                return self._fail(RequestStatus.IO_ERROR, str(e), page=ev.page)
            self.n["writebacks"] += 1
            self.n["writeback_bytes"] += PAGE
        self.n["evictions"] += 1
        if ev.prefetched and not ev.used:
            self.n["prefetch_wasted"] += 1
        self.policy.on_evict(self.view(ev.range_id), ev.page, ev.prefetched, ev.used)
        return None

    def _serve(self, items: list[tuple[CapacityRange, int, int, bool]]) -> list[MissResult]:
        """Fill the pages of ``items`` = (range, page, arrival, demand) in order, time them in one media batch,
        publish them; one result per item (PENDING where no frame could be taken). A failure ends the run: the
        batch's fills not yet published go back to the free list (clean reads: nothing is lost) and every item
        gets the terminal status."""
        taken: list[tuple[int, int, np.ndarray, int]] = []  # (item index, frame, bytes, index of its read in reqs)
        reqs: list[tuple[int, int, int, int]] = []
        wb_of: dict[int, int] = {}                     # index of a read -> index of its victim's write-back
        res: list[MissResult | None] = [None] * len(items)
        for k, (r, page, arrival, demand) in enumerate(items):
            if self.failure is not None:
                break
            frame, ev, fail = self._take_frame()
            if fail is not None:
                break
            if frame is None:
                self.n["pending_misses" if demand else "prefetch_dropped"] += 1
                res[k] = MissResult(PENDING)
                continue
            self.pool.begin_fill(frame, r.range_id, page, prefetch=not demand)
            if ev is not None and ev.dirty:
                vr = self.ranges[ev.range_id]
                wb_of[len(reqs) + 1] = len(reqs)
                reqs.append((arrival, vr.media_offset + ev.page * PAGE, PAGE, ctl.HBF_OP_STORE))
            taken.append((k, frame, None, len(reqs)))
            reqs.append((arrival, r.media_offset + page * PAGE, PAGE, ctl.HBF_OP_LOAD))
        if taken and self.failure is None:
            pages = np.array([items[k][1] for k, *_ in taken], np.uint64)
            data = np.empty((len(taken), PAGE), np.uint8)
            by_range: dict[int, list[int]] = {}
            for j, (k, *_rest) in enumerate(taken):
                by_range.setdefault(items[k][0].range_id, []).append(j)
            try:
                for rid, js in by_range.items():       # one read per store (runs of pages in one call)
                    data[js] = self.ranges[rid].store.read_many(pages[js].astype(np.int64))
            except BackingStoreError as e:
                self._fail(RequestStatus.IO_ERROR, str(e), range_id=rid)
        if taken and self.failure is None:
            want = page_checksums(pages, data)
            try:
                for j, (_k, f, _d, _i) in enumerate(taken):
                    self.pool.memory.write(f, data[j])
                got = page_checksums(pages, np.stack([self.pool.memory.read(f) for _k, f, _d, _i in taken])) \
                    if self.verify else want
            except (CopyFailed, OSError) as e:
                self._fail(RequestStatus.COPY_ERROR, f"copy of a page into its frame failed: {e}")
            else:
                bad = np.flatnonzero(got != want)
                if len(bad):
                    k, f = taken[bad[0]][0], taken[bad[0]][1]
                    self._fail(RequestStatus.CHECKSUM_ERROR, f"frame {f} holds page {items[k][1]} of range "
                               f"{items[k][0].range_id} with checksum {int(got[bad[0]]):#x}, the store's is "
                               f"{int(want[bad[0]]):#x}", page=items[k][1], frame=f)
        if self.failure is not None:
            for _k, f, _d, _i in taken:
                self.pool.release_free(f)
            return [MissResult(self.failure[0])] * len(items)
        if taken:
            try:
                t = self._media(reqs)
            except HbfError as e:
                for _k, f, _d, _i in taken:
                    self.pool.release_free(f)
                self._fail(RequestStatus.IO_ERROR, f"media model: {e}")
                raise
            for j, (k, f, _d, i) in enumerate(taken):
                ready = max(t[i], t[wb_of[i]]) if i in wb_of else t[i]
                self.pool.publish(f, ready, int(want[j]))
                res[k] = MissResult(READY, f, max(0, ready - items[k][2]), ready)
                self.n["demand_reads" if items[k][3] else "prefetch_reads"] += 1
            self.n["fills"] += len(taken)
            self.n["fill_bytes"] += PAGE * len(taken)
        return [x if x is not None else MissResult(PENDING) for x in res]

    # ---------------------------------------------------------------- requests (what the ring carries)
    def _prefetch_items(self, r: CapacityRange, asked, arrival: int, seen: set) -> list:
        """The policy's pages worth fetching: in the range, not resident, not asked twice, at most
        ``max_prefetch``. A resident page asked for gets its referenced bit (a predicted use keeps it another
        CLOCK sweep)."""
        out = []
        for p in asked:
            p = int(p)
            if not 0 <= p < r.pages or (r.range_id, p) in seen:
                continue
            seen.add((r.range_id, p))
            f = self.pool.lookup(r.range_id, p)
            if f is not None:
                if self.touch_resident:
                    self.pool.frames[f]["referenced"] = 1
            else:
                out.append((r, p, arrival, False))
                if len(out) >= self.max_prefetch:
                    break
        return out

    def miss(self, range_id: int, page: int, op: int, arrival_ns: int) -> MissResult:
        """A demand miss (HBF_REQ_CAP_MISS) on ``page`` of ``range_id`` by an access of ``op`` at ``arrival_ns``
        (GPU clock). READY: the page is mapped; the access waits ``modeled_ns`` then re-reads the pte."""
        return self.miss_many([(range_id, page, op, arrival_ns)])[0]

    def miss_many(self, requests) -> list[MissResult]:
        """The misses of one ring scan, ``(range_id, page, op, arrival_ns)`` each: their demand reads in one
        media batch, then the policy's prefetches for all of them in a second (issued at each miss's arrival)."""
        if self.failure is not None:
            return [MissResult(self.failure[0])] * len(requests)
        t0 = _ns()
        out: list[MissResult | None] = [None] * len(requests)
        items, where, first = [], [], {}
        for k, (range_id, page, op, arrival) in enumerate(requests):
            r = self.ranges.get(range_id)
            if r is None or not 0 <= page < r.pages:
                out[k] = self._fail(RequestStatus.UNSUPPORTED, f"miss outside every capacity range: range "
                                    f"{range_id} page {page}", range_id=range_id, page=page)
                break
            need = PERM_NEEDED.get(op)
            if need is None or not r.perms & need:
                out[k] = self._fail(RequestStatus.UNSUPPORTED, f"op {op} on range {range_id} (perms {r.perms}) is "
                                    "not permitted", range_id=range_id, op=op)
                break
            self.n["misses"] += 1
            f = self.pool.lookup(range_id, page)
            if f is not None:                   # another warp's miss (or a prefetch) published it meanwhile
                self.n["coalesced_misses"] += 1
                ready = int(self.pool.frames[f]["ready_ns"])
                out[k] = MissResult(READY, f, max(0, ready - arrival), ready)
                continue
            if (range_id, page) in first:       # the same page twice in one scan: the first fill serves both
                self.n["coalesced_misses"] += 1
                where.append((k, first[(range_id, page)]))
                continue
            first[(range_id, page)] = len(items)
            where.append((k, len(items)))
            items.append((r, page, arrival, True))
        if self.failure is None and items:
            got = self._serve(items)
            for k, i in where:
                g = got[i]
                if g.status == READY and requests[k][3] != items[i][2]:
                    g = MissResult(READY, g.frame, max(0, g.ready_ns - requests[k][3]), g.ready_ns)
                out[k] = g
            if self.failure is None:
                seen: set = set()
                pf = []
                for (r, page, arrival, _d), g in zip(items, got):
                    if g.status == READY:
                        pf += self._prefetch_items(r, self.policy.on_miss(self.view(r.range_id), page), arrival, seen)
                if pf:
                    self._serve(pf)
        if self.failure is not None:            # the run has ended: every request of the scan gets the status
            out = [MissResult(self.failure[0]) for _ in out]
        res = [x if x is not None else MissResult(PENDING) for x in out]
        svc = _ns() - t0
        self.n["service_ns"] += svc
        ok = [x for x in res if x.status == READY]
        if ok:
            per = svc // len(ok)                # the scan's host time, shared by the misses it served
            for x in ok:
                self.n["modeled_ns"] += x.modeled_ns
                wall = max(x.modeled_ns, per)
                self.n["wall_ns"] += wall
                self.n["overhead_ns"] += wall - x.modeled_ns
        return res

    def hint(self, range_id: int, page: int, now_ns: int) -> None:
        """The first hit on a prefetched frame (HBF_REQ_CAP_HINT): count it used, ask the policy."""
        if self.failure is not None:
            return
        t0 = _ns()
        self.n["hints"] += 1
        self.n["prefetch_used"] += 1
        r = self.ranges[range_id]
        pf = self._prefetch_items(r, self.policy.on_prefetch_hit(self.view(range_id), page), now_ns, set())
        if pf:
            self._serve(pf)
        self.n["service_ns"] += _ns() - t0

    # ---------------------------------------------------------------- flush, close
    def flush(self) -> int:
        """Write back every dirty frame not in use and free it (unregister, end of run). Returns the pages
        written; sets the terminal status and stops at the first failure (the frame stays dirty)."""
        done = 0
        fr = self.pool.frames
        for f in np.flatnonzero(fr["dirty"] != 0).tolist():
            if self.failure is not None:
                break
            ev = self.pool.begin_eviction_of(f)
            if ev is None:
                continue
            if self._write_back(ev) is not None:
                break
            r = self.ranges[ev.range_id]
            self._media([(self._horizon, r.media_offset + ev.page * PAGE, PAGE, ctl.HBF_OP_STORE)])
            self.pool.release_free(self.pool.complete_eviction(ev))
            done += 1
        for r in {id(x.store): x.store for x in self.ranges.values()}.values():
            try:
                r.flush()
            except BackingStoreError as e:
                self._fail(RequestStatus.IO_ERROR, str(e))
        return done

    def dirty_pages(self) -> list[tuple[int, int, int]]:
        """(range_id, page, frame) of every frame holding bytes not yet in its store."""
        fr = self.pool.frames
        idx = np.flatnonzero((fr["dirty"] != 0) & (fr["state"] != 0))
        return [(int(fr[f]["range_id"]), int(fr[f]["logical_page"]), int(f)) for f in idx.tolist()]

    def close(self, salvage_path: str | Path | None = None) -> dict:
        """End of run: flush; if bytes are still only in frames (a failed store), write them to
        ``salvage_path`` (npz: range_ids, pages, data; atomic) so nothing written is lost. Returns the report."""
        if self.failure is None:
            self.flush()
        left = self.dirty_pages()
        rep = self.report()
        if left:
            if salvage_path is None:
                raise CapacityFailure(f"{len(left)} dirty page(s) could not be written back and no salvage path "
                                      "was given", pages=len(left))
            buf = io.BytesIO()
            np.savez(buf, range_ids=np.array([x[0] for x in left], np.uint32),
                     pages=np.array([x[1] for x in left], np.uint64),
                     data=np.stack([self.pool.memory.read(x[2]) for x in left]))
            atomic_write_bytes(salvage_path, buf.getvalue())
            rep["salvaged_pages"] = len(left)
            rep["salvage_path"] = str(salvage_path)
            log.error("capacity: %d dirty page(s) saved to %s", len(left), salvage_path)
        for s in {id(x.store): x.store for x in self.ranges.values()}.values():
            s.close()
        return rep

    # ---------------------------------------------------------------- report
    def report(self) -> dict:
        n = dict(self.n)
        fr = self.pool.frames
        unused = int(((fr["prefetched"] != 0) & (fr["marker"] != 0) & ((fr["state"] == 2) | (fr["state"] == 3))).sum())
        n["prefetch_unused_resident"] = unused
        svc_s = n["service_ns"] / 1e9
        filled = n["fills"]
        return {
            "policy": self.policy.name, "frames": self.pool.n, "options": dict(self.options.__dict__),
            "counters": n,
            "media_reads": n["demand_reads"] + n["prefetch_reads"],
            "prefetch_wasted_total": n["prefetch_wasted"] + unused,
            "miss_service": {"pages_per_s": filled / svc_s if svc_s else None,
                             "GB_per_s": filled * PAGE / svc_s / 1e9 if svc_s else None,
                             "service_ns_per_fill": n["service_ns"] / filled if filled else None},
            "frame_states": self.pool.state_counts(),
            "media": {"engine": self.engine.name, "programs": self.engine.ftl.host_programs,
                      "write_amplification": self.engine.ftl.write_amplification},
            "status": "READY" if self.failure is None else RequestStatus(self.failure[0]).name,
            "failure": None if self.failure is None else self.failure[1],
        }


def report_json(rep: dict) -> str:
    return json.dumps(rep, indent=1, sort_keys=True, default=int)
