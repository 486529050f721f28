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
