"""Atomic file replacement: a reader sees the old file or the whole new one, never a part.

The one implementation for the whole project (DESIGN.md §6: "nothing lost or half-written").
Every writer follows the same steps: build the payload first (a serialization error touches
nothing on disk), write it to a temp file in the destination's directory (same filesystem, so
the rename is atomic), flush + fsync, ``os.replace`` onto the destination, fsync the directory so
the rename is durable. On any failure the temp file is removed and the old file is untouched.

* :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`atomic_write_json` write a
  payload held in memory.
* :func:`atomic_output` is for files another program produces (``nvcc -o TMP``,
  ``fig.savefig(TMP)``): it yields the temp path and replaces the destination with it only when
  the ``with`` block finishes without an exception.

Temp files are created with mode 0666 less the umask (like ``open(path, "w")``), not mkstemp's
0600, so the final file's permissions are those of an ordinary write.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_output",
           "read_json_document"]

StrPath = str | os.PathLike[str]


def _tmp_name(path: Path, suffix: str) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp{suffix}")


def remove_stale_tmp(path: StrPath) -> list[Path]:
    """Remove the temp files that an atomic write of ``path`` left behind when its writer was
    killed: only names of exactly our pattern (``.<name>.<pid>.<8 hex>.tmp<suffix>`` beside
    ``path``, :func:`_tmp_name`), only regular files (never a link or a directory), and only
    when that pid is no longer a live process (a running writer's temp file is left alone).
    Returns what was removed."""
    import re
    p = Path(path)
    pat = re.compile(r"\." + re.escape(p.name) + r"\.(\d+)\.[0-9a-f]{8}\.tmp(" + re.escape(p.suffix) + r")?\Z")
    out: list[Path] = []
    try:
        entries = list(os.scandir(p.parent))
    except OSError:
        return out
    for e in entries:
        m = pat.match(e.name)
        if not m or not e.is_file(follow_symlinks=False):
            continue
        pid = int(m.group(1))
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue                            # alive (or not ours to signal): leave it
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, OSError):
            continue
        try:
            os.unlink(e.path)
            out.append(Path(e.path))
        except OSError:
            pass
    return out


def _unlink_quietly(p: Path) -> None:
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass


def _fsync_dir(d: Path) -> None:
    """Make a rename durable; best effort (some filesystems refuse O_DIRECTORY fsync)."""
    try:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _fsync_file(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: StrPath, data: bytes, *, fsync: bool = True,
                       make_parents: bool = True) -> Path:
    """Replace ``path`` with ``data`` atomically; returns ``path`` as a Path.

    ``make_parents`` creates missing parent directories; with False a missing directory is an
    error (FileNotFoundError), as for a plain open."""
    p = Path(path)
    data = bytes(data)                      # a bad payload fails before the disk is touched
    if make_parents:
        p.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(p, "")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    if fsync:
        _fsync_dir(p.parent)
    return p


def atomic_write_text(path: StrPath, text: str, *, encoding: str = "utf-8", fsync: bool = True,
                      make_parents: bool = True) -> Path:
    """:func:`atomic_write_bytes` of ``text`` encoded with ``encoding`` (UTF-8 by default)."""
    return atomic_write_bytes(path, text.encode(encoding), fsync=fsync, make_parents=make_parents)


def atomic_write_json(path: StrPath, obj: Any, *, end: str = "", fsync: bool = True,
                      make_parents: bool = True, **json_kw: Any) -> Path:
    """Serialize ``obj`` with ``json.dumps(obj, **json_kw)`` + ``end`` and write it atomically.

    Serialization happens first: a TypeError/ValueError (unserializable object, NaN with
    ``allow_nan=False``) leaves the old file and the directory exactly as they were."""
    text = json.dumps(obj, **json_kw) + end
    return atomic_write_text(path, text, fsync=fsync, make_parents=make_parents)


@contextlib.contextmanager
def atomic_output(path: StrPath, *, suffix: str | None = None, fsync: bool = True,
                  make_parents: bool = True) -> Iterator[Path]:
    """Yield a temp path next to ``path`` for a producer to write; on a clean exit of the block
    the temp file replaces ``path`` atomically; on an exception (or if the producer wrote
    nothing) the temp file is removed and ``path`` is untouched.

    ``suffix`` is appended to the temp name (default: ``path``'s own suffix) for producers that
    choose a format by extension (matplotlib's savefig)."""
    p = Path(path)
    if make_parents:
        p.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(p, p.suffix if suffix is None else suffix)
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"atomic_output: nothing was written to {tmp} for {p}")
        if fsync:
            _fsync_file(tmp)
        os.replace(tmp, p)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    if fsync:
        _fsync_dir(p.parent)


class JsonDocument(NamedTuple):
    where: str      # the path actually read, as str (for messages and ``file=`` fields)
    raw: bytes      # the file's bytes (hash these: sha256 of what was read)
    text: str       # the bytes decoded as UTF-8
    data: Any       # the parsed JSON


JSON_MAX_BYTES = 4 << 20      # a JSON input (profile, geometry) larger than this is refused unread
JSON_MAX_DEPTH = 32           # containers nested deeper than this are refused (ours nest <= 6)


class _JsonRefused(Exception):
    """Raised inside the parse hooks; carries (message, dotted field)."""


def _parse_json(text: str) -> Any:
    """``json.loads`` that records duplicate keys (object_pairs_hook) instead of letting the last win."""
    dups: dict[int, str] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for k, v in items:
            if k in d and id(d) not in dups:
                dups[id(d)] = k
            d[k] = v
        return d

    data = json.loads(text, object_pairs_hook=pairs)
    _walk_json(data, dups)
    return data


def _walk_json(data: Any, dups: dict[int, str]) -> None:
    """Iteratively check what the parser let through: depth, duplicate keys, non-finite numbers
    (``NaN``, ``Infinity``, ``1e400``). Raises :class:`_JsonRefused` naming the dotted field."""
    stack: list[tuple[Any, tuple, int]] = [(data, (), 0)]
    while stack:
        obj, path, depth = stack.pop()
        name = ".".join(map(str, path)) or "<root>"
        if isinstance(obj, (dict, list)):
            if depth >= JSON_MAX_DEPTH:
                raise _JsonRefused(f"nested deeper than {JSON_MAX_DEPTH} levels", name)
            if isinstance(obj, dict):
                if id(obj) in dups:
                    k = dups[id(obj)]
                    raise _JsonRefused(f"duplicate key {k!r}", ".".join(map(str, path + (k,))))
                items = obj.items()
            else:
                items = enumerate(obj)
            for k, v in items:
                stack.append((v, path + (k,), depth + 1))
        elif isinstance(obj, float) and not math.isfinite(obj):
            raise _JsonRefused(f"{obj!r} is not a finite number", name)


def read_json_document(path: StrPath, *, what: str, error: Callable[..., Exception],
                       search_dir: Path | None = None, max_bytes: int = JSON_MAX_BYTES) -> JsonDocument:
    """Read and parse one JSON file, failing loudly with ``error`` (an HbfError subclass).

    ``path`` may be a bare name (no suffix, not an existing file) found as ``search_dir/NAME.json``.
    Only a regular file of at most ``max_bytes`` is read (a FIFO, a device or a directory is refused
    without blocking: it is opened non-blocking and checked with fstat before any read). The JSON
    must be strict: no duplicate keys, no ``NaN``/``Infinity`` (nor a number too large for a float),
    at most :data:`JSON_MAX_DEPTH` levels of nesting.

    Failures raise ``error(msg, file=where, field=F)``: F is ``"<file>"`` with msg
    ``"{where}: cannot read {what}: {why}"`` or ``"{where}: not valid JSON: {detail}"``; a duplicate
    key, a non-finite number or too deep a nesting names its dotted field as F."""
    p = Path(path)
    if search_dir is not None and not p.exists() and not p.suffix and (search_dir / f"{p}.json").exists():
        p = search_dir / f"{p}.json"
    where = str(p)
    raw = read_regular_bytes(p, what=what, error=error, max_bytes=max_bytes)
    try:
        text = raw.decode("utf-8")
        data = _parse_json(text)
    except _JsonRefused as e:
        msg, name = e.args
        raise error(f"{where}: field {name!r}: {msg}", file=where, field=name) from None
    except RecursionError:
        raise error(f"{where}: not valid JSON: nested deeper than {JSON_MAX_DEPTH} levels",
                    file=where, field="<file>") from None
    except (UnicodeDecodeError, ValueError) as e:   # JSONDecodeError, and ints over the digit limit
        raise error(f"{where}: not valid JSON: {e}", file=where, field="<file>") from e
    return JsonDocument(where, raw, text, data)


def read_regular_bytes(path: StrPath, *, what: str, error: Callable[..., Exception], max_bytes: int) -> bytes:
    """The bytes of one regular file of at most ``max_bytes``, failing with ``error(msg, file=where,
    field="<file>")`` and msg ``"{where}: cannot read {what}: {why}"``: a FIFO, a socket, a device or a
    directory is refused without blocking (opened non-blocking and checked with fstat before any read)."""
    where = str(path)

    def refuse(why: str, cause: BaseException | None = None):
        raise error(f"{where}: cannot read {what}: {why}", file=where, field="<file>") from cause

    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        refuse(e.strerror or str(e), e)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device" if
                    (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) else "not a regular file")
            refuse(f"{kind}, not a regular file")
        if st.st_size > max_bytes:
            refuse(f"{st.st_size} bytes, more than the {max_bytes} B limit")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1
            raw = f.read(max_bytes + 1)
    except OSError as e:
        refuse(e.strerror or str(e), e)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(raw) > max_bytes:                 # grew between fstat and read
        refuse(f"more than the {max_bytes} B limit")
    return raw
