"""flush (unregister, end of run) gives the media model its write-backs FLUSH_BATCH at a time instead of one call
per page (~1 ms a page). The same pages reach the store with the same bytes, the same frames end free, and the
media model serves the same programs at the same arrival; a failure part way still submits the pages written."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.capacity import service as S
from hbfd.capacity.backing import SparseFileStore
from hbfd.capacity.service import CapacityService

RW = 7


def _dirty_service(geom, tmp_path, name, frames=40, pages=64, seed=3):
    store = SparseFileStore(tmp_path / f"{name}.bin", pages)
    svc = CapacityService(geom, frames)
    svc.add_range(1, pages, 0, RW, store)
    rng = np.random.default_rng(seed)
    pool = svc.pool
    for p in rng.choice(pages, frames, replace=False).tolist():
        f = pool.take_free()
        pool.begin_fill(f, 1, int(p), prefetch=False)
        pool.memory.write(f, rng.integers(0, 256, 4096, dtype=np.uint8))
        pool.publish(f, 0, 0)
    pool.frames["dirty"][rng.random(frames) < 0.7] = 1
    return svc, store


def _media_log(svc, monkeypatch):
    seen = []
    real = svc._media

    def media(reqs):
        seen.extend(tuple(int(x) for x in r) for r in np.asarray(reqs, np.int64).reshape(-1, 4))
        return real(reqs)
    monkeypatch.setattr(svc, "_media", media)
    return seen


def test_batched_flush_equals_the_page_at_a_time_flush(geom, tmp_path, monkeypatch):
    a, sa = _dirty_service(geom, tmp_path, "a")
    b, sb = _dirty_service(geom, tmp_path, "b")
    dirty = int((a.pool.frames["dirty"] != 0).sum())
    assert 0 < dirty < len(a.pool.frames)
    la, lb = _media_log(a, monkeypatch), _media_log(b, monkeypatch)
    monkeypatch.setattr(S, "FLUSH_BATCH", 1)           # the old form: one media call per page
    assert a.flush() == dirty
    monkeypatch.setattr(S, "FLUSH_BATCH", 16)          # several batches and a remainder
    assert b.flush() == dirty
    assert la == lb and len(la) == dirty               # the same programs, same arrivals, same order
    assert a.n["media_batches"] == dirty and b.n["media_batches"] == -(-dirty // 16)
    assert np.array_equal(sa.read_pages(0, 64), sb.read_pages(0, 64))
    assert np.array_equal(a.pool.frames, b.pool.frames)
    assert (b.pool.frames["dirty"] == 0).all()
    xa, xb = a.engine.stats(), b.engine.stats()
    assert xa["host_programs"] == xb["host_programs"] > 0 and xa["mapped_pages"] == xb["mapped_pages"]
    def work(c):            # what was served; the engine's event bookkeeping (event_batches, event_dies) is per call
        return {k: v for k, v in c.items() if not k.startswith("event_")}
    assert work(xa["counts"]) == work(xb["counts"])


def test_a_failed_write_back_still_submits_the_pages_written_before_it(geom, tmp_path, monkeypatch):
    svc, store = _dirty_service(geom, tmp_path, "c")
    log = _media_log(svc, monkeypatch)
    monkeypatch.setattr(S, "FLUSH_BATCH", 1000)
    calls = {"n": 0}
    real, real_many = store.write_page, store.write_pages

    def write_page(page, data):
        calls["n"] += 1
        if calls["n"] == 5:
            raise S.BackingStoreError("disk full")
        return real(page, data)

    def write_pages(first, data):                       # a run of pages: the 5th page written fails
        n = len(data)
        if calls["n"] < 5 <= calls["n"] + n:
            k = 5 - calls["n"] - 1                      # pages of this run before the failing one
            if k:
                real_many(first, data[:k])
            calls["n"] += k + 1
            raise S.BackingStoreError("disk full", written_pages=k)
        calls["n"] += n
        return real_many(first, data)
    monkeypatch.setattr(store, "write_page", write_page)
    monkeypatch.setattr(store, "write_pages", write_pages)
    assert svc.flush() == 4
    assert len(log) == 4 and svc.failure is not None
    assert int((svc.pool.frames["dirty"] != 0).sum()) > 0  # the failed frame and those after it stay dirty
