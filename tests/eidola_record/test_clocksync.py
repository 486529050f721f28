"""Clock alignment on synthetic clocks: known offsets, drift, asymmetric one-way delays."""
from __future__ import annotations

import random

import pytest

from hbfcommon.errors import TraceError
from eidola.clocksync import (PingSample, align, compose, estimate_pair, estimate_pairs,
                                   sample_bound_ns, sample_offset_ns)


class Clock:
    """c(r) = off + (1 + drift_ppb·1e-9)·r, optionally floored to a resolution grid."""

    def __init__(self, off_ns: float, drift_ppb: float = 0.0, res_ns: int = 0):
        self.off, self.k, self.res = off_ns, drift_ppb * 1e-9, res_ns

    def exact(self, r: float) -> float:
        return self.off + (1 + self.k) * r

    def __call__(self, r: float) -> int:
        v = self.exact(r)
        if self.res:
            return int(v // self.res) * self.res
        return int(round(v))


def pingpong(rng, ca, cb, a, b, r0, n, d_ab=(300, 900), d_ba=(300, 400), hold=(0, 50), spacing=2000):
    """n round trips a→b→a starting at real time r0; returns samples and their real send times."""
    out = []
    r = r0
    for _ in range(n):
        d1 = rng.uniform(*d_ab)
        h = rng.uniform(*hold)
        d2 = rng.uniform(*d_ba)
        t1, t2, t2s, t3 = ca(r), cb(r + d1), cb(r + d1 + h), ca(r + d1 + h + d2)
        out.append(PingSample(a=a, b=b, t1=t1, t2=t2, t3=t3, t2s=t2s))
        r += spacing
    return out


def test_single_sample_error_is_half_asymmetry_and_within_rtt_half():
    ca, cb = Clock(5_000_000), Clock(1_234_567)
    # d1 = 700 (a->b), d2 = 300 (b->a), no hold
    s = PingSample(a=0, b=1, t1=ca(0), t2=cb(700), t3=ca(1000))
    theta = 5_000_000 - 1_234_567
    assert s.rtt_ns == 1000
    assert sample_offset_ns(s) - theta == pytest.approx((300 - 700) / 2)
    assert abs(sample_offset_ns(s) - theta) <= sample_bound_ns(s)


def test_hold_time_at_responder_is_removed_from_rtt():
    ca, cb = Clock(0), Clock(-10_000)
    s = PingSample(a=0, b=1, t1=ca(0), t2=cb(400), t2s=cb(900), t3=ca(1300))
    assert s.rtt_ns == 800
    assert sample_offset_ns(s) == pytest.approx(10_000)  # symmetric 400/400 → exact


@pytest.mark.parametrize("seed", range(5))
def test_min_rtt_sample_recovers_offset_within_bound_asymmetric(seed):
    rng = random.Random(seed)
    theta_true = rng.uniform(-5e6, 5e6)
    ca, cb = Clock(theta_true), Clock(0)
    # strongly asymmetric: a->b 300..3000 ns, b->a 200..260 ns
    ss = pingpong(rng, ca, cb, 0, 1, 1e6, 200, d_ab=(300, 3000), d_ba=(200, 260))
    est = estimate_pair(ss)
    assert est.rtt_ns == min(s.rtt_ns for s in ss)
    assert abs(est.offset_ns - theta_true) <= est.bound_ns + 1  # +1: integer rounding of stamps
    # the min-RTT choice is much tighter than a typical sample
    assert est.bound_ns < sorted(s.rtt_ns for s in ss)[len(ss) // 2] / 2


def test_timer_resolution_is_in_the_bound():
    rng = random.Random(7)
    for trial in range(50):
        theta_true = rng.uniform(-1e6, 1e6)
        ca, cb = Clock(theta_true, res_ns=32), Clock(rng.uniform(0, 31), res_ns=32)
        ss = pingpong(rng, ca, cb, 0, 1, rng.uniform(0, 1e6), 20, d_ab=(250, 600), d_ba=(250, 300))
        est = estimate_pair(ss, resolution_ns=32)
        truth = theta_true - cb.off
        assert abs(est.offset_ns - truth) <= est.bound_ns, (trial, est, truth)


def test_drift_is_estimated_from_start_and_end_windows():
    rng = random.Random(3)
    # b runs 20 ppm fast relative to real time; a exact. theta(r) = c_a(r) - c_b(r) = 1e5 - 20e-6 r
    ca, cb = Clock(100_000), Clock(0, drift_ppb=20_000)
    start = pingpong(rng, ca, cb, 0, 1, 0, 50, d_ab=(300, 320), d_ba=(300, 320))
    end = pingpong(rng, ca, cb, 0, 1, 50e6, 50, d_ab=(300, 320), d_ba=(300, 320))
    est = estimate_pair(start + end)
    assert est.drift_estimated
    assert est.drift_ppb == pytest.approx(-20_000, rel=0.01)
    model = compose([est], ref=0)
    # A stamp of rank 1 at real time 25 ms maps onto rank 0's clock within the composed bound.
    r = 25e6
    assert abs(model.to_ref(1, cb(r)) - ca(r)) <= model.bound_ns[1] + 1
    # Without the end window the midpoint error is the drift (500 ns) — the two-window fit fixes it.
    est0 = estimate_pair(start)
    assert not est0.drift_estimated
    m0 = compose([est0], ref=0)
    assert abs(m0.to_ref(1, cb(r)) - ca(r)) > 400


def test_compose_four_ranks_full_mesh_and_chain():
    rng = random.Random(11)
    offs = {0: 0.0, 1: 3_000_000.0, 2: -7_500_000.0, 3: 123_456.0}
    clocks = {r: Clock(o) for r, o in offs.items()}
    samples = []
    for a in range(4):
        for b in range(4):
            if a < b:
                samples += pingpong(rng, clocks[a], clocks[b], a, b, 1e5 * (a + 1) * (b + 1), 64)
    for ref in (0, 2):
        model = align(samples, ref=ref)
        assert set(model.offset_ns) == {0, 1, 2, 3}
        for r in range(4):
            truth = offs[r] - offs[ref]
            assert abs(model.offset_ns[r] - truth) <= model.bound_ns[r] + 1
            # conversion round-trips
            assert abs(model.from_ref(r, model.to_ref(r, 1_000_000)) - 1_000_000) <= 1
    # chain only 0-1, 1-2, 2-3: rank 3 composes through 1 and 2 and the bounds add up
    chain = [s for s in samples if (s.a, s.b) in {(0, 1), (1, 2), (2, 3)}]
    model = align(chain, ref=0)
    assert model.path[3] == (3, 2, 1, 0)
    pe = estimate_pairs(chain)
    assert model.bound_ns[3] == pytest.approx(sum(p.bound_ns for p in pe.values()))
    assert abs(model.offset_ns[3] - offs[3]) <= model.bound_ns[3] + 3


def test_reverse_direction_samples_are_usable():
    ca, cb = Clock(0), Clock(50_000)
    # only b initiated
    s = PingSample(a=1, b=0, t1=cb(0), t2=ca(400), t3=cb(800))
    model = compose(estimate_pairs([s]), ref=0)
    assert model.offset_ns[1] == pytest.approx(50_000)
    assert model.to_ref(1, 50_000 + 123) == 123


def test_disconnected_rank_and_bad_samples_are_errors():
    ca, cb = Clock(0), Clock(10)
    s = PingSample(a=0, b=1, t1=ca(0), t2=cb(400), t3=ca(800))
    with pytest.raises(TraceError) as ei:
        align([s], ref=0, ranks=[0, 1, 2])
    assert ei.value.fields["missing"] == [2]
    with pytest.raises(TraceError):
        PingSample(a=0, b=1, t1=100, t2=0, t3=50)       # t3 < t1
    with pytest.raises(TraceError):
        PingSample(a=0, b=0, t1=0, t2=0, t3=50)         # same rank
    with pytest.raises(TraceError):
        PingSample(a=0, b=1, t1=0, t2=0, t2s=100, t3=50)  # hold longer than the round trip
    with pytest.raises(TraceError):
        PingSample.from_dict({"a": 0, "b": 1, "t1": 0, "t2": 0, "t3": 5, "x": 1})
    with pytest.raises(TraceError):
        estimate_pair([])
