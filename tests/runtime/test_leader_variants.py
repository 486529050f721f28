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
    d = subprocess.run([str(nvdisasm), "-c", str(out)], capture_output=True, text=True)
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
    return {name: _sass(nvcc, nvdisasm, HELPERS, d / f"{name}.cubin", "-rdc=true", *flags)
            for name, flags in {"unchecked": ["-DHBF_LEADER_CHECKED=0"], "default": [],
                                "group": ["-DHBF_GROUP_CHECKED=1"]}.items()}


@pytest.mark.parametrize("fn", ["__hb_issue", "__hb_mbar_note"])
def test_the_default_build_checks_each_lanes_mask_before_the_leaders_shuffle(helper_sass, fn):
    default, checked = helper_sass["unchecked"][fn], helper_sass["default"][fn]
    assert _count(default, "SR_EQMASK") == 0
    assert _count(checked, "SR_EQMASK") >= 1
    # one more MATCH (the per-lane mask check) for the leader's shuffle; the general path's own MATCHes are in both
    assert _count(checked, "MATCH") >= _count(default, "MATCH") + 1
    # the check reads the lanes active as a uniform value and compares each lane's mask with it
    assert _count(checked, "VOTEU.ANY") >= 1


def test_the_group_build_checks_every_shuffle_of_the_compact_path(helper_sass):
    """-DHBF_GROUP_CHECKED=1: the group's mask is per lane from the helper's entry on, so the shuffles before the
    leader's transaction (the predecessor's offset, the leader's issue time) are checked too, not only the leader's."""
    default, leader, group = (helper_sass[k]["__hb_issue"] for k in ("unchecked", "default", "group"))
    assert _count(group, "MATCH") >= _count(leader, "MATCH") + 2
    assert _count(default, "SR_EQMASK") == 0 and _count(group, "SR_EQMASK") >= 1


@pytest.mark.parametrize("build", ["hbf_helpers", "hbf_helpers_l2", "hbf_helpers_lean"])
def test_the_installed_helpers_are_the_checked_build(build):
    """The installed builds (make helpers-ptx) check the leader's shuffle (%lanemask_eq in its mask) and carry no
    measurement build's mark (the barrier's function)."""
    ptx = (ROOT / "runtime_cuda" / "ptx" / f"{build}.ptx").read_text()
    assert "%lanemask_eq" in ptx
    assert "hb_warp_barrier" not in ptx


@pytest.fixture(scope="module")
def repro_sass(nvcc, nvdisasm, tmp_path_factory):
    d = tmp_path_factory.mktemp("repro")
    return {name: _sass(nvcc, nvdisasm, REPRO, d / f"{name}.cubin", *flags)
            for name, flags in {"plain": ["-DHBF_LEADER_CHECKED=0"], "checked": [],
                                "barrier": ["-DHBF_LEADER_BARRIER=1", "-DHBF_LEADER_CHECKED=0"],
                                "group": ["-DHBF_GROUP_CHECKED=1", "-DHBF_LEADER_CHECKED=0"]}.items()}


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
