"""runtime_cuda/src/hbf_tensormap.cuh under UndefinedBehaviorSanitizer + AddressSanitizer, over every descriptor the
H200's driver wrote (both recordings, 4,557 accepted encodings): a shift past the type width, a signed overflow, a
read past an array (rank-1 maps index dims/strides with rank-1) or an unaligned load would resolve one way on x86
and another on the GPU (PTX shifts clamp, x86 masks the count), so the host build agreeing with the Python twin
would not mean the device build does. The host build of the same header must run sanitizer-clean and decode each
descriptor like the Python twin; the runs/split path runs on every small-box descriptor at in-bounds, edge and
int32-extreme coordinates.

(2026-12-05: the one device-vs-Python disagreement of that day was NOT the header -- the same 128 bytes sit at
indices 0, 18 and 23 of the device input and only index 0 disagreed: runtime_cuda.cudrv.htod had freed the host
buffer before the copy, tests/runtime/test_cudrv_lifetime.py. This is the guard that the header stays free of the
behaviour the first hypothesis suspected.)"""
from __future__ import annotations

import gzip
import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from hbfcommon import tensormap as tm

ROOT = Path(__file__).resolve().parents[2]
INC = [f"-I{ROOT / 'runtime_cuda' / 'include'}", f"-I{ROOT / 'runtime_cuda' / 'src'}"]
RECORDINGS = ("tma_tensormap_encodings_h200_r1.json.gz", "tma_tensormap_encodings_h200_r2.json.gz")
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


@pytest.fixture(scope="module")
def sanitized_host(tmp_path_factory) -> Path:
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    out = tmp_path_factory.mktemp("tmapsan") / "tmap_host_san"
    # the header is plain C++ on the host: __host__ / __device__ expand to nothing (no __CUDACC__)
    r = subprocess.run([cxx, "-x", "c++", "-std=c++17", "-O1", "-g", "-fno-omit-frame-pointer",
                        "-fsanitize=undefined,address", "-fno-sanitize-recover=all", "-D__host__=", "-D__device__=",
                        *INC, str(ROOT / "tests" / "tma" / "tmap_host.cu"), "-o", str(out)],
                       capture_output=True, text=True)
    if r.returncode != 0 and "sanitize" in r.stderr and ("cannot find" in r.stderr or "not found" in r.stderr):
        pytest.skip(f"sanitizer runtime not installed: {r.stderr[-200:]}")
    assert r.returncode == 0, r.stderr
    return out


def _descriptors() -> list[bytes]:
    out = []
    for name in RECORDINGS:
        doc = json.loads(gzip.decompress((ROOT / "bench" / "results" / name).read_bytes()))
        out += [bytes.fromhex(r["bytes"]) for r in doc["records"] if r["bytes"]]
    return out


def _run(host: Path, lines: list[str]) -> list[dict]:
    r = subprocess.run([str(host)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600,
                       env={"UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
                            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0"})
    assert r.returncode == 0 and "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, r.stderr[-3000:]
    return [json.loads(x) for x in r.stdout.splitlines()]


def test_every_recorded_descriptor_decodes_sanitizer_clean_like_python(sanitized_host):
    descs = _descriptors()
    assert len(descs) == 1810 + 2747
    out = _run(sanitized_host, [f"D {d.hex()} 0 0 0" for d in descs])
    assert len(out) == len(descs)
    for d, o in zip(descs, out):
        try:
            m = tm.decode(d)
        except tm.TensorMapError as e:
            assert o["rc"] == tm.E_CODES[e.reason][0], (d.hex(), o)
            continue
        assert o["rc"] == 0 and o["m"]["rank"] == m.rank and o["m"]["extent"] == m.extent, (d.hex(), o)
        assert o["m"]["dim"][:m.rank] == list(m.dims) and o["m"]["dim"][m.rank:] == [0] * (5 - m.rank)


def test_runs_and_split_sanitizer_clean_at_extreme_coordinates(sanitized_host):
    rng = random.Random(2026_12_05)
    small = [d for d in _descriptors() if math.prod(tm.decode(d).counts()[1:]) <= 256]
    assert len(small) > 500
    lines, want = [], []
    for d in small[::3]:
        m = tm.decode(d)
        for coords in ([0] * m.rank,
                       [dim - 1 for dim in m.dims],
                       [rng.choice([I32_MIN, I32_MAX, -b, dim]) for b, dim in zip(m.box, m.dims)],
                       [rng.randint(-b - 1, dim) for b, dim in zip(m.box, m.dims)]):
            rg = tm.Range(base=m.base, end=m.base + m.extent // 2 + 16, media_offset=4096, page_shift=12)
            lines.append(f"D {d.hex()} {m.rank} {' '.join(map(str, coords))} 1 {rg.base} {rg.end} "
                         f"{rg.media_offset} {rg.page_shift} 4096")
            want.append(tm.box_runs(m, coords)[1])
    out = _run(sanitized_host, lines)
    assert len(out) == len(lines)
    assert [o["oob"] for o in out] == want
    assert all(o["split"]["rc"] == 0 for o in out)
