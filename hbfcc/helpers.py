"""The helper modules: which file is linked, loading it and checking it against the ABI.

Two helper modules exist: the timing helpers (runtime_cuda/src/hbf_helpers.cu, the ABI of
runtime_cuda/include/hbf_abi.h, built as runtime_cuda/ptx/hbf_helpers.ptx and ..._lean.ptx) and the
Eidola helpers the flags pass calls (eidola/src/hbf_eidola_helpers.cu, build/runtime_cuda/
hbf_eidola_helpers.ptx). Each is parsed, checked against the signatures of :mod:`hbfcommon.abi`
and prepared for linking once per file version; linking itself is :mod:`hbfcc.link`.

Parsing and preparing the timing helper costs ~0.2 s of CPU, in every hbfcc-ptxas process (one per
Triton compile): the prepared module is kept in ``$HBFCC_CACHE_DIR/helper-parsed`` (pickle), keyed by
the file's path and sha256, the rewriter's own sha256 (any change to hbfcc's sources), that of
hbfcommon/abi.py (what the module is checked against) and the Python version, and read back instead
(~0.06 s). An entry is only ever written for a module that passed every
check; an unreadable or mismatching entry is parsed again and replaced.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import pickle
import re
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from hbfcommon import abi, resources
from hbfcommon.errors import ConfigError, RewriteError

from . import knobs
from .link import HelperModule, prepare
from .ptx.model import Module, VarDecl
from .ptx.parser import parse_module
from .toolchain import rewriter_sha, sha256_bytes

log = logging.getLogger(__name__)

PARSED_CACHE_SUBDIR = "helper-parsed"

__all__ = ["HelperModule", "load_helper", "load_eidola_helper", "eidola_helper_from_text", "default_helper_path",
           "lean_helper_path", "default_eidola_helper_path", "choose_helper_path"]


def default_helper_path() -> Path:
    """runtime_cuda/ptx/hbf_helpers.ptx, the direct build (package data of the runtime_cuda that an
    import would load: the source tree's after `make helpers-ptx`, the install's after a build with nvcc)."""
    return resources.helper_ptx_path("direct")


def lean_helper_path() -> Path:
    """runtime_cuda/ptx/hbf_helpers_lean.ptx: heavy paths behind one opaque call (fewer registers)."""
    return resources.helper_ptx_path("lean")


def choose_helper_path(module_text: Optional[str]) -> Path:
    """The helper build when none is named (no --helper, no HBFCC_HELPER_PTX): the direct build, for
    every module. Measured on the H200 (docs/RESULTS.md, issue 13 run 2, Triton and nvcc streaming cases
    at full occupancy, fixed 0 ns): direct ran them 2x faster than lean (helper time 2.6 vs 5.8 us per
    request), and its stack is bounded by ptxas (lean's opaque calls are not). Lean stays available by
    name (HBFCC_HELPER_PTX=.../hbf_helpers_lean.ptx) for kernels whose register count matters more.
    ``module_text`` is accepted for the callers that pass it; the choice no longer depends on it."""
    return default_helper_path()


# --------------------------------------------------------------------------------------------
# The timing helper module (hbf_abi.h)
# --------------------------------------------------------------------------------------------

def _built_abi_version(mod: Module) -> Optional[int]:
    """The ``__hb_abi_version`` a helper module may define (its initializer), else None."""
    for it in mod.items:
        if type(it) is VarDecl:
            for d in it.decls:
                if d.name == "__hb_abi_version" and d.init and d.init[0].isdigit():
                    return int(d.init[0])
    return None


@functools.lru_cache(maxsize=1)
def _abi_sha() -> str:
    """sha256 of hbfcommon/abi.py: the signatures and names a helper module is checked against."""
    return sha256_bytes(Path(abi.__file__).read_bytes())


def parsed_cache_path(role: str, path: str, sha256: str) -> Path:
    """Where the prepared helper module of ``path`` (its bytes' ``sha256``) is kept between processes."""
    key = sha256_bytes(json.dumps([role, path, sha256, rewriter_sha(), _abi_sha(), list(sys.version_info[:2]),
                                   pickle.HIGHEST_PROTOCOL]).encode())
    return knobs.load().cache_dir / PARSED_CACHE_SUBDIR / f"{key}.pickle"


def _prepared_cached(role: str, path: str, raw: bytes, build: Callable[[], HelperModule]) -> HelperModule:
    """``build()`` (parse, prepare, check), or the module it made before for the same key
    (:func:`parsed_cache_path`), read back."""
    sha = sha256_bytes(raw)
    cp = parsed_cache_path(role, path, sha)
    try:
        with open(cp, "rb") as f:
            got = pickle.load(f)
        if type(got) is HelperModule and got.role == role and got.path == path and got.sha256 == sha:
            return got
        log.warning("helper cache entry %s is not the module it is keyed by; parsing the helper again", cp)
    except FileNotFoundError:
        pass
    except Exception as e:  # noqa: BLE001 -- any unreadable entry (truncated, another class layout): parse again
        log.warning("helper cache entry %s unreadable (%s: %s); parsing the helper again", cp, type(e).__name__, e)
    helper = build()
    try:
        cp.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=cp.name + ".", suffix=".tmp", dir=cp.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(helper, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, cp)          # concurrent builds write the same entry
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:                 # a read-only or full cache: the build goes on without it
        log.info("helper cache entry %s not written: %s", cp, e)
    return helper


def _helper_from(raw: bytes, path: str) -> HelperModule:
    mod = parse_module(raw.decode("utf-8", "replace"), filename=path)
    helper = prepare(mod, role="helper", path=path, sha256=sha256_bytes(raw), required=abi.HELPERS,
                     private_prefix="__hb_l_", abi_version=abi.HBF_HELPER_ABI_VERSION)
    built = _built_abi_version(mod)
    if built is not None and built != abi.HBF_HELPER_ABI_VERSION:
        raise RewriteError("helper PTX was built for another helper ABI", helper=path,
                           helper_abi=built, header_abi=abi.HBF_HELPER_ABI_VERSION)
    return helper


@functools.lru_cache(maxsize=4)
def _load_helper_cached(path: str, mtime_ns: int, size: int) -> HelperModule:
    raw = Path(path).read_bytes()
    return _prepared_cached("helper", path, raw, lambda: _helper_from(raw, path))


def _helper_file(path: Optional[str], module_text: Optional[str]) -> str:
    p = path or knobs.load().helper_ptx
    if p and not os.path.isfile(p):
        raise ConfigError("helper PTX module not found", path=p,
                          given_by="--helper" if path else "HBFCC_HELPER_PTX")
    if not p:
        p = str(choose_helper_path(module_text))
        if not os.path.isfile(p):
            raise resources.helper_ptx_missing("direct", p)
    return p


def load_helper(path: Optional[str] = None, *, module_text: Optional[str] = None) -> HelperModule:
    """The helper module: ``path``, else HBFCC_HELPER_PTX, else the packaged helper (runtime_cuda/ptx)
    chosen for ``module_text`` by :func:`choose_helper_path` (direct build when no module is given)."""
    p = _helper_file(path, module_text)
    st = os.stat(p)
    return _load_helper_cached(os.path.abspath(p), st.st_mtime_ns, st.st_size)


_HEADER_VERSION = re.compile(r"^[ \t]*\.version[ \t]+(\d+\.\d+)", re.M)
_HEADER_TARGET = re.compile(r"^[ \t]*\.target[ \t]+([^\n/]+)", re.M)


def load_helper_header(path: Optional[str] = None, *, module_text: Optional[str] = None) -> HelperModule:
    """The same helper module as :func:`load_helper` picks, its identity only: path, sha256 (of the same
    bytes), ``.version`` and ``.target``, nothing to link (parsing and checking the whole module costs
    ~0.3 s a process). For the separate link (hbfcc/seplink.py), which links a helper object instead and
    checks the whole module (:func:`load_helper`) when it assembles that object."""
    from .link import _sm_of, version_tuple
    p = os.path.abspath(_helper_file(path, module_text))
    raw = Path(p).read_bytes()
    head = raw[:4096].decode("utf-8", "replace")
    v, t = _HEADER_VERSION.search(head), _HEADER_TARGET.search(head)
    if v is None or t is None:          # not a PTX module's header: the whole load says what is wrong
        return load_helper(p)
    return HelperModule(role="helper", path=p, sha256=sha256_bytes(raw), abi_version=abi.HBF_HELPER_ABI_VERSION,
                        version=version_tuple(v.group(1)),
                        target_sm=_sm_of(tuple(x.strip() for x in t.group(1).split(","))),
                        globals=(), externs=(), functions=(), defined=frozenset())


def _stub_body(sig: abi.Signature) -> str:
    if not sig.returns:
        return "{ ret; }"
    w, n = sig.returns[0]
    val = str(abi.INLINE_NEVER) if sig.name in ("__hb_inline_until", "__hb_inline_until_live") else "0"
    return f"{{ st.param.b{w} [{n}], {val}; ret; }}"


def stub_helper_text(version: str = "8.0") -> str:
    """A helper module whose functions do nothing (every call returns at once; __hb_inline_until: never).
    NOT for running: hbfcc-ptxas's occupancy guard assembles a module linked with it to learn the
    registers the kernel's own code needs (the inline path, the sites, the counters) without the real
    helpers' registers, which ptxas adds to every kernel that calls them."""
    lines = [f".version {version}", ".target sm_90a", ".address_size 64", "",
             f".visible .global .align 8 .u64 {abi.STATE_GLOBAL};",
             f".visible .global .align 4 .u32 {abi.KSLOT_BASE_GLOBAL};",
             f".visible .const .align 8 .b8 {abi.CDESC_GLOBAL}[{abi.CDESC_BYTES}];", ""]
    for sig in abi.HELPERS.values():
        rets = ", ".join(f".param .b{w} {n}" for w, n in sig.returns)
        params = ", ".join(f".param .b{w} {n}" for w, n in sig.params)
        head = f".visible .func ({rets}) {sig.name}({params})" if rets else f".visible .func {sig.name}({params})"
        lines.append(f"{head}\n{_stub_body(sig)}")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def stub_helper() -> HelperModule:
    """:func:`stub_helper_text` as a helper module (linked like the real one)."""
    text = stub_helper_text()
    mod = parse_module(text, filename="<stub helper>")
    return prepare(mod, role="helper", path="<stub helper>", sha256=sha256_bytes(text.encode()),
                   required=abi.HELPERS, private_prefix="__hb_l_", abi_version=abi.HBF_HELPER_ABI_VERSION)


# --------------------------------------------------------------------------------------------
# The eidola helper module (the functions the flags pass calls; issue 7)
# --------------------------------------------------------------------------------------------

def default_eidola_helper_path() -> Path:
    """runtime_cuda/ptx/hbf_eidola_helpers.ptx (from eidola/src/hbf_eidola_helpers.cu; built with the others)."""
    return resources.helper_ptx_path("eidola")


def _eidola_helper(raw: bytes, path: str) -> HelperModule:
    mod = parse_module(raw.decode("utf-8", "replace"), filename=path)
    helper = prepare(mod, role="eidola helper", path=path, sha256=sha256_bytes(raw), required=abi.EIDOLA_HELPERS,
                     private_prefix="__hb_le_", export_prefix="__hb_eidola_", stage_name="link_eidola")
    if abi.EIDOLA_STATE_GLOBAL not in helper.defined:
        raise RewriteError(f"eidola helper module has no {abi.EIDOLA_STATE_GLOBAL} global", helper=path)
    return helper


@functools.lru_cache(maxsize=4)
def _load_eidola_cached(path: str, mtime_ns: int, size: int) -> HelperModule:
    raw = Path(path).read_bytes()
    return _prepared_cached("eidola helper", path, raw, lambda: _eidola_helper(raw, path))


def eidola_helper_from_text(text: str, path: str = "<eidola helper>") -> HelperModule:
    """An eidola helper module given as PTX text (:func:`hbfcc.passes.flags.rewrite_text`)."""
    return _eidola_helper(text.encode(), path)


def load_eidola_helper(path: Optional[str] = None) -> HelperModule:
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
