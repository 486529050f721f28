#!/usr/bin/env python3
"""What the counters explain of a device-path matrix run (issue 13: "the four counters must explain the difference
between native and instrumented time"), read from bench/devpath_matrix.py's JSON after the fact (CPU only).

    python3 bench/explain_devpath.py bench/results/stop45_h100/multirange/devpath_matrix_*.json --out /tmp/x.json

Per case that ran one kernel (plain and instrumented medians), with the rule of bench/hbf_bandwidth.py
(devpath_common.explain_terms): every warp's life is the plain kernel's work plus its helper time at issue, its
inline issue path's own time and its exposed waits, and the resident warps share the launch, so the counters explain

    counted = (overhead_ns + inline_ns + wait_wall_ns) / (launches x resident warps)

of the difference hbf - plain, each term's share of the sum reported apart (`helper_share`, `inline_share`,
`wait_share`). `inline_ns` (helper ABI 8) is measured only in kernels built with HBFCC_INLINE_TIME=1 (0 otherwise:
then the inline path's time is in the residual, as before ABI 8; `inline_timed` says which). The rest (`residual`)
is what no counter measures: the inline path's instructions outside its timed stretches (the band test, the first
clock read's own latency, the futures' waits that call no helper), lost occupancy (blocks per SM plain vs
instrumented, both reported, with the waves each needs), spills. `residual_ns_per_inline_request` is the residual
spread over the inline requests of one resident warp's share (residual x resident warps / inline requests): the
cost one inline site would have if the residual were all inline-path time -- an upper bound, not a measurement;
`inline_ns_per_inline_request` is the measured counterpart (inline_ns / inline requests, per warp-request).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))
import devpath_common as DC  # noqa: E402

from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("explain_devpath")
NAME = re.compile(r"_w(\d+)_g(\d+)")


def explain_case(c: dict, sms: int) -> dict | None:
    """The decomposition of one case, or None where it ran several kernels or did not end."""
    if c.get("status") != "ok" or "plain_ms" not in c or "hbf_ms" not in c:
        return None
    m = NAME.search(c["name"])
    ct = c.get("counters") or {}
    ot = ct.get("ops_total") or {}
    if m is None or not ot:
        return None
    warps, grid = int(m.group(1)), int(m.group(2))
    kp, kh = c.get("kernel_plain") or {}, c.get("kernel_hbf") or {}
    rb = int(c.get("resident_blocks_hbf") or 0)
    if rb <= 0:
        return None
    launches = max(1, int(ct.get("launches") or 1))
    resident_warps = min(grid, rb) * warps
    plain_ns = c["plain_ms"]["median"] * 1e6
    hbf_ns = c["hbf_ms"]["median"] * 1e6
    delta = hbf_ns - plain_ns
    t = DC.explain_terms(ct, launches, resident_warps)
    counted = t["counted_ns"]
    req, inl = int(ot.get("requests") or 0), int(ct.get("inline_requests") or 0)
    residual = delta - counted
    bps_p, bps_h = kp.get("blocks_per_sm"), kh.get("blocks_per_sm")
    waves = lambda bps: math.ceil(grid / (sms * bps)) if bps else None  # noqa: E731
    return {"name": c["name"], "plain_ns": round(plain_ns), "hbf_ns": round(hbf_ns), "ratio": hbf_ns / plain_ns,
            "delta_ns": round(delta), "counted_ns": round(counted), "helper_ns_total": t["helper_ns_total"],
            "inline_ns_total": t["inline_ns_total"], "exposed_wait_ns_total": t["exposed_wait_ns_total"],
            "helper_share": t["helper_share"], "inline_share": t["inline_share"], "wait_share": t["wait_share"],
            "inline_timed": t["inline_ns_total"] > 0,
            "counted_share_of_delta": (counted / delta) if delta > 0 else None,
            "inline_share_of_delta": (t["inline_ns_total"] / (launches * resident_warps) / delta) if delta > 0 else None,
            "inline_ns_per_inline_request": (t["inline_ns_total"] / inl) if inl and t["inline_ns_total"] else None,
            "residual_ns": round(residual), "requests": req, "inline_requests": inl,
            "helper_requests": req - inl, "resident_warps": resident_warps, "launches": launches,
            "residual_ns_per_inline_request": (residual * resident_warps / (inl / launches)) if inl else None,
            "registers": [kp.get("n_regs"), kh.get("n_regs")], "spills_hbf": kh.get("n_spills"),
            "blocks_per_sm": [bps_p, bps_h], "waves": [waves(bps_p), waves(bps_h)]}


def explain(doc: dict) -> dict:
    out = {}
    for src, s in (doc.get("sources") or {}).items():
        sms = int(s.get("sms") or 132)
        rows = [r for r in (explain_case(c, sms) for c in s.get("cases") or []) if r is not None]
        shares = [r["counted_share_of_delta"] for r in rows if r["counted_share_of_delta"] is not None]
        per_inl = [r["residual_ns_per_inline_request"] for r in rows if r["residual_ns_per_inline_request"]]
        ishares = [r["inline_share_of_delta"] for r in rows if r["inline_share_of_delta"] is not None]
        ins = [r["inline_ns_per_inline_request"] for r in rows if r["inline_ns_per_inline_request"]]
        med = (lambda xs: statistics.median(xs) if xs else None)  # noqa: E731
        out[src] = {"cases": rows, "skipped": len(s.get("cases") or []) - len(rows),
                    "counted_share_median": med(shares),
                    "inline_share_of_delta_median": med(ishares),
                    "residual_ns_per_inline_request_median": med(per_inl),
                    "inline_ns_per_inline_request_median": med(ins),
                    "inline_timed_cases": sum(1 for r in rows if r["inline_timed"])}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="bench/devpath_matrix.py JSON files")
    ap.add_argument("--out", required=True, help="the JSON file to write")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = {"what": "what the counters explain of instrumented - plain, per case", "rule": __doc__.split("\n\n")[2]
           .strip(), "runs": {}}
    for p in args.runs:
        try:
            doc = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as e:
            log.error("%s: not a readable JSON file (%s)", p, e)
            return 2
        if not isinstance(doc, dict) or "sources" not in doc:
            log.error("%s: not a bench/devpath_matrix.py result (no 'sources')", p)
            return 2
        res["runs"][p] = explain(doc)
        for src, e in res["runs"][p].items():
            log.info("%s [%s]: counted share of the difference, median %s (inline path %s, %d case(s) timed); "
                     "residual per inline request, median %s ns; measured inline ns per inline request, median %s",
                     Path(p).name, src, _f(e["counted_share_median"]), _f(e["inline_share_of_delta_median"]),
                     e["inline_timed_cases"], _f(e["residual_ns_per_inline_request_median"]),
                     _f(e["inline_ns_per_inline_request_median"]))
            for r in e["cases"]:
                log.info("  %-42s x%6.2f  delta %9.0f ns  counted %8.0f (inline %s)  residual %9.0f  inline %7d/%-7d "
                         "blocks/SM %s -> %s  waves %s -> %s  per inline req %s ns (measured %s)",
                         r["name"][:42], r["ratio"], r["delta_ns"], r["counted_ns"], _f(r["inline_share_of_delta"]),
                         r["residual_ns"], r["inline_requests"], r["requests"], *r["blocks_per_sm"], *r["waves"],
                         _f(r["residual_ns_per_inline_request"]), _f(r["inline_ns_per_inline_request"]))
    atomic_write_json(args.out, res, indent=1)
    return 0


def _f(x) -> str:
    return "-" if x is None else f"{x:.3g}"


if __name__ == "__main__":
    sys.exit(main())
