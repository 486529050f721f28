"""hbfcommon.fsutil: atomic replacement — never a partial file, old file intact on any failure."""
from __future__ import annotations

import json
import os
import stat

import pytest
from atomic_testutil import assert_readers_never_see_a_partial_file

from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import (atomic_output, atomic_write_bytes, atomic_write_json, atomic_write_text,
                              read_json_document)


def _names(d):
    return sorted(x.name for x in d.iterdir())


def test_writes_bytes_text_json_and_creates_parents(tmp_path):
    b = atomic_write_bytes(tmp_path / "a" / "b" / "x.bin", b"\x00\x01")
    assert b.read_bytes() == b"\x00\x01"
    t = atomic_write_text(tmp_path / "t.md", "| 5% | −1 |\n")
    assert t.read_text(encoding="utf-8") == "| 5% | −1 |\n"
    j = atomic_write_json(tmp_path / "j.json", {"b": 1, "a": [1.5]}, end="\n", indent=1, sort_keys=True)
    assert j.read_text() == json.dumps({"a": [1.5], "b": 1}, indent=1) + "\n"
    atomic_write_json(j, {"n": 2})                       # replaces an existing file
    assert json.loads(j.read_text()) == {"n": 2}
    assert _names(tmp_path) == ["a", "j.json", "t.md"]


def test_make_parents_false_refuses_a_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "missing" / "x.txt", "x", make_parents=False)
    assert _names(tmp_path) == []


def test_mode_is_that_of_an_ordinary_write(tmp_path):
    ref = tmp_path / "ref"
    ref.write_text("x")
    p = atomic_write_text(tmp_path / "p", "x")
    assert stat.S_IMODE(p.stat().st_mode) == stat.S_IMODE(ref.stat().st_mode)


def test_serialization_failure_leaves_old_file_and_no_temp(tmp_path):
    p = tmp_path / "s.json"
    atomic_write_json(p, {"run": 1})
    before = p.read_bytes()
    with pytest.raises(TypeError):
        atomic_write_json(p, {"bad": object()})
    with pytest.raises(ValueError):
        atomic_write_json(p, {"bad": float("nan")}, allow_nan=False)
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(p, "\udcff", encoding="utf-8")
    assert p.read_bytes() == before
    assert _names(tmp_path) == ["s.json"]


@pytest.mark.parametrize("fail", ["write", "fsync", "replace"])
def test_io_failure_leaves_old_file_and_no_temp(tmp_path, monkeypatch, fail):
    p = tmp_path / "s.json"
    atomic_write_json(p, {"run": 1})

    def boom(*a, **k):
        raise OSError(28, "No space left on device")
    if fail == "write":                  # half the payload reaches the temp file, then ENOSPC
        real_fdopen = os.fdopen

        class HalfWriter:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def write(self, data):
                self.f.write(data[: len(data) // 2])
                self.f.flush()
                boom()
        monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: HalfWriter(real_fdopen(fd, *a, **k)))
    else:
        monkeypatch.setattr(os, fail, boom)
    with pytest.raises(OSError):
        atomic_write_json(p, {"run": 2})
    monkeypatch.undo()
    assert json.loads(p.read_text()) == {"run": 1}
    assert _names(tmp_path) == ["s.json"]


def test_a_reader_never_sees_a_partial_file(tmp_path):
    assert_readers_never_see_a_partial_file(
        tmp_path / "big.json", lambda p, doc, n: atomic_write_json(p, doc, fsync=(n is None or n % 2 == 0)))


def test_atomic_output_replaces_only_on_success(tmp_path):
    p = tmp_path / "out" / "lib.ptx"
    with atomic_output(p) as tmp:
        assert tmp.parent == p.parent and tmp.suffix == ".ptx" and tmp != p
        tmp.write_text("v1")
    assert p.read_text() == "v1"

    with pytest.raises(RuntimeError):
        with atomic_output(p) as tmp:
            tmp.write_text("half")
            raise RuntimeError("producer failed")
    assert p.read_text() == "v1"
    assert _names(p.parent) == ["lib.ptx"]

    with pytest.raises(FileNotFoundError):           # producer exited cleanly but wrote nothing
        with atomic_output(p):
            pass
    assert p.read_text() == "v1"
    assert _names(p.parent) == ["lib.ptx"]

    with atomic_output(p, suffix=".tmp") as tmp:
        assert tmp.name.endswith(".tmp")
        tmp.write_bytes(b"v2")
    assert p.read_bytes() == b"v2"
    assert _names(p.parent) == ["lib.ptx"]


def test_read_json_document_names_the_file_and_finds_bare_names(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "nominal.json").write_bytes(b'{"a": 1}')
    monkeypatch.chdir(tmp_path)
    doc = read_json_document("nominal", what="profile", error=ConfigError, search_dir=lib)
    assert doc.where == str(lib / "nominal.json") and doc.data == {"a": 1}
    assert doc.raw == b'{"a": 1}' and doc.text == '{"a": 1}'
    with pytest.raises(ConfigError, match=r"absent\.json: cannot read thermal geometry: ") as ei:
        read_json_document(tmp_path / "absent.json", what="thermal geometry", error=ConfigError)
    assert ei.value.fields == {"file": str(tmp_path / "absent.json"), "field": "<file>"}
    for bad in (b"{nope", b"\xff\xfe"):
        (tmp_path / "bad.json").write_bytes(bad)
        with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON: "):
            read_json_document(tmp_path / "bad.json", what="profile", error=ConfigError, search_dir=lib)
    with pytest.raises(ConfigError, match="cannot read profile"):    # no search_dir: no lookup
        read_json_document("nominal", what="profile", error=ConfigError)
