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
    ELFFile = _elffile()
    from elftools.common.exceptions import ELFError
    out: dict[str, ElfFunctionFacts] = {}
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            symtab = elf.get_section_by_name(".symtab")
            names = [s.name for s in symtab.iter_symbols()] if symtab is not None else []
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
    except (OSError, ELFError, struct.error) as e:
        raise ToolchainError(f"cannot read the ELF {path}: {e}", argv=[str(path)]) from e
    return out


# --------------------------------------------------------------------------------------------
# Code identity: two builds of the same program compared function by function
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FunctionCode:
    """What one function of a cubin executes, independent of where the ELF puts it: its machine code
    (the bytes of ``.text.<name>``: in a whole-program cubin a kernel's section also holds its own
    copies of the helper functions it calls, ``CALL.REL``), its relocations with the symbol they name
    (not its index, which moves when other symbols come and go), and its ELF facts."""

    text: bytes
    relocations: tuple[tuple[int, int, str, int], ...]     # (offset, type, symbol name, addend), sorted
    facts: ElfFunctionFacts


def function_code(path: str | Path) -> dict[str, FunctionCode]:
    """Per ``.text.<name>`` section of a cubin or relocatable object: its :class:`FunctionCode`."""
    ELFFile = _elffile()
    from elftools.common.exceptions import ELFError
    facts = function_facts(path)
    out: dict[str, FunctionCode] = {}
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            symtab = elf.get_section_by_name(".symtab")
            names = [s.name for s in symtab.iter_symbols()] if symtab is not None else []
            texts = {s.name[len(".text."):]: s.data() for s in elf.iter_sections() if s.name.startswith(".text.")}
            relocs: dict[str, list[tuple[int, int, str, int]]] = {}
            for sec in elf.iter_sections():
                for prefix in (".rela.text.", ".rel.text."):
                    if sec.name.startswith(prefix):
                        fn = sec.name[len(prefix):]
                        for r in sec.iter_relocations():
                            i = r["r_info_sym"]
                            relocs.setdefault(fn, []).append(
                                (r["r_offset"], r["r_info_type"], names[i] if i < len(names) else f"#{i}",
                                 r["r_addend"] if r.is_RELA() else 0))
    except (OSError, ELFError, struct.error) as e:
        raise ToolchainError(f"cannot read the ELF {path}: {e}", argv=[str(path)]) from e
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
