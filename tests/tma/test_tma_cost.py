"""The TMA issue cost (issue 15; docs/design.md §3.3 "The issue cost"): runtime_cuda/src/hbf_tma_cost.cuh, compiled by
nvcc for the CPU (tests/tma/tma_cost_host.cu), against an oracle written here that makes the requests the way the
per-run path does (hb_tma_run: one request per page span of each run, hb_group_bytes' granule rounding) from the
Python twin's runs (hbfcommon/tensormap.box_runs). The batched issue (hb_tma_batch) classifies a copy once by its
extent and, under the FIXED source, counts the requests per run with hb_tma_count_run instead of making them: a wrong
extent (a copy called one range's when a run leaves it) or a wrong count (requests, bytes) fails here."""
from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from hbfcommon import tensormap as tm
from tests.tma.test_tensormap import INC, _nvcc, random_coords, random_map

ROOT = Path(__file__).resolve().parents[2]
N_CASES = 1200


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tmacost") / "tma_cost_host"
    r = subprocess.run([_nvcc(), "-x", "cu", "-std=c++17", "-O1", "-Werror", "all-warnings", *INC,
                        str(ROOT / "tests" / "tma" / "tma_cost_host.cu"), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def run_c(host: Path, cases: list[tuple[bytes, tuple[int, ...], int, int, int, int]]) -> list[dict]:
    lines = [" ".join([desc.hex(), str(len(c)), *map(str, c), str(base), str(mo), str(ps), str(gsh)])
             for desc, c, base, mo, ps, gsh in cases]
    r = subprocess.run([str(host)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(out) == len(cases)
    return out


def per_run_requests(runs, base: int, mo: int, ps: int, gsh: int) -> tuple[int, int, int]:
    """The per-run path's requests (hb_tma_run's page loop, hb_group_bytes with uniq = 0): (requests, bytes, hbf)."""
    page, g = 1 << ps, 1 << gsh
    nreq = nbytes = hbf = 0
    for a, n in runs:
        media, left = mo + (a - base), n
        while left:
            off = media % page
            pl = min(page - off, left)
            b0 = off // g * g
            nbytes += -(-(off + pl) // g) * g - b0
            nreq += 1
            media += pl
            left -= pl
        hbf += n
    return nreq, nbytes, hbf


def test_count_and_extent_match_the_per_run_requests(host):
    rng = random.Random(4515)
    cases, keep = [], []
    for _ in range(N_CASES):
        m = random_map(rng, small=rng.random() < 0.7)
        c = random_coords(rng, m)
        ps = rng.choice([9, 12, 12, 16])
        gsh = rng.choice([0, 6, 6, 6, 10, 13])               # 13 > ps = 9 / 12: the granule larger than a page
        base = m.base - rng.randrange(0, 1 << 14)
        mo = rng.randrange(0, 1 << 40)
        cases.append((tm.encode(m), c, base, mo, ps, gsh))
        keep.append((m, c, base, mo, ps, gsh))
    out = run_c(host, cases)
    n_oob = n_multi = n_big_granule = n_empty = 0
    for (m, c, base, mo, ps, gsh), o in zip(keep, out):
        assert o["rc"] == 0
        runs, oob = tm.box_runs(m, c)
        assert o["oob"] == oob and o["xoob"] == oob, (m, c)
        assert o["nruns"] == len(runs)
        if not runs or sum(n for _, n in runs) == 0:
            assert (o["first"], o["end"], o["inb"]) == (0, 0, 0)
            n_empty += 1
            continue
        # the extent: exactly the runs' lowest and one past their highest byte, and their byte count
        assert (o["first"], o["end"]) == (min(a for a, _ in runs), max(a + n for a, n in runs)), (m, c)
        assert o["first"] == runs[0][0] and o["end"] == runs[-1][0] + runs[-1][1]
        assert o["inb"] == sum(n for _, n in runs)
        want = per_run_requests(runs, base, mo, ps, gsh)
        assert (o["nreq"], o["req_bytes"], o["hbf"]) == want, (m, c, ps, gsh)
        n_oob += oob > 0
        n_multi += want[0] > len(runs)
        n_big_granule += gsh > ps
    # the generator exercised what it is meant to: OOB boxes, runs across pages, a granule larger than a page
    assert n_oob > N_CASES // 5 and n_multi > 50 and n_big_granule > 50 and n_empty > 10


def test_one_classification_per_copy_is_the_per_run_answer():
    """The extent in one range -> every run in it; the extent outside every range -> no run in any (the cases
    hb_tma_batch serves); a range boundary inside the extent -> the per-run path (not served by the batch)."""
    rng = random.Random(15)
    seen = {"hit": 0, "native": 0, "partial": 0}
    for _ in range(400):
        m = random_map(rng)
        c = random_coords(rng, m)
        runs, _ = tm.box_runs(m, c)
        runs = [(a, n) for a, n in runs if n]
        if not runs:
            continue
        first, end = min(a for a, _ in runs), max(a + n for a, n in runs)
        lo, hi = first - 300, end + 300
        cuts = sorted(rng.randrange(lo, hi) for _ in range(2))
        rg = tm.Range(base=cuts[0], end=max(cuts[1], cuts[0] + 1), media_offset=0)
        inside = [rg.base <= a and a + n <= rg.end for a, n in runs]
        outside = [a + n <= rg.base or a >= rg.end for a, n in runs]
        if rg.base <= first and end <= rg.end:
            seen["hit"] += 1
            assert all(inside)
        elif end <= rg.base or first >= rg.end:
            seen["native"] += 1
            assert all(outside)
        else:
            seen["partial"] += 1
    assert min(seen.values()) > 20, seen


def test_stop44_matmul_box_counts_one_request_per_row():
    """The Stop-44 shape: a 128-row box of 64 elements of a K = 4096 row-major matrix (rows further apart than a
    4 KiB page): one request per row, 128 per copy, as the per-run path made them one by one."""
    m = tm.TensorMap(base=1 << 32, dtype=10, dims=(4096, 4096), gstrides=(4096 * tm.DTYPE_BYTES[10],), box=(64, 128),
                     estrides=(1, 1),
                     interleave=0, swizzle=3, l2promo=2, fill=0)
    runs, oob = tm.box_runs(m, (64, 128))
    assert oob == 0 and len(runs) == 128
    row = 64 * m.elem_bytes
    assert per_run_requests(runs, m.base, 0, 12, 6) == (128, 128 * row, 128 * row)
