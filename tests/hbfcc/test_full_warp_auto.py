"""HBFCC_FULL_WARP=auto (the default since stop 55; hbfcc/cli.py _full_warp_auto; issue 13): the module built with `1`, then each entry with an
issue group of more than SMALL_GROUP_SITES sites built again with `all`, kept where ptxas gives it no more registers
and no more spill bytes -- on an H100 (stop 53) `all` took the stream copies x1.36 -> x1.29 at the same registers and
cost the unrolled reduce 168 -> 214 registers (x2.08), and no static rule told them apart. What is pinned here: the
pass's per-function scope (meta full_warp_all), the knob, the decision in the artifact, the output being the build
the decision names (byte for byte), and a rejected second build keeping the first output."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hbfcc_testutil as U  # noqa: E402
from test_merge_loads import VEC, run_pass  # noqa: E402

from hbfcc import artifact, knobs  # noqa: E402
from hbfcc.passes import timing as T  # noqa: E402
from hbfcommon.errors import ConfigError  # noqa: E402


def test_the_pass_scope_per_function():
    _, f1 = run_pass(VEC, full_warp="auto")                  # auto is `1` in the pass
    assert f1["max_group_sites"] == 8 and f1["full_warp_scope"] == T.SMALL_GROUP_SITES
    out_all, fa = run_pass(VEC, full_warp="auto", full_warp_all=(f1["name"],))
    assert fa["full_warp_scope"] == T.GROUP_MAX and fa["full_warp_paths"] > f1["full_warp_paths"]
    out_knob, fk = run_pass(VEC, full_warp="all")
    assert out_all == out_knob and fk["full_warp_paths"] == fa["full_warp_paths"]   # the same as the knob at all
    _, fo = run_pass(VEC, full_warp="auto", full_warp_all=("another_kernel",))
    assert fo["full_warp_scope"] == T.SMALL_GROUP_SITES


def test_the_knob_takes_auto_and_loads_first_does_not(monkeypatch):
    monkeypatch.delenv("HBFCC_FULL_WARP", raising=False)
    assert knobs.load().full_warp == "auto"                 # the default (stop 55)
    monkeypatch.setenv("HBFCC_FULL_WARP", "1")
    assert knobs.load().full_warp == "1"
    monkeypatch.setenv("HBFCC_FULL_WARP", "auto")
    assert knobs.load().full_warp == "auto"
    monkeypatch.setenv("HBFCC_LOADS_FIRST", "auto")
    with pytest.raises(ConfigError, match="HBFCC_LOADS_FIRST"):
        knobs.load()


def _build(tmp_path: Path, src: Path, tag: str, **env) -> tuple[dict, bytes, subprocess.CompletedProcess]:
    d = tmp_path / tag
    d.mkdir()
    p = d / src.name
    p.write_text(src.read_text())
    e = U.env_with(HBFCC_ARTIFACT_DIR=d / "store", HBFCC_CACHE_DIR=d / "cache", HBFCC_HELPER_PTX=U.real_helper_ptx(),
                   **env)
    cp = subprocess.run([sys.executable, "-c", "import sys; from hbfcc.cli import ptxas_main; "
                         "sys.exit(ptxas_main(sys.argv[1:]))", "-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"],
                        capture_output=True, text=True, env=e, cwd=d)
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(Path(str(p) + ".o.hbfcc.json").read_text())
    artifact.validate(doc)
    assert p.read_text() == src.read_text()                  # the input is never modified
    return doc, Path(str(p) + ".o").read_bytes(), cp


@pytest.fixture
def real():
    U.tool("ptxas")
    if U.real_helper_ptx() is None:
        pytest.skip("the real helper PTX (make helpers-ptx) is not built")


def test_auto_keeps_all_where_the_registers_do_not_rise_and_the_output_is_that_build(tmp_path, real):
    src = U.REPO / "tests" / "hbfcc" / "merge_fixtures" / "reduce_f16_vec.ptx"
    auto, cub_auto, cp = _build(tmp_path, src, "auto", HBFCC_FULL_WARP="auto")
    one, cub_one, _ = _build(tmp_path, src, "one", HBFCC_FULL_WARP="1")
    every, cub_all, _ = _build(tmp_path, src, "all", HBFCC_FULL_WARP="all")
    k = auto["kernels"][0]
    d = k["full_warp_auto"]
    assert d["registers_1"] == one["kernels"][0]["ptxas_after"]["registers"]
    assert d["registers_all"] == every["kernels"][0]["ptxas_after"]["registers"]
    assert d["chosen"] == ("all" if d["registers_all"] <= d["registers_1"] else "1")
    # the output is the chosen build, byte for byte, and the artifact describes it
    assert cub_auto == (cub_all if d["chosen"] == "all" else cub_one)
    assert k["ptxas_after"]["registers"] == d[f"registers_{d['chosen']}"]
    assert auto["build"]["output_sha256"] == hashlib.sha256(cub_auto).hexdigest()
    assert "full-warp" not in auto["build"]["marker"] and "full-warp 1" in one["build"]["marker"]   # auto: the default
    assert "full_warp_auto" not in one["kernels"][0]


def test_prefetch_group_auto_adds_a_variant_kept_only_where_ptxas_gives_no_more(tmp_path, real):
    """HBFCC_PREFETCH_GROUP=auto (stop 58): the candidates are built a third time, `all` with their group prefetches,
    preferred where neither registers nor spill bytes rise over `1`. On this module ptxas keeps 128 registers with the
    prefetches but spills 8 B more, so `all` is chosen; the decision carries all three counts and the output is that
    build byte for byte. With `1` and `all` pinned to the prefetches (the knob at 1 as the stand-in), the rule's
    other branch: a variant with no rise is chosen and its cubin is the output."""
    src = U.REPO / "tests" / "hbfcc" / "merge_fixtures" / "reduce_f16_vec.ptx"
    auto, cub_auto, _ = _build(tmp_path, src, "auto", HBFCC_PREFETCH_GROUP="auto")
    one, _, _ = _build(tmp_path, src, "one", HBFCC_FULL_WARP="1")
    every, cub_all, _ = _build(tmp_path, src, "all", HBFCC_FULL_WARP="all")
    allpg, cub_allpg, _ = _build(tmp_path, src, "allpg", HBFCC_FULL_WARP="all", HBFCC_PREFETCH_GROUP="1")
    k = auto["kernels"][0]
    d = k["full_warp_auto"]
    pa, p1, pp = (x["kernels"][0]["ptxas_after"] for x in (every, one, allpg))
    assert d["variant"] == "all+pg"
    assert (d["registers_1"], d["registers_all"], d["registers_variant"]) == \
        (p1["registers"], pa["registers"], pp["registers"])

    def fits(p):
        return p["registers"] <= p1["registers"] and \
            p["spill_store_bytes"] + p["spill_load_bytes"] <= p1["spill_store_bytes"] + p1["spill_load_bytes"]
    want = "all+pg" if fits(pp) else "all" if fits(pa) else "1"
    assert d["chosen"] == want
    assert want == "all"          # what ptxas 13.0 does with this module (if it changes, the test says so)
    assert cub_auto == cub_all and k["group_prefetches"] == 0 and cub_allpg != cub_all
    assert "prefetch-group auto" in auto["build"]["marker"]
    # the variant itself: `all` + prefetches is the knob's `all` + `1` for a one-entry module, and its rewrite
    # carries the function in prefetch_group_in
    from hbfcc.rewrite import rewrite_text
    r = rewrite_text(src.read_text(), filename=src.name, full_warp_all=(k["name"],), prefetch_group_in=(k["name"],))
    assert r.meta["timing"]["prefetch_group_in"] == [k["name"]]
    assert r.text.count("prefetch.global.L2") == allpg["kernels"][0]["group_prefetches"] > 0


def test_prefetch_group_auto_keeps_the_variant_where_nothing_rises(tmp_path, real):
    """The stream copy of bench/devpath_cost.py is the case the knob is for (H100, stop 58: x1.29 -> x0.98 at the same
    registers); its Triton PTX is not a fixture, so this pins the same branch on a module whose variant does not
    rise: the Triton fixture set is searched for a candidate that keeps `all+pg`, and its output must be that
    variant's build, with the prefetches in its artifact, and `all` was not built at all."""
    found = None
    for src in sorted((U.REPO / "tests" / "fixtures" / "triton").glob("*.ptx")):
        doc, cub, _ = _build(tmp_path, src, "a_" + src.stem, HBFCC_PREFETCH_GROUP="auto")
        decs = [kk.get("full_warp_auto") for kk in doc["kernels"] if kk.get("full_warp_auto")]
        if decs and all(x["chosen"] == "all+pg" for x in decs):
            found = (src, doc, cub)
            break
    if found is None:
        pytest.skip("no Triton fixture is a candidate whose prefetch variant keeps its registers")
    src, doc, cub = found
    allpg, cub_allpg, _ = _build(tmp_path, src, "p_" + src.stem, HBFCC_FULL_WARP="all", HBFCC_PREFETCH_GROUP="1")
    assert cub == cub_allpg
    assert all(kk["group_prefetches"] > 0 for kk in doc["kernels"] if kk.get("full_warp_auto"))
    # the variant fitted everywhere: `all` was never built (two ptxas runs, as without the knob)
    assert all(kk["full_warp_auto"]["registers_all"] is None for kk in doc["kernels"] if kk.get("full_warp_auto"))


def test_both_knobs_at_auto_make_one_variant_with_both(tmp_path, real):
    """HBFCC_PREFETCH_GROUP=auto and HBFCC_EARLY_CLOCK=auto ride on the same third build (`all+pg+ec`: one ptxas run
    more, not two): the decision names it, and where it is chosen the output is the build with all three knobs on."""
    src = U.REPO / "tests" / "hbfcc" / "merge_fixtures" / "reduce_f16_vec.ptx"        # one group of 8 sites
    auto, cub_auto, _ = _build(tmp_path, src, "auto", HBFCC_PREFETCH_GROUP="auto", HBFCC_EARLY_CLOCK="auto")
    d = auto["kernels"][0]["full_warp_auto"]
    assert d["variant"] == "all+pg+ec"
    full, cub_full, _ = _build(tmp_path, src, "full", HBFCC_FULL_WARP="all", HBFCC_PREFETCH_GROUP="1",
                               HBFCC_EARLY_CLOCK="1")
    assert d["registers_variant"] == full["kernels"][0]["ptxas_after"]["registers"]
    if d["chosen"] == "all+pg+ec":
        assert cub_auto == cub_full
    assert "prefetch-group auto" in auto["build"]["marker"] and "early-clock auto" in auto["build"]["marker"]
    assert not list((tmp_path / "auto").glob("*.hbfcc-fw*"))          # no litter: every saved variant removed


def test_a_module_without_large_groups_builds_once(tmp_path, real):
    src = U.REPO / "tests" / "fixtures" / "triton" / "vector_add_f32.ptx"     # one group of 4 sites
    auto, cub_auto, _ = _build(tmp_path, src, "auto", HBFCC_FULL_WARP="auto")
    one, cub_one, _ = _build(tmp_path, src, "one", HBFCC_FULL_WARP="1")
    assert "full_warp_auto" not in auto["kernels"][0] and cub_auto == cub_one


@pytest.mark.parametrize("beside", [True, False], ids=["beside", "after"])
def test_a_rejected_second_build_keeps_the_first_output(tmp_path, real, monkeypatch, beside):
    """The second (all) ptxas run fails: the `1` build's output is put back, the decision says why, and the run
    goes on (in-process, ptxas's `all` run replaced by a failing one). ``beside``: the `all` build runs beside the
    first (the default, stop 55: its files under the call's fwall/ folder); ``after``: that could not start, so it
    runs after the first, as before."""
    from hbfcc import cli
    src = U.REPO / "tests" / "hbfcc" / "merge_fixtures" / "reduce_f16_vec.ptx"
    one, cub_one, _ = _build(tmp_path, src, "one", HBFCC_FULL_WARP="1")
    d = tmp_path / "fail"
    d.mkdir()
    p = d / src.name
    p.write_text(src.read_text())
    for k, v in dict(HBFCC_ARTIFACT_DIR=d / "store", HBFCC_CACHE_DIR=d / "cache", HBFCC_HELPER_PTX=U.real_helper_ptx(),
                     HBFCC_FULL_WARP="auto").items():
        monkeypatch.setenv(k, str(v))
    real_run, calls = cli._run_capture, []
    if not beside:
        monkeypatch.setattr(cli._FullWarpPrebuild, "start", classmethod(lambda cls, *a, **k: None))

    def run(argv):
        calls.append(argv)
        j = " ".join(argv)
        second = "/fwall/" in j if beside else sum(1 for a in calls if "orig.ptx" not in " ".join(a)) >= 2
        if second:
            return subprocess.CompletedProcess(argv, 255, "", "ptxas fatal: injected by the test")
        return real_run(argv)
    monkeypatch.setattr(cli, "_run_capture", run)
    assert cli.ptxas_main(["-v", "--gpu-name=sm_90a", str(p), "-o", str(p) + ".o"]) == 0
    assert any("/fwall/" in " ".join(a) for a in calls) is beside
    doc = json.loads(Path(str(p) + ".o.hbfcc.json").read_text())
    dec = doc["kernels"][0]["full_warp_auto"]
    assert dec["chosen"] == "1" and "255" in dec["reason"]
    assert Path(str(p) + ".o").read_bytes() == cub_one
    assert not Path(str(p) + ".o.hbfcc-fw1").exists()                   # no litter
