"""bench/stream_ncu_summary.py on a synthetic ncu export: the details page's last result per kernel (durations in
ns whatever unit ncu chose), the source page's counts (timer reads, calls, branches per warp), and the split of the
executed instructions and calls by function through an nvdisasm listing of the same code."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import stream_ncu_summary as S  # noqa: E402

HDR = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
       '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')


def _row(i, k, name, unit, value, grid="(64, 1, 1)"):
    return f'"{i}","1","p","h","{k}","1","7","(128, 1, 1)","{grid}","0","9.0","S","{name}","{unit}","{value}"\n'


LISTING = """\t.section\t.text.reduce_hbf,"ax",@progbits
.text.reduce_hbf:
        /*0000*/                   CS2R R8, SR_GLOBALTIMERLO ;
        /*0010*/                   CALL.REL.NOINC `($reduce_hbf$__hb_inline_until_live) ;
        /*0020*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0030*/                   CALL.REL.NOINC `($reduce_hbf$__hb_kernel_exit) ;
        /*0040*/                   EXIT ;
        .type           $reduce_hbf$__hb_inline_until_live,@function
$reduce_hbf$__hb_inline_until_live:
        /*0050*/                   CALL.REL.NOINC `($reduce_hbf$__hb_kernel_flush) ;
        /*0060*/                   RET.REL.NODEC R20 ;
        .type           $reduce_hbf$__hb_kernel_flush,@function
$reduce_hbf$__hb_kernel_flush:
        /*0070*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0080*/                   RET.REL.NODEC R20 ;
"""
# executed warp instructions per listing line (8 warps: grid 2 x 4 warps)
EXEC = [8, 4, 8, 8, 8, 4, 4, 12, 12]
SRC = ["CS2R R8, SR_GLOBALTIMERLO", "CALL.REL.NOINC 0x10", "LDG.E.128 R4, desc[UR4][R2.64]",
       "CALL.REL.NOINC 0x20", "EXIT", "CALL.REL.NOINC 0x30", "RET.REL.NODEC R20", "IADD3 R1, R1, 0x1, RZ",
       "RET.REL.NODEC R20"]


def _export(d: Path) -> None:
    (d / "details.csv").write_text(
        HDR + _row(0, "reduce_hbf", "Duration", "ms", "9.99", "(2, 1, 1)")       # an earlier result: not taken
        + _row(1, "reduce_hbf", "Duration", "us", "1.5", "(2, 1, 1)") + _row(1, "reduce_hbf", "Grid Size", "", "2")
        + _row(1, "reduce_hbf", "Block Size", "", "128") + _row(2, "reduce_plain", "Duration", "ns", "750", "(2, 1, 1)")
        + _row(2, "reduce_plain", "Grid Size", "", "2") + _row(2, "reduce_plain", "Block Size", "", "128"))
    rows = ['"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"']
    rows += [f'"{i}","{s}","{i % 3}","{e}"' for i, (s, e) in enumerate(zip(SRC, EXEC))]
    (d / "src_reduce_hbf.csv").write_text("\n".join(rows) + "\n")
    (d / "sass").mkdir()
    (d / "sass" / "abc_reduce_hbf.sass").write_text(LISTING)


def test_the_summary_splits_by_function_and_reads_units(tmp_path):
    _export(tmp_path)
    out = tmp_path / "s.json"
    cp = subprocess.run([sys.executable, str(ROOT / "bench" / "stream_ncu_summary.py"), "--dir", str(tmp_path),
                         "--out", str(out)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    r = json.loads(out.read_text())
    k = r["kernels"]["reduce_hbf"]
    assert k["details"]["duration_ns"] == 1500 and k["warps"] == 8            # the last result, in ns
    assert r["reduce_ratio"]["duration"] == 2.0                               # 1.5 us / 750 ns
    s = k["source"]
    assert s["warp_instructions"] == sum(EXEC) and s["globaltimer_per_warp"] == 1.0 and s["calls_executed"] == 16
    f = k["by_function"]
    # stall samples per function: each row's i % 3 (body rows 0-4: 4, rows 5-6: 2, rows 7-8: 3)
    assert f["functions"] == {"body": {"warp_instructions": 36, "per_warp": 4.5, "stall_samples": 4},
                              "__hb_inline_until_live": {"warp_instructions": 8, "per_warp": 1.0, "stall_samples": 2},
                              "__hb_kernel_flush": {"warp_instructions": 24, "per_warp": 3.0, "stall_samples": 3}}
    assert f["calls"] == {"__hb_inline_until_live": 4, "__hb_kernel_exit": 8, "__hb_kernel_flush": 4}


def test_a_listing_of_other_code_is_not_used(tmp_path):
    _export(tmp_path)
    (tmp_path / "sass" / "abc_reduce_hbf.sass").write_text(LISTING.replace("        /*0040*/                   EXIT ;\n", ""))
    assert S.by_function(tmp_path / "src_reduce_hbf.csv", [tmp_path / "sass" / "abc_reduce_hbf.sass"],
                         "reduce_hbf", 8) == {}
