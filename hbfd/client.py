"""A small gRPC client for hbfd (used by hbfctl, the demo and tests).

Replies carry errors as an Error message; ``call`` turns a nonzero code into an HbfError with the
same stable code, and an unreachable daemon into DaemonError(DAEMON_UNAVAILABLE).
"""
from __future__ import annotations

import os
from pathlib import Path

from hbfcommon.errors import DaemonError, ErrorCode, HbfError
from hbfd import knobs


class Client:
    def __init__(self, socket_path: str | os.PathLike | None = None, *, timeout_s: float = 10.0) -> None:
        import grpc

        from hbfproto import hbf_pb2, hbf_pb2_grpc
        self.socket_path = Path(socket_path) if socket_path else knobs.default_socket()
        self.timeout_s = timeout_s
        self.pb = hbf_pb2
        self._grpc = grpc
        if not self.socket_path.exists():
            raise DaemonError(f"no hbfd is running (no socket at {self.socket_path})",
                              socket=str(self.socket_path))
        self.channel = grpc.insecure_channel(f"unix:{self.socket_path}")
        self.stub = hbf_pb2_grpc.HbfdStub(self.channel)

    def call(self, method: str, request=None, **kw):
        req_cls = getattr(self.pb, f"{method}Request")
        request = request if request is not None else req_cls(**kw)
        try:
            reply = getattr(self.stub, method)(request, timeout=self.timeout_s)
        except self._grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            raise DaemonError(f"no hbfd answering on {self.socket_path} ({code.name if code else e})",
                              socket=str(self.socket_path)) from None
        if reply.HasField("error") and reply.error.code != 0:
            err = reply.error
            raise HbfError(err.message, code=ErrorCode(err.code), **dict(err.fields))
        return reply

    def close(self) -> None:
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
