"""Fixtures for runtime_cuda tests: a real hbfd on a private socket, GPU detection."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hbfd.runner import start_daemon

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hbfd_daemon(tmp_path_factory):
    """The real daemon (hbfd.runner, nominal profile) on a private socket, ready; yield (socket, summary, proc)."""
    # the thermal model is not under test here (its ROM build takes tens of seconds): none
    env = {"HBFD_THERMAL": os.environ.get("HBF_TEST_HBFD_THERMAL", "none")}
    with start_daemon("nominal", workdir=tmp_path_factory.mktemp("hbfd"), env=env, pythonpath=[ROOT],
                      timeout_s=90.0) as d:
        yield str(d.socket), d.summary, d.proc


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
