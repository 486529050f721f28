"""Fixtures for runtime_cuda tests: a real hbfd on a private socket, GPU detection."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hbfd_daemon(tmp_path_factory):
    """Start the real daemon (python -m hbfd.cli) with the nominal profile; yield (socket, summary, proc)."""
    d = tmp_path_factory.mktemp("hbfd")
    sock, summary = d / "hbfd.sock", d / "summary.json"
    logf = open(d / "hbfd.log", "w")
    # the thermal model is not under test here (its ROM build takes tens of seconds): none
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HBFD_THERMAL=os.environ.get("HBF_TEST_HBFD_THERMAL", "none"))
    p = subprocess.Popen([sys.executable, "-m", "hbfd.cli", "--profile", "nominal", "--socket", str(sock),
                          "--summary", str(summary)], cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT)
    t = time.time()
    while not sock.exists():
        if p.poll() is not None or time.time() - t > 90:
            pytest.fail(f"hbfd did not start: {(d / 'hbfd.log').read_text()[-3000:]}")
        time.sleep(0.05)
    yield str(sock), summary, p
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
    logf.close()


@pytest.fixture(scope="session")
def gpu():
    from runtime_cuda.cudrv import gpu_available
    if not gpu_available():
        pytest.skip("no NVIDIA GPU / CUDA driver on this machine")
    return True


@pytest.fixture(scope="session")
def nvcc():
    p = shutil.which("nvcc")
    if p is None:
        pytest.skip("nvcc not installed: the helper PTX cannot be built here")
    return p
