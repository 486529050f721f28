"""Building admission artifacts (design §3.5) in the compiler: one document per rewritten module
(:func:`build`) and the admission of a device link (:func:`resolve_link`). The format itself, the store
and the reading side are the contract in :mod:`hbfcommon.artifact` (re-exported here).
"""
from __future__ import annotations

import time
from typing import Optional

from hbfcommon.abi import HBF_HELPER_ABI_VERSION
from hbfcommon.artifact import (LINK_SCHEMA_ID, SCHEMA, SCHEMA_ID, SCHEMA_VERSION, lookup_by_ptx,  # noqa: F401
                                store_dir, store_path, validate, write)

from .admission import INDIRECT, admit
from .toolchain import PtxasStats, rewriter_sha


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
        for stage in ("occupancy_guard", "launch_bound"):
            dec = result.meta.get(stage, {}).get(f["name"])
            if dec is not None:
                f[stage] = dec
        (kernels if f["kind"] == "entry" else funcs).append(f)
    helper = result.helper
    doc = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "created_unix_s": int(time.time()),
        "tool": {"name": "hbfcc", "rewriter_sha256": rewriter_sha(), "helper_abi_version": HBF_HELPER_ABI_VERSION},
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


def resolve_link(module_docs: list[dict], *, output: str, argv: list[str]) -> dict:
    """Admission across the modules of one device link (``-rdc``): a kernel that calls functions
    defined in *other* modules is admitted when every function it reaches, in any module of the
    link, was rewritten by hbfcc with nothing refused (:func:`hbfcc.admission.admit`, recursion
    allowed). Functions defined nowhere in the link keep the kernel not admitted."""
    funcs: dict[str, dict] = {}
    for m in module_docs:
        for f in m.get("kernels", []) + m.get("functions", []):
            prev = funcs.get(f["name"])
            base_ok = (not f["refused"] and INDIRECT not in f.get("calls", [])
                       and all(r.startswith("calls ") for r in f["not_admitted_reasons"]))
            if prev is None:
                funcs[f["name"]] = {"kind": f["kind"], "calls": list(f.get("calls", [])), "ok": base_ok,
                                    "reasons": list(f["not_admitted_reasons"])}
            else:
                prev["calls"] = list(dict.fromkeys(prev["calls"] + list(f.get("calls", []))))
                prev["ok"] = prev["ok"] and base_ok
    why: dict[str, str] = {n: "; ".join(v["reasons"]) for n, v in funcs.items() if not v["ok"]}
    why.update(admit({n: v["ok"] for n, v in funcs.items()}, {n: v["calls"] for n, v in funcs.items()},
                     lambda c: f"calls {c}, defined in no module of this link"))
    kernels = [{"name": n, "admitted": n not in why, "reason": why.get(n, "")}
               for n, v in sorted(funcs.items()) if v["kind"] == "entry"]
    return {"schema": LINK_SCHEMA_ID, "schema_version": SCHEMA_VERSION, "output": output, "argv": argv,
            "admitted": all(k["admitted"] for k in kernels), "kernels": kernels, "modules": module_docs}
