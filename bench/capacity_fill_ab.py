"""Issue 16: the capacity miss service for the 200 GiB proof -- variants (a source tree + environment: the service
before, this one with 1 or 2 fill threads, HBFD_ACCEL on or off) run interleaved, one rep per invocation, the order
rotated every rep; medians and ranges per variant.

    git archive <before> | tar -x -C /tmp/before (+ hbfproto/, and this tree's bench/capacity_ring.py and
    bench/capacity_service.py, whose --policy/--workers/--next-depth the older ones lack)
    PYTHONPATH=$PWD .venv/bin/python bench/capacity_fill_ab.py \\
        --variant old=/tmp/before --variant new1=$PWD:HBFD_CAPACITY_WORKERS=1 ... [--reps 3]

Each variant runs bench/capacity_ring.py once per ``--ring`` argument string (through a real hbfd's ring: RingHost
lanes; ``pages_per_s_ring`` end to end, ``pages_per_s_service`` hbfd's service alone) and bench/capacity_service.py
once per ``--service`` string (the service in process). ``{workers}`` in an argument string is replaced by the
variant's HBFD_CAPACITY_WORKERS (1 when unset). Writes ``--out``. CPU only.
"""
from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbfcommon.errors import ConfigError  # noqa: E402
from hbfcommon.fsutil import atomic_write_json  # noqa: E402

from capacity_batched_ab import _run, _spread  # noqa: E402  (bench/: one runner of a tree's bench)

log = logging.getLogger("capacity_fill_ab")


def _variant(text: str) -> tuple[str, Path, dict]:
    """``name=TREE[:VAR=VALUE,...]``."""
    name, _, rest = text.partition("=")
    tree, _, envs = rest.partition(":")
    env = dict(e.split("=", 1) for e in envs.split(",") if e)
    if not name or not (Path(tree) / "bench/capacity_ring.py").exists():
        raise ConfigError("--variant is name=TREE[:VAR=VALUE,...] with a source tree holding bench/capacity_ring.py",
                          variant=text)
    return name, Path(tree).resolve(), env


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", required=True, help="name=TREE[:VAR=VALUE,...] (repeat)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ring", action="append", default=[], help="bench/capacity_ring.py arguments (repeat)")
    ap.add_argument("--service", action="append", default=[], help="bench/capacity_service.py arguments (repeat)")
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity_fill_ab.json"))
    a = ap.parse_args()
    variants = [_variant(v) for v in a.variant]
    if a.reps < 1 or len({v[0] for v in variants}) != len(variants):
        raise ConfigError("reps >= 1 and distinct variant names", reps=a.reps)
    jobs = [("bench/capacity_ring.py", x) for x in a.ring] + [("bench/capacity_service.py", x) for x in a.service]
    rows = []
    loads = []
    with tempfile.TemporaryDirectory() as d:
        for rep in range(a.reps):
            k = rep % len(variants)
            for name, tree, env in variants[k:] + variants[:k]:
                for j, (bench, extra) in enumerate(jobs):
                    extra = extra.replace("{workers}", env.get("HBFD_CAPACITY_WORKERS", "1"))
                    out = Path(d) / f"{name}-{rep}-{j}.json"
                    doc = _run(tree, [bench, *extra.split(), "--reps", "1"], out, a.timeout_s, env)
                    for r in doc["rows"]:
                        rows.append(r | {"variant": name, "rep": rep, "bench": Path(bench).stem, "args": extra})
                    loads.append(os.getloadavg()[0])
                    log.info("rep %d %s %s %s done", rep, name, Path(bench).stem, extra)
    summary: dict = {}
    for name, _tree, env in variants:
        s = summary[name] = {"env": env}
        mine = [r for r in rows if r["variant"] == name]
        for key in sorted({(r["bench"], r["args"], r.get("policy", "none"), r["width"]) for r in mine}):
            rs = [r for r in mine if (r["bench"], r["args"], r.get("policy", "none"), r["width"]) == key]
            fields = (("pages_per_s_ring", "pages_per_s_service", "GB_per_s_ring", "ring_ns_per_miss", "scans",
                       "pages_per_s_round_trip", "client_ns_per_page")
                      if key[0] == "capacity_ring" else ("pages_per_s", "GB_per_s", "service_ns", "run_s"))
            e = s[f"{key[0]} [{key[1]}] {key[2]} width {key[3]}"] = {f: _spread([r[f] for r in rs]) for f in fields}
            e["checksums_equal"] = all(r["checksum_equal"] for r in rs)
            e["modeled_ns_all_reps"] = sorted({r["modeled_ns"] if "modeled_ns" in r else
                                               round(r["modeled_ns_per_miss"] * r["fills"]) for r in rs})
    doc = {"what": "issue 16: the capacity miss service for the 200 GiB proof, variants interleaved (ring end to "
                   "end, hbfd's service alone, the service in process)",
           "date": datetime.date.today().isoformat(), "card": "CPU (this 2-core box, shared)", "host": platform.node(),
           "cores": os.cpu_count(),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
           "variants": {n: {"tree": str(t), "env": e} for n, t, e in variants},
           "command": " ".join(["bench/capacity_fill_ab.py"] + sys.argv[1:]),
           "load_average_1min": _spread(loads) if loads else None, "summary": summary, "rows": rows}
    atomic_write_json(a.out, doc, end="\n")
    log.info("-> %s", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
