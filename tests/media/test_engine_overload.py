"""The media engine at overload (issue 14, the two engine faults of 2026-12-04; docs/design.md §3.9):

* write backpressure: a store's data-in waits for a free page buffer of its plane, so however the
  stream is fed the engine never acknowledges stores beyond what its planes can program (before: fed
  as one batch it exceeded the program bound in every mixed overload case of the cross-check);
* programs are not fixed per batch: a program that a later read could still overtake is re-scheduled
  with the next batch, so the results do not depend on how the host batches the stream (before: at
  200 % a read of a later batch waited behind programs of an earlier one that had not started, and
  batches of 1,024 gave another p50 and bandwidth than one batch).

Identical means bit-identical completion times: the engine is exact under any batching (the 1 ns
reference says the same on small streams, tests/media/test_media_timing.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hbfcommon.profile import MAX_DIE_QUEUE_SLOTS, load_profile
from hbfd.media.crosscheck import lower_bounds, metrics, run_engine
from hbfd.media.geometry import MediaGeometry
from hbfd.media.streams import make_stream


def _geometries():
    sg1 = MediaGeometry.from_profile(load_profile("ocp-sg1"))
    # 16 banks per die instead of 256: 6,000 requests load every bank with programs
    small = dataclasses.replace(sg1, planes_per_die=16, queue_depth=MAX_DIE_QUEUE_SLOTS // (sg1.dies))
    return {"ocp-sg1/16banks": small,
            "conservative": MediaGeometry.from_profile(load_profile("conservative"))}   # its queue depth binds


GEOMETRIES = _geometries()
BATCHES = (1024, 16384, 10**9)      # 10**9: the whole stream as one batch


@pytest.mark.parametrize("gname", sorted(GEOMETRIES))
@pytest.mark.parametrize("load", [1.5, 2.0])
def test_overload_results_do_not_depend_on_the_batch_size_and_keep_the_program_bound(gname, load):
    g = GEOMETRIES[gname]
    b = make_stream("mixed", g, 6000, load=load, seed=5)
    lb = lower_bounds(g, b)
    done = {}
    for eb in BATCHES:
        done[eb], _ = run_engine(g, b, eb)
        m = metrics(b, done[eb])
        # the busiest plane's senses and programs (less what its page buffers may hold) bound the makespan
        assert m["makespan_ns"] >= lb["plane_programs_ns"], (gname, load, eb, m["makespan_ns"], lb)
    for eb in BATCHES[:-1]:
        assert np.array_equal(done[eb], done[BATCHES[-1]]), (gname, load, eb)
