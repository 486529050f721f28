import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(params=["off", "on"])
def accel_mode(request, monkeypatch):
    """Run a test with the media engine's compiled twins off (the numpy definitions) and on (numba;
    skipped where numba is not installed). hbfd/accel.py."""
    if request.param == "on":
        pytest.importorskip("numba")
    monkeypatch.setenv("HBFD_ACCEL", request.param)
    return request.param
