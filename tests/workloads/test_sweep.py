"""workloads/sweep.py: profiles x tR x placement x workload, locally and on Ray (a local Ray instance), one
table. The points run for real: hbfd on the derived profile, the CPU trace workload through the ring."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hbfcommon.errors import ConfigError
from workloads import sweep as S
from workloads.demo import make_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("trace") / "t.csv"
    make_trace(p, n=200, seed=5)
    return str(p)


def _spec(trace, **kw):
    base = dict(workload="trace", profiles=("ocp-sg1",), t_read_ns=(2000, 20000), args={"trace": trace})
    return S.SweepSpec(**{**base, **kw})


@pytest.mark.parametrize("kw, what", [
    ({"workload": "nope"}, "unknown workload 'nope'"),
    ({"profiles": ("ocp-sg9",)}, "profile 'ocp-sg9' is neither a bundled profile"),
    ({"profiles": ()}, "no profile"),
    ({"t_read_ns": (0,)}, "tR 0 must be a positive"),
    ({"t_read_ns": ()}, "no tR"),
    ({"placements": ("experts",)}, "placement 'experts' is not one of workload trace's: range"),
    ({"args": {"model": "x"}}, "takes no argument 'model'"),
    ({"timeout_s": 0}, "timeout 0"),
])
def test_spec_refuses_bad_input(trace, kw, what):
    with pytest.raises(ConfigError, match=what):
        _spec(trace, **kw)


def test_spec_refuses_an_invalid_profile_file(trace, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    with pytest.raises(ConfigError, match="bad.json"):
        _spec(trace, profiles=(str(bad),))


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, trace):
    out = tmp_path / "o"
    for argv, what in [
        (["run", "--workload", "trace", "--profiles", "ocp-sg1", "--t-read-ns", "2us", "--out", str(out)],
         "--t-read-ns '2us'"),
        (["run", "--workload", "trace", "--profiles", "ocp-sg1", "--arg", "window=-3", "--out", str(out)],
         "--arg window"),
        (["run", "--workload", "trace", "--profiles", "ocp-sg1", "--arg", "trace=/no/such.csv", "--out", str(out)],
         "is not a file"),
        (["run", "--workload", "trace", "--profiles", "ocp-sg1", "--arg", "windowless", "--out", str(out)],
         "write name=value"),
        (["table", str(out)], "no sweep points"),
    ]:
        assert S.main(argv) == 2
        err = capsys.readouterr().err
        assert what in err and "Traceback" not in err, err
    assert not out.exists()


def test_points_and_ids_are_stable(trace):
    pts = _spec(trace, profiles=("ocp-sg1", "nominal")).points()
    assert [(p.profile, p.t_read_ns, p.placement) for p in pts] == [
        ("ocp-sg1", 2000, "range"), ("ocp-sg1", 20000, "range"), ("nominal", 2000, "range"), ("nominal", 20000, "range")]
    assert len({p.id for p in pts}) == 4
    assert [p.id for p in pts] == [p.id for p in _spec(trace, profiles=("ocp-sg1", "nominal")).points()]
    # the arguments are part of the point
    assert _spec(trace, args={"trace": trace, "window": 8}).points()[0].id != pts[0].id


def _by_tr(results):
    return {r["point"]["t_read_ns"]: r for r in results}


def test_local_sweep_runs_every_point_and_tr_shows(tmp_path, trace):
    out = tmp_path / "sw"
    res = S.run_sweep(_spec(trace), out, jobs=2, progress=False)
    assert [r["status"] for r in res] == ["ok", "ok"], [r.get("reason") for r in res]
    by = _by_tr(res)
    for tr, r in by.items():
        row = r["rows"][0]
        assert row["requests"] == 200 and row["terminal_status"] == "clean"
        assert r["profile"]["t_read_ns"] == tr and r["profile"]["name"] == f"ocp-sg1-tr{tr}"
        # a read costs at least tR in the model
        assert row["modeled_ns_p50"] >= tr
    assert by[20000]["rows"][0]["modeled_ns_p50"] > 5 * by[2000]["rows"][0]["modeled_ns_p50"]
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["points"] == 2 and doc["failed"] == 0 and len(doc["rows"]) == 2
    assert doc["spec"]["t_read_ns"] == [2000, 20000]
    assert (out / "sweep.csv").read_text().splitlines()[0].startswith("id,workload,profile,t_read_ns")
    assert (out / "sweep.md").read_text().count("\n") == 4
    # a rerun skips what is ok; --force reruns
    t_before = {r["id"]: r["started_unix_s"] for r in res}
    again = S.run_sweep(_spec(trace), out, progress=False)
    assert {r["id"]: r["started_unix_s"] for r in again} == t_before
    forced = S.run_sweep(_spec(trace, t_read_ns=(2000,)), out, force=True, progress=False)
    assert forced[0]["started_unix_s"] > t_before[forced[0]["id"]]
    # the table subcommand rebuilds from the points (3 results: the forced one replaced its old file)
    assert S.main(["table", str(out)]) == 0
    assert len(json.loads((out / "sweep.json").read_text())["rows"]) == 2


def _tiny_profile(tmp_path) -> str:
    """ocp-sg1 with 8 MiB of capacity: a valid profile on which the trace's 16 MiB range cannot be registered,
    a real failure inside one point"""
    d = json.loads((S.PROFILE_DIR / "ocp-sg1.json").read_text())
    d["geometry"]["blocks_per_plane"]["value"], d["geometry"]["pages_per_block"]["value"] = 4, 1
    d["media"]["over_provisioning"]["value"] = 0.75
    d["name"] = "ocp-sg1-8mib"
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps(d))
    return str(p)


def test_a_profile_hbfd_would_refuse_is_refused_up_front(trace, tmp_path):
    """the media model's GC rule is the profile's too (hbfcommon.profile.gc_victim_problem): a profile whose
    closed blocks cannot hold its logical pages is refused before any point runs, not by hbfd at start"""
    d = json.loads((S.PROFILE_DIR / "ocp-sg1.json").read_text())
    d["geometry"]["blocks_per_plane"]["value"], d["geometry"]["pages_per_block"]["value"] = 1, 2
    p = tmp_path / "nogc.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="do not leave a GC victim"):
        _spec(trace, profiles=(str(p),))


def test_a_failing_point_is_a_row_and_the_others_finish(tmp_path, trace):
    out = tmp_path / "sw"
    res = S.run_sweep(_spec(trace, profiles=("ocp-sg1", _tiny_profile(tmp_path)), t_read_ns=(2000,)), out, jobs=2,
                      progress=False)
    ok, bad = res
    assert ok["status"] == "ok" and ok["rows"][0]["requests"] == 200
    assert bad["status"] == "failed" and bad["reason"] == "the workload exited 1" and bad["exit_code"] == 1
    assert "RANGE_NO_CAPACITY" in bad["log_tail"] or "capacity" in bad["log_tail"], bad["log_tail"]
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["failed"] == 1 and [r["status"] for r in doc["rows"]] == ["ok", "failed"]
    assert S.main(["table", str(out)]) == 1


def test_a_point_past_its_timeout_is_killed_with_its_daemon(tmp_path, trace):
    out = tmp_path / "sw"
    (r,) = S.run_sweep(_spec(trace, t_read_ns=(2000,), args={"trace": trace, "window": 1}, timeout_s=1.0), out,
                       progress=False)
    assert r["status"] == "failed" and r["reason"].startswith("timed out after 1 s") and r["exit_code"] is None
    # nothing of the killed point still runs: its hbfd was in the killed process group
    tag = r["id"][:40]
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and tag in _cmdline(p)]


def _cmdline(p: Path) -> str:
    try:
        return (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_gpu_workload_without_a_gpu_is_refused_locally(tmp_path):
    if S._gpu_count():
        pytest.skip("a GPU is present")
    spec = S.SweepSpec(workload="qwen3moe", profiles=("ocp-sg1",), placements=("experts",),
                       args={"model": "tiny", "batch": (1,)})
    with pytest.raises(ConfigError, match="needs a GPU and none was found"):
        S.run_sweep(spec, tmp_path / "g", progress=False)
    assert spec.points()[0].args["batch"] == (1,)
    assert "--batch" in S._qwen_command(spec.points()[0], Path("p.json"), tmp_path)


def test_ray_backend_runs_the_same_points(tmp_path, trace):
    """The same run_point as a Ray task on a local Ray instance: the same points, the same rows (the tR effect
    again), results written by the driver."""
    pytest.importorskip("ray")
    out = tmp_path / "sr"
    res = S.run_sweep(_spec(trace), out, backend="ray", jobs=2, progress=False)
    assert [r["status"] for r in res] == ["ok", "ok"], [r.get("reason") for r in res]
    assert [r["id"] for r in res] == [p.id for p in _spec(trace).points()]
    by = _by_tr(res)
    assert by[20000]["rows"][0]["modeled_ns_p50"] > 5 * by[2000]["rows"][0]["modeled_ns_p50"]
    assert by[2000]["rows"][0]["requests"] == 200
    assert sorted(p.name for p in (out / "points").iterdir()) == sorted(f"{r['id']}.json" for r in res)
    assert os.environ.get("RAY_ADDRESS") is None
