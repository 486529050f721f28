"""Shared check for the atomic-replace writers (hbfcommon.fsutil, hbfd.summary); not a test module."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path


def assert_readers_never_see_a_partial_file(path: Path, write: Callable[[Path, dict, int], object]) -> None:
    """``write(path, doc, n)`` writes the JSON ``doc`` (~450 KB) to ``path`` (n = None), then replaces it
    40 times (n = 0..39) while a thread keeps reading it: every read must parse, and the last write
    must be what is left."""
    big = {"rows": [{"i": i, "pad": "x" * 200} for i in range(2000)]}   # ~450 KB
    write(path, {**big, "n": -1}, None)
    stop = threading.Event()
    seen, bad = [], []

    def reader():
        while not stop.is_set():
            try:
                seen.append(json.loads(path.read_text())["n"])
            except Exception as e:  # a torn read would land here
                bad.append(repr(e))
    t = threading.Thread(target=reader)
    t.start()
    for n in range(40):
        write(path, {**big, "n": n}, n)
    stop.set()
    t.join()
    assert not bad, bad[:3]
    assert len(seen) > 5 and json.loads(path.read_text())["n"] == 39
