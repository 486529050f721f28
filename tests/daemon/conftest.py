from __future__ import annotations

import pytest

from hbfd_harness import start_hbfd


@pytest.fixture
def hbfd(tmp_path):
    h = start_hbfd(tmp_path)
    yield h
    if h.proc.poll() is None:
        h.proc.kill()
        h.proc.wait()

