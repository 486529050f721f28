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
import os
import secrets
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


def read_json_document(path: StrPath, *, what: str, error: Callable[..., Exception],
                       search_dir: Path | None = None) -> JsonDocument:
    """Read and parse one JSON file, failing loudly with ``error`` (an HbfError subclass).

    ``path`` may be a bare name (no suffix, not an existing file) found as ``search_dir/NAME.json``.
    Failures raise ``error(msg, file=where, field="<file>")`` with msg
    ``"{where}: cannot read {what}: {strerror}"`` or ``"{where}: not valid JSON: {detail}"``."""
    p = Path(path)
    if search_dir is not None and not p.exists() and not p.suffix and (search_dir / f"{p}.json").exists():
        p = search_dir / f"{p}.json"
    where = str(p)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise error(f"{where}: cannot read {what}: {e.strerror}", file=where, field="<file>") from e
    try:
        text = raw.decode("utf-8")
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{where}: not valid JSON: {e}", file=where, field="<file>") from e
    return JsonDocument(where, raw, text, data)
