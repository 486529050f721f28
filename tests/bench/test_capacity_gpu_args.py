"""bench/capacity_gpu.py (issue 16's H200 proofs, not run on a GPU yet): its plan is checked before anything
starts -- unknown parts, ranges over the profile's capacity, pools under one warp's pages, capacity regions over
the host-memory budget are refused naming the argument; sizes under the issue's proof are warned about."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from hbfcommon.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import capacity_gpu as C  # noqa: E402


def plan(**kw):
    d = dict(parts=",".join(C.PARTS), profile="ocp-sg1", paper_gib=110, paper_frames_gib=2.0, gen_gib=200,
             gen_frames_gib=8.0, rw_gib=32, rw_frames_gib=4.0, chunk_gib=8.0, rw_passes=2, moe_gap_ns=4000,
             stress_warps=4096, max_host_gib=100.0, gen_policy="next:64", gen_kernel="pages", cap_workers=0,
             gen_blocks=1056, rw_kernel="pages", rw_blocks=1056, rw_stride=64)
    d.update(kw)
    return types.SimpleNamespace(**d)


def test_the_issues_plan_passes_without_warnings():
    assert C.check_args(plan()) == []


@pytest.mark.parametrize("kw,field", [({"parts": "paper110,foo"}, "parts"), ({"gen_gib": 300}, "gen_gib"),
                                      ({"rw_frames_gib": 0.0001}, "rw_frames_gib"),
                                      ({"max_host_gib": 1.0}, "max_host_gib"), ({"rw_passes": 0}, "args"),
                                      ({"gen_policy": "next:0"}, "policy"), ({"gen_kernel": "lanes"}, "gen"),
                                      ({"cap_workers": 65}, "gen"), ({"rw_kernel": "lanes"}, "rw"),
                                      ({"rw_blocks": 0}, "rw"), ({"rw_stride": 0}, "rw")])
def test_impossible_plans_are_refused(kw, field):
    with pytest.raises(ConfigError) as ei:
        C.check_args(plan(**kw))
    assert ei.value.fields.get("field") == field


def test_smaller_runs_are_warned_not_the_proof():
    w = C.check_args(plan(gen_gib=16, rw_gib=4))
    assert len(w) == 2 and "not the issue's proof" in w[0]


def test_the_dry_run_builds_and_capacity_admits_every_kernel(tmp_path):
    """``--dry-run`` on the CPU: the plan checked, every kernel (cap_sum_pages, the generated part's warp-per-page
    stream, and cap_rmw_pages, the rw part's, among them) built through hbfcc with the capacity pass and
    capacity-admitted; nothing launched."""
    import os
    import shutil
    import subprocess
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed: the kernels cannot be built here")
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, str(root / "bench/capacity_gpu.py"), "--dry-run", "--parts", "generated",
                        "--gen-policy", "none", "--cap-workers", "4", "--work", str(tmp_path),
                        "--out", str(tmp_path / "out.json")], cwd=root, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, PYTHONPATH=str(root)))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "'cap_sum_pages': True" in p.stdout and "'cap_rmw_pages': True" in p.stdout
    assert "nothing launched" in p.stdout
    p = subprocess.run([sys.executable, str(root / "bench/capacity_gpu.py"), "--dry-run", "--gen-policy", "next:0",
                        "--work", str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(root)))
    assert p.returncode != 0 and "positive integers" in p.stderr


@pytest.mark.parametrize("script,args", [
    ("capacity_gpu.py", ["--parts", "rw", "--dry-run", "--rw-kernel", "foo"]),
    ("capacity_ring.py", ["--pages", "64", "--frames", "16", "--widths", "8", "--rw-passes", "1",
                          "--lanes-per-page", "0"]),
    ("capacity_ring.py", ["--pages", "64", "--frames", "4", "--widths", "8"]),
])
def test_a_bad_plan_is_one_line_not_a_traceback(script, args):
    """The capacity benches refuse a bad plan before anything starts: exit 2, one error line naming it."""
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, str(root / "bench" / script), *args], capture_output=True, text=True,
                       cwd=root, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and f"{script}: error: need" in p.stderr, p.stderr
