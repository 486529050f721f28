"""bench/ring_watch.py, the sidecar of bench/gpu_calls/stop45_refhang.sh (issue 13): it samples a running hbfd's
ring from host memory (never attaching) and says whether the ring moved (a slow run) or stood still, and then
whose move it was (here: a published request hbfd does not take)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from hbfcommon import ctl
from hbfd.hostring import RingDriver
from hbfd.runner import start_daemon

ROOT = Path(__file__).resolve().parents[2]


def _watch(sock, out, duration):
    return subprocess.Popen([sys.executable, str(ROOT / "bench/ring_watch.py"), "--socket", str(sock),
                             "--out", str(out),
                             "--period", "0.2", "--duration", str(duration), "--still-s", "1.0"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_sidecar_tells_a_moving_ring_from_a_still_one(tmp_path):
    with start_daemon("nominal", workdir=tmp_path, env={"HBFD_THERMAL": "none", "HBFD_ENGINE": "fixed"},
                      pythonpath=[ROOT], timeout_s=90.0) as d:
        with d.client() as c:
            rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
        m = ctl.map_region(rep.ctl_path)
        try:
            drv = RingDriver(m, rep.ring_key)
            stop = threading.Event()

            def traffic():
                k = 0
                while not stop.is_set():
                    drv.wait(drv.issue(arrival_ns=time.monotonic_ns(), address=0x7f0000000000,
                                       media_address=4096 * (k % 64), nbytes=64, op=ctl.HBF_OP_LOAD))
                    k += 1
                    time.sleep(0.02)
            th = threading.Thread(target=traffic)
            th.start()
            p = _watch(d.socket, tmp_path / "a.jsonl", 3.0)
            out, _ = p.communicate(timeout=60)
            stop.set()
            th.join()
            v = json.loads(out.strip().splitlines()[-1])
            assert v["verdict"].startswith("moving"), v
            rows = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
            assert len(rows) >= 5 and rows[-1]["ring"]["answered"] > rows[0]["ring"]["answered"]
            assert rows[-1]["hbfd"]["ring_service"]["requests"] >= rows[0]["ring"]["answered"] > 0
            # a published request hbfd does not take (no tag of this run's key): the ring stands still, hbfd's move
            slot = drv.reserve() % ctl.HBF_RING_SLOTS
            r = m.ring
            r["arrival_ns"][slot], r["media_address"][slot], r["bytes"][slot] = time.monotonic_ns(), 0, 64
            r["thermal_q_ppm"][slot] = 0
            r["seq"][slot] = int(m.ring["seq"].max()) + 1
            p = _watch(d.socket, tmp_path / "b.jsonl", 2.5)
            out, _ = p.communicate(timeout=60)
            v = json.loads(out.strip().splitlines()[-1])
            assert v["verdict"].startswith("still: hbfd has not answered 1 published"), v
            assert v["ring"]["unanswered"] == 1 and v["ring_unchanged_s"] >= 1.0
            rows = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()]
            assert rows[-1]["hbfd"]["foreign_requests"] == 1
        finally:
            m.close()


def test_bad_arguments_are_refused_with_one_line():
    """ring_watch.py and ring_moe.py refuse non-positive periods and limits (exit 2, argparse's one-line error)
    instead of running a watch that never samples or a driver that reports 'stalled' at once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv, what in ((["bench/ring_watch.py", "--socket", "x", "--out", "/tmp/rw.jsonl", "--period", "-1"],
                        "--period"),
                       (["bench/ring_moe.py", "--stall-s", "0"], "--stall-s")):
        r = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert what in r.stderr and "Traceback" not in r.stderr
