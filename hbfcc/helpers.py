"""The helper module: finding it, checking it against the ABI, linking it into a rewritten module.

Linking is *textual* (see docs/hbfcc.md §Linking for why not nvJitLink): the helper PTX's functions
and globals are appended after the rewritten module's own items, each ``__hb_*`` symbol made
``.weak`` so several modules (``-rdc`` + nvlink) can carry the same helpers, every other helper
symbol renamed to a private ``__hb_l_`` name, ``.loc``/``.file``/``.section`` debug directives
dropped (their file indices belong to the helper's compilation), and the module's ``.version``
raised to the helper's when the helper needs a newer one. The prototypes the call sites need are
inserted by the timing pass (:data:`PROTOTYPES`), before the first function.
"""
from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from hbfcommon import resources
from hbfcommon.errors import ConfigError, RewriteError

from . import knobs
from .toolchain import sha256_bytes

log = logging.getLogger(__name__)

# The ABI (runtime_cuda/include/hbf_abi.h): name -> (return widths, param widths)
ABI_SIGNATURES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "__hb_issue": ((64,), (64, 32, 32, 32)),
    "__hb_wait": ((), (64, 32)),
    "__hb_future_join": ((64,), (64, 64)),
    "__hb_kernel_enter": ((), (32,)),
    "__hb_kernel_exit": ((), (32,)),
}

PROTOTYPES: dict[str, str] = {
    "__hb_issue": ".weak .func (.param .b64 fut) __hb_issue(.param .b64 addr, .param .b32 bytes, "
                  ".param .b32 flags, .param .b32 site);",
    "__hb_wait": ".weak .func __hb_wait(.param .b64 fut, .param .b32 site);",
    "__hb_future_join": ".weak .func (.param .b64 fut) __hb_future_join(.param .b64 a, .param .b64 b);",
    "__hb_kernel_enter": ".weak .func __hb_kernel_enter(.param .b32 kernel_index);",
    "__hb_kernel_exit": ".weak .func __hb_kernel_exit(.param .b32 kernel_index);",
}

# hbf_abi.h flag bits (checked against the header by tests/hbfcc/test_rewrite_helpers.py)
F_OP_LOAD, F_OP_STORE, F_OP_ATOMIC, F_OP_CPASYNC = 0, 1, 2, 3
F_ACTIVE = 0x4
F_GENERIC = 0x8
F_WAIT_NOW = 0x10
F_NC = 0x20
F_RELEASE = 0x40


def _runtime_cuda_dir() -> Optional[Path]:
    try:   # runtime_cuda's package data, found without importing runtime_cuda
        return resources.package_dir("runtime_cuda")
    except ConfigError:
        return None


def abi_header_path() -> Path:
    d = _runtime_cuda_dir()
    if d is None or not (d / "include" / "hbf_abi.h").is_file():
        raise ConfigError("runtime_cuda/include/hbf_abi.h not found")
    return d / "include" / "hbf_abi.h"


@functools.lru_cache(maxsize=1)
def abi_defines() -> dict[str, int]:
    """``#define NAME value`` integer constants of hbf_abi.h."""
    out: dict[str, int] = {}
    for m in re.finditer(r"^#define\s+(HBF_\w+)\s+\(?\s*(0x[0-9a-fA-F]+|\d+)u?(?:ll|ull)?\s*(?:/[*/]|$)",
                         abi_header_path().read_text(), re.M):
        out[m.group(1)] = int(m.group(2), 0)
    return out


def abi_version() -> int:
    return abi_defines()["HBF_HELPER_ABI_VERSION"]


def default_helper_path() -> Path:
    """runtime_cuda/ptx/hbf_helpers.ptx, the direct build (package data of the runtime_cuda that an
    import would load: the source tree's after `make helpers-ptx`, the install's after a build with nvcc)."""
    return resources.helper_ptx_path("direct")


def lean_helper_path() -> Path:
    """runtime_cuda/ptx/hbf_helpers_lean.ptx: heavy paths behind one opaque call (fewer registers)."""
    return resources.helper_ptx_path("lean")


# Tensor-core instructions: ptxas serializes wgmma across an opaque call (C7510) and register-heavy
# MMA kernels spill around it, so such modules keep the direct build (bench/helper_registers.py).
_TENSOR_CORE_RE = re.compile(r"(?<![\w.$%])(?:wgmma|mma|tcgen05)\.")


def choose_helper_path(module_text: Optional[str]) -> Path:
    """The default helper build for one module when none is named (no --helper, no HBFCC_HELPER_PTX).

    Lean unless the module uses tensor-core instructions; direct when the lean build is missing.
    Measured on the H200 (docs/RESULTS.md, run 3): an hbfcc-built streaming kernel ran 1.05x / 1.14x
    its plain build with lean (detached / attached) against 1.17x / 1.44x with direct.
    """
    lean = lean_helper_path()
    if module_text is not None and lean.is_file() and not _TENSOR_CORE_RE.search(module_text):
        return lean
    return default_helper_path()


# --------------------------------------------------------------------------------------------
# Splitting a PTX module into top-level items (text level, no full parse)
# --------------------------------------------------------------------------------------------

_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


@dataclass(frozen=True)
class TopItem:
    kind: str          # "header" | "func" | "funcdecl" | "var" | "debug" | "other"
    name: str          # symbol name ("" for header/debug/other)
    linkage: str       # ".visible" / ".weak" / ".extern" / ""
    text: str          # the item's text (comments stripped)


_FUNC_NAME_RE = re.compile(r"\.(?:func|entry)\s*(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)")
_VAR_NAME_RE = re.compile(r"([A-Za-z_$][\w$]*)\s*(?:<\s*\d+\s*>)?\s*(?:\[[^\]]*\]\s*)*(?:=|$)")


def split_top_level(text: str) -> list[TopItem]:
    """Top-level items of a PTX module. Comments are dropped; string literals do not occur outside
    ``.file`` directives, which are single items ending at ';' or a newline."""
    src = _COMMENT_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    items: list[TopItem] = []
    i, n = 0, len(src)
    while i < n:
        while i < n and src[i].isspace():
            i += 1
        if i >= n:
            break
        start = i
        # header directives are line items without ';'
        for kw in (".version", ".target", ".address_size", ".file"):
            if src.startswith(kw, i):
                j = src.find("\n", i)
                j = n if j < 0 else j
                items.append(TopItem("header" if kw != ".file" else "debug", "", "", src[start:j].strip()))
                i = j + 1
                break
        else:
            depth = 0
            is_func_like = False
            j = i
            while j < n:
                c = src[j]
                if c == "{":
                    if depth == 0:
                        head = src[start:j]
                        is_func_like = bool(re.search(r"\.(func|entry)\b", head)) or head.lstrip().startswith(".section")
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0 and is_func_like:
                        j += 1
                        break
                elif c == ";" and depth == 0:
                    j += 1
                    break
                elif c == '"':
                    k = src.find('"', j + 1)
                    j = n if k < 0 else k
                j += 1
            chunk = src[start:j].strip()
            items.append(_classify(chunk))
            i = j
            continue
    return items


def _classify(chunk: str) -> TopItem:
    words = chunk.split()
    linkage = words[0] if words and words[0] in (".visible", ".weak", ".extern", ".common") else ""
    if chunk.startswith(".section"):
        return TopItem("debug", "", "", chunk)
    head = chunk.split("{", 1)[0]
    if re.search(r"\.(func|entry)\b", head):
        m = _FUNC_NAME_RE.search(head)
        name = m.group(1) if m else ""
        kind = "func" if "{" in chunk else "funcdecl"
        return TopItem(kind, name, linkage, chunk)
    if re.search(r"\.(global|const|shared|local)\b", head):
        decl = chunk.rstrip(";").split("=", 1)[0].strip()
        m = re.search(r"([A-Za-z_$][\w$]*)\s*(?:\[[^\]]*\]\s*)*$", decl)
        return TopItem("var", m.group(1) if m else "", linkage, chunk)
    return TopItem("other", "", linkage, chunk)


def _widths(params: str) -> tuple[int, ...]:
    out = []
    for p in params.split(","):
        p = p.strip()
        if not p:
            continue
        m = re.search(r"\.(?:b|u|s|f)(\d+)\b", p)
        if not m:
            raise RewriteError("helper parameter has no scalar type", param=p)
        out.append(int(m.group(1)))
    return tuple(out)


def func_signature(item: TopItem) -> tuple[tuple[int, ...], tuple[int, ...]]:
    head = item.text.split("{", 1)[0]
    m = re.search(r"\.func\s*(\(([^)]*)\))?\s*[\w$]+\s*\(([^)]*)\)", head, re.S)
    if not m:
        m2 = re.search(r"\.func\s*(\(([^)]*)\))?\s*[\w$]+\s*$", head.strip().rstrip(";"), re.S)
        if not m2:
            raise RewriteError("cannot read helper function header", header=head[:200])
        return (_widths(m2.group(2) or ""), ())
    return (_widths(m.group(2) or ""), _widths(m.group(3)))


# --------------------------------------------------------------------------------------------
# The helper module
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HelperModule:
    path: str
    sha256: str
    abi_version: int
    version: tuple[int, int]       # the helper's .version
    target_sm: Optional[int]       # the helper's .target SM number (modules below it cannot link it)
    body: str                      # ready-to-append text: function definitions, weak, renamed, debug stripped
    vars: str                      # the helper's global variables (placed before the module's functions)
    defined: frozenset[str]        # top-level names the body defines (after renaming)
    externs: tuple[TopItem, ...]   # .extern declarations the body needs


def _parse_version(v: str) -> tuple[int, int]:
    a, _, b = v.strip().partition(".")
    return int(a), int(b or 0)


def _version_and_target(items) -> tuple[tuple[int, int], Optional[int]]:
    """A helper module's ``.version`` and ``.target`` sm number (None when the target names none)."""
    version, target_sm = (0, 0), None
    for it in items:
        if it.kind == "header" and it.text.startswith(".version"):
            version = _parse_version(it.text.split()[1])
        if it.kind == "header" and it.text.startswith(".target"):
            m = re.search(r"sm_(\d+)", it.text)
            target_sm = int(m.group(1)) if m else None
    return version, target_sm


@functools.lru_cache(maxsize=4)
def _load_helper_cached(path: str, mtime_ns: int, size: int) -> HelperModule:
    raw = Path(path).read_bytes()
    text = raw.decode("utf-8", "replace")
    items = split_top_level(text)
    version, target_sm = _version_and_target(items)
    defined_funcs = {it.name for it in items if it.kind == "func"}
    for name, (rets, params) in ABI_SIGNATURES.items():
        if name not in defined_funcs:
            raise RewriteError("helper module does not define an ABI function", helper=path, function=name)
        it = next(x for x in items if x.kind == "func" and x.name == name)
        sig = func_signature(it)
        if sig != (rets, params):
            raise RewriteError("helper function signature differs from hbf_abi.h", helper=path,
                               function=name, expected=str((rets, params)), found=str(sig))
    body, vars_text, defined, externs = _assemble(items, defined_funcs, "__hb_l_")
    abi = abi_version()
    m = re.search(r"__hb_abi_version\s*=\s*(\d+)", text)
    if m and int(m.group(1)) != abi:
        raise RewriteError("helper PTX was built for another helper ABI", helper=path,
                           helper_abi=int(m.group(1)), header_abi=abi)
    return HelperModule(path=path, sha256=sha256_bytes(raw), abi_version=abi, version=version, target_sm=target_sm,
                        body=body, vars=vars_text, defined=frozenset(defined), externs=tuple(externs))


def _assemble(items: list[TopItem], defined_funcs: set[str], prefix: str):
    """(body, vars, defined, externs) of a helper module's items: ``__hb_*`` symbols made ``.weak``,
    every other symbol renamed to a private ``prefix`` name, debug lines dropped."""
    renames = {}
    for it in items:
        if it.kind in ("func", "var") and it.name and not it.name.startswith("__hb_"):
            renames[it.name] = prefix + it.name.lstrip("$")
    parts: list[str] = []
    var_parts: list[str] = []
    externs: list[TopItem] = []
    defined: set[str] = set()
    for it in items:
        if it.kind in ("header", "debug", "other"):
            continue
        if it.kind == "funcdecl" and it.name in defined_funcs:
            continue  # forward declaration of something defined here
        if it.linkage == ".extern" or it.kind == "funcdecl":
            externs.append(it)
            continue
        t = it.text
        if it.name.startswith("__hb_"):
            t = _set_linkage(t, ".weak")
        else:
            t = _set_linkage(t, "")
        t = _drop_debug_lines(t)
        (var_parts if it.kind == "var" else parts).append(t)
        defined.add(renames.get(it.name, it.name))
    body = "\n\n".join(parts)
    vars_text = "\n".join(var_parts)
    for old, new in renames.items():
        pat = r"(?<![\w$.%])" + re.escape(old) + r"(?![\w$])"
        body = re.sub(pat, new, body)
        vars_text = re.sub(pat, new, vars_text)
    return body, vars_text, defined, externs


def _set_linkage(t: str, linkage: str) -> str:
    t = re.sub(r"^\s*(\.visible|\.weak|\.common)\s+", "", t)
    return (linkage + " " + t) if linkage else t


def _drop_debug_lines(t: str) -> str:
    return "\n".join(l for l in t.splitlines() if not re.match(r"\s*\.(loc|file)\b", l))


def load_helper(path: Optional[str] = None, *, module_text: Optional[str] = None) -> HelperModule:
    """The helper module: ``path``, else HBFCC_HELPER_PTX, else the packaged helper (runtime_cuda/ptx)
    chosen for ``module_text`` by :func:`choose_helper_path` (direct build when no module is given)."""
    p = path or knobs.load().helper_ptx
    if p and not os.path.isfile(p):
        raise ConfigError("helper PTX module not found", path=p,
                          given_by="--helper" if path else "HBFCC_HELPER_PTX")
    if not p:
        p = str(choose_helper_path(module_text))
        if not os.path.isfile(p):
            raise resources.helper_ptx_missing("direct", p)
    st = os.stat(p)
    return _load_helper_cached(os.path.abspath(p), st.st_mtime_ns, st.st_size)


# --------------------------------------------------------------------------------------------
# Linking
# --------------------------------------------------------------------------------------------

_STATE_DECL_LINE = re.compile(r"^[ \t]*\.extern[ \t]+\.global[ \t]+\.align[ \t]+8[ \t]+\.u64[ \t]+__hb_state[ \t]*;[ \t]*$", re.M)
_VERSION_LINE = re.compile(r"^(\s*\.version\s+)(\d+)\.(\d+)", re.M)


def _raise_version(module_text: str, version: tuple[int, int]) -> str:
    """The module's ``.version`` raised to ``version`` when lower (a linked helper needs it)."""
    m = _VERSION_LINE.search(module_text)
    if m is None:
        raise RewriteError("module has no .version directive")
    have = (int(m.group(2)), int(m.group(3)))
    if version <= have:
        return module_text
    log.info("raised .version %d.%d -> %d.%d for a helper module", *have, *version)
    return module_text[:m.start()] + m.group(1) + f"{version[0]}.{version[1]}" + module_text[m.end():]


def link_text(module_text: str, helper: HelperModule, *, module_names: Iterable[str],
              declared_names: Iterable[str] = ()) -> str:
    """Append the helper's definitions to a rewritten module's text.

    ``module_names``: the top-level names the module defines; helper definitions with the same name
    are not appended again (the module already carries them). ``declared_names``: names the module
    only declares; ``.extern`` declarations the module already has are not repeated.
    """
    names = set(module_names)
    declared = set(declared_names) | names
    module_text = _raise_version(module_text, helper.version)
    already = names & helper.defined
    if already:
        if not already >= {n for n in helper.defined if n.startswith("__hb_")}:
            raise RewriteError("module defines some helper functions but not all", names=sorted(already))
        return module_text  # already linked
    ext = [e.text for e in helper.externs if e.name and e.name not in declared]
    # the helper's globals go where the rewritten module declares __hb_state (before its functions,
    # which read it), replacing that declaration; else before the helper's functions
    m2 = _STATE_DECL_LINE.search(module_text)
    tail = [f"\n// ---- hbfcc: helper module {os.path.basename(helper.path)} sha256 {helper.sha256} "
            f"ABI {helper.abi_version} ----"]
    if m2 is not None:
        module_text = module_text[:m2.start()] + helper.vars + "\n" + module_text[m2.end():]
    else:
        tail.append(helper.vars)
    tail += ext
    tail.append(helper.body)
    return module_text.rstrip("\n") + "\n" + "\n\n".join(tail) + "\n"


# --------------------------------------------------------------------------------------------
# The eidola helper module (the functions the flags pass calls; issue 7)
# --------------------------------------------------------------------------------------------

def default_eidola_helper_path() -> Path:
    """runtime_cuda/ptx/hbf_eidola_helpers.ptx (from eidola/src/hbf_eidola_helpers.cu; built with the others)."""
    return resources.helper_ptx_path("eidola")


@dataclass(frozen=True)
class EidolaHelperModule:
    path: str
    sha256: str
    version: tuple[int, int]
    target_sm: Optional[int]
    body: str                      # function definitions (__hb_eidola_* weak, the rest renamed __hb_le_*)
    vars: str                      # its globals (__hb_eidola_state, weak)
    defined: frozenset[str]
    externs: tuple[TopItem, ...]

    def to_dict(self) -> dict:
        return {"path": self.path, "sha256": self.sha256, "ptx_version": f"{self.version[0]}.{self.version[1]}",
                "functions": sorted(n for n in self.defined if n.startswith("__hb_eidola_"))}


@functools.lru_cache(maxsize=4)
def _load_eidola_cached(path: str, mtime_ns: int, size: int) -> EidolaHelperModule:
    from .passes.flags import SIGNATURES, STATE_GLOBAL

    raw = Path(path).read_bytes()
    items = split_top_level(raw.decode("utf-8", "replace"))
    version, target_sm = _version_and_target(items)
    funcs = {it.name: it for it in items if it.kind == "func"}
    for name, sig in SIGNATURES.items():
        if name not in funcs:
            raise RewriteError("eidola helper module does not define a function the flags pass calls",
                               helper=path, function=name)
        found = func_signature(funcs[name])
        if found != sig:
            raise RewriteError("eidola helper function signature differs from the flags pass's prototype",
                               helper=path, function=name, expected=str(sig), found=str(found))
    if not any(it.kind == "var" and it.name == STATE_GLOBAL for it in items):
        raise RewriteError(f"eidola helper module has no {STATE_GLOBAL} global", helper=path)
    body, vars_text, defined, externs = _assemble(items, set(funcs), "__hb_le_")
    return EidolaHelperModule(path=path, sha256=sha256_bytes(raw), version=version, target_sm=target_sm,
                              body=body, vars=vars_text, defined=frozenset(defined), externs=tuple(externs))


def load_eidola_helper(path: Optional[str] = None) -> EidolaHelperModule:
    """The eidola helper module: ``path``, else HBFCC_EIDOLA_HELPER_PTX, else the packaged one."""
    p = path or knobs.load().eidola_helper_ptx
    if p and not os.path.isfile(p):
        raise ConfigError("eidola helper PTX not found; the flags pass (HBFCC_PASSES=...,flags) needs it", path=p,
                          given_by="argument" if path else "HBFCC_EIDOLA_HELPER_PTX")
    if not p:
        p = str(default_eidola_helper_path())
        if not os.path.isfile(p):
            raise resources.helper_ptx_missing("eidola", p)
    st = os.stat(p)
    return _load_eidola_cached(os.path.abspath(p), st.st_mtime_ns, st.st_size)


def link_eidola_text(module_text: str, helper: EidolaHelperModule, *, module_names: Iterable[str],
                     declared_names: Iterable[str] = ()) -> str:
    """Append the eidola helper's globals and functions to a rewritten (and timing-linked) module.

    Symbols the module already defines (e.g. a timing helper that includes the extern API) are not
    appended again; ``.extern`` declarations the module already has are not repeated."""
    names = set(module_names)
    names |= {it.name for it in split_top_level(module_text)
              if (it.kind == "func" or (it.kind == "var" and it.linkage != ".extern")) and it.name}
    declared = set(declared_names) | names
    module_text = _raise_version(module_text, helper.version)
    parts = [f"\n// ---- hbfcc: eidola helper module {os.path.basename(helper.path)} sha256 {helper.sha256} ----"]
    for it in split_top_level(helper.vars):
        if it.name not in names:
            parts.append(it.text)
    parts += [e.text for e in helper.externs if e.name and e.name not in declared]
    for it in split_top_level(helper.body):
        if it.kind == "func" and it.name in names:
            continue
        parts.append(it.text)
    return module_text.rstrip("\n") + "\n" + "\n\n".join(parts) + "\n"
