"""Flash translation layer state: page-level logical→physical mapping, free blocks, GC, P/E.

Pure bookkeeping (no time). Every program goes to a fresh physical page of the logical page's home
plane (out of place; a physical page is programmed once per erase). When a plane's free blocks
drop below ``gc_start_blocks`` the plane is garbage-collected: the closed block with the fewest
valid pages is chosen (greedy), its valid pages are copied (copyback inside the plane) and it is
erased (P/E count + 1). The caller turns the returned operations into timed commands.
"""
from __future__ import annotations

from array import array
from collections import deque

import numpy as np

from hbfd import accel

from .geometry import MediaError, MediaGeometry
from .kernels import L2P_EMPTY, L2P_FIB, _dup_planes, _l2p_swap, _program_bulk, _program_place

FREE, OPEN, CLOSED = 0, 1, 2
_M64 = (1 << 64) - 1
_DUP_TWIN_MIN = 64     # program_many: from this many pages on, the duplicate check by its twin (kernels._dup_planes)


class _L2pTable:
    """``Ftl.l2p`` where the compiled twins are on when the FTL is made: lpn -> ppn (>= 0) in an open-addressing
    table of two numpy arrays (``kernels._l2p_swap``'s layout), so that a bulk program maps its pages in one
    compiled pass (inserting 16k pages a batch into a dict was ~13 % of a write run). The dict stays the
    definition (``HBFD_ACCEL=off``): this one gives the same mapping, through the dict methods the FTL and
    the engine use (get, in, [], []=, len, keys, items). At most half full (grown x4)."""

    def __init__(self, cap: int = 1 << 12) -> None:
        self._k = np.full(cap, L2P_EMPTY, np.int64)
        self._v = np.zeros(cap, np.int64)
        self._n = 0

    def _slot(self, k: int) -> tuple[int, bool]:
        """(slot of ``k``, True) or (the free slot it would take, False)."""
        if k == L2P_EMPTY:
            raise MediaError("logical page out of range", lpn=k)
        keys = self._k
        mask = len(keys) - 1
        h = (((k & _M64) * L2P_FIB & _M64) >> 33) & mask
        while True:
            kk = int(keys[h])
            if kk == k:
                return h, True
            if kk == L2P_EMPTY:
                return h, False
            h = (h + 1) & mask

    def _room(self, add: int) -> None:
        cap = len(self._k)
        if 2 * (self._n + add) <= cap:
            return
        while 2 * (self._n + add) > cap:
            cap *= 4
        if cap > 1 << 31:
            raise MediaError("logical-to-physical map too large", pages=self._n + add)
        m = self._k != L2P_EMPTY
        k, v = self._k[m], self._v[m]
        self._k = np.full(cap, L2P_EMPTY, np.int64)
        self._v = np.zeros(cap, np.int64)
        self._n = 0
        self.swap(k, v)

    def swap(self, ls: np.ndarray, ppn: np.ndarray) -> np.ndarray:
        """Map ``ls[j]`` to ``ppn[j]`` in order; each page's ppn before (-1: none)."""
        n = len(ls)
        if n and int(ls.min()) == L2P_EMPTY:
            raise MediaError("logical page out of range", lpn=L2P_EMPTY)
        self._room(n)
        if accel.enabled():
            old, added = _l2p_swap(self._k, self._v, np.ascontiguousarray(ls, np.int64),
                                   np.ascontiguousarray(ppn, np.int64))
            self._n += int(added)
            return old
        old = np.empty(n, np.int64)
        for j, (k, v) in enumerate(zip(ls.tolist(), ppn.tolist())):
            h, found = self._slot(k)
            if found:
                old[j] = int(self._v[h])
            else:
                old[j] = -1
                self._k[h] = k
                self._n += 1
            self._v[h] = v
        return old

    def get(self, k: int, default=None):
        h, found = self._slot(k)
        return int(self._v[h]) if found else default

    def __contains__(self, k: int) -> bool:
        return self._slot(k)[1]

    def __getitem__(self, k: int) -> int:
        h, found = self._slot(k)
        if not found:
            raise KeyError(k)
        return int(self._v[h])

    def __setitem__(self, k: int, v: int) -> None:
        self.put(k, v)

    def put(self, k: int, v: int) -> int | None:
        """``self[k] = v``; the value before (None: none)."""
        self._room(1)
        h, found = self._slot(k)
        old = int(self._v[h]) if found else None
        if not found:
            self._k[h] = k
            self._n += 1
        self._v[h] = v
        return old

    def __len__(self) -> int:
        return self._n

    def keys(self) -> list[int]:
        return self._k[self._k != L2P_EMPTY].tolist()

    def __iter__(self):
        return iter(self.keys())

    def items(self) -> list[tuple[int, int]]:
        m = self._k != L2P_EMPTY
        return list(zip(self._k[m].tolist(), self._v[m].tolist()))


class Ftl:
    def __init__(self, g: MediaGeometry) -> None:
        self.g = g
        self.ppb = g.pages_per_block
        self.bpp = g.blocks_per_plane
        # per block, as plain lists (scalar updates in the program path are the hot loop)
        # (valid pages: an int64 array.array, as fast as a list for the scalar updates, and a numpy view of it for the
        # bulk part of program_many: one step instead of a Python loop over a batch's open blocks)
        self._valid = array("q", bytes(8 * g.blocks))
        self._pe = [0] * g.blocks
        self._state = bytearray(g.blocks)
        # free blocks of a plane: the never-programmed ones are ``_fresh[plane] .. bpp - 1`` (a counter,
        # not a list: a plane's state costs nothing until it is written), then erased ones in erase order;
        # the counters in an int64 array.array (round 12; a dict before: fresh planes set in one numpy step)
        self._fresh = array("q", bytes(8 * g.planes))   # plane -> next never-programmed block (local index)
        self._erased: dict[int, deque] = {}           # plane -> erased blocks, FIFO
        # open block of each plane (-1: none) and its next free page (numpy: bulk programs index them)
        self._ob = np.full(g.planes, -1, np.int64)
        self._onx = np.zeros(g.planes, np.int64)
        # lpn -> ppn (block * ppb + page): a dict (the definition), or its table form where the compiled
        # twins are on
        self.l2p: dict[int, int] | _L2pTable = _L2pTable() if accel.enabled() else {}
        # block -> its row of ``_pool`` (the lpn per page, -1: invalid), for blocks holding a valid
        # page or open: a block whose pages are all invalid gives its row back (memory follows the live
        # data, not the pages written); rows in one array so that a bulk program fills them in one step. A row's
        # pages past its block's written ones hold anything (wt/eng19: a row is not set to -1 when handed out; a
        # block's pages are written in order, so those are the open block's pages from its next free one on, and
        # ``_written`` / ``block_lpns`` read them as -1; a closed block was filled, every page written). The map:
        # an int64 array.array over the blocks, -1 for none (round 12; a dict before: scalar look-ups as fast,
        # and a batch's open blocks looked up and fresh blocks mapped through a numpy view in one step each)
        self._row = array("q", b"\xff" * (8 * g.blocks))
        # room for one open block per plane from the start (wt/fuse14b): the first rows a stream hands out are one
        # per plane it writes, and growing from 64 rows copied the held rows into fresh memory each time (nominal,
        # the 90/10 burst: 6 MiB touched in two growths instead of 3.7). ``np.empty``: memory not yet touched costs
        # nothing, and a row is not written when handed out (wt/eng19, above): only the pages programmed touch it.
        self._pool = np.empty((max(64, min(g.planes, g.blocks)), self.ppb), np.int64)
        self._free_rows: list[int] = []
        self._nrows = 0                               # rows of _pool ever handed out
        self._gc_start = g.gc_start_blocks
        self._C, self._D, self._P = g.channels, g.dies_per_channel, g.planes_per_die
        self.host_programs = 0
        self.gc_copies = 0
        self.gc_runs = 0
        self.erases = 0
        self._in_gc = False
        self._cnt_pl: np.ndarray | None = None       # _bulk_twin's scratch (per plane)

    def _rows(self, k: int) -> np.ndarray:
        """``k`` rows of ``_pool`` for new blocks (given-back ones first), their contents as they are: a new block's
        pages are written in order before anything reads them (``_written``). Until wt/eng19 each row was set to -1
        here: a fresh engine's first stores open a block on every plane they reach, and that fill (2 KiB a row,
        nominal) was ~5 % of a 50k-request 90/10 burst."""
        fr = self._free_rows
        take = min(k, len(fr))
        rows = np.empty(k, np.int64)
        if take:
            rows[:take] = fr[len(fr) - take:]
            del fr[len(fr) - take:]
        n0 = self._nrows
        nf = k - take
        if n0 + nf > len(self._pool):
            # (rows from n0 on were never handed out: nothing reads them, so the new array's are left as they are)
            grow = max(len(self._pool), n0 + nf - len(self._pool))
            pool = np.empty((len(self._pool) + grow, self.ppb), np.int64)
            pool[:n0] = self._pool[:n0]
            self._pool = pool
        rows[take:] = np.arange(n0, n0 + nf)
        self._nrows = n0 + nf
        return rows

    def _open_row(self, b: int) -> None:
        self._row[b] = int(self._rows(1)[0])

    @property
    def p2l(self) -> dict[int, int]:
        """Block -> its row of ``_pool``, for the blocks that have one (a copy: tests and ``check``)."""
        a = np.frombuffer(self._row, np.int64)
        k = np.flatnonzero(a >= 0)
        return dict(zip(k.tolist(), a[k].tolist()))

    def drop_block_map(self, b: int) -> None:
        """Forget block ``b``'s page map (no valid page left), if it has one; its row is reused."""
        r = self._row[b]
        if r >= 0:
            self._row[b] = -1
            self._free_rows.append(r)

    def _written(self, b: int) -> int:
        """How many of block ``b``'s pages (from the first) were written since its row was handed out: every page,
        but for the open block of its plane, whose pages from its next free one on were not (a block's pages are
        programmed in order and it closes full: ``_alloc``); those pages of its row hold anything (``_rows``)."""
        p = b // self.bpp
        return int(self._onx[p]) if int(self._ob[p]) == b else self.ppb

    def block_lpns(self, b: int) -> list[int] | None:
        """The lpn per page of block ``b`` (-1: invalid/unwritten), or None where it has no map."""
        r = self._row[b]
        if r < 0:
            return None
        w = self._written(b)
        return self._pool[r, :w].tolist() + [-1] * (self.ppb - w)

    @property
    def valid(self) -> np.ndarray:
        """Valid pages per block."""
        return np.frombuffer(self._valid, np.int64).copy()

    @property
    def pe(self) -> np.ndarray:
        """Program/erase cycles per block."""
        return np.asarray(self._pe, np.int64)

    def plane_of(self, lpn: int) -> int:
        C, D, P = self._C, self._D, self._P
        return ((lpn % C) * D + (lpn // C) % D) * P + (lpn // (C * D)) % P

    def free_blocks(self, plane: int) -> int:
        e = self._erased.get(plane)
        return self.bpp - self._fresh[plane] + (len(e) if e else 0)

    def _take_free(self, plane: int) -> int | None:
        """The next free block of ``plane`` (never-programmed ones first, in order, then erased ones
        in erase order), or None."""
        k = self._fresh[plane]
        if k < self.bpp:
            self._fresh[plane] = k + 1
            return plane * self.bpp + k
        e = self._erased.get(plane)
        return e.popleft() if e else None

    def _alloc(self, plane: int) -> int:
        b = int(self._ob[plane])
        pg = int(self._onx[plane])
        if b < 0 or pg == self.ppb:
            if b >= 0:
                self._state[b] = CLOSED
                if not self._valid[b]:
                    self.drop_block_map(b)
            b = self._take_free(plane)
            if b is None:
                raise MediaError("no free block left in plane (GC could not keep up)", plane=plane)
            self._state[b] = OPEN
            self._open_row(b)
            self._ob[plane] = b
            pg = 0
        self._onx[plane] = pg + 1
        return b * self.ppb + pg

    def _place(self, lpn: int, plane: int) -> int:
        ppn = self._alloc(plane)
        l2p = self.l2p
        if type(l2p) is dict:
            old = l2p.get(lpn)
        else:
            old = l2p.put(lpn, ppn)                   # (the table: one probe; nothing reads it before the set below)
        if old is not None:
            self._drop_copy(*divmod(old, self.ppb))
        if type(l2p) is dict:
            l2p[lpn] = ppn
        self._set_copy(ppn, lpn)
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
        where it can: a plane's pages that fit its open block, none of them twice in the batch, take
        consecutive pages of it (planes are independent, so the order across planes is free). Returns
        (home plane per page, {index: GC operations} for pages that caused GC)."""
        lp = np.asarray(lpns, np.int64)
        ops_out: dict[int, list[tuple[str, int]]] = {}
        n = len(lp)
        if n >= 8 and not self._in_gc and type(self.l2p) is not dict and accel.enabled():
            return self._bulk_twin(lp, ops_out), ops_out
        planes = self._planes_of(lp)
        if n == 0:
            return planes, ops_out
        if n < 8 or self._in_gc:
            for i, x in enumerate(lp.tolist()):
                _, _, ops = self.program(x)
                if ops:
                    ops_out[i] = ops
            return planes, ops_out
        o = np.argsort(planes.astype(np.int16) if self.g.planes < (1 << 15) else planes, kind="stable")
        ps = planes[o]
        ls = lp[o]
        brk = np.empty(n, bool)
        brk[0] = True
        np.not_equal(ps[1:], ps[:-1], out=brk[1:])
        st = np.flatnonzero(brk)
        cnt = np.diff(np.append(st, n))
        up = ps[st]
        ob = self._ob[up]
        if (ob < 0).any():
            # planes never written: open their first block now when that cannot start GC (as the
            # first program() there would: a block taken, GC only if free blocks drop below the start)
            self._open_fresh(up[ob < 0], cnt[ob < 0])
            ob = self._ob[up]
        onx = self._onx[up]
        bulk = (ob >= 0) & (onx + cnt <= self.ppb)
        if n >= _DUP_TWIN_MIN and accel.enabled():     # (the same planes, by a hash set: no sort)
            anyd, dm = _dup_planes(lp, np.ascontiguousarray(planes, np.int64), self.g.planes)
            if anyd:                           # a page twice: its plane goes one page at a time
                bulk &= ~dm[up]
        else:
            srt = np.sort(lp)
            dup = srt[1:] == srt[:-1]
            if dup.any():                      # a page twice: its plane goes one page at a time
                dm = np.zeros(self.g.planes, bool)
                dm[self._planes_of(srt[1:][dup])] = True
                bulk &= ~dm[up]
        segid = np.cumsum(brk) - 1
        em = bulk[segid]
        if not em.all():                       # the other planes: one page at a time, in order
            for i in o[~em].tolist():
                _, _, ops = self.program(int(lp[i]))
                if ops:
                    ops_out[i] = ops
        if not bulk.any():
            return planes, ops_out
        if not em.all():
            ls = ls[em]
            st_b = st[bulk]
            cnt_b = cnt[bulk]
            st_b = np.cumsum(cnt_b) - cnt_b    # segment starts in the bulk-only order
            segid = np.repeat(np.arange(len(cnt_b)), cnt_b)
        else:
            st_b, cnt_b = st, cnt
            segid = segid
        ob_b, onx_b = ob[bulk], onx[bulk]
        ppb = self.ppb
        rank = np.arange(len(ls), dtype=np.int64) - st_b[segid]
        ppn = (ob_b * ppb + onx_b)[segid] + rank
        self._onx[up[bulk]] = onx_b + cnt_b
        l2p = self.l2p
        row = self._row
        pool = self._pool
        if type(l2p) is dict:
            lsl = ls.tolist()
            olds = [l2p[x] for x in l2p.keys() & lsl]
        else:                                  # (the table: old ppns and the new mapping in one pass)
            oldv = l2p.swap(ls, ppn)
            olds = oldv[oldv >= 0].tolist()
        self._drop_olds(olds)
        if type(l2p) is dict:
            l2p.update(zip(lsl, ppn.tolist()))
        rows = np.frombuffer(row, np.int64)[ob_b]
        pool.reshape(-1)[(rows * ppb + onx_b)[segid] + rank] = ls     # (pool[rows[segid], onx_b[segid] + rank])
        np.frombuffer(self._valid, np.int64)[ob_b] += cnt_b     # (a plane's open block: no block twice)
        self.host_programs += len(ls)
        return planes, ops_out

    def _drop_olds(self, olds: list[int]) -> None:
        """Pages mapped before a bulk program (their old ppns): their old copies invalid now."""
        ppb, pool, row, valid, state = self.ppb, self._pool, self._row, self._valid, self._state
        for o_ in olds:
            ob_, opg = divmod(o_, ppb)
            pool[row[ob_], opg] = -1
            valid[ob_] -= 1
            if not valid[ob_] and state[ob_] == CLOSED:
                self.drop_block_map(ob_)

    def _bulk_twin(self, lp: np.ndarray, ops_out: dict) -> np.ndarray:
        """``program_many``'s bulk path by its compiled twin (``kernels._program_bulk``, round 14): ``_open_fresh`` for
        the planes without an open block (called as the numpy path calls it), the pages of the planes that cannot go
        in bulk (no block, no room, a page twice) one at a time by ``program`` (in plane order, first, as there), then
        the bulk planes' pages placed (``kernels._program_place``), mapped (the l2p swap) and their old copies
        invalidated: the same placement, map, counts, GC and pool rows. Returns the home plane per page; ``ops_out``
        gets the GC operations."""
        if self._cnt_pl is None:
            self._cnt_pl = np.zeros(self.g.planes, np.int64)
        for opened in (False, True):
            st, planes, ls, ppn, need_up, need_cnt, nb, use = _program_bulk(
                lp, self._C, self._D, self._P, self.g.planes, self.ppb, self._ob, self._onx,
                np.frombuffer(self._row, np.int64), np.frombuffer(self._valid, np.int64), self._pool.reshape(-1),
                self._cnt_pl, opened)
            if st != 1:
                break
            self._open_fresh(need_up, need_cnt)
        assert st != 1, "_program_bulk asked for planes to open twice"
        if st == 3:                            # the other planes' pages one at a time, first
            for i in nb.tolist():
                _, _, ops = self.program(int(lp[i]))
                if ops:
                    ops_out[i] = ops
            ls, ppn = _program_place(lp, planes, use, self.g.planes, self.ppb, self._ob, self._onx,
                                     np.frombuffer(self._row, np.int64), np.frombuffer(self._valid, np.int64),
                                     self._pool.reshape(-1), self._cnt_pl)
            if not len(ls):
                return planes
        oldv = self.l2p.swap(ls, ppn)
        self._drop_olds(oldv[oldv >= 0].tolist())
        self.host_programs += len(ls)
        return planes

    def _open_fresh(self, up: np.ndarray, cnt: np.ndarray) -> None:
        """Planes ``up`` without an open block, ``cnt`` pages each to come: open the first block of each
        whose pages fit it, when that cannot start GC (as the first ``program`` there would: a block
        taken, GC only if free blocks drop below the start). A plane without an open block was never
        written (its free blocks: all ``bpp``, the first one next), so all of them at once."""
        fresh = np.frombuffer(self._fresh, np.int64)
        if (fresh[up] > 0).any() or (self._erased and not self._erased.keys().isdisjoint(up.tolist())):
            for p, k in zip(up.tolist(), cnt.tolist()):  # (not expected: a plane written but not open)
                if k <= self.ppb and self.free_blocks(p) - 1 >= self._gc_start:
                    b = self._take_free(p)
                    self._state[b] = OPEN
                    self._open_row(b)
                    self._ob[p] = b
                    self._onx[p] = 0
            return
        if self.bpp - 1 < self._gc_start:
            return
        up = up[cnt <= self.ppb]
        if not len(up):
            return
        fresh[up] = 1
        bs = up * self.bpp
        np.frombuffer(self._state, np.uint8)[bs] = OPEN          # (the bytearray, through a view)
        np.frombuffer(self._row, np.int64)[bs] = self._rows(len(bs))
        self._ob[up] = bs
        self._onx[up] = 0

    def _planes_of(self, lp: np.ndarray) -> np.ndarray:
        C, D, P = self._C, self._D, self._P
        return ((lp % C) * D + (lp // C) % D) * P + (lp // (C * D)) % P

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
                mv = [(pg, int(x)) for pg, x in enumerate(self.block_lpns(victim) or ()) if x >= 0]
                self._copy_out(victim, mv, plane)
                self.gc_copies += len(mv)
                ops += [("copyback", plane)] * len(mv)
                # erase
                assert self._valid[victim] == 0
                self.drop_block_map(victim)
                self._state[victim] = FREE
                self._pe[victim] += 1
                self.erases += 1
                self._erased.setdefault(plane, deque()).append(victim)
                ops.append(("erase", plane))
        finally:
            self._in_gc = False
        return ops

    def _copy_out(self, victim: int, mv: list[tuple[int, int]], plane: int) -> None:
        """GC copies of ``victim``'s valid pages ``mv`` [(page, lpn)], in order: ``_place`` of each with the old
        copy known (the victim's page: no look-up) and the map set once at the end (nothing reads it in between)."""
        new = []
        for pg, lpn in mv:
            ppn = self._alloc(plane)
            self._drop_copy(victim, pg)
            self._set_copy(ppn, lpn)
            new.append(ppn)
        if type(self.l2p) is dict:
            self.l2p.update(zip((x for _, x in mv), new))
        elif mv:
            self.l2p.swap(np.array([x for _, x in mv], np.int64), np.array(new, np.int64))

    def _drop_copy(self, b: int, pg: int) -> None:
        """Page ``pg`` of block ``b`` no longer holds a valid copy (its block map released once nothing valid is
        left in a closed block: GC erases it without copies)."""
        self._pool[self._row[b], pg] = -1
        self._valid[b] -= 1
        if not self._valid[b] and self._state[b] == CLOSED:
            self.drop_block_map(b)

    def _set_copy(self, ppn: int, lpn: int) -> None:
        """Physical page ``ppn`` now holds the valid copy of ``lpn``."""
        b, pg = divmod(ppn, self.ppb)
        self._pool[self._row[b], pg] = lpn
        self._valid[b] += 1

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
        p2l = self.p2l
        for lpn, ppn in self.l2p.items():
            b, pg = divmod(ppn, self.ppb)
            assert self._pool[p2l[b], pg] == lpn, (lpn, ppn)
            assert self.plane_of(lpn) == b // self.bpp
            seen += 1
        tot = 0
        rows = list(p2l.values())
        assert len(set(rows)) == len(rows) and not set(rows) & set(self._free_rows)
        for b, r in p2l.items():
            nv = int((self._pool[r, :self._written(b)] >= 0).sum())
            assert nv == self._valid[b], (b, nv, self._valid[b])
            tot += nv
        assert tot == seen
