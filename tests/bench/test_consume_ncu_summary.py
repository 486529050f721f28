"""bench/consume_ncu_summary.py and bench/little_decompose.py on synthetic inputs (no GPU): the consume probe's
registered launch against the unregistered one instruction by instruction (the last two pairs of consume_hbf pages),
a Little page's samples by function; and the Little fit, excess = per_round + per_block / rounds, recovered exactly
from runs built with known terms."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import little_decompose as LD  # noqa: E402

HDR = '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",' \
      '"Instructions Executed"'
SASS = ["CS2R R16, SR_GLOBALTIMERLO", "VOTE.ANY R16, PT, !P0", "SHFL.IDX PT, R19, R99, R16, 0x1f",
        "LDG.E R68, desc[UR10][R78.64]"]


def _page(p: Path, samples: list[int], executed: list[int]) -> None:
    p.write_text("\n".join([HDR] + [f'"0x{16 * i:x}","{s}","{n}","{n}","{e}"'
                                    for i, (s, n, e) in enumerate(zip(SASS, samples, executed))]) + "\n")


def _run(d: Path) -> dict:
    out = d / "s.json"
    cp = subprocess.run([sys.executable, str(ROOT / "bench" / "consume_ncu_summary.py"), "--dir", str(d),
                         "--out", str(out)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return json.loads(out.read_text())


def test_registered_against_unregistered_by_instruction(tmp_path):
    # a warm-up launch first, then idle (unregistered, registered), one warp per SM (unregistered, registered)
    _page(tmp_path / "src_consume_hbf_0.csv", [9, 9, 9, 9], [1, 1, 0, 1])
    _page(tmp_path / "src_consume_hbf_1.csv", [5, 2, 0, 3], [32, 32, 0, 32])
    _page(tmp_path / "src_consume_hbf_2.csv", [5, 9, 7, 3], [32, 32, 32, 32])
    _page(tmp_path / "src_consume_hbf_3.csv", [50, 20, 0, 30], [4224, 4224, 0, 4224])
    _page(tmp_path / "src_consume_hbf_4.csv", [52, 60, 40, 31], [4224, 4224, 4224, 4224])
    (tmp_path / "details.csv").write_text(
        '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
        '"3","consume_hbf","Duration","us","2.5"\n"3","consume_hbf","Registers Per Thread","","128"\n'
        '"1","consume_plain","Duration","ns","900"\n"2","consume_hbf","Duration","ms","0.004"\n')
    r = _run(tmp_path)
    assert r["launches"] == [{"id": "2", "duration_ns": 4000},                 # consume_hbf only, in launch order, ns
                             {"id": "3", "duration_ns": 2500, "Registers Per Thread": "128"}]
    idle = r["idle"]
    assert (idle["unregistered_launch"], idle["registered_launch"]) == (1, 2)
    assert idle["d_samples"] == 14 and idle["only_registered_samples"] == 7     # the shuffle runs registered only
    assert [x["sass"] for x in idle["top"][:2]] == [SASS[1], SASS[2]]           # +7 each, in source order
    busy = r["one_warp_per_sm"]
    assert (busy["unregistered_launch"], busy["registered_launch"]) == (3, 4)
    assert busy["top"][0]["d_samples"] == 40 and busy["top"][0]["sass"] == SASS[1]


def test_a_little_page_by_function(tmp_path):
    _page(tmp_path / "src_little_e65536_b8192.csv", [1, 2, 3, 4], [8, 8, 8, 8])
    listing = ("\t.section\t.text.reduce_hbf,\"ax\",@progbits\n.text.reduce_hbf:\n"
               "        /*0000*/                   CS2R R16, SR_GLOBALTIMERLO ;\n"
               "        /*0010*/                   VOTE.ANY R16, PT, !P0 ;\n"
               "        .type           $reduce_hbf$__hb_wait,@function\n$reduce_hbf$__hb_wait:\n"
               "        /*0020*/                   NANOSLEEP 0x800 ;\n"
               "        /*0030*/                   RET.REL.NODEC R20 ;\n")
    (tmp_path / "sass").mkdir()
    (tmp_path / "sass" / "x_reduce_hbf.sass").write_text(listing)
    r = _run(tmp_path)["src_little_e65536_b8192"]
    assert r["samples"] == 10 and r["top"][0]["samples"] == 4 and r["top"][0]["share"] == 0.4
    assert r["by_function"]["functions"]["__hb_wait"]["stall_samples"] == 7
    assert r["by_function"]["functions"]["body"]["stall_samples"] == 3


def _little(rounds: int, loads_per_round: int, per_round: float, per_block: float) -> dict:
    return {"rounds_per_program": rounds, "latency_ns": 20000, "blocks_per_sm_hbf": 4, "kernel_hbf": {"n_regs": 128},
            "model": {"round_measured_ns": 20000 + per_round + per_block / rounds, "measured_over_little": 1.0}}


@pytest.mark.parametrize("pb,pr8,pr1", [(2860.0, 860.0, 406.0), (0.0, 500.0, 100.0), (4000.0, 1200.0, 300.0)])
def test_the_little_fit_recovers_its_terms(pb, pr8, pr1):
    parts = {LD.K8: _little(8, 8, pr8, pb), LD.K1: _little(1, 8, pr8, pb), LD.KB: _little(16, 1, pr1, pb)}
    d = LD.decompose(parts)
    assert (d["per_block_ns"], d["per_round_8_loads_ns"], d["per_round_1_load_ns"]) == (round(pb), round(pr8),
                                                                                         round(pr1))
    assert d["to_cut_ns"] == round(pr8 + pb / 8 - 1000)


def test_a_run_without_the_three_kernels_is_skipped():
    assert LD.decompose({LD.K8: _little(8, 8, 1.0, 1.0)}) is None
    assert LD.decompose({}) is None


def test_the_cli_says_when_nothing_fits(tmp_path):
    (tmp_path / "a.devpath_cost.json").write_text(json.dumps({"parts": {}}))
    cp = subprocess.run([sys.executable, str(ROOT / "bench" / "little_decompose.py"), "--out",
                         str(tmp_path / "o.json"), str(tmp_path)], capture_output=True, text=True)
    assert cp.returncode == 1 and "no run with the three Little kernels" in cp.stderr
    assert not (tmp_path / "o.json").exists()
    cp = subprocess.run([sys.executable, str(ROOT / "bench" / "little_decompose.py"), "--out",
                         str(tmp_path / "o.json"), str(tmp_path / "nope")], capture_output=True, text=True)
    assert cp.returncode == 2 and "no such file or folder" in cp.stderr
