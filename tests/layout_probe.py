"""The one C layout probe of the tests: a header's structs and #define constants against their Python mirrors.

``c_structs(header)`` reads the field names of every ``typedef struct name {...} name;``; ``c_defines(header)`` the
plain ``#define HBF_*`` constants; ``compile_probe`` compiles (with the machine's C compiler) a program that prints
``size S``, ``off S.f``, ``fsize S.f`` and ``def NAME`` for the given structs and constants, runs it and returns
``{(kind, key): value}``."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pytest

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def c_structs(header: Path) -> dict[str, list[str]]:
    """Field names, in order, of every `typedef struct name {...} name;` in the header."""
    text = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S)
    out = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} (\w+);", text, flags=re.S):
        out[m.group(3)] = re.findall(r"^\s*[\w ]+?\s+(\w+)\s*(?:\[[^\]]+\])?\s*;", m.group(2), flags=re.M)
    return out


def c_defines(header: Path, skip: Iterable[str] = ()) -> list[str]:
    """The `#define HBF_* value` constants (not include guards `*_H`, not function-like macros, not `skip`)."""
    skip = set(skip)
    return [n for n in re.findall(r"^#define (HBF_\w+)[ \t]+\S", header.read_text(), flags=re.M)
            if not n.endswith("_H") and n not in skip]


def compile_probe(tmp_dir: Path, include_dir: Path, headers: Sequence[str], structs: Mapping[str, Sequence[str]],
                  defines: Sequence[str]) -> dict[tuple[str, str], int]:
    if CC is None:
        pytest.fail("no C compiler (cc/gcc/clang) found: the layout probe cannot run")
    lines = ["#include <stdio.h>", "#include <stddef.h>", *[f'#include "{h}"' for h in headers], "int main(void) {"]
    for sname, fields in structs.items():
        lines.append(f'printf("size {sname} %zu\\n", sizeof({sname}));')
        for fname in fields:
            lines.append(f'printf("off {sname}.{fname} %zu\\n", offsetof({sname}, {fname}));')
            lines.append(f'printf("fsize {sname}.{fname} %zu\\n", sizeof((({sname}*)0)->{fname}));')
    for d in defines:
        lines.append(f'printf("def {d} %llu\\n", (unsigned long long)({d}));')
    lines.append("return 0; }")
    (tmp_dir / "probe.c").write_text("\n".join(lines))
    argv = [CC, "-std=c11", "-Wall", "-Werror", f"-I{include_dir}", str(tmp_dir / "probe.c"), "-o",
            str(tmp_dir / "probe")]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, f"probe failed to compile: {' '.join(argv)}\n{r.stderr}"
    out = subprocess.run([str(tmp_dir / "probe")], capture_output=True, text=True, check=True).stdout
    return {(ln.split()[0], ln.split()[1]): int(ln.split()[2]) for ln in out.splitlines()}
