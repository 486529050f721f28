"""The eidola CUDA sources compile for sm_90a (compile only on CI) and the Python mirrors of the
device structs match the library; a tiny replay runs when a GPU is present."""
import ctypes
import shutil

import numpy as np
import pytest

from hbfcommon.errors import CudaError
from eidola import replay as E

nvcc = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(nvcc is None, reason="nvcc not installed")


@pytest.fixture(scope="module")
def libpath(tmp_path_factory):
    if nvcc is None:
        pytest.skip("nvcc not installed")
    return E.build_library(tmp_path_factory.mktemp("eidola"))


@needs_nvcc
def test_library_builds_and_layout_mirror_matches(libpath):
    try:
        lib = E.Lib(libpath)
    except OSError as e:   # no libcuda at all: the .so links cudart statically, so this is rare
        pytest.skip(f"cannot dlopen: {e}")
    out = (ctypes.c_uint64 * 16)()
    k = lib.so.hbe_layout(out, 16)
    assert k == 12 and out[0] == ctypes.sizeof(E.StateMirror)
    assert lib.so.gar_params_size() == ctypes.sizeof(E.GarParams)


@needs_nvcc
def test_helper_header_compiles_into_helper_style_ptx(tmp_path):
    """hbf_eidola.cuh compiles standalone to PTX for compute_90a with -rdc (as the helper module)."""
    import subprocess
    src = tmp_path / "t.cu"
    src.write_text('#include "hbf_eidola.cuh"\n'
                   '__global__ void k(hbf_eidola_state* st, const unsigned* f) {\n'
                   '  uint64_t t0 = hbf_eidola_kernel_enter(st); hbf_eidola_acct a; hbf_eidola_acct_init(&a);\n'
                   '  if (!hbf_eidola_monitor(st, &a, t0, f, 4, 1)) hbf_eidola_mwait(st, &a, t0, f);\n'
                   '  hbf_eidola_acct_flush(st, &a); }\n')
    r = subprocess.run([nvcc, "-std=c++17", "-arch=compute_90a", "-rdc=true", "-ptx",
                        f"-I{E.ROOT / 'runtime_cuda/src'}", f"-I{E.ROOT / 'eidola/src'}", str(src), "-o", str(tmp_path / "t.ptx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "globaltimer" in (tmp_path / "t.ptx").read_text()


def _gpu():
    try:
        import subprocess
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="no GPU")
def test_tiny_replay_on_gpu(libpath):
    from eidola.generator import uniform_delay
    rt = E.EidolaRuntime(E.Lib(libpath))
    g = E.GemvAllReduce(rt, E.GarShape(n_gpus=4, M=256, Kl=256, tiles=32))
    tr = uniform_delay(n_gpus=4, tiles=32, tile_rows=8, delay_ns=5000)
    rep = E.Replay(rt, [g.flag_region()])
    rep.register_trace(tr, g.bases())
    rep.install(engine="virtual")
    o = g.run_replay(rep, wait="spin", engine="virtual")
    assert np.array_equal(o["y"].view(np.uint32), g.reference_y().view(np.uint32))
    assert o["accounting"]["flag_reads_thread"] >= 32 * 3
    assert (o["seen_rel"][:, 1:] >= 5000).all()


@needs_nvcc
def test_extern_api_module_exports(tmp_path):
    """The extern entry points (for Triton extern_libs / hbfcc) compile into an -rdc PTX module."""
    import subprocess
    src = tmp_path / "x.cu"
    src.write_text('#define HBF_EIDOLA_EXTERN_API\n#include "hbf_eidola.cuh"\n')
    r = subprocess.run([nvcc, "-std=c++17", "-arch=compute_90a", "-rdc=true", "-ptx",
                        f"-I{E.ROOT / 'runtime_cuda/src'}", f"-I{E.ROOT / 'eidola/src'}", str(src), "-o", str(tmp_path / "x.ptx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "x.ptx").read_text()
    for name in ("__hb_eidola_ld_flag_u32", "__hb_eidola_ld_flag_u64", "__hb_eidola_monitor",
                 "__hb_eidola_mwait", "__hb_eidola_register_write", "__hb_eidola_kernel_enter",
                 "__hb_eidola_count_nonflag", "__hb_eidola_state"):
        assert name in text, name


def test_gemv_shape_validation():
    from hbfcommon.errors import ConfigError
    s = E.GarShape(n_gpus=4, M=1024, Kl=2048, tiles=128)
    assert s.tile_rows == 8
    for bad in (dict(n_gpus=1, M=1024, Kl=2048, tiles=128), dict(n_gpus=4, M=1000, Kl=2048, tiles=128),
                dict(n_gpus=4, M=1024, Kl=2046, tiles=128), dict(n_gpus=4, M=65536, Kl=2048, tiles=128)):
        with pytest.raises(ConfigError):
            E.GarShape(**bad)


def test_state_mirror_matches_header_fields():
    """Every u64/u32 field of hbf_eidola_state in the header appears in the Python mirror, in order."""
    import re
    text = (E.ROOT / "eidola/src/hbf_eidola.cuh").read_text()
    body = text[text.index("typedef struct hbf_eidola_state {"):text.index("} hbf_eidola_state;")]
    names = []
    for line in body.splitlines()[1:]:
        code = line.split("/*")[0]
        m = re.match(r"\s*(u?int\d+_t|hbf_eidola_flag_range)\s+(.+);", code)
        if m:
            names += [n.strip().split("[")[0] for n in m.group(2).split(",")]
    assert names == [f[0] for f in E.StateMirror._fields_]


@needs_nvcc
def test_eidolon_and_probe_launchers_reject_bad_configs(libpath):
    """Store kind / layout / probe load kind out of range: a named error before any launch."""
    try:
        lib = E.Lib(libpath)
    except OSError as e:
        pytest.skip(f"cannot dlopen: {e}")
    assert lib.so.hbe_launch_eidolon_cfg(None, 2, 128, 0, len(E.STORE_KINDS), 0, None) != 0
    assert b"store kind" in lib.so.hbe_last_error()
    assert lib.so.hbe_launch_eidolon_cfg(None, 2, 128, 0, 0, len(E.EIDOLON_LAYOUTS), None) != 0
    assert lib.so.hbe_launch_tprobe(None, None, None, None, 0, 0, 0, None, None, None, 1,
                                    len(E.PROBE_LOADS), 0, None) != 0
    assert b"load kind" in lib.so.hbe_last_error()
    d = lib.eidolon_defaults()
    assert d["store"] in E.STORE_KINDS and d["layout"] in E.EIDOLON_LAYOUTS
    with pytest.raises(CudaError):
        lib.call("hbe_launch_eidolon_cfg", None, 2, 128, 0, 99, 0, None)
