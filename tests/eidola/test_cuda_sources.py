"""The eidola CUDA sources compile for sm_90a (compile only on CI) into cubins with the kernels and
globals the launcher looks up, the Python mirrors of the device structs match the headers (host
probes), the launch configuration is checked before any launch, the flag table is the device
state's; a tiny replay runs when a GPU is present."""
import shutil
import subprocess

import numpy as np
import pytest

from hbfcommon.errors import ConfigError, CudaError, ErrorCode, RangeError
from eidola import replay as E
from workloads.gemv_allreduce import fused as F

nvcc = shutil.which("nvcc")
cxx = shutil.which("g++") or shutil.which("c++")
needs_nvcc = pytest.mark.skipif(nvcc is None, reason="nvcc not installed")
needs_cxx = pytest.mark.skipif(cxx is None, reason="no host C++ compiler")


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("eidola_build")


@pytest.fixture(scope="module")
def eidola_cubin(build_dir):
    if nvcc is None:
        pytest.skip("nvcc not installed")
    return E.build_module(build_dir)


@pytest.fixture(scope="module")
def gar_cubin(build_dir):
    if nvcc is None:
        pytest.skip("nvcc not installed")
    return F.build_module(build_dir)


def _host_values(tmp_path, include: list, header: str, macro: str) -> list[int]:
    """Compile a host program that prints ``macro`` (an initializer list) from ``header``."""
    src = tmp_path / "probe.cpp"
    src.write_text(f'#include "{header}"\n#include <cstdio>\nint main() {{\n'
                   f'  unsigned long long v[] = {macro};\n'
                   '  for (unsigned i = 0; i < sizeof v / sizeof v[0]; ++i) std::printf("%llu\\n", v[i]);\n'
                   '  return 0;\n}\n')
    exe = tmp_path / "probe"
    r = subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", *(f"-I{d}" for d in include), str(src),
                        "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True,
                                           check=True).stdout.split()]


@needs_cxx
def test_state_mirror_matches_the_header_layout(tmp_path):
    """hbf_eidola.cuh compiled as host C++: HBF_EIDOLA_LAYOUT_VALUES == the Python mirror's."""
    vals = _host_values(tmp_path, [E.SRC_DIR], "hbf_eidola.cuh", "HBF_EIDOLA_LAYOUT_VALUES")
    assert vals == E.layout_mirror()
    E.check_layout(vals, "the header")
    with pytest.raises(CudaError):
        E.check_layout([vals[0] + 8, *vals[1:]], "a changed header")


@needs_cxx
def test_gar_params_mirror_matches_the_header_layout(tmp_path):
    vals = _host_values(tmp_path, [F.HERE], "gemv_allreduce.h", "GAR_LAYOUT_VALUES")
    assert vals == F.layout_mirror()
    with pytest.raises(ConfigError):
        F.check_layout([*vals[:-1], vals[-1] * 2], "a changed header")


@needs_nvcc
def test_module_has_every_kernel_and_global_the_launcher_loads(eidola_cubin):
    image = eidola_cubin.read_bytes()
    for name in (*E.KERNELS, E.LAYOUT_GLOBAL, E.DEFAULTS_GLOBAL):
        assert b"\0" + name.encode() + b"\0" in image, name
    assert E.build_module(eidola_cubin.parent) == eidola_cubin   # cached by content


@needs_nvcc
def test_workload_module_has_its_kernels_and_layout(gar_cubin):
    image = gar_cubin.read_bytes()
    for name in (*F.KERNELS, F.LAYOUT_GLOBAL):
        assert b"\0" + name.encode() + b"\0" in image, name
    # the launcher knows no workload: none of eidola's build inputs or code is the workload's
    workloads = E.ROOT / "workloads"
    for p in (E.SOURCE, *E.HEADERS, *E.INCLUDE_DIRS):
        assert workloads not in p.parents and p != workloads, p
    for f in (E.ROOT / "eidola" / "replay.py", *E.SRC_DIR.iterdir()):
        assert "gemv_allreduce" not in f.read_text().replace("workloads/gemv_allreduce/fused.py", ""), f


@needs_nvcc
def test_compile_errors_name_the_command(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text("this is not CUDA\n")
    from hbfcommon.errors import ToolchainError
    with pytest.raises(ToolchainError) as ei:
        E.compile_cubin(bad, name="bad", out_dir=tmp_path)
    assert str(bad) in ei.value.argv and ei.value.returncode != 0 and "bad.cu" in ei.value.stderr
    assert not list(tmp_path.glob("bad-*.cubin"))


@needs_nvcc
def test_helper_header_compiles_into_helper_style_ptx(tmp_path):
    """hbf_eidola.cuh compiles standalone to PTX for compute_90a with -rdc (as the helper module)."""
    src = tmp_path / "t.cu"
    src.write_text('#include "hbf_eidola.cuh"\n'
                   '__global__ void k(hbf_eidola_state* st, const unsigned* f) {\n'
                   '  uint64_t t0 = hbf_eidola_kernel_enter(st); hbf_eidola_acct a; hbf_eidola_acct_init(&a);\n'
                   '  if (!hbf_eidola_monitor(st, &a, t0, f, 4, 1)) hbf_eidola_mwait(st, &a, t0, f);\n'
                   '  hbf_eidola_acct_flush(st, &a); }\n')
    r = subprocess.run([nvcc, "-std=c++17", "-arch=compute_90a", "-rdc=true", "-ptx",
                        f"-I{E.ROOT / 'runtime_cuda/src'}", f"-I{E.SRC_DIR}", str(src), "-o", str(tmp_path / "t.ptx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "globaltimer" in (tmp_path / "t.ptx").read_text()


@needs_nvcc
def test_extern_api_module_exports(tmp_path):
    """The extern entry points (for Triton extern_libs / hbfcc) compile into an -rdc PTX module."""
    src = tmp_path / "x.cu"
    src.write_text('#define HBF_EIDOLA_EXTERN_API\n#include "hbf_eidola.cuh"\n')
    r = subprocess.run([nvcc, "-std=c++17", "-arch=compute_90a", "-rdc=true", "-ptx",
                        f"-I{E.ROOT / 'runtime_cuda/src'}", f"-I{E.SRC_DIR}", str(src), "-o", str(tmp_path / "x.ptx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "x.ptx").read_text()
    for name in ("__hb_eidola_ld_flag_u32", "__hb_eidola_ld_flag_u64", "__hb_eidola_monitor",
                 "__hb_eidola_mwait", "__hb_eidola_register_write", "__hb_eidola_kernel_enter",
                 "__hb_eidola_count_nonflag", "__hb_eidola_state"):
        assert name in text, name
    assert "flag_access_hook" not in text     # no accounting hook for the timing helper: flag ranges are eidola's


def test_gemv_shape_validation():
    s = F.GarShape(n_gpus=4, M=1024, Kl=2048, tiles=128)
    assert s.tile_rows == 8
    for bad in (dict(n_gpus=1, M=1024, Kl=2048, tiles=128), dict(n_gpus=4, M=1000, Kl=2048, tiles=128),
                dict(n_gpus=4, M=1024, Kl=2046, tiles=128), dict(n_gpus=4, M=65536, Kl=2048, tiles=128)):
        with pytest.raises(ConfigError):
            F.GarShape(**bad)
    assert F.reduce_smem_bytes(8, 4) == 8 * 4 * 5 and F.reduce_smem_bytes(8192, 4) == 8192 * 4 * 2


def test_state_mirror_matches_header_fields():
    """Every u64/u32 field of hbf_eidola_state in the header appears in the Python mirror, in order."""
    import re
    text = (E.SRC_DIR / "hbf_eidola.cuh").read_text()
    body = text[text.index("typedef struct hbf_eidola_state {"):text.index("} hbf_eidola_state;")]
    names = []
    for line in body.splitlines()[1:]:
        code = line.split("/*")[0]
        m = re.match(r"\s*(u?int\d+_t|hbf_eidola_flag_range)\s+(.+);", code)
        if m:
            names += [n.strip().split("[")[0] for n in m.group(2).split(",")]
    assert names == [f[0] for f in E.StateMirror._fields_]
    assert f"#define HBF_EIDOLA_MAX_FLAG_RANGES {E.MAX_FLAG_RANGES}u" in text


def test_launch_configurations_are_checked_before_any_launch():
    """Store kind / layout / probe load kind out of range: a named error, no launch."""
    defaults = {"store": "relaxed.gpu", "layout": "lane"}
    assert E.eidolon_config(None, None, defaults) == (E.STORE_KINDS["relaxed.gpu"], E.EIDOLON_LAYOUTS["lane"])
    assert E.eidolon_config("volatile", "warp_burst", defaults) == (4, 3)
    with pytest.raises(ConfigError, match="store kind"):
        E.eidolon_config("relaxed.cta", None, defaults)
    with pytest.raises(ConfigError, match="layout"):
        E.eidolon_config(None, "diagonal", defaults)
    assert E.tprobe_config("volatile", 8, True) == "hbf_eidola_tprobe_k2_p1"
    with pytest.raises(ConfigError, match="load kind"):
        E.tprobe_config("ld.weak", 1, False)
    with pytest.raises(ConfigError, match="pollers"):
        E.tprobe_config("volatile", 0, False)
    assert E.eidolon_kernel(*E.eidolon_config("release.sys", "lane_late", defaults)) in E.KERNELS


def test_flag_table_is_the_device_state():
    """FlagTable writes the ranges into the state mirror the device classifies against; refused
    changes leave it as it was."""
    h = E.StateMirror()
    pushed = []
    t = E.FlagTable(h, [E.FlagRange(0x20000, 256, 1, "tile_flags")], on_change=lambda: pushed.append(1))
    assert (h.n_flag_ranges, h.flag_ranges[0].base, h.flag_ranges[0].length, h.flag_ranges[0].klass) == \
        (1, 0x20000, 256, 1)
    t.add_flag_range(0x10000, 128, 3, "bcast")
    assert h.n_flag_ranges == 2 and h.flag_ranges[0].base == 0x10000 and h.flag_ranges[1].base == 0x20000
    assert t.class_names() == {0: "nonflag", 1: "tile_flags", 3: "bcast"} and len(pushed) == 2
    for bad in ((0x10040, 128, 2), (0x30004, 128, 2), (0x40000, 128, 0), (0x20080, 128, 2)):
        with pytest.raises(RangeError):
            t.add_flag_range(*bad)
    assert h.n_flag_ranges == 2 and len(pushed) == 2
    for i in range(6):
        t.add_flag_range(0x100000 + i * 0x1000, 128, 2)
    with pytest.raises(RangeError) as ei:
        t.add_flag_range(0x200000, 128, 2)
    assert ei.value.code == ErrorCode.RANGE_TABLE_FULL and h.n_flag_ranges == E.MAX_FLAG_RANGES
    t.remove_flag_range(0x10000)
    assert h.n_flag_ranges == 7 and h.flag_ranges[0].base == 0x20000 and h.flag_ranges[7].base == 0
    with pytest.raises(RangeError) as ei:
        t.remove_flag_range(0x10000)
    assert ei.value.code == ErrorCode.RANGE_NOT_FOUND


def _gpu():
    try:
        from runtime_cuda import cudrv
        return cudrv.gpu_available()
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="no GPU")
def test_tiny_replay_on_gpu(eidola_cubin, gar_cubin):
    from eidola.generator import uniform_delay
    rt = E.EidolaRuntime.create(module=eidola_cubin)
    assert rt.kernels.eidolon_defaults() == {"store": "relaxed.gpu", "layout": "lane"}
    g = F.GemvAllReduce(rt, F.GarShape(n_gpus=4, M=256, Kl=256, tiles=32), cubin=gar_cubin)
    tr = uniform_delay(n_gpus=4, tiles=32, tile_rows=8, delay_ns=5000)
    rep = E.Replay(rt, [g.flag_region()])
    rep.register_trace(tr, g.bases())
    rep.install(engine="virtual")
    o = g.run_replay(rep, wait="spin", engine="virtual")
    assert np.array_equal(o["y"].view(np.uint32), g.reference_y().view(np.uint32))
    assert o["accounting"]["flag_reads_thread"] >= 32 * 3
    assert (o["seen_rel"][:, 1:] >= 5000).all()
    with pytest.raises(ConfigError):
        rep.launch_eidolon(store="relaxed.cta")
