"""The real CUDA tools behind hbfcc: finding them, running them, reading what they print and write.

Every subprocess failure raises ``ToolchainError(argv=...)`` so the command can be reproduced.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from hbfcommon.errors import ConfigError, ToolchainError

from . import knobs

log = logging.getLogger(__name__)

_SHIM_MARKER = b"hbfcc-ptxas-shim"
# the modules our console scripts import (pyproject.toml [project.scripts]): a script naming one is ours
_ENTRY_MODULES = (b"hbfcc.cli", b"hbfcc.ptxas_entry")


def _is_hbfcc_wrapper(path: str) -> bool:
    """True when ``path`` is one of our own wrappers (would recurse forever): the shadow toolkit's shim, a script
    running ``hbfcc.cli``, or hbfcc-ptxas's console script (``hbfcc.ptxas_entry``: an installed ``hbfcc-ptxas`` as
    TRITON_PTXAS_PATH without HBFCC_REAL_PTXAS ran itself, without end, before this was recognized)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return _SHIM_MARKER in head or any(m in head for m in _ENTRY_MODULES)


def _executable(p: str) -> bool:
    return os.path.isfile(p) and os.access(p, os.X_OK)


def _find_real(tool: str, chosen: Optional[str], variable: str, more: Sequence[str] = ()) -> str:
    """``chosen`` (the knob ``variable``), else ``tool`` on PATH, else $CUDA_HOME/bin/``tool``, else
    the paths in ``more``; never one of hbfcc's own wrappers (that would recurse)."""
    if chosen:
        if not _executable(chosen):
            raise ConfigError(f"{variable} is not an executable file", path=chosen)
        return chosen
    dirs = [d for d in knobs.env_path().split(os.pathsep) if d]
    dirs += [os.path.join(home, "bin") for home in knobs.cuda_home_candidates()]
    for p in [os.path.join(d, tool) for d in dirs] + list(more):
        if _executable(p) and not _is_hbfcc_wrapper(p):
            return p
    raise ConfigError(f"no real {tool} found: set {variable}, put the CUDA toolkit's bin on PATH "
                      "or set CUDA_HOME")


def _triton_bundled(tool: str) -> list[str]:
    """The ``tool`` bundled in the Triton wheel (``<triton>/backends/nvidia/bin/<tool>``), when
    Triton is importable (found without importing it)."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return [os.path.join(loc, "backends", "nvidia", "bin", tool) for loc in (spec.submodule_search_locations or ())]


@dataclass(frozen=True)
class PtxasChoice:
    """The real ptxas hbfcc-ptxas runs and why that one (recorded in the artifact as ``ptxas.source``)."""
    path: str
    source: str   # HBFCC_REAL_PTXAS | nvcc toolkit | TRITON_PTXAS_PATH | TRITON_PTXAS_BLACKWELL_PATH |
    #               triton bundled | PATH | CUDA_HOME


def _blackwell(arch: Optional[str]) -> bool:
    m = re.match(r"(?:sm|compute)_(\d+)", arch or "")
    return m is not None and int(m.group(1)) >= 100


def choose_ptxas(arch: Optional[str] = None, *, nvcc_step: bool = False) -> PtxasChoice:
    """The ptxas hbfcc-ptxas runs.

    1. ``HBFCC_REAL_PTXAS`` (the knob; the shadow toolkit's shim sets it to the toolkit's ptxas for
       nvcc's steps: ``nvcc_step``);
    2. the ptxas plain Triton would run: ``TRITON_PTXAS_PATH`` (``TRITON_PTXAS_BLACKWELL_PATH`` for
       sm_100+) when it names a ptxas that is not one of hbfcc's wrappers, else the ptxas bundled in
       the Triton wheel (what Triton falls back to; notes §1.1) when Triton is installed;
    3. ``ptxas`` on PATH (never one of our wrappers), then ``$CUDA_HOME/bin/ptxas``."""
    k = knobs.load()
    if k.real_ptxas:
        return PtxasChoice(_find_real("ptxas", k.real_ptxas, "HBFCC_REAL_PTXAS"),
                           "nvcc toolkit" if nvcc_step else "HBFCC_REAL_PTXAS")
    var, tool = ("TRITON_PTXAS_BLACKWELL_PATH", "ptxas-blackwell") if _blackwell(arch) else \
        ("TRITON_PTXAS_PATH", "ptxas")
    tp = os.environ.get(var)
    if tp:
        tp = shutil.which(tp) or tp
        if _executable(tp) and not _is_hbfcc_wrapper(tp):
            return PtxasChoice(tp, var)
    for p in _triton_bundled(tool):
        if _executable(p) and not _is_hbfcc_wrapper(p):
            return PtxasChoice(p, "triton bundled")
    c = cuda_ptxas()
    if c is None:
        _find_real("ptxas", None, "HBFCC_REAL_PTXAS")       # raises the error naming the knob
    assert c is not None
    return c


def cuda_ptxas() -> Optional[PtxasChoice]:
    """``ptxas`` on PATH (never one of our wrappers), else ``$CUDA_HOME/bin/ptxas``; None when neither."""
    for d in [d for d in knobs.env_path().split(os.pathsep) if d]:
        p = os.path.join(d, "ptxas")
        if _executable(p) and not _is_hbfcc_wrapper(p):
            return PtxasChoice(p, "PATH")
    for home in knobs.cuda_home_candidates():
        p = os.path.join(home, "bin", "ptxas")
        if _executable(p) and not _is_hbfcc_wrapper(p):
            return PtxasChoice(p, "CUDA_HOME")
    return None


def find_real_ptxas() -> str:
    """CUDA's ptxas (what nvcc runs): HBFCC_REAL_PTXAS, else `ptxas` on PATH (never one of our
    wrappers), else $CUDA_HOME/bin/ptxas, else the ptxas bundled in the Triton wheel. hbfcc-ptxas
    itself runs :func:`choose_ptxas`."""
    return _find_real("ptxas", knobs.load().real_ptxas, "HBFCC_REAL_PTXAS", _triton_bundled("ptxas"))


def ptxas_release(ptxas: str) -> tuple[int, int]:
    """The CUDA release of a ptxas (``release X.Y`` of its ``--version``)."""
    m = re.search(r"release (\d+)\.(\d+)", ptxas_version_text(ptxas))
    assert m is not None          # ptxas_version_text checked it
    return int(m.group(1)), int(m.group(2))


def max_ptx_version(ptxas: str) -> tuple[int, int]:
    """The newest PTX ISA (``.version``) a ptxas accepts, from its release; the rule Triton uses to
    pick the ``.version`` it emits (``ptx_get_version``): 12.0-12.5 -> 8.0-8.5, 12.6+ -> 8.(minor-1),
    11.x -> 7.x, 13.x+ -> 9.x (10.x for 14.x)."""
    major, minor = ptxas_release(ptxas)
    if major == 12:
        v = 80 + minor if minor < 6 else 80 + minor - 1
    elif major == 11:
        v = 70 + minor
    elif major >= 13:
        v = 90 + (major - 13) * 10 + minor
    else:
        v = 63 + minor
    return v // 10, v % 10


def find_real_nvcc() -> str:
    """The nvcc hbfcc wraps: HBFCC_REAL_NVCC, else `nvcc` on PATH (never ourselves), else
    $CUDA_HOME/bin/nvcc."""
    return _find_real("nvcc", knobs.load().real_nvcc, "HBFCC_REAL_NVCC")


def run(argv: Sequence[str], *, what: str, env: Optional[dict] = None, cwd: Optional[str] = None,
        check: bool = True, input_text: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run a tool, capturing output. Raises ToolchainError on failure when ``check``."""
    try:
        cp = subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=cwd,
                            input=input_text)
    except OSError as e:
        raise ToolchainError(f"{what}: cannot run: {e}", argv=argv) from e
    if check and cp.returncode != 0:
        raise ToolchainError(f"{what} failed", argv=argv, returncode=cp.returncode,
                             stderr=(cp.stderr or "") + (cp.stdout or ""))
    return cp


@functools.lru_cache(maxsize=8)
def ptxas_version_text(ptxas: str) -> str:
    """The full stdout of ``ptxas --version`` (what Triton hashes)."""
    cp = run([ptxas, "--version"], what="ptxas --version")
    if not re.search(r"release (\d+\.\d+)", cp.stdout):
        raise ToolchainError("ptxas --version printed no 'release X.Y'", argv=[ptxas, "--version"],
                             returncode=cp.returncode, stderr=cp.stdout)
    return cp.stdout


# --------------------------------------------------------------------------------------------
# ptxas -v
# --------------------------------------------------------------------------------------------

@dataclass
class FunctionStats:
    registers: Optional[int] = None
    stack_bytes: Optional[int] = None
    spill_stores: Optional[int] = None
    spill_loads: Optional[int] = None
    barriers: Optional[int] = None
    smem_bytes: Optional[int] = None   # static .shared bytes (``-v``'s "N bytes smem", 0 when it names none)

    def to_dict(self) -> dict:
        return {"registers": self.registers, "stack_bytes": self.stack_bytes,
                "spill_store_bytes": self.spill_stores, "spill_load_bytes": self.spill_loads,
                "barriers": self.barriers, "smem_bytes": self.smem_bytes}


@dataclass
class PtxasStats:
    functions: dict[str, FunctionStats] = field(default_factory=dict)

    def get(self, name: str) -> FunctionStats:
        return self.functions.setdefault(name, FunctionStats())


_RE_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_RE_PROPS = re.compile(r"Function properties for (\S+)")
_RE_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?")
_RE_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_v(text: str) -> PtxasStats:
    """Registers / stack / spills / static shared bytes per function from ``ptxas -v`` output (stderr or stdout);
    what the cubin records replaces the first two in :func:`build_stats`."""
    st = PtxasStats()
    last: Optional[str] = None       # last function named by "Compiling entry function"/"properties"
    for line in text.splitlines():
        m = _RE_ENTRY.search(line) or _RE_PROPS.search(line)
        if m:
            last = m.group(1)
            st.get(last)
            continue
        m = _RE_STACK.search(line)
        if m and last is not None:
            fs = st.get(last)
            fs.stack_bytes, fs.spill_stores, fs.spill_loads = (int(m.group(i)) for i in (1, 2, 3))
            continue
        m = _RE_USED.search(line)
        if m and last is not None:
            fs = st.get(last)
            fs.registers = int(m.group(1))
            if m.group(2) is not None:
                fs.barriers = int(m.group(2))
            sm = _RE_SMEM.search(line)
            fs.smem_bytes = int(sm.group(1)) if sm else 0
    return st


def build_stats(ptxas_output: str, elf_path: Optional[str]) -> PtxasStats:
    """Per function facts of one ptxas build: registers, stack frame and barriers from the ELF it
    wrote (:mod:`hbfcc.cubin`, for every function the ELF records), spill bytes from its ``-v``
    output (the ELF has none). Without an ELF (no ``-o``) the ``-v`` output gives everything."""
    st = parse_ptxas_v(ptxas_output)
    if elf_path is None or not os.path.isfile(elf_path):
        return st
    from .cubin import function_facts
    for name, f in function_facts(elf_path).items():
        fs = st.get(name)
        if f.registers is not None:
            fs.registers = f.registers
        if f.frame_bytes is not None:
            fs.stack_bytes = f.frame_bytes
        if f.barriers is not None:
            fs.barriers = f.barriers
    return st


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def sha256_file(p: os.PathLike | str) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def rewriter_sha() -> str:
    """SHA-256 over hbfcc's own sources: any change to the rewriter changes this."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()


def cli_wrapper(path: os.PathLike | str, sub: str = "", python: Optional[str] = None) -> Path:
    """Write an executable at ``path`` that runs hbfcc's CLI with this interpreter (``python -m hbfcc.cli [sub] ARGS``):
    hbfcc as nvcc (``sub`` "") or hbfcc-ptxas (``sub`` "ptxas") where the package's entry points are not installed
    (a checkout on a GPU machine, a bench's work folder). It names ``hbfcc.cli``, so the real-tool finders never
    take it for nvcc or ptxas (:func:`_is_hbfcc_wrapper`)."""
    import sys  # noqa: PLC0415
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"#!/bin/sh\nexec {python or sys.executable} -m hbfcc.cli {sub + ' ' if sub else ''}\"$@\"\n")
    p.chmod(0o755)
    return p


def which(name: str) -> Optional[str]:
    return shutil.which(name)
