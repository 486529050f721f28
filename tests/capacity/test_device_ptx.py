"""Capacity mode's device half (runtime_cuda/src/hbf_capacity.cuh), as far as the CPU can check it: it compiles to
PTX and assembles with ptxas for sm_90a within a register/spill budget, with the protocol's instructions (pin by
atomic add, the sc fences, the marker exchange, all at system scope: the words are in hbfd's shared capacity
region). NOT GPU-verified. The helper library includes it (hbf_helpers.cu -> hbf_cap_helpers.cuh)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL = r"""
#include "hbf_capacity.cuh"
extern "C" __global__ void cap_sum(const hbf_cap_range* r, unsigned long long base, unsigned int n, float* out) {
    float acc = 0.f;
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
        unsigned int f, st, w;
        unsigned long long a = __hb_cap_access(r, base + 4ull * i, 0u, 7u, &f, &st, &w);
        if (!a) asm volatile("exit;");
        acc += *(const float*)a;
        hb_cap_unpin(r, f);
    }
    out[threadIdx.x] = acc;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None or shutil.which("ptxas") is None:
        pytest.skip("nvcc/ptxas not installed")
    d = tmp_path_factory.mktemp("capptx")
    (d / "t.cu").write_text(KERNEL)
    inc = [f"-I{ROOT / 'runtime_cuda' / 'include'}", f"-I{ROOT / 'runtime_cuda' / 'src'}"]
    subprocess.run(["nvcc", "-rdc=true", "-ptx", "-arch=sm_90a", *inc, str(d / "t.cu"), "-o", str(d / "t.ptx")],
                   check=True, capture_output=True, text=True)
    r = subprocess.run(["ptxas", "-arch=sm_90a", "-c", "-v", str(d / "t.ptx"), "-o", str(d / "t.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return (d / "t.ptx").read_text(), r.stderr + r.stdout


def test_assembles_for_sm90a_within_budget(built):
    ptx, log = built
    regs = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\w+)\n.*?\n(?:ptxas info\s+: Used (\d+) registers)?", log, flags=re.S) if m.group(2)}
    m = re.search(r"Used (\d+) registers", log)
    assert m and int(m.group(1)) <= 32, log                       # the kernel around the access
    spill = re.search(r"Function properties for \w*__hb_cap_access\w*\n\s+(\d+) bytes stack frame, (\d+) bytes spill",
                      log)
    assert spill and int(spill.group(2)) <= 128, log               # callee-saved registers around the two calls


def test_the_protocol_is_in_the_ptx(built):
    ptx, _ = built
    body = ptx[ptx.index("__hb_cap_access"):]
    assert "atom.relaxed.sys.global.add.u32" in body              # pin (global space, system scope)
    assert "fence.sc.sys" in body                                 # pin -> fence -> re-check state/generation
    assert "red.release.sys.global.add.u32" in ptx                # unpin after the access, bytes visible first
    assert "atom.relaxed.sys.global.exch.b32" in body             # the marker: one taker posts the hint
    assert "ld.relaxed.sys.global.u64" in body                    # the pte in one 64-bit load
    assert ".gpu." not in body.split("// .globl")[0]              # no host-shared word at gpu scope
    assert "%globaltimer" in body                                 # the wait for a frame still in flight
    assert "vote.sync.ballot" in body                             # no lane waits for a miss holding a pin
    assert "match.any.sync" in body and "shfl.sync.idx" in body   # one miss request per page per warp


def test_the_helper_library_exports_the_capacity_entry_points():
    """hbf_helpers.cu includes it and exports the miss, the hint and the rewritten accesses' entry points (both
    helper builds), with the descriptor table and the counters as module globals the runtime fills/reads."""
    src = ROOT / "runtime_cuda" / "src"
    assert '#include "hbf_cap_helpers.cuh"' in (src / "hbf_helpers.cu").read_text()
    assert '#include "hbf_capacity.cuh"' in (src / "hbf_cap_helpers.cuh").read_text()
    for build in ("hbf_helpers.ptx", "hbf_helpers_lean.ptx"):
        p = ROOT / "runtime_cuda" / "ptx" / build
        if not p.exists():
            pytest.skip("helper PTX not built (make helpers-ptx)")
        ptx = p.read_text()
        for sym in ("__hb_cap_xlate", "__hb_cap_release", "__hb_cap_miss", "__hb_cap_hint"):
            assert re.search(rf"\.visible \.func .*\b{sym}\(", ptx) or re.search(rf"\.func .*{sym}", ptx), (build, sym)
        for g in ("__hb_cap_table", "__hb_cap_counters"):
            assert re.search(rf"\.visible \.global .*\b{g}\b", ptx), (build, g)
