from __future__ import annotations

import numpy as np
import pytest

from hbfd.thermal.power import EnergyBinner, event_energy_j

MS = 1_000_000


def test_event_spanning_bins_is_split_by_overlap():
    b = EnergyBinner(10 * MS, 2)
    b.add(5 * MS, 25 * MS, 4.0, 1)            # 5 ms in bin 0, 10 in bin 1, 5 in bin 2
    b.add(12 * MS, 12 * MS, 1.0, 0)           # instantaneous
    out = b.pop_until(30 * MS)
    np.testing.assert_allclose(out[:, 1], [1.0, 2.0, 1.0])
    np.testing.assert_allclose(out[:, 0], [0.0, 1.0, 0.0])
    assert out.sum() == pytest.approx(5.0)
    with pytest.raises(ValueError):
        b.add(25 * MS, 26 * MS, 1.0, 0)       # lands in a bin already handed out


def test_event_energy_model():
    e = event_energy_j(0, 4096, read_j=1e-6, program_j=2e-6, erase_j=1e-5, j_per_byte=8.4e-11)
    assert e == pytest.approx(1e-6 + 8.4e-11 * 4096)
    # SG1 check: 5 W + 8.4e-11 J/B × 384 GB/s = 37.256 W
    assert 5.0 + 8.4e-11 * 384e9 == pytest.approx(37.256)
