"""Parsing of environment variables for the per-binary ``knobs.py`` modules (DESIGN.md §6).

Each binary still reads its variables in its one ``knobs.py``; these helpers only make the parsing
the same everywhere: unset or empty means the default, anything malformed or out of range is a
ConfigError naming the variable and the value (never a silent fallback).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Optional

from hbfcommon.errors import ConfigError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def env_bool(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    if v.lower() in _TRUE:
        return True
    if v.lower() in _FALSE:
        return False
    raise ConfigError(f"{name} must be a boolean (1/0, true/false, yes/no, on/off)", variable=name, value=v)


def env_int(name: str, default: int, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """An integer (``int(v, 0)``: decimal, 0x.., 0o.., 0b..) within [lo, hi] when given."""
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        n = int(v, 0)
    except ValueError:
        raise ConfigError(f"{name} must be an integer", variable=name, value=v) from None
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise ConfigError(f"{name} must be in [{lo if lo is not None else '-inf'}, "
                          f"{hi if hi is not None else 'inf'}]", variable=name, value=v)
    return n


def env_path(name: str) -> Optional[Path]:
    v = os.environ.get(name)
    return Path(v) if v else None


@contextlib.contextmanager
def env_set(values: dict):
    """os.environ with ``values`` (str() of each) set for the block, each restored after it (unset again where it
    was unset): a build variant's knobs, read by the tools it runs."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
