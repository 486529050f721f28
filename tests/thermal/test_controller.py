from __future__ import annotations

import numpy as np
import pytest

from hbfd.thermal.controller import LIGHT, NORMAL, SEVERE, SHUTDOWN, PolicyConfig, make_policy, \
    throttled_service_ns

BASE = dict(rtt_c=85.0, ltt_c=95.0, stt_c=100.0, shutdown_c=105.0, hysteresis_k=4.0, light_q_ppm=750_000,
            min_dwell_ticks=10)


def policy(name="hysteresis", **kw):
    return make_policy(PolicyConfig(name=name, **{**BASE, **kw}))


def run(p, temps):
    return [p.decide(i, t) for i, t in enumerate(temps)]


def test_transitions_up_and_down_with_hysteresis():
    p = policy()
    ds = run(p, [90, 95.0, 96, 100.0, 99, 97, 96.5])
    assert [d.mode for d in ds] == [NORMAL, LIGHT, LIGHT, SEVERE, SEVERE, SEVERE, SEVERE]
    assert ds[1].q_ppm == 750_000 and ds[1].admission_open
    assert not ds[3].admission_open
    # falling edge needs T <= STT - 4 and 10 ticks of dwell in Severe
    ds = run(p, [95.9] * 5)
    assert all(d.mode == SEVERE for d in ds)      # dwell not yet met
    assert p.decide(100, 95.9).mode == SEVERE     # 9th tick in Severe
    d = p.decide(101, 95.9)                       # 10th: dwell met
    assert d.mode == LIGHT
    d = p.decide(102, 91.5)                       # below LTT-4 but dwell in Light not met
    assert d.mode == LIGHT
    for k in range(10):
        d = p.decide(103 + k, 90.9)
    assert d.mode == NORMAL and d.q_ppm == 1_000_000
    froms = [(f, t) for _, f, t, _ in p.transitions]
    assert froms == [(NORMAL, LIGHT), (LIGHT, SEVERE), (SEVERE, LIGHT), (LIGHT, NORMAL)]


def test_no_chatter_at_a_threshold():
    p = policy()
    rng = np.random.default_rng(0)
    temps = 95.0 + rng.uniform(-1.0, 1.0, 2000)   # noise around LTT, inside the 4 K band
    run(p, temps)
    assert len(p.transitions) == 1                # entered Light once, never left


def test_several_levels_in_one_tick_and_shutdown_latches():
    p = policy()
    d = p.decide(0, 106.0)
    assert d.mode == SHUTDOWN and not d.admission_open
    assert [t for _, _, t, _ in p.transitions] == [LIGHT, SEVERE, SHUTDOWN]
    assert p.decide(1, 30.0).mode == SHUTDOWN


@pytest.mark.parametrize("name", ["none", "hysteresis", "hysteresis-early", "fixed-cap", "pi"])
def test_scan_absorb_matches_tick_by_tick(name):
    rng = np.random.default_rng(1)
    t = np.concatenate([np.linspace(60, 99, 300), 99 + rng.normal(0, 2, 300), np.linspace(99, 60, 400)])
    ref = policy(name)
    ref_d = [ref.decide(i, x) for i, x in enumerate(t)]
    fast = policy(name)
    i, fast_d = 0, []
    while i < len(t):
        h = fast.scan(t[i:i + 97])
        if h:
            fast.absorb(t[i:i + h])
            fast_d += [fast.decision()] * h
            i += h
        else:
            fast_d.append(fast.decide(i, t[i]))
            i += 1
    assert fast.transitions == ref.transitions
    assert fast_d == ref_d


def test_policies_differ_as_declared():
    hot = [97.0] * 50
    assert run(policy("none"), hot)[-1].q_ppm == 1_000_000
    assert run(policy("hysteresis"), hot)[-1].q_ppm == 750_000
    assert run(policy("hysteresis-early"), hot)[-1].q_ppm == 375_000
    cap = run(policy("fixed-cap", cap_ppm=800_000), [50.0])[-1]
    assert cap.q_ppm == 800_000 and cap.mode == LIGHT
    pi = policy("pi")
    qs = [d.q_ppm for d in run(pi, [93.0] * 200)]
    assert qs[0] < 1_000_000 and qs[-1] < qs[0]            # integral action keeps pushing q down
    assert all(100_000 <= q <= 1_000_000 for q in qs)


def test_q_applied_once_ceil():
    assert throttled_service_ns(1000, 1_000_000) == 1000
    assert throttled_service_ns(1000, 750_000) == 1334     # ceil(1333.33)
    assert throttled_service_ns(3, 999_999) == 4
    assert throttled_service_ns(0, 1) == 0
    # applying q once to a sum equals the device's one-time scaling, never compounded
    s = 12_345
    once = throttled_service_ns(s, 500_000)
    assert once == 24_690 and throttled_service_ns(once, 500_000) != once
    with pytest.raises(ValueError):
        throttled_service_ns(10, 0)
