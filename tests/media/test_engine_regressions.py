"""Regressions of the media engine found outside its unit tests."""
from __future__ import annotations

import numpy as np

from hbfcommon.profile import load_profile
from hbfd.media import REQUEST_BATCH_DTYPE, make_engine
from workloads.demo import TRACE, load_trace


def test_demo_trace_in_ring_sized_batches_completes():
    """The demo's mixed trace (streaming and random reads, 4 KiB writes) fed in ring-scan-sized batches: a
    batch whose reads all fall in other parts than its stores' planes once indexed an empty array
    (IndexError -> hbfd failed the run with an ENGINE failure). Every request completes, once."""
    tr = load_trace(TRACE)
    for seed in range(3):
        e = make_engine(load_profile("nominal"))
        rng = np.random.default_rng(seed)
        seen: list[int] = []
        i, n, base = 0, len(tr), 1_000_000
        while i < n:
            k = int(rng.integers(1, 40))
            sl = tr[i:i + k]
            b = np.zeros(len(sl), REQUEST_BATCH_DTYPE)
            b["arrival_ns"] = sl["arrival_ns"] + base
            b["media_address"] = sl["offset"]
            b["bytes"] = sl["bytes"]
            b["op"] = sl["op"]
            b["id"] = np.arange(i, i + len(sl))
            e.submit(b)
            e.advance(int(sl["arrival_ns"][-1]) + base)
            seen.extend(int(x) for x in e.collect()["id"])
            i += k
        seen.extend(int(x) for x in e.collect()["id"])
        seen.extend(int(x) for x in e.collect()["id"])
        assert sorted(seen) == list(range(n)), seed
