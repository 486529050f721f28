"""The C/C++ host API's Python side (docs/runtime.md "C/C++ host API", docs/design.md §3.11).

``libhbfsim`` (``capi/src/hbfsim.c``, header ``capi/include/hbfsim.h``) is a thin C ABI over the one
session (:mod:`runtime_cuda.session`) through an embedded interpreter: every C entry point calls
:func:`call` here with the GIL held, and gets back ``(code, message, value)``, never an exception. So
attach, the control region, the device state block, range snapshots, per-launch selection, counters,
failures and the summary have one definition, the Python one; this module only converts.

What it adds is the C/C++ side of module binding (:func:`bind_all`): a cudart program registers its
fatbins at static-init time and launches with ``<<<>>>``, so there is no module handle to pass. The rule:
the program's admission artifacts (``<binary>.hbfcc.json``, which hbfcc writes beside a program it
linked, or paths the caller names) list every kernel by its mangled name; nvcc gives a kernel's host
stub the same mangled name, so the stub's address is in the binary's symbol table (``.symtab``,
``.dynsym``) plus the object's load bias; the PROGRAM's cudart (``cudaGetFuncBySymbol``, whose address
the header passes from the caller's translation unit) turns the stub into the context's CUfunction;
``cuFuncGetModule`` gives the CUmodule, which :meth:`Session.bind_module` binds with that module's own
kernels in ``.entry`` order (the counter-slot order).
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from hbfcommon import artifact as A
from hbfcommon import ctl as C
from hbfcommon.errors import ConfigError, ErrorCode, HbfError
from hbfcommon.fsutil import atomic_write_json

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
# bumped when a C struct or function changes incompatibly (hbfsim.h HBFSIM_ABI_VERSION says the same)
ABI_VERSION = 1
COUNTERS_VERSION = 2
SUMMARY_SCHEMA = "hbfsim.capi.summary"
# the C layer's own code (hbfsim.h): the embedded interpreter could not start or import this package.
# Every other code is hbfcommon.errors.ErrorCode's.
E_PYTHON = 100

# attach flags (hbfsim.h)
ATTACH_NO_CUDA = 1 << 0
ATTACH_ALLOW_UNMODELED = 1 << 1

# the scalar counters of struct hbfsim_counters after its header and per-op block, in order (hbfsim.h):
# (C field, key of Session.counters()["totals"] or a derived value)
SCALARS = ("requests", "media_bytes", "program_bytes", "modeled_ns", "service_ns", "helper_ns",
           "wait_calls", "exposed_wait_ns", "lateness_ns", "slack_ns", "ready_waits", "inline_requests",
           "launches", "thermal_waits", "thermal_wait_ns", "refresh_claims", "refresh_bytes", "bias_clamps",
           "unmodeled_launches", "refused_launches", "inline_ns")
OP_FIELDS = ("requests", "bytes", "program_bytes", "modeled_ns", "wall_ns", "service_ns", "overhead_ns")


def cmake_dir() -> Path:
    """The directory holding ``hbfsimConfig.cmake`` (``-Dhbfsim_DIR=...``)."""
    return HERE / "cmake"


def include_dir() -> Path:
    return HERE / "include"


# ------------------------------------------------------------------------------------------ dispatch
def call(name: str, args: tuple) -> tuple[int, str, Any]:
    """Run ``name(*args)`` of this module for the C layer: (0, "", value), or (code, message, extra) for
    an error (an HbfError's code and message with its fields; anything else is INTERNAL, named by its
    type; the traceback goes to the debug log, never to stderr)."""
    fn = _API.get(name)
    if fn is None:
        return int(ErrorCode.INTERNAL), f"libhbfsim asked for an unknown bridge function {name!r}", None
    try:
        return 0, "", fn(*args)
    except HbfError as e:
        extra = None
        status = getattr(e, "status", None)
        if status is not None:   # DeviceFailure: the recorded failure word
            extra = (int(status), int(e.site), str(e.fields.get("status", status)))
        return int(e.code), _message(e), extra
    except Exception as e:  # noqa: BLE001 - the C boundary: a code and a message, never a traceback
        log.debug("libhbfsim: %s failed", name, exc_info=True)
        return int(ErrorCode.INTERNAL), f"internal error in {name}: {type(e).__name__}: {e}", None


def _message(e: HbfError) -> str:
    fields = {k: v for k, v in e.fields.items() if k not in ("status",)}
    extra = ", ".join(f"{k}={v}" for k, v in fields.items())
    return f"{e.message} ({extra})" if extra else e.message


def setup_logging() -> None:
    """The embedded interpreter's logging: warnings and errors of the runtime to stderr, one line each
    (``hbfsim: WARNING runtime_cuda.session: ...``), unless the host already configured logging."""
    root = logging.getLogger()
    if not root.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("hbfsim: %(levelname)s %(name)s: %(message)s"))
        root.addHandler(h)
        root.setLevel(logging.WARNING)


# ------------------------------------------------------------------------------------------ session
def attach(socket: str | None, flags: int):
    from runtime_cuda.session import attach as _attach  # noqa: PLC0415
    if int(flags) & ~(ATTACH_NO_CUDA | ATTACH_ALLOW_UNMODELED):
        raise ConfigError("unknown hbfsim_attach flags", flags=hex(int(flags)))
    cuda = False if int(flags) & ATTACH_NO_CUDA else None
    allow = True if int(flags) & ATTACH_ALLOW_UNMODELED else None
    s = _attach(socket or None, allow, cuda=cuda)
    s.capi_bound = {}      # kernel name -> what bind_all found (the summary lists it)
    return s


def register_timing_range(s, ptr: int, nbytes: int, perms: int, label: str) -> tuple[int, int]:
    if not ptr:
        raise ConfigError("range base is NULL", code=ErrorCode.INVALID_ARGUMENT)
    if int(perms) == 0:
        perms = C.HBF_PERM_ALL
    r = s.register_timing_range(int(ptr), int(nbytes), int(perms), label=label or "")
    return int(r.range_id), int(r.media_offset)


def unregister(s, range_id: int) -> None:
    s.unregister(int(range_id))


def counters(s) -> tuple:
    """The flat tuple struct hbfsim_counters holds after its header: generation, per op (OP_NAMES order)
    the OP_FIELDS, then SCALARS."""
    c = s.counters(publish=True)
    t = c["totals"]
    ops = t["ops"]
    flat_ops = [int(ops[op][f]) for op in C.OP_NAMES for f in OP_FIELDS]
    sums = {f: sum(int(ops[op][f]) for op in C.OP_NAMES) for f in OP_FIELDS}
    vals = {"requests": sums["requests"], "media_bytes": sums["bytes"], "program_bytes": sums["program_bytes"],
            "modeled_ns": sums["modeled_ns"], "service_ns": sums["service_ns"], "helper_ns": sums["overhead_ns"],
            "exposed_wait_ns": t["wait_wall_ns"], "lateness_ns": t["wait_overhead_ns"],
            "unmodeled_launches": len(c["unmodeled_launches"]), "refused_launches": len(c["refused_launches"])}
    for k in SCALARS:
        if k not in vals:
            vals[k] = int(t[k])
    return (int(c["generation"]), *flat_ops, *(int(vals[k]) for k in SCALARS))


def synchronize(s) -> None:
    """Session.synchronize; a session without CUDA has no work to wait for and checks the recorded
    failure word only (a DeviceFailure either way: the C layer reports status and site)."""
    s._ensure_open()
    if s.use_cuda:
        s.synchronize()
    else:
        s.raise_device_failure()


def write_summary(s, path: str) -> None:
    """hbfd's run summary so far (GetSummary), this session's counters and what bind_all bound, as one
    JSON document at ``path`` (atomic replace)."""
    if not path:
        raise ConfigError("summary path is empty")
    s._ensure_open()
    rep = s.client.call("GetSummary", s.client.pb.GetSummaryRequest())
    doc = {"schema": SUMMARY_SCHEMA, "schema_version": 1, "pid": os.getpid(), "cuda": bool(s.use_cuda),
           "counters": s.counters(publish=True), "bound_kernels": dict(getattr(s, "capi_bound", {})),
           "daemon": json.loads(rep.summary_json)}
    try:
        atomic_write_json(path, doc, indent=1, end="\n")
    except OSError as e:
        raise ConfigError(f"cannot write the summary: {e.strerror}", path=str(path)) from e


def detach(s) -> None:
    s.close()


# ------------------------------------------------------------------------------------------ program record
PROGRAM_SCHEMA = "hbfsim.capi.program"


def write_program_record(program: str, objects: Sequence[str]) -> tuple[Path | None, int]:
    """``<program>.hbfcc.json`` from the records hbfcc wrote beside the program's objects
    (``<obj>.hbfcc.json``, schema ``hbfcc.admission.nvcc``): their kernels with hbfcc's verdicts and their
    module documents, for :func:`bind_all` (CMake's ``hbfsim_record_program``: CMake links a program with
    CUDA sources through the host compiler, so hbfcc never sees the link and writes no link record). An
    hbfcc link record at least as new as the program is kept. No object record (a plain nvcc build):
    nothing is written, and a stale record of ours is removed. Returns (path or None, kernels)."""
    prog = Path(program)
    out = Path(str(prog) + ".hbfcc.json")
    if not prog.is_file():
        raise ConfigError("program not found", path=str(prog))
    old = None
    if out.is_file():
        try:
            old = json.loads(out.read_text())
        except ValueError:
            old = None
    if old and old.get("schema") == A.LINK_SCHEMA_ID and out.stat().st_mtime >= prog.stat().st_mtime:
        return out, len(old.get("kernels", []))
    kernels: list[dict] = []
    modules: list[dict] = []
    used: list[str] = []
    for o in objects:
        rec = Path(str(o) + ".hbfcc.json")
        if not rec.is_file():
            continue
        doc = A.load(rec)
        if not isinstance(doc, dict) or not isinstance(doc.get("kernels"), list):
            raise ConfigError("not an hbfcc object record", path=str(rec))
        used.append(str(rec))
        names = {k["name"] for k in kernels}
        kernels += [k for k in doc["kernels"] if k.get("name") not in names]
        modules += _module_docs(doc)
    if not used:
        if old and old.get("schema") == PROGRAM_SCHEMA:
            out.unlink()
        return None, 0
    atomic_write_json(out, {"schema": PROGRAM_SCHEMA, "schema_version": 1, "output": str(prog), "objects": used,
                            "admitted": all(k.get("admitted") for k in kernels), "kernels": kernels,
                            "modules": modules}, indent=1, end="\n")
    return out, len(kernels)


# ------------------------------------------------------------------------------------------ binding
@dataclass
class Kernel:
    name: str
    admitted: bool
    reason: str
    address_source: str
    binary: str | None = None     # the ELF object whose symbol table holds the host stub
    stub: int = 0                 # the host stub's address in this process (0: not found)


def loaded_objects() -> dict[str, int]:
    """path -> lowest mapped address of every file-backed object mapped into this process (the
    executable and its shared libraries), from /proc/self/maps."""
    out: dict[str, int] = {}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            path = parts[5].strip()
            if path.endswith(" (deleted)"):
                continue
            lo = int(parts[0].split("-")[0], 16)
            out[path] = min(lo, out.get(path, lo))
    return out


def program_artifacts(explicit: str | None) -> list[tuple[str, str | None]]:
    """(artifact path, binary path or None) to bind from: the paths named (``:``-separated), else every
    loaded object's ``<object>.hbfcc.json`` (the link record hbfcc writes beside a program or shared
    library it linked), the executable first."""
    if explicit:
        paths = [p for p in explicit.split(os.pathsep) if p]
        for p in paths:
            if not os.path.isfile(p):
                raise ConfigError("admission artifact not found", path=p)
        return [(p, None) for p in paths]
    exe = os.path.realpath("/proc/self/exe")
    objs = [exe] + [p for p in loaded_objects() if p != exe]
    found = [(p + ".hbfcc.json", p) for p in objs if os.path.isfile(p + ".hbfcc.json")]
    if not found:
        raise ConfigError(f"no admission artifact beside the program ({exe}.hbfcc.json) or any loaded library: "
                          "build it through hbfcc (CUDACXX=hbfcc) and, with CMake, call "
                          "hbfsim_record_program(<target>) (CMake links through the host compiler, where hbfcc "
                          "writes no link record); or pass the records (hbfsim_bind_all's `artifacts`, "
                          "':'-separated, e.g. an object's <obj>.hbfcc.json). A plain nvcc build has none: run "
                          "it without a session", executable=exe)
    return found


def _module_docs(doc: dict) -> list[dict]:
    if isinstance(doc.get("modules"), list):
        return [m for m in doc["modules"] if isinstance(m, dict)]
    return [doc] if doc.get("schema") == A.SCHEMA_ID else []


def _counts(m: dict) -> bool:
    """A module document whose image a GPU where hbfsim models loads (not below the helper's target)."""
    return not (m.get("input") or {}).get("below_helper_target")


def program_kernels(docs: Sequence[dict]) -> dict[str, Kernel]:
    """Every kernel the artifacts name, with the verdict the top document gives it (a link/nvcc record
    resolves it across modules and targets)."""
    out: dict[str, Kernel] = {}
    for doc in docs:
        srcs = A.address_sources(doc)
        for name, adm, reasons in A.kernels(doc):
            prev = out.get(name)
            if prev is not None:   # named by two artifacts: admitted only when both say so
                prev.admitted = prev.admitted and adm
                continue
            out[name] = Kernel(name, bool(adm), "; ".join(reasons), srcs.get(name, "memory"))
    return out


def module_document(docs: Sequence[dict], names: set[str]) -> dict:
    """The compiled module a loaded CUDA module holding kernels ``names`` came from: a counting module
    document (an image a GPU where hbfsim models loads) that defines all of them (the same TU's images for
    several targets list the same kernels in the same .entry order: the first serves)."""
    for doc in docs:
        for m in _module_docs(doc):
            if _counts(m) and names <= {k.get("name") for k in m.get("kernels", [])}:
                return m
    raise HbfError("no compiled module of the admission records holds all the kernels of one loaded module "
                   "(an -rdc device link, or records of another build): the C API binds one compiled module "
                   "per CUDA module", code=ErrorCode.UNSUPPORTED, kernels=sorted(names)[:8])


def elf_symbols(path: str, names: set[str]) -> tuple[dict[str, int], int, int]:
    """(name -> st_value of the FUNC symbols named, ELF type (ET_EXEC=2, ET_DYN=3), lowest PT_LOAD vaddr)
    from the object's .symtab and .dynsym."""
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415
    found: dict[str, int] = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        etype = 3 if elf["e_type"] == "ET_DYN" else 2
        lo = min((int(s["p_vaddr"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"), default=0)
        for secname in (".symtab", ".dynsym"):
            sec = elf.get_section_by_name(secname)
            if sec is None:
                continue
            for sym in sec.iter_symbols():
                if sym.name in names and sym.name not in found and sym["st_info"]["type"] == "STT_FUNC" \
                        and int(sym["st_value"]):
                    found[sym.name] = int(sym["st_value"])
    return found, etype, lo


def find_stubs(kernels: dict[str, Kernel], binaries: Sequence[str]) -> None:
    """Fill each kernel's host stub address: its mangled name in the symbol table of the binaries
    (the executable, then the loaded objects given), plus the object's load bias."""
    maps = loaded_objects()
    want = {k for k, v in kernels.items() if not v.stub}
    page = os.sysconf("SC_PAGE_SIZE")
    for b in binaries:
        if not want:
            break
        real = os.path.realpath(b)
        if real not in maps:
            continue
        syms, etype, lo = elf_symbols(real, want)
        bias = 0 if etype == 2 else maps[real] - (lo & ~(page - 1))
        for name, addr in syms.items():
            kernels[name].stub, kernels[name].binary = addr + bias, real
        want -= set(syms)




def bind_all(s, explicit: str | None, get_func_by_symbol: int) -> tuple[int, int, int, int]:
    """Bind every instrumented module of this program (see the module docstring for the rule). Returns
    (modules bound, kernels found, admitted, not admitted). A kernel whose host stub is not found, or a
    non-admitted kernel without allow_unmodeled, is an error naming them (a cudart launch has no launch
    gate, so the refusal comes here, before any launch). A session without CUDA resolves the kernels and
    their stubs and binds nothing (modules = 0)."""
    s._ensure_open()
    arts = program_artifacts(explicit)
    docs = [A.load(p) for p, _ in arts]
    kernels = program_kernels(docs)
    if not kernels:
        raise ConfigError("the admission artifacts name no kernel", artifacts=[p for p, _ in arts])
    exe = os.path.realpath("/proc/self/exe")
    binaries = [b for _, b in arts if b] or [exe] + [p for p in loaded_objects() if os.path.isfile(p + ".hbfcc.json")]
    if exe not in binaries:
        binaries.append(exe)
    find_stubs(kernels, binaries)
    missing = sorted(k for k, v in kernels.items() if not v.stub)
    if missing:
        raise ConfigError("host stubs of these kernels are not in the program's symbol tables (a stripped "
                          "binary, or a kernel with internal linkage: static or in an anonymous namespace)",
                          code=ErrorCode.UNSUPPORTED, kernels=missing[:8], missing=len(missing))
    bad = sorted(k for k, v in kernels.items() if not v.admitted)
    for k in bad:   # one event per kernel, the shape of the launch gate's (Session.gate)
        ev = {"kernel": k, "reason": "not admitted: " + (kernels[k].reason or "no reason recorded"),
              "reaches": [], "arguments_known": False, "allow_unmodeled": s.allow_unmodeled, "at": "bind_all"}
        (s.unmodeled_launches if s.allow_unmodeled else s.refused_launches).append(ev)
        s._report("unmodeled_launch" if s.allow_unmodeled else "launch_refused", ev)
    if bad and not s.allow_unmodeled:
        raise HbfError("the program has kernels that are not admitted: their launches would not be modeled "
                       "(attach with HBFSIM_ATTACH_ALLOW_UNMODELED to run them unmodeled)",
                       code=ErrorCode.LAUNCH_REFUSED, kernels={k: kernels[k].reason for k in bad[:8]})
    if bad:
        log.warning("non-admitted kernels allowed (allow_unmodeled): %s", ", ".join(bad))
    modules = 0
    if s.use_cuda:
        modules = _bind_modules(s, kernels, docs, get_func_by_symbol)
    s.capi_bound = {k: {"admitted": v.admitted, "binary": v.binary, "stub": hex(v.stub)}
                    for k, v in kernels.items()}
    adm = sum(1 for v in kernels.values() if v.admitted)
    return modules, len(kernels), adm, len(kernels) - adm


def _bind_modules(s, kernels: dict[str, Kernel], docs: Sequence[dict], get_func_by_symbol: int) -> int:
    if not get_func_by_symbol:
        raise ConfigError("bind_all needs the program's cudaGetFuncBySymbol: include cuda_runtime.h (nvcc does "
                          "for a .cu file) before hbfsim.h in the file that calls hbfsim_bind_all")
    cu = s._cu
    d = cu.drv()
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
    get_func = proto(int(get_func_by_symbol))
    by_module: dict[int, list[Kernel]] = {}
    for k in kernels.values():
        f = ctypes.c_void_p(0)
        err = int(get_func(ctypes.byref(f), ctypes.c_void_p(k.stub)))
        if err != 0 or not f.value:
            raise HbfError(f"cudaGetFuncBySymbol failed for kernel {k.name} (cudaError {err})",
                           code=ErrorCode.CUDA, kernel=k.name, cuda_error=err)
        fn = d.CUfunction(int(f.value))
        if hasattr(d, "cuFuncLoad"):   # under cudart's lazy loading (CUDA 12.2+ default): loaded now, module and all
            cu.check(d.cuFuncLoad(fn), "cuFuncLoad")
        mod = cu.check(d.cuFuncGetModule(fn), "cuFuncGetModule")
        # the handle's VALUE: cuda.bindings' getPtr() is the address of the Python object's copy of it (binding
        # that address failed cuModuleGetGlobal with CUDA_ERROR_INVALID_HANDLE on the H200, 2026-12-05)
        handle = int(mod)
        by_module.setdefault(handle, []).append(k)
    for handle, ks in by_module.items():
        if handle in s.bindings:   # bound by an earlier bind_all: its slots and state stay
            continue
        mdoc = module_document(docs, {k.name for k in ks})
        order = sorted(mdoc.get("kernels", []), key=lambda x: int(x.get("kernel_index", 0)))
        # the module's own kernels in .entry order (its counter slots), with the program's verdicts
        art = {"kernels": [{"name": x["name"],
                            "admitted": kernels[x["name"]].admitted if x["name"] in kernels else bool(x.get("admitted")),
                            "reason": kernels[x["name"]].reason if x["name"] in kernels else "",
                            "address_source": x.get("address_source", "memory")} for x in order]}
        b = s.bind_module(handle, artifact=art)
        if not b.instrumented:
            raise HbfError("a module the artifact describes as rewritten has no __hb_state (built by another "
                           "compiler than the artifact says?)", code=ErrorCode.INTERNAL,
                           kernels=sorted(k.name for k in ks)[:8])
    return len(by_module)


_API: dict[str, Callable[..., Any]] = {
    "attach": attach, "register_timing_range": register_timing_range, "unregister": unregister,
    "counters": counters, "synchronize": synchronize, "write_summary": write_summary, "detach": detach,
    "bind_all": bind_all,
}
