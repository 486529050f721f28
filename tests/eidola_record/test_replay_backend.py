"""The one-GPU replay backend's CPU-checkable contract: same operands as the recorder, loud refusal
when the recording lacks what a replay needs (no GPU touched)."""
from __future__ import annotations

import numpy as np
import pytest

from hbfcommon.errors import ConfigError, TraceError
from eidola.from_recording import build_trace
from workloads.gemv_allreduce.record.record import rank_inputs
from workloads.gemv_allreduce.record.replay import replay_observations, target_inputs

from synth_recording import SynthConfig, make_recording


def test_replay_regenerates_the_recorded_operands_of_the_target():
    wl = {"seed": 77, "M": 16, "K_per_rank": 8}
    gen = rank_inputs(77, 16, 8)
    ranks = [next(gen) for _ in range(3)]
    for t in range(3):
        W, x = target_inputs(wl, t)
        assert W.dtype == np.float32 and W.shape == (16, 8) and x.shape == (8,)
        assert np.array_equal(W, ranks[t][0]) and np.array_equal(x, ranks[t][1])
    assert not np.array_equal(ranks[0][0], ranks[1][0])


def _rec():
    rec, _ = make_recording(SynthConfig(n_gpus=2, blocks=2, runs=1))
    rec["workload"] = {"name": "gemv_allreduce.record", "M": 16, "K_per_rank": 8, "blocks": 2,
                       "rows_per_block": 8, "seed": 1, "warmup": 0}
    return rec


def test_replay_refuses_without_inbox_snapshot():
    rec = _rec()
    tr = build_trace(rec, 0, 0)
    with pytest.raises(TraceError, match="inbox snapshot"):
        replay_observations([tr], engine="virtual_loads", recording=rec, target=0)


def test_replay_refuses_unknown_engine_and_bad_snapshot(tmp_path):
    rec = _rec()
    tr = build_trace(rec, 0, 0)
    with pytest.raises(ConfigError):
        replay_observations([tr], engine="carrier_pigeon", recording=rec, target=0)
    f = tmp_path / "inbox.npy"
    np.save(f, np.zeros((2, 2, 2, 4), np.float32))   # rows_per_block is 8, not 4
    rec["meta"] = {"inbox_files": [str(f), str(f)]}
    with pytest.raises(TraceError, match="wrong shape"):
        replay_observations([tr], engine="eidolon_kernel", recording=rec, target=0)
