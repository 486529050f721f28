"""The GPU's side of capacity mode, on the CPU: what a rewritten access to a capacity range does (the hit path of
hbf_capacity.h, the miss request, the hint), driving :class:`~hbfd.capacity.service.CapacityService` as the
device would. Tests and the bench use it; the device half itself (hbfcc + a device helper) is not built.

An access at time ``now_ns`` (GPU clock): pin through the page table; a hit uses the frame (its wait is
``ready_ns - now`` when a prefetched frame's modeled read has not landed yet, else none) and posts a hint when it
takes a prefetch marker; a miss sends the miss request, waits its ``modeled_ns``, and retries the hit path (as
the device re-reads the pte after the completion). ``svc`` is the service itself (in process) or a
:class:`RingHost`: the same accesses sent to hbfd through the request ring, on the range's shared capacity region,
exactly as the GPU sends them. Counts, per run: accesses, hits without a media wait, demand
waits (misses), late prefetch hits (a wait on a prefetched frame still in flight), and their modeled wait.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hbfcommon import ctl
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE, HBF_REQ_CAP_HINT, HBF_REQ_CAP_MISS, map_cap_region
from hbfcommon.status import RequestStatus

from .frames import FrameMemory, FramePool
from . import kernels
from .kernels import span_checksum
from .service import READY, PENDING, CapacityFailure, CapacityService, MissResult

N_POST = ctl.HBF_RING_SLOTS // 2      # misses posted at once by RingHost (the rest of the ring for others)


@dataclass
class DeviceCounters:
    accesses: int = 0
    no_wait: int = 0              # hits whose frame was ready: served without a media wait
    demand_waits: int = 0         # misses: the access waited for a demand read
    late_prefetch_waits: int = 0  # hits on a prefetched frame whose read had not landed yet
    wait_ns: int = 0              # modeled time accesses waited (demand + late)
    retries: int = 0              # misses answered PENDING (every frame pinned) and asked again

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["no_wait_fraction"] = self.no_wait / self.accesses if self.accesses else None
        d["waits"] = self.demand_waits + self.late_prefetch_waits
        return d


@dataclass
class Access:
    frame: int
    wait_ns: int
    kind: str                     # "hit", "late", "miss"


@dataclass
class CapacityDevice:
    svc: CapacityService
    c: DeviceCounters = field(default_factory=DeviceCounters)

    def __post_init__(self) -> None:
        kernels.warm()                          # the checksum twin loaded before the first access, not during it

    def _fail(self, status: int) -> CapacityFailure:
        reason = self.svc.failure[1] if self.svc.failure else ""
        return CapacityFailure(f"capacity access ended the run: {RequestStatus(status).name}: {reason}",
                               status=RequestStatus(status).name)

    def pin(self, range_id: int, page: int, op: int, now_ns: int) -> Access:
        """The access's translation: returns the frame PINNED (call :meth:`unpin` after using it)."""
        store = op in (ctl.HBF_OP_STORE, ctl.HBF_OP_ATOMIC)
        pool = self.svc.pool
        self.c.accesses += 1
        r = pool.device_pin(range_id, page, store=store)
        if r is not None:
            f, ready, took = r
            if took:
                self.svc.hint(range_id, page, now_ns)
            w = max(0, ready - now_ns)
            if w:
                self.c.late_prefetch_waits += 1
                self.c.wait_ns += w
                return Access(f, w, "late")
            self.c.no_wait += 1
            return Access(f, 0, "hit")
        for _ in range(1000):
            res = self.svc.miss(range_id, page, op, now_ns)
            if res.status != PENDING:
                break
            self.c.retries += 1
        if res.status != READY:
            raise self._fail(res.status)
        r = pool.device_pin(range_id, page, store=store)
        if r is None:                           # published pages stay mapped until the access unpins
            raise CapacityFailure("a page the service published was not mapped at the retry",
                                  status="INTERNAL", range_id=range_id, page=page)
        self.c.demand_waits += 1
        self.c.wait_ns += res.modeled_ns
        return Access(r[0], res.modeled_ns, "miss")

    def unpin(self, frame: int) -> None:
        self.svc.pool.device_unpin(frame)

    def load(self, range_id: int, page: int, now_ns: int, op: int = ctl.HBF_OP_LOAD) -> tuple[np.ndarray, Access]:
        a = self.pin(range_id, page, op, now_ns)
        try:
            return self.svc.pool.memory.read(a.frame), a
        finally:
            self.unpin(a.frame)

    def store(self, range_id: int, page: int, offset: int, data: bytes | np.ndarray, now_ns: int) -> Access:
        a = self.pin(range_id, page, ctl.HBF_OP_STORE, now_ns)
        try:
            b = np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else data.astype(np.uint8)
            if offset < 0 or offset + len(b) > PAGE:
                raise ValueError("a store stays inside its page")
            m = self.svc.pool.memory
            page_bytes = m.read(a.frame)
            page_bytes[offset:offset + len(b)] = b
            m.write(a.frame, page_bytes)
            return a
        finally:
            self.unpin(a.frame)

    def run(self, range_id: int, pages, *, gap_ns: int, t0_ns: int = 0, checksum: bool = False) -> dict:
        """Replay a page stream as one warp would: ``gap_ns`` of compute before each access, then the access
        (its wait advances the clock). Returns the device counters (+ the served bytes' checksum)."""
        now = t0_ns
        total = np.uint64(0)
        for p in np.asarray(pages, np.int64).tolist():
            now += gap_ns
            if checksum:
                data, a = self.load(range_id, p, now)
                with np.errstate(over="ignore"):
                    total += np.uint64(span_checksum(np.array([p], np.uint64), data[None, :]))
            else:
                a = self.pin(range_id, p, ctl.HBF_OP_LOAD, now)
                self.unpin(a.frame)
            now += a.wait_ns
        out = self.c.as_dict() | {"end_ns": now}
        if checksum:
            out["checksum"] = int(total)
        return out

    def run_wide(self, range_id: int, pages, *, width: int, gap_ns: int, t0_ns: int = 0,
                 checksum: bool = False, op: int = ctl.HBF_OP_LOAD, touch=None) -> dict:
        """Replay a page stream as ``width`` lanes (warps) in lockstep would: each round the next ``width`` pages
        are accessed at the same time. The device rule: **a warp never waits for a miss while it holds a pin**
        (that could pin every frame while the misses wait for one): when any lane misses, the lanes that hit
        unpin, the misses go to the host as one ring scan (``miss_many``), and every lane translates again.
        The round ends with its longest wait. ``op`` HBF_OP_STORE: the lanes pin for a store (their frames
        marked dirty) and post their misses as stores; ``touch(memory, frames, lanes)``, when given, runs while a
        round's lanes hold their pins (``frames``: each lane's frame, ``lanes``: the lanes' indices into
        ``pages``): what the lanes do with their pages (the read-write stand-in's update). Through the ring (a
        host with ``hints_unordered``: RingHost) every lane translates at once and the hints of the lanes that
        took markers are posted together (the ring orders a hint before nothing anyway); in process a taker's
        hint is served before later lanes translate."""
        pool, svc = self.svc.pool, self.svc
        unordered = getattr(svc, "hints_unordered", False)
        store = op in (ctl.HBF_OP_STORE, ctl.HBF_OP_ATOMIC)
        now = t0_ns
        total = np.uint64(0)
        pages = np.asarray(pages, np.int64)
        HIT, LATE, MISS = 1, 2, 3
        for lo in range(0, len(pages), width):
            now += gap_ns
            chunk = pages[lo:lo + width]
            k = len(chunk)
            first = np.zeros(k, np.int64)        # each access's first outcome: HIT, LATE or MISS
            waits = np.zeros(k, np.int64)
            for _attempt in range(64):
                frames = np.full(k, -1, np.int64)
                done = 0
                if unordered:                    # every lane at once; the takers' hints posted together
                    f, ready, _n, takers = pool.device_pin_many(range_id, chunk, store=store, every_marker=True)
                    frames[:] = f
                    hit = f >= 0
                    w = np.maximum(0, ready - now)
                    waits[:] = np.where(hit, np.maximum(waits, w), waits)
                    first[:] = np.where(first != 0, first, np.where(hit, np.where(w > 0, LATE, HIT), MISS))
                    if len(takers):
                        svc.hint_many(range_id, chunk[takers], now)
                    done = k
                while done < k:                  # the lanes in order; a marker's taker posts its hint first
                    f, ready, n, took = pool.device_pin_many(range_id, chunk[done:], store=store)
                    frames[done:done + n] = f[:n]
                    hit = f[:n] >= 0
                    w = np.maximum(0, ready[:n] - now)
                    sl = slice(done, done + n)
                    waits[sl] = np.where(hit, np.maximum(waits[sl], w), waits[sl])
                    first[sl] = np.where(first[sl] != 0, first[sl], np.where(hit, np.where(w > 0, LATE, HIT), MISS))
                    if took:
                        svc.hint(range_id, int(chunk[done + n - 1]), now)
                    done += n
                miss_at = np.flatnonzero(frames < 0)
                if not len(miss_at):
                    break
                pool.device_unpin_many(frames[frames >= 0])   # release every pin before waiting
                st, _fr, mod, _rd = svc.miss_many_arrays(np.stack([
                    np.full(len(miss_at), range_id), chunk[miss_at], np.full(len(miss_at), op),
                    np.full(len(miss_at), now)], 1))
                pend = st == PENDING
                bad = np.flatnonzero((st != READY) & ~pend)
                self.c.retries += int(pend[:bad[0] if len(bad) else len(st)].sum())
                if len(bad):
                    raise self._fail(int(st[bad[0]]))
                ok = miss_at[st == READY]
                waits[ok] = np.maximum(waits[ok], mod[st == READY])
            else:
                raise CapacityFailure("a round of accesses found no frames for all its lanes after 64 attempts (more lanes than frames?)", status="TIMEOUT")
            self.c.accesses += k
            self.c.demand_waits += int((first == MISS).sum())
            self.c.late_prefetch_waits += int((first == LATE).sum())
            self.c.no_wait += int((first == HIT).sum())
            self.c.wait_ns += int(waits.sum())
            if touch is not None:
                touch(pool.memory, frames, np.arange(lo, lo + k))
            if checksum:
                with np.errstate(over="ignore"):
                    total += np.uint64(kernels.frames_span_checksum(pool.memory, frames, chunk))
            pool.device_unpin_many(frames)
            now += int(waits.max())
        out = self.c.as_dict() | {"end_ns": now}
        if checksum:
            out["checksum"] = int(total)
        return out


class RingHost:
    """hbfd's capacity service as the GPU reaches it: the range's capacity region (the path RegisterRange
    returned) mapped in this process, and misses and hints posted on the request ring (``driver``, a
    :class:`hbfd.hostring.RingDriver`) with ``HBF_REQ_CAP_MISS`` / ``HBF_REQ_CAP_HINT`` in their flags.
    Stands in for the service in :class:`CapacityDevice`: ``pool`` (the device side of the shared frame records
    and page table), ``miss``, ``miss_many`` (the misses posted together, then waited for: one ring scan when
    hbfd is idle), ``hint`` (posted, never waited for), ``failure`` (the first terminal status seen)."""

    def __init__(self, driver, region, base: int, *, timeout_s: float = 30.0) -> None:
        """``region``: the capacity region's path (RegisterRange's capacity_path), or one already mapped."""
        self.driver, self.base, self.timeout_s = driver, base - base % PAGE, timeout_s
        self.region = r = map_cap_region(region) if isinstance(region, str) else region
        self.range_id, self.media_offset = r.range_id, r.media_offset
        self.pool = FramePool(r.n_frames, FrameMemory(r.n_frames, r.data), frames=r.frames)
        self.pool.add_range(r.range_id, r.pages, r.table)
        self.failure: tuple[int, str] | None = None
        self.n = {"misses": 0, "hints": 0, "pending": 0}

    def _post(self, page: int, op: int, now_ns: int, flags: int) -> int:
        return self.driver.issue(arrival_ns=now_ns, address=self.base + page * PAGE,
                                 media_address=self.media_offset + page * PAGE, nbytes=PAGE, op=op,
                                 range_id=self.range_id, flags=flags, timeout_s=self.timeout_s)

    def miss_many(self, requests) -> list[MissResult]:
        st, fr, mod, rd = self.miss_many_arrays(requests)
        return [MissResult(*x) for x in zip(st.tolist(), fr.tolist(), mod.tolist(), rd.tolist())]

    def miss_many_arrays(self, requests) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`miss_many`'s results as int64 arrays (status, frame: -1, the device re-reads the pte;
        modeled_ns, ready_ns)."""
        r = np.asarray(requests, np.int64).reshape(-1, 4)
        if len(r) and (r[:, 0] != self.range_id).any():
            raise ValueError(f"this host serves range {self.range_id}, not {int(r[r[:, 0] != self.range_id][0, 0])}")
        out = []
        for lo in range(0, len(r), N_POST):             # the ring's slots bound one posting
            q = r[lo:lo + N_POST]
            ts = self.driver.issue_many(arrival_ns=q[:, 3], address=self.base + q[:, 1] * PAGE,
                                        media_address=self.media_offset + q[:, 1] * PAGE, nbytes=PAGE, op=q[:, 2],
                                        range_id=self.range_id, flags=HBF_REQ_CAP_MISS, timeout_s=self.timeout_s)
            c = self.driver.wait_many(ts, timeout_s=self.timeout_s)
            st = c["status"].astype(np.int64)
            self.n["misses"] += len(q)
            self.n["pending"] += int((st == PENDING).sum())
            bad = (st != READY) & (st != PENDING)
            if bad.any() and self.failure is None:
                s0 = int(st[bad][0])
                self.failure = (s0, f"hbfd answered {RequestStatus(s0).name} to a capacity miss")
            mod = c["modeled_ns"].astype(np.int64)
            out.append((st, mod, c["arrival_ns"].astype(np.int64) + mod))
        if not out:
            z = np.zeros(0, np.int64)
            return z, z, z, z
        st, mod, rd = (np.concatenate(x) for x in zip(*out))
        return st, np.full(len(st), -1, np.int64), mod, rd

    def miss(self, range_id: int, page: int, op: int, arrival_ns: int) -> MissResult:
        return self.miss_many([(range_id, page, op, arrival_ns)])[0]

    hints_unordered = True      # a hint is posted, never waited for: nothing orders it before later accesses

    def hint(self, range_id: int, page: int, now_ns: int) -> None:
        self.n["hints"] += 1
        self._post(page, ctl.HBF_OP_LOAD, now_ns, HBF_REQ_CAP_HINT)

    def hint_many(self, range_id: int, pages, now_ns: int) -> None:
        """:meth:`hint` of each of ``pages`` (one posting of up to N_POST at a time; never waited for)."""
        pages = np.asarray(pages, np.int64)
        for lo in range(0, len(pages), N_POST):
            q = pages[lo:lo + N_POST]
            self.driver.issue_many(arrival_ns=now_ns, address=self.base + q * PAGE,
                                   media_address=self.media_offset + q * PAGE, nbytes=PAGE, op=ctl.HBF_OP_LOAD,
                                   range_id=self.range_id, flags=HBF_REQ_CAP_HINT, timeout_s=self.timeout_s)
            self.n["hints"] += len(q)
