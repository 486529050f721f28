"""The runtime's per-kernel counters reach hbfd's summary when a session closes (Report kind
kernel_counters), bounded by the RPC contract's Report limit: the kernels with the fewest requests go
first, and how many is said."""
from __future__ import annotations

import json

import runtime_cuda
from hbfcommon.rpc import REPORT_MAX_BYTES
from runtime_cuda import devstate as D


def _counters(n: int) -> dict:
    kernels = {}
    for i in range(n):
        k = D.hbf_kernel_counters()
        k.launches, k.ops[0].requests = 1, i
        kernels[f"kernel_{i:05d}_" + "x" * 40] = D.kernel_counters_dict(k)
    return {"kernels": kernels, "totals": D.kernel_counters_dict(D.hbf_kernel_counters()), "generation": 1}


def _reports(s) -> list[dict]:
    summ = s.client.call("GetSummary", s.client.pb.GetSummaryRequest())
    return [r["data"] for r in json.loads(summ.summary_json)["reports"] if r.get("kind") == "kernel_counters"]


def test_kernel_counters_report_small_and_bounded(hbfd_daemon):
    s = runtime_cuda.attach(socket=hbfd_daemon[0], cuda=False)
    try:
        s._report_kernel_counters(_counters(3))
        got = _reports(s)[-1]
        assert sorted(got["kernels"]) == sorted(_counters(3)["kernels"]) and "kernels_dropped" not in got
        big = _counters(4000)                      # ~3 MB of JSON: over one Report
        assert len(json.dumps(big)) > REPORT_MAX_BYTES
        s._report_kernel_counters(big)
        got = _reports(s)[-1]
        kept = len(got["kernels"])
        assert 0 < kept < 4000 and got["kernels_dropped"] == 4000 - kept
        assert len(json.dumps(got)) <= REPORT_MAX_BYTES
        reqs = sorted(int(k["ops"]["load"]["requests"]) for k in got["kernels"].values())
        assert reqs[0] >= 4000 - kept               # the busiest kernels are the ones kept
    finally:
        s.close()
