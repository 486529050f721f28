"""Incremental re-scheduling of pending array commands (issue 14 item 5, 2026-12-05): on a die with
pending commands and no new read, only the pending commands admitted at or after the earliest new
arrival are scheduled again with the new ones (``MediaEngine._reschedule_tail``); the others keep
their schedule. It must give exactly the completion times of scheduling every such die again from
the start (``_behind_pending`` off), on write and mixed streams cut into random batches, with
``advance`` calls between some of them."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hbfcommon.profile import load_profile
from hbfd.media.bench import make_stream
from hbfd.media.engine import MediaEngine
from hbfd.media.geometry import MediaGeometry


def _geometry(name):
    if name == "ocp-sg1/16banks":
        g = MediaGeometry.from_profile(load_profile("ocp-sg1"))
        return dataclasses.replace(g, planes_per_die=16, queue_depth=8)
    return MediaGeometry.from_profile(load_profile(name))


def _run(g, stream, cuts, adv):
    eng = MediaEngine(g)
    outs = []
    for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        part = stream[a:b]
        eng.submit(part)
        if adv[k]:
            eng.advance(int(part["arrival_ns"].max()))
        outs.append(eng.collect())
    outs.append(eng.drain())
    c = np.concatenate(outs)
    o = np.argsort(c["id"], kind="stable")
    return c["id"][o], c["modeled_ns"][o], eng


@pytest.mark.parametrize("gname,op,wf,load,seed", [
    ("nominal", "write", 0.0, None, 1), ("nominal", "write", 0.0, 0.1, 2), ("nominal", "mixed", 0.5, None, 3),
    ("nominal", "mixed", 0.1, 0.5, 4), ("conservative", "write", 0.0, None, 5), ("conservative", "mixed", 0.3, 0.5, 6),
    ("ocp-sg1/16banks", "write", 0.0, None, 7), ("ocp-sg1/16banks", "mixed", 0.5, 1.0, 8)])
@pytest.mark.parametrize("by_plane", [True, False])
def test_incremental_rescheduling_equals_full(monkeypatch, gname, op, wf, load, seed, by_plane):
    """(``by_plane`` False: ``_tail_plane`` off, so ``_tail_die`` does every die's tail.)"""
    g = _geometry(gname)
    if not by_plane:
        monkeypatch.setattr(MediaEngine, "_tail_plane", lambda self, P, N, nd: None)
    rng = np.random.default_rng(seed)
    gap = 0 if load is None else round(1e9 / (load * g.aggregate_bytes_per_s / 4096))
    n = 5000
    stream = make_stream(g, n, 4096, op, gap, seed=seed, pattern="random", write_fraction=wf)
    cuts = np.unique(np.r_[0, np.sort(rng.integers(1, n, size=int(rng.integers(4, 40)))), n])
    adv = rng.random(len(cuts)) < 0.5
    ids, inc, eng = _run(g, stream, cuts, adv)
    assert eng._tail_kept > 0                                # the incremental path ran and kept commands
    if not by_plane:
        assert eng._tail_redone > 0
    monkeypatch.setattr(MediaEngine, "_behind_pending", lambda self, P, N, keepd: None)
    ids2, full, _ = _run(g, stream, cuts, adv)
    assert np.array_equal(ids, ids2)
    assert np.array_equal(inc, full)
