"""The summary is written by atomic replace: never partial, old file intact on failure."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from atomic_testutil import assert_readers_never_see_a_partial_file  # noqa: E402

from hbfd.summary import canonical_json, write_json_atomic  # noqa: E402


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
    assert_readers_never_see_a_partial_file(tmp_path / "summary.json", lambda p, doc, n: write_json_atomic(p, doc))
