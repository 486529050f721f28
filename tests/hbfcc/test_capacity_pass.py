"""The capacity rewrite (hbfcc/passes/capacity.py, issue 16; NOT GPU-verified):

* a CUDA kernel's loads, stores, vector loads, atomics and cp.async are rewritten (each through __hb_cap_xlate,
  the access on the frame address, a guarded __hb_cap_release; cp.async made synchronous), linked with the
  helper library, and the module assembles with ptxas for sm_90a;
* the rewritten sites are EXECUTED on the CPU by a small interpreter of the instructions the pass emits, with
  __hb_cap_xlate / __hb_cap_release backed by the CPU stand-in's device side (hbfd.capacity.frames.FramePool pin
  and unpin, misses served by a real CapacityService): loads read the store's bytes, stores land in the frame
  (dirty), guards hold on every step, nothing touches the unbacked span, and every pin is given back.
"""
from __future__ import annotations

import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

from hbfcommon import ctl
from hbfcommon.capacity import HBF_CAP_PAGE_BYTES as PAGE
from hbfcommon.profile import load_profile
from hbfcc import knobs
from hbfcc.passes.capacity import capacity_pass
from hbfcc.ptx.model import Address, Block, Immediate, Instruction, Negated, Register, Symbol, VarDecl
from hbfcc.ptx.parser import parse_module
from hbfd.capacity.backing import GeneratedStore, SparseFileStore
from hbfd.capacity.device import CapacityDevice
from hbfd.capacity.service import CapacityService
from hbfd.media import MediaGeometry

needs_cuda = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("ptxas") is None,
                                reason="nvcc/ptxas not installed")

KERNEL = r"""
extern "C" __global__ void k(const float* a, float* b, unsigned long long* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = a[i] * 2.f;
        b[i] = v;
        atomicAdd(c, (unsigned long long)v);
        float4 q = reinterpret_cast<const float4*>(a)[i >> 2];
        b[n + i] = q.x + q.w;
    }
}
extern "C" __global__ void cp(const float* a, float* out) {
    __shared__ float s[128];
    unsigned sa = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x]);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(sa), "l"(a + threadIdx.x));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
"""


def test_the_knob_selects_the_pass():
    assert knobs.parse_passes("capacity,timing") == ("timing", "capacity")
    from hbfcc.passes import pipeline
    assert pipeline(("timing", "capacity")) == ("capacity", "timing", "capacity_admission")
    assert pipeline(("timing", "flags", "capacity")) == ("flags", "capacity", "timing", "flags_admission",
                                                         "capacity_admission")


@needs_cuda
def test_a_cuda_kernel_rewritten_for_capacity_assembles_for_sm90a(tmp_path):
    from hbfcc.rewrite import rewrite_text
    (tmp_path / "k.cu").write_text(KERNEL)
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90a", str(tmp_path / "k.cu"), "-o", str(tmp_path / "k.ptx")],
                   check=True, capture_output=True)
    res = rewrite_text((tmp_path / "k.ptx").read_text(), passes=("timing", "capacity"))
    cap = {f["name"]: f for f in res.meta["capacity"]["functions"]}
    assert cap["k"]["sites"] == 5 and cap["k"]["capacity_admitted"]          # ld, st, atom, ld.v4, st
    assert cap["cp"]["capacity_admitted"] and cap["cp"]["cpasync_sites"] == 1 and cap["cp"]["sites"] == 2
    # sites carry the timing pass's kernel index (the counter slot the helpers charge): kernel 1 is cp
    kidx = res.meta["timing"]["kernels"].index("cp")
    sites = [int(x) for x in re.findall(r"st\.param\.b32\s+\[__hb_p2\], (\d+);", res.text)]
    assert kidx == 1 and any(x >> 16 == 1 for x in sites) and any(x >> 16 == 0 for x in sites)
    tm = {f["name"]: f for f in res.meta["timing"]["functions"]}
    assert tm["k"]["admitted"] and tm["k"]["capacity_admitted"]             # the helpers are linked callees
    assert tm["cp"]["admitted"] and tm["cp"]["capacity_admitted"]
    (tmp_path / "o.ptx").write_text(res.text)
    r = subprocess.run(["ptxas", "-arch=sm_90a", "-c", str(tmp_path / "o.ptx"), "-o", str(tmp_path / "o.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert ".func (.param .b64 x) __hb_cap_xlate(" in res.text                # linked, not a prototype only
    assert "[%__hbc_x]" in res.text and not any(".nc" in ln and "[%__hbc_x]" in ln for ln in res.text.splitlines())


def test_non_coherent_loads_take_the_coherent_path():
    """a frame is refilled mid-kernel: ld.global.nc / ldu through a capacity translation become plain ld"""
    src = PTX.replace("ld.global.u32 %r1, [%rd1+8];", "ld.global.nc.u32 %r1, [%rd1+8];").replace(
        "ld.global.v2.u32 {%r3, %r4}, [%rd1+4096];", "ldu.global.v2.u32 {%r3, %r4}, [%rd1+4096];")
    mod = capacity_pass(parse_module(src), {})
    fn = next(f for f in mod.functions() if f.body is not None)
    acc = [s for s in fn.body if type(s) is Instruction and any(type(o) is Address and type(o.base) is Register
                                                                 and o.base.name == "%__hbc_x" for o in s.operands)]
    assert len(acc) == 6
    assert all(s.opcode != "ldu" and "nc" not in s.modifiers for s in acc)


# ---------------------------------------------------------------------------------------------------------------
# executing the rewritten sites on the CPU
# ---------------------------------------------------------------------------------------------------------------
PTX = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u32 pn)
{
    .reg .b64 %rd<8>;
    .reg .b32 %r<8>;
    .reg .pred %p<3>;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u32 %r5, [pn];
    setp.ne.u32 %p1, %r5, 0;
    ld.global.u32 %r1, [%rd1+8];
    @%p1 st.global.u32 [%rd2+4], %r1;
    @!%p1 st.global.u32 [%rd2], %r1;
    atom.global.add.u32 %r2, [%rd2+4], 5;
    ld.global.v2.u32 {%r3, %r4}, [%rd1+4096];
    st.global.u32 [%rd2+12], %r4;
    ret;
}
"""
BASE = 0x7000_0000_0000
FRAME_BASE = 0x1000_0000_0000


class Machine:
    """One thread running the rewritten function: registers, params, memory at the frames (the pool's bytes) and
    at a native buffer; the capacity range's logical span is unbacked (touching it fails the test)."""

    def __init__(self, svc: CapacityService, native: dict[int, bytearray]) -> None:
        self.svc, self.dev, self.native = svc, CapacityDevice(svc), native
        self.regs: dict[str, int] = {}
        self.params: dict[str, int] = {}
        self.shared: dict[int, tuple[int, int]] = {}
        self.calls: list[tuple] = []
        self.now = 0

    # memory
    def _mem(self, addr: int, n: int) -> tuple[np.ndarray | bytearray, int]:
        if BASE <= addr < BASE + (1 << 40):
            raise AssertionError(f"an access reached the unbacked capacity span at {addr:#x}")
        if FRAME_BASE <= addr < FRAME_BASE + self.svc.pool.n * PAGE:
            f, off = divmod(addr - FRAME_BASE, PAGE)
            assert off + n <= PAGE
            return self.svc.pool.memory.data[f], off
        for b, buf in self.native.items():
            if b <= addr < b + len(buf):
                return buf, addr - b
        raise AssertionError(f"wild address {addr:#x}")

    def load(self, addr: int, n: int) -> int:
        buf, off = self._mem(addr, n)
        return int.from_bytes(bytes(buf[off:off + n]), "little")

    def store(self, addr: int, n: int, v: int) -> None:
        buf, off = self._mem(addr, n)
        buf[off:off + n] = np.frombuffer((v & ((1 << (8 * n)) - 1)).to_bytes(n, "little"), np.uint8) \
            if isinstance(buf, np.ndarray) else (v & ((1 << (8 * n)) - 1)).to_bytes(n, "little")

    # the helpers, as the device helper library's entry points do them (CPU stand-in's pin/unpin)
    def xlate(self, a: int, op: int, site: int) -> int:
        self.calls.append(("xlate", a, op))
        if not BASE <= a < BASE + self.svc.ranges[1].pages * PAGE:
            return a
        acc = self.dev.pin(1, (a - BASE) // PAGE, op, self.now)
        self.now += acc.wait_ns + 100
        return FRAME_BASE + acc.frame * PAGE + (a - BASE) % PAGE

    def release(self, a: int, x: int) -> None:
        self.calls.append(("release", a, x))
        self.dev.unpin((x - FRAME_BASE) // PAGE)

    # the interpreter
    def val(self, o) -> int:
        if type(o) is Register:
            return self.regs[o.name]
        if type(o) is Immediate:
            return int(o.text, 0)
        raise AssertionError(f"operand {o!r}")

    def addr(self, a: Address) -> int:
        if type(a.base) is Symbol:
            return ("sym", a.base.name)
        return (self.regs[a.base.name] if a.base is not None else 0) + a.offset

    def guard(self, ins: Instruction) -> bool:
        g = ins.guard
        return True if g is None else bool(self.regs[g.reg.name]) != g.negated

    def run_body(self, body) -> None:
        for s in body:
            if type(s) is Block:
                self.run_body(s.body)
            elif type(s) is Instruction and self.guard(s):
                self.step(s)

    def step(self, s: Instruction) -> None:
        op, m, o = s.opcode, s.modifiers, s.operands
        nbytes = {"u32": 4, "b32": 4, "u64": 8, "b64": 8, "s64": 8}
        if op == "ld" and "param" in m:
            a = self.addr(o[1])
            self.regs[o[0].name] = self.params[a[1]]
        elif op == "st" and "param" in m:
            self.params[self.addr(o[0])[1]] = self.val(o[1])
        elif op == "call":
            args = [self.params[x.name] for x in o[-1].items]
            fn = o[-2].name if len(o) == 3 else o[0].name
            if fn == "__hb_cap_xlate":
                self.params[o[0].items[0].name] = self.xlate(*args)
            elif fn == "__hb_cap_release":
                self.release(*args)
            else:
                raise AssertionError(fn)
        elif op in ("mov", "add", "cvt"):
            v = self.val(o[1]) + (self.val(o[2]) if op == "add" else 0)
            self.regs[o[0].name] = v & ((1 << 64) - 1)
        elif op == "setp":
            a, b = self.val(o[1]), self.val(o[2])
            if m[-1] == "u32":
                a, b = a & 0xFFFFFFFF, b & 0xFFFFFFFF
            r = {"ne": a != b, "eq": a == b}[m[0]]
            if "and" in m:
                c = o[3]
                r = r and (not self.regs[c.reg.name] if type(c) is Negated else bool(self.regs[c.name]))
            self.regs[o[0].name] = int(r)
        elif op == "ld":
            n = nbytes[m[-1]]
            a = self.addr(o[1])
            if "v2" in m:
                for k, e in enumerate(o[0].elems):
                    self.regs[e.name] = self.load(a + k * n, n)
            else:
                self.regs[o[0].name] = self.load(a, n)
        elif op == "st":
            self.store(self.addr(o[0]), nbytes[m[-1]], self.val(o[1]))
        elif op == "atom":
            n = nbytes[m[-1]]
            a = self.addr(o[1])
            old = self.load(a, n)
            self.store(a, n, old + self.val(o[2]))
            self.regs[o[0].name] = old
        elif op == "cp" and m[:2] == ("async", "commit_group"):
            self.calls.append(("commit",))
        elif op == "cp" and m[:2] == ("async", "wait_group"):
            self.calls.append(("wait", self.val(o[0])))
        elif op == "cp" and m[0] == "async":              # cp.async.ca.shared.global [dst], [src], n{, src-size}
            n = self.val(o[2])
            src = self.addr(o[1])
            real = n if len(o) < 4 else self.val(o[3])
            data = self.load(src, real) if real else 0
            self.shared[self.addr(o[0])] = (data, n)
            if FRAME_BASE <= src < FRAME_BASE + self.svc.pool.n * PAGE:
                assert self.svc.pool.frames[(src - FRAME_BASE) // PAGE]["pins"] > 0   # pinned while copying
            self.calls.append(("cp.async", src, real))
        elif op == "and" and m == ("pred",):
            self.regs[o[0].name] = int(bool(self.regs[o[1].name]) and bool(self.regs[o[2].name]))
        elif op == "not" and m == ("pred",):
            self.regs[o[0].name] = int(not self.regs[o[1].name])
        elif op == "ret":
            pass
        else:
            raise AssertionError(f"not interpreted: {s}")


@pytest.mark.parametrize("flag", [1, 0])
def test_the_rewritten_sites_execute_on_the_frames(tmp_path, flag):
    mod = capacity_pass(parse_module(PTX), meta := {})
    assert meta["capacity"]["functions"][0]["sites"] == 6
    fn = next(f for f in mod.functions() if f.body is not None)
    assert not any(type(s) is VarDecl and s.space == "global" for s in fn.body)
    svc = CapacityService(MediaGeometry.from_profile(load_profile("nominal")), 32)
    src = GeneratedStore(11, 4)
    svc.add_range(1, 4, 0, ctl.HBF_PERM_READ, src)                       # a: read-only, generated
    rw = SparseFileStore(tmp_path / "b.bin", 2)
    svc.add_range(2, 2, 4 * PAGE, ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE, rw)
    native = {0x5000_0000: bytearray(64)}
    m = Machine(svc, native)
    # range 1 is at BASE (a); b is native memory (not a capacity range): its accesses keep their address
    m.params = {"pa": BASE, "pb": 0x5000_0000, "pn": flag}
    m.run_body(fn.body)
    want = src.read_pages(0, 2)
    r1 = int.from_bytes(want[0][8:12].tobytes(), "little")
    r4 = int.from_bytes(want[1][4:8].tobytes(), "little")
    b = native[0x5000_0000]
    got_off = 4 if flag else 0
    assert int.from_bytes(b[got_off:got_off + 4], "little") == ((r1 + 5) & 0xFFFFFFFF if flag else r1)
    assert int.from_bytes(b[12:16], "little") == r4
    assert (svc.pool.frames["pins"] == 0).all()                           # every pin given back
    rel = [c for c in m.calls if c[0] == "release"]
    assert len(rel) == 2 and all(BASE <= c[1] < BASE + 4 * PAGE for c in rel)   # only the capacity accesses
    xl = [c for c in m.calls if c[0] == "xlate"]
    assert len(xl) == 5                                                   # the guarded-off store made no call
    assert svc.n["misses"] == 2                                           # two pages, one miss each


def test_stores_and_atomics_through_a_capacity_range_mark_the_frame_dirty(tmp_path):
    """The same function with b in a read-write capacity range: its store and atomic land in b's frame (dirty),
    and survive write-back: the backing file holds them after the service closes."""
    mod = capacity_pass(parse_module(PTX), {})
    fn = next(f for f in mod.functions() if f.body is not None)
    svc = CapacityService(MediaGeometry.from_profile(load_profile("nominal")), 32)
    src = GeneratedStore(5, 2)
    svc.add_range(1, 2, 0, ctl.HBF_PERM_READ, src)
    rw = SparseFileStore(tmp_path / "b.bin", 1)
    svc.add_range(2, 1, 2 * PAGE, ctl.HBF_PERM_READ | ctl.HBF_PERM_WRITE, rw)
    m = Machine(svc, {})
    base_b = BASE + (1 << 30)

    def xlate(a, op, site, _m=m):
        _m.calls.append(("xlate", a, op))
        for rid, base, pages in ((1, BASE, 2), (2, base_b, 1)):
            if base <= a < base + pages * PAGE:
                acc = _m.dev.pin(rid, (a - base) // PAGE, op, _m.now)
                return FRAME_BASE + acc.frame * PAGE + (a - base) % PAGE
        return a
    m.xlate = xlate
    m.params = {"pa": BASE, "pb": base_b, "pn": 1}
    m.run_body(fn.body)
    fb = svc.pool.lookup(2, 0)
    assert svc.pool.frames[fb]["dirty"] == 1 and (svc.pool.frames["pins"] == 0).all()
    svc.close()
    got = np.fromfile(tmp_path / "b.bin", np.uint8)
    r1 = struct.unpack_from("<I", src.read_pages(0, 1)[0].tobytes(), 8)[0]
    r4 = struct.unpack_from("<I", src.read_pages(1, 1)[0].tobytes(), 4)[0]
    assert struct.unpack_from("<I", got.tobytes(), 4)[0] == (r1 + 5) & 0xFFFFFFFF
    assert struct.unpack_from("<I", got.tobytes(), 12)[0] == r4


CP_PTX = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry c(.param .u64 pa, .param .u32 pn)
{
    .reg .b64 %rd<4>;
    .reg .b32 %r<4>;
    .shared .align 16 .b8 sm[64];
    ld.param.u64 %rd1, [pa];
    ld.param.u32 %r1, [pn];
    mov.u32 %r2, sm;
    cp.async.ca.shared.global [%r2], [%rd1+16], 8;
    cp.async.ca.shared.global [%r2+8], [%rd1+8192], 8, %r1;
    cp.async.commit_group;
    cp.async.wait_group 0;
    ret;
}
"""


@pytest.mark.parametrize("srcsize", [8, 0])
def test_cp_async_from_a_capacity_range_is_translated_and_synchronous(srcsize):
    """cp.async reads the frame while it is pinned, the pin is given back only after a wait_group 0, and a copy
    with src-size 0 (it reads nothing: its address may be anywhere) is not translated."""
    mod = capacity_pass(parse_module(CP_PTX), meta := {})
    f = meta["capacity"]["functions"][0]
    assert f["cpasync_sites"] == 2 and f["capacity_admitted"]
    fn = next(x for x in mod.functions() if x.body is not None)
    svc = CapacityService(MediaGeometry.from_profile(load_profile("nominal")), 32)
    src = GeneratedStore(4, 3)
    svc.add_range(1, 3, 0, ctl.HBF_PERM_READ, src)
    m = Machine(svc, {})
    m.params = {"pa": BASE, "pn": srcsize}
    m.regs["%r2"] = 0
    orig_step = m.step

    def step(s, _o=orig_step):                       # mov %r2, sm: a shared address
        if s.opcode == "mov" and type(s.operands[1]) is Symbol:
            m.regs[s.operands[0].name] = 0x100
            return
        _o(s)
    m.step = step
    m.run_body(fn.body)
    page0, page2 = src.read_pages(0, 1)[0], src.read_pages(2, 1)[0]
    assert m.shared[0x100][0] == int.from_bytes(page0[16:24].tobytes(), "little")
    if srcsize:
        assert m.shared[0x108][0] == int.from_bytes(page2[0:8].tobytes(), "little")
    kinds = [c[0] for c in m.calls]
    xl = [c for c in m.calls if c[0] == "xlate"]
    assert len(xl) == (2 if srcsize else 1)          # src-size 0: no translation, no miss
    for i, c in enumerate(m.calls):                  # every release follows a wait_group 0 after its copy
        if c[0] == "release":
            assert ("wait", 0) in m.calls[:i] and kinds[:i].count("cp.async") >= 1
    assert (svc.pool.frames["pins"] == 0).all()
    assert svc.n["misses"] == (2 if srcsize else 1)
