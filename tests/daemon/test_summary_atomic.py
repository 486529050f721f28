"""The summary is written by atomic replace: never partial, old file intact on failure."""
from __future__ import annotations

import json
import threading

import pytest

from hbfd.summary import canonical_json, write_json_atomic


def test_canonical_is_deterministic_and_refuses_nan():
    assert canonical_json({"b": 1, "a": [1, 2]}) == canonical_json({"a": [1, 2], "b": 1})
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_failed_write_leaves_the_old_summary_intact(tmp_path):
    p = tmp_path / "summary.json"
    write_json_atomic(p, {"run": 1})
    before = p.read_bytes()
    with pytest.raises(TypeError):
        write_json_atomic(p, {"run": 2, "bad": object()})      # not serializable
    with pytest.raises(ValueError):
        write_json_atomic(p, {"run": 3, "bad": float("inf")})
    assert p.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["summary.json"], "temp file left behind"


def test_failure_while_writing_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    import os
    p = tmp_path / "summary.json"
    write_json_atomic(p, {"run": 1})

    def boom(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        write_json_atomic(p, {"run": 2})
    assert json.loads(p.read_text()) == {"run": 1}
    assert [x.name for x in tmp_path.iterdir()] == ["summary.json"]


def test_a_reader_never_sees_a_partial_file(tmp_path):
    p = tmp_path / "summary.json"
    big = {"rows": [{"i": i, "pad": "x" * 200} for i in range(2000)]}   # ~450 KB
    write_json_atomic(p, {**big, "n": -1})
    stop = threading.Event()
    seen, bad = [], []

    def reader():
        while not stop.is_set():
            try:
                seen.append(json.loads(p.read_text())["n"])
            except Exception as e:  # a torn read would land here
                bad.append(repr(e))
    t = threading.Thread(target=reader)
    t.start()
    for n in range(40):
        write_json_atomic(p, {**big, "n": n})
    stop.set()
    t.join()
    assert not bad, bad[:3]
    assert len(seen) > 5 and json.loads(p.read_text())["n"] == 39
