"""gRPC client of hbfd (proto/hbf.proto). Every error reply becomes an HbfError with its code."""
from __future__ import annotations

import logging
import os

from hbfcommon.errors import DaemonError, ErrorCode, HbfError

from . import knobs

log = logging.getLogger(__name__)


def default_socket() -> str:
    """The socket hbfd listens on when none is named: HBF_SOCKET, else hbfd's own default."""
    s = knobs.socket_path()
    if s:
        return s
    try:  # the daemon's default, when the daemon package defines one
        from hbfd import knobs as dk  # noqa: PLC0415
        for name in ("socket_path", "default_socket", "socket"):
            f = getattr(dk, name, None)
            if callable(f):
                v = f()
                if v:
                    return str(v)
    except Exception:  # noqa: BLE001
        pass
    run = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return os.path.join(run, f"hbfd-{os.getuid()}.sock")


class Client:
    def __init__(self, socket: str | None = None, timeout_s: float | None = None) -> None:
        import grpc  # noqa: PLC0415

        from hbfproto import hbf_pb2, hbf_pb2_grpc  # noqa: PLC0415
        self.pb = hbf_pb2
        self.socket = socket or default_socket()
        self.timeout_s = timeout_s if timeout_s is not None else knobs.rpc_timeout_s()
        self._grpc = grpc
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        self.stub = hbf_pb2_grpc.HbfdStub(self.channel)

    def call(self, method: str, request):
        try:
            reply = getattr(self.stub, method)(request, timeout=self.timeout_s)
        except self._grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            raise DaemonError(f"hbfd {method} failed: {getattr(e, 'details', lambda: str(e))()}",
                              socket=self.socket, grpc_code=str(code)) from None
        err = getattr(reply, "error", None)
        if err is not None and err.code != 0:
            try:
                code = ErrorCode(err.code)
            except ValueError:
                code = ErrorCode.INTERNAL
            raise HbfError(f"hbfd {method}: {err.message}", code=code, **dict(err.fields))
        return reply

    def close(self) -> None:
        self.channel.close()
