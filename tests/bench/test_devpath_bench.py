"""CPU tests of the issue-13 device-path benches (bench/devpath_common.py, devpath_matrix.py,
devpath_cost.py): the supervisor (watchdog, restart after a hang / a fault / a dead child, the child's
process group killed), Little's-law and waves predictions, occupancy, counter deltas, the case list,
and -- where Triton, ptxas and the helper PTX exist -- that the bench's Triton kernels compile for
sm_90a through hbfcc-ptxas, instrumented and admitted. No GPU needed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import devpath_common as DC  # noqa: E402

# ------------------------------------------------------------------------------------------------
# supervisor
# ------------------------------------------------------------------------------------------------
FAKE_CHILD = r'''
import json, os, subprocess, sys, time
sys.path.insert(0, {bench!r})
from devpath_common import emit
start = int(sys.argv[1])
pidfile = sys.argv[2]
n = 7
emit("-", "ready", {{"n_cases": n, "names": [f"c{{i}}" for i in range(n)]}})
print("a line that is not part of the protocol", flush=True)
for i in range(start, n):
    emit(i, "start", {{"name": f"c{{i}}"}})
    if i == 1:      # hangs; leaves a grandchild in its process group (as the child's hbfd is)
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open(pidfile, "w").write(str(g.pid))
        time.sleep(120)
    if i == 3:      # dies inside the case without a fault line
        print("boom: simulated illegal address", file=sys.stderr, flush=True)
        os._exit(5)
    if i == 4:      # reports a fault, then ends (the context would be dead)
        emit(i, "fault", {{"status": "fault", "mine": True}})
        os._exit(3)
    if i == 6:      # longer than the case timeout, but inside a phase that allows it
        emit(i, "phase", {{"phase": "slow", "timeout": 30}})
        time.sleep(1.5)
    emit(i, "end", {{"status": "ok", "i": i}})
emit("-", "done")
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_supervisor_restarts_after_hang_death_and_fault(tmp_path):
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD.format(bench=str(ROOT / "bench")))
    pidfile = tmp_path / "grandchild.pid"
    recs: dict = {}
    echoed: list = []
    t0 = time.monotonic()
    sv = DC.supervise(lambda st: [sys.executable, str(script), str(st), str(pidfile)], n_cases=None,
                      case_timeout=1.0, setup_timeout=20.0, on_record=lambda i, r: recs.__setitem__(i, r),
                      err_dir=tmp_path / "err", tag="fake", echo=echoed.append)
    took = time.monotonic() - t0
    assert sv["n_cases"] == 7
    assert {i: r["status"] for i, r in recs.items()} == {0: "ok", 1: "hang", 2: "ok", 3: "fault", 4: "fault",
                                                        5: "ok", 6: "ok"}
    assert "no end within 1 s" in recs[1]["detail"]
    assert "boom: simulated illegal address" in recs[3]["stderr_tail"]
    assert recs[4].get("mine") is True            # the child's own fault record is kept
    assert [c["start"] for c in sv["children"]] == [0, 2, 4, 5]
    assert [c["outcome"] for c in sv["children"]] == ["hang", "fault", "fault", "done"]
    assert any("not part of the protocol" in e for e in echoed)
    # the hung child's process group was killed, grandchild included
    gpid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(gpid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(gpid)
    assert took < 20


def test_supervisor_gives_up_on_a_child_that_never_starts(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import sys; print('setup failed', file=sys.stderr); sys.exit(2)\n")
    recs: dict = {}
    sv = DC.supervise(lambda st: [sys.executable, str(script)], n_cases=3, case_timeout=1.0, setup_timeout=10.0,
                      on_record=lambda i, r: recs.__setitem__(i, r), err_dir=tmp_path / "err", tag="broken",
                      max_failures=2)
    assert len(sv["children"]) == 2
    assert {i: r["status"] for i, r in recs.items()} == {0: "not_run", 1: "not_run", 2: "not_run"}
    assert "setup failed" in sv["children"][0]["stderr_tail"]
    assert recs[0]["detail"] == "2 children in a row made no progress (last: exit rc 2: setup failed)"


def test_supervisor_setup_timeout_kills_a_stalled_child(tmp_path):
    script = tmp_path / "stall.py"
    script.write_text("import time; time.sleep(120)\n")
    recs: dict = {}
    t0 = time.monotonic()
    sv = DC.supervise(lambda st: [sys.executable, str(script)], n_cases=1, case_timeout=1.0, setup_timeout=0.5,
                      on_record=lambda i, r: recs.__setitem__(i, r), err_dir=tmp_path / "err", tag="stall",
                      max_failures=1)
    assert time.monotonic() - t0 < 15
    assert sv["children"][0]["outcome"] == "setup_timeout"
    assert recs == {0: {"status": "not_run", "detail": "1 children in a row made no progress (last: setup_timeout)"}}


BUDGET_CHILD = r'''
import sys, time
sys.path.insert(0, {bench!r})
from devpath_common import emit
emit("-", "ready", {{"n_cases": 10}})
for i in range(int(sys.argv[1]), 10):
    emit(i, "start", {{}})
    time.sleep(0.4)
    emit(i, "end", {{"status": "ok"}})
emit("-", "done")
'''


def test_supervisor_time_budget(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(BUDGET_CHILD.format(bench=str(ROOT / "bench")))
    recs: dict = {}
    t0 = time.monotonic()
    sv = DC.supervise(lambda st: [sys.executable, str(script), str(st)], n_cases=None, case_timeout=5.0,
                      setup_timeout=20.0, on_record=lambda i, r: recs.__setitem__(i, r), err_dir=tmp_path / "err",
                      tag="slow", stop_at=time.monotonic() + 3.0)
    assert time.monotonic() - t0 < 10                        # 10 cases x 0.4 s would take 4 s and more
    assert sv["budget_hit"] and sorted(recs) == list(range(10))
    st = [recs[i]["status"] for i in range(10)]
    k = st.index("not_run")
    assert 1 <= k <= 7 and st[:k] == ["ok"] * k and st[k:] == ["not_run"] * (10 - k)
    assert "during the case" in recs[k]["detail"] and "before the case" in recs[9]["detail"]
    assert [c["outcome"] for c in sv["children"]] == ["budget"]


def test_protocol_line_roundtrip(capsys):
    DC.emit(3, "end", {"status": "ok", "text": "a\nb"})
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert DC.parse_line(line) == (3, "end", {"status": "ok", "text": "a\nb"})
    assert DC.parse_line("@@ - ready {}\n") == ("-", "ready", {})
    assert DC.parse_line("hello") is None


# ------------------------------------------------------------------------------------------------
# predictions, occupancy, statistics, counters
# ------------------------------------------------------------------------------------------------
def test_littles_law():
    r = DC.littles_law(total_requests=1000, warps_in_flight=10, inflight_per_warp=2, latency_ns=20_000,
                       bytes_per_request=512)
    assert r["requests_in_flight"] == 20
    assert r["time_ns"] == pytest.approx(1_000_000)
    assert r["bytes_in_flight"] == 10240
    assert r["bandwidth_GBps"] == pytest.approx(0.512)
    with pytest.raises(ValueError):
        DC.littles_law(total_requests=1, warps_in_flight=0, inflight_per_warp=1, latency_ns=1)


def test_waves_time():
    assert DC.waves_time_ns(grid=2112, resident_blocks=2112, rounds_per_block=4, round_ns=20_000) == 80_000
    assert DC.waves_time_ns(grid=2113, resident_blocks=2112, rounds_per_block=4, round_ns=20_000) == 160_000
    with pytest.raises(ValueError):
        DC.waves_time_ns(grid=1, resident_blocks=0, rounds_per_block=1, round_ns=1)


def test_little_model_is_consistent():
    import devpath_cost as DCO
    resident, warps, rounds, k, L = 1056, 4, 4, 2, 20_000
    grid = 8 * resident
    req = grid * warps * rounds * k
    counters = {"ops_total": {"requests": req, "bytes": req * 512},
                "per_request": {"overhead_ns": 500.0, "modeled_ns": float(L)}, "per_wait": {"wait_overhead_ns": 100.0}}
    m = DCO.little_model(grid=grid, resident_blocks=resident, warps=warps, rounds=rounds, total_requests=req,
                         latency_ns=L, measured_ns=8 * rounds * L * 1.03, counters=counters)
    assert m["requests_per_warp_round"] == pytest.approx(k)
    assert m["little"]["time_ns"] == pytest.approx(m["waves_ns"]) == pytest.approx(8 * rounds * L)
    assert m["measured_over_little"] == pytest.approx(1.03)
    assert m["within_5pct"] is True
    assert m["round_measured_ns"] == pytest.approx(1.03 * L)
    assert m["round_explained_ns"] == pytest.approx(L + k * 500 + 100)
    assert m["little"]["bytes_in_flight"] == resident * warps * k * 512
    m2 = DCO.little_model(grid=grid, resident_blocks=resident, warps=warps, rounds=rounds, total_requests=req,
                          latency_ns=L, measured_ns=8 * rounds * L * 1.2, counters=counters)
    assert m2["within_5pct"] is False


def test_blocks_per_sm_matches_hbfcc_rule_and_bounds_shared_memory():
    # the counts hbfcc's occupancy guard reports for these register counts (128-thread blocks)
    assert DC.blocks_per_sm(72, 128) == 7
    assert DC.blocks_per_sm(64, 128) == 8
    assert DC.blocks_per_sm(27, 128) == 16
    assert DC.blocks_per_sm(106, 128) == 4
    assert DC.blocks_per_sm(16, 1024) == 2                     # threads bound
    assert DC.blocks_per_sm(16, 32) == 32                      # block bound
    assert DC.blocks_per_sm(32, 128, smem=100 * 1024) == 2     # shared memory bound
    with pytest.raises(ValueError):
        DC.blocks_per_sm(32, 0)


def test_stats():
    s = DC.stats([5, 1, 3, 2, 4])
    assert (s["n"], s["median"], s["min"], s["max"], s["mean"]) == (5, 3, 1, 5, 3)
    assert s["p10"] == pytest.approx(1.4) and s["p90"] == pytest.approx(4.6)
    assert DC.stats([]) == {"n": 0}


def _kc(req, ovh, waits=0, wait_over=0, status=None):
    ops = {op: {f: 0 for f in ("requests", "bytes", "modeled_ns", "wall_ns", "service_ns", "overhead_ns")}
           for op in ("load", "store", "atomic", "cpasync")}
    ops["load"].update(requests=req, bytes=req * 64, overhead_ns=ovh, modeled_ns=req * 1000)
    return {"ops": ops, "status": status or {}, "wait_calls": waits, "wait_wall_ns": 0, "wait_overhead_ns": wait_over,
            "launches": 1, "kstart_ns": 123, "kend_ns": 456}


def test_counter_delta_and_summary():
    before = {"k_hbf": _kc(10, 1000, 5, 50, {"READY": 10})}
    after = {"k_hbf": _kc(30, 5000, 15, 250, {"READY": 30}), "other": _kc(1, 1)}
    d = DC.kernel_delta(before, after, ["k_hbf", "absent"])
    assert d["ops"]["load"]["requests"] == 20 and d["ops"]["load"]["overhead_ns"] == 4000
    assert d["status"] == {"READY": 20} and "kstart_ns" not in d
    s = DC.csummary(d)
    assert s["ops_total"]["requests"] == 20 and s["requests_by_op"] == {"load": 20}
    assert s["per_request"]["overhead_ns"] == 200 and s["per_request"]["modeled_ns"] == 1000
    assert s["per_wait"]["wait_overhead_ns"] == 20
    assert s["launches"] == 0
    # a kernel that first appears in `after` counts from zero; fields the runtime adds later are kept
    a2 = {"new_hbf": dict(_kc(4, 40), slack_ns=7)}
    s2 = DC.csummary(DC.kernel_delta({}, a2, ["new_hbf"]))
    assert s2["ops_total"]["requests"] == 4 and s2["slack_ns"] == 7
    assert DC.csummary({}) == {}


def test_classify_exception():
    from hbfcommon.errors import CudaError, ErrorCode, HbfError, RangeError
    assert DC.classify_exception(CudaError("cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")) == "fault"
    assert DC.classify_exception(RuntimeError("CUDA error: an illegal memory access was encountered")) == "fault"
    assert DC.classify_exception(RangeError("refused", code=ErrorCode.RANGE_ADMITTED)) == "refused"
    assert DC.classify_exception(HbfError("refused", code=ErrorCode.LAUNCH_REFUSED)) == "refused"
    assert DC.classify_exception(KeyError("x")) == "error"


def test_source_profiles(tmp_path):
    from hbfcommon.profile import load_profile
    for src, (kind, ns) in DC.SOURCES.items():
        p = load_profile(DC.source_profile(tmp_path, src))
        assert p.timing_model.timing_source == kind
        if ns is not None:
            assert p.timing_model.fixed.read_ns == ns and p.timing_model.fixed.write_ns == ns
    with pytest.raises(SystemExit):
        DC.source_profile(tmp_path, "nope")


def test_nvcc_module_doc():
    doc = {"schema": "hbfcc.admission.nvcc", "modules": [
        {"ptxas": {"target": "compute_90"}, "kernels": [{"name": "a"}]},
        {"ptxas": {"target": "sm_90a"}, "kernels": [{"name": "b"}]}]}
    assert DC.nvcc_module_doc(doc)["kernels"][0]["name"] == "b"
    assert DC.nvcc_module_doc({"modules": [{"kernels": []}]}) == {"kernels": []}
    assert DC.nvcc_module_doc({}) is None


# ------------------------------------------------------------------------------------------------
# case lists
# ------------------------------------------------------------------------------------------------
def test_matrix_case_list_covers_the_issue():
    import devpath_matrix as M
    full = M.case_list(132)
    quick = M.case_list(132, quick=True)
    names = [c["name"] for c in full]
    assert len(set(names)) == len(names)
    assert {c["name"] for c in quick} < set(names)
    assert names[:len(quick)] == [c["name"] for c in quick]        # one per dimension first (time budget)
    tri = [c for c in full if c["kind"] == "triton"]
    # the issue's exact cases
    assert "reduce_float16_e8192_b8192_w4_g1024" in names and "reduce_float16_e8192_b8192_w4_g2048" in names
    assert "reduce_float16_e65536_b65536_w4_g512" in names
    for cases in (full, quick):
        t = [c for c in cases if c["kind"] == "triton"]
        assert {c["warps"] for c in t} >= {1, 4, 32}
        assert min(c["grid"] for c in t) == 1 and max(c["grid_over_bound"] for c in t) >= 10
        assert any(c["n"] % 16 for c in t)                                 # a masked tail
        assert {c["dtype"] for c in t} >= {"int8", "float16", "float32"}
        assert min(c["load_bytes_per_block"] for c in t) == 1024
        assert max(c["load_bytes_per_block"] for c in t) == 256 * 1024
        assert {"hist", "add4", "copy", "reduce"} <= {c["kernel"] for c in t}
        assert any(c["register"] == "inout" for c in t)                    # stores/atomics on a range
        assert any(c["kind"] == "streams2" for c in cases) and any(c["kind"] == "nvcc" for c in cases)
    assert {c["warps"] for c in tri} == {1, 2, 4, 8, 32}
    assert not [c for c in M.case_list(132, nvcc=False) if c["kind"] == "nvcc"]
    assert M.resident_bound(132, 4) == 2112 and M.resident_bound(132, 32) == 264
    assert [c["name"] for c in M.select(full, "nv_,_tail")] == [c["name"] for c in full
                                                               if "nv_" in c["name"] or "_tail" in c["name"]]
    # every Triton spec has what warm() needs: one int per integer argument
    for s in M.specs_of(full):
        n_ints = sum(1 for _n, ty in DC.KERNEL_ARGS[s["kernel"]] if not ty.startswith("*") and ty != "IN")
        assert len(s["ints"]) == n_ints


def test_cost_parts_and_specs():
    import devpath_cost as DCO
    assert DCO.select_parts("stream") == ["stream_reduce", "stream_copy", "stream_sreduce", "stream_scopy"]
    assert DCO.select_parts("little") == [f"little_e{e}_b{b}" for e, b in DCO.LITTLE]
    with pytest.raises(SystemExit):
        DCO.select_parts("nope")
    assert DCO.SOURCES_IN_ORDER == ("fixed0", "fixed2us", "fixed20us")
    for name in DCO.PARTS:
        fn, _v = DCO.part_run(name)
        assert callable(fn)
    s = DCO.stream_spec("reduce", 1.0)
    assert s["n"] * 2 == 1 << 30 and s["grid"] == s["n"] // DCO.STREAM_EPP and s["grid"] > 10 * 2112
    summary = DCO.summarize({"stream_reduce": {"pairs": {"pair_ratio": {"median": 1.2, "p10": 1.1, "p90": 1.3}},
                                               "meets_goal": True, "status": "ok"},
                             "probe": {"status": "hang"}})
    assert summary["stream_reduce_ratio"]["median"] == 1.2 and summary["status"] == {"stream_reduce": "ok",
                                                                                       "probe": "hang"}


def test_cli_arguments_are_checked():
    for script, bad in (("devpath_matrix.py", ["--sources", "fixed0,nope"]), ("devpath_cost.py", ["--parts", "nope"])):
        r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--out", "/nonexistent/x", *bad],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
        assert r.returncode != 0 and "nope" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------------
# the bench's Triton kernels, compiled for sm_90a on the CPU through hbfcc-ptxas
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_probe_kernels_compile_instrumented_and_admitted(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from hbfcommon import resources
    if shutil.which("ptxas") is None or not resources.helper_ptx_path("direct").is_file():
        pytest.skip("ptxas or the helper PTX (make helpers-ptx) missing")
    env = DC.toolchain_env(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    import devpath_cost as DCO
    K = DC.load_kernels(tmp_path)
    res = DC.cpu_check(K, [DCO.probe_spec(), DCO.consume_spec()])
    assert len(res) == 2
    for key, r in res.items():
        assert r["ok"], (key, r)
        assert r["hbf"]["sites"] >= 2
    # the probes' use of the loaded value is where hbfcc waits: one wait per round, none at issue
    lat = res[repr(DC.spec_key(DCO.probe_spec()))]["hbf"]
    assert lat["waits"] == 1


def test_back_to_back_ratio_and_its_guard():
    import devpath_matrix as DM
    rec = {"kernel_hbf": {"has_hb_issue": True, "admitted": True, "instrumented": True},
           "identical": {"y": True}, "plain_ms": {"median": 0.01}, "hbf_ms": {"median": 0.05},
           "plain_b2b_ms": {"median": 0.01}, "hbf_b2b_ms": {"median": 0.013}}
    DM._finished(rec)
    assert abs(rec["ratio"] - 5.0) < 1e-9 and abs(rec["ratio_b2b"] - 1.3) < 1e-9
    res = {"sources": {"fixed0": {"cases": [dict(rec, name="a", status="ok"),
                                            dict(rec, name="b", status="ok", ratio_b2b=None)]}}}
    sm = DM.summarize(res)["fixed0"]
    assert sm["ratio"]["n"] == 2 and sm["ratio_b2b"]["n"] == 1 and abs(sm["ratio_b2b"]["median"] - 1.3) < 1e-9
    ctx = DM.Ctx()
    ctx.b2b, ctx.rep_limit_s = 10, 1.0
    assert DM._b2b_for(ctx, 0.001) == 10
    assert DM._b2b_for(ctx, 0.5) == 0            # 10 launches of a 0.5 s kernel: past twice the rep limit
    ctx.b2b = 0
    assert DM._b2b_for(ctx, 0.001) == 0
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "devpath_matrix.py"), "--out", "/nonexistent/x",
                        "--b2b", "-1"], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       timeout=60)
    assert r.returncode != 0 and "--b2b" in r.stderr and "Traceback" not in r.stderr
