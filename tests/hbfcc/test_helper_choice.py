"""The default helper build is the direct one, for every module; lean is chosen by name."""
from __future__ import annotations

import pytest

from hbfcc import helpers as H


def test_direct_by_default_lean_by_name(monkeypatch, tmp_path):
    monkeypatch.delenv("HBFCC_HELPER_PTX", raising=False)
    if not H.lean_helper_path().is_file() or not H.default_helper_path().is_file():
        pytest.skip("helper builds missing (make helpers-ptx)")
    plain = ".version 9.0\n.target sm_90a\n.address_size 64\n.visible .entry k() { ret; }\n"
    wg = plain.replace("ret;", "wgmma.fence.sync.aligned;\n ret;")
    for text in (plain, wg, None):
        assert H.choose_helper_path(text) == H.default_helper_path()
    assert H.load_helper(module_text=plain).path == str(H.default_helper_path())
    # an explicit choice always wins
    assert H.load_helper(str(H.lean_helper_path()), module_text=plain).path == str(H.lean_helper_path())
    monkeypatch.setenv("HBFCC_HELPER_PTX", str(H.lean_helper_path()))
    assert H.load_helper(module_text=plain).path == str(H.lean_helper_path())
