"""The vectorized read-priority planes (hbfd/media/prioplane.py) equal the event scheduler
(hbfd/media/eventsim.py) wherever the queue depth does not bind, in both of its forms (rounds over
all planes; one busy plane at a time), and the engine uses it only where the depth does not bind."""
from __future__ import annotations

import numpy as np
import pytest

from hbfd.media import eventsim, prioplane
from hbfd.media.eventsim import COPYBACK, ERASE, PROG, READ


def _case(rng, n, nplanes, spread):
    kind = rng.choice([READ, READ, PROG, COPYBACK, ERASE], n).astype(np.uint8)
    ready = np.sort(rng.integers(0, spread, n)).astype(np.int64)
    plane = rng.integers(0, nplanes, n).astype(np.int64)
    svc = np.where(kind == READ, 30, rng.choice([200, 230, 900], n)).astype(np.int64)
    pf = rng.integers(0, spread // 2 + 1, nplanes).astype(np.int64)
    return kind, ready, plane, svc, pf


@pytest.mark.parametrize("seed", range(40))
def test_priority_planes_equal_eventsim_without_queue_depth(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    nplanes = int(rng.choice([1, 3, 16, 400]))        # few planes: the loop form; many: rounds
    kind, ready, plane, svc, pf = _case(rng, n, nplanes, int(rng.choice([10, 1000, 100000])))
    pf1, pf2 = pf.copy(), pf.copy()
    s1, e1 = eventsim.simulate(kind, ready, plane, plane // 4, svc, t_cmd=3, queue_depth=1 << 40,
                               plane_free=pf1, die_carry={})
    s2, e2 = prioplane.priority_planes(kind, ready, plane, svc, t_cmd=3, plane_free=pf2, nplanes=nplanes)
    assert (s1 == s2).all() and (e1 == e2).all()
    assert (pf1 == pf2).all()


def test_both_forms_are_exercised(monkeypatch):
    seen = set()
    for name in ("_loop", "_rounds"):
        f = getattr(prioplane, name)
        monkeypatch.setattr(prioplane, name, lambda *a, _f=f, _n=name: (seen.add(_n), _f(*a))[1])
    rng = np.random.default_rng(1)
    for nplanes in (2, 500):
        kind, ready, plane, svc, pf = _case(rng, 2000, nplanes, 100000)
        prioplane.priority_planes(kind, ready, plane, svc, t_cmd=3, plane_free=pf, nplanes=nplanes)
    assert seen == {"_loop", "_rounds"}
