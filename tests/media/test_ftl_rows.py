"""The FTL's block maps live in rows of one pool array (hbfd/media/ftl.py ``_rows``): a block whose pages are all
invalid gives its row back and the next block to open reuses it. Since wt/eng19 a row is not set to -1 when handed
out (fresh rows hold whatever the memory held, reused ones what their last block left): a block's pages are
programmed in order and it closes full, so what the row holds past the open block's next free page is never read as
a page (``Ftl._written``: ``block_lpns`` and ``check`` read those pages as -1), and GC reads only closed blocks, every
page of which was written since the row was handed out. A stale lpn read as a valid page would make GC copy a page
that is not there: these tests fill the pool with such values first and drive the FTL through ``program``."""
from __future__ import annotations

import numpy as np

from hbfd.media.ftl import Ftl

from test_media_timing import geom

_STALE = 123457                                     # an lpn-like value that no test writes


def _plane0_lpns(g, n, start=0):
    """``n`` distinct lpns whose home plane is 0 (multiples of channels * dies * planes per die)."""
    step = g.channels * g.dies_per_channel * g.planes_per_die
    return [(start + k) * step for k in range(n)]


def test_a_fresh_row_reads_unwritten_past_the_open_blocks_next_page():
    g = geom(blocks_per_plane=8, pages_per_block=16)
    f = Ftl(g)
    f._pool[:] = _STALE                             # what np.empty may hold
    lp = _plane0_lpns(g, 5)
    for x in lp:
        f.program(x)
    b = int(f._ob[0])
    assert f.block_lpns(b) == lp + [-1] * 11
    f.check()


def test_a_given_back_row_reads_unwritten_in_its_new_block_and_gc_copies_only_written_pages():
    """A plane driven until a block's pages are all invalid (its row given back) and the next block opens on that
    row: the new block reads -1 past its written pages whatever the row held, and GC over the plane (few blocks)
    copies exactly the valid pages (the FTL's own check and the l2p map agree throughout)."""
    g = geom(blocks_per_plane=6, pages_per_block=16)
    f = Ftl(g)
    f._pool[:] = _STALE
    lp = _plane0_lpns(g, 16)
    for x in lp:                                    # block 0 full
        f.program(x)
    rows0 = f.p2l[int(f._ob[0])]
    for x in lp:                                    # rewritten: block 0's pages all invalid, its row given back
        f.program(x)
    assert rows0 in f._free_rows or rows0 in f.p2l.values()
    f._pool[rows0] = _STALE                         # (a reused row's old contents, whatever they are)
    rng = np.random.default_rng(3)
    more = _plane0_lpns(g, 40, start=100)
    for t in range(400):                            # overwrites of a small set: GC runs on the plane
        f.program(int(rng.choice(more)))
        b = int(f._ob[0])
        w = int(f._onx[0])
        lpns = f.block_lpns(b)
        assert lpns[w:] == [-1] * (16 - w) and _STALE not in lpns, t
        if t % 37 == 0:
            f.check()
    assert f.gc_runs > 0 and f.erases > 0
    for b, r in f.p2l.items():
        assert _STALE not in f.block_lpns(b)
    f.check()


def test_rows_past_the_pool_come_after_given_back_ones_and_held_rows_survive_growth():
    f = Ftl(geom(blocks_per_plane=8, pages_per_block=16))
    first = f._rows(60)
    f._pool[first] = 7
    f._free_rows.extend(first[:5].tolist())        # five given back
    more = f._rows(70)                             # five reused, 65 fresh: the pool grows past 64 rows
    assert set(more[:5].tolist()) == set(first[:5].tolist())
    assert len(f._pool) >= 125 and len(set(more.tolist())) == 70
    assert (f._pool[first[5:]] == 7).all()         # rows still held keep their pages across the growth


def test_one_row_per_plane_fits_the_pool_as_made():
    """wt/fuse14b: the pool is made with room for one open block per plane (a stream's first rows), so handing those
    out copies nothing (growing from 64 rows copied the held rows into fresh memory); one more row past that room
    still grows the pool with the held rows kept."""
    g = geom(channels=4, dies_per_channel=4, planes_per_die=8, blocks_per_plane=8, pages_per_block=16)
    f = Ftl(g)
    assert g.planes == 128 and len(f._pool) >= g.planes
    pool0 = f._pool
    a = f._rows(g.planes)
    assert f._pool is pool0 and a.tolist() == list(range(g.planes))
    f._pool[a] = 5
    b = f._rows(len(pool0) - g.planes + 1)
    assert f._pool is not pool0 and (f._pool[a] == 5).all() and len(set(b.tolist()) & set(a.tolist())) == 0
