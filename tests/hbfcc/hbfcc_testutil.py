"""Shared helpers for the hbfcc rewrite/CLI tests (imported by tests/hbfcc/test_rewrite_*.py and
test_cli_*.py; not a test module)."""
from __future__ import annotations

import functools
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hbfcommon import resources

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
VENV_BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    p = shutil.which(name)
    if p is None:
        pytest.skip(f"{name} not installed")
    return p


def console(name: str) -> str:
    """Path of one of our console scripts (hbfcc, hbfcc-ptxas) in the running venv."""
    p = VENV_BIN / name
    if not p.exists():
        p2 = shutil.which(name)
        if p2 is None:
            pytest.skip(f"{name} console script not installed (pip install -e .)")
        return p2
    return str(p)


@functools.lru_cache(maxsize=1)
def fixture_helper_ptx() -> str:
    """The test-fixture helper module (tests/hbfcc/helper_fixture.cu) compiled to PTX."""
    nvcc = tool("nvcc")
    d = Path(tempfile.mkdtemp(prefix="hbfcc-helper-fixture."))
    out = d / "helper_fixture.ptx"
    subprocess.run([nvcc, "-arch=compute_90a", "-rdc=true", "-ptx", str(HERE / "helper_fixture.cu"),
                    "-o", str(out)], check=True, capture_output=True)
    return str(out)


def real_helper_ptx() -> str | None:
    p = resources.helper_ptx_path("direct")      # runtime_cuda/ptx (make helpers-ptx)
    if not p.is_file() and shutil.which("nvcc") and (REPO / "runtime_cuda" / "src" / "hbf_helpers.cu").is_file():
        subprocess.run(["make", "-C", str(REPO), "helpers-ptx"], capture_output=True)
    return str(p) if p.is_file() else None


def helper_paths() -> list[str]:
    """Both helper modules when present: the real one and the fixture."""
    out = []
    r = real_helper_ptx()
    if r:
        out.append(r)
    out.append(fixture_helper_ptx())
    return out


def assemble(text: str, arch: str = "sm_90a", extra=()) -> subprocess.CompletedProcess:
    """ptxas the text; asserts success and returns the completed process (stderr has -v info)."""
    ptxas = tool("ptxas")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.ptx"
        p.write_text(text)
        cp = subprocess.run([ptxas, f"-arch={arch}", "-v", *extra, str(p), "-o", str(Path(d) / "m.cubin")],
                            capture_output=True, text=True)
    assert cp.returncode == 0, f"ptxas failed:\n{cp.stderr}\n{cp.stdout}"
    return cp


def compile_cu(src: str, arch: str = "sm_90a", extra=()) -> str:
    """nvcc -ptx of a CUDA source text."""
    nvcc = tool("nvcc")
    with tempfile.TemporaryDirectory() as d:
        cu = Path(d) / "k.cu"
        cu.write_text(src)
        out = Path(d) / "k.ptx"
        subprocess.run([nvcc, f"-arch={arch}", "-ptx", *extra, str(cu), "-o", str(out)], check=True,
                       capture_output=True)
        return out.read_text()


def rewritten_text(dump_dir: Path) -> str:
    """The PTX hbfcc-ptxas assembled last (it never rewrites its input: read the HBFCC_DUMP_DIR of
    its one rewrite, the newest ``NN-print.ptx``: after an occupancy guard or launch bound stage)."""
    (d,) = list(Path(dump_dir).iterdir())
    return sorted(d.glob("*-print.ptx"))[-1].read_text()


def env_with(**kw) -> dict:
    e = dict(os.environ)
    for k, v in kw.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = str(v)
    return e


# ---- fatbin (notes §6): PTX entries embedded in a host object ----------------------------------

def _elf_sections(data: bytes) -> dict[str, bytes]:
    """Section name -> contents of an ELF (pyelftools; NOBITS sections are empty)."""
    import io
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(data))
    return {s.name: (b"" if s["sh_type"] == "SHT_NOBITS" else s.data()) for s in elf.iter_sections()}


def fatbin_entries(obj: bytes) -> list[dict]:
    """Entries of the .nv_fatbin (or -rdc __nv_relfatbin) section of a host object: kind (1 PTX, 2 ELF), sm, flags, payload."""
    secs = _elf_sections(obj)
    blob = secs.get(".nv_fatbin") or secs.get("__nv_relfatbin")   # the latter with -rdc=true
    assert blob, "no .nv_fatbin / __nv_relfatbin section"
    out = []
    pos = 0
    while pos + 16 <= len(blob):
        magic, ver, hsz, size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != 0xBA55ED50:
            break
        e = pos + hsz
        end = e + size
        while e < end:
            kind, _, ehsz, padded = struct.unpack_from("<HHIQ", blob, e)
            csize, = struct.unpack_from("<I", blob, e + 0x10)
            sm, = struct.unpack_from("<I", blob, e + 0x1C)
            flags, = struct.unpack_from("<Q", blob, e + 0x28)
            payload = blob[e + ehsz:e + ehsz + padded]
            out.append({"kind": kind, "sm": sm, "flags": flags, "compressed": bool(flags & 0x8000),
                        "payload": payload})
            e += ehsz + padded
        pos = end
    return out


# ---- a compact trace of a rewritten function (for golden tests) ------------------------------

def _hb_call_event(block) -> str | None:
    from hbfcc.ptx.model import Instruction, Symbol, Address
    args: dict[str, str] = {}
    call = None
    for s in block.body:
        if type(s) is Instruction and s.opcode == "st" and "param" in s.modifiers:
            a = s.operands[0]
            if type(a) is Address and type(a.base) is Symbol:
                args[a.base.name] = str(s.operands[1])
        if type(s) is Instruction and s.opcode == "call":
            call = s
    if call is None:
        return None
    callee = next((o.name for o in call.operands if type(o) is Symbol), "")
    if not callee.startswith("__hb_"):
        return None
    g = (str(call.guard) + " ") if call.guard else ""
    name = callee[len("__hb_"):]
    if name == "wait":
        return f"{g}wait {args.get('__hb_p0')}"
    if name == "issue":
        return f"{g}issue bytes={args.get('__hb_p1')} flags={args.get('__hb_p2')} site={args.get('__hb_p3')}"
    if name == "future_join":
        return f"{g}join {args.get('__hb_p0')} {args.get('__hb_p1')}"
    return f"{g}{name} {args.get('__hb_p0')}"


def trace(module, fname: str, *, keep_hb_movs: bool = False) -> list[str]:
    """The rewritten function as a list of events: original instructions as their text (without
    operand spacing), helper calls as `wait X` / `issue bytes= flags= site=` / `join A B` /
    `kernel_enter K` / `kernel_exit K` (with their guard), and the hbfcc register moves that
    carry meaning (guarded future updates) when ``keep_hb_movs``."""
    from hbfcc.ptx.model import Block, Instruction, Label
    fn = module.function(fname)
    out: list[str] = []

    def rec(body):
        for s in body:
            if type(s) is Label and s.name == "$__hb_native":
                raise StopIteration    # the native version (an untouched copy) follows
            if type(s) is Block:
                ev = _hb_call_event(s)
                if ev is not None:
                    out.append(ev)
                else:
                    rec(s.body)
            elif type(s) is Instruction:
                txt = " ".join(str(s).split())
                if "%__hb_" in txt:
                    if keep_hb_movs:
                        out.append("hb: " + txt)
                    continue
                out.append(txt)

    try:
        rec(fn.body)
    except StopIteration:
        pass
    return out


# ---- PTX of calls through a parameter block (as nvcc writes them) -------------------------------

def call_block(callee: str, *, result: str | None = "%r1") -> str:
    """A call of ``.func (.param .b32 rv) callee(.param .b64 p)`` with ``%rd1`` as the argument, in
    its own ``{}`` scope; the result is read into ``result`` (None: not read)."""
    ld = f"    ld.param.b32 {result}, [pr];\n" if result else ""
    return ("    {\n    .param .b64 pa;\n    .param .b32 pr;\n    st.param.b64 [pa], %rd1;\n"
            f"    call (pr), {callee}, (pa);\n{ld}    }}\n")


def call_entry(name: str, callee: str, *, regs: int = 2) -> str:
    """An ``.entry name(.param .u64 k_p)`` that loads its pointer into ``%rd1`` and only calls ``callee``
    (:func:`call_block`), with ``regs`` registers declared of .b32 and of .b64."""
    return (f".visible .entry {name}(.param .u64 k_p)\n{{\n    .reg .b32 %r<{regs}>;\n    .reg .b64 %rd<{regs}>;\n"
            f"    ld.param.u64 %rd1, [k_p];\n{call_block(callee)}    ret;\n}}\n")
