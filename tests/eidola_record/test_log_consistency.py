"""The recorder's log → recording conversion and the replay's log → observation conversion agree:
identical device logs on both sides must compare as exactly equal (zero error everywhere)."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon.errors import CudaError
from eidola.compare import compare_observations
from eidola.from_recording import build_trace, observation_from_recording, validate_recording
from workloads.gemv_allreduce.record.record import WG_FIELDS, runs_from_logs
from workloads.gemv_allreduce.record.replay import _observation


class Buf:
    """Device buffer stand-in: the bytes of an array, read back like runtime_cuda's DeviceBuffer."""

    def __init__(self, arr):
        self.raw = np.ascontiguousarray(arr).tobytes()

    def download(self, dtype, count=None, offset=0):
        dt = np.dtype(dtype)
        n = (len(self.raw) - offset) // dt.itemsize if count is None else count
        return np.frombuffer(self.raw, dt, n, offset).copy()


class Rep:
    def __init__(self, t0):
        self.host = type("H", (), {"t0": t0})()

    def accounting(self):
        return {}


def make_logs(n, nb, calls, M, rng):
    y = rng.standard_normal(M).astype(np.float32)
    logs = []
    for r in range(n):
        base = 10_000_000 * (r + 1)
        wg = np.zeros((calls, nb, len(WG_FIELDS)), np.uint64)
        for c in range(calls):
            st = base + c * 100_000 + rng.integers(0, 200, nb)
            steps = np.cumsum(rng.integers(50, 3000, (nb, len(WG_FIELDS))), axis=1)
            wg[c] = (st[:, None] + steps - steps[:, :1]).astype(np.uint64)
        logs.append({"wg": wg,
                     "rel": (wg[:, :, 2:3] + rng.integers(0, 20, (calls, nb, n))).astype(np.uint64),
                     "seen": (wg[:, :, 3:4] + rng.integers(0, 900, (calls, nb, n))).astype(np.uint64),
                     "polls": rng.integers(1, 50, (calls, nb, n)).astype(np.uint32),
                     "ctr": rng.integers(1, 10_000, (calls, 2)).astype(np.uint64),
                     "ectr": rng.integers(0, 100, (calls, 16, 8)).astype(np.uint64),
                     "y": y})
    return logs


@pytest.mark.parametrize("n,target", [(2, 1), (4, 0), (8, 6)])
def test_identical_logs_compare_exactly_equal(n, target):
    rng = np.random.default_rng(n)
    nb, R, warmup, calls = 4, 8, 2, 5
    M = nb * R
    logs = make_logs(n, nb, calls, M, rng)
    runs = runs_from_logs(logs, n=n, nb=nb, R=R, M=M, warmup=warmup, calls=calls)
    rec = {"format": "hbfsim.eidola.recording", "version": 1, "n_gpus": n,
           "workload": {"name": "t", "M": M, "K_per_rank": 8, "blocks": nb, "rows_per_block": R,
                        "warmup": warmup, "seed": 0},
           "buffers": [{"name": "flags", "kind": "flag", "bytes": nb * n * 4},
                       {"name": "partials", "kind": "data", "bytes": 2 * nb * n * R * 4}],
           "clock": {"samples": [{"a": a, "b": b, "t1": 0, "t2": 10_000_000 * (b - a) + 400, "t3": 800}
                                 for a in range(n) for b in range(a + 1, n)]},
           "runs": runs}
    validate_recording(rec)
    L = logs[target]
    bufs = {"wg_log": Buf(L["wg"]), "seen": Buf(L["seen"]), "polls": Buf(L["polls"]),
            "ctr": Buf(L["ctr"]), "y": Buf(L["y"])}
    for k in range(calls - warmup):
        real = observation_from_recording(rec, target, k)
        tr = build_trace(rec, target, k)
        call = warmup + k
        rep = _observation(bufs, tr, Rep(int(L["wg"][call][:, 0].min())), call=call, run=k, n=n,
                           nb=nb, target=target, engine="virtual_loads", M=M, slow_frac=0.0)
        c = compare_observations(real, rep)
        assert c["output"]["bit_identical"]
        assert c["kernel_time"]["error_ns"] == 0
        assert c["flag_seen"]["matched"] == (n - 1) * nb
        assert c["flag_seen"]["only_real"] == c["flag_seen"]["only_replay"] == 0
        assert c["flag_seen"]["max_abs_ns"] == 0
        assert c["wg_wait"]["ks"]["d"] == 0
        assert c["flag_reads"]["error"] == 0 and c["nonflag_reads"]["equal"]
        # the trace's wakeups are exactly the real first-seen times (target clock)
        seen = {(f["src"], f["offset"]): f["seen_ns"] for f in real["flags"]}
        assert all(w.wakeup_ns == max(0, seen[(w.src, w.offset)]) for w in tr.flag_writes())


def test_ranks_disagreeing_on_output_is_an_error():
    rng = np.random.default_rng(0)
    logs = make_logs(2, 2, 2, 8, rng)
    logs[1]["y"] = logs[1]["y"] + np.float32(1)
    with pytest.raises(CudaError, match="disagree"):
        runs_from_logs(logs, n=2, nb=2, R=4, M=8, warmup=0, calls=2)
