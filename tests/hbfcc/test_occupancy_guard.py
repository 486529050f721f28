"""Occupancy guard (hbfcc/occupancy.py): an instrumented entry keeps the plain build's blocks per SM."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import artifact, occupancy as O  # noqa: E402
from hbfcc.ptx import parse_module, print_module  # noqa: E402

FIX = U.REPO / "tests" / "fixtures" / "triton"


def test_blocks_per_sm_matches_the_occupancy_rules():
    # 256 threads = 8 warps: 64 warps/SM -> at most 8 blocks; registers: 65536 / (R * 256)
    assert O.blocks_per_sm(16, 256) == 8
    assert O.blocks_per_sm(32, 256) == 8
    assert O.blocks_per_sm(33, 256) == 6          # 40 after rounding to 8: 65536 / 10240
    assert O.blocks_per_sm(122, 256) == 2         # 128 allocated
    assert O.blocks_per_sm(214, 256) == 1
    assert O.blocks_per_sm(255, 1024) == 0        # does not fit at all
    assert O.blocks_per_sm(24, 32) == 32          # the 32-blocks limit


def test_register_bound_is_the_largest_count_with_equal_occupancy():
    assert O.register_bound(122, 256) == 128
    assert O.register_bound(16, 256) == 32
    assert O.register_bound(200, 256) == 255      # one block either way: no constraint
    assert O.register_bound(54, 512) == 64
    for plain, t in ((26, 128), (40, 256), (90, 128), (120, 384)):
        b = O.register_bound(plain, t)
        assert b >= plain and O.blocks_per_sm(b, t) == O.blocks_per_sm(plain, t)
        nxt = b + O.REG_UNIT
        assert nxt > O.MAX_REGS or O.blocks_per_sm(nxt, t) < O.blocks_per_sm(plain, t)


def test_entry_threads_and_apply():
    ptx = """.version 8.7
.target sm_90a
.address_size 64
.visible .entry a(.param .u64 a_p)
.reqntid 128, 2, 1
{
    ret;
}
.visible .entry b(.param .u64 b_p)
.maxnreg 200
.maxntid 256
{
    ret;
}
.entry c()
{
    ret;
}
"""
    m = parse_module(ptx)
    assert O.entry_threads(m) == {"a": 256, "b": 256, "c": None}
    out = print_module(O.apply(m, {"a": 64, "b": 128}))
    assert ".reqntid 128, 2, 1\n.maxnreg 64\n" in out
    assert ".maxnreg 128" in out and ".maxnreg 200" not in out
    assert out.count(".maxnreg") == 2
    assert print_module(O.apply(m, {"b": 255})).count(".maxnreg 200") == 1    # never raised
    assert O.apply(m, {}) is m
    # the stage applies what the plan decided, and only that
    meta = {O.PASS_NAME: {"a": {"applied": True, "bound": 64}, "b": {"applied": False, "bound": 128}}}
    assert print_module(O.guard_stage(m, meta)).count(".maxnreg") == 2          # a's new one, b's own
    assert parse_module(print_module(O.guard_stage(m, meta))).function("a").directives[-1].args == ("64",)
    d = O.plan(m, {"a": 30, "b": 100, "c": 10}, {"a": 90, "b": 110, "c": 80})
    assert d["a"]["applied"] and d["a"]["bound"] == 32
    assert not d["b"]["applied"] and d["b"]["bound"] >= 110
    assert not d["c"]["applied"] and "not declared" in d["c"]["reason"]


@pytest.mark.parametrize("guard", ["1", "0"])
def test_hbfcc_ptxas_guards_a_triton_matmul(tmp_path, guard):
    """The Triton matmul (256 threads, 122 registers plain: 2 blocks/SM) instrumented goes above
    128 registers; the guard caps it at 128 with .maxnreg and says so in the artifact."""
    src = FIX / "matmul_f16_s3.ptx"
    U.tool("ptxas")
    p = tmp_path / "mm.ptx"
    p.write_text(src.read_text())
    helper = U.real_helper_ptx()
    if helper is None:   # `make test` builds it; the fixture helper is too small to raise the count
        pytest.skip("the real helper PTX (make helpers-ptx) is not built")
    e = U.env_with(HBFCC_ARTIFACT_DIR=tmp_path / "store", HBFCC_OCCUPANCY_GUARD=guard, HBFCC_HELPER_PTX=helper,
                   HBFCC_DUMP_DIR=tmp_path / "dump")
    import subprocess
    cp = subprocess.run([U.console("hbfcc-ptxas"), "-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"],
                        capture_output=True, text=True, env=e, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(Path(str(p) + ".o.hbfcc.json").read_text())
    artifact.validate(doc)
    k = doc["kernels"][0]
    assert doc["admitted"] and k["ptxas_before"]["registers"] <= 128
    assert p.read_text() == src.read_text()              # the input is never modified
    text = U.rewritten_text(tmp_path / "dump")
    if guard == "1":
        g = k["occupancy_guard"]
        # the bound: the plain build's (128: 2 blocks/SM) unless the kernel's own code needs more
        assert g["threads_per_block"] == 256 and g["bound"] == max(128, -(-g["hot_path_registers"] // 8) * 8)
        assert g["instrumented_registers"] > 128          # unguarded: 1 block/SM instead of 2
        if g["instrumented_registers"] > g["bound"]:
            assert g["applied"] and f".maxnreg {g['bound']}" in text
            assert "HBFCC_OCCUPANCY_GUARD=1 caps" in cp.stderr and "EXPERIMENTAL" in cp.stderr   # said, loudly
            assert k["ptxas_after"]["registers"] <= g["bound"] and g["guarded_registers"] <= g["bound"]
        else:
            assert not g["applied"] and ".maxnreg" not in text
        import hashlib
        assert doc["input"]["transformed_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    else:
        assert "occupancy_guard" not in k and ".maxnreg" not in text
        assert "HBFCC_OCCUPANCY_GUARD" not in cp.stderr
        assert k["ptxas_after"]["registers"] > 128


# ---- launch bound (HBFCC_LAUNCH_BOUND, default on) ------------------------------------------------

def test_max_block_threads_follows_the_register_file():
    assert O.max_block_threads(12) == 1024 and O.max_block_threads(64) == 1024
    assert O.max_block_threads(72) == 896 and O.max_block_threads(128) == 512
    assert O.max_block_threads(255) == 256


def three_entries(b_directive: str):
    """Entries a and c declare no block size, b declares it with ``b_directive``."""
    return parse_module(f""".version 8.7
.target sm_90a
.address_size 64
.visible .entry a(.param .u64 p)
{{
    ret;
}}
.visible .entry b(.param .u64 p)
{b_directive}
{{
    ret;
}}
.visible .entry c(.param .u64 p)
{{
    ret;
}}
""")


def test_launch_plan_only_for_entries_without_a_block_size():
    m = three_entries(".maxntid 1024, 1, 1")
    d = O.launch_plan(m, {"a": 12, "b": 12, "c": 40}, {"a": 72, "b": 72, "c": 64})
    assert set(d) == {"a", "c"}                  # b declares its block size: ptxas keeps it launchable
    assert d["a"]["applied"] and d["a"]["maxntid"] == 1024 and d["a"]["instrumented_max_threads"] == 896
    assert not d["c"]["applied"] and d["c"]["maxntid"] is None
    out = print_module(O.launch_stage(m, {O.LAUNCH_PASS_NAME: d}))
    assert out.count(".maxntid 1024") == 2     # b's own, and a's new one


RED_CU = """extern "C" __global__ void red(const float* a, float* out, int n) {
  __shared__ float s[1024];
  float acc = 0; for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) acc += a[i];
  s[threadIdx.x] = acc; __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) { if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k]; __syncthreads(); }
  if (threadIdx.x == 0) atomicAdd(out, s[0]);
}"""


@pytest.mark.parametrize("bound", ["1", "0"])
def test_hbfcc_ptxas_keeps_a_1024_thread_kernel_launchable(tmp_path, bound):
    """An nvcc kernel without __launch_bounds__ (12 registers plain: launchable with 1024 threads)
    goes above 64 registers instrumented, which a 1024-thread block cannot hold (H200:
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES). The launch bound gives it .maxntid 1024: <= 64 registers."""
    U.tool("ptxas")
    helper = U.real_helper_ptx()
    if helper is None:
        pytest.skip("the real helper PTX (make helpers-ptx) is not built")
    cu = tmp_path / "red.cu"
    cu.write_text(RED_CU)
    import subprocess
    p = tmp_path / "red.ptx"
    subprocess.run([U.tool("nvcc"), "-arch=sm_90a", "-ptx", str(cu), "-o", str(p)], check=True)
    e = U.env_with(HBFCC_ARTIFACT_DIR=tmp_path / "store", HBFCC_LAUNCH_BOUND=bound, HBFCC_HELPER_PTX=helper,
                   HBFCC_DUMP_DIR=tmp_path / "dump")
    cp = subprocess.run([U.console("hbfcc-ptxas"), "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"],
                        capture_output=True, text=True, env=e, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(Path(str(p) + ".o.hbfcc.json").read_text())
    artifact.validate(doc)
    k = doc["kernels"][0]
    assert k["ptxas_before"]["registers"] <= 64
    if bound == "1":
        lb = k["launch_bound"]
        # decided from the plain build before the one instrumented build (bound "0" shows it was needed)
        assert lb["applied"] and lb["maxntid"] == 1024 and lb["decided"] == "before the instrumented build"
        assert lb["instrumented_registers"] is None and lb["bounded_registers"] == k["ptxas_after"]["registers"]
        assert ".maxntid 1024" in U.rewritten_text(tmp_path / "dump") and k["ptxas_after"]["registers"] <= 64
    else:
        assert "launch_bound" not in k and k["ptxas_after"]["registers"] > 64


def test_launch_plan_before_bounds_every_entry_without_a_block_size():
    m = three_entries(".reqntid 256, 1, 1")
    both = frozenset({"a", "b", "c"})
    d = O.launch_plan_before(m, {"a": 12, "b": 200, "c": 80}, both)
    assert set(d) == {"a", "c"}                       # b declares its block size
    assert d["a"]["maxntid"] == 1024 and d["c"]["maxntid"] == 800 and all(x["applied"] for x in d.values())
    assert O.max_block_threads(80) == 800 and d["c"]["instrumented_registers"] is None
    assert O.launch_plan_before(m, {"a": 12}, both) is None  # c's plain count unknown: decided after the build
    out = print_module(O.launch_stage(m, {O.LAUNCH_PASS_NAME: d}))
    assert ".maxntid 1024" in out and ".maxntid 800" in out
    d = O.launch_plan_before(m, {"a": 12, "b": 200, "c": 80}, frozenset({"c"}))   # a calls no helper
    assert not d["a"]["applied"] and d["a"]["maxntid"] is None and d["c"]["applied"]
    assert print_module(O.launch_stage(m, {O.LAUNCH_PASS_NAME: d})).count(".maxntid") == 1


def test_uses_any_sees_a_call_to_a_helper():
    from hbfcc.link import uses_any
    m = parse_module(""".version 8.7
.target sm_90a
.address_size 64
.extern .func __hb_kernel_enter(.param .b32 k);
.visible .entry a(.param .u64 p)
{
    { .param .b32 k0; st.param.b32 [k0], 0; call.uni __hb_kernel_enter, (k0); }
    ret;
}
.visible .entry b(.param .u64 p)
{
    ret;
}
""")
    fs = {f.name: f for f in m.functions() if f.is_entry}
    hs = frozenset({"__hb_kernel_enter", "__hb_issue"})
    assert uses_any(fs["a"], hs) and not uses_any(fs["b"], hs)


def test_a_ptxas_refusing_the_bound_builds_without_it(tmp_path):
    """The bound set before the build: when ptxas rejects the PTX with it, hbfcc-ptxas warns, builds the
    rewrite without it and records why (a ptxas that refuses any .maxntid stands in)."""
    U.tool("ptxas")
    helper = U.real_helper_ptx()
    if helper is None:
        pytest.skip("the real helper PTX (make helpers-ptx) is not built")
    import subprocess
    cu, p = tmp_path / "red.cu", tmp_path / "red.ptx"
    cu.write_text(RED_CU)
    subprocess.run([U.tool("nvcc"), "-arch=sm_90a", "-ptx", str(cu), "-o", str(p)], check=True)
    fake = tmp_path / "ptxas"
    fake.write_text(f"""#!{sys.executable}
import subprocess, sys
for a in sys.argv[1:]:
    if a.endswith(".ptx") and ".maxntid" in open(a).read():
        sys.exit("fake ptxas: .maxntid refused")
sys.exit(subprocess.call([{U.tool("ptxas")!r}] + sys.argv[1:]))
""")
    fake.chmod(0o755)
    e = U.env_with(HBFCC_ARTIFACT_DIR=tmp_path / "store", HBFCC_HELPER_PTX=helper, HBFCC_REAL_PTXAS=fake)
    cp = subprocess.run([U.console("hbfcc-ptxas"), "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"],
                        capture_output=True, text=True, env=e, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert "launch bound: ptxas rejected the PTX with it" in cp.stderr
    k = json.loads(Path(str(p) + ".o.hbfcc.json").read_text())["kernels"][0]
    lb = k["launch_bound"]
    assert not lb["applied"] and lb["maxntid"] is None and "launch_bound build failed" in lb["reason"]
    assert k["ptxas_after"]["registers"] > 64             # built, unbounded


def test_launch_bound_setting_is_in_the_version_marker(monkeypatch):
    from hbfcc.cli import marker_line
    monkeypatch.delenv("HBFCC_LAUNCH_BOUND", raising=False)
    on = marker_line()
    monkeypatch.setenv("HBFCC_LAUNCH_BOUND", "0")
    assert "launch-bound" not in on and marker_line() == on + " launch-bound off"


# ---- the guard's hot-path bound and indirect helper calls ----------------------------------------

def test_plan_never_caps_below_the_hot_path():
    m = parse_module(""".version 8.0
.target sm_90a
.address_size 64
.visible .entry a() .maxntid 128, 1, 1 { ret; }
""")
    d = O.plan(m, {"a": 26}, {"a": 116}, {"a": 45})
    assert d["a"]["hot_path_registers"] == 45 and d["a"]["bound"] == 48 and d["a"]["applied"]
    assert d["a"]["blocks_per_sm_guarded"] == O.blocks_per_sm(48, 128)
    d = O.plan(m, {"a": 26}, {"a": 116}, {"a": 120})     # the kernel's own code needs it all: no cap
    assert not d["a"]["applied"]


def test_stub_helper_defines_the_abi_and_links():
    from hbfcc import helpers as H
    from hbfcc.rewrite import rewrite_text
    h = H.stub_helper()
    assert set(h.defined) >= set(__import__("hbfcommon.abi", fromlist=["HELPERS"]).HELPERS)
    res = rewrite_text((FIX / "vector_add_f32.ptx").read_text(), helper=h)
    U.assemble(res.text)


def test_a_bound_that_was_not_needed_does_not_bind(tmp_path):
    """An entry that declares no block size and calls only the kernel hooks fits 1024 threads
    instrumented: the bound set before the build is not binding, so its code is the unbounded build's
    (function by function, hbfcc.cubin.code_differences); only the cubin's block-size attribute differs."""
    U.tool("ptxas")
    helper = U.real_helper_ptx()
    if helper is None:
        pytest.skip("the real helper PTX (make helpers-ptx) is not built")
    import subprocess

    from hbfcc import cubin
    cu, p = tmp_path / "m.cu", tmp_path / "m.ptx"
    cu.write_text('extern "C" __global__ void b(int n) { __shared__ int s[32]; s[threadIdx.x & 31] = n; '
                  '__syncthreads(); if (s[0] == 123) asm volatile("trap;"); }\n')
    subprocess.run([U.tool("nvcc"), "-arch=sm_90a", "-ptx", str(cu), "-o", str(p)], check=True)
    out = {}
    for bound in ("1", "0"):
        e = U.env_with(HBFCC_ARTIFACT_DIR=tmp_path / f"store{bound}", HBFCC_LAUNCH_BOUND=bound,
                       HBFCC_HELPER_PTX=helper)
        o = tmp_path / f"m{bound}.cubin"
        cp = subprocess.run([U.console("hbfcc-ptxas"), "--gpu-name=sm_90a", str(p), "-o", str(o)],
                            capture_output=True, text=True, env=e, cwd=tmp_path)
        assert cp.returncode == 0, cp.stderr
        out[bound] = o
    k = json.loads(Path(str(out["1"]) + ".hbfcc.json").read_text())["kernels"][0]
    assert k["launch_bound"]["applied"] and k["ptxas_after"]["registers"] <= 64
    assert cubin.code_differences(cubin.function_code(out["1"]), cubin.function_code(out["0"])) == []
