"""Recording → WTT trace / real observation on a synthetic n-GPU recording with known delays."""
from __future__ import annotations

import copy
import json

import pytest

from hbfcommon.errors import TraceError
from eidola.from_recording import (build_trace, clock_model, link_latencies, load_recording,
                                        main, observation_from_recording, save_json,
                                        validate_recording)
from eidola.trace import read_trace

from synth_recording import SynthConfig, lat, make_recording


@pytest.mark.parametrize("n,target", [(2, 0), (4, 2), (8, 5)])
def test_wakeups_are_first_seen_minus_target_start_in_target_clock(n, target):
    rec, truth = make_recording(SynthConfig(n_gpus=n, blocks=6, runs=2, seed=n))
    for run in range(2):
        tr = build_trace(rec, target, run)
        assert tr.header.target == target and tr.header.source == "recorded"
        start = truth["runs"][run]["start"][target]
        want = sorted((f["src"], f["wg"], round(f["seen"] - start))
                      for f in truth["runs"][run]["flags"] if f["dst"] == target)
        got_flags = tr.flag_writes()
        assert len(got_flags) == (n - 1) * 6
        by_off = {w.offset: w for w in got_flags}
        got = sorted((w.src, (w.offset // 4 - w.src) // n, w.wakeup_ns) for w in by_off.values())
        assert got == want
        # every flag's value is its sequence number; writes all target the target rank
        assert all(w.value == w.seq and w.dst == target for w in got_flags)
        # data writes present, wakeup = aligned release (clamped at 0)
        assert len(tr.data_writes()) == (n - 1) * 6


def test_release_times_are_aligned_into_target_clock_within_bound():
    cfg = SynthConfig(n_gpus=4, blocks=5, runs=1, seed=9)
    rec, truth = make_recording(cfg)
    target = 1
    tr = build_trace(rec, target, 0)
    cm = clock_model(rec, ref=target)
    start = truth["runs"][0]["start"][target]
    tf = {(f["src"], f["wg"]): f for f in truth["runs"][0]["flags"] if f["dst"] == target}
    for w in tr.flag_writes():
        b = (w.offset // 4 - w.src) // 4
        true_rel = tf[(w.src, b)]["release"] - start
        assert abs(w.release_ns - true_rel) <= cm.bound_ns[w.src] + 1
        # NVLink latency is included in the wakeup: wakeup - release >= the link's one-way delay - bound
        assert w.wakeup_ns - w.release_ns >= lat(cfg, w.src, target) - cm.bound_ns[w.src] - 1


def test_link_latencies_recover_known_delays():
    cfg = SynthConfig(n_gpus=3, blocks=8, runs=3, seed=4, poll_ns=1, local_ns=(10, 20))
    rec, _ = make_recording(cfg)
    cm = clock_model(rec, ref=0)
    lats = link_latencies(rec, cm)
    assert lats, "no uncensored flags"
    for (s, d), v in lats.items():
        # poll granularity 1 ns: seen - release = link delay (+ <1 ns) on the aligned axis
        assert abs(v["median_ns"] - lat(cfg, s, d)) <= v["clock_bound_ns"] + 2


def test_hybrid_policy_replaces_censored_first_seen():
    # local work long (flags arrive before the consumer polls) → many censored flags
    cfg = SynthConfig(n_gpus=2, blocks=16, runs=2, seed=3, local_ns=(100, 3_000), poll_ns=20)
    rec, truth = make_recording(cfg)
    seen = build_trace(rec, 0, 1, policy="seen")
    hyb = build_trace(rec, 0, 1, policy="hybrid")
    assert seen.header.meta["flags_censored"] > 0
    assert hyb.header.meta["flags_censored_replaced"] > 0
    start = truth["runs"][1]["start"][0]
    arrive = {f["wg"]: f["arrive"] - start for f in truth["runs"][1]["flags"] if f["dst"] == 0}
    err_seen = err_hyb = 0.0
    for ws, wh in zip(sorted(seen.flag_writes(), key=lambda w: w.offset),
                      sorted(hyb.flag_writes(), key=lambda w: w.offset)):
        b = (ws.offset // 4 - ws.src) // 2
        err_seen += abs(ws.wakeup_ns - arrive[b])
        err_hyb += abs(wh.wakeup_ns - arrive[b])
        assert wh.wakeup_ns <= ws.wakeup_ns
    assert err_hyb < err_seen


def test_early_flags_clamp_to_zero_and_are_counted():
    # the target launches 2.5 µs after rank 0's flags are already released and arrived
    cfg = SynthConfig(n_gpus=3, blocks=4, runs=1, seed=2, rank_skew_ns=(0, 0, 20_000),
                      compute_ns=(100, 200))
    rec, _ = make_recording(cfg)
    tr = build_trace(rec, 2, 0, policy="hybrid")
    assert tr.header.meta["flags_clamped_to_zero"] > 0
    assert all(w.wakeup_ns >= 0 for w in tr.writes)


def test_observation_of_target(tmp_path):
    rec, truth = make_recording(SynthConfig(n_gpus=4, blocks=4, runs=2, seed=5))
    obs = observation_from_recording(rec, 3, 1)
    t = truth["runs"][1]
    assert obs["kernel_ns"] == round(t["end"][3] - t["start"][3])
    assert len(obs["flags"]) == 3 * 4 and len(obs["workgroups"]) == 4
    assert all(w["wait_ns"] >= 0 for w in obs["workgroups"])
    assert obs["flag_reads"] == sum(f["polls"] for f in obs["flags"])


def test_cli_and_file_round_trip(tmp_path, capsys):
    rec, _ = make_recording(SynthConfig(n_gpus=2, blocks=3, runs=1))
    p = save_json(tmp_path / "rec.json.gz", rec)
    assert load_recording(p)["n_gpus"] == 2
    out = tmp_path / "t.jsonl"
    assert main([str(p), "--target", "1", "-o", str(out), "--observation", str(tmp_path / "o.json")]) == 0
    tr = read_trace(out)
    assert tr.header.target == 1 and len(tr.flag_writes()) == 3
    assert json.loads((tmp_path / "o.json").read_text())["target"] == 1
    assert main([str(p), "--target", "7", "-o", str(out)]) == 2


def test_invalid_recordings_are_named():
    rec, _ = make_recording(SynthConfig(n_gpus=2, blocks=2, runs=1))
    bad = copy.deepcopy(rec)
    bad["runs"][0]["flags"][0]["bogus"] = 1
    with pytest.raises(TraceError) as ei:
        validate_recording(bad)
    assert ei.value.fields["keys"] == ["bogus"]
    bad = copy.deepcopy(rec)
    del bad["runs"][0]["ranks"][1]
    with pytest.raises(TraceError, match="one entry per rank"):
        validate_recording(bad)
    bad = copy.deepcopy(rec)
    bad["runs"][0]["flags"][0]["polls"] = 0
    with pytest.raises(TraceError, match="polls"):
        validate_recording(bad)
    bad = copy.deepcopy(rec)
    bad["format"] = "x"
    with pytest.raises(TraceError):
        validate_recording(bad)
    with pytest.raises(TraceError):
        build_trace(rec, 0, 5)
    with pytest.raises(TraceError):
        build_trace(rec, 0, 0, policy="guess")
