"""The whole fixture corpus (CUDA sources compiled by nvcc now + Triton PTX captured on the H200):
every module rewrites, every rewritten module assembles with ptxas for sm_90a with the helper
module linked, every memory operation is classified, every refusal carries its reason, and a kernel
is admitted exactly when nothing in it (or in what it calls) was refused."""
from __future__ import annotations

import concurrent.futures as cf
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
import hbfcc_testutil as U  # noqa: E402

from hbfcc import helpers as H  # noqa: E402
from hbfcc.passes.timing import classify, _Ctx  # noqa: E402
from hbfcc.ptx import parse_module  # noqa: E402
from hbfcc.rewrite import rewrite_text  # noqa: E402

try:
    import ptx_corpus  # noqa: E402
except ImportError:  # pragma: no cover
    ptx_corpus = None

pytestmark = pytest.mark.slow


def corpus() -> dict[str, Path]:
    if ptx_corpus is None:
        pytest.skip("fixture corpus not present")
    out = {f"triton/{k}": v for k, v in ptx_corpus.triton_corpus().items()}
    if ptx_corpus.nvcc_path():
        cache = Path(tempfile.gettempdir()) / f"hbfcc-corpus-{os.getuid()}"
        out.update({f"cuda/{k}": v for k, v in ptx_corpus.build_cuda_corpus(cache).items()})
    if not out:
        pytest.skip("empty corpus")
    return out


def _check_module(name: str, path: Path, helper: H.HelperModule, helper_obj: Path | None = None,
                  whole: bool = True) -> str:
    """Rewrite and check one module, then assemble it: ``whole`` -- hbfcc's build, the helper PTX linked into the
    module and ptxas in whole-program mode (the helpers compiled into every entry: ~5 s a module); else the same
    rewrite with the helpers extern, ``ptxas -c`` and ``nvlink`` against ``helper_obj`` (the real helper assembled
    once): every instruction assembles and every helper symbol the rewrite names resolves, at a fifth of the CPU."""
    text = path.read_text()
    res = rewrite_text(text, filename=name, helper=helper, link=whole)
    funcs = res.meta["timing"]["functions"]
    m = parse_module(text)
    # every memory operation of the input is counted exactly once
    n_mem = 0
    for f in m.functions():
        if f.body is None:
            continue
        ctx = _Ctx(m, f)
        n_mem += sum(1 for i in f.instructions() if classify(i, ctx) is not None)
    assert sum(c["count"] for f in funcs for c in f["classes"].values()) == n_mem, name
    for f in funcs:
        rewritten = sum(c["rewritten"] for c in f["classes"].values())
        # __hb_issue sites, plus the TMA hooks (__hb_tma, mbarrier wait hooks, cp.async arrive notes: issue 15)
        assert rewritten == f["sites"] + f["tma_hooks"], (name, f["name"])
        for r in f["refused"]:
            assert r["reason"] and r["class"] and r["instruction"], (name, r)
        if f["refused"]:
            assert not f["admitted"], (name, f["name"])
        if f["admitted"]:
            assert not f["refused"] and not f["not_admitted_reasons"]
    # one __hb_issue call per rewritten site in the output
    issues = len(re.findall(r"call\s+\(__hb_rv\),\s*__hb_issue,", res.text))
    assert issues == sum(f["sites"] for f in funcs), name
    if whole:
        U.assemble(res.text, "sm_90a")
    else:
        _assemble_separate(res.text, helper_obj)
    return name


def _assemble_separate(text: str, helper_obj: Path) -> None:
    ptxas = U.tool("ptxas")
    nvlink = shutil.which("nvlink") or str(Path(ptxas).parent / "nvlink")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.ptx"
        p.write_text(re.sub(r"^\.weak \.func", ".extern .func", text, flags=re.M))
        for argv in ([ptxas, "-arch=sm_90a", "-c", str(p), "-o", str(Path(d) / "m.o")],
                     [nvlink, "-arch=sm_90a", str(Path(d) / "m.o"), str(helper_obj), "-o", str(Path(d) / "m.cubin")]):
            cp = subprocess.run(argv, capture_output=True, text=True)
            assert cp.returncode == 0, f"{Path(argv[0]).name} failed:\n{cp.stderr}\n{cp.stdout}"


def helper_object(tmp_path: Path) -> tuple[H.HelperModule, Path]:
    """The real helper (else the fixture's) and its object for ``_assemble_separate``."""
    hp = U.real_helper_ptx() or U.fixture_helper_ptx()
    hobj = tmp_path / "helper.o"
    # capped at 32 registers: nvlink refuses a call from an entry with a lower bound (launch bounds, .maxnreg) to a
    # callee assembled with more (the whole-program build allocates the callee inside the entry's bound)
    cp = subprocess.run([U.tool("ptxas"), "-arch=sm_90a", "-c", "--maxrregcount=32", str(hp), "-o", str(hobj)],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return H.load_helper(hp), hobj


def test_corpus_rewrites_and_assembles_with_real_helper(tmp_path):
    """Every module: rewritten, checked, and assembled with the real helper -- every 8th from the 5th in hbfcc's
    whole-program build (test_corpus_subset_with_fixture_helper takes every 8th from the 1st), the others through
    ptxas -c + nvlink with the helper assembled once (the whole-program build of all is what CI time could not
    afford: ~5 s of ptxas per module; tests/hbfcc/test_link_prune.py and the CLI tests build whole programs too)."""
    helper, hobj = helper_object(tmp_path)
    items = sorted(corpus().items())
    with cf.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        done = list(ex.map(lambda ikv: _check_module(ikv[1][0], ikv[1][1], helper, hobj, whole=ikv[0] % 8 == 4),
                           enumerate(items)))
    assert len(done) == len(items) >= 30


def test_corpus_subset_with_fixture_helper():
    helper = H.load_helper(U.fixture_helper_ptx())
    items = sorted(corpus().items())[::8]
    for k, v in items:
        _check_module(k, v, helper)


def test_tma_fixtures_and_others_admitted():
    """Since issue 15 the Triton TMA kernels are admitted too (hbfcc/passes/tma.py), with their TMA counted."""
    tma_seen = 0
    for name, path in sorted(corpus().items()):
        res = rewrite_text(path.read_text(), filename=name, link=False)
        for f in res.meta["timing"]["functions"]:
            if name.startswith("triton/tma_"):     # (not "softmax")
                assert f["admitted"] and f["tma_hooks"] >= 2, (name, f["name"], f["refused"])
                tma_seen += 1
                continue
            assert f["admitted"] or f["external_calls"] or f["refused"], (name, f["name"], f["not_admitted_reasons"])
    assert tma_seen >= 4
