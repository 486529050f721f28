"""HBFCC_JIT: an nvcc command line's GPU targets made PTX-only (docs/hbfcc.md "JIT builds").

Every REAL target ``sm_XX[a|f]`` becomes its virtual ``compute_XX[a|f]``: nvcc then runs only ptxas's
``-arch=compute_XX`` check step on the PTX it embeds (hbfcc-ptxas rewrites it there, in place), no SASS is
assembled at build time, and the CUDA driver JIT-compiles the embedded (rewritten) PTX when the program loads
the module. Pure functions of the argument lists: :func:`jit_plan` decides, ``nvcc_main`` (hbfcc/cli.py) applies.

The forms nvcc takes (each with ``=`` or as two arguments):

* ``-arch`` / ``--gpu-architecture`` ``sm_90a``: without ``-code``, shorthand for arch=compute_90a,
  code=[sm_90a,compute_90a] -> ``-arch=compute_90a -code=compute_90a`` (``-arch=compute_90a`` alone would make
  CUDA 13's nvcc compile a second, family module, compute_90); with ``-code``, ``-arch=compute_90a``;
* ``-code`` / ``--gpu-code`` ``sm_90a,compute_90a`` -> ``compute_90a`` (deduplicated, order kept);
* ``-gencode`` / ``--generate-code`` ``arch=compute_90a,code=[sm_90a,compute_90a]`` (or ``code="a,b"``, or
  one code) -> ``arch=compute_90a,code=compute_90a``; a -gencode equal to an earlier one is dropped.

Where JIT cannot apply (:func:`jit_plan` ``reason``), nothing changes: the caller builds as without the knob.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

ARCH_OPTS = ("-arch", "--gpu-architecture")
CODE_OPTS = ("-code", "--gpu-code")
GENCODE_OPTS = ("-gencode", "--generate-code")
WHOLE_ARCH = ("all", "all-major", "native")
# options after which the build must carry SASS (or has no module to JIT): option -> why
NO_JIT_OPTS = {
    "-dc": "relocatable device code (-dc): nvlink links SASS",
    "--device-c": "relocatable device code (--device-c): nvlink links SASS",
    "-dw": "relocatable device code (-dw): nvlink links SASS",
    "--device-w": "relocatable device code (--device-w): nvlink links SASS",
    "-dlink": "a device link (-dlink) links SASS",
    "--device-link": "a device link (--device-link) links SASS",
    "-cubin": "a -cubin output is SASS",
    "--cubin": "a --cubin output is SASS",
    "-fatbin": "a -fatbin output (the JIT build is for programs and objects)",
    "--fatbin": "a --fatbin output (the JIT build is for programs and objects)",
    "-ptx": "a -ptx output has no SASS to leave out",
    "--ptx": "a --ptx output has no SASS to leave out",
}
OPTIONS_FILE_OPTS = ("--options-file", "-optf")
RDC_OPTS = ("-rdc", "--relocatable-device-code")
SOURCE_SUFFIXES = (".cu", ".ptx", ".cpp", ".cc", ".cxx", ".c")
_REAL = re.compile(r"^sm_(\d+[a-z]?)$")
_GENCODE = re.compile(r"^arch=(?P<arch>[^,]+),code=(?P<code>.+)$|^code=(?P<code2>.+?),arch=(?P<arch2>[^,\]\"']+)$")


@dataclass(frozen=True)
class JitPlan:
    """What HBFCC_JIT does to one nvcc command line: the new arguments and NVCC_PREPEND_FLAGS /
    NVCC_APPEND_FLAGS tokens (unchanged where ``applied`` is false), the virtual targets named, and why not."""
    args: tuple[str, ...]
    prepend: tuple[str, ...]
    append: tuple[str, ...]
    applied: bool
    reason: Optional[str]
    targets: tuple[str, ...]

    def record(self) -> dict:
        """The nvcc record's ``jit`` field (requested: the knob was set)."""
        return {"requested": True, "applied": self.applied, "reason": self.reason, "targets": list(self.targets)}


def not_requested() -> dict:
    """The nvcc record's ``jit`` field of a build without the knob."""
    return {"requested": False, "applied": False, "reason": None, "targets": []}


def virtual(code: str) -> str:
    """``sm_90a`` -> ``compute_90a``; anything else (a virtual target already) unchanged."""
    m = _REAL.match(code)
    return f"compute_{m.group(1)}" if m else code


def _dedup(xs) -> list[str]:
    out: list[str] = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def _split_list(v: str) -> list[str]:
    v = v.strip()
    if len(v) >= 2 and (v[0], v[-1]) in (("[", "]"), ('"', '"'), ("'", "'")):
        v = v[1:-1]
    return [x.strip() for x in v.split(",") if x.strip()]


def _options(tokens: Sequence[str]) -> Iterator[tuple[int, int, str, str]]:
    """(index, tokens taken, option, value) of every target option (-arch, -code, -gencode and long forms)."""
    i = 0
    while i < len(tokens):
        t = tokens[i]
        for opt in ARCH_OPTS + CODE_OPTS + GENCODE_OPTS:
            if t == opt and i + 1 < len(tokens):
                yield i, 2, opt, tokens[i + 1]
                i += 1
                break
            if t.startswith(opt + "="):
                yield i, 1, opt, t[len(opt) + 1:]
                break
        i += 1


def _gencode(v: str) -> Optional[tuple[str, list[str]]]:
    m = _GENCODE.match(v.strip())
    if not m:
        return None
    arch, code = (m.group("arch"), m.group("code")) if m.group("arch") else (m.group("arch2"), m.group("code2"))
    return arch.strip(), _split_list(code)


def _gencode_value(arch: str, codes: list[str]) -> str:
    return f"arch={arch},code=" + (codes[0] if len(codes) == 1 else "[" + ",".join(codes) + "]")


def _options_files(tokens: Sequence[str]) -> list[str]:
    """The files of ``--options-file`` / ``-optf`` (each takes a comma list)."""
    out: list[str] = []
    for i, t in enumerate(tokens):
        for opt in OPTIONS_FILE_OPTS:
            v = t[len(opt) + 1:] if t.startswith(opt + "=") else \
                (tokens[i + 1] if t == opt and i + 1 < len(tokens) else None)
            if v is not None:
                out += [x for x in v.split(",") if x]
    return out


def _read_options(path: str) -> Optional[list[str]]:
    try:
        with open(path, encoding="utf-8") as f:
            return shlex.split(f.read())
    except (OSError, ValueError):
        return None


def _refusal(tokens: Sequence[str], read_options=_read_options) -> Optional[str]:
    """Why the whole command line cannot be built PTX-only, or None. An options file (CMake's includes) is read:
    one naming a GPU target (it is not rewritten) or an option that needs SASS refuses."""
    for f in _options_files(tokens):
        inner = read_options(f)
        if inner is None:
            return f"an options file that cannot be read ({f})"
        why = next((NO_JIT_OPTS[t] for t in inner if t in NO_JIT_OPTS), None)
        if why is None and (_options_files(inner) or any(True for _ in _options(inner))
                            or any(t.startswith(RDC_OPTS) for t in inner)):
            why = "GPU targets, -rdc or an options file named in it (hbfcc does not rewrite options files)"
        if why is not None:
            return f"options file {f}: {why}"
    for i, t in enumerate(tokens):
        if t in NO_JIT_OPTS:
            return NO_JIT_OPTS[t]
        for opt in RDC_OPTS:
            v = t[len(opt) + 1:] if t.startswith(opt + "=") else \
                (tokens[i + 1] if t == opt and i + 1 < len(tokens) else None)
            if v is not None and v.strip().lower() in ("true", "1", "yes", "on"):
                return f"relocatable device code ({opt} {v}): nvlink links SASS"
    opts = list(_options(tokens))
    if not opts:
        return "no GPU target named (nvcc's default target)"
    for _, _, opt, v in opts:
        if opt in ARCH_OPTS and v.strip() in WHOLE_ARCH:
            return f"{opt}={v}: nvcc picks the targets itself"
        if opt in GENCODE_OPTS and _gencode(v) is None:
            return f"{opt} {v}: not arch=...,code=... (hbfcc does not read it)"
    if not any(not t.startswith("-") and t.endswith(SOURCE_SUFFIXES) for t in tokens):
        return "a link-only step (no source to compile)"
    return None


def _translate(tokens: Sequence[str], seen_gencode: set, has_code: bool) -> tuple[list[str], list[str], list[str]]:
    """(new tokens, virtual targets named, targets named by -arch alone). ``has_code``: the command line has a
    -code (then -arch names the virtual architecture only)."""
    out: list[str] = []
    codes: list[str] = []
    arch_only: list[str] = []
    at = {i: (n, opt, v) for i, n, opt, v in _options(tokens)}
    i = 0
    while i < len(tokens):
        if i not in at:
            out.append(tokens[i])
            i += 1
            continue
        n, opt, v = at[i]
        if opt in GENCODE_OPTS:
            arch, cs = _gencode(v)
            new = _gencode_value(virtual(arch), _dedup(virtual(c) for c in cs))
            codes += _dedup(virtual(c) for c in cs)
            key = new
            if key in seen_gencode:
                i += n
                continue
            seen_gencode.add(key)
        else:
            given = _split_list(v)
            vs = _dedup(virtual(c) for c in given)
            new = ",".join(vs)
            (codes if opt in CODE_OPTS else arch_only).extend(vs)
            if opt in ARCH_OPTS and not has_code and vs != given:
                # -arch=sm_90a alone is arch=compute_90a,code=[sm_90a,compute_90a]: its PTX only is
                # -arch=compute_90a -code=compute_90a (-arch=compute_90a alone would add nvcc 13's family PTX,
                # compute_90: a second module compiled and rewritten)
                copt = CODE_OPTS[ARCH_OPTS.index(opt)]
                out += [tokens[i], new, copt, new] if n == 2 else [f"{opt}={new}", f"{copt}={new}"]
                i += n
                continue
        out += [tokens[i], new] if n == 2 else [f"{opt}={new}"]
        i += n
    return out, codes, arch_only


def jit_plan(args: Sequence[str], prepend: Sequence[str] = (), append: Sequence[str] = (),
             read_options=_read_options) -> JitPlan:
    """HBFCC_JIT's translation of nvcc's ``args`` and its NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS tokens
    (nvcc reads them as if on the command line: before and after ``args``). ``read_options(path)``: an options
    file's tokens, None when it cannot be read (default: the file, relative to the working directory)."""
    whole = list(prepend) + list(args) + list(append)
    why = _refusal(whole, read_options)
    if why is not None:
        return JitPlan(tuple(args), tuple(prepend), tuple(append), False, why, ())
    seen: set = set()
    has_code = any(opt in CODE_OPTS for _, _, opt, _ in _options(whole))
    p, c1, a1 = _translate(prepend, seen, has_code)
    a, c2, a2 = _translate(args, seen, has_code)
    q, c3, a3 = _translate(append, seen, has_code)
    codes = c1 + c2 + c3
    # -arch alone names its code (nvcc's shorthand); with -code, -arch is only the virtual architecture
    targets = _dedup(codes + ([] if has_code else a1 + a2 + a3))
    return JitPlan(tuple(a), tuple(p), tuple(q), True, None, tuple(targets))
