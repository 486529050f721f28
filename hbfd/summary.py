"""The canonical run summary: deterministic JSON, written by atomic replace."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hbfcommon.fsutil import atomic_write_text

SUMMARY_SCHEMA = "hbfsim.summary/1"


def canonical_json(obj: Any) -> str:
    """Sorted keys, 2-space indent, no NaN (a NaN in a summary is a bug: refuse it)."""
    return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n"


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` to ``path`` so that readers see the old file or the whole new one, never a
    part (:func:`hbfcommon.fsutil.atomic_write_text`: serialize first, temp file in the same
    directory, fsync, os.replace). On any failure the old file is untouched and the temp file is
    removed. The parent directory must exist."""
    text = canonical_json(obj)           # fails before anything touches the disk
    return atomic_write_text(path, text, make_parents=False)
