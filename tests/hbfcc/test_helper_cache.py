"""The prepared helper module kept between processes ($HBFCC_CACHE_DIR/helper-parsed, hbfcc.helpers):
read back instead of parsed, the same module and the same rewrites as a fresh parse, keyed so that
another helper file or other bytes are parsed, and never trusted when its entry is damaged."""
from __future__ import annotations

import logging
import pickle
import shutil
import sys
from pathlib import Path

import pytest

from hbfcc import helpers as H
from hbfcc.rewrite import rewrite_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache dir, no process-level cache, and a count of real parses of the helper."""
    monkeypatch.setenv("HBFCC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HBFCC_HELPER_PTX", raising=False)
    if not H.default_helper_path().is_file():
        pytest.skip("helper build missing (make helpers-ptx)")
    calls = []
    real = H.parse_module

    def counting(text, filename="<ptx>", **kw):     # the real parser, counted
        calls.append(filename)
        return real(text, filename=filename, **kw)
    monkeypatch.setattr(H, "parse_module", counting)
    H._load_helper_cached.cache_clear()
    H._load_eidola_cached.cache_clear()
    yield calls
    H._load_helper_cached.cache_clear()
    H._load_eidola_cached.cache_clear()


def _entries(tmp_path) -> list[Path]:
    return sorted((tmp_path / "cache" / H.PARSED_CACHE_SUBDIR).glob("*.pickle"))


def test_written_once_then_read_back_equal(fresh, tmp_path):
    first = H.load_helper()
    assert len(fresh) == 1 and len(_entries(tmp_path)) == 1
    H._load_helper_cached.cache_clear()            # a new process: the entry, not the parser
    second = H.load_helper()
    assert len(fresh) == 1
    assert second == first and second.ref_map == first.ref_map and second.roots == first.roots
    assert second.sha256 == first.sha256 and second.path == str(H.default_helper_path())


def test_rewrites_identical_with_and_without_the_entry(fresh, tmp_path):
    texts = [p.read_text() for p in sorted((FIXTURES / "triton").glob("*.ptx"))[:6]]
    assert texts
    parsed = [rewrite_text(t, filename=f"m{i}.ptx").text for i, t in enumerate(texts)]
    H._load_helper_cached.cache_clear()
    assert _entries(tmp_path)
    n = len(fresh)
    cached = [rewrite_text(t, filename=f"m{i}.ptx").text for i, t in enumerate(texts)]
    assert len(fresh) == n                          # no helper parse: the modules' own parses are not counted here
    assert cached == parsed


def test_other_bytes_or_path_parsed_again(fresh, tmp_path):
    H.load_helper()
    other = tmp_path / "copy.ptx"
    shutil.copyfile(H.default_helper_path(), other)
    H.load_helper(str(other))                       # same bytes, another path: its own entry
    assert len(fresh) == 2 and len(_entries(tmp_path)) == 2
    with open(other, "a") as f:
        f.write("\n// changed\n")
    H._load_helper_cached.cache_clear()
    got = H.load_helper(str(other))
    assert len(fresh) == 3 and len(_entries(tmp_path)) == 3
    assert got.sha256 != H.load_helper().sha256


def test_damaged_or_foreign_entry_is_parsed_again(fresh, tmp_path, caplog):
    good = H.load_helper()
    (entry,) = _entries(tmp_path)
    entry.write_bytes(entry.read_bytes()[:1000])    # truncated
    H._load_helper_cached.cache_clear()
    with caplog.at_level(logging.WARNING, logger="hbfcc.helpers"):
        assert H.load_helper() == good
    assert len(fresh) == 2 and "unreadable" in caplog.text
    # a valid pickle of another module under this key: not trusted
    other = H.load_eidola_helper()
    entry.write_bytes(pickle.dumps(other))
    H._load_helper_cached.cache_clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hbfcc.helpers"):
        assert H.load_helper() == good
    assert "not the module it is keyed by" in caplog.text
    # and the entry was replaced by the right one
    H._load_helper_cached.cache_clear()
    n = len(fresh)
    assert H.load_helper() == good and len(fresh) == n


def test_key_names_rewriter_abi_and_python(fresh, tmp_path, monkeypatch):
    p, sha = str(H.default_helper_path()), "0" * 64
    a = H.parsed_cache_path("helper", p, sha)
    assert H.parsed_cache_path("eidola helper", p, sha) != a
    monkeypatch.setattr(H, "rewriter_sha", lambda: "f" * 64)
    assert H.parsed_cache_path("helper", p, sha) != a
    monkeypatch.undo()
    monkeypatch.setattr(H, "_abi_sha", lambda: "e" * 64)     # the ABI the module is checked against
    assert H.parsed_cache_path("helper", p, sha) != a
    monkeypatch.undo()
    monkeypatch.setattr(sys, "version_info", (3, 99, 0))
    assert H.parsed_cache_path("helper", p, sha) != a


def test_unwritable_cache_still_loads(fresh, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("HBFCC_CACHE_DIR", str(blocker))
    assert H.load_helper().sha256
    assert len(fresh) == 1


def test_eidola_helper_cached_too(fresh, tmp_path):
    if not H.default_eidola_helper_path().is_file():
        pytest.skip("eidola helper build missing")
    a = H.load_eidola_helper()
    H._load_eidola_cached.cache_clear()
    n = len(fresh)
    b = H.load_eidola_helper()
    assert b == a and len(fresh) == n and b.role == "eidola helper"
