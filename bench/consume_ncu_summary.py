"""Where the consume probe's issue-side cost goes, from an ncu export (bench/gpu_calls/stop57_consume_ncu.sh): per
consume_hbf launch its duration and stall samples, and per SASS instruction the samples of the launch on the
registered tensor against the launch on the unregistered one (the same cubin, rows matched by address), the
instructions with the largest difference first, each with its executions and its per-reason stall columns. No GPU: it
reads the CSVs ncu wrote (the source page, one per launch) and its details page.

    python3 bench/consume_ncu_summary.py --dir /tmp/cn --out bench/results/consume_ncu.json
"""
from __future__ import annotations

import argparse
import csv
import io
import logging
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from stream_ncu_summary import _col, _num, _tables, by_function, duration_ns  # noqa: E402

log = logging.getLogger("consume_ncu_summary")


def launches(details_csv: Path) -> list[dict]:
    """The details page's consume_hbf results in launch order: ID, grid, duration (ns), registers."""
    if not details_csv.is_file():
        return []
    rows = list(csv.DictReader(io.StringIO(details_csv.read_text(errors="replace"))))
    by_id: dict = {}
    for r in rows:
        if (r.get("Kernel Name") or "") != "consume_hbf":
            continue
        d = by_id.setdefault(r.get("ID"), {"id": r.get("ID")})
        name, val = r.get("Metric Name"), r.get("Metric Value")
        if name == "Duration":
            d["duration_ns"] = duration_ns(r)
        elif name in ("Grid Size", "Registers Per Thread", "Warp Cycles Per Issued Instruction"):
            d[name] = val
    return sorted(by_id.values(), key=lambda d: int(_num(d["id"]) or 0))


def source_rows(path: Path) -> tuple[list[dict], dict]:
    """The source page's last table as rows {addr, sass, executed, samples, not_issued, reasons{...}} and the
    columns found."""
    tables = [t for t in _tables(path.read_text(errors="replace")) if t] if path.is_file() else []
    if not tables:
        return [], {}
    t = tables[-1]
    r0 = t[0]
    cols = {"addr": _col(r0, "address"), "src": _col(r0, "source"), "ex": _col(r0, "instructions executed"),
            "all": _col(r0, "warp stall sampling", "all"), "ni": _col(r0, "warp stall sampling", "not-issued")}
    reason_cols = [k for k in r0 if re.match(r"^(stall_|smsp__pcsamp_warps_issue_stalled_)", k)]
    out = []
    for r in t:
        out.append({"addr": (r.get(cols["addr"]) or "").strip(), "sass": (r.get(cols["src"]) or "").strip(),
                    "executed": int(_num(r.get(cols["ex"])) or 0) if cols["ex"] else 0,
                    "samples": int(_num(r.get(cols["all"])) or 0) if cols["all"] else 0,
                    "not_issued": int(_num(r.get(cols["ni"])) or 0) if cols["ni"] else 0,
                    "reasons": {k: int(_num(r.get(k)) or 0) for k in reason_cols if _num(r.get(k))}})
    return out, {**cols, "reasons": reason_cols, "all_columns": list(r0)}


def compare(reg: list[dict], unreg: list[dict], top: int) -> dict:
    """Per instruction (matched by address) the registered launch's samples less the unregistered one's."""
    u = {r["addr"]: r for r in unreg}
    diff = []
    for r in reg:
        o = u.get(r["addr"], {"samples": 0, "executed": 0})
        diff.append({"addr": r["addr"], "sass": r["sass"][:110], "d_samples": r["samples"] - o["samples"],
                     "samples": r["samples"], "unreg_samples": o["samples"], "executed": r["executed"],
                     "unreg_executed": o["executed"], "reasons": r["reasons"]})
    diff.sort(key=lambda x: -x["d_samples"])
    return {"samples": sum(r["samples"] for r in reg), "unreg_samples": sum(r["samples"] for r in unreg),
            "d_samples": sum(r["samples"] for r in reg) - sum(r["samples"] for r in unreg),
            "only_registered_samples": sum(x["samples"] for x in diff if x["executed"] and not x["unreg_executed"]),
            "top": diff[:top]}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="the folder stop57_consume_ncu.sh wrote")
    ap.add_argument("--out", required=True)
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    d = Path(a.dir)
    if not d.is_dir():
        ap.error(f"--dir {d}: not a folder")
    L = launches(d / "details.csv")
    srcs: dict[int, list[dict]] = {}
    cols: dict = {}
    for p in sorted(d.glob("src_consume_hbf_*.csv")):
        tail = p.stem.rsplit("_", 1)[1]
        if not tail.isdigit():
            log.warning("%s: not a launch page (src_consume_hbf_<n>.csv), skipped", p.name)
            continue
        rows, c = source_rows(p)
        if rows:
            srcs[int(tail)] = rows
            cols = cols or c
    res: dict = {"what": "ncu PC sampling of devpath_cost's consume part (bench/gpu_calls/stop57_consume_ncu.sh)",
                 "launches": L, "per_launch": {i: {"samples": sum(r["samples"] for r in rows),
                                                   "executed": sum(r["executed"] for r in rows)}
                                              for i, rows in srcs.items()},
                 "columns": cols}
    # devpath_cost's consume_hbf launches in order: idle unregistered, idle registered, one warp per SM
    # unregistered, one warp per SM registered (after any warm-up launch: the pairs are the LAST four)
    idx = sorted(srcs)
    if len(idx) >= 4:
        pairs = {"idle": (idx[-4], idx[-3]), "one_warp_per_sm": (idx[-2], idx[-1])}
        for mode, (iu, ir) in pairs.items():
            res[mode] = {"unregistered_launch": iu, "registered_launch": ir, **compare(srcs[ir], srcs[iu], a.top)}
            c = res[mode]
            log.info("%s: samples registered %d, unregistered %d (+%d; only on the registered path %d)", mode,
                     c["samples"], c["unreg_samples"], c["d_samples"], c["only_registered_samples"])
            for x in c["top"][:25]:
                log.info("  %+6d  (%5d / %5d)  exec %7d / %7d  %s", x["d_samples"], x["samples"], x["unreg_samples"],
                         x["executed"], x["unreg_executed"], x["sass"])
    # the Little kernels (part B): one instrumented launch each; the samples per instruction and per function of
    # its section (the entry's own body, the per-kernel helper copies such as __hb_wait, where a warp sleeps out its
    # modeled latency)
    sass = sorted((d / "sass").glob("*.sass")) if (d / "sass").is_dir() else []
    for p in sorted(d.glob("src_little_*.csv")):
        rows, _cols = source_rows(p)
        if not rows:
            continue
        tot = sum(r["samples"] for r in rows)
        top = sorted(rows, key=lambda r: -r["samples"])[:a.top]
        res[p.stem] = {"samples": tot, "executed": sum(r["executed"] for r in rows),
                       "by_function": by_function(p, sass, "reduce_hbf", None),
                       "top": [{"addr": r["addr"], "sass": r["sass"][:110], "samples": r["samples"],
                                "share": round(r["samples"] / tot, 4) if tot else None, "executed": r["executed"],
                                "reasons": r["reasons"]} for r in top]}
        log.info("%s: %d samples", p.stem, tot)
        for fn_, x in (res[p.stem]["by_function"] or {}).get("functions", {}).items():
            log.info("    %-50s %9s samples  %12s instructions", fn_[:50], x.get("stall_samples"),
                     x["warp_instructions"])
        for x in res[p.stem]["top"][:20]:
            log.info("  %6d (%5.1f %%) exec %9d  %s", x["samples"], 100 * (x["share"] or 0), x["executed"], x["sass"])
    atomic_write_json(Path(a.out), res, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
