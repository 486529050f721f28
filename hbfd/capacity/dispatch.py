"""hbfd's ring dispatch of capacity requests (docs/design.md §3.6, "Miss path"): one capacity service per served
capacity range, each with its own capacity region (a sealed memfd holding the range's frame records, page table
and frame bytes in the layout of hbf_capacity.h, ``hbfcommon.capacity.CapRegion``), which the workload maps.

``CapacityDispatch.add(rng, spec)`` serves an hbfd range-table entry (mode capacity) as ``spec`` says (frames,
backing store, prefetch policy) and returns the region's path; ``serve(rows)`` answers the capacity requests of
one ring scan (``HBF_REQ_CAP_MISS`` / ``HBF_REQ_CAP_HINT`` in the request's flags):

* misses of one range go to its service's ``miss_many`` together (the same page twice is filled once); the
  service publishes the frame (VALID, then the pte) before it returns, and hbfd writes the completion (payload,
  then seq) after: the device re-reads the pte after it has acquired the completion;
* a hint calls the service's ``hint``; nobody waits for its completion, so hbfd consumes it itself (the slot
  can be reused at once);
* a request for a range hbfd does not serve as capacity, or whose media address or logical address is not a
  page of its range (or the two disagree), is answered UNSUPPORTED. A bad page of a served range also ends
  that range's service (its terminal status, every later request of it gets the same); a request naming no
  served range cannot be attributed to a run, so only it is answered. Another range's service is never
  touched: each has its own pool, store, media model and terminal status.

Every frame's bytes are written back by the service itself (the frames live in the shared region), so no
"write-back completion" request exists on the ring.
"""
from __future__ import annotations

import fcntl
import logging
import mmap
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from hbfcommon import ctl
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE, HBF_REQ_CAP_HINT, HBF_REQ_CAP_MISS, CapRegion, \
    region_layout
from hbfcommon.errors import ConfigError, ControlRegionError
from hbfcommon.status import RequestStatus

from .backing import GeneratedStore, SparseFileStore
from .frames import FrameMemory
from .prefetch import MoeExperts, NextPages, NoPrefetch, Stride
from .service import PENDING, READY, CapacityService

log = logging.getLogger(__name__)

UNSUPPORTED = int(RequestStatus.UNSUPPORTED)
CAP_FLAGS = np.uint64(HBF_REQ_CAP_MISS | HBF_REQ_CAP_HINT)
_POLICY = re.compile(r"^(none|next|stride|moe)(?::([0-9,]+))?$")


def parse_policy(text: str):
    """A prefetch policy from its name: ``none``, ``next[:depth]`` (the paper's default, 8), ``stride[:depth]``,
    ``moe:pages_per_expert,experts_per_layer,experts_per_token``."""
    m = _POLICY.match(text or "next")
    if not m:
        raise ConfigError("capacity policy must be none, next[:depth], stride[:depth] or "
                          "moe:pages_per_expert,experts_per_layer,experts_per_token", field="policy", value=text)
    name, args = m.group(1), [int(x) for x in m.group(2).split(",") if x] if m.group(2) else []
    want = {"none": (0, 0), "next": (0, 1), "stride": (0, 1), "moe": (3, 3)}[name]
    if not want[0] <= len(args) <= want[1] or any(a < 1 for a in args):
        raise ConfigError(f"capacity policy {name} takes {want[0]}..{want[1]} positive integers", field="policy",
                          value=text)
    if name == "none":
        return NoPrefetch()
    if name == "next":
        return NextPages(*args)
    if name == "stride":
        return Stride(*args)
    return MoeExperts(*args)


@dataclass(frozen=True)
class CapacitySpec:
    """How hbfd serves one capacity range: ``n_frames`` frames of 4 KiB; the backing store ``store``
    ("sparse": the file ``path``, created sparse if missing; "generated": read-only data from ``seed``); the
    prefetch ``policy`` (:func:`parse_policy`); ``verify``: checksum every fill and write-back read back."""

    n_frames: int
    store: str
    path: str = ""
    seed: int = 0
    policy: str = "next"
    verify: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.n_frames, int) or not 1 <= self.n_frames < (1 << 31):
            raise ConfigError("capacity n_frames must be an integer in [1, 2^31)", field="n_frames",
                              value=self.n_frames)
        if self.store not in ("sparse", "generated"):
            raise ConfigError("capacity store must be sparse or generated", field="store", value=self.store)
        if self.store == "sparse" and not self.path:
            raise ConfigError("a sparse capacity store needs a path", field="path")
        if not isinstance(self.seed, int) or not 0 <= self.seed < (1 << 64):
            raise ConfigError("capacity seed must be a 64-bit unsigned integer", field="seed", value=self.seed)
        parse_policy(self.policy)

    @classmethod
    def from_msg(cls, m: Any) -> "CapacitySpec":
        return cls(int(m.n_frames), m.store, m.path, int(m.seed), m.policy or "next", not m.no_verify)


class _Region:
    """A capacity region on hbfd's side: a sealed memfd of the layout's size, mapped, its header written."""

    def __init__(self, rng: Any, pages: int, n_frames: int, media_offset: int) -> None:
        size = region_layout(pages, n_frames)["total_bytes"]
        try:
            self.fd = os.memfd_create(f"hbf-cap-{rng.range_id}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(self.fd, size)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            raise ControlRegionError(f"cannot create the capacity region of range {rng.range_id} ({size} bytes): "
                                     f"{e.strerror}", range_id=rng.range_id, size=size) from e
        self.region = CapRegion.init(mm, range_id=rng.range_id, pages=pages, n_frames=n_frames, perms=rng.perms,
                                     media_offset=media_offset)

    @property
    def path(self) -> str:
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def close(self) -> None:
        os.close(self.fd)     # the mapping (and any workload's) stays valid until unmapped


@dataclass
class Served:
    rng: Any                  # hbfd.ranges.Range
    spec: CapacitySpec
    region: _Region
    service: CapacityService
    pages: int
    media_offset: int


class CapacityDispatch:
    def __init__(self, geometry, *, workers: int | None = None) -> None:
        """``workers``: threads per range filling a scan's pages (store reads and checksums, copies into the
        frames, read-back compares); default the host's cores (at most 64; hbfd passes
        ``$HBFD_CAPACITY_WORKERS``, hbfd.knobs.capacity_workers)."""
        self.geometry = geometry
        self.workers = workers if workers is not None else max(1, min(64, os.cpu_count() or 1))
        self.served: dict[int, Served] = {}
        self.n = {"misses": 0, "hints": 0, "unknown_range": 0, "bad_page": 0, "pending": 0, "scans": 0}
        self.closed: list[dict] = []          # reports of ranges no longer served (summary)

    def add(self, rng: Any, spec: CapacitySpec) -> str:
        if rng.mode != ctl.HBF_MODE_CAPACITY:
            raise ConfigError(f"range {rng.range_id} is not a capacity range", range_id=rng.range_id)
        lo, hi = rng.media_extent
        pages = (hi - lo) // PAGE
        store = (GeneratedStore(spec.seed, pages) if spec.store == "generated"
                 else SparseFileStore(spec.path, pages))
        try:
            reg = _Region(rng, pages, spec.n_frames, lo)
            r = reg.region
            try:
                svc = CapacityService(self.geometry, spec.n_frames, parse_policy(spec.policy), verify=spec.verify,
                                      frame_memory=FrameMemory(spec.n_frames, r.data), frames=r.frames,
                                      workers=self.workers)
                svc.add_range(rng.range_id, pages, lo, rng.perms, store, table=r.table)
            except Exception:
                reg.close()
                raise
        except Exception:
            store.close()
            raise
        self.served[rng.range_id] = Served(rng, spec, reg, svc, pages, lo)
        log.info("capacity range %d: %d pages, %d frames, store %s, policy %s, region %s", rng.range_id, pages,
                 spec.n_frames, store.name, svc.policy.name, reg.path)
        return reg.path

    def path(self, range_id: int) -> str:
        return self.served[range_id].region.path

    def remove(self, range_id: int, salvage_path: str | None = None) -> dict:
        """Stop serving a range: every dirty frame written back (or salvaged), the store closed. The report."""
        s = self.served.pop(range_id)
        try:
            rep = s.service.close(salvage_path=salvage_path)
        finally:
            s.region.close()
        rep["range_id"] = range_id
        self.closed.append(rep)
        return rep

    def serve(self, req: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Answer one scan's capacity requests: ``req`` are raw request rows (hbfd.server._take's uint64 view:
        0 seq, 1 arrival_ns, 2 address, 3 media_address, 4 bytes | op << 32, 5 range_id | kernel_slot << 32,
        6 site | flags << 32). Returns (tickets, modeled_ns, status, hint) per row, in row order; ``hint``
        marks completions nobody waits for (hbfd consumes them)."""
        n = len(req)
        self.n["scans"] += 1
        tickets = req[:, 0] - np.uint64(1)
        modeled = np.zeros(n, np.uint64)
        status = np.full(n, UNSUPPORTED, np.uint8)
        flags = req[:, 6] >> np.uint64(32)
        hint = (flags & np.uint64(HBF_REQ_CAP_HINT)) != 0
        rid = (req[:, 5] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        op = (req[:, 4] >> np.uint64(32)).astype(np.int64)
        media = req[:, 3].astype(np.int64)             # < 2^63: hbfd rejected larger media addresses
        addr = req[:, 2]
        page = np.zeros(n, np.int64)
        special = hint.copy()                          # rows answered one by one, in row order: hints, bad rows
        bad = np.zeros(n, bool)
        for r in np.unique(rid).tolist():
            m = rid == r
            s = self.served.get(r)
            if s is None:
                special |= m
                bad |= m
                continue
            pg = (media[m] - s.media_offset) // PAGE
            base = np.uint64(s.rng.base - s.rng.base % PAGE)
            a = addr[m]
            lp = np.where(a >= base, ((a - np.minimum(a, base)) // np.uint64(PAGE)).astype(np.int64), -1)
            good = (media[m] >= s.media_offset) & (pg >= 0) & (pg < s.pages) & (lp == pg)
            page[m] = pg
            special[np.flatnonzero(m)[~good]] = True
            bad[np.flatnonzero(m)[~good]] = True
        if hint.any() and not bad.any():               # only good hints: per range at once, in row order
            for r in np.unique(rid[hint]).tolist():
                idx = np.flatnonzero(hint & (rid == r))
                s = self.served[r]
                self.n["hints"] += len(idx)
                try:
                    s.service.hint_many(r, page[idx], req[idx, 1].astype(np.int64))
                except Exception as e:                 # this range's run ends; no other range is touched
                    self._internal(s, e)
                status[idx] = s.service.failure[0] if s.service.failure else READY
            special = np.zeros(n, bool)
        for i in np.flatnonzero(special).tolist():
            s = self.served.get(int(rid[i]))
            if s is None:
                self.n["unknown_range"] += 1
                log.error("capacity request for range %d, which hbfd does not serve as capacity (ticket %d): "
                          "answered UNSUPPORTED", int(rid[i]), int(tickets[i]))
                continue
            pg = int(page[i])
            if not (s.media_offset <= int(media[i]) and 0 <= pg < s.pages) or \
                    (int(addr[i]) - (s.rng.base - s.rng.base % PAGE)) // PAGE != pg:
                self.n["bad_page"] += 1
                st = s.service._fail(RequestStatus.UNSUPPORTED, f"capacity request for media address "
                                     f"{int(media[i]):#x} / address {int(addr[i]):#x}: not one page of range "
                                     f"{s.rng.range_id}", range_id=s.rng.range_id, ticket=int(tickets[i]))
                status[i] = st.status
                continue
            self.n["hints"] += 1                       # a hint (a good miss is never special)
            try:
                s.service.hint(s.rng.range_id, pg, int(req[i, 1]))
            except Exception as e:                     # this range's run ends; no other range is touched
                self._internal(s, e)
            status[i] = s.service.failure[0] if s.service.failure else READY
        rows = ~special
        for r in np.unique(rid[rows]).tolist():
            idx = np.flatnonzero(rows & (rid == r))
            s = self.served[r]
            self.n["misses"] += len(idx)
            try:
                st, _f, mod, _rd = s.service.miss_arrays(np.full(len(idx), r, np.int64), page[idx], op[idx],
                                                         req[idx, 1].astype(np.int64))
            except Exception as e:                     # this range's run ends; no other range is touched
                self._internal(s, e)
                st, mod = np.full(len(idx), s.service.failure[0], np.int64), np.zeros(len(idx), np.int64)
            status[idx] = st
            modeled[idx] = mod
            self.n["pending"] += int((st == PENDING).sum())
        return tickets, modeled, status, hint

    @staticmethod
    def _internal(s: Served, e: Exception) -> None:
        log.exception("capacity range %d: its service failed", s.rng.range_id)
        s.service._fail(RequestStatus.IO_ERROR, f"the capacity service failed: {type(e).__name__}: {e}")

    def section(self) -> dict:
        """The summary's ``capacity`` section: dispatch counters and every range's service report."""
        return {"dispatch": dict(self.n),
                "ranges": [s.service.report() | {"range_id": k} for k, s in self.served.items()] + self.closed}

    def close(self, salvage_prefix: str | None = None) -> list[dict]:
        """Stop serving every range (end of run); dirty pages a store cannot take go to
        ``<salvage_prefix>-<range_id>.salvage.npz``."""
        out = []
        for k in list(self.served):
            try:
                out.append(self.remove(k, f"{salvage_prefix}-{k}.salvage.npz" if salvage_prefix else None))
            except Exception as e:            # a range whose bytes cannot be saved: say so, close the rest
                log.error("capacity range %d could not be closed cleanly: %s", k, e)
                out.append({"range_id": k, "status": "CLOSE_FAILED", "failure": str(e)})
        return out
