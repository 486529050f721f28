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
* :meth:`miss_many` / :meth:`miss_arrays` serve one ring scan's misses **as a batch** (docs/design.md §3.6.1): the
  batch's frames chosen at once (``FramePool.take_frames``), one store read and checksum pass (in chunks, on
  ``workers`` threads), one copy into the frames, one media call, one publication; ``batched=False`` serves them one
  item at a time, the reference the batched path is tested equal to (tests/capacity/test_batched.py).
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
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hbfcommon import ctl
from hbfcommon.errors import ConfigError, ErrorCode, HbfError
from hbfcommon.fsutil import atomic_write_bytes
from hbfcommon.status import RequestStatus
from hbfd import accel
from hbfd.contracts import REQUEST_BATCH_DTYPE
from hbfd.media import MediaEngine, MediaGeometry

from .backing import BackingStore, BackingStoreError, GeneratedStore
from .frames import PAGE, CopyFailed, Eviction, Evictions, FrameMemory, FramePool, groups
from . import kernels
from .kernels import page_checksums
from .prefetch import NoPrefetch, PrefetchPolicy, RangeView

log = logging.getLogger(__name__)

READY = int(RequestStatus.READY)
PENDING = int(RequestStatus.PENDING)
FLUSH_BATCH = 4096                     # write-back programs per media call at flush (unregister, end of run)
# a generated store whose reads are its own: its pages are filled by the compiled job (GeneratedStore.fill_frames)
_FILL, _READ_CHECKSUMS = GeneratedStore.fill_frames, GeneratedStore.read_many_checksums


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
    ``touch_resident``: a resident page a policy asks for gets its CLOCK bit; ``batched``: a scan's misses
    served in arrays (one frame choice, store read, copy, checksum pass and media call per batch; the
    default), else one item at a time (the reference the batched path is tested equal to); ``workers``:
    threads filling a batch's pages: store read + checksum, copy, read-back compare (the calling thread and
    ``workers`` - 1 more)."""

    n_frames: int
    verify: bool = True
    max_prefetch: int = 64
    touch_resident: bool = True
    batched: bool = True
    workers: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.n_frames, int) or isinstance(self.n_frames, bool) or self.n_frames < 1:
            raise ConfigError("capacity: n_frames must be an integer >= 1", field="n_frames", value=self.n_frames)
        if not isinstance(self.max_prefetch, int) or self.max_prefetch < 0:
            raise ConfigError("capacity: max_prefetch must be an integer >= 0", field="max_prefetch",
                              value=self.max_prefetch)
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or not 1 <= self.workers <= 64:
            raise ConfigError("capacity: workers must be an integer in [1, 64]", field="workers", value=self.workers)
        for f in ("verify", "touch_resident", "batched"):
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f"capacity: {f} must be true or false", field=f, value=getattr(self, f))


class CapacityService:
    def __init__(self, geometry: MediaGeometry, n_frames: int, policy: PrefetchPolicy | None = None, *,
                 verify: bool = True, max_prefetch: int = 64, engine: MediaEngine | None = None,
                 frame_memory=None, touch_resident: bool = True, frames: np.ndarray | None = None,
                 batched: bool = True, workers: int = 1) -> None:
        self.options = o = CapacityOptions(n_frames, verify, max_prefetch, touch_resident, batched, workers)
        self.geometry = geometry
        self.engine = engine if engine is not None else MediaEngine(geometry)
        self.pool = FramePool(o.n_frames, frame_memory, frames=frames)
        self.policy: PrefetchPolicy = policy if policy is not None else NoPrefetch()
        if not isinstance(self.policy, PrefetchPolicy):
            raise ConfigError("a prefetch policy needs name, on_miss, on_prefetch_hit and on_evict "
                              "(hbfd.capacity.prefetch.PrefetchPolicy)", policy=type(policy).__name__)
        self.verify, self.max_prefetch, self.touch_resident = o.verify, o.max_prefetch, o.touch_resident
        self.batched, self.workers = o.batched, o.workers
        self._pool_ex = None                  # the fill threads (workers > 1), started at the first batch
        self._tls = threading.local()         # per fill thread: its chunk buffer
        self.accel_warm_s = kernels.warm()    # the compiled twins loaded (or compiled) now, not at the first miss
        self._views: dict[int, RangeView] = {}
        self._allowed: dict[int, np.ndarray] = {}
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
        v = self._views.get(range_id)
        if v is None:
            r = self.ranges[range_id]
            v = self._views[range_id] = RangeView(range_id, r.pages,
                                                  lambda p, _r=range_id: self.pool.lookup(_r, p) is not None)
        return v

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
    def _media(self, reqs) -> np.ndarray:
        """Completion times (GPU clock, int64) of (arrival_ns, media_address, bytes, op) requests -- a list of
        tuples or a (n, 4) int64 array -- in one batch. An arrival earlier than one already submitted is raised
        to it (the engine's clock never goes back)."""
        r = np.asarray(reqs, np.int64).reshape(-1, 4)
        n = len(r)
        if not n:
            return np.zeros(0, np.int64)
        arr = np.maximum(r[:, 0], self._horizon)
        self._horizon = int(arr.max())
        b = np.zeros(n, REQUEST_BATCH_DTYPE)
        base = self._ids
        self._ids += n
        b["id"] = np.arange(base, base + n, dtype=np.uint64)
        b["arrival_ns"], b["media_address"], b["bytes"], b["op"] = arr, r[:, 1], r[:, 2], r[:, 3]
        self.engine.submit(b)
        self.engine.advance(self._horizon)
        modeled = np.zeros(n, np.int64)
        seen = np.zeros(n, bool)
        ok = np.zeros(n, bool)
        for _ in range(2):                     # the second collect is the quiet scan: everything is decided
            out = self.engine.collect()
            k = out["id"].astype(np.int64) - base
            if len(k) and (k.min() < 0 or k.max() >= n):
                raise HbfError("the media model returned a request the capacity service did not submit",
                               code=ErrorCode.INTERNAL)
            modeled[k] = out["modeled_ns"]
            ok[k] = out["status"] == READY
            seen[k] = True
            if seen.all():
                break
        self.n["media_batches"] += 1
        if not (seen & ok).all():
            i = int(np.flatnonzero(~(seen & ok))[0])
            raise HbfError("the media model did not serve a capacity request", code=ErrorCode.INTERNAL,
                           id=base + i, status=None if not seen[i] else "not READY")
        return arr + modeled

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

    def _write_back(self, ev: Eviction, *, counted: bool = True) -> MissResult | None:
        """The evicting frame's exact bytes to its store (a dirty frame); statistics; the policy told (unless
        ``counted`` is False: the batched path accounts a batch's evictions together). On a failure the
        eviction is cancelled (the frame stays mapped and dirty) and the terminal status is set."""
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
        if not counted:
            return None
        self.n["evictions"] += 1
        if ev.prefetched and not ev.used:
            self.n["prefetch_wasted"] += 1
        self.policy.on_evict(self.view(ev.range_id), ev.page, ev.prefetched, ev.used)
        return None

    def _write_back_many(self, ev: Evictions) -> int:
        """The exact bytes of the dirty evicting frames ``ev`` to their stores, in order, as :meth:`_write_back`
        one after another would (the batched path, the flush): the frames read in one copy, each run of
        consecutive pages of one range written in one write (the store's ``write_pages``; else ``write_page``
        each) and, with ``verify``, read back in one read and compared by the pages' checksums before the next
        run. Counts the write-backs done; the caller completes or cancels the evictions and accounts them.
        Returns -1 when every page was written; else the index of the first eviction not known written, the
        terminal status set (IO_ERROR for the store, COPY_ERROR for the frames' copy, CHECKSUM_ERROR for a page
        that reads back other bytes): the caller cancels it and every later one (their frames stay mapped and
        dirty, as after _write_back's failure). A run whose write fails counts from its first page not known
        written (BackingStoreError's ``written_pages``); a run that reads back other bytes from its first
        differing page. Pages after that index may already hold their bytes in the store; their frames stay
        dirty (written again at close, or salvaged): nothing is lost."""
        k = len(ev)
        if not k:
            return -1
        try:
            data = self.pool.memory.read_many(ev.frame.astype(np.intp))
        except (CopyFailed, OSError) as e:
            self._fail(RequestStatus.COPY_ERROR, f"copy of frames {ev.frame[:4].tolist()}... for their write-back "
                       f"failed: {e}", frame=int(ev.frame[0]))
            return 0
        pages = ev.page.astype(np.int64)
        rids = ev.range_id.astype(np.int64)
        cut = np.flatnonzero((np.diff(pages) != 1) | (np.diff(rids) != 0)) + 1
        want = page_checksums(pages.astype(np.uint64), data) if self.verify else None
        bad = -1
        for i, j in zip(np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [k])).tolist()):
            rid, first = int(rids[i]), int(pages[i])
            store = self.ranges[rid].store
            x = i                                       # pages [i, x) of the run known written
            try:
                wp = getattr(store, "write_pages", None)
                if wp is not None:
                    try:
                        wp(first, data[i:j])
                    except BackingStoreError as e:
                        x = i + max(0, min(j - i, int(e.fields.get("written_pages", 0) or 0)))
                        raise
                    x = j
                else:
                    for y in range(i, j):
                        store.write_page(int(pages[y]), data[y])
                        x = y + 1
                if self.verify:
                    got = page_checksums(pages[i:j].astype(np.uint64), store.read_pages(first, j - i))
                    diff = np.flatnonzero(got != want[i:j])
                    if len(diff):
                        bad = i + int(diff[0])
                        self._fail(RequestStatus.CHECKSUM_ERROR, f"write-back of page {int(pages[bad])} of range "
                                   f"{rid} reads back different bytes", page=int(pages[bad]))
                        break
            except BackingStoreError as e:
                bad = x if x < j else i                 # a failed read-back: the run's first page
                self._fail(RequestStatus.IO_ERROR, str(e), page=int(pages[bad]))
                break
        done = k if bad < 0 else bad
        self.n["writebacks"] += done
        self.n["writeback_bytes"] += PAGE * done
        return bad

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
            try:                                       # page by page from its store, with its checksum
                data = np.stack([items[k][0].store.read_many(np.array([items[k][1]], np.int64))[0]
                                 for k, *_ in taken])
                want = page_checksums(pages, data)
            except BackingStoreError as e:
                self._fail(RequestStatus.IO_ERROR, str(e))
        if taken and self.failure is None:
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
                ready = int(max(t[i], t[wb_of[i]]) if i in wb_of else t[i])
                self.pool.publish(f, ready, int(want[j]))
                res[k] = MissResult(READY, f, max(0, ready - items[k][2]), ready)
                self.n["demand_reads" if items[k][3] else "prefetch_reads"] += 1
            self.n["fills"] += len(taken)
            self.n["fill_bytes"] += PAGE * len(taken)
        return [x if x is not None else MissResult(PENDING) for x in res]

    def _serve_batch(self, rids: np.ndarray, pages: np.ndarray, arrivals: np.ndarray,
                     demand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_serve` in arrays (the same frames, write-backs, bytes, checksums and media requests in the same
        order; tests/capacity/test_batched.py): the batch's frames chosen at once (FramePool.take_frames), the
        dirty victims written back in order, one store read per range, one copy into the frames, one checksum
        pass, one media call, one publication. Returns (status, frame, ready_ns) per item."""
        k = len(pages)
        status = np.full(k, PENDING, np.int64)
        frame = np.full(k, -1, np.int64)
        ready = np.zeros(k, np.int64)
        if self.failure is not None:
            status[:] = self.failure[0]
            return status, frame, ready
        frames, ev = self.pool.take_frames(k)
        m = len(frames)
        nfree = m - len(ev)
        # the victims' write-backs, in order (_write_back_many: runs of consecutive pages in one write): the
        # first that fails cancels itself and every later eviction (those frames stay mapped, their bytes in
        # place); the items before it keep their frames until the failure releases every frame of the batch
        dj = np.flatnonzero(ev.dirty) if len(ev) else np.zeros(0, np.int64)
        b = self._write_back_many(ev.part(dj)) if len(dj) else -1
        if b >= 0:
            j = int(dj[b])
            self.pool.complete_evictions(ev.part(slice(0, j)))
            self.pool.cancel_evictions(ev.part(slice(j, None)))
            self._account_evictions(ev.part(slice(0, j)))
            for f in frames[:nfree + j].tolist():
                self.pool.release_free(f)
            status[:] = self.failure[0]
            return status, frame, ready
        self.pool.complete_evictions(ev)
        self._account_evictions(ev)
        if m < k:
            nd = int(demand[m:].sum())
            self.n["pending_misses"] += nd
            self.n["prefetch_dropped"] += (k - m) - nd
        if m == 0:
            return status, frame, ready
        rids_m, pages_m, arr_m, dem_m = rids[:m], pages[:m], arrivals[:m], demand[:m]
        self.pool.begin_fill_many(frames, rids_m, pages_m, ~dem_m)
        want = self._fill(frames, rids_m, pages_m)
        if self.failure is not None:
            for f in frames.tolist():
                self.pool.release_free(f)
            status[:] = self.failure[0]
            return status, frame, ready
        # the media requests in the reference's order: per item its victim's write-back (a dirty one), then
        # its read
        wb = np.zeros(m, bool)
        wb[nfree:] = ev.dirty
        nreq = 1 + wb.astype(np.int64)
        read_at = np.cumsum(nreq) - 1
        reqs = np.empty((int(nreq.sum()), 4), np.int64)
        offs = np.array([self.ranges[r].media_offset for r in rids_m.tolist()], np.int64) if len(
            self.ranges) > 1 else np.full(m, next(iter(self.ranges.values())).media_offset, np.int64)
        reqs[read_at] = np.stack([arr_m, offs + pages_m * PAGE, np.full(m, PAGE), np.full(m, ctl.HBF_OP_LOAD)], 1)
        if wb.any():
            w = np.flatnonzero(wb)
            e = w - nfree
            voff = np.array([self.ranges[r].media_offset for r in ev.range_id[e].tolist()], np.int64)
            reqs[read_at[w] - 1] = np.stack([arr_m[w], voff + ev.page[e] * PAGE, np.full(len(w), PAGE),
                                             np.full(len(w), ctl.HBF_OP_STORE)], 1)
        try:
            t = self._media(reqs)
        except HbfError as e:
            for f in frames.tolist():
                self.pool.release_free(f)
            self._fail(RequestStatus.IO_ERROR, f"media model: {e}")
            raise
        rd = t[read_at]
        if wb.any():
            rd[wb] = np.maximum(rd[wb], t[read_at[wb] - 1])
        self.pool.publish_many(frames, rd, want)
        status[:m], frame[:m], ready[:m] = READY, frames, rd
        nd = int(dem_m.sum())
        self.n["demand_reads"] += nd
        self.n["prefetch_reads"] += m - nd
        self.n["fills"] += m
        self.n["fill_bytes"] += PAGE * m
        return status, frame, ready

    CHUNK = 64          # pages per fill job (at least; at most 4x when not compiled): read + checksum, copy, compare

    def _fill(self, frames: np.ndarray, rids: np.ndarray, pages: np.ndarray) -> np.ndarray | None:
        """Fill ``frames`` with their pages, in jobs of pages of one range: each job reads its pages from their
        store with their checksums (a store with ``read_many_checksums``, GeneratedStore: both in one pass, into
        the job thread's own buffer), copies them into their frames (``FrameMemory.write_many``, the copy
        primitive) and, with ``verify``, reads the frames back and compares (``FrameMemory.differing``); jobs of
        ``CHUNK`` to 4 ``CHUNK`` pages (one per thread where that is fewer). Where the twins run, a GeneratedStore's
        pages into plain FrameMemory take one compiled pass per page instead (GeneratedStore.fill_frames: the
        same bytes, checksums and compare), one job per thread (at least 4 ``CHUNK`` pages). The jobs run on
        ``workers`` threads (the calling one and ``workers`` - 1 more; the compiled twins and numpy's array loops
        release the GIL) and never touch the same frame. Returns the pages' checksums (the store's), or None when
        the batch failed: the first failing job in chunk order sets the terminal status (IO_ERROR for the store,
        COPY_ERROR for the copy, CHECKSUM_ERROR for a frame that reads back other bytes); the caller frees the
        frames."""
        m = len(pages)
        want = np.empty(m, np.uint64)
        memory, verify, tls = self.pool.memory, self.verify, self._tls
        # a generated store and plain frame memory, compiled: a job is one pass per page (generate, checksum,
        # copy, read back: kernels.fill_generated), so its cost per call is all it adds: one job per thread
        fused_ok = (kernels.compiled() and type(memory).write_many is FrameMemory.write_many
                    and type(memory).differing is FrameMemory.differing and memory.data.flags.c_contiguous)
        jobs = []
        for rid, sel in groups(rids):
            store = self.ranges[rid].store
            fused = fused_ok and isinstance(store, GeneratedStore) and type(store).fill_frames is _FILL and \
                type(store).read_many_checksums is _READ_CHECKSUMS
            js = np.arange(m) if isinstance(sel, slice) else np.flatnonzero(sel)
            # compiled: a job per thread, at least 4 CHUNKs (~0.1 ms of work: a thread hand-off costs ~10-20 us, so
            # a scan of 1024 pages uses 4 threads, one of 4096 16); else CHUNK to 4 CHUNKs (the buffer stays small)
            per = -(-len(js) // self.workers)
            size = max(4 * self.CHUNK, per) if fused else min(max(self.CHUNK, per), 4 * self.CHUNK)
            for i in range(0, len(js), size):
                part = js[i:i + size]
                jobs.append((store, slice(int(part[0]), int(part[-1]) + 1) if isinstance(sel, slice) else part,
                             fused))

        def one(job):
            store, js, fused = job
            p = pages[js]
            if fused:
                buf = getattr(tls, "words", None)
                if buf is None:
                    buf = tls.words = np.empty(PAGE // 8, np.uint64)
                f = frames[js]
                try:
                    w, b = store.fill_frames(p, memory.data, f, buf, verify)
                except BackingStoreError as e:
                    return RequestStatus.IO_ERROR, str(e), {}
                want[js] = w
                if b < 0:
                    return None
                bad = [b]
            else:
                r = self._fill_job(store, p, frames[js], want, js)
                if r is None or isinstance(r[0], RequestStatus):
                    return r
                bad, w, f = r
            j = int(bad[0])
            fr, pg = int(f[j]), int(p[j])
            got = int(page_checksums(np.array([pg], np.uint64), memory.read(fr)[None, :])[0])
            return (RequestStatus.CHECKSUM_ERROR, f"frame {fr} holds page {pg} of range {int(rids[js][j])} "
                    f"with checksum {got:#x}, the store's is {int(w[j]):#x}", {"page": pg, "frame": fr})

        if self.workers > 1 and len(jobs) > 1:           # the calling thread runs the first job itself
            if self._pool_ex is None:
                from concurrent.futures import ThreadPoolExecutor
                self._pool_ex = ThreadPoolExecutor(self.workers - 1, thread_name_prefix="hbf-cap-fill")
            rest = [self._pool_ex.submit(one, j) for j in jobs[1:]]
            results = [one(jobs[0])] + [f.result() for f in rest]
        else:
            results = [one(j) for j in jobs]
        for res in results:
            if res is not None:
                st, reason, fields = res
                self._fail(st, reason, **fields)
                return None
        return want

    def _fill_job(self, store, p: np.ndarray, f: np.ndarray, want: np.ndarray, js):
        """A fill job through the store's and the frame memory's own methods: read + checksum (into this thread's
        buffer where the store fills one), copy, read back. None when done; (status, reason, fields) on a store
        or copy failure; (differing rows, checksums, frames) when a frame reads back other bytes."""
        tls, memory, verify = self._tls, self.pool.memory, self.verify
        try:
            fused = getattr(store, "read_many_checksums", None)
            if fused is not None:                     # into this thread's buffer (no allocation per job)
                buf = getattr(tls, "buf", None)
                if buf is None or len(buf) < len(p):
                    buf = tls.buf = np.empty((4 * self.CHUNK, PAGE), np.uint8)
                data, w = fused(p, out=buf[:len(p)])
            else:
                data = store.read_many(p)
                w = page_checksums(p.astype(np.uint64), data)
        except BackingStoreError as e:
            return RequestStatus.IO_ERROR, str(e), {}
        want[js] = w
        try:
            memory.write_many(f, data)
            bad = memory.differing(f, data) if verify else ()
        except (CopyFailed, OSError) as e:
            return RequestStatus.COPY_ERROR, f"copy of a page into its frame failed: {e}", {}
        if len(bad):
            return bad, w, f
        return None

    def _account_evictions(self, ev) -> None:
        """Statistics of evictions done (write-backs counted by _write_back) and the policy told, in order."""
        k = len(ev)
        if not k:
            return
        self.n["evictions"] += k
        self.n["prefetch_wasted"] += int((ev.prefetched & ~ev.used).sum())
        if type(self.policy).on_evict is not NoPrefetch.on_evict:
            for j in range(k):
                self.policy.on_evict(self.view(int(ev.range_id[j])), int(ev.page[j]), bool(ev.prefetched[j]),
                                     bool(ev.used[j]))

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

    def _prefetch_arrays(self, events) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_prefetch_items` of a batch's policy events ``(range, asked, arrival)`` in order with one ``seen``
        set, in arrays: (range ids, pages, arrivals) of the pages to fetch, in the order the items would give
        (:meth:`_prefetch_flat`)."""
        evs = [(r, a if isinstance(a, (list, tuple, range, np.ndarray)) else list(a), t) for r, a, t in events]
        flat: list = []
        counts = []
        for _r, a, _t in evs:
            flat.extend(a)
            counts.append(len(a))
        z = np.zeros(0, np.int64)
        if not flat:
            return z, z, z
        return self._prefetch_flat(np.array([r.range_id for r, _a, _t in evs], np.int64), np.array(flat, np.int64),
                                   np.array(counts, np.int64), np.array([t for _r, _a, t in evs], np.int64))

    def _prefetch_flat(self, ev_rid: np.ndarray, flat: np.ndarray, counts: np.ndarray,
                       ev_t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The prefetch filter in arrays: event e (range ``ev_rid[e]``, at ``ev_t[e]``) asked for the next
        ``counts[e]`` pages of ``flat``. Each (range, page) the first time it is asked, in the range, not resident
        (a resident one gets its CLOCK bit), in item order. Where the item loop would stop an event early (its
        ``max_prefetch``-th page to fetch is not its last asked page: the pages after it stay unseen) the item
        loop itself runs."""
        z = np.zeros(0, np.int64)
        E = len(counts)
        if not len(flat):
            return z, z, z
        p = flat
        ends = np.cumsum(counts)                       # flat index after each event's last asked page
        # residency first (it does not depend on the order: nothing is fetched before the filter ends), then the
        # first time each non-resident (range, page) is asked: the same pages as deduplicating everything first
        if E == 1 or not (ev_rid != ev_rid[0]).any():  # one range (the common case): no per-item range arrays
            touch, nr = self.pool.split_asked(int(ev_rid[0]), p)
            keys = p[nr]
        else:
            eid = np.repeat(np.arange(E), counts)
            rid = ev_rid[eid]
            lim = np.array([self.ranges[r].pages for r in ev_rid.tolist()], np.int64)
            vi = np.flatnonzero((p >= 0) & (p < lim[eid]))
            res = np.full(len(vi), -1, np.int64)
            for r, m in groups(rid[vi]):
                res[m] = self.pool.lookup_many(r, p[vi][m])
            nr = vi[res < 0]
            touch = res[res >= 0]
            keys = (rid[nr] << 40) | p[nr]
        _u, first = np.unique(keys, return_index=True)
        want = nr[np.sort(first)]                      # sorted: flat order, so event by event
        we = np.searchsorted(ends, want, side="right")  # the event of each page to fetch
        cnt = np.bincount(we, minlength=E)
        over = cnt >= self.max_prefetch
        if over.any():
            cut = self.max_prefetch < 1
            if not cut:
                start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
                kth = want[start[over] + self.max_prefetch - 1]        # the event's max_prefetch-th fetched page
                cut = bool((kth != (ends - 1)[over]).any())
            if cut:
                lo = ends - counts
                evs = [(self.ranges[int(ev_rid[e])], p[lo[e]:ends[e]].tolist(), int(ev_t[e])) for e in range(E)]
                seen: set = set()
                pf: list = []
                for r, a, t in evs:
                    pf += self._prefetch_items(r, a, t, seen)
                if not pf:
                    return z, z, z
                return (np.array([x[0].range_id for x in pf], np.int64), np.array([x[1] for x in pf], np.int64),
                        np.array([x[2] for x in pf], np.int64))
        if self.touch_resident and len(touch):
            self.pool.frames["referenced"][touch] = 1
        return ev_rid[we], p[want], ev_t[we]

    def miss(self, range_id: int, page: int, op: int, arrival_ns: int) -> MissResult:
        """A demand miss (HBF_REQ_CAP_MISS) on ``page`` of ``range_id`` by an access of ``op`` at ``arrival_ns``
        (GPU clock). READY: the page is mapped; the access waits ``modeled_ns`` then re-reads the pte."""
        return self.miss_many([(range_id, page, op, arrival_ns)])[0]

    def miss_many(self, requests) -> list[MissResult]:
        """The misses of one ring scan, ``(range_id, page, op, arrival_ns)`` each: their demand reads in one
        media batch, then the policy's prefetches for all of them in a second (issued at each miss's arrival)."""
        if self.batched:
            r = np.asarray(requests, np.int64).reshape(-1, 4)
            st, fr, mod, rd = self.miss_arrays(r[:, 0], r[:, 1], r[:, 2], r[:, 3])
            return [MissResult(*x) for x in zip(st.tolist(), fr.tolist(), mod.tolist(), rd.tolist())]
        return self._miss_many_one_by_one(requests)

    def miss_many_arrays(self, requests) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`miss_many` with its results as int64 arrays (status, frame, modeled_ns, ready_ns): what the device
        stand-in calls (no MissResult per request)."""
        r = np.asarray(requests, np.int64).reshape(-1, 4)
        if self.batched:
            return self.miss_arrays(r[:, 0], r[:, 1], r[:, 2], r[:, 3])
        res = self._miss_many_one_by_one([tuple(x) for x in r.tolist()])
        return tuple(np.array([getattr(x, f) for x in res], np.int64).reshape(-1)
                     for f in ("status", "frame", "modeled_ns", "ready_ns"))

    def _miss_many_one_by_one(self, requests) -> list[MissResult]:
        """miss_many one item at a time (``batched=False``): the reference of :meth:`miss_arrays`."""
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

    def miss_arrays(self, range_ids, pages, ops, arrivals) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`miss_many` in arrays (what hbfd's dispatch calls with a scan's rows): returns (status, frame,
        modeled_ns, ready_ns) per request, int64. The same results, frames and counters as one item at a time
        (``batched=False``), with no per-request Python on the path of a scan without prefetches."""
        rids = np.asarray(range_ids, np.int64)
        pages = np.asarray(pages, np.int64)
        ops = np.asarray(ops, np.int64)
        arrivals = np.asarray(arrivals, np.int64)
        n = len(pages)
        status = np.full(n, PENDING, np.int64)
        frame = np.full(n, -1, np.int64)
        modeled = np.zeros(n, np.int64)
        ready = np.zeros(n, np.int64)
        if self.failure is not None:
            status[:] = self.failure[0]
            return status, frame, modeled, ready
        if n == 1:                                     # one miss: numpy's per-call costs exceed the work; the
            x = self._miss_many_one_by_one([(int(rids[0]), int(pages[0]), int(ops[0]), int(arrivals[0]))])[0]
            return (np.array([x.status], np.int64), np.array([x.frame], np.int64),  # one-at-a-time path, equal
                    np.array([x.modeled_ns], np.int64), np.array([x.ready_ns], np.int64))
        t0 = _ns()
        # validation: the first bad request ends the run (the ones before it are counted as misses)
        bad_range = np.ones(n, bool)
        bad_op = np.zeros(n, bool)
        res = np.full(n, -1, np.int64)                 # the frame a request's page is published in, else -1
        for rid, m in groups(rids):
            r = self.ranges.get(rid)
            if r is None:
                continue
            ok = (pages[m] >= 0) & (pages[m] < r.pages)
            bad_range[m] = ~ok
            allowed = self._allowed.get(rid)
            if allowed is None:                        # ops 0..7 this range's perms permit
                allowed = self._allowed[rid] = np.array([bool(need is not None and r.perms & need)
                                                         for need in (PERM_NEEDED.get(o) for o in range(8))])
            o = ops[m]
            bad_op[m] = ok & ~np.where((o >= 0) & (o < 8), allowed[np.clip(o, 0, 7)], False)
            idx = np.arange(n)[m][ok]
            res[idx] = self.pool.lookup_many(rid, pages[idx])
        bad = bad_range | bad_op
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            self.n["misses"] += k
            rid, page, op = int(rids[k]), int(pages[k]), int(ops[k])
            if bad_range[k]:
                self._fail(RequestStatus.UNSUPPORTED, f"miss outside every capacity range: range {rid} page {page}",
                           range_id=rid, page=page)
            else:
                self._fail(RequestStatus.UNSUPPORTED, f"op {op} on range {rid} (perms {self.ranges[rid].perms}) "
                           "is not permitted", range_id=rid, op=op)
            status[:] = self.failure[0]
            self.n["service_ns"] += _ns() - t0
            return status, frame, modeled, ready
        self.n["misses"] += n
        hit = res >= 0                                 # another warp's miss (or a prefetch) published it meanwhile
        if hit.any():
            f = res[hit]
            r_ns = self.pool.frames["ready_ns"][f].astype(np.int64)
            status[hit], frame[hit], ready[hit] = READY, f, r_ns
            modeled[hit] = np.maximum(0, r_ns - arrivals[hit])
        todo = np.flatnonzero(~hit)
        self.n["coalesced_misses"] += int(hit.sum())
        if len(todo) == 1:
            lead, item_of = todo, np.zeros(1, np.int64)
        elif len(todo):
            # the same page twice in the scan: its first request's fill serves the others
            key = (rids[todo] << 40) | pages[todo]
            _u, first, inv = np.unique(key, return_index=True, return_inverse=True)
            order = np.argsort(first, kind="stable")   # items in the order of their first request
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            item_of = rank[inv.reshape(-1)]            # todo position -> item
            lead = todo[first[order]]
            self.n["coalesced_misses"] += len(todo) - len(lead)
        if len(todo):
            st, fr, rd = self._serve_batch(rids[lead], pages[lead], arrivals[lead], np.ones(len(lead), bool))
            status[todo], frame[todo], ready[todo] = st[item_of], fr[item_of], rd[item_of]
            ok = status[todo] == READY
            modeled[todo[ok]] = np.maximum(0, ready[todo[ok]] - arrivals[todo[ok]])
            if self.failure is None and type(self.policy).on_miss is not NoPrefetch.on_miss:
                done = lead[st == READY]
                many = getattr(self.policy, "on_miss_many", None)
                if many is not None and len(done) and (rids[done] == rids[done[0]]).all():
                    rid = int(rids[done[0]])                   # one range: the policy answers in one array
                    asked = np.asarray(many(self.view(rid), pages[done]), np.int64)
                    k, d = asked.shape
                    pr, pp, pa = self._prefetch_flat(np.full(k, rid, np.int64), asked.reshape(-1),
                                                     np.full(k, d, np.int64), arrivals[done])
                else:
                    events = []
                    on_miss, rv = self.policy.on_miss, {}
                    for rid, pg, t in zip(rids[done].tolist(), pages[done].tolist(), arrivals[done].tolist()):
                        x = rv.get(rid)
                        if x is None:
                            x = rv[rid] = (self.ranges[rid], self.view(rid))
                        events.append((x[0], on_miss(x[1], pg), t))
                    pr, pp, pa = self._prefetch_arrays(events)
                if len(pp):
                    self._serve_batch(pr, pp, pa, np.zeros(len(pp), bool))
        if self.failure is not None:                   # the run has ended: every request of the scan gets it
            status[:] = self.failure[0]
            frame[:], modeled[:], ready[:] = -1, 0, 0
        svc = _ns() - t0
        self.n["service_ns"] += svc
        ok = status == READY
        k = int(ok.sum())
        if k:
            per = svc // k                             # the scan's host time, shared by the misses it served
            mo = modeled[ok]
            wall = np.maximum(mo, per)
            self.n["modeled_ns"] += int(mo.sum())
            self.n["wall_ns"] += int(wall.sum())
            self.n["overhead_ns"] += int((wall - mo).sum())
        return status, frame, modeled, ready

    def _serve_items(self, items) -> list[MissResult]:
        """Serve (range, page, arrival, demand) items: batched or one at a time, as the service is set."""
        if not self.batched:
            return self._serve(items)
        rids = np.array([r.range_id for r, *_ in items], np.int64)
        st, fr, rd = self._serve_batch(rids, np.array([x[1] for x in items], np.int64),
                                       np.array([x[2] for x in items], np.int64),
                                       np.array([x[3] for x in items], bool))
        return [MissResult(a, b, max(0, c - x[2]) if a == READY else 0, c)
                for a, b, c, x in zip(st.tolist(), fr.tolist(), rd.tolist(), items)]

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
            self._serve_items(pf)
        self.n["service_ns"] += _ns() - t0

    def hint_many(self, range_id: int, pages, now_ns) -> None:
        """:meth:`hint` of each (``pages[i]``, ``now_ns[i]`` or one ``now_ns`` for all) in order (one ring scan's
        hints of a range): counted at once when the policy asks for nothing at a prefetch hit (NoPrefetch's
        ``on_prefetch_hit``: NoPrefetch, NextPages), else one by one."""
        if type(self.policy).on_prefetch_hit is not NoPrefetch.on_prefetch_hit:
            pages = np.asarray(pages, np.int64).reshape(-1)
            for pg, t in zip(pages.tolist(), np.broadcast_to(np.asarray(now_ns, np.int64), pages.shape).tolist()):
                self.hint(range_id, int(pg), int(t))
            return
        if self.failure is not None:
            return
        t0 = _ns()
        k = len(pages)
        self.ranges[range_id]                  # a range this service serves (KeyError as hint() would raise)
        self.n["hints"] += k
        self.n["prefetch_used"] += k
        self.n["service_ns"] += _ns() - t0

    # ---------------------------------------------------------------- flush, close
    def flush(self) -> int:
        """Write back every dirty frame not in use and free it (unregister, end of run). Returns the pages
        written; sets the terminal status and stops at the first failure (the frame stays dirty). The media
        model gets the write-backs' programs FLUSH_BATCH at a time, all at the service's horizon as before (one
        call per page was ~1 ms a page: 2026-12-06, an 8 GiB read-write range's unregister on the H100 ran past
        its deadline)."""
        done = 0
        fr = self.pool.frames
        pending: list[np.ndarray] = []                  # write-back programs not yet given to the media model
        npend = 0
        dirty = np.flatnonzero(fr["dirty"] != 0)
        # FLUSH_BATCH dirty frames at a time, in arrays: their evictions begun (FramePool.begin_evictions_of),
        # written back together (_write_back_many: runs of consecutive pages in one write), then completed in
        # order; the first that fails and every later one of the batch are cancelled (they stay dirty) and the
        # flush stops. The media model gets the programs FLUSH_BATCH at a time, in order, at the horizon
        for lo in range(0, len(dirty), FLUSH_BATCH):
            if self.failure is not None:
                break
            ev = self.pool.begin_evictions_of(dirty[lo:lo + FLUSH_BATCH])
            if not len(ev):
                continue
            dj = np.flatnonzero(ev.dirty)
            b = self._write_back_many(ev.part(dj))
            ok = len(ev) if b < 0 else int(dj[b])
            if ok < len(ev):
                self.pool.cancel_evictions(ev.part(slice(ok, None)))
            done_ev = ev.part(slice(0, ok))
            self._account_evictions(done_ev)
            if ok:
                offs = np.array([self.ranges[r].media_offset for r in done_ev.range_id.tolist()], np.int64) if len(
                    self.ranges) > 1 else np.full(ok, next(iter(self.ranges.values())).media_offset, np.int64)
                pending.append(np.stack([np.full(ok, self._horizon, np.int64), offs + done_ev.page * PAGE,
                                         np.full(ok, PAGE, np.int64), np.full(ok, ctl.HBF_OP_STORE, np.int64)], 1))
                npend += ok
                self.pool.complete_evictions(done_ev)
                self.pool.release_free_many(done_ev.frame)
                done += ok
            while npend >= FLUSH_BATCH:
                allp = np.concatenate(pending)
                self._media(allp[:FLUSH_BATCH])
                pending, npend = [allp[FLUSH_BATCH:]], npend - FLUSH_BATCH
            if b >= 0:
                break
        if npend:                                       # also after a failure: these pages were written back
            self._media(np.concatenate(pending))
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
        if self._pool_ex is not None:                 # no fills after close: the fill threads end
            self._pool_ex.shutdown()
            self._pool_ex = None
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
            "accel": accel.describe()["accel"], "accel_warm_s": round(self.accel_warm_s, 3),
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
