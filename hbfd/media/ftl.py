"""Flash translation layer state: page-level logical→physical mapping, free blocks, GC, P/E.

Pure bookkeeping (no time). Every program goes to a fresh physical page of the logical page's home
plane (out of place; a physical page is programmed once per erase). When a plane's free blocks
drop below ``gc_start_blocks`` the plane is garbage-collected: the closed block with the fewest
valid pages is chosen (greedy), its valid pages are copied (copyback inside the plane) and it is
erased (P/E count + 1). The caller turns the returned operations into timed commands.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .geometry import MediaError, MediaGeometry

FREE, OPEN, CLOSED = 0, 1, 2


class Ftl:
    def __init__(self, g: MediaGeometry) -> None:
        self.g = g
        self.ppb = g.pages_per_block
        self.bpp = g.blocks_per_plane
        # per block, as plain lists (scalar updates in the program path are the hot loop)
        self._valid = [0] * g.blocks
        self._pe = [0] * g.blocks
        self._state = bytearray(g.blocks)
        # free blocks of a plane: the never-programmed ones are ``_fresh[plane] .. bpp - 1`` (a counter,
        # not a list: a plane's state costs nothing until it is written), then erased ones in erase order
        self._fresh: dict[int, int] = {}              # plane -> next never-programmed block (local index)
        self._erased: dict[int, deque] = {}           # plane -> erased blocks, FIFO
        self._open: dict[int, list[int]] = {}         # plane -> [block, next_page]
        self.l2p: dict[int, int] = {}                 # lpn -> ppn (block * ppb + page)
        # block -> lpn per page (-1: invalid/unwritten), for blocks holding a valid page or open: a block
        # whose pages are all invalid drops its list (memory follows the live data, not the pages written)
        self.p2l: dict[int, list[int]] = {}
        self._gc_start = g.gc_start_blocks
        self._C, self._D, self._P = g.channels, g.dies_per_channel, g.planes_per_die
        self.host_programs = 0
        self.gc_copies = 0
        self.gc_runs = 0
        self.erases = 0
        self._in_gc = False

    @property
    def valid(self) -> np.ndarray:
        """Valid pages per block."""
        return np.asarray(self._valid, np.int64)

    @property
    def pe(self) -> np.ndarray:
        """Program/erase cycles per block."""
        return np.asarray(self._pe, np.int64)

    def plane_of(self, lpn: int) -> int:
        C, D, P = self._C, self._D, self._P
        return ((lpn % C) * D + (lpn // C) % D) * P + (lpn // (C * D)) % P

    def free_blocks(self, plane: int) -> int:
        e = self._erased.get(plane)
        return self.bpp - self._fresh.get(plane, 0) + (len(e) if e else 0)

    def _take_free(self, plane: int) -> int | None:
        """The next free block of ``plane`` (never-programmed ones first, in order, then erased ones
        in erase order), or None."""
        k = self._fresh.get(plane, 0)
        if k < self.bpp:
            self._fresh[plane] = k + 1
            return plane * self.bpp + k
        e = self._erased.get(plane)
        return e.popleft() if e else None

    def _alloc(self, plane: int) -> int:
        op = self._open.get(plane)
        if op is None or op[1] == self.ppb:
            if op is not None:
                self._state[op[0]] = CLOSED
                if not self._valid[op[0]]:
                    del self.p2l[op[0]]
            b = self._take_free(plane)
            if b is None:
                raise MediaError("no free block left in plane (GC could not keep up)", plane=plane)
            self._state[b] = OPEN
            self.p2l[b] = [-1] * self.ppb
            op = self._open[plane] = [b, 0]
        b, pg = op
        op[1] += 1
        return b * self.ppb + pg

    def _place(self, lpn: int, plane: int) -> int:
        ppn = self._alloc(plane)
        old = self.l2p.get(lpn)
        if old is not None:
            ob, opg = divmod(old, self.ppb)
            self.p2l[ob][opg] = -1
            self._valid[ob] -= 1
            if not self._valid[ob] and self._state[ob] == CLOSED:
                del self.p2l[ob]                      # nothing valid left: GC erases it without copies
        self.l2p[lpn] = ppn
        b, pg = divmod(ppn, self.ppb)
        self.p2l[b][pg] = lpn
        self._valid[b] += 1
        return ppn

    def program(self, lpn: int) -> tuple[int, int, list[tuple[str, int]]]:
        """Map ``lpn`` to a fresh page. Returns (plane, ppn, GC operations [(kind, plane)...])."""
        plane = self.plane_of(lpn)
        ppn = self._place(lpn, plane)
        self.host_programs += 1
        ops: list[tuple[str, int]] = []
        if not self._in_gc and self.free_blocks(plane) < self._gc_start:
            ops = self._gc(plane)
        return plane, ppn, ops

    def program_many(self, lpns) -> tuple[np.ndarray, dict[int, list[tuple[str, int]]]]:
        """``program`` of every page of ``lpns`` in order (the same mapping, counts and GC), in bulk
        where it can: a plane's pages that fit its open block, none of them twice, take consecutive
        pages of it. Returns (home plane per page, {index: GC operations} for pages that caused GC)."""
        lp = np.asarray(lpns, np.int64)
        C, D, P = self._C, self._D, self._P
        planes = ((lp % C) * D + (lp // C) % D) * P + (lp // (C * D)) % P
        ops_out: dict[int, list[tuple[str, int]]] = {}
        n = len(lp)
        if n == 0:
            return planes, ops_out
        o = np.argsort(planes, kind="stable")
        ps = planes[o]
        brk = np.flatnonzero(np.diff(ps)) + 1
        starts = [0] + brk.tolist()
        ends = brk.tolist() + [n]
        ol = o.tolist()
        lpl = lp.tolist()
        psl = ps.tolist()
        l2p = self.l2p
        get = l2p.get
        ppb = self.ppb
        for s0, s1 in zip(starts, ends):
            plane = psl[s0]
            idxs = ol[s0:s1]
            k = s1 - s0
            op = self._open.get(plane)
            pages = [lpl[i] for i in idxs]
            if op is None or op[1] + k > ppb or self._in_gc or (k > 1 and len(set(pages)) != k):
                for i in idxs:
                    _, _, ops = self.program(lpl[i])
                    if ops:
                        ops_out[i] = ops
                continue
            b, pg0 = op
            op[1] += k
            for x, old in zip(pages, [get(x) for x in pages]):
                if old is not None:
                    ob, opg = divmod(old, ppb)
                    self.p2l[ob][opg] = -1
                    self._valid[ob] -= 1
                    if not self._valid[ob] and self._state[ob] == CLOSED:
                        del self.p2l[ob]
            base = b * ppb + pg0
            l2p.update(zip(pages, range(base, base + k)))
            self.p2l[b][pg0:pg0 + k] = pages
            self._valid[b] += k
            self.host_programs += k
        return planes, ops_out

    def _gc(self, plane: int) -> list[tuple[str, int]]:
        ops: list[tuple[str, int]] = []
        self._in_gc = True
        try:
            lo = plane * self.bpp
            big = self.ppb + 1
            while self.free_blocks(plane) < self._gc_start:
                st, va = self._state, self._valid
                victim = min(range(lo, lo + self.bpp), key=lambda b: va[b] if st[b] == CLOSED else big)
                if self._state[victim] != CLOSED or self._valid[victim] >= self.ppb:
                    raise MediaError("GC found no block with an invalid page", plane=plane)
                self.gc_runs += 1
                for lpn in [x for x in self.p2l.get(victim, ()) if x >= 0]:
                    self._place(int(lpn), plane)
                    self.gc_copies += 1
                    ops.append(("copyback", plane))
                # erase
                assert self._valid[victim] == 0
                self.p2l.pop(victim, None)
                self._state[victim] = FREE
                self._pe[victim] += 1
                self.erases += 1
                self._erased.setdefault(plane, deque()).append(victim)
                ops.append(("erase", plane))
        finally:
            self._in_gc = False
        return ops

    def lookup(self, lpn: int) -> int | None:
        return self.l2p.get(lpn)

    @property
    def write_amplification(self) -> float | None:
        if self.host_programs == 0:
            return None
        return (self.host_programs + self.gc_copies) / self.host_programs

    def check(self) -> None:
        """Mapping invariants (tests): l2p and p2l are inverse, valid counts match."""
        seen = 0
        for lpn, ppn in self.l2p.items():
            b, pg = divmod(ppn, self.ppb)
            assert self.p2l[b][pg] == lpn, (lpn, ppn)
            assert self.plane_of(lpn) == b // self.bpp
            seen += 1
        tot = 0
        for b, arr in self.p2l.items():
            nv = sum(1 for x in arr if x >= 0)
            assert nv == self._valid[b], (b, nv, self._valid[b])
            tot += nv
        assert tot == seen
