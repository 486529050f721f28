"""bench/sass_ctrl.py: the scheduling control of SASS decoded (stall, yield, write/read scoreboard, wait mask) and,
per global load, the first instruction that waits for it -- the static reading issue 13 used for the group code's
waits (stop 54). Encodings from nvdisasm 13.5 on ptxas 13.0 output (sm_90a)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import sass_ctrl as S  # noqa: E402

# an LDG that sets write scoreboard 5 and read scoreboard 0, a CALL that waits on 5, a use that waits on 5
LISTING = """\
kern:
.text.kern:
        /*3a40*/                   LDG.E R13, desc[UR10][R78.64] ;                    /* 0x0000000a4e0d7981 */
                                                                                      /* 0x000162000c1e1900 */
        /*3a50*/                   CS2R R8, SR_GLOBALTIMERLO ;                        /* 0x0000000000087805 */
                                                                                      /* 0x000fcc0000015200 */
        /*3a60*/                   CALL.REL.NOINC `($kern$f) ;                        /* 0x0000000000007944 */
                                                                                      /* 0x020fea0000000000 */
        /*3a70*/                   IMAD.IADD R14, R13, 0x1, R14 ;                     /* 0x000000010d0e7824 */
                                                                                      /* 0x020fea0000000000 */
"""


def test_decode_known_words():
    ldg = S.decode(0x000162000C1E1900)
    assert (ldg.stall, ldg.yld, ldg.wr, ldg.rd, ldg.wait) == (1, True, 5, 0, frozenset())
    cs2r = S.decode(0x000FCC0000015200)
    assert (cs2r.stall, cs2r.yld, cs2r.wr, cs2r.rd, cs2r.wait) == (6, False, None, None, frozenset())
    # a wait mask: bit 116 + b of the 128-bit word is scoreboard b (bit 11 + b of the control field)
    assert S.decode((1 << 11 | 1 << 16) << 41).wait == frozenset({0, 5})


def test_first_wait_of_a_load_is_found_and_told_apart_from_its_use():
    ins = S.parse(LISTING)
    assert [i.func for i in ins] == ["kern"] * 4 and ins[0].ctrl.wr == 5
    rows = S.load_waits(ins)
    assert len(rows) == 1
    fw = rows[0]["first_wait"]
    assert fw["addr"] == "03a60" and fw["uses_value"] is False and fw["after"] == 1      # the CALL, not the use
    # the CALL waits on nothing: the use is the first
    call_hi = "0x020fea0000000000 */\n        /*3a70"
    only_use = S.parse(LISTING.replace(call_hi, call_hi.replace("0x020", "0x000")))
    fw = S.load_waits(only_use)[0]["first_wait"]
    assert fw["addr"] == "03a70" and fw["uses_value"] is True


def test_a_missing_cubin_is_a_clear_error(tmp_path):
    cp = subprocess.run([sys.executable, str(REPO / "bench" / "sass_ctrl.py"), str(tmp_path / "none.cubin")],
                        capture_output=True, text=True)
    assert cp.returncode == 2 and "no such cubin" in cp.stderr and "Traceback" not in cp.stderr


def test_a_real_cubin_when_nvdisasm_is_there(tmp_path):
    try:
        S.nvdisasm()
    except SystemExit:
        pytest.skip("no nvdisasm (make sass-tools)")
    import shutil
    if not shutil.which("nvcc"):
        pytest.skip("no nvcc")
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(const float* a, float* b) { b[threadIdx.x] = a[threadIdx.x] * 2.f; }\n")
    cub = tmp_path / "k.cubin"
    subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-o", str(cub), str(src)], check=True)
    rows = S.load_waits(S.disassemble(cub))
    assert rows and all(r["first_wait"] and r["first_wait"]["uses_value"] for r in rows)
