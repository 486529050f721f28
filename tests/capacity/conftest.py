"""Fixtures for the capacity-mode host service: a small media geometry, services over real stores."""
from __future__ import annotations

import pytest

from hbfd.media import MediaGeometry


@pytest.fixture()
def geom() -> MediaGeometry:
    return MediaGeometry(channels=2, dies_per_channel=1, planes_per_die=2, blocks_per_plane=64, pages_per_block=64,
                         channel_bytes_per_s=4_000_000_000, t_read_ns=4000, t_prog_ns=200_000, t_erase_ns=2_000_000)
