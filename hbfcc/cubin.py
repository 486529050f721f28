"""What a cubin (or a relocatable device object) records about its functions, read with pyelftools.

ptxas writes per-function facts into the ELF's ``.nv.info`` sections as EIATTR attributes
(entries of ``u8 format, u8 attribute, u16 size-or-value[, payload]``): the module-wide
``.nv.info`` holds ``(symbol index, value)`` pairs for EIATTR_REGCOUNT (registers per thread)
and EIATTR_FRAME_SIZE (stack frame bytes); each ``.nv.info.<function>`` holds that function's own
attributes, EIATTR_NUM_BARRIERS among them. On the CUDA 13 sm_90a cubins of the fixture corpus
these equal what ``ptxas -v`` prints for every function it prints them for, and REGCOUNT is also
there for the non-entry functions of a relocatable (``-c``) build, where ``-v`` prints none
(tests/hbfcc/test_cubin.py). The ``.text.<function>`` section's ``sh_info`` no longer carries the
register count (bits 24..31 are 0 in these cubins): REGCOUNT is the source. Spill bytes are not in
the ELF; hbfcc.toolchain keeps reading those from ``ptxas -v``.
"""
from __future__ import annotations

import contextlib
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from hbfcommon.errors import ConfigError, ToolchainError

# EIATTR attribute codes (the ones read here) and the EIFMT entry formats
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
EIATTR_NUM_BARRIERS = 0x4C
EIFMT_SVAL = 0x04          # u16 payload size, then the payload; other formats carry a u16 value


@dataclass
class ElfFunctionFacts:
    registers: Optional[int] = None
    frame_bytes: Optional[int] = None
    barriers: Optional[int] = None


def _elffile():
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError as e:   # a declared dependency; say so instead of a traceback
        raise ConfigError("pyelftools is not installed (pip install pyelftools): hbfcc reads register and "
                          "stack facts from the cubin with it") from e
    return ELFFile


@contextlib.contextmanager
def _elf(path: str | Path):
    """The ELF at ``path`` and its symbol names (by index); an unreadable or malformed file is a ToolchainError
    naming it, also when the failure comes while the caller walks its sections."""
    ELFFile = _elffile()
    from elftools.common.exceptions import ELFError
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            symtab = elf.get_section_by_name(".symtab")
            yield elf, ([s.name for s in symtab.iter_symbols()] if symtab is not None else [])
    except (OSError, ELFError, struct.error) as e:
        raise ToolchainError(f"cannot read the ELF {path}: {e}", argv=[str(path)]) from e


def attributes(data: bytes) -> Iterator[tuple[int, int, object]]:
    """(format, attribute, value) of each EIATTR entry of one ``.nv.info`` section: the payload
    bytes for EIFMT_SVAL, else the u16 value."""
    i, n = 0, len(data)
    while i + 4 <= n:
        fmt, attr, v = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
        if fmt == EIFMT_SVAL:
            yield fmt, attr, data[i + 4:i + 4 + v]
            i += 4 + v
        else:
            yield fmt, attr, v
            i += 4


def function_facts(path: str | Path) -> dict[str, ElfFunctionFacts]:
    """Per function symbol: registers, stack frame bytes and barriers, as far as the ELF records them."""
    out: dict[str, ElfFunctionFacts] = {}
    with _elf(path) as (elf, names):
        for sec in elf.iter_sections():
            if sec.name == ".nv.info":
                for _, attr, val in attributes(sec.data()):
                    if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and isinstance(val, bytes) and len(val) == 8:
                        idx, v = struct.unpack("<II", val)
                        if idx < len(names):
                            facts = out.setdefault(names[idx], ElfFunctionFacts())
                            if attr == EIATTR_REGCOUNT:
                                facts.registers = v
                            else:
                                facts.frame_bytes = v
            elif sec.name.startswith(".nv.info."):
                for _, attr, val in attributes(sec.data()):
                    if attr == EIATTR_NUM_BARRIERS and isinstance(val, int):
                        out.setdefault(sec.name[len(".nv.info."):], ElfFunctionFacts()).barriers = val
    return out


# --------------------------------------------------------------------------------------------
# Code identity: two builds of the same program compared function by function
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FunctionCode:
    """What one function of a cubin executes, independent of where the ELF puts it: its machine code
    (the bytes of ``.text.<name>``: in a whole-program cubin a kernel's section also holds its own
    copies of the helper functions it calls, ``CALL.REL``), its relocations with the symbol they name
    (not its index, which moves when other symbols come and go), and its ELF facts.

    One naming detail is normalized (:func:`_symbol_name`): ptxas names the symbol of a function-scope
    ``.shared`` variable ``$<mangled name>__<N>``, N a counter over the symbols it created before (1269
    in one build, 1276 in a build of the same kernel whose module held more helper functions); the
    counter is dropped, the variable's name kept."""

    text: bytes
    relocations: tuple[tuple[int, int, str, int], ...]     # (offset, type, symbol name, addend), sorted
    facts: ElfFunctionFacts


_LOCAL_COUNTER = re.compile(r"^(\$.*)__\d+$")


def _symbol_name(name: str) -> str:
    """A relocation's symbol for comparing builds: ptxas's ``$name__<counter>`` without the counter."""
    return _LOCAL_COUNTER.sub(r"\1__N", name)


def function_code(path: str | Path) -> dict[str, FunctionCode]:
    """Per ``.text.<name>`` section of a cubin or relocatable object: its :class:`FunctionCode`."""
    facts = function_facts(path)
    out: dict[str, FunctionCode] = {}
    with _elf(path) as (elf, names):
        texts = {s.name[len(".text."):]: s.data() for s in elf.iter_sections() if s.name.startswith(".text.")}
        relocs: dict[str, list[tuple[int, int, str, int]]] = {}
        for sec in elf.iter_sections():
            for prefix in (".rela.text.", ".rel.text."):
                if sec.name.startswith(prefix):
                    fn = sec.name[len(prefix):]
                    for r in sec.iter_relocations():
                        i = r["r_info_sym"]
                        relocs.setdefault(fn, []).append(
                            (r["r_offset"], r["r_info_type"], _symbol_name(names[i]) if i < len(names) else f"#{i}",
                             r["r_addend"] if r.is_RELA() else 0))
    for name, text in texts.items():
        out[name] = FunctionCode(text, tuple(sorted(relocs.get(name, ()))), facts.get(name, ElfFunctionFacts()))
    return out


def code_differences(a: dict[str, FunctionCode], b: dict[str, FunctionCode],
                     names: Optional[set[str]] = None) -> list[str]:
    """Where two builds' functions (``names``, default: those in both) differ: machine code,
    relocations, registers, stack frame or barriers; [] when identical. A function in ``names``
    that one build lacks is a difference too."""
    diffs: list[str] = []
    for n in sorted(names if names is not None else set(a) & set(b)):
        x, y = a.get(n), b.get(n)
        if x is None or y is None:
            diffs.append(f"{n}: only in the {'second' if x is None else 'first'} build")
            continue
        if x.text != y.text:
            k = next((i for i, (p, q) in enumerate(zip(x.text, y.text)) if p != q), min(len(x.text), len(y.text)))
            diffs.append(f"{n}: machine code differs ({len(x.text)} vs {len(y.text)} bytes, first at byte {k:#x})")
        if x.relocations != y.relocations:
            diffs.append(f"{n}: relocations differ")
        if x.facts != y.facts:
            diffs.append(f"{n}: ELF facts differ ({x.facts} vs {y.facts})")
    return diffs


_ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/\s*")
_ENC = re.compile(r"\s*/\* 0x[0-9a-f]+ \*/")
_LBL = re.compile(r"\.L_x_\d+")
_LOCAL_SYM = re.compile(r"(\$[A-Za-z0-9_$.]+?)__\d+\b")


def normalized_sass(path: str | Path, nvdisasm: str) -> dict[str, tuple[str, ...]]:
    """``nvdisasm -c`` of a cubin, per ``.text.<name>`` section, normalized for comparing two builds:
    the instructions and labels in order, without the address comments (offsets inside the section,
    equal when the code is) and with nvdisasm's ``.L_x_N`` labels renumbered per function in order of
    appearance (nvdisasm numbers them across the whole file, so one function more or less before
    this one shifts every number) and ptxas's local symbol counters dropped (:class:`FunctionCode`).
    Directives (.section/.align/.size/...) are left out."""
    import subprocess
    cp = subprocess.run([nvdisasm, "-c", str(path)], capture_output=True, text=True)
    if cp.returncode != 0:
        raise ToolchainError("nvdisasm failed", argv=[nvdisasm, "-c", str(path)], returncode=cp.returncode,
                             stderr=cp.stderr)
    out: dict[str, list[str]] = {}
    cur: Optional[list[str]] = None
    labels: dict[str, str] = {}
    for line in cp.stdout.splitlines():
        m = re.match(r"//-+ \.text\.(\S+)\s+-+$", line.strip())
        if m:
            cur = out.setdefault(m.group(1), [])
            labels = {}
            continue
        s = line.strip()
        if cur is None or not s or s.startswith(("//", ".section", ".align", ".global", ".type", ".size", ".other",
                                                  ".weak", ".local")):
            continue
        s = _ENC.sub("", _ADDR.sub("", s))
        s = _LBL.sub(lambda mm: labels.setdefault(mm.group(0), f".L{len(labels)}"), s)
        s = _LOCAL_SYM.sub(r"\1__N", s)
        cur.append(s)
    return {k: tuple(v) for k, v in out.items()}
