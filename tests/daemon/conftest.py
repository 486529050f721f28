from __future__ import annotations

import pytest

from hbfd_harness import start_hbfd


@pytest.fixture
def hbfd(tmp_path):
    """A ready hbfd (pinned default services) in the test's tmp dir; stopped in order at teardown."""
    with start_hbfd(tmp_path) as h:
        yield h
