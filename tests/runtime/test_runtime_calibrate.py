"""Measured deadline bias (runtime_cuda/calibrate.py, hbf_device_state.deadline_bias_ns): the statistics
on CPU, the layout word, the session API; the measurement itself on the GPU (marked gpu)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import runtime_cuda
from hbfcommon.errors import HbfError
from runtime_cuda import calibrate as CAL
from runtime_cuda import devstate as D


def _rows(err: np.ndarray, delay: int) -> np.ndarray:
    t0 = np.arange(err.size, dtype=np.int64) * 100_000 + 1_000_000
    return np.stack([t0, t0, t0 + delay + err, np.zeros_like(t0)], axis=1)


def test_bias_is_the_median_excess_over_the_delay():
    rng = np.random.default_rng(3)
    err = rng.choice([320, 352, 384, 384, 416], size=301).astype(np.int64)
    err[:5] = 9_000                                   # a few preempted samples do not move the median
    cal = CAL.bias_from_rows(_rows(err, 20_000), 20_000)
    assert cal.bias_ns == int(np.median(err)) and cal.n == 301 and cal.delay_ns == 20_000
    assert cal.min_err_ns >= 320 and cal.max_err_ns == 9_000
    assert cal.p5_err_ns <= cal.median_err_ns <= cal.p95_err_ns


def test_too_few_samples_or_an_early_completion_is_loud():
    with pytest.raises(HbfError, match="at least 200"):
        CAL.bias_from_rows(_rows(np.full(199, 384, np.int64), 20_000), 20_000)
    err = np.full(256, 384, np.int64)
    err[7] = -64                                      # the wait returned before the modeled delay
    with pytest.raises(HbfError, match="before its delay"):
        CAL.bias_from_rows(_rows(err, 20_000), 20_000)


def test_bias_word_is_a_host_owned_run_parameter_and_reaches_the_block():
    assert 64 <= D.DEADLINE_BIAS_OFF < 128 and D.DEADLINE_BIAS_OFF % 8 == 0   # line 1 (run parameters)
    assert D.DEADLINE_BIAS_OFF == D.hbf_device_state.deadline_bias_ns.offset
    assert D.hbf_device_state.media.offset == D.HEAD_BYTES                       # nothing else moved
    st = D.new_state(0, None, D.RunParams(deadline_bias_ns=384))
    assert st.deadline_bias_ns == 384
    k = D.hbf_kernel_counters()
    k.bias_clamps = 3
    assert D.kernel_counters_dict(k)["bias_clamps"] == 3


def test_calibrate_without_cuda_is_refused(hbfd_daemon):
    with runtime_cuda.attach(socket=hbfd_daemon[0], cuda=False) as s:
        with pytest.raises(HbfError, match="needs CUDA"):
            s.calibrate()
        assert s.calibration is None and s.deadline_bias_ns == 0


@pytest.mark.gpu
def test_session_calibration_measures_stores_and_restores(gpu, nvcc, hbfd_daemon):
    from runtime_cuda import cudrv
    with runtime_cuda.attach(socket=hbfd_daemon[0]) as s:
        raw = cudrv.mem_alloc(2 << 20)
        s.register_timing_range((raw + 4095) & ~4095, 1 << 20)
        head0 = (ctypes.c_uint8 * D.HEAD_BYTES)()
        cudrv.dtoh(head0, s.state_dptr, 128)
        r = s.calibrate(n=256)
        assert r["n"] == 256 and r["delay_ns"] == 20_000 and r["applied"]
        assert 0 < r["bias_ns"] < 5_000, r               # the helpers' fixed cost: hundreds of ns
        assert r["min_err_ns"] >= 0
        assert s.deadline_bias_ns == r["bias_ns"] and s.calibration == r
        head1 = (ctypes.c_uint8 * D.HEAD_BYTES)()
        cudrv.dtoh(head1, s.state_dptr, 128)
        v = ctypes.c_uint64(0)
        cudrv.dtoh(v, s.state_dptr + D.DEADLINE_BIAS_OFF, 8)
        assert v.value == r["bias_ns"]
        # lines 0-1 restored (ranges, source), except the bias word that was applied
        b0, b1 = bytes(head0[:128]), bytes(head1[:128])
        o = D.DEADLINE_BIAS_OFF
        assert b0[:o] == b1[:o] and b0[o + 8:] == b1[o + 8:]
