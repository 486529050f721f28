#!/usr/bin/env python3
"""What the counters explain of a device-path matrix run (issue 13: "the four counters must explain the difference
between native and instrumented time"), read from bench/devpath_matrix.py's JSON after the fact (CPU only).

    python3 bench/explain_devpath.py bench/results/stop45_h100/multirange/devpath_matrix_*.json --out /tmp/x.json

Per case that ran one kernel (plain and instrumented medians), with the rule of bench/hbf_bandwidth.py: every warp's
life is the plain kernel's work plus its helper time at issue plus its exposed waits, and the resident warps share
the launch, so the counters explain

    counted = (overhead_ns + wait_wall_ns) / (launches x resident warps)        (helper time + exposed waits)

of the difference hbf - plain. The rest (`residual`) is what no counter measures: the inline issue path's own
instructions (its requests add nothing to `overhead_ns`: docs/runtime.md), lost occupancy (blocks per SM plain vs
instrumented, both reported, with the waves each needs), spills. `residual_ns_per_inline_request` is the residual
spread over the inline requests of one resident warp's share (residual x resident warps / inline requests): the
cost one inline site would have if the residual were all inline-path time -- an upper bound, not a measurement.
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
    helper, waits = int(ot.get("overhead_ns") or 0), int(ct.get("wait_wall_ns") or 0)
    counted = (helper + waits) / (launches * resident_warps)
    req, inl = int(ot.get("requests") or 0), int(ct.get("inline_requests") or 0)
    residual = delta - counted
    bps_p, bps_h = kp.get("blocks_per_sm"), kh.get("blocks_per_sm")
    waves = lambda bps: math.ceil(grid / (sms * bps)) if bps else None  # noqa: E731
    return {"name": c["name"], "plain_ns": round(plain_ns), "hbf_ns": round(hbf_ns), "ratio": hbf_ns / plain_ns,
            "delta_ns": round(delta), "counted_ns": round(counted), "helper_ns_total": helper,
            "exposed_wait_ns_total": waits,
            "counted_share_of_delta": (counted / delta) if delta > 0 else None,
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
        out[src] = {"cases": rows, "skipped": len(s.get("cases") or []) - len(rows),
                    "counted_share_median": statistics.median(shares) if shares else None,
                    "residual_ns_per_inline_request_median": statistics.median(per_inl) if per_inl else None}
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
            log.info("%s [%s]: counted share of the difference, median %s; residual per inline request, median %s ns",
                     Path(p).name, src, _f(e["counted_share_median"]), _f(e["residual_ns_per_inline_request_median"]))
            for r in e["cases"]:
                log.info("  %-42s x%6.2f  delta %9.0f ns  counted %8.0f  residual %9.0f  inline %7d/%-7d "
                         "blocks/SM %s -> %s  waves %s -> %s  per inline req %s ns",
                         r["name"][:42], r["ratio"], r["delta_ns"], r["counted_ns"], r["residual_ns"],
                         r["inline_requests"], r["requests"], *r["blocks_per_sm"], *r["waves"],
                         _f(r["residual_ns_per_inline_request"]))
    atomic_write_json(args.out, res, indent=1)
    return 0


def _f(x) -> str:
    return "-" if x is None else f"{x:.3g}"


if __name__ == "__main__":
    sys.exit(main())
