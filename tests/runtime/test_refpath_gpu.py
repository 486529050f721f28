"""GPU tests of the device failure policy (marked gpu; skipped cleanly without a device). Each case runs
in its own process (bench/refpath_rate.py children), because a trap ends that process's context:
- hbfd SIGKILLed while rate_instr polls its completions: the kernel ends within 100 ms of the kill,
  Session.synchronize() raises DeviceFailure(DAEMON_LOST) and the context stays usable (exit policy);
- a warp that never calls the helpers waits (shared-memory flag) for a warp whose reference load
  fails: Session.synchronize() must not hang -- the backstop trap ends the kernel and DeviceFailure
  carries backstop="trap". (The first backstop version hung on the H200; this is the check.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "refpath_rate.py"


@pytest.fixture(scope="module")
def builds(gpu, nvcc, tmp_path_factory):
    sys.path.insert(0, str(ROOT / "bench"))
    import refpath_rate as R  # noqa: PLC0415
    d = tmp_path_factory.mktemp("refpath")
    return R.build_variant("new", ROOT / "runtime_cuda" / "src" / "hbf_helpers.cu", [], d)


def _child(which: str, cubin: str, timeout: float) -> dict:
    try:
        r = subprocess.run([sys.executable, str(BENCH), "--child", which, "--cubin", cubin], capture_output=True,
                           text=True, timeout=timeout, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{which}: the child hung for {timeout} s")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("CHILD-JSON ")]
    assert line, r.stdout[-2000:] + r.stderr[-2000:]
    out = json.loads(line[-1][len("CHILD-JSON "):])
    assert "error" not in out, out
    return out


def test_daemon_lost_ends_the_kernel_quickly_and_keeps_the_context(builds):
    r = _child("lost", builds["cubin"], 60)
    assert r["kernel_running_at_kill"] is True
    assert r["device_failure_status"] == "DAEMON_LOST"
    assert r["kernel_end_ms"] is not None and r["kernel_end_ms"] < 100, r
    assert r["synchronize_raised"].startswith("DeviceFailure") and "DAEMON_LOST" in r["synchronize_raised"]
    assert r["context_usable_after"] is True


def test_a_kernel_hung_on_an_exited_warp_is_ended_by_the_backstop(builds):
    r = _child("hang", builds["hang_cubin"], 30)
    assert r["raised"].startswith("DeviceFailure"), r
    assert r["backstop"] == "trap"
    assert r["device_failure_status"] == "DAEMON_LOST"
    assert r["synchronize_returned_ms"] < 5000
