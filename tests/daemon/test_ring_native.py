"""The ring served to a native client (bench/ring_driver/ring_driver.c, compiled here): the C
layout of hbf_ctl.h, store-release/load-acquire handoff, slot reuse past the ring size, and both
polling orders, against a running hbfd."""
import json
import os
import shutil
import subprocess

import pytest

from hbfcommon import ctl
from hbfd_harness import ROOT, start_hbfd

CC = shutil.which("cc") or shutil.which("gcc")


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if not CC:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("drv") / "ring_driver"
    subprocess.run([CC, "-O2", "-std=c11", "-D_GNU_SOURCE", f"-I{ROOT / 'runtime_cuda/include'}", "-o", str(exe),
                    str(ROOT / "bench/ring_driver/ring_driver.c")], check=True)
    return exe


@pytest.mark.parametrize("engine", ["fixed", "auto"])
def test_native_client_round_trips(tmp_path, driver, engine):
    h = start_hbfd(tmp_path, env={"HBFD_ENGINE": engine})
    try:
        with h.client() as c:
            rep = c.call("Attach", workload_pid=os.getpid(), abi_version=ctl.HBF_CTL_ABI_VERSION)
        got = []
        for outstanding, poll, store_ppm in ((1000, "any", 0), (64, "oldest", 200_000)):
            out = subprocess.run([str(driver), rep.ctl_path, str(outstanding), "0.5", "128", str(store_ppm),
                                  str(1 << 30), "7", poll], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "HBF_RING_KEY": str(rep.ring_key)})
            assert out.returncode == 0, (outstanding, poll, out.returncode, out.stderr[-2000:], out.stdout[-2000:])
            r = json.loads(out.stdout)
            assert r["errors"] == 0 and r["requests"] > 0
            assert r["service_ns"]["p50"] > 0 and r["round_trip_ns"]["p50"] >= r["service_ns"]["p50"]
            got.append(r)
        total = sum(r["requests"] for r in got)
        assert total > ctl.HBF_RING_SLOTS            # the ring wrapped: slot reuse was exercised
        with h.client() as c:
            cnt = json.loads(c.call("Status").counters_json)
        assert cnt["reference_requests_by_state"]["READY"] == total
        assert cnt["reference"]["load"]["requests"] + cnt["reference"]["store"]["requests"] == total
        assert cnt["reference"]["load"]["bytes"] + cnt["reference"]["store"]["bytes"] == 128 * total
    finally:
        h.stop()
