"""hb_from_leader's builds (runtime_cuda/src/hbf_ptx.cuh; issue 13, the 48-layer sg2 stall of stop 45).

The stall's picture: a lane took ptxas's plain SHFL for `dl = __shfl_sync(mask, dd, leader)` because the check before
it (BRA.DIV) read one lane's mask into a uniform register (R2UR of the VOTE's result), while its own group was not all
there. -DHBF_LEADER_CHECKED=1 ORs %lanemask_eq into the mask, which ptxas cannot prove uniform: it then checks each
lane's own mask (MATCH.ANY over the masks, against the lanes active) before the plain SHFL. It is the default since
stop 47 (on the H100 the run stalled 3/3 without it and ended 3/3 with it: docs/RESULTS.md "Stop 47");
-DHBF_LEADER_CHECKED=0 builds the unchecked form. These tests read the SASS ptxas makes (nvdisasm), so they fail when
a compiler or a change of the helpers takes that check away, from the default build included."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "runtime_cuda" / "src" / "hbf_helpers.cu"
REPRO = ROOT / "bench" / "src" / "warp_groups.cu"


@pytest.fixture(scope="module")
def nvdisasm():
    try:
        import triton
    except ImportError:
        pytest.skip("no triton here: its bundled nvdisasm reads the SASS")
    p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    if not p.exists():
        pytest.skip(f"no nvdisasm at {p}")
    return p


def _sass(nvcc: str, nvdisasm: Path, src: Path, out: Path, *flags: str) -> dict[str, list[str]]:
    """function name -> its SASS lines, for `src` compiled to an sm_90a cubin with `flags`."""
    r = subprocess.run([nvcc, "-std=c++17", "-O3", "-arch=sm_90a", "-cubin", f"-I{ROOT / 'runtime_cuda' / 'include'}",
                        *flags, str(src), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return _disasm(nvdisasm, out)


def _disasm(nvdisasm: Path, cubin: Path) -> dict[str, list[str]]:
    d = subprocess.run([str(nvdisasm), "-c", str(cubin)], capture_output=True, text=True)
    assert d.returncode == 0, d.stderr[-2000:]
    funcs: dict[str, list[str]] = {}
    cur = None
    for line in d.stdout.splitlines():
        m = re.match(r"^\s*\.text\.(\S+):$", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
        elif cur is not None:
            cur.append(line)
    return funcs


def _count(lines: list[str], op: str) -> int:
    return sum(1 for x in lines if re.search(rf"\b{op}\b", x))


@pytest.fixture(scope="module")
def helper_sass(nvcc, nvdisasm, tmp_path_factory):
    d = tmp_path_factory.mktemp("leader")
    # the leader's builds as they were before wt/grp13 (-DHBF_GROUP_SYNC=0), and the default (every collective checked)
    return {name: _sass(nvcc, nvdisasm, HELPERS, d / f"{name}.cubin", "-rdc=true", *flags)
            for name, flags in {"unchecked": ["-DHBF_GROUP_SYNC=0", "-DHBF_LEADER_CHECKED=0"],
                                "leader": ["-DHBF_GROUP_SYNC=0"],
                                "group": ["-DHBF_GROUP_SYNC=0", "-DHBF_GROUP_CHECKED=1"],
                                "default": []}.items()}


@pytest.mark.parametrize("fn", ["__hb_issue", "__hb_mbar_note"])
def test_the_leader_build_checks_each_lanes_mask_before_the_leaders_shuffle(helper_sass, fn):
    default, checked = helper_sass["unchecked"][fn], helper_sass["leader"][fn]
    assert _count(default, "SR_EQMASK") == 0
    assert _count(checked, "SR_EQMASK") >= 1
    # one more MATCH (the per-lane mask check) for the leader's shuffle; the general path's own MATCHes are in both
    assert _count(checked, "MATCH") >= _count(default, "MATCH") + 1
    # the check reads the lanes active as a uniform value and compares each lane's mask with it
    assert _count(checked, "VOTEU.ANY") >= 1


def test_the_group_build_checks_every_shuffle_of_the_compact_path(helper_sass):
    """-DHBF_GROUP_CHECKED=1: the group's mask is per lane from the helper's entry on, so the shuffles before the
    leader's transaction (the predecessor's offset, the leader's issue time) are checked too, not only the leader's."""
    default, leader, group = (helper_sass[k]["__hb_issue"] for k in ("unchecked", "leader", "group"))
    assert _count(group, "MATCH") >= _count(leader, "MATCH") + 2
    assert _count(default, "SR_EQMASK") == 0 and _count(group, "SR_EQMASK") >= 1


@pytest.mark.parametrize("build", ["hbf_helpers", "hbf_helpers_l2", "hbf_helpers_lean"])
def test_the_installed_helpers_are_the_checked_build(build):
    """The installed builds (make helpers-ptx) check the leader's shuffle (%lanemask_eq in its mask) and carry no
    measurement build's mark (the barrier's function)."""
    ptx = (ROOT / "runtime_cuda" / "ptx" / f"{build}.ptx").read_text()
    assert "%lanemask_eq" in ptx
    assert "hb_warp_barrier" not in ptx


# ---- wt/grp13: every collective of the helpers checked per lane, and the group guard (HBF_GROUP_SYNC) ----------------
INSTALLED = ("hbf_helpers", "hbf_helpers_l2", "hbf_helpers_lean", "hbf_eidola_helpers")
_GROUP_OP = re.compile(r"\b(REDUX\.\w+|VOTE\.ALL|VOTE\.ANY R\d+, PT, P(?!T)\S*|VOTE\.ANY P\d+|MATCH\.\w+)")


def _ins(lines: list[str]) -> list[str]:
    return [x.strip() for x in lines if re.search(r"/\*[0-9a-f]{4,}\*/", x)]


def _one_lane_checks(lines: list[str]) -> list[str]:
    """The unsound form (docs/design.md §3.8 "The group's mask"): a collective's check made against ONE lane's mask,
    `R2UR URx, Ry` then an unguarded `BRA.DIV URx`, which falls through when that mask's lanes are active whatever
    other lanes are, into a plain SHFL / REDUX / VOTE over every active lane."""
    ins, out = _ins(lines), []
    for i, x in enumerate(ins):
        m = re.search(r"(@!?U?P\d+\s+)?BRA\.DIV (UR\d+)", x)
        if not m or m.group(1):
            continue
        for y in reversed(ins[max(0, i - 8):i]):
            if re.search(rf"\bR2UR {m.group(2)}, R\d+", y):
                out.append(x)
                break
            if re.search(rf"\b{m.group(2)}\b", y):
                break
    return out


def _group_ops_not_checked_as_one_group(lines: list[str]) -> list[str]:
    """Reductions, votes and matches on a plain path (outside WARPSYNC.COLLECTIVE) whose BRA.DIV is neither the
    uniformity check (its guard from `R2UR Px, URZ, Rmask`: every active lane has one mask, all of it active) nor a
    full-warp mask: behind a shuffle's MATCH check several whole groups pass at once, which a shuffle survives (each
    lane reads its own source lane) and a reduction does not (it runs over every active lane)."""
    ins, out, guard, coll = _ins(lines), [], None, False
    for i, x in enumerate(ins):
        if "WARPSYNC.COLLECTIVE" in x or "ENDCOLLECTIVE" in x:
            coll = "WARPSYNC.COLLECTIVE" in x
            continue
        m = re.search(r"(@!?(P\d+)\s+)?BRA\.DIV (~URZ|UR\d+)", x)
        if m:
            ur, pr, guard = m.group(3), m.group(2), "one lane"
            for y in reversed(ins[max(0, i - 24):i]):
                if ur == "~URZ" or (not pr and re.search(rf"UMOV {ur}, 0xffffffff", y)):
                    guard = "full"
                    break
                if pr and re.search(rf"(R2UR {pr}, URZ|LOP3\.LUT {pr}, RZ)", y):
                    guard = "uniform" if "R2UR" in y else "shuffle"
                    break
            continue
        op = _GROUP_OP.search(x)
        if coll or not op or re.search(r"VOTE\.ANY R\d+, PT, PT", x):
            continue
        if (op.group(1).startswith("MATCH.ANY") or op.group(1) == "REDUX.OR") and \
                any("BRA.DIV" in y for y in ins[i + 1:i + 24]):
            continue                                            # the check's own instructions
        if guard not in ("uniform", "full"):
            out.append(f"{x} (after a {guard} check)")
    return out


@pytest.fixture(scope="module")
def installed_sass(nvdisasm, tmp_path_factory):
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas")
    d, out = tmp_path_factory.mktemp("installed"), {}
    for b in INSTALLED:
        r = subprocess.run([ptxas, "-arch=sm_90a", "-c", str(ROOT / "runtime_cuda" / "ptx" / f"{b}.ptx"),
                            "-o", str(d / f"{b}.cubin")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        out[b] = _disasm(nvdisasm, d / f"{b}.cubin")
    return out


@pytest.mark.parametrize("build", INSTALLED)
def test_no_collective_of_the_installed_helpers_is_checked_against_one_lanes_mask(installed_sass, build):
    """The installed builds (make helpers-ptx) assemble for sm_90a and none of their collectives is compiled in the
    form that made `staggered` wrong (stop 48): every one checks each lane's own mask (HBF_GROUP_SYNC, default on).
    main before wt/grp13 had 24 / 20 / 23 / 2 such checks in these four builds."""
    bad = {f: _one_lane_checks(lines) for f, lines in installed_sass[build].items()}
    assert not {f: v for f, v in bad.items() if v}, bad
    worse = {f: _group_ops_not_checked_as_one_group(lines) for f, lines in installed_sass[build].items()}
    assert not {f: v for f, v in worse.items() if v}, worse


def test_the_sass_checks_fail_on_the_helpers_before_the_group_sync(helper_sass):
    """The same two checks find the unsound form in a -DHBF_GROUP_SYNC=0 build (the leader's shuffle alone checked,
    stop 47's default), so they can fail; the default build passes them."""
    old, new = helper_sass["leader"], helper_sass["default"]
    assert len(_one_lane_checks(old["__hb_issue"])) >= 3
    assert _group_ops_not_checked_as_one_group(old["__hb_issue"])
    for f in ("__hb_issue", "__hb_wait", "__hb_future_join", "__hb_kernel_flush", "__hb_cap_xlate"):
        assert _one_lane_checks(new[f]) == [] and _group_ops_not_checked_as_one_group(new[f]) == [], f


# the guard in PTX: a ballot of `true` over the mask, compared with the mask (-1 where nvcc knows it is the whole warp)
_GUARD = re.compile(r"vote\.sync\.ballot\.b32\s+(%r\d+),\s*%p\d+,\s*(%r\d+|-1);\s*\n"
                    r"\s*setp\.(?:eq|ne)\.s32\s+%p\d+,\s*\1,\s*(?:\2|-1);")


def _ptx_functions(ptx: str) -> dict[str, str]:
    heads = list(re.finditer(r"^(?:\.weak |\.visible )?\.func\s+(?:\([^)]*\)\s*)?(\S+?)\(", ptx, flags=re.M))
    return {h.group(1): ptx[h.start():(heads[i + 1].start() if i + 1 < len(heads) else len(ptx))]
            for i, h in enumerate(heads)}


@pytest.mark.parametrize("build", ["hbf_helpers", "hbf_helpers_l2"])
def test_the_installed_helpers_guard_every_deadline_they_hand_out(build):
    """The group guard (a ballot over the group's mask compared with it, then WARP_GROUP and the warp's end) is in
    every exported helper that hands a lane a value its group computed: the issue (general path: the range check and
    the leader's future; compact path: before the counters), the wait and the join (the ticket's deadline), the issue
    group, the inline counters' flush."""
    funcs = _ptx_functions((ROOT / "runtime_cuda" / "ptx" / f"{build}.ptx").read_text())
    need = {"__hb_issue": 3, "__hb_wait": 1, "__hb_future_join": 1, "__hb_issue_group": 1, "__hb_kernel_flush": 1}
    got = {f: len(_GUARD.findall(funcs[f])) for f in need}
    assert all(got[f] >= n for f, n in need.items()), got


def test_the_group_guard_fails_with_its_own_status():
    from hbfcommon import ctl
    from hbfcommon.status import RequestStatus
    assert RequestStatus.WARP_GROUP.terminal and ctl.HBF_ST_WARP_GROUP == RequestStatus.WARP_GROUP
    src = HELPERS.read_text()
    guard = src[src.index("HB_DEV void hb_group_guard"):src.index("HB_DEV bool hb_group_any")]
    assert "HBF_ST_WARP_GROUP" in guard and "hb_end()" in guard


@pytest.fixture(scope="module")
def repro_sass(nvcc, nvdisasm, tmp_path_factory):
    from bench.warp_groups import VARIANTS                  # the builds the card runs, one definition
    d = tmp_path_factory.mktemp("repro")
    return {name: _sass(nvcc, nvdisasm, REPRO, d / f"{name}.cubin", *flags) for name, flags in VARIANTS.items()}


def _body(funcs: dict[str, list[str]]) -> list[str]:
    """The reproducer's helper in the `groups` kernel (mode 0), as ptxas placed it."""
    names = [n for n in funcs if "groupsILi0E" in n]
    assert names, list(funcs)
    lines = funcs[names[0]]
    start = next(i for i, x in enumerate(lines) if re.match(r"^\$\S*bodyILi0E\S*:$", x.strip()))
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^\$\S+:$", lines[i].strip())), len(lines))
    return lines[start:end]


def test_the_reproducer_has_the_stalls_shape_and_the_checked_build_does_not(repro_sass):
    """plain: the mask from the helper's VOTE goes through R2UR into BRA.DIV (one lane's mask decides the plain SHFL),
    as in the stalled moe_down_hbf (bench/results/stop45_h100/gdb_sg2/sass_excerpt.txt); checked: a MATCH.ANY of the
    lanes' masks first."""
    plain = _body(repro_sass["plain"])
    vote = next(re.search(r"VOTE\.ANY (R\d+)", x).group(1) for x in plain if "VOTE.ANY" in x)
    r2ur = [i for i, x in enumerate(plain) if re.search(rf"R2UR (UR\d+), {vote}\b", x)]
    assert r2ur, "the VOTE's mask is not read into a uniform register"
    i = r2ur[0]
    assert "BRA.DIV" in plain[i + 1] and any("SHFL.IDX" in x for x in plain[i + 2:i + 5])
    # checked: the leader's shuffle checked (one MATCH.ANY); group: the shuffle before the transaction too
    assert _count(plain, "MATCH.ANY") == 0
    assert _count(_body(repro_sass["checked"]), "MATCH.ANY") == 1
    group = _body(repro_sass["group"])
    assert _count(group, "MATCH.ANY") >= 2
    div = next(i for i, x in enumerate(group) if "BRA.DIV" in x)
    assert any("MATCH.ANY" in x for x in group[:div])
    # the barrier: a call to a function of its own before the shuffle (none in the plain build's helper)
    assert _count(_body(repro_sass["plain"]), "CALL.REL.NOINC") == 0
    assert _count(_body(repro_sass["barrier"]), "CALL.REL.NOINC") >= 1


def test_the_bench_refuses_what_it_does_not_know(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "warp_groups.py"), "--out", str(tmp_path / "x.json"),
                        "--variants", "plain,nope"], capture_output=True, text=True)
    assert r.returncode == 2 and "nope" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.json").exists()


def test_the_bench_says_when_there_is_no_gpu(nvcc, tmp_path):
    if Path("/dev/nvidia0").exists():
        pytest.skip("a GPU is here: the reproducer runs")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "warp_groups.py"), "--out", str(tmp_path / "x.json"),
                        "--variants", "plain", "--shapes", "cost"], capture_output=True, text=True)
    assert r.returncode == 2 and "no usable GPU" in r.stderr and "Traceback" not in r.stderr


def test_the_reproducers_sync_build_checks_every_collective_and_the_old_ones_do_not(repro_sass):
    """bench/warp_groups.py's `sync` variant (the default helpers' build) compiles every collective of the reproducer's
    helper with each lane's own mask, in every shape's kernel; `plain` and `checked` (the builds stop 48 ran) do not."""
    for v in ("sync", "group"):
        assert not any(_one_lane_checks(lines) for lines in repro_sass[v].values()), v
        assert not any(_group_ops_not_checked_as_one_group(lines) for lines in repro_sass[v].values()), v
    for v in ("plain", "checked", "guard"):
        assert any(_one_lane_checks(lines) for lines in repro_sass[v].values()), v
    # the guard's ballot is in the guard and sync builds only (counted, not ended, in the reproducer)
    assert _count(_body(repro_sass["guard"]), "VOTE.ANY") > _count(_body(repro_sass["checked"]), "VOTE.ANY")
