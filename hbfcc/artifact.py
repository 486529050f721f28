"""The admission artifact (DESIGN.md §3.5): one JSON document per rewritten module, written beside
the output as ``<out>.hbfcc.json`` and stored by original-PTX SHA-256 in the artifact store
(``HBFCC_ARTIFACT_DIR``, default ``~/.cache/hbfcc/artifacts``) so a runtime that only sees the
pre-rewrite PTX (Triton keeps it in ``kernel.asm["ptx"]``) can find it.

A kernel is admitted only when none of its memory operations (nor of the functions it calls) was
refused. The schema is :data:`SCHEMA` (JSON Schema draft 2020-12), versioned by ``schema_version``.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Optional

from hbfcommon.fsutil import atomic_write_json

from . import helpers as H
from . import knobs
from .toolchain import PtxasStats, rewriter_sha

SCHEMA_VERSION = 1
SCHEMA_ID = "hbfcc.admission"

_STATS = {
    "type": ["object", "null"],
    "properties": {k: {"type": ["integer", "null"]} for k in
                   ("registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes", "barriers")},
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
        "eidola_helper": {"type": ["object", "null"], "required": ["path", "sha256"],
                          "properties": {"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}},
        "kernels": {"type": "array", "items": _FUNC},
        "functions": {"type": "array", "items": _FUNC},
        "admitted": {"type": "boolean"},
    },
}


def build(*, path: str, result, ptxas: Optional[dict], before: Optional[PtxasStats],
          after: Optional[PtxasStats]) -> dict:
    """The artifact for one module. ``result`` is a :class:`hbfcc.rewrite.RewriteResult`."""
    timing = result.meta.get("timing", {"functions": [], "kernels": []})
    kernels, funcs = [], []
    for f in timing["functions"]:
        f = dict(f)
        b = before.functions.get(f["name"]) if before else None
        a = after.functions.get(f["name"]) if after else None
        f["ptxas_before"] = b.to_dict() if b else None
        f["ptxas_after"] = a.to_dict() if a else None
        if b and a and b.registers is not None and a.registers is not None:
            f["ptxas_delta"] = {"registers": a.registers - b.registers,
                                "stack_bytes": (a.stack_bytes or 0) - (b.stack_bytes or 0),
                                "spill_store_bytes": (a.spill_stores or 0) - (b.spill_stores or 0),
                                "spill_load_bytes": (a.spill_loads or 0) - (b.spill_loads or 0)}
        og = result.meta.get("occupancy_guard", {}).get(f["name"])
        if og is not None:
            f["occupancy_guard"] = og
        (kernels if f["kind"] == "entry" else funcs).append(f)
    helper = result.helper
    doc = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "created_unix_s": int(time.time()),
        "tool": {"name": "hbfcc", "rewriter_sha256": rewriter_sha(), "helper_abi_version": H.abi_version()},
        "input": {"path": path, "original_sha256": result.original_sha256,
                  "transformed_sha256": result.transformed_sha256,
                  "already_instrumented": bool(result.already_instrumented)},
        "helper": None if helper is None else {
            "path": helper.path, "sha256": helper.sha256, "abi_version": helper.abi_version,
            "ptx_version": f"{helper.version[0]}.{helper.version[1]}"},
        "ptxas": ptxas,
        # pass selection (HBFCC_PASSES) and, when the flags pass ran, the eidola helper linked
        "passes": list(result.meta.get("passes", ["timing"])),
        "eidola_helper": result.meta.get("eidola_helper"),
        "flags": _flags_summary(result.meta.get("flags")),
        "kernels": kernels,
        "functions": funcs,
        "admitted": all(k["admitted"] for k in kernels) and not result.already_instrumented,
        "rewrite_seconds": {k: round(v, 6) for k, v in result.timings_s.items()},
    }
    return doc


def _flags_summary(fl: Optional[dict]) -> Optional[dict]:
    if fl is None:
        return None
    return {k: fl[k] for k in ("rewritten_loads", "spin_loops_parked", "mwait", "count_nonflag", "nonflag_sites",
                               "entries", "extern", "calls", "sites") if k in fl}


def validate(doc: dict) -> None:
    """Raise jsonschema.ValidationError when ``doc`` does not follow :data:`SCHEMA`."""
    import jsonschema
    jsonschema.validate(doc, SCHEMA)


def write(doc: dict, path: Path) -> None:
    atomic_write_json(path, doc, indent=1, end="\n")


def store_path(store: Path, original_sha256: str) -> Path:
    return store / f"{original_sha256}.hbfcc.json"


def store_dir() -> Path:
    """The artifact store (HBFCC_ARTIFACT_DIR, else <cache>/artifacts) that hbfcc-ptxas writes to."""
    k = knobs.load()
    return k.artifact_dir if k.artifact_dir is not None else k.cache_dir / "artifacts"


def lookup_by_ptx(original_ptx: bytes | str) -> Optional[dict]:
    """The admission artifact of a module by its ORIGINAL (pre-rewrite) PTX, e.g. Triton's
    ``kernel.asm["ptx"]``; None when hbfcc never saw that module (then it is not admitted)."""
    data = original_ptx.encode() if isinstance(original_ptx, str) else original_ptx
    p = store_path(store_dir(), hashlib.sha256(data).hexdigest())
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        return None


LINK_SCHEMA_ID = SCHEMA_ID + ".link"


def resolve_link(module_docs: list[dict], *, output: str, argv: list[str]) -> dict:
    """Admission across the modules of one device link (``-rdc``): a kernel that calls functions
    defined in *other* modules is admitted when every function it reaches, in any module of the
    link, was rewritten by hbfcc with nothing refused (greatest fixpoint, recursion allowed).
    Functions defined nowhere in the link keep the kernel not admitted."""
    from .passes.timing import SYSTEM_CALLS

    funcs: dict[str, dict] = {}
    for m in module_docs:
        for f in m.get("kernels", []) + m.get("functions", []):
            prev = funcs.get(f["name"])
            base_ok = (not f["refused"] and "<indirect>" not in f.get("calls", [])
                       and all(r.startswith("calls ") for r in f["not_admitted_reasons"]))
            if prev is None:
                funcs[f["name"]] = {"kind": f["kind"], "calls": set(f.get("calls", [])), "ok": base_ok,
                                    "reasons": list(f["not_admitted_reasons"])}
            else:
                prev["calls"] |= set(f.get("calls", []))
                prev["ok"] = prev["ok"] and base_ok
    adm = {n: v["ok"] for n, v in funcs.items()}
    why: dict[str, str] = {n: "; ".join(v["reasons"]) for n, v in funcs.items() if not v["ok"]}
    changed = True
    while changed:
        changed = False
        for n, v in funcs.items():
            if not adm[n]:
                continue
            for c in v["calls"]:
                if c in SYSTEM_CALLS:
                    continue
                if c not in adm:
                    adm[n], why[n] = False, f"calls {c}, defined in no module of this link"
                elif not adm[c]:
                    adm[n], why[n] = False, f"calls {c}, which is not admitted"
                else:
                    continue
                changed = True
                break
    kernels = [{"name": n, "admitted": adm[n], "reason": why.get(n, "")}
               for n, v in sorted(funcs.items()) if v["kind"] == "entry"]
    return {"schema": LINK_SCHEMA_ID, "schema_version": SCHEMA_VERSION, "output": output, "argv": argv,
            "admitted": all(k["admitted"] for k in kernels), "kernels": kernels, "modules": module_docs}
