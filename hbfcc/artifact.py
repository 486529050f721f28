"""Building admission artifacts (design §3.5) in the compiler: one document per rewritten module
(:func:`build`) and the admission of a device link (:func:`resolve_link`). The format itself, the store
and the reading side are the contract in :mod:`hbfcommon.artifact` (re-exported here).
"""
from __future__ import annotations

import time
from typing import Optional

from hbfcommon.abi import HBF_HELPER_ABI_VERSION
from hbfcommon.artifact import (LINK_SCHEMA_ID, SCHEMA, SCHEMA_ID, SCHEMA_VERSION, lookup_by_ptx,  # noqa: F401
                                output_store_path, store_dir, store_native_module, store_path, validate, write)

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
                                "spill_load_bytes": (a.spill_loads or 0) - (b.spill_loads or 0),
                                "smem_bytes": (a.smem_bytes or 0) - (b.smem_bytes or 0)}
        for stage in ("occupancy_guard", "launch_bound", "full_warp_auto"):
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
                  "already_instrumented": bool(result.already_instrumented),
                  # the PTX's .target, and whether it is below the helper's (left not instrumented)
                  "target": ",".join(result.module.target) if result.module is not None else None,
                  "below_helper_target": bool(result.meta.get("below_helper_target"))},
        "helper": None if helper is None else {
            "path": helper.path, "sha256": helper.sha256, "abi_version": helper.abi_version,
            "ptx_version": f"{helper.version[0]}.{helper.version[1]}",
            # the helper functions linked into this module (hbfcc.link.closure: what it reaches)
            "linked": (result.meta.get("link") or {}).get("linked")},
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


def kernel_reason(k: dict) -> str:
    """Why a module document's kernel (or function) is not admitted: its reasons, then the first
    refused operations' (never empty for a kernel that is not admitted)."""
    parts = list(k.get("not_admitted_reasons") or [])
    parts += [f"{' '.join(r['instruction'].split())}: {r['reason']}" for r in (k.get("refused") or [])[:3]]
    if not parts and not k.get("admitted", False):
        parts = ["not admitted (no reason recorded)"]
    return "; ".join(dict.fromkeys(parts))


def image_target(doc: dict) -> str:
    """The image a module document describes: the ptxas target it was assembled for (``sm_90a``,
    ``compute_90`` for nvcc's check of the PTX it embeds), else the PTX's ``.target``."""
    p = doc.get("ptxas") or {}
    return p.get("target") or doc.get("input", {}).get("target") or "unknown"


def _by_target(docs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in docs:
        out.setdefault(image_target(d), []).append(d)
    return out


BELOW_TARGET = ("below the helper module's target: never loaded on a GPU where hbfsim models (the driver "
                "takes this build's image for that GPU instead)")


def _combine(per_target: dict[str, dict[str, tuple[bool, str]]], below: set[str]) -> tuple[list[dict], dict]:
    """One verdict per kernel over the images of a build. Images for targets below the helper's
    (not instrumented) do not count when the build has another image; the kernel is admitted when
    every image that counts admits it; the reason names the failing target(s) when there are several."""
    counted = [t for t in per_target if t not in below] or list(per_target)
    # .entry order (the kernel index the rewritten code counts under, which the runtime's slots follow)
    names = list(dict.fromkeys(n for t in counted + [t for t in per_target if t not in counted]
                               for n in per_target[t]))
    kernels = []
    for n in names:
        groups = [t for t in counted if n in per_target[t]] or [t for t in per_target if n in per_target[t]]
        fails = [(t, per_target[t][n][1]) for t in groups if not per_target[t][n][0]]
        if not fails:
            reason = ""
        elif len(per_target) == 1:
            reason = fails[0][1]
        else:
            reason = "; ".join(f"{t}: {r}" for t, r in fails)
        kernels.append({"name": n, "admitted": not fails, "reason": reason})
    targets = {}
    for t, v in per_target.items():
        ks = [{"name": n, "admitted": ok, "reason": r} for n, (ok, r) in v.items()]
        targets[t] = {"admitted": all(k["admitted"] for k in ks), "counted": t in counted, "kernels": ks}
        if t not in counted:
            targets[t]["not_counted"] = BELOW_TARGET
    return kernels, targets


def _below(groups: dict[str, list[dict]]) -> set[str]:
    return {t for t, ds in groups.items() if ds and all(d.get("input", {}).get("below_helper_target") for d in ds)}


def resolve_compile(module_docs: list[dict]) -> tuple[list[dict], dict]:
    """(kernels, targets) of one nvcc compile: per image target, a kernel is admitted when every
    module of that target that defines it admits it; then :func:`_combine`."""
    groups = _by_target(module_docs)
    per: dict[str, dict[str, tuple[bool, str]]] = {}
    for t, ds in groups.items():
        v: dict[str, tuple[bool, str]] = {}
        for d in ds:
            for k in sorted(d.get("kernels", []), key=lambda k: k.get("kernel_index", 0)):
                ok0, r0 = v.get(k["name"], (True, ""))
                ok = bool(k["admitted"])
                v[k["name"]] = (ok0 and ok, r0 or ("" if ok else kernel_reason(k)))
        per[t] = v
    return _combine(per, _below(groups))


def _resolve_group(module_docs: list[dict]) -> dict[str, tuple[bool, str]]:
    """Admission across the modules of one image target of a device link."""
    funcs: dict[str, dict] = {}
    for m in module_docs:
        for f in m.get("kernels", []) + m.get("functions", []):
            prev = funcs.get(f["name"])
            base_ok = (not f["refused"] and INDIRECT not in f.get("calls", [])
                       and all(r.startswith("calls ") for r in f["not_admitted_reasons"]))
            own = [r for r in f["not_admitted_reasons"] if not r.startswith("calls ")]
            own += [f"{' '.join(r['instruction'].split())}: {r['reason']}" for r in f["refused"][:3]]
            if INDIRECT in f.get("calls", []):
                own.append("indirect call (callee not seen)")
            if prev is None:
                funcs[f["name"]] = {"kind": f["kind"], "calls": list(f.get("calls", [])), "ok": base_ok,
                                    "reasons": own}
            else:
                prev["calls"] = list(dict.fromkeys(prev["calls"] + list(f.get("calls", []))))
                prev["ok"] = prev["ok"] and base_ok
                prev["reasons"] = list(dict.fromkeys(prev["reasons"] + own))
    why: dict[str, str] = {n: "; ".join(v["reasons"]) or "not admitted (no reason recorded)"
                           for n, v in funcs.items() if not v["ok"]}
    why.update(admit({n: v["ok"] for n, v in funcs.items()}, {n: v["calls"] for n, v in funcs.items()},
                     lambda c: f"calls {c}, defined in no module of this link"))
    return {n: (n not in why, why.get(n, "")) for n, v in funcs.items() if v["kind"] == "entry"}


def resolve_link(module_docs: list[dict], *, output: str, argv: list[str]) -> dict:
    """Admission across the modules of one device link (``-rdc``), per image target (nvlink links
    each target's images on their own; a multi-``-gencode`` build has one module per target): a
    kernel that calls functions defined in *other* modules is admitted when every function it
    reaches, in any module of that target, was rewritten by hbfcc with nothing refused
    (:func:`hbfcc.admission.admit`, recursion allowed). Functions defined nowhere in the link keep
    the kernel not admitted. The verdicts of the targets combine as in :func:`_combine`."""
    groups = _by_target(module_docs)
    per = {t: _resolve_group(ds) for t, ds in groups.items()}
    kernels, targets = _combine(per, _below(groups))
    return {"schema": LINK_SCHEMA_ID, "schema_version": SCHEMA_VERSION, "output": output, "argv": argv,
            "admitted": all(k["admitted"] for k in kernels), "kernels": kernels, "targets": targets,
            "modules": module_docs}
