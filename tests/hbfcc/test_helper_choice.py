"""The default helper build is chosen per module: lean unless the module uses tensor-core ops."""
from __future__ import annotations

import pytest

from hbfcc import helpers as H


def test_lean_for_plain_module_direct_for_tensor_core(monkeypatch, tmp_path):
    monkeypatch.delenv("HBFCC_HELPER_PTX", raising=False)
    if not H.lean_helper_path().is_file():
        pytest.skip("lean helper build missing (make helpers-ptx)")
    plain = ".version 9.0\n.target sm_90a\n.address_size 64\n.visible .entry k() { ret; }\n"
    wg = plain.replace("ret;", "wgmma.fence.sync.aligned;\n ret;")
    mma = plain.replace("ret;", "@%p1 mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2,%f3,%f4}, "
                        "{%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f1,%f2,%f3,%f4};\n ret;")
    assert H.choose_helper_path(plain) == H.lean_helper_path()
    assert H.choose_helper_path(wg) == H.default_helper_path()
    assert H.choose_helper_path(mma) == H.default_helper_path()
    assert H.choose_helper_path(None) == H.default_helper_path()
    # an explicit choice always wins
    assert H.load_helper(str(H.default_helper_path()), module_text=plain).path == str(H.default_helper_path())
    assert H.load_helper(module_text=plain).path == str(H.lean_helper_path())
    monkeypatch.setenv("HBFCC_HELPER_PTX", str(H.default_helper_path()))
    assert H.load_helper(module_text=plain).path == str(H.default_helper_path())
