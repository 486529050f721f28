"""The admission artifact (design §3.5): the format that hbfcc writes and the runtime reads.

One JSON document per rewritten module, written beside the output as ``<out>.hbfcc.json`` and stored by
original-PTX SHA-256 in the artifact store (``HBFCC_ARTIFACT_DIR``, default ``<HBFCC_CACHE_DIR>/artifacts``)
so a runtime that only sees the pre-rewrite PTX (Triton keeps it in ``kernel.asm["ptx"]``) can find it.
A device link (``-rdc``) gets a link document (:data:`LINK_SCHEMA_ID`) that holds its modules. The store also keeps
the PLAIN cubin of a module with native entries (``native/<sha256>.cubin``, :func:`store_native_module`; the module
document's ``native_module``), which the runtime's HBF_NATIVE_MODULE=plain loads (:func:`read_native_module`).

A kernel is admitted only when none of its memory operations (nor of the functions it calls) was refused.
The schema is :data:`SCHEMA` (JSON Schema draft 2020-12), versioned by ``schema_version``. The compiler
side that builds a document lives in :mod:`hbfcc.artifact`; this module is the contract both sides share.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

from hbfcommon.errors import ConfigError
from hbfcommon.fsutil import atomic_write_bytes, atomic_write_json

SCHEMA_VERSION = 1
SCHEMA_ID = "hbfcc.admission"

_STATS = {
    "type": ["object", "null"],
    "properties": {k: {"type": ["integer", "null"]} for k in
                   ("registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes", "barriers",
                    "smem_bytes")},
    "required": ["registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes"],
}
_CLASS = {
    "type": "object",
    "properties": {k: {"type": "integer", "minimum": 0} for k in ("count", "rewritten", "native", "refused")},
    "required": ["count", "rewritten", "native", "refused"],
    "additionalProperties": False,
}
_FUNC = {
    "type": "object",
    "required": ["name", "kind", "kernel_index", "admitted", "not_admitted_reasons", "classes",
                 "refused", "sites", "waits", "drains", "ptxas_before", "ptxas_after"],
    "properties": {
        "name": {"type": "string"}, "kind": {"enum": ["entry", "func"]},
        "kernel_index": {"type": "integer", "minimum": 0}, "admitted": {"type": "boolean"},
        "not_admitted_reasons": {"type": "array", "items": {"type": "string"}},
        "classes": {"type": "object", "additionalProperties": _CLASS},
        "refused": {"type": "array", "items": {
            "type": "object", "required": ["line", "instruction", "class", "reason"],
            "properties": {"reason": {"type": "string", "minLength": 1}, "class": {"type": "string"},
                           "instruction": {"type": "string"}, "line": {"type": "integer"}}}},
        "sites": {"type": "integer"}, "waits": {"type": "integer"}, "drains": {"type": "integer"},
        "ptxas_before": _STATS, "ptxas_after": _STATS,
        # TMA-family instructions by class (hbfcc/passes/tma.py), the hooks emitted for them, the bulk-group window
        "tma": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "tma_hooks": {"type": "integer", "minimum": 0}, "bulk_window": {"type": "integer", "minimum": 0},
        # HBFCC_FULL_WARP=auto (hbfcc/cli.py): an entry with issue groups of more than 4 sites built both ways, the
        # registers of each, and which one the output holds; with HBFCC_PREFETCH_GROUP or HBFCC_EARLY_CLOCK at auto a
        # third way, `all` with those knobs on (``variant``, e.g. all+pg+ec; ``registers_variant``)
        "full_warp_auto": {"type": "object", "required": ["chosen", "registers_1", "registers_all"],
                           "properties": {"chosen": {"type": "string", "pattern": "^(1|all(\\+pg)?(\\+ec)?)$"},
                                          "variant": {"type": "string", "pattern": "^all(\\+pg)?(\\+ec)?$"}}},
    },
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "type": "object",
    "required": ["schema", "schema_version", "tool", "input", "helper", "ptxas", "kernels",
                 "functions", "admitted"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "schema_version": {"const": SCHEMA_VERSION},
        "tool": {"type": "object", "required": ["name", "rewriter_sha256", "helper_abi_version"]},
        "input": {"type": "object", "required": ["path", "original_sha256", "transformed_sha256",
                                                 "already_instrumented"],
                  "properties": {"original_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                                 "transformed_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}},
        "helper": {"type": ["object", "null"], "required": ["path", "sha256", "abi_version"],
                   "properties": {"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                                  "abi_version": {"type": "integer"}}},
        "ptxas": {"type": ["object", "null"], "required": ["path", "version", "argv", "returncode"],
                  "properties": {"argv": {"type": "array", "items": {"type": "string"}},
                                 "version": {"type": "string"}}},
        "passes": {"type": "array", "items": {"enum": ["timing", "flags", "mwait"]}},
        # what built the output (hbfcc-ptxas): the --version marker line (the knobs that change a build,
        # what Triton hashes into its cache key) and the sha256 of the file ptxas wrote (the cubin)
        "build": {"type": "object", "required": ["marker", "output_sha256"],
                  "properties": {"marker": {"type": "string"},
                                 "output_sha256": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"}}},
        # HBFCC_LINK=separate asked (hbfcc/seplink.py): the route that built the output, and why not separate;
        # also any relocatable build (rdc_register_cap)
        "link": {"type": "object", "required": ["requested", "mode", "fallback_reason"],
                 "properties": {"mode": {"enum": ["whole", "separate"]},
                                "fallback_reason": {"type": ["string", "null"]},
                                "caps": {"type": "object", "additionalProperties": {"type": "integer"}},
                                # HBFCC_SEPARATE_CAP: how the caps were chosen, per entry (hbfcc/seplink.py entry_caps)
                                "cap_mode": {"enum": ["plain", "body", "fixed"]},
                                "cap_decisions": {"type": "object", "additionalProperties": {
                                    "type": "object", "required": ["mode", "cap"]}},
                                "helper_object": {"type": "object", "required": ["sha256", "cached"]},
                                # a relocatable build (-c, nvcc -rdc; hbfcc/rdc.py): the helpers module-local,
                                # the caps they were compiled within
                                "rdc_register_cap": {"type": "object",
                                                     "required": ["helpers", "cap", "set_by", "entries"]}}},
        # the PLAIN cubin of the module (its original PTX, the caller's ptxas options: hbfcc-ptxas's baseline build),
        # kept in the store for the runtime's HBF_NATIVE_MODULE=plain (:func:`native_module`); null with
        # ``native_module_reason`` where it is not kept
        "native_module": {"type": ["object", "null"], "required": ["sha256", "bytes", "file"],
                          "properties": {"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                                         "bytes": {"type": "integer", "minimum": 1},
                                         "file": {"type": "string"}}},
        "native_module_reason": {"type": "string"},
        "eidola_helper": {"type": ["object", "null"], "required": ["path", "sha256"],
                          "properties": {"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}},
        "kernels": {"type": "array", "items": _FUNC},
        "functions": {"type": "array", "items": _FUNC},
        "admitted": {"type": "boolean"},
    },
}

LINK_SCHEMA_ID = SCHEMA_ID + ".link"
# file names under which an artifact travels (beside an output, in Triton's cache group)
ARTIFACT_SUFFIXES = (".hbfcc.json", ".admission.json", ".hbfadm.json")


def cache_dir() -> Path:
    """``$HBFCC_CACHE_DIR``, else ``$XDG_CACHE_HOME/hbfcc``, else ``~/.cache/hbfcc``."""
    return Path(os.environ.get("HBFCC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hbfcc"))


def validate(doc: dict) -> None:
    """Raise jsonschema.ValidationError when ``doc`` does not follow :data:`SCHEMA`."""
    import jsonschema
    jsonschema.validate(doc, SCHEMA)


def write(doc: dict, path: Path) -> None:
    atomic_write_json(path, doc, indent=1, end="\n")


def store_path(store: Path, original_sha256: str) -> Path:
    return store / f"{original_sha256}.hbfcc.json"


def store_dir() -> Path:
    """The artifact store that hbfcc-ptxas writes to and the runtime reads:
    ``$HBFCC_ARTIFACT_DIR``, else ``<cache_dir()>/artifacts``."""
    v = os.environ.get("HBFCC_ARTIFACT_DIR")
    return Path(v) if v else cache_dir() / "artifacts"


def lookup_by_ptx(original_ptx: bytes | str) -> Optional[dict]:
    """The admission artifact of a module by its ORIGINAL (pre-rewrite) PTX, e.g. Triton's
    ``kernel.asm["ptx"]``; None when hbfcc never saw that module (then it is not admitted)."""
    data = original_ptx.encode() if isinstance(original_ptx, str) else original_ptx
    p = store_path(store_dir(), hashlib.sha256(data).hexdigest())
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        return None


def output_store_path(store: Path, output_sha256: str) -> Path:
    """The store's entry for one assembled output (``build.output_sha256``: e.g. the cubin Triton caches)."""
    return store / "by-output" / f"{output_sha256}.hbfcc.json"


def lookup_by_output(binary: bytes) -> Optional[dict]:
    """The admission artifact of the build that wrote exactly these bytes (a cubin hbfcc-ptxas
    assembled); None when the store has none. Unlike :func:`lookup_by_ptx` (one entry per original
    PTX, the latest build of it), this is the record of this very binary, whatever knobs built it."""
    p = output_store_path(store_dir(), hashlib.sha256(binary).hexdigest())
    try:
        return json.loads(p.read_text())
    except (FileNotFoundError, ValueError):
        return None


def load(artifact: Any) -> dict | None:
    """An admission artifact as a dict (path, or dict); None when absent."""
    if artifact is None:
        return None
    if isinstance(artifact, Mapping):
        return dict(artifact)
    p = Path(artifact)
    try:
        return json.loads(p.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read admission artifact: {e.strerror}", path=str(p)) from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"admission artifact is not JSON: {e}", path=str(p)) from e


def address_sources(art: dict | None) -> dict[str, str]:
    """kernel name -> where its access addresses come from ("params" | "memory", hbfcc's provenance
    analysis); a kernel an artifact says nothing about is "memory" (no per-launch native selection)."""
    out: dict[str, str] = {}
    if not art:
        return out
    docs = art["modules"] if "kernels" not in art and isinstance(art.get("modules"), list) else [art]
    if "kernels" in art and isinstance(art.get("modules"), list):   # a link document: its module documents
        docs = art["modules"]
    for m in docs:
        ks = m.get("kernels", [])
        for k in (ks.values() if isinstance(ks, Mapping) else ks):
            if not isinstance(k, Mapping) or "name" not in k:
                continue
            src = k.get("address_source", "memory")
            out[k["name"]] = "params" if src == "params" and out.get(k["name"], "params") == "params" else "memory"
    return out


def native_entries(art: dict | None) -> dict[str, str]:
    """kernel name -> its native entry's name (hbfcc's HBFCC_NATIVE_ENTRY: ``native_entry`` per kernel), for the
    kernels whose every module document records one (several images, a link document's modules: all or none; a
    kernel an artifact says nothing about has none)."""
    out: dict[str, str] = {}
    none: set[str] = set()
    if not art:
        return out
    docs = art["modules"] if isinstance(art.get("modules"), list) else [art]
    for m in docs:
        ks = m.get("kernels", [])
        for k in (ks.values() if isinstance(ks, Mapping) else ks):
            if not isinstance(k, Mapping) or "name" not in k:
                continue
            ne = k.get("native_entry")
            if not isinstance(ne, str) or not ne or out.get(k["name"], ne) != ne:
                none.add(k["name"])
            else:
                out[k["name"]] = ne
    return {n: e for n, e in out.items() if n not in none}


NATIVE_SUBDIR = "native"     # the store's plain cubins (native_module), by their own sha256


def native_module_path(store: Path, sha256: str) -> Path:
    """Where the store keeps the plain cubin of a module (``native_module``): content-addressed by its sha256."""
    return store / NATIVE_SUBDIR / f"{sha256}.cubin"


def store_native_module(store: Path, cubin: bytes) -> dict:
    """Keep a module's plain cubin in the store (atomically: a reader sees no file or the whole one; one already
    there with these bytes is left as it is) and return the artifact's ``native_module`` record: its sha256, size and
    store-relative file name. Raises OSError when the store cannot be written."""
    sha = hashlib.sha256(cubin).hexdigest()
    p = native_module_path(store, sha)
    try:
        same = p.stat().st_size == len(cubin) and hashlib.sha256(p.read_bytes()).hexdigest() == sha
    except OSError:
        same = False
    if not same:
        atomic_write_bytes(p, cubin)
    return {"sha256": sha, "bytes": len(cubin), "file": p.relative_to(store).as_posix()}


def native_module(art: dict | None) -> tuple[Optional[dict], str]:
    """(the ``native_module`` record of a MODULE document, why there is none): hbfcc-ptxas's plain cubin of the
    module, for HBF_NATIVE_MODULE=plain. A link or nvcc document (several modules) has none."""
    if not art:
        return None, "no admission artifact"
    if "native_module" not in art:
        if isinstance(art.get("modules"), list):
            return None, "an nvcc or link document (several modules): no plain cubin is kept for it"
        return None, "the artifact records no native_module (built before hbfcc kept the plain cubin, or not by " \
                     "hbfcc-ptxas's eager build)"
    rec = art.get("native_module")
    if not isinstance(rec, Mapping) or not isinstance(rec.get("sha256"), str) or len(rec["sha256"]) != 64:
        return None, str(art.get("native_module_reason") or "native_module is null")
    return dict(rec), ""


def read_native_module(store: Path, rec: Mapping[str, Any]) -> bytes:
    """The plain cubin a ``native_module`` record names, read from the store and verified against its sha256 (and
    size); ConfigError naming the file when it is missing, unreadable or not those bytes."""
    p = native_module_path(store, str(rec["sha256"]))
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the plain cubin {p}: {e.strerror or e}", path=str(p)) from e
    got = hashlib.sha256(data).hexdigest()
    if got != rec["sha256"] or ("bytes" in rec and len(data) != int(rec["bytes"])):
        raise ConfigError(f"the plain cubin {p} is not the one recorded (sha256 {got[:16]}..., {len(data)} bytes; "
                          f"recorded {str(rec['sha256'])[:16]}..., {rec.get('bytes')} bytes)", path=str(p))
    return data


def kernels(art: dict | None) -> list[tuple[str, bool, list[str]]]:
    """(name, admitted, reasons) per kernel, in .entry order. Accepts a module document, a link
    document ({"kernels": [..]}), a mapping {name: {...}}, and the document hbfcc writes for an nvcc
    build ({"modules": [module documents]}: one per compiled PTX, e.g. one per -gencode target); a
    kernel named in several modules is admitted only when every one of them admits it."""
    if not art:
        return []
    if "kernels" not in art and isinstance(art.get("modules"), list):
        merged: dict[str, tuple[bool, list[str]]] = {}
        for m in art["modules"]:
            for name, adm, reasons in kernels(m):
                ok0, why0 = merged.get(name, (True, []))
                merged[name] = (ok0 and adm, why0 + [r for r in reasons if r not in why0])
        return [(n, ok, why) for n, (ok, why) in merged.items()]
    ks = art.get("kernels", [])
    items = list(ks.items()) if isinstance(ks, Mapping) else [(k.get("name"), k) for k in ks]
    out = []
    for name, k in items:
        adm = k.get("admitted")
        reasons = [str(x) for x in (k.get("reasons") or [])]
        if not reasons and k.get("reason"):   # a link document's kernel
            reasons = [str(k["reason"])]
        if not reasons:   # an hbfcc artifact: its summary reasons, then each refused operation's reason
            reasons = [str(x) for x in (k.get("not_admitted_reasons") or [])]
            for r in (k.get("refused") or [])[:8]:
                reasons.append(f"{r.get('instruction', '?').strip()} ({r.get('reason', '?')})"
                               if isinstance(r, Mapping) else str(r))
        if adm is None:  # derive from refused operations if the artifact lists them
            adm = not reasons
        out.append((str(name), bool(adm), reasons))
    return out
