"""Instrumentation at load (``HBF_TRITON_INSTRUMENT=load``, opt-in; docs/design.md §3.5 "Deferred
instrumentation"): Triton compiles with its own ptxas as if hbfsim did not exist (the compile costs x1.0 by
construction); the runtime instruments a kernel at its load in an attached session.

From the kernel's Triton cache group (its ``.ptx``, ``.cubin`` and metadata ``.json``) :func:`prepare`

1. reconstructs the ptxas command line Triton 3.6's ``make_cubin`` ran (:func:`ptxas_argv`: the arch, line info,
   ``--fmad``, ``--opt-level 0``, ``ptx_options`` from the metadata, which also records the cache-invalidating
   environment knobs of the compile; the ptxas is the one Triton picks now, ``get_ptxas(arch)``);
2. VERIFIES it: that ptxas on the kernel's PTX with those options must give Triton's cached cubin byte for byte,
   else :class:`LoadInstrumentError` naming the kernel and what differed (the kernel is then NOT admitted: never a
   guess);
3. keeps the original PTX in the artifact store and writes the pending record by the plain cubin's sha256, as
   ``HBFCC_DEFER=rewrite``'s compile does (:data:`hbfcommon.deferred.PENDING_SCHEMA`, ``mode`` = :data:`MODE`,
   the verified ``ptxas_version`` in its key), so :func:`hbfcommon.deferred.build` makes the eager hbfcc-ptxas
   build of that PTX (byte-identical to an eager compile, cached in the store by content).

A record of this mode that matches the kernel (its PTX, its cubin, the same ptxas at the same version) is a
verification done already: a warm store skips the ptxas run and reads the build back.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from hbfcommon import abi
from hbfcommon import artifact as A
from hbfcommon import deferred as DF
from hbfcommon.errors import ErrorCode, ToolchainError

MODE = "load"                       # the pending record's deferred.mode
TRITON_VERSIONS = ("3.6.",)         # the make_cubin the reconstruction mirrors
# the compile environment knobs make_cubin reads (Triton records cache-invalidating knobs in the metadata)
ENV_LINE_INFO_OFF, ENV_PTXAS_OPT_OFF = "TRITON_DISABLE_LINE_INFO", "DISABLE_PTXAS_OPT"
# every lower-case key of a Triton 3.6 CUDA kernel's metadata: its CUDAOptions fields and what compile() adds.
# Of these only target, enable_fp_fusion and ptx_options reach the ptxas command line (maxnreg is in the PTX).
# A key outside this set is an option the reconstruction does not know: refused.
KNOWN_KEYS = frozenset({
    "hash", "target", "num_warps", "num_ctas", "num_stages", "warp_size", "maxnreg", "ptx_version", "ptx_options",
    "ir_override", "enable_fp_fusion", "enable_reflect_ftz", "launch_cooperative_grid", "launch_pdl",
    "supported_fp8_dtypes", "deprecated_fp8_dot_operand_dtypes", "default_dot_input_precision",
    "allowed_dot_input_precisions", "max_num_imprecise_acc_default", "extern_libs", "debug", "backend_name",
    "sanitize_overflow", "arch", "instrumentation_mode", "triton_version", "tensordesc_meta", "shared", "tmem_size",
    "global_scratch_size", "global_scratch_align", "profile_scratch_size", "profile_scratch_align", "name"})
NEEDED_KEYS = ("target", "enable_fp_fusion", "ptx_options", "triton_version")


class LoadInstrumentError(ToolchainError):
    """A Triton kernel cannot be instrumented at its load: its cache group lacks a file, the reconstruction of
    Triton's ptxas run does not know an option or does not reproduce the cached cubin, Triton's ptxas is
    hbfcc-ptxas, or hbfcc cannot be found. ``fields['kernel']`` names the kernel."""

    code = ErrorCode.TOOLCHAIN


@dataclass(frozen=True)
class Prepared:
    """A verified pending record (by the plain cubin), the nanoseconds its verification took (0: a matching
    record of this mode was in the store already) and whether the record was written now."""

    record: dict
    verify_ns: int
    written: bool


def _error(name: str, what: str, **fields: Any) -> LoadInstrumentError:
    fields.setdefault("argv", [])
    return LoadInstrumentError(f"Triton kernel {name}: instrumentation at load (HBF_TRITON_INSTRUMENT=load): {what}",
                               kernel=name, **fields)


def triton_env_true(value: Any) -> bool:
    """A Triton boolean environment knob's value as Triton reads it (libtriton's getenv_bool: on, true, 1)."""
    return str(value).strip().lower() in ("1", "true", "on")


def ptxas_argv(name: str, meta: Mapping[str, Any]) -> list[str]:
    """The options Triton 3.6's ``make_cubin`` passed to ptxas for a kernel of this metadata, with the input and
    output as :data:`hbfcommon.deferred.PTX_TOKEN` / :data:`~hbfcommon.deferred.OUT_TOKEN` (no ptxas path).
    Raises :class:`LoadInstrumentError` for metadata it does not know."""
    version = str(meta.get("triton_version", ""))
    if not version.startswith(TRITON_VERSIONS):
        raise _error(name, f"its metadata is of Triton {version or '?'}; the reconstruction of the ptxas command "
                           f"line knows Triton {', '.join(v + 'x' for v in TRITON_VERSIONS)} only")
    missing = [k for k in NEEDED_KEYS if k not in meta]
    unknown = sorted(str(k) for k in meta if k not in KNOWN_KEYS and not str(k).isupper())
    if missing or unknown:
        raise _error(name, "the reconstruction of Triton's ptxas command line does not know "
                           + "; ".join(x for x in (f"the metadata options {unknown}" if unknown else "",
                                                   f"metadata without {missing}" if missing else "") if x),
                     unknown=unknown, missing=missing)
    target = meta["target"] if isinstance(meta["target"], Mapping) else {}
    arch = target.get("arch")
    if target.get("backend") != "cuda" or not isinstance(arch, int):
        raise _error(name, f"its target {meta['target']!r} is not a CUDA arch the reconstruction knows")
    # make_cubin, Triton 3.6 (triton/backends/nvidia/compiler.py), line for line
    if triton_env_true(meta.get(ENV_LINE_INFO_OFF, "")):
        debug_info = ["-lineinfo", "-suppress-debug-info"]
    elif triton_env_true(meta.get(ENV_PTXAS_OPT_OFF, "")):
        debug_info = ["-g"]
    else:
        debug_info = ["-lineinfo"]
    fmad = [] if meta["enable_fp_fusion"] else ["--fmad=false"]
    disable_opt = ["--opt-level", "0"] if triton_env_true(meta.get(ENV_PTXAS_OPT_OFF, "")) else []
    extra = str(meta["ptx_options"]).split(" ") if meta["ptx_options"] else []
    gpu = f"sm_{arch}{'a' if arch >= 90 else ''}"     # sm_arch_from_capability
    return [*debug_info, *fmad, "-v", *disable_opt, *extra, f"--gpu-name={gpu}", DF.PTX_TOKEN, "-o", DF.OUT_TOKEN]


def triton_ptxas(arch: int) -> str:
    """The ptxas Triton runs for ``arch`` in this process (its own ``get_ptxas``: TRITON_PTXAS_PATH, else its
    bundled one)."""
    from triton.backends.nvidia.compiler import get_ptxas  # noqa: PLC0415
    return str(get_ptxas(arch).path)


def ptxas_version(path: str) -> str:
    """``ptxas --version``'s output (one run per binary: path, size and mtime)."""
    st = os.stat(path)
    return _version(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _version(path: str, _size: int, _mtime: int) -> str:
    cp = subprocess.run([path, "--version"], capture_output=True, text=True, errors="replace", timeout=120)
    return cp.stdout


def hbfcc_path() -> str:
    """The directory the build's ``python -m hbfcc.cli`` imports hbfcc from (found, not imported)."""
    spec = importlib.util.find_spec("hbfcc")
    if spec is None or not spec.origin:
        return ""
    return str(Path(spec.origin).resolve().parent.parent)


def elf_section_at(data: bytes, offset: int) -> str:
    """The name of the ELF64 section holding byte ``offset`` ('ELF header', 'section headers', '?')."""
    try:
        if data[:4] != b"\x7fELF" or data[4] != 2:
            return "?"
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        if offset < 0x40:
            return "ELF header"
        if shoff <= offset < shoff + shnum * shentsize:
            return "section headers"
        def hdr(i: int) -> tuple[int, int, int, int]:
            name, typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
            return name, typ, off, size
        stroff = hdr(shstrndx)[2]
        for i in range(shnum):
            name, typ, off, size = hdr(i)
            if typ != 8 and off <= offset < off + size:      # not SHT_NOBITS
                end = data.index(b"\0", stroff + name)
                return data[stroff + name:end].decode(errors="replace") or f"section {i}"
    except (struct.error, ValueError, IndexError):
        return "?"
    return "no section (program headers or padding)"


def difference(want: bytes, got: bytes) -> str:
    """What differs between Triton's cached cubin and the reconstruction's, in words."""
    n = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    return (f"Triton's cached cubin ({len(want)} B, sha256 {hashlib.sha256(want).hexdigest()[:12]}) and the "
            f"reconstruction's ({len(got)} B, sha256 {hashlib.sha256(got).hexdigest()[:12]}) first differ at byte "
            f"{n} (in Triton's: {elf_section_at(want, n)})")


def verify(name: str, ptx: bytes, cubin: bytes, ptxas: str, argv: list[str]) -> int:
    """Run ``ptxas`` with the reconstructed options on the kernel's PTX; the nanoseconds it took. Raises
    :class:`LoadInstrumentError` unless the output is Triton's cubin byte for byte."""
    t0 = time.monotonic_ns()
    with tempfile.TemporaryDirectory(prefix="hbf-triton-load.") as d:
        inp, out = os.path.join(d, f"{name}.ptx"), os.path.join(d, f"{name}.cubin")
        Path(inp).write_bytes(ptx)
        run = [ptxas] + [a.replace(DF.PTX_TOKEN, inp).replace(DF.OUT_TOKEN, out) for a in argv]
        try:
            cp = subprocess.run(run, capture_output=True, text=True, errors="replace")
        except OSError as e:
            raise _error(name, f"cannot run Triton's ptxas {ptxas}: {e}", argv=run) from e
        if cp.returncode != 0 or not os.path.isfile(out):
            raise _error(name, f"the reconstructed ptxas run failed (rc {cp.returncode}) on the kernel's PTX",
                         argv=run, returncode=cp.returncode, stderr=cp.stderr[-4000:])
        got = Path(out).read_bytes()
    if got != cubin:
        raise _error(name, "the reconstructed ptxas command line does not reproduce Triton's cubin: "
                           f"{difference(cubin, got)}; the kernel is not instrumented (a cubin not made by this "
                           f"ptxas from this PTX, or an option the reconstruction does not see)",
                     argv=run, want_sha256=hashlib.sha256(cubin).hexdigest(), got_sha256=hashlib.sha256(got).hexdigest())
    return time.monotonic_ns() - t0


def prepare(name: str, ptx: Optional[bytes], cubin: Optional[bytes], meta_raw: Optional[bytes],
            store: Path | None = None) -> Prepared:
    """The verified pending record of a plain Triton kernel (module docstring); raises :class:`LoadInstrumentError`
    for anything that cannot be verified."""
    store = store or A.store_dir()
    lacks = [s for s, b in ((".ptx", ptx), (".cubin", cubin), (".json", meta_raw)) if b is None]
    if lacks:
        raise _error(name, f"its Triton cache group lacks its {', '.join(lacks)} (a cache written with "
                           f"TRITON_STORE_BINARY_ONLY, or files removed since)")
    assert ptx is not None and cubin is not None and meta_raw is not None
    if abi.STATE_GLOBAL.encode() in cubin:
        raise _error(name, "its cached cubin is instrumented already (built by hbfcc-ptxas) but the artifact store "
                           f"{store} has no record of it")
    try:
        meta = json.loads(meta_raw)
    except ValueError as e:
        raise _error(name, f"its metadata JSON does not parse: {e}") from None
    argv = ptxas_argv(name, meta)
    arch = int(meta["target"]["arch"])
    try:
        ptxas = triton_ptxas(arch)
        version = ptxas_version(ptxas)
    except (ImportError, AttributeError, RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        raise _error(name, f"Triton's ptxas for sm_{arch} cannot be found or run: {e}") from None
    marker = next((ln.strip() for ln in version.splitlines() if ln.startswith("hbfcc ")), None)
    if marker:
        raise _error(name, f"Triton's ptxas {ptxas} is hbfcc-ptxas ('{marker}'): instrumentation at load needs "
                           f"Triton's own ptxas (unset TRITON_PTXAS_PATH, or use HBFCC_DEFER instead)")
    where = hbfcc_path()
    if not where:
        raise _error(name, "hbfcc is not importable in this interpreter: the instrumented build cannot be made")
    sha, plain_sha = hashlib.sha256(ptx).hexdigest(), hashlib.sha256(cubin).hexdigest()
    old = _record(store, plain_sha)
    r = DF.recipe(old) or {}
    verify_ns = 0
    if not (r.get("mode") == MODE and r.get("original_sha256") == sha and r.get("argv") == argv
            and (r.get("env") or {}).get("HBFCC_REAL_PTXAS") == ptxas and r.get("ptxas_version") == version):
        verify_ns = verify(name, ptx, cubin, ptxas, argv)
    rec = DF.pending_record(mode=MODE, entries=[name], original_sha256=sha, ptx_name=f"{name}.ptx", argv=argv,
                            env=DF.builder_env(os.environ, ptxas),
                            ptxas={"path": ptxas, "version": version, "argv": [ptxas] + argv, "source": "triton"},
                            plain_sha256=plain_sha, pythonpath=where, ptxas_version=version)
    written = old != rec
    try:
        DF.keep_original(store, ptx)
        if written:
            A.write(rec, A.output_store_path(store, plain_sha))
    except OSError as e:
        raise _error(name, f"the artifact store {store} cannot keep its PTX and record: {e}") from None
    return Prepared(rec, verify_ns, written)


def group_file(group: Mapping[str, Any], suffix: str) -> tuple[bytes | None, str | None]:
    """(bytes, path) of the file of a Triton cache group (``kernel.metadata_group``) whose name ends in ``suffix``;
    (None, path) when it cannot be read, (None, None) when the group has none."""
    for k, v in group.items():
        if str(k).endswith(suffix):
            try:
                return Path(v).read_bytes(), str(v)
            except OSError:
                return None, str(v)
    return None, None


def prepare_group(name: str, group: Mapping[str, Any] | None, store: Path | None = None) -> Prepared:
    """:func:`prepare` for a kernel's Triton cache group (its ``.ptx``, ``.cubin`` and metadata ``.json``)."""
    g = dict(group or {})
    return prepare(name, group_file(g, ".ptx")[0], group_file(g, ".cubin")[0], group_file(g, ".json")[0], store)


def is_load_record(rec: Mapping[str, Any] | None) -> bool:
    """A pending record this module wrote (the runtime's own, for a plain Triton kernel)."""
    return DF.is_pending(rec) and (DF.recipe(rec) or {}).get("mode") == MODE


def _record(store: Path, plain_sha: str) -> Optional[dict]:
    try:
        return json.loads(A.output_store_path(store, plain_sha).read_text())
    except (OSError, ValueError):
        return None
