"""The real TMA load of bench/tma_tensormap.py gpu (tma_semantics, bench/src/tma_load_kernel.cu), checked on the CPU.

On the H200 (2026-12-05) its first load ended with CUDA_ERROR_ILLEGAL_INSTRUCTION, twice. The kernel was sound (the
map a __grid_constant__ parameter, box and barrier aligned); the CASES were not: the generator drew the innermost
coordinate from any integer, and the first case (rank 1, bf16, c0 = -9, i.e. -18 bytes) breaks the TMA unit's rule
that the innermost coordinate be a multiple of 16 bytes (triton-lang/triton PR 9112 and issue 7385, tile-ai/tilelang
issue 2527: an unaligned one is an illegal instruction on Hopper); 157 of its 200 cases did. Here: the validator
(hbfcommon.tensormap.copy_problems) refuses that case, passes every case the fixed generator draws, and the kernel's
PTX puts the mbarrier and the box exactly where the validator is told they are."""
from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hbfcommon import tensormap as tm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import tma_tensormap as B  # noqa: E402


def _launch_problems(m: tm.TensorMap, c) -> list[str]:
    """copy_problems with the kernel's layout and the shared memory tma_semantics launches with."""
    shared = B.TMA_BOX_OFF + tm.smem_reserve(m) + B.TMA_SMEM_SLACK
    return tm.copy_problems(m, c, smem_offset=B.TMA_BOX_OFF, mbar_offset=B.TMA_MBAR_OFF,
                            smem_bytes=min(shared, B.SMEM_OPTIN_MAX))


def _cases() -> list:
    rng = random.Random(15)
    rng.randbytes(4 << 20)       # tma_semantics draws the global pattern first
    return B.semantic_cases(rng)


def test_the_first_faulting_case_is_refused():
    """The first launch of 2026-12-05 (both runs): rank 1, BFLOAT16, dims 22, box 24, innermost coordinate -9."""
    m = tm.TensorMap(base=1 << 30, dtype=9, dims=(22,), gstrides=(), box=(24,), estrides=(1,))
    why = _launch_problems(m, (-9,))
    assert len(why) == 1 and "innermost coordinate -9" in why[0], why
    assert _launch_problems(m, (-8,)) == [] and _launch_problems(m, (16,)) == []


def test_every_generated_case_is_launchable():
    cases = _cases()
    assert len(cases) == 200
    bad = [(m, c, w) for m, c in cases if (w := _launch_problems(m, c))]
    assert not bad, bad[:3]
    # the coverage the check is for is still there: out-of-bounds starts, swizzles, interleave, elementStrides
    assert any(c[0] < 0 for _, c in cases) and any(m.swizzle for m, _ in cases)
    assert any(m.interleave for m, _ in cases) and any(max(m.estrides) > 1 for m, _ in cases)
    assert max(B.TMA_BOX_OFF + tm.smem_reserve(m) + B.TMA_SMEM_SLACK for m, _ in cases) <= B.SMEM_OPTIN_MAX


def test_copy_problems_names_each_rule():
    m = tm.TensorMap(base=1 << 30, dtype=6, dims=(64, 64), gstrides=(128,), box=(64, 8), estrides=(1, 1), swizzle=3)
    assert tm.smem_dst_align(m) == 1024 and tm.smem_reserve(m) == 1024
    ok = dict(smem_offset=1024, mbar_offset=0, smem_bytes=2048)
    assert tm.copy_problems(m, (0, 3), **ok) == []
    assert any("not 1024-byte aligned" in w for w in tm.copy_problems(m, (0, 3), **{**ok, "smem_offset": 512}))
    assert any("mbarrier at 4" in w for w in tm.copy_problems(m, (0, 3), **{**ok, "mbar_offset": 4}))
    assert any("inside the box" in w for w in tm.copy_problems(m, (0, 3), **{**ok, "mbar_offset": 1032}))
    assert any("the CTA has 2000" in w for w in tm.copy_problems(m, (0, 3), **{**ok, "smem_bytes": 2000}))
    assert any("2 coordinates for a rank-1" in w
               for w in tm.copy_problems(tm.TensorMap(base=0, dtype=0, dims=(32,), gstrides=(), box=(16,),
                                                      estrides=(1,)), (0, 0), **ok))
    plain = tm.TensorMap(base=1 << 30, dtype=7, dims=(40, 9), gstrides=(160,), box=(12, 5), estrides=(1, 2))
    assert tm.smem_dst_align(plain) == 128 and tm.smem_reserve(plain) == plain.box_bytes == 12 * 3 * 4
    assert tm.copy_problems(plain, (4, -1), **ok) == [] and tm.copy_problems(plain, (2, 0), **ok)


# ---- the kernel's PTX: where the barrier and the box really are -------------------------------------------------------
@pytest.fixture(scope="module")
def ptx(tmp_path_factory) -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    d = tmp_path_factory.mktemp("tmaload")
    r = subprocess.run([nvcc, "-ptx", "-arch=sm_90a", "-std=c++17", *B.tma_load_defines(), str(B.TMA_LOAD_KERNEL),
                        "-o", str(d / "k.ptx")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if shutil.which("ptxas"):
        r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(d / "k.ptx"), "-o", str(d / "k.o")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        # no static shared memory: the dynamic block starts the CTA's user shared memory, its alignment holds
        assert not re.search(r"[1-9]\d* bytes smem", r.stdout + r.stderr), r.stdout + r.stderr
    return (d / "k.ptx").read_text()


def _resolve(ptx: str, reg: str) -> tuple[str, int]:
    """(symbol, byte offset) a 32/64-bit register holds, following mov / add-immediate / cvta chains back."""
    off = 0
    for _ in range(16):
        m = re.search(rf"^\s*(mov|add|cvta\.param|cvta\.to\.shared|cvta\.shared)\.[usb]\d+\s+{re.escape(reg)},\s*"
                      rf"([%\w]+)(?:,\s*(-?\d+))?;", ptx, flags=re.M)
        assert m, f"no definition of {reg}"
        src = m.group(2)
        if m.group(1) == "add":
            assert m.group(3) is not None, f"{reg}: add of a non-constant"
            off += int(m.group(3))
        if not src.startswith("%"):
            return src, off
        reg = src
    raise AssertionError(f"{reg}: chain too long")


def test_kernel_places_barrier_and_box_where_the_validator_is_told(ptx):
    assert re.search(r"^\.extern \.shared \.align 1024 \.b8 dyn\[\];", ptx, flags=re.M), \
        "dynamic block not 1 KiB aligned"
    shared_decls = re.findall(r"^\s*(?:\.extern\s+)?\.shared\s.*$", ptx, flags=re.M)
    assert len(shared_decls) == 1, shared_decls          # nothing else in shared memory
    assert ".local" not in ptx and "ld.local" not in ptx, "the tensor map (or anything) copied to local memory"
    assert re.search(r"\.param \.align (64|128) \.b8 tma_load_param_0\[128\]", ptx), "the map is not a 128-B param"
    copies = re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.shared::cluster\.global\.mbarrier::complete_tx::bytes "
                        r"\[(%r\d+)\], \[(%rd\d+), \{[^}]*\}\], \[(%r\d+)\];", ptx)
    assert sorted(int(c[0]) for c in copies) == [1, 2, 3, 4, 5], copies
    for _, dst, tmap, bar in copies:
        assert _resolve(ptx, dst) == ("dyn", B.TMA_BOX_OFF)
        assert _resolve(ptx, bar) == ("dyn", B.TMA_MBAR_OFF)
        assert _resolve(ptx, tmap) == ("tma_load_param_0", 0)        # the grid-constant parameter itself
        assert re.search(rf"cvta\.param\.u64\s+{re.escape(tmap)},", ptx), "the map's address is not a param address"
    for op in ("mbarrier.init.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64 _,",
               "mbarrier.try_wait.parity.shared::cta.b64 p,"):
        regs = re.findall(re.escape(op) + r"\s*\[(%r\d+)\]", ptx)
        assert regs and all(_resolve(ptx, r) == ("dyn", B.TMA_MBAR_OFF) for r in regs), (op, regs)
    # the init is fenced for the async proxy before the copy is issued
    i_init, i_fence = ptx.index("mbarrier.init"), ptx.index("fence.proxy.async.shared::cta")
    assert i_init < i_fence < ptx.index("cp.async.bulk.tensor")
    assert "fence.mbarrier_init.release.cluster" in ptx


# ---- the harness itself, against a simulated device ----------------------------------------------------------------------
class _FakeDevice:
    """cudrv's calls tma_semantics makes, over host memory; the "TMA unit" moves the model's box (complete_tx counts
    box_bytes) and, for a swizzled / interleaved map, places its elements in reverse (a permutation)."""

    def __init__(self) -> None:
        self.mem: dict[int, bytearray] = {}
        self.launches = 0
        self.next = 1 << 32

    def _at(self, addr: int, n: int) -> memoryview:
        for base, buf in self.mem.items():
            if base <= addr and addr + n <= base + len(buf):
                return memoryview(buf)[addr - base:addr - base + n]
        raise AssertionError(f"{addr:#x}+{n} outside every allocation")

    def mem_alloc(self, n: int) -> int:
        p, self.next = self.next, self.next + ((n + 4095) // 4096 + 1) * 4096
        self.mem[p] = bytearray(n)
        return p

    def mem_free(self, p: int) -> None:
        del self.mem[p]

    def htod(self, dptr, src, n):
        import ctypes  # noqa: PLC0415
        self._at(dptr, n)[:] = ctypes.string_at(ctypes.addressof(src), n)

    def dtoh(self, dst, dptr, n):
        import ctypes  # noqa: PLC0415
        ctypes.memmove(ctypes.addressof(dst), bytes(self._at(dptr, n)), n)

    def memset_d8(self, dptr, byte, n):
        self._at(dptr, n)[:] = bytes([byte]) * n

    def launch(self, fn, grid, block, args, shared=0):
        self.launches += 1
        desc = bytes(args[0].b)
        rank, cc = args[1].value, [a.value for a in args[2:7]]
        expect, reserve, d_out, d_st = args[7].value, args[8].value, args[9].value, args[10].value
        m = tm.decode(desc)
        c = tuple(cc[:rank])
        assert tm.copy_problems(m, c, smem_offset=B.TMA_BOX_OFF, mbar_offset=B.TMA_MBAR_OFF, smem_bytes=shared) == []
        ok = expect == m.box_bytes
        self._at(d_st, 8)[:] = (1 if ok else 2).to_bytes(8, "little")
        if ok:
            gbase = min(b for b in self.mem if len(self.mem[b]) >= 4 << 20)
            box = B.expected_smem(m, c, bytes(self._at(m.base, (4 << 20) - (m.base - gbase))))
            if m.swizzle or m.interleave:
                e = m.elem_bytes
                box = b"".join(reversed([box[i:i + e] for i in range(0, len(box), e)]))
            self._at(d_out, reserve)[:] = box + bytes([B.PREFILL]) * (reserve - len(box))

    def __getattr__(self, name):
        return {"module_load_data": lambda image: "mod", "module_function": lambda mod, name: "fn",
                "func_set_max_dynamic_shared": lambda fn, n: None, "ctx_synchronize": lambda: None}[name]


def test_tma_semantics_harness_on_a_simulated_device(monkeypatch, tmp_path):
    """tma_semantics end to end against _FakeDevice (the kernel compiled for real, not run): every case launched,
    completed with the model's count and equal to the model; the negative control times out; nothing refused."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    import runtime_cuda  # noqa: PLC0415
    fake = _FakeDevice()
    monkeypatch.setattr(runtime_cuda, "cudrv", fake, raising=False)
    monkeypatch.setitem(sys.modules, "runtime_cuda.cudrv", fake)

    class Drv:
        encode = staticmethod(tm.encode)
    res: dict = {}
    flushes = []
    children = []

    def child(index, seed, cubin, timeout_s):      # the tma-case child's work, in this process on the fake device
        children.append(index)
        return B.case_record(Drv(), tmp_path, seed, cubin.read_bytes(), index)
    monkeypatch.setattr(B, "_case_in_child", child)
    B.tma_semantics(Drv(), tmp_path, 15, res, lambda: flushes.append(dict(res)))
    assert res["refused_before_launch"] == 0 and res["cases"] == 200, res
    assert res["completed"] == res["completed_model_count"] == res["values_equal"] == 200, res
    assert res["checked_exact"] + res["checked_multiset"] == 200 and res["checked_multiset"] > 0, res
    assert res["negative_controls"] == 1 and res["negative_timed_out"] == 1, res
    assert res["floor_ne_ceil_cases"] > 0 and not res["failures"] and "error" not in res, res
    # the boxes wholly outside the tensor ran last, each in its own "child", after the negative control
    n_out = res["wholly_outside_cases"]
    assert n_out > 0 and len(children) == n_out == len(res["wholly_outside"]) and res["wholly_outside_faults"] == 0
    assert children == list(range(200 - n_out, 200))
    assert all(r["completed_with"] == "model" and r["tried"] == ["model"] for r in res["wholly_outside"])
    assert len(flushes) >= 200 and fake.launches == 201


def test_a_dead_or_hung_child_is_recorded_and_the_run_goes_on(monkeypatch, tmp_path):
    """_case_in_child: a child that faulted prints its record with the error; one that died or hung leaves the
    counts it had tried (its progress lines) and why it ended -- never an exception in the parent."""
    import subprocess  # noqa: PLC0415
    outs = iter([
        (0, '{"progress": ["model"]}\n{"record": {"index": 3, "tried": ["model"], "completed_with": null, '
            '"error": "CudaError: CUDA_ERROR_ILLEGAL_ADDRESS"}}\n'),
        (-6, '{"progress": ["model"]}\n{"progress": ["model", "descriptor"]}\n'),
        None])

    def run(cmd, **kw):
        assert cmd[2] == "tma-case" and kw["timeout"] == 5
        o = next(outs)
        if o is None:
            raise subprocess.TimeoutExpired(cmd, 5, output=b'{"progress": ["model"]}\n')
        return subprocess.CompletedProcess(cmd, o[0], o[1], "Aborted")
    monkeypatch.setattr(B.subprocess, "run", run)
    a = B._case_in_child(3, 15, tmp_path / "k.cubin", 5)
    assert a["error"].endswith("ILLEGAL_ADDRESS") and a["tried"] == ["model"]
    b = B._case_in_child(4, 15, tmp_path / "k.cubin", 5)
    assert b["tried"] == ["model", "descriptor"] and b["error"].startswith("child exited -6") and "Aborted" in b["error"]
    c = B._case_in_child(5, 15, tmp_path / "k.cubin", 5)
    assert c["tried"] == ["model"] and c["error"] == "child timed out after 5 s" and c["completed_with"] is None


def test_modeled_path_configurations_are_launchable():
    """bench/tma_semantics.py's real loads (uint32 maps, box at a 128-aligned static tile, barrier after it): every
    rank's in-bounds / below / above configuration keeps the TMA unit's rules (rank 5's innermost coordinates were
    -2 and 14 elements, 8 and 56 bytes, before 2026-12-05's fix)."""
    import tma_semantics as S  # noqa: PLC0415
    for rank, (dims, box) in S.SHAPES.items():
        gs, acc = [], 4
        for d in dims[:-1]:
            acc *= d
            gs.append(acc)
        m = tm.TensorMap(base=1 << 30, dtype=2, dims=tuple(dims), gstrides=tuple(gs), box=tuple(box),
                         estrides=(1,) * rank)
        tm.check_rules(m)
        for name, c in S._configs(rank):
            assert tm.copy_problems(m, c, smem_offset=0, mbar_offset=16384, smem_bytes=16384 + 8) == [], (rank, name)
        assert any(c[k] < 0 for _, c in S._configs(rank) for k in range(rank))     # still out of bounds somewhere


def _case_rng():
    rng = random.Random(15)
    rng.randbytes(4 << 20)          # tma_semantics draws the global pattern first
    return rng


def test_wholly_outside_boxes_run_last_and_are_the_recorded_anomalies():
    """The 2026-12-05 H200 run's four anomalies (bench/results/tma_tensormap_gpu_r3.json: two timeouts, a
    completion with the descriptor's count, the fault) are boxes wholly outside the tensor; the harness now runs
    every such box after the others and the negative control, trying each candidate count in its own launch."""
    import json  # noqa: PLC0415
    rec = json.loads((ROOT / "bench/results/tma_tensormap_gpu_r3.json").read_text())["tma_semantics"]
    for f in rec["failures"] + [rec["error"]]:
        i = {k: tuple(v) if isinstance(v, list) else v for k, v in f["inputs"].items()}
        m = tm.TensorMap(**{**i, "base": 0})
        assert B.wholly_outside(m, f["coords"])
        names = [n for n, _ in B.outside_candidates(m)]
        assert names[:2] == ["model", "descriptor"] and "full_box" in names
        counts = dict(B.outside_candidates(m))
        assert counts["model"] == f["model_count"] and counts["descriptor"] == f["descriptor_count"]
    cases = B.semantic_cases(_case_rng())
    order = B.semantic_order(cases)
    flags = [B.wholly_outside(m, c) for m, c in order]
    k = flags.index(True)
    assert not any(flags[:k]) and all(flags[k:]) and sorted(map(id, order)) == sorted(map(id, cases))
    m = tm.TensorMap(base=0, dtype=0, dims=(8,), gstrides=(), box=(8,), estrides=(1,))
    assert not B.wholly_outside(m, (0,)) and B.wholly_outside(m, (8,)) and B.wholly_outside(m, (-8,))
    assert not B.wholly_outside(m, (-7,))


def test_the_unmeasured_rule_is_what_the_h100_measured():
    """tm.unmeasured (hb_tmap_unmeasured) against the real loads of 2026-12-05 on an H100 (all 200 cases of the
    harness, bench/results/tma_tensormap_gpu_r4_h100_semantics.json): every case that misbehaved (a barrier that
    completed with none of the counts tried, a completion with another count than the model's, bytes that differ,
    a fault) is one the rule refuses; of the refused ones only the interleaved copy with elementStride[0] = 2 at
    coordinate 0 was right (refused anyway: one case is too few)."""
    doc = json.loads((ROOT / "bench" / "results" / "tma_tensormap_gpu_r4_h100_semantics.json").read_text())
    res = doc["tma_semantics"]
    assert res["cases"] == 200 and res["negative_timed_out"] == 1

    def key(inputs, coords):
        return (tuple(inputs["dims"]), tuple(inputs["box"]), tuple(inputs["estrides"]), tuple(coords))
    bad = {key(f["inputs"], f["coords"]) for f in res["failures"]}
    bad |= {key(r["inputs"], r["coords"]) for r in res["wholly_outside"] if r.get("error")}
    assert len(res["failures"]) < 20 and len(bad) == 17          # (the failures list was not cut at 20)
    rng = random.Random(15)
    rng.randbytes(4 << 20)
    cases = B.semantic_order(B.semantic_cases(rng))
    refused = {key(B._inputs(m), c): (m, c) for m, c in cases if tm.unmeasured(m, c)}
    assert bad <= set(refused), bad - set(refused)
    extra = [refused[k] for k in set(refused) - bad]
    assert len(extra) == 1 and extra[0][0].estrides[0] == 2 and extra[0][1][0] == 0
    assert not any(tm.unmeasured(m, c) for m, c in cases if not m.interleave)


def test_encode_tiled_raw_passes_the_bindings_their_own_integer_types():
    """The one call of cuTensorMapEncodeTiled (bench/tma_tensormap.py; bench/tma_semantics.py's encode_tiled goes
    through it): every array entry as cuuint64_t / cuuint32_t (cuda-python 13 refused plain ints in
    tma_semantics.py's own call on the H100, 2026-12-05), a rank-1 map with its one-entry stride array, the 128
    bytes back in word order; a driver refusal comes back named, not raised."""
    class U:
        def __init__(self, v):
            self.v = v

    class U64(U):
        pass

    class U32(U):
        pass

    calls = []

    class Fake:
        cuuint64_t, cuuint32_t = U64, U32

        @staticmethod
        def _enum(v):
            return v
        CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = _enum
        CUtensorMapL2promotion = CUtensorMapFloatOOBfill = _enum

        @staticmethod
        def cuTensorMapEncodeTiled(*a):
            calls.append(a)
            if a[2] == 0:
                return 7, None

            class T:
                opaque = list(range(16))
            return 0, T()

        @staticmethod
        def cuGetErrorName(err):
            return 0, b"CUDA_ERROR_INVALID_VALUE"
    inp = {"base": 1 << 20, "dtype": 2, "dims": [64, 8], "gstrides": [256], "box": [16, 4], "estrides": [1, 1],
           "interleave": 0, "swizzle": 0, "l2promo": 0, "fill": 0}
    rc, name, raw = B.encode_tiled_raw(Fake, inp)
    assert (rc, name) == (0, "CUDA_SUCCESS") and raw == b"".join(i.to_bytes(8, "little") for i in range(16))
    a = calls[-1]
    assert all(type(x) is U64 for x in a[3] + a[4]) and all(type(x) is U32 for x in a[5] + a[6])
    assert [x.v for x in a[3]] == [64, 8] and [x.v for x in a[4]] == [256] and [x.v for x in a[5]] == [16, 4]
    rc, name, raw = B.encode_tiled_raw(Fake, {**inp, "dims": [64], "gstrides": [], "box": [16], "estrides": [1]})
    assert rc == 0 and [x.v for x in calls[-1][4]] == [256]          # rank 1: one entry (64 x 4 B, 16-rounded)
    assert B.encode_tiled_raw(Fake, {**inp, "base": 0}) == (7, "CUDA_ERROR_INVALID_VALUE", None)
