"""The paper's synthetic MoE stream: mt19937_64 and libstdc++'s std::shuffle, checked against the C++ library
when g++ is installed (otherwise against values it printed)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from hbfd.capacity.streams import MoeStream, Mt19937_64, moe_stream

CXX = r"""
#include <random>
#include <algorithm>
#include <cstdio>
#include <vector>
int main(){ std::mt19937_64 rng(5); std::vector<unsigned long long> e(16);
 for(int t=0;t<4;t++) for(int l=0;l<8;l++){ for(int i=0;i<16;i++) e[i]=i; std::shuffle(e.begin(),e.end(),rng);
   for(int s=0;s<4;s++) for(int p=0;p<8;p++) printf("%llu\n",(l*16+e[s])*8+p); } }
"""


def test_mt19937_64_reference_values():
    assert Mt19937_64(5489)() == 14514284786278117030            # the standard's first output of the default seed
    g = Mt19937_64(5489)
    for _ in range(9999):
        g()
    assert g() == 9981545732273789042                            # [rand.predef]: the 10000th output


def test_the_stream_shape():
    s = moe_stream()
    assert len(s) == 1024 and s.max() == 1023 and len(np.unique(s)) == 664
    assert (s.reshape(-1, 8) - s.reshape(-1, 8)[:, :1] == np.arange(8)).all()   # experts read in order
    assert MoeStream().pages == 1024


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_the_stream_equals_libstdcxx(tmp_path):
    (tmp_path / "s.cpp").write_text(CXX)
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "s"), str(tmp_path / "s.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "s")], capture_output=True, text=True, check=True).stdout
    assert [int(x) for x in out.split()] == moe_stream().tolist()
