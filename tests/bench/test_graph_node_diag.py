"""CPU tests of bench/graph_node_diag.py (wt/gdiag15, issue 15: why matmul_host's native entry costs +0.43 us per
launch in CUDA graphs): the pure parts (parameter-bytes diff, address-only differences, attribute tables, ratios,
dependency order, the PTX parameter layout, cuda.bindings values as JSON, the cuobjdump parsers), the host copies of
kernel parameters read back, the GPU path's driver calls against a fake driver (nodes read, graphs built with the
parameter bytes read, the swap order), the GPU mode without a GPU, and -- where Triton, ptxas and the helper PTX exist
-- part 0 on the CPU (--dry-run). The GPU run itself is marked gpu and skips cleanly without one."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import graph_node_diag as G  # noqa: E402


# ------------------------------------------------------------------------------------------------ pure helpers
def test_byte_ranges_and_address_only_differences():
    a = bytes(range(32))
    b = bytearray(a)
    b[3] = 0xFF
    b[4] = 0xFE
    b[20] = 0
    assert G.byte_ranges(a, bytes(b)) == [[3, 5], [20, 21]]
    assert G.byte_ranges(a, a) == []
    assert G.byte_ranges(b"ab", b"abc") == [[2, 3]]
    # a TensorMap whose first word (its global address) differs, the rest equal: an address-only difference
    pa, pn = 0x7F0000001000, 0x7F0000203000
    ma = pa.to_bytes(8, "little") + bytes(range(120))
    mn = pn.to_bytes(8, "little") + bytes(range(120))
    assert G.words_only(ma, mn, [(pa, pn)])
    assert not G.words_only(ma, mn, [(pa, pa + 1)])
    assert not G.words_only(ma, ma, [(pa, pn)])                       # nothing differs: not "address only"
    mn2 = bytearray(mn)
    mn2[100] ^= 1
    assert not G.words_only(ma, bytes(mn2), [(pa, pn)])               # a field beyond the address differs too


def test_param_bytes_diff_names_the_parameters_that_differ():
    pa, pn = 0x1000, 0x2000
    plain = [bytes(128).hex(), (7).to_bytes(4, "little").hex(), pa.to_bytes(8, "little").hex()]
    natent = [bytes(128).hex(), (7).to_bytes(4, "little").hex(), pn.to_bytes(8, "little").hex()]
    d = G.param_bytes_diff(plain, natent, [(pa, pn)])
    assert d["identical"] is False and d["count"] == [3, 3] and d["only_addresses_differ"] is True
    assert [p["param"] for p in d["params"]] == [2] and d["params"][0]["address_only"]
    assert d["params"][0]["differing_bytes"] == 1 and d["params"][0]["sizes"] == [8, 8]
    natent[1] = (8).to_bytes(4, "little").hex()
    d = G.param_bytes_diff(plain, natent, [(pa, pn)])
    assert d["only_addresses_differ"] is False and [p["param"] for p in d["params"]] == [1, 2]
    same = G.param_bytes_diff(plain, plain)
    assert same["identical"] and same["params"] == [] and not same["only_addresses_differ"]
    short = G.param_bytes_diff(plain, plain[:2])
    assert short["count"] == [3, 2] and short["params"][0]["sizes"] == [8, 0]


def test_device_address_pairs_only_where_both_values_are_device_addresses():
    dev = {0x7F00000000, 0x7F00100000, 0x7E00000000, 0x7E00200000}
    a = [(0x7F00000000).to_bytes(8, "little").hex(), (0x7E00000000).to_bytes(8, "little").hex() + "00" * 120,
         (5).to_bytes(8, "little").hex(), (0x7F00000000).to_bytes(8, "little").hex(), "00" * 4]
    b = [(0x7F00100000).to_bytes(8, "little").hex(), (0x7E00200000).to_bytes(8, "little").hex() + "00" * 120,
         (6).to_bytes(8, "little").hex(), (0x7F00000000).to_bytes(8, "little").hex(), "01" * 4]
    assert G.device_address_pairs(a, b, dev.__contains__) == [(0x7F00000000, 0x7F00100000),
                                                              (0x7E00000000, 0x7E00200000)]
    d = G.param_bytes_diff(a, b, G.device_address_pairs(a, b, dev.__contains__))
    assert [p["param"] for p in d["params"]] == [0, 1, 2, 4]
    assert [p["address_only"] for p in d["params"]] == [True, True, False, False]


def test_dict_diff_and_attribute_table():
    a = {"NUM_REGS": 90, "MAX_DYNAMIC_SHARED_SIZE_BYTES": 232448 - 1024, "ONLY_A": 1}
    b = {"NUM_REGS": 90, "MAX_DYNAMIC_SHARED_SIZE_BYTES": 232448 - 2048}
    assert G.dict_diff(a, b) == {"MAX_DYNAMIC_SHARED_SIZE_BYTES": [231424, 230400], "ONLY_A": [1, None]}
    assert G.dict_diff(None, None) == {} and G.dict_diff(a, a) == {}
    lines = G.format_table({"plain": a, "native_entry": b})
    assert "plain" in lines[0] and "native_entry" in lines[0]
    rows = {ln.split()[0]: ln for ln in lines[1:]}
    assert set(rows) == {"NUM_REGS", "MAX_DYNAMIC_SHARED_SIZE_BYTES", "ONLY_A"}
    assert not rows["NUM_REGS"].endswith("<-") and rows["MAX_DYNAMIC_SHARED_SIZE_BYTES"].endswith("<-")
    assert rows["ONLY_A"].endswith("<-") and " - " in rows["ONLY_A"] + " "


def test_ratio_stats_round_by_round():
    ms = {"a": [1.0, 2.0, 1.0], "b": [1.1, 2.2, 1.1], "c": [1.0, 2.0]}
    r = G.ratio_stats(ms, "a")
    assert "ratio" not in r["a"] and r["a"]["device_ms"]["median"] == 1.0
    assert r["b"]["ratio"]["median"] == pytest.approx(1.1) and r["b"]["ratio"]["n"] == 3
    assert r["b"]["extra_us_median"] == pytest.approx(100.0)
    assert r["c"]["ratio"]["n"] == 2 and r["c"]["ratio"]["median"] == pytest.approx(1.0)
    assert G.ratio_stats({"x": [1.0]}, "a") == {"x": {"device_ms": G.stats([1.0])}}


def test_topo_order_follows_the_chain_whatever_the_listing():
    assert G.topo_order([3, 1, 2], [(1, 2), (2, 3)]) == [1, 2, 3]
    assert G.topo_order([5, 6], []) == [5, 6]
    assert G.topo_order([1, 2, 9], [(1, 2), (2, 1)]) == [9, 1, 2]           # a cycle: left at the end
    assert G.topo_order([1, 2], [(1, 7)]) == [1, 2]                         # an edge to an unknown node ignored


MATMUL_HOST_SIGNATURE = """
.visible .entry matmul_host_plain(
	.param .align 64 .b8 matmul_host_plain_param_0[128],
	.param .u32 matmul_host_plain_param_1,
	.param .u32 matmul_host_plain_param_2,
	.param .u64 matmul_host_plain_param_3,
	.param .u64 matmul_host_plain_param_4,
	.param .align 64 .b8 matmul_host_plain_param_5[128],
	.param .u32 matmul_host_plain_param_6,
	.param .u32 matmul_host_plain_param_7,
	.param .u64 matmul_host_plain_param_8,
	.param .u64 matmul_host_plain_param_9,
	.param .align 64 .b8 matmul_host_plain_param_10[128],
	.param .u32 matmul_host_plain_param_11,
	.param .u32 matmul_host_plain_param_12,
	.param .u64 matmul_host_plain_param_13,
	.param .u64 matmul_host_plain_param_14,
	.param .u32 matmul_host_plain_param_15,
	.param .u64 .ptr .global .align 1 matmul_host_plain_param_16,
	.param .u64 .ptr .global .align 1 matmul_host_plain_param_17
)
.reqntid 256
{
"""


def test_ptx_param_layout_of_a_host_descriptor_kernel():
    lay = G.ptx_param_layout(MATMUL_HOST_SIGNATURE, "matmul_host_plain")
    # ptxas's EIATTR_KPARAM_INFO for this kernel (sm_90, Triton 3.6): offsets 0x30 + these, the last at 0x258
    assert lay == [[0, 128], [128, 4], [132, 4], [136, 8], [144, 8], [192, 128], [320, 4], [324, 4], [328, 8],
                   [336, 8], [384, 128], [512, 4], [516, 4], [520, 8], [528, 8], [536, 4], [544, 8], [552, 8]]
    assert G.ptx_param_layout(MATMUL_HOST_SIGNATURE, "other") == []
    shifted = [[o + 0x30, s] for o, s in lay]
    assert G.same_layout(lay, shifted) and not G.same_layout(lay, shifted[:-1])
    assert not G.same_layout(lay, [[o, s + 1] for o, s in lay]) and G.same_layout([], [])


def test_cuda_binding_values_as_json():
    cb = pytest.importorskip("cuda.bindings.driver")
    v = cb.CUkernelNodeAttrValue()
    v.priority = 3
    assert G.attr_value("CU_LAUNCH_ATTRIBUTE_PRIORITY", v) == 3
    v = cb.CUkernelNodeAttrValue()
    assert G.attr_value("CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", v) == {"x": 0, "y": 0, "z": 0}
    # a union field whose enum has no 0 member (the synchronization policy) still gives its raw word
    sp = G.attr_value("CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY", v)
    assert sp == 0 or sp.get("raw_u32") == 0 or isinstance(sp, str)
    for a in cb.CUkernelNodeAttrID:        # every id this binding has: JSON-able, no exception
        json.dumps(G.attr_value(a.name, v))
    assert G.struct_plain(cb.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS) == "CU_FUNC_ATTRIBUTE_NUM_REGS"
    p = G.struct_plain(cb.CUDA_KERNEL_NODE_PARAMS())
    assert p["gridDimX"] == 0 and p["func"] == 0 and p["kernelParams"] == 0
    assert G.attr_short("CU_FUNC_ATTRIBUTE_NUM_REGS") == "NUM_REGS"


def test_param_buffers_round_trip_through_read_params():
    vals = [bytes(range(128)), (5).to_bytes(4, "little"), (0x7F00DEAD0000).to_bytes(8, "little")]
    pb = G.ParamBuffers(vals)
    assert all(a % 64 == 0 for a in pb.addresses)
    layout = [[0, 128], [128, 4], [136, 8]]
    assert G.read_params(pb.address, layout) == vals
    with pytest.raises(ValueError):
        G.read_params(0, layout)


def test_read_params_from_a_packed_extra_buffer():
    vals = [bytes(range(128)), (5).to_bytes(4, "little"), (0x7F00DEAD0000).to_bytes(8, "little")]
    packed = vals[0] + vals[1] + bytes(4) + vals[2]
    buf = ctypes.create_string_buffer(packed, len(packed))
    size = ctypes.c_size_t(len(packed))
    extra = (ctypes.c_void_p * 5)(G.CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buf),
                                  G.CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size), G.CU_LAUNCH_PARAM_END)
    got, how = G.read_params_extra(ctypes.addressof(extra), [[0, 128], [128, 4], [136, 8]])
    assert got == vals and how == "as given"
    # offsets counted from where the first parameter sits in constant bank 0 (0x30 for matmul_host)
    got, how = G.read_params_extra(ctypes.addressof(extra), [[48, 128], [176, 4], [184, 8]])
    assert got == vals and how == "from the first (-48)"
    with pytest.raises(ValueError):
        G.read_params_extra(0, [[0, 8]])
    empty = (ctypes.c_void_p * 1)(G.CU_LAUNCH_PARAM_END)
    with pytest.raises(ValueError):
        G.read_params_extra(ctypes.addressof(empty), [[0, 8]])


# ------------------------------------------------------------------------------------------------ cuobjdump parsers
SASS = """
	code for sm_90
		Function : k_a
	.headerflags	@"EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                   /* 0x00000a00ff017b82 */
                                                                                            /* 0x000fe20000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;                                       /* 0x0000000000007919 */
                                                                                            /* 0x000e6e0000002100 */
        /*0020*/                   EXIT ;                                                   /* 0x000000000000794d */
"""

ELF = """
Sections:
Index Offset   Size ES Align        Type        Flags Link     Info Name
    1     40    1ec  0  1            STRTAB       0    0        0 .shstrtab
    c   428c    238  0  4         CUDA_INFO       40    3       12 .nv.info.k_a
   12   4580   1780  0 80          PROGBITS        6    3        c .text.k_a
   13   5d00    400  0 10            NOBITS       43    0       12 .nv.shared.k_a

.nv.info.k_a
	<0x1>
	Attribute:	EIATTR_CUDA_API_VERSION
	Format:	EIFMT_SVAL
	Value:	0x82 
	<0x30>
	Attribute:	EIATTR_PARAM_CBANK
	Format:	EIFMT_SVAL
	Value:	0xd 0x2600210 


.nv.callgraph
 <0,-1>


.text.k_a
lmem=0	smem=1024
0xff017b82 0x00000a00 0x00000800 0x000fe200
"""


def test_cuobjdump_parsers():
    assert G.sass_instructions(SASS) == ["LDC R1, c[0x0][0x28]", "S2R R0, SR_TID.X", "EXIT"]
    info = G.nv_info(ELF, "k_a")
    assert "Attribute:\tEIATTR_CUDA_API_VERSION" in info and not any("<0x" in x for x in info)
    assert "Value: <sym> 0x2600210" in info              # the module's symbol index dropped
    other = G.nv_info(ELF.replace("0xd 0x2600210", "0x2d 0x2600210"), "k_a")
    assert other == info
    assert G.nv_info(ELF, "nope") == []
    assert G.elf_sections(ELF) == [{"name": ".shstrtab", "size": 0x1ec}, {"name": ".nv.info.k_a", "size": 0x238},
                                   {"name": ".text.k_a", "size": 0x1780}, {"name": ".nv.shared.k_a", "size": 0x400}]
    assert G.text_header(ELF, "k_a") == "lmem=0\tsmem=1024" and G.text_header(ELF, "k_b") is None
    assert G.first_differences(["a", "b"], ["a", "c", "d"]) == [[1, "b", "c"], [2, None, "d"]]


def test_static_compare_of_two_cubins(tmp_path):
    """Part 0 on two real cubins: k_a alone, and k_b (the same body) beside another entry in its module."""
    ptxas, tool = shutil.which("ptxas"), G.find_cuobjdump()
    if ptxas is None or tool is None:
        pytest.skip("ptxas or cuobjdump missing")
    from test_tma_triton_bench import PTX       # one small kernel: k_probe_NAME(u64), stores tid.x
    extra = PTX.split(".visible", 1)[1].replace("k_probe_NAME", "k_other").replace("%tid.x", "%tid.y")
    cubins = {}
    for name, text in (("k_a", PTX.replace("k_probe_NAME", "k_a")),
                       ("k_b", PTX.replace("k_probe_NAME", "k_b") + "\n.visible" + extra)):
        (tmp_path / f"{name}.ptx").write_text(text)
        r = subprocess.run([ptxas, "--gpu-name=sm_90a", str(tmp_path / f"{name}.ptx"), "-o", str(tmp_path / f"{name}.cubin")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        cubins[name] = (tmp_path / f"{name}.cubin").read_bytes()
    r = G.static_compare(cubins["k_a"], "k_a", cubins["k_b"], "k_b", tmp_path / "s", tool)
    assert r["sass_identical"] and r["sass_instructions"][0] == r["sass_instructions"][1] > 3, r
    assert r["nv_info_identical"] and r["nv_info_records"][0] > 0, r
    assert ".text.k_other" in r["sections_only_in_b"] and r["sections_of_fn_differ"] == {}, r
    other = G.static_compare(cubins["k_b"], "k_other", cubins["k_a"], "k_a", tmp_path / "s2", tool)
    assert not other["sass_identical"] and other["sass_first_differences"], other


def test_static_compare_without_cuobjdump(tmp_path, monkeypatch):
    monkeypatch.setattr(G, "find_cuobjdump", lambda: None)
    assert "error" in G.static_compare(b"", "a", b"", "b", tmp_path)


# ------------------------------------------------------------------------------------------------ the GPU path, faked
class _Res(int):
    name = "CUDA_SUCCESS"


class _H(int):
    """A driver handle: an int (cuda.bindings' handles convert with int())."""

    def __new__(cls, v=0):
        return super().__new__(cls, int(v))


class _Enum:
    def __init__(self, names):
        self._m = [SimpleNamespace(name=n) for n in names]
        for m in self._m:
            setattr(self, m.name, m)

    def __iter__(self):
        return iter(self._m)


class FakeDriver:
    """The driver calls graph_node_diag makes, with cuda.bindings' conventions ((CUresult, *outs)): one captured graph
    of n kernel nodes in a chain (listed out of order) whose parameters live in host memory, and the graphs built."""
    OK = _Res(0)
    CUresult = SimpleNamespace(CUDA_SUCCESS=0)
    CUgraph = CUstream = CUmodule = _H

    def __init__(self, values, layout, n=4, func=0xF1):
        cb = pytest.importorskip("cuda.bindings.driver")
        # the real structure and function handle: the values graph_node_diag sets must be ones they accept
        self.CUDA_KERNEL_NODE_PARAMS, self.CUfunction = cb.CUDA_KERNEL_NODE_PARAMS, cb.CUfunction
        self.values, self.layout, self.func = values, layout, func
        self.buf = G.ParamBuffers(values)
        self.nodes = [_H(100 + i) for i in range(n)]
        self.added: list = []
        self.copied: list = []
        self.launched: list = []
        self.CUkernelNodeAttrID = _Enum(["CU_LAUNCH_ATTRIBUTE_IGNORE", "CU_LAUNCH_ATTRIBUTE_PRIORITY",
                                         "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION"])
        self.CUfunction_attribute = _Enum(["CU_FUNC_ATTRIBUTE_NUM_REGS", "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
                                           "CU_FUNC_ATTRIBUTE_MAX"])
        self.CUgraphNodeType = _Enum(["CU_GRAPH_NODE_TYPE_KERNEL"])

    def cuGetErrorName(self, e):
        return (self.OK, b"CUDA_ERROR_FAKE")

    def cuGraphGetNodes(self, g, n=0):
        order = self.nodes[::-1]
        return (self.OK, order[:n] if n else [], len(self.nodes))

    def cuGraphGetEdges(self, g, n=0):
        fr, to = self.nodes[:-1], self.nodes[1:]
        return (self.OK, fr[:n] if n else [], to[:n] if n else [], None, len(fr))

    def cuGraphNodeGetType(self, node):
        return (self.OK, self.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL)

    def cuGraphKernelNodeGetParams(self, node):
        return (self.OK, SimpleNamespace(func=_H(self.func), gridDimX=8, gridDimY=8, gridDimZ=1, blockDimX=256,
                                         blockDimY=1, blockDimZ=1, sharedMemBytes=98328,
                                         kernelParams=self.buf.address, extra=0, kern=_H(0), ctx=_H(0)))

    def cuFuncGetName(self, f):
        return (self.OK, b"k_plain" if int(f) == self.func else b"k_natent__hbnat")

    def cuFuncGetParamCount(self, f):
        return (self.OK, len(self.layout))

    def cuFuncGetParamInfo(self, f, i):
        if i >= len(self.layout):
            return (_Res(1), 0, 0)
        return (self.OK, self.layout[i][0], self.layout[i][1])

    def cuGraphKernelNodeGetAttribute(self, node, a):
        if a.name.endswith("PRIORITY"):
            return (self.OK, SimpleNamespace(priority=0))
        return (_Res(1), None)

    def cuFuncGetAttribute(self, a, f):
        assert not a.name.endswith("_MAX")
        return (self.OK, 90 if a.name.endswith("NUM_REGS") else 0)

    def cuFuncGetModule(self, f):
        return (self.OK, _H(0xA0))

    def cuModuleGetFunctionCount(self, m):
        return (self.OK, 1)

    def cuModuleEnumerateFunctions(self, n, m):
        return (self.OK, [_H(self.func)])

    def cuFuncIsLoaded(self, f):
        return (self.OK, 1)

    def cuGraphCreate(self, flags):
        self.graphs = getattr(self, "graphs", 0) + 1
        return (self.OK, _H(0xB0 + self.graphs - 1))

    def cuGraphAddKernelNode(self, g, deps, ndeps, p):
        assert (deps is None) == (ndeps == 0) and (deps is None) == (not self.added or self.added[-1][0] != int(g))
        vals = G.read_params(p.kernelParams, self.layout)   # the driver copies the values here
        node = _H(1000 + len(self.added))
        self.added.append((int(g), int(p.func), (p.gridDimX, p.gridDimY, p.gridDimZ), p.sharedMemBytes, vals,
                           int(node)))
        return (self.OK, node)

    def cuGraphKernelNodeCopyAttributes(self, dst, src):
        self.copied.append((int(dst), int(src)))
        return (self.OK,)

    def cuGraphInstantiate(self, g, flags):
        return (self.OK, _H(0xE0))

    def cuGraphUpload(self, e, s):
        return (self.OK,)

    def cuGraphLaunch(self, e, s):
        self.launched.append((int(e), int(s)))
        return (self.OK,)

    def cuGraphExecDestroy(self, e):
        return (self.OK,)

    def cuGraphDestroy(self, g):
        return (self.OK,)


@pytest.fixture
def fake(monkeypatch):
    from runtime_cuda import cudrv
    vals = [bytes(range(128)), (1024).to_bytes(4, "little"), (0x7F0000001000).to_bytes(8, "little")]
    layout = [[48, 128], [176, 4], [184, 8]]
    f = FakeDriver(vals, layout)
    monkeypatch.setattr(cudrv, "drv", lambda: f)
    return f


def test_graph_record_reads_every_kernel_node_in_chain_order(fake):
    rec, raws = G.graph_record(_H(0xC0), [[0, 128], [128, 4], [136, 8]])
    assert rec["nodes"] == 4 and rec["edges"] == 3 and rec["types"] == {"KERNEL": 4} and rec["kernel_nodes"] == 4
    assert rec["kernel_nodes_like_the_first"] is True and rec["kernel_nodes_unlike_the_first"] == 0
    k = rec["first_kernel_node"]
    assert k["name"] == "k_plain" and k["grid"] == [8, 8, 1] and k["block"] == [256, 1, 1]
    assert k["sharedMemBytes"] == 98328 and k["param_layout"] == fake.layout
    assert k["param_layout_matches_ptx"] is True and k["param_layout_from"] == "cuFuncGetParamCount"
    assert k["param_bytes"] == [v.hex() for v in fake.values] and k["param_sizes"] == [128, 4, 8]
    assert k["attributes"]["PRIORITY"] == 0 and k["attributes"]["CLUSTER_DIMENSION"].startswith("error")
    assert "IGNORE" not in k["attributes"]
    assert int(raws["first_kernel_node"]) == 100          # the chain's head, though listed last
    assert raws["first"]["values"] == fake.values
    fr = G.function_record(0xF1)
    assert fr["name"] == "k_plain" and fr["attributes"] == {"NUM_REGS": 90, "SHARED_SIZE_BYTES": 0}
    assert fr["module"] == {"module": 0xA0, "function_count": 1, "functions": ["k_plain"]}


def test_hand_graph_carries_the_captured_bytes_and_attributes(fake):
    _, raws = G.graph_record(_H(0xC0))
    P = raws["first"]
    h = G.HandGraph(0xF2, P["grid"], P["block"], P["shared"], P["values"], 3, raws["first_kernel_node"])
    assert len(fake.added) == 3
    for g, func, grid, smem, vals, _ in fake.added:
        assert func == 0xF2 and grid == (8, 8, 1) and smem == 98328 and vals == fake.values
    assert [s for _, s in fake.copied] == [100] * 3 and [d for d, _ in fake.copied] == [a[-1] for a in fake.added]
    h.upload(7)
    h.launch(7)
    assert fake.launched == [(0xE0, 7)]
    h.destroy()
    assert h.exec is None and h.graph is None
    fake.added.clear()
    G.HandGraph(0xF1, P["grid"], P["block"], P["shared"], P["values"], 2, None)
    assert len(fake.added) == 2 and len(fake.copied) == 3       # a0: no attribute copied


def test_time_variants_alternates_the_order_and_stops_at_the_deadline(monkeypatch):
    calls = []

    def fake_event_ms(fn, torch, n=1):
        fn()
        return 20.0 * (2.0 if calls[-1] == "b" else 1.0)
    monkeypatch.setattr(G.TT, "_event_ms", fake_event_ms)
    launch = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    t = G.time_variants(launch, None, 3, time.time() + 100)
    assert t["rounds"] == 3 and calls == ["a", "b", "b", "a", "a", "b"]
    assert t["ms"]["a"] == [1.0] * 3 and t["ms"]["b"] == [2.0] * 3      # per launch: / BACK_TO_BACK (20)
    assert G.time_variants(launch, None, 3, time.time() - 1)["rounds"] == 0
    calls.clear()

    def boom():
        raise RuntimeError("launch failed")
    t = G.time_variants({"a": launch["a"], "x": boom}, None, 3, time.time() + 100)
    assert t["rounds"] == 3 and len(t["ms"]["a"]) == 3 and t["ms"]["x"] == [] and "launch failed" in t["errors"]["x"]


def test_diff_summary_says_what_differs():
    pa, pn = 0x1000, 0x2000
    kp = {"name": "k_plain", "grid": [8, 8, 1], "block": [256, 1, 1], "sharedMemBytes": 98328, "param_layout": [[0, 8]],
          "extra": 0, "param_bytes": [pa.to_bytes(8, "little").hex()], "attributes": {"PRIORITY": 0}}
    kn = {**kp, "name": "k_natent__hbnat", "param_bytes": [pn.to_bytes(8, "little").hex()], "attributes": {"PRIORITY": 1}}
    nodes = {"plain": {"nodes": 20, "types": {"KERNEL": 20}, "edges": 19, "first_kernel_node": kp,
                       "kernel_nodes_unlike_the_first": 0, "other_nodes": []},
             "natent": {"nodes": 20, "types": {"KERNEL": 20}, "edges": 19, "first_kernel_node": kn,
                        "kernel_nodes_unlike_the_first": 0, "other_nodes": []},
             "param_diff": G.param_bytes_diff(kp["param_bytes"], kn["param_bytes"], [(pa, pn)])}
    funcs = {"plain": {"attributes": {"MAX_DYNAMIC_SHARED_SIZE_BYTES": 1}, "module": {"function_count": 1}},
             "native_entry": {"attributes": {"MAX_DYNAMIC_SHARED_SIZE_BYTES": 2}, "module": {"function_count": 2}}}
    text = "\n".join(G.diff_summary("k", nodes, funcs))
    assert "k_plain vs k_natent__hbnat" in text and "only the outputs' addresses" in text
    assert "node attributes: DIFFER" in text and "PRIORITY" in text
    assert "function attributes (plain vs native entry): DIFFER" in text and "MAX_DYNAMIC_SHARED_SIZE_BYTES" in text
    assert "DIFFERS grid" not in text
    assert G.diff_summary("k", {"plain": {"error": "x"}}, {})[0].startswith("k: nodes not read")


# ------------------------------------------------------------------------------------------------ the script
def _env():
    return dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def test_imports_without_a_gpu_and_argument_errors(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "graph_node_diag.py"), "--kernels", "nope", "--out",
                        str(tmp_path / "o")], env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--kernels" in r.stderr
    assert G.VARIANTS[:4] == ("a", "b", "c", "d") and set(G.VARIANTS) == set(G.VARIANT_WHAT)
    assert G.TT.KERNELS[0] == "matmul_host"


def test_gpu_mode_without_a_gpu_says_so(tmp_path):
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the GPU mode would run")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "graph_node_diag.py"), "--out", str(tmp_path / "out"),
                        "--work", str(tmp_path / "work")], env=_env(), cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    doc = json.loads((tmp_path / "out" / "graph_node_diag.json").read_text())
    assert r.returncode == 2 and doc["ok"] is False and "no GPU" in doc["error"], r.stderr[-2000:]
    assert doc["mode"] == "gpu" and "kernels" not in doc and doc["command"].startswith("python3 bench/graph_node_diag.py")


@pytest.mark.slow
def test_dry_run_compares_the_builds_statically(tmp_path):
    """Part 0 on the CPU: each kernel's plain build and its natent build's native entry (sm_90, through hbfcc-ptxas):
    the same SASS and EIATTRs (2026-12-07: all three kernels), the natent module carrying the instrumented entry."""
    pytest.importorskip("triton")
    from hbfcommon import resources
    if shutil.which("ptxas") is None or not resources.helper_ptx_path("direct").is_file() or G.find_cuobjdump() is None:
        pytest.skip("ptxas, cuobjdump or the helper PTX (make helpers-ptx) missing")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "graph_node_diag.py"), "--dry-run", "--kernels",
                        "matmul_host", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")],
                       env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    doc = json.loads((tmp_path / "out" / "graph_node_diag_dry.json").read_text())
    assert r.returncode == 0 and doc["ok"], (r.stderr[-3000:], json.dumps(doc, default=str)[:3000])
    st = doc["kernels"]["matmul_host"]["static"]
    assert st["functions"] == ["matmul_host_plain", "matmul_host_natent__hbnat"]
    assert st["sass_identical"] and st["nv_info_identical"], st
    assert ".text.matmul_host_natent" in st["sections_only_in_b"]
    assert doc["kernels"]["matmul_host"]["ptx_param_layout"][-1] == [552, 8]


@pytest.mark.gpu
def test_gpu_run_of_matmul_host(tmp_path):
    """The script on the card (one kernel, few rounds): every part without an error, the native entry captured, every
    hand-built graph's output identical to plain's."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "graph_node_diag.py"), "--kernels", "matmul_host",
                        "--pairs", "3", "--budget-s", "200", "--out", str(tmp_path / "out"), "--work",
                        str(tmp_path / "work")], env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=400)
    doc = json.loads((tmp_path / "out" / "graph_node_diag.json").read_text())
    k = doc["kernels"]["matmul_host"]
    assert r.returncode == 0 and doc["ok"], (r.stderr[-3000:], json.dumps(k, default=str)[:3000])
    assert k["capture"]["native_entry_captured"] and k["identity_ok"]
    assert {"a", "b", "c", "d"} <= set(k["swap"]["variants"])


class _T:
    """A stand-in tensor: an address, a fill value."""

    def __init__(self, ptr):
        self.ptr, self.v = ptr, 0.0

    def data_ptr(self):
        return self.ptr

    def fill_(self, v):
        self.v = v
        return self

    def view(self, dtype):
        return self

    def clone(self):
        return _T(self.ptr + 1)


def test_diag_kernel_runs_every_part_against_fakes(fake, monkeypatch, tmp_path):
    """diag_kernel's control flow with the driver, torch, Triton and the session faked: every part recorded without
    an error, the swap's variants timed, every hand-built graph checked, the graphs destroyed before the release."""
    from runtime_cuda import cudrv
    events = []
    out = {"plain": _T(0x7F0000001000), "natent": _T(0x7F0000203000)}

    def kernel(key, fn):
        return SimpleNamespace(function=fn, module=0xA0 if key == "plain" else 0xA1, n_regs=90,
                               metadata=SimpleNamespace(shared=98328, num_warps=8),
                               asm={"ptx": MATMUL_HOST_SIGNATURE.replace("matmul_host_plain",
                                                                         "k_" + key), "cubin": b"\x7fELF"})
    kp, kn = kernel("plain", 0xF1), kernel("natent", 0xF3)
    monkeypatch.setattr(G.TT, "_inputs", lambda name, torch: {})
    monkeypatch.setattr(G.TT, "_launcher", lambda K, name, sfx, ins, torch: (lambda: (kp, out["plain"])))
    monkeypatch.setattr(G.TT, "_variant_launchers",
                        lambda name, ins, work, torch, same, variants=None: (same.update(natent=True) or
                                                                              {"natent": lambda: (kn, out["natent"])}))
    monkeypatch.setattr(G.TT, "_event_ms", lambda fn, torch, n=1: (fn(), 20.0)[1])
    monkeypatch.setattr(G, "use_ptxas", lambda which: None)
    monkeypatch.setattr(G, "static_compare", lambda *a, **k: {"sass_identical": True})
    monkeypatch.setattr(G, "const_pad_cubin", lambda kp_, work: (b"\x7fELF", {"argv": ["ptxas"], "pad_bytes": 200}))

    class TorchGraph:
        def instantiate(self):
            events.append("instantiate")

        def replay(self):
            events.append("replay")

        def __del__(self):
            events.append("torch graph destroyed")

    def capture(fn, torch):
        fn()
        sel = s.launch_selection.setdefault("k_natent", {"captured_native": 0})
        if s.graph_native == "all":
            sel["captured_native"] += 20
        return TorchGraph(), G._d().CUgraph(0xC0), "fake"
    monkeypatch.setattr(G, "capture", capture)
    monkeypatch.setattr(cudrv, "module_load_data", lambda cub: 0xD0)
    monkeypatch.setattr(cudrv, "module_functions", lambda mod, names: {names[0]: 0xF9})
    monkeypatch.setattr(cudrv, "copy_function_attributes", lambda src, dst: {"MAX_DYNAMIC_SHARED_SIZE_BYTES": 1})
    monkeypatch.setattr(cudrv, "module_unload", lambda mod: events.append("unload"))
    monkeypatch.setattr(cudrv, "address_range", lambda v: (v, 1) if v > 0x1000000 else None)
    fake.cuGraphDebugDotPrint = lambda g, path, flags: (Path(path.decode()).write_text("digraph {}"), (fake.OK,))[1]
    fake.CUgraphDebugDot_flags = SimpleNamespace(CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE=1)

    binding = SimpleNamespace(native_fns={"k_natent": 0xF2}, native_ready={"k_natent"},
                              kernel=lambda n: SimpleNamespace(native_entry="k_natent__hbnat"))

    def release():
        events.append("released")
        return {"unbounded": True}
    s = SimpleNamespace(bindings={0xA1: binding}, graph_native="off", launch_selection={},
                        counters=lambda publish=False: {"graph_native": {"unbounded": True}},
                        release_graph_captures=release)
    torch = SimpleNamespace(manual_seed=lambda n: None, equal=lambda a, b: True, int8="int8",
                            cuda=SimpleNamespace(synchronize=lambda: None,
                                                 current_stream=lambda: SimpleNamespace(cuda_stream=7)))
    rec: dict = {}
    stages = []
    G.diag_kernel(s, None, "k", tmp_path / "work", tmp_path / "out", torch, rec, stages.append, time.time() + 100, 3)
    assert stages[-1] == "k: part 3 identity" and "k: part 0 static" in stages, stages
    assert rec["capture"]["native_entry_captured"] and s.graph_native == "off"
    assert "error" not in rec["nodes"] and rec["nodes"]["plain"]["kernel_nodes"] == 4, rec["nodes"]
    assert rec["nodes"]["param_diff"]["identical"] and (tmp_path / "out" / "dot" / "k_natent.dot").is_file()
    assert rec["functions"]["native_entry_is_the_sessions"] is False      # the fake's nodes all name 0xF1
    assert rec["summary"][0].startswith("k: graphs: plain 4 nodes")
    sw = rec["swap"]
    assert "error" not in sw and sw["errors"] == {} and sw["rounds"] == 3 and sw["reference"] == "a", sw
    assert set(sw["variants"]) == set(G.VARIANTS), sw["variants"].keys()
    assert sw["variants"]["b"]["ratio"]["median"] == 1.0 and sw["e_functions"]["e_natent"]["name"] == "k_natent__hbnat"
    assert rec["identity_ok"], rec["identity"]
    assert set(rec["identity"]) == {"a", "b", "c", "d", "a0", "a_nattr", "e_plain", "e_natent", "f_const",
                                    "cap_plain", "cap_natent"}
    assert rec["f_const"]["pad_bytes"] == 200 and "f_const" in sw["e_functions"]
    assert rec["identity"]["c"]["output"] == "natent" and rec["identity"]["b"]["output"] == "plain"
    # the torch graphs are gone before the records are released; the fresh modules unloaded after
    assert events.index("released") > max(i for i, e in enumerate(events) if e == "torch graph destroyed")
    assert events.count("torch graph destroyed") == 2 and events.count("unload") == 3   # e_plain, e_natent, f_const
    assert rec["released"] == {"unbounded": True}


def test_gpu_main_plumbing_without_a_gpu(tmp_path, monkeypatch):
    """gpu_main on the CPU with diag_kernel faked: the real hbfd and session (attached: no kernel runs), each kernel
    in its own try/except (a failing one recorded, the next one run), the JSON written after each, the session
    closed; a kernel past the budget is skipped and says so."""
    triton = pytest.importorskip("triton")
    pytest.importorskip("torch")
    from devpath_common import toolchain_env
    for k, v in toolchain_env(tmp_path / "work").items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(triton, "set_allocator", lambda f: None)     # Triton's global allocator left alone
    seen = []

    def fake_diag(s, K, name, work, out_dir, torch, rec, save, deadline, pairs):
        seen.append((name, pairs, s.graph_native))
        rec["summary"] = [f"{name}: fake"]
        save(f"{name}: faked")
        if name == "matmul_host":
            raise RuntimeError("fake failure")
    monkeypatch.setattr(G, "diag_kernel", fake_diag)
    res: dict = {}
    out = tmp_path / "out"
    out.mkdir()
    G.gpu_main(res, ("matmul_host", "attn_fwd"), tmp_path / "work", out, out / "g.json", time.time() + 100, 5)
    assert [x[:2] for x in seen] == [("matmul_host", 5), ("attn_fwd", 5)] and seen[0][2] == "off"
    k = res["kernels"]
    assert "fake failure" in k["matmul_host"]["error"] and k["matmul_host"]["stage"] == "done"
    assert "error" not in k["attn_fwd"] and k["attn_fwd"]["stage"] == "done"
    assert res["summary"] == {"matmul_host": ["matmul_host: fake"], "attn_fwd": ["attn_fwd: fake"]}
    assert json.loads((out / "g.json").read_text())["kernels"]["attn_fwd"]["stage"] == "done"
    assert set(res["session"]) == {"graph_native_knob", "native_entry", "native_select"}
    res2: dict = {}
    G.gpu_main(res2, ("matmul_host",), tmp_path / "work", out, out / "g2.json", time.time() - 1, 5)
    assert res2["kernels"]["matmul_host"]["error"] == "budget spent before this kernel"


def test_const_pad_gives_the_module_a_user_constant_bank_and_keeps_the_code(tmp_path):
    """f_const's PTX: one unused .visible .const array after .address_size; ptxas keeps it (.nv.constant3 of that
    size, the symbol named) and the kernel's code is the same as without it; a PTX without .address_size is refused."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas")
    ptx = (".version 8.7\n.target sm_90a\n.address_size 64\n\n.visible .entry k(.param .u64 p)\n{\n.reg .b64 %rd<2>;\n"
           "ld.param.u64 %rd1, [p];\nst.global.u32 [%rd1], 7;\nret;\n}\n")
    padded = G.with_const_pad(ptx, 200)
    assert padded.count(".visible .const .align 8 .b8 __gnd_const_pad[200];") == 1
    assert padded.index("__gnd_const_pad") > padded.index(".address_size")
    cubins = {}
    for name, text in (("plain", ptx), ("pad", padded)):
        (tmp_path / f"{name}.ptx").write_text(text)
        subprocess.run([ptxas, "--gpu-name=sm_90a", str(tmp_path / f"{name}.ptx"), "-o", str(tmp_path / f"{name}.cubin")],
                       check=True, capture_output=True)
        cubins[name] = (tmp_path / f"{name}.cubin").read_bytes()
    from hbfcc.cubin import function_code
    assert function_code(tmp_path / "plain.cubin")["k"] == function_code(tmp_path / "pad.cubin")["k"]
    sec = subprocess.run(["readelf", "-S", "-W", str(tmp_path / "pad.cubin")], capture_output=True, text=True).stdout
    sym = subprocess.run(["readelf", "-s", "-W", str(tmp_path / "pad.cubin")], capture_output=True, text=True).stdout
    assert ".nv.constant3" in sec and "__gnd_const_pad" in sym and " 200 OBJECT" in sym
    assert ".nv.constant3" not in subprocess.run(["readelf", "-S", "-W", str(tmp_path / "plain.cubin")],
                                                 capture_output=True, text=True).stdout
    with pytest.raises(ValueError, match="address_size"):
        G.with_const_pad(".version 8.7\n.target sm_90a\n")
