"""hbfcc-ptxas: the drop-in ptxas (TRITON_PTXAS_PATH, and what nvcc runs through the shadow toolkit)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import artifact  # noqa: E402

FIX = U.REPO / "tests" / "fixtures" / "triton"

SIMPLE = """.version 9.0
.target sm_90a
.address_size 64
.visible .entry vadd(.param .u64 .ptr .global .align 1 vadd_param_0, .param .u64 .ptr .global .align 1 vadd_param_1, .param .u32 vadd_param_2)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [vadd_param_0];
    ld.param.u64 %rd2, [vadd_param_1];
    ld.param.u32 %r1, [vadd_param_2];
    mov.u32 %r2, %tid.x;
    setp.lt.s32 %p1, %r2, %r1;
    mul.wide.s32 %rd3, %r2, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    @%p1 ld.global.b32 %r3, [ %rd4 + 0 ];
    add.s32 %r4, %r3, 1;
    @%p1 st.global.b32 [ %rd5 + 0 ], { %r4 };
    ret;
}
"""


def ptxas_cmd() -> str:
    U.tool("ptxas")
    return U.console("hbfcc-ptxas")


def run(args, tmp_path, **env):
    """hbfcc-ptxas with CUDA's ptxas (HBFCC_REAL_PTXAS: these inputs are CUDA 13 PTX, .version 9.0;
    test_cli_records.py tests the choice hbfcc-ptxas makes without it)."""
    base = {"HBFCC_ARTIFACT_DIR": tmp_path / "store", "HBFCC_REAL_PTXAS": U.tool("ptxas"),
            "HBFCC_HELPER_PTX": U.real_helper_ptx() or U.fixture_helper_ptx()}
    base.update(env)
    e = U.env_with(**base)
    return subprocess.run([ptxas_cmd(), *args], capture_output=True, text=True, env=e, cwd=tmp_path)


def test_version_is_real_text_plus_marker(tmp_path):
    real = subprocess.run([U.tool("ptxas"), "--version"], capture_output=True, text=True).stdout
    cp = run(["--version"], tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith(real.rstrip("\n"))
    last = cp.stdout.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"hbfcc \d+ [0-9a-f]{16} helper [0-9a-f]{16}", last), last
    assert re.search(r"release (\d+\.\d+)", cp.stdout)  # what Triton's NvidiaTool.from_path needs


def test_version_succeeds_without_helper_module(tmp_path):
    """--version must always succeed when the real ptxas works (else Triton falls back silently)."""
    cp = run(["--version"], tmp_path, HBFCC_HELPER_PTX=tmp_path / "missing.ptx")
    assert cp.returncode == 0
    assert cp.stdout.rstrip().endswith("helper none")


def test_version_differs_from_plain_ptxas(tmp_path):
    real = subprocess.run([U.tool("ptxas"), "--version"], capture_output=True, text=True).stdout
    assert run(["--version"], tmp_path).stdout != real


def test_triton_argv(tmp_path):
    """Exactly what Triton 3.6 runs: -lineinfo -v --gpu-name=sm_90a X.ptx -o X.ptx.o"""
    src = FIX / "vector_add_f32.ptx"
    if not src.is_file():
        src = None
    p = tmp_path / "tmpab12.ptx"
    text = src.read_text() if src else SIMPLE
    p.write_text(text)
    cp = run(["-lineinfo", "-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path,
             HBFCC_DUMP_DIR=tmp_path / "dump")
    assert cp.returncode == 0, cp.stderr
    assert "ptxas info" in cp.stderr          # the user asked for -v
    assert p.read_text() == text              # the input is never modified (a private copy is assembled)
    rewritten = (next((tmp_path / "dump").iterdir()) / "05-print.ptx").read_text()
    assert "__hb_issue" in rewritten and "hbfcc: instrumented" in rewritten
    cubin = Path(str(p) + ".o").read_bytes()
    assert cubin[:4] == b"\x7fELF" and b"__hb_issue" in cubin and b"__hb_state" in cubin
    doc = json.loads(Path(str(p) + ".o.hbfcc.json").read_text())
    artifact.validate(doc)
    assert doc["admitted"] is True
    assert doc["ptxas"]["argv"][1:] == ["-lineinfo", "-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"]
    assert "release" in doc["ptxas"]["version"]
    k = doc["kernels"][0]
    assert k["ptxas_before"]["registers"] > 0 and k["ptxas_after"]["registers"] > 0
    assert "ptxas_delta" in k
    import hashlib
    assert doc["input"]["original_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert doc["input"]["transformed_sha256"] == hashlib.sha256(rewritten.encode()).hexdigest()
    # the store keeps it by the original PTX's sha (Triton's asm["ptx"] is the pre-rewrite PTX)
    stored = tmp_path / "store" / f"{doc['input']['original_sha256']}.hbfcc.json"
    assert json.loads(stored.read_text())["input"] == doc["input"]


def test_nvcc_style_argv_quiet_without_v(tmp_path):
    p = tmp_path / "x.compute_90a.ptx"
    p.write_text(SIMPLE)
    cp = run(["-arch=sm_90a", "-m64", str(p), "-o", str(tmp_path / "x.cubin")], tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert "ptxas info" not in cp.stderr and "ptxas info" not in cp.stdout
    assert (tmp_path / "x.cubin").is_file()
    # nvcc's validation step: compute arch, no -o; the artifact goes beside the input
    q = tmp_path / "y.compute_90.ptx"
    q.write_text(SIMPLE.replace("sm_90a", "sm_90"))
    cp = run(["-arch=compute_90", "-m64", str(q)], tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert q.read_text() == SIMPLE.replace("sm_90a", "sm_90")    # not nvcc's step: input untouched
    doc = json.loads((tmp_path / "y.compute_90.ptx.hbfcc.json").read_text())
    artifact.validate(doc)
    assert doc["kernels"][0]["ptxas_after"] is None   # no SASS for a compute_XX target


def test_parse_error_fails_loudly_and_leaves_input(tmp_path):
    p = tmp_path / "bad.ptx"
    bad = SIMPLE.replace("ret;", "ret;\n  }}}  garbage ((")
    p.write_text(bad)
    cp = run(["-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path)
    assert cp.returncode != 0
    assert "error" in cp.stderr and "line" in cp.stderr
    assert p.read_text() == bad
    assert not Path(str(p) + ".o").exists()


def test_real_ptxas_rejection_is_reported(tmp_path):
    p = tmp_path / "undeclared.ptx"
    p.write_text(SIMPLE.replace("add.s32 %r4, %r3, 1;", "add.s32 %r4, %r3, %r99;"))
    cp = run(["--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path)
    assert cp.returncode != 0
    assert "real ptxas rejected the rewritten PTX" in cp.stderr and "reproduce:" in cp.stderr


def test_missing_real_ptxas_is_an_error_not_a_fallback(tmp_path):
    p = tmp_path / "x.ptx"
    p.write_text(SIMPLE)
    cp = run(["--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path,
             HBFCC_REAL_PTXAS=tmp_path / "no-such-ptxas")
    assert cp.returncode != 0
    assert "HBFCC_REAL_PTXAS" in cp.stderr


@pytest.mark.skipif(not (FIX / "tma_host_desc_copy.ptx").is_file(), reason="TMA fixture not present")
def test_tma_kernel_admitted_with_its_tma_counted(tmp_path):
    """Since issue 15 a Triton TMA kernel is admitted (hbfcc/passes/tma.py); the artifact counts its TMA."""
    p = tmp_path / "tma.ptx"
    shutil.copy(FIX / "tma_host_desc_copy.ptx", p)
    cp = run(["-lineinfo", "-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"], tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert "NOT admitted" not in cp.stderr
    doc = json.loads(Path(str(p) + ".o.hbfcc.json").read_text())
    artifact.validate(doc)
    assert doc["admitted"] is True
    k = doc["kernels"][0]
    assert k["tma"]["tma.load.tensor.2d"] == 1 and k["tma"]["tma.store.tensor.2d"] == 1 and k["tma_hooks"] == 3


def test_rewrite_cli_standalone(tmp_path):
    p = tmp_path / "in.ptx"
    p.write_text(SIMPLE)
    hbfcc = U.console("hbfcc")
    e = U.env_with(HBFCC_HELPER_PTX=U.real_helper_ptx() or U.fixture_helper_ptx())
    cp = subprocess.run([hbfcc, "rewrite", str(p), "-o", str(tmp_path / "out.ptx"), "--dump-stages",
                         str(tmp_path / "dump")], capture_output=True, text=True, env=e)
    assert cp.returncode == 0, cp.stderr
    assert "vadd: 2 sites" in cp.stderr
    out = (tmp_path / "out.ptx").read_text()
    U.assemble(out)
    stages = sorted(x.name for x in next((tmp_path / "dump").iterdir()).iterdir())
    assert stages == ["00-input.ptx", "01-parse.ptx", "02-timing.json", "02-timing.ptx", "03-native_entry.json",
                      "03-native_entry.ptx", "04-link.json", "04-link.ptx", "05-print.ptx", "06-artifact.json"]
    dump = next((tmp_path / "dump").iterdir())
    assert (dump / "05-print.ptx").read_text() == out
    assert json.loads((dump / "06-artifact.json").read_text()) == json.loads((tmp_path / "out.ptx.hbfcc.json").read_text())
    doc = json.loads((tmp_path / "out.ptx.hbfcc.json").read_text())
    artifact.validate(doc)
    assert p.read_text() == SIMPLE   # input untouched


def test_the_console_script_is_known_as_ours():
    """TRITON_PTXAS_PATH=hbfcc-ptxas: the script (pyproject's entry, hbfcc.ptxas_entry) is never taken for the
    real ptxas (2026-12-06: the entry moved out of hbfcc.cli and the check missed it: hbfcc-ptxas --version ran
    itself until the box ran out of memory)."""
    from hbfcc.toolchain import _is_hbfcc_wrapper
    assert _is_hbfcc_wrapper(ptxas_cmd())


def test_a_ptxas_that_leads_back_to_hbfcc_ptxas_fails_instead_of_recursing(tmp_path):
    """A real-ptxas path that is not recognizably ours (a script that runs hbfcc-ptxas) still cannot loop: the
    inner hbfcc-ptxas sees its parent's mark (_HBFCC_PTXAS_PID) and fails, naming the knob."""
    loop = tmp_path / "ptxas"
    loop.write_text(f"#!/bin/sh\nexec '{ptxas_cmd()}' \"$@\"\n")
    loop.chmod(0o755)
    cp = run(["--version"], tmp_path, HBFCC_REAL_PTXAS=str(loop))
    assert cp.returncode != 0
    assert "leads back to itself" in cp.stderr and "HBFCC_REAL_PTXAS" in cp.stderr
    p = tmp_path / "k.ptx"
    p.write_text(SIMPLE)
    cp = run(["--gpu-name=sm_90a", str(p), "-o", str(tmp_path / "k.cubin")], tmp_path, HBFCC_REAL_PTXAS=str(loop))
    assert cp.returncode != 0 and "leads back to itself" in cp.stderr
    cp = run(["--version"], tmp_path, _HBFCC_PTXAS_PID="1")        # started by another hbfcc-ptxas (pid 1)
    assert cp.returncode == 2 and "started by hbfcc-ptxas" in cp.stderr


def test_an_in_process_call_leaves_no_mark_behind(tmp_path, monkeypatch):
    """hbfcc-ptxas marks the process for its children (_HBFCC_PTXAS_PID) only for the call: after ptxas_main returns
    in-process, a later hbfcc-ptxas this process starts is not taken for a loop (stop 54's CI failure)."""
    from hbfcc.cli import ptxas_main
    from hbfcc.ptxas_args import ACTIVE_VAR
    monkeypatch.delenv(ACTIVE_VAR, raising=False)
    assert ptxas_main(["--version"]) == 0
    assert ACTIVE_VAR not in os.environ
    cp = run(["--version"], tmp_path)                     # a child started after it runs
    assert cp.returncode == 0, cp.stderr


def test_the_installed_console_script_as_tritons_ptxas_is_never_chosen_as_the_real_one(tmp_path, monkeypatch):
    """An installed hbfcc-ptxas (console script ``from hbfcc.ptxas_entry import main``) as TRITON_PTXAS_PATH without
    HBFCC_REAL_PTXAS: choose_ptxas must skip it (it ran itself without end before, a process per level)."""
    from hbfcc import toolchain
    script = tmp_path / "hbfcc-ptxas"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom hbfcc.ptxas_entry import main\n"
                      "if __name__ == '__main__':\n    sys.exit(main())\n")
    script.chmod(0o755)
    monkeypatch.delenv("HBFCC_REAL_PTXAS", raising=False)
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(script))
    assert toolchain._is_hbfcc_wrapper(str(script))
    try:
        choice = toolchain.choose_ptxas("sm_90a")
    except Exception:  # noqa: BLE001 - no other ptxas on this machine: an error, not itself
        return
    assert choice.path != str(script)
