"""Request terminal states, mirrored from runtime_cuda/include/hbf_ctl.h (HBF_ST_*)."""
from __future__ import annotations

import enum


class RequestStatus(enum.IntEnum):
    PENDING = 0
    READY = 1
    IO_ERROR = 2
    COPY_ERROR = 3
    CHECKSUM_ERROR = 4
    TIMEOUT = 5
    UNSUPPORTED = 6
    DAEMON_LOST = 7
    THERMAL_SHUTDOWN = 8

    @property
    def terminal(self) -> bool:
        return self is not RequestStatus.PENDING
