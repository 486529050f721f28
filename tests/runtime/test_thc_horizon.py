"""The device's thermal-word validity rule with a validity horizon (runtime_cuda/include/hbf_thc.h, the header
hbf_helpers.cu uses), compiled as host code: a word packed from a snapshot read at `now` with horizon `until`
is valid at t only if its age <= max_age or t < until (never longer: hbfd holds its words only that long); it is
valid whenever its age <= max_age (as without horizons; the age in the stamp's 1024 ns units, as always), and while t < until - 3 stamp units (the horizon is
used); without a horizon the rule is exactly the pre-horizon one (the 40-bit unsigned age) for every age below
half the stamp period; a stamp further ahead than any horizon reads as stale.
"""
from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from hostcc import build_probe, compiler_params

INCLUDE = Path(__file__).resolve().parents[2] / "runtime_cuda" / "include"

PROBE = r"""
#include <cstdio>
#include <cinttypes>
#include "hbf_thc.h"
int main() {
    unsigned long long now, until, max_age, t, q, adm, mode;
    while (scanf("%llu %llu %llu %llu %llu %llu %llu", &now, &until, &max_age, &t, &q, &adm, &mode) == 7) {
        const uint64_t st = hbf_thc_stamp_time(now, until, max_age);
        const uint64_t w = hbf_thc_pack((uint32_t)q, (uint32_t)adm, (uint32_t)mode, st);
        printf("%llu %llu %d %lld %llu\n", (unsigned long long)st, (unsigned long long)w,
               hbf_thc_fresh(w, t, max_age), (long long)hbf_thc_sage(w, t), (unsigned long long)hbf_thc_age(w, t));
    }
    return 0;
}
"""

MASK40 = (1 << 40) - 1
HMAX = 1 << 36                      # HBF_THC_HORIZON_MAX_NS
U64 = (1 << 64) - 1


@pytest.fixture(scope="module", params=compiler_params())
def thc(request, tmp_path_factory):
    exe = build_probe(tmp_path_factory, request.param, "hbf_thc.h", PROBE, INCLUDE)

    def run(rows):
        out = subprocess.run([str(exe)], input="\n".join(" ".join(str(v) for v in r) for r in rows) + "\n",
                             capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(out) == len(rows)
        return [tuple(int(v) for v in line.split()) for line in out]
    return run


def old_fresh(now: int, t: int, max_age: int) -> bool:
    """The pre-horizon rule: the stamp is now, the age the 40-bit unsigned difference."""
    return ((((t >> 10) - (now >> 10)) & MASK40) << 10) <= max_age


def _cases(rng, n, *, horizon: bool):
    rows = []
    for _ in range(n):
        now = rng.choice([rng.randrange(0, 1 << 20), rng.randrange(0, 1 << 52), rng.randrange(0, U64 - (1 << 40)),
                          ((1 << 50) - rng.randrange(0, 1 << 30))])        # around the stamp's wrap too
        max_age = rng.choice([0, 1_000_000, rng.randrange(1, 5_000_000), 1024, 1023])
        if horizon:
            until = now + rng.choice([rng.randrange(0, 2 * max_age + 2), rng.randrange(0, 100_000_000),
                                      rng.randrange(HMAX - 10**6, HMAX + 10**9), U64 - now])
            until = min(until, U64)
            if rng.random() < 0.1:
                until = rng.randrange(0, now + 1)                            # already passed
        else:
            until = 0
        span = max(until - now, 0) + 2 * max_age + 10_000
        t = now + rng.choice([0, rng.randrange(0, span), rng.randrange(0, 1 << 38), max(until, now) - rng.randrange(0, 5000),
                              max(until, now) + rng.randrange(0, 5000), now + max_age, now + max_age + 1024])
        t = min(t, U64, now + (1 << 47))     # ages within a quarter of the stamp period (the 40-bit wrap: 13 days)
        rows.append((now, until, max_age, t, rng.randrange(1, 1_000_001), rng.randrange(2), rng.randrange(4)))
    return rows


def test_horizon_is_sound_and_used(thc):
    rng = random.Random(13)
    rows = _cases(rng, 20000, horizon=True)
    res = thc(rows)
    used = 0
    for (now, until, max_age, t, q, adm, mode), (st, w, fresh, sage, age) in zip(rows, res):
        assert now <= st, (now, until, max_age)
        assert (w & 0xFFFFF) == q and (w >> 20) & 1 == adm and (w >> 21) & 3 == mode and (w >> 23) & 1
        # the age is counted in the stamp's 1024 ns units, as before horizons (old_fresh)
        if fresh:                                                # sound: never past both bounds
            assert old_fresh(now, t, max_age) or t < until, (now, until, max_age, t)
        if old_fresh(now, t, max_age):                           # the max age still holds
            assert fresh, (now, until, max_age, t)
        if max_age and t + 3 * 1024 < min(until, now + HMAX) and until - now > max_age:
            assert fresh, (now, until, max_age, t)               # the horizon is used
            used += st > now
    assert used > 1000


def test_without_a_horizon_the_rule_is_the_old_one(thc):
    rng = random.Random(5)
    rows = _cases(rng, 20000, horizon=False)
    res = thc(rows)
    for (now, until, max_age, t, *_), (st, w, fresh, sage, age) in zip(rows, res):
        assert st == now
        d = ((t >> 10) - (now >> 10)) & MASK40
        if d == 0 or (1 << 40) - d > (HMAX >> 10) + 2:          # all but the stamp's last 68.7 s before its wrap
            assert bool(fresh) == old_fresh(now, t, max_age), (now, max_age, t)
            assert sage == age == d << 10


def test_a_stamp_far_ahead_is_stale_and_near_ahead_is_fresh(thc):
    """Only a stamp at most a horizon ahead reads as a negative age; and a huge max age is still "never stale"."""
    now = 10**15
    rows = [(now, 0, 1_000_000, now - HMAX - 10**6, 5, 1, 0),    # read at `now`, seen from before any horizon
            (now, 0, 1_000_000, now - 5 * 1024, 5, 1, 0),        # a claim stamped a little ahead (another SM)
            (now, now + HMAX + 10**9, 1_000_000, now + 1, 5, 1, 0),  # a horizon beyond the maximum: clamped
            (12345, 0, 1 << 62, 12345 + (1 << 49) + 5 * 1024, 5, 1, 0)]   # "never stale" (the profile harness)
    (_, _, f0, s0, _), (_, _, f1, s1, a1), (st2, _, f2, s2, _), (_, _, f3, s3, _) = thc(rows)
    assert not f0 and s0 > 1 << 49                              # the pre-horizon rule's wrapped (huge) age
    assert f1 and s1 < 0 and a1 == 0
    assert f2 and st2 <= now + HMAX - 1_000_000 and s2 < 0
    assert f3 and s3 == ((1 << 49) // 1024 + 5) * 1024


def test_python_mirror_of_the_horizon_bound():
    """hbfcommon.ctl.HBF_THC_HORIZON_MAX_NS (hbfd's NEVER and its knob's bound) is hbf_thc.h's."""
    import re
    from hbfcommon import ctl
    m = re.search(r"#define\s+HBF_THC_HORIZON_MAX_NS\s+\(1ull\s*<<\s*(\d+)\)", (INCLUDE / "hbf_thc.h").read_text())
    assert m, "HBF_THC_HORIZON_MAX_NS not found in hbf_thc.h"
    assert ctl.HBF_THC_HORIZON_MAX_NS == 1 << int(m.group(1))
