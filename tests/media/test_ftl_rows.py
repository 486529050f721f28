"""The FTL's block maps live in rows of one pool array (hbfd/media/ftl.py ``_rows``): a block whose pages are all
invalid gives its row back and the next block to open reuses it. A reused row must come back all -1 (unwritten):
a stale lpn left in it would read as a valid page of the new block, and GC would copy a page that is not there.
Round 6 (2026-12-06) found no test that failed when that reset was removed; this one does. Fresh rows (the pool
grown) are -1 too."""
from __future__ import annotations

import numpy as np

from hbfd.media.ftl import Ftl

from test_media_timing import geom


def test_a_given_back_row_comes_back_unwritten():
    f = Ftl(geom(blocks_per_plane=8, pages_per_block=16))
    f._open_row(3)
    f._open_row(5)
    r3 = f.p2l[3]
    f._pool[r3] = np.arange(100, 116)              # block 3's pages written
    f._pool[f.p2l[5], :4] = np.arange(4)
    f.drop_block_map(3)                            # no valid page left: the row is given back
    f._open_row(6)
    assert f.p2l[6] == r3 and (f._pool[r3] == -1).all()
    assert (f._pool[f.p2l[5], :4] == np.arange(4)).all()      # another block's row untouched


def test_rows_past_the_pool_are_unwritten_and_given_back_ones_come_first():
    f = Ftl(geom(blocks_per_plane=8, pages_per_block=16))
    first = f._rows(60)
    f._pool[first] = 7
    f._free_rows.extend(first[:5].tolist())        # five given back
    more = f._rows(70)                             # five reused, 65 fresh: the pool grows past 64 rows
    assert set(more[:5].tolist()) == set(first[:5].tolist())
    assert len(f._pool) >= 125 and (f._pool[more] == -1).all()
    assert (f._pool[first[5:]] == 7).all()         # rows still held keep their pages across the growth


def test_fresh_rows_are_unwritten_when_handed_out_after_the_pool_grew():
    """Round 11 (2026-12-06): the grown pool's rows past those handed out are left unwritten (nothing reads them);
    each is set to -1 when handed out, in the growth's call and in later calls that fit the pool, and rows held keep
    their pages."""
    f = Ftl(geom(blocks_per_plane=8, pages_per_block=16))
    a = f._rows(64)
    f._pool[a] = 3
    b = f._rows(10)                                # grows to 128 rows: 64..73 handed out
    assert len(f._pool) == 128 and (f._pool[b] == -1).all() and (f._pool[a] == 3).all()
    f._pool[64:128] = 9                            # (rows 74.. not handed out: whatever they hold is never read)
    f._pool[b] = 4
    c = f._rows(20)                                # fits: 74..93
    assert c.tolist() == list(range(74, 94)) and (f._pool[c] == -1).all() and (f._pool[b] == 4).all()


def test_one_row_per_plane_fits_the_pool_as_made():
    """wt/fuse14b: the pool is made with room for one open block per plane (a stream's first rows), so handing those
    out copies nothing (growing from 64 rows copied the held rows into fresh memory); they come out -1 as always,
    and one more row past that room still grows the pool with the held rows kept."""
    g = geom(channels=4, dies_per_channel=4, planes_per_die=8, blocks_per_plane=8, pages_per_block=16)
    f = Ftl(g)
    assert g.planes == 128 and len(f._pool) >= g.planes
    pool0 = f._pool
    a = f._rows(g.planes)
    assert f._pool is pool0 and a.tolist() == list(range(g.planes)) and (f._pool[a] == -1).all()
    f._pool[a] = 5
    b = f._rows(len(pool0) - g.planes + 1)
    assert f._pool is not pool0 and (f._pool[a] == 5).all() and (f._pool[b] == -1).all()
