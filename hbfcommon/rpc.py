"""The one gRPC client of hbfd (proto/hbf.proto) and the one rule for where hbfd listens.

Used by hbfctl, the workload runtime (runtime_cuda), the demo, tests and benches. Replies carry errors
as an ``Error`` message; :meth:`Client.call` turns a nonzero code into an :class:`HbfError` with the same
stable code, and an unreachable daemon into ``DaemonError`` (DAEMON_UNAVAILABLE). grpc and the generated
stubs are imported only when a client is made, so this contract layer imports without them.
"""
from __future__ import annotations

import os
from pathlib import Path

from hbfcommon.errors import ConfigError, DaemonError, ErrorCode, HbfError

DEFAULT_TIMEOUT_S = 10.0
MAX_MESSAGE_BYTES = 64 << 20    # gRPC send/receive limit of hbfd and its clients (a large summary fits)
REPORT_MAX_BYTES = 1 << 20      # one Report's JSON text (hbfd refuses a longer one)


def message_size_options() -> list[tuple[str, int]]:
    """The gRPC channel/server options for :data:`MAX_MESSAGE_BYTES`, the same on both ends."""
    return [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]


def default_socket() -> Path:
    """Where hbfd listens when no socket is named, the same for the daemon and every client:
    ``$HBFD_SOCKET`` (``$HBF_SOCKET`` is accepted as its older workload-side spelling), else
    ``$XDG_RUNTIME_DIR/hbfd.sock`` when that directory exists, else ``/tmp/hbfd-<uid>.sock``."""
    v = os.environ.get("HBFD_SOCKET") or os.environ.get("HBF_SOCKET")
    if v:
        return Path(v)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / "hbfd.sock"
    return Path(f"/tmp/hbfd-{os.getuid()}.sock")


def rpc_timeout_s() -> float:
    """``$HBF_RPC_TIMEOUT_S``: deadline of one gRPC call to hbfd (default 10 s)."""
    v = os.environ.get("HBF_RPC_TIMEOUT_S")
    if not v:
        return DEFAULT_TIMEOUT_S
    try:
        t = float(v)
    except ValueError:
        raise ConfigError("HBF_RPC_TIMEOUT_S must be a number", variable="HBF_RPC_TIMEOUT_S", value=v) from None
    if not (t > 0 and t < float("inf")):
        raise ConfigError("HBF_RPC_TIMEOUT_S must be a positive finite number", variable="HBF_RPC_TIMEOUT_S",
                          value=v)
    return t


class Client:
    """A connection to one hbfd. ``call("Status")`` builds the request from keyword arguments when none
    is given. Usable as a context manager."""

    def __init__(self, socket: str | os.PathLike | None = None, *, timeout_s: float | None = None) -> None:
        import grpc  # noqa: PLC0415

        from hbfproto import hbf_pb2, hbf_pb2_grpc  # noqa: PLC0415
        self.socket_path = Path(socket) if socket else default_socket()
        self.timeout_s = float(timeout_s) if timeout_s is not None else rpc_timeout_s()
        self.pb = hbf_pb2
        self._grpc = grpc
        if not self.socket_path.exists():
            raise DaemonError(f"no hbfd is running (no socket at {self.socket_path})",
                              socket=str(self.socket_path))
        self.channel = grpc.insecure_channel(f"unix:{self.socket_path}", options=message_size_options())
        self.stub = hbf_pb2_grpc.HbfdStub(self.channel)

    @property
    def socket(self) -> str:
        return str(self.socket_path)

    def call(self, method: str, request=None, *, timeout_s: float | None = None, **kw):
        """One RPC; ``timeout_s`` replaces the client's deadline for this call only (a call whose work grows
        with its argument, e.g. unregistering a capacity range with many dirty frames to write back)."""
        if request is None:
            request = getattr(self.pb, f"{method}Request")(**kw)
        deadline = self.timeout_s if timeout_s is None else float(timeout_s)
        try:
            reply = getattr(self.stub, method)(request, timeout=deadline)
        except self._grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            details = e.details() if hasattr(e, "details") else str(e)
            if code == self._grpc.StatusCode.RESOURCE_EXHAUSTED:   # hbfd answered, but too much
                raise HbfError(f"hbfd's {method} message exceeds the gRPC limit of {MAX_MESSAGE_BYTES} bytes "
                               f"({details})", code=ErrorCode.INVALID_ARGUMENT, socket=str(self.socket_path),
                               limit_bytes=MAX_MESSAGE_BYTES) from None
            raise DaemonError(f"no hbfd answering {method} on {self.socket_path} "
                              f"({code.name if code else ''}: {details})",
                              socket=str(self.socket_path), grpc_code=str(code), deadline_s=deadline) from None
        if reply.HasField("error") and reply.error.code != 0:
            err = reply.error
            try:
                code = ErrorCode(err.code)
            except ValueError:
                code = ErrorCode.INTERNAL
            raise HbfError(err.message, code=code, **dict(err.fields))
        return reply

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
