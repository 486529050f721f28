"""One error tree for the whole project.

Every error carries a stable ``code`` (shared with ``proto/hbf.proto`` ``ErrorCode``: the same names and
values, checked both ways by tests/daemon/test_proto_contract.py) and structured ``fields``. Only CLIs turn
these into exit codes.
"""
from __future__ import annotations

import enum
import shlex
from typing import Any, Mapping, Sequence


class ErrorCode(enum.IntEnum):
    """Stable codes. Values never change once released; add new ones at the end."""

    OK = 0
    INTERNAL = 1
    INVALID_ARGUMENT = 2
    PROFILE_INVALID = 3
    RANGE_OVERLAP = 4
    RANGE_ZERO_LENGTH = 5
    RANGE_MISALIGNED = 6
    RANGE_BAD_PERMISSIONS = 7
    RANGE_BAD_MODE = 8
    RANGE_NOT_FOUND = 9
    RANGE_ADMITTED = 10          # registration after a kernel that could touch it was admitted
    RANGE_TABLE_FULL = 11
    DAEMON_UNAVAILABLE = 12
    DAEMON_LOST = 13
    ABI_MISMATCH = 14
    CONTROL_REGION = 15
    PTX_PARSE = 16
    PTX_REWRITE = 17
    TOOLCHAIN = 18               # a subprocess (ptxas, nvcc) failed
    UNSUPPORTED = 19
    TIMEOUT = 20
    THERMAL_SHUTDOWN = 21
    TELEMETRY = 22
    LAUNCH_REFUSED = 23
    CUDA = 24
    TRACE_INVALID = 25
    SHUTTING_DOWN = 26
    RANGE_STALE = 27             # a registered range's device allocation is gone (freed without unregister)


class HbfError(Exception):
    """Root of every error the project raises on purpose."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, code: ErrorCode | None = None, **fields: Any) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.fields: dict[str, Any] = dict(fields)

    def to_dict(self) -> dict[str, Any]:
        return {"code": int(self.code), "code_name": self.code.name, "message": self.message,
                "fields": {k: _jsonable(v) for k, v in self.fields.items()}}

    def __str__(self) -> str:  # message plus the fields that name what is wrong
        if not self.fields:
            return self.message
        extra = ", ".join(f"{k}={v!r}" for k, v in self.fields.items())
        return f"{self.message} ({extra})"


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


class ConfigError(HbfError):
    code = ErrorCode.INVALID_ARGUMENT


class ProfileError(ConfigError):
    """A profile is invalid; ``fields`` names the file and the field."""

    code = ErrorCode.PROFILE_INVALID


class RangeError(HbfError):
    code = ErrorCode.INVALID_ARGUMENT


class DaemonError(HbfError):
    code = ErrorCode.DAEMON_UNAVAILABLE


class ControlRegionError(HbfError):
    code = ErrorCode.CONTROL_REGION


class PtxError(HbfError):
    code = ErrorCode.PTX_PARSE


class RewriteError(HbfError):
    code = ErrorCode.PTX_REWRITE


class ToolchainError(HbfError):
    """A subprocess failed. ``fields['argv']`` reproduces it."""

    code = ErrorCode.TOOLCHAIN

    def __init__(self, message: str, *, argv: Sequence[str], returncode: int | None = None,
                 stderr: str = "", **fields: Any) -> None:
        super().__init__(message, argv=list(argv), returncode=returncode, **fields)
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr

    def __str__(self) -> str:
        tail = self.stderr.strip().splitlines()[-20:]
        return (f"{self.message} (exit {self.returncode})\n  reproduce: {shlex.join(self.argv)}"
                + ("\n  " + "\n  ".join(tail) if tail else ""))


class TelemetryError(HbfError):
    code = ErrorCode.TELEMETRY


class CudaError(HbfError):
    code = ErrorCode.CUDA


class TraceError(HbfError):
    code = ErrorCode.TRACE_INVALID
