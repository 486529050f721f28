"""The canonical run summary: deterministic JSON, written by atomic replace."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

SUMMARY_SCHEMA = "hbfsim.summary/1"


def canonical_json(obj: Any) -> str:
    """Sorted keys, 2-space indent, no NaN (a NaN in a summary is a bug: refuse it)."""
    return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n"


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` to ``path`` so that readers see the old file or the whole new one, never a
    part: serialize first, write a temp file in the same directory, fsync, os.replace.
    On any failure the old file is untouched and the temp file is removed."""
    path = Path(path)
    text = canonical_json(obj)           # fails before anything touches the disk
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename durable
        dfd = os.open(path.parent or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return path
