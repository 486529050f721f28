"""hbfcc flags pass: flag-like loads (volatile/acquire/relaxed, scalar, global/generic) go through the
eidola extern API; other loads are untouched; the linked module assembles for sm_90a."""
import shutil
import subprocess

import pytest

from hbfcc.passes.flags import build_extern_ptx, flag_load_width, flags_pass, rewrite_text
from hbfcc.ptx.parser import parse_instruction, parse_module

nvcc = shutil.which("nvcc")


@pytest.mark.parametrize("text,width", [
    ("ld.volatile.global.u32 %r5, [%rd1];", 32),
    ("ld.acquire.sys.global.u32 %r5, [%rd1+128];", 32),
    ("ld.relaxed.gpu.global.b64 %rd9, [%rd1];", 64),
    ("ld.volatile.u32 %r5, [%rd1];", 32),                 # generic
    ("ld.global.u32 %r5, [%rd1];", None),                 # weak: not a flag poll
    ("ld.volatile.shared.u32 %r5, [%r1];", None),
    ("ld.volatile.global.v2.u32 {%r1, %r2}, [%rd1];", None),
    ("ld.volatile.global.u16 %rs1, [%rd1];", None),
    ("st.volatile.global.u32 [%rd1], %r5;", None),
])
def test_classification(text, width):
    assert flag_load_width(parse_instruction(text)) == width


@pytest.mark.skipif(nvcc is None, reason="nvcc not installed")
def test_rewrite_spin_kernel_assembles(tmp_path):
    src = tmp_path / "spin.cu"
    src.write_text('extern "C" __global__ void k(const unsigned* f, unsigned s, unsigned* o, const unsigned* d) {\n'
                   '  unsigned n = 0; while (*(volatile const unsigned*)&f[blockIdx.x] != s) ++n;\n'
                   '  o[blockIdx.x] = n + d[threadIdx.x]; }\n')
    subprocess.run([nvcc, "-arch=compute_90a", "-ptx", str(src), "-o", str(tmp_path / "s.ptx")], check=True)
    ptx = (tmp_path / "s.ptx").read_text()
    meta = {}
    flags_pass(parse_module(ptx), meta)
    assert meta["flags"]["rewritten_loads"] == 1 and meta["flags"]["entries"] == ["k"]
    out = rewrite_text(ptx, build_extern_ptx(tmp_path).read_text())
    assert "ld.volatile" not in out.split("// ---- hbfcc: eidola helper module")[0]
    assert "ld.global.nc.u32" in out or "ld.global.u32" in out      # the data load is untouched
    (tmp_path / "rw.ptx").write_text(out)
    r = subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / "rw.ptx"), "-o", str(tmp_path / "rw.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(nvcc is None, reason="nvcc not installed")
def test_spin_loop_parked_with_monitor_mwait(tmp_path):
    src = tmp_path / "spin.cu"
    src.write_text('extern "C" __global__ void k(const unsigned* f, unsigned s, unsigned long long* o) {\n'
                   '  unsigned long long n = 0; while (*(volatile const unsigned*)&f[blockIdx.x] != s) ++n;\n'
                   '  o[blockIdx.x] = n; }\n'
                   'extern "C" __global__ void k2(const unsigned* f, unsigned* o) {\n'
                   '  o[0] = *(volatile const unsigned*)f; }\n')
    subprocess.run([nvcc, "-arch=compute_90a", "-ptx", str(src), "-o", str(tmp_path / "s.ptx")], check=True)
    meta = {}
    out = rewrite_text((tmp_path / "s.ptx").read_text(), build_extern_ptx(tmp_path).read_text(), meta, mwait=True)
    assert meta["flags"]["spin_loops_parked"] == 1          # k's loop; k2 has no loop
    assert meta["flags"]["rewritten_loads"] == 2
    assert "__hb_eidola_monitor, (" in out and "call \t__hb_eidola_mwait" in out.replace("call 	", "call \t")
    (tmp_path / "rw.ptx").write_text(out)
    r = subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / "rw.ptx"), "-o", str(tmp_path / "rw.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
