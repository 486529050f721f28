"""Issue 16: the batched miss service against the one before it, interleaved -- the same two benches run
alternately from two source trees (this one and ``--before``, e.g. ``git archive <commit>`` of the tree before the
batched service), one rep per invocation, the order flipped every rep, medians and ranges per tree.

    git archive <before> | tar -x -C /tmp/before; git archive HEAD | tar -x -C /tmp/after  (+ hbfproto/ in both)
    PYTHONPATH=$PWD .venv/bin/python bench/capacity_batched_ab.py --before /tmp/before --after /tmp/after [--reps 5]

Benches: bench/capacity_ring.py (through a real hbfd's ring, RingHost lanes; ``pages_per_s_ring`` end to end,
``pages_per_s_service`` hbfd's service_ns alone) and bench/capacity_service.py (the service in process). Writes
bench/results/capacity_batched.json. CPU only.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon.errors import ConfigError  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

log = logging.getLogger("capacity_batched_ab")


def _run(tree: Path, args: list[str], out: Path, timeout_s: float, env: dict | None = None) -> dict:
    """One bench of source tree ``tree`` (its own PYTHONPATH, ``env`` on top), its JSON ``out`` read back."""
    e = dict(os.environ, PYTHONPATH=str(tree), **(env or {}))
    p = subprocess.run([sys.executable, str(tree / args[0]), *args[1:], "--out", str(out)], cwd=tree, env=e,
                       capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise RuntimeError(f"{args[0]} in {tree} failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(out.read_text())


def _spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="source tree of the service before batching")
    ap.add_argument("--after", default=str(ROOT), help="source tree of the batched service (default: this one)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ring-args", default="--pages 4096 --frames 256 --widths 1,32,256")
    ap.add_argument("--service-args", default="--pages 8192 --frames 2048 --widths 1,64,256 --rw-steps 2000")
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity_batched.json"))
    a = ap.parse_args()
    before = Path(a.before).resolve()
    if not (before / "bench/capacity_ring.py").exists() or a.reps < 1:
        raise ConfigError("--before must be a source tree with bench/capacity_ring.py, reps >= 1", before=str(before))
    trees = {"before": before, "after": Path(a.after).resolve()}
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for rep in range(a.reps):
            order = ["before", "after"] if rep % 2 == 0 else ["after", "before"]
            for name in order:
                for bench, extra in (("bench/capacity_ring.py", a.ring_args), ("bench/capacity_service.py",
                                                                                a.service_args)):
                    out = Path(d) / f"{name}-{rep}-{Path(bench).stem}.json"
                    doc = _run(trees[name], [bench, *extra.split(), "--reps", "1"], out, a.timeout_s)
                    for r in doc["rows"]:
                        rows.append(r | {"tree": name, "rep": rep, "bench": Path(bench).stem})
                    log.info("rep %d %s %s done", rep, name, Path(bench).stem)
    summary: dict = {}
    for name in trees:
        s = summary[name] = {}
        ring = [r for r in rows if r["tree"] == name and r["bench"] == "capacity_ring"]
        for w in sorted({r["width"] for r in ring}):
            rs = [r for r in ring if r["width"] == w]
            s[f"ring_width{w}"] = {f: _spread([r[f] for r in rs]) for f in (
                "pages_per_s_ring", "pages_per_s_service", "ring_ns_per_miss", "modeled_ns_per_miss", "scans")}
            s[f"ring_width{w}"]["checksums_equal"] = all(r["checksum_equal"] for r in rs)
        svc = [r for r in rows if r["tree"] == name and r["bench"] == "capacity_service" and "width" in r]
        for pol in sorted({r["policy"] for r in svc}):
            for w in sorted({r["width"] for r in svc if r["policy"] == pol}):
                rs = [r for r in svc if r["policy"] == pol and r["width"] == w]
                s[f"service_{pol}_width{w}"] = {f: _spread([r[f] for r in rs]) for f in (
                    "pages_per_s", "modeled_ns", "service_ns", "run_s")}
                s[f"service_{pol}_width{w}"]["checksums_equal"] = all(r["checksum_equal"] for r in rs)
                s[f"service_{pol}_width{w}"]["modeled_ns_all_reps"] = sorted({r["modeled_ns"] for r in rs})
    doc = {"what": "issue 16: capacity miss service batched vs before, interleaved (ring end to end, hbfd's "
                   "service alone, the service in process)",
           "date": datetime.date.today().isoformat(), "card": "CPU (this 2-core box, shared)", "host": platform.node(),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
           "before": str(before), "command": " ".join(["bench/capacity_batched_ab.py"] + sys.argv[1:]),
           "load_average": os.getloadavg(), "summary": summary, "rows": rows}
    atomic_write_json(a.out, doc, end="\n")
    log.info("-> %s", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
