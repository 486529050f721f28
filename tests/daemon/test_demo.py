"""`make demo` (CPU path): hbfd + a second process driving the bundled trace through the ring."""
from __future__ import annotations

import os
import subprocess
import sys

from workloads import demo
from hbfd_harness import ROOT


def test_bundled_trace_is_valid():
    t = demo.load_trace(demo.TRACE)
    assert 2000 <= len(t) <= 10000 and len(t) > 4096          # wraps the ring once
    assert set(t["op"].tolist()) >= {0, 1}
    assert (t["offset"] + t["bytes"] <= demo.RANGE_BYTES).all()


def test_demo_runs_end_to_end(tmp_path):
    env = dict(os.environ, HBFD_DEMO="cpu")
    r = subprocess.run([sys.executable, "-m", "workloads.demo"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "[demo] OK" in out and "READY 5000" in out
    assert "reference requests by state: READY 5000" in out and "device requests by state:    READY 5000" in out
    assert "run        clean" in out and "/proc/" in out
    assert not list(tmp_path.iterdir()), "the demo left files in the working directory"
