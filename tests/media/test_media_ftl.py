"""Write assembly, out-of-place programming, GC and write amplification."""
from __future__ import annotations

import numpy as np

from hbfd.media import REQUEST_BATCH_DTYPE, MediaEngine, MediaGeometry
from test_media_timing import SMALL, batch, geom


def test_sixteen_partial_writes_make_one_program():
    g = geom()
    e = MediaEngine(g)
    rows = [(i * 10, 4096 * 5 + i * 256, 256, 1) for i in range(16)]
    e.submit(batch(rows))
    c = e.drain()
    m = dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))
    assert e.n["programs"] == 1 and e.ftl.host_programs == 1
    # every store completes when its own 256 B have crossed the channel (semantics v2)
    assert all(m[i] == g.t_cmd_ns + g.transfer_ns(256) for i in range(16))
    assert e.stats()["channel_busy_ns"][5 % g.channels] == 16 * g.transfer_ns(256)
    # a read of buffered sectors is served from the write buffer before the page fills
    e2 = MediaEngine(g)
    e2.submit(batch([(0, 0, 256, 1), (5, 0, 128, 0), (6, 0, 512, 0)]))
    c2 = e2.drain()
    m2 = dict(zip(c2["id"].tolist(), c2["modeled_ns"].tolist()))
    assert m2[1] == g.t_cmd_ns + g.transfer_ns(128)          # write-buffer hit: no tR
    assert m2[2] >= g.t_cmd_ns + g.t_read_ns                 # not all sectors buffered: media read
    assert e2.n["programs"] == 0 and e2.n["write_buffer_hits"] == 1


def test_partial_page_is_flushed_by_timeout_with_read_merge():
    g = geom()
    e = MediaEngine(g)
    e.submit(batch([(0, 4096, 4096, 1)]))                 # page 1 written whole
    e.submit(batch([(1000, 4096, 64, 1)]))                # then partially rewritten
    assert e.n["programs"] == 1
    e.advance(1000 + g.write_flush_timeout_ns - 1)
    assert e.n["flush_programs"] == 0
    e.advance(1000 + g.write_flush_timeout_ns)
    assert e.n["flush_programs"] == 1 and e.n["programs"] == 2
    assert not e.buf


def test_rewrite_is_out_of_place():
    g = geom()
    e = MediaEngine(g)
    ppns = []
    for k in range(6):
        e.submit(batch([(k * 10_000, 3 * 4096, 4096, 1)]))
        ppns.append(e.ftl.lookup(3))
    assert len(set(ppns)) == 6                 # never the same physical page twice (no erase yet)
    b, _ = divmod(ppns[-1], g.pages_per_block)
    assert e.ftl.valid.sum() == 1
    e.ftl.check()


def test_gc_keeps_mapping_correct_and_counts_waf():
    g = geom()
    e = MediaEngine(g)
    rng = np.random.default_rng(1)
    t = 0
    # fill the logical space once, then overwrite at random
    seqw = np.arange(g.logical_pages)
    for k in range(0, len(seqw), 64):
        pages = seqw[k:k + 64]
        e.submit(batch([(t + i * 50, int(p) * 4096, 4096, 1) for i, p in enumerate(pages)]))
        t += 64 * 50
    assert e.ftl.gc_runs == 0 and e.ftl.write_amplification == 1.0
    for _ in range(60):
        pages = rng.integers(0, g.logical_pages, 64)
        e.submit(batch([(t + i * 50, int(p) * 4096, 4096, 1) for i, p in enumerate(pages)]))
        t += 64 * 50
        e.ftl.check()
    s = e.stats()
    assert s["gc"]["runs"] > 0 and s["gc"]["erases"] == s["gc"]["runs"]
    assert s["write_amplification"] > 1.0
    assert s["write_amplification"] == (e.ftl.host_programs + e.ftl.gc_copies) / e.ftl.host_programs
    assert sum(s["pe_histogram"].values()) == g.blocks
    assert s["pe_max"] >= 1
    # every logical page is still mapped exactly once, in its home plane
    assert len(e.ftl.l2p) == g.logical_pages
    # reads after GC still go to their (static) plane and complete
    e.submit(batch([(t + 10, int(p) * 4096, 4096, 0) for p in range(8)]))
    c = e.drain()
    assert (c["status"] == 1).all()


def test_out_of_range_is_an_io_error_and_bad_op_unsupported():
    g = geom()
    e = MediaEngine(g)
    b = np.zeros(3, REQUEST_BATCH_DTYPE)
    b["id"] = [1, 2, 3]
    b["bytes"] = 4096
    b["media_address"] = [0, g.capacity_bytes, 0]
    b["op"] = [0, 0, 9]
    e.submit(b)
    c = np.sort(e.drain(), order="id")
    assert c["status"].tolist() == [1, 2, 6]


def test_refresh_rewrites_out_of_place_and_delays_reads_on_that_plane():
    g = geom()
    e = MediaEngine(g)
    e.submit(batch([(0, 7 * 4096, 4096, 1)]))
    old = e.ftl.lookup(7)
    end = e.refresh([7], 10_000)
    assert e.ftl.lookup(7) != old and e.n["refresh_pages"] == 1
    # inside the plane after t_cmd: sense tR, program tPROG (semantics v2: no channel)
    assert end == 10_000 + g.t_cmd_ns + g.t_read_ns + g.t_prog_ns
    e.submit(batch([(10_001, 7 * 4096, 4096, 0)]))       # same plane: waits for the refresh program
    m = e.drain()["modeled_ns"].tolist()
    assert m[-1] == end + g.t_read_ns + g.transfer_ns(4096) - 10_001
    e.ftl.check()


def test_ftl_memory_follows_live_data_not_pages_written():
    """Issue 19 (soak: hbfd's RSS grew with every page programmed): rewriting a small working set on a
    large device keeps the FTL's per-block maps to the blocks that hold valid pages (plus the open
    ones), and the free-block accounting exact, long before GC runs."""
    from hbfd.media.ftl import Ftl
    g = geom(blocks_per_plane=1024, pages_per_block=8)
    f = Ftl(g)
    lpns = 16
    for i in range(8000):
        f.program(i % lpns)
    assert f.gc_runs == 0 and f.host_programs == 8000
    assert len(f.p2l) <= lpns + g.planes, len(f.p2l)          # was one list per block ever opened (~1000)
    used = sum(g.blocks_per_plane - f.free_blocks(p) for p in range(g.planes))
    assert used == 8000 // g.pages_per_block                    # every program took a fresh page
    f.check()
