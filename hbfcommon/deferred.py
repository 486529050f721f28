"""Deferred instrumentation (``HBFCC_DEFER=1``, docs/design.md "Deferred instrumentation"): the contract
between hbfcc-ptxas, which rewrites a module at compile time but assembles only the ORIGINAL PTX, and
whoever assembles the rewrite later (the runtime at a Triton kernel's load in an attached session,
``hbfcc prebuild``).

hbfcc-ptxas stores, in the artifact store (:func:`hbfcommon.artifact.store_dir`):

* ``deferred/<sha256 of the rewritten PTX>.ptx``: the rewritten module, exactly the text the eager build
  assembles (after every stage decided before that build);
* the admission record (by original PTX, by rewritten PTX and by the plain cubin it wrote,
  ``by-output/``), with ``deferred`` = the recipe (:data:`RECIPE_KEYS`): the eager build's ptxas argv with
  the input and output replaced by :data:`PTX_TOKEN` / :data:`OUT_TOKEN`, the rewritten PTX's sha256 and
  file name, the sha256 of the plain cubin, and ``key``, the name of the assembled cubin
  (``deferred/built/<key>.cubin``; :func:`recipe_key`: the PTX, the argv and the ptxas version text).

:func:`build` assembles a recipe once (the result is cached by ``key``; a later call reads it back) and
raises :class:`DeferredBuildError` (code TOOLCHAIN, naming the kernels) for anything missing or failing:
a deferred kernel is never run unmodeled in silence. The build runs nothing but the recorded ptxas on the
stored text with the recorded options, so its cubin is byte-identical to the one hbfcc-ptxas builds
eagerly for the same PTX and knobs (tests/hbfcc/test_triton_defer.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from hbfcommon import artifact as A
from hbfcommon.errors import ErrorCode, ToolchainError
from hbfcommon.fsutil import atomic_write_bytes, atomic_write_text

PTX_TOKEN = "@HBFCC_PTX@"      # in a recipe's argv: the rewritten PTX file
OUT_TOKEN = "@HBFCC_OUT@"      # in a recipe's argv: the output cubin
RECIPE_KEYS = ("ptx_sha256", "ptx_name", "argv", "plain_output_sha256", "key")
SUBDIR = "deferred"
# what a deferred compile adds to hbfcc-ptxas's --version line (Triton's cache key), per HBFCC_DEFER value
MARKER_WORDS = {"1": "defer on", "rewrite": "defer rewrite"}
# HBFCC_DEFER=rewrite: the compile keeps the ORIGINAL PTX only; its record (by the plain cubin) is this document
PENDING_SCHEMA = "hbfcc.deferred.pending"
# HBFCC_DEFER=1's recipe for a module whose build decides from ptxas's output (HBFCC_FULL_WARP=auto): the pending
# record's keys in an admission record (:func:`eager_recipe`)
EAGER_MODE = "eager"
PENDING_KEYS = ("original_sha256", "ptx_name", "argv", "env", "builder", "plain_output_sha256", "key")
# hbfcc knobs that say where files go or how a compile reports, not what is built: not in a pending record's env
# a pending record's builder after the interpreter: hbfcc-ptxas's full path (eager)
BUILDER_ARGS = ("-m", "hbfcc.cli", "ptxas")
NOT_FOR_THE_BUILD = frozenset({"HBFCC_DEFER", "HBFCC_ARTIFACT_DIR", "HBFCC_SIDECAR", "HBFCC_LOG", "HBFCC_DUMP_DIR",
                               "HBFCC_CACHE_DIR", "HBFCC_PTXAS_THREADS"})


def build_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The hbfcc knobs of an environment that a deferred rewrite must see again (HBFCC_DEFER=rewrite)."""
    return {k: v for k, v in environ.items() if k.startswith("HBFCC_") and k not in NOT_FOR_THE_BUILD}


def builder_env(environ: Mapping[str, str], real_ptxas: str) -> dict[str, str]:
    """A builder's environment for a kept ORIGINAL PTX: the compile's hbfcc knobs (:func:`build_env`) and the ptxas
    it ran (``HBFCC_REAL_PTXAS``, whatever chose it)."""
    env = build_env(environ)
    env["HBFCC_REAL_PTXAS"] = real_ptxas
    return env


def keep_original(store: Path, data: bytes) -> str:
    """Keep an ORIGINAL PTX in the store for a later rewrite and build (written once per content); returns its
    sha256. Raises OSError when the store cannot keep it."""
    sha = hashlib.sha256(data).hexdigest()
    p = original_path(store, sha)
    if not p.is_file():
        atomic_write_bytes(p, data, fsync=False)
    return sha


def knob_mismatch(rec: Mapping[str, Any], environ: Mapping[str, str]) -> Optional[str]:
    """HBFCC_DEFER=rewrite: how the knobs of a pending record differ from those of ``environ`` (None: they do not;
    the ptxas is the record's own). The plain cubin is the same whatever the knobs, so one store keeps one pending
    record per cubin: the last compile's."""
    was = {k: v for k, v in ((recipe(rec) or {}).get("env") or {}).items() if k != "HBFCC_REAL_PTXAS"}
    now = {k: v for k, v in build_env(environ).items() if k != "HBFCC_REAL_PTXAS"}
    if was == now:
        return None
    diff = sorted(set(was.items()) ^ set(now.items()))
    return f"its pending record was compiled with other hbfcc knobs than this process has ({diff})"


class DeferredBuildError(ToolchainError):
    """The deferred (instrumented) build of a module cannot be made: its stored PTX is missing or damaged,
    its ptxas is gone, or ptxas failed. ``fields['kernels']`` names the module's kernels."""

    code = ErrorCode.TOOLCHAIN


@dataclass(frozen=True)
class Built:
    """An assembled deferred build: the instrumented cubin, where it is cached, whether it was there
    already, the nanoseconds this call spent building it (0 when cached), and the admission record of the
    cubin (HBFCC_DEFER=rewrite: the one its build wrote; else the record the build came from)."""

    cubin: bytes
    path: Path
    cached: bool
    build_ns: int
    record: Optional[dict] = None


def ptx_path(store: Path, ptx_sha256: str) -> Path:
    return store / SUBDIR / f"{ptx_sha256}.ptx"


def original_path(store: Path, original_sha256: str) -> Path:
    """HBFCC_DEFER=rewrite: where the compile keeps the ORIGINAL PTX."""
    return store / SUBDIR / "original" / f"{original_sha256}.ptx"


def pending_key(original_sha256: str, argv: list[str], env: Mapping[str, str], builder: list[str],
                ptxas_version: Optional[str] = None) -> str:
    """HBFCC_DEFER=rewrite: the built cubin's name (the PTX, the ptxas options, the knobs, what rewrites; for the
    runtime's HBF_TRITON_INSTRUMENT=load records also the ``ptxas --version`` text of the ptxas it verified)."""
    parts: list[Any] = [original_sha256, list(argv), sorted(env.items()), list(builder)]
    if ptxas_version is not None:
        parts.append(ptxas_version)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def builder() -> list[str]:
    """What a pending record's build runs (followed by the ptxas options): this interpreter running hbfcc-ptxas's
    full path (``python -m hbfcc.cli ptxas``), eager."""
    return [sys.executable, *BUILDER_ARGS]


def pending_record(*, mode: str, entries: list[str], original_sha256: str, ptx_name: str, argv: list[str],
                   env: Mapping[str, str], ptxas: Mapping[str, Any], plain_sha256: str, pythonpath: str,
                   input_path: Optional[str] = None, ptxas_version: Optional[str] = None) -> dict:
    """The pending document (:data:`PENDING_SCHEMA`) of a plain cubin whose rewrite and build come later: what
    HBFCC_DEFER=rewrite's compile (mode ``rewrite``) and the runtime's HBF_TRITON_INSTRUMENT=load (mode ``load``,
    with the verified ``ptxas_version`` in its key) write by the plain cubin's sha256. ``argv``: the ptxas options
    with :data:`PTX_TOKEN` / :data:`OUT_TOKEN`; ``env``: the build's hbfcc knobs; ``ptxas``: what ran (path,
    source, argv, version)."""
    b = builder()
    deferred: dict[str, Any] = {"mode": mode, "original_sha256": original_sha256, "ptx_name": ptx_name,
                                "argv": list(argv), "env": dict(env), "builder": b, "plain_output_sha256": plain_sha256,
                                "pythonpath": pythonpath}
    if ptxas_version is not None:
        deferred["ptxas_version"] = ptxas_version
    deferred["key"] = pending_key(original_sha256, argv, env, b, ptxas_version)
    inp: dict[str, Any] = {"original_sha256": original_sha256}
    if input_path is not None:
        inp = {"path": input_path, **inp}
    return {"schema": PENDING_SCHEMA, "entries": list(entries), "input": inp, "ptxas": dict(ptxas),
            "build": {"output_sha256": plain_sha256}, "deferred": deferred}


def eager_recipe(*, original_sha256: str, ptx_name: str, argv: list[str], env: Mapping[str, str], plain_sha256: str,
                 pythonpath: str, why: str) -> dict:
    """HBFCC_DEFER=1's recipe (mode :data:`EAGER_MODE`) for a module whose instrumented build decides from ptxas's
    own output (HBFCC_FULL_WARP=auto): its admission record is written at compile time as for any deferred module,
    but what is kept is the ORIGINAL PTX and its build runs the builder (hbfcc-ptxas, eager) on it with the
    recorded options and knobs, as a pending record's does (:func:`_build_pending`)."""
    b = builder()
    return {"mode": EAGER_MODE, "why": why, "original_sha256": original_sha256, "ptx_name": ptx_name,
            "argv": list(argv), "env": dict(env), "builder": b, "plain_output_sha256": plain_sha256,
            "pythonpath": pythonpath, "key": pending_key(original_sha256, argv, env, b)}


def cubin_path(store: Path, key: str) -> Path:
    return store / SUBDIR / "built" / f"{key}.cubin"


def recipe_key(ptx_sha256: str, argv: list[str], ptxas_version: str) -> str:
    """The assembled cubin's name: what it is built from (the PTX, the ptxas options, which ptxas)."""
    return hashlib.sha256(json.dumps([ptx_sha256, list(argv), ptxas_version]).encode()).hexdigest()


def store_ptx(store: Path, text: str) -> str:
    """Keep a rewritten module for a later build; returns its sha256 (the name it is stored under)."""
    data = text.encode()
    sha = hashlib.sha256(data).hexdigest()
    p = ptx_path(store, sha)
    if not p.is_file():
        atomic_write_text(p, text, fsync=False)
    return sha


def recipe(rec: Mapping[str, Any] | None) -> Optional[dict]:
    """The deferred-build recipe of a record (an admission record of HBFCC_DEFER=1, or the pending document
    of HBFCC_DEFER=rewrite), None when the record is of an eager build."""
    d = (rec or {}).get("deferred")
    return dict(d) if isinstance(d, Mapping) else None


def is_pending(rec: Mapping[str, Any] | None) -> bool:
    """HBFCC_DEFER=rewrite's document: no rewrite (no admission) yet."""
    return (rec or {}).get("schema") == PENDING_SCHEMA


def kernel_names(rec: Mapping[str, Any]) -> list[str]:
    names = [str(k.get("name")) for k in rec.get("kernels", []) if isinstance(k, Mapping)]
    return names or [str(n) for n in rec.get("entries", [])]


def _error(rec: Mapping[str, Any], what: str, **fields: Any) -> DeferredBuildError:
    names = kernel_names(rec)
    fields.setdefault("argv", [])
    return DeferredBuildError(f"deferred instrumented build of {', '.join(names) or 'a module'}: {what}",
                              kernels=names, **fields)


def built_path(rec: Mapping[str, Any], store: Path | None = None) -> Optional[Path]:
    """Where the record's deferred build is (or will be) cached; None for an eager record."""
    r = recipe(rec)
    return None if r is None else cubin_path(store or A.store_dir(), str(r.get("key")))


def build(rec: Mapping[str, Any], *, store: Path | None = None, force: bool = False) -> Built:
    """Assemble the deferred build a record describes (once: a cached result is read back unless ``force``).
    Raises :class:`DeferredBuildError` when that cannot be done; never returns a plain cubin."""
    r = recipe(rec)
    if r is None:
        raise _error(rec, "the record is not of a deferred build (no 'deferred' recipe)")
    if is_pending(rec) or r.get("mode") == EAGER_MODE:
        return _build_pending(rec, r, store or A.store_dir(), force)
    missing = [k for k in RECIPE_KEYS if k not in r]
    if missing:
        raise _error(rec, f"the recipe lacks {', '.join(missing)}")
    store = store or A.store_dir()
    argv = [str(a) for a in r["argv"]]
    version = str((rec.get("ptxas") or {}).get("version", ""))
    key = recipe_key(str(r["ptx_sha256"]), argv, version)
    if key != r["key"]:
        raise _error(rec, f"the recipe's key {str(r['key'])[:12]} is not its content's ({key[:12]}): a damaged record")
    out = cubin_path(store, key)
    data = b"" if force else _cached(out)
    if data:
        return Built(data, out, True, 0, dict(rec))
    text = _source(rec, ptx_path(store, str(r["ptx_sha256"])), str(r["ptx_sha256"]), "rewritten PTX")
    if not argv or not os.path.isfile(argv[0]):
        raise _error(rec, f"the ptxas it was compiled with ({argv[0] if argv else '?'}) is gone")
    t0 = time.monotonic_ns()
    with tempfile.TemporaryDirectory(prefix="hbfcc-deferred.") as d:
        inp = os.path.join(d, str(r["ptx_name"]) or "module.ptx")
        Path(inp).write_bytes(text)
        tmp_out = os.path.join(d, "out.cubin")
        run = [a.replace(PTX_TOKEN, inp).replace(OUT_TOKEN, tmp_out) for a in argv]
        try:
            cp = subprocess.run(run, capture_output=True, text=True, errors="replace")
        except OSError as e:
            raise _error(rec, f"cannot run {run[0]}: {e}", argv=run) from e
        if cp.returncode != 0 or not os.path.isfile(tmp_out):
            keep = os.path.join(tempfile.gettempdir(), f"hbfcc-failed-{str(r['ptx_sha256'])[:12]}.ptx")
            shutil.copyfile(inp, keep)
            run = [keep if a == inp else a for a in run]
            raise DeferredBuildError(f"deferred instrumented build of {', '.join(kernel_names(rec)) or 'a module'}: "
                                     f"ptxas failed on the rewritten PTX (kept at {keep})", argv=run,
                                     returncode=cp.returncode, stderr=cp.stderr, kernels=kernel_names(rec))
        data = Path(tmp_out).read_bytes()
    ns = time.monotonic_ns() - t0
    try:
        atomic_write_bytes(out, data, fsync=False)
    except OSError:       # an unwritable store only costs the next process this build again
        pass
    return Built(data, out, False, ns, dict(rec))


def _build_pending(rec: Mapping[str, Any], r: Mapping[str, Any], store: Path, force: bool) -> Built:
    """HBFCC_DEFER=rewrite (and HBFCC_DEFER=1's :data:`EAGER_MODE` recipes): run the recorded builder (hbfcc-ptxas,
    eager) on the kept original PTX with the recorded options and knobs; the store then holds the admission record
    of the cubin it wrote."""
    missing = [k for k in PENDING_KEYS if k not in r]
    if missing:
        raise _error(rec, f"the pending record lacks {', '.join(missing)}")
    argv, env, builder = [str(a) for a in r["argv"]], {str(k): str(v) for k, v in r["env"].items()}, \
        [str(a) for a in r["builder"]]
    version = r.get("ptxas_version")
    key = pending_key(str(r["original_sha256"]), argv, env, builder, None if version is None else str(version))
    if key != r["key"]:
        raise _error(rec, f"the record's key {str(r['key'])[:12]} is not its content's ({key[:12]}): a damaged record")
    out = cubin_path(store, key)
    data = b"" if force else _cached(out)
    built_rec = _output_record(store, data) if data else None
    if built_rec is not None:
        return Built(data, out, True, 0, built_rec)
    text = _source(rec, original_path(store, str(r["original_sha256"])), str(r["original_sha256"]), "original PTX")
    t0 = time.monotonic_ns()
    with tempfile.TemporaryDirectory(prefix="hbfcc-deferred.") as d:
        inp = os.path.join(d, str(r["ptx_name"]) or "module.ptx")
        Path(inp).write_bytes(text)
        tmp_out = os.path.join(d, "out.cubin")
        run = builder + [a.replace(PTX_TOKEN, inp).replace(OUT_TOKEN, tmp_out) for a in argv]
        benv = {k: v for k, v in os.environ.items() if not k.startswith("HBFCC_")}
        benv.update(env)
        benv.update(HBFCC_ARTIFACT_DIR=str(store), HBFCC_SIDECAR="0", HBFCC_DEFER="0")
        if r.get("pythonpath"):
            benv["PYTHONPATH"] = os.pathsep.join([str(r["pythonpath"])] + [p for p in [benv.get("PYTHONPATH")] if p])
        try:
            cp = subprocess.run(run, capture_output=True, text=True, errors="replace", env=benv)
        except OSError as e:
            raise _error(rec, f"cannot run {run[0]}: {e}", argv=run) from e
        if cp.returncode != 0 or not os.path.isfile(tmp_out):
            raise DeferredBuildError(f"deferred rewrite and build of {', '.join(kernel_names(rec)) or 'a module'}: "
                                     f"hbfcc-ptxas failed", argv=run, returncode=cp.returncode, stderr=cp.stderr,
                                     kernels=kernel_names(rec))
        data = Path(tmp_out).read_bytes()
    ns = time.monotonic_ns() - t0
    built_rec = _output_record(store, data)
    if built_rec is None:
        raise _error(rec, f"hbfcc-ptxas built it but wrote no record of it to the artifact store {store}", argv=run)
    try:
        atomic_write_bytes(out, data, fsync=False)
    except OSError:
        pass
    return Built(data, out, False, ns, built_rec)


def _cached(out: Path) -> bytes:
    """A cached build (an ELF), else b""."""
    try:
        data = out.read_bytes()
    except FileNotFoundError:
        return b""
    return data if data[:4] == b"\x7fELF" else b""


def _source(rec: Mapping[str, Any], src: Path, sha: str, what: str) -> bytes:
    """The stored text a deferred build starts from, checked against its recorded sha256."""
    try:
        text = src.read_bytes()
    except FileNotFoundError:
        raise _error(rec, f"its {what} {src} is gone from the artifact store (a store emptied or cleaned since the "
                          f"compile): remove the kernel's Triton cache entry and compile again", path=str(src)) from None
    if hashlib.sha256(text).hexdigest() != sha:
        raise _error(rec, f"its {what} {src} does not have the recorded sha256 (damaged): remove it and the "
                          f"kernel's Triton cache entry and compile again", path=str(src))
    return text


def tokenized(args: list[str], in_path: str, out_path: str) -> list[str]:
    """A ptxas command line with its input and output replaced by :data:`PTX_TOKEN` / :data:`OUT_TOKEN`."""
    out = []
    for x in args:
        if x == in_path:
            x = PTX_TOKEN
        elif x == out_path:
            x = OUT_TOKEN
        elif x == "--output-file=" + out_path:
            x = "--output-file=" + OUT_TOKEN
        out.append(x)
    return out


def _output_record(store: Path, cubin: bytes) -> Optional[dict]:
    try:
        return json.loads(A.output_store_path(store, hashlib.sha256(cubin).hexdigest()).read_text())
    except (OSError, ValueError):
        return None


def records(store: Path | None = None) -> list[dict]:
    """Every deferred record in the store (its ``by-output`` entries: one per plain cubin hbfcc-ptxas wrote)."""
    store = store or A.store_dir()
    out = []
    for p in sorted((store / "by-output").glob("*.hbfcc.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if recipe(rec) is not None:
            out.append(rec)
    return out


def pending(store: Path | None = None) -> list[dict]:
    """The deferred records whose build is not cached yet."""
    store = store or A.store_dir()
    return [r for r in records(store) if not cubin_path(store, str(recipe(r).get("key"))).is_file()]


def is_deferred_marker(marker: str | None) -> bool:
    return bool(marker) and any(w in str(marker) for w in MARKER_WORDS.values())
