"""CPU tests of bench/tma_triton.py (issue 15, item 5): its dry run compiles the bench's three Triton TMA kernels
(host-descriptor matmul, device-descriptor matmul, FlashAttention-style forward) for sm_90 through hbfcc-ptxas and
every one must be admitted with all its TMA tensor copies rewritten; plus the bench's own bookkeeping (both builds
of every kernel in the source, the expected TMA traffic, the admission criterion). No GPU needed; the dry run takes
about 10 s on a 2-core box."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import tma_triton as TT  # noqa: E402


def test_both_builds_of_every_kernel_are_in_the_source():
    text = TT.kernels_text()
    for k in TT.KERNELS:
        for sfx in ("plain", "hbf"):
            assert text.count(f"def {k}_{sfx}(") == 1, (k, sfx)
    assert "_SFX" not in text
    # the device-descriptor kernels build their descriptors on the device; the host one takes them as arguments
    assert text.count("tl.make_tensor_descriptor") == 2 * (3 + 4)


def test_expected_tma_traffic():
    mm = TT.expected_tma("matmul_host")
    tiles, steps = (1024 // 128) ** 2, 1024 // 64
    # A's [128, 64] tile is one box, B's [64, 128] two [64, 64] boxes (128-byte inner extent), C's [128, 128] two
    assert mm == {"load_copies": tiles * steps * 3, "store_copies": tiles * 2,
                  "input_bytes_read": tiles * steps * (128 * 64 * 2) * 2}
    assert [TT.box_copies(64, c) for c in (32, 64, 65, 128, 256)] == [1, 1, 2, 2, 4]
    # every C tile reads a whole A row panel and a whole B column panel: 8 x each input's bytes
    assert mm["input_bytes_read"] == 8 * 2 * (1024 * 1024 * 2)
    at = TT.expected_tma("attn_fwd")
    # Q read once, K and V once per Q block (8 blocks per (batch, head))
    qkv = 2 * 4 * 1024 * 64 * 2
    assert at["input_bytes_read"] == qkv + 2 * 8 * qkv
    assert at["load_copies"] == 64 * (1 + 2 * 16) and at["store_copies"] == 64


def test_admission_criterion_rejects_what_it_must():
    good = {"artifact": True, "admitted": True, "tma_tensor_copies": 7, "ptx_tensor_copies": 7, "tma_hooks": 8,
            "cubin_calls_helpers": True, "dynamic_smem_base_kept": True}
    assert TT.admitted_with_tma(good)
    for k, v in (("admitted", False), ("artifact", False), ("tma_tensor_copies", 0), ("tma_hooks", 0),
                 ("cubin_calls_helpers", False), ("tma_tensor_copies", 6), ("dynamic_smem_base_kept", False)):
        assert not TT.admitted_with_tma({**good, k: v}), k


def test_the_dynamic_shared_base_may_move_by_whole_kib_only():
    # the H100 fault of 2026-12-06: a 392-byte table (400 B of static smem) moved Triton's global_smem off its
    # 1024-byte alignment; the padded table (1024 B) keeps it
    assert not TT.dynamic_smem_base_kept(0, 400)
    assert TT.dynamic_smem_base_kept(0, 1024) and TT.dynamic_smem_base_kept(16, 2064)
    assert not TT.dynamic_smem_base_kept(None, 1024) and not TT.dynamic_smem_base_kept(0, None)


def test_artifact_admission_reads_an_artifact_record():
    art = {"helper": {"path": "/x/hbf_helpers.ptx"},
           "kernels": [{"admitted": False, "not_admitted_reasons": ["cp.async.bulk.prefetch refused"],
                        "tma": {"tma.load.tensor.2d": 3, "tma.store.tensor.2d": 1, "mbarrier.init": 2},
                        "tma_hooks": 4, "ptxas_before": {"registers": 90, "smem_bytes": 0},
                        "ptxas_after": {"registers": 200, "smem_bytes": 400}}]}
    a = TT.artifact_admission(art)
    assert a["admitted"] is False and a["reasons"] == ["cp.async.bulk.prefetch refused"]
    assert a["tma_tensor_copies"] == 4 and a["helper"] == "hbf_helpers.ptx"
    assert a["registers_plain_instrumented"] == [90, 200]
    assert a["smem_plain_instrumented"] == [0, 400] and a["dynamic_smem_base_kept"] is False
    assert TT.artifact_admission(None)["artifact"] is False


@pytest.mark.slow
def test_dry_run_admits_every_kernel_with_its_tma_sites_rewritten(tmp_path):
    pytest.importorskip("triton")
    from hbfcommon import resources
    if shutil.which("ptxas") is None or not resources.helper_ptx_path("direct").is_file():
        pytest.skip("ptxas or the helper PTX (make helpers-ptx) missing")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "tma_triton.py"), "--dry-run", "--out", str(tmp_path / "out"),
                        "--work", str(tmp_path / "work"), "--budget-s", "100"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=150)
    doc = json.loads((tmp_path / "out" / "tma_triton_dry.json").read_text())
    assert r.returncode == 0 and doc["ok"], (r.stderr[-3000:], json.dumps(doc, default=str)[:3000])
    assert doc["card"] == "CPU" and set(doc["admission"]) == set(TT.KERNELS)
    for name, a in doc["admission"].items():
        assert a["admitted"] is True and a["reasons"] == [], (name, a)
        # every TMA tensor copy of the PTX (loads and the epilogue's store) is a rewritten site
        assert a["tma_tensor_copies"] == a["ptx_tensor_copies"] >= 3, (name, a)
        assert a["tma"].get("tma.store.tensor.2d") == 1 and a["tma"].get("tma.load.tensor.2d", 0) >= 2, (name, a)
        assert a["tma"].get("mbarrier.try_wait.parity", 0) >= 1
        assert a["cubin_calls_helpers"] and a["helper"]
        # Triton's dynamic shared memory (global_smem: the TMA tiles) stays 1024-byte aligned behind the table
        plain, inst = a["smem_plain_instrumented"]
        assert plain == 0 and inst % 1024 == 0 and inst >= 392 and a["dynamic_smem_base_kept"], (name, a)
        if name == "matmul_host":      # host descriptors: no descriptor is built on the device
            assert a["ptx_tensormap_ops"] == 0
            # the launcher encodes the boxes the kernel expects: inner extents clamped to 128 bytes (box_copies)
            assert [m["block_size"] for m in a["tensordesc_meta"]] == [[128, 64], [64, 64], [128, 64]]
        else:                          # device descriptors: their publication into global scratch is rewritten too
            assert a["tma"].get("tensormap.cp_fenceproxy.global", 0) >= 3, (name, a)


def test_gpu_mode_without_a_gpu_says_so(tmp_path):
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the GPU mode would run")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "tma_triton.py"), "--out", str(tmp_path / "out"),
                        "--work", str(tmp_path / "work")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    doc = json.loads((tmp_path / "out" / "tma_triton.json").read_text())
    assert r.returncode == 2 and doc["ok"] is False and "no GPU" in doc["error"]
    assert doc["mode"] == "gpu" and "cases" not in doc


def test_gpu_cases_run_in_children_that_report_their_failure(tmp_path, monkeypatch):
    """gpu_run's plumbing without a GPU: each case a child with its own hbfd and session (attached here: the media
    block is read), the CUDA failure recorded in that case, the partial JSON written, the next case still run."""
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the cases would run")
    import time
    from devpath_common import toolchain_env
    for k, v in toolchain_env(tmp_path / "work").items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("HBF_TMA_DEVICE", "1")
    res: dict = {}
    out = tmp_path / "out"
    out.mkdir()
    TT.gpu_run(res, out, out / "tma_triton.json", time.time() + 100, ("matmul_host", "attn_fwd"), 90)
    assert res["ok"] is False and set(res["cases"]) == {"matmul_host", "attn_fwd"}
    for name, c in res["cases"].items():
        assert c["child_rc"] == 0 and c["ok"] is False and c["stage"] == "done", (name, c)
        assert c.get("media", {}).get("fixed_read_ns") == 5_000 and c["error"], (name, c)
        assert json.loads((out / f"tma_triton.{name}.partial.json").read_text())["error"] == c["error"]
    assert json.loads((out / "tma_triton.json").read_text())["cases"]["attn_fwd"]["stage"] == "done"


PTX = """.version 8.0
.target sm_90a
.address_size 64

.extern .shared .align 16 .b8 global_smem[];
.visible .entry k_probe_NAME(
	.param .u64 k_probe_NAME_param_0
)
.reqntid 128
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<4>;
$L__func_begin0:
	ld.param.u64 	%rd1, [k_probe_NAME_param_0];
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd2, %r1, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.u32 	[%rd3], %r1;
	ret;
$L__tmp1:
$L__func_end0:
                                        // -- End function
}
"""


@pytest.mark.parametrize("probe", TT.PROBES)
def test_probe_ptx_adds_one_part_and_assembles(probe, tmp_path):
    """The native-cost probes (docs/RESULTS.md "Stop 45 (CPU, wt/tmanat)"): the plain PTX with the prologue's loads
    (ld1: one; ld3: the state pointer, then the band's span through it) or the 1 KiB table added, nothing else."""
    src = PTX.replace("NAME", probe)
    out = TT.probe_ptx(src)
    assert TT.probe_ptx(PTX.replace("k_probe_NAME", "k_plain")) == PTX.replace("k_probe_NAME", "k_plain")
    if probe == "c0":       # the build path alone: the PTX unchanged
        assert out == src
        return
    body = out[out.index("{"):]
    assert ("__hbprobe_tbl" in out) == ("smem" in probe)
    assert ("[__hbprobe_zero]" in body) == (probe == "ld1")
    assert ("[__hbprobe_ptr]" in body and "[%hbq_s+8]" in body) == probe.startswith("ld3")
    assert ("[__hbprobe_cword]" in body) == (probe == "c1")
    assert body.index("bra $HBPROBE_OUT") < body.index("ld.param.u64") if probe != "smem" else True
    assert out.index("$HBPROBE_OUT:") < out.index("$L__func_end0:")
    assert out.replace(TT.PROBE_GLOBALS, "").count("st.global.u32") == 1
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas")
    (tmp_path / "k.ptx").write_text(out)
    r = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert ("1024 bytes smem" in r.stderr) == ("smem" in probe), r.stderr


def test_probe_ptxas_wrapper_edits_the_ptx_and_runs_the_real_ptxas(tmp_path):
    """The wrapper Triton is pointed at (write_probe_ptxas): the PTX argument edited in place, then the real ptxas
    (here a stand-in that records what it was given) with the same arguments."""
    real = tmp_path / "real-ptxas"
    real.write_text(f"#!/bin/sh\ncp \"$3\" {tmp_path}/seen.ptx\necho \"$@\" > {tmp_path}/args\n")
    real.chmod(0o755)
    (tmp_path / "a.ptx").write_text(PTX.replace("NAME", "ld3"))
    w = TT.write_probe_ptxas(tmp_path)
    env = dict(os.environ, HBF_BENCH_REAL_PTXAS=str(real),
               PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run([str(w), "-v", "--gpu-name=sm_90a", str(tmp_path / "a.ptx"), "-o", str(tmp_path / "a.cubin")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "args").read_text().split() == ["-v", "--gpu-name=sm_90a", str(tmp_path / "a.ptx"), "-o",
                                                      str(tmp_path / "a.cubin")]
    assert (tmp_path / "seen.ptx").read_text() == TT.probe_ptx(PTX.replace("NAME", "ld3"))


def test_probe_text_names_every_probe_build():
    text = TT.probe_text()
    for k in TT.KERNELS:
        for p in TT.PROBES:
            assert text.count(f"def {k}_probe_{p}(") == 1, (k, p)
    assert "_SFX" not in text and "_plain(" not in text and "_hbf(" not in text


def test_variant_text_names_every_variant_build_and_its_knob_changes_the_build():
    """The hbf variants (HBF_VARIANTS): each kernel once per variant, under its own name; each variant's knobs are
    build knobs (in hbfcc-ptxas's --version marker: Triton's cache keeps the builds apart)."""
    from hbfcc import knobs
    text = TT.variant_text()
    for k in TT.KERNELS:
        for v in TT.HBF_VARIANTS:
            assert text.count(f"def {k}_{v}(") == 1, (k, v)
    assert "_SFX" not in text and "_plain(" not in text and "_hbf(" not in text
    documented = {v for v, _, _ in knobs.DOCS}
    for v, kn in TT.HBF_VARIANTS.items():
        assert set(kn) <= documented, (v, kn)
    assert "c0" in TT.PROBES and TT.probe_ptx(PTX.replace("NAME", "c0")) == PTX.replace("NAME", "c0")


def test_the_forced_words_are_the_sessions(monkeypatch):
    """hbf_attached forces the module's words as the session writes them (module_words): __hb_state and the attach
    switch where the module has one; the replay records both."""
    import ctypes

    from runtime_cuda.session import ModuleBinding

    class Cu:
        def __init__(self):
            self.w = {}

        def htod(self, addr, src, nbytes):
            assert nbytes == 8 and isinstance(src, ctypes.c_uint64)
            self.w[addr] = src.value

    class S:
        state_dptr = 0x7000

    s = S()
    s._cu = Cu()
    for det in (0x200, 0):
        b = ModuleBinding(1, True, 0, {}, state_addr=0x100, detached_addr=det, attached=False)
        TT._force_words(s, b, True)
        assert s._cu.w[0x100] == 0x7000 and b.attached and s._cu.w.get(det, 0) == 0
        TT._force_words(s, b, False)
        assert s._cu.w[0x100] == 0 and not b.attached and (s._cu.w.get(0x200) == 1 if det else 0 not in s._cu.w)


def test_the_native_entry_variant_is_its_own_build():
    """--native-entry's build (NATENT_VARIANT): each kernel as <k>_natent, HBFCC_NATIVE_ENTRY=1 a build knob."""
    from hbfcc import knobs
    text = TT.variant_text(TT.NATENT_VARIANT)
    for k in TT.KERNELS:
        assert text.count(f"def {k}_natent(") == 1
    assert "_hbfscope(" not in text and set(TT.NATENT_VARIANT["natent"]) <= {v for v, _, _ in knobs.DOCS}


def test_host_native_entry_cost_shape(monkeypatch):
    """_host_native_entry_cost on a stand-in torch: every build measured PAIRS times, ratios against plain, the host's
    queueing time apart, the native-entry launches counted from the session's launch_selection."""
    calls = {"plain": 0, "hbf": 0, "natent": 0}
    sel = {"m_natent": {"native": 0, "native_entry": 0, "instrumented": 0, "captured": 0}}

    class Ev:
        t = 0.0

        def __init__(self, enable_timing=True):
            self.at = None

        def record(self):
            self.at = Ev.t

        def query(self):
            return False

        def elapsed_time(self, other):
            return other.at - self.at

    class Cuda:
        Event = Ev

        @staticmethod
        def _sleep(n):
            Ev.t += n * 1e-6

        @staticmethod
        def synchronize():
            pass

    class Torch:
        cuda = Cuda

    def fn(k, ms):
        def go():
            calls[k] += 1
            Ev.t += ms
            if k == "natent":
                sel["m_natent"]["native"] += 1
                sel["m_natent"]["native_entry"] += 1
        return go

    class S:
        def counters(self, publish=False):
            return {"launch_selection": sel}

    out = TT._host_native_entry_cost(S(), {"plain": fn("plain", 0.010), "hbf": fn("hbf", 0.0104),
                                           "natent": fn("natent", 0.0101)}, {"natent": "m_natent"}, Torch)
    v = out["variants"]
    assert set(v) == {"plain", "hbf", "natent"} and "ratio" not in v["plain"]
    assert abs(v["natent"]["ratio"]["median"] - 1.01) < 1e-6 and abs(v["hbf"]["ratio"]["median"] - 1.04) < 1e-6
    assert out["ratio_median"] == v["natent"]["ratio"]["median"] and out["native_entry_used"]
    assert v["natent"]["launch_selection"]["native_entry"] == TT.PAIRS * TT.BACK_TO_BACK
    assert all(x["late_windows"] == 0 and x["host_us"]["median"] >= 0 for x in v.values())
    assert out["sleep_cycles"] >= TT.SLEEP_CYCLES


class _GraphTorch:
    """A stand-in torch for _graph_native_entry_cost: events on a clock, CUDA graphs that record what a launch on the
    capturing stream would run and replay it (its device time, its output), tensors compared by value."""

    int8 = None
    capturing = None

    class Ev:
        t = 0.0

        def __init__(self, enable_timing=True):
            self.at = None

        def record(self):
            self.at = _GraphTorch.Ev.t

        def elapsed_time(self, other):
            return other.at - self.at

    class CUDAGraph:
        def __init__(self):
            self.launches = []

        def replay(self):
            for ms, out in self.launches:
                _GraphTorch.Ev.t += ms
                out.v = "right"

    class cuda:  # noqa: N801
        @staticmethod
        def _sleep(n):
            _GraphTorch.Ev.t += n * 1e-9

        @staticmethod
        def synchronize():
            pass

        @staticmethod
        def graph(g):
            class Ctx:
                def __enter__(self):
                    _GraphTorch.capturing = g

                def __exit__(self, *a):
                    _GraphTorch.capturing = None
            return Ctx()

    @staticmethod
    def equal(a, b):
        return a.v == b.v


_GraphTorch.cuda.Event = _GraphTorch.Ev
_GraphTorch.cuda.CUDAGraph = _GraphTorch.CUDAGraph


class _Out:
    def __init__(self):
        self.v = None

    def fill_(self, x):
        self.v = x

    def view(self, dtype):
        return self


@pytest.mark.parametrize("plain_bound", [True, False])
def test_graph_native_entry_cost_ab_of_the_plain_module(plain_bound):
    """HBF_NATIVE_MODULE=plain (wt/natmod15): with the kernel's function in the plain cubin bound, one more graph
    ``all_plain`` is captured under mode all with the session's native_module "plain", next to ``all`` (the native
    entry: native_module "entry"), replayed in the same rounds; ratios, the captures per function and the outputs are
    reported, and the session's modes are restored. Without it (the default session), no such graph."""
    from types import SimpleNamespace

    from hbfcommon.errors import ErrorCode, RangeError

    kname = "m_natent"
    cost = {"plain": 0.010, "entry": 0.0106, "plain_module": 0.0100, "instrumented": 0.0110}
    b = SimpleNamespace(native_fns={kname: 2}, plain_fns={kname: 3} if plain_bound else {},
                        plain_modules=[7] if plain_bound else [])

    class S:
        graph_native, native_module, ranges = "off", "plain" if plain_bound else "entry", []
        bindings = {0x51: b}

        def __init__(self):
            self.launch_selection = {}

        def counters(self, publish=False):
            return {"graph_native": {"mode": self.graph_native}}

        def register_timing_range(self, *a, **k):
            raise RangeError("registration after a kernel that could touch it was admitted",
                             code=ErrorCode.RANGE_ADMITTED)

        def release_graph_captures(self):
            return {"extents": 0, "unbounded": True}

    s = S()
    outs = {"plain": _Out(), "natent": _Out()}

    def launcher(key):
        def go():
            g = _GraphTorch.capturing
            if key == "plain":
                what = "plain"
            else:
                sel = s.launch_selection.setdefault(kname, {"captured": 0, "captured_native": 0, "native_entry": 0,
                                                            "native_module": {"entry": 0, "plain": 0}})
                native = g is None or s.graph_native == "all"
                which = "plain" if s.native_module == "plain" and kname in b.plain_fns else "entry"
                what = ("plain_module" if which == "plain" else "entry") if native else "instrumented"
                if native:
                    sel["native_entry"] += 1
                    sel["native_module"][which] += 1
                if g is not None:
                    sel["captured"] += 1
                    sel["captured_native"] += int(native)
            if g is not None:
                g.launches.append((cost[what], outs[key]))
            else:
                _GraphTorch.Ev.t += cost[what]
                outs[key].v = "right"
            return SimpleNamespace(module=0x51), outs[key]
        return go

    out = TT._graph_native_entry_cost(s, launcher("plain"), launcher("natent"), kname,
                                      {"a": SimpleNamespace(data_ptr=lambda: 0x1000, numel=lambda: 16,
                                                            element_size=lambda: 2)}, _GraphTorch)
    v = out["variants"]
    assert s.native_module == ("plain" if plain_bound else "entry") and s.graph_native == "off"     # restored
    assert out["native_module"]["plain_function_bound"] is plain_bound
    assert out["natent_all_identical"] and out["native_entry_captured"] and out["bounded_kept_instrumented"]
    assert v["all"]["native_module"] == "entry" and v["all"]["launch_selection"]["native_module_entry"] == TT.BACK_TO_BACK
    assert v["all"]["ratio"]["median"] == pytest.approx(1.06)
    assert out["refusal"]["ok"] and out["released"]["unbounded"]
    if plain_bound:
        ap = v["all_plain"]
        assert ap["native_module"] == "plain" and ap["graph_native"] == "all"
        assert ap["launch_selection"]["native_module_plain"] == TT.BACK_TO_BACK == ap["launch_selection"]["captured_native"]
        assert ap["launch_selection"]["native_module_entry"] == 0
        assert ap["ratio"]["median"] == pytest.approx(1.0) and ap["device_ms"]["n"] == TT.PAIRS
        assert out["plain_module_ratio_median"] == pytest.approx(1.0) and out["plain_module_captured"]
        assert out["natent_all_plain_identical"]
    else:
        assert "all_plain" not in v and "plain_module_ratio_median" not in out
