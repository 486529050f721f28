"""The one definition of a request's status: :class:`RequestStatus`.

Everything else is derived from or checked against it: ``hbfcommon.ctl.HBF_ST_*`` (the control-region
mirror) are its values, the C header runtime_cuda/include/hbf_ctl.h defines ``HBF_ST_<NAME>`` for every
member with the same value (tests/test_ctl_layout.py checks both ways), and the names the summary and
hbfctl print (``reference_requests_by_state`` ...) are its member names (:data:`STATUS_NAMES`).
"""
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
    RING_OVERFLOW = 9     # the device's ring overflow table held an untaken completion where a stolen one
                          # had to go (docs/runtime.md "ring"): the run fails, nothing is overwritten
    WARP_GROUP = 10       # device: a helper's collective ran with other lanes than its group's (the group guard,
                          # runtime_cuda/src/hbf_ptx.cuh HBF_GROUP_SYNC): its values cannot be trusted, the run fails

    @property
    def terminal(self) -> bool:
        return self is not RequestStatus.PENDING

    @property
    def c_name(self) -> str:
        """Its name in hbf_ctl.h (``HBF_ST_READY`` ...)."""
        return f"HBF_ST_{self.name}"


# the name of each status, indexed by its value (the values are 0..n-1)
STATUS_NAMES: tuple[str, ...] = tuple(s.name for s in RequestStatus)
assert all(s.value == i for i, s in enumerate(RequestStatus)), "RequestStatus values are 0..n-1"
