"""CPU checks of bench/explain_devpath.py: what the counters explain of a device-path matrix case."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import explain_devpath as ED  # noqa: E402


def _case(name="reduce_float16_e8192_b8192_w4_g2048", plain_ms=0.010, hbf_ms=0.030, helper=0, waits=0,
          requests=1000, inline=1000, launches=1, resident_blocks=528, inline_ns=None):
    return {"name": name, "status": "ok", "plain_ms": {"median": plain_ms}, "hbf_ms": {"median": hbf_ms},
            "resident_blocks_hbf": resident_blocks, "kernel_plain": {"n_regs": 32, "blocks_per_sm": 16},
            "kernel_hbf": {"n_regs": 128, "blocks_per_sm": 4, "n_spills": 0},
            "counters": {"ops_total": {"requests": requests, "overhead_ns": helper}, "wait_wall_ns": waits,
                         "inline_requests": inline, "launches": launches,
                         **({} if inline_ns is None else {"inline_ns": inline_ns})}}


def test_the_counted_part_is_helper_and_waits_over_the_resident_warps():
    # 2048 blocks of 4 warps, 528 resident blocks: 2112 resident warps share the launch
    r = ED.explain_case(_case(helper=2112 * 4000, waits=2112 * 1000, inline=0), sms=132)
    assert r["resident_warps"] == 528 * 4
    assert r["delta_ns"] == 20000 and r["counted_ns"] == 5000 and r["residual_ns"] == 15000
    assert r["counted_share_of_delta"] == pytest.approx(0.25)
    assert r["residual_ns_per_inline_request"] is None              # nothing inline: no per-request residual
    assert r["blocks_per_sm"] == [16, 4] and r["waves"] == [1, 4]


def test_inline_requests_leave_a_residual_no_counter_holds():
    r = ED.explain_case(_case(inline=1000), sms=132)
    assert r["counted_ns"] == 0 and r["residual_ns"] == 20000
    assert r["residual_ns_per_inline_request"] == pytest.approx(20000 * 2112 / 1000)
    # a grid smaller than the resident blocks: only its own warps share the launch
    r = ED.explain_case(_case(name="reduce_float16_e8192_b8192_w4_g1", inline=32, requests=32), sms=132)
    assert r["resident_warps"] == 4


def test_the_inline_path_time_counts_with_the_helpers_and_its_share_is_apart():
    """Helper ABI 8: a kernel built with HBFCC_INLINE_TIME=1 reports inline_ns; the rule counts it with the helper
    time and the exposed waits: counted = (overhead_ns + inline_ns + wait_wall_ns) / (launches x resident warps)."""
    rw = 2112
    r = ED.explain_case(_case(helper=rw * 2000, waits=rw * 1000, inline_ns=rw * 5000, launches=2), sms=132)
    assert r["counted_ns"] == (2000 + 1000 + 5000) / 2 and r["residual_ns"] == 20000 - 4000
    assert (r["helper_share"], r["inline_share"], r["wait_share"]) == pytest.approx((0.25, 0.625, 0.125))
    assert r["inline_timed"] and r["inline_share_of_delta"] == pytest.approx(2500 / 20000)
    assert r["inline_ns_per_inline_request"] == pytest.approx(rw * 5000 / 1000)
    # a wholly inline kernel: what the counters explain now is the measured inline time
    r = ED.explain_case(_case(inline_ns=rw * 30_000), sms=132)
    assert r["counted_ns"] == 30_000 and r["counted_share_of_delta"] == pytest.approx(1.5)   # over-explained
    assert r["inline_share"] == 1.0 and r["helper_share"] == 0.0
    # an older run (no inline_ns): exactly the rule of before, the inline path's time in the residual
    r = ED.explain_case(_case(inline=1000), sms=132)
    assert r["inline_ns_total"] == 0 and not r["inline_timed"] and r["inline_ns_per_inline_request"] is None
    e = ED.explain({"sources": {"fixed0": {"sms": 132, "cases": [_case(inline_ns=rw * 10_000), _case()]}}})["fixed0"]
    assert e["inline_timed_cases"] == 1 and e["inline_share_of_delta_median"] == pytest.approx(0.25)


@pytest.mark.parametrize("bad", [{"status": "hang"}, {"name": "streams2_reduce_copy_g1024"}, {"plain_ms": None}])
def test_cases_it_cannot_decompose_are_skipped(bad):
    c = _case()
    c.update(bad)
    if c.get("plain_ms") is None:
        del c["plain_ms"]
    assert ED.explain_case(c, sms=132) is None


def test_the_cli_writes_its_json_and_refuses_other_files(tmp_path):
    run = tmp_path / "dm.json"
    run.write_text(json.dumps({"sources": {"fixed0": {"sms": 132, "cases": [_case(), _case(name="x", inline=0)]}}}))
    out = tmp_path / "e.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "explain_devpath.py"), str(run), "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    e = json.loads(out.read_text())["runs"][str(run)]["fixed0"]
    assert len(e["cases"]) == 1 and e["skipped"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "explain_devpath.py"), str(bad), "--out",
                        str(tmp_path / "f.json")], capture_output=True, text=True)
    assert r.returncode == 2 and "not a bench/devpath_matrix.py result" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "f.json").exists()
