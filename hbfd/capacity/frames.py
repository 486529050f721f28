"""The frame pool and the page tables: the device-memory state of capacity mode, as numpy arrays in the exact
layout of runtime_cuda/include/hbf_capacity.h (``hbfcommon.capacity``), with both sides of its protocol.

* The **host side** (hbfd's capacity service) owns ``state``, ``generation``, the page-table entries, and the
  CLOCK sweep: :meth:`FramePool.take_free`, :meth:`FramePool.begin_eviction` / ``cancel_eviction`` /
  ``complete_eviction``, :meth:`FramePool.publish`.
* The **device side** (what the rewritten access does on the GPU; here :meth:`FramePool.device_pin` /
  :meth:`FramePool.device_unpin`, driven by tests and the bench as the GPU would) touches only ``pins``,
  ``dirty``, ``referenced`` and ``marker``, exactly as the header's table says.

Eviction never takes a frame with pins != 0: the host marks it EVICTING, then reads pins; the device pins,
then re-reads state and generation (the two fences of the header make the two outcomes exclusive). The pool is
single-threaded Python: the interleavings the tests drive are the device's possible orders.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hbfcommon import capacity as cap
from hbfcommon.ctl import full_fence
from hbfcommon.capacity import HBF_CAP_NO_FRAME as NO_FRAME
from hbfcommon.errors import ConfigError, ErrorCode, HbfError

from . import kernels

PAGE = cap.HBF_CAP_PAGE_BYTES
FREE, FILLING, VALID, DIRTY, EVICTING = (cap.HBF_FR_FREE, cap.HBF_FR_FILLING, cap.HBF_FR_VALID, cap.HBF_FR_DIRTY,
                                         cap.HBF_FR_EVICTING)


def groups(a: np.ndarray):
    """(value, index) per distinct value of ``a``: the index selects its elements (a slice when there is one
    value: the common case costs no unique and no mask)."""
    if len(a) == 0:
        return []
    v0 = a[0]
    if (a == v0).all():
        return [(int(v0), slice(None))]
    return [(int(v), a == v) for v in np.unique(a).tolist()]


class CopyFailed(HbfError):
    """A copy between the host and a frame failed (the service's terminal COPY_ERROR)."""

    code = ErrorCode.INTERNAL


class FrameMemory:
    """The frames' bytes: ``n_frames`` x 4096 (on the GPU: the pool's device allocation, copied with
    cuMemcpy; here host memory). ``write(frame, data)`` / ``read(frame)`` raise :class:`CopyFailed`."""

    def __init__(self, n_frames: int, data: np.ndarray | None = None) -> None:
        """``data``: the frames' bytes where they already are (a capacity region's (n_frames, 4096) view)."""
        if data is not None and data.shape != (n_frames, PAGE):
            raise ConfigError("frame memory must be (n_frames, 4096) bytes", shape=data.shape, n_frames=n_frames)
        self.data = data if data is not None else np.zeros((n_frames, PAGE), np.uint8)

    def write(self, frame: int, data: np.ndarray) -> None:
        self.write_many(np.array([frame], np.intp), np.asarray(data, np.uint8).reshape(1, PAGE))

    def read(self, frame: int) -> np.ndarray:
        return self.read_many(np.array([frame], np.intp))[0]

    def write_many(self, frames: np.ndarray, data: np.ndarray) -> None:
        """Copy ``data`` ((len(frames), 4096) bytes) into ``frames``: one copy per batch (the batched miss
        service). The primitive every write goes through; compiled (the GIL released: the fill threads copy
        their chunks at once) when hbfd.capacity.kernels runs its twins."""
        if kernels.compiled() and self.data.flags.c_contiguous:
            kernels.copy_rows(self.data, frames, data)
        else:
            self.data[frames] = data

    def read_many(self, frames: np.ndarray) -> np.ndarray:
        """The bytes of ``frames``, (len(frames), 4096), copied out."""
        return self.data[frames]

    def differing(self, frames: np.ndarray, data: np.ndarray) -> np.ndarray:
        """Indices j where frame ``frames[j]`` does not hold ``data[j]`` (the fill's read-back check): the frames
        read back (:meth:`read_many`) and compared; compiled, without the copy, when hbfd.capacity.kernels runs
        its twins and ``read_many`` is this one."""
        if kernels.compiled() and type(self).read_many is FrameMemory.read_many and self.data.flags.c_contiguous:
            return kernels.rows_differ(self.data, frames, data)
        back = self.read_many(frames)
        return np.flatnonzero((back.view(np.uint64) != np.ascontiguousarray(data).view(np.uint64)).any(axis=1))


@dataclass
class Eviction:
    """A frame taken by :meth:`FramePool.begin_eviction`: the page it held and whether it is dirty."""

    frame: int
    range_id: int
    page: int
    generation: int
    dirty: bool
    prefetched: bool
    used: bool          # a prefetched frame whose marker a hit took (always True for demand fills)


@dataclass
class Evictions:
    """Frames taken by :meth:`FramePool.take_frames` from their pages, in CLOCK order (arrays, one entry per
    frame; the fields of :class:`Eviction`)."""

    frame: np.ndarray
    range_id: np.ndarray
    page: np.ndarray
    generation: np.ndarray
    dirty: np.ndarray
    prefetched: np.ndarray
    used: np.ndarray

    def __len__(self) -> int:
        return len(self.frame)

    def one(self, j: int) -> Eviction:
        return Eviction(int(self.frame[j]), int(self.range_id[j]), int(self.page[j]), int(self.generation[j]),
                        bool(self.dirty[j]), bool(self.prefetched[j]), bool(self.used[j]))

    def part(self, sel) -> "Evictions":
        return Evictions(*(getattr(self, f)[sel] for f in ("frame", "range_id", "page", "generation", "dirty",
                                                            "prefetched", "used")))


class PageTable:
    """One capacity range's page table, entries in PTE_DTYPE (on the device: one dense array, 8 B per 4 KiB
    page). Here it is materialized in chunks of 2^16 entries on first write, so a range far larger than host
    memory costs only the chunks its pages touch; an entry never written reads as unmapped. ``dense``: the
    table where it already is (a capacity region's PTE_DTYPE[pages] view, shared with the device side)."""

    SHIFT = 16

    def __init__(self, pages: int, dense: np.ndarray | None = None) -> None:
        if dense is not None and (dense.dtype != cap.PTE_DTYPE or len(dense) != pages):
            raise ConfigError("a page table view must be PTE_DTYPE[pages]", pages=pages, got=len(dense))
        self.pages = pages
        self._dense = dense
        self._chunks: dict[int, np.ndarray] = {}

    def _chunk(self, c: int) -> np.ndarray:
        a = self._chunks.get(c)
        if a is None and self._dense is not None:
            a = self._dense[c << self.SHIFT:(c + 1) << self.SHIFT]
            self._chunks[c] = a
        elif a is None:
            a = np.zeros(min(1 << self.SHIFT, self.pages - (c << self.SHIFT)), cap.PTE_DTYPE)
            a["frame"] = NO_FRAME
            self._chunks[c] = a
        return a

    def __len__(self) -> int:
        return self.pages

    def __getitem__(self, page):
        if isinstance(page, str):                      # a field of every entry (small tables: tests)
            return self.dense()[page]
        if not 0 <= page < self.pages:
            raise IndexError(f"page {page} outside the table's {self.pages} pages")
        return self._chunk(page >> self.SHIFT)[page & ((1 << self.SHIFT) - 1)]   # a view: writes go through

    def __setitem__(self, page: int, value) -> None:
        if not 0 <= page < self.pages:
            raise IndexError(f"page {page} outside the table's {self.pages} pages")
        self._chunk(page >> self.SHIFT)[page & ((1 << self.SHIFT) - 1)] = value

    def frame_of(self, page: int) -> int:
        if self._dense is not None:
            return int(self._dense[page]["frame"])
        a = self._chunks.get(page >> self.SHIFT)
        return NO_FRAME if a is None else int(a[page & ((1 << self.SHIFT) - 1)]["frame"])

    def frames_of(self, pages: np.ndarray) -> np.ndarray:
        """``frame_of`` of many pages (int64; NO_FRAME where unmapped). Pages must be inside the table."""
        pages = np.asarray(pages, np.int64)
        if self._dense is not None:
            return self._dense["frame"][pages].astype(np.int64)
        out = np.full(len(pages), NO_FRAME, np.int64)
        for k, m in groups(pages >> self.SHIFT):
            a = self._chunks.get(k)
            if a is not None:
                out[m] = a["frame"][pages[m] & ((1 << self.SHIFT) - 1)]
        return out

    def set_many(self, pages: np.ndarray, frames: np.ndarray, generations: np.ndarray) -> None:
        """Write the entries of ``pages`` (frame and generation each; NO_FRAME / 0 unmaps)."""
        pages = np.asarray(pages, np.int64)
        if self._dense is not None:
            self._dense["frame"][pages] = frames
            self._dense["generation"][pages] = generations
            return
        frames, generations = np.broadcast_to(frames, pages.shape), np.broadcast_to(generations, pages.shape)
        for k, m in groups(pages >> self.SHIFT):
            a = self._chunk(k)
            o = pages[m] & ((1 << self.SHIFT) - 1)
            a["frame"][o] = frames[m]
            a["generation"][o] = generations[m]

    def dense(self) -> np.ndarray:
        if self._dense is not None:
            return self._dense
        return np.concatenate([self._chunk(c) for c in range(-(-self.pages >> self.SHIFT))])


class FramePool:
    """``n_frames`` frame records (FRAME_DTYPE) and one dense page table (PTE_DTYPE) per capacity range."""

    def __init__(self, n_frames: int, memory: FrameMemory | None = None, *, frames: np.ndarray | None = None) -> None:
        """``frames``: the frame records where they already are (a capacity region's FRAME_DTYPE[n_frames] view,
        shared with the device side), else host memory."""
        if not isinstance(n_frames, int) or not 1 <= n_frames < NO_FRAME:
            raise ConfigError("a frame pool needs 1 <= n_frames < 2^32 - 1", field="n_frames", value=n_frames)
        if frames is not None and (frames.dtype != cap.FRAME_DTYPE or len(frames) != n_frames):
            raise ConfigError("frame records must be FRAME_DTYPE[n_frames]", n_frames=n_frames, got=len(frames))
        self.n = n_frames
        if frames is None:
            frames = np.zeros(n_frames, cap.FRAME_DTYPE)
            frames["logical_page"] = np.uint64((1 << 64) - 1)
        self.frames = frames
        self.memory = memory if memory is not None else FrameMemory(n_frames)
        self.tables: dict[int, PageTable] = {}
        self.hand = 0                   # CLOCK hand
        self._free = list(range(n_frames))[::-1]   # stack: lowest index first

    # ---------------------------------------------------------------- tables
    def add_range(self, range_id: int, pages: int, table: np.ndarray | None = None) -> PageTable:
        if range_id in self.tables:
            raise ConfigError(f"capacity range {range_id} already has a page table", range_id=range_id)
        t = PageTable(pages, table)
        self.tables[range_id] = t
        return t

    def lookup(self, range_id: int, page: int) -> int | None:
        """The host's view of a mapping: the frame published for the page, or None."""
        f = self.tables[range_id].frame_of(page)
        return None if f == NO_FRAME else f

    def lookup_many(self, range_id: int, pages: np.ndarray) -> np.ndarray:
        """``lookup`` of many pages of one range: frames (int64), -1 where unmapped."""
        f = self.tables[range_id].frames_of(pages)
        f[f == NO_FRAME] = -1
        return f

    def split_asked(self, range_id: int, pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A prefetch filter's residency split of asked ``pages`` (int64) of one range, those outside the range
        dropped: (frames of the mapped ones to give their referenced bit -- those whose bit is clear, or all of
        them; indices in ``pages`` of the unmapped ones, ascending). Compiled, reading the table in place, where
        the table is a dense view (hbfd's capacity region) and hbfd.capacity.kernels runs its twins."""
        t = self.tables[range_id]
        if kernels.compiled() and t._dense is not None:
            return kernels.prefetch_split(pages, t.pages, t._dense["frame"], self.frames["referenced"])
        ok = (pages >= 0) & (pages < t.pages)
        vi = None if ok.all() else np.flatnonzero(ok)
        res = self.lookup_many(range_id, pages if vi is None else pages[vi])
        nr = np.flatnonzero(res < 0)
        return res[res >= 0], (nr if vi is None else vi[nr])

    def resident_frames(self) -> np.ndarray:
        st = self.frames["state"]
        return np.flatnonzero((st == VALID) | (st == DIRTY))

    # ---------------------------------------------------------------- device side (the GPU's accesses)
    def device_pin(self, range_id: int, page: int, *, store: bool = False) -> tuple[int, int, bool] | None:
        """The device hit path: read the pte, pin, re-check state and generation. Returns (frame, ready_ns,
        took_marker) pinned, or None (a miss; nothing stays pinned)."""
        t = self.tables[range_id]
        if not 0 <= page < t.pages:                          # past the table: a miss (the device reads no further)
            return None
        f = t.frame_of(page)
        if f == NO_FRAME:
            return None
        e = t[page]
        fr = self.frames[f]
        fr["pins"] += 1                                      # atomicAdd; fence.sc.gpu
        st = int(fr["state"])
        if st not in (VALID, DIRTY) or int(fr["generation"]) != int(e["generation"]):
            fr["pins"] -= 1                                  # stale: unpin, miss
            return None
        fr["referenced"] = 1
        if store:
            fr["dirty"] = 1
        took = bool(fr["marker"])
        fr["marker"] = 0                                     # atomicExch(0): the taker posts the hint
        return f, int(fr["ready_ns"]), took

    def device_pin_many(self, range_id: int, pages: np.ndarray, *, store: bool = False, every_marker: bool = False):
        """``device_pin`` of lanes in order, as far as the first lane that takes a prefetch marker (its hint must
        be posted before later lanes translate: an in-process hint can fill frames they use). Pin first
        (+1 each), fence, then re-check state and generation: stale lanes are unpinned (a miss), as on the GPU.
        Returns (frames: int64, -1 = miss; ready_ns; lanes done; whether the last lane done took a marker);
        lanes after the done ones hold no pins. ``every_marker`` (a host reached through the ring, where a hint
        is posted and never waited for, so nothing orders it before later lanes anyway): every lane is done,
        the first lane finding each marked frame takes its marker, and the fourth value is the taking lanes'
        indices (int64 array) instead."""
        t = self.tables[range_id]
        pages = np.asarray(pages, np.int64)
        k = len(pages)
        frames = np.full(k, -1, np.int64)
        ready = np.zeros(k, np.int64)
        inside = (pages >= 0) & (pages < t.pages)
        f = np.full(k, NO_FRAME, np.int64)
        f[inside] = t.frames_of(pages[inside])
        gen = np.zeros(k, np.int64)
        m = np.flatnonzero(f != NO_FRAME)
        if not len(m):
            return frames, ready, k, (np.zeros(0, np.int64) if every_marker else False)
        for c in np.unique(pages[m] >> PageTable.SHIFT).tolist():  # the ptes' generations, as read with the frame
            mm = m[(pages[m] >> PageTable.SHIFT) == c]
            gen[mm] = t._chunk(c)["generation"][pages[mm] & ((1 << PageTable.SHIFT) - 1)]
        fr = self.frames
        fm = f[m]
        np.add.at(fr["pins"], fm, 1)                          # atomicAdd each
        full_fence()
        st = fr["state"][fm]
        ok = ((st == VALID) | (st == DIRTY)) & (fr["generation"][fm].astype(np.int64) == gen[m])

        def keep(use: np.ndarray) -> None:
            """Lanes ``use`` (a mask over m) keep their pins and access their frames; the others are unpinned."""
            np.subtract.at(fr["pins"], fm[~use], 1)
            fu = fm[use]
            fr["referenced"][fu] = 1
            if store:
                fr["dirty"][fu] = 1
            frames[m[use]] = fu
            ready[m[use]] = fr["ready_ns"][fu].astype(np.int64)
        if every_marker:
            keep(ok)                                          # stale lanes unpinned
            cand = np.flatnonzero(ok & (fr["marker"][fm] != 0))
            if len(cand):                                     # the first lane per marked frame takes it
                _u, first = np.unique(fm[cand], return_index=True)
                cand = np.sort(cand[first])
                fr["marker"][fm[cand]] = 0
            return frames, ready, k, m[cand]
        took_at = k
        if ok.any():
            mk = fr["marker"][fm] != 0
            cand = np.flatnonzero(ok & mk)
            if len(cand):
                took_at = int(m[cand[0]])                     # the first lane finding a marker takes it
        keep(ok & (m <= took_at))                             # stale lanes, and lanes after the taker, unpinned
        if took_at < k:
            fr["marker"][f[took_at]] = 0                      # atomicExch(0): the taker posts the hint
            return frames, ready, took_at + 1, True
        return frames, ready, k, False

    def device_unpin_many(self, frames: np.ndarray) -> None:
        frames = np.asarray(frames, np.int64)
        u, cnt = np.unique(frames, return_counts=True)      # O(lanes), not O(frames): pools of 2 Mi frames
        if (self.frames["pins"][u] < cnt).any():
            raise HbfError("unpin of a frame with no pins (a device protocol error)", code=ErrorCode.INTERNAL)
        np.subtract.at(self.frames["pins"], frames, 1)

    def device_unpin(self, frame: int) -> None:
        fr = self.frames[frame]
        if int(fr["pins"]) == 0:
            raise HbfError("unpin of a frame with no pins (a device protocol error)", code=ErrorCode.INTERNAL,
                           frame=frame)
        fr["pins"] -= 1

    # ---------------------------------------------------------------- host side
    def take_free(self) -> int | None:
        while self._free:
            f = self._free.pop()
            if int(self.frames[f]["state"]) == FREE:
                return f
        return None

    def begin_eviction(self) -> Eviction | None:
        """CLOCK (second chance) over resident frames: a referenced frame loses its bit and is passed; an
        unreferenced one with no pins is marked EVICTING and unmapped (pte cleared, generation + 1). Pinned,
        filling and evicting frames are never taken. None when two sweeps find nothing (every frame pinned
        or busy)."""
        fr = self.frames
        for _ in range(2 * self.n):
            f = self.hand
            self.hand = (self.hand + 1) % self.n
            st = int(fr[f]["state"])
            if st not in (VALID, DIRTY):
                continue
            if fr[f]["referenced"]:
                fr[f]["referenced"] = 0
                continue
            ev = self.begin_eviction_of(f)
            if ev is not None:
                return ev
        return None

    def begin_eviction_of(self, f: int) -> Eviction | None:
        """Mark frame ``f`` EVICTING, then read its pins: in use -> put back, None (never evicted). Else unmap it
        (pte cleared, generation + 1) and return what it held."""
        fr = self.frames
        st = int(fr[f]["state"])
        if st not in (VALID, DIRTY):
            return None
        fr[f]["state"] = EVICTING
        full_fence()                                    # the store above before the load of pins (x86: store-load)
        if int(fr[f]["pins"]) != 0:
            fr[f]["state"] = st
            return None
        rid, page = int(fr[f]["range_id"]), int(fr[f]["logical_page"])
        e = Eviction(f, rid, page, int(fr[f]["generation"]), bool(fr[f]["dirty"]), bool(fr[f]["prefetched"]),
                     not (fr[f]["prefetched"] and fr[f]["marker"]))
        t = self.tables[rid]
        t[page]["frame"] = NO_FRAME
        t[page]["generation"] = 0
        fr[f]["generation"] = (int(fr[f]["generation"]) + 1) & 0xFFFFFFFF
        return e

    # ---------------------------------------------------------------- host side, a batch at a time
    SWEEP_WINDOW = 1 << 10      # the numpy sweep's first window of the walk (frames; at least 4x the frames needed)

    def take_frames(self, k: int) -> tuple[np.ndarray, Evictions]:
        """Up to ``k`` frames for fills: exactly the frames, evictions, CLOCK hand and referenced bits that ``k``
        calls of take_free-else-begin_eviction would give (the batched miss service; tests/capacity checks it
        against the one-at-a-time calls), fewer when every other frame is pinned or busy. Returns (frames: the
        free ones first, then the victims in CLOCK order; the victims, EVICTING and unmapped, their write-backs
        still to do: then :meth:`complete_evictions` or :meth:`cancel_evictions`).

        The CLOCK sweep in arrays: from the hand, a resident frame unreferenced is a candidate at its first
        visit, a referenced one at its second (the first clears its bit); pinned frames are passed. The
        candidates are marked EVICTING, then (fence) their pins read: a frame pinned meanwhile is put back and
        the sweep goes on past it (a pinned frame is never taken)."""
        free = []
        while len(free) < k and self._free:
            f = self._free.pop()
            if int(self.frames[f]["state"]) == FREE:
                free.append(f)
        got = [np.array(free, np.int64)]
        need = k - len(free)
        if need == 0:
            return got[0], self._unmap(np.zeros(0, np.int64))
        fr = self.frames
        n = self.n
        vic: list[np.ndarray] = []
        fast = kernels.compiled()
        while need > 0:
            if fast:                           # the same sweep as a loop (hbfd/capacity/kernels.py)
                chosen, orig, last = kernels.clock_select(fr["state"], fr["referenced"], fr["pins"], self.hand, need)
                if last < 0:
                    break
                exhausted = len(chosen) < need
                self.hand = int((self.hand + last + 1) % n)
                full_fence()                   # EVICTING before the pins are read (the device's re-check)
                late = fr["pins"][chosen] != 0
                if late.any():                 # pinned meanwhile: put back, passed, never taken
                    fr["state"][chosen[late]] = orig[late]
                    chosen = chosen[~late]
                vic.append(chosen)
                need -= len(chosen)
                if exhausted:
                    break
                continue
            # a window of the walk first (a large pool is not swept whole for a batch): when its first visits
            # hold ``need`` candidates, they are the walk's first ones (every other step is later); else a
            # window 4x as wide, up to the whole walk
            w = n if n <= self.SWEEP_WINDOW else min(n, max(self.SWEEP_WINDOW, 4 * need))
            while True:
                pos = np.arange(w, dtype=np.int64)
                order = (self.hand + pos) % n
                st = fr["state"][order]
                res = (st == VALID) | (st == DIRTY)
                ref = fr["referenced"][order] != 0
                if w == n:
                    # a candidate's step in the walk: its first visit (unreferenced) or its second (referenced)
                    ti = np.sort((pos + np.where(ref, n, 0))[res & (fr["pins"][order] == 0)])
                    break
                ti = pos[res & ~ref & (fr["pins"][order] == 0)]
                if len(ti) >= need:
                    break
                w = min(n, 4 * w)                  # a wider window, up to the whole walk
            if len(ti) == 0:                   # two sweeps find nothing: every bit passed is cleared
                fr["referenced"][order[res & ref]] = 0
                break
            take = ti[:need]
            last = int(take[-1])
            exhausted = len(ti) < need         # the next item's two sweeps find nothing (PENDING)
            fr["referenced"][order[res & ref & ((pos < last) | exhausted)]] = 0
            self.hand = int((self.hand + last + 1) % n)
            chosen = order[take % n]
            fr["state"][chosen] = EVICTING
            full_fence()                       # EVICTING before the pins are read (the device's re-check)
            late = fr["pins"][chosen] != 0
            if late.any():                     # pinned meanwhile: put back, passed, never taken
                fr["state"][chosen[late]] = st[(take % n)[late]]
                chosen = chosen[~late]
            vic.append(chosen)
            need -= len(chosen)
            if exhausted:
                break
        v = np.concatenate(vic) if vic else np.zeros(0, np.int64)
        ev = self._unmap(v.astype(np.int64))
        return np.concatenate(got + [ev.frame]), ev

    def begin_evictions_of(self, frames: np.ndarray) -> Evictions:
        """:meth:`begin_eviction_of` of ``frames`` in arrays (the flush): the resident ones marked EVICTING, then
        (fence) their pins read: a frame in use is put back (never evicted); the others unmapped (ptes cleared,
        generation + 1). Returns what they held, in the order given."""
        fr = self.frames
        f = np.asarray(frames, np.int64)
        st = fr["state"][f]
        res = (st == VALID) | (st == DIRTY)
        f, st = f[res], st[res]
        fr["state"][f] = EVICTING
        full_fence()                                    # the stores above before the loads of pins
        late = fr["pins"][f] != 0
        if late.any():
            fr["state"][f[late]] = st[late]
            f = f[~late]
        return self._unmap(f)

    def release_free_many(self, frames: np.ndarray) -> None:
        """:meth:`release_free` of ``frames``, in order."""
        f = np.asarray(frames, np.int64)
        self.frames["state"][f] = FREE
        self.frames["logical_page"][f] = np.uint64((1 << 64) - 1)
        self._free.extend(f.tolist())

    def _unmap(self, v: np.ndarray) -> Evictions:
        """Frames marked EVICTING with no pins: what they held, their ptes cleared, generation + 1."""
        fr = self.frames
        sub = fr[v]
        pref = sub["prefetched"] != 0
        if not len(v):
            z = np.zeros(0, np.int64)
            return Evictions(v, z, z, z, pref, pref, pref)
        ev = Evictions(v, sub["range_id"].astype(np.int64), sub["logical_page"].astype(np.int64),
                       sub["generation"].astype(np.int64), sub["dirty"] != 0, pref,
                       ~(pref & (sub["marker"] != 0)))
        for rid, m in groups(ev.range_id):
            self.tables[rid].set_many(ev.page[m], NO_FRAME, 0)
        fr["generation"][v] = (ev.generation + 1) & 0xFFFFFFFF
        return ev

    def complete_evictions(self, ev: Evictions) -> None:
        f = ev.frame
        fr = self.frames
        fr["state"][f] = FREE
        fr["logical_page"][f] = np.uint64((1 << 64) - 1)
        for k in ("dirty", "referenced", "marker", "prefetched"):
            fr[k][f] = 0

    def cancel_evictions(self, ev: Evictions) -> None:
        """Put evicting frames back as they were (a write-back failed, or came after one that did)."""
        for j in range(len(ev)):
            self.cancel_eviction(ev.one(j))

    def begin_fill_many(self, frames: np.ndarray, range_ids: np.ndarray, pages: np.ndarray,
                        prefetch: np.ndarray) -> None:
        fr = self.frames
        # FREE only: pins are not checked. A warp that read a frame's pte before its eviction may pin it at any
        # time and backs off at its state / generation re-check (hb_cap_pin; the eviction bumped the generation),
        # so a transient pin on a FREE frame is the device protocol, not an error (2026-12-06, H100: this assert
        # with `pins == 0` ended a 16 GiB generated stream with IO_ERROR once evictions began)
        assert (fr["state"][frames] == FREE).all(), "fill of a frame that is not free"
        fr["state"][frames] = FILLING
        fr["logical_page"][frames] = pages
        fr["range_id"][frames] = range_ids
        fr["dirty"][frames] = 0
        fr["referenced"][frames] = np.where(prefetch, 0, 1)
        fr["marker"][frames] = np.where(prefetch, 1, 0)
        fr["prefetched"][frames] = np.where(prefetch, 1, 0)

    def publish_many(self, frames: np.ndarray, ready_ns: np.ndarray, checksums: np.ndarray) -> None:
        """Every frame VALID, then (fence) their ptes: the device reaches a frame only once it is complete."""
        fr = self.frames
        assert (fr["state"][frames] == FILLING).all()
        fr["ready_ns"][frames] = ready_ns
        fr["checksum"][frames] = checksums
        fr["state"][frames] = VALID
        full_fence()
        rids = fr["range_id"][frames]
        pages = fr["logical_page"][frames].astype(np.int64)
        gens = fr["generation"][frames]
        for rid, m in groups(rids):
            self.tables[rid].set_many(pages[m], frames[m], gens[m])

    def cancel_eviction(self, ev: Eviction) -> None:
        """Put an evicting frame back as it was (its write-back failed: its bytes stay in the frame)."""
        fr = self.frames[ev.frame]
        assert int(fr["state"]) == EVICTING
        fr["generation"] = ev.generation
        fr["state"] = DIRTY if ev.dirty else VALID
        t = self.tables[ev.range_id]
        t[ev.page]["frame"] = ev.frame
        t[ev.page]["generation"] = ev.generation

    def complete_eviction(self, ev: Eviction) -> int:
        fr = self.frames[ev.frame]
        fr["state"] = FREE
        fr["logical_page"] = np.uint64((1 << 64) - 1)
        fr["dirty"] = fr["referenced"] = fr["marker"] = fr["prefetched"] = 0
        return ev.frame

    def release_free(self, frame: int) -> None:
        """A frame taken for a fill that did not happen goes back to the free list."""
        fr = self.frames[frame]
        fr["state"] = FREE
        fr["logical_page"] = np.uint64((1 << 64) - 1)
        self._free.append(frame)

    def begin_fill(self, frame: int, range_id: int, page: int, *, prefetch: bool) -> None:
        fr = self.frames[frame]
        assert int(fr["state"]) == FREE, "fill of a frame that is not free"   # pins: see begin_fill_many
        fr["state"] = FILLING
        fr["logical_page"] = page
        fr["range_id"] = range_id
        fr["dirty"] = 0
        fr["referenced"] = 0 if prefetch else 1
        fr["marker"] = 1 if prefetch else 0
        fr["prefetched"] = 1 if prefetch else 0

    def publish(self, frame: int, ready_ns: int, checksum: int) -> None:
        """VALID, then the pte (the device can reach the frame only after it is complete)."""
        fr = self.frames[frame]
        assert int(fr["state"]) == FILLING
        fr["ready_ns"] = ready_ns
        fr["checksum"] = np.uint64(checksum)
        fr["state"] = VALID
        t = self.tables[int(fr["range_id"])]
        page = int(fr["logical_page"])
        t[page]["frame"] = frame
        t[page]["generation"] = fr["generation"]

    def state_counts(self) -> dict[str, int]:
        st = self.frames["state"].copy()
        st[(st == VALID) & (self.frames["dirty"] != 0)] = DIRTY
        return {cap.FRAME_STATE_NAMES[s]: int((st == s).sum()) for s in range(cap.HBF_FR_N_STATES)}
