"""Summarize an ncu export of the stream kernels (bench/gpu_calls/stop52_ncu.sh): per kernel the details page's
scheduler, occupancy and instruction metrics and, from the SASS source page, what the instrumented build adds:
SASS lines, warp instructions executed (per warp), LDG sites and how often each ran, %globaltimer reads, CALLs and
branches executed, the instructions with the most stall samples. No GPU: it reads the CSVs ncu wrote.

    python3 bench/stream_ncu_summary.py --dir /tmp/sn --out /tmp/sn/summary.json
"""
from __future__ import annotations

import argparse
import csv
import io
import logging
import re
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("stream_ncu_summary")

KERNELS = ("reduce_plain", "reduce_hbf", "copy_plain", "copy_hbf")
DETAIL_METRICS = ("Registers Per Thread", "Achieved Occupancy", "Theoretical Occupancy", "Block Limit Registers",
                  "Issued Warp Per Scheduler", "Eligible Warps Per Scheduler", "Active Warps Per Scheduler",
                  "Warp Cycles Per Issued Instruction", "Warp Cycles Per Executed Instruction",
                  "Executed Instructions", "Issued Instructions", "Branch Instructions", "Duration",
                  "DRAM Throughput", "Memory Throughput", "Compute (SM) Throughput", "Grid Size", "Block Size",
                  "Local Memory Spilling Requests", "Stack Size")


def _num(s: str):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return None


def duration_ns(row: dict):
    """A details-page Duration row in ns (ncu picks the unit per kernel: ns, us, ms, ...); None when unreadable."""
    scale = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9,
             "second": 1e9}.get((row.get("Metric Unit") or "").strip())
    v = _num(row.get("Metric Value") or "")
    return round(v * scale) if v is not None and scale else None


def details(path: Path) -> dict:
    """{kernel: {metric: value}} from the details page, the LAST result of each kernel name."""
    out: dict = {}
    if not path.is_file():
        return out
    last_id: dict = {}
    rows = list(csv.DictReader(io.StringIO(path.read_text(errors="replace"))))
    for r in rows:
        k = r.get("Kernel Name") or ""
        if k in KERNELS:
            last_id[k] = r.get("ID")
    for r in rows:
        k = r.get("Kernel Name") or ""
        if k in last_id and r.get("ID") == last_id[k] and r.get("Metric Name") in DETAIL_METRICS:
            m = out.setdefault(k, {"ncu_id": last_id[k]})
            m[r["Metric Name"]] = r.get("Metric Value")
            if r["Metric Name"] == "Duration":
                m["duration_ns"] = duration_ns(r)
    return out


def _tables(text: str) -> list[list[dict]]:
    """The source page's CSV tables: a new table starts at every header line (one per kernel when the import
    filter did not narrow it to one)."""
    tables, cur, header = [], None, None
    for line in text.splitlines():
        if not line.strip():
            continue
        if "Address" in line.split(",")[0] and "Source" in line:
            header = next(csv.reader([line]))
            cur = []
            tables.append(cur)
            continue
        if header is None or cur is None:
            continue
        vals = next(csv.reader([line]))
        if len(vals) == len(header):
            cur.append(dict(zip(header, vals)))
    return tables


def _col(row: dict, *subs: str) -> str | None:
    for k in row:
        if all(s.lower() in k.lower() for s in subs):
            return k
    return None


def source(path: Path, warps: int | None) -> dict:
    if not path.is_file():
        return {"error": "no source csv"}
    tables = [t for t in _tables(path.read_text(errors="replace")) if t]
    if not tables:
        return {"error": "no table in the source csv", "head": path.read_text(errors="replace")[:400]}
    t = tables[-1]
    r0 = t[0]
    c_src = _col(r0, "source")
    c_ex = _col(r0, "instructions executed")
    c_st = _col(r0, "warp stall sampling", "all") or _col(r0, "warp stall sampling")
    if not (c_src and c_ex):
        return {"error": f"columns not found: {list(r0)[:12]}"}

    def ex(r):
        return int(_num(r.get(c_ex)) or 0)

    def has(r, pat):
        return re.search(pat, r.get(c_src) or "") is not None
    total = sum(ex(r) for r in t)
    ldg = [r for r in t if has(r, r"\bLDG\b")]
    timer = [r for r in t if has(r, r"GLOBALTIMER")]
    calls = [r for r in t if has(r, r"\bCALL\b")]
    bra = [r for r in t if has(r, r"^\s*(@!?U?P\w+\s+)?BRA\b")]
    res = {"tables": len(tables), "sass_lines": len(t), "warp_instructions": total,
           "per_warp": round(total / warps, 1) if warps else None,
           "ldg_sites": len(ldg), "ldg_executed": [ex(r) for r in ldg if ex(r)],
           "globaltimer_sites": len(timer), "globaltimer_executed": sum(ex(r) for r in timer),
           "call_sites": len(calls), "calls_executed": sum(ex(r) for r in calls),
           "branches_executed": sum(ex(r) for r in bra),
           "executed_sites": sum(1 for r in t if ex(r))}
    if warps:
        res["globaltimer_per_warp"] = round(res["globaltimer_executed"] / warps, 2)
        res["calls_per_warp"] = round(res["calls_executed"] / warps, 3)
        res["branches_per_warp"] = round(res["branches_executed"] / warps, 1)
    if c_st:
        st = sorted(t, key=lambda r: -(_num(r.get(c_st)) or 0))
        res["stall_samples"] = int(sum(_num(r.get(c_st)) or 0 for r in t))
        res["top_stalls"] = [{"sass": (r.get(c_src) or "").strip()[:120], "samples": int(_num(r.get(c_st)) or 0),
                              "executed": ex(r)} for r in st[:8]]
    return res


def _section(text: str, kernel: str) -> list[str]:
    """The lines of the entry ``kernel``'s code section in an nvdisasm -c listing (empty when it is not there)."""
    lines = text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == f".text.{kernel}:")
    except StopIteration:
        return []
    end = next((j for j in range(start + 1, len(lines)) if lines[j].lstrip().startswith(".section")), len(lines))
    return lines[start:end]


def sass_functions(text: str, kernel: str) -> Optional[list[tuple[str, int]]]:
    """nvdisasm -c output: the entry ``kernel``'s section as [(function, index of its first instruction)], the entry's
    own body first ("body"), then each function placed in its section (the per-kernel helper copies, ptxas's
    $kernel$__hb_*), and the section's instruction count last as ("end", n); None when the entry is not there."""
    sec = _section(text, kernel)
    if not sec:
        return None
    out, n = [("body", 0)], 0
    for ln in sec[1:]:
        m = re.match(r"^\s*\.type\s+(\S+),@function", ln)
        if m:
            out.append((m.group(1).replace(f"${kernel}$", ""), n))
        elif re.match(r"^\s*/\*[0-9a-f]{4,}\*/", ln):
            n += 1
    return out + [("end", n)]


def by_function(src_csv: Path, sass_files: list[Path], kernel: str, warps: Optional[int]) -> dict:
    """The source page's executed warp instructions summed per function of the kernel's section, and the CALLs
    executed per callee, mapped by instruction index onto the nvdisasm listing of the same cubin (the one whose
    instruction count equals the page's rows); {} when none matches."""
    if not src_csv.is_file():
        return {}
    tables = [t for t in _tables(src_csv.read_text(errors="replace")) if t]
    if not tables:
        return {}
    t = tables[-1]
    c_src, c_ex = _col(t[0], "source"), _col(t[0], "instructions executed")
    c_st = _col(t[0], "warp stall sampling", "all") or _col(t[0], "warp stall sampling")
    ex = [int(_num(r.get(c_ex)) or 0) for r in t]
    st = [int(_num(r.get(c_st)) or 0) for r in t] if c_st else None
    for f in sass_files:
        fun = sass_functions(f.read_text(errors="replace"), kernel)
        if not fun or fun[-1][1] != len(ex):
            continue
        res: dict = {"sass": f.name, "functions": {}, "calls": {}}
        names = [(nm, a, b) for (nm, a), (_, b) in zip(fun[:-1], fun[1:])]
        for nm, a, b in names:
            tot = sum(ex[a:b])
            smp = sum(st[a:b]) if st else 0
            if tot or smp:
                res["functions"][nm] = {"warp_instructions": tot,
                                        "per_warp": round(tot / warps, 1) if warps else None}
                if st:
                    res["functions"][nm]["stall_samples"] = smp
        calls = [m.group(1).replace(f"${kernel}$", "") for ln in _section(f.read_text(errors="replace"), kernel)
                 for m in [re.search(r"CALL\.\w+(?:\.\w+)* `\((\S+)\)", ln)] if m]
        page_calls = [ex[i] for i, r in enumerate(t) if "CALL" in (r.get(c_src) or "")]
        if len(calls) == len(page_calls):        # the same code: the n-th CALL of the page is the listing's n-th
            for callee, e in zip(calls, page_calls):
                if e:
                    res["calls"][callee] = res["calls"].get(callee, 0) + e
        if warps:
            res["calls_per_warp"] = {k: round(v / warps, 3) for k, v in res["calls"].items()}
        return res
    return {}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="the folder stop52_ncu.sh wrote (details.csv, src_<kernel>.csv)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    d = Path(a.dir)
    if not d.is_dir():
        ap.error(f"--dir {d}: not a folder")
    det = details(d / "details.csv")
    res: dict = {"what": "ncu of devpath_cost's stream kernels (bench/gpu_calls/stop52_ncu.sh)", "kernels": {}}
    for k in KERNELS:
        m = det.get(k, {})
        grid, block = _num((m.get("Grid Size") or "").split()[0] if m.get("Grid Size") else ""), \
            _num(m.get("Block Size") or "")
        warps = int(grid * (block // 32)) if grid and block else None
        res["kernels"][k] = {"details": m, "warps": warps, "source": source(d / f"src_{k}.csv", warps),
                             "by_function": by_function(d / f"src_{k}.csv", sorted((d / "sass").glob("*.sass")),
                                                        k, warps) if (d / "sass").is_dir() else {}}
    for op in ("reduce", "copy"):
        p, h = res["kernels"][f"{op}_plain"], res["kernels"][f"{op}_hbf"]
        dp, dh = p["details"].get("duration_ns"), h["details"].get("duration_ns")
        ip, ih = p["source"].get("warp_instructions"), h["source"].get("warp_instructions")
        res[f"{op}_ratio"] = {"duration": round(dh / dp, 3) if dp and dh else None,
                              "instructions": round(ih / ip, 2) if ip and ih else None}
    atomic_write_json(Path(a.out), res, indent=1, default=str)
    for k, v in res["kernels"].items():
        s = v["source"]
        log.info("%-13s regs %s occ %s issued/sched %s cyc/issue %s dur %s | SASS %s per-warp %s LDG %s timer/warp %s "
                 "calls/warp %s bra/warp %s %s", k, v["details"].get("Registers Per Thread"),
                 v["details"].get("Achieved Occupancy"), v["details"].get("Issued Warp Per Scheduler"),
                 v["details"].get("Warp Cycles Per Issued Instruction"), v["details"].get("Duration"),
                 s.get("sass_lines"), s.get("per_warp"), s.get("ldg_sites"), s.get("globaltimer_per_warp"),
                 s.get("calls_per_warp"), s.get("branches_per_warp"), s.get("error", ""))
        for fn_, x in (v.get("by_function") or {}).get("functions", {}).items():
            log.info("    %-60s %8s per warp", fn_[:60], x["per_warp"])
        if (v.get("by_function") or {}).get("calls_per_warp"):
            log.info("    calls per warp: %s", v["by_function"]["calls_per_warp"])
        for x in (s.get("top_stalls") or [])[:5]:
            log.info("    %6d samples  %10d exec  %s", x["samples"], x["executed"], x["sass"])
    log.info("ratios: reduce %s copy %s", res["reduce_ratio"], res["copy_ratio"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
