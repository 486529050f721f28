"""Reads and stores apart, twin vs media engine, on the cross-check's mixed streams at overload (issue 14,
the twin's store slot fix of 2026-12-04). With ``--old-twin DIR:module`` (a copy of hbfd/media from another
commit imported as another package, as ``bench/media_sweep.py --old-engine``) the other build's twin runs
beside this one, against this build's engine.

    PYTHONPATH=$PWD .venv/bin/python bench/media_store_slot_diag.py [--old-twin /tmp/oldmedia:media_old.twin]

Writes bench/results/media_store_slot_diag.json: p50/p99 (us) of reads and of stores per model and case.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hbfcommon.fsutil import atomic_write_json  # noqa: E402
from hbfd.media.crosscheck import run_engine  # noqa: E402
from hbfd.media.streams import make_stream  # noqa: E402
from hbfd.media.twin import DeviceModelTwin  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-twin", default=None, help="DIR:module of another build's twin")
    ap.add_argument("--requests", type=int, default=60_000)
    ap.add_argument("--out", default=str(ROOT / "bench/results/media_store_slot_diag.json"))
    a = ap.parse_args(argv)
    import media_crosscheck as mc
    twins = {"twin": DeviceModelTwin}
    if a.old_twin:
        d, mod = a.old_twin.split(":")
        sys.path.insert(0, d)
        twins["old twin"] = importlib.import_module(mod).DeviceModelTwin
    rows = []
    geos = mc.geometries()
    for gname in ("ocp-sg1", "ocp-sg1/tR20us", "nominal"):
        g = geos[gname][0]
        for load in (1.0, 1.5, 2.0):
            b = make_stream("mixed", g, a.requests, load=load, seed=1)
            arr = b["arrival_ns"].astype(np.int64)
            st = b["op"] == 1
            done = {"engine": run_engine(g, b)[0]}
            for k, cls in twins.items():
                done[k] = cls(g).run_batch(b)
            row = {"geometry": gname, "load": load}
            for k, dn in done.items():
                for cls_name, m in (("reads", ~st), ("stores", st)):
                    lat = (dn - arr)[m] / 1e3
                    row[f"{k} {cls_name} p50/p99 us"] = [round(float(np.percentile(lat, 50)), 2),
                                                        round(float(np.percentile(lat, 99)), 2)]
            rows.append(row)
            print(row, flush=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    atomic_write_json(Path(a.out), {"what": __doc__.split("\n\n")[0], "commit": commit,
                                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                    "command": "bench/media_store_slot_diag.py " + " ".join(argv or sys.argv[1:]),
                                    "requests_per_case": a.requests, "rows": rows}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
